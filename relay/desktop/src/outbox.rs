//! Completion and outbox: a finished execution is written to the history and the outbox in
//! one transaction (the record step) before it is posted (the post step), and leaves the
//! outbox only on a 2xx or a final refusal. When the state cannot take it (a full disk) it is
//! posted anyway and kept in memory, posted until delivered and written once the state takes
//! writes again, so no finished result is dropped. A relay that starts finds the executions a
//! stop interrupted and reports them failed, through the outbox.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::api::ApiError;
use crate::ended::{Ended, ServiceNote, Unrecorded};
use crate::pass::PassState;
use crate::state::{DesktopState, OutboxEntry, StateError};
use crate::{Relay, bounding};
use relay_protocol::clock::Timestamp;
use relay_protocol::{CommandId, CompleteRequest, CompletionStatus, ServiceOutcome};

/// Where the record step left an end.
pub(crate) enum Kept {
    /// In the outbox, with its history row.
    Outbox(CommandId, CompleteRequest),
    /// Delivered before it ended; its history row is written.
    Delivered,
    /// In memory: the state refused it (why, beside it).
    Memory(Unrecorded, StateError),
    /// Nowhere: the outbox is off (only the simulator turns it off), so it is posted once.
    Unsent(CommandId, CompleteRequest),
}

/// How one post of a completion went.
enum Posted {
    /// Acknowledged (2xx), maybe with the service's own outcome.
    Delivered(Option<ServiceOutcome>),
    /// Refused for good (4xx), with the service's message.
    Refused(String),
    /// Not delivered; try again later.
    Failed(ApiError),
}

impl Relay {
    /// The record step: the end's history row and its outbox entry in one transaction (the
    /// history row only, if it was delivered already), or in memory if the state refuses.
    pub(crate) async fn record(&self, mut ended: Ended) -> Kept {
        let finished_at = *ended.completion.finished_at.get_or_insert(self.clock.now());
        let entry = Unrecorded {
            delivered: ended.delivered,
            ended: Arc::new(ended),
            finished_at,
            note: None,
        };
        let ended = entry.ended.clone();
        let written = self.write_unrecorded(&entry).await;
        match written {
            Ok(()) if entry.delivered => Kept::Delivered,
            Ok(()) if self.config.outbox => {
                Kept::Outbox(ended.command_id, ended.completion.clone())
            }
            Ok(()) => Kept::Unsent(ended.command_id, ended.completion.clone()),
            Err(error) if self.config.outbox || entry.delivered => Kept::Memory(entry, error),
            Err(_) => Kept::Unsent(ended.command_id, ended.completion.clone()),
        }
    }

    /// The post step: delivers what the record step kept.
    pub(crate) async fn post(&self, pass: &mut PassState, kept: Kept) {
        match kept {
            Kept::Delivered => {}
            Kept::Outbox(command_id, completion) => {
                self.deliver(pass, &command_id, &completion, 0).await;
            }
            Kept::Memory(mut entry, error) => {
                tracing::error!(command = %entry.ended.command_id, "cannot record the end of the run in the desktop state ({error}); the result is posted anyway and kept in memory until it is delivered and recorded");
                self.post_unrecorded(pass, &mut entry).await;
                pass.unrecorded.push(entry);
            }
            Kept::Unsent(command_id, completion) => {
                self.forget(&command_id).await;
                match self.api.complete(&command_id, &completion).await {
                    Ok(_) => {
                        self.stats.delivered.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        tracing::warn!(command = %command_id, "completion lost (no outbox): {e}")
                    }
                }
            }
        }
    }

    async fn write_unrecorded(&self, entry: &Unrecorded) -> Result<(), StateError> {
        let copy = Unrecorded {
            ended: entry.ended.clone(),
            finished_at: entry.finished_at,
            delivered: entry.delivered,
            note: entry.note.clone(),
        };
        self.state.call(move |state| copy.write(state)).await
    }

    /// Re-sends every completion the service has not acknowledged.
    pub async fn deliver_outbox(&self) {
        self.deliver_outbox_paced(&mut PassState::new(false)).await;
    }

    /// Re-sends the outbox, stopping at the first answer that asks the desktop to wait.
    pub(crate) async fn deliver_outbox_paced(&self, pass: &mut PassState) {
        let entries = match self.state.call(|state| state.outbox()).await {
            Ok(entries) => entries,
            Err(e) => {
                tracing::error!("cannot read the outbox (the next pass tries again): {e}");
                return;
            }
        };
        for OutboxEntry {
            command_id,
            body,
            attempts,
        } in entries
        {
            if !pass.may_call_service() {
                return;
            }
            self.deliver(pass, &command_id, &body, attempts).await;
        }
    }

