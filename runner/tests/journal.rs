//! The run journal through the `runner` binary: `runner run --record FILE` writes it,
//! `runner replay FILE` re-runs the graph answered from it, offline, in either engine.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn runner() -> Command {
    Command::new(env!("CARGO_BIN_EXE_runner"))
}

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
}

const ENGINES: [&str; 2] = ["boa", "wasm"];

/// One case of an example's test file, as `runner run` flags.
struct Example {
    name: String,
    graph: PathBuf,
    flags: Vec<String>,
    files: Vec<(String, String)>,
}

/// The cases of `graphs/*.test.json` a `runner run` can play: not the ones the owner answers
/// (`ask`) or whose arguments are refused before the run. Each gets a seed and a virtual clock
/// when it fixes none, so the original run is repeatable too.
fn examples() -> Vec<Example> {
    let dir = workspace().join("graphs");
    let mut tests: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("graphs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".test.json"))
        .collect();
    tests.sort();
    let mut examples = Vec::new();
    for test in tests {
        let file: Value = serde_json::from_str(&std::fs::read_to_string(&test).expect("test file"))
            .expect("json");
        let cases = file["cases"].as_array().expect("cases");
        for case in cases {
            if case.get("ask").is_some() || case["expect"].get("args_refused").is_some() {
                continue;
            }
            examples.push(example(&dir, &file, case));
        }
    }
    assert!(
        examples.len() >= 15,
        "the examples are found: {}",
        examples.len()
    );
    examples
}

fn example(dir: &Path, file: &Value, case: &Value) -> Example {
    let graph = case
        .get("graph")
        .or_else(|| file.get("graph"))
        .and_then(Value::as_str)
        .expect("graph");
    let mut flags = vec![
        "--args".to_owned(),
        case.get("args").map_or("{}".to_owned(), Value::to_string),
        "--seed".to_owned(),
        case.get("seed").map_or("7".to_owned(), Value::to_string),
        "--clock".to_owned(),
        case.get("clock")
            .and_then(Value::as_str)
            .unwrap_or("fixed:2026-01-01T00:00:00Z")
            .to_owned(),
    ];
    if let Some(replies) = case.get("replies_file").and_then(Value::as_str) {
        flags.extend([
            "--replies".to_owned(),
            dir.join(replies).display().to_string(),
        ]);
    }
    for (key, flag) in [("allow", "--allow"), ("deny", "--deny")] {
        for tool in case
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            flags.extend([flag.to_owned(), tool.as_str().expect("tool").to_owned()]);
        }
    }
    for (key, flag) in [
        ("max_tokens", "--max-tokens"),
        ("max_concurrency", "--max-concurrency"),
    ] {
        if let Some(n) = case.get(key).and_then(Value::as_u64) {
            flags.extend([flag.to_owned(), n.to_string()]);
        }
    }
    let files = case
        .get("files")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(path, text)| (path.clone(), text.as_str().expect("text").to_owned()))
        .collect();
    Example {
        name: case["name"].as_str().expect("name").to_owned(),
        graph: dir.join(graph),
        flags,
        files,
    }
}

impl Example {
    /// Runs the case with `engine`, recording its journal to `journal`.
    fn record(&self, engine: &str, journal: &Path, case: &Value) -> Output {
        let work = tempfile::tempdir().expect("tempdir");
        for (path, text) in &self.files {
            let at = work.path().join(path);
            std::fs::create_dir_all(at.parent().expect("parent")).expect("dirs");
            std::fs::write(at, text).expect("file");
        }
        let mut command = runner();
        command
            .arg("run")
            .arg(&self.graph)
            .args(["--engine", engine])
            .args(&self.flags)
            .arg("--folder")
            .arg(work.path())
            .arg("--record")
            .arg(journal);
        if let Some(replies) = case.get("replies") {
            let path = work.path().join("replies.json");
            std::fs::write(&path, replies.to_string()).expect("replies");
            command.arg("--replies").arg(path);
        }
        command.output().expect("runner run")
    }
}

