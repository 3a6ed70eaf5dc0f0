//! Issue 45, point 5: graphs in TypeScript with no build step. `runner run|check|test|build`
//! take a `.ts` graph with its types erased on the host (blanked, so every line and column is
//! the `.ts` file's), refuse TypeScript that needs code generation naming it and its place,
//! find a nested `.ts` graph, type-check with `tsc` on request, and `runner init --ts`
//! scaffolds one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

const ENGINES: [&str; 2] = ["boa", "wasm"];

fn runner() -> Command {
    Command::new(env!("CARGO_BIN_EXE_runner"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn outcome(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

/// A graph using the TypeScript a graph author writes: interfaces, annotations, generics, `as`
/// and `satisfies`, an optional parameter, type-only imports and exports, a `declare`, an
/// overload, a class with typed fields, non-null assertions; and strings, a template and a
/// regex holding type-like text, which must reach the engine as they are.
const TYPED: &str = r#"import type { Unused } from "./nowhere";
export type { Unused as AlsoUnused };
export interface Item<T = number> { name: string; value: T; note?: string }
type Pair<A, B> = [A, B];
declare const HOST_ONLY: string;

export const meta = {
  name: "Typed",
  slug: "typed",
  version: "1.0.0",
  args: { type: "object", properties: { scale: { type: "number" } } },
} satisfies GraphMeta;

class Counter {
  private count: number = 0;
  readonly step: number;
  constructor(step?: number) { this.step = step ?? 1; }
  add(): number { return (this.count += this.step); }
}

function pick<T>(items: T[], index: number): T | undefined;
function pick<T>(items: T[], index: number) { return items[index]; }

function label(name: string, suffix?: string): string {
  return suffix ? `${name}: ${suffix}` : `${name}: number`;
}

export default async function (args: GraphArgs, g: G): Promise<{ [key: string]: unknown }> {
  const scale = (args.scale as number | undefined) ?? 2;
  const items: Item[] = [{ name: "a", value: 1 }, { name: "b", value: 2 }];
  const pair: Pair<string, number> = ["x", 3];
  const counter = new Counter(scale);
  counter.add();
  const total = items.map((i): number => i.value * scale).reduce<number>((a, b) => a + b, 0);
  const first = pick<Item>(items, 0)!;
  const kinds = "x: number, y as string, <T>z, interface I {}";
  const matched = /a: number|b as any/.test("b as any");
  const same = <T,>(x: T): T => x;
  g.log(`total: ${total as number}: string`);
  return { total: same<number>(total), first: first.name, pair, count: counter.add(), label: label("n"), kinds, matched };
}
"#;

/// What [`TYPED`] returns with `{"scale": 3}`.
fn typed_result() -> Value {
    json!({
        "total": 9,
        "first": "a",
        "pair": ["x", 3],
        "count": 6,
        "label": "n: number",
        "kinds": "x: number, y as string, <T>z, interface I {}",
        "matched": true
    })
}

/// A folder holding `files`.
fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("file");
    }
    dir
}

fn run(engine: &str, graph: &Path, args: &str) -> Output {
    runner()
        .args(["run", "--engine", engine, "--args", args])
        .arg(graph)
        .output()
        .expect("runs")
}

/// A `.ts` graph runs and is tested in both engines, and builds into a component that runs.
#[test]
fn a_typescript_graph_runs_tests_and_builds() {
    let test = json!({"cases": [{"name": "typed", "args": {"scale": 3},
        "expect": {"status": "completed", "result": typed_result()}}]});
    let dir = folder(&[("typed.ts", TYPED), ("typed.test.json", &test.to_string())]);
    let graph = dir.path().join("typed.ts");
    for engine in ENGINES {
        let ran = run(engine, &graph, r#"{"scale": 3}"#);
        assert_eq!(ran.status.code(), Some(0), "{engine}: {}", text(&ran));
        assert_eq!(outcome(&ran)["result"], typed_result(), "{engine}");
        assert!(
            text(&ran).contains("total: 9: string"),
            "{engine}: {}",
            text(&ran)
        );
        let checked = runner()
            .args(["check", "--engine", engine])
            .arg(&graph)
            .output()
            .expect("runs");
        assert!(checked.status.success(), "{engine}: {}", text(&checked));
        assert_eq!(outcome(&checked)["slug"], "typed", "{engine}");
        let tested = runner()
            .args(["test", "--engine", engine])
            .arg(dir.path())
            .output()
            .expect("runs");
        assert!(tested.status.success(), "{engine}: {}", text(&tested));
        assert!(text(&tested).contains("1 passed"), "{}", text(&tested));
    }
    let built = dir.path().join("typed.wasm");
    let build = runner()
        .arg("build")
        .arg(&graph)
        .arg("-o")
        .arg(&built)
        .output()
        .expect("runs");
    assert!(build.status.success(), "{}", text(&build));
    let ran = run("wasm", &built, r#"{"scale": 3}"#);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran));
    assert_eq!(outcome(&ran)["result"], typed_result());
}

/// Line 17 of the `.ts` file throws after type annotations on the same and earlier lines: the
/// error names line 17 and the column of `throw` in both engines, in the outcome's `location`
/// and in the trace.
#[test]
fn an_error_on_line_17_of_a_ts_graph_is_reported_at_line_17() {
    let mut lines: Vec<String> = vec![
        "export const meta = { name: \"Late\", slug: \"late\", version: \"1\" } satisfies GraphMeta;".into(),
        "interface Limits {".into(),
        "  max: number;".into(),
        "  label?: string;".into(),
        "}".into(),
    ];
    while lines.len() < 14 {
        lines.push(format!(
            "type T{n}<A> = {{ value: A; n: {n} }};",
            n = lines.len()
        ));
    }
    lines.push("export default async function (args: GraphArgs, g: G): Promise<number> {".into());
    lines.push("  const limits: Limits = { max: 2 } as Limits;".into());
    lines.push(
        "  const over: number = (args.n as number) + limits.max; if (over > 1) throw new Error(`over: ${over as number}`);"
            .into(),
    );
    lines.push("  return 0;".into());
    lines.push("}".into());
    let source = lines.join("\n") + "\n";
    // The failing expression: the `throw`, or the `new Error(…)` it throws.
    let columns = [
        lines[16].find("throw").expect("throw") + 1,
        lines[16].find("new Error").expect("new") + 1,
    ];
    let dir = folder(&[("late.ts", &source)]);
    let graph = dir.path().join("late.ts");
    for engine in ENGINES {
        let ran = run(engine, &graph, r#"{"n": 5}"#);
        assert_eq!(ran.status.code(), Some(1), "{engine}: {}", text(&ran));
        let location = &outcome(&ran)["location"];
        assert_eq!(location["file"], graph.display().to_string(), "{engine}");
        assert_eq!(location["line"], 17, "{engine}: {}", text(&ran));
        let column = location["column"].as_u64().unwrap_or_default() as usize;
        assert!(
            columns.contains(&column),
            "{engine}: {columns:?}: {}",
            text(&ran)
        );
        let at = format!("{}:17:{column}: Error: over: 7", graph.display());
        assert!(text(&ran).contains(&at), "{engine}: {}", text(&ran));
        // The code frame shows line 17 as written, its types and all, not the erased text.
        let frame = format!("17 | {}", lines[16]);
        let error = outcome(&ran)["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(error.contains(&frame), "{engine}: {frame}\n{error}");
    }
}

/// TypeScript that needs code generation is refused by `run`, `check`, `test` and `build`,
/// naming the construct and its `FILE:LINE:COL`; nothing runs.
#[test]
fn typescript_that_needs_code_generation_is_refused_naming_it() {
    let head = "export const meta = { name: \"R\", slug: \"r\", version: \"1\" };\n";
    let body = "export default async function () { return 1; }\n";
    let cases = [
        ("enum Color { Red, Green }\n", "a TypeScript `enum`", 2, 1),
        (
            "namespace Util { export const x = 1; }\n",
            "a TypeScript `namespace`",
            2,
            1,
        ),
        (
            "class Point {\n  constructor(public x: number) {}\n}\n",
            "a constructor parameter property",
            3,
            22,
        ),
    ];
    for (construct, named, line, column) in cases {
        let dir = folder(&[
            ("r.ts", &format!("{head}{construct}{body}")),
            ("r.test.json", r#"{"expect": {"status": "completed"}}"#),
        ]);
        let graph = dir.path().join("r.ts");
        let at = format!("{}:{line}:{column}: {named}", graph.display());
        for engine in ENGINES {
            for command in ["run", "check", "test"] {
                let target = if command == "test" {
                    dir.path().to_path_buf()
                } else {
                    graph.clone()
                };
                let out = runner()
                    .args([command, "--engine", engine])
                    .arg(&target)
                    .output()
                    .expect("runs");
                let said = text(&out);
                assert!(!out.status.success(), "{engine} {command}: {said}");
                assert!(said.contains(&at), "{engine} {command}: {said}");
                assert!(
                    said.contains("needs code generation"),
                    "{engine} {command}: {said}"
                );
            }
        }
        let build = runner()
            .arg("build")
            .arg(&graph)
            .arg("-o")
            .arg(dir.path().join("r.wasm"))
            .output()
            .expect("runs");
        assert!(!build.status.success(), "{}", text(&build));
        assert!(text(&build).contains(&at), "{}", text(&build));
    }
}

const PARENT: &str = r#"export const meta = {name: "Parent", slug: "parent", version: "1"};
export default async function (args, g) {
  const child = await g.graph("child", { n: 4 });
  return { doubled: child.doubled, from: "parent" };
}
"#;

const CHILD: &str = r#"export const meta = { name: "Child", slug: "child", version: "1" } satisfies GraphMeta;
interface ChildArgs { n: number }
export default async function (args: ChildArgs): Promise<{ doubled: number }> {
  const n: number = args.n;
  if (n > 100) throw new Error("too big");
  return { doubled: n * 2 };
}
"#;

/// A `.js` graph calls a nested `.ts` graph by its slug; a `.js` and a `.ts` of one stem are
/// refused as two sources of one graph, naming both; an error in the nested `.ts` names its
/// own file and line.
#[test]
fn a_nested_ts_graph_is_called_from_a_js_graph() {
    for engine in ENGINES {
        let dir = folder(&[("parent.js", PARENT), ("child.ts", CHILD)]);
        let parent = dir.path().join("parent.js");
        let ran = run(engine, &parent, "{}");
        assert_eq!(ran.status.code(), Some(0), "{engine}: {}", text(&ran));
        assert_eq!(
            outcome(&ran)["result"],
            json!({"doubled": 8, "from": "parent"})
        );
        std::fs::write(
            dir.path().join("parent.js"),
            PARENT.replace("n: 4", "n: 400"),
        )
        .expect("parent");
        let failed = text(&run(engine, &parent, "{}"));
        let child_at = format!("{}:5:", dir.path().join("child.ts").display());
        assert!(failed.contains(&child_at), "{engine}: {failed}");
        assert!(failed.contains("too big"), "{engine}: {failed}");
        std::fs::write(dir.path().join("child.js"), "export const meta = {};").expect("child");
        let both = text(&run(engine, &parent, "{}"));
        assert!(
            both.contains("are two sources of one graph"),
            "{engine}: {both}"
        );
        assert!(
            both.contains("child.js") && both.contains("child.ts"),
            "{engine}: {both}"
        );
    }
}

/// A folder on `PATH` whose `tsc` runs the pinned compiler, or `None` where there is none
/// (a failure under `GRAPHRELAY_REQUIRE_TSC=1`).
fn tsc_on_path() -> Option<(tempfile::TempDir, PathBuf)> {
    let tsc = crate::author_tools::tsc()?;
    let bin = tempfile::tempdir().expect("tempdir");
    let shim = bin.path().join("tsc");
    std::fs::write(
        &shim,
        format!("#!/bin/sh\nexec node '{}' \"$@\"\n", tsc.display()),
    )
    .expect("shim");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).expect("mode");
    let path = std::env::join_paths(std::iter::once(bin.path().to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    Some((bin, PathBuf::from(path)))
}

/// `runner check --types` reports a type error of `g.agent({prompt: 5})` at its place with
/// `tsc`, accepts the example TypeScript graph and `runner init --ts`'s, and says plainly,
/// failing, where there is no `tsc`.
#[test]
fn runner_check_types_reports_type_errors_with_tsc() {
    let bad = "export const meta = { name: \"Bad\", slug: \"bad\", version: \"1\" } satisfies GraphMeta;\nexport default async function (args: GraphArgs, g: G) {\n  const reply = await g.agent({ prompt: 5 });\n  return reply.text;\n}\n";
    let dir = folder(&[("bad.ts", bad)]);
    let graph = dir.path().join("bad.ts");
    let check_types = |graph: &Path, path: &Path| {
        runner()
            .args(["check", "--engine", "boa", "--types"])
            .arg(graph)
            .env("PATH", path)
            .output()
            .expect("runs")
    };
    let empty = tempfile::tempdir().expect("tempdir");
    let missing = check_types(&graph, empty.path());
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    assert!(
        text(&missing).contains("no `tsc` on PATH")
            && text(&missing).contains("npm install -g typescript"),
        "{}",
        text(&missing)
    );
    let Some((_bin, path)) = tsc_on_path() else {
        return;
    };
    let found = check_types(&graph, &path);
    let said = text(&found);
    assert_eq!(found.status.code(), Some(1), "{said}");
    let column = bad
        .lines()
        .nth(2)
        .and_then(|l| l.find("prompt"))
        .expect("prompt")
        + 1;
    assert!(
        said.contains(&format!("bad.ts:3:{column}: error TS2322")),
        "{said}"
    );
    assert!(
        said.contains("'number' is not assignable to type 'string'"),
        "{said}"
    );
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../graphs/agenda.ts");
    let fine = check_types(&example, &path);
    assert!(fine.status.success(), "{}", text(&fine));
    assert!(text(&fine).contains("no type errors"), "{}", text(&fine));
    let scaffolded = tempfile::tempdir().expect("tempdir");
    let init = runner()
        .args(["init", "--ts"])
        .arg(scaffolded.path().join("demo"))
        .output()
        .expect("runs");
    assert!(init.status.success(), "{}", text(&init));
    let fresh = check_types(&scaffolded.path().join("demo/demo.ts"), &path);
    assert!(fresh.status.success(), "{}", text(&fresh));
}

/// `runner init --ts demo` writes a TypeScript graph, and the command it prints, `runner test
/// demo`, passes as printed; the graph runs in both engines.
#[test]
fn runner_init_ts_scaffolds_a_graph_whose_printed_command_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let init = runner()
        .current_dir(dir.path())
        .args(["init", "--ts", "demo"])
        .output()
        .expect("runs");
    assert!(init.status.success(), "{}", text(&init));
    let said = text(&init);
    for file in ["demo.ts", "demo.test.json", "graph.d.ts", "tsconfig.json"] {
        assert!(dir.path().join("demo").join(file).is_file(), "{file}");
    }
    assert!(!dir.path().join("demo/demo.js").exists());
    let printed = said
        .split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("a command in backticks: {said}"));
    let words: Vec<&str> = printed.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"runner"), "{said}");
    for engine in ENGINES {
        let tested = runner()
            .current_dir(dir.path())
            .args(&words[1..])
            .args(["--engine", engine])
            .output()
            .expect("runs");
        assert!(tested.status.success(), "{engine}: {}", text(&tested));
        assert!(text(&tested).contains("1 passed"), "{}", text(&tested));
    }
}
