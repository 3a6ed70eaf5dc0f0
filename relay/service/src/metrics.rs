//! `GET /metrics`: what the service holds now, in Prometheus' text format, served only on the
//! operator's separate `--metrics-listen` address (never beside the public routes).
//!
//! Today these are gauges of what held requests cost: long polls held, their wake-up topics
//! and the tokens watched for revocation. Request counters by route and status, latency
//! histograms and the run and queue gauges are not served yet.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::AppState;

/// The metrics path.
pub const METRICS_PATH: &str = "/metrics";

/// Requests held open now, by kind.
#[derive(Debug, Default)]
pub struct Held {
    syncs: AtomicUsize,
    run_waits: AtomicUsize,
}

/// What kind of request is held.
#[derive(Debug, Clone, Copy)]
pub enum HeldKind {
    /// A desktop's long-poll `sync`.
    Sync,
    /// An agent's waiting `get_graph_run`.
    RunWait,
}

/// Counts one held request until dropped.
pub struct HeldGuard<'a>(&'a AtomicUsize);

impl Drop for HeldGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Held {
    fn counter(&self, kind: HeldKind) -> &AtomicUsize {
        match kind {
            HeldKind::Sync => &self.syncs,
            HeldKind::RunWait => &self.run_waits,
        }
    }

    /// Counts a request of `kind` as held until the guard is dropped.
    pub fn hold(&self, kind: HeldKind) -> HeldGuard<'_> {
        let counter = self.counter(kind);
        counter.fetch_add(1, Ordering::SeqCst);
        HeldGuard(counter)
    }

    /// How many requests of `kind` are held now.
    pub fn count(&self, kind: HeldKind) -> usize {
        self.counter(kind).load(Ordering::SeqCst)
    }
}

/// The metrics route (for the separate metrics listener).
pub fn routes(app: Arc<AppState>) -> Router {
    Router::new()
        .route(METRICS_PATH, get(metrics))
        .with_state(app)
}

async fn metrics(State(app): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(&app),
    )
}

/// The metrics as Prometheus text.
pub fn render(app: &AppState) -> String {
    let mut text = String::new();
    let mut gauge = |name: &str, help: &str, samples: &[(&str, usize)]| {
        let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (labels, value) in samples {
            let _ = writeln!(text, "{name}{labels} {value}");
        }
    };
    gauge(
        "relay_held_requests",
        "Requests held open now: desktops' long-poll syncs and agents' waiting get_graph_run calls.",
        &[
            ("{kind=\"sync\"}", app.held.count(HeldKind::Sync)),
            (
                "{kind=\"get_graph_run\"}",
                app.held.count(HeldKind::RunWait),
            ),
        ],
    );
    gauge(
        "relay_wakeup_topics",
        "Topics (projects, runs) that held requests wait on in this process.",
        &[("", app.notifier.topics())],
    );
    gauge(
        "relay_watched_tokens",
        "Tokens of held requests checked together for revocation.",
        &[("", app.revocations.watched())],
    );
    text
}
