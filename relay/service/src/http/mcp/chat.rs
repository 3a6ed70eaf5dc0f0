//! The five linked chat task tools: decode the arguments, call one function of
//! [`crate::chat_tasks::agent`], encode. Their answers are compact JSON, and the text copy is that
//! same JSON: every read lands in the conversation's context.

use schemars::JsonSchema;
use serde::Deserialize;

use super::tools::{Answer, Hints, McpTool, ToolContext, ToolError};
use crate::auth::Scope;
use crate::chat_tasks::agent::{self, SubmitRequest, UploadRequest};
use crate::chat_tasks::view::{ClaimView, Inbox, SubmitAck, TaskView, UploadAck};
use crate::chat_tasks::{
    GOAL_PREVIEW_BYTES, INBOX_LIMIT, LINK_NOT_FOUND, MAX_ARTIFACT_BYTES, MAX_ARTIFACT_ID_CHARS,
    MAX_ARTIFACT_NAME_CHARS, MAX_ARTIFACTS_PER_TASK, MAX_MIME_CHARS, MAX_TASK_RESULT_CHARS,
    NOT_CLAIMABLE, STALE_CLAIM, TASK_CANCELLED, TASK_EXPIRED, TASK_NOT_FOUND, TaskError,
};
use crate::http::metrics::{ClaimKind, ClaimOutcome};

/// A write of the chat's own task that is safe to repeat (claim, submit, upload).
const REPEATABLE_WRITE: Hints = Hints {
    read_only: false,
    destructive: false,
    idempotent: true,
    open_world: false,
};

/// `list_linked_chat_tasks`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkInput {
    /// The chat link the owner connected this chat with.
    pub chat_link_id: String,
}

/// `get_linked_chat_task`'s and `claim_linked_chat_task`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskInput {
    /// The chat link the owner connected this chat with.
    pub chat_link_id: String,
    /// A task listed by list_linked_chat_tasks.
    pub task_id: String,
}

/// `list_linked_chat_tasks`.
pub struct ListLinkedChatTasks;

impl McpTool for ListLinkedChatTasks {
    type Input = LinkInput;
    type Output = Inbox;
    const NAME: &'static str = "list_linked_chat_tasks";
    const TITLE: &'static str = "List this chat's assigned tasks";
    const SCOPE: Scope = Scope::Read;
    const HINTS: Hints = Hints::READ;
    const NEEDS_CHAT_LINK: bool = true;

    fn description() -> String {
        format!(
            "List the tasks the owner assigned to this linked chat that are still open (queued or claimed), oldest first, at most {INBOX_LIMIT} (more: true when others wait). \
             Each shows task_id, status and the start of the goal (at most {GOAL_PREVIEW_BYTES} bytes; the whole goal comes with claim_linked_chat_task or get_linked_chat_task). \
             An empty list means nothing is waiting: tell the user and stop, do not poll in a loop. \
             To work on a task: claim_linked_chat_task, do the work, then submit_linked_chat_result with the claim_id. \
             Rejected: a chat_link_id that is not linked to this connection's project (\"{LINK_NOT_FOUND}\")."
        )
    }

    async fn call(cx: ToolContext<'_>, input: LinkInput) -> Result<Answer<Inbox>, ToolError> {
        let inbox = agent::list_tasks(&cx.app.tasks, cx.agent, &input.chat_link_id).await?;
        let hint = inbox
            .tasks
            .is_empty()
            .then(|| "Nothing waits: tell the user and stop, do not poll.".to_owned());
        Ok(Answer::with_hint(inbox, hint))
    }
}

/// `get_linked_chat_task`.
pub struct GetLinkedChatTask;

impl McpTool for GetLinkedChatTask {
    type Input = TaskInput;
    type Output = TaskView;
    const NAME: &'static str = "get_linked_chat_task";
    const TITLE: &'static str = "Get an assigned task";
    const SCOPE: Scope = Scope::Read;
    const HINTS: Hints = Hints::READ;
    const NEEDS_CHAT_LINK: bool = true;

    fn description() -> String {
        format!(
            "Get one task of this linked chat in full: status (queued, claimed, completed, failed, cancelled, expired), the whole goal, expires_at (24 h after it was assigned), lease_until while claimed, and the result once submitted. \
             Rejected: a task of another chat link, an unknown id and a malformed id all get \"{TASK_NOT_FOUND}\"."
        )
    }

    async fn call(cx: ToolContext<'_>, input: TaskInput) -> Result<Answer<TaskView>, ToolError> {
        let tasks = &cx.app.tasks;
        let task = agent::get_task(tasks, cx.agent, &input.chat_link_id, &input.task_id).await?;
        Ok(Answer::json(task))
    }
}

/// `claim_linked_chat_task`; each claim is counted in `/metrics` by what it came to.
pub struct ClaimLinkedChatTask;

impl McpTool for ClaimLinkedChatTask {
    type Input = TaskInput;
    type Output = ClaimView;
    const NAME: &'static str = "claim_linked_chat_task";
    const TITLE: &'static str = "Claim an assigned task";
    const SCOPE: Scope = Scope::Run;
    const HINTS: Hints = REPEATABLE_WRITE;
    const NEEDS_CHAT_LINK: bool = true;

    fn description() -> String {
        format!(
            "Claim a queued task of this linked chat before working on it. Returns claim_id (pass it to submit_linked_chat_result and upload_linked_chat_artifact), lease_until and the whole goal. \
             Claiming a task this chat link already holds returns the same claim again (replayed: true), so a repeated call is safe. \
             The claim lapses at lease_until: submit before then, or the task goes back to the queue and a later claim gets a new claim_id. \
             Rejected: a task that is not this chat link's, or does not exist (\"{NOT_CLAIMABLE}\"), and a finished, cancelled or expired task (\"{NOT_CLAIMABLE}: task is ...\"). A rejected claim will not succeed on retry."
        )
    }

