//! Nested graphs share the run's budget and cancellation, and stop at the depth limit.

use crate::common;

use std::sync::Arc;

use runner::RunStatus;
use runner::engine::wasm::{WasmEngine, WasmLimits};
use runner::host::graphs::{FolderCatalog, GraphSource, MAX_DEPTH};
use runner::{Limits, Meta};
use serde_json::json;

fn graph(slug: &str, script: &str) -> GraphSource {
    let meta = graph_js::describe(script, &Limits::default()).expect("valid meta");
    assert_eq!(meta.slug, slug);
    GraphSource {
        meta: Meta { ..meta },
        script: script.into(),
        file: None,
        engine: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graph_that_calls_itself_stops_at_the_depth_limit() {
    for engine in common::engines() {
        let mut catalog = FolderCatalog::default();
        catalog.insert(GraphSource {
            file: Some("graphs/loop.js".into()),
            ..graph("loop", common::SELF_CALLING)
        });
        let (mut options, _, _) = common::options(engine, json!({}));
        options.catalog = Arc::new(catalog);
        let outcome = common::run(common::SELF_CALLING, json!({}), &options).await;
        assert_eq!(outcome.status, RunStatus::Failed);
        let error = outcome.error.unwrap_or_default();
        assert!(
            error.contains(&format!("graph nesting limit of {MAX_DEPTH} reached")),
            "{error}"
        );
        assert!(error.contains("calls itself"), "{error}");
        // Said once, at the call that went too deep (issue 45), not once per level.
        let line = common::SELF_CALLING
            .lines()
            .nth(2)
            .expect("the call's line");
        let column = line.find("g.graph(").expect("the call") + "g.graph(".len();
        assert!(
            error.starts_with(&format!("graphs/loop.js:3:{column}: ")),
            "{error}"
        );
        assert!(!error.contains("graph loop failed"), "{error}");
        assert!(error.chars().count() < 500, "{error}");
        assert!(error.contains(&format!("\n  3 | {line}")), "{error}");
        let location = outcome.location.expect("a location");
        assert_eq!(
            (location.file.as_str(), location.line),
            ("graphs/loop.js", 3)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recursion_with_a_base_case_within_the_limit_works() {
    for engine in common::engines() {
        let mut catalog = FolderCatalog::default();
        catalog.insert(graph("countdown", common::COUNTDOWN));
        let (mut options, _, _) = common::options(engine, json!({}));
        options.catalog = Arc::new(catalog);
        let n = MAX_DEPTH as i64;
        let outcome = common::run(common::COUNTDOWN, json!({"n": n}), &options).await;
        assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
        let expected: Vec<serde_json::Value> = (1..=n)
            .rev()
            .map(|i| json!(i))
            .chain([json!("done")])
            .collect();
        assert_eq!(outcome.result, Some(json!(expected)));
        // One level deeper is refused.
        let outcome = common::run(common::COUNTDOWN, json!({"n": n + 1}), &options).await;
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

/// Loops `args.n` times: about 2,100 units of wasm fuel per iteration (120,000 iterations burn
/// about 250 million).
const BURN: &str = r#"
export const meta = {name: "Burn", slug: "burn", version: "1"};
export default function (args) { let s = 0; for (let i = 0; i < args.n; i++) { s += i; } return s; }
"#;

/// Runs `burn` `args.times` times, one after another or all at once.
const BURN_TIMES: &str = r#"
export default async function (args, g) {
  if (args.together) {
    const all = [];
    for (let k = 0; k < args.times; k++) all.push(g.graph("burn", {n: args.n}));
    return (await Promise.all(all)).length;
  }
  let done = 0;
  for (let k = 0; k < args.times; k++) { await g.graph("burn", {n: args.n}); done++; }
  return done;
}
"#;

fn fuel_options(fuel: u64) -> runner::run::RunOptions {
    let limits = WasmLimits {
        fuel: Some(fuel),
        ..WasmLimits::default()
    };
    let engine = Arc::new(WasmEngine::new(limits).expect("the sandbox starts"));
    let mut catalog = FolderCatalog::default();
    catalog.insert(graph("burn", BURN));
    catalog.insert(graph("nap-then-burn", NAP_THEN_BURN));
    let (mut options, _, _) = common::options(engine, json!({}));
    options.catalog = Arc::new(catalog);
    options
}

fn out_of_fuel(outcome: &runner::run::RunOutcome) -> bool {
    outcome.status == RunStatus::Failed
        && outcome
            .error
            .as_deref()
            .is_some_and(|e| e.contains("instruction budget exhausted"))
}

/// `--fuel` is one budget for the whole run: nested graphs draw on it rather than each getting
/// a fresh one, so a graph cannot multiply its budget by calling others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_graphs_draw_on_the_runs_one_fuel_budget() {
    // One burn of 20,000 iterations needs about 42 million units.
    let options = fuel_options(100_000_000);
    let two = common::run(BURN_TIMES, json!({"times": 2, "n": 20_000}), &options).await;
    assert_eq!(two.result, Some(json!(2)), "{two:?}");
    // Six of them, each well within 100 million alone, are not.
    let six = common::run(BURN_TIMES, json!({"times": 6, "n": 20_000}), &options).await;
    assert!(out_of_fuel(&six), "{six:?}");
    // The budget is per run: the next run has all of it again.
    let again = common::run(BURN_TIMES, json!({"times": 2, "n": 20_000}), &options).await;
    assert_eq!(again.result, Some(json!(2)), "{again:?}");
}

/// Graphs running side by side learn of each other's use every epoch tick: six that need about
/// 250 million units each, any one of them within a budget of 300 million, do not all finish
/// on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_nested_graphs_share_the_fuel_budget() {
    let options = fuel_options(300_000_000);
    let one = common::run(
        BURN_TIMES,
        json!({"times": 1, "n": 120_000, "together": true}),
        &options,
    )
    .await;
    assert_eq!(one.result, Some(json!(1)), "{one:?}");
    let six = common::run(
        BURN_TIMES,
        json!({"times": 6, "n": 120_000, "together": true}),
        &options,
    )
    .await;
    assert!(out_of_fuel(&six), "{six:?}");
}

/// Sleeps `args.ms`, then loops `args.n` times like `burn`.
const NAP_THEN_BURN: &str = r#"
export const meta = {name: "Nap then burn", slug: "nap-then-burn", version: "1"};
export default async function (args, g) {
  await g.sleep(args.ms);
  let s = 0; for (let i = 0; i < args.n; i++) { s += i; } return s;
}
"#;

/// A graph gets its fuel when it starts, but its siblings' later use still counts against it:
/// one that starts with the whole budget, naps while a sibling burns most of it, then burns
/// as much again runs out, though either burn alone fits. (An instance's fuel cannot be
/// lowered while it runs; the epoch check stops it instead.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graph_that_started_with_the_whole_budget_still_pays_for_its_siblings() {
    const SCRIPT: &str = r#"export default async function (args, g) {
        const late = g.graph("nap-then-burn", {ms: args.ms, n: 120000});
        late.catch(() => {});
        if (args.sibling) { await g.sleep(100); await g.graph("burn", {n: 120000}); }
        return await late;
    }"#;
    let options = fuel_options(300_000_000);
    let alone = common::run(SCRIPT, json!({"ms": 0, "sibling": false}), &options).await;
    assert_eq!(alone.status, RunStatus::Completed, "{alone:?}");
    let both = common::run(SCRIPT, json!({"ms": 1000, "sibling": true}), &options).await;
    assert!(out_of_fuel(&both), "{both:?}");
}

/// At most `MAX_LIVE_GRAPHS` nested graphs run at once; one that finishes, or that was never
/// found, frees its place. (The starts of missing graphs go one after another: started at once,
/// they would hold places while they are looked up and could be refused.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_graphs_running_at_once_are_capped_and_free_their_place() {
    const NAP: &str = r#"
export const meta = {name: "Nap", slug: "nap", version: "1"};
export default async function (args, g) { await g.sleep(300); return 1; }
"#;
    let script = format!(
        r#"export default async function (a, g) {{
            const starts = (n, slug) => Promise.allSettled(Array.from({{length: n}}, () => g.graph(slug, {{}})));
            const missing = [];
            for (let k = 0; k < {max} + 6; k++) missing.push(...await starts(1, "nope"));
            const naps = await starts({max} + 1, "nap");
            const again = await starts({max}, "nap");
            const ok = (all) => all.filter(r => r.status === "fulfilled").length;
            return {{
                missing: missing.filter(r => r.reason.code === "not_found").length,
                naps: ok(naps),
                refused: naps.filter(r => r.status === "rejected").map(r => r.reason.message),
                again: ok(again),
            }};
        }}"#,
        max = runner::host::graphs::MAX_LIVE_GRAPHS
    );
    for engine in common::engines() {
        let mut catalog = FolderCatalog::default();
        catalog.insert(graph("nap", NAP));
        let (mut options, _, _) = common::options(engine, json!({}));
        options.catalog = Arc::new(catalog);
        let outcome = common::run(&script, json!({}), &options).await;
        assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
        let max = runner::host::graphs::MAX_LIVE_GRAPHS;
        assert_eq!(
            outcome.result,
            Some(json!({
                "missing": max + 6,
                "naps": max,
                "refused": [format!("more than {max} nested graphs running at once in this run")],
                "again": max,
            })),
        );
    }
}

