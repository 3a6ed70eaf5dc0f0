//! An API key is read from the environment variable named in the configuration and sent only
//! in its header: it never appears in the trace, the logs (even at trace level), errors, the
//! run outcome or a providers file, not even when the server echoes it back in an error.

use crate::common;

use std::process::Output;

use common::server::{Scripted, TestServer};
use runner::host::http::ApiKey;
use runner::host::provider_config::{ProviderConfig, ProviderKind};
use serde_json::json;

/// A key distinctive enough that finding it anywhere is not a coincidence.
const KEY: &str = "sk-graphrelay-test-5e1f0c9a7b3d4e2f8a6c";
const KEY_VAR: &str = "GRAPHRELAY_TEST_PROVIDER_KEY";

const GRAPH: &str = r#"
export const meta = {name: "Ask", slug: "ask", version: "1"};
export default async function (args, g) {
  try { const r = await g.agent({prompt: "hello", label: "ask"}); return r; }
  catch (e) { throw new Error("agent failed: " + e.message); }
}"#;

async fn runner_with_key(args: &[&str], dir: &std::path::Path) -> Output {
    let graph = dir.join("ask.js");
    std::fs::write(&graph, GRAPH).expect("graph");
    tokio::process::Command::new(env!("CARGO_BIN_EXE_runner"))
        .arg("run")
        .arg(&graph)
        .args(["--engine", "boa"])
        .args(args)
        .env(KEY_VAR, KEY)
        // Every log line the process can produce, including the HTTP client's.
        .env("RUNNER_LOG", "trace")
        .output()
        .await
        .expect("runner runs")
}

fn assert_no_key(output: &Output) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stdout.contains(KEY), "the key is on stdout: {stdout}");
    assert!(!stderr.contains(KEY), "the key is on stderr: {stderr}");
    // Nor a recognisable part of it.
    assert!(!stderr.contains(&KEY[10..30]), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_is_sent_as_a_header_and_printed_nowhere_on_success() {
    let server = TestServer::start(vec![common::openai_reply("hi", 5, 1)], None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let output = runner_with_key(
        &[
            "--provider",
            "openai",
            "--base-url",
            &server.base_url(),
            "--model",
            "m",
            "--api-key-env",
            KEY_VAR,
        ],
        dir.path(),
    )
    .await;
    assert!(output.status.success(), "{output:?}");
    assert_no_key(&output);
    let records = server.records();
    assert_eq!(
        records[0].headers["authorization"],
        format!("Bearer {KEY}").as_str(),
        "the key reached the server"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_echoing_the_key_in_errors_gets_it_redacted() {
    for kind in ["openai", "anthropic"] {
        let server = TestServer::start(
            vec![
                Scripted::status(
                    503,
                    Some("0"),
                    json!({"error": {"message": format!("busy, key {KEY}")}}),
                ),
                Scripted::status(
                    401,
                    None,
                    json!({"error": {"message": format!("Incorrect API key provided: {KEY}")}}),
                ),
            ],
            None,
        )
        .await;
        let dir = tempfile::tempdir().expect("tempdir");
        let output = runner_with_key(
            &[
                "--provider",
                kind,
                "--base-url",
                &server.base_url(),
                "--model",
                "m",
                "--api-key-env",
                KEY_VAR,
            ],
            dir.path(),
        )
        .await;
        assert_eq!(output.status.code(), Some(1), "{kind}: the run failed");
        assert_no_key(&output);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains("[redacted]"), "{kind}: {stdout}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("retry 1") && stderr.contains("[redacted]"),
            "{kind}: the retry is traced, without the key: {stderr}"
        );
        assert_eq!(server.records().len(), 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_and_outcome_never_hold_the_key() {
    // A streamed error chunk that quotes the key, after a retried failure that quotes it too.
    let error_chunk = format!(
        "data: {}\n\n",
        json!({"error": {"message": format!("stream broke for {KEY}")}})
    );
    let server = TestServer::start(
        vec![
            Scripted::status(
                429,
                Some("0"),
                json!({"error": format!("{KEY} rate limited")}),
            ),
            Scripted::sse_text(error_chunk),
        ],
        None,
    )
    .await;
    let mut config = ProviderConfig::new("hosted", ProviderKind::OpenAi);
    config.base_url = server.base_url();
    config.model = Some("m".into());
    config.api_key = Some(ApiKey::new(KEY));
    let set = common::provider_set(vec![config]);
    assert!(!format!("{set:?}").contains(KEY));
    let (options, sink) = common::options_with(common::boa(), set);
    let outcome = common::run(GRAPH, json!({}), &options).await;
    assert_eq!(outcome.status, runner::RunStatus::Failed);
    let everything = format!(
        "{}\n{}\n{:?}",
        serde_json::to_string(&outcome).expect("json"),
        serde_json::to_string(&sink.events()).expect("json"),
        outcome
    );
    assert!(!everything.contains(KEY), "{everything}");
    assert!(everything.contains("[redacted]"), "{everything}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_providers_file_holding_a_key_is_refused_without_quoting_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("providers.toml");
    std::fs::write(
        &file,
        format!("[providers.local]\nkind = \"openai\"\napi_key = \"{KEY}\"\n"),
    )
    .expect("file");
    let output = runner_with_key(&["--providers", file.to_str().expect("utf-8")], dir.path()).await;
    assert_eq!(output.status.code(), Some(2), "a usage error");
    assert_no_key(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("never read from files"), "{stderr}");
}
