//! Start-up and speed of the wasm sandbox against boa in-process.
//!
//! `cargo bench -p runner --bench sandbox` runs everything; a filter picks one group, e.g.
//! `cargo bench -p runner --bench sandbox -- cached_start`. The issue's targets: cached start of
//! the generic engine ≤ 5 ms to the graph's first statement, compiled-graph start ≤ 2 ms, a
//! 1e6-iteration loop in boa-in-wasm ≤ 2.5× native boa.
//!
//! `BENCH_ALT_GUEST=path/to/guest.wasm` adds that guest component to the loop comparison, to
//! try other guest build settings without rebuilding the runner; `BENCH_VARIANTS` adds several,
//! each with its own guest and engine settings (see [`variants`]), and `BENCH_PAIRS=N` runs N
//! interleaved rounds instead of 15. `-- loop_1e6/none` skips criterion's samples and runs only
//! the rounds.
//!
//! `start_to_first_call` measures the sandbox's start from the instance's creation to the
//! graph's first host call (the issue's figure: ≤ 0.1 ms compiled, ≤ 0.2 ms generic), pooled
//! and on demand; `-- start_to_first_call` runs only it.
//!
//! `BENCH_START_RUNS=N` times N starts of each kind by the process's CPU time as well as the wall
//! clock (see [`start_cpu`]): the figure to compare two builds by on a machine busy with other
//! work. It runs each kind with and without the pooling allocator, taking turns.

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use runner::engine::Engine;
use runner::engine::boa::BoaEngine;
use runner::engine::wasm::{
    ComponentCache, GUEST_SHA256, GUEST_WASM, Source, WasmEngine, WasmLimits, probe,
};
use runner::host::mock::MockProvider;
use runner::run::{RunOptions, RunRequest, RunStatus, run_graph};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The smallest graph: the time to run it is the time to its first statement and back.
const TRIVIAL: &str = "export default function () { return 1; }";

/// A graph with a body worth parsing (about the size of the examples in `graphs/`).
const TYPICAL: &str = r#"
export const meta = {name: "Typical", slug: "typical", version: "1"};
function route(kind) {
  switch (kind) {
    case "bug": return {team: "eng", priority: 1};
    case "billing": return {team: "finance", priority: 2};
    default: return {team: "support", priority: 3};
  }
}
export default async function (args, g) {
  const kinds = ["bug", "billing", "question"];
  const routed = kinds.map(route);
  const merged = routed.reduce((acc, r) => ({...acc, [r.team]: r.priority}), {});
  return {routed: routed.length, merged};
}
"#;

const LOOP_1E6: &str = "export default function () { let s = 0; for (let i = 0; i < 1000000; i++) { s += i; } return s; }";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn options(engine: Arc<dyn Engine>) -> RunOptions {
    let mut options = RunOptions::new(engine);
    options.provider =
        Arc::new(MockProvider::from_json(json!({"default": {"text": "ok"}})).expect("mock"));
    options
}

/// `script` with a `meta` export at its end when it has none: every run checks a graph's meta.
/// (An empty script, a compiled graph's, stays empty.)
fn with_meta(script: &str) -> String {
    if script.is_empty() || script.contains("export const meta") {
        script.to_owned()
    } else {
        format!("{script}\nexport const meta = {{name: \"T\", slug: \"t\", version: \"1\"}};\n")
    }
}

async fn run(script: &str, options: &RunOptions) {
    let outcome = run_graph(
        RunRequest {
            script: with_meta(script).into(),
            args: json!({}),
            graph: "bench.js".into(),
            run_id: Some("bench".into()),
        },
        options,
        CancellationToken::new(),
    )
    .await;
    assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
}

/// A cache of one component over the disk cache in `dir` (none: no disk cache), so every load
/// from a new one compiles or reads the disk.
fn fresh(dir: Option<&std::path::Path>) -> ComponentCache {
    ComponentCache::with_disk_cache(1, dir.map(std::path::Path::to_path_buf))
}

