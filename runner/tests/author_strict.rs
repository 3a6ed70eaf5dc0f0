//! Issue 45, points 3 and 4: `g` calls are strict (a mistyped option is refused naming the key
//! and the nearest known one, an options argument that is not an object is refused, a result
//! holding a function is refused with its path), work left running when a graph returns is
//! named in the trace where it started, and a run that returns with a timer and an agent
//! pending ends the same way every time, in both engines, through the real `runner` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ENGINES: [&str; 2] = ["boa", "wasm"];
const FIXED: &str = "fixed:2026-01-01T00:00:00Z";

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

fn graph(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    let slug = name.trim_end_matches(".js");
    std::fs::write(
        &path,
        format!(
            "export const meta = {{name: \"{slug}\", slug: \"{slug}\", version: \"1\"}};\n{body}"
        ),
    )
    .expect("writes the graph");
    path
}

fn run(engine: &str, path: &Path, extra: &[&str]) -> Output {
    runner()
        .args(["run", "--engine", engine, "--clock", FIXED, "--seed", "1"])
        .args(extra)
        .arg(path)
        .output()
        .expect("runs")
}

/// Each mistake, the call that makes it (on line 3 of its graph), and what the refusal says.
const MISTAKES: &[(&str, &[&str])] = &[
    (
        r#"await g.agent({prompt: "hi", temprature: 0.2});"#,
        &[
            "unknown option `temprature` of g.agent",
            "did you mean `temperature`?",
            "provider's configuration",
        ],
    ),
    (
        r#"await g.agent({prompt: "hi", max_tokens: 10});"#,
        &[
            "unknown option `max_tokens` of g.agent",
            "did you mean `maxTokens`?",
        ],
    ),
    (
        r#"await g.agent({prompt: "hi", systemPrompt: "be brief"});"#,
        &[
            "unknown option `systemPrompt` of g.agent",
            "did you mean `system`?",
        ],
    ),
    (
        "await g.retry(async () => 1, {attempt: 5});",
        &[
            "unknown option `attempt` of g.retry",
            "did you mean `attempts`?",
        ],
    ),
    (
        "await g.retry(async () => 1, {delay: 100});",
        &[
            "unknown option `delay` of g.retry",
            "did you mean `delayMs`?",
        ],
    ),
    (
        "await g.retry(async () => 1, 5);",
        &[
            "g.retry: the options must be an object, got 5",
            "write g.retry(fn, {attempts: 5})",
        ],
    ),
    (
        r#"await g.tool("fs.read", {path: "a.txt"}, {timeout: 5});"#,
        &["g.tool takes (name, args)"],
    ),
    (
        r#"await g.graph("child", {}, {timeout: 5});"#,
        &["g.graph takes (slug, args)"],
    ),
    (
        "await g.sleep({ms: 100});",
        &["g.sleep takes no options object", "g.sleep(100)"],
    ),
    (
        "await g.sleep(100, {signal: null});",
        &["g.sleep takes one argument"],
    ),
];

/// Every mistyped or misplaced option is refused with the key and the nearest known one, in
/// both engines, where the old driver ran the call with its defaults.
#[test]
fn typos_in_g_calls_are_refused_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (index, (call, says)) in MISTAKES.iter().enumerate() {
        let body = format!(
            "export default async function (args, g) {{\n  {call}\n  return {{done: true}};\n}}\n"
        );
        let path = graph(dir.path(), &format!("mistake{index}.js"), &body);
        for engine in ENGINES {
            let out = run(engine, &path, &[]);
            let said = text(&out);
            assert_eq!(out.status.code(), Some(1), "{engine} {call}: {said}");
            assert!(said.contains("invalid"), "{engine} {call}: {said}");
            for words in *says {
                assert!(
                    said.contains(words),
                    "{engine} {call}: no {words:?} in {said}"
                );
            }
            assert!(!said.contains("\"done\""), "{engine} {call}: {said}");
        }
    }
}

/// A result holding a function is refused with the function's path, like a Map; the same
/// options spelled right still run.
#[test]
fn a_result_holding_a_function_is_refused_with_its_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let refused = graph(
        dir.path(),
        "fn.js",
        "export default async function (args, g) {\n  return {done: true, steps: [1, {next: () => 2}]};\n}\n",
    );
    let bare = graph(
        dir.path(),
        "bare.js",
        "export default async function (args, g) {\n  return () => 1;\n}\n",
    );
    let fine = graph(
        dir.path(),
        "fine.js",
        "export default async function (args, g) {\n  const n = await g.retry(async (a) => a, {attempts: 2, delayMs: 0});\n  await g.sleep(1);\n  return {n};\n}\n",
    );
    for engine in ENGINES {
        let said = text(&run(engine, &refused, &[]));
        assert!(
            said.contains("result.steps[1].next: a function cannot be turned into JSON"),
            "{engine}: {said}"
        );
        let said = text(&run(engine, &bare, &[]));
        assert!(
            said.contains("result: a function cannot be turned into JSON"),
            "{engine}: {said}"
        );
        let out = run(engine, &fine, &[]);
        assert!(out.status.success(), "{engine}: {}", text(&out));
        assert!(text(&out).contains("\"n\": 1") || text(&out).contains("\"n\":1"));
    }
}

