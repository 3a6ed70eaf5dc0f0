//! Every desktop call survives a lost request and a lost answer (issue 49, SPEC.md §7): a fault
//! proxy sits between a real desktop relay and the real service, on real sockets, and for each
//! route of the desktop API loses requests, loses answers after the service committed them,
//! resets connections, and delays answers by 5 s. For each route and fault, 20 runs each end in
//! one terminal state, execute once (each execution writes a file of its own), complete once
//! (the service never refuses a completion) and leave one history row. A `started` whose answer
//! was lost runs and completes; nothing is left `running`.
//!
//! (`released`, used only when a relay stops or restarts, is faulted in `killed_starts.rs`.)

use crate::harness;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use harness::World;
use relay_desktop::DesktopConfig;
use relay_desktop::state::DesktopState;
use relay_protocol::GraphSessionId;
use relay_protocol::clock::{SystemClock, Timestamp};
use relay_testkit::fault_proxy::{Fault, FaultProxy, Route, When};
use runner::engine::EngineKind;
use runner::host::approvals::Policy;
use serde_json::json;

/// Writes a file of its own for each execution (named by `args.n` and a random id, so a second
/// execution of the same run leaves a second file), waits a moment (so its run reports and
/// control polls go out), and returns `args.n`.
pub(crate) const COUNTS: &str = r#"
export const meta = {name: "Counts", slug: "counts", version: "1.0.0"};
export default async function (args, g) {
  await g.tool("fs.write", {path: `${args.n}-${crypto.randomUUID()}.txt`, text: "ran"});
  await g.sleep(150);
  return {n: args.n};
}
"#;

/// Runs per route and fault.
const RUNS: usize = 20;

/// The routes every run goes through, and which of their requests a fault picks: the first to
/// each command for the per-command routes, every other one for the shared ones.
const ROUTES: [(Route, When); 6] = [
    (Route::Sync, When::EveryNth(2)),
    (Route::Projects, When::EveryNth(2)),
    (Route::Started, When::FirstPerPath),
    (Route::Control, When::FirstPerPath),
    (Route::Report, When::FirstPerPath),
    (Route::Complete, When::FirstPerPath),
];

/// The desktop's settings: fast passes, and a quick first retry of an unanswered call.
fn config() -> DesktopConfig {
    DesktopConfig {
        call_retry: Duration::from_millis(50),
        ..harness::fast_config()
    }
}

/// 20 runs of one route under one fault, checked end to end.
async fn runs_survive(route: Route, when: When, fault: Fault) {
    let folder = tempfile::tempdir().expect("folder");
    let world = World::new(json!({"replies": []})).await;
    let proxy = FaultProxy::start(&world.service.base).await;
    let session = share_counts(&world, folder.path()).await;
    proxy.set(route, fault, when);
    let state = DesktopState::open(&world.state_dir.path().join("desktop.db")).expect("state");
    let relay = world.relay_through(
        &proxy.base(),
        state,
        Arc::new(SystemClock),
        EngineKind::Boa.build().expect("boa"),
        config(),
    );
    let (stop, task) = harness::start(&relay);
    let mut commands = Vec::with_capacity(RUNS);
    for n in 0..RUNS {
        let key = format!("key-{route:?}-{n:03}");
        commands.push(world.queue(&session, &key, json!({"n": n})).await);
    }
    let what = format!("{route:?} under {fault:?}");
    for (n, command) in commands.iter().enumerate() {
        let run = world.wait_terminal(command, Duration::from_secs(240)).await;
        assert_eq!(run["status"], "completed", "{what}: {run}");
        assert_eq!(run["result"]["n"], n, "{what}: {run}");
    }
    // A completion whose answer was lost stays in the outbox until a repeat is answered (a
    // replay, taken as delivered).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !relay.state().outbox().expect("outbox").is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: the outbox never emptied"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    task.await.expect("relay stops");
    let history = relay.state().history().expect("history");
    for (n, command) in commands.iter().enumerate() {
        assert_eq!(
            world.get(command).await["status"],
            "completed",
            "{what}: one terminal state"
        );
        let rows: Vec<_> = history
            .iter()
            .filter(|r| &r.command_id == command)
            .collect();
        assert_eq!(
            rows.len(),
            1,
            "{what}: one history row for run {n}: {rows:?}"
        );
        assert_eq!(rows[0].status, "completed", "{what}: {rows:?}");
        assert_eq!(
            rows[0].refused_by_service, None,
            "{what}: the service took the completion: {rows:?}"
        );
        assert_eq!(
            executions(folder.path(), n),
            1,
            "{what}: run {n} executed once"
        );
    }
    let faulted = proxy.faulted(route);
    if when == When::FirstPerPath && matches!(route, Route::Started | Route::Complete) {
        assert_eq!(faulted, RUNS, "{what}: every run met the fault");
    } else {
        assert!(faulted >= 1, "{what}: the fault happened");
    }
}

/// How many executions of run `n` left their file in `folder`.
pub(crate) fn executions(folder: &Path, n: usize) -> usize {
    std::fs::read_dir(folder)
        .expect("folder")
        .filter(|entry| {
            entry.as_ref().is_ok_and(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{n}-"))
            })
        })
        .count()
}

/// Shares [`COUNTS`] with the world's project, `fs.write` allowed in `folder`, and runs one
/// pass straight to the service so it knows the graph is shared before a run is queued.
pub(crate) async fn share_counts(world: &World, folder: &Path) -> GraphSessionId {
    let meta = graph_js::describe(COUNTS, &Default::default()).expect("meta");
    let now = Timestamp::from_unix_millis(1);
    let session = world
        .state
        .upsert_session(&meta, COUNTS, None, now)
        .expect("session");
    world
        .state
        .share(&world.project, &session, now)
        .expect("share");
    world
        .state
        .set_project_enabled(&world.project, true, now)
        .expect("enable");
    world.state.set_folder(folder).expect("folder");
    world
        .state
        .set_policy("fs.write", Policy::Allow)
        .expect("policy");
    world.relay().pass(&Default::default()).await;
    session
}

/// Every route under `fault`, side by side (each in a world of its own).
async fn every_route_survives(fault: Fault) {
    let [a, b, c, d, e, f] = ROUTES;
    tokio::join!(
        runs_survive(a.0, a.1, fault),
        runs_survive(b.0, b.1, fault),
        runs_survive(c.0, c.1, fault),
        runs_survive(d.0, d.1, fault),
        runs_survive(e.0, e.1, fault),
        runs_survive(f.0, f.1, fault),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_survive_lost_requests() {
    every_route_survives(Fault::DropRequest).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_survive_answers_lost_after_the_service_committed() {
    every_route_survives(Fault::DropAnswer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_survive_reset_connections() {
    every_route_survives(Fault::Reset).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_survive_answers_delayed_5_s() {
    every_route_survives(Fault::DelayAnswer(Duration::from_secs(5))).await;
}
