//! Consent: the re-check right before each command (project enabled, session shared with it,
//! same slug), and what every sync tells the service of it: each project's snapshot, read
//! with the sharing version it belongs to. The service keeps the snapshot with the highest
//! version, so a sync that was slow to arrive (a long poll built before the owner unshared a
//! session) never undoes a newer one; and no snapshot of a project goes out while its
//! withdrawal is owed, so the service always hears the withdrawal first.

use std::sync::atomic::Ordering;

use relay_protocol::{
    CommandId, CompleteRequest, CompletionStatus, DesktopProblem, EndCause, GraphSessionId,
    NOT_SHARED, QueuedCommand, SyncRequest,
};

use crate::api::{ApiError, RawCommand, SyncAnswer};
use crate::ended::Ended;
use crate::state::{Session, Snapshot, StateError};
use crate::{Event, Relay, Tell, bounding};

/// What the re-check right before a command found.
pub(crate) enum Consent {
    /// The project is enabled and the session shared with it under the same slug.
    Given(Box<Session>),
    /// Not any more: the command ends `cancelled` with [`NOT_SHARED`], and never runs.
    Withdrawn,
}

/// How the service took a sync, as far as the desktop token goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Heard {
    /// Answered (2xx).
    Accepted,
    /// Refused the token (401).
    Unauthorized,
    /// Anything else (another refusal, no answer).
    Other,
}

impl Heard {
    fn of<T>(answer: &Result<T, ApiError>) -> Heard {
        match answer {
            Ok(_) => Heard::Accepted,
            Err(e) if e.status() == Some(http::StatusCode::UNAUTHORIZED) => Heard::Unauthorized,
            Err(_) => Heard::Other,
        }
    }
}

/// Why a project's sync did not happen.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SyncError {
    /// The state could not be read.
    #[error("cannot read what is shared with the project ({0}); the next pass tries again")]
    State(#[from] StateError),
    /// The project's withdrawal is owed: it goes first.
    #[error(
        "the service has not yet heard that the project was disabled; its sync waits until the withdrawal is delivered"
    )]
    Withheld,
    /// The service did not take it.
    #[error(transparent)]
    Api(#[from] ApiError),
}

impl SyncError {
    /// What the service asked for, when it said when to try again.
    pub(crate) fn api(&self) -> Option<&ApiError> {
        match self {
            SyncError::Api(e) => Some(e),
            SyncError::State(_) | SyncError::Withheld => None,
        }
    }
}

