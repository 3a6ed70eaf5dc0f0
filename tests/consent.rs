//! Consent is re-checked right before each command runs: a session unshared, a project disabled
//! or a slug changed after queueing means `cancelled` with the exact message, and the graph never
//! runs.

use crate::harness;

use harness::{ECHO, World};
use relay_desktop::NOT_SHARED;
use relay_protocol::clock::Timestamp;
use serde_json::json;

async fn refused_after(change: impl FnOnce(&World, &relay_protocol::GraphSessionId)) {
    let world = World::new(json!({"default": {"text": "must not run"}})).await;
    let session = world.share(ECHO).await;
    let command = world.queue(&session, "key-consent", json!({})).await;
    change(&world, &session);
    let relay = world.relay();
    relay.pass(&Default::default()).await;
    let run = world.get(&command).await;
    assert_eq!(run["status"], "cancelled", "{run}");
    assert_eq!(run["error"], NOT_SHARED);
    assert!(world.mock.calls().is_empty(), "the graph never ran");
    assert!(
        world.state.outbox().expect("outbox").is_empty(),
        "delivered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsharing_between_queueing_and_pickup_cancels() {
    refused_after(|world, session| {
        world
            .state
            .unshare(&world.project, session)
            .expect("unshare")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabling_the_project_between_queueing_and_pickup_cancels() {
    // A disabled project is not synced at all, so the command waits; re-enabling it without the
    // session shared then refuses it.
    refused_after(|world, session| {
        let now = Timestamp::from_unix_millis(2);
        world
            .state
            .set_project_enabled(&world.project, false, now)
            .expect("disable");
        world
            .state
            .unshare(&world.project, session)
            .expect("unshare");
        world
            .state
            .set_project_enabled(&world.project, true, now)
            .expect("enable");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_slug_between_queueing_and_pickup_cancels() {
    refused_after(|world, session| {
        // Re-register the session under a new slug by rewriting its row.
        world
            .state
            .with_sync(|conn| {
                conn.execute(
                    "UPDATE graph_sessions SET slug = 'renamed' WHERE id = ?1",
                    [session.as_str()],
                )?;
                Ok(())
            })
            .expect("rename");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_project_is_withdrawn_and_its_queued_work_cancelled() {
    // A disabled project is not synced for work; its one owed sync is empty, which ends its
    // queued runs with the consent error (before, they stayed queued and ran on re-enable).
    let world = World::new(json!({"default": {"text": "x"}})).await;
    let session = world.share(ECHO).await;
    let command = world.queue(&session, "key-disabled", json!({})).await;
    world
        .state
        .set_project_enabled(&world.project, false, Timestamp::from_unix_millis(2))
        .expect("disable");
    world.relay().pass(&Default::default()).await;
    let run = world.get(&command).await;
    assert_eq!(run["status"], "cancelled", "{run}");
    assert_eq!(run["error"], NOT_SHARED);
    assert!(world.mock.calls().is_empty());
}
