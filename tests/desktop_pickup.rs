//! End to end: an agent queues a run over MCP, the desktop relay picks it up on its next pass,
//! runs it in the sandbox and posts the result; queued work waits out an offline desktop;
//! commands run one after another.

use crate::harness;

use std::sync::atomic::Ordering;
use std::time::Duration;

use harness::{ECHO, World};
use runner::engine::EngineKind;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_run_is_picked_up_run_in_the_sandbox_and_completed() {
    let world = World::new(json!({"replies": [{"label": "echo", "text": "hello from the desktop", "tokens": 42, "latency_ms": 400}]})).await;
    let session = world.share(ECHO).await;
    let command = world
        .queue(&session, "key-happy-1", json!({"text": "hi"}))
        .await;
    assert_eq!(world.get(&command).await["status"], "queued");

    // The default engine: the wasm sandbox.
    let relay = world.relay_with(
        EngineKind::Wasm.build().expect("wasm"),
        harness::fast_config(),
    );
    let (stop, task) = harness::start(&relay);
    // While the agent works (400 ms), the run reads `running`.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let run = world.get(&command).await;
        if run["status"] == "running" {
            break;
        }
        assert_eq!(run["status"], "queued", "{run}");
        assert!(tokio::time::Instant::now() < deadline, "never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let run = world.wait_terminal(&command, Duration::from_secs(30)).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        run["result"],
        json!({"text": "hello from the desktop", "tokens": 42})
    );
    // The result reaches the agent with the graph's key order (`{tokens, text}`), not sorted.
    let keys: Vec<&String> = run["result"].as_object().expect("object").keys().collect();
    assert_eq!(keys, ["tokens", "text"]);
    assert_eq!(run["total_tokens"], 42);
    stop.cancel();
    task.await.expect("relay stops");

    let history = world.state.history().expect("history");
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].command_id, command);
    assert_eq!(history[0].channel, format!("graph:external:{command}"));
    assert_eq!(history[0].status, "completed");
    assert!(world.state.outbox().expect("outbox").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_commands_queued_at_once_finish_one_after_another() {
    let world = World::new(json!({"default": {"text": "done", "latency_ms": 100}})).await;
    let session = world.share(ECHO).await;
    let mut commands = Vec::new();
    for i in 0..5 {
        commands.push(
            world
                .queue(&session, &format!("key-serial-{i}"), json!({"text": i}))
                .await,
        );
    }
    let relay = world.relay();
    relay.pass(&Default::default()).await;
    let mut spans = Vec::new();
    for command in &commands {
        let run = world.get(command).await;
        assert_eq!(run["status"], "completed", "{run}");
    }
    let mut history = world.state.history().expect("history");
    history.sort_by_key(|h| h.started_at);
    for h in &history {
        spans.push((h.started_at, h.finished_at.expect("finished")));
    }
    assert_eq!(spans.len(), 5);
    for pair in spans.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "runs overlapped: {spans:?}");
    }
    // Oldest first.
    let order: Vec<&str> = history.iter().map(|h| h.command_id.as_str()).collect();
    assert_eq!(
        order,
        commands.iter().map(String::as_str).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_desktop_leaves_work_queued_and_runs_it_when_back() {
    let world = World::new(json!({"default": {"text": "done"}})).await;
    let session = world.share(ECHO).await;
    let relay = world.relay();
    world.faults.offline.store(true, Ordering::SeqCst);
    let mut commands = Vec::new();
    for i in 0..5 {
        commands.push(
            world
                .queue(&session, &format!("key-offline-{i}"), json!({}))
                .await,
        );
        relay.pass(&Default::default()).await;
    }
    for command in &commands {
        assert_eq!(world.get(command).await["status"], "queued");
    }
    assert!(world.mock.calls().is_empty(), "nothing ran while offline");
    world.faults.offline.store(false, Ordering::SeqCst);
    relay.pass(&Default::default()).await;
    for command in &commands {
        assert_eq!(world.get(command).await["status"], "completed");
    }
    assert_eq!(world.mock.calls().len(), 5);
}
