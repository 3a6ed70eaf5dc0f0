//! What an operator relies on: `relay serve` stops on SIGTERM, answering its held long polls
//! before it goes, and its probes answer whatever Host the orchestrator sends.

use std::process::Command;
use std::time::Duration;

use relay_protocol::clock::Stopwatch;
use serde_json::json;

use crate::cli::{plain, relay, serve_with_base};
use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_held_long_polls_and_exits_within_ten_seconds() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let project = plain(&relay(&db, &["project", "create", "Demo"]));
    let token = plain(&relay(
        &db,
        &["token", "create", "--desktop", "--project", &project],
    ));
    let (mut child, base) = serve_with_base(&db, &[]).await;
    let desktop = common::Desktop {
        http: common::http_client(),
        base,
        token,
    };
    desktop.sync(&project, &[1]).await;
    let held = tokio::spawn(async move {
        let watch = Stopwatch::start();
        let answer = desktop
            .sync_raw(&json!({"project_id": project, "sessions": [common::session(1)], "wait_ms": 25_000}))
            .await;
        (answer, watch.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = child.0.id().to_string();
    let watch = Stopwatch::start();
    let sent = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("run kill");
    assert!(sent.success());
    let ((status, body), waited) = held.await.expect("held sync");
    assert_eq!(
        status, 200,
        "the held long poll is answered, not cut: {body}"
    );
    assert!(
        waited < Duration::from_secs(20),
        "answered at the stop, not at its 25 s deadline: {waited:?}"
    );
    let exit = loop {
        if let Some(exit) = child.0.try_wait().expect("wait") {
            break exit;
        }
        assert!(
            watch.elapsed() < Duration::from_secs(15),
            "still running 15 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        exit.success(),
        "a stop on SIGTERM is a clean exit: {exit:?}"
    );
    assert!(
        watch.elapsed() < Duration::from_secs(10),
        "exited {:?} after SIGTERM",
        watch.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answer_whatever_host_the_orchestrator_sends() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    plain(&relay(&db, &["project", "create", "Demo"]));
    let (_child, base) = serve_with_base(&db, &[]).await;
    for (path, status) in [("/healthz", "ok"), ("/readyz", "ready")] {
        let response = common::http_client()
            .get(format!("{base}{path}"))
            .header("host", "10.1.2.3:8787")
            .send()
            .await
            .expect("probe answered");
        let (code, body) = common::decode(response).await;
        assert_eq!(
            (code, body["status"].as_str()),
            (200, Some(status)),
            "{path}: {body}"
        );
    }
    let refused = common::http_client()
        .get(format!("{base}/.well-known/oauth-protected-resource"))
        .header("host", "10.1.2.3:8787")
        .send()
        .await
        .expect("answered");
    assert_eq!(refused.status(), 421, "other routes still check the Host");
}
