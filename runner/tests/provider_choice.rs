//! A graph chooses its model: `model: "entry:model"` picks an entry of the providers file (or
//! of `--provider`), a bare entry name its default model, no model the default entry; an
//! unknown provider or model is `invalid` before any request is sent. Prices give
//! `reported_cost`. The providers are local scripted servers in the OpenAI format.

use crate::common;

use std::process::Output;

use common::server::TestServer;
use runner::RunStatus;
use runner::host::provider_config::{Price, ProviderConfig};
use serde_json::{Value, json};

/// Entry `a` on `server`: it lists `a-default` (priced) and `a-other`, and only those.
fn listing_entry(server: &TestServer) -> ProviderConfig {
    let mut entry = common::openai_entry("a", &server.base_url(), "a-default");
    entry.models.insert(
        "a-default".into(),
        Price {
            input_per_million: 2.0,
            output_per_million: 10.0,
        },
    );
    entry.models.insert("a-other".into(), Price::default());
    entry.only_listed_models = true;
    entry
}

/// What the graph caught for the models no entry serves.
fn unknown_models_are_invalid(result: &Value) {
    let unknown = result["zzz:x"].as_str().expect("text");
    assert!(
        unknown.starts_with("invalid: unknown provider \"zzz\"") && unknown.contains("a, b"),
        "{unknown}"
    );
    assert!(
        result["a:not-listed"]
            .as_str()
            .is_some_and(|m| m.starts_with("invalid: provider a has no model")),
        "{result}"
    );
    // A bare name that is no entry is a model on the default entry, which lists its models.
    assert!(
        result["c"]
            .as_str()
            .is_some_and(|m| m.starts_with("invalid:")),
        "{result}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_pick_entries_and_unknown_ones_are_invalid_without_a_request() {
    let a = TestServer::start(
        vec![
            common::openai_reply("from a", 10, 5),
            common::openai_reply("from a again", 1, 1),
        ],
        None,
    )
    .await;
    let b = TestServer::start(vec![common::openai_reply("from b", 7, 3)], None).await;
    let entry_a = listing_entry(&a);
    let entry_b = common::openai_entry("b", &b.base_url(), "b-default");
    let (options, _) =
        common::options_with(common::boa(), common::provider_set(vec![entry_a, entry_b]));
    let script = r#"
    export default async function (args, g) {
      const out = {};
      out.none = (await g.agent({prompt: "1"})).text;
      out.b = (await g.agent({prompt: "2", model: "b"})).text;
      out.other = (await g.agent({prompt: "3", model: "a:a-other"})).text;
      for (const model of ["zzz:x", "a:not-listed", "c"]) {
        try { await g.agent({prompt: "4", model}); out[model] = "accepted"; }
        catch (e) { out[model] = e.code + ": " + e.message; }
      }
      return out;
    }"#;
    let outcome = common::run(script, json!({}), &options).await;
    assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
    let result = outcome.result.expect("result");
    assert_eq!(result["none"], "from a");
    assert_eq!(result["b"], "from b");
    assert_eq!(result["other"], "from a again");
    unknown_models_are_invalid(&result);
    let models: Vec<Value> = a
        .records()
        .iter()
        .map(|r| r.body["model"].clone())
        .collect();
    assert_eq!(models, vec![json!("a-default"), json!("a-other")]);
    assert_eq!(b.records()[0].body["model"], "b-default");
    assert_eq!(outcome.total_tokens, 15 + 10 + 2);
    // 10 in × $2/M + 5 out × $10/M; the other models have no price.
    assert!(
        (outcome.reported_cost - 0.000_07).abs() < 1e-12,
        "{}",
        outcome.reported_cost
    );
}

fn runner() -> tokio::process::Command {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_runner"))
}

fn stdout_json(output: &Output) -> Value {
    let text = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}): {text}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

