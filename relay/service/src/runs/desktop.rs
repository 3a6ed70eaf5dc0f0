//! What a desktop does to a run: start it, hand it back unrun, poll its control, report on it,
//! complete it. Each is decided by [`transition`](super::transition) on the desktop's own
//! command only.

use relay_protocol::{
    CommandId, CompleteRequest, CompleteResponse, ControlResponse, ReleasedRequest,
    ReleasedResponse, ReportResponse, RunReport, RunStatus, ServiceOutcome, StartedRequest,
    StartedResponse, check_execution_id,
};

use super::{
    Decision, RunError, RunEvent, Runs, apply, cancel_cause_of, canonical_json, sha256_hex,
};
use crate::auth::DesktopIdentity;
use crate::held::REVOKED_WHILE_WAITING;
use crate::presence::heard_from;
use crate::store::notify::Topic;
use crate::store::{CommandRecord, StoreError};

/// Why a desktop request failed.
#[derive(Debug, thiserror::Error)]
pub enum DesktopError {
    /// Malformed request (400).
    #[error("{0}")]
    BadRequest(String),
    /// Not this desktop's (403).
    #[error("{0}")]
    Forbidden(String),
    /// Unknown, or another owner's (404).
    #[error("{0}")]
    NotFound(String),
    /// Contradicts what is recorded (409).
    #[error("{message}")]
    Conflict {
        /// What contradicts what.
        message: String,
        /// The command's status.
        status: RunStatus,
    },
    /// The token was revoked while the request was held (401).
    #[error("{REVOKED_WHILE_WAITING}")]
    Revoked,
    /// Storage failed or writers kept colliding (500 / 503).
    #[error(transparent)]
    Run(RunError),
}

impl From<StoreError> for DesktopError {
    fn from(error: StoreError) -> Self {
        DesktopError::Run(RunError::Store(error))
    }
}

impl From<RunError> for DesktopError {
    fn from(error: RunError) -> Self {
        match error {
            RunError::NotFound => DesktopError::NotFound(command_not_found()),
            RunError::Invalid(message) => DesktopError::BadRequest(message),
            // The edge answers these as it answers the run functions' own refusals.
            error @ (RunError::IdempotencyConflict
            | RunError::Contended
            | RunError::Quota(_)
            | RunError::Revoked
            | RunError::Store(_)) => DesktopError::Run(error),
        }
    }
}

fn command_not_found() -> String {
    "command not found among this desktop's projects".to_owned()
}

/// Parses a command id from a desktop URL; runs before any state is read.
pub fn parse_command_id(text: &str) -> Result<CommandId, DesktopError> {
    text.parse()
        .map_err(|e: relay_protocol::InvalidInput| DesktopError::BadRequest(e.0))
}

/// Command `id` if it belongs to one of `desktop`'s projects.
async fn desktop_command(
    runs: &Runs,
    desktop: &DesktopIdentity,
    id: CommandId,
) -> Result<CommandRecord, DesktopError> {
    let command = runs
        .store
        .command(id)
        .await?
        .ok_or_else(|| DesktopError::NotFound(command_not_found()))?;
    let project = runs
        .store
        .project_of_owner(&desktop.owner_id, &command.project_id)
        .await?;
    match project {
        Some(project) if desktop.reaches(&project) => Ok(command),
        _ => Err(DesktopError::NotFound(command_not_found())),
    }
}

/// The desktop started command `id`.
pub async fn command_started(
    runs: &Runs,
    desktop: &DesktopIdentity,
    id: CommandId,
    request: &StartedRequest,
) -> Result<StartedResponse, DesktopError> {
    check_execution_id(&request.execution_id).map_err(|e| DesktopError::BadRequest(e.0))?;
    if request.resumed.is_some_and(|resumed| resumed.count == 0) {
        return Err(DesktopError::BadRequest(
            "resumed.count must be at least 1".to_owned(),
        ));
    }
    let command = desktop_command(runs, desktop, id).await?;
    heard_from(&runs.presence, &command.project_id, None).await;
    let event = RunEvent::Started {
        execution_id: &request.execution_id,
        token_cap: request.token_cap,
        resumed: request.resumed,
    };
    let (command, decision) = apply(runs, command, event).await?;
    let started = |replayed| StartedResponse {
        ok: true,
        replayed,
        cancel_requested: command.cancel_requested,
        cancel_cause: cancel_cause_of(&command),
    };
    match decision {
        Decision::Write(_) => {
            if let Some(resumed) = request.resumed {
                tracing::info!(command_id = %id, count = resumed.count, "the desktop resumed a run from its journal");
            }
            Ok(started(false))
        }
        Decision::Replay => Ok(started(true)),
        Decision::Conflict(message) => Err(DesktopError::Conflict {
            message,
            status: command.status,
        }),
        Decision::AlreadyFinished(status) => Err(DesktopError::Conflict {
            message: format!("command already finished as {status}; do not run it"),
            status,
        }),
    }
}

