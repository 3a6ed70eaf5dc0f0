//! Chat-link inboxes and runs as MCP resources: listed with caching hints, readable, and a
//! `subscriptions/listen` stream that names them is woken by the notify seam (no polling)
//! when the owner assigns a task or a run changes.

use crate::chat_support::{ChatService, chat_setup};
use crate::common;

use std::time::Duration;

use common::raw::RawClient;
use common::{TestService, run_args};
use relay_service::ServiceConfig;
use serde_json::{Value, json};

fn inbox(link: &str) -> String {
    format!("relay://chat-links/{link}/tasks")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inboxes_are_listed_with_caching_hints_and_read_as_the_inbox() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let client = RawClient::new(&chat.service.mcp_url(), &chat.token, false);
    let listed = client.result("resources/list", json!({})).await;
    assert_eq!(listed["cacheScope"], "private", "{listed}");
    assert!(listed["ttlMs"].as_u64().is_some(), "{listed}");
    let uris: Vec<&str> = listed["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .collect();
    assert!(uris.contains(&inbox(&chat.link).as_str()), "{listed}");
    assert!(uris.contains(&inbox(&chat.other_link).as_str()), "{listed}");

    let task = chat
        .service
        .assign_goal(&chat.link, "Summarise the notes", "assign-key-1")
        .await;
    let read = client
        .result("resources/read", json!({"uri": inbox(&chat.link)}))
        .await;
    assert_eq!(read["ttlMs"], 0);
    let content = &read["contents"][0];
    assert_eq!(content["mimeType"], "application/json");
    let body: Value = serde_json::from_str(content["text"].as_str().expect("text")).expect("JSON");
    assert_eq!(body["tasks"][0]["task_id"], json!(task), "{body}");

    // Another project's link, a made-up one and a foreign URI all read as not found.
    let other = chat.service.project("q", "bob").await;
    let foreign = chat.service.link_chat(&other, "claude").await;
    for uri in [
        inbox(&foreign),
        inbox("00000000-0000-4000-8000-000000000000"),
        "test://nothing".to_owned(),
    ] {
        let answer = client.request("resources/read", json!({"uri": uri})).await;
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        assert_eq!(answer["error"]["data"]["uri"], json!(uri));
    }
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribed_inbox_hears_of_an_assigned_task_within_a_second() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let client = RawClient::new(&chat.service.mcp_url(), &chat.token, false);
    let uri = inbox(&chat.link);
    let mut stream = client.listen(&[&uri]).await;
    // Nothing happens, nothing is sent.
    assert!(stream.next(Duration::from_millis(300)).await.is_none());

    // Another link's task does not wake this stream; this link's does.
    chat.service
        .assign_goal(&chat.other_link, "Not for this chat", "assign-other")
        .await;
    let assigned = relay_protocol::clock::Stopwatch::start();
    chat.service
        .assign_goal(&chat.link, "Draft the reply", "assign-this")
        .await;
    let update = stream
        .next(Duration::from_secs(1))
        .await
        .expect("notifications/resources/updated within 1 s of the assignment");
    assert!(assigned.elapsed() < Duration::from_secs(1));
    assert_eq!(
        update["method"], "notifications/resources/updated",
        "{update}"
    );
    assert_eq!(update["params"]["uri"], json!(uri));
    // The stream keeps going: the next change is heard as well.
    chat.service
        .assign_goal(&chat.link, "And another", "assign-third")
        .await;
    let again = stream
        .next(Duration::from_secs(5))
        .await
        .expect("second update");
    assert_eq!(again["params"]["uri"], json!(uri));
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_inbox_is_never_watched() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let other = chat.service.project("q", "bob").await;
    let foreign = chat.service.link_chat(&other, "claude").await;
    let client = RawClient::new(&chat.service.mcp_url(), &chat.token, false);
    let mut stream = client.listen(&[&inbox(&foreign)]).await;
    chat.service
        .assign_goal(&foreign, "Bob's work", "assign-foreign")
        .await;
    assert!(
        stream.next(Duration::from_secs(1)).await.is_none(),
        "another project's inbox must not leak its changes"
    );
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribed_run_sends_resource_updates_and_task_status() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let token = service.full_agent(&project).await;
    let client = RawClient::new(&service.mcp_url(), &token, true);
    let created = client
        .result(
            "tools/call",
            json!({"name": "run_graph_session", "arguments": run_args(1, "listen-run-key", json!({}))}),
        )
        .await;
    let id = created["taskId"].as_str().expect("task id").to_owned();
    let uri = format!("relay://runs/{id}");
    // The relay's resource and, by the tasks extension, the task itself.
    let mut stream = client
        .listen_to(json!({"resourceSubscriptions": [&uri], "taskIds": [&id]}))
        .await;

    desktop.sync(&project, &[1]).await;
    assert_eq!(desktop.started(&id, "exec-1").await.0, 200);
    // Queued and running are both `working`: the start changes the resource, not the task
    // status, so only the resource update is sent.
    let update = stream
        .next(Duration::from_secs(10))
        .await
        .expect("resource update");
    assert_eq!(update["params"]["uri"], json!(uri), "{update}");

    let completion = json!({"execution_id": "exec-1", "status": "completed", "result": {"ok": 1}, "total_tokens": 3, "reported_cost": 0.0});
    assert_eq!(desktop.complete(&id, &completion).await.0, 200);
    let (_, status) = next_pair(&mut stream).await;
    assert_eq!(status["params"]["taskId"], json!(id), "{status}");
    assert_eq!(status["params"]["status"], "completed", "{status}");
    assert_eq!(
        status["params"]["result"]["structuredContent"]["result"],
        json!({"ok": 1})
    );
    let read = client.result("resources/read", json!({"uri": uri})).await;
    let body: Value =
        serde_json::from_str(read["contents"][0]["text"].as_str().expect("text")).expect("JSON");
    assert_eq!(body["status"], "completed");
    service.stop().await;
}

/// The `resources/updated` and `notifications/tasks` one run change sends, in that order.
async fn next_pair(stream: &mut common::raw::Listen) -> (Value, Value) {
    let update = stream
        .next(Duration::from_secs(10))
        .await
        .expect("resource update");
    assert_eq!(
        update["method"], "notifications/resources/updated",
        "{update}"
    );
    let status = stream
        .next(Duration::from_secs(10))
        .await
        .expect("task status");
    assert_eq!(status["method"], "notifications/tasks", "{status}");
    (update, status)
}
