//! What the desktop tells the agent through `get_graph_run` (issue 32 point 6), with a real
//! desktop relay: while the owner is asked to approve a tool, `waiting_for` names it with its
//! deadline, and it is gone once answered; after an outage `finished_at` (when the run ended on
//! the desktop) is before `delivered_at` (when the service got the result); a stopped desktop
//! is offline after two poll intervals.

use crate::harness;

use std::sync::atomic::Ordering;
use std::time::Duration;

use harness::{ECHO, WRITES, World};
use relay_desktop::state::{ApprovalStatus, DesktopState};
use relay_protocol::DESKTOP_POLL_INTERVAL_SECS;
use relay_protocol::clock::{Clock, Timestamp};
use runner::engine::EngineKind;
use runner::host::approvals::Policy;
use serde_json::{Value, json};

async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !done().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_approval_is_what_the_run_waits_for_until_it_is_answered() {
    let world = World::new(json!({})).await;
    let folder = tempfile::tempdir().expect("folder");
    world.state.set_folder(folder.path()).expect("folder");
    world
        .state
        .set_policy("fs.write", Policy::Ask)
        .expect("policy");
    let session = world.share(WRITES).await;
    let command = world
        .queue(&session, "key-waiting", json!({"path": "out.md"}))
        .await;
    let mut config = harness::fast_config();
    config.approval_timeout = Duration::from_secs(600);
    let relay = world.relay_with(EngineKind::Boa.build().expect("boa"), config);
    let pass = tokio::spawn(async move { relay.pass(&Default::default()).await });
    let mut run = Value::Null;
    eventually("get_graph_run shows the approval wait", async || {
        run = world.get(&command).await;
        run["waiting_for"] == "owner approval of fs.write"
    })
    .await;
    assert_eq!(run["status"], "running", "{run}");
    let until = run["waiting_until"]
        .as_str()
        .and_then(Timestamp::parse_rfc3339)
        .expect("a deadline");
    let now = relay_protocol::clock::SystemClock.now();
    assert!(
        until > now.saturating_add(Duration::from_secs(500))
            && until <= now.saturating_add(Duration::from_secs(600)),
        "the deadline is the approval timeout away: {run}"
    );
    assert!(
        run["progress"]["tools_called"].is_u64(),
        "progress is reported beside the wait: {run}"
    );
    let id = world.state.approvals(false).expect("approvals")[0]
        .id
        .clone();
    assert!(
        world
            .state
            .decide(
                &id,
                ApprovalStatus::Approved,
                Timestamp::from_unix_millis(3)
            )
            .expect("decide")
    );
    pass.await.expect("pass");
    let done = world.get(&command).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["waiting_for"], Value::Null, "{done}");
    assert_eq!(done["waiting_until"], Value::Null, "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_outage_the_run_ended_before_its_result_was_delivered() {
    let world = World::new(json!({"replies": [], "default": {"text": "hi", "tokens": 3}})).await;
    let session = world.share(ECHO).await;
    let command = world.queue(&session, "key-outage", json!({})).await;
    // The desktop keeps the service's (manual) clock, so both sides' times compare exactly.
    let clock = world.service.clock.clone();
    let state = DesktopState::open(&world.state_dir.path().join("desktop.db")).expect("state");
    let relay = world.relay_over(
        state,
        clock.clone(),
        EngineKind::Boa.build().expect("boa"),
        harness::fast_config(),
    );
    // The run ends, and its completion does not get through.
    world
        .faults
        .drop_complete_requests
        .store(1, Ordering::SeqCst);
    relay.pass(&Default::default()).await;
    let run = world.get(&command).await;
    assert_eq!(run["status"], "running", "{run}");
    assert_eq!(relay.state().outbox().expect("outbox").len(), 1);
    let ended = clock.now();
    clock.advance(Duration::from_secs(19));
    relay.pass(&Default::default()).await;
    let run = world.get(&command).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["finished_at"], json!(ended), "{run}");
    assert_eq!(run["delivered_at"], json!(clock.now()), "{run}");
    assert!(
        run["finished_at"].as_str() < run["delivered_at"].as_str(),
        "{run}"
    );
    assert_eq!(run["desktop"]["online"], true, "{run}");

    // The desktop stops: two poll intervals later it is offline.
    let queued = world.queue(&session, "key-offline", json!({})).await;
    clock.advance(Duration::from_secs(2 * DESKTOP_POLL_INTERVAL_SECS + 1));
    let run = world.get(&queued).await;
    assert_eq!(run["status"], "queued", "{run}");
    assert_eq!(run["desktop"]["online"], false, "{run}");
    assert_eq!(
        run["desktop"]["last_seen_at"],
        json!(ended.saturating_add(Duration::from_secs(19))),
        "{run}"
    );
}
