//! A run's trace as the history keeps it: its first [`MAX_TRACE_EVENTS`] events, and the
//! tokens and cost spent so far, written to the history as they grow so a relay killed mid-run
//! still reports them at its next start. The runner emits events from its own tasks, so
//! keeping one costs no write: the running total goes into a one-value channel (the latest
//! total wins) that a writer task drains into the state, one write at a time. It also notes
//! the last limit the run met (its token cap, a denied or unanswered approval), which names
//! the cause of a run that failed on it.

use std::sync::{Arc, Mutex};

use runner::host::events::{Event, EventKind, EventSink};
use serde_json::Value;
use tokio::sync::watch;

use crate::MAX_TRACE_EVENTS;
use crate::report::RunReporter;
use crate::state::AsyncState;
use relay_protocol::EndCause;

/// What a run has spent so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Spent {
    /// Metered tokens (the sum of finished turns).
    pub(crate) tokens: u64,
    /// Cost the providers reported for the agents that finished.
    pub(crate) cost: f64,
}

/// Keeps a run's trace for the history and counts its tokens.
pub(crate) struct TraceKeeper {
    events: Mutex<Vec<Event>>,
    /// Spent so far (every event, even past the kept ones).
    spent: watch::Sender<Spent>,
    /// The last limit the run met, as the cause of a failure on it.
    limit: Mutex<Option<EndCause>>,
    /// Where the run's progress is counted for the service.
    reporter: Option<Arc<RunReporter>>,
}

impl Default for TraceKeeper {
    fn default() -> Self {
        Self {
            events: Mutex::default(),
            spent: watch::channel(Spent::default()).0,
            limit: Mutex::default(),
            reporter: None,
        }
    }
}

impl TraceKeeper {
    /// A keeper that also counts the run's progress into `reporter`.
    pub(crate) fn reporting(reporter: Arc<RunReporter>) -> Self {
        Self {
            reporter: Some(reporter),
            ..Self::default()
        }
    }

    /// Tokens metered so far (the sum of finished turns).
    #[cfg(test)]
    pub(crate) fn tokens(&self) -> u64 {
        self.spent.borrow().tokens
    }

    /// Tokens and cost so far.
    pub(crate) fn spent(&self) -> Spent {
        *self.spent.borrow()
    }

    /// The last limit the run met (token cap, approval denied or timed out), if any.
    pub(crate) fn limit_met(&self) -> Option<EndCause> {
        *self
            .limit
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The kept events, as the history stores them.
    pub(crate) fn to_json(&self) -> Value {
        let events = self
            .events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        serde_json::to_value(&*events).unwrap_or(Value::Null)
    }

    /// Writes the tokens and cost `execution_id` has spent to the history whenever they grow
    /// (the latest totals, one write at a time), until the task is aborted.
    pub(crate) fn record_tokens(
        &self,
        state: AsyncState,
        execution_id: String,
    ) -> impl Future<Output = ()> + Send + 'static {
        let mut totals = self.spent.subscribe();
        async move {
            while totals.changed().await.is_ok() {
                let (total, execution) = (*totals.borrow_and_update(), execution_id.clone());
                let written = state
                    .call(move |state| state.record_spent(&execution, total.tokens, total.cost))
                    .await;
                if let Err(e) = written {
                    tracing::warn!(execution = %execution_id, "cannot record the tokens spent so far: {e}");
                }
            }
        }
    }
}

impl EventSink for TraceKeeper {
    fn emit(&self, event: &Event) {
        if let Some(reporter) = &self.reporter {
            reporter.observe(event);
        }
        // Streaming progress comes once per chunk of a reply: kept, it would crowd the agents'
        // and tools' ends (what the history's timeline draws) out of the first events.
        if matches!(event.kind, EventKind::AgentProgress { .. }) {
            return;
        }
        match &event.kind {
            EventKind::AgentTurn { tokens, .. } => {
                self.spent.send_modify(|total| total.tokens += tokens);
            }
            EventKind::AgentFinished { cost, .. } if cost.is_finite() && *cost > 0.0 => {
                self.spent.send_modify(|total| total.cost += cost);
            }
            _ => {}
        }
        if let Some(limit) = limit_of(&event.kind) {
            *self
                .limit
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(limit);
        }
        let mut events = self
            .events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if events.len() < MAX_TRACE_EVENTS {
            events.push(event.clone());
        }
    }
}

