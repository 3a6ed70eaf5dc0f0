//! The desktop state locked by another process (issue 48): while a `sqlite3`-like process holds
//! the state file's write lock for 15 s (a backup, the page, a stuck CLI), a running graph and
//! a held long poll carry on. The relay keeps polling the control endpoint, ends the run
//! normally with its result and tokens, and takes the next run after the lock is gone: every
//! call to the state runs on the state's own thread, and a state error is logged and retried,
//! never the end of the relay.

use crate::harness;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use harness::World;
use relay_desktop::api::{BoxFuture, DesktopApi, HttpTransport, Transport, TransportError};
use relay_desktop::state::DesktopState;
use relay_desktop::{DEFAULT_LONG_POLL, DesktopConfig, Relay, Runtime};
use relay_protocol::clock::SystemClock;
use runner::engine::EngineKind;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;
use tokio::time::Instant;

/// How long the other process holds the write lock: longer than the state's busy timeout, so
/// writes meanwhile fail and are retried or logged.
const HOLD: Duration = Duration::from_secs(15);

/// The environment variable that makes [`hold_the_state_write_lock`] hold this file's lock.
const HOLDER_ENV: &str = "GRAPHRELAY_TEST_HOLD_STATE_LOCK";

/// Two agents: the first ends while the lock is held (its tokens are written then), the second
/// after the lock is gone.
const TWO_AGENTS: &str = r#"
export const meta = {name: "Two agents", slug: "two-agents", version: "1.0.0"};
export default async function (args, g) {
  const first = await g.agent({label: "first", prompt: "one"});
  const second = await g.agent({label: "second", prompt: "two"});
  return {first: first.text, second: second.text};
}
"#;

fn replies() -> Value {
    json!({"replies": [
        {"label": "first", "text": "one", "tokens": 10, "latency_ms": 3000},
        {"label": "second", "text": "two", "tokens": 20, "latency_ms": 18000}
    ], "default": {"text": "again", "tokens": 1}})
}

/// What the relay sent: when control polls were answered, and when each long poll was out.
#[derive(Default)]
struct Seen {
    controls: Vec<Instant>,
    long_polls: Vec<(Instant, Option<Instant>)>,
}

/// The real HTTP transport, noting what passes.
struct Watching {
    inner: HttpTransport,
    seen: Arc<Mutex<Seen>>,
}

impl Watching {
    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Transport for Watching {
    fn send(
        &self,
        request: http::Request<Vec<u8>>,
    ) -> BoxFuture<'_, Result<http::Response<Vec<u8>>, TransportError>> {
        Box::pin(async move {
            let path = request.uri().path().to_owned();
            let long_poll = path.ends_with("/sync")
                && serde_json::from_slice::<Value>(request.body())
                    .is_ok_and(|body| body.get("wait_ms").is_some());
            let index = long_poll.then(|| {
                let mut seen = self.seen();
                seen.long_polls.push((Instant::now(), None));
                seen.long_polls.len() - 1
            });
            let answer = self.inner.send(request).await;
            let mut seen = self.seen();
            if let Some(index) = index {
                seen.long_polls[index].1 = Some(Instant::now());
            }
            if path.ends_with("/control") && answer.as_ref().is_ok_and(|a| a.status().is_success())
            {
                seen.controls.push(Instant::now());
            }
            answer
        })
    }
}

/// Not a test of its own: the other process, started by
/// [`a_state_locked_by_another_process_stalls_neither_the_run_nor_the_relay`] as this test
/// binary with [`HOLDER_ENV`] naming the state file. It takes the write lock, says `locked`,
/// and holds it for [`HOLD`].
#[test]
#[ignore = "the lock-holding process of the locked-state test, which runs it"]
fn hold_the_state_write_lock() {
    let path = std::env::var(HOLDER_ENV).expect("the state file to lock");
    let connection = rusqlite::Connection::open(&path).expect("open the state file");
    connection
        .execute_batch("BEGIN IMMEDIATE")
        .expect("take the write lock");
    println!("locked");
    std::thread::sleep(HOLD);
    connection.execute_batch("COMMIT").expect("release");
}

