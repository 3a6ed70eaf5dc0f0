//! The graph author's tools (issue 26): the TypeScript declarations of `g` and `tsc` over the
//! example graphs, `runner init`, `runner test --junit` and `--json`, and `RUST_LOG`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn runner() -> Command {
    Command::new(env!("CARGO_BIN_EXE_runner"))
}

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The names in `{ a, b, c }` right after `marker` in `source`.
fn braced_names(source: &str, marker: &str) -> BTreeSet<String> {
    let at = source
        .find(marker)
        .unwrap_or_else(|| panic!("`{marker}` is in the source"));
    let rest = &source[at + marker.len()..];
    let open = rest.find('{').expect("a brace");
    let close = rest.find('}').expect("a closing brace");
    rest[open + 1..close]
        .split(',')
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .collect()
}

/// The members of `interface NAME { ... }` in a declarations file: each line `name(` or
/// `name<` or `name:` at the top level of the interface.
fn interface_members(declarations: &str, name: &str) -> BTreeSet<String> {
    let start = declarations
        .find(&format!("interface {name} {{"))
        .unwrap_or_else(|| panic!("interface {name} is declared"));
    let body = &declarations[start..];
    let body = &body[body.find('\n').expect("a body")..body.find("\n}").expect("an end")];
    body.lines()
        .map(str::trim)
        .filter(|line| !line.starts_with("/") && !line.starts_with('*') && !line.is_empty())
        .filter_map(|line| {
            let end = line.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
            Some(line[..end].to_owned())
        })
        .filter(|member| !member.is_empty())
        .collect()
}

/// `graphs/graph.d.ts` declares every member the prelude gives `g`, and nothing else; the
/// prelude's own list for `g.agnet`'s message agrees.
#[test]
fn the_declarations_of_g_match_the_prelude() {
    let prelude =
        std::fs::read_to_string(workspace().join("runner/js/src/prelude.js")).expect("the prelude");
    let built = braced_names(&prelude, "Object.assign(Object.create(guard),");
    let named: BTreeSet<String> = prelude
        .split("const G_MEMBERS = \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("G_MEMBERS")
        .split(',')
        .map(|m| m.trim().to_owned())
        .collect();
    assert_eq!(built, named, "the prelude's g and its G_MEMBERS");
    let declarations =
        std::fs::read_to_string(workspace().join("graphs/graph.d.ts")).expect("graph.d.ts");
    let declared = interface_members(&declarations, "G");
    assert_eq!(
        declared, built,
        "graph.d.ts's interface G and the prelude's g"
    );
    // The check can fail: a member the prelude lacks is seen.
    let extra = declarations.replace(
        "  budget(): Budget;",
        "  budget(): Budget;\n  fetch(): void;",
    );
    assert_ne!(interface_members(&extra, "G"), built);
    // Every failure code the driver has is declared.
    for code in [
        "budget_exhausted",
        "denied",
        "cancelled",
        "not_found",
        "invalid",
        "failed",
    ] {
        assert!(declarations.contains(&format!("\"{code}\"")), "{code}");
    }
}

/// The pinned TypeScript compiler (`scripts/tsc.sh`), or why there is none. Under
/// `GRAPHRELAY_REQUIRE_TSC=1` (CI) there must be one.
pub(crate) fn tsc() -> Option<PathBuf> {
    let required = std::env::var("GRAPHRELAY_REQUIRE_TSC").is_ok_and(|v| v == "1");
    let have = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|out| out.status.success())
    };
    if !(have("node") && have("npm")) {
        assert!(
            !required,
            "GRAPHRELAY_REQUIRE_TSC=1 but node or npm is missing"
        );
        eprintln!("skipped: node and npm are needed to install the TypeScript compiler");
        return None;
    }
    let out = Command::new(workspace().join("scripts/tsc.sh"))
        .output()
        .expect("scripts/tsc.sh runs");
    if !out.status.success() {
        assert!(!required, "scripts/tsc.sh failed: {}", text(&out));
        eprintln!("skipped: scripts/tsc.sh failed: {}", text(&out));
        return None;
    }
    Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// `tsc --noEmit -p DIR/jsconfig.json`.
fn type_check(tsc: &Path, dir: &Path) -> Output {
    Command::new("node")
        .arg(tsc)
        .args(["--noEmit", "-p"])
        .arg(dir.join("jsconfig.json"))
        .output()
        .expect("tsc runs")
}

