//! A cancelled task cannot be completed: the owner's cancel is a status change, and a submit
//! (or upload) under the old claim is rejected with `rejected: task is cancelled`.

use crate::chat_support;
use crate::common;

use chat_support::{ChatService, chat_setup, claim, claim_args, claim_id, submit_args};
use common::{call, err, ok};
use relay_service::ServiceConfig;
use relay_service::chat_tasks::owner::{self, Acting};
use relay_service::chat_tasks::{NOT_CLAIMABLE, TASK_CANCELLED};
use relay_service::model::TaskStatus;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_then_submit_is_rejected() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let app = &chat.service.app;
    let task = chat
        .service
        .assign_goal(&chat.link, "Write the launch post", "cancel-1")
        .await;
    let claim_id = claim_id(&claim(&chat.client, &chat.link, &task).await);
    let cancelled = owner::cancel_task(&app.tasks, Acting::Operator, &task)
        .await
        .expect("cancel");
    assert!(cancelled.cancelled && !cancelled.already_finished);
    assert_eq!(cancelled.status_label, "Cancelled");
    let submit = call(
        &chat.client,
        "submit_linked_chat_result",
        submit_args(&chat.link, &task, &claim_id, "completed", "The post."),
    )
    .await;
    assert_eq!(err(&submit), TASK_CANCELLED);
    let upload = call(
        &chat.client,
        "upload_linked_chat_artifact",
        json!({"chat_link_id": chat.link, "task_id": task, "claim_id": claim_id,
               "artifact_id": "post", "name": "post.md", "mime": "text/markdown", "content": "x"}),
    )
    .await;
    assert_eq!(err(&upload), TASK_CANCELLED);
    let reclaim = call(
        &chat.client,
        "claim_linked_chat_task",
        claim_args(&chat.link, &task),
    )
    .await;
    assert_eq!(err(&reclaim), format!("{NOT_CLAIMABLE}: task is cancelled"));
    let stored = chat.service.stored_task(&task).await;
    assert_eq!(stored.status, TaskStatus::Cancelled);
    assert_eq!(stored.result, None);
    let inbox = ok(&call(
        &chat.client,
        "list_linked_chat_tasks",
        json!({"chat_link_id": chat.link}),
    )
    .await);
    assert_eq!(
        inbox,
        json!({"tasks": []}),
        "a cancelled task leaves the inbox"
    );
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_queued_or_finished_task() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let app = &chat.service.app;
    let queued = chat
        .service
        .assign_goal(&chat.link, "Queued one", "cancel-2")
        .await;
    let first = owner::cancel_task(&app.tasks, Acting::Operator, &queued)
        .await
        .expect("cancel");
    assert!(first.cancelled && !first.already_finished);
    let again = owner::cancel_task(&app.tasks, Acting::Operator, &queued)
        .await
        .expect("cancel");
    assert!(
        again.cancelled && again.already_finished,
        "a second cancel changes nothing"
    );

    let done = chat
        .service
        .assign_goal(&chat.link, "Done one", "cancel-3")
        .await;
    let claim_id = claim_id(&claim(&chat.client, &chat.link, &done).await);
    ok(&call(
        &chat.client,
        "submit_linked_chat_result",
        submit_args(&chat.link, &done, &claim_id, "completed", "Result."),
    )
    .await);
    let late = owner::cancel_task(&app.tasks, Acting::Operator, &done)
        .await
        .expect("cancel");
    assert!(!late.cancelled && late.already_finished);
    assert_eq!(
        late.status,
        TaskStatus::Completed,
        "a finished task keeps its result"
    );
    assert_eq!(
        chat.service.stored_task(&done).await.result.as_deref(),
        Some("Result.")
    );
    chat.service.stop().await;
}
