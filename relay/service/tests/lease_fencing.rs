//! A claim holds for its lease, then the task goes back to the queue; the claim id fences every
//! submit and upload, so a chat that went silent and comes back late cannot overwrite the chat
//! that took over. Time moves only on the injected clock.

use crate::chat_support;
use crate::common;

use std::time::Duration;

use chat_support::{Chat, ChatService, chat_setup, claim, claim_args, claim_id, submit_args};
use common::{Era, McpClient, call, err, mcp_client, ok};
use relay_service::ServiceConfig;
use relay_service::chat_tasks::{LEASE_LAPSED, NOT_CLAIMABLE, STALE_CLAIM};
use relay_service::model::TaskStatus;
use serde_json::{Value, json};

const LEASE: Duration = Duration::from_secs(1);
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Polls B makes before giving up: well past the lease.
const MAX_POLLS: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_claim_lapses_and_its_late_submit_is_rejected() {
    let chat = chat_setup(ServiceConfig {
        task_lease: LEASE,
        ..ServiceConfig::default()
    })
    .await;
    let service = &chat.service;
    let task = service
        .assign_goal(&chat.link, "Summarise the pricing thread", "lease-1")
        .await;
    // Chat A claims and goes silent. Chat B, open on the same link in another tab, and a chat
    // on another link poll every 100 ms.
    let a = claim(&chat.client, &chat.link, &task).await;
    let claim_a = claim_id(&a);
    assert_eq!(a["lease_until"], "2026-11-08T09:30:01.000Z");
    let b_client = mcp_client(&service.mcp_url(), &chat.token, Era::Current).await;
    let b = poll_until_b_takes_over(&chat, &b_client, &task, &claim_a).await;
    let claim_b = claim_id(&b);
    assert_ne!(claim_b, claim_a);
    assert_eq!(b["lease_until"], "2026-11-08T09:30:02.000Z");

    let late = call(
        &chat.client,
        "submit_linked_chat_result",
        submit_args(&chat.link, &task, &claim_a, "completed", "A's late answer"),
    )
    .await;
    assert_eq!(err(&late), STALE_CLAIM);
    let upload = call(
        &chat.client,
        "upload_linked_chat_artifact",
        json!({"chat_link_id": chat.link, "task_id": task, "claim_id": claim_a,
               "artifact_id": "notes", "name": "notes.md", "mime": "text/markdown", "content": "A"}),
    )
    .await;
    assert_eq!(err(&upload), STALE_CLAIM, "uploads are fenced too");
    let accepted = ok(&call(
        &b_client,
        "submit_linked_chat_result",
        submit_args(&chat.link, &task, &claim_b, "completed", "B's answer"),
    )
    .await);
    assert_eq!(accepted, json!({"ok": true, "replayed": false}));
    let late_again = call(
        &chat.client,
        "submit_linked_chat_result",
        submit_args(&chat.link, &task, &claim_a, "completed", "A's late answer"),
    )
    .await;
    assert_eq!(err(&late_again), STALE_CLAIM, "still stale once B finished");
    let stored = service.stored_task(&task).await;
    assert_eq!(stored.status, TaskStatus::Completed);
    assert_eq!(stored.result.as_deref(), Some("B's answer"));
    chat.service.stop().await;
}