/// The desktop hands back command `id`, which it started under `request`'s execution and will
/// not run under it: back to the queue (or cancelled, if the agent asked meanwhile).
pub async fn command_released(
    runs: &Runs,
    desktop: &DesktopIdentity,
    id: CommandId,
    request: &ReleasedRequest,
) -> Result<ReleasedResponse, DesktopError> {
    check_execution_id(&request.execution_id).map_err(|e| DesktopError::BadRequest(e.0))?;
    let command = desktop_command(runs, desktop, id).await?;
    heard_from(&runs.presence, &command.project_id, None).await;
    let event = RunEvent::Released {
        execution_id: &request.execution_id,
    };
    let (command, decision) = apply(runs, command, event).await?;
    match decision {
        Decision::Write(_) => {
            tracing::info!(command_id = %id, status = %command.status, "the desktop released a run it had not begun");
            if command.status == RunStatus::Queued {
                // Back in the queue: a held sync of its project hands it out again at once.
                runs.notifier
                    .notify(&Topic::Project(command.project_id.clone()));
            }
            Ok(ReleasedResponse {
                ok: true,
                status: command.status,
                replayed: false,
            })
        }
        Decision::Replay | Decision::AlreadyFinished(_) => Ok(ReleasedResponse {
            ok: true,
            status: command.status,
            replayed: true,
        }),
        Decision::Conflict(message) => Err(DesktopError::Conflict {
            message,
            status: command.status,
        }),
    }
}

/// The cancel flag of command `id`; also the desktop's heartbeat for a running command.
pub async fn command_control(
    runs: &Runs,
    desktop: &DesktopIdentity,
    id: CommandId,
) -> Result<ControlResponse, DesktopError> {
    let command = desktop_command(runs, desktop, id).await?;
    heard_from(&runs.presence, &command.project_id, None).await;
    if command.status == RunStatus::Running {
        runs.store.touch_running(id, runs.clock.now()).await?;
    }
    Ok(ControlResponse {
        // A run the service has given up on (cancelled, failed as silent) should stop too.
        cancel_requested: command.cancel_requested
            || matches!(command.status, RunStatus::Cancelled | RunStatus::Failed),
        cancel_cause: cancel_cause_of(&command).or(command.end_cause),
    })
}

/// Records the outcome of command `id`; an identical repeat is acknowledged as a replay.
pub async fn command_completed(
    runs: &Runs,
    desktop: &DesktopIdentity,
    id: CommandId,
    completion: &CompleteRequest,
) -> Result<CompleteResponse, DesktopError> {
    completion
        .validate()
        .map_err(|e| DesktopError::BadRequest(e.0))?;
    let command = desktop_command(runs, desktop, id).await?;
    heard_from(&runs.presence, &command.project_id, None).await;
    let completion_value = serde_json::to_value(completion)
        .map_err(|e| DesktopError::BadRequest(format!("completion cannot be encoded: {e}")))?;
    let completion_hash = sha256_hex(&canonical_json(&completion_value));
    let event = RunEvent::Completed {
        completion,
        completion_hash: &completion_hash,
    };
    let (command, decision) = apply(runs, command, event).await?;
    match decision {
        Decision::Write(_) => {
            tracing::info!(command_id = %id, status = %command.status, "run finished");
            Ok(CompleteResponse {
                ok: true,
                replayed: false,
                already_finished: None,
            })
        }
        Decision::Replay => Ok(CompleteResponse {
            ok: true,
            replayed: true,
            already_finished: None,
        }),
        // The service failed it for silence (no desktop completion is recorded): one final
        // word, the service's, which the desktop's history takes over.
        Decision::Conflict(_)
            if command.status == RunStatus::Failed && command.completion_hash.is_none() =>
        {
            tracing::warn!(command_id = %id, "a completion arrived after the run was failed for silence; the failure stands");
            Ok(CompleteResponse {
                ok: true,
                replayed: false,
                already_finished: Some(ServiceOutcome {
                    status: command.status,
                    error: command.error.clone(),
                    cause: command.end_cause,
                }),
            })
        }
        Decision::Conflict(message) => Err(DesktopError::Conflict {
            message,
            status: command.status,
        }),
        Decision::AlreadyFinished(status) => Err(DesktopError::Conflict {
            message: format!("command already finished as {status}"),
            status,
        }),
    }
}

/// Records the desktop's report on command `id`, if it runs it under the reported execution.
pub async fn record_report(
    runs: &Runs,
    desktop: &DesktopIdentity,
    id: CommandId,
    report: &RunReport,
) -> Result<ReportResponse, DesktopError> {
    report
        .validate()
        .map_err(|e| DesktopError::BadRequest(e.0))?;
    let command = desktop_command(runs, desktop, id).await?;
    heard_from(&runs.presence, &command.project_id, None).await;
    let text = serde_json::to_string(report)
        .map_err(|e| DesktopError::BadRequest(format!("the report cannot be encoded: {e}")))?;
    let recorded = runs
        .store
        .record_run_report(id, &report.execution_id, &text, runs.clock.now())
        .await?;
    if recorded {
        // A waiting get_graph_run (or a task's watcher) hears of it at once.
        runs.notifier.notify(&Topic::Run(id));
    }
    Ok(ReportResponse {
        recorded,
        cancel_requested: command.cancel_requested,
        cancel_cause: cancel_cause_of(&command),
    })
}
