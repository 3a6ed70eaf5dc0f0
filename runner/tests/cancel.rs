//! A run cancelled from outside ends `cancelled`, whatever it was doing.

use crate::common;

use std::time::Duration;

use runner::RunStatus;
use serde_json::json;
use tokio_util::sync::CancellationToken;

async fn cancelled_after(script: &str, replies: serde_json::Value) {
    for engine in common::engines() {
        let (options, _, _) = common::options(engine, replies.clone());
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            trigger.cancel();
        });
        let outcome = common::run_with_cancel(script, json!({}), &options, cancel).await;
        assert_eq!(outcome.status, RunStatus::Cancelled, "{outcome:?}");
        assert_eq!(outcome.result, None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_an_agent() {
    cancelled_after(
        "export default async function (a, g) { return g.agent('slow'); }",
        json!({"default": {"text": "x", "latency_ms": 60000}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_sleep_even_if_the_script_catches_everything() {
    cancelled_after(
        "export default async function (a, g) { for (;;) { try { await g.sleep(50); } catch (e) {} } }",
        json!({}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_an_endless_promise_chain() {
    cancelled_after(
        "function f() { return Promise.resolve().then(f); } export default () => f();",
        json!({}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_token_before_start_never_calls_an_agent() {
    for engine in common::engines() {
        let (options, _, mock) = common::options(engine, json!({"default": {"text": "x"}}));
        let cancel = CancellationToken::new();
        cancel.cancel();
        let outcome = common::run_with_cancel(
            "export default async function (a, g) { return g.agent('p'); }",
            json!({}),
            &options,
            cancel,
        )
        .await;
        assert_eq!(outcome.status, RunStatus::Cancelled);
        assert!(mock.calls().is_empty());
    }
}
