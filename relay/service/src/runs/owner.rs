//! Runs as their project's owner sees them (the console and the owner API): every run of the
//! owner's projects, newest first and paged, one run in full, and cancel with the same
//! semantics as the agent's `cancel_graph_run`. A run of another owner's project answers as
//! missing.

use std::collections::HashMap;
use std::ops::RangeInclusive;

use serde::Serialize;
use serde_json::Value;

use super::Runs;
use super::{CancelOutcome, RunError, cancel_command, fail_if_silent};
use crate::store::{CommandQuery, CommandRecord, StoreError, TokenRecord};
use relay_protocol::clock::Timestamp;
use relay_protocol::{CommandId, DamagedCommand, EndCause, GraphSessionId, RunStatus};

/// How many runs one page may hold.
pub const RUN_PAGE_LIMITS: RangeInclusive<usize> = 1..=200;
/// How many runs a page holds unless asked otherwise.
pub const DEFAULT_RUN_PAGE: usize = 50;
/// How many characters of a result a list shows (the detail shows all of it).
pub const RESULT_PREVIEW_CHARS: usize = 200;

/// What a list of runs asks for.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Only runs in this status (`queued`, `running`, …).
    pub status: Option<String>,
    /// Only runs of this connection (agent token id).
    pub connection: Option<String>,
    /// The `next` cursor of the page before.
    pub before: Option<String>,
    /// Page size ([`RUN_PAGE_LIMITS`], default [`DEFAULT_RUN_PAGE`]).
    pub limit: Option<usize>,
}

/// One run in a list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OwnerRunSummary {
    /// The run's id.
    pub command_id: CommandId,
    /// Its project.
    pub project_id: String,
    /// The session it runs.
    pub graph_session_id: GraphSessionId,
    /// The session's slug when queued.
    pub slug: String,
    /// The connection (agent token) that queued it.
    pub connection_id: String,
    /// The connection's agent name.
    pub connection_name: String,
    /// Its status.
    pub status: RunStatus,
    /// Whether a cancel was requested.
    pub cancel_requested: bool,
    /// When it was queued.
    pub created_at: Timestamp,
    /// When the desktop started it.
    pub started_at: Option<Timestamp>,
    /// When it ended.
    pub finished_at: Option<Timestamp>,
    /// Tokens metered.
    pub total_tokens: Option<u64>,
    /// Cost reported.
    pub reported_cost: Option<f64>,
    /// The first [`RESULT_PREVIEW_CHARS`] characters of the result as JSON text.
    pub result_preview: Option<String>,
    /// True when the preview is shorter than the result.
    pub preview_cut: bool,
    /// True when the result was too large to post; the full result is on the desktop.
    pub result_truncated: bool,
    /// Why it failed or was cancelled.
    pub error: Option<String>,
    /// Why it ended when not by its graph alone (who cancelled it, a withdrawal, a stop).
    pub end_cause: Option<EndCause>,
    /// What a running run waits for, as its desktop last reported (`owner approval of
    /// fs.write`).
    pub waiting_for: Option<String>,
    /// Tokens a running run metered so far, as its desktop last reported.
    pub tokens_so_far: Option<u64>,
    /// How often its desktop resumed it from its journal after a restart, and when last
    /// (`null`: never).
    pub resumed: Option<super::ResumedView>,
}

/// One run in full.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OwnerRunDetail {
    /// What the list shows.
    #[serde(flatten)]
    pub summary: OwnerRunSummary,
    /// The graph's arguments.
    pub arguments: serde_json::Map<String, Value>,
    /// The whole result.
    pub result: Option<Value>,
    /// Last change.
    pub updated_at: Timestamp,
}

/// A page of runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunPage {
    /// Newest first.
    pub runs: Vec<OwnerRunSummary>,
    /// Pass as `before` for the next page; `null` on the last.
    pub next: Option<String>,
    /// Runs of this page whose stored rows cannot be read, each named with what is damaged.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub damaged: Vec<DamagedCommand>,
}

