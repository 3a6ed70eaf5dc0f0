//! End to end: compiled graphs on the desktop. A shared session is compiled into a component
//! of its own beside the state file, and remote runs start from it (the trace names the engine
//! `wasm-compiled`); a changed graph runs its new code from a new artifact; a corrupt artifact
//! is built again; a graph that cannot be compiled runs on the generic engine.
//!
//! `start_time_per_run` (ignored: figures, not assertions) prints the start time per run on
//! the relay's path with and without compiled graphs:
//! `cargo test --workspace --test e2e -- --ignored --nocapture start_time_per_run`.

use crate::harness;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use harness::World;
use relay_desktop::Relay;
use relay_desktop::compiled::{COMPILED_ENGINE, CompiledGraphs, artifact_dir};
use runner::engine::wasm::WasmLimits;
use runner::engine::{Engine, EngineKind};
use runner::host::events::EventKind;
use runner::run::{RunOptions, RunRequest, RunStatus, run_graph};
use serde_json::{Value, json};

/// A graph that does not call agents: what it returns names its version.
fn graph(version: u32) -> String {
    format!(
        r#"
export const meta = {{name: "Doubler", slug: "doubler", version: "{version}.0.0"}};
const factor = {version} + 1;
export default async function (args) {{ return {{version: {version}, doubled: args.n * factor}}; }}
"#
    )
}

/// A relay on the wasm engine with compiled graphs on, with fast intervals.
fn compiling_relay(world: &World) -> Arc<Relay> {
    world.relay_with(
        EngineKind::Wasm.build().expect("wasm"),
        relay_desktop::DesktopConfig {
            compiled_graphs: Some(WasmLimits::default()),
            ..harness::fast_config()
        },
    )
}

fn artifacts(world: &World) -> PathBuf {
    artifact_dir(&world.state_dir.path().join("desktop.db"))
}

/// The artifact files now, sorted.
fn artifact_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "wasm"));
    files.sort();
    files
}

/// Waits (at most two minutes: a build takes seconds of CPU) until `done` holds.
async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The engines the runs so far started on, in order.
fn engines(world: &World) -> Vec<String> {
    world
        .events
        .events()
        .into_iter()
        .filter_map(|event| match event.kind {
            EventKind::RunStarted { engine, .. } => Some(engine),
            _ => None,
        })
        .collect()
}

/// Queues a run of the shared doubler with `n`, runs one pass of `relay` (unless its loop
/// runs: `None`), and returns the finished run.
async fn run_once(
    world: &World,
    relay: Option<&Relay>,
    session: &relay_protocol::GraphSessionId,
    key: &str,
    n: u64,
) -> Value {
    let command = world.queue(session, key, json!({"n": n})).await;
    if let Some(relay) = relay {
        relay.pass(&Default::default()).await;
    }
    world.wait_terminal(&command, Duration::from_secs(60)).await
}

