//! A graph sees time and randomness only through the host: one run clock and one seeded random
//! source per run, the same in both engines. Under `--seed` and a fixed clock every run is the
//! same; timers on the virtual clock take no real time; real time is never finer than 1 ms; the
//! trace names the seed; the component links no clock or random source of the machine.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common;

use runner::RunStatus;
use runner::clock::Stopwatch;
use runner::host::events::{CollectingSink, EventKind};
use runner::host::graphs::{FolderCatalog, GraphSource};
use runner::host::time::ClockSetting;
use runner::run::RunOptions;
use serde_json::{Value, json};

/// How many runs must agree, per engine.
const DETERMINISM_RUNS: usize = 50;

const START: &str = "fixed:2026-01-01T00:00:00Z";
const START_MS: i64 = 1_767_225_600_000;

const READINGS: &str = r#"
export default async function () {
  const first = [Date.now(), Math.random(), performance.now()];
  await new Promise((resolve) => setTimeout(resolve, 250));
  return [...first, Date.now(), Math.random(), performance.now(), crypto.randomUUID(), new Date().toISOString()];
}"#;

fn fixed(options: &mut RunOptions, seed: u64) {
    options.seed = Some(seed);
    options.clock = ClockSetting::parse(START).expect("a clock");
}

async fn readings(options: &RunOptions) -> Value {
    let outcome = common::run(READINGS, json!({}), options).await;
    assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
    outcome.result.expect("a result")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_seed_and_fixed_clock_give_the_same_time_and_randoms_in_both_engines() {
    let mut seen = BTreeSet::new();
    for engine in common::engines() {
        let name = engine.name();
        let (mut options, _, _) = common::options(engine, json!({}));
        fixed(&mut options, 42);
        let first = readings(&options).await;
        for _ in 1..DETERMINISM_RUNS {
            assert_eq!(readings(&options).await, first, "{name}");
        }
        assert_eq!(first[0], json!(START_MS), "{name}");
        assert_eq!(first[2], json!(0), "{name}");
        assert_eq!(first[3], json!(START_MS + 250), "{name}");
        assert_eq!(first[5], json!(250), "{name}");
        assert_eq!(first[7], json!("2026-01-01T00:00:00.250Z"), "{name}");
        seen.insert(first.to_string());
        fixed(&mut options, 43);
        let other = readings(&options).await;
        assert_ne!(
            other[1], first[1],
            "{name}: another seed, the same Math.random"
        );
        assert_ne!(other[6], first[6], "{name}: another seed, the same UUID");
        assert_eq!(other[0], first[0], "{name}: the seed moved the clock");
    }
    assert_eq!(seen.len(), 1, "the engines disagree: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_60_second_timer_on_the_virtual_clock_takes_no_real_time() {
    let script = r#"
    export default async function (args, g) {
      const t0 = Date.now();
      await new Promise((resolve) => setTimeout(resolve, 60000));
      const afterTimer = Date.now() - t0;
      await Promise.all([g.sleep(1000), g.sleep(3000), g.sleep(2000)]);
      return [afterTimer, Date.now() - t0, performance.now()];
    }"#;
    for engine in common::engines() {
        let name = engine.name();
        let (mut options, sink, _) = common::options(engine, json!({}));
        fixed(&mut options, 1);
        let watch = Stopwatch::start();
        let outcome = common::run(script, json!({}), &options).await;
        let wall = watch.elapsed();
        eprintln!("{name}: a 63 s virtual wait took {wall:?} of real time");
        assert_eq!(outcome.result, Some(json!([60000, 63000, 63000])), "{name}");
        // Generous: the machine is shared; the point is that it is not a minute.
        assert!(wall < Duration::from_secs(10), "{name}: {wall:?}");
        let last = sink.events().last().cloned().expect("events");
        assert_eq!(
            last.elapsed_ms, 63000,
            "{name}: the trace runs on the run clock"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mock_agents_latency_moves_the_virtual_clock_and_slots_keep_their_order() {
    let script = r#"
    export default async function (args, g) {
      const t0 = Date.now();
      const ends = [];
      await Promise.all([1, 2, 3].map(async (i) => {
        await g.agent({ prompt: "p" + i, label: "slow" });
        ends.push([i, Date.now() - t0]);
      }));
      // Due at the same time: in the order the graph started them, every run.
      const order = [];
      await Promise.all([
        ...[4, 5, 6].map((i) => g.agent({ prompt: "p" + i, label: "instant" }).then(() => order.push(i))),
        g.sleep(0).then(() => order.push("sleep")),
      ]);
      return [...ends, order];
    }"#;
    let replies = json!({
        "replies": [{"label": "instant", "text": "now", "tokens": 1}],
        "default": {"text": "ok", "tokens": 1, "latency_ms": 5000},
    });
    for engine in common::engines() {
        let name = engine.name();
        let (mut options, _, _) = common::options(engine, replies.clone());
        fixed(&mut options, 1);
        options.max_concurrency = 2;
        let watch = Stopwatch::start();
        let outcome = common::run(script, json!({}), &options).await;
        assert!(watch.elapsed() < Duration::from_secs(10), "{name}");
        assert_eq!(
            outcome.result,
            Some(json!([
                [1, 5000],
                [2, 5000],
                [3, 10000],
                [4, 5, 6, "sleep"]
            ])),
            "{name}: {outcome:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_time_is_whole_milliseconds_and_the_trace_names_the_seed() {
    let script = r#"
    export default function () {
      const readings = [];
      const t0 = performance.now();
      // Until at least 5 ms passed (a bounded loop: never more than 200,000 readings).
      for (let i = 0; i < 200000 && performance.now() - t0 < 5; i++) readings.push(performance.now());
      const steps = readings.slice(1).map((r, i) => r - readings[i]);
      return {
        whole: readings.every(Number.isInteger) && Number.isInteger(Date.now()),
        fine: steps.filter((d) => d !== 0 && d < 1).length,
        backwards: steps.filter((d) => d < 0).length,
        random: Math.random(),
      };
    }"#;
    for engine in common::engines() {
        let name = engine.name();
        let sink = std::sync::Arc::new(CollectingSink::default());
        let mut options = RunOptions::new(engine);
        options.events = sink.clone();
        let outcome = common::run(script, json!({}), &options).await;
        let result = outcome.result.clone().expect("a result");
        assert_eq!(result["whole"], json!(true), "{name}: {result}");
        assert_eq!(result["fine"], json!(0), "{name}: {result}");
        assert_eq!(result["backwards"], json!(0), "{name}: {result}");
        let events = sink.events();
        let Some(EventKind::RunStarted { seed, clock, .. }) = events.first().map(|e| &e.kind)
        else {
            panic!("{name}: the trace does not start with the run");
        };
        assert_eq!(clock, "real", "{name}");
        // The seed in the trace replays the run's randomness.
        options.seed = Some(*seed);
        options.events = std::sync::Arc::new(CollectingSink::default());
        let again = common::run(script, json!({}), &options).await;
        assert_eq!(
            again.result.expect("a result")["random"],
            result["random"],
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_graphs_side_by_side_draw_their_own_streams() {
    // Three nested graphs run at once; whatever order the machine runs them in, each one's
    // numbers are the same on every run.
    let child = r#"
    export const meta = { name: "Child", slug: "child", version: "1.0.0", description: "d" };
    export default async function (args, g) {
      await g.sleep(args.wait);
      return [Math.random(), Date.now()];
    }"#;
    let parent = r#"
    export default async function (args, g) {
      return Promise.all([30, 10, 20].map((wait) => g.graph("child", { wait })));
    }"#;
    let mut seen = BTreeSet::new();
    for engine in common::engines() {
        let name = engine.name();
        let (mut options, _, _) = common::options(engine, json!({}));
        fixed(&mut options, 9);
        let mut catalog = FolderCatalog::default();
        catalog.insert(GraphSource {
            meta: graph_js::describe(child, &graph_js::Limits::default()).expect("meta"),
            script: child.into(),
            file: None,
            engine: None,
        });
        options.catalog = std::sync::Arc::new(catalog);
        let first = common::run(parent, json!({}), &options).await;
        assert_eq!(first.status, RunStatus::Completed, "{name}: {first:?}");
        for _ in 0..5 {
            assert_eq!(
                common::run(parent, json!({}), &options).await.result,
                first.result,
                "{name}"
            );
        }
        let result = first.result.expect("a result");
        assert_eq!(result[0][1], json!(START_MS + 30), "{name}");
        assert_ne!(result[0][0], result[1][0], "{name}: two graphs, one stream");
        seen.insert(result.to_string());
    }
    assert_eq!(seen.len(), 1, "the engines disagree: {seen:?}");
}

/// The interfaces the guest component imports, read from its binary: every `wasi:` or
/// `graphrelay:` interface name in it (import names are plain UTF-8 there).
fn component_imports() -> BTreeSet<String> {
    let wasm = runner::engine::wasm::GUEST_WASM;
    let mut found = BTreeSet::new();
    for prefix in [&b"wasi:"[..], &b"graphrelay:"[..]] {
        let mut at = 0;
        while let Some(start) = wasm[at..]
            .windows(prefix.len())
            .position(|w| w == prefix)
            .map(|p| p + at)
        {
            let end = wasm[start..]
                .iter()
                .position(|b| !(b.is_ascii_alphanumeric() || b"-:/_".contains(b)))
                .map_or(wasm.len(), |p| p + start);
            // `wasi:io/streams@0.2.6` → `wasi:io/streams`.
            let name = String::from_utf8_lossy(&wasm[start..end]).into_owned();
            if name.contains('/') {
                found.insert(name);
            }
            at = end.max(start + 1);
        }
    }
    found
}

/// The rows of ARCHITECTURE.md's table "What a graph can learn about time, randomness and the
/// machine": the interface in its first column, with where it is answered from.
fn documented_imports() -> Vec<(String, String)> {
    let doc = include_str!("../../ARCHITECTURE.md");
    let table = doc
        .split("| guest import | answered by | what the graph learns |")
        .nth(1)
        .expect("ARCHITECTURE.md has the time and randomness table");
    table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            Some((
                cells.get(1)?.trim_matches('`').to_owned(),
                (*cells.get(2)?).to_owned(),
            ))
        })
        .collect()
}

#[test]
fn the_component_imports_no_clock_or_random_source_outside_the_design() {
    let imports = component_imports();
    // The scan is not vacuous: it sees the contract and the clocks the standard library links.
    for known in [
        "graphrelay:graph/host",
        "wasi:clocks/wall-clock",
        "wasi:random/random",
    ] {
        assert!(imports.contains(known), "{known} not found in {imports:?}");
    }
    let documented = documented_imports();
    for import in &imports {
        let Some((_, answered_by)) = documented.iter().find(|(name, _)| name == import) else {
            panic!("the guest imports {import}, which ARCHITECTURE.md's table does not name");
        };
        // Time and randomness come from the run, never from the machine.
        if import.starts_with("wasi:clocks/") {
            assert!(answered_by.contains("run clock"), "{import}: {answered_by}");
        }
        if import.starts_with("wasi:random/") {
            assert!(
                answered_by.contains("random stream"),
                "{import}: {answered_by}"
            );
        }
        assert!(!answered_by.contains("machine"), "{import}: {answered_by}");
    }
}
