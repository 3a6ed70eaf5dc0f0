//! The desktop's state on a full disk (issue 33): a run that finishes while the state cannot
//! be written is still delivered (the agent reads its result), kept in memory, and recorded
//! once in the history when space returns; below the free-space floor no run starts and
//! `get_graph_run` says why (`desktop: disk full`). On a full disk `relay desktop run` and the
//! lists name the disk and the file (the lists still work, read-only), and a compiled graph
//! that would cross the floor is not written: its runs start on the generic engine (issue 49).
//!
//! The state lives on a small tmpfs of the test's own (root only). Where mounting is refused
//! the test says so on stderr and checks nothing.

use crate::harness;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use harness::World;
use relay_desktop::state::DesktopState;
use relay_desktop::{DesktopConfig, Relay};
use relay_protocol::clock::{SystemClock, Timestamp};
use relay_testkit::tmpfs::{Tmpfs, fill};
use runner::engine::EngineKind;
use runner::host::approvals::Policy;
use serde_json::{Value, json};

/// Waits until a file named `go` is in its folder, then returns `args.n` characters.
const WAITS_FOR_GO: &str = r#"
export const meta = {name: "Waits for go", slug: "waits", version: "1.0.0"};
export default async function (args, g) {
  for (;;) {
    const listing = await g.tool("fs.list", {path: "."});
    if (JSON.stringify(listing).includes("\"go\"")) break;
    await g.sleep(50);
  }
  return {report: "r".repeat(args.n)};
}
"#;

/// The floor the relay keeps free in this test: far below the tmpfs, far above a full one.
const FLOOR: u64 = 2 * 1024 * 1024;

/// A relay over a state on `dir` (the tmpfs), sharing [`WAITS_FOR_GO`], with its fs folder
/// `folder` (elsewhere).
async fn relay_on_small_disk(world: &World, dir: &Path, folder: &Path) -> Arc<Relay> {
    let state = DesktopState::open(&dir.join("desktop.db")).expect("state on the tmpfs");
    let meta = graph_js::describe(WAITS_FOR_GO, &Default::default()).expect("meta");
    let now = Timestamp::from_unix_millis(1);
    let session = state
        .upsert_session(&meta, WAITS_FOR_GO, None, now)
        .expect("session");
    state.share(&world.project, &session, now).expect("share");
    state
        .set_project_enabled(&world.project, true, now)
        .expect("enable");
    state.set_folder(folder).expect("folder");
    state.set_policy("fs.list", Policy::Allow).expect("policy");
    let config = DesktopConfig {
        min_free_space: FLOOR,
        ..harness::fast_config()
    };
    world.relay_over(
        state,
        Arc::new(SystemClock),
        EngineKind::Boa.build().expect("boa"),
        config,
    )
}

/// Polls `done` every 50 ms for at most 30 s.
async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn rows_of(relay: &Relay, command: &str) -> Vec<relay_desktop::state::HistoryRow> {
    relay
        .state()
        .history()
        .expect("history readable on a full disk")
        .into_iter()
        .filter(|row| row.command_id == command)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_the_desktop_state_loses_no_result_and_starts_no_run() {
    let Some(small) = Tmpfs::mount("16m") else {
        eprintln!("SKIPPED: the desktop's full-disk checks did not run");
        return;
    };
    let world = World::new(json!({"replies": []})).await;
    let folder = world.state_dir.path().join("shared");
    std::fs::create_dir_all(&folder).expect("folder");
    let relay = relay_on_small_disk(&world, &small.dir, &folder).await;
    relay.pass(&Default::default()).await;
    let session = relay.state().sessions().expect("sessions")[0].id.clone();
    let (stop, task) = harness::start(&relay);

    // A run that ends while the disk is full reaches the agent.
    let n = 90_000;
    let command = world.queue(&session, "key-full-1", json!({"n": n})).await;
    eventually("the run starts", async || {
        world.get(&command).await["status"] == "running"
    })
    .await;
    let filler = fill(&small.dir);
    assert!(
        relay_desktop::disk::free_bytes(&small.dir).expect("statvfs") < FLOOR,
        "the tmpfs is full"
    );
    std::fs::write(folder.join("go"), "").expect("go");
    let run = world.wait_terminal(&command, Duration::from_secs(30)).await;
    assert_eq!(run["status"], "completed", "{run}");
    let report = run["result"]["report"]
        .as_str()
        .expect("the result reached the agent");
    assert_eq!(report.len(), n);
    let rows = rows_of(&relay, &command);
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0].status, "running",
        "the state could not take the end yet"
    );

    let waiting = no_run_starts_below_the_floor(&world, &relay, &session).await;

    // Space returns: the first run's end is recorded once, the waiting run runs.
    std::fs::remove_file(&filler).expect("free the space");
    eventually("the history row is mended", async || {
        rows_of(&relay, &command)
            .first()
            .is_some_and(|row| row.status == "completed")
    })
    .await;
    let done = world.wait_terminal(&waiting, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["waiting_for"], Value::Null, "{done}");
    assert_eq!(done["desktop"]["problem"], Value::Null, "{done}");
    stop.cancel();
    task.await.expect("relay stops");
    history_shows_it_once(&small.dir.join("desktop.db"), &command, n);
    assert!(relay.state().outbox().expect("outbox").is_empty());
    assert_eq!(world.get(&command).await["status"], "completed");
}

