//! Artifacts ride on the claim: a stable `artifact_id` makes a retry a no-op (same content)
//! or a conflict (other content); content, count and names are bounded; the owner reads them
//! back with their sha256.

use crate::chat_support;
use crate::common;

use chat_support::{Chat, ChatService, chat_setup, claim, claim_id};
use common::{call, err, ok};
use relay_service::ServiceConfig;
use relay_service::chat_tasks::owner::{self, Acting};
use relay_service::chat_tasks::{
    ARTIFACT_CONFLICT, MAX_ARTIFACT_BYTES, MAX_ARTIFACT_ID_CHARS, MAX_ARTIFACT_NAME_CHARS,
    MAX_ARTIFACTS_PER_TASK, MAX_MIME_CHARS,
};
use relay_service::runs::sha256_hex;
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

struct Upload<'a> {
    chat: &'a Chat,
    task: String,
    claim: String,
}

impl Upload<'_> {
    async fn send(
        &self,
        artifact_id: &str,
        name: &str,
        mime: &str,
        content: &str,
    ) -> CallToolResult {
        call(
            &self.chat.client,
            "upload_linked_chat_artifact",
            json!({"chat_link_id": self.chat.link, "task_id": self.task, "claim_id": self.claim,
                   "artifact_id": artifact_id, "name": name, "mime": mime, "content": content}),
        )
        .await
    }

    async fn text(&self, artifact_id: &str, content: &str) -> CallToolResult {
        self.send(artifact_id, "report.md", "text/markdown", content)
            .await
    }
}

async fn claimed<'a>(chat: &'a Chat, key: &str) -> Upload<'a> {
    let task = chat
        .service
        .assign_goal(&chat.link, "Write the report", key)
        .await;
    let claim = claim_id(&claim(&chat.client, &chat.link, &task).await);
    Upload { chat, task, claim }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_upload_is_a_no_op_and_other_content_a_conflict() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let upload = claimed(&chat, "art-1").await;
    let content = "# Report\n\nÜberblick: 日本語 😀";
    let first = ok(&upload.text("report-v1", content).await);
    assert_eq!(
        first,
        json!({"ok": true, "replayed": false, "sha256": sha256_hex(content), "size_bytes": content.len()})
    );
    let again = ok(&upload.text("report-v1", content).await);
    assert_eq!(again["replayed"], true);
    assert_eq!(
        err(&upload.text("report-v1", "# Report, edited").await),
        ARTIFACT_CONFLICT
    );
    assert_eq!(
        err(&upload
            .send("report-v1", "other-name.md", "text/markdown", content)
            .await),
        ARTIFACT_CONFLICT,
        "the name is part of the artifact"
    );
    ok(&upload.text("report-v2", "# Report, edited").await);
    let detail = owner::task_detail(&chat.service.app.tasks, Acting::Operator, &upload.task)
        .await
        .expect("detail");
    let ids: Vec<_> = detail
        .artifacts
        .iter()
        .map(|a| a.artifact_id.as_str())
        .collect();
    assert_eq!(ids, ["report-v1", "report-v2"]);
    let stored = owner::artifact(
        &chat.service.app.tasks,
        Acting::Operator,
        &upload.task,
        "report-v1",
    )
    .await
    .expect("artifact");
    assert_eq!(stored.content, content, "the first content stays");
    assert_eq!(stored.meta.sha256, sha256_hex(content));
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_task_takes_no_new_artifacts_but_replays_old_ones() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let upload = claimed(&chat, "art-2").await;
    ok(&upload.text("a1", "before").await);
    ok(&call(
        &chat.client,
        "submit_linked_chat_result",
        chat_support::submit_args(&chat.link, &upload.task, &upload.claim, "completed", "done"),
    )
    .await);
    assert_eq!(ok(&upload.text("a1", "before").await)["replayed"], true);
    assert_eq!(
        err(&upload.text("a2", "after").await),
        "rejected: task already completed"
    );
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifact_limits_hold_at_and_past_each_bound() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let upload = claimed(&chat, "art-3").await;
    // Content: exactly the limit in bytes (multi-byte characters count as their bytes).
    let at_limit = format!(
        "{}{}",
        "日".repeat((MAX_ARTIFACT_BYTES - 2) / 3),
        "x".repeat((MAX_ARTIFACT_BYTES - 2) % 3 + 2)
    );
    assert_eq!(at_limit.len(), MAX_ARTIFACT_BYTES);
    assert_eq!(
        ok(&upload.text("big", &at_limit).await)["size_bytes"],
        MAX_ARTIFACT_BYTES
    );
    assert_invalid(
        &upload.text("bigger", &format!("{at_limit}x")).await,
        "bytes, at most",
    );
    // artifact_id: 1 to 128 characters of a safe alphabet.
    let id = "i".repeat(MAX_ARTIFACT_ID_CHARS);
    ok(&upload.text(&id, "x").await);
    assert_invalid(&upload.text(&format!("{id}i"), "x").await, "artifact_id");
    assert_invalid(&upload.text("", "x").await, "artifact_id");
    assert_invalid(&upload.text("../etc/passwd", "x").await, "artifact_id");
    name_and_mime_limits(&upload).await;
    // Count: the task holds 6 now; fill to the limit, then one more is refused.
    let detail = owner::task_detail(&chat.service.app.tasks, Acting::Operator, &upload.task)
        .await
        .expect("detail");
    for n in detail.artifacts.len()..MAX_ARTIFACTS_PER_TASK {
        ok(&upload.text(&format!("fill-{n}"), "x").await);
    }
    assert_invalid(&upload.text("one-too-many", "x").await, "the most allowed");
    assert_eq!(
        ok(&upload.text("fill-10", "x").await)["replayed"],
        true,
        "a retry of a stored artifact still replays at the limit"
    );
    let detail = owner::task_detail(&chat.service.app.tasks, Acting::Operator, &upload.task)
        .await
        .expect("detail");
    assert_eq!(detail.artifacts.len(), MAX_ARTIFACTS_PER_TASK);
    let _: Value = serde_json::to_value(&detail).expect("the owner's detail is JSON");
    chat.service.stop().await;
}