/// A nested graph whose `meta.args` requires `{topic: string}`; started, it asks an agent.
const NEEDS_TOPIC: &str = r#"
export const meta = {name: "Needs topic", slug: "needs-topic", version: "1.0.0",
  args: {type: "object", required: ["topic"], properties: {topic: {type: "string"}}}};
export default async function (args, g) {
  const r = await g.agent({label: "callee", prompt: "About " + args.topic});
  return {topic: args.topic, text: r.text};
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_arguments_that_do_not_fit_the_callee_s_schema_are_invalid_and_it_never_starts() {
    let caller = r#"export default async function (args, g) {
      try { return await g.graph('needs-topic', args.call); }
      catch (e) { return {code: e.code, message: e.message}; }
    }"#;
    for engine in common::engines() {
        let name = engine.name();
        let mut catalog = FolderCatalog::default();
        catalog.insert(graph("needs-topic", NEEDS_TOPIC));
        let (mut options, sink, mock) =
            common::options(engine, json!({"default": {"text": "ok", "tokens": 1}}));
        options.catalog = Arc::new(catalog);
        for (call, path) in [
            (json!({}), "args.topic: is required but missing"),
            (json!({"topic": 7}), "args.topic"),
        ] {
            let outcome = common::run(caller, json!({"call": call}), &options).await;
            assert_eq!(outcome.status, RunStatus::Completed, "{name}: {outcome:?}");
            let result = outcome.result.unwrap_or_default();
            assert_eq!(result["code"], "invalid", "{name}: {result}");
            let message = result["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("graph needs-topic")
                    && message.contains("meta.args")
                    && message.contains(path),
                "{name}: {message}"
            );
        }
        // The callee never started: no nested graph in the trace, no agent asked.
        let started = sink
            .events()
            .into_iter()
            .any(|e| matches!(e.kind, runner::host::events::EventKind::GraphStarted { .. }));
        assert!(!started, "{name}: a callee started");
        assert!(mock.calls().is_empty(), "{name}: {:?}", mock.calls());

        // Fitting arguments run it.
        let outcome = common::run(caller, json!({"call": {"topic": "owls"}}), &options).await;
        assert_eq!(outcome.status, RunStatus::Completed, "{name}: {outcome:?}");
        assert_eq!(
            outcome.result,
            Some(json!({"topic": "owls", "text": "ok"})),
            "{name}"
        );
    }
}
