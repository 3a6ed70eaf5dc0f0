//! The router is a plain tower service: it runs in-process with no socket, on tokio's paused
//! time through the injected clock (what the simulator needs).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use relay_service::{AppState, router, runs};
use serde_json::{Value, json};
use tower::ServiceExt;

async fn post(app: &Arc<AppState>, token: &str, path: &str, body: Value) -> (StatusCode, Value) {
    let request = Request::post(path)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("request");
    let response = router(app.clone())
        .oneshot(request)
        .await
        .expect("answered");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test(start_paused = true)]
async fn the_router_runs_without_sockets_on_paused_time() {
    let common::InProcess {
        app,
        project,
        desktop,
        agent: identity,
    } = common::in_process().await;
    let sync = "/external-assistants/graph-relays/sync";
    let session = json!({"graph_session_id": format!("gs_{:032x}", 1), "name": "g", "slug": "g"});
    let (status, body) = post(
        &app,
        &desktop,
        sync,
        json!({"project_id": project, "sessions": [session]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // An agent's run, queued through the domain functions, reaches the desktop.
    let request = runs::RunRequest {
        graph_session_id: format!("gs_{:032x}", 1),
        arguments: serde_json::Map::new(),
        idempotency_key: "paused-key".into(),
        max_tokens: None,
    };
    let ticket = runs::queue_run(&app.runs, &identity, request)
        .await
        .expect("queued");
    tokio::time::advance(Duration::from_secs(20)).await;
    let (_, body) = post(
        &app,
        &desktop,
        sync,
        json!({"project_id": project, "sessions": [session]}),
    )
    .await;
    assert_eq!(
        body["commands"][0]["command_id"],
        json!(ticket.command_id.to_string())
    );
    let started = format!(
        "/external-assistants/graph-relays/commands/{}/started",
        ticket.command_id
    );
    assert_eq!(
        post(&app, &desktop, &started, json!({"execution_id": "e"}))
            .await
            .0,
        StatusCode::OK
    );

    // Virtual time drives the silence timeout.
    tokio::time::advance(runs::DEFAULT_SILENCE_TIMEOUT + Duration::from_secs(1)).await;
    let view = runs::get_run(&app.runs, &identity, &ticket.command_id.to_string())
        .await
        .expect("run");
    assert_eq!(view.status, relay_protocol::RunStatus::Failed);
    assert_eq!(view.created_at.to_rfc3339(), "2026-11-08T09:30:00.000Z");
}