/// B (and a chat on another link) polls every `POLL_INTERVAL` while A stays silent: B gets A's
/// claim back until A's lease lapses, then takes the task over on the first poll at or after
/// `lease_until`. Returns B's claim.
async fn poll_until_b_takes_over(
    chat: &Chat,
    b_client: &McpClient,
    task: &str,
    claim_a: &str,
) -> Value {
    let mut takeover = None;
    let mut replays_before_takeover = 0;
    for poll in 1..=MAX_POLLS {
        chat.service.clock.advance(POLL_INTERVAL);
        let other = call(
            b_client,
            "claim_linked_chat_task",
            claim_args(&chat.other_link, task),
        )
        .await;
        assert_eq!(
            err(&other),
            NOT_CLAIMABLE,
            "another link never takes the task over"
        );
        let b = claim(b_client, &chat.link, task).await;
        if b["replayed"] == true {
            assert_eq!(
                claim_id(&b),
                claim_a,
                "while A's lease holds, B gets A's claim back"
            );
            replays_before_takeover += 1;
        } else {
            takeover = Some((poll, b));
            break;
        }
    }
    let (poll, b) = takeover.expect("B takes the task over after the lease");
    assert_eq!(
        POLL_INTERVAL * poll as u32,
        LEASE,
        "B takes over on the first poll at or after lease_until"
    );
    assert_eq!(replays_before_takeover, poll - 1);
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_after_the_lease_lapsed_is_rejected_before_anyone_reclaims() {
    let chat = chat_setup(ServiceConfig {
        task_lease: LEASE,
        ..ServiceConfig::default()
    })
    .await;
    let task = chat
        .service
        .assign_goal(&chat.link, "Draft the FAQ", "lease-2")
        .await;
    let claimed = claim(&chat.client, &chat.link, &task).await;
    chat.service.clock.advance(LEASE - Duration::from_millis(1));
    let view = ok(&call(
        &chat.client,
        "get_linked_chat_task",
        claim_args(&chat.link, &task),
    )
    .await);
    assert_eq!(
        view["status"], "claimed",
        "the lease still holds 1 ms before it lapses"
    );
    chat.service.clock.advance(Duration::from_millis(1));
    let view = ok(&call(
        &chat.client,
        "get_linked_chat_task",
        claim_args(&chat.link, &task),
    )
    .await);
    assert_eq!(
        view["status"], "queued",
        "a read sweeps the lapsed claim back to the queue"
    );
    let late = call(
        &chat.client,
        "submit_linked_chat_result",
        submit_args(&chat.link, &task, &claim_id(&claimed), "completed", "late"),
    )
    .await;
    assert_eq!(err(&late), LEASE_LAPSED);
    assert!(LEASE_LAPSED.starts_with("rejected: stale claim"));
    let again = claim(&chat.client, &chat.link, &task).await;
    assert_eq!(again["replayed"], false);
    assert_ne!(
        claim_id(&again),
        claim_id(&claimed),
        "a lapsed claim is not given back"
    );
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_lease_holds_the_claim_until_the_task_ends() {
    let chat = chat_setup(ServiceConfig {
        task_lease: Duration::ZERO,
        ..ServiceConfig::default()
    })
    .await;
    let task = chat
        .service
        .assign_goal(&chat.link, "Translate the notes", "lease-3")
        .await;
    let first = claim(&chat.client, &chat.link, &task).await;
    assert_eq!(first["lease_until"], serde_json::Value::Null);
    chat.service
        .clock
        .advance(Duration::from_secs(23 * 60 * 60));
    let again = claim(&chat.client, &chat.link, &task).await;
    assert_eq!(
        again["replayed"], true,
        "without a lease the claim never lapses"
    );
    assert_eq!(claim_id(&again), claim_id(&first));
    let done = ok(&call(
        &chat.client,
        "submit_linked_chat_result",
        submit_args(
            &chat.link,
            &task,
            &claim_id(&first),
            "completed",
            "Übersetzt.",
        ),
    )
    .await);
    assert_eq!(done["ok"], true);
    chat.service.stop().await;
}

/// A claim sweeps at most once a second per replica, so a lease shorter than that lapses
/// between two claim sweeps: the next claimer still takes the task over on its first claim at
/// or after `lease_until` (the claim's own conditional write), and A's submit is then stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lapsing_between_claim_sweeps_is_taken_over_at_once() {
    const SHORT_LEASE: Duration = Duration::from_millis(300);
    let chat = chat_setup(ServiceConfig {
        task_lease: SHORT_LEASE,
        ..ServiceConfig::default()
    })
    .await;
    let service = &chat.service;
    let task = service
        .assign_goal(&chat.link, "Draft the release notes", "lease-short")
        .await;
    let a = claim(&chat.client, &chat.link, &task).await;
    let claim_a = claim_id(&a);
    let b_client = mcp_client(&service.mcp_url(), &chat.token, Era::Current).await;
    service
        .clock
        .advance(SHORT_LEASE - Duration::from_millis(1));
    let early = claim(&b_client, &chat.link, &task).await;
    assert_eq!(early["replayed"], true, "the lease still holds");
    assert_eq!(claim_id(&early), claim_a);
    service.clock.advance(Duration::from_millis(1));
    let b = claim(&b_client, &chat.link, &task).await;
    assert_eq!(b["replayed"], false, "B takes over at lease_until: {b}");
    let claim_b = claim_id(&b);
    assert_ne!(claim_b, claim_a);
    let stored = service.stored_task(&task).await;
    assert_eq!(stored.claim_id.as_deref(), Some(claim_b.as_str()));
    let late = call(
        &chat.client,
        "submit_linked_chat_result",
        submit_args(&chat.link, &task, &claim_a, "completed", "A's late answer"),
    )
    .await;
    assert_eq!(err(&late), STALE_CLAIM);
    let again = claim(&chat.client, &chat.link, &task).await;
    assert_eq!(
        again["replayed"], true,
        "A's next claim is handed B's claim"
    );
    assert_eq!(claim_id(&again), claim_b);
    chat.service.stop().await;
}
