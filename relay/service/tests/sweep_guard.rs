//! Expiry is lazy and its sweep hides behind a read-only guard: an empty poll never takes the
//! write lock, even with a long history, while a poll that finds something due sweeps it
//! once. The unguarded sweep (the first version) takes the lock on every read.

use crate::chat_support;
use crate::common;

use std::time::Duration;

use chat_support::{ChatService, chat_setup, claim};
use common::{call, ok};
use relay_service::ServiceConfig;
use relay_service::chat_tasks::sweep::SweepMode;
use relay_service::store::SqliteStore;
use serde_json::json;

const POLLS: u64 = 20;

async fn poll(chat: &chat_support::Chat) -> rmcp::model::CallToolResult {
    call(
        &chat.client,
        "list_linked_chat_tasks",
        json!({"chat_link_id": chat.link}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_polls_write_nothing_and_a_due_lease_is_swept_once() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let stats = &chat.service.app.tasks.sweeps;
    for _ in 0..POLLS {
        assert_eq!(ok(&poll(&chat).await), json!({"tasks": []}));
    }
    assert_eq!(stats.guard_checks(), POLLS);
    assert_eq!(
        stats.write_transactions(),
        0,
        "an empty poll takes no write lock"
    );

    let task = chat
        .service
        .assign_goal(&chat.link, "Lapse me", "guard-1")
        .await;
    let claimed = claim(&chat.client, &chat.link, &task).await;
    assert_eq!(
        claimed["lease_until"], "2026-11-08T10:00:00.000Z",
        "the default lease is 30 minutes"
    );
    assert_eq!(
        stats.write_transactions(),
        0,
        "assigning and claiming sweep nothing"
    );
    chat.service
        .clock
        .advance(Duration::from_secs(30 * 60) - Duration::from_millis(1));
    assert_eq!(ok(&poll(&chat).await)["tasks"][0]["status"], "claimed");
    assert_eq!(
        stats.write_transactions(),
        0,
        "1 ms before the lease lapses"
    );
    chat.service.clock.advance(Duration::from_millis(1));
    let inbox = ok(&poll(&chat).await);
    assert_eq!(
        inbox["tasks"][0]["status"], "queued",
        "the lapsed claim is back in the queue"
    );
    assert_eq!(
        stats.write_transactions(),
        1,
        "the due lease was swept once"
    );
    for _ in 0..POLLS {
        ok(&poll(&chat).await);
    }
    assert_eq!(stats.write_transactions(), 1, "and nothing after");
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unguarded_sweep_writes_on_every_poll_and_no_sweep_never_does() {
    for (mode, writes) in [(SweepMode::Unguarded, POLLS), (SweepMode::Off, 0)] {
        let chat = chat_setup(ServiceConfig {
            task_sweep: mode,
            ..ServiceConfig::default()
        })
        .await;
        for _ in 0..POLLS {
            ok(&poll(&chat).await);
        }
        let stats = &chat.service.app.tasks.sweeps;
        assert_eq!(stats.write_transactions(), writes, "{mode:?}");
        assert_eq!(stats.guard_checks(), 0, "{mode:?}");
        chat.service.stop().await;
    }
}

/// Another connection holds the database's write lock while the chat polls.
async fn poll_while_locked(mode: SweepMode) -> rmcp::model::CallToolResult {
    let chat = chat_setup(ServiceConfig {
        task_sweep: mode,
        ..ServiceConfig::default()
    })
    .await;
    let writer = rusqlite::Connection::open(&chat.service.db).expect("second connection");
    writer
        .execute_batch("BEGIN IMMEDIATE")
        .expect("take the write lock");
    // A poll that needs the write lock waits for it until the store's busy timeout and then
    // fails; one that does not answers at once.
    let result = poll(&chat).await;
    writer.execute_batch("ROLLBACK").expect("release the lock");
    chat.service.stop().await;
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_empty_poll_answers_while_another_writer_holds_the_lock() {
    assert_eq!(
        ok(&poll_while_locked(SweepMode::Guarded).await),
        json!({"tasks": []})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unguarded_empty_poll_needs_the_write_lock() {
    let result = poll_while_locked(SweepMode::Unguarded).await;
    assert_eq!(
        result.is_error,
        Some(true),
        "the unguarded sweep must have waited for the lock and failed: {:?}",
        result.structured_content
    );
}

#[tokio::test]
async fn the_guard_is_index_seeks_not_a_scan_of_the_history() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("relay.db")).expect("open");
    let plan = store.due_guard_plan().await.expect("plan");
    let steps: Vec<_> = plan
        .iter()
        .filter(|step| step.contains("chat_tasks"))
        .collect();
    assert_eq!(steps.len(), 2, "{plan:?}");
    for step in steps {
        assert!(
            step.starts_with("SEARCH chat_tasks USING") && step.contains("INDEX"),
            "{plan:?}"
        );
    }
    assert!(plan.iter().all(|step| !step.contains("SCAN")), "{plan:?}");
}
