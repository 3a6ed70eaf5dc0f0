//! A task is visible only through its own chat link, and a link only to agents of its
//! project: another link learns nothing about whether a task exists, a token does only what
//! its scopes allow, and reads need no more than `osfoundry:read`.

use crate::chat_support;
use crate::common;

use chat_support::{ChatService, chat_setup, claim, claim_args, claim_id, submit_args};
use common::{Era, TestService, call, err, mcp_client, ok};
use relay_service::ServiceConfig;
use relay_service::chat_tasks::{LINK_NOT_FOUND, NOT_CLAIMABLE, TASK_NOT_FOUND};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_link_cannot_tell_a_task_from_no_task() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let task = chat
        .service
        .assign_goal(&chat.link, "Only for link A", "iso-1")
        .await;
    let unknown = uuid::Uuid::new_v4().to_string();
    let other = &chat.other_link;
    for id in [&task, &unknown] {
        let claimed = call(
            &chat.client,
            "claim_linked_chat_task",
            claim_args(other, id),
        )
        .await;
        assert_eq!(err(&claimed), NOT_CLAIMABLE);
        let read = call(&chat.client, "get_linked_chat_task", claim_args(other, id)).await;
        assert_eq!(err(&read), TASK_NOT_FOUND);
        let submit = call(
            &chat.client,
            "submit_linked_chat_result",
            submit_args(
                other,
                id,
                &uuid::Uuid::new_v4().to_string(),
                "completed",
                "x",
            ),
        )
        .await;
        assert_eq!(err(&submit), TASK_NOT_FOUND);
    }
    let inbox = ok(&call(
        &chat.client,
        "list_linked_chat_tasks",
        json!({"chat_link_id": other}),
    )
    .await);
    assert_eq!(inbox, json!({"tasks": []}));
    // Once the own link holds the claim, the other link still hears the same.
    let claimed = claim(&chat.client, &chat.link, &task).await;
    let again = call(
        &chat.client,
        "claim_linked_chat_task",
        claim_args(other, &task),
    )
    .await;
    assert_eq!(err(&again), NOT_CLAIMABLE);
    let submit = call(
        &chat.client,
        "submit_linked_chat_result",
        submit_args(other, &task, &claim_id(&claimed), "completed", "stolen"),
    )
    .await;
    assert_eq!(err(&submit), TASK_NOT_FOUND, "even with the right claim id");
    let malformed = call(
        &chat.client,
        "claim_linked_chat_task",
        claim_args(&chat.link, "d97fd414-…"),
    )
    .await;
    // A malformed id is a task not found on this link, as the tool description says.
    assert_eq!(err(&malformed), TASK_NOT_FOUND);
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_of_another_project_is_not_found() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let service = &chat.service;
    let task = service
        .assign_goal(&chat.link, "Project A's work", "iso-2")
        .await;
    let other_project = service.project("q", "alice").await;
    let foreign = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&other_project).await,
        Era::Current,
    )
    .await;
    for (tool, arguments) in [
        ("list_linked_chat_tasks", json!({"chat_link_id": chat.link})),
        ("get_linked_chat_task", claim_args(&chat.link, &task)),
        ("claim_linked_chat_task", claim_args(&chat.link, &task)),
        (
            "list_linked_chat_tasks",
            json!({"chat_link_id": uuid::Uuid::new_v4().to_string()}),
        ),
    ] {
        assert_eq!(
            err(&call(&foreign, tool, arguments).await),
            LINK_NOT_FOUND,
            "{tool}"
        );
    }
    assert_eq!(
        service.stored_task(&task).await.claim_id,
        None,
        "nothing was claimed"
    );
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_needs_read_and_claiming_needs_run() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let link = service.link_chat(&project, "claude").await;
    let task = service.assign_goal(&link, "Scoped work", "iso-3").await;
    let (reader_token, _) = service.agent(&project, &["osfoundry:read"]).await;
    let (runner_token, _) = service.agent(&project, &["osfoundry:run"]).await;
    let reader = mcp_client(&service.mcp_url(), &reader_token, Era::Current).await;
    let runner = mcp_client(&service.mcp_url(), &runner_token, Era::Sessions2025).await;
    let inbox = ok(&call(
        &reader,
        "list_linked_chat_tasks",
        json!({"chat_link_id": link}),
    )
    .await);
    assert_eq!(inbox["tasks"][0]["task_id"], task);
    ok(&call(&reader, "get_linked_chat_task", claim_args(&link, &task)).await);
    let (status, body) = raw_call(
        &service,
        &reader_token,
        "claim_linked_chat_task",
        claim_args(&link, &task),
    )
    .await;
    assert_eq!(status, 403);
    common::assert_scope_refusal(&body, "osfoundry:run");
    assert!(service.stored_task(&task).await.claim_id.is_none());
    let (status, body) = raw_call(
        &service,
        &runner_token,
        "list_linked_chat_tasks",
        json!({"chat_link_id": link}),
    )
    .await;
    assert_eq!(status, 403);
    common::assert_scope_refusal(&body, "osfoundry:read");
    let claimed = claim(&runner, &link, &task).await;
    assert_eq!(claimed["replayed"], false);
    service.stop().await;
}

/// A stateless `tools/call` over raw HTTP: the status and the JSON-RPC answer.
async fn raw_call(
    service: &TestService,
    token: &str,
    tool: &str,
    arguments: Value,
) -> (u16, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
    "name": tool, "arguments": arguments,
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    }}});
    let response = common::http_client()
        .post(service.mcp_url())
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .json(&body)
        .send()
        .await
        .expect("request");
    common::decode(response).await
}
