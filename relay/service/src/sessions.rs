//! Shared graph sessions: the desktop's sync replaces a project's snapshot; agents list it.

use std::ops::RangeInclusive;

use serde::Serialize;

use crate::auth::{AgentIdentity, DesktopIdentity};
use crate::held::HeldKind;
use crate::runs::{DesktopError, RunError, Runs};
use crate::store::SnapshotWrite;
use crate::store::Store;
use crate::store::notify::{Subscription, Topic};
use relay_protocol::clock::Timestamp;
use relay_protocol::{
    CommandId, MAX_SERVED_PROJECTS, MAX_SYNC_ANSWER_BYTES, MAX_SYNC_COMMANDS, ProjectsResponse,
    QueuedCommand, ServedProject, SessionMeta, SyncRequest, SyncResponse, display_name,
};

/// Allowed `limit` of `list_graph_sessions`.
pub const LIST_LIMIT: RangeInclusive<i64> = 1..=50;
/// `limit` when the agent gives none.
pub const DEFAULT_LIST_LIMIT: i64 = 20;

/// What an agent sees of its project's shared sessions.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct SessionList {
    /// The project.
    pub project_id: String,
    /// Sessions the desktop's last sync uploaded.
    #[schemars(with = "Vec<SessionEntry>")]
    pub sessions: Vec<SessionMeta>,
    /// When the desktop last synced this project; `None` if it never did. Kept out of the
    /// tool's structured answer, whose shape is the seed's `{project_id, sessions}`.
    #[serde(skip)]
    pub last_sync_at: Option<Timestamp>,
}

/// One shared session as the desktop's last sync described it.
#[derive(Serialize, schemars::JsonSchema)]
#[allow(dead_code)] // Only its schema is used.
struct SessionEntry {
    /// Pass it to run_graph_session.
    graph_session_id: String,
    /// Display name.
    name: String,
    /// What the graph does.
    description: String,
    /// The graph's slug.
    slug: String,
    /// The graph's version.
    version: String,
    /// The session's status on the desktop.
    status: String,
    /// The JSON Schema (draft 2020-12) that the arguments of run_graph_session must fit, when
    /// the graph declares one.
    #[serde(skip_serializing_if = "Option::is_none")]
    args_schema: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Lists up to `limit` sessions of `project_id`, which must be the agent's project.
pub async fn list_sessions(
    store: &dyn Store,
    agent: &AgentIdentity,
    project_id: &str,
    limit: Option<i64>,
) -> Result<SessionList, RunError> {
    let limit = limit.unwrap_or(DEFAULT_LIST_LIMIT);
    if !LIST_LIMIT.contains(&limit) {
        return Err(RunError::Invalid(format!(
            "limit must be between {} and {}, got {limit}",
            LIST_LIMIT.start(),
            LIST_LIMIT.end()
        )));
    }
    if project_id != agent.project_id {
        return Err(RunError::Invalid(format!(
            "this connection is for project {}, not `{project_id}`: pass project_id \"{}\"",
            agent.project_id, agent.project_id
        )));
    }
    let limit = usize::try_from(limit).unwrap_or(1);
    let snapshot = store.sessions(project_id, limit).await?;
    Ok(SessionList {
        project_id: project_id.to_owned(),
        sessions: snapshot.sessions.into_iter().map(|s| s.meta).collect(),
        last_sync_at: snapshot.last_sync_at,
    })
}

/// Replaces the project's snapshot with the desktop's and returns its queued commands; with a
/// wait, holds the answer until there is news for the desktop or the wait ends.
///
/// Not an `async fn`: that would keep room for `request` for as long as the sync is held. The
/// request and the reads before the wait live in a box of their own, freed before the wait.
pub fn sync_project<'a>(
    runs: &'a Runs,
    desktop: &'a DesktopIdentity,
    request: SyncRequest,
) -> impl Future<Output = Result<SyncResponse, DesktopError>> + Send + 'a {
    let first = Box::pin(first_answer(runs, desktop, request));
    async move {
        match first.await? {
            FirstAnswer::Now(answer) => Ok(answer),
            FirstAnswer::Hold(held) => hold(runs, desktop, held).await,
        }
    }
}

/// What the first read gave: the answer, or nothing new yet and a wait to hold.
enum FirstAnswer {
    Now(SyncResponse),
    Hold(Box<Held>),
}

