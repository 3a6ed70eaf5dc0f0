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

/// A second graph, so one session can be unshared while another stays.
const OTHER: &str = r#"
export const meta = {name: "Other", slug: "other", version: "1.0.0"};
export default async function () { return "other"; }
"#;

/// Holds the first long poll that carries sessions until the test lets it go, then sends it
/// with no wait, so the service answers it at once.
struct Gate {
    inner: relay_desktop::api::HttpTransport,
    /// 0: nothing held yet; 1: holding; 2: let go; 3: answered.
    stage: tokio::sync::watch::Sender<u8>,
    /// The held request's sessions, by slug.
    held: std::sync::Mutex<Vec<String>>,
}

impl relay_desktop::api::Transport for Gate {
    fn send(
        &self,
        request: http::Request<Vec<u8>>,
    ) -> relay_desktop::api::BoxFuture<
        '_,
        Result<http::Response<Vec<u8>>, relay_desktop::api::TransportError>,
    > {
        Box::pin(async move {
            let mut body: serde_json::Value =
                serde_json::from_slice(request.body()).unwrap_or_default();
            let slugs: Vec<String> = body["sessions"]
                .as_array()
                .map(|s| {
                    s.iter()
                        .filter_map(|s| s["slug"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let gated = body.get("wait_ms").is_some()
                && !slugs.is_empty()
                && self.stage.send_if_modified(|stage| {
                    let first = *stage == 0;
                    if first {
                        *self.held.lock().unwrap_or_else(|p| p.into_inner()) = slugs;
                        *stage = 1;
                    }
                    first
                });
            if !gated {
                return self.inner.send(request).await;
            }
            let mut stage = self.stage.subscribe();
            stage.wait_for(|stage| *stage >= 2).await.expect("gate");
            body["wait_ms"] = json!(0);
            let (parts, _) = request.into_parts();
            let answer = self
                .inner
                .send(http::Request::from_parts(
                    parts,
                    body.to_string().into_bytes(),
                ))
                .await;
            self.stage.send_replace(3);
            answer
        })
    }
}

/// The slugs `list_graph_sessions` shows the agent, in order.
async fn listed(world: &World) -> Vec<String> {
    let list = crate::common::ok(
        &crate::common::call(
            &world.client,
            "list_graph_sessions",
            json!({"project_id": world.project}),
        )
        .await,
    );
    let mut slugs: Vec<String> = list["sessions"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter_map(|s| s["slug"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    slugs.sort();
    slugs
}

/// A long poll built before the owner unshares a session, and slow to reach the service (held
/// here until the unshare is in), never lists the session again: every snapshot carries the
/// sharing version it was read at, and the service keeps the newest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_built_before_an_unshare_never_lists_the_session_again() {
    let world = World::new(json!({"default": {"text": "x"}})).await;
    world.share(ECHO).await;
    let other = world.share(OTHER).await;
    assert_eq!(listed(&world).await, ["echo", "other"]);
    let (stage, mut stages) = tokio::sync::watch::channel(0u8);
    let gate = std::sync::Arc::new(Gate {
        inner: relay_desktop::api::HttpTransport::new(&world.service.base).expect("transport"),
        stage,
        held: std::sync::Mutex::default(),
    });
    let relay = relay_desktop::Relay::new(
        relay_desktop::state::DesktopState::open(&world.state_dir.path().join("desktop.db"))
            .expect("state"),
        relay_desktop::api::DesktopApi::new(gate.clone(), &world.desktop_token),
        std::sync::Arc::new(relay_protocol::clock::SystemClock),
        relay_desktop::Runtime {
            engine: runner::engine::EngineKind::Boa.build().expect("boa"),
            provider: world.mock.clone(),
            events: world.events.clone(),
        },
        relay_desktop::DesktopConfig {
            long_poll: Some(relay_desktop::DEFAULT_LONG_POLL),
            ..harness::fast_config()
        },
    );
    let (stop, task) = harness::start(&relay);
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        stages.wait_for(|stage| *stage == 1),
    )
    .await
    .expect("a long poll carrying the sessions is held")
    .expect("gate");
    assert_eq!(
        *gate.held.lock().unwrap_or_else(|p| p.into_inner()),
        ["echo", "other"],
        "the held long poll was built before the unshare"
    );

    world
        .state
        .unshare(&world.project, &other)
        .expect("unshare");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while listed(&world).await != ["echo"] {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the unshare never reached the service"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    gate.stage.send_replace(2);
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        stages.wait_for(|stage| *stage == 3),
    )
    .await
    .expect("the held long poll is answered")
    .expect("gate");
    assert_eq!(
        listed(&world).await,
        ["echo"],
        "the late long poll undid the unshare"
    );
    stop.cancel();
    task.await.expect("the relay stops");
}