/// With the disk below the floor a new run is not started, and the agent is told why; returns
/// the run.
async fn no_run_starts_below_the_floor(
    world: &World,
    relay: &Relay,
    session: &relay_protocol::GraphSessionId,
) -> String {
    let waiting = world.queue(session, "key-full-2", json!({"n": 1})).await;
    let mut seen = Value::Null;
    eventually(
        "get_graph_run says the desktop's disk is full",
        async || {
            seen = world.get(&waiting).await;
            seen["waiting_for"] == "desktop: disk full"
        },
    )
    .await;
    assert_eq!(seen["status"], "queued", "{seen}");
    assert_eq!(seen["desktop"]["online"], true, "{seen}");
    assert!(
        seen["desktop"]["problem"]
            .as_str()
            .is_some_and(|p| p.starts_with("disk full: ") && p.contains("--min-free-space")),
        "{seen}"
    );
    // Several passes later it is still not started.
    let passes = relay.stats().passes.load(Ordering::SeqCst);
    eventually("three more passes", async || {
        relay.stats().passes.load(Ordering::SeqCst) >= passes + 3
    })
    .await;
    assert_eq!(world.get(&waiting).await["status"], "queued");
    assert!(rows_of(relay, &waiting).is_empty(), "nothing of it started");
    waiting
}

/// `relay desktop history` shows `command` once, completed with its full result of `n`
/// characters.
fn history_shows_it_once(state: &Path, command: &str, n: usize) {
    let listed = std::process::Command::new(harness::relay_binary())
        .args(["desktop", "--state"])
        .arg(state)
        .args(["history", "--json"])
        .output()
        .expect("relay desktop history");
    assert!(listed.status.success(), "{listed:?}");
    let history: Value = serde_json::from_slice(&listed.stdout).expect("json");
    let rows: Vec<&Value> = history
        .as_array()
        .expect("rows")
        .iter()
        .filter(|row| row["command_id"] == command)
        .collect();
    assert_eq!(rows.len(), 1, "{history}");
    assert_eq!(rows[0]["status"], "completed");
    assert_eq!(rows[0]["result"]["report"].as_str().map(str::len), Some(n));
}

/// `relay desktop --state STATE ARGS…`.
fn desktop_cli(state: &Path) -> std::process::Command {
    let mut command = std::process::Command::new(harness::relay_binary());
    command.args(["desktop", "--state"]).arg(state);
    command
}

