//! What the linked chat does, through the MCP tools: read its inbox and one task, claim,
//! submit, upload artifacts. Plain functions over [`Tasks`], testable without HTTP.
//!
//! Every operation names the chat link; the agent's token must belong to the link's project,
//! and a task is visible only through its own link. Each one sweeps first ([`super::sweep`]);
//! a claim at most once a second per replica ([`sweep_for_claim`]).

use sha2::{Digest, Sha256};

use super::machine::{Refusal, TaskDecision, TaskEvent, fence, transition};
use super::media_type;
use super::sweep::{sweep, sweep_for_claim};
use super::view::{ClaimView, Inbox, InboxItem, SubmitAck, TaskView, UploadAck};
use super::{
    ARTIFACT_CONFLICT, INBOX_LIMIT, MAX_ARTIFACT_BYTES, MAX_ARTIFACT_ID_CHARS,
    MAX_ARTIFACT_NAME_CHARS, MAX_ARTIFACTS_PER_TASK, MAX_MIME_CHARS, MAX_TASK_RESULT_CHARS,
    MAX_TRANSITION_ATTEMPTS, TaskError, Tasks, check_id, result_hash,
};
use crate::auth::{AgentIdentity, hex};
use crate::model::{TaskId, TaskOutcome, TaskStatus, is_hyphenated_uuid};
use crate::store::{
    ArtifactInsertOutcome, ArtifactRecord, ChatLinkRecord, ClaimAttempt, ClaimResult, TaskRecord,
};
use relay_protocol::text::utf16_len;

/// A result the chat submits.
#[derive(Debug, Clone)]
pub struct SubmitRequest<'a> {
    /// The link.
    pub chat_link_id: &'a str,
    /// The task.
    pub task_id: &'a str,
    /// The claim id `claim` returned.
    pub claim_id: &'a str,
    /// `completed` or `failed` (not yet validated).
    pub status: &'a str,
    /// The answer, or why it failed.
    pub result: &'a str,
}

/// An artifact the chat uploads.
#[derive(Debug, Clone)]
pub struct UploadRequest<'a> {
    /// The link.
    pub chat_link_id: &'a str,
    /// The task.
    pub task_id: &'a str,
    /// The claim id `claim` returned.
    pub claim_id: &'a str,
    /// The chat's stable id for this file; a retry reuses it.
    pub artifact_id: &'a str,
    /// File name.
    pub name: &'a str,
    /// Media type.
    pub mime: &'a str,
    /// The content (text).
    pub content: &'a str,
}

/// The link `chat_link_id` if the agent's project owns it.
async fn agent_link(
    tasks: &Tasks,
    agent: &AgentIdentity,
    chat_link_id: &str,
) -> Result<ChatLinkRecord, TaskError> {
    check_id("chat_link_id", chat_link_id)?;
    match tasks.store.chat_link(chat_link_id).await? {
        Some(link) if link.project_id == agent.project_id => Ok(link),
        _ => Err(TaskError::LinkNotFound),
    }
}

/// A task id the chat sent; one that is not even well formed is, as the tools promise, a task
/// not found on this chat link (the same answer as another link's task).
fn parse_task_id(text: &str) -> Result<TaskId, TaskError> {
    text.parse()
        .map_err(|_: relay_protocol::InvalidInput| TaskError::TaskNotFound)
}

/// The task `task_id` if it belongs to `link`; any other task reads as not found.
async fn link_task(
    tasks: &Tasks,
    link: &ChatLinkRecord,
    task_id: TaskId,
) -> Result<TaskRecord, TaskError> {
    match tasks.store.task(task_id).await? {
        Some(task) if task.chat_link_id == link.id => Ok(task),
        _ => Err(TaskError::TaskNotFound),
    }
}