/// Everything a held sync keeps while it waits: what the desktop already knows, the deadline,
/// its wake-up subscription and the answer to give at the deadline (which names the project).
struct Held {
    running: Vec<CommandId>,
    known: Vec<CommandId>,
    deadline: tokio::time::Instant,
    changes: Subscription,
    answer: SyncResponse,
}

/// Checks the request and the project, stores the snapshot and reads the answer once.
async fn first_answer(
    runs: &Runs,
    desktop: &DesktopIdentity,
    request: SyncRequest,
) -> Result<FirstAnswer, DesktopError> {
    request
        .validate()
        .map_err(|e| DesktopError::BadRequest(e.0))?;
    check_args_schemas(&request.sessions)?;
    check_project(runs, desktop, &request.project_id).await?;
    let SyncRequest {
        project_id,
        sessions,
        wait_ms,
        running,
        known,
        sessions_unchanged,
        problem,
        sharing_version,
    } = request;
    crate::presence::heard_from(&runs.presence, &project_id, Some(problem.as_ref())).await;
    if !sessions_unchanged {
        let shared: Vec<_> = sessions
            .iter()
            .map(|s| s.graph_session_id.clone())
            .collect();
        // Checked by `validate`: a version fits the column.
        let version = sharing_version.and_then(|v| i64::try_from(v).ok());
        let written = runs
            .store
            .replace_sessions(&project_id, sessions, version, runs.clock.now())
            .await?;
        // Consent withdrawn takes effect at once: queued runs of sessions no longer shared end
        // now (the snapshot above already keeps new ones from being queued). A snapshot the
        // store kept as it was, or ignored as older, changed no consent.
        if written == SnapshotWrite::Replaced {
            crate::runs::withdraw_unshared(runs, &project_id, &shared).await?;
        }
    }
    let wait = std::time::Duration::from_millis(wait_ms.unwrap_or(0));
    if wait.is_zero() {
        return Ok(FirstAnswer::Now(
            sync_answer(runs, desktop, &project_id, &running).await?,
        ));
    }
    // Subscribe before reading, so work queued between the read and the wait wakes it.
    let changes = runs.notifier.subscribe(&Topic::Project(project_id.clone()));
    let deadline = tokio::time::Instant::now() + wait;
    let answer = sync_answer(runs, desktop, &project_id, &running).await?;
    if is_news(&answer, &known) {
        return Ok(FirstAnswer::Now(answer));
    }
    Ok(FirstAnswer::Hold(Box::new(Held {
        running,
        known,
        deadline,
        changes,
        answer,
    })))
}

/// Every session's argument schema must be one the service can check arguments against: a
/// desktop checks `meta.args` before sharing, so a refusal here means a damaged sync.
fn check_args_schemas(sessions: &[SessionMeta]) -> Result<(), DesktopError> {
    for session in sessions {
        if let Some(schema) = &session.args_schema {
            graph_args::ArgsSchema::compile(schema).map_err(|e| {
                DesktopError::BadRequest(format!("{}: {e}", session.graph_session_id))
            })?;
        }
    }
    Ok(())
}

/// A command the desktop does not know yet, or a cancel request for one it runs.
fn is_news(answer: &SyncResponse, known: &[CommandId]) -> bool {
    answer
        .commands
        .iter()
        .any(|c| !known.contains(&c.command_id))
        || !answer.cancel_requested.is_empty()
}

/// Waits for news for a held sync, re-reading on every wake-up of its project.
async fn hold(
    runs: &Runs,
    desktop: &DesktopIdentity,
    mut held: Box<Held>,
) -> Result<SyncResponse, DesktopError> {
    let _held = runs.held.hold(HeldKind::Sync);
    let mut watch = runs.held.watch_token(&desktop.token_id);
    let revoked = watch.changed();
    let deadline = tokio::time::sleep_until(held.deadline);
    tokio::pin!(revoked, deadline);
    loop {
        tokio::select! {
            () = held.changes.changed() => {}
            () = &mut deadline => return Ok(held.answer),
            () = runs.held.shutting_down() => return Ok(held.answer),
            () = &mut revoked => return Err(DesktopError::Revoked),
        }
        let project_id = &held.answer.project_id;
        let answer = Box::pin(sync_answer(runs, desktop, project_id, &held.running)).await?;
        if is_news(&answer, &held.known) {
            return Ok(answer);
        }
        held.answer = answer;
    }
}

