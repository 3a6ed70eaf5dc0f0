//! No run stays `running` forever: a desktop that stops polling control for the silence
//! timeout gets its run failed with an error that says so (clock moved by hand).

use crate::common;

use std::time::Duration;

use common::{Era, Setup, call, ok, queue, setup, setup_with};
use relay_service::ServiceConfig;
use relay_service::runs::{self, DEFAULT_SILENCE_TIMEOUT};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_desktop_fails_its_run_after_the_timeout_and_not_before() {
    let Setup {
        service,
        project,
        desktop,
        client,
    } = setup(Era::Current).await;
    let id = queue(&client, "silent-run-key").await;
    desktop.sync(&project, &[1]).await;
    desktop.started(&id, "exec-1").await;

    // Control polls keep it alive.
    service
        .clock
        .advance(DEFAULT_SILENCE_TIMEOUT - Duration::from_secs(1));
    assert_eq!(
        desktop.control(&id).await.1,
        json!({"cancel_requested": false})
    );
    service.clock.advance(DEFAULT_SILENCE_TIMEOUT);
    let run = ok(&call(&client, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(
        run["status"], "running",
        "exactly the timeout since the last poll is not yet silent"
    );

    service.clock.advance(Duration::from_millis(1));
    let run = ok(&call(&client, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["status"], "failed");
    let error = run["error"].as_str().unwrap();
    assert!(error.contains("desktop stopped reporting"), "{error}");
    assert!(error.contains("30 minutes"), "{error}");
    assert_eq!(run["poll_after_seconds"], serde_json::Value::Null);

    // The desktop, back late, is told to stop and cannot overwrite the outcome: its completion
    // is answered 200 `already_finished` with the service's reason (one final word), each time.
    assert_eq!(
        desktop.control(&id).await.1,
        json!({"cancel_requested": true})
    );
    let late = json!({"execution_id": "exec-1", "status": "completed", "result": 1});
    for _ in 0..2 {
        let (status, body) = desktop.complete(&id, &late).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["already_finished"]["status"], "failed", "{body}");
        assert_eq!(body["already_finished"]["error"], run["error"], "{body}");
        assert_eq!(body["replayed"], false, "{body}");
    }
    let after = ok(&call(&client, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(after["status"], "failed");
    assert_eq!(after["result"], serde_json::Value::Null, "{after}");
    service.stop().await;
}

/// Every control poll counts, however soon after the run started or after another poll: the
/// timeout runs from the last one (a heartbeat written only now and then would fail the run
/// early).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_silence_runs_from_the_last_poll_even_soon_after_another() {
    let Setup {
        service,
        project,
        desktop,
        client,
    } = setup(Era::Current).await;
    let id = queue(&client, "silent-soon-key").await;
    desktop.sync(&project, &[1]).await;
    desktop.started(&id, "exec-1").await;
    for _ in 0..3 {
        service.clock.advance(Duration::from_secs(3));
        desktop.control(&id).await;
    }
    service.clock.advance(DEFAULT_SILENCE_TIMEOUT);
    let run = ok(&call(&client, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["status"], "running", "{run}");
    service.clock.advance(Duration::from_millis(1));
    let run = ok(&call(&client, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["status"], "failed", "{run}");
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_fails_silent_runs_without_a_read_and_the_timeout_is_configurable() {
    let config = ServiceConfig {
        silence_timeout: Duration::from_secs(120),
        ..ServiceConfig::default()
    };
    let Setup {
        service,
        project,
        desktop,
        client,
    } = setup_with(Era::Current, config).await;
    let mut ids = Vec::new();
    for key in ["sweep-key-1", "sweep-key-2", "sweep-key-3"] {
        ids.push(queue(&client, key).await);
    }
    desktop.sync(&project, &[1]).await;
    desktop.started(&ids[0], "exec-1").await;
    desktop.started(&ids[1], "exec-2").await;
    service.clock.advance(Duration::from_secs(100));
    desktop.control(&ids[1]).await;
    service.clock.advance(Duration::from_secs(21));

    let failed = runs::fail_silent_runs(&service.app.runs)
        .await
        .expect("sweep");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].to_string(), ids[0]);
    let statuses: Vec<_> = statuses_of(&client, &ids).await;
    assert_eq!(
        statuses,
        ["failed", "running", "queued"],
        "queued runs wait for the desktop however long"
    );
    let run = ok(&call(&client, "get_graph_run", json!({"command_id": ids[0]})).await);
    assert!(run["error"].as_str().unwrap().contains("2 minutes"));
    service.stop().await;
}

async fn statuses_of(client: &common::McpClient, ids: &[String]) -> Vec<String> {
    let mut statuses = Vec::new();
    for id in ids {
        let run = ok(&call(client, "get_graph_run", json!({"command_id": id})).await);
        statuses.push(run["status"].as_str().unwrap().to_owned());
    }
    statuses
}
