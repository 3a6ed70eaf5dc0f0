//! Cancel: a queued run ends at once and the desktop never sees it; a running run gets a flag
//! the desktop reads, and its outcome is `cancelled` whatever the graph managed; a finished run
//! stays as it is.

use crate::common;

use common::{Era, Setup, call, ok, queue, setup};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_queued_run_is_terminal_at_once_and_never_synced() {
    let Setup {
        service,
        project,
        desktop,
        client,
    } = setup(Era::Current).await;
    let keep = queue(&client, "keep-this-run").await;
    let id = queue(&client, "drop-this-run").await;

    let cancelled = ok(&call(&client, "cancel_graph_run", json!({"command_id": id})).await);
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["already_finished"], false);
    let run = ok(&call(&client, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["status"], "cancelled");
    assert_eq!(run["finished_at"], "2026-11-08T09:30:00.000Z");
    assert_eq!(run["poll_after_seconds"], serde_json::Value::Null);

    let commands = desktop.sync(&project, &[1]).await;
    assert_eq!(commands.len(), 1);
    assert_eq!(commands[0]["command_id"], json!(keep));
    // A desktop that raced the cancel is told not to run it.
    let (status, body) = desktop.started(&id, "exec-late").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["status"], "cancelled");
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_running_run_is_flagged_and_ends_cancelled() {
    let Setup {
        service,
        project,
        desktop,
        client,
    } = setup(Era::Sessions2025).await;
    let id = queue(&client, "running-run-key").await;
    desktop.sync(&project, &[1]).await;
    assert_eq!(desktop.started(&id, "exec-1").await.0, 200);
    let (_, control) = desktop.control(&id).await;
    assert_eq!(control, json!({"cancel_requested": false}));

    let cancelled = ok(&call(&client, "cancel_graph_run", json!({"command_id": id})).await);
    assert_eq!(cancelled["status"], "running");
    assert_eq!(cancelled["cancel_requested"], true);
    let (_, control) = desktop.control(&id).await;
    assert_eq!(
        control,
        json!({"cancel_requested": true, "cancel_cause": "agent_cancelled"}),
        "the desktop is told who asked"
    );
    // Cancelling twice changes nothing more.
    let again = ok(&call(&client, "cancel_graph_run", json!({"command_id": id})).await);
    assert_eq!(again["cancel_requested"], true);

    // The graph finished between the flag and the stop: still recorded as cancelled.
    let completion = json!({"execution_id": "exec-1", "status": "completed", "result": {"done": true}, "total_tokens": 40, "reported_cost": 0.2});
    let (status, body) = desktop.complete(&id, &completion).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"ok": true, "replayed": false}));
    let run = ok(&call(&client, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["status"], "cancelled");
    assert_eq!(run["result"], serde_json::Value::Null);
    assert_eq!(run["total_tokens"], 40);
    // The same completion again is a replay, not a conflict.
    assert_eq!(
        desktop.complete(&id, &completion).await.1,
        json!({"ok": true, "replayed": true})
    );
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_finished_run_changes_nothing() {
    let Setup {
        service,
        project,
        desktop,
        client,
    } = setup(Era::Current).await;
    let id = queue(&client, "finished-run-key").await;
    desktop.sync(&project, &[1]).await;
    desktop.started(&id, "exec-1").await;
    let completion = json!({"execution_id": "exec-1", "status": "completed", "result": {"answer": 42}, "total_tokens": 7, "reported_cost": 0.5});
    assert_eq!(desktop.complete(&id, &completion).await.0, 200);
    let before = ok(&call(&client, "get_graph_run", json!({"command_id": id})).await);

    let cancel = ok(&call(&client, "cancel_graph_run", json!({"command_id": id})).await);
    assert_eq!(cancel["already_finished"], true);
    assert_eq!(cancel["status"], "completed");
    assert_eq!(cancel["cancel_requested"], false);
    let after = ok(&call(&client, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(before, after);
    assert_eq!(after["result"], json!({"answer": 42}));
    assert_eq!(after["result_truncated"], false);
    assert_eq!(after["reported_cost"], 0.5);
    service.stop().await;
}
