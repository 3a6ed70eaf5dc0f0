//! What a real chat host needs of the tools (issue 42): every answer's text is the JSON of its
//! structured content, a wait that reaches its deadline answers the desktop's presence as of
//! then, and `subscriptions/listen` with `taskIds` tells of a run's end exactly once.

use crate::chat_support;
use crate::common;

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use chat_support::{ChatService, chat_setup, claim, claim_id, submit_args};
use common::raw::RawClient;
use common::{Desktop, TestService, call, ok, run_args, text_json};
use relay_service::{ServiceConfig, router, runs};
use serde_json::{Value, json};
use tower::ServiceExt;

/// Calls `tool` and checks that its first text block parses as exactly its structured
/// content; returns that content.
async fn answer(client: &common::McpClient, tool: &str, arguments: Value) -> Value {
    let result = call(client, tool, arguments).await;
    ok(&result);
    text_json(&result)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tools_text_is_the_json_of_its_structured_content() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let desktop = chat.service.desktop(&chat.project).await;
    desktop.sync(&chat.project, &[1]).await;
    let client = &chat.client;
    let listed = answer(client, "list_graph_sessions", json!({})).await;
    assert_eq!(listed["project_id"], chat.project.as_str());
    let ticket = answer(
        client,
        "run_graph_session",
        run_args(1, "text-json-key", json!({})),
    )
    .await;
    let id = ticket["command_id"].as_str().expect("command id");
    answer(client, "get_graph_run", json!({"command_id": id})).await;
    answer(client, "cancel_graph_run", json!({"command_id": id})).await;

    let task = chat
        .service
        .assign_goal(&chat.link, "Write the report", "assign-text-json")
        .await;
    let link = &chat.link;
    answer(
        client,
        "list_linked_chat_tasks",
        json!({"chat_link_id": link}),
    )
    .await;
    answer(
        client,
        "get_linked_chat_task",
        json!({"chat_link_id": link, "task_id": task}),
    )
    .await;
    let claimed = claim(client, link, &task).await;
    let claim = claim_id(&claimed);
    answer(
        client,
        "upload_linked_chat_artifact",
        json!({"chat_link_id": link, "task_id": task, "claim_id": claim, "artifact_id": "a1",
               "name": "report.md", "mime": "text/markdown", "content": "# Report"}),
    )
    .await;
    answer(
        client,
        "submit_linked_chat_result",
        submit_args(link, &task, &claim, "completed", "done"),
    )
    .await;
    // The claim went through `claim` (which reads structuredContent); its text as well.
    let again = call(
        client,
        "get_linked_chat_task",
        json!({"chat_link_id": link, "task_id": task}),
    )
    .await;
    assert_eq!(text_json(&again)["status"], "completed");
    chat.service.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_times_out_with_the_desktop_offline_answers_offline() {
    let common::InProcess {
        app,
        project,
        desktop,
        agent,
    } = common::in_process().await;
    let session = json!({"graph_session_id": format!("gs_{:032x}", 1), "name": "g", "slug": "g"});
    let sync = Request::post("/external-assistants/graph-relays/sync")
        .header("authorization", format!("Bearer {desktop}"))
        .header("content-type", "application/json")
        .body(Body::from(
            json!({"project_id": project, "sessions": [session]}).to_string(),
        ))
        .expect("request");
    let synced = router(app.clone()).oneshot(sync).await.expect("answered");
    assert_eq!(synced.status(), StatusCode::OK, "the desktop synced");
    let request = runs::RunRequest {
        graph_session_id: format!("gs_{:032x}", 1),
        arguments: serde_json::Map::new(),
        idempotency_key: "offline-wait".into(),
        max_tokens: None,
    };
    let ticket = runs::queue_run(&app.runs, &agent, request)
        .await
        .expect("queued");
    let id = ticket.command_id.to_string();
    let now = runs::get_run(&app.runs, &agent, &id).await.expect("run");
    assert!(now.desktop.online, "just heard from");
    // The desktop says nothing more: the wait reaches its deadline, 45 s after the desktop was
    // last heard from, past the 40 s after which it counts as offline.
    let waited = runs::get_run_waiting(&app.runs, &agent, &id, runs::MAX_GET_WAIT)
        .await
        .expect("run");
    assert_eq!(waited.status, relay_protocol::RunStatus::Queued);
    assert!(!waited.desktop.online, "offline as of the deadline");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listening_to_a_task_id_tells_its_end_exactly_once() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let desktop: Desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let token = service.full_agent(&project).await;
    let client = RawClient::new(&service.mcp_url(), &token, true);
    let created = client
        .result(
            "tools/call",
            json!({"name": "run_graph_session", "arguments": run_args(1, "listen-once", json!({}))}),
        )
        .await;
    let id = created["taskId"].as_str().expect("task id").to_owned();
    let (mut stream, ack) = client.listen_acknowledged(json!({"taskIds": [&id]})).await;
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([&id]),
        "the acknowledgment names the task: {ack}"
    );
    desktop.sync(&project, &[1]).await;
    assert_eq!(desktop.started(&id, "exec-1").await.0, 200);
    let report = json!({"execution_id": "exec-1", "progress": {"tokens_used": 5, "agents_started": 1, "agents_finished": 0, "tools_called": 0}});
    let path = format!("/external-assistants/graph-relays/commands/{id}/report");
    assert_eq!(desktop.post(&path, &report).await.0, 200);
    let completion = json!({"execution_id": "exec-1", "status": "completed", "result": {"ok": 1}, "total_tokens": 3, "reported_cost": 0.0});
    assert_eq!(desktop.complete(&id, &completion).await.0, 200);
    // Starting and reporting leave the task `working`: the first notification is its end.
    let status = stream
        .next(Duration::from_secs(10))
        .await
        .expect("the terminal status");
    assert_eq!(status["method"], "notifications/tasks", "{status}");
    assert_eq!(status["params"]["taskId"], json!(id), "{status}");
    assert_eq!(status["params"]["status"], "completed", "{status}");
    assert_eq!(
        status["params"]["result"]["structuredContent"]["result"],
        json!({"ok": 1})
    );
    // A later change of the finished run (the desktop telling its end again) sends nothing.
    desktop.complete(&id, &completion).await;
    assert!(
        stream.next(Duration::from_millis(500)).await.is_none(),
        "one notification per task status"
    );
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_chat_link_tools_list_is_the_graph_tools_within_ten_kilobytes() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let token = service.full_agent(&project).await;
    let client = RawClient::new(&service.mcp_url(), &token, false);
    let listed = |client: &RawClient| {
        let request = client.post("tools/list", json!({}));
        async move {
            let body = request.send().await.expect("answered");
            body.text().await.expect("body")
        }
    };
    let body = listed(&client).await;
    let answer: Value = serde_json::from_str(&body).expect("a JSON answer");
    let names: Vec<&str> = answer["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "list_graph_sessions",
            "run_graph_session",
            "get_graph_run",
            "cancel_graph_run"
        ]
    );
    // Every conversation of the connection carries this list.
    assert!(body.len() <= 10 * 1024, "{} bytes", body.len());
    // A chat link brings the chat-task tools.
    service.link_chat(&project, "claude").await;
    let body = listed(&client).await;
    let answer: Value = serde_json::from_str(&body).expect("a JSON answer");
    assert_eq!(answer["result"]["tools"].as_array().map(Vec::len), Some(9));
    service.stop().await;
}
