//! Resuming the runs a stop interrupted (issue 46, docs/journal.md): start-up leaves each
//! execution whose graph began and whose journal is in the state to the first pass, which asks
//! the service `started` again under the same execution id. While the service still holds the
//! run as running under it (within its silence timeout), the run is resumed: its journal is
//! replayed, then it continues live, and ends as one run. A run the service ended meanwhile, or
//! whose session's code changed, is reported failed, as before.

use relay_protocol::clock::Timestamp;
use relay_protocol::{CommandId, ResumedRun};
use runner::host::journal::{Journal, sha256_hex};
use tokio_util::sync::CancellationToken;

use crate::ended::Ended;
use crate::execution::StartAnswer;
use crate::pass::PassState;
use crate::recovery::{RELAY_STOPPED, report_stopped};
use crate::state::{DesktopState, HistoryRow, Session, StateError, Unfinished};
use crate::{Relay, Tell};

/// What an interrupted run whose session's code changed ends with.
pub(crate) const GRAPH_CHANGED: &str = "the graph changed while the run was interrupted";

/// What the state holds of an interrupted execution.
struct Interrupted {
    history: HistoryRow,
    session: Option<Session>,
    journal: Option<String>,
}

impl Relay {
    /// Keeps the executions start-up found to resume, for the first pass.
    pub(crate) fn keep_resumable(&self, resumable: Vec<Unfinished>) {
        self.resumable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(resumable);
    }

    /// Resumes (or reports failed) each interrupted execution start-up left; one the relay
    /// stops before stays in the state for the next start.
    pub(crate) async fn resume_interrupted(
        &self,
        pass: &mut PassState,
        tell: &Tell,
        shutdown: &CancellationToken,
    ) {
        let resumable = std::mem::take(
            &mut *self
                .resumable
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for execution in resumable {
            if shutdown.is_cancelled() {
                return;
            }
            let command = execution.command_id;
            match self.resume_one(pass, tell, execution, shutdown).await {
                Ok(Some(ended)) => {
                    let kept = self.record(ended).await;
                    self.post(pass, kept).await;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(%command, "cannot resume an interrupted run (the next start settles it): {e}");
                }
            }
        }
    }

    async fn resume_one(
        &self,
        pass: &mut PassState,
        tell: &Tell,
        execution: Unfinished,
        shutdown: &CancellationToken,
    ) -> Result<Option<Ended>, StateError> {
        let id = execution.execution_id.clone();
        let Some(found) = self
            .state
            .call(move |state| interrupted(state, &id))
            .await?
        else {
            return Ok(None);
        };
        let journal = found
            .journal
            .as_deref()
            .and_then(|text| Journal::parse_unfinished(text, "the run's journal").ok());
        let (Some(session), Some(journal)) = (found.session, journal) else {
            self.settle(execution, RELAY_STOPPED).await?;
            return Ok(None);
        };
        if sha256_hex(&session.script) != journal.header.script_sha256 {
            tracing::warn!(command = %execution.command_id, "{GRAPH_CHANGED}: not resumed");
            self.settle(execution, GRAPH_CHANGED).await?;
            return Ok(None);
        }
        let token_cap = journal.header.token_cap;
        let command_id: CommandId = execution.command_id;
        let note = resume_note(&found.history, self.clock.now());
        match self
            .started_until_answered(
                &command_id,
                &execution.execution_id,
                token_cap,
                Some(note),
                shutdown,
            )
            .await
        {
            StartAnswer::Go { .. } => {}
            StartAnswer::Refused(reason) => {
                tracing::info!(command = %command_id, "the service does not resume this run ({reason}): reported failed");
                self.settle(execution, RELAY_STOPPED).await?;
                return Ok(None);
            }
            StartAnswer::Stopped => return Ok(None),
        }
        tracing::info!(command = %command_id, execution = %execution.execution_id, "resuming a run the relay stopped during, from its journal");
        let resumed_id = execution.execution_id.clone();
        self.state
            .call(move |state| state.note_resumed(&resumed_id, note.at))
            .await?;
        let resumed =
            self.resumed_execution(&found.history, &session, journal, token_cap, command_id);
        let ran = self.execute(pass, &resumed, tell, shutdown).await;
        Ok(resumed.end(ran, shutdown))
    }

    /// Reports an interrupted execution failed with `error`, as a stop did before resuming.
    async fn settle(&self, execution: Unfinished, error: &'static str) -> Result<(), StateError> {
        let now: Timestamp = self.clock.now();
        self.state
            .call(move |state| report_stopped(state, execution, now, error))
            .await
    }
}

/// What `started` tells the service of this resume (docs/journal.md): how often the run was
/// resumed, this time included, and when.
fn resume_note(history: &HistoryRow, now: Timestamp) -> ResumedRun {
    ResumedRun {
        count: history.resumed.saturating_add(1),
        at: now,
    }
}

/// The history row, session and journal of the interrupted execution `id`.
fn interrupted(state: &DesktopState, id: &str) -> Result<Option<Interrupted>, StateError> {
    let Some((history, _)) = state.execution(id)? else {
        return Ok(None);
    };
    let session = match history.session_id.parse() {
        Ok(session_id) => state.session(&session_id)?,
        Err(_) => None,
    };
    let journal = state.journal_text(id)?;
    Ok(Some(Interrupted {
        history,
        session,
        journal,
    }))
}
