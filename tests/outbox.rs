//! The persistent outbox: a completion is written before it is posted and removed only after a
//! 2xx, so a lost post is delivered on the next pass and a relay killed before posting delivers
//! after restart, without running the graph again.

use crate::harness;

use std::sync::atomic::Ordering;

use harness::{ECHO, World};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_completion_request_is_delivered_next_pass() {
    let world = World::new(json!({"default": {"text": "result", "tokens": 7}})).await;
    let session = world.share(ECHO).await;
    let command = world.queue(&session, "key-outbox-1", json!({})).await;
    world
        .faults
        .drop_complete_requests
        .store(1, Ordering::SeqCst);
    let relay = world.relay();
    relay.pass(&Default::default()).await;
    assert_eq!(
        world.get(&command).await["status"],
        "running",
        "the post was lost"
    );
    assert_eq!(world.state.outbox().expect("outbox").len(), 1);
    relay.pass(&Default::default()).await;
    let run = world.get(&command).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["result"]["text"], "result");
    assert!(world.state.outbox().expect("outbox").is_empty());
    assert_eq!(world.mock.calls().len(), 1, "no duplicate run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_completion_answer_is_replayed_and_accepted() {
    let world = World::new(json!({"default": {"text": "result"}})).await;
    let session = world.share(ECHO).await;
    let command = world.queue(&session, "key-outbox-2", json!({})).await;
    world
        .faults
        .drop_complete_responses
        .store(1, Ordering::SeqCst);
    let relay = world.relay();
    relay.pass(&Default::default()).await;
    assert_eq!(
        world.get(&command).await["status"],
        "completed",
        "the service recorded it"
    );
    assert_eq!(
        world.state.outbox().expect("outbox").len(),
        1,
        "but the desktop did not hear back"
    );
    relay.pass(&Default::default()).await;
    assert!(
        world.state.outbox().expect("outbox").is_empty(),
        "the replay was accepted"
    );
    assert_eq!(world.faults.complete_posts.load(Ordering::SeqCst), 2);
    assert_eq!(world.mock.calls().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_killed_before_posting_delivers_after_restart() {
    let world = World::new(json!({"default": {"text": "survives restarts"}})).await;
    let session = world.share(ECHO).await;
    let command = world.queue(&session, "key-outbox-3", json!({})).await;
    {
        // Every post fails: as if the process died right after writing the outbox.
        world
            .faults
            .drop_complete_requests
            .store(usize::MAX, Ordering::SeqCst);
        let relay = world.relay();
        relay.pass(&Default::default()).await;
        drop(relay);
    }
    assert_eq!(world.get(&command).await["status"], "running");
    world
        .faults
        .drop_complete_requests
        .store(0, Ordering::SeqCst);
    // A new process over the same state file: its first pass delivers.
    let relay = world.relay();
    let (stop, task) = harness::start(&relay);
    let run = world
        .wait_terminal(&command, std::time::Duration::from_secs(10))
        .await;
    stop.cancel();
    task.await.expect("relay stops");
    assert_eq!(run["status"], "completed");
    assert_eq!(run["result"]["text"], "survives restarts");
    assert_eq!(world.mock.calls().len(), 1, "the graph ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_interrupted_by_a_crash_is_reported_failed_on_restart() {
    let world = World::new(json!({"default": {"text": "x"}})).await;
    let session = world.share(ECHO).await;
    let command: relay_protocol::CommandId = world
        .queue(&session, "key-outbox-4", json!({}))
        .await
        .parse()
        .expect("id");
    // The crash: the relay recorded the start (history `running`, service told), its graph
    // began, and it died. (One whose graph never began is handed back instead:
    // `killed_starts.rs`.)
    let at = relay_protocol::clock::Timestamp::from_unix_millis(5);
    world
        .state
        .begin_execution(
            "exec-crashed",
            &command,
            &world.project,
            &session,
            "echo",
            at,
        )
        .expect("begin");
    world
        .state
        .mark_began("exec-crashed", at)
        .expect("the graph began");
    let desktop = world.service.desktop(&world.project).await;
    let (status, _) = desktop.started(&command.to_string(), "exec-crashed").await;
    assert_eq!(status, 200);
    let relay = world.relay();
    let (stop, task) = harness::start(&relay);
    let run = world
        .wait_terminal(&command.to_string(), std::time::Duration::from_secs(10))
        .await;
    stop.cancel();
    task.await.expect("relay stops");
    assert_eq!(run["status"], "failed");
    assert!(
        run["error"]
            .as_str()
            .unwrap_or("")
            .contains("stopped while this graph was running"),
        "{run}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_completion_is_dropped_not_retried_forever() {
    let world = World::new(json!({"default": {"text": "x"}})).await;
    let session = world.share(ECHO).await;
    let command = world.queue(&session, "key-outbox-5", json!({})).await;
    let relay = world.relay();
    relay.pass(&Default::default()).await;
    assert_eq!(world.get(&command).await["status"], "completed");
    // A different completion for the finished command sits in the outbox (e.g. a stale copy).
    let stale = relay_desktop::bounding::completion(
        "another-execution",
        relay_protocol::CompletionStatus::Failed,
        None,
        0,
        0.0,
        Some("stale"),
    );
    world
        .state
        .begin_execution(
            "another-execution",
            &command.parse().expect("id"),
            &world.project,
            &session,
            "echo",
            relay_protocol::clock::Timestamp::from_unix_millis(9),
        )
        .expect("begin");
    world
        .state
        .finish_execution(
            &command.parse().expect("id"),
            None,
            None,
            &stale,
            relay_protocol::clock::Timestamp::from_unix_millis(10),
        )
        .expect("queued");
    relay.pass(&Default::default()).await;
    assert!(
        world.state.outbox().expect("outbox").is_empty(),
        "the 409 was dropped"
    );
    assert_eq!(
        world.get(&command).await["status"],
        "completed",
        "the first completion stands"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_the_service_refuses_for_good_is_kept_in_the_history_not_resent() {
    let world = World::new(json!({"default": {"text": "x"}})).await;
    let session = world.share(ECHO).await;
    let command = world.queue(&session, "key-outbox-6", json!({})).await;
    world
        .faults
        .poison_completions
        .store(true, Ordering::SeqCst);
    let relay = world.relay();
    relay.pass(&Default::default()).await;
    assert_eq!(world.faults.complete_posts.load(Ordering::SeqCst), 1);
    assert!(
        world.state.outbox().expect("outbox").is_empty(),
        "a 400 is final: the completion leaves the outbox"
    );
    relay.pass(&Default::default()).await;
    relay.pass(&Default::default()).await;
    assert_eq!(
        world.faults.complete_posts.load(Ordering::SeqCst),
        1,
        "and is not sent again"
    );
    let history = world.state.history().expect("history");
    let row = history
        .iter()
        .find(|h| h.command_id == command)
        .expect("the execution is in the history");
    assert_eq!(row.status, "completed");
    let refusal = row.refused_by_service.as_deref().unwrap_or("");
    assert!(refusal.contains("total_tokens"), "{row:?}");

    let listed = std::process::Command::new(harness::relay_binary())
        .args(["desktop", "--state"])
        .arg(world.state_dir.path().join("desktop.db"))
        .arg("history")
        .output()
        .expect("relay desktop history runs");
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.status.success(), "{listed:?}");
    assert!(
        stdout.contains(&format!("refused by the service: {refusal}")),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_after_a_silence_failure_takes_the_services_outcome_into_the_history() {
    let world = World::new(json!({"default": {"text": "late result"}})).await;
    let session = world.share(ECHO).await;
    let command = world.queue(&session, "key-outbox-late", json!({})).await;
    world
        .faults
        .drop_complete_requests
        .store(1, Ordering::SeqCst);
    let relay = world.relay();
    relay.pass(&Default::default()).await;
    assert_eq!(world.state.outbox().expect("outbox").len(), 1);
    // The desktop stays away past the silence timeout: the service fails the run.
    world
        .service
        .clock
        .advance(relay_service::runs::DEFAULT_SILENCE_TIMEOUT + std::time::Duration::from_secs(1));
    let failed = world.get(&command).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    // Back, the desktop delivers: 200 already_finished, not a 409 dropped at ERROR.
    relay.pass(&Default::default()).await;
    assert!(world.state.outbox().expect("outbox").is_empty());
    let history = world.state.history().expect("history");
    let row = history
        .iter()
        .find(|row| row.command_id == command)
        .expect("the history row");
    assert_eq!(row.status, "failed", "{row:?}");
    let note = row.refused_by_service.as_deref().unwrap_or_default();
    assert!(
        note.contains("already ended this run as failed") && note.contains("stopped reporting"),
        "{note}"
    );
    assert_eq!(
        row.result.as_ref().map(|r| r["text"].clone()),
        Some(json!("late result")),
        "the desktop keeps its result"
    );
    let run = world.get(&command).await;
    assert_eq!(
        run["status"], "failed",
        "the service's outcome stands: {run}"
    );
    assert_eq!(run["error"], failed["error"]);
}
