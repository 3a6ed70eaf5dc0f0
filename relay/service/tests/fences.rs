//! Completions and artifacts are fenced by what the service recorded: only the execution that
//! `started` a command completes it, a command that never started may only be refused for
//! consent, an impossible token count is a 400 that names the field, and an artifact replay
//! needs the task's current claim before it learns anything about what an id holds.

use crate::chat_support;
use crate::common;

use chat_support::{Chat, ChatService, chat_setup, claim, claim_id, submit_args};
use common::{Era, Setup, call, err, ok, queue, setup};
use relay_protocol::NOT_SHARED;
use relay_service::ServiceConfig;
use relay_service::chat_tasks::{ARTIFACT_CONFLICT, STALE_CLAIM};
use serde_json::{Value, json};

fn done(execution_id: &str) -> Value {
    json!({"execution_id": execution_id, "status": "completed", "result": {"ok": true}, "total_tokens": 3})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_started_execution_completes_a_command() {
    // The service stops when its handle is dropped: keep it for the whole test.
    let Setup {
        service: _service,
        desktop,
        client: agent,
        ..
    } = setup(Era::Current).await;
    let id = queue(&agent, "fence-key-1").await;
    assert_eq!(desktop.started(&id, "e1").await.0, 200);
    let (status, body) = desktop.started(&id, "e2").await;
    assert_eq!(status, 409, "a second start is refused: {body}");
    let (status, body) = desktop.complete(&id, &done("e2")).await;
    assert_eq!(status, 409, "another execution cannot complete it: {body}");
    assert!(
        body["error"].as_str().unwrap_or("").contains("e1"),
        "the refusal names the execution that started it: {body}"
    );
    let run = ok(&call(&agent, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["status"], "running", "nothing was recorded: {run}");
    assert_eq!(desktop.complete(&id, &done("e1")).await.0, 200);
    let run = ok(&call(&agent, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["status"], "completed", "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_command_takes_only_the_consent_refusal() {
    // The service stops when its handle is dropped: keep it for the whole test.
    let Setup {
        service: _service,
        desktop,
        client: agent,
        ..
    } = setup(Era::Current).await;
    let id = queue(&agent, "fence-key-2").await;
    let (status, body) = desktop.complete(&id, &done("e1")).await;
    assert_eq!(status, 409, "a result for a command never started: {body}");
    assert!(
        body["error"].as_str().unwrap_or("").contains("started"),
        "{body}"
    );
    let failed = json!({"execution_id": "e1", "status": "failed", "error": "boom"});
    assert_eq!(desktop.complete(&id, &failed).await.0, 409);
    let other_cancel = json!({"execution_id": "e1", "status": "cancelled", "error": "because"});
    assert_eq!(desktop.complete(&id, &other_cancel).await.0, 409);
    let run = ok(&call(&agent, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["status"], "queued", "{run}");

    let refusal = json!({"execution_id": "e1", "status": "cancelled", "error": NOT_SHARED});
    let (status, body) = desktop.complete(&id, &refusal).await;
    assert_eq!(status, 200, "{body}");
    let run = ok(&call(&agent, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["status"], "cancelled", "{run}");
    assert_eq!(run["error"], NOT_SHARED);
    assert_eq!(run["end_cause"], "consent_withdrawn", "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impossible_token_count_is_a_400_naming_the_field() {
    // The service stops when its handle is dropped: keep it for the whole test.
    let Setup {
        service: _service,
        desktop,
        client: agent,
        ..
    } = setup(Era::Current).await;
    let id = queue(&agent, "fence-key-3").await;
    assert_eq!(desktop.started(&id, "e1").await.0, 200);
    let poison =
        json!({"execution_id": "e1", "status": "completed", "result": 1, "total_tokens": u64::MAX});
    let (status, body) = desktop.complete(&id, &poison).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or("")
            .contains("total_tokens"),
        "{body}"
    );
    let run = ok(&call(&agent, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["status"], "running", "{run}");
    assert_eq!(desktop.complete(&id, &done("e1")).await.0, 200);
}

async fn upload(
    chat: &Chat,
    task: &str,
    claim: &str,
    content: &str,
) -> rmcp::model::CallToolResult {
    call(
        &chat.client,
        "upload_linked_chat_artifact",
        json!({"chat_link_id": chat.link, "task_id": task, "claim_id": claim,
               "artifact_id": "report", "name": "report.md", "mime": "text/markdown", "content": content}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_replay_needs_the_current_claim_and_tells_others_nothing() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let task = chat
        .service
        .assign_goal(&chat.link, "Write the report", "fence-task")
        .await;
    let holder = claim_id(&claim(&chat.client, &chat.link, &task).await);
    let stored = ok(&upload(&chat, &task, &holder, "the real report").await);
    assert_eq!(stored["replayed"], false);
    let random = uuid::Uuid::new_v4().to_string();
    for content in ["the real report", "a guess at the report"] {
        let refused = err(&upload(&chat, &task, &random, content).await);
        assert!(refused.contains(STALE_CLAIM), "{refused}");
        assert!(
            !refused.contains(ARTIFACT_CONFLICT),
            "no content answer: {refused}"
        );
    }
    // The holder still gets the replay and the conflict.
    assert_eq!(
        ok(&upload(&chat, &task, &holder, "the real report").await)["replayed"],
        true
    );
    assert!(err(&upload(&chat, &task, &holder, "changed").await).contains(ARTIFACT_CONFLICT));

    let submitted = call(
        &chat.client,
        "submit_linked_chat_result",
        submit_args(&chat.link, &task, &holder, "completed", "done"),
    )
    .await;
    ok(&submitted);
    for content in ["the real report", "a guess at the report"] {
        let refused = err(&upload(&chat, &task, &random, content).await);
        assert!(refused.contains(STALE_CLAIM), "after the submit: {refused}");
    }
}