/// The limit an event says the run met: its token cap, or an approval the owner denied or
/// nobody answered in time (the runner's and the approver's words for them).
fn limit_of(kind: &EventKind) -> Option<EndCause> {
    match kind {
        EventKind::BudgetExhausted { .. } => Some(EndCause::TokenCap),
        EventKind::ToolDenied { reason, .. } if reason.contains("a timeout counts as a denial") => {
            Some(EndCause::ApprovalTimedOut)
        }
        EventKind::ToolDenied { reason, .. } if reason.starts_with("the owner denied tool") => {
            Some(EndCause::ApprovalDenied)
        }
        _ => None,
    }
}

#[cfg(test)]
mod trace_keeping {
    use super::*;

    fn at(elapsed_ms: u64, kind: EventKind) -> Event {
        Event {
            elapsed_ms,
            depth: 0,
            kind,
        }
    }

    /// The tokens reach the history as they grow, written by the keeper's writer, not by the
    /// code that emits the events.
    #[tokio::test]
    async fn the_tokens_spent_so_far_are_written_by_the_writer_task() {
        let state = crate::state::DesktopState::open_in_memory().expect("state");
        let now = relay_protocol::clock::Timestamp::from_unix_millis(1);
        let session = state
            .upsert_session(
                &graph_js::Meta {
                    name: "A".into(),
                    slug: "a".into(),
                    version: "1".into(),
                    description: String::new(),
                    args: None,
                },
                "script",
                None,
                now,
            )
            .expect("session");
        let command: relay_protocol::CommandId =
            "6f1f3f5e-8c8b-4a6e-9d2b-0b8c2a9e7d11".parse().expect("id");
        state
            .begin_execution("e1", &command, "p", &session, "a", now)
            .expect("begun");
        let keeper = TraceKeeper::default();
        let writer =
            tokio::spawn(keeper.record_tokens(AsyncState::new(state.clone()), "e1".into()));
        let turn = |tokens| {
            at(
                1,
                EventKind::AgentTurn {
                    handle: 1,
                    turn: 1,
                    tokens,
                    input_tokens: 0,
                    output_tokens: tokens,
                    model: "mock".into(),
                    finish_reason: "stop".into(),
                    tool_calls: Vec::new(),
                },
            )
        };
        keeper.emit(&turn(7));
        assert_eq!(
            state.execution_tokens("e1").expect("read"),
            0,
            "emitting writes nothing"
        );
        keeper.emit(&turn(5));
        for _ in 0..100 {
            if state.execution_tokens("e1").expect("read") == 12 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(state.execution_tokens("e1").expect("read"), 12);
        assert_eq!(keeper.tokens(), 12);
        writer.abort();
    }

    #[test]
    fn the_history_trace_skips_streaming_progress_and_keeps_a_bounded_number_of_events() {
        let keeper = TraceKeeper::default();
        for chars in 0..(MAX_TRACE_EVENTS * 2) {
            keeper.emit(&at(1, EventKind::AgentProgress { handle: 1, chars }));
        }
        keeper.emit(&at(
            2,
            EventKind::AgentFinished {
                handle: 1,
                label: None,
                tokens: 7,
                cost: 0.0,
            },
        ));
        let kept = keeper.to_json();
        assert_eq!(kept.as_array().map(Vec::len), Some(1), "{kept}");
        assert_eq!(kept[0]["event"], "agent_finished");
        for n in 0..(MAX_TRACE_EVENTS + 10) {
            keeper.emit(&at(
                3,
                EventKind::Log {
                    message: n.to_string(),
                },
            ));
        }
        assert_eq!(
            keeper.to_json().as_array().map(Vec::len),
            Some(MAX_TRACE_EVENTS)
        );
    }
}
