//! Clean stops and one relay per state file (issue 32), with real `relay desktop` processes:
//! SIGTERM with `--no-resume` ends the run `failed` with its real tokens and expires its approval, whose approval
//! is then refused; after a SIGKILL the next start reports the tokens spent so far; a second
//! relay on the same state file exits 1 naming the first; the owner's lists and share checks
//! behave on closed pipes and unknown projects.

use crate::harness;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use harness::{ECHO, RelayProcess, World, desktop_cli, wait_until};
use relay_desktop::state::ApprovalStatus;
use relay_protocol::clock::Timestamp;
use runner::host::approvals::Policy;
use serde_json::{Value, json};

/// Asks one agent (99 tokens), then writes a file through an `ask` tool.
const AGENT_THEN_WRITE: &str = r#"
export const meta = {name: "Agent then write", slug: "agent-write", version: "1.0.0"};
export default async function (args, g) {
  const r = await g.agent({label: "first", prompt: "hi"});
  return g.tool("fs.write", {path: "out.txt", text: r.text});
}
"#;

/// Asks one agent (99 tokens), then a second one that never answers.
const AGENT_THEN_SLOW: &str = r#"
export const meta = {name: "Agent then slow", slug: "agent-slow", version: "1.0.0"};
export default async function (args, g) {
  await g.agent({label: "first", prompt: "hi"});
  return g.agent({label: "slow", prompt: "and again"});
}
"#;

fn replies() -> Value {
    json!({"replies": [
        {"label": "first", "text": "hello", "tokens": 99},
        {"label": "slow", "text": "late", "latency_ms": 600000}
    ], "default": {"text": "x", "tokens": 5}})
}

/// What the clean-stop tests do to a relay process besides what the harness does.
trait Stoppable {
    fn signal(&self, signal: i32);
    fn wait_exit(&mut self) -> std::process::ExitStatus;
}

impl Stoppable for RelayProcess {
    fn signal(&self, signal: i32) {
        let pid = i32::try_from(self.child.id()).expect("pid");
        // SAFETY: sends a signal to our own child process, whose pid we hold.
        let sent = unsafe { libc::kill(pid, signal) };
        assert_eq!(sent, 0, "signal sent");
    }

    /// Waits (at most 30 s) for the process to exit.
    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let waited = relay_protocol::clock::Stopwatch::start();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                waited.elapsed() < Duration::from_secs(30),
                "the relay did not exit: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn state_path(world: &World) -> PathBuf {
    world.state_path()
}

fn spawn_relay(world: &World, name: &str) -> RelayProcess {
    world.spawn_relay(name, &replies(), &[])
}

