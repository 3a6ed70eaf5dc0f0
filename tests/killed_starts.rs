//! A desktop killed while it starts a run (issue 49): a real `relay desktop run` process,
//! SIGKILLed after it recorded the execution and before `started` reached the service, or
//! after the service took `started` and before its answer arrived (a fault proxy holds the
//! request or the answer). The next relay asks the service before it reports anything and hands
//! the run back (whose own answer is lost once, too): no phantom history row says a graph
//! stopped that never ran, and the run executes and completes once.

use crate::harness;
use crate::lost_answers::{executions, share_counts};

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use harness::World;
use relay_testkit::fault_proxy::{Fault, FaultProxy, Route, When};
use serde_json::json;

/// Long enough that the held request or answer is never let through while the test runs.
const HELD: Duration = Duration::from_secs(600);

/// A `relay desktop run` process, killed when the test ends however it ends.
struct RelayProcess {
    child: Child,
    log: PathBuf,
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RelayProcess {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, and the exit waited for.
    fn kill(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("exit");
    }
}

/// `relay desktop run` on the world's state, reaching the service at `service`.
fn spawn_relay(world: &World, service: &str, name: &str) -> RelayProcess {
    let log = world.state_dir.path().join(format!("{name}.log"));
    let child = Command::new(harness::relay_binary())
        .args(["desktop", "--state"])
        .arg(world.state_dir.path().join("desktop.db"))
        .args(["run", "--service", service, "--token"])
        .arg(&world.desktop_token)
        .args(["--engine", "boa", "--poll-interval", "0.2"])
        .args(["--control-interval", "0.2"])
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("relay desktop run starts");
    RelayProcess { child, log }
}

async fn eventually(what: &str, relay: &RelayProcess, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never: {what}\n{}",
            relay.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Kills the relay while `fault` holds its first `started`, checks what the service holds
/// (`held_as`), then starts a relay again whose first hand-back answer is lost: the run runs
/// and completes once, with one history row.
async fn killed_while_starting(fault: Fault, held_as: &str) {
    let world = World::new(json!({"replies": []})).await;
    let folder = tempfile::tempdir().expect("folder");
    let session = share_counts(&world, folder.path()).await;
    let proxy = FaultProxy::start(&world.service.base).await;
    proxy.set(Route::Started, fault, When::FirstPerPath);
    let command = world.queue(&session, "key-killed", json!({"n": 7})).await;
    let mut first = spawn_relay(&world, &proxy.base(), "first");
    eventually("the start is held", &first, async || {
        proxy.faulted(Route::Started) == 1 && world.get(&command).await["status"] == held_as
    })
    .await;
    let rows = world.state.history().expect("history");
    assert_eq!(rows.len(), 1, "the execution was recorded: {rows:?}");
    assert_eq!(rows[0].status, "running");
    first.kill();
    assert_eq!(world.get(&command).await["status"], held_as);

    proxy.clear();
    proxy.set(Route::Released, Fault::DropAnswer, When::FirstPerPath);
    let second = spawn_relay(&world, &proxy.base(), "second");
    let run = world.wait_terminal(&command, Duration::from_secs(60)).await;
    assert_eq!(run["status"], "completed", "{run}\n{}", second.log());
    assert_eq!(run["result"]["n"], 7, "{run}");
    eventually(
        "the execution that never ran is forgotten",
        &second,
        async || world.state.history().expect("history").len() == 1,
    )
    .await;
    let rows = world.state.history().expect("history");
    assert_eq!(rows[0].status, "completed", "{rows:?}");
    assert_eq!(rows[0].refused_by_service, None, "{rows:?}");
    assert_eq!(executions(folder.path(), 7), 1, "executed once");
    assert_eq!(proxy.faulted(Route::Released), 1, "{}", second.log());
    assert!(
        proxy.seen(Route::Released) >= 2,
        "asked again after the lost answer"
    );
    // The service takes the completion a moment before its answer empties the outbox.
    eventually("the outbox empties", &second, async || {
        world.state.outbox().expect("outbox").is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_before_started_reached_the_service_the_run_runs_once_with_one_row() {
    killed_while_starting(Fault::DelayRequest(HELD), "queued").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_before_the_answer_to_started_the_run_is_handed_back_and_runs_once() {
    killed_while_starting(Fault::DelayAnswer(HELD), "running").await;
}
