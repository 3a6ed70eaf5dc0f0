//! Long polls, on tokio's paused time with the router in-process: a held `sync` answers as soon
//! as work is queued for its project or a running command it names is cancelled; a waiting
//! `get_graph_run` answers as soon as the run finishes; both answer at their deadline otherwise.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use relay_service::{AppState, router, runs};
use serde_json::{Value, json};
use tower::ServiceExt;

struct Setup {
    app: Arc<AppState>,
    desktop: String,
    agent: relay_service::auth::AgentIdentity,
    project: String,
}

async fn setup() -> Setup {
    let common::InProcess {
        app,
        project,
        desktop,
        agent,
    } = common::in_process().await;
    let setup = Setup {
        app,
        desktop,
        agent,
        project,
    };
    // Share session 1.
    let (status, body) = sync(&setup, json!({})).await;
    assert_eq!(status, 200, "{body}");
    setup
}

async fn post(setup: &Setup, path: &str, body: Value) -> (u16, Value) {
    let request = Request::post(path)
        .header("authorization", format!("Bearer {}", setup.desktop))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("request");
    let response = router(setup.app.clone())
        .oneshot(request)
        .await
        .expect("answered");
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn sync(setup: &Setup, extra: Value) -> (u16, Value) {
    let mut body = json!({
        "project_id": setup.project,
        "sessions": [{"graph_session_id": format!("gs_{:032x}", 1), "name": "g", "slug": "g"}]
    });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    post(setup, "/external-assistants/graph-relays/sync", body).await
}

async fn queue(setup: &Setup, key: &str) -> relay_protocol::CommandId {
    runs::queue_run(
        &setup.app.runs,
        &setup.agent,
        runs::RunRequest {
            graph_session_id: format!("gs_{:032x}", 1),
            arguments: serde_json::Map::new(),
            idempotency_key: key.into(),
            max_tokens: None,
        },
    )
    .await
    .expect("queued")
    .command_id
}

#[tokio::test(start_paused = true)]
async fn a_held_sync_answers_as_soon_as_work_is_queued() {
    let setup = Arc::new(setup().await);
    let started = tokio::time::Instant::now();
    let held = tokio::spawn({
        let setup = setup.clone();
        async move { sync(&setup, json!({"wait_ms": 25_000})).await }
    });
    tokio::time::sleep(Duration::from_secs(7)).await;
    let command = queue(&setup, "key-long-1").await;
    let (status, body) = held.await.expect("joined");
    assert_eq!(status, 200);
    assert_eq!(
        body["commands"][0]["command_id"],
        json!(command.to_string())
    );
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(7),
        "answered the moment it was queued"
    );
}

#[tokio::test(start_paused = true)]
async fn a_held_sync_with_nothing_to_do_answers_at_its_deadline() {
    let setup = setup().await;
    let started = tokio::time::Instant::now();
    let (status, body) = sync(&setup, json!({"wait_ms": 25_000})).await;
    assert_eq!(status, 200);
    assert_eq!(body["commands"], json!([]));
    assert_eq!(started.elapsed(), Duration::from_secs(25));
    let (status, _) = sync(&setup, json!({"wait_ms": 25_001})).await;
    assert_eq!(status, 400, "the wait is bounded");
}

#[tokio::test(start_paused = true)]
async fn a_held_sync_answers_when_a_running_command_it_names_is_cancelled() {
    let setup = Arc::new(setup().await);
    let command = queue(&setup, "key-long-2").await;
    let (status, _) = post(
        &setup,
        &format!("/external-assistants/graph-relays/commands/{command}/started"),
        json!({"execution_id": "e"}),
    )
    .await;
    assert_eq!(status, 200);
    let started = tokio::time::Instant::now();
    let held = tokio::spawn({
        let setup = setup.clone();
        async move {
            sync(
                &setup,
                json!({"wait_ms": 25_000, "running": [command.to_string()]}),
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    runs::cancel_run(&setup.app.runs, &setup.agent, &command.to_string())
        .await
        .expect("cancelled");
    let (_, body) = held.await.expect("joined");
    assert_eq!(body["cancel_requested"], json!([command.to_string()]));
    assert_eq!(started.elapsed(), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn a_waiting_get_answers_when_the_run_finishes_or_at_its_deadline() {
    let setup = Arc::new(setup().await);
    let command = queue(&setup, "key-long-3").await;
    // Nothing happens: the wait ends at its deadline with the current state.
    let started = tokio::time::Instant::now();
    let view = runs::get_run_waiting(
        &setup.app.runs,
        &setup.agent,
        &command.to_string(),
        Duration::from_secs(30),
    )
    .await
    .expect("run");
    assert_eq!(view.status, relay_protocol::RunStatus::Queued);
    assert_eq!(started.elapsed(), Duration::from_secs(30));
    // The desktop completes it 10 s into the next wait.
    let desktop = {
        let setup = setup.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(10)).await;
            let path = format!("/external-assistants/graph-relays/commands/{command}");
            post(
                &setup,
                &format!("{path}/started"),
                json!({"execution_id": "e"}),
            )
            .await;
            post(&setup, &format!("{path}/complete"), json!({"execution_id": "e", "status": "completed", "result": {"ok": true}, "total_tokens": 1, "reported_cost": 0.0})).await;
        })
    };
    let started = tokio::time::Instant::now();
    let view = runs::get_run_waiting(
        &setup.app.runs,
        &setup.agent,
        &command.to_string(),
        runs::MAX_GET_WAIT,
    )
    .await
    .expect("run");
    desktop.await.expect("desktop");
    assert_eq!(view.status, relay_protocol::RunStatus::Completed);
    assert_eq!(started.elapsed(), Duration::from_secs(10));
    let too_long = runs::get_run_waiting(
        &setup.app.runs,
        &setup.agent,
        &command.to_string(),
        runs::MAX_GET_WAIT + Duration::from_secs(1),
    )
    .await;
    assert!(too_long.is_err());
}