const TWO_MODELS: &str = r#"
export const meta = {name: "Two", slug: "two", version: "1"};
export default async function (args, g) {
  const [x, y] = await Promise.all([
    g.agent({prompt: "one", model: "local:small"}),
    g.agent({prompt: "two", model: "backup"}),
  ]);
  return {x: x.text, y: y.text, models: [x.model, y.model]};
}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_run_with_a_providers_file() {
    let local = TestServer::start(vec![common::openai_reply("x", 4, 2)], None).await;
    let backup = TestServer::start(vec![common::openai_reply("y", 3, 1)], None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("providers.toml");
    std::fs::write(
        &file,
        format!(
            r#"
default = "local"
[providers.local]
kind = "openai"
base_url = "{}"
model = "small"
[providers.local.models]
small = {{ input_per_million = 1000.0, output_per_million = 1000.0 }}

[providers.backup]
kind = "openai"
base_url = "{}"
model = "big"
stream = false
"#,
            local.base_url(),
            backup.base_url()
        ),
    )
    .expect("file");
    let graph = dir.path().join("two.js");
    std::fs::write(&graph, TWO_MODELS).expect("graph");
    let output = runner()
        .arg("run")
        .arg(&graph)
        .arg("--providers")
        .arg(&file)
        .output()
        .await
        .expect("runs");
    assert!(output.status.success(), "{output:?}");
    let printed = stdout_json(&output);
    assert_eq!(printed["status"], "completed");
    assert_eq!(printed["result"]["x"], "x");
    assert_eq!(printed["result"]["y"], "y");
    assert_eq!(printed["total_tokens"], 10);
    // 6 tokens at $1000 per million.
    assert!((printed["reported_cost"].as_f64().expect("cost") - 0.006).abs() < 1e-9);
    assert_eq!(backup.records()[0].body["model"], "big");
    assert_eq!(backup.records()[0].body.get("stream"), None);
    assert_eq!(local.records()[0].body["stream"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_run_with_provider_flags_and_their_errors() {
    let server = TestServer::start(vec![common::openai_reply("flagged", 2, 2)], None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = dir.path().join("one.js");
    std::fs::write(
        &graph,
        "export const meta = {name: 'One', slug: 'one', version: '1'};\nexport default async function (a, g) { return (await g.agent({prompt: 'p', maxTokens: 9})).text; }",
    )
    .expect("graph");
    let output = runner()
        .arg("run")
        .arg(&graph)
        .args(["--provider", "openai", "--base-url", &server.base_url()])
        .args(["--model", "m", "--temperature", "0", "--max-tokens", "100"])
        .output()
        .await
        .expect("runs");
    assert!(output.status.success(), "{output:?}");
    assert_eq!(stdout_json(&output)["result"], "flagged");
    let body = &server.records()[0].body;
    assert_eq!(body["model"], "m");
    assert_eq!(body["max_tokens"], 9);
    assert_eq!(body["temperature"], 0.0);

    bad_provider_flags_are_usage_errors(&graph).await;
}

/// Provider flags that do not fit together, or name a bad URL, key variable or file, are usage
/// errors (exit 2) that say why.
async fn bad_provider_flags_are_usage_errors(graph: &std::path::Path) {
    for (args, needle) in [
        (vec!["--provider", "openai"], "--model"),
        (vec!["--model", "m"], "--provider"),
        (
            vec![
                "--provider",
                "openai",
                "--model",
                "m",
                "--replies",
                "r.json",
            ],
            "cannot be used with",
        ),
        (
            vec![
                "--provider",
                "openai",
                "--model",
                "m",
                "--base-url",
                "ftp://x",
            ],
            "http://",
        ),
        (
            vec![
                "--provider",
                "openai",
                "--model",
                "m",
                "--api-key-env",
                "not a name",
            ],
            "NAME of an environment variable",
        ),
        (
            vec!["--providers", "/nonexistent/providers.toml"],
            "cannot read",
        ),
    ] {
        let output = runner()
            .arg("run")
            .arg(graph)
            .args(&args)
            .output()
            .await
            .expect("runs");
        assert_eq!(output.status.code(), Some(2), "{args:?}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_test_runs_cases_without_replies_on_the_provider() {
    let server = TestServer::start(vec![common::openai_reply("real", 6, 1)], None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("ask.js"),
        "export const meta = {name: 'Ask', slug: 'ask', version: '1'};\nexport default async function (a, g) { return (await g.agent('p')).text; }",
    )
    .expect("graph");
    std::fs::write(
        dir.path().join("ask.test.json"),
        r#"{"expect": {"status": "completed", "result": "real", "total_tokens": 7}}"#,
    )
    .expect("case");
    let output = runner()
        .arg("test")
        .arg(dir.path())
        .args([
            "--provider",
            "openai",
            "--base-url",
            &server.base_url(),
            "--model",
            "m",
        ])
        .output()
        .await
        .expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{output:?}");
    assert!(stdout.contains("1 passed, 0 failed"), "{stdout}");
}
