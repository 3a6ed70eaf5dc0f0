//! The run journal in the desktop state (issue 46, docs/journal.md), with real `relay desktop`
//! processes: every run the desktop executes is journaled in its state database as it runs
//! (header with the script hash, arguments, seed and engine; each answer before the graph gets
//! it), the journal outlives a SIGKILL, and it is deleted once the run's end is posted. A run a
//! SIGKILL interrupted is resumed by the next start: it completes once, its journaled agents
//! are not asked again, its file is written, its tokens are the uninterrupted run's plus at most
//! the agent in flight; not when its graph changed or with `--no-resume`.

use crate::harness;

use std::time::Duration;

use harness::{RelayProcess, World, wait_until};
use runner::host::journal::{Header, sha256_hex};
use serde_json::{Value, json};

/// Asks one agent (99 tokens), then a second one that never answers.
const AGENT_THEN_SLOW: &str = r#"
export const meta = {name: "Agent then slow", slug: "journal-slow", version: "1.0.0"};
export default async function (args, g) {
  await g.agent({label: "first", prompt: "hi " + args.who});
  return g.agent({label: "slow", prompt: "and again"});
}
"#;

/// One agent, then done.
const ONE_AGENT: &str = r#"
export const meta = {name: "One agent", slug: "journal-one", version: "1.0.0"};
export default async function (args, g) {
  return (await g.agent({label: "first", prompt: "hi"})).text;
}
"#;

/// Asks one agent (99 tokens), then a second one that takes a while (5 tokens).
const AGENT_THEN_SECOND: &str = r#"
export const meta = {name: "Agent then second", slug: "journal-second", version: "1.0.0"};
export default async function (args, g) {
  const first = await g.agent({label: "first", prompt: "hi"});
  const second = await g.agent({label: "second", prompt: "and again"});
  return [first.text, second.text];
}
"#;

fn replies() -> Value {
    json!({"replies": [
        {"label": "first", "text": "hello", "tokens": 99},
        {"label": "second", "text": "world", "tokens": 5, "latency_ms": 1500},
        {"label": "slow", "text": "late", "latency_ms": 600000}
    ], "default": {"text": "x", "tokens": 5}})
}

fn spawn_relay(world: &World, name: &str) -> RelayProcess {
    world.spawn_relay(name, &replies(), &[])
}

fn kill(relay: &mut RelayProcess) {
    let pid = i32::try_from(relay.child.id()).expect("pid");
    // SAFETY: sends a signal to our own child process, whose pid we hold.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "signal sent");
    relay.child.wait().expect("wait");
}

