//! What the chat and the owner see of tasks. The chat's views are compact: every read lands
//! in the conversation's context, so an empty inbox is a dozen bytes and a waiting task
//! carries its id, status and a bounded preview of the goal.

use serde::Serialize;

use super::{GOAL_PREVIEW_BYTES, NO_EVENT_SUBSCRIPTION_HINT, OWNER_REFRESH_SECS};
use crate::model::{HostKind, TaskId, TaskStatus};
use crate::store::{ArtifactRecord, ChatLinkRecord, TaskRecord};
use relay_protocol::clock::Timestamp;

fn is_false(value: &bool) -> bool {
    !*value
}

/// A task status in a tool's output schema: one of the statuses' wire words.
fn task_status_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let words: Vec<String> = TaskStatus::ALL.iter().map(ToString::to_string).collect();
    schemars::json_schema!({"type": "string", "enum": words})
}

/// An open task's status in a tool's output schema: queued or claimed.
fn open_status_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let words = [TaskStatus::Queued, TaskStatus::Claimed].map(|s| s.to_string());
    schemars::json_schema!({"type": "string", "enum": words})
}

/// One open task in the chat's inbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct InboxItem {
    /// The task.
    #[schemars(with = "String")]
    pub task_id: TaskId,
    /// Its status: queued or claimed.
    #[schemars(schema_with = "open_status_schema")]
    pub status: TaskStatus,
    /// The start of the goal, ending in an ellipsis when cut (the whole goal comes with the
    /// claim).
    pub goal: String,
}

impl InboxItem {
    /// The inbox line of `task`.
    pub fn of(task: &TaskRecord) -> Self {
        InboxItem {
            task_id: task.id,
            status: task.status,
            goal: goal_preview(&task.goal, GOAL_PREVIEW_BYTES),
        }
    }
}

/// `list_linked_chat_tasks`: the link's open tasks, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Inbox {
    /// Open tasks, oldest first, as many as one answer lists.
    pub tasks: Vec<InboxItem>,
    /// Present (true) when more open tasks wait than were listed.
    #[serde(skip_serializing_if = "is_false")]
    pub more: bool,
}

/// `get_linked_chat_task`: one task in full.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct TaskView {
    /// The task.
    #[schemars(with = "String")]
    pub task_id: TaskId,
    /// Its status.
    #[schemars(schema_with = "task_status_schema")]
    pub status: TaskStatus,
    /// The whole goal.
    pub goal: String,
    /// When it was assigned.
    #[schemars(with = "String")]
    pub created_at: Timestamp,
    /// When it expires unless finished.
    #[schemars(with = "String")]
    pub expires_at: Timestamp,
    /// When the current claim lapses.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub lease_until: Option<Timestamp>,
    /// The submitted result, once finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// When it finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub finished_at: Option<Timestamp>,
}

impl TaskView {
    /// The chat's view of `task`.
    pub fn of(task: &TaskRecord) -> Self {
        TaskView {
            task_id: task.id,
            status: task.status,
            goal: task.goal.clone(),
            created_at: task.created_at,
            expires_at: task.expires_at,
            lease_until: task.lease_until,
            result: task.result.clone(),
            finished_at: task.finished_at,
        }
    }
}

/// `claim_linked_chat_task`: the claim to pass to submit and upload, and the goal to work on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ClaimView {
    /// The task.
    #[schemars(with = "String")]
    pub task_id: TaskId,
    /// The fencing token: submit and upload must carry it.
    pub claim_id: String,
    /// When the claim lapses unless the result is submitted; absent without a lease.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub lease_until: Option<Timestamp>,
    /// True when this link already held the claim and got it back.
    pub replayed: bool,
    /// The whole goal.
    pub goal: String,
}

/// `submit_linked_chat_result`'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct SubmitAck {
    /// Always true: refusals are errors.
    pub ok: bool,
    /// True when this repeated the submit already recorded.
    pub replayed: bool,
}

/// `upload_linked_chat_artifact`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct UploadAck {
    /// Always true: refusals are errors.
    pub ok: bool,
    /// True when the same artifact was already stored.
    pub replayed: bool,
    /// SHA-256 of the stored content.
    pub sha256: String,
    /// Size of the stored content in bytes.
    pub size_bytes: u64,
}

/// A chat link as the owner sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatLinkView {
    /// The link id to give the chat.
    pub chat_link_id: String,
    /// Its project.
    pub project_id: String,
    /// The host kind.
    pub host: HostKind,
    /// Whether the host is told about new tasks.
    pub event_subscription: bool,
    /// When it was created.
    pub created_at: Timestamp,
}

impl ChatLinkView {
    /// The owner's view of `link`.
    pub fn of(link: &ChatLinkRecord) -> Self {
        ChatLinkView {
            chat_link_id: link.id.clone(),
            project_id: link.project_id.clone(),
            host: link.host,
            event_subscription: link.event_subscription,
            created_at: link.created_at,
        }
    }
}

/// A task as the owner sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OwnerTaskView {
    /// The task.
    pub task_id: TaskId,
    /// Its link.
    pub chat_link_id: String,
    /// The goal.
    pub goal: String,
    /// Its status.
    pub status: TaskStatus,
    /// The status in words, e.g. "Waiting for Claude".
    pub status_label: &'static str,
    /// When it was assigned.
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Timestamp,
    /// When it expires unless finished.
    pub expires_at: Timestamp,
    /// When the current claim lapses.
    pub lease_until: Option<Timestamp>,
    /// When it finished.
    pub finished_at: Option<Timestamp>,
    /// The chat's result.
    pub result: Option<String>,
}

