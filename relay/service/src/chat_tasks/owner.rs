//! What the owner does: link chats to projects, assign tasks, watch them, cancel them. Used by
//! the owner's HTTP API (owner token) and by `relay admin` (the operator, who may act on any
//! owner's links).

use super::machine::{TaskDecision, TaskEvent, transition};
use super::sweep::sweep;
use super::view::{
    ArtifactContent, ArtifactMeta, AssignedTask, CancelledTask, ChatLinkView, OwnerTaskDetail,
    OwnerTaskList, OwnerTaskView,
};
use super::{
    MAX_GOAL_CHARS, MAX_TRANSITION_ATTEMPTS, OWNER_LIST_LIMIT, TASK_KEY_CHARS, TASK_KEY_CONFLICT,
    TASK_TTL, TaskError, Tasks, check_chars, check_id,
};
use crate::auth::OwnerIdentity;
use crate::model::{HostKind, TaskId};
use crate::store::notify::Topic;
use crate::store::{ChatLinkRecord, TaskInsertOutcome, TaskRecord};

/// On whose behalf an owner action runs.
#[derive(Debug, Clone, Copy)]
pub enum Acting<'a> {
    /// The operator at the command line: any owner's links.
    Operator,
    /// An owner through the API: only their own projects' links.
    Owner(&'a OwnerIdentity),
}

/// A task the owner assigns.
#[derive(Debug, Clone)]
pub struct AssignRequest<'a> {
    /// The link to hand it to.
    pub chat_link_id: &'a str,
    /// What to do.
    pub goal: &'a str,
    /// The same key for a repeat (double click, retry) returns the same task.
    pub idempotency_key: &'a str,
}

async fn may_use_project(
    tasks: &Tasks,
    acting: Acting<'_>,
    project_id: &str,
) -> Result<bool, TaskError> {
    let Acting::Owner(owner) = acting else {
        return Ok(tasks.store.project(project_id).await?.is_some());
    };
    let project = tasks
        .store
        .project_of_owner(&owner.owner_id, project_id)
        .await?;
    Ok(project.is_some())
}

/// The link `chat_link_id` if the one acting may manage it.
async fn owned_link(
    tasks: &Tasks,
    acting: Acting<'_>,
    chat_link_id: &str,
) -> Result<ChatLinkRecord, TaskError> {
    check_id("chat_link_id", chat_link_id)?;
    let link = tasks
        .store
        .chat_link(chat_link_id)
        .await?
        .ok_or(TaskError::LinkNotFound)?;
    if may_use_project(tasks, acting, &link.project_id).await? {
        Ok(link)
    } else {
        Err(TaskError::LinkNotFound)
    }
}

/// The task `task_id` and its link, if the one acting may manage them.
async fn owned_task(
    tasks: &Tasks,
    acting: Acting<'_>,
    task_id: &str,
) -> Result<(ChatLinkRecord, TaskRecord), TaskError> {
    let task_id: TaskId = task_id
        .parse()
        .map_err(|e: relay_protocol::InvalidInput| TaskError::Invalid(e.0))?;
    let task = tasks
        .store
        .task(task_id)
        .await?
        .ok_or(TaskError::TaskNotFound)?;
    let link = owned_link(tasks, acting, &task.chat_link_id)
        .await
        .map_err(|error| match error {
            TaskError::LinkNotFound => TaskError::TaskNotFound,
            other => other,
        })?;
    Ok((link, task))
}

/// Links a chat on `host` to `project_id`.
pub async fn create_link(
    tasks: &Tasks,
    acting: Acting<'_>,
    project_id: &str,
    host: &str,
    event_subscription: bool,
) -> Result<ChatLinkView, TaskError> {
    let host: HostKind = host
        .parse()
        .map_err(|e: relay_protocol::InvalidInput| TaskError::Invalid(e.0))?;
    check_id("project_id", project_id)?;
    if !may_use_project(tasks, acting, project_id).await? {
        return Err(TaskError::Invalid(format!(
            "no project with id `{project_id}` for this owner: create one with `relay admin project create NAME`"
        )));
    }
    let link = ChatLinkRecord {
        id: uuid::Uuid::new_v4().to_string(),
        project_id: project_id.to_owned(),
        host,
        event_subscription,
        created_at: tasks.clock.now(),
    };
    tasks.store.insert_chat_link(link.clone()).await?;
    tasks
        .notifier
        .notify(&Topic::ProjectLinks(link.project_id.clone()));
    tracing::info!(chat_link_id = %link.id, %host, "chat link created");
    Ok(ChatLinkView::of(&link))
}

/// Records whether the link's host has an event subscription (it is then told of new tasks).
pub async fn set_event_subscription(
    tasks: &Tasks,
    acting: Acting<'_>,
    chat_link_id: &str,
    active: bool,
) -> Result<ChatLinkView, TaskError> {
    let mut link = owned_link(tasks, acting, chat_link_id).await?;
    if !tasks.store.set_event_subscription(&link.id, active).await? {
        return Err(TaskError::LinkNotFound);
    }
    link.event_subscription = active;
    Ok(ChatLinkView::of(&link))
}

