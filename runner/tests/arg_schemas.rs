//! A graph's `meta.args` (a JSON Schema, draft 2020-12): `runner check` refuses a schema that
//! is not one, naming the place; `runner run --args` and `runner test` refuse arguments that do
//! not fit it, naming the failing path, before the graph starts. Both engines.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::json;

fn runner() -> Command {
    Command::new(env!("CARGO_BIN_EXE_runner"))
}

/// A graph that needs `{topic: string}` and writes a file when it runs.
const TOPICAL: &str = r#"
export const meta = {
  name: "Topical", slug: "topical", version: "1.0.0",
  args: {
    type: "object",
    properties: {topic: {type: "string"}, depth: {type: "integer", minimum: 1}},
    required: ["topic"]
  }
};
export default async function (args, g) {
  await g.tool("fs.write", {path: "ran.txt", text: args.topic});
  return {topic: args.topic};
}
"#;

fn run_with(graph: &Path, folder: &Path, engine: &str, args: &str) -> Output {
    runner()
        .args(["run", "--engine", engine, "--allow", "fs.write", "--folder"])
        .arg(folder)
        .arg(graph)
        .args(["--args", args])
        .output()
        .expect("runs")
}

#[test]
fn runner_run_refuses_arguments_that_do_not_fit_before_the_graph_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = dir.path().join("topical.js");
    std::fs::write(&graph, TOPICAL).expect("graph");
    let folder = tempfile::tempdir().expect("folder");
    for engine in ["boa", "wasm"] {
        for (args, path) in [
            ("{}", "args.topic: is required but missing"),
            (r#"{"topic": 7}"#, "args.topic: want string"),
            (r#"{"topic": "x", "depth": 0}"#, "args.depth: must be >=1"),
        ] {
            let output = run_with(&graph, folder.path(), engine, args);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{engine} {args}: {stderr}");
            assert!(stderr.contains(path), "{engine} {args}: {stderr}");
            assert!(stderr.contains("nothing was run"), "{engine}: {stderr}");
            assert!(output.stdout.is_empty(), "no outcome is printed");
            assert!(
                !folder.path().join("ran.txt").exists(),
                "{engine} {args}: the graph ran"
            );
        }
        let output = run_with(&graph, folder.path(), engine, r#"{"topic": "rust"}"#);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(0), "{engine}: {stdout}");
        assert!(stdout.contains(r#""result":{"topic":"rust"}"#), "{stdout}");
        std::fs::remove_file(folder.path().join("ran.txt")).expect("it ran");
    }
}

#[test]
fn runner_check_refuses_a_schema_that_is_not_one_and_shows_a_good_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        (
            r#"{type: "object", properties: {topic: {type: "strin"}}}"#,
            "meta.args.properties.topic.type",
        ),
        (
            r#"{type: "object", required: "topic"}"#,
            "meta.args.required",
        ),
        (r#""object""#, "meta.args must be a JSON Schema object"),
        (
            r#"{$schema: "http://json-schema.org/draft-07/schema#"}"#,
            "meta.args.$schema must be",
        ),
        (
            r#"{properties: {a: {$ref: "file:///etc/passwd"}}}"#,
            "may not refer to another document",
        ),
    ];
    for (i, (schema, expected)) in cases.iter().enumerate() {
        let graph = dir.path().join(format!("bad{i}.js"));
        std::fs::write(
            &graph,
            format!(
                "export const meta = {{name: 'Bad', slug: 'bad{i}', version: '1', args: {schema}}};\nexport default async function () {{ return 1; }}\n"
            ),
        )
        .expect("graph");
        for engine in ["boa", "wasm"] {
            let output = runner()
                .args(["check", "--engine", engine])
                .arg(&graph)
                .output()
                .expect("runs");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(1), "{engine} {schema}: {stderr}");
            assert!(stderr.contains(expected), "{engine} {schema}: {stderr}");
            // `runner run` refuses it too, before anything runs.
            let output = runner()
                .args(["run", "--engine", engine])
                .arg(&graph)
                .output()
                .expect("runs");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{engine} {schema}: {stderr}");
            assert!(stderr.contains(expected), "{engine} {schema}: {stderr}");
        }
    }
    let good = dir.path().join("good").join("topical.js");
    std::fs::create_dir(good.parent().expect("folder")).expect("folder");
    std::fs::write(&good, TOPICAL).expect("graph");
    let output = runner().arg("check").arg(&good).output().expect("runs");
    assert_eq!(output.status.code(), Some(0));
    let meta: serde_json::Value = serde_json::from_slice(&output.stdout).expect("meta JSON");
    assert_eq!(meta["args"]["required"], json!(["topic"]));
}

#[test]
fn a_test_case_whose_arguments_do_not_fit_fails_naming_the_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("topical.js"), TOPICAL).expect("graph");
    let cases = json!({"cases": [
        {"name": "fits", "args": {"topic": "x"}, "allow": ["fs.write"], "expect": {"status": "completed"}},
        {"name": "misses the topic", "args": {}, "allow": ["fs.write"], "expect": {"status": "completed"}},
    ]});
    std::fs::write(dir.path().join("topical.test.json"), cases.to_string()).expect("test");
    let output = runner()
        .args(["test", "--engine", "boa"])
        .arg(dir.path())
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("PASS"), "{stdout}");
    assert!(stdout.contains("1 passed, 1 failed"), "{stdout}");
    assert!(
        stdout.contains("args.topic: is required but missing"),
        "{stdout}"
    );
}

/// A case may expect its arguments to be refused (`expect.args_refused`, a substring of the
/// refusal): it passes when the schema refuses them with those words and the graph never runs;
/// it fails when they fit or the words differ; `args_refused` beside `status` is refused as a
/// test file error. Both engines.
#[test]
fn a_test_case_may_expect_its_arguments_to_be_refused() {
    for engine in ["boa", "wasm"] {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("topical.js"), TOPICAL).expect("graph");
        let cases = json!({"cases": [
            {"name": "refused", "args": {"topic": 7}, "expect": {"args_refused": "args.topic: want string"}},
            {"name": "any refusal", "args": {}, "expect": {"args_refused": ""}},
            {"name": "fits after all", "args": {"topic": "x"}, "allow": ["fs.write"], "expect": {"args_refused": ""}},
            {"name": "other words", "args": {}, "expect": {"args_refused": "args.depth"}},
        ]});
        std::fs::write(dir.path().join("topical.test.json"), cases.to_string()).expect("test");
        let output = runner()
            .args(["test", "--engine", engine])
            .arg(dir.path())
            .output()
            .expect("runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(1), "{engine}: {stdout}");
        assert!(stdout.contains("2 passed, 2 failed"), "{engine}: {stdout}");
        assert!(
            stdout.contains("they fit (the graph did not run)"),
            "{engine}: {stdout}"
        );
        assert!(
            stdout.contains(r#"expected the refusal to contain "args.depth""#),
            "{engine}: {stdout}"
        );

        let both = json!({"args": {}, "expect": {"status": "failed", "args_refused": ""}});
        std::fs::write(dir.path().join("topical.test.json"), both.to_string()).expect("test");
        let output = runner()
            .args(["test", "--engine", engine])
            .arg(dir.path())
            .output()
            .expect("runs");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert_ne!(output.status.code(), Some(0), "{engine}: {said}");
        assert!(
            said.contains("`args_refused` means the graph never runs"),
            "{engine}: {said}"
        );
    }
}
