//! Recovery: what a relay does as it starts, before its first sync, and again first thing in
//! each pass until it is done. Every execution a stop interrupted is settled, and the service
//! is asked what it holds before anything is reported:
//!
//! - An execution whose graph never began (the relay stopped before `started` was sent, while
//!   it waited for the answer, or before the graph began) is handed back (`released`): the
//!   service puts the run back in its queue if it holds it under this execution, and says so
//!   if it does not (queued already, run by another execution, ended). Only then is the local
//!   row forgotten, so no history row says a graph stopped that never ran, and the run runs
//!   once when it comes back. While the service cannot be asked, the row stays and the next
//!   pass asks again.
//! - An execution whose graph began is reported failed (cause `relay_stopped`), with the tokens
//!   and cost it had spent (written as they grew), through the outbox; its approvals expire.
//!
//! The sharing version is renewed too, so this relay's snapshots are newer than any an
//! earlier relay sent.

use relay_protocol::clock::Timestamp;
use relay_protocol::{CommandId, CompletionStatus};

use crate::state::{DesktopState, StateError, Unfinished};
use crate::{Relay, bounding};

/// How a hand-back went.
pub(crate) enum HandedBack {
    /// The service holds the run anywhere but under this execution now: nothing of it runs
    /// here, and the local row is gone.
    Settled,
    /// The service could not be asked (or the state not written): try again later.
    Owed,
}

impl Relay {
    /// The start-up work: the interrupted executions settled with the service, the sharing
    /// version renewed. False (logged) while some of it is owed: the next pass tries again.
    pub(crate) async fn start_up(&self) -> bool {
        let now = self.clock.now();
        let resume = self.config.resume;
        let unbegun = self
            .state
            .call(move |state| {
                state.renew_sharing_version(now)?;
                report_interrupted(state, now, resume)
            })
            .await;
        let unbegun = match unbegun {
            Ok((unbegun, resumable)) => {
                self.keep_resumable(resumable);
                unbegun
            }
            Err(e) => {
                tracing::error!(
                    "cannot finish the relay's start in the desktop state (the next pass tries again): {e}"
                );
                return false;
            }
        };
        let mut done = true;
        for execution in unbegun {
            let handed = self
                .hand_back(&execution.command_id, &execution.execution_id)
                .await;
            done &= matches!(handed, HandedBack::Settled);
        }
        done
    }

    /// Hands back a command this relay reported started (or may have) under `execution_id`
    /// and never ran, then forgets the execution. A refusal that can never change (another
    /// execution runs it, the command is gone) settles it too: nothing of it runs here.
    pub(crate) async fn hand_back(&self, command_id: &CommandId, execution_id: &str) -> HandedBack {
        match self.api.released(command_id, execution_id).await {
            Ok(answer) => {
                tracing::info!(command = %command_id, execution = execution_id, status = %answer.status, "handed a run that never began back to the service");
            }
            Err(e) if !e.is_retryable() => {
                tracing::info!(command = %command_id, execution = execution_id, "the service does not hold this run under this execution, so nothing of it runs here: {e}");
            }
            Err(e) => {
                tracing::warn!(command = %command_id, execution = execution_id, "cannot hand a run that never began back to the service yet (the next pass tries again): {e}");
                return HandedBack::Owed;
            }
        }
        let forgotten = execution_id.to_owned();
        match self
            .state
            .call(move |state| state.forget_execution(&forgotten))
            .await
        {
            Ok(()) => HandedBack::Settled,
            Err(e) => {
                tracing::error!(command = %command_id, "cannot forget a run handed back (the next pass tries again): {e}");
                HandedBack::Owed
            }
        }
    }
}

/// Reports the interrupted executions whose graph began as failed, with the tokens they had
/// spent, and expires their approvals; returns those that never began, and (when `resume`)
/// those left to resume from their journals (of a session that resumes its runs).
fn report_interrupted(
    state: &DesktopState,
    now: Timestamp,
    resume: bool,
) -> Result<(Vec<Unfinished>, Vec<Unfinished>), StateError> {
    let mut unbegun = Vec::new();
    let mut resumable = Vec::new();
    for execution in state.unfinished_executions()? {
        if !execution.began {
            unbegun.push(execution);
            continue;
        }
        if resume
            && state.session_resumes(&execution.execution_id)?
            && state.journal_text(&execution.execution_id)?.is_some()
        {
            // Its questions died with the relay that asked them (nobody waits for their
            // answers): the resumed run asks again what it still needs.
            state.expire_approvals_of(&execution.execution_id, now)?;
            resumable.push(execution);
            continue;
        }
        report_stopped(state, execution, now, RELAY_STOPPED)?;
    }
    Ok((unbegun, resumable))
}

/// What an interrupted run that is not resumed ends with.
pub(crate) const RELAY_STOPPED: &str = "the desktop relay stopped while this graph was running";

/// Reports an interrupted execution failed with `error`, with the tokens it had spent, and
/// expires its approvals.
pub(crate) fn report_stopped(
    state: &DesktopState,
    execution: Unfinished,
    now: Timestamp,
    error: &str,
) -> Result<(), StateError> {
    {
        let Unfinished {
            execution_id,
            command_id,
            ..
        } = execution;
        let (tokens, cost) = state.execution_spent(&execution_id)?;
        let expired = state.expire_approvals_of(&execution_id, now)?;
        tracing::warn!(command = %command_id, tokens, cost, expired_approvals = expired, "reporting a run the relay stopped during as failed");
        let completion = bounding::completion(
            &execution_id,
            CompletionStatus::Failed,
            None,
            tokens,
            cost,
            Some(error),
        );
        let completion = relay_protocol::CompleteRequest {
            cause: Some(relay_protocol::EndCause::RelayStopped),
            ..completion
        };
        state.finish_execution(&command_id, None, None, &completion, now)?;
    }
    Ok(())
}
