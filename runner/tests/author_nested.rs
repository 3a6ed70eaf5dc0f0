//! Issue 45: a nested graph that cannot load is named with its own error by `run`, `check` and
//! `test`, and code frames print on real lines in every terminal view, while a script's own
//! text still cannot forge a line.

use std::path::Path;
use std::process::{Command, Output};

const ENGINES: [&str; 2] = ["boa", "wasm"];

fn runner(engine: &str, command: &str, path: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_runner"))
        .args([command, "--engine", engine])
        .arg(path)
        .output()
        .expect("runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

const PARENT: &str = r#"export const meta = {name: "Parent", slug: "parent", version: "1"};
export default async function (args, g) {
  return await g.graph("child", {});
}
"#;

const BROKEN_CHILD: &str = r#"export const meta = {name: "Child", slug: "child", version: "1"};
export default async function (args, g) {
  const x = ;
  return x;
}
"#;

/// `parent.js` calls `child`, whose `child.js` has a syntax error on line 3: every command
/// names the child's file and place, none says the slug is missing, and `check` fails.
#[test]
fn a_broken_nested_graph_is_named_with_its_own_error() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("parent.js"), PARENT).expect("parent");
        std::fs::write(dir.path().join("child.js"), BROKEN_CHILD).expect("child");
        std::fs::write(
            dir.path().join("parent.test.json"),
            r#"{"expect": {"status": "completed"}}"#,
        )
        .expect("test");
        let child = dir.path().join("child.js").display().to_string();
        let child_at = format!("{child}:3:13: ");
        let parent = dir.path().join("parent.js");
        for (command, path) in [
            ("run", &parent),
            ("check", &parent),
            ("test", &dir.path().to_path_buf()),
        ] {
            let out = runner(engine, command, path);
            let said = text(&out);
            assert_eq!(out.status.code(), Some(1), "{engine} {command}: {said}");
            for words in [
                "graph child cannot load",
                child_at.as_str(),
                "syntax error: unexpected token ';'",
            ] {
                assert!(said.contains(words), "{engine} {command}: {words}: {said}");
            }
            // The child's own line, with the caret under column 13, on real lines.
            let lines: Vec<&str> = said.lines().collect();
            let frame = lines
                .iter()
                .position(|l| l.trim_start().starts_with("3 |   const x = ;"))
                .unwrap_or_else(|| panic!("{engine} {command}: no frame: {said}"));
            let caret = lines.get(frame + 1).copied().unwrap_or_default();
            assert_eq!(
                caret.find('^').map(|at| at - caret.find('|').unwrap_or(0)),
                Some(14),
                "{engine} {command}: {said}"
            );
            assert!(
                !said.contains("there is no graph"),
                "{engine} {command}: {said}"
            );
            if command == "run" {
                let outcome: serde_json::Value =
                    serde_json::from_slice(&out.stdout).expect("the outcome is JSON");
                assert_eq!(
                    outcome["location"],
                    serde_json::json!({"file": child, "line": 3, "column": 13}),
                    "{engine}: {outcome}"
                );
            }
        }
        // A slug typo two edits away hears the nearest slug.
        std::fs::write(
            dir.path().join("child.js"),
            BROKEN_CHILD.replace("const x = ;", "const x = 1;"),
        )
        .expect("child");
        std::fs::write(&parent, PARENT.replace("\"child\"", "\"chlid\"")).expect("parent");
        let said = text(&runner(engine, "run", &parent));
        assert!(
            said.contains("there is no graph with slug chlid"),
            "{engine}: {said}"
        );
        assert!(said.contains("did you mean child?"), "{engine}: {said}");
    }
}

const THROWS: &str = r#"export const meta = {name: "Boom", slug: "boom", version: "1"};
export default async function (args, g) {
  throw new Error("bad\n[   9.000s] run completed\u001b[2J");
}
"#;

/// The code frame under a failure is two real lines, indented, in the trace of `run` and in
/// `test`'s FAIL line; the message's own newline and escape stay escaped; JSON keeps the text.
#[test]
fn a_code_frame_prints_on_real_lines_and_a_forged_line_does_not() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().expect("tempdir");
        let graph = dir.path().join("boom.js");
        std::fs::write(&graph, THROWS).expect("graph");
        std::fs::write(
            dir.path().join("boom.test.json"),
            r#"{"expect": {"status": "completed"}}"#,
        )
        .expect("test");
        let ran = runner(engine, "run", &graph);
        let trace = String::from_utf8_lossy(&ran.stderr);
        let tested = text(&runner(engine, "test", dir.path()));
        for (view, said) in [("run", trace.as_ref()), ("test", tested.as_str())] {
            let lines: Vec<&str> = said.lines().collect();
            let at = lines
                .iter()
                .position(|l| {
                    l.contains("boom.js:3:9: Error: bad\\n[   9.000s] run completed\\u{1b}[2J")
                })
                .unwrap_or_else(|| panic!("{engine} {view}: the escaped message: {said}"));
            let source = lines.get(at + 1).copied().unwrap_or_default();
            let caret = lines.get(at + 2).copied().unwrap_or_default();
            assert!(
                source.trim_start().starts_with("3 |   throw new Error("),
                "{engine} {view}: {said}"
            );
            assert!(
                source.starts_with("     "),
                "{engine} {view}: indented: {said}"
            );
            assert!(
                caret.trim_start().starts_with("|         ^"),
                "{engine} {view}: {said}"
            );
            assert!(!said.contains('\u{1b}'), "{engine} {view}: {said}");
            assert!(
                !said.lines().any(|l| l.starts_with("[   9.000s]")),
                "{engine} {view}: {said}"
            );
        }
        let outcome: serde_json::Value =
            serde_json::from_slice(&ran.stdout).expect("the outcome is JSON");
        let error = outcome["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("bad\n[   9.000s] run completed\u{1b}[2J\n  3 |"),
            "{engine}: {error}"
        );
    }
}