/// Reads the sharing version and whether the owner asked for a local cancel every
/// [`crate::DesktopConfig::sharing_watch_interval`] (one statement), and tells
/// the loop when it changed (`relay desktop share` and friends change it from another
/// process). A read that fails is logged and tried again at the next tick.
pub(crate) async fn watch_sharing(relay: std::sync::Arc<Relay>, tell: Tell) {
    let mut tick = tokio::time::interval(relay.config.sharing_watch_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen: Option<i64> = None;
    loop {
        tick.tick().await;
        match relay.state.call(|state| state.sharing_and_cancels()).await {
            Ok((version, cancels)) => {
                if cancels {
                    watch_local_cancels(&relay, &tell).await;
                }
                if seen.is_some_and(|seen| seen != version) {
                    tell.send(Event::SharingChanged);
                }
                seen = Some(version);
            }
            Err(e) => tracing::warn!(
                "cannot read the sharing version and the owner's cancels, trying again: {e}"
            ),
        }
    }
}

/// Reads the owner's local cancels (`relay desktop cancel`, the page's Cancel) and tells the
/// loop those of runs still running; a request for a run that is not running any more is
/// forgotten.
async fn watch_local_cancels(relay: &Relay, tell: &Tell) {
    let read = relay.state.call(|state| {
        let mut live = Vec::new();
        let mut ended = Vec::new();
        for id in state.local_cancels()? {
            let running = state
                .find_run(&id.to_string())?
                .is_some_and(|run| run.status == "running");
            if running { &mut live } else { &mut ended }.push(id);
        }
        if !ended.is_empty() {
            state.clear_local_cancels(&ended)?;
        }
        Ok(live)
    });
    match read.await {
        Ok(live) if !live.is_empty() => tell.send(Event::LocalCancels(live)),
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot read the owner's cancels, trying again: {e}"),
    }
}

/// The error of a run stopped because its project was disabled.
pub(crate) const WITHDRAWN_PROJECT: &str = "The owner withdrew consent for this project";
/// The error of a run stopped because its session was unshared or removed.
pub(crate) const WITHDRAWN_SESSION: &str = "The owner withdrew consent for this session";

impl Relay {
    /// Whether the owner's consent still covers a run of `session` as `slug` for `project`
    /// (the project enabled, the session shared with it under the same slug); if not, the
    /// words of its withdrawal ([`WITHDRAWN_PROJECT`] or [`WITHDRAWN_SESSION`]).
    pub(crate) async fn withdrawn(
        &self,
        project: String,
        session: GraphSessionId,
        slug: String,
    ) -> Option<&'static str> {
        let read = self.state.call(move |state| {
            let enabled = state.enabled_projects()?.contains(&project);
            let consented = enabled
                && state
                    .consented_session(&project, &session, &slug)?
                    .is_some();
            Ok((enabled, consented))
        });
        let error = match read.await {
            Ok((_, true)) => return None,
            Ok((false, _)) => WITHDRAWN_PROJECT,
            Ok((true, false)) => WITHDRAWN_SESSION,
            Err(e) => {
                // The next sharing change (or the pass's re-check) reads it again.
                tracing::error!("cannot re-check the consent of the running run: {e}");
                return None;
            }
        };
        Some(error)
    }

    /// Keeps the queued runs whose consent is gone in the history (`cancelled`, consent
    /// withdrawn) before the syncs that tell the service, which cancels them.
    pub(crate) async fn record_withdrawn_queue(&self) {
        let now = self.clock.now();
        match self
            .state
            .call(move |state| state.withdraw_unconsented_queue(now))
            .await
        {
            Ok(ids) => {
                for id in ids {
                    tracing::info!(channel = %format!("graph:external:{id}"), "consent withdrawn: the queued run is cancelled");
                }
            }
            Err(e) => tracing::warn!("cannot keep the withdrawn queued runs in the history: {e}"),
        }
    }

    /// The consent re-check right before `command` runs, in the state as it is now.
    pub(crate) async fn consent(
        &self,
        project: &str,
        command: &QueuedCommand,
    ) -> Result<Consent, StateError> {
        let (project, session, slug) = (
            project.to_owned(),
            command.graph_session_id.clone(),
            command.slug.clone(),
        );
        let found = self
            .state
            .call(move |state| state.consented_session(&project, &session, &slug))
            .await?;
        Ok(found.map_or(Consent::Withdrawn, |session| {
            Consent::Given(Box::new(session))
        }))
    }

    /// The end of a command whose consent was withdrawn: recorded as an execution that never
    /// ran, `cancelled` with [`NOT_SHARED`].
    pub(crate) async fn refuse(
        &self,
        project: &str,
        command: &QueuedCommand,
    ) -> Result<Ended, StateError> {
        let id = command.command_id;
        self.stats.refused.fetch_add(1, Ordering::Relaxed);
        tracing::info!(channel = %format!("graph:external:{id}"), "consent re-check failed: {NOT_SHARED}");
        let execution_id = uuid::Uuid::new_v4().to_string();
        let (begun, project, command, now) = (
            execution_id.clone(),
            project.to_owned(),
            command.clone(),
            self.clock.now(),
        );
        self.state
            .call(move |state| state.begin_command(&begun, &project, &command, now))
            .await?;
        let completion = bounding::completion(
            &execution_id,
            CompletionStatus::Cancelled,
            None,
            0,
            0.0,
            Some(NOT_SHARED),
        );
        let completion = CompleteRequest {
            cause: Some(EndCause::ConsentWithdrawn),
            ..completion
        };
        Ok(Ended::new(id, completion))
    }

    /// Posts `request` as a `sync` and tells the loop how the service took the token.
    pub(crate) async fn sync(
        &self,
        tell: &Tell,
        request: &SyncRequest,
    ) -> Result<SyncAnswer, ApiError> {
        let answer = self.api.sync(request).await;
        tell.send(Event::Synced(Heard::of(&answer)));
        answer
    }

    /// A plain `sync` of `project` carrying its snapshot (an empty one once it is disabled).
    pub(crate) async fn upload(
        &self,
        project: &str,
        tell: &Tell,
        problem: Option<&DesktopProblem>,
    ) -> Result<SyncAnswer, SyncError> {
        let read = project.to_owned();
        let snapshot = self.state.call(move |state| state.snapshot(&read)).await?;
        let sessions = match snapshot {
            Snapshot::Current { version, sessions } => Some((version, sessions)),
            // Not asked for (without a held version every read is a full snapshot); were it
            // given, the snapshot the service holds stands.
            Snapshot::Unchanged { .. } => None,
            Snapshot::Withheld => return Err(SyncError::Withheld),
        };
        let request = SyncRequest {
            project_id: project.to_owned(),
            sessions_unchanged: sessions.is_none(),
            sharing_version: sessions
                .as_ref()
                .and_then(|(version, _)| u64::try_from(*version).ok()),
            sessions: sessions
                .map(|(_, sessions)| sessions.iter().map(Session::meta).collect())
                .unwrap_or_default(),
            wait_ms: None,
            running: Vec::new(),
            known: Vec::new(),
            problem: problem.cloned(),
        };
        Ok(self.sync(tell, &request).await?)
    }

    /// Tells the service at once what is shared now (SPEC.md §2, withdrawal), outside the
    /// loop: the withdrawals of disabled projects first, then the snapshot of each enabled
    /// one. The service drops what is gone from `list_graph_sessions` and cancels its queued
    /// runs.
    pub async fn consent_pass(&self) {
        self.tell_sharing(&Tell::default(), None).await;
    }

    /// The consent pass: the withdrawals of disabled projects first, then the snapshot of each
    /// enabled one. The service drops what is gone from `list_graph_sessions` and cancels its
    /// queued runs. Runs beside a busy pass; the commands the syncs return are left to the
    /// passes.
    pub(crate) async fn tell_sharing(&self, tell: &Tell, problem: Option<&DesktopProblem>) {
        self.record_withdrawn_queue().await;
        self.deliver_withdrawals(problem).await;
        let projects = match self.state.call(|state| state.enabled_projects()).await {
            Ok(projects) => projects,
            Err(e) => {
                tracing::error!(
                    "cannot read the enabled projects (the next pass tries again): {e}"
                );
                return;
            }
        };
        for project in projects {
            match self.upload(&project, tell, problem).await {
                Ok(answer) => {
                    self.take_commands(&project, answer.commands, false);
                }
                Err(e) => tracing::warn!(
                    project,
                    "cannot tell the service the new sharing yet (the next pass tries again): {e}"
                ),
            }
        }
    }

    /// The well-formed commands of a sync answer, noted (without waiting for the write) as
    /// `project`'s queue for the owner's listing (`relay desktop queue`). A malformed one is
    /// refused before anything of it is written, and said once (`warn`) by the pass that would
    /// have run it.
    pub(crate) fn take_commands(
        &self,
        project: &str,
        raw: Vec<RawCommand>,
        warn: bool,
    ) -> Vec<QueuedCommand> {
        let mut commands = Vec::with_capacity(raw.len());
        for command in raw {
            match command.validate() {
                Ok(command) => commands.push(command),
                Err(reason) if warn => {
                    tracing::warn!(project, "ignoring a malformed command: {reason}");
                }
                Err(_) => {}
            }
        }
        let (noted, project, now) = (commands.clone(), project.to_owned(), self.clock.now());
        self.state.send(move |state| {
            if let Err(e) = state.note_queue(&project, &noted, now) {
                tracing::warn!(
                    project,
                    "cannot note the queued runs for the owner's listing: {e}"
                );
            }
        });
        commands
    }
}

/// The command ids a sync answer names, well-formed or not: a malformed command must not end
/// each next long poll at once as news.
pub(crate) fn named_ids(answer: &SyncAnswer) -> (Vec<CommandId>, Vec<CommandId>) {
    let parse = |value: &serde_json::Value| value.as_str().and_then(|id| id.parse().ok());
    let queued = answer
        .commands
        .iter()
        .filter_map(|c| parse(&c.command_id))
        .collect();
    let cancel = answer.cancel_requested.iter().filter_map(parse).collect();
    (queued, cancel)
}