/// The names of the owner's agent tokens, by id.
pub async fn connection_names(
    runs: &Runs,
    owner_id: &str,
) -> Result<HashMap<String, String>, RunError> {
    Ok(runs
        .store
        .tokens_of_owner(owner_id)
        .await?
        .into_iter()
        .map(|t: TokenRecord| (t.id, t.agent_name.unwrap_or_default()))
        .collect())
}

fn summary(command: &CommandRecord, names: &HashMap<String, String>) -> OwnerRunSummary {
    let (waiting, progress) = crate::presence::reported(command);
    let (result_preview, preview_cut) = match &command.result {
        Some(result) => {
            let text = result.to_string();
            let cut = text.chars().count() > RESULT_PREVIEW_CHARS;
            (Some(text.chars().take(RESULT_PREVIEW_CHARS).collect()), cut)
        }
        None => (None, false),
    };
    OwnerRunSummary {
        command_id: command.id,
        project_id: command.project_id.clone(),
        graph_session_id: command.graph_session_id.clone(),
        slug: command.slug.clone(),
        connection_id: command.agent_id.clone(),
        connection_name: names.get(&command.agent_id).cloned().unwrap_or_default(),
        status: command.status,
        cancel_requested: command.cancel_requested,
        created_at: command.created_at,
        started_at: command.started_at,
        finished_at: command.finished_at,
        total_tokens: command.total_tokens,
        reported_cost: command.reported_cost,
        result_preview,
        preview_cut,
        result_truncated: command.result_truncated,
        error: command.error.clone(),
        end_cause: command.end_cause,
        waiting_for: waiting.map(|waiting| waiting.what),
        tokens_so_far: progress.map(|progress| progress.tokens_used),
        resumed: super::ResumedView::of(command),
    }
}

/// Whether `project_id` is one of the owner's projects.
pub async fn owns_project(runs: &Runs, owner_id: &str, project_id: &str) -> Result<bool, RunError> {
    Ok(runs
        .store
        .project_of_owner(owner_id, project_id)
        .await?
        .is_some())
}

fn cursor(command: &CommandRecord) -> String {
    format!("{}_{}", command.created_at.unix_millis(), command.id)
}

fn parse_cursor(text: &str) -> Result<(Timestamp, CommandId), RunError> {
    let invalid = || RunError::Invalid(format!("before `{text}` is not a cursor this list gave"));
    let (millis, id) = text.split_once('_').ok_or_else(invalid)?;
    let millis: i64 = millis.parse().map_err(|_| invalid())?;
    let id: CommandId = id.parse().map_err(|_| invalid())?;
    Ok((Timestamp::from_unix_millis(millis), id))
}

/// A page of the runs of `project_id`, newest first; another owner's project is not found.
pub async fn list_runs(
    runs: &Runs,
    owner_id: &str,
    project_id: &str,
    filter: RunFilter,
) -> Result<RunPage, RunError> {
    if !owns_project(runs, owner_id, project_id).await? {
        return Err(RunError::NotFound);
    }
    let limit = filter.limit.unwrap_or(DEFAULT_RUN_PAGE);
    if !RUN_PAGE_LIMITS.contains(&limit) {
        return Err(RunError::Invalid(format!(
            "limit must be {} to {}",
            RUN_PAGE_LIMITS.start(),
            RUN_PAGE_LIMITS.end()
        )));
    }
    let status = match filter.status.as_deref().filter(|s| !s.is_empty()) {
        Some(text) => Some(text.parse::<RunStatus>().map_err(|_| {
            RunError::Invalid(format!(
                "status `{text}` is none of queued, running, completed, failed, cancelled"
            ))
        })?),
        None => None,
    };
    let before = match filter.before.as_deref().filter(|s| !s.is_empty()) {
        Some(text) => Some(parse_cursor(text)?),
        None => None,
    };
    // One more than the page tells whether another page follows.
    let read = runs
        .store
        .project_commands(CommandQuery {
            project_id: project_id.to_owned(),
            status,
            agent_id: filter.connection.filter(|c| !c.is_empty()),
            before,
            limit: limit + 1,
        })
        .await?;
    let damaged = read
        .damaged
        .iter()
        .map(|damage| DamagedCommand {
            command_id: damage.id.clone(),
            error: super::damaged_run_message(damage),
        })
        .collect();
    let mut commands = read.rows;
    let next = (commands.len() > limit).then(|| cursor(&commands[limit - 1]));
    commands.truncate(limit);
    let names = connection_names(runs, owner_id).await?;
    Ok(RunPage {
        runs: commands.iter().map(|c| summary(c, &names)).collect(),
        next,
        damaged,
    })
}

