//! The owner is in control of what runs (issue 43), with real `relay desktop` processes: a run
//! going when its session is unshared, its project disabled, its session removed, cancelled
//! with `relay desktop cancel` or with the page's Cancel ends `cancelled` within 2 s, with the
//! owner's words and cause, the tokens and cost it spent so far, and the tool call it would
//! have made next never happens; after a SIGKILL the restarted relay reports the cost spent so
//! far, not 0.

use crate::harness;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use harness::{RelayProcess, World, desktop_cli, wait_until};
use relay_protocol::EndCause;
use relay_protocol::clock::Stopwatch;
use runner::host::approvals::Policy;
use serde_json::{Value, json};

/// Asks one agent (99 tokens, 0.0015), then a slow one (4 s), then writes a file: stopped
/// while the slow one runs, the file never appears.
const AGENT_SLOW_WRITE: &str = r#"
export const meta = {name: "Slow writer", slug: "slow-writer", version: "1.0.0"};
export default async function (args, g) {
  const first = await g.agent({label: "first", prompt: "hi"});
  await g.agent({label: "slow", prompt: "and again"});
  return g.tool("fs.write", {path: "out.txt", text: first.text});
}
"#;

/// How long the slow agent takes: a run not stopped writes its file after this.
const SLOW_MS: u64 = 4000;
/// The issue's bound for a stop, with the machine's slack for the command's own start.
const STOP_BOUND: Duration = Duration::from_millis(2500);

fn replies() -> Value {
    json!({"replies": [
        {"label": "first", "text": "hello", "tokens": 99, "cost": 0.0015},
        {"label": "slow", "text": "late", "tokens": 7, "cost": 0.5, "latency_ms": SLOW_MS}
    ], "default": {"text": "x", "tokens": 5}})
}

fn state_path(world: &World) -> PathBuf {
    world.state_path()
}

fn spawn_relay_with(world: &World, name: &str, extra: &[&str]) -> RelayProcess {
    world.spawn_relay(name, &replies(), extra)
}

/// A world with the slow writer shared, its fs.write allowed in a folder, one run of it queued
/// and a relay process running it, past its first agent (so tokens and cost are spent).
struct Going {
    world: World,
    session: relay_protocol::GraphSessionId,
    command: String,
    relay: RelayProcess,
    /// When the slow agent began (about): its file would be written [`SLOW_MS`] after.
    slow_began: Stopwatch,
}

async fn a_run_going(name: &str) -> Going {
    a_run_going_with(name, &[]).await
}

async fn a_run_going_with(name: &str, extra: &[&str]) -> Going {
    let world = World::new(replies()).await;
    world.shared_folder(Policy::Allow);
    let session = world.share(AGENT_SLOW_WRITE).await;
    let command = world
        .queue(&session, &format!("key-{name}"), json!({}))
        .await;
    let relay = spawn_relay_with(&world, name, extra);
    wait_until("the first agent's tokens are recorded", || {
        world
            .state
            .history()
            .expect("history")
            .first()
            .is_some_and(|h| h.total_tokens == 99)
    })
    .await;
    Going {
        world,
        session,
        command,
        relay,
        slow_began: Stopwatch::start(),
    }
}

