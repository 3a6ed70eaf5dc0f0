//! Cancelling a run from outside stops a guest stuck in a loop: the run ends `cancelled`, and
//! the guest stops executing promptly (not merely "the caller stopped waiting").
//!
//! How "stopped executing" is observed: wasmtime runs guest code only inside `poll` of the
//! engine's future (on a fiber that the poll resumes). A probe engine wraps the wasm engine's
//! future and records when each poll returns and when the future is dropped. After the last
//! poll returned the guest cannot execute another instruction, and dropping the future drops
//! its store. The figures are printed (run with `--nocapture`); the test asserts only bounds
//! far above them, so it cannot flake on a busy machine.

use crate::common;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use graph_js::{Meta, MetaError};
use runner::RunStatus;
use runner::engine::Engine;
use runner::engine::wasm::{WasmEngine, WasmLimits};
use runner::host::Invocation;
use runner::host::approvals::BoxFuture;
use runner::host::events::{Event, EventKind, EventSink};
use runner::run::{RunOptions, RunRequest, run_graph};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The time since this test binary first asked, on `runner::clock`'s stopwatch: every instant
/// below is a distance from that one origin.
fn now() -> Duration {
    static ORIGIN: std::sync::OnceLock<runner::clock::Stopwatch> = std::sync::OnceLock::new();
    ORIGIN
        .get_or_init(runner::clock::Stopwatch::start)
        .elapsed()
}

/// When the wrapped run was last polled (if the guest was between polls at the cancel, it
/// never ran again: the figure is then zero) and when it was dropped.
#[derive(Default)]
struct Seen {
    last_poll_end: Option<Duration>,
    dropped: Option<Duration>,
    polls: u64,
}

struct Probe {
    inner: WasmEngine,
    seen: Arc<Mutex<Seen>>,
}

struct Probed {
    inner: BoxFuture<'static, Result<String, runner::engine::EngineError>>,
    seen: Arc<Mutex<Seen>>,
}

impl Future for Probed {
    type Output = Result<String, runner::engine::EngineError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let polled = self.inner.as_mut().poll(cx);
        let mut seen = self.seen.lock().expect("probe");
        seen.last_poll_end = Some(now());
        seen.polls += 1;
        polled
    }
}

impl Drop for Probed {
    fn drop(&mut self) {
        self.seen.lock().expect("probe").dropped = Some(now());
    }
}

impl Engine for Probe {
    fn name(&self) -> &'static str {
        "wasm"
    }
    fn run(
        &self,
        script: Arc<str>,
        args: String,
        invocation: Invocation,
    ) -> BoxFuture<'static, Result<String, runner::engine::EngineError>> {
        Box::pin(Probed {
            inner: self.inner.run(script, args, invocation),
            seen: self.seen.clone(),
        })
    }
    fn describe(&self, script: Arc<str>) -> BoxFuture<'static, Result<Meta, MetaError>> {
        self.inner.describe(script)
    }
}

/// Tells the test when the graph has logged (it is about to enter its loop).
struct LogSignal(tokio::sync::mpsc::UnboundedSender<()>);

impl EventSink for LogSignal {
    fn emit(&self, event: &Event) {
        if matches!(event.kind, EventKind::Log { .. }) {
            let _ = self.0.send(());
        }
    }
}

/// The figures of one cancelled run.
#[derive(Debug)]
struct Latency {
    to_outcome: Duration,
    to_last_poll: Duration,
    to_drop: Duration,
}