const LEFT_RUNNING: &str = r#"async function helper() {
  throw new Error("helper broke");
}
export default async function (args, g) {
  const slow = g.agent({prompt: "slow", label: "slow"});
  helper();
  await g.sleep(10);
  return {done: true};
}
"#;

const SLOW_REPLY: &str = r#"{"default": {"text": "late", "tokens": 7, "latency_ms": 1000}}"#;

/// An agent left running at return is named in the trace at the line that started it, and a
/// rejection nothing handled at the line that threw, in both engines; the run still completes.
#[test]
fn work_left_running_at_return_is_warned_about_where_it_started() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = graph(dir.path(), "left.js", LEFT_RUNNING);
    let replies = dir.path().join("replies.json");
    std::fs::write(&replies, SLOW_REPLY).expect("replies");
    let file = path.display().to_string();
    for engine in ENGINES {
        let out = run(
            engine,
            &path,
            &["--replies", replies.to_str().expect("utf-8 path")],
        );
        let said = text(&out);
        assert!(out.status.success(), "{engine}: {said}");
        let agent = format!(
            "warning: {file}:6:23: an agent (label \"slow\") started here was still running when the graph returned"
        );
        assert!(said.contains(&agent), "{engine}: no {agent:?} in {said}");
        let rejection =
            format!("warning: {file}:3:9: nothing handled this rejection: Error: helper broke");
        assert!(
            said.contains(&rejection),
            "{engine}: no {rejection:?} in {said}"
        );
    }
}

const PENDING_AT_RETURN: &str = r#"export default async function (args, g) {
  setTimeout(() => console.log("never"), 5000);
  const quick = g.agent({prompt: "quick", label: "quick"});
  const slow = g.agent({prompt: "slow", label: "slow"});
  await g.sleep(10);
  return {started: Date.now() - Date.parse("2026-01-01T00:00:00Z")};
}
"#;

const PENDING_REPLIES: &str = r#"{"replies": [
  {"label": "quick", "text": "q", "tokens": 2, "latency_ms": 0},
  {"label": "slow", "text": "s", "tokens": 40, "latency_ms": 20},
  {"label": "first", "text": "a", "tokens": 13, "latency_ms": 10},
  {"label": "second", "text": "b", "tokens": 24, "latency_ms": 30}
]}"#;

/// The issue's other pattern: a deadline raced against a nested graph, whose second agent is
/// still running when the deadline wins and the top graph returns.
const RACE: &str = r#"export default async function (args, g) {
  const deadline = new Promise((resolve) => setTimeout(() => resolve("late"), 15));
  return {winner: await Promise.race([g.graph("child", {}), deadline])};
}
"#;

const CHILD: &str = r#"export default async function (args, g) {
  const first = await g.agent({prompt: "1", label: "first"});
  const second = await g.agent({prompt: "2", label: "second"});
  return first.text + second.text;
}
"#;

/// The issue's pattern: a graph returns at 10 ms while a 5 s timer and an agent are pending.
/// Fifty rounds of `runner test` in each engine give the same result and tokens (the quick
/// agent's 2, never the abandoned one's 40), and the run ends at 10 ms, not at the timer; a
/// deadline won against a nested graph counts its finished agent's 13 tokens every time.
#[test]
fn a_run_returning_with_work_pending_repeats_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = graph(dir.path(), "pending.js", PENDING_AT_RETURN);
    std::fs::write(dir.path().join("replies.json"), PENDING_REPLIES).expect("replies");
    std::fs::write(
        dir.path().join("pending.test.json"),
        format!(
            r#"{{"seed": 1, "clock": "{FIXED}", "replies_file": "replies.json",
               "expect": {{"status": "completed", "result": {{"started": 10}}, "total_tokens": 2}}}}"#
        ),
    )
    .expect("test case");
    graph(dir.path(), "race.js", RACE);
    graph(dir.path(), "child.js", CHILD);
    std::fs::write(
        dir.path().join("race.test.json"),
        format!(
            r#"{{"seed": 1, "clock": "{FIXED}", "replies_file": "replies.json",
               "expect": {{"status": "completed", "result": {{"winner": "late"}}, "total_tokens": 13}}}}"#
        ),
    )
    .expect("test case");
    for engine in ENGINES {
        let out = runner()
            .args(["test", "--engine", engine, "--repeat", "50"])
            .arg(dir.path())
            .output()
            .expect("runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{engine}: {}", text(&out));
        assert!(
            stdout.ends_with("100 passed, 0 failed over 50 rounds\n"),
            "{engine}: {stdout}"
        );
        let replies = dir.path().join("replies.json");
        let out = run(
            engine,
            &path,
            &["--replies", replies.to_str().expect("utf-8 path")],
        );
        let said = text(&out);
        assert!(out.status.success(), "{engine}: {said}");
        assert!(!said.contains("never"), "{engine}: the timer fired: {said}");
        assert!(
            said.contains("pending.js:5:23: an agent (label \"slow\") started here"),
            "{engine}: {said}"
        );
        let finished = said
            .lines()
            .find(|line| line.contains("run completed"))
            .unwrap_or_default();
        assert!(
            finished.starts_with("[   0.010s] run completed: 2 tokens"),
            "{engine}: the run did not end at its return: {said}"
        );
    }
}