/// The link's open tasks (queued or claimed), oldest first, at most [`INBOX_LIMIT`].
pub async fn list_tasks(
    tasks: &Tasks,
    agent: &AgentIdentity,
    chat_link_id: &str,
) -> Result<Inbox, TaskError> {
    let link = agent_link(tasks, agent, chat_link_id).await?;
    let mut open = super::sweep::open_tasks(tasks, &link.id, INBOX_LIMIT + 1).await?;
    let more = open.len() > INBOX_LIMIT;
    open.truncate(INBOX_LIMIT);
    Ok(Inbox {
        tasks: open.iter().map(InboxItem::of).collect(),
        more,
    })
}

/// One task of the link, in full.
pub async fn get_task(
    tasks: &Tasks,
    agent: &AgentIdentity,
    chat_link_id: &str,
    task_id: &str,
) -> Result<TaskView, TaskError> {
    let link = agent_link(tasks, agent, chat_link_id).await?;
    let task_id = parse_task_id(task_id)?;
    sweep(tasks).await?;
    Ok(TaskView::of(&link_task(tasks, &link, task_id).await?))
}

fn claim_view(task: &TaskRecord, replayed: bool) -> Result<ClaimView, TaskError> {
    let claim_id = task.claim_id.clone().ok_or_else(|| {
        TaskError::Store(
            crate::store::Damage::of("claim_id", "a claimed task must have one")
                .in_row("chat_tasks", &task.id.to_string())
                .into(),
        )
    })?;
    Ok(ClaimView {
        task_id: task.id,
        claim_id,
        lease_until: task.lease_until,
        replayed,
        goal: task.goal.clone(),
    })
}

/// Claims task `task_id` for the link: a queued task gets a new claim; a task this link
/// already holds gives its claim back (`replayed`); anything else is refused, and a task of
/// another link (or none) gets [`super::NOT_CLAIMABLE`].
pub async fn claim_task(
    tasks: &Tasks,
    agent: &AgentIdentity,
    chat_link_id: &str,
    task_id: &str,
) -> Result<ClaimView, TaskError> {
    let link = agent_link(tasks, agent, chat_link_id).await?;
    let task_id = parse_task_id(task_id)?;
    sweep_for_claim(tasks).await?;
    let now = tasks.clock.now();
    let attempt = ClaimAttempt {
        task_id,
        chat_link_id: link.id.clone(),
        claim_id: uuid::Uuid::new_v4().to_string(),
        lease_until: (!tasks.config.lease.is_zero())
            .then(|| now.saturating_add(tasks.config.lease)),
        now,
    };
    #[cfg(feature = "naive-claim")]
    if tasks.config.naive_claim {
        return naive_claim(tasks, attempt).await;
    }
    let mut stored = match tasks.store.claim_task_or_current(attempt.clone()).await? {
        ClaimResult::Claimed(claimed) => {
            tracing::info!(task_id = %task_id, chat_link_id = %link.id, "task claimed");
            super::inbox_changed(tasks, &link.id);
            return claim_view(&claimed, false);
        }
        ClaimResult::NotClaimed(stored) => stored,
    };
    // The one conditional write did not match: decide on what is stored. Usually a replay to
    // the link holding the claim, or a refusal; a write only if the task changed in between
    // (a lapsed lease: the claim's sweep is throttled, so this is where a lapsed lease is
    // taken over at once), and that write is conditional too. A `queued` answer next to a
    // write that matched nothing was read before a concurrent claim committed: read again.
    if stored
        .as_ref()
        .is_some_and(|t| t.status == TaskStatus::Queued)
    {
        stored = tasks.store.task(task_id).await?;
    }
    for attempt_number in 0..MAX_TRANSITION_ATTEMPTS {
        if attempt_number > 0 {
            stored = tasks.store.task(task_id).await?;
        }
        let Some(current) = stored.take() else {
            return Err(Refusal::NotClaimable.into());
        };
        let event = TaskEvent::Claim {
            chat_link_id: &link.id,
            claim_id: &attempt.claim_id,
            lease_until: attempt.lease_until,
        };
        match transition(&current, event, tasks.clock.now()) {
            TaskDecision::Replay => return claim_view(&current, true),
            TaskDecision::Refuse(refusal) => return Err(refusal.into()),
            TaskDecision::Unchanged => return Err(Refusal::NotClaimable.into()),
            TaskDecision::Write(next) => {
                if tasks.store.update_task(&current, &next).await? {
                    // A lapsed lease taken over: a new claim, as the conditional write's.
                    tracing::info!(task_id = %task_id, chat_link_id = %link.id, "task claimed");
                    super::inbox_changed(tasks, &link.id);
                    return claim_view(&next, false);
                }
            }
        }
    }
    Err(TaskError::Contended)
}

