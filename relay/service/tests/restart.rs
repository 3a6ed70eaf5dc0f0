//! Restarting the service loses no queued or finished run: a new process on the same database
//! file serves the same runs to the same tokens.

use crate::common;

use std::sync::Arc;

use common::{Era, TestService, call, mcp_client, ok, run_args};
use relay_protocol::clock::ManualClock;
use relay_service::ServiceConfig;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_and_finished_runs_survive_a_restart() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let token = service.full_agent(&project).await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let client = mcp_client(&service.mcp_url(), &token, Era::Sessions2025).await;
    let finished = ok(&call(
        &client,
        "run_graph_session",
        run_args(1, "finished-before", json!({"n": 1})),
    )
    .await);
    let queued = ok(&call(
        &client,
        "run_graph_session",
        run_args(1, "queued-before", json!({"n": 2})),
    )
    .await);
    let finished_id = finished["command_id"].as_str().unwrap().to_owned();
    let queued_id = queued["command_id"].as_str().unwrap().to_owned();
    desktop.started(&finished_id, "exec-1").await;
    let completion = json!({"execution_id": "exec-1", "status": "completed", "result": {"kept": true}, "total_tokens": 5, "reported_cost": 0.1});
    assert_eq!(desktop.complete(&finished_id, &completion).await.0, 200);
    let before = ok(&call(&client, "get_graph_run", json!({"command_id": finished_id})).await);
    client.cancel().await.expect("close");

    let db = service.db.clone();
    let clock = service.clock.clone();
    let dir = service.stop().await;
    let restarted = TestService::start_at(
        &db,
        Arc::<ManualClock>::clone(&clock),
        ServiceConfig::default(),
    )
    .await;
    let desktop = common::Desktop {
        base: restarted.base.clone(),
        ..desktop
    };

    let client = mcp_client(&restarted.mcp_url(), &token, Era::Current).await;
    let after = ok(&call(&client, "get_graph_run", json!({"command_id": finished_id})).await);
    assert_eq!(
        after, before,
        "a finished run reads the same after a restart"
    );
    let still_queued = ok(&call(&client, "get_graph_run", json!({"command_id": queued_id})).await);
    assert_eq!(still_queued["status"], "queued");
    let commands = desktop.sync(&project, &[1]).await;
    assert_eq!(commands.len(), 1);
    assert_eq!(commands[0]["command_id"], json!(queued_id));
    assert_eq!(commands[0]["arguments"], json!({"n": 2}));
    // Idempotency keys survive too, and completions replay.
    let replay = ok(&call(
        &client,
        "run_graph_session",
        run_args(1, "queued-before", json!({"n": 2})),
    )
    .await);
    assert_eq!(replay["command_id"], json!(queued_id));
    assert_eq!(
        desktop.complete(&finished_id, &completion).await.1["replayed"],
        true
    );
    restarted.stop().await;
    drop(dir);
}