fn replay(journal: &Path, extra: &[&str]) -> Output {
    runner()
        .arg("replay")
        .arg(journal)
        .args(extra)
        .output()
        .expect("runner replay")
}

/// The trace as printed, without what differs between any two runs: the run's id (and engine)
/// on its first line, and the sandbox's preparation notices.
fn trace(output: &Output) -> Vec<String> {
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter(|l| !(l.contains(" run ") && l.contains(" started: ")))
        .filter(|l| !l.starts_with("preparing the sandbox"))
        .map(str::to_owned)
        .collect()
}

fn stdout_json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "one JSON object on stdout ({e}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn case_of(example: &Example) -> Value {
    for test in std::fs::read_dir(workspace().join("graphs")).expect("graphs") {
        let path = test.expect("entry").path();
        if !path.to_string_lossy().ends_with(".test.json") {
            continue;
        }
        let file: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        for case in file["cases"].as_array().expect("cases") {
            if case["name"] == example.name.as_str() {
                return case.clone();
            }
        }
    }
    panic!("no case {}", example.name)
}

/// Every example recorded against the mock in each engine replays in each engine with no
/// provider, tool or folder: the same outcome, result, `total_tokens` and trace, and the exit
/// code.
#[test]
fn the_examples_replay_exactly_in_both_engines() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (i, example) in examples().iter().enumerate() {
        let case = case_of(example);
        for recorded in ENGINES {
            let journal = dir.path().join(format!("{i}-{recorded}.jsonl"));
            let original = example.record(recorded, &journal, &case);
            let outcome = stdout_json(&original);
            assert!(outcome["status"].is_string(), "{}: {outcome}", example.name);
            for engine in ENGINES {
                let replayed = replay(&journal, &["--engine", engine]);
                let what = format!(
                    "{} recorded in {recorded}, replayed in {engine}",
                    example.name
                );
                assert_eq!(stdout_json(&replayed), outcome, "{what}");
                assert_eq!(replayed.status.code(), original.status.code(), "{what}");
                assert_eq!(trace(&replayed), trace(&original), "{what}");
            }
        }
    }
}

/// The fanout example's first case recorded in boa, into `dir`.
fn fanout_journal(dir: &Path) -> PathBuf {
    let example = examples()
        .into_iter()
        .find(|e| e.name.starts_with("fanout: three questions"))
        .expect("the fanout case");
    let journal = dir.join("fanout.jsonl");
    let output = example.record("boa", &journal, &case_of(&example));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    journal
}

/// A graph edited after the recording stops the replay at the first call that differs, naming
/// the call, where the graph made it, and what the journal expected; in both engines.
#[test]
fn a_changed_script_diverges_naming_the_call_and_its_location() {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = fanout_journal(dir.path());
    let source = std::fs::read_to_string(workspace().join("graphs/fanout.js")).expect("fanout");
    let edits = [
        (
            "prompt.js",
            source.replace("prompt: `Merge these", "prompt: `Combine these"),
            "g.agent #4 (merge) was called with other inputs than the journal's g.agent (merge)",
            Some(22),
        ),
        (
            "sleep.js",
            source.replace("  const findings", "  await g.sleep(5);\n  const findings"),
            "g.sleep #1 (5 ms) was made where the journal expected g.agent (merge)",
            Some(21),
        ),
        (
            "short.js",
            source.replace(
                "const merged = await g.agent({ label: \"merge\", prompt: `Merge these findings into one short brief:\\n${findings}` });",
                "const merged = { text: findings };",
            ),
            "the graph returned where the journal expected g.agent (merge)",
            None,
        ),
    ];
    for (name, edited, expected, line) in edits {
        assert_ne!(edited, source, "{name} is an edit");
        let script = dir.path().join(name);
        std::fs::write(&script, &edited).expect("script");
        for engine in ENGINES {
            let output = replay(
                &journal,
                &["--script", &script.to_string_lossy(), "--engine", engine],
            );
            assert_eq!(output.status.code(), Some(1), "{name} in {engine}");
            let outcome = stdout_json(&output);
            assert_eq!(outcome["status"], "failed", "{name} in {engine}");
            let error = outcome["error"].as_str().expect("error");
            assert!(
                error.contains(&format!("the replay diverged from the journal: {expected}")),
                "{name} in {engine}: {error}"
            );
            match line {
                Some(line) => {
                    assert_eq!(
                        outcome["location"]["line"], line,
                        "{name} in {engine}: {outcome}"
                    );
                    assert_eq!(
                        outcome["location"]["file"],
                        script.to_string_lossy().as_ref()
                    );
                }
                None => assert!(outcome["location"].is_null(), "{outcome}"),
            }
        }
    }
    // The graph as recorded still replays.
    let output = replay(
        &journal,
        &[
            "--script",
            &workspace().join("graphs/fanout.js").to_string_lossy(),
        ],
    );
    assert_eq!(stdout_json(&output)["status"], "completed");
}

