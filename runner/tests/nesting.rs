//! Nested graphs share the run's budget and cancellation, and stop at the depth limit.

mod common;

use std::sync::Arc;

use runner::RunStatus;
use runner::host::graphs::{FolderCatalog, GraphSource, MAX_DEPTH};
use runner::{Limits, Meta};
use serde_json::json;

fn graph(slug: &str, script: &str) -> GraphSource {
    let meta = graph_js::describe(script, &Limits::default()).expect("valid meta");
    assert_eq!(meta.slug, slug);
    GraphSource {
        meta: Meta { ..meta },
        script: script.into(),
    }
}

const SELF_CALLING: &str = r#"
export const meta = {name: "Loop", slug: "loop", version: "1"};
export default async function (args, g) { return g.graph("loop", {n: (args.n ?? 0) + 1}); }
"#;

const COUNTDOWN: &str = r#"
export const meta = {name: "Countdown", slug: "countdown", version: "1"};
export default async function (args, g) {
  if (args.n === 0) return ["done"];
  const rest = await g.graph("countdown", {n: args.n - 1});
  return [args.n, ...rest];
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graph_that_calls_itself_stops_at_the_depth_limit() {
    for engine in common::engines() {
        let mut catalog = FolderCatalog::default();
        catalog.insert(graph("loop", SELF_CALLING));
        let (mut options, _, _) = common::options(engine, json!({}));
        options.catalog = Arc::new(catalog);
        let outcome = common::run(SELF_CALLING, json!({}), &options).await;
        assert_eq!(outcome.status, RunStatus::Failed);
        let error = outcome.error.unwrap_or_default();
        assert!(
            error.contains(&format!("graph nesting limit of {MAX_DEPTH} reached")),
            "{error}"
        );
        assert!(error.contains("calls itself"), "{error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recursion_with_a_base_case_within_the_limit_works() {
    for engine in common::engines() {
        let mut catalog = FolderCatalog::default();
        catalog.insert(graph("countdown", COUNTDOWN));
        let (mut options, _, _) = common::options(engine, json!({}));
        options.catalog = Arc::new(catalog);
        let n = MAX_DEPTH as i64;
        let outcome = common::run(COUNTDOWN, json!({"n": n}), &options).await;
        assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
        let expected: Vec<serde_json::Value> = (1..=n)
            .rev()
            .map(|i| json!(i))
            .chain([json!("done")])
            .collect();
        assert_eq!(outcome.result, Some(json!(expected)));
        // One level deeper is refused.
        let outcome = common::run(COUNTDOWN, json!({"n": n + 1}), &options).await;
        assert_eq!(outcome.status, RunStatus::Failed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_slug_is_not_found() {
    for engine in common::engines() {
        let (options, _, _) = common::options(engine, json!({}));
        let outcome = common::run(
            "export default async function (a, g) { try { await g.graph('nope', {}); } catch (e) { return e.code; } }",
            json!({}),
            &options,
        )
        .await;
        assert_eq!(outcome.result, Some(json!("not_found")));
    }
}