/// Compiling the guest with no cache at all (what the very first run on a machine pays).
fn cold_start(c: &mut Criterion) {
    let mut group = c.benchmark_group("cold_start");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(40));
    group.bench_function("compile_guest_no_cache", |b| {
        b.iter(|| {
            let (_, source) = fresh(None)
                .load(GUEST_WASM, GUEST_SHA256, WasmLimits::default())
                .expect("compiles");
            assert_eq!(source, Source::Compiled);
        });
    });
    // What `WasmEngine::new` pays once per machine: snapshot the guest with the prelude
    // evaluated, then compile the snapshot.
    group.bench_function("pre_initialize_and_compile_no_cache", |b| {
        b.iter(|| {
            let (_, source) = fresh(None)
                .load_generic(WasmLimits::default())
                .expect("pre-initializes");
            assert_eq!(source, Source::Compiled);
        });
    });
    group.finish();
}

/// Loading the compiled guest from the disk cache (a new process's first run).
fn disk_cache_load(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, source) = fresh(Some(dir.path()))
        .load_generic(WasmLimits::default())
        .expect("primes the cache");
    assert_eq!(source, Source::Compiled);
    c.bench_function("disk_cache_load", |b| {
        b.iter(|| {
            let (_, source) = fresh(Some(dir.path()))
                .load_generic(WasmLimits::default())
                .expect("loads");
            assert_eq!(source, Source::Disk);
        });
    });
}

/// The generic guest already loaded: instantiate, parse, run a graph, return. `wasm` is the
/// pre-initialized guest `WasmEngine::new` gives (the prelude is in the snapshot);
/// `wasm_no_snapshot` creates the interpreter and evaluates the prelude on every run.
fn cached_start(c: &mut Criterion) {
    let rt = runtime();
    let wasm: Arc<dyn Engine> = Arc::new(WasmEngine::new(WasmLimits::default()).expect("sandbox"));
    let (plain, _) = fresh(None)
        .load(GUEST_WASM, GUEST_SHA256, WasmLimits::default())
        .expect("compiles");
    let plain: Arc<dyn Engine> = Arc::new(plain);
    let boa: Arc<dyn Engine> = Arc::new(BoaEngine::default());
    let mut group = c.benchmark_group("cached_start");
    for (name, engine) in [("wasm", &wasm), ("wasm_no_snapshot", &plain), ("boa", &boa)] {
        let options = options(engine.clone());
        for (graph, script) in [("trivial", TRIVIAL), ("typical", TYPICAL)] {
            group.bench_function(format!("{name}/{graph}"), |b| {
                b.iter(|| rt.block_on(run(script, &options)));
            });
        }
    }
    group.finish();
}

/// Starts timed by the process's CPU time as well as the wall clock, when `BENCH_START_RUNS=N`
/// asks for N runs of each: the generic engine's (trivial and typical graph) and a compiled
/// graph's. On a machine shared with other work the wall clock moves with the load, the CPU time
/// (all of the process's threads: the runtime's, the epoch ticker's) much less, which makes two
/// builds comparable run after run.
fn start_cpu(_: &mut Criterion) {
    if !asked_for("start_cpu") {
        return;
    }
    let Some(runs) = std::env::var("BENCH_START_RUNS")
        .ok()
        .and_then(|n| n.parse::<u32>().ok())
    else {
        return;
    };
    let rt = runtime();
    let cases = pool_cases(&rt, &[("trivial", TRIVIAL), ("typical", TYPICAL)]);
    for round in 1..=START_ROUNDS {
        for (name, engine, script) in &cases {
            let options = options(engine.clone());
            rt.block_on(run(script, &options));
            let (cpu, wall) = (process_cpu(), runner::clock::Stopwatch::start());
            for _ in 0..runs {
                rt.block_on(run(script, &options));
            }
            let per_run = |total: Duration| total.as_secs_f64() * 1000.0 / f64::from(runs);
            println!(
                "start_cpu {name} (round {round}): {runs} runs, wall {:.3} ms a run, on-CPU {:.3} ms a run",
                per_run(wall.elapsed()),
                per_run(process_cpu().saturating_sub(cpu))
            );
        }
    }
}