/// A journal cut short, garbled, written by a newer runner, with an edited script, or no
/// journal at all is refused before anything runs, with a usage error saying which.
#[test]
fn a_corrupt_cut_or_newer_journal_is_refused_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = fanout_journal(dir.path());
    let text = std::fs::read_to_string(&journal).expect("journal");
    let lines: Vec<&str> = text.lines().collect();
    let mut header: Value = serde_json::from_str(lines[0]).expect("header");
    let rest = lines[1..].join("\n");
    header["journal"] = 99.into();
    let newer = format!("{header}\n{rest}");
    header["journal"] = 1.into();
    header["script"] = "export default async () => 1;".into();
    let edited = format!("{header}\n{rest}");
    let mut garbled = lines.clone();
    garbled[3] = "{\"k\":\"start\",\"path\":";
    let cases = [
        (
            "cut",
            lines[..lines.len() - 3].join("\n"),
            "was cut short".to_owned(),
        ),
        (
            "garbled",
            garbled.join("\n"),
            "garbled.jsonl line 4 is not a journal entry (the file is corrupt)".to_owned(),
        ),
        (
            "newer",
            newer,
            "is a journal of version 99, newer than this runner reads (1)".to_owned(),
        ),
        (
            "edited",
            edited,
            "the recorded script does not match its script_sha256".to_owned(),
        ),
        (
            "script",
            std::fs::read_to_string(workspace().join("graphs/fanout.js")).expect("fanout"),
            "line 1 is not a run journal header".to_owned(),
        ),
        (
            "empty",
            String::new(),
            "is empty: it is not a run journal".to_owned(),
        ),
    ];
    for (name, text, expected) in cases {
        let path = dir.path().join(format!("{name}.jsonl"));
        std::fs::write(&path, text).expect("write");
        let output = replay(&path, &[]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}: {stderr}");
        assert!(output.stdout.is_empty(), "{name}: nothing ran");
        assert!(stderr.contains(&expected), "{name}: {stderr}");
    }
}

/// The journal holds the run's header (script, its hash, arguments, seed, engine) and one
/// entry per answer, in order, ending with the outcome; randomness as counts, never bytes.
#[test]
fn the_journal_holds_the_runs_answers_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = fanout_journal(dir.path());
    let text = std::fs::read_to_string(&journal).expect("journal");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON value a line"))
        .collect();
    let header = &lines[0];
    assert_eq!(header["journal"], 1);
    assert_eq!(header["engine"], "boa");
    assert_eq!(header["seed"], 7);
    assert_eq!(
        header["args"]["questions"].as_array().map(Vec::len),
        Some(3)
    );
    assert!(
        header["script"]
            .as_str()
            .is_some_and(|s| s.contains("Research fan-out"))
    );
    let kinds: Vec<&str> = lines[1..].iter().filter_map(|l| l["k"].as_str()).collect();
    let starts = kinds.iter().filter(|k| **k == "start").count();
    let waits = kinds.iter().filter(|k| **k == "wait").count();
    assert_eq!((starts, waits), (4, 4), "{kinds:?}");
    let end = lines.last().expect("end");
    assert_eq!(end["k"], "end");
    assert_eq!(end["total_tokens"], 90);
    // Each answer is journaled before the graph gets it: the merge agent's start follows the
    // last research agent's await, in the graph's order.
    let merge = lines
        .iter()
        .position(|l| l["k"] == "start" && l["what"] == "merge");
    let last_wait = lines
        .iter()
        .rposition(|l| l["k"] == "wait" && l["handle"] == 3);
    assert!(last_wait < merge, "{text}");
}