/// Starts `script`, waits until it logged and then `spin` longer, cancels, and measures.
async fn cancel_while_spinning(script: &str, spin: Duration) -> Latency {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let engine = Arc::new(Probe {
        inner: WasmEngine::new(WasmLimits::default()).expect("sandbox"),
        seen: seen.clone(),
    });
    let (tx, mut logged) = tokio::sync::mpsc::unbounded_channel();
    let mut options = RunOptions::new(engine);
    options.events = Arc::new(LogSignal(tx));
    options.timeout = Duration::from_secs(60);
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let cancel = cancel.clone();
        let script = crate::common::with_meta(script);
        async move {
            let outcome = run_graph(
                RunRequest {
                    script: script.into(),
                    args: json!({}),
                    graph: "spin.js".into(),
                    run_id: None,
                },
                &options,
                cancel,
            )
            .await;
            (outcome, now())
        }
    });
    tokio::time::timeout(Duration::from_secs(30), logged.recv())
        .await
        .expect("the graph logged before its loop")
        .expect("log signal");
    tokio::time::sleep(spin).await;
    let cancelled_at = now();
    cancel.cancel();
    let (outcome, finished_at) = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the run ended within 10 s of the cancel")
        .expect("run task");
    assert_eq!(outcome.status, RunStatus::Cancelled, "{outcome:?}");
    assert_eq!(outcome.result, None);
    // `cancelled` also says the loop was still running at the cancel: a run that had ended
    // (say at the loop limit) would have been reported before it.
    let seen = seen.lock().expect("probe");
    assert!(seen.polls > 0);
    let last_poll = seen.last_poll_end.expect("polled");
    let dropped = seen.dropped.expect("the engine's future was dropped");
    Latency {
        to_outcome: finished_at.saturating_sub(cancelled_at),
        to_last_poll: last_poll.saturating_sub(cancelled_at),
        to_drop: dropped.saturating_sub(cancelled_at),
    }
}

/// Generous: the measured figures are a few milliseconds (see docs/limits.md); a second
/// only fails if the epoch interruption stopped working.
const BOUND: Duration = Duration::from_secs(1);

fn report(what: &str, runs: &[Latency]) {
    let max = |f: fn(&Latency) -> Duration| runs.iter().map(f).max().unwrap_or_default();
    println!(
        "{what}: {} runs, cancel → outcome max {:?}, cancel → guest's last poll max {:?}, cancel → store dropped max {:?}",
        runs.len(),
        max(|l| l.to_outcome),
        max(|l| l.to_last_poll),
        max(|l| l.to_drop),
    );
    for l in runs {
        assert!(l.to_outcome < BOUND, "{l:?}");
        assert!(l.to_last_poll < BOUND, "{l:?}");
        assert!(l.to_drop < BOUND, "{l:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_plain_infinite_loop_stops_the_guest() {
    // boa's loop limit ends `while (true) {}` after 10 million iterations (about a second in
    // the sandbox), so the cancel comes 100 ms into the loop.
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(
            cancel_while_spinning(
                "export default function (a, g) { g.log('spinning'); while (true) {} }",
                Duration::from_millis(100),
            )
            .await,
        );
    }
    report("while (true) {}", &runs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_loop_that_no_interpreter_limit_stops_ends_it() {
    // Short loops in a called function reset boa's per-call counter: only the epoch stops it.
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(
            cancel_while_spinning(
                "function spin() { for (let i = 0; i < 1000; i++) {} }
                 export default function (a, g) { g.log('spinning'); for (;;) spin(); }",
                Duration::from_millis(300),
            )
            .await,
        );
    }
    report("for (;;) spin()", &runs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_runs_the_next_graph_after_a_cancel() {
    cancel_while_spinning(
        "export default function (a, g) { g.log('spinning'); while (true) {} }",
        Duration::from_millis(50),
    )
    .await;
    let engine: Arc<dyn Engine> =
        Arc::new(WasmEngine::new(WasmLimits::default()).expect("sandbox"));
    let (options, _, _) = common::options(engine, json!({"default": {"text": "ok"}}));
    let next = common::run(
        "export default async function (a, g) { return (await g.agent('hi')).text; }",
        json!({}),
        &options,
    )
    .await;
    assert_eq!(next.result, Some(json!("ok")), "{next:?}");
}