/// The read-then-write claim the conditional write exists to replace: reads `queued`, pauses
/// [`NAIVE_CLAIM_GAP`], then writes without a condition. Only behind
/// `ServiceConfig::naive_claim`, so the race test can show that it catches double claims.
#[cfg(feature = "naive-claim")]
async fn naive_claim(tasks: &Tasks, attempt: ClaimAttempt) -> Result<ClaimView, TaskError> {
    let Some(current) = tasks.store.task(attempt.task_id).await? else {
        return Err(Refusal::NotClaimable.into());
    };
    let event = TaskEvent::Claim {
        chat_link_id: &attempt.chat_link_id,
        claim_id: &attempt.claim_id,
        lease_until: attempt.lease_until,
    };
    match transition(&current, event, attempt.now) {
        TaskDecision::Replay => claim_view(&current, true),
        TaskDecision::Refuse(refusal) => Err(refusal.into()),
        TaskDecision::Unchanged => Err(Refusal::NotClaimable.into()),
        TaskDecision::Write(next) => {
            tokio::time::sleep(super::NAIVE_CLAIM_GAP).await;
            tasks.store.claim_task_unconditionally(attempt).await?;
            claim_view(&next, false)
        }
    }
}

/// Records the chat's result under its claim; an identical repeat is acknowledged as a replay.
pub async fn submit_result(
    tasks: &Tasks,
    agent: &AgentIdentity,
    request: SubmitRequest<'_>,
) -> Result<SubmitAck, TaskError> {
    let outcome: TaskOutcome = request
        .status
        .parse()
        .map_err(|e: relay_protocol::InvalidInput| TaskError::Invalid(e.0))?;
    let chars = utf16_len(request.result);
    if chars > MAX_TASK_RESULT_CHARS {
        return Err(TaskError::Invalid(format!(
            "result is {chars} characters long, at most {MAX_TASK_RESULT_CHARS} are allowed: put long output in an artifact (upload_linked_chat_artifact) and submit a summary"
        )));
    }
    check_claim_id(request.claim_id)?;
    let link = agent_link(tasks, agent, request.chat_link_id).await?;
    let task_id = parse_task_id(request.task_id)?;
    sweep(tasks).await?;
    let hash = result_hash(TaskStatus::from(outcome), request.result);
    let mut current = link_task(tasks, &link, task_id).await?;
    for _ in 0..MAX_TRANSITION_ATTEMPTS {
        let event = TaskEvent::Submit {
            claim_id: request.claim_id,
            outcome,
            result: request.result,
            result_hash: &hash,
        };
        match transition(&current, event, tasks.clock.now()) {
            TaskDecision::Replay => {
                return Ok(SubmitAck {
                    ok: true,
                    replayed: true,
                });
            }
            TaskDecision::Refuse(refusal) => return Err(refusal.into()),
            TaskDecision::Unchanged => return Err(TaskError::Contended),
            TaskDecision::Write(next) => {
                if tasks.store.update_task(&current, &next).await? {
                    tracing::info!(task_id = %task_id, status = %next.status, "task finished");
                    super::inbox_changed(tasks, &link.id);
                    return Ok(SubmitAck {
                        ok: true,
                        replayed: false,
                    });
                }
                current = link_task(tasks, &link, task_id).await?;
            }
        }
    }
    Err(TaskError::Contended)
}

fn check_claim_id(claim_id: &str) -> Result<(), TaskError> {
    if is_hyphenated_uuid(claim_id) {
        Ok(())
    } else {
        Err(TaskError::Invalid(
            "claim_id is not a UUID: pass the claim_id that claim_linked_chat_task returned".into(),
        ))
    }
}