/// Name and mime, at and past each bound: a name is 1 to `MAX_ARTIFACT_NAME_CHARS` characters,
/// not blank and without control characters; a mime is a media type of at most `MAX_MIME_CHARS`.
async fn name_and_mime_limits(upload: &Upload<'_>) {
    ok(&upload
        .send(
            "named",
            &"n".repeat(MAX_ARTIFACT_NAME_CHARS),
            "text/plain",
            "x",
        )
        .await);
    assert_invalid(
        &upload
            .send(
                "named-2",
                &"n".repeat(MAX_ARTIFACT_NAME_CHARS + 1),
                "text/plain",
                "x",
            )
            .await,
        "name",
    );
    assert_invalid(
        &upload.send("named-3", "a\nb", "text/plain", "x").await,
        "name",
    );
    assert_invalid(
        &upload.send("named-4", " ", "text/plain", "x").await,
        "name",
    );
    let mime = format!("text/{}", "x".repeat(MAX_MIME_CHARS - 5));
    ok(&upload.send("typed", "t", &mime, "x").await);
    assert_invalid(
        &upload.send("typed-2", "t", &format!("{mime}x"), "x").await,
        "mime",
    );
    assert_invalid(&upload.send("typed-3", "t", "markdown", "x").await, "mime");
    // Parameters are name=value with no control characters (issue 44).
    for (n, bad) in [
        "text/plain; charset=utf-8\u{1}",
        "text/plain; name=\"a\nb\"",
        "text/plain; charset",
        "text/plain\r\nX-Injected: 1",
    ]
    .iter()
    .enumerate()
    {
        assert_invalid(
            &upload.send(&format!("typed-bad-{n}"), "t", bad, "x").await,
            "mime",
        );
    }
    ok(&upload
        .send("typed-4", "t", "text/plain; charset=utf-8", "x")
        .await);
}

/// Asserts that the upload was refused as invalid, with a message that names `what`.
fn assert_invalid(result: &CallToolResult, what: &str) {
    let message = err(result);
    assert!(message.contains(what), "{message}");
}
