//! The generic wasm engine starts every run from a pre-initialized snapshot (boa's intrinsics
//! and the prelude already evaluated), and compiled graphs start from theirs. A snapshot is a
//! starting point, not shared state: what one run changes is gone for the next, and nothing
//! that should differ between runs (random numbers, time) is frozen into it.

use crate::common;

use std::sync::Arc;

use runner::RunStatus;
use runner::engine::wasm::{WasmEngine, WasmLimits, build_component};
use serde_json::{Value, json};

const PATCHING: &str = r#"
export default function (args, g) {
  const before = {
    marker: globalThis.marker ?? null,
    map: String(Array.prototype.map).includes("native"),
    agent: typeof g.agent,
  };
  globalThis.marker = "left by the first run";
  Array.prototype.map = function () { return "patched"; };
  try { g.agent = null; } catch { /* g is frozen */ }
  Object.freeze(Object.prototype);
  return before;
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_run_changes_is_gone_for_the_next() {
    let engine = Arc::new(WasmEngine::new(WasmLimits::default()).expect("the sandbox starts"));
    let (options, _, _) = common::options(engine, json!({"default": {"text": "ok"}}));
    for run in 0..3 {
        let outcome = common::run(PATCHING, json!({}), &options).await;
        assert_eq!(
            outcome.status,
            RunStatus::Completed,
            "run {run}: {outcome:?}"
        );
        assert_eq!(
            outcome.result,
            Some(json!({"marker": null, "map": true, "agent": "function"})),
            "run {run} saw what an earlier run left"
        );
    }
}

/// A compiled graph whose snapshot holds module state and a large array (boa's heap past the
/// first megabytes of linear memory), each run changing all of it.
const COUNTING: &str = r#"
export const meta = {name: "Counting", slug: "counting", version: "1"};
let runs = 0;
const big = new Array(200000).fill(7);
export default function () {
  runs += 1;
  let sum = 0;
  for (let i = 0; i < big.length; i += 1000) sum += big[i];
  big.fill(runs + 100);
  globalThis.left = (globalThis.left ?? 0) + 1;
  return {runs, sum, left: globalThis.left};
}
"#;

/// A pooled slot is reused from run to run and keeps the pages a run wrote resident (put back
/// from the snapshot in place, `PAGEMAP_SCAN`): every run still starts from the snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compiled_graph_starts_from_its_snapshot_in_a_reused_slot() {
    let engine = common::compiled(COUNTING).await;
    let (options, _, _) = common::options(engine, json!({"default": {"text": "ok"}}));
    for run in 0..20 {
        let outcome = common::run("", json!({}), &options).await;
        assert_eq!(
            outcome.status,
            RunStatus::Completed,
            "run {run}: {outcome:?}"
        );
        assert_eq!(
            outcome.result,
            Some(json!({"runs": 1, "sum": 1400, "left": 1})),
            "run {run} saw what an earlier run left"
        );
    }
}

const RANDOM: &str = r#"
export const meta = {name: "Random", slug: "random", version: "1"};
export default function () { return [Math.random(), Math.random(), Date.now()]; }
"#;

async fn randoms(options: &runner::run::RunOptions, script: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    for _ in 0..3 {
        let outcome = common::run(script, json!({}), options).await;
        assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
        let result = outcome.result.expect("a result");
        assert!(
            result[2].as_f64().unwrap_or(0.0) > 1.7e12,
            "a real clock: {result}"
        );
        seen.push(result[0].clone());
    }
    seen
}

fn all_different(values: &[Value]) -> bool {
    values
        .iter()
        .enumerate()
        .all(|(i, a)| values.iter().skip(i + 1).all(|b| a != b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_numbers_are_not_frozen_into_the_generic_snapshot() {
    let engine = Arc::new(WasmEngine::new(WasmLimits::default()).expect("the sandbox starts"));
    let (options, _, _) = common::options(engine, json!({"default": {"text": "ok"}}));
    let seen = randoms(&options, RANDOM).await;
    assert!(
        all_different(&seen),
        "the same Math.random() in every run: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_numbers_are_not_frozen_into_a_compiled_graph() {
    let engine = common::compiled(RANDOM).await;
    let (options, _, _) = common::options(engine, json!({"default": {"text": "ok"}}));
    let seen = randoms(&options, "").await;
    assert!(
        all_different(&seen),
        "the same Math.random() in every run: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_graph_does_not_build() {
    let error = build_component("  \n", WasmLimits::default())
        .await
        .expect_err("nothing to build");
    assert!(error.to_string().contains("empty"), "{error}");
}

/// The interpreter's set-up (10–30 million units of fuel without the snapshot) is not charged to
/// the graph: a budget of one million runs a small graph and still stops a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_fuel_budget_limits_the_graph_not_the_set_up() {
    let limits = WasmLimits {
        fuel: Some(1_000_000),
        ..WasmLimits::default()
    };
    let engine = Arc::new(WasmEngine::new(limits).expect("the sandbox starts"));
    let (options, _, _) = common::options(engine, json!({"default": {"text": "ok"}}));
    let small = common::run(
        "export default function () { return [1, 2, 3].map((x) => x * 2); }",
        json!({}),
        &options,
    )
    .await;
    assert_eq!(small.result, Some(json!([2, 4, 6])), "{small:?}");
    let looping = common::run(
        "export default function () { for (;;) {} }",
        json!({}),
        &options,
    )
    .await;
    assert_eq!(looping.status, RunStatus::Failed);
    assert!(
        looping
            .error
            .as_deref()
            .is_some_and(|e| e.contains("instruction budget exhausted")),
        "{looping:?}"
    );
}