/// Assigns a task to a link, or returns the task its idempotency key already names.
pub async fn assign_task(
    tasks: &Tasks,
    acting: Acting<'_>,
    request: AssignRequest<'_>,
) -> Result<AssignedTask, TaskError> {
    check_chars("goal", request.goal, 1..=MAX_GOAL_CHARS, "")?;
    check_chars(
        "idempotency_key",
        request.idempotency_key,
        TASK_KEY_CHARS,
        ": send the same key only to retry the same assignment",
    )?;
    let link = owned_link(tasks, acting, request.chat_link_id).await?;
    sweep(tasks).await?;
    let task = TaskRecord::queued(
        link.id.clone(),
        request.goal.to_owned(),
        request.idempotency_key.to_owned(),
        tasks.clock.now(),
        TASK_TTL,
    );
    let (task, replayed) = match tasks.store.insert_task(task).await? {
        TaskInsertOutcome::Created(task) => {
            tracing::info!(task_id = %task.id, chat_link_id = %link.id, "task assigned");
            super::inbox_changed(tasks, &link.id);
            (task, false)
        }
        // The same key must mean the same goal, or one key could stand for two tasks.
        TaskInsertOutcome::Existing(existing) if existing.goal == request.goal => (existing, true),
        TaskInsertOutcome::Existing(_) => {
            return Err(TaskError::Conflict(TASK_KEY_CONFLICT.to_owned()));
        }
    };
    Ok(AssignedTask {
        task: OwnerTaskView::of(&task, link.host),
        replayed,
    })
}

/// The link's tasks, newest first, with their labels and the hint when the host is not told.
pub async fn list_tasks(
    tasks: &Tasks,
    acting: Acting<'_>,
    chat_link_id: &str,
) -> Result<OwnerTaskList, TaskError> {
    let link = owned_link(tasks, acting, chat_link_id).await?;
    sweep(tasks).await?;
    let listed = tasks.store.link_tasks(&link.id, OWNER_LIST_LIMIT).await?;
    Ok(OwnerTaskList::of(&link, &listed))
}

/// One task in full, with its artifacts' descriptions.
pub async fn task_detail(
    tasks: &Tasks,
    acting: Acting<'_>,
    task_id: &str,
) -> Result<OwnerTaskDetail, TaskError> {
    sweep(tasks).await?;
    let (link, task) = owned_task(tasks, acting, task_id).await?;
    let artifacts = tasks.store.artifacts(task.id).await?;
    Ok(OwnerTaskDetail {
        task: OwnerTaskView::of(&task, link.host),
        artifacts: artifacts.iter().map(ArtifactMeta::of).collect(),
    })
}

/// One artifact of a task, with its content.
pub async fn artifact(
    tasks: &Tasks,
    acting: Acting<'_>,
    task_id: &str,
    artifact_id: &str,
) -> Result<ArtifactContent, TaskError> {
    let (_, task) = owned_task(tasks, acting, task_id).await?;
    tasks
        .store
        .artifacts(task.id)
        .await?
        .into_iter()
        .find(|artifact| artifact.artifact_id == artifact_id)
        .map(|artifact| ArtifactContent {
            meta: ArtifactMeta::of(&artifact),
            content: artifact.content,
        })
        .ok_or(TaskError::ArtifactNotFound)
}

/// Cancels a task; a finished one is left as it is (the answer says so). A cancelled task
/// cannot be completed: the chat's submit is refused.
pub async fn cancel_task(
    tasks: &Tasks,
    acting: Acting<'_>,
    task_id: &str,
) -> Result<CancelledTask, TaskError> {
    sweep(tasks).await?;
    let (link, mut current) = owned_task(tasks, acting, task_id).await?;
    for _ in 0..MAX_TRANSITION_ATTEMPTS {
        let (task, already_finished) =
            match transition(&current, TaskEvent::Cancel, tasks.clock.now()) {
                TaskDecision::Write(next) => {
                    if !tasks.store.update_task(&current, &next).await? {
                        current = tasks
                            .store
                            .task(current.id)
                            .await?
                            .ok_or(TaskError::TaskNotFound)?;
                        continue;
                    }
                    tracing::info!(task_id = %next.id, "task cancelled");
                    super::inbox_changed(tasks, &link.id);
                    (*next, false)
                }
                TaskDecision::Replay | TaskDecision::Unchanged | TaskDecision::Refuse(_) => {
                    (current, true)
                }
            };
        return Ok(CancelledTask {
            task_id: task.id,
            status: task.status,
            status_label: task.status.label(link.host),
            cancelled: task.status == crate::model::TaskStatus::Cancelled,
            already_finished,
        });
    }
    Err(TaskError::Contended)
}
