//! A request's span and a held long poll, logged through a subscriber that counts open spans.
//!
//! A binary of its own, so the subscriber can be the process's: one scoped to a test thread
//! misses lines when tests beside it reach the same callsites with none (what a callsite may
//! log is cached for the whole process).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use relay_service::held::HeldKind;
use relay_service::{router, runs};
use serde_json::json;
use tower::ServiceExt;
use tracing_subscriber::layer::SubscriberExt;

/// Counts the spans open in the subscriber it is layered on.
struct OpenSpans(Arc<AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for OpenSpans {
    fn on_new_span(
        &self,
        _: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn on_close(&self, _: tracing::span::Id, _: tracing_subscriber::layer::Context<'_, S>) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The log, written where the test can read it.
#[derive(Clone, Default)]
struct Log(Arc<std::sync::Mutex<Vec<u8>>>);

impl Log {
    fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl std::io::Write for Log {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the process's subscriber: `info` and `tower_http`'s request lines, formatted as
/// `relay serve` does into [`Log`], with a count of the spans open.
fn log_as_the_process() -> (Arc<AtomicUsize>, Log) {
    let open = Arc::new(AtomicUsize::new(0));
    let log = Log::default();
    let subscriber = tracing_subscriber::registry()
        .with(OpenSpans(open.clone()))
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer({
                    let log = log.clone();
                    move || log.clone()
                }),
        )
        .with(tracing_subscriber::EnvFilter::new("info,tower_http=debug"));
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    (open, log)
}

/// A held sync keeps no span while it waits (issue 28: a span costs a waiting desktop a few
/// hundred bytes in the subscriber), yet every line it logs, before and after the wait, names
/// its request as every request's lines do.
#[tokio::test(start_paused = true)]
async fn a_held_sync_keeps_no_span_while_it_waits_and_logs_in_its_request_span() {
    let (open, log) = log_as_the_process();
    let setup = Arc::new(relay_testkit::in_process().await);
    let shared = sync(
        &setup,
        json!({
            "project_id": setup.project,
            "sessions": [{"graph_session_id": format!("gs_{:032x}", 1), "name": "g", "slug": "g"}]
        }),
    )
    .await;
    assert_eq!(shared.status(), 200, "session 1 shared");
    // Its body, unread, would keep its span.
    drop(shared);
    let held = tokio::spawn({
        let setup = setup.clone();
        async move {
            let body = json!({
                "project_id": setup.project, "sessions": [], "sessions_unchanged": true,
                "wait_ms": 25_000
            });
            sync(&setup, body).await
        }
    });
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(
        setup.app.runs.held.count(HeldKind::Sync),
        1,
        "{}",
        log.text()
    );
    assert_eq!(
        open.load(Ordering::SeqCst),
        0,
        "no span is open while the sync waits"
    );
    runs::queue_run(
        &setup.app.runs,
        &setup.agent,
        runs::RunRequest {
            graph_session_id: format!("gs_{:032x}", 1),
            arguments: serde_json::Map::new(),
            idempotency_key: "key-span-1".into(),
            max_tokens: None,
        },
    )
    .await
    .expect("queued");
    let answer = held.await.expect("joined");
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["x-request-id"], "held-sync-1");
    held_sync_lines_name_its_request(&log.text());
}

/// The held sync's request and answer lines carry its span's fields; it answered 200.
fn held_sync_lines_name_its_request(log: &str) {
    let span =
        "request{request_id=held-sync-1 method=POST route=/external-assistants/graph-relays/sync}";
    let lines: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("held-sync-1"))
        .collect();
    for message in ["started processing request", "finished processing request"] {
        let line = lines
            .iter()
            .find(|line| line.contains(message))
            .unwrap_or_else(|| panic!("no `{message}` line of the held sync in\n{log}"));
        assert!(line.contains(span), "{line}");
    }
    assert!(
        lines
            .iter()
            .any(|line| line.contains("finished processing request") && line.contains("status=200")),
        "{log}"
    );
}

/// POSTs a sync with `body` as the test's desktop, with the request id `held-sync-1` when the
/// body asks to wait.
async fn sync(
    setup: &relay_testkit::InProcess,
    body: serde_json::Value,
) -> axum::response::Response {
    let mut request = Request::post("/external-assistants/graph-relays/sync")
        .header("authorization", format!("Bearer {}", setup.desktop))
        .header("content-type", "application/json");
    if body.get("wait_ms").is_some() {
        request = request.header("x-request-id", "held-sync-1");
    }
    let request = request.body(Body::from(body.to_string())).expect("request");
    router(setup.app.clone())
        .oneshot(request)
        .await
        .expect("answered")
}
