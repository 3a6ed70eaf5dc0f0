//! 2025-era MCP sessions are bounded and bound: one token's flood of `initialize` keeps at most
//! its cap of sessions, many tokens together stay within the total cap while a new token still
//! gets in, and a session id presented with another token is a 404 for POST, GET and DELETE.

use crate::common;

use std::sync::Arc;

use axum::body::Body;
use common::TestService;
use http::{Request, StatusCode};
use relay_service::http::mcp::legacy_sessions::{DEFAULT_MAX_SESSIONS, DEFAULT_SESSIONS_PER_AGENT};
use relay_service::{AppState, ServiceConfig, router};
use serde_json::{Value, json};
use tower::ServiceExt;

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}"#;

fn mcp_request(method: &str, token: &str, session: Option<&str>, body: &str) -> Request<Body> {
    let mut builder = Request::builder()
        .method(method)
        .uri("/mcp")
        .header("host", "127.0.0.1")
        .header("authorization", format!("Bearer {token}"))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json");
    if let Some(session) = session {
        builder = builder
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25");
    }
    builder.body(Body::from(body.to_owned())).expect("request")
}

/// `initialize` through the router in-process; returns the session id it was given.
async fn initialize(app: &Arc<AppState>, token: &str) -> String {
    let response = router(app.clone())
        .oneshot(mcp_request("POST", token, None, INITIALIZE))
        .await
        .expect("answer");
    if response.status() != StatusCode::OK {
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap_or_default();
        panic!(
            "initialize answered {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a 2025-era initialize opens a session")
        .to_owned()
}

/// `tools/list` in `session`: the status only.
async fn list_tools(app: &Arc<AppState>, token: &str, session: &str) -> StatusCode {
    let body = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    router(app.clone())
        .oneshot(mcp_request("POST", token, Some(session), body))
        .await
        .expect("answer")
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tokens_flood_keeps_its_cap_and_its_newest_sessions() {
    // The flood is the point here, not the rate limit (quotas.rs tests that).
    let service = TestService::start_with_config(ServiceConfig {
        rate_limit: None,
        ..ServiceConfig::default()
    })
    .await;
    let project = service.project("p", "alice").await;
    let (token, token_id) = service.agent(&project, &["osfoundry:read"]).await;
    let app = &service.app;
    let mut ids = Vec::new();
    for _ in 0..5_000 {
        ids.push(initialize(app, &token).await);
    }
    assert_eq!(
        app.mcp_sessions.count(Some(&token_id)),
        DEFAULT_SESSIONS_PER_AGENT
    );
    let (older, newest) = ids.split_at(ids.len() - DEFAULT_SESSIONS_PER_AGENT);
    for id in newest {
        assert_eq!(list_tools(app, &token, id).await, StatusCode::OK);
    }
    for id in &older[older.len() - 3..] {
        assert_eq!(
            list_tools(app, &token, id).await,
            StatusCode::NOT_FOUND,
            "an evicted session has ended"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tokens_stay_within_the_total_cap_and_a_new_token_gets_in() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let app = &service.app;
    let mut tokens = Vec::new();
    for _ in 0..2_000 {
        tokens.push(service.agent(&project, &["osfoundry:read"]).await.0);
    }
    let mut handles = Vec::new();
    for chunk in tokens.chunks(250) {
        let chunk = chunk.to_vec();
        let app = app.clone();
        handles.push(tokio::spawn(async move {
            for token in &chunk {
                for _ in 0..10 {
                    initialize(&app, token).await;
                }
            }
        }));
    }
    for handle in handles {
        handle.await.expect("flood");
    }
    let open = app.mcp_sessions.count(None);
    assert!(
        open <= DEFAULT_MAX_SESSIONS,
        "{open} sessions for a cap of {DEFAULT_MAX_SESSIONS}"
    );
    let newcomer = service.full_agent(&project).await;
    let session = initialize(app, &newcomer).await;
    assert_eq!(list_tools(app, &newcomer, &session).await, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tokens_session_id_is_not_found_for_post_get_and_delete() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let a = service.full_agent(&project).await;
    let b = service.full_agent(&project).await;
    let app = &service.app;
    let session = initialize(app, &a).await;
    assert_eq!(list_tools(app, &b, &session).await, StatusCode::NOT_FOUND);
    let get = router(app.clone())
        .oneshot(mcp_request("GET", &b, Some(&session), ""))
        .await
        .expect("answer");
    assert_eq!(get.status(), StatusCode::NOT_FOUND);
    let delete = router(app.clone())
        .oneshot(mcp_request("DELETE", &b, Some(&session), ""))
        .await
        .expect("answer");
    assert_eq!(delete.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        list_tools(app, &a, &session).await,
        StatusCode::OK,
        "A's session still works"
    );
    let called = router(app.clone())
        .oneshot(mcp_request(
            "POST",
            &a,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                    "params": {"name": "list_graph_sessions", "arguments": {"project_id": project}}})
            .to_string(),
        ))
        .await
        .expect("answer");
    assert_eq!(called.status(), StatusCode::OK);
    let body = axum::body::to_bytes(called.into_body(), 1 << 20)
        .await
        .expect("body");
    let answer: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    let delete = router(app.clone())
        .oneshot(mcp_request("DELETE", &a, Some(&session), ""))
        .await
        .expect("answer");
    assert_eq!(delete.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        list_tools(app, &a, &session).await,
        StatusCode::NOT_FOUND,
        "ended"
    );
}