/// Starts [`hold_the_state_write_lock`] on `state` and waits until it holds the lock.
async fn lock_from_another_process(state: &std::path::Path) -> tokio::process::Child {
    let mut holder = tokio::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "locked_state::hold_the_state_write_lock",
            "--exact",
            "--ignored",
        ])
        .args(["--nocapture", "--test-threads", "1"])
        .env(HOLDER_ENV, state)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the lock holder starts");
    let stdout = holder.stdout.take().expect("its stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the holder says when it holds the lock")
            .expect("its stdout")
            .expect("it said `locked` before it ended");
        // libtest prints the test's name on the same line first.
        if line.trim_end().ends_with("locked") {
            // Read the rest, so its last lines do not meet a closed pipe.
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return holder;
        }
    }
}

/// A long-poll relay over `world`'s state file, its requests noted in `seen`.
fn watched_relay(world: &World, seen: &Arc<Mutex<Seen>>) -> Arc<Relay> {
    let transport = Watching {
        inner: HttpTransport::new(&world.service.base).expect("transport"),
        seen: seen.clone(),
    };
    Relay::new(
        DesktopState::open(&world.state_dir.path().join("desktop.db")).expect("state"),
        DesktopApi::new(Arc::new(transport), &world.desktop_token),
        Arc::new(SystemClock),
        Runtime {
            engine: EngineKind::Boa.build().expect("boa"),
            provider: world.mock.clone(),
            events: world.events.clone(),
        },
        DesktopConfig {
            long_poll: Some(DEFAULT_LONG_POLL),
            ..harness::fast_config()
        },
    )
}

/// Polls `done` every 20 ms for at most 30 s.
async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A write waits this long for the lock before it fails (the state's busy timeout): a relay
/// whose runtime waited on SQLite would stall this long.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Between `locked` and `released` the relay kept polling the control endpoint, never pausing
/// for anything like a write's wait for the lock, and held a long poll.
fn kept_talking(seen: &Mutex<Seen>, locked: Instant, released: Instant) {
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    let mut answered: Vec<Instant> = seen
        .controls
        .iter()
        .copied()
        .filter(|at| (locked..released).contains(at))
        .collect();
    answered.insert(0, locked);
    answered.push(released);
    let longest = answered
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .max()
        .unwrap_or_default();
    // Every 100 ms while nothing stalls; a runtime worker waiting out a write's busy timeout
    // leaves a gap that long.
    assert!(
        longest < BUSY_TIMEOUT / 2,
        "the control polls stopped for {longest:?} while the state was locked ({} answered)",
        answered.len() - 2
    );
    assert!(
        seen.long_polls
            .iter()
            .any(|(out, back)| *out < released && back.is_none_or(|back| back > locked)),
        "no long poll was held while the state was locked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_locked_by_another_process_stalls_neither_the_run_nor_the_relay() {
    let world = World::new(replies()).await;
    let session = world.share(TWO_AGENTS).await;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let relay = watched_relay(&world, &seen);
    let (stop, task) = harness::start(&relay);
    let command = world.queue(&session, "key-locked-1", json!({})).await;
    eventually("the run starts", async || {
        world.get(&command).await["status"] == "running"
    })
    .await;

    let mut holder = lock_from_another_process(&world.state_dir.path().join("desktop.db")).await;
    let locked = Instant::now();
    let status = holder.wait().await.expect("the holder ends");
    assert!(status.success(), "the holder held the lock and let go");
    let released = Instant::now();

    let run = world.wait_terminal(&command, Duration::from_secs(60)).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["result"], json!({"first": "one", "second": "two"}));
    assert_eq!(run["total_tokens"], 30, "{run}");
    kept_talking(&seen, locked, released);

    // The relay is still running and its state caught up: the history has the run's end, and
    // the next run goes through as usual.
    assert!(!task.is_finished(), "the relay ended");
    eventually("the history records the end", async || {
        relay.state().history().expect("history").iter().any(|row| {
            row.command_id == command && row.status == "completed" && row.total_tokens == 30
        })
    })
    .await;
    let next = world.queue(&session, "key-locked-2", json!({})).await;
    let run = world.wait_terminal(&next, Duration::from_secs(60)).await;
    assert_eq!(run["status"], "completed", "{run}");
    stop.cancel();
    task.await.expect("the relay stops cleanly");
}
