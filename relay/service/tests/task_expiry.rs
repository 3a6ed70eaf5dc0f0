//! A task not finished within 24 h of its creation expires, lazily: the first read, claim or
//! submit after the deadline sweeps it to `expired`. Time moves only on the injected clock.

use crate::chat_support;
use crate::common;

use std::time::Duration;

use chat_support::{Chat, ChatService, chat_setup, claim, claim_args, claim_id, submit_args};
use common::{call, err, ok};
use relay_service::ServiceConfig;
use relay_service::chat_tasks::owner::{self, Acting};
use relay_service::chat_tasks::{NOT_CLAIMABLE, TASK_EXPIRED, TASK_TTL};
use relay_service::model::TaskStatus;
use serde_json::json;

const MILLI: Duration = Duration::from_millis(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_expire_a_day_after_they_were_assigned() {
    let chat = chat_setup(ServiceConfig {
        // No lease, so only the day-long expiry can end the claim.
        task_lease: Duration::ZERO,
        ..ServiceConfig::default()
    })
    .await;
    let service = &chat.service;
    assert_eq!(TASK_TTL, Duration::from_secs(24 * 60 * 60));
    let queued = service
        .assign_goal(&chat.link, "Queued until it expires", "expiry-1")
        .await;
    let claimed = service
        .assign_goal(&chat.link, "Claimed until it expires", "expiry-2")
        .await;
    let claim_id = claim_id(&claim(&chat.client, &chat.link, &claimed).await);
    let view = ok(&call(
        &chat.client,
        "get_linked_chat_task",
        claim_args(&chat.link, &queued),
    )
    .await);
    assert_eq!(view["expires_at"], "2026-11-09T09:30:00.000Z");

    service.clock.advance(TASK_TTL - MILLI);
    let inbox = ok(&call(
        &chat.client,
        "list_linked_chat_tasks",
        json!({"chat_link_id": chat.link}),
    )
    .await);
    assert_eq!(
        inbox["tasks"].as_array().map(Vec::len),
        Some(2),
        "both open 1 ms before"
    );

    service.clock.advance(MILLI);
    let inbox = ok(&call(
        &chat.client,
        "list_linked_chat_tasks",
        json!({"chat_link_id": chat.link}),
    )
    .await);
    assert_eq!(inbox, json!({"tasks": []}));
    for task in [&queued, &claimed] {
        assert_expired_at_the_deadline(&chat, task).await;
    }
    let submit = call(
        &chat.client,
        "submit_linked_chat_result",
        submit_args(&chat.link, &claimed, &claim_id, "completed", "too late"),
    )
    .await;
    assert_eq!(err(&submit), TASK_EXPIRED);
    let reclaim = call(
        &chat.client,
        "claim_linked_chat_task",
        claim_args(&chat.link, &queued),
    )
    .await;
    assert_eq!(err(&reclaim), format!("{NOT_CLAIMABLE}: task is expired"));
    let list = owner::list_tasks(&service.app.tasks, Acting::Operator, &chat.link)
        .await
        .expect("owner list");
    assert!(list.tasks.iter().all(|t| t.status_label == "Expired"));
    chat.service.stop().await;
}

/// The chat sees the task expired when its day ended, and the store holds it as expired.
async fn assert_expired_at_the_deadline(chat: &Chat, task: &str) {
    let view = ok(&call(
        &chat.client,
        "get_linked_chat_task",
        claim_args(&chat.link, task),
    )
    .await);
    assert_eq!(view["status"], "expired");
    assert_eq!(view["finished_at"], "2026-11-09T09:30:00.000Z");
    assert_eq!(
        chat.service.stored_task(task).await.status,
        TaskStatus::Expired
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claiming_again_as_leases_lapse_does_not_outlive_the_day() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let task = chat
        .service
        .assign_goal(&chat.link, "Finish before the day is out", "expiry-3")
        .await;
    let first = claim(&chat.client, &chat.link, &task).await;
    // Keep claiming again as leases lapse, until the day is over (72 steps of 20 minutes).
    const STEP: Duration = Duration::from_secs(20 * 60);
    let mut claim_id = claim_id(&first);
    let mut refused = false;
    for _ in 0..(TASK_TTL.as_secs() / STEP.as_secs() + 1) {
        chat.service.clock.advance(STEP);
        let answer = call(
            &chat.client,
            "claim_linked_chat_task",
            claim_args(&chat.link, &task),
        )
        .await;
        if answer.is_error == Some(true) {
            assert_eq!(err(&answer), format!("{NOT_CLAIMABLE}: task is expired"));
            refused = true;
            break;
        }
        claim_id = chat_support::claim_id(&ok(&answer));
    }
    assert!(refused, "the claims stop when the day is over");
    let submit = call(
        &chat.client,
        "submit_linked_chat_result",
        submit_args(&chat.link, &task, &claim_id, "completed", "late"),
    )
    .await;
    assert_eq!(err(&submit), TASK_EXPIRED);
    chat.service.stop().await;
}