/// The command `command_id` if it runs in one of the owner's projects.
async fn owned_command(
    runs: &Runs,
    owner_id: &str,
    command_id: &str,
) -> Result<CommandRecord, RunError> {
    let id: CommandId = command_id.parse().map_err(|_| RunError::NotFound)?;
    let command = runs.store.command(id).await?.ok_or(RunError::NotFound)?;
    if owns_project(runs, owner_id, &command.project_id).await? {
        Ok(command)
    } else {
        Err(RunError::NotFound)
    }
}

/// One run of the owner's, in full (failed first if its desktop went silent).
pub async fn run_detail(
    runs: &Runs,
    owner_id: &str,
    command_id: &str,
) -> Result<OwnerRunDetail, RunError> {
    let command = owned_command(runs, owner_id, command_id).await?;
    let command = fail_if_silent(runs, command).await?;
    let names = connection_names(runs, owner_id).await?;
    Ok(OwnerRunDetail {
        summary: summary(&command, &names),
        arguments: command.arguments.clone(),
        result: command.result.clone(),
        updated_at: command.updated_at,
    })
}

/// Cancels a run of the owner's: a queued run never starts, a running one is stopped at its
/// desktop's next control poll, a finished one stays as it is.
pub async fn cancel_run(
    runs: &Runs,
    owner_id: &str,
    command_id: &str,
) -> Result<CancelOutcome, RunError> {
    let command = match owned_command(runs, owner_id, command_id).await {
        Err(RunError::Store(StoreError::Corrupt(damage))) => {
            return cancel_damaged(runs, owner_id, damage).await;
        }
        read => read?,
    };
    cancel_command(runs, command, EndCause::OwnerCancelledConsole).await
}

/// What a damaged run that its owner cancelled says.
const CANCELLED_DAMAGED: &str =
    "Cancelled by its owner: the service's stored row of this run is damaged and cannot be read";

/// Cancels a run whose row cannot be read, without reading it: the owner's way out of a run
/// the desktop is never handed (its project's sync skips it).
async fn cancel_damaged(
    runs: &Runs,
    owner_id: &str,
    damage: Box<crate::store::Damage>,
) -> Result<CancelOutcome, RunError> {
    let id: CommandId = damage.id.parse().map_err(|_| RunError::NotFound)?;
    let now = runs.clock.now();
    let cancelled = runs
        .store
        .cancel_damaged_command(id, owner_id, CANCELLED_DAMAGED, now)
        .await?;
    if !cancelled {
        // Not the owner's, or ended already: the damage is what there is to say.
        return Err(RunError::Store(StoreError::Corrupt(damage)));
    }
    tracing::warn!(command_id = %id, "the owner cancelled a run whose stored row is damaged: {damage}");
    Ok(CancelOutcome {
        command_id: id,
        status: RunStatus::Cancelled,
        cancel_requested: true,
        already_finished: false,
        message: format!("{CANCELLED_DAMAGED}; nothing of it runs."),
    })
}
