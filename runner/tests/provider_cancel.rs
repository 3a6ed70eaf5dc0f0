//! Cancelling a run stops a real provider at once: the request in flight is dropped (its
//! connection closed, which tells the server to stop generating), a retry wait is abandoned, and
//! the run ends `cancelled`. The server here is local and scripted; `real_model.rs` cancels a
//! generation of the real model.

use crate::common;

use std::sync::Arc;

use common::server::{Scripted, TestServer};
use runner::RunStatus;
use runner::host::events::{CollectingSink, EventKind};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const AGENT: &str = "export default async function (a, g) { return (await g.agent('p')).text; }";

async fn run_cancelled_on(
    server: &TestServer,
    when: impl Fn(&EventKind) -> bool + Send + Sync + 'static,
) -> (runner::RunOutcome, Vec<runner::host::events::Event>) {
    let entry = common::openai_entry("local", &server.base_url(), "m");
    let (mut options, _) = common::options_with(common::boa(), common::provider_set(vec![entry]));
    let cancel = CancellationToken::new();
    let sink = Arc::new(common::CancelOn {
        events: CollectingSink::default(),
        cancel: cancel.clone(),
        when: Box::new(when),
    });
    options.events = sink.clone();
    let outcome = common::run_with_cancel(AGENT, json!({}), &options, cancel).await;
    (outcome, sink.events.events())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_while_a_reply_streams_drops_the_request() {
    let first = format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Once upon"}}]})
    );
    let server = TestServer::start(vec![Scripted::Stall { first }], None).await;
    let (outcome, events) =
        run_cancelled_on(&server, |k| matches!(k, EventKind::AgentProgress { .. })).await;
    assert_eq!(outcome.status, RunStatus::Cancelled, "{outcome:?}");
    assert!(
        events
            .iter()
            .any(|e| matches!(e.kind, EventKind::AgentProgress { chars: 9, .. })),
        "progress was seen while generating"
    );
    let records = server.settled().await;
    assert_eq!(records.len(), 1);
    assert!(
        records[0].dropped && !records[0].completed,
        "the client went away mid-stream: {records:?}"
    );
    assert_eq!(outcome.total_tokens, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_retry_wait_does_not_wait_it_out() {
    // The server asks for 50 s, within the limit: the run must not sit through it.
    let server = TestServer::start(vec![Scripted::status(503, Some("50"), json!({}))], None).await;
    let (outcome, events) =
        run_cancelled_on(&server, |k| matches!(k, EventKind::AgentRetry { .. })).await;
    assert_eq!(outcome.status, RunStatus::Cancelled);
    assert_eq!(common::retries(&events).len(), 1);
    assert_eq!(server.records().len(), 1, "no second attempt");
}

/// The provider itself stops at the cancel (not only the run around it, which also aborts the
/// agent's task when it ends), for both kinds of provider: the Anthropic one is fed a stream in
/// its documented event format, stalled after the first text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_turn_returns_cancelled_at_once_and_drops_its_request() {
    use runner::FailureCode;
    use runner::host::agents::{AgentProvider, Message, ProviderProgress, Role, TurnRequest};
    use runner::host::http::ApiKey;
    use runner::host::provider_config::{ProviderConfig, ProviderKind};

    let openai_first = format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {"content": "partial"}}]})
    );
    let anthropic_first = [
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "content": [], "model": "m", "stop_reason": null,
            "usage": {"input_tokens": 3, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "partial"}}),
    ]
    .iter()
    .map(|e| {
        format!(
            "event: {}\ndata: {e}\n\n",
            e["type"].as_str().expect("type")
        )
    })
    .collect::<String>();

    for (kind, first) in [
        (ProviderKind::OpenAi, openai_first),
        (ProviderKind::Anthropic, anthropic_first),
    ] {
        let server = TestServer::start(vec![Scripted::Stall { first }], None).await;
        let mut entry = ProviderConfig::new("p", kind);
        entry.base_url = server.base_url();
        entry.model = Some("m".into());
        entry.api_key = Some(ApiKey::new("k"));
        let provider = common::provider_set(vec![entry]);
        let request = TurnRequest {
            model: None,
            messages: vec![Message::new(Role::User, "p")],
            tools: Vec::new(),
            max_tokens: None,
            label: None,
            turn: 1,
        };
        let cancel = CancellationToken::new();
        let on_progress = {
            let cancel = cancel.clone();
            move |p: ProviderProgress| {
                if matches!(p, ProviderProgress::Chars(_)) {
                    cancel.cancel();
                }
            }
        };
        let error = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            provider.turn(&request, &on_progress, &cancel),
        )
        .await
        .unwrap_or_else(|_| panic!("{kind:?}: the turn ended at the cancel, not at a timeout"))
        .expect_err("cancelled");
        assert_eq!(error.code, FailureCode::Cancelled, "{kind:?}: {error:?}");
        let records = server.settled().await;
        assert_eq!(records.len(), 1, "{kind:?}");
        assert!(records[0].dropped, "{kind:?}: {records:?}");
    }
}
