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

/// `relay serve --metrics-listen` serves `/metrics` on that address only: a held long poll is
/// counted while it is held and not after; the public listener has no `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_held_long_polls_on_their_own_listener() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let project = plain(&relay(&db, &["project", "create", "Demo"]));
    let token = plain(&relay(
        &db,
        &["token", "create", "--desktop", "--project", &project],
    ));
    let metrics_port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe");
        probe.local_addr().expect("address").port()
    };
    let metrics_address = format!("127.0.0.1:{metrics_port}");
    let (_child, base) = serve_with_base(&db, &["--metrics-listen", &metrics_address]).await;
    let http = common::http_client();
    let metrics = format!("http://{metrics_address}/metrics");
    let held_syncs = |text: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix("relay_held_requests{kind=\"sync\"} "))
            .and_then(|count| count.trim().parse::<u64>().ok())
    };
    let read = || async {
        let answer = http.get(&metrics).send().await.expect("metrics answer");
        assert_eq!(answer.status(), 200);
        answer.text().await.expect("metrics text")
    };
    assert_eq!(held_syncs(&read().await), Some(0));
    let desktop = common::Desktop {
        http: http.clone(),
        base: base.clone(),
        token,
    };
    desktop.sync(&project, &[1]).await;
    let held = tokio::spawn(async move {
        desktop
            .sync_raw(
                &json!({"project_id": project, "sessions": [common::session(1)], "wait_ms": 3_000}),
            )
            .await
    });
    let watch = Stopwatch::start();
    loop {
        if held_syncs(&read().await) == Some(1) {
            break;
        }
        assert!(
            watch.elapsed() < Duration::from_secs(10),
            "the held sync is never counted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = read().await;
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let (name, value) = line.rsplit_once(' ').expect("name and value");
        assert!(name.starts_with("relay_"), "{line}");
        assert!(value.parse::<f64>().is_ok(), "{line}");
    }
    assert!(text.contains("# TYPE relay_held_requests gauge"), "{text}");
    let (status, _) = held.await.expect("held sync");
    assert_eq!(status, 200);
    assert_eq!(held_syncs(&read().await), Some(0), "no longer held");
    let public = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("answer");
    assert_eq!(public.status(), 404, "no /metrics on the public listener");
}
