//! What an operator's load balancer and orchestrator ask: `GET /healthz` (the process answers)
//! and `GET /readyz` (the store answers; migrations ran before the listener opened). Both are
//! outside the Origin and Host checks, since probes come with whatever Host the orchestrator
//! uses (a pod's address, say), and both say nothing about any owner's data.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::AppState;

/// The liveness path.
pub const HEALTH_PATH: &str = "/healthz";
/// The readiness path.
pub const READY_PATH: &str = "/readyz";

/// The probe routes.
pub fn routes(app: Arc<AppState>) -> Router {
    Router::new()
        .route(HEALTH_PATH, get(health))
        .route(READY_PATH, get(ready))
        .with_state(app)
}

async fn health() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// 200 when a store read succeeds, 503 (with why) when it does not or the service is stopping.
async fn ready(State(app): State<Arc<AppState>>) -> Response {
    if app.shutdown.is_cancelled() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "stopping"})),
        )
            .into_response();
    }
    match app.store.project("readyz").await {
        Ok(_) => Json(json!({"status": "ready"})).into_response(),
        Err(error) => {
            tracing::warn!(%error, "not ready: the store does not answer");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"status": "unavailable", "error": "the database does not answer"})),
            )
                .into_response()
        }
    }
}