/// The project must be one this desktop token may serve.
async fn check_project(
    runs: &Runs,
    desktop: &DesktopIdentity,
    project_id: &str,
) -> Result<(), DesktopError> {
    let project = runs
        .store
        .project_of_owner(&desktop.owner_id, project_id)
        .await?;
    match (&project, &desktop.project_id) {
        (Some(project), Some(only)) if *only != project.id => {
            Err(DesktopError::Forbidden(format!(
                "this desktop token was minted for project `{only}` only, not `{}`: mint one for it (`relay admin token create --desktop --project {}`) or one for all of the owner's projects (`--desktop --owner NAME`)",
                project.id, project.id
            )))
        }
        (Some(_), _) => Ok(()),
        (None, _) => Err(DesktopError::Forbidden(format!(
            "project `{project_id}` is not one of this desktop's owner's projects: check the project id, or use the desktop token of the project's owner"
        ))),
    }
}

/// The projects this desktop token may serve, oldest first: one project for a token minted
/// for it, every project of the owner for an owner-wide token.
pub async fn served_projects(
    store: &dyn Store,
    desktop: &DesktopIdentity,
) -> Result<ProjectsResponse, DesktopError> {
    let projects = store
        .projects_of_owner(&desktop.owner_id)
        .await?
        .into_iter()
        .filter(|project| desktop.reaches(project))
        .take(MAX_SERVED_PROJECTS)
        .map(|project| ServedProject {
            name: display_name(&project.name),
            project_id: project.id,
        })
        .collect();
    Ok(ProjectsResponse { projects })
}

/// The oldest commands whose JSON together fits [`MAX_SYNC_ANSWER_BYTES`]; the first always.
fn within_answer_bytes(queued: impl Iterator<Item = QueuedCommand>) -> Vec<QueuedCommand> {
    let mut bytes = 0usize;
    let mut commands = Vec::new();
    for command in queued {
        let size = serde_json::to_vec(&command).map_or(usize::MAX, |json| json.len() + 1);
        if !commands.is_empty() && bytes.saturating_add(size) > MAX_SYNC_ANSWER_BYTES {
            break;
        }
        bytes = bytes.saturating_add(size);
        commands.push(command);
    }
    commands
}

/// The names of the agents (tokens or grants) `ids` name, each read once; an agent whose
/// token is gone has none.
async fn agent_names<'a>(
    runs: &Runs,
    ids: impl Iterator<Item = &'a str>,
) -> Result<std::collections::HashMap<String, String>, DesktopError> {
    let mut names = std::collections::HashMap::new();
    let mut seen = std::collections::HashSet::new();
    for id in ids {
        if seen.insert(id)
            && let Some(token) = runs.store.token(id).await?
        {
            names.insert(
                id.to_owned(),
                display_name(&token.agent_name.unwrap_or_default()),
            );
        }
    }
    Ok(names)
}

/// The queued commands of `project_id`, and which of `running` have a cancel request.
async fn sync_answer(
    runs: &Runs,
    desktop: &DesktopIdentity,
    project_id: &str,
    running: &[CommandId],
) -> Result<SyncResponse, DesktopError> {
    let queued = runs
        .store
        .queued_commands(project_id, MAX_SYNC_COMMANDS)
        .await?;
    let names = agent_names(runs, queued.iter().map(|c| c.agent_id.as_str())).await?;
    let queued = queued.into_iter().map(|command| QueuedCommand {
        agent_name: names.get(&command.agent_id).cloned(),
        agent_id: Some(command.agent_id),
        command_id: command.id,
        graph_session_id: command.graph_session_id,
        slug: command.slug,
        arguments: command.arguments,
        created_at: command.created_at,
        max_tokens: command.max_tokens,
    });
    let commands = within_answer_bytes(queued);
    let mut cancel_requested = Vec::new();
    for id in running {
        if let Some(command) = runs.store.command(*id).await?
            && command.project_id == project_id
            && command.status == relay_protocol::RunStatus::Running
            && command.cancel_requested
            && runs
                .store
                .project_of_owner(&desktop.owner_id, &command.project_id)
                .await?
                .is_some_and(|p| desktop.reaches(&p))
        {
            cancel_requested.push(*id);
        }
    }
    Ok(SyncResponse {
        project_id: project_id.to_owned(),
        commands,
        cancel_requested,
    })
}
