//! A submit whose response was lost can be sent again: the identical submit is acknowledged
//! as a replay, a different one against the finished task is rejected, and the first result
//! stays.

use crate::chat_support;
use crate::common;

use chat_support::{ChatService, chat_setup, claim, claim_id, submit_args};
use common::{call, err, ok};
use relay_service::ServiceConfig;
use relay_service::chat_tasks::{DIFFERENT_RESULT, result_hash};
use relay_service::model::TaskStatus;
use serde_json::json;

const FIRST: &str = "1. Who signs off the pricing copy?";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_identical_submits_then_a_different_one() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let task = chat
        .service
        .assign_goal(&chat.link, "List open questions", "submit-1")
        .await;
    let claim_id = claim_id(&claim(&chat.client, &chat.link, &task).await);
    let submit = |result: &str| {
        call(
            &chat.client,
            "submit_linked_chat_result",
            submit_args(&chat.link, &task, &claim_id, "completed", result),
        )
    };
    let mut answers = Vec::new();
    for _ in 0..4 {
        answers.push(ok(&submit(FIRST).await));
    }
    assert_eq!(answers[0], json!({"ok": true, "replayed": false}));
    for replay in &answers[1..] {
        assert_eq!(replay, &json!({"ok": true, "replayed": true}));
    }
    let fifth = submit("2. Something else entirely").await;
    assert_eq!(err(&fifth), DIFFERENT_RESULT);
    let stored = chat.service.stored_task(&task).await;
    assert_eq!(stored.status, TaskStatus::Completed);
    assert_eq!(
        stored.result.as_deref(),
        Some(FIRST),
        "the first result stays"
    );
    assert_eq!(
        stored.result_hash.as_deref(),
        Some(result_hash(TaskStatus::Completed, FIRST).as_str()),
        "the task stores sha256(status + result)"
    );
    // The hash covers the status: the same text as `failed` is a different submit.
    let failed = call(
        &chat.client,
        "submit_linked_chat_result",
        submit_args(&chat.link, &task, &claim_id, "failed", FIRST),
    )
    .await;
    assert_eq!(err(&failed), DIFFERENT_RESULT);
    // And the replay still works after the refusals.
    assert_eq!(ok(&submit(FIRST).await)["replayed"], true);
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_submit_is_idempotent_too() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let task = chat
        .service
        .assign_goal(&chat.link, "Book a room", "submit-2")
        .await;
    let claim_id = claim_id(&claim(&chat.client, &chat.link, &task).await);
    let args = submit_args(
        &chat.link,
        &task,
        &claim_id,
        "failed",
        "No calendar access.",
    );
    assert_eq!(
        ok(&call(&chat.client, "submit_linked_chat_result", args.clone()).await)["replayed"],
        false
    );
    assert_eq!(
        ok(&call(&chat.client, "submit_linked_chat_result", args).await)["replayed"],
        true
    );
    let stored = chat.service.stored_task(&task).await;
    assert_eq!(stored.status, TaskStatus::Failed);
    assert_eq!(stored.result.as_deref(), Some("No calendar access."));
    let view = ok(&call(
        &chat.client,
        "get_linked_chat_task",
        json!({"chat_link_id": chat.link, "task_id": task}),
    )
    .await);
    assert_eq!(view["status"], "failed");
    assert_eq!(view["result"], "No calendar access.");
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_must_name_a_status_the_chat_can_report() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let task = chat
        .service
        .assign_goal(&chat.link, "Anything", "submit-3")
        .await;
    let claim_id = claim_id(&claim(&chat.client, &chat.link, &task).await);
    for status in ["cancelled", "expired", "queued", "done"] {
        let refused = call(
            &chat.client,
            "submit_linked_chat_result",
            submit_args(&chat.link, &task, &claim_id, status, "x"),
        )
        .await;
        assert!(
            err(&refused).contains("\"completed\" or \"failed\""),
            "{status}"
        );
    }
    let malformed = call(
        &chat.client,
        "submit_linked_chat_result",
        submit_args(&chat.link, &task, "8ffc774f-…", "completed", "x"),
    )
    .await;
    assert!(err(&malformed).contains("claim_id is not a UUID"));
    assert_eq!(
        chat.service.stored_task(&task).await.status,
        TaskStatus::Claimed,
        "nothing changed"
    );
    chat.service.stop().await;
}