impl OwnerTaskView {
    /// The owner's view of `task` on a link to `host`.
    pub fn of(task: &TaskRecord, host: HostKind) -> Self {
        OwnerTaskView {
            task_id: task.id,
            chat_link_id: task.chat_link_id.clone(),
            goal: task.goal.clone(),
            status: task.status,
            status_label: task.status.label(host),
            created_at: task.created_at,
            updated_at: task.updated_at,
            expires_at: task.expires_at,
            lease_until: task.lease_until,
            finished_at: task.finished_at,
            result: task.result.clone(),
        }
    }
}

/// The owner's task list of one link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OwnerTaskList {
    /// The link.
    pub chat_link_id: String,
    /// Its host kind.
    pub host: HostKind,
    /// Whether the host is told about new tasks.
    pub event_subscription: bool,
    /// "Open the host conversation to start each task." unless an event subscription is active.
    pub hint: Option<&'static str>,
    /// When to refresh the list, in seconds.
    pub refresh_after_seconds: u64,
    /// Tasks, newest first.
    pub tasks: Vec<OwnerTaskView>,
}

impl OwnerTaskList {
    /// The list of `tasks` on `link`.
    pub fn of(link: &ChatLinkRecord, tasks: &[TaskRecord]) -> Self {
        OwnerTaskList {
            chat_link_id: link.id.clone(),
            host: link.host,
            event_subscription: link.event_subscription,
            hint: (!link.event_subscription).then_some(NO_EVENT_SUBSCRIPTION_HINT),
            refresh_after_seconds: OWNER_REFRESH_SECS,
            tasks: tasks
                .iter()
                .map(|task| OwnerTaskView::of(task, link.host))
                .collect(),
        }
    }
}

/// The answer to an assignment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AssignedTask {
    /// The task (the existing one when the key was used before).
    #[serde(flatten)]
    pub task: OwnerTaskView,
    /// True when the idempotency key returned an existing task.
    pub replayed: bool,
}

/// The answer to a cancel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CancelledTask {
    /// The task.
    pub task_id: TaskId,
    /// Its status after the cancel.
    pub status: TaskStatus,
    /// The status in words.
    pub status_label: &'static str,
    /// Whether the task is now cancelled.
    pub cancelled: bool,
    /// True when it had already ended and nothing changed.
    pub already_finished: bool,
}

/// An artifact's description, without its content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArtifactMeta {
    /// The chat's id for it.
    pub artifact_id: String,
    /// File name.
    pub name: String,
    /// Media type.
    pub mime: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// SHA-256 of the content.
    pub sha256: String,
    /// When it was stored.
    pub created_at: Timestamp,
}

impl ArtifactMeta {
    /// The description of `artifact`.
    pub fn of(artifact: &ArtifactRecord) -> Self {
        ArtifactMeta {
            artifact_id: artifact.artifact_id.clone(),
            name: artifact.name.clone(),
            mime: artifact.mime.clone(),
            size_bytes: artifact.size_bytes,
            sha256: artifact.sha256.clone(),
            created_at: artifact.created_at,
        }
    }
}

/// One task in full for the owner, with its artifacts' descriptions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OwnerTaskDetail {
    /// The task.
    #[serde(flatten)]
    pub task: OwnerTaskView,
    /// Its artifacts, oldest first.
    pub artifacts: Vec<ArtifactMeta>,
}

/// One artifact with its content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArtifactContent {
    /// The description.
    #[serde(flatten)]
    pub meta: ArtifactMeta,
    /// The content.
    pub content: String,
}

/// Bytes `c` takes inside a JSON string as serde_json writes it.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{08}' | '\u{0c}' => 2,
        c if u32::from(c) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// `goal` with whitespace runs folded to one space, cut so that its JSON string body is at
/// most `budget` bytes; a cut preview ends in `…`.
pub fn goal_preview(goal: &str, budget: usize) -> String {
    const ELLIPSIS: char = '…';
    let folded = goal.split_whitespace().collect::<Vec<_>>().join(" ");
    let total: usize = folded.chars().map(escaped_len).sum();
    if total <= budget {
        return folded;
    }
    let room = budget.saturating_sub(escaped_len(ELLIPSIS));
    let mut used = 0;
    let mut preview = String::new();
    for c in folded.chars() {
        used += escaped_len(c);
        if used > room {
            break;
        }
        preview.push(c);
    }
    preview.truncate(preview.trim_end().len());
    preview.push(ELLIPSIS);
    preview
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_body_len(text: &str) -> usize {
        serde_json::to_string(text)
            .map(|s| s.len() - 2)
            .unwrap_or(usize::MAX)
    }

    #[test]
    fn short_goals_are_kept_whole() {
        assert_eq!(
            goal_preview("Draft  the\nrelease notes", 120),
            "Draft the release notes"
        );
        let exact = "a".repeat(120);
        assert_eq!(goal_preview(&exact, 120), exact);
    }

    #[test]
    fn previews_never_pass_the_budget_in_json_bytes() {
        let goals = [
            "a".repeat(121),
            "日本語のテキスト".repeat(20),
            "\"quoted\" \\ ".repeat(30),
            "\u{1}\u{2}x".repeat(60),
            "😀".repeat(100),
        ];
        for goal in goals {
            let preview = goal_preview(&goal, 120);
            assert!(preview.ends_with('…'), "{preview}");
            let len = json_body_len(&preview);
            assert!(len <= 120, "{len} bytes: {preview}");
            assert!(len >= 100, "the preview uses its budget: {len}");
        }
    }
}