/// `tsc --noEmit` accepts the example graphs and a new one from `runner init` with the
/// declarations, and refuses a graph that calls a member `g` does not have or reads a field an
/// agent's reply does not have.
#[test]
fn tsc_accepts_the_example_graphs_with_the_declarations() {
    let Some(tsc) = tsc() else {
        return;
    };
    let examples = type_check(&tsc, &workspace().join("graphs"));
    assert!(examples.status.success(), "graphs/: {}", text(&examples));
    let dir = tempfile::tempdir().expect("tempdir");
    let scaffolded = runner()
        .arg("init")
        .arg(dir.path().join("demo"))
        .output()
        .expect("runs");
    assert!(scaffolded.status.success(), "{}", text(&scaffolded));
    let fresh = type_check(&tsc, &dir.path().join("demo"));
    assert!(
        fresh.status.success(),
        "runner init's graph: {}",
        text(&fresh)
    );
    let graph = dir.path().join("demo/demo.js");
    let source = std::fs::read_to_string(&graph).expect("graph");
    std::fs::write(
        &graph,
        source
            .replace("g.log(", "g.lg(")
            .replace("facts: facts.text", "facts: facts.txt"),
    )
    .expect("graph");
    let broken = type_check(&tsc, &dir.path().join("demo"));
    let said = text(&broken);
    assert!(!broken.status.success(), "{said}");
    assert!(
        said.contains("Property 'lg' does not exist on type 'G'"),
        "{said}"
    );
    assert!(
        said.contains("Property 'txt' does not exist on type 'AgentReply'"),
        "{said}"
    );
}

/// `runner init demo && runner test demo` passes; `runner init` writes only new files and
/// only a slug's name.
#[test]
fn runner_init_scaffolds_a_graph_whose_test_passes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let init = runner()
        .current_dir(dir.path())
        .args(["init", "demo"])
        .output()
        .expect("runs");
    assert!(init.status.success(), "{}", text(&init));
    let listed = String::from_utf8_lossy(&init.stdout).into_owned();
    for file in ["demo.js", "demo.test.json", "graph.d.ts", "jsconfig.json"] {
        assert!(
            dir.path().join("demo").join(file).is_file(),
            "{file}: {listed}"
        );
        assert!(listed.contains(file), "{listed}");
    }
    let tested = runner()
        .current_dir(dir.path())
        .args(["test", "demo", "--engine", "boa"])
        .output()
        .expect("runs");
    assert!(tested.status.success(), "{}", text(&tested));
    assert!(
        text(&tested).contains("1 passed, 0 failed"),
        "{}",
        text(&tested)
    );
    let checked = runner()
        .current_dir(dir.path())
        .args(["check", "demo/demo.js", "--engine", "boa"])
        .output()
        .expect("runs");
    assert!(checked.status.success(), "{}", text(&checked));
    // A second init would overwrite the author's work: refused, nothing changed.
    std::fs::write(dir.path().join("demo/demo.js"), "// mine").expect("edit");
    let again = runner()
        .current_dir(dir.path())
        .args(["init", "demo"])
        .output()
        .expect("runs");
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("exists already"), "{}", text(&again));
    let kept = std::fs::read_to_string(dir.path().join("demo/demo.js")).expect("graph");
    assert_eq!(kept, "// mine");
    let bad = runner()
        .current_dir(dir.path())
        .args(["init", "My Graph"])
        .output()
        .expect("runs");
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(text(&bad).contains("e.g. my-graph"), "{}", text(&bad));
}

/// A folder with one passing and one failing test.
fn passing_and_failing(dir: &Path) {
    std::fs::write(
        dir.join("echo.js"),
        "export const meta = {name: 'Echo', slug: 'echo', version: '1'};\nexport default async function (args, g) {\n  g.log('echoing <' + args.word + '>');\n  const reply = await g.agent({prompt: 'say it', label: 'say'});\n  return {word: args.word, said: reply.text};\n}\n",
    )
    .expect("graph");
    let cases = serde_json::json!({"cases": [
        {"name": "echo passes", "args": {"word": "a&b"},
         "replies": {"replies": [{"label": "say", "text": "ok", "tokens": 3}]},
         "expect": {"status": "completed", "result": {"word": "a&b", "said": "ok"}}},
        {"name": "echo <fails>", "args": {"word": "x"},
         "replies": {"replies": [{"label": "say", "text": "no", "tokens": 3}]},
         "expect": {"status": "completed", "result": {"word": "x", "said": "yes"}}}
    ]});
    std::fs::write(dir.join("echo.test.json"), cases.to_string()).expect("test");
}