fn check_upload(request: &UploadRequest<'_>) -> Result<(), TaskError> {
    let id_ok = (1..=MAX_ARTIFACT_ID_CHARS).contains(&utf16_len(request.artifact_id))
        && request
            .artifact_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b));
    if !id_ok {
        return Err(TaskError::Invalid(format!(
            "artifact_id must be 1 to {MAX_ARTIFACT_ID_CHARS} characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'"
        )));
    }
    let name_chars = utf16_len(request.name);
    if request.name.trim().is_empty()
        || name_chars > MAX_ARTIFACT_NAME_CHARS
        || request.name.chars().any(char::is_control)
    {
        return Err(TaskError::Invalid(format!(
            "name must be 1 to {MAX_ARTIFACT_NAME_CHARS} characters, not blank, without control characters"
        )));
    }
    if request.mime.len() > MAX_MIME_CHARS {
        return Err(TaskError::Invalid(format!(
            "mime must be a media type like text/markdown, at most {MAX_MIME_CHARS} characters"
        )));
    }
    if let Err(error) = media_type::check(request.mime) {
        return Err(TaskError::Invalid(format!(
            "mime must be a media type like text/markdown: {error}"
        )));
    }
    if request.content.len() > MAX_ARTIFACT_BYTES {
        return Err(TaskError::Invalid(format!(
            "content is {} bytes, at most {MAX_ARTIFACT_BYTES} are allowed: split it into several artifacts",
            request.content.len()
        )));
    }
    Ok(())
}

/// Stores an artifact under the chat's live claim. Retrying with the same `artifact_id` and
/// content is a no-op (`replayed`); other content under a used id is refused.
pub async fn upload_artifact(
    tasks: &Tasks,
    agent: &AgentIdentity,
    request: UploadRequest<'_>,
) -> Result<UploadAck, TaskError> {
    check_upload(&request)?;
    check_claim_id(request.claim_id)?;
    let link = agent_link(tasks, agent, request.chat_link_id).await?;
    let task_id = parse_task_id(request.task_id)?;
    sweep(tasks).await?;
    link_task(tasks, &link, task_id).await?;
    let sha256 = hex(&Sha256::digest(request.content.as_bytes()));
    let size_bytes = u64::try_from(request.content.len()).unwrap_or(u64::MAX);
    let artifact = ArtifactRecord {
        task_id,
        artifact_id: request.artifact_id.to_owned(),
        claim_id: request.claim_id.to_owned(),
        name: request.name.to_owned(),
        mime: request.mime.to_owned(),
        content: request.content.to_owned(),
        size_bytes,
        sha256: sha256.clone(),
        created_at: tasks.clock.now(),
    };
    let ack = |replayed| UploadAck {
        ok: true,
        replayed,
        sha256: sha256.clone(),
        size_bytes,
    };
    match tasks
        .store
        .insert_artifact(artifact, MAX_ARTIFACTS_PER_TASK)
        .await?
    {
        ArtifactInsertOutcome::Stored => Ok(ack(false)),
        ArtifactInsertOutcome::Existing(existing) => {
            // Only the holder of the task's claim may learn anything about what an id holds:
            // a replay passes the same fence as a first upload, so a stale or guessed claim id
            // cannot probe stored content.
            let current = link_task(tasks, &link, task_id).await?;
            if current.claim_id.as_deref() != Some(request.claim_id) {
                fence(&current, request.claim_id, tasks.clock.now())?;
                return Err(Refusal::StaleClaim.into());
            }
            if existing.sha256 == sha256
                && existing.name == request.name
                && existing.mime == request.mime
            {
                Ok(ack(true))
            } else {
                Err(TaskError::Conflict(ARTIFACT_CONFLICT.to_owned()))
            }
        }
        ArtifactInsertOutcome::Refused => {
            let current = link_task(tasks, &link, task_id).await?;
            fence(&current, request.claim_id, tasks.clock.now())?;
            Err(TaskError::Invalid(format!(
                "the task already has {MAX_ARTIFACTS_PER_TASK} artifacts, the most allowed: put further files together in one"
            )))
        }
    }
}