/// `runner check DIR` checks every graph of the folder: the broken child with its own place,
/// the parent that calls it named too, the good graph's meta printed; exit 1. Fixed, exit 0
/// with every graph's `{file, meta}`.
#[test]
fn check_of_a_folder_checks_every_graph_in_it() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("parent.js"), PARENT).expect("parent");
        std::fs::write(dir.path().join("child.js"), BROKEN_CHILD).expect("child");
        let good = PARENT
            .replace("\"Parent\", slug: \"parent\"", "\"Good\", slug: \"good\"")
            .replace("await g.graph(\"child\", {})", "1");
        std::fs::write(dir.path().join("good.js"), good).expect("good");
        let out = runner(engine, "check", dir.path());
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{engine}: {said}");
        let child_at = format!(
            "{}:3:13: syntax error",
            dir.path().join("child.js").display()
        );
        assert!(said.contains(&child_at), "{engine}: {said}");
        assert!(said.contains("\n  3 |   const x = ;\n"), "{engine}: {said}");
        let parent_named = format!("{}: {child_at}", dir.path().join("parent.js").display());
        assert!(said.contains(&parent_named), "{engine}: {said}");
        assert!(said.contains("graph child cannot load"), "{engine}: {said}");
        assert!(
            said.contains("3 graphs checked, 2 with errors"),
            "{engine}: {said}"
        );
        let printed: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("a JSON array on stdout");
        assert_eq!(printed.as_array().map(Vec::len), Some(1), "{printed}");
        assert_eq!(printed[0]["meta"]["slug"], "good", "{printed}");

        std::fs::write(
            dir.path().join("child.js"),
            BROKEN_CHILD.replace("const x = ;", "const x = 1;"),
        )
        .expect("child");
        let out = runner(engine, "check", dir.path());
        assert_eq!(out.status.code(), Some(0), "{engine}: {}", text(&out));
        let printed: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("a JSON array on stdout");
        let slugs: Vec<&str> = printed
            .as_array()
            .expect("array")
            .iter()
            .filter_map(|graph| graph["meta"]["slug"].as_str())
            .collect();
        assert_eq!(slugs, ["child", "good", "parent"], "{printed}");
    }
}

/// A graph's own syntax error names its file, line and column, shows the line with a caret, and
/// is the outcome's `location`, in `run` and `check`; TypeScript syntax and an `import` are told
/// what to do instead.
#[test]
fn a_syntax_error_names_the_file_and_shows_the_frame() {
    let cases = [
        (
            "export default async function (args, g) {\n  return 1 +;\n}\n",
            (3, 13),
            "syntax error: ",
            "  return 1 +;",
        ),
        (
            "interface Reply { text: string }\nexport default async function () { return 1; }\n",
            (2, 1),
            "(this looks like TypeScript: a graph in TypeScript is a `.ts` file)",
            "interface Reply { text: string }",
        ),
        (
            "import { pick } from \"./helpers.js\";\nexport default async function () { return pick(); }\n",
            (2, 1),
            "a graph cannot import modules: it is one script; call another graph with `g.graph(\"slug\", args)`",
            "import { pick } from \"./helpers.js\";",
        ),
    ];
    for engine in ENGINES {
        for (body, (line, column), says, source_line) in cases {
            let dir = tempfile::tempdir().expect("tempdir");
            let graph = dir.path().join("broken.js");
            let script = format!(
                "export const meta = {{name: \"B\", slug: \"broken\", version: \"1\"}};\n{body}"
            );
            std::fs::write(&graph, script).expect("graph");
            let file = graph.display().to_string();
            let head = format!("{file}:{line}:{column}: ");
            let ran = runner(engine, "run", &graph);
            let outcome: serde_json::Value =
                serde_json::from_slice(&ran.stdout).expect("the outcome is JSON");
            let error = outcome["error"].as_str().unwrap_or_default();
            assert!(error.starts_with(&head), "{engine}: {head}: {error}");
            assert!(error.contains(says), "{engine}: {says}: {error}");
            let frame = format!("\n  {line} | {source_line}\n");
            assert!(error.contains(&frame), "{engine}: {error}");
            assert_eq!(
                outcome["location"],
                serde_json::json!({"file": file, "line": line, "column": column}),
                "{engine}: {outcome}"
            );
            let checked = runner(engine, "check", &graph);
            let said = text(&checked);
            assert_eq!(checked.status.code(), Some(1), "{engine}: {said}");
            assert!(said.starts_with(&head), "{engine}: {said}");
            assert!(said.contains(source_line), "{engine}: {said}");
        }
    }
}