async fn ask_before_writing(world: &World) -> relay_protocol::GraphSessionId {
    world.shared_folder(Policy::Ask);
    world.share(AGENT_THEN_WRITE).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_run_fails_it_with_its_tokens_and_expires_its_approval() {
    let world = World::new(replies()).await;
    let session = ask_before_writing(&world).await;
    let command = world.queue(&session, "key-sigterm", json!({})).await;
    // Without resuming: a SIGTERM with resuming on keeps the run (run_journal.rs).
    let mut relay = world.spawn_relay("sigterm", &replies(), &["--no-resume"]);
    wait_until("the approval is asked", || {
        !world.state.approvals(false).expect("approvals").is_empty()
    })
    .await;
    let approval = world.state.approvals(false).expect("approvals")[0]
        .id
        .clone();
    relay.signal(libc::SIGTERM);
    let status = relay.wait_exit();
    assert!(status.success(), "{status:?}: {}", relay.log());
    assert!(
        relay.log().contains("SIGTERM: stopping the relay"),
        "{}",
        relay.log()
    );

    let run = world.wait_terminal(&command, Duration::from_secs(10)).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"]
            .as_str()
            .is_some_and(|e| e.contains("the desktop relay was stopped")),
        "{run}"
    );
    assert_eq!(run["total_tokens"], 99, "{run}");
    // The trace says what the service is told (issue 43), and the history keeps the cause.
    let log = relay.log();
    assert!(
        log.contains("run failed: the desktop relay was stopped") && !log.contains("run cancelled"),
        "{log}"
    );
    assert_eq!(
        world.state.history().expect("history")[0].end_cause,
        Some(relay_protocol::EndCause::RelayStopped)
    );
    assert_eq!(
        world.state.approval_status(&approval).expect("status"),
        Some(ApprovalStatus::Expired)
    );
    assert!(
        world.state.outbox().expect("outbox").is_empty(),
        "delivered"
    );
    let refused = desktop_cli(&state_path(&world), &["approvals", "approve", &approval]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(message.contains("no longer running"), "{message}");
    assert!(
        !world.state_dir.path().join("shared/out.txt").exists(),
        "the write never happened"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_sigkill_the_next_start_reports_the_tokens_spent_so_far() {
    let world = World::new(replies()).await;
    let session = world.share(AGENT_THEN_SLOW).await;
    let command = world.queue(&session, "key-sigkill", json!({})).await;
    let mut relay = spawn_relay(&world, "sigkill");
    // Recorded as they grow: the first agent's tokens are in the history while the run waits.
    wait_until("the first agent's tokens are recorded", || {
        world
            .state
            .history()
            .expect("history")
            .first()
            .is_some_and(|h| h.total_tokens == 99)
    })
    .await;
    relay.signal(libc::SIGKILL);
    relay.wait_exit();
    assert_eq!(world.get(&command).await["status"], "running");
    // Not resumed (its second agent never answers): reported failed, as before issue 46.
    let restarted = world.spawn_relay("restart", &replies(), &["--no-resume"]);
    let run = world.wait_terminal(&command, Duration::from_secs(20)).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["total_tokens"], 99, "{run}: {}", restarted.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_relay_on_the_same_state_file_exits_naming_the_first() {
    let world = World::new(replies()).await;
    let session = world.share(ECHO).await;
    let first = spawn_relay(&world, "first");
    let before = world.queue(&session, "key-lock-1", json!({})).await;
    assert_eq!(
        world.wait_terminal(&before, Duration::from_secs(30)).await["status"],
        "completed"
    );
    let mut second = spawn_relay(&world, "second");
    let status = second.wait_exit();
    assert_eq!(status.code(), Some(1), "{}", second.log());
    let log = second.log();
    assert!(
        log.contains(&format!("process {}", first.child.id())) && log.contains("--state"),
        "{log}"
    );
    // The first relay keeps working and delivering.
    let after = world.queue(&session, "key-lock-2", json!({})).await;
    let run = world.wait_terminal(&after, Duration::from_secs(30)).await;
    assert_eq!(run["status"], "completed", "{run}: {}", first.log());
    assert_eq!(
        run["result"]["text"], "x",
        "the replies file of the relay process"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_refused_while_no_relay_runs() {
    let world = World::new(json!({})).await;
    let now = Timestamp::from_unix_millis(1);
    let session = relay_desktop::state::new_session_id();
    let command = relay_protocol::CommandId::new_random();
    world
        .state
        .begin_execution("e-dead", &command, &world.project, &session, "x", now)
        .expect("begin");
    world
        .state
        .ask("a-dead", "e-dead", "fs.write", "{}", now)
        .expect("ask");
    let refused = desktop_cli(&state_path(&world), &["approvals", "approve", "a-dead"]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        message.contains("no `relay desktop run` is running"),
        "{message}"
    );
    assert_eq!(
        world.state.approval_status("a-dead").expect("status"),
        Some(ApprovalStatus::Pending),
        "nothing recorded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_exit_quietly_on_a_closed_pipe() {
    let world = World::new(json!({})).await;
    world.share(ECHO).await;
    let now = Timestamp::from_unix_millis(1);
    let session = relay_desktop::state::new_session_id();
    for n in 0..3 {
        world
            .state
            .begin_execution(
                &format!("e{n}"),
                &relay_protocol::CommandId::new_random(),
                &world.project,
                &session,
                "echo",
                now,
            )
            .expect("history row");
    }
    world
        .state
        .ask("a1", "e0", "fs.write", "{}", now)
        .expect("approval");
    let queued = relay_protocol::QueuedCommand {
        command_id: relay_protocol::CommandId::new_random(),
        graph_session_id: session.clone(),
        slug: "echo".into(),
        arguments: serde_json::Map::new(),
        created_at: now,
        agent_id: None,
        agent_name: None,
        max_tokens: None,
    };
    world
        .state
        .note_queue(&world.project, &[queued], now)
        .expect("queue");
    for args in [
        &["history"][..],
        &["history", "--json"],
        &["session", "list"],
        &["shares"],
        &["queue"],
        &["approvals", "list"],
        &["project", "list"],
    ] {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let output = Command::new(harness::relay_binary())
            .args(["desktop", "--state"])
            .arg(state_path(&world))
            .args(args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{args:?}: {output:?}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_list_exactly_what_is_shared_and_unknown_or_disabled_projects_are_refused() {
    let world = World::new(json!({})).await;
    let session = world.share(ECHO).await;
    let state = state_path(&world);
    let listed = desktop_cli(&state, &["shares", "--json"]);
    assert!(listed.status.success(), "{listed:?}");
    let shares: Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert_eq!(shares.as_array().map(Vec::len), Some(1), "{shares}");
    assert_eq!(shares[0]["project_id"], world.project.as_str());
    assert_eq!(shares[0]["session_id"], session.as_str());
    assert_eq!(shares[0]["slug"], "echo");
    assert_eq!(shares[0]["version"], "1.0.0");
    let text = String::from_utf8_lossy(&desktop_cli(&state, &["shares"]).stdout).into_owned();
    assert!(
        text.starts_with(&format!(
            "{} (p)  {session}  echo  1.0.0  since ",
            world.project
        )),
        "{text}"
    );
    let sessions =
        String::from_utf8_lossy(&desktop_cli(&state, &["session", "list"]).stdout).into_owned();
    assert!(
        sessions.contains(&format!("shared with p ({})", world.project)),
        "{sessions}"
    );

    let unknown = desktop_cli(
        &state,
        &[
            "share",
            "--project",
            "not-a-project",
            "--session",
            session.as_str(),
        ],
    );
    assert_eq!(unknown.status.code(), Some(1));
    let message = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        message.contains("does not serve a project not-a-project")
            && message.contains("relay desktop project enable not-a-project"),
        "{message}"
    );
    world
        .state
        .set_project_enabled("switched-off", false, Timestamp::from_unix_millis(2))
        .expect("disabled project");
    let disabled = desktop_cli(
        &state,
        &[
            "share",
            "--project",
            "switched-off",
            "--session",
            session.as_str(),
        ],
    );
    assert_eq!(disabled.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&disabled.stderr).contains("is disabled on this desktop"),
        "{disabled:?}"
    );
    // Nothing was added by the refusals.
    assert_eq!(world.state.shares().expect("shares").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desktop_token_refused_twice_stops_the_relay_saying_what_to_do() {
    use relay_desktop::api::{DesktopApi, HttpTransport};
    use relay_desktop::{Relay, Runtime};
    use std::sync::Arc;

    let world = World::new(json!({})).await;
    world.share(ECHO).await;
    let transport = Arc::new(HttpTransport::new(&world.service.base).expect("transport"));
    let state = relay_desktop::state::DesktopState::open(&state_path(&world)).expect("state");
    let relay = Relay::new(
        state,
        DesktopApi::new(transport, "not-a-real-desktop-token"),
        Arc::new(relay_protocol::clock::SystemClock),
        Runtime {
            engine: runner::engine::EngineKind::Boa.build().expect("boa"),
            provider: world.mock.clone(),
            events: world.events.clone(),
        },
        harness::fast_config(),
    );
    let stopped = tokio::time::timeout(
        Duration::from_secs(30),
        relay.run(tokio_util::sync::CancellationToken::new()),
    )
    .await
    .expect("the relay stops by itself");
    let error = stopped.expect_err("with an error").to_string();
    assert!(
        error.contains("desktop token")
            && error.contains("401")
            && error.contains("relay admin token create --desktop"),
        "{error}"
    );
}
