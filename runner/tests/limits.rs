//! Runaway scripts end `failed` with an error naming the limit, and the next run works.

use crate::common;

use std::time::Duration;

use runner::RunStatus;
use serde_json::json;

async fn fails_naming(script: &str, limit: &str) {
    for engine in common::engines() {
        let (mut options, _, _) = common::options(engine, json!({"default": {"text": "ok"}}));
        options.timeout = Duration::from_secs(60);
        let outcome = common::run(script, json!({}), &options).await;
        assert_eq!(outcome.status, RunStatus::Failed, "{outcome:?}");
        let error = outcome.error.unwrap_or_default();
        assert!(error.contains(limit), "expected {limit:?} in {error:?}");
        // The host is unaffected: the next run works.
        let next = common::run(
            "export default async function (a, g) { return (await g.agent('hi')).text; }",
            json!({}),
            &options,
        )
        .await;
        assert_eq!(next.result, Some(json!("ok")), "{next:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_infinite_loop_hits_the_loop_limit() {
    fails_naming(
        "export default function () { while (true) {} }",
        "loop iteration limit",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_infinite_loop_in_a_getter_hits_the_loop_limit() {
    fails_naming(
        "export default function () { return ({ get x() { for (;;) {} } }).x; }",
        "loop iteration limit",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbounded_recursion_hits_the_recursion_limit() {
    fails_naming(
        "function f(n) { return f(n + 1) + 1; } export default () => f(0);",
        "recursion limit",
    )
    .await;
}

/// boa reports a limit hit inside an `await` as an internal error wrapping the limit; the run
/// must still name the limit, not boa's "cannot fail per spec".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbounded_async_recursion_hits_the_recursion_limit() {
    fails_naming(
        "const f = async () => f(); export default async function () { return await f(); }",
        "recursion limit",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recursion_through_getters_hits_the_recursion_limit() {
    fails_naming(
        "const o = { get x() { return this.x; } }; export default function () { return o.x; }",
        "recursion limit",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_promise_chain_stops_at_the_deadline() {
    for engine in common::engines() {
        let (mut options, _, _) = common::options(engine, json!({}));
        options.timeout = Duration::from_millis(300);
        let outcome = common::run(
            "function f() { return Promise.resolve().then(f); } export default function () { return f(); }",
            json!({}),
            &options,
        )
        .await;
        assert_eq!(outcome.status, RunStatus::Failed);
        assert!(outcome.error.unwrap_or_default().contains("deadline"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graph_waiting_on_a_slow_agent_stops_at_the_deadline() {
    for engine in common::engines() {
        let (mut options, _, _) = common::options(
            engine,
            json!({"default": {"text": "late", "latency_ms": 60000}}),
        );
        options.timeout = Duration::from_millis(200);
        let outcome = common::run(
            "export default async function (a, g) { return g.agent('slow'); }",
            json!({}),
            &options,
        )
        .await;
        assert_eq!(outcome.status, RunStatus::Failed);
        let error = outcome.error.unwrap_or_default();
        assert!(
            error.contains("wall-clock deadline") && error.contains("--timeout"),
            "{error}"
        );
    }
}