/// Whether `text` names the full disk, the state file and what to do.
fn names_the_full_disk(text: &str, state: &Path) -> bool {
    text.contains("is full")
        && text.contains(&state.display().to_string())
        && text.contains("free space on it")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_full_disk_run_and_the_lists_name_the_disk_and_the_file_and_lists_still_work() {
    let Some(small) = Tmpfs::mount("8m") else {
        eprintln!("SKIPPED: the desktop's full-disk messages were not checked");
        return;
    };
    let world = World::new(json!({"replies": []})).await;
    let state = small.dir.join("desktop.db");
    let folder = world.state_dir.path().join("shared");
    std::fs::create_dir_all(&folder).expect("folder");
    drop(relay_on_small_disk(&world, &small.dir, &folder).await);
    let filler = fill(&small.dir);

    for list in [
        &["history", "--json"][..],
        &["shares", "--json"],
        &["session", "list"],
    ] {
        let listed = desktop_cli(&state).args(list).output().expect("a list");
        let said = String::from_utf8_lossy(&listed.stderr);
        assert!(
            listed.status.success(),
            "{list:?} works on a full disk: {said}"
        );
        assert!(names_the_full_disk(&said, &state), "{list:?}: {said}");
    }
    let shares = desktop_cli(&state)
        .args(["shares", "--json"])
        .output()
        .expect("shares");
    let shares: Value = serde_json::from_slice(&shares.stdout).expect("json");
    assert_eq!(
        shares.as_array().map(Vec::len),
        Some(1),
        "read as it stands: {shares}"
    );

    let log = world.state_dir.path().join("run.log");
    let mut run = desktop_cli(&state)
        .args([
            "run",
            "--service",
            &world.service.base,
            "--token",
            &world.desktop_token,
        ])
        .args(["--engine", "boa"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("relay desktop run");
    eventually(
        "`relay desktop run` names the full disk and the file",
        async || names_the_full_disk(&std::fs::read_to_string(&log).unwrap_or_default(), &state),
    )
    .await;
    let _ = run.kill();
    let _ = run.wait();
    drop(filler);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compiled_graph_that_would_cross_the_floor_is_not_written() {
    let Some(small) = Tmpfs::mount("16m") else {
        eprintln!("SKIPPED: compiled graphs against the floor were not checked");
        return;
    };
    let world = World::new(json!({"replies": []})).await;
    let state = DesktopState::open(&small.dir.join("desktop.db")).expect("state on the tmpfs");
    let now = Timestamp::from_unix_millis(1);
    let meta = graph_js::describe(harness::BIG, &Default::default()).expect("meta");
    let session = state
        .upsert_session(&meta, harness::BIG, None, now)
        .expect("session");
    state.share(&world.project, &session, now).expect("share");
    state
        .set_project_enabled(&world.project, true, now)
        .expect("enable");
    // Room for runs, not for a compiled graph besides.
    let free = relay_desktop::disk::free_bytes(&small.dir).expect("statvfs");
    let floor = free - 4 * 1024 * 1024;
    let config = DesktopConfig {
        min_free_space: floor,
        compiled_graphs: Some(runner::engine::wasm::WasmLimits::default()),
        ..harness::fast_config()
    };
    let relay = world.relay_over(
        state,
        Arc::new(SystemClock),
        EngineKind::Boa.build().expect("boa"),
        config,
    );
    // The service learns the graph is shared before it is asked to run it.
    relay.pass(&Default::default()).await;
    let (stop, task) = harness::start(&relay);
    let command = world
        .queue(&session, "key-floor", json!({"unit": "x", "n": 3}))
        .await;
    let run = world.wait_terminal(&command, Duration::from_secs(60)).await;
    assert_eq!(run["status"], "completed", "{run}");
    let compiled = relay.compiled().expect("compiled graphs are on");
    eventually("the build is skipped for the floor", async || {
        compiled.waiting_for_room(harness::BIG)
    })
    .await;
    stop.cancel();
    task.await.expect("relay stops");
    let artifacts: Vec<_> = std::fs::read_dir(compiled.dir())
        .map(|dir| dir.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(artifacts.is_empty(), "nothing written: {artifacts:?}");
    assert!(
        compiled.failure(harness::BIG).is_none(),
        "not a failure: tried again later"
    );
    let left = relay_desktop::disk::free_bytes(&small.dir).expect("statvfs");
    assert!(left >= floor, "{left} bytes left, floor {floor}");
}