/// Rounds of [`start_cpu`]: each case's runs, the cases taking turns.
const START_ROUNDS: u32 = 3;

/// A start case: its name, its engine and the script it runs (empty for a compiled graph).
type StartCase = (String, Arc<dyn Engine>, &'static str);

/// [`start_cases`] with and without the pooling allocator, side by side: an engine takes the
/// allocator from the variable when it is made.
fn pool_cases(rt: &tokio::runtime::Runtime, graphs: &[(&str, &'static str)]) -> Vec<StartCase> {
    let mut cases = Vec::new();
    for (allocator, pool) in [("on-demand", "0"), ("pooled", "1")] {
        // SAFETY: set before any thread of this benchmark reads the environment.
        unsafe { std::env::set_var(runner::engine::wasm::POOL_VARIABLE, pool) };
        cases.extend(start_cases(rt, allocator, graphs));
    }
    cases
}

/// The generic engine with each of `graphs` and a compiled graph of each, named with
/// `allocator`.
fn start_cases(
    rt: &tokio::runtime::Runtime,
    allocator: &str,
    graphs: &[(&str, &'static str)],
) -> Vec<StartCase> {
    let wasm: Arc<dyn Engine> = Arc::new(WasmEngine::new(WasmLimits::default()).expect("sandbox"));
    let mut cases: Vec<StartCase> = Vec::new();
    for &(graph, script) in graphs {
        cases.push((format!("wasm/{graph} {allocator}"), wasm.clone(), script));
        let bytes = rt
            .block_on(runner::engine::wasm::build_component(
                &with_meta(script),
                WasmLimits::default(),
            ))
            .expect("builds");
        let hash = format!("bench-start-cpu-{graph}-{allocator}-{}", bytes.len());
        let (engine, _) = fresh(None)
            .load(&bytes, &hash, WasmLimits::default())
            .expect("loads");
        cases.push((
            format!("compiled/{graph} {allocator}"),
            Arc::new(engine),
            "",
        ));
    }
    cases
}

/// The trivial graph with a host call as its first statement.
const TRIVIAL_CALL: &str = "export default function (a, g) { g.budget(); return 1; }";

/// [`TYPICAL`] with a host call as the first statement of its default export.
static TYPICAL_CALL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    TYPICAL.replacen("(args, g) {\n", "(args, g) {\n  g.budget();\n", 1)
});

/// The sandbox's start as the issue measures it: from the instance's creation (its store made,
/// then wasmtime's instantiation) to the graph's first host call (`g.budget()`, the first
/// statement of its default export), from a warm engine, each start recorded by the runner's
/// probe. The generic sandbox parses and evaluates the graph in that time; a compiled graph
/// has it parsed and evaluated in its snapshot. Pooled and on-demand engines take turns, three
/// rounds of `BENCH_START_RUNS` starts each (default 500); median and 90th percentile.
fn start_to_first_call(_: &mut Criterion) {
    if !asked_for("start_to_first_call") {
        return;
    }
    let runs = std::env::var("BENCH_START_RUNS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(500);
    println!(
        "start_to_first_call: the kernel's PAGEMAP_SCAN (pooled slots reset in place) is {}",
        if wasmtime::PoolingAllocationConfig::is_pagemap_scan_available() {
            "available"
        } else {
            "not available"
        }
    );
    let rt = runtime();
    let typical: &'static str = &TYPICAL_CALL;
    let graphs = [("trivial", TRIVIAL_CALL), ("typical", typical)];
    let mut cases = pool_cases(&rt, &graphs);
    cases.extend(cases_as_before(&rt, &graphs));
    cases.extend(start_variant(&graphs));
    // `BENCH_START_CASES=TEXT`: only the cases whose name holds TEXT.
    if let Ok(only) = std::env::var("BENCH_START_CASES") {
        cases.retain(|(name, _, _)| name.contains(&only));
    }
    for round in 1..=START_ROUNDS {
        for (name, engine, script) in &cases {
            let options = options(engine.clone());
            for _ in 0..20 {
                rt.block_on(run(script, &options));
            }
            probe::start();
            for _ in 0..runs {
                rt.block_on(run(script, &options));
            }
            let starts = probe::stop();
            assert_eq!(starts.len(), runs, "one start per run");
            let median = |figure: fn(&probe::Start) -> Duration| {
                let mut figures: Vec<Duration> = starts.iter().map(figure).collect();
                figures.sort();
                figures[runs / 2].as_secs_f64() * 1000.0
            };
            let mut firsts: Vec<Duration> = starts.iter().map(|s| s.first_call).collect();
            firsts.sort();
            println!(
                "start_to_first_call {name} (round {round}): {runs} starts, median {:.4} ms, p90 {:.4} ms (medians: store made {:.4}, instantiated {:.4})",
                median(|s| s.first_call),
                firsts[runs * 9 / 10].as_secs_f64() * 1000.0,
                median(|s| s.store),
                median(|s| s.instantiated),
            );
        }
    }
}

/// The generic sandbox's cases of [`start_to_first_call`] under other settings, when asked
/// for: `BENCH_START_SETTINGS=S` loads its snapshot under the engine settings `S` (see
/// [`configure`]; `perfmap=1` to profile a start with `perf record`), `BENCH_START_GUEST=path`
/// snapshots another build of the guest component (e.g. one built without `strip`, whose
/// functions a profile then names) instead of the built-in one.
fn start_variant(graphs: &[(&str, &'static str)]) -> Vec<StartCase> {
    let settings = std::env::var("BENCH_START_SETTINGS").ok();
    let guest = std::env::var_os("BENCH_START_GUEST");
    if settings.is_none() && guest.is_none() {
        return Vec::new();
    }
    let snapshot = match &guest {
        Some(path) => {
            let bytes = std::fs::read(path).expect("BENCH_START_GUEST is readable");
            WasmEngine::generic_snapshot_of(Vec::leak(bytes))
        }
        None => WasmEngine::generic_snapshot(),
    }
    .expect("the generic snapshot");
    let settings = settings.unwrap_or_default();
    let engine: Arc<dyn Engine> = Arc::new(
        WasmEngine::load_configured(&snapshot, WasmLimits::default(), &|c| {
            configure(c, &settings)
        })
        .expect("the settings load"),
    );
    let label = match guest {
        Some(_) => format!("guest {settings}"),
        None => settings,
    };
    graphs
        .iter()
        .map(|&(graph, script)| (format!("wasm/{graph} {label}"), engine.clone(), script))
        .collect()
}

/// The pooled cases of [`start_to_first_call`] under the engine settings before issue 47
/// (tables filled at instantiation, 2 MiB of linear memory kept resident and reset whole), side
/// by side with today's.
fn cases_as_before(
    rt: &tokio::runtime::Runtime,
    graphs: &[(&str, &'static str)],
) -> Vec<StartCase> {
    // SAFETY: set before any thread of this benchmark reads the environment.
    unsafe { std::env::set_var(runner::engine::wasm::POOL_VARIABLE, "1") };
    let before = |config: &mut wasmtime::Config| {
        let mut pool = runner::engine::wasm::pooling();
        pool.linear_memory_keep_resident(runner::engine::wasm::POOL_KEEP_RESIDENT_BYTES)
            .pagemap_scan(wasmtime::Enabled::No);
        config
            .table_lazy_init(false)
            .allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
    };
    let load = |bytes: &[u8]| -> Arc<dyn Engine> {
        Arc::new(
            WasmEngine::load_configured(bytes, WasmLimits::default(), &before)
                .expect("loads as before"),
        )
    };
    let generic = load(&WasmEngine::generic_snapshot().expect("the generic snapshot"));
    let mut cases: Vec<StartCase> = Vec::new();
    for &(graph, script) in graphs {
        cases.push((
            format!("wasm/{graph} pooled, as before"),
            generic.clone(),
            script,
        ));
        let bytes = rt
            .block_on(runner::engine::wasm::build_component(
                &with_meta(script),
                WasmLimits::default(),
            ))
            .expect("builds");
        cases.push((
            format!("compiled/{graph} pooled, as before"),
            load(&bytes),
            "",
        ));
    }
    cases
}

/// A component from `runner build` (prelude loaded, graph parsed and evaluated by wizer).
fn compiled_graph_start(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("compiled_graph_start");
    for (graph, script) in [("trivial", TRIVIAL), ("typical", TYPICAL)] {
        let script_with_meta = with_meta(script);
        let bytes = rt
            .block_on(runner::engine::wasm::build_component(
                &script_with_meta,
                WasmLimits::default(),
            ))
            .expect("builds");
        let hash = format!("bench-compiled-{graph}-{}", bytes.len());
        let (engine, _) = fresh(None)
            .load(&bytes, &hash, WasmLimits::default())
            .expect("loads");
        let options = options(Arc::new(engine));
        group.bench_function(graph, |b| b.iter(|| rt.block_on(run("", &options))));
    }
    group.finish();
}

/// One host call from a script and back, per call: `g.budget()` (two synchronous calls,
/// `tokens-used` and `token-cap`) and an awaited `g.tool` refused by the approval policy (a
/// `start-tool`, a task on the host, and a `wait-any` that delivers its outcome). The time
/// includes the graph's start (see `cached_start`), spread over the calls.
fn host_call_round_trip(c: &mut Criterion) {
    const CALLS: u64 = 1000;
    let rt = runtime();
    let wasm: Arc<dyn Engine> = Arc::new(WasmEngine::new(WasmLimits::default()).expect("sandbox"));
    let boa: Arc<dyn Engine> = Arc::new(BoaEngine::default());
    let scripts = [
        (
            "budget",
            format!(
                "export default function (a, g) {{ let n = 0; for (let i = 0; i < {CALLS}; i++) {{ n += g.budget().used; }} return n; }}"
            ),
        ),
        (
            "denied_tool",
            format!(
                "export default async function (a, g) {{ let n = 0; for (let i = 0; i < {CALLS}; i++) {{ try {{ await g.tool('none', {{}}); }} catch (e) {{ n++; }} }} return n; }}"
            ),
        ),
    ];
    let mut group = c.benchmark_group("host_call_round_trip");
    group.throughput(Throughput::Elements(CALLS));
    for (name, engine) in [("wasm", &wasm), ("boa", &boa)] {
        let options = options(engine.clone());
        for (call, script) in &scripts {
            group.bench_function(format!("{name}/{call}"), |b| {
                b.iter(|| rt.block_on(run(script, &options)));
            });
        }
    }
    group.finish();
}

/// A million loop iterations: boa native against boa compiled to wasm.
///
/// Besides criterion's report, prints the ratio of the fastest of 15 interleaved runs of
/// each, and the median of the 15 per-round ratios: on a shared machine the means move with
/// the load, these two much less. It prints them twice: by the wall clock, and by the
/// process's CPU time (all threads), which other processes on the machine move less.
fn loop_1e6(c: &mut Criterion) {
    const PAIRS: usize = 15;
    if !asked_for("loop_1e6") {
        return;
    }
    let rt = runtime();
    let wasm: Arc<dyn Engine> = Arc::new(WasmEngine::new(WasmLimits::default()).expect("sandbox"));
    let boa: Arc<dyn Engine> = Arc::new(BoaEngine::default());
    let mut engines = vec![("boa_native", boa), ("boa_in_wasm", wasm)];
    // An alternative guest (built with other settings) to compare against, when given.
    if let Some(path) = std::env::var_os("BENCH_ALT_GUEST") {
        let bytes = std::fs::read(&path).expect("BENCH_ALT_GUEST is readable");
        let (alt, _) = fresh(None)
            .load(
                &bytes,
                &format!("bench-alt-guest-{}", bytes.len()),
                WasmLimits::default(),
            )
            .expect("the alternative guest loads");
        engines.push(("boa_in_wasm_alt_guest", Arc::new(alt)));
    }
    engines.extend(variants());
    let options: Vec<(&str, RunOptions)> = engines
        .into_iter()
        .map(|(name, engine)| (name, options(engine)))
        .collect();
    let mut group = c.benchmark_group("loop_1e6");
    group.sample_size(20);
    for (name, options) in &options {
        group.bench_function(*name, |b| b.iter(|| rt.block_on(run(LOOP_1E6, options))));
    }
    group.finish();
    if std::env::var_os("BENCH_NO_PAIRS").is_some() {
        return;
    }
    let pairs = std::env::var("BENCH_PAIRS")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(PAIRS);
    // wall[i][k], cpu[i][k]: engine i in round k; the engines take turns within each round.
    let mut wall = vec![Vec::with_capacity(pairs); options.len()];
    let mut cpu = vec![Vec::with_capacity(pairs); options.len()];
    for _ in 0..pairs {
        for (i, (_, options)) in options.iter().enumerate() {
            let cpu_before = process_cpu();
            let started = runner::clock::Stopwatch::start();
            rt.block_on(run(LOOP_1E6, options));
            wall[i].push(started.elapsed());
            cpu[i].push(process_cpu().saturating_sub(cpu_before));
        }
    }
    let names: Vec<&str> = options.iter().map(|(name, _)| *name).collect();
    report_ratios("wall", &names, &wall);
    report_ratios("on-CPU", &names, &cpu);
}

/// The engines `BENCH_VARIANTS` names: `name=guest.wasm|settings;name2=|settings2`, each a guest
/// component (empty: the built-in guest) loaded without the snapshot, like `BENCH_ALT_GUEST`
/// (so compare them with a variant `ctl=|`, not with `boa_in_wasm`), compiled by an engine
/// with the production settings and then `settings` (comma-separated; see [`configure`]).
fn variants() -> Vec<(&'static str, Arc<dyn Engine>)> {
    let Ok(spec) = std::env::var("BENCH_VARIANTS") else {
        return Vec::new();
    };
    let mut engines: Vec<(&'static str, Arc<dyn Engine>)> = Vec::new();
    for variant in spec.split(';').filter(|v| !v.is_empty()) {
        let (name, rest) = variant
            .split_once('=')
            .expect("BENCH_VARIANTS: name=path|settings");
        let (path, settings) = rest.split_once('|').unwrap_or((rest, ""));
        let bytes = if path.is_empty() {
            GUEST_WASM.to_vec()
        } else {
            std::fs::read(path).expect("the variant's guest is readable")
        };
        let mut limits = WasmLimits::default();
        if settings.split(',').any(|s| s == "fuel") {
            limits.fuel = Some(u64::MAX / 4);
        }
        let engine = WasmEngine::load_configured(&bytes, limits, &|c| configure(c, settings))
            .expect("the variant loads");
        engines.push((
            Box::leak(name.to_owned().into_boxed_str()),
            Arc::new(engine),
        ));
    }
    engines
}

/// Applies a variant's settings: `opt=speed|speed_and_size|none`, `regalloc=single_pass`,
/// `epoch=0`, `lazy=1`/`lazy=0` (tables filled as used, the default, or at instantiation), `inline=yes`, `move=0` (memory may not move),
/// `pool=0` (no pooling allocator),
/// `perfmap=1` (a perf map in /tmp for `perf report`), `fuel` (fuel on, with a budget too
/// large to run out), `flag:NAME=VALUE` (a Cranelift flag).
fn configure(config: &mut wasmtime::Config, settings: &str) {
    use wasmtime::{Inlining, OptLevel, ProfilingStrategy, RegallocAlgorithm};
    for setting in settings.split(',').filter(|s| !s.is_empty()) {
        match setting {
            "opt=none" => {
                config.cranelift_opt_level(OptLevel::None);
            }
            "opt=speed" => {
                config.cranelift_opt_level(OptLevel::Speed);
            }
            "opt=speed_and_size" => {
                config.cranelift_opt_level(OptLevel::SpeedAndSize);
            }
            "regalloc=single_pass" => {
                config.cranelift_regalloc_algorithm(RegallocAlgorithm::SinglePass);
            }
            "epoch=0" => {
                config.epoch_interruption(false);
            }
            "lazy=1" => {
                config.table_lazy_init(true);
            }
            "lazy=0" => {
                config.table_lazy_init(false);
            }
            "inline=yes" => {
                config.compiler_inlining(Inlining::Yes);
            }
            "move=0" => {
                config.memory_may_move(false);
            }
            "pool=0" => {
                config.allocation_strategy(wasmtime::InstanceAllocationStrategy::OnDemand);
            }
            "perfmap=1" => {
                config.profiler(ProfilingStrategy::PerfMap);
            }
            "fuel" => {}
            other => {
                let (name, value) = other
                    .strip_prefix("flag:")
                    .and_then(|f| f.split_once('='))
                    .unwrap_or_else(|| panic!("BENCH_VARIANTS: unknown setting {other}"));
                // SAFETY: only benchmarks set Cranelift flags, to measure them; wasmtime
                // checks the flag's name and value.
                unsafe { config.cranelift_flag_set(name, value) };
            }
        }
    }
}

/// Whether the bench's command line asks for `name`: no filter, a filter it contains, or one
/// naming a part of it (`loop_1e6/none`), for the work criterion's filter does not reach.
fn asked_for(name: &str) -> bool {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    filters.is_empty()
        || filters
            .iter()
            .any(|f| name.contains(f.as_str()) || f.starts_with(&format!("{name}/")))
}

/// The CPU time of all of this process's threads, finished ones included (`getrusage`): unlike
/// the wall clock, it does not grow while other processes hold the machine's cores.
fn process_cpu() -> Duration {
    // SAFETY: `getrusage` only writes the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return Duration::ZERO;
        }
        usage
    };
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
}

/// Prints, for each engine, its fastest run against the first engine's fastest (boa native),
/// and the median of the per-round ratios.
fn report_ratios(clock: &str, names: &[&str], times: &[Vec<Duration>]) {
    let fastest: Vec<Duration> = times
        .iter()
        .map(|t| t.iter().copied().min().unwrap_or(Duration::MAX))
        .collect();
    for (i, name) in names.iter().enumerate() {
        // The median of the per-round ratios: a round slowed for one engine only moves it little.
        let mut ratios: Vec<f64> = times[i]
            .iter()
            .zip(&times[0])
            .map(|(t, native)| t.as_secs_f64() / native.as_secs_f64())
            .collect();
        ratios.sort_by(f64::total_cmp);
        println!(
            "loop_1e6 ({clock}): {name} fastest of {}: {:?}, {:.2}× boa native; median of the per-round ratios {:.2}×",
            times[i].len(),
            fastest[i],
            fastest[i].as_secs_f64() / fastest[0].as_secs_f64(),
            ratios[ratios.len() / 2]
        );
    }
}

criterion_group!(
    benches,
    start_to_first_call,
    start_cpu,
    cached_start,
    compiled_graph_start,
    host_call_round_trip,
    loop_1e6,
    disk_cache_load,
    cold_start
);
criterion_main!(benches);
