//! What `get_graph_run` tells of the desktop (issues 32 and 33): what a running run waits for
//! (the desktop's report), whether the desktop is online (offline after two missed poll
//! intervals; the clock is moved by hand), why a queued run waits (`desktop: disk full`), and
//! when a run ended on the desktop against when its result arrived.

use crate::common;

use std::time::Duration;

use common::{Era, Setup, call, ok, queue, setup};
use relay_protocol::DESKTOP_POLL_INTERVAL_SECS;
use relay_protocol::clock::Clock;
use serde_json::{Value, json};

const PREFIX: &str = "/external-assistants/graph-relays";

async fn get(client: &common::McpClient, id: &str) -> Value {
    ok(&call(client, "get_graph_run", json!({"command_id": id})).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_approval_shows_as_waiting_for_with_its_deadline() {
    let Setup {
        service,
        project,
        desktop,
        client,
    } = setup(Era::Current).await;
    let id = queue(&client, "report-run-key").await;
    desktop.sync(&project, &[1]).await;
    desktop.started(&id, "exec-1").await;
    let until = service.clock.now().saturating_add(Duration::from_secs(600));
    let report = json!({
        "execution_id": "exec-1",
        "waiting_for": {"what": "owner approval of fs.write", "until": until},
        "progress": {"tokens_used": 99, "token_cap": 200000, "agents_started": 1,
                     "agents_finished": 1, "tools_called": 0, "last_event": "first"}
    });
    let path = format!("{PREFIX}/commands/{id}/report");
    let (status, body) = desktop.post(&path, &report).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["recorded"], true);
    let run = get(&client, &id).await;
    assert_eq!(run["status"], "running");
    assert_eq!(run["waiting_for"], "owner approval of fs.write", "{run}");
    assert_eq!(run["waiting_until"], json!(until), "{run}");
    assert_eq!(run["progress"]["tokens_used"], 99, "{run}");
    assert_eq!(run["desktop"]["online"], true, "{run}");

    // Another execution's report, a malformed one and another desktop's are refused.
    let foreign = json!({"execution_id": "exec-2", "waiting_for": {"what": "x"}});
    let (status, body) = desktop.post(&path, &foreign).await;
    assert_eq!((status, &body["recorded"]), (200, &json!(false)), "{body}");
    let long = json!({"execution_id": "exec-1", "waiting_for": {"what": "w".repeat(201)}});
    assert_eq!(desktop.post(&path, &long).await.0, 400);
    let other_project = service.project("q", "bob").await;
    let stranger = service.desktop(&other_project).await;
    assert_eq!(stranger.post(&path, &report).await.0, 404);
    assert_eq!(
        get(&client, &id).await["waiting_for"],
        "owner approval of fs.write"
    );

    // The owner answered: the next report clears it.
    let (status, _) = desktop
        .post(&path, &json!({"execution_id": "exec-1"}))
        .await;
    assert_eq!(status, 200);
    let run = get(&client, &id).await;
    assert_eq!(run["waiting_for"], Value::Null, "{run}");
    assert_eq!(run["waiting_until"], Value::Null, "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desktop_silent_for_two_poll_intervals_is_offline_and_its_problem_shows() {
    let Setup {
        service,
        project,
        desktop,
        client,
    } = setup(Era::Current).await;
    let id = queue(&client, "offline-run-key").await;
    let interval = Duration::from_secs(DESKTOP_POLL_INTERVAL_SECS);
    let run = get(&client, &id).await;
    assert_eq!(run["desktop"]["online"], true, "{run}");
    let seen = run["desktop"]["last_seen_at"].clone();
    assert!(seen.is_string(), "{run}");
    assert_eq!(run["waiting_for"], Value::Null);

    // Syncs keep it online; a waiting desktop is written at most every few seconds.
    service.clock.advance(interval);
    desktop.sync(&project, &[1]).await;
    service.clock.advance(interval);
    assert_eq!(get(&client, &id).await["desktop"]["online"], true);
    // Stopped: two missed intervals later it is offline.
    service.clock.advance(interval * 2 + Duration::from_secs(1));
    let run = get(&client, &id).await;
    assert_eq!(run["desktop"]["online"], false, "{run}");
    assert_ne!(run["desktop"]["last_seen_at"], seen, "{run}");

    // Back, with a full disk: the queued run says why it waits.
    let problem =
        json!({"cause": "disk_full", "detail": "1.0 MiB free, below its floor of 64.0 MiB"});
    let sessions = vec![common::session(1)];
    let (status, body) = desktop
        .sync_raw(&json!({"project_id": project, "sessions": sessions, "problem": problem}))
        .await;
    assert_eq!(status, 200, "{body}");
    let run = get(&client, &id).await;
    assert_eq!(run["desktop"]["online"], true, "{run}");
    assert_eq!(run["waiting_for"], "desktop: disk full", "{run}");
    assert_eq!(
        run["desktop"]["problem"],
        "disk full: 1.0 MiB free, below its floor of 64.0 MiB"
    );
    // Space freed: the next sync clears it at once.
    desktop.sync(&project, &[1]).await;
    let run = get(&client, &id).await;
    assert_eq!(run["waiting_for"], Value::Null, "{run}");
    assert_eq!(run["desktop"]["problem"], Value::Null, "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_delivered_after_an_outage_keeps_when_the_run_ended() {
    let Setup {
        service,
        project,
        desktop,
        client,
    } = setup(Era::Current).await;
    let id = queue(&client, "outage-run-key").await;
    desktop.sync(&project, &[1]).await;
    desktop.started(&id, "exec-1").await;
    let ended = service.clock.now().saturating_add(Duration::from_secs(5));
    // The desktop could not reach the service for 19 s after the run ended.
    service.clock.advance(Duration::from_secs(24));
    let completion = json!({"execution_id": "exec-1", "status": "completed",
                            "result": {"ok": true}, "finished_at": ended});
    let path = format!("{PREFIX}/commands/{id}/complete");
    let (status, body) = desktop.post(&path, &completion).await;
    assert_eq!(status, 200, "{body}");
    let run = get(&client, &id).await;
    assert_eq!(run["finished_at"], json!(ended), "{run}");
    assert_eq!(run["delivered_at"], json!(service.clock.now()), "{run}");
    assert!(
        run["finished_at"].as_str() < run["delivered_at"].as_str(),
        "{run}"
    );
    // The same completion again is a replay, and changes neither.
    service.clock.advance(Duration::from_secs(3));
    let (status, body) = desktop.post(&path, &completion).await;
    assert_eq!((status, &body["replayed"]), (200, &json!(true)), "{body}");
    assert_eq!(get(&client, &id).await["delivered_at"], run["delivered_at"]);
    // A desktop clock ahead of the service's never puts the end after the delivery.
    let id = queue(&client, "outage-run-key-2").await;
    desktop.sync(&project, &[1]).await;
    desktop.started(&id, "exec-2").await;
    let future = service
        .clock
        .now()
        .saturating_add(Duration::from_secs(3600));
    let completion =
        json!({"execution_id": "exec-2", "status": "completed", "finished_at": future});
    let path = format!("{PREFIX}/commands/{id}/complete");
    assert_eq!(desktop.post(&path, &completion).await.0, 200);
    let run = get(&client, &id).await;
    assert_eq!(run["finished_at"], run["delivered_at"], "{run}");
}

/// Queues a run of session 1 through `raw`; returns its id.
async fn queue_raw(raw: &common::raw::RawClient, key: &str) -> String {
    let ticket = raw
        .result(
            "tools/call",
            json!({"name": "run_graph_session", "arguments": common::run_args(1, key, json!({}))}),
        )
        .await;
    ticket["structuredContent"]["command_id"]
        .as_str()
        .expect("command id")
        .to_owned()
}

/// A `get_graph_run` of `id` waiting up to 30 s, its `_meta` carrying `token` as the
/// `progressToken`.
fn waiting_get_with_progress_token(
    raw: &common::raw::RawClient,
    id: &str,
    token: &str,
) -> reqwest::RequestBuilder {
    let mut meta = raw.meta();
    meta["progressToken"] = json!(token);
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "get_graph_run", "arguments": {"command_id": id, "wait_seconds": 30},
        "_meta": meta}});
    raw.http
        .post(&raw.url)
        .bearer_auth(&raw.token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "get_graph_run")
        .body(body.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_get_graph_run_with_a_progress_token_hears_the_run_move() {
    use relay_service::held::HeldKind;
    let Setup {
        service,
        project,
        desktop,
        ..
    } = setup(Era::Current).await;
    let raw = common::raw::RawClient::new(
        &service.mcp_url(),
        &service.full_agent(&project).await,
        false,
    );
    let id = queue_raw(&raw, "progress-run-key").await;
    desktop.sync(&project, &[1]).await;
    desktop.started(&id, "exec-1").await;
    let request = waiting_get_with_progress_token(&raw, &id, "watch-1");
    let waiting = tokio::spawn(async move { request.send().await.expect("answer").text().await });
    let held = relay_protocol::clock::Stopwatch::start();
    while service.app.runs.held.count(HeldKind::RunWait) == 0 {
        if waiting.is_finished() {
            let text = waiting.await.expect("task").expect("body");
            panic!("the get answered without waiting: {text}");
        }
        assert!(
            held.elapsed() < Duration::from_secs(20),
            "the get never waited"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let path = format!("{PREFIX}/commands/{id}/report");
    for (tokens, agents) in [(10, 1), (25, 2), (40, 3)] {
        let report = json!({"execution_id": "exec-1", "progress": {
            "tokens_used": tokens, "token_cap": 100, "agents_started": agents,
            "agents_finished": agents - 1, "tools_called": 0, "last_event": format!("agent-{agents}")}});
        assert_eq!(desktop.post(&path, &report).await.0, 200);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let completion = json!({"execution_id": "exec-1", "status": "completed", "result": 1});
    desktop
        .post(&format!("{PREFIX}/commands/{id}/complete"), &completion)
        .await;
    let text = waiting.await.expect("task").expect("body");
    let messages = common::raw::sse_messages(&text);
    let progress: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| &m["params"])
        .collect();
    assert!(!progress.is_empty(), "no progress notification in {text}");
    for params in &progress {
        assert_eq!(params["progressToken"], "watch-1", "{text}");
    }
    let values: Vec<f64> = progress
        .iter()
        .filter_map(|p| p["progress"].as_f64())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    for params in &progress {
        assert!(
            params["message"]
                .as_str()
                .is_some_and(|m| m.contains("tokens used of 100") && m.contains("last: agent-")),
            "{params}"
        );
    }
    let answer = common::raw::answer_of(&text).expect("answer");
    assert_eq!(answer["result"]["structuredContent"]["status"], "completed");
}
