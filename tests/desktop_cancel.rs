//! Cancel while running: the desktop sees the flag on its next control poll, stops the engine
//! once, and the outcome is `cancelled`.

use crate::common;
use crate::harness;

use std::time::Duration;

use harness::{ECHO, World};
use runner::engine::EngineKind;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_while_running_stops_the_engine_within_a_control_poll() {
    for engine in [EngineKind::Wasm, EngineKind::Boa] {
        let world = World::new(json!({"default": {"text": "late", "latency_ms": 600000}})).await;
        let session = world.share(ECHO).await;
        let command = world.queue(&session, "key-cancel-1", json!({})).await;
        let relay = world.relay_with(engine.build().expect("engine"), harness::fast_config());
        let (stop, task) = harness::start(&relay);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        // `running` comes with the desktop's `started`, before the engine reaches the agent (a
        // wasm instance may take seconds to build on a busy machine): cancel once the agent
        // is mid-call, so the stop is the engine's, not a run that never reached its agent.
        while world.get(&command).await["status"] != "running" || world.mock.calls().is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "never started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let cancelled = common::call(
            &world.client,
            "cancel_graph_run",
            json!({"command_id": command}),
        )
        .await;
        common::ok(&cancelled);
        // The control interval is 100 ms; allow generous slack on a busy machine.
        let run = world.wait_terminal(&command, Duration::from_secs(30)).await;
        assert_eq!(run["status"], "cancelled", "{engine:?}: {run}");
        stop.cancel();
        task.await.expect("relay stops");
        let history = world.state.history().expect("history");
        assert_eq!(history[0].status, "cancelled");
        assert_eq!(
            world.mock.calls().len(),
            1,
            "the agent started once and was stopped"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_queued_run_is_never_seen_by_the_desktop() {
    let world = World::new(json!({"default": {"text": "x"}})).await;
    let session = world.share(ECHO).await;
    let command = world.queue(&session, "key-cancel-2", json!({})).await;
    common::ok(
        &common::call(
            &world.client,
            "cancel_graph_run",
            json!({"command_id": command}),
        )
        .await,
    );
    world.relay().pass(&Default::default()).await;
    assert_eq!(world.get(&command).await["status"], "cancelled");
    assert!(world.state.history().expect("history").is_empty());
    assert!(world.mock.calls().is_empty());
}
