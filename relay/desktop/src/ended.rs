//! A finished execution on its way to the service, and one the state could not take yet: the
//! values the record, post and consent steps hand each other.

use std::sync::Arc;

use serde_json::Value;

use crate::state::{DesktopState, StateError};
use relay_protocol::clock::Timestamp;
use relay_protocol::{CommandId, CompleteRequest, ServiceOutcome};

/// A finished execution on its way to the service: what is posted, and what the history keeps.
pub(crate) struct Ended {
    pub(crate) command_id: CommandId,
    /// What is posted (bounded).
    pub(crate) completion: CompleteRequest,
    /// The full result, which the history keeps even when the posted one had to leave it out.
    pub(crate) full_result: Option<Value>,
    /// The trace the history keeps.
    pub(crate) trace: Option<Value>,
    /// Already delivered while the engine wound down (a seen cancel): the history only.
    pub(crate) delivered: bool,
}

impl Ended {
    /// An end with no result or trace to keep, not delivered yet.
    pub(crate) fn new(command_id: CommandId, completion: CompleteRequest) -> Self {
        Ended {
            command_id,
            completion,
            full_result: None,
            trace: None,
            delivered: false,
        }
    }
}

/// An end the state could not take (its disk was full). The result is never dropped: it is
/// posted (completions are idempotent) until delivered, kept in memory, and written to the
/// history (or the outbox, if still undelivered) once writes work again.
pub(crate) struct Unrecorded {
    pub(crate) ended: Arc<Ended>,
    pub(crate) finished_at: Timestamp,
    pub(crate) delivered: bool,
    /// What the service's answer adds to the history row: its own outcome, or its refusal.
    pub(crate) note: Option<ServiceNote>,
}

/// What the service said about a completion that the history keeps.
#[derive(Clone)]
pub(crate) enum ServiceNote {
    /// It had ended the run itself; this outcome stands.
    Outcome(ServiceOutcome),
    /// It refused the completion for good, with this message.
    Refused(String),
}

impl Unrecorded {
    /// Writes the end: the history row only once it was delivered, or the history and the
    /// outbox (which then delivers it) if not yet.
    pub(crate) fn write(&self, state: &DesktopState) -> Result<(), StateError> {
        let ended = &self.ended;
        let (result, trace) = (ended.full_result.as_ref(), ended.trace.as_ref());
        if !self.delivered {
            return state.finish_execution(
                &ended.command_id,
                result,
                trace,
                &ended.completion,
                self.finished_at,
            );
        }
        state.record_end(result, trace, &ended.completion, self.finished_at)?;
        let execution = &ended.completion.execution_id;
        match &self.note {
            Some(ServiceNote::Outcome(outcome)) => {
                state.note_service_outcome_of(execution, outcome)
            }
            Some(ServiceNote::Refused(message)) => state.note_refused_of(execution, message),
            None => Ok(()),
        }
    }
}
