//! What an operator's load balancer and orchestrator ask: `GET /healthz` (the process answers)
//! and `GET /readyz` (the store answers, the last periodic structure check of the database
//! found no damage, and the database's disk is not full: on a full disk it answers 503
//! `degraded`, reads still answered, writes not; migrations and the open check ran before the
//! listener opened). Both are
//! outside the Origin and Host checks, since probes come with whatever Host the orchestrator
//! uses (a pod's address, say), and both say nothing about any owner's data.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::http::AppState;

/// The liveness path.
pub const HEALTH_PATH: &str = "/healthz";
/// The readiness path.
pub const READY_PATH: &str = "/readyz";

/// How often `relay serve` checks the database's structure by default.
pub const DEFAULT_DB_CHECK_INTERVAL: Duration = Duration::from_secs(60 * 60);

/// What the last periodic structure check found wrong, if anything.
#[derive(Debug, Default)]
pub struct DbDamage(Mutex<Option<String>>);

impl DbDamage {
    /// The damage found, if the last check failed.
    pub fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records what a check found (`None`: it passed).
    pub fn set(&self, damage: Option<String>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = damage;
    }
}

/// Runs the store's structure check every `db_check_interval` (the first one interval after
/// start: the open check has just run) until the task is aborted.
pub async fn check_database_periodically(app: Arc<AppState>) {
    let Some(every) = app.config.db_check_interval else {
        return;
    };
    let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        check_database(&app).await;
    }
}

/// One structure check, its outcome recorded for `/readyz` and logged.
pub async fn check_database(app: &AppState) {
    match app.store.check_structure(app.config.db_check_limit).await {
        Ok(None) => {
            if app.db_damage.get().is_some() {
                tracing::info!("the database passes quick_check again; ready");
            }
            app.db_damage.set(None);
        }
        Ok(Some(problems)) => {
            tracing::error!(
                %problems,
                cause = "corrupt",
                remedy = crate::store::Fault::Corrupt.remedy(),
                "the database is damaged (quick_check failed); /readyz answers not ready"
            );
            app.db_damage.set(Some(problems));
        }
        Err(error) => error.log("the periodic database check could not run"),
    }
}

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
    if let Some(problems) = app.db_damage.get() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({
                "status": "unavailable",
                "cause": "corrupt",
                "error": format!("the database failed quick_check ({problems}): stop the service and restore a good backup with `relay admin db restore`"),
            })),
        )
            .into_response();
    }
    if let Some(full) = app.store.disk_full() {
        // Reads are still answered, but every request of the service writes something (a
        // token's use, a desktop's presence, the run it queues): a balancer should send this
        // replica nothing until there is room again. No restart helps, so `/healthz` stays 200.
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({
                "status": "degraded",
                "cause": "disk_full",
                "reads": true,
                "writes": false,
                "error": format!("{full}: writes fail until its operator frees space on it; reads are still answered"),
            })),
        )
            .into_response();
    }
    match app.store.project("readyz").await {
        Ok(_) => Json(json!({"status": "ready"})).into_response(),
        Err(error) => {
            tracing::warn!(%error, "not ready: the store does not answer");
            let (cause, text) = match error.fault() {
                Some(fault) => (fault.as_str(), fault.describe()),
                None => ("unreachable", "the database does not answer"),
            };
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"status": "unavailable", "cause": cause, "error": text})),
            )
                .into_response()
        }
    }
}