impl Going {
    /// Runs the owner's `action` (another process, or a page request) and checks the run ends
    /// `cancelled` within 2 s with `error` and `cause`, its tokens and cost kept, and its file
    /// never written; returns what the action printed.
    async fn stopped_by<T>(
        &self,
        action: impl Future<Output = T>,
        error: &str,
        cause: EndCause,
    ) -> T {
        let acted = Stopwatch::start();
        let ended = async {
            loop {
                let run = self.world.get(&self.command).await;
                if run["status"] != "running" {
                    return run;
                }
                assert!(
                    acted.elapsed() < STOP_BOUND,
                    "still running {:?} after the owner acted: {run}\n{}",
                    acted.elapsed(),
                    self.relay.log()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let (printed, run) = tokio::join!(action, ended);
        assert_eq!(run["status"], "cancelled", "{run}\n{}", self.relay.log());
        assert_eq!(run["error"], error, "{run}");
        assert_eq!(run["total_tokens"], 99, "tokens kept: {run}");
        assert_eq!(run["reported_cost"], 0.0015, "cost kept: {run}");
        // The agent's get_graph_run names the cause the desktop sent.
        assert_eq!(
            run["end_cause"],
            cause.as_str(),
            "the agent sees why: {run}"
        );
        // The history keeps the cause the completion carried.
        let row = self.world.state.history().expect("history")[0].clone();
        assert_eq!(row.command_id, self.command);
        assert_eq!(row.status, "cancelled");
        assert_eq!(row.end_cause, Some(cause), "{row:?}");
        assert_eq!(row.total_tokens, 99);
        assert!((row.reported_cost - 0.0015).abs() < 1e-9, "{row:?}");
        let outbox = self.world.state.outbox().expect("outbox");
        assert!(outbox.is_empty(), "delivered: {outbox:?}");
        // Past the moment the slow agent would have answered, the write never happened.
        let wait = Duration::from_millis(SLOW_MS + 800).saturating_sub(self.slow_began.elapsed());
        tokio::time::sleep(wait).await;
        assert!(
            !self.world.state_dir.path().join("shared/out.txt").exists(),
            "the tool call after the stop never happens"
        );
        assert_eq!(
            self.world.get(&self.command).await["status"],
            "cancelled",
            "still cancelled"
        );
        printed
    }

    fn cli(&self, args: &[&str]) -> impl Future<Output = Output> + Send + 'static {
        let state = state_path(&self.world);
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        async move {
            tokio::task::spawn_blocking(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                desktop_cli(&state, &args)
            })
            .await
            .expect("cli")
        }
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The command succeeded, printed its first line as before, and said what it stopped.
fn says_it_stopped(output: &Output, first: &str, command: &str) {
    assert!(output.status.success(), "{output:?}");
    let text = stdout(output);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(first), "{text}");
    assert_eq!(
        lines.next(),
        Some(format!("stopped run {command} of Slow writer (cancelled)").as_str()),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsharing_stops_the_run_going_within_two_seconds_with_its_cost() {
    let going = a_run_going("unshare").await;
    let action = going.cli(&[
        "unshare",
        "--project",
        &going.world.project,
        "--session",
        going.session.as_str(),
    ]);
    let output = going
        .stopped_by(
            action,
            "The owner withdrew consent for this session",
            EndCause::ConsentWithdrawn,
        )
        .await;
    says_it_stopped(&output, going.session.as_str(), &going.command);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabling_the_project_stops_the_run_going_within_two_seconds_with_its_cost() {
    let going = a_run_going("disable").await;
    let action = going.cli(&["project", "disable", &going.world.project]);
    let output = going
        .stopped_by(
            action,
            "The owner withdrew consent for this project",
            EndCause::ConsentWithdrawn,
        )
        .await;
    says_it_stopped(&output, &going.world.project, &going.command);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_session_stops_the_run_going_within_two_seconds_with_its_cost() {
    let going = a_run_going("remove").await;
    let action = going.cli(&["session", "remove", going.session.as_str()]);
    let output = going
        .stopped_by(
            action,
            "The owner withdrew consent for this session",
            EndCause::ConsentWithdrawn,
        )
        .await;
    says_it_stopped(&output, going.session.as_str(), &going.command);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_cancel_stops_the_run_going_within_two_seconds_with_its_cost() {
    let going = a_run_going("cancel").await;
    let state = state_path(&going.world);
    let unknown = desktop_cli(&state, &["cancel", "no-such-run"]);
    assert_eq!(unknown.status.code(), Some(1), "{unknown:?}");
    assert!(
        stderr(&unknown).contains("no run no-such-run"),
        "{unknown:?}"
    );
    let action = going.cli(&["cancel", &going.command]);
    let output = going
        .stopped_by(
            action,
            "Cancelled by the owner on the desktop",
            EndCause::OwnerCancelledDesktop,
        )
        .await;
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        stdout(&output).trim(),
        format!("stopped run {} of Slow writer (cancelled)", going.command),
        "{output:?}"
    );
    // Nothing runs now: `--current` says so, and the ended run cannot be cancelled again.
    let idle = desktop_cli(&state, &["cancel", "--current"]);
    assert_eq!(idle.status.code(), Some(1), "{idle:?}");
    assert!(stderr(&idle).contains("nothing is running"), "{idle:?}");
    let again = desktop_cli(&state, &["cancel", &going.command]);
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    assert!(
        stderr(&again).contains("is not running: it ended cancelled"),
        "{again:?}"
    );
    let history = stdout(&desktop_cli(&state, &["history"]));
    assert!(
        history.contains("cancelled  cause owner_cancelled_desktop"),
        "{history}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_current_stops_the_run_going() {
    let going = a_run_going("current").await;
    let action = going.cli(&["cancel", "--current"]);
    let output = going
        .stopped_by(
            action,
            "Cancelled by the owner on the desktop",
            EndCause::OwnerCancelledDesktop,
        )
        .await;
    assert!(
        stdout(&output).starts_with(&format!("stopped run {}", going.command)),
        "{output:?}"
    );
}

/// In long-poll mode a seen cancel is reported while the engine winds down: with the owner's
/// words and the tokens and cost so far (it used to say the agent cancelled, at cost 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_cancel_in_long_poll_mode_is_reported_at_once_with_its_cost() {
    let going = a_run_going_with("long-poll", &["--long-poll"]).await;
    let action = going.cli(&["cancel", "--current"]);
    let output = going
        .stopped_by(
            action,
            "Cancelled by the owner on the desktop",
            EndCause::OwnerCancelledDesktop,
        )
        .await;
    assert!(output.status.success(), "{output:?}");
    assert!(
        going
            .relay
            .log()
            .contains("cancel seen: reporting the outcome"),
        "the early report: {}",
        going.relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_cancel_stops_the_run_going_within_two_seconds_with_its_cost() {
    let going = a_run_going("page").await;
    let page = crate::desktop_page::serve_page(&going.world).await;
    let client = relay_testkit::desktop_page::PageClient::open(&page.url).await;
    let execution = going.world.state.history().expect("history")[0]
        .execution_id
        .clone();
    let view = format!("/runs/{execution}");
    let drawn = client.get(&view).await.body;
    assert!(drawn.contains(">Cancel this run</button>"), "{drawn}");
    let fields = [("run", execution.as_str())];
    let action = client.post(&view, "/runs/cancel", &fields);
    let answer = going
        .stopped_by(
            action,
            "Cancelled by the owner on the desktop",
            EndCause::OwnerCancelledDesktop,
        )
        .await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let after = client.get(&view).await.body;
    assert!(
        after.contains("Cancelled by the owner on the desktop"),
        "{after}"
    );
    assert!(
        !after.contains(">Cancel this run</button>"),
        "an ended run has no Cancel: {after}"
    );
    drop(page);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_sigkill_the_restarted_relay_reports_the_cost_spent_so_far() {
    let mut going = a_run_going("sigkill").await;
    // The cost is durable as the tokens are: in the history while the run goes.
    wait_until("the first agent's cost is recorded", || {
        going.world.state.history().expect("history")[0].reported_cost > 0.0
    })
    .await;
    going.relay.child.kill().expect("SIGKILL");
    going.relay.child.wait().expect("exited");
    assert_eq!(going.world.get(&going.command).await["status"], "running");
    // Not resumed (that is `run_journal.rs`'s): the stopped run is reported as it stood.
    let restarted = spawn_relay_with(&going.world, "restart", &["--no-resume"]);
    let run = going
        .world
        .wait_terminal(&going.command, Duration::from_secs(20))
        .await;
    assert_eq!(run["status"], "failed", "{run}: {}", restarted.log());
    assert_eq!(run["total_tokens"], 99, "{run}");
    assert_eq!(run["reported_cost"], 0.0015, "{run}");
    assert_eq!(run["end_cause"], "relay_stopped", "{run}");
    let row = going.world.state.history().expect("history")[0].clone();
    assert_eq!(row.end_cause, Some(EndCause::RelayStopped), "{row:?}");
}