/// A recorded run is a test case (`"journal": FILE`): `runner test` replays the graph as it
/// reads now against it, offline, in both engines; once the graph's calls change, the case
/// fails naming the first call that differs.
#[test]
fn runner_test_takes_a_journal_as_a_cases_replies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let folder = dir.path().join("graphs");
    std::fs::create_dir(&folder).expect("graphs");
    let journal = fanout_journal(dir.path());
    std::fs::rename(&journal, folder.join("fanout.jsonl")).expect("journal");
    let source = std::fs::read_to_string(workspace().join("graphs/fanout.js")).expect("fanout");
    std::fs::write(folder.join("fanout.js"), &source).expect("graph");
    let test = serde_json::json!({"graph": "fanout.js", "cases": [{
        "name": "the recorded run",
        "journal": "fanout.jsonl",
        "expect": {
            "status": "completed",
            "result": {"brief": "Agencies want bulk export; webhooks need work.", "sources": 3},
            "total_tokens": 90
        }
    }]});
    std::fs::write(folder.join("fanout.test.json"), test.to_string()).expect("test");
    let run_tests = |engine: &str| {
        runner()
            .arg("test")
            .arg(&folder)
            .args(["--engine", engine])
            .output()
            .expect("runner test")
    };
    for engine in ENGINES {
        let output = run_tests(engine);
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "{engine}: {said}");
        assert!(said.contains("PASS the recorded run"), "{engine}: {said}");
    }
    std::fs::write(
        folder.join("fanout.js"),
        source.replace("prompt: `Merge these", "prompt: `Combine these"),
    )
    .expect("edit");
    for engine in ENGINES {
        let output = run_tests(engine);
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(output.status.code(), Some(1), "{engine}: {said}");
        assert!(said.contains("FAIL the recorded run"), "{engine}: {said}");
        assert!(
            said.contains("g.agent #4 (merge) was called with other inputs"),
            "{engine}: {said}"
        );
    }
    // What the journal fixes is not given twice.
    let doubled = serde_json::json!({"graph": "fanout.js", "journal": "fanout.jsonl", "seed": 3,
        "expect": {"status": "completed"}});
    std::fs::write(folder.join("fanout.test.json"), doubled.to_string()).expect("test");
    let output = run_tests("boa");
    let said = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("drop `seed` from the case"), "{said}");
}

/// A run against a real model (the local llama.cpp server, see `common/llm.rs`) on the real
/// clock replays with no provider at all: the same outcome, tokens and trace, its times
/// included, in both engines.
#[tokio::test]
async fn a_real_model_run_replays_offline_in_both_engines() {
    let Some(llm) = crate::common::llm::local_llm().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("real.jsonl");
    let original = runner()
        .arg("run")
        .arg(workspace().join("graphs/fanout.js"))
        .args(["--engine", "wasm"])
        .args([
            "--args",
            r#"{"questions": ["What is a tide?", "What is a wave?"]}"#,
        ])
        .args(["--provider", "openai", "--base-url", &llm.base_url])
        .args(["--model", crate::common::llm::MODEL, "--temperature", "0"])
        .args(["--max-tokens", "2000"])
        .arg("--record")
        .arg(&journal)
        .output()
        .expect("runner run");
    let outcome = stdout_json(&original);
    assert_eq!(outcome["status"], "completed", "{outcome}");
    assert!(outcome["total_tokens"].as_u64() > Some(0), "{outcome}");
    drop(llm);
    for engine in ENGINES {
        let replayed = replay(&journal, &["--engine", engine]);
        assert_eq!(stdout_json(&replayed), outcome, "replayed in {engine}");
        assert_eq!(trace(&replayed), trace(&original), "replayed in {engine}");
    }
}