/// Waits until `script`'s compiled graph is ready on `relay`.
async fn wait_ready(relay: &Relay, script: &str) {
    let compiled = relay.compiled().expect("compiled graphs on");
    wait_for("the compiled graph ready", || {
        assert_eq!(compiled.failure(script), None, "the build failed");
        compiled.ready(script)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_graph_is_compiled_and_a_changed_one_is_compiled_again() {
    let world = World::new(json!({})).await;
    let session = world.share(&graph(1)).await;
    let relay = compiling_relay(&world);
    let dir = artifacts(&world);
    let compiled = relay.compiled().expect("compiled graphs on").clone();
    let first = compiled.artifact(&graph(1));
    // Sharing is enough: the running relay compiles the session before any run.
    let (stop, task) = harness::start(&relay);
    wait_ready(&relay, &graph(1)).await;
    let bytes = std::fs::read(&first).expect("artifact");
    assert!(bytes.starts_with(b"\0asm"), "a component");
    // Only the owner reads the folder, as the state beside it.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir)
            .expect("folder")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    }

    let run = run_once(&world, None, &session, "compiled-1", 20).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["result"], json!({"version": 1, "doubled": 40}));
    assert_eq!(engines(&world), [COMPILED_ENGINE]);

    // The owner changes the graph's code: a run at once runs the new code (on the generic
    // engine while the new artifact is built); once built, runs start from it.
    let meta = graph_js::describe(&graph(2), &Default::default()).expect("meta");
    let now = relay_protocol::clock::Timestamp::from_unix_millis(2);
    world
        .state
        .upsert_session(&meta, &graph(2), None, now)
        .expect("new code");
    let run = run_once(&world, None, &session, "compiled-2", 20).await;
    assert_eq!(run["result"], json!({"version": 2, "doubled": 60}), "{run}");
    wait_ready(&relay, &graph(2)).await;
    let run = run_once(&world, None, &session, "compiled-3", 20).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["result"], json!({"version": 2, "doubled": 60}));
    assert_eq!(
        engines(&world).last().map(String::as_str),
        Some(COMPILED_ENGINE)
    );
    let second = compiled.artifact(&graph(2));
    assert_ne!(first, second);
    assert!(second.is_file(), "the new code's artifact");
    // The relay removed the artifact no session needs any more when it saw the change.
    wait_for("the old artifact removed", || !first.exists()).await;
    assert_eq!(artifact_files(&dir), [second]);
    stop.cancel();
    task.await.expect("relay stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_artifact_is_built_again_and_the_run_still_succeeds() {
    let world = World::new(json!({})).await;
    let session = world.share(&graph(3)).await;
    let relay = compiling_relay(&world);
    // No artifact yet (the relay loop is not running): the first run starts on the generic
    // engine at once and the build starts; later runs start from the artifact.
    let run = run_once(&world, Some(&relay), &session, "corrupt-1", 1).await;
    assert_eq!(run["result"], json!({"version": 3, "doubled": 4}), "{run}");
    assert_eq!(engines(&world), ["wasm"]);
    wait_ready(&relay, &graph(3)).await;
    let run = run_once(&world, Some(&relay), &session, "corrupt-2", 2).await;
    assert_eq!(run["result"], json!({"version": 3, "doubled": 8}), "{run}");
    assert_eq!(engines(&world), ["wasm", COMPILED_ENGINE]);
    let artifact = relay.compiled().expect("on").artifact(&graph(3));
    let good = std::fs::read(&artifact).expect("artifact");

    // Cut short on disk (a crash, a bad copy), then garbage under its name: each time the
    // next run still succeeds, the artifact is built again, and runs start from it again.
    for (round, broken) in [&good[..good.len() / 2], b"not a component"]
        .into_iter()
        .enumerate()
    {
        std::fs::write(&artifact, broken).expect("break the artifact");
        let n = 10 + round as u64;
        let run = run_once(
            &world,
            Some(&relay),
            &session,
            &format!("corrupt-broken-{round}"),
            n,
        )
        .await;
        assert_eq!(run["status"], "completed", "{run}");
        assert_eq!(run["result"], json!({"version": 3, "doubled": n * 4}));
        wait_ready(&relay, &graph(3)).await;
        let rebuilt = std::fs::read(&artifact).expect("rebuilt artifact");
        assert!(rebuilt.len() > good.len() / 2 && rebuilt.starts_with(b"\0asm"));
        let run = run_once(
            &world,
            Some(&relay),
            &session,
            &format!("corrupt-fixed-{round}"),
            n,
        )
        .await;
        assert_eq!(
            run["result"],
            json!({"version": 3, "doubled": n * 4}),
            "{run}"
        );
        assert_eq!(
            engines(&world).last().map(String::as_str),
            Some(COMPILED_ENGINE)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graph_that_cannot_be_compiled_runs_on_the_generic_engine() {
    let world = World::new(json!({})).await;
    let session = world.share(&graph(4)).await;
    // The artifacts' folder cannot be made: a file has its name.
    let dir = artifacts(&world);
    std::fs::write(&dir, b"in the way").expect("a file in the way");
    let relay = compiling_relay(&world);
    let compiled = relay.compiled().expect("on").clone();
    let run = run_once(&world, Some(&relay), &session, "generic-1", 5).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["result"], json!({"version": 4, "doubled": 25}));
    wait_for("the build to fail", || {
        compiled.failure(&graph(4)).is_some()
    })
    .await;
    let why = compiled.failure(&graph(4)).unwrap_or_default();
    assert!(why.contains("cannot create the folder"), "{why}");
    let run = run_once(&world, Some(&relay), &session, "generic-2", 6).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["result"], json!({"version": 4, "doubled": 30}));
    // Both runs on the generic sandbox; the failed build is not tried again.
    assert_eq!(engines(&world), ["wasm", "wasm"]);
    assert!(!compiled.ready(&graph(4)));
    assert_eq!(std::fs::read(&dir).expect("still a file"), b"in the way");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compiled_graphs_beyond_the_most_loaded_are_dropped_and_loaded_again_from_their_file() {
    let generic = EngineKind::Wasm.build().expect("wasm");
    let dir = tempfile::tempdir().expect("tempdir");
    let compiled = Arc::new(
        CompiledGraphs::new(
            dir.path().join("desktop.db.compiled"),
            WasmLimits::default(),
            generic,
        )
        .with_max_loaded(1),
    );
    let (a, b): (Arc<str>, Arc<str>) = (graph(5).into(), graph(6).into());
    assert_eq!(compiled.engine_for(&a).name(), "wasm", "not built yet");
    wait_for("a ready", || compiled.ready(&a)).await;
    assert_eq!(compiled.engine_for(&a).name(), COMPILED_ENGINE);
    let _ = compiled.engine_for(&b);
    wait_for("b ready", || compiled.ready(&b)).await;
    // One loaded at most: a was dropped from memory, its file stays.
    assert!(!compiled.ready(&a));
    assert!(compiled.artifact(&a).is_file());
    assert_eq!(
        compiled.engine_for(&a).name(),
        "wasm",
        "a is being loaded again"
    );
    wait_for("a loaded again", || compiled.ready(&a)).await;
    assert_eq!(compiled.engine_for(&a).name(), COMPILED_ENGINE);
    assert!(!compiled.ready(&b));
    // Runs from a reloaded artifact give the graph's result.
    let request = RunRequest {
        script: a.clone(),
        args: json!({"n": 7}),
        graph: "doubler".into(),
        run_id: None,
    };
    let options = RunOptions::new(compiled.engine_for(&a));
    let outcome = run_graph(request, &options, Default::default()).await;
    assert_eq!(outcome.result, Some(json!({"version": 5, "doubled": 42})));
}

/// A graph of about 170 KB: many small functions the run must parse and evaluate.
fn big_graph() -> String {
    let mut script = String::from(
        r#"export const meta = {name: "Big", slug: "big-start", version: "1.0.0"};
const table = {};
"#,
    );
    let mut i = 0;
    while script.len() < 170 * 1024 {
        script.push_str(&format!(
            "function step{i}(x) {{ const y = x * {i} + {}; return y % 7 === 0 ? y / 7 : y + {}; }}\ntable.f{i} = step{i};\n",
            i % 13,
            i % 5
        ));
        i += 1;
    }
    script.push_str(
        "export default async function (args) { return {n: Object.keys(table).length}; }\n",
    );
    script
}

/// Milliseconds each of `rounds` runs took from choosing the engine to the outcome, as the
/// relay does it, with the compiled graphs `compiled` (or the generic engine).
async fn start_times(
    script: &str,
    generic: &Arc<dyn Engine>,
    compiled: Option<&Arc<CompiledGraphs>>,
    rounds: usize,
) -> Vec<f64> {
    let script: Arc<str> = script.into();
    let mut times = Vec::new();
    for _ in 0..rounds {
        let started = Instant::now();
        let engine = match compiled {
            Some(compiled) => compiled.engine_for(&script),
            None => generic.clone(),
        };
        let request = RunRequest {
            script: script.clone(),
            args: json!({}),
            graph: "start".into(),
            run_id: None,
        };
        let outcome = run_graph(request, &RunOptions::new(engine), Default::default()).await;
        assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "figures, not assertions: run with --ignored --nocapture"]
async fn start_time_per_run() {
    let generic = EngineKind::Wasm.build().expect("wasm");
    let dir = tempfile::tempdir().expect("tempdir");
    let compiled = Arc::new(CompiledGraphs::new(
        dir.path().join("desktop.db.compiled"),
        WasmLimits::default(),
        generic.clone(),
    ));
    let trivial = graph(9);
    let big = big_graph();
    for (name, script) in [("trivial", &trivial), ("170 KB", &big)] {
        // The generic guest is loaded, and the artifact built and loaded, once per graph
        // version, not per run.
        let _ = start_times(script, &generic, None, 1).await;
        let warm = Instant::now();
        let _ = compiled.engine_for(&Arc::from(script.as_str()));
        wait_for("the compiled graph ready", || compiled.ready(script)).await;
        let first = warm.elapsed().as_secs_f64();
        let before = start_times(script, &generic, None, 10).await;
        let after = start_times(script, &generic, Some(&compiled), 10).await;
        println!(
            "{name} graph ({} bytes): generic engine {} ms per run; compiled {} ms per run (median of 10; built and loaded in the background in {first:.1} s, meanwhile runs start on the generic engine)",
            script.len(),
            median(before),
            median(after),
        );
    }
}

fn median(mut times: Vec<f64>) -> String {
    times.sort_by(f64::total_cmp);
    format!("{:.1}", times[times.len() / 2])
}