/// The journal of the only execution in the history, if it has one.
fn journal(world: &World) -> Option<String> {
    let history = world.state.history().expect("history");
    let execution = &history.first()?.execution_id;
    world.state.journal_text(execution).expect("journal")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_journal_is_in_the_state_before_the_answer_and_outlives_a_sigkill() {
    let world = World::new(replies()).await;
    let session = world.share(AGENT_THEN_SLOW).await;
    let command = world
        .queue(&session, "key-journal-kill", json!({"who": "ann"}))
        .await;
    let mut relay = spawn_relay(&world, "journal-kill");
    // The first agent's answer is journaled before the graph gets it, so by the time the graph
    // starts the slow agent, the state holds the await of the first one.
    wait_until("the slow agent's start is journaled", || {
        journal(&world).is_some_and(|text| text.contains(r#""what":"slow""#))
    })
    .await;
    // The history's token count (what a start without resuming reports) is written beside the
    // journal, a moment after it.
    wait_until("the first agent's tokens are in the history", || {
        world.state.history().expect("history")[0].total_tokens == 99
    })
    .await;
    kill(&mut relay);
    let text = journal(&world).expect("the journal outlives the kill");
    let mut lines = text.lines();
    let header: Header =
        serde_json::from_str(lines.next().expect("a header")).expect("the header parses");
    assert_eq!(header.script_sha256, sha256_hex(&header.script));
    assert!(header.script.contains("journal-slow"), "{}", header.script);
    assert_eq!(header.args, json!({"who": "ann"}));
    assert_eq!(header.graph, "journal-slow");
    assert!(
        ["boa", "wasm"].contains(&header.engine.as_str()),
        "{header:?}"
    );
    let wait = text
        .lines()
        .find(|line| line.starts_with(r#"{"k":"wait""#))
        .expect("the first agent's await");
    assert!(wait.contains("hello"), "{wait}");
    assert!(text.contains(r#"{"k":"usage","tokens":99"#), "{text}");
    assert!(
        !text.contains(r#""k":"end""#),
        "the run had not ended: {text}"
    );

    // With --no-resume the next start reports the run failed, as before the journal; once
    // that end is posted, the journal goes.
    let restarted = world.spawn_relay("journal-restart", &replies(), &["--no-resume"]);
    let run = world.wait_terminal(&command, Duration::from_secs(20)).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"]
            .as_str()
            .is_some_and(|e| e.contains("the desktop relay stopped while this graph was running")),
        "{run}"
    );
    assert_eq!(run["total_tokens"], 99, "{run}");
    wait_until("the journal is deleted once the end is posted", || {
        journal(&world).is_none()
    })
    .await;
    assert!(
        world.state.journals().expect("journals").is_empty(),
        "{}",
        restarted.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_runs_journal_ends_and_is_deleted_once_posted() {
    let world = World::new(replies()).await;
    let session = world.share(ONE_AGENT).await;
    let command = world.queue(&session, "key-journal-one", json!({})).await;
    let relay = spawn_relay(&world, "journal-one");
    let run = world.wait_terminal(&command, Duration::from_secs(20)).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["total_tokens"], 99, "{run}");
    wait_until("the journal is deleted once the end is posted", || {
        world.state.history().expect("history").len() == 1 && journal(&world).is_none()
    })
    .await;
    assert!(
        world.state.journals().expect("journals").is_empty(),
        "{}",
        relay.log()
    );
}

/// Queues AGENT_THEN_SECOND, runs it, and SIGKILLs the relay while the second agent is asked.
async fn killed_during_the_second_agent(world: &World, key: &str) -> String {
    let session = world.share(AGENT_THEN_SECOND).await;
    let command = world.queue(&session, key, json!({})).await;
    let mut relay = spawn_relay(world, key);
    wait_until("the second agent's start is journaled", || {
        journal(world).is_some_and(|text| text.contains(r#""what":"second""#))
    })
    .await;
    // What a start without resuming reports: written beside the journal, a moment after it.
    wait_until("the first agent's tokens are in the history", || {
        world.state.history().expect("history")[0].total_tokens == 99
    })
    .await;
    kill(&mut relay);
    assert_eq!(world.get(&command).await["status"], "running");
    command
}

/// The replies of a restart that would tell whether the first agent was asked again: its
/// answer and tokens would be these.
fn asked_again() -> Value {
    json!({"replies": [
        {"label": "first", "text": "asked again", "tokens": 1000},
        {"label": "second", "text": "world", "tokens": 5, "latency_ms": 300}
    ]})
}

/// Starts the relay `name` on `replies` and checks that it resumes `command` to `result` once:
/// 104 tokens (the first agent's 99 from the journal, the second agent, in flight at the stop,
/// asked again), one history row, completed.
async fn resumed_once(world: &World, command: &str, name: &str, replies: &Value, result: &Value) {
    let restarted = world.spawn_relay(name, replies, &[]);
    let run = world.wait_terminal(command, Duration::from_secs(20)).await;
    let log = restarted.log();
    assert_eq!(run["status"], "completed", "{run}: {log}");
    assert_eq!(&run["result"], result, "{run}");
    assert_eq!(run["total_tokens"], 104, "{run}: {log}");
    assert!(log.contains("resuming a run"), "{log}");
    let history = world.state.history().expect("history");
    assert_eq!(history.len(), 1, "one run, not two: {history:?}");
    assert_eq!(history[0].status, "completed", "{history:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_mid_way_resumes_from_its_journal_and_completes_once() {
    let world = World::new(replies()).await;
    let command = killed_during_the_second_agent(&world, "key-resume").await;
    let result = json!(["hello", "world"]);
    resumed_once(&world, &command, "resume-restart", &asked_again(), &result).await;
    let listed = harness::desktop_cli(&world.state_path(), &["history"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("resumed 1x after a stop"), "{listed}");
}

fn signal(relay: &mut RelayProcess, signal: i32) -> std::process::ExitStatus {
    let pid = i32::try_from(relay.child.id()).expect("pid");
    // SAFETY: sends a signal to our own child process, whose pid we hold.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "signal sent");
    relay.child.wait().expect("wait")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stopped_by_sigterm_is_kept_and_resumed_at_the_next_start() {
    let world = World::new(replies()).await;
    let session = world.share(AGENT_THEN_SECOND).await;
    let command = world.queue(&session, "key-sigterm-resume", json!({})).await;
    let mut relay = spawn_relay(&world, "sigterm-resume");
    wait_until("the second agent's start is journaled", || {
        journal(&world).is_some_and(|text| text.contains(r#""what":"second""#))
    })
    .await;
    let status = signal(&mut relay, libc::SIGTERM);
    let log = relay.log();
    assert!(status.success(), "{status:?}: {log}");
    assert!(
        log.contains("1 run interrupted; it resumes at the next start"),
        "{log}"
    );
    // Nothing was posted: the service still holds the run as running, the state keeps it
    // running with its journal, which has no end and nothing after the stop.
    assert_eq!(world.get(&command).await["status"], "running", "{log}");
    let history = world.state.history().expect("history");
    assert_eq!(history[0].status, "running", "{history:?}");
    assert!(world.state.outbox().expect("outbox").is_empty());
    let text = journal(&world).expect("the journal is kept");
    assert!(!text.contains(r#""k":"end""#), "{text}");
    assert!(
        !text.contains("world"),
        "the second agent's cancel is not journaled: {text}"
    );

    let result = json!(["hello", "world"]);
    resumed_once(
        &world,
        &command,
        "sigterm-resume-restart",
        &replies(),
        &result,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stopped_by_sigterm_with_no_resume_ends_failed_at_once() {
    let world = World::new(replies()).await;
    let session = world.share(AGENT_THEN_SECOND).await;
    let command = world.queue(&session, "key-sigterm-no", json!({})).await;
    let mut relay = world.spawn_relay("sigterm-no-resume", &replies(), &["--no-resume"]);
    wait_until("the second agent's start is journaled", || {
        journal(&world).is_some_and(|text| text.contains(r#""what":"second""#))
    })
    .await;
    let status = signal(&mut relay, libc::SIGTERM);
    assert!(status.success(), "{status:?}: {}", relay.log());
    let run = world.wait_terminal(&command, Duration::from_secs(10)).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"]
            .as_str()
            .is_some_and(|e| e.contains("the desktop relay was stopped")),
        "{run}"
    );
    assert!(!relay.log().contains("resumes at the next start"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_graph_changed_while_interrupted_is_not_resumed() {
    let world = World::new(replies()).await;
    let command = killed_during_the_second_agent(&world, "key-changed").await;
    world
        .state
        .with_sync(|conn| {
            conn.execute(
                "UPDATE graph_sessions SET script = script || '\n// edited\n'",
                [],
            )?;
            Ok(())
        })
        .expect("edit the session's code");
    let restarted = spawn_relay(&world, "changed-restart");
    let run = world.wait_terminal(&command, Duration::from_secs(20)).await;
    assert_eq!(run["status"], "failed", "{run}: {}", restarted.log());
    assert!(
        run["error"]
            .as_str()
            .is_some_and(|e| e.contains("the graph changed while the run was interrupted")),
        "{run}"
    );
    assert_eq!(run["total_tokens"], 99, "{run}");
}

/// Six agents in turn, then a file written with their answers.
const SIX_THEN_WRITE: &str = r#"
export const meta = {name: "Six then write", slug: "journal-six", version: "1.0.0"};
export default async function (args, g) {
  const texts = [];
  for (let i = 1; i <= 6; i++) {
    texts.push((await g.agent({label: "a" + i, prompt: "p" + i})).text);
  }
  await g.tool("fs.write", {path: "six.txt", text: texts.join(",")});
  return texts;
}
"#;

fn six_replies() -> Value {
    let replies: Vec<Value> = (1..=6)
        .map(|i| json!({"label": format!("a{i}"), "text": format!("t{i}"), "tokens": i * 10, "latency_ms": 150}))
        .collect();
    json!({"replies": replies})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_at_each_agent_resumes_to_the_uninterrupted_outcome() {
    for k in 1..=6 {
        let world = World::new(six_replies()).await;
        let folder = world.shared_folder(runner::host::approvals::Policy::Allow);
        let session = world.share(SIX_THEN_WRITE).await;
        let command = world
            .queue(&session, &format!("key-six-{k}"), json!({}))
            .await;
        let mut relay = world.spawn_relay(&format!("six-{k}"), &six_replies(), &[]);
        let started = format!(r#""what":"a{k}""#);
        wait_until("the agent's start is journaled", || {
            journal(&world).is_some_and(|text| text.contains(&started))
        })
        .await;
        kill(&mut relay);
        let restarted = world.spawn_relay(&format!("six-{k}-restart"), &six_replies(), &[]);
        let run = world.wait_terminal(&command, Duration::from_secs(20)).await;
        let at = format!("killed at agent {k}: {run}: {}", restarted.log());
        assert_eq!(run["status"], "completed", "{at}");
        assert_eq!(
            run["result"],
            json!(["t1", "t2", "t3", "t4", "t5", "t6"]),
            "{at}"
        );
        // 210 uninterrupted, plus at most the agent in flight at the kill.
        let tokens = run["total_tokens"].as_u64().expect("tokens");
        assert!((210..=210 + k * 10).contains(&tokens), "{tokens}: {at}");
        assert_eq!(
            std::fs::read_to_string(folder.join("six.txt")).expect("written"),
            "t1,t2,t3,t4,t5,t6"
        );
        assert_eq!(world.state.history().expect("history").len(), 1, "{at}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_killed_again_resumes_again() {
    let world = World::new(six_replies()).await;
    world.shared_folder(runner::host::approvals::Policy::Allow);
    let session = world.share(SIX_THEN_WRITE).await;
    let command = world.queue(&session, "key-twice", json!({})).await;
    let mut relay = world.spawn_relay("twice", &six_replies(), &[]);
    for (k, name) in [(2, "twice-1"), (4, "twice-2")] {
        let started = format!(r#""what":"a{k}""#);
        wait_until("the agent's start is journaled", || {
            journal(&world).is_some_and(|text| text.contains(&started))
        })
        .await;
        kill(&mut relay);
        relay = world.spawn_relay(name, &six_replies(), &[]);
    }
    let run = world.wait_terminal(&command, Duration::from_secs(20)).await;
    let at = format!("{run}: {}", relay.log());
    assert_eq!(run["status"], "completed", "{at}");
    assert_eq!(
        run["result"],
        json!(["t1", "t2", "t3", "t4", "t5", "t6"]),
        "{at}"
    );
    let tokens = run["total_tokens"].as_u64().expect("tokens");
    assert!((210..=210 + 20 + 40).contains(&tokens), "{tokens}: {at}");
    let history = world.state.history().expect("history");
    assert_eq!(history.len(), 1, "{at}");
    assert_eq!(history[0].resumed, 2, "{at}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_interrupted_past_the_silence_timeout_is_not_resumed() {
    let world = World::new(replies()).await;
    let command = killed_during_the_second_agent(&world, "key-silence").await;
    // The desktop stays away past the silence timeout: the service fails the run.
    world
        .service
        .clock
        .advance(relay_service::runs::DEFAULT_SILENCE_TIMEOUT + std::time::Duration::from_secs(1));
    let failed = world.get(&command).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let restarted = spawn_relay(&world, "silence-restart");
    wait_until("the interrupted run is settled in the history", || {
        world
            .state
            .history()
            .expect("history")
            .first()
            .is_some_and(|row| row.status != "running")
            && journal(&world).is_none()
    })
    .await;
    let log = restarted.log();
    assert!(!log.contains("resuming a run"), "{log}");
    assert_eq!(world.state.history().expect("history")[0].status, "failed");
    let run = world.get(&command).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(
        run["error"], failed["error"],
        "the service's outcome stands"
    );
}

/// An agent that writes a file through an `ask` tool, then takes long to finish.
const AGENT_WRITES: &str = r#"
export const meta = {name: "Agent writes", slug: "journal-asks", version: "1.0.0"};
export default async function (args, g) {
  return (await g.agent({label: "w", prompt: "write", tools: ["fs.write"]})).text;
}
"#;

fn agent_writes_replies(last_turn_ms: u64) -> Value {
    json!({"replies": [
        {"label": "w", "turn": 1, "text": "", "tokens": 10,
         "tool_calls": [{"name": "fs.write", "arguments": {"path": "asked.txt", "text": "once"}}]},
        {"label": "w", "turn": 2, "text": "done", "tokens": 5, "latency_ms": last_turn_ms}
    ]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_answered_before_a_kill_is_not_asked_again_after_the_resume() {
    let world = World::new(agent_writes_replies(600_000)).await;
    let folder = world.shared_folder(runner::host::approvals::Policy::Ask);
    let session = world.share(AGENT_WRITES).await;
    let command = world.queue(&session, "key-asks", json!({})).await;
    let mut relay = world.spawn_relay("asks", &agent_writes_replies(600_000), &[]);
    wait_until("the owner is asked", || {
        !world.state.approvals(false).expect("approvals").is_empty()
    })
    .await;
    let pending = world.state.approvals(false).expect("approvals");
    assert_eq!(pending[0].tool, "fs.write");
    let approved = harness::desktop_cli(
        &world.state_path(),
        &["approvals", "approve", &pending[0].id],
    );
    assert!(approved.status.success(), "{approved:?}");
    // The answer is journaled; the agent (in flight at the kill) waits on its last turn.
    wait_until(
        "the owner's answer is journaled and the file written",
        || {
            journal(&world).is_some_and(|text| text.contains(r#""k":"approval""#))
                && folder.join("asked.txt").exists()
        },
    )
    .await;
    kill(&mut relay);
    std::fs::remove_file(folder.join("asked.txt")).expect("written once so far");

    // Resumed: the agent is asked again, calls the tool again, and the journal answers the
    // ask; the owner is not asked a second time.
    let restarted = world.spawn_relay("asks-restart", &agent_writes_replies(10), &[]);
    let run = world.wait_terminal(&command, Duration::from_secs(20)).await;
    let log = restarted.log();
    assert_eq!(run["status"], "completed", "{run}: {log}");
    assert_eq!(run["result"], "done", "{run}");
    assert!(log.contains("resuming a run"), "{log}");
    assert!(!log.contains("waits for your approval"), "{log}");
    let all = world.state.approvals(true).expect("approvals");
    assert_eq!(all.len(), 1, "one question in all: {all:?}");
    assert_eq!(
        std::fs::read_to_string(folder.join("asked.txt")).expect("written again"),
        "once"
    );
}

/// One agent, then a write the owner is asked about.
const AGENT_THEN_ASKED_WRITE: &str = r#"
export const meta = {name: "Agent then asked write", slug: "journal-asked-write", version: "1.0.0"};
export default async function (args, g) {
  const r = await g.agent({label: "first", prompt: "hi"});
  return g.tool("fs.write", {path: "out.txt", text: r.text});
}
"#;

/// Stops the relay with `stop` while the owner is asked, starts it again, and approves the
/// question the resumed run asks.
async fn asked_then_stopped(stop: i32) {
    let world = World::new(replies()).await;
    let folder = world.shared_folder(runner::host::approvals::Policy::Ask);
    let session = world.share(AGENT_THEN_ASKED_WRITE).await;
    let command = world.queue(&session, "key-asked", json!({})).await;
    let mut relay = spawn_relay(&world, "asked");
    wait_until("the owner is asked", || {
        !world.state.approvals(false).expect("approvals").is_empty()
    })
    .await;
    let first = world.state.approvals(false).expect("approvals")[0]
        .id
        .clone();
    signal(&mut relay, stop);

    let restarted = spawn_relay(&world, "asked-restart");
    // The question asked before the stop is expired; the resumed run asks again.
    wait_until("the resumed run asks again", || {
        world
            .state
            .approvals(false)
            .expect("approvals")
            .first()
            .is_some_and(|pending| pending.id != first)
    })
    .await;
    assert_eq!(
        world.state.approval_status(&first).expect("status"),
        Some(relay_desktop::state::ApprovalStatus::Expired)
    );
    let again = world.state.approvals(false).expect("approvals");
    assert_eq!(again.len(), 1, "{again:?}");
    let approved =
        harness::desktop_cli(&world.state_path(), &["approvals", "approve", &again[0].id]);
    assert!(approved.status.success(), "{approved:?}");
    let run = world.wait_terminal(&command, Duration::from_secs(20)).await;
    let log = restarted.log();
    assert_eq!(run["status"], "completed", "{run}: {log}");
    // The first agent's answer came from the journal: 99 tokens once.
    assert_eq!(run["total_tokens"], 99, "{run}");
    assert_eq!(
        std::fs::read_to_string(folder.join("out.txt")).expect("written"),
        "hello"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_pending_at_a_stop_expires_and_the_resumed_run_asks_again() {
    asked_then_stopped(libc::SIGTERM).await;
    asked_then_stopped(libc::SIGKILL).await;
}

/// A graph whose nested graph asks one agent (99 tokens), then a second one that takes a while.
const NESTING_PARENT: &str = r#"
export const meta = {name: "Nesting parent", slug: "journal-parent", version: "1.0.0"};
export default async function (args, g) {
  const inner = await g.graph("journal-second", {});
  return {inner};
}
"#;

/// A run killed while its nested graph waits for its second agent resumes that nested graph
/// from its journaled calls: the nested graph's first agent is not asked again (its 99 tokens
/// come from the journal), the run completes once with the uninterrupted result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_graph_killed_mid_way_resumes_from_its_journal_too() {
    let world = World::new(replies()).await;
    world.share(AGENT_THEN_SECOND).await;
    let parent = world.share(NESTING_PARENT).await;
    let command = world.queue(&parent, "key-nested-resume", json!({})).await;
    let mut relay = spawn_relay(&world, "nested-resume");
    wait_until(
        "the nested graph's second agent's start is journaled",
        || journal(&world).is_some_and(|text| text.contains(r#""what":"second""#)),
    )
    .await;
    wait_until("the first agent's tokens are in the history", || {
        world.state.history().expect("history")[0].total_tokens == 99
    })
    .await;
    kill(&mut relay);
    let result = json!({"inner": ["hello", "world"]});
    resumed_once(
        &world,
        &command,
        "nested-resume-restart",
        &asked_again(),
        &result,
    )
    .await;
}