    async fn call(cx: ToolContext<'_>, input: TaskInput) -> Result<Answer<ClaimView>, ToolError> {
        let tasks = &cx.app.tasks;
        let claimed = agent::claim_task(tasks, cx.agent, &input.chat_link_id, &input.task_id).await;
        let outcome = match &claimed {
            Ok(view) if view.replayed => Some(ClaimOutcome::Replayed),
            Ok(_) => Some(ClaimOutcome::Won),
            Err(TaskError::Refused(_) | TaskError::Contended) => Some(ClaimOutcome::Conflict),
            Err(_) => None,
        };
        if let Some(outcome) = outcome {
            cx.app.metrics.claims.record(ClaimKind::ChatTask, outcome);
        }
        Ok(Answer::json(claimed?))
    }
}

/// `submit_linked_chat_result`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitInput {
    /// The chat link the owner connected this chat with.
    pub chat_link_id: String,
    /// The claimed task.
    pub task_id: String,
    /// The claim_id claim_linked_chat_task returned.
    pub claim_id: String,
    /// Either completed with the answer, or failed with the reason.
    #[schemars(extend("enum" = ["completed", "failed"]))]
    pub status: String,
    /// The answer, or why the task failed.
    #[schemars(length(max = MAX_TASK_RESULT_CHARS))]
    pub result: String,
}

/// `submit_linked_chat_result`.
pub struct SubmitLinkedChatResult;

impl McpTool for SubmitLinkedChatResult {
    type Input = SubmitInput;
    type Output = SubmitAck;
    const NAME: &'static str = "submit_linked_chat_result";
    const TITLE: &'static str = "Submit an assigned task's result";
    const SCOPE: Scope = Scope::Run;
    const HINTS: Hints = REPEATABLE_WRITE;
    const NEEDS_CHAT_LINK: bool = true;

    fn description() -> String {
        format!(
            "Submit the outcome of a claimed task: status \"completed\" with the answer as result, or \"failed\" with the reason as result (at most {MAX_TASK_RESULT_CHARS} characters). \
             Sending the identical submit again (e.g. after a lost response) returns ok with replayed: true; the first result is kept. \
             Rejected, and not worth retrying: a stale claim_id (\"{STALE_CLAIM}\", or its lease lapsed), a cancelled task (\"{TASK_CANCELLED}\": a cancelled task cannot be completed), an expired task (\"{TASK_EXPIRED}\"), and a different status or result for a task already finished. \
             Tell the user what was rejected instead of resubmitting."
        )
    }

    async fn call(cx: ToolContext<'_>, input: SubmitInput) -> Result<Answer<SubmitAck>, ToolError> {
        let request = SubmitRequest {
            chat_link_id: &input.chat_link_id,
            task_id: &input.task_id,
            claim_id: &input.claim_id,
            status: &input.status,
            result: &input.result,
        };
        let ack = agent::submit_result(&cx.app.tasks, cx.agent, request).await?;
        Ok(Answer::json(ack))
    }
}

/// `upload_linked_chat_artifact`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UploadInput {
    /// The chat link the owner connected this chat with.
    pub chat_link_id: String,
    /// The claimed task.
    pub task_id: String,
    /// The claim_id claim_linked_chat_task returned.
    pub claim_id: String,
    /// A stable id of your choosing; reuse it when retrying.
    #[schemars(length(min = 1, max = MAX_ARTIFACT_ID_CHARS), regex(pattern = "^[A-Za-z0-9._:-]+$"))]
    pub artifact_id: String,
    /// The file's name.
    #[schemars(length(min = 1, max = MAX_ARTIFACT_NAME_CHARS))]
    pub name: String,
    /// Its media type, like text/markdown.
    #[schemars(length(max = MAX_MIME_CHARS))]
    pub mime: String,
    /// The text content.
    pub content: String,
}

/// `upload_linked_chat_artifact`.
pub struct UploadLinkedChatArtifact;

impl McpTool for UploadLinkedChatArtifact {
    type Input = UploadInput;
    type Output = UploadAck;
    const NAME: &'static str = "upload_linked_chat_artifact";
    const TITLE: &'static str = "Attach a file to an assigned task";
    const SCOPE: Scope = Scope::Run;
    const HINTS: Hints = REPEATABLE_WRITE;
    const NEEDS_CHAT_LINK: bool = true;

    fn description() -> String {
        format!(
            "Attach a text file (a report, a patch, a table) to a claimed task before submitting it: content at most {MAX_ARTIFACT_BYTES} bytes, at most {MAX_ARTIFACTS_PER_TASK} artifacts per task. \
             Choose a stable artifact_id (1 to {MAX_ARTIFACT_ID_CHARS} characters of letters, digits, '.', '_', ':', '-') and reuse it when retrying: the same content again is a no-op (replayed: true). \
             Rejected: different content under an artifact_id already used, a stale claim_id (\"{STALE_CLAIM}\"), a cancelled (\"{TASK_CANCELLED}\") or expired task, and a task already finished."
        )
    }

    async fn call(cx: ToolContext<'_>, input: UploadInput) -> Result<Answer<UploadAck>, ToolError> {
        let request = UploadRequest {
            chat_link_id: &input.chat_link_id,
            task_id: &input.task_id,
            claim_id: &input.claim_id,
            artifact_id: &input.artifact_id,
            name: &input.name,
            mime: &input.mime,
            content: &input.content,
        };
        let ack = agent::upload_artifact(&cx.app.tasks, cx.agent, request).await?;
        Ok(Answer::json(ack))
    }
}