/// `runner test --junit FILE` writes JUnit XML that a parser reads: one testcase per test, the
/// failing one with its problem as the message and the end of its trace.
#[test]
fn runner_test_writes_junit_and_json_reports() {
    let dir = tempfile::tempdir().expect("tempdir");
    passing_and_failing(dir.path());
    let report = dir.path().join("out.xml");
    let tested = runner()
        .arg("test")
        .arg(dir.path())
        .args(["--engine", "boa", "--junit"])
        .arg(&report)
        .output()
        .expect("runs");
    assert_eq!(tested.status.code(), Some(1), "{}", text(&tested));
    let xml = std::fs::read_to_string(&report).expect("the report");
    let doc = roxmltree::Document::parse(&xml).expect("well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    assert_eq!(root.attribute("tests"), Some("2"));
    assert_eq!(root.attribute("failures"), Some("1"));
    let cases: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    assert_eq!(cases.len(), 2, "{xml}");
    assert_eq!(cases[0].attribute("name"), Some("echo passes"));
    assert_eq!(cases[0].attribute("classname"), Some("echo"));
    assert!(cases[0].children().all(|c| !c.has_tag_name("failure")));
    assert_eq!(cases[1].attribute("name"), Some("echo <fails>"));
    let failure = cases[1]
        .children()
        .find(|c| c.has_tag_name("failure"))
        .expect("a failure");
    let message = failure.attribute("message").expect("a message");
    assert!(
        message.starts_with("result: expected {") && message.contains(r#""said":"yes""#),
        "{message}"
    );
    let body = failure.text().expect("a body");
    assert!(body.contains("the end of the trace:"), "{body}");
    assert!(body.contains("echoing <x>"), "the graph's log line: {body}");
}

/// `runner test --json` prints one object per test, one per line, and the summary on stderr;
/// a report that cannot be written is refused before any test runs.
#[test]
fn runner_test_prints_json_and_refuses_an_unwritable_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    passing_and_failing(dir.path());
    let json = runner()
        .arg("test")
        .arg(dir.path())
        .args(["--engine", "boa", "--json"])
        .output()
        .expect("runs");
    assert_eq!(json.status.code(), Some(1), "{}", text(&json));
    let stdout = String::from_utf8_lossy(&json.stdout);
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert_eq!(lines[0]["name"], "echo passes");
    assert_eq!(lines[0]["passed"], true);
    assert_eq!(lines[0]["outcome"]["status"], "completed");
    assert_eq!(lines[1]["passed"], false);
    assert!(
        lines[1]["problems"][0]
            .as_str()
            .is_some_and(|p| p.starts_with("result: expected")),
        "{}",
        lines[1]
    );
    assert!(String::from_utf8_lossy(&json.stderr).contains("1 passed, 1 failed"));
    // A report that cannot be written is refused before any test runs.
    let nowhere = runner()
        .arg("test")
        .arg(dir.path())
        .args(["--engine", "boa", "--junit"])
        .arg(dir.path().join("missing/out.xml"))
        .output()
        .expect("runs");
    assert_eq!(nowhere.status.code(), Some(2), "{}", text(&nowhere));
    assert!(!text(&nowhere).contains("PASS"), "{}", text(&nowhere));
}

/// `RUST_LOG` sets the runner's log filter, as it does the relay's; `RUNNER_LOG`, its old
/// name, still works; the default shows no debug lines.
#[test]
fn rust_log_sets_the_log_filter_and_runner_log_is_an_alias() {
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = dir.path().join("one.js");
    std::fs::write(
        &graph,
        "export const meta = {name: 'One', slug: 'one', version: '1'};\nexport default () => 1;\n",
    )
    .expect("graph");
    // A file of the graphs folder that is no graph: said at debug level.
    std::fs::write(dir.path().join("broken.js"), "export const meta = {").expect("broken");
    let run = |vars: &[(&str, &str)]| {
        let mut command = runner();
        command
            .args(["run", "--engine", "boa"])
            .arg(&graph)
            .env_remove("RUST_LOG")
            .env_remove("RUNNER_LOG");
        for (name, value) in vars {
            command.env(name, value);
        }
        let out = command.output().expect("runs");
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let debug_line = "not in the catalog";
    assert!(run(&[("RUST_LOG", "debug")]).contains(debug_line));
    assert!(run(&[("RUNNER_LOG", "debug")]).contains(debug_line));
    assert!(!run(&[]).contains(debug_line));
    assert!(!run(&[("RUST_LOG", "warn"), ("RUNNER_LOG", "debug")]).contains(debug_line));
}