    /// Posts one completion; removes it from the outbox on a 2xx, or on an answer that can
    /// never change (a 409 for a conflicting completion is logged and dropped). Whether the
    /// service has settled it (delivered, or refused for good).
    pub(crate) async fn deliver(
        &self,
        pass: &mut PassState,
        command_id: &CommandId,
        completion: &CompleteRequest,
        attempts: u32,
    ) -> bool {
        let id = *command_id;
        let note = match self.post_completion(command_id, completion).await {
            Posted::Delivered(Some(outcome)) => {
                self.state
                    .call(move |state| state.note_service_outcome(&id, &outcome))
                    .await
            }
            Posted::Delivered(None) => Ok(()),
            Posted::Refused(message) => {
                self.state
                    .call(move |state| state.note_refused(&id, &message))
                    .await
            }
            Posted::Failed(error) => {
                pass.asked_to_wait(&error);
                tracing::warn!(command = %command_id, attempts = attempts + 1, "completion not delivered, will retry next pass: {error}");
                let error = error.to_string();
                let noted = self
                    .state
                    .call(move |state| state.note_outbox_failure(&id, &error))
                    .await;
                if let Err(e) = noted {
                    tracing::error!("cannot update the outbox: {e}");
                }
                return false;
            }
        };
        if let Err(e) = note {
            tracing::error!(command = %command_id, "cannot note the service's answer in the history: {e}");
        }
        self.forget(command_id).await;
        true
    }

    /// Posts one completion and says how it went (logging what the history cannot show).
    async fn post_completion(&self, command_id: &CommandId, body: &CompleteRequest) -> Posted {
        match self.api.complete(command_id, body).await {
            Ok(answer) => {
                self.stats.delivered.fetch_add(1, Ordering::Relaxed);
                if let Some(outcome) = &answer.already_finished {
                    let reason = outcome.error.as_deref().unwrap_or("no reason given");
                    tracing::warn!(command = %command_id, status = %outcome.status, "the service had already ended this run, so its outcome stands and the history takes it: {reason}");
                }
                tracing::info!(command = %command_id, replayed = answer.replayed, "completion delivered");
                Posted::Delivered(answer.already_finished)
            }
            Err(e) if !e.is_retryable() => {
                tracing::error!(command = %command_id, "the service refused the completion for good, not sending it again: {e}");
                Posted::Refused(e.service_message().unwrap_or("no message").to_owned())
            }
            Err(e) => Posted::Failed(e),
        }
    }

    /// Posts a completion the state could not take, unless it was delivered already.
    async fn post_unrecorded(&self, pass: &mut PassState, entry: &mut Unrecorded) {
        if entry.delivered || !pass.may_call_service() {
            return;
        }
        let ended = entry.ended.clone();
        match self
            .post_completion(&ended.command_id, &ended.completion)
            .await
        {
            Posted::Delivered(outcome) => {
                entry.delivered = true;
                entry.note = outcome.map(ServiceNote::Outcome);
            }
            Posted::Refused(message) => {
                entry.delivered = true;
                entry.note = Some(ServiceNote::Refused(message));
            }
            Posted::Failed(error) => {
                pass.asked_to_wait(&error);
                tracing::warn!(command = %ended.command_id, "completion (kept in memory) not delivered, will retry next pass: {error}");
            }
        }
    }

    /// Posts and writes the completions kept in memory (the state could not take them).
    pub(crate) async fn mend_unrecorded(&self, pass: &mut PassState) {
        let mut still = Vec::new();
        for mut entry in std::mem::take(&mut pass.unrecorded) {
            self.post_unrecorded(pass, &mut entry).await;
            match self.write_unrecorded(&entry).await {
                Ok(()) => {
                    tracing::info!(command = %entry.ended.command_id, delivered = entry.delivered, "the end of the run is recorded in the history now that the desktop state takes writes again")
                }
                Err(e) => {
                    tracing::debug!(command = %entry.ended.command_id, "the state still cannot record the end of the run: {e}");
                    still.push(entry);
                }
            }
        }
        pass.unrecorded.extend(still);
    }

    async fn forget(&self, command_id: &CommandId) {
        let id = *command_id;
        if let Err(e) = self
            .state
            .call(move |state| state.remove_from_outbox(&id))
            .await
        {
            tracing::error!(command = %command_id, "cannot remove a delivered completion from the outbox: {e}");
        }
    }

    /// What a relay does once as it starts: report the executions a stop interrupted (they
    /// began and never finished) as failed, through the outbox, and renew the sharing version
    /// so its snapshots are newer than any an earlier relay sent. False (logged) if the state
    /// refused: the next pass tries again.
    pub(crate) async fn start_up(&self) -> bool {
        let now = self.clock.now();
        let done = self
            .state
            .call(move |state| {
                recover_unfinished(state, now)?;
                state.renew_sharing_version(now)
            })
            .await;
        match done {
            Ok(_) => true,
            Err(e) => {
                tracing::error!(
                    "cannot finish the relay's start in the desktop state (the next pass tries again): {e}"
                );
                false
            }
        }
    }
}

/// Reports the executions a stop interrupted as failed, with the tokens they had spent
/// (written as they grew), and expires their approvals.
fn recover_unfinished(state: &DesktopState, now: Timestamp) -> Result<(), StateError> {
    for (execution_id, command_id) in state.unfinished_executions()? {
        let tokens = state.execution_tokens(&execution_id)?;
        let expired = state.expire_approvals_of(&execution_id, now)?;
        tracing::warn!(command = %command_id, tokens, expired_approvals = expired, "reporting a run the relay stopped during as failed");
        let completion = bounding::completion(
            &execution_id,
            CompletionStatus::Failed,
            None,
            tokens,
            0.0,
            Some("the desktop relay stopped while this graph was running"),
        );
        state.finish_execution(&command_id, None, None, &completion, now)?;
    }
    Ok(())
}
