//! A provider that fails is retried within bounds, visibly in the trace, and then given up on
//! with the reason; what can never succeed is not retried; a slow one hits the per-request
//! timeout. The provider here is a local server answering from a script (in the OpenAI format),
//! so these run everywhere; `real_model.rs` repeats the 429 case in front of the real model.

use crate::common;

use common::server::{Scripted, TestServer};
use runner::RunStatus;
use runner::host::events::EventKind;
use runner::host::http::MAX_RETRIES;
use serde_json::json;

const CATCHING: &str = r#"
export default async function (args, g) {
  try { const r = await g.agent({prompt: "p"}); return {text: r.text, tokens: r.tokens}; }
  catch (e) { return {code: e.code, message: e.message}; }
}"#;

async fn run_against(
    server: &TestServer,
    configure: impl FnOnce(&mut runner::host::provider_config::ProviderConfig),
) -> (runner::RunOutcome, Vec<runner::host::events::Event>) {
    let mut entry = common::openai_entry("local", &server.base_url(), "m");
    configure(&mut entry);
    let (options, sink) = common::options_with(common::boa(), common::provider_set(vec![entry]));
    let outcome = common::run(CATCHING, json!({}), &options).await;
    (outcome, sink.events())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_then_200_is_one_success_with_the_retry_in_the_trace() {
    let server = TestServer::start(
        vec![
            Scripted::status(429, Some("0"), json!({"error": {"message": "slow down"}})),
            common::openai_reply("hi", 10, 2),
        ],
        None,
    )
    .await;
    let (outcome, events) = run_against(&server, |_| {}).await;
    assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
    assert_eq!(outcome.result, Some(json!({"text": "hi", "tokens": 12})));
    assert_eq!(
        outcome.total_tokens, 12,
        "only the successful attempt is metered"
    );
    let statuses: Vec<u16> = server.records().iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![429, 200]);
    let retries = common::retries(&events);
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert_eq!(retries[0].0, 1);
    assert!(
        retries[0].1.contains("429") && retries[0].1.contains("slow down"),
        "{retries:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_keeps_failing_ends_the_agent_failed_with_the_reason() {
    let server = TestServer::start(Vec::new(), None).await;
    server.otherwise(Scripted::status(
        503,
        Some("0"),
        json!({"error": {"message": "overloaded"}}),
    ));
    let (outcome, events) = run_against(&server, |c| c.retry.max_retries = 2).await;
    assert_eq!(outcome.status, RunStatus::Completed, "the graph caught it");
    let result = outcome.result.expect("result");
    assert_eq!(result["code"], "failed");
    let message = result["message"].as_str().expect("message");
    assert!(message.contains("HTTP 503"), "{message}");
    assert!(message.contains("overloaded"), "{message}");
    assert!(message.contains("gave up after 2 retries"), "{message}");
    assert!(message.starts_with("provider local:"), "{message}");
    assert_eq!(server.records().len(), 3, "one attempt and two retries");
    let attempts: Vec<u32> = common::retries(&events).iter().map(|r| r.0).collect();
    assert_eq!(attempts, vec![1, 2]);
    assert!(events.iter().any(|e| matches!(
        &e.kind,
        EventKind::AgentFailed { error, .. } if error.contains("gave up")
    )));
    assert_eq!(outcome.total_tokens, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_stop_at_the_limit() {
    let server = TestServer::start(Vec::new(), None).await;
    server.otherwise(Scripted::status(500, Some("0"), json!({})));
    let (outcome, events) = run_against(&server, |c| c.retry.max_retries = MAX_RETRIES).await;
    assert_eq!(outcome.result.expect("result")["code"], "failed");
    assert_eq!(server.records().len() as u32, MAX_RETRIES + 1);
    assert_eq!(common::retries(&events).len() as u32, MAX_RETRIES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_retry_after_the_backoff_applies_and_connection_errors_are_retried() {
    let server = TestServer::start(
        vec![
            Scripted::status(500, None, json!({"error": {"message": "oops"}})),
            Scripted::status(502, None, json!({})),
            common::openai_reply("ok", 3, 1),
        ],
        None,
    )
    .await;
    let (outcome, events) = run_against(&server, |_| {}).await;
    assert_eq!(outcome.result, Some(json!({"text": "ok", "tokens": 4})));
    assert_eq!(common::retries(&events).len(), 2);

    // Nothing listens on a port just released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let mut entry = common::openai_entry("local", &format!("http://127.0.0.1:{port}/v1"), "m");
    entry.retry.max_retries = 2;
    let (options, sink) = common::options_with(common::boa(), common::provider_set(vec![entry]));
    let outcome = common::run(CATCHING, json!({}), &options).await;
    let result = outcome.result.expect("result");
    assert_eq!(result["code"], "failed");
    assert!(
        result["message"]
            .as_str()
            .is_some_and(|m| m.contains("cannot reach the provider")),
        "{result}"
    );
    assert_eq!(common::retries(&sink.events()).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_past_the_limit_is_not_waited_for() {
    let server =
        TestServer::start(vec![Scripted::status(429, Some("3600"), json!({}))], None).await;
    let (outcome, _) = run_against(&server, |_| {}).await;
    let result = outcome.result.expect("result");
    assert_eq!(result["code"], "failed");
    assert!(
        result["message"]
            .as_str()
            .is_some_and(|m| m.contains("over the limit")),
        "{result}"
    );
    assert_eq!(server.records().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_cannot_succeed_are_not_retried() {
    for (status, code, needle) in [
        (400, "invalid", "refused the request"),
        (404, "invalid", "refused the request"),
        (401, "failed", "refused the credentials"),
    ] {
        let server = TestServer::start(
            vec![Scripted::status(
                status,
                None,
                json!({"error": {"message": "nope"}}),
            )],
            None,
        )
        .await;
        let (outcome, events) = run_against(&server, |_| {}).await;
        let result = outcome.result.expect("result");
        assert_eq!(result["code"], code, "{status}: {result}");
        assert!(
            result["message"]
                .as_str()
                .is_some_and(|m| m.contains(needle)),
            "{status}: {result}"
        );
        assert_eq!(server.records().len(), 1, "{status}");
        assert!(common::retries(&events).is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_stalls_hits_the_per_request_timeout() {
    let first = format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {"content": "a"}}]})
    );
    let server = TestServer::start(vec![Scripted::Stall { first }], None).await;
    let (outcome, events) = run_against(&server, |c| {
        c.timeout = std::time::Duration::from_secs(1);
    })
    .await;
    let result = outcome.result.expect("result");
    assert_eq!(result["code"], "failed");
    assert!(
        result["message"]
            .as_str()
            .is_some_and(|m| m.contains("per-request timeout")),
        "{result}"
    );
    assert!(
        common::retries(&events).is_empty(),
        "a timeout is not retried"
    );
    let records = server.settled().await;
    assert_eq!(records.len(), 1);
    assert!(records[0].dropped, "the stalled request was dropped");
}

/// An answer that is not what the API documents fails the agent with what was wrong, and is not
/// retried (the reply may already have been generated and billed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_does_not_decode_fails_without_a_retry() {
    let broken_json = Scripted::Reply {
        status: 200,
        headers: Vec::new(),
        content_type: "application/json",
        body: "{\"choices\": [".into(),
    };
    let broken_event = Scripted::sse_text("data: {\"choices\": [\n\n");
    for (answer, needle) in [
        (
            broken_json,
            "the provider's answer is not a chat completion: ",
        ),
        (
            broken_event,
            "the provider streamed a chunk that is not valid: ",
        ),
    ] {
        let server = TestServer::start(vec![answer], None).await;
        let (outcome, events) = run_against(&server, |_| {}).await;
        let result = outcome.result.expect("result");
        assert_eq!(result["code"], "failed", "{result}");
        assert!(
            result["message"]
                .as_str()
                .is_some_and(|m| m.contains(needle)),
            "{needle}: {result}"
        );
        assert_eq!(server.records().len(), 1, "{needle}");
        assert!(common::retries(&events).is_empty(), "{needle}");
    }
}
