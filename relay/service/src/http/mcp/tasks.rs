//! MCP tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663) over graph runs.
//!
//! A task *is* a run: `run_graph_session` called by a client that declared the extension
//! answers a flat `CreateTaskResult` whose `taskId` is the run's command id, and `tasks/get`
//! and `tasks/cancel` read and cancel that run through the same functions as `get_graph_run`
//! and `cancel_graph_run`. So tasks need no state of their own: they survive a restart and are
//! the same on every replica, and a task of another agent is as unknown as a missing one.
//!
//! Status mapping: `queued` and `running` are `working`; `completed` is `completed` with the
//! `get_graph_run` answer inlined as the result; a run that `failed` ran and reported an error,
//! so it is `completed` with `isError: true` (SEP-2663 keeps `failed` for protocol errors);
//! `cancelled` is `cancelled`.

use std::time::Duration;

use rmcp::ErrorData;
use rmcp::model::{CallToolResult, DetailedTask, JsonObject, Task, TaskPayload, TaskStatus};
use serde_json::Value;

use crate::auth::{AgentIdentity, Scope};
use crate::http::AppState;
use crate::runs::{self, RunError, RunRequest, RunView};
use relay_protocol::RunStatus;

/// How long a task stays readable with `tasks/get`, as `ttlMs` says: runs are kept in the
/// store (none is purged today), so this is a floor the service can promise, not a deadline.
pub const TASK_TTL: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// The refusal for a token without the scope a tasks method needs.
pub(super) fn missing_scope(
    agent: &AgentIdentity,
    scope: Scope,
    method: &str,
) -> Option<ErrorData> {
    (!agent.has_scope(scope)).then(|| {
        ErrorData::invalid_request(
            format!(
                "This connection's token lacks the {scope} scope that {method} needs: ask the owner for a token with that scope.",
                scope = scope.as_str()
            ),
            None,
        )
    })
}

/// Queues the run a `run_graph_session` task stands for and reads it back, so the task is in
/// the store before its id is answered (`tasks/get` right after resolves).
pub(super) async fn create(
    app: &AppState,
    agent: &AgentIdentity,
    request: RunRequest,
) -> Result<Task, RunError> {
    let ticket = runs::queue_run(&app.runs, agent, request).await?;
    let view = runs::get_run(&app.runs, agent, &ticket.command_id.to_string()).await?;
    Ok(task_of(app, &view))
}

/// The task's base fields for `view`.
pub(super) fn task_of(app: &AppState, view: &RunView) -> Task {
    let status = match view.status {
        RunStatus::Queued | RunStatus::Running => TaskStatus::Working,
        RunStatus::Completed | RunStatus::Failed => TaskStatus::Completed,
        RunStatus::Cancelled => TaskStatus::Cancelled,
    };
    let mut task = Task::new(
        view.command_id.to_string(),
        status,
        view.created_at.to_rfc3339(),
        view.updated_at.to_rfc3339(),
    )
    .with_ttl_ms(millis(TASK_TTL))
    .with_status_message(status_message(view));
    if !view.status.is_terminal() {
        // As often as the agent is told to look: seconds when the desktop long-polls.
        let poll = view
            .poll_after_seconds
            .filter(|seconds| *seconds > 0)
            .map_or(app.config.poll_hint, Duration::from_secs);
        task = task.with_poll_interval_ms(millis(poll).max(1));
    }
    task
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn status_message(view: &RunView) -> String {
    match view.status {
        RunStatus::Queued if view.cancel_requested => "queued; cancel requested".to_owned(),
        RunStatus::Queued => {
            "queued: waiting for the owner's desktop to pick the run up".to_owned()
        }
        RunStatus::Running if view.cancel_requested => {
            "running; cancel requested, the desktop stops it at its next control poll".to_owned()
        }
        RunStatus::Running => "running on the owner's desktop".to_owned(),
        RunStatus::Completed => "the graph run completed".to_owned(),
        RunStatus::Failed => match &view.error {
            Some(error) => format!("the graph run failed: {error}"),
            None => "the graph run failed".to_owned(),
        },
        RunStatus::Cancelled => match view.end_cause {
            Some(cause) => format!("the graph run was cancelled: {}", cause.describe()),
            None => "the graph run was cancelled".to_owned(),
        },
    }
}

/// The task with its payload: the `get_graph_run` answer inlined once the run has ended.
pub(super) fn detailed(app: &AppState, view: &RunView, result: CallToolResult) -> DetailedTask {
    let task = task_of(app, view);
    let payload = match task.status {
        TaskStatus::Completed => TaskPayload::Completed {
            result: inlined(result),
        },
        TaskStatus::Cancelled => TaskPayload::Cancelled,
        _ => TaskPayload::Working,
    };
    DetailedTask::new(task, payload)
}

/// A tool result as the object a completed task inlines: `content[]`, `structuredContent`,
/// `isError`, without the `resultType` of a top-level answer.
fn inlined(mut result: CallToolResult) -> JsonObject {
    result.result_type = None;
    match serde_json::to_value(result) {
        Ok(Value::Object(object)) => object,
        _ => JsonObject::new(),
    }
}
