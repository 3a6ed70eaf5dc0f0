//! The typed event stream of a run: what the live trace shows and what tests assert on.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Serialize;

/// A run keeps at most this many log lines; later ones are dropped (and counted once).
pub const MAX_LOG_LINES: usize = 1000;

/// One thing that happened in a run.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    /// The run began.
    RunStarted {
        /// The run id.
        run_id: String,
        /// The graph's slug (or file name).
        graph: String,
        /// The engine running it.
        engine: String,
        /// The seed of the run's random source: `--seed` with it replays the run's randomness.
        seed: u64,
        /// The run clock: `real`, or the virtual clock's start (`fixed:2026-01-01T00:00:00Z`).
        clock: String,
    },
    /// A nested graph began.
    GraphStarted {
        /// Handle in the calling graph.
        handle: u32,
        /// The nested graph's slug.
        slug: String,
    },
    /// A nested graph ended.
    GraphFinished {
        /// Handle in the calling graph.
        handle: u32,
        /// The nested graph's slug.
        slug: String,
        /// Its error, if it failed.
        error: Option<String>,
    },
    /// An agent got a concurrency slot and its first turn was admitted.
    AgentStarted {
        /// Handle in the graph.
        handle: u32,
        /// The agent's label.
        label: Option<String>,
        /// Its `max_tokens` after clipping to the budget.
        max_tokens: Option<u32>,
    },
    /// One model turn finished (agents with tools take several).
    AgentTurn {
        /// Handle in the graph.
        handle: u32,
        /// Turn number, from 1.
        turn: u32,
        /// Tokens of this turn (input plus output, as the provider reported them).
        tokens: u64,
        /// Prompt tokens of this turn.
        input_tokens: u64,
        /// Generated tokens of this turn.
        output_tokens: u64,
        /// The model that answered.
        model: String,
        /// Why generation stopped (`stop`, `length`, `tool_calls`).
        finish_reason: String,
        /// Tool calls the model asked for in this turn.
        tool_calls: Vec<TurnToolCall>,
    },
    /// Streaming progress of a reply being generated.
    AgentProgress {
        /// Handle in the graph.
        handle: u32,
        /// Characters of reply text received so far.
        chars: usize,
    },
    /// A provider request is retried.
    AgentRetry {
        /// Handle in the graph.
        handle: u32,
        /// Retry number, from 1.
        attempt: u32,
        /// Why the previous request failed.
        reason: String,
    },
    /// An agent ended with a reply.
    AgentFinished {
        /// Handle in the graph.
        handle: u32,
        /// The agent's label.
        label: Option<String>,
        /// Tokens of all its turns.
        tokens: u64,
        /// Cost reported by the provider.
        cost: f64,
    },
    /// An agent ended without a reply.
    AgentFailed {
        /// Handle in the graph.
        handle: u32,
        /// The agent's label.
        label: Option<String>,
        /// Why.
        error: String,
    },
    /// An agent was refused because the token cap is reached.
    BudgetExhausted {
        /// Tokens used.
        used: u64,
        /// The cap.
        cap: u64,
    },
    /// A tool is waiting for the owner's decision.
    ApprovalRequested {
        /// The tool.
        tool: String,
    },
    /// A tool call passed approvals and ran.
    ToolCalled {
        /// The tool.
        tool: String,
        /// Its error, if it failed.
        error: Option<String>,
    },
    /// A tool call was refused.
    ToolDenied {
        /// The tool.
        tool: String,
        /// Why.
        reason: String,
    },
    /// A log line from the graph.
    Log {
        /// The line.
        message: String,
    },
    /// The log line limit was reached; later lines are dropped.
    LogsDropped {
        /// The limit.
        limit: usize,
    },
    /// The run ended.
    RunFinished {
        /// `completed`, `failed` or `cancelled`.
        status: String,
        /// Tokens metered.
        total_tokens: u64,
        /// Cost reported.
        reported_cost: f64,
        /// The error, if any.
        error: Option<String>,
    },
}

/// A tool call as the trace shows it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct TurnToolCall {
    /// The tool.
    pub name: String,
    /// The arguments the model gave.
    pub arguments: serde_json::Value,
}

/// An event with when (since the run started) and where (graph nesting depth) it happened.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Event {
    /// Milliseconds since the run started.
    pub elapsed_ms: u64,
    /// Nesting depth of the graph it belongs to (0: the top graph).
    pub depth: usize,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// Where events go: the CLI's trace printer, the desktop's history, a test's collector.
pub trait EventSink: Send + Sync {
    /// Receives one event. Must not block for long: it is called on the run's hot path.
    fn emit(&self, event: &Event);
}

/// Discards events.
#[derive(Debug, Default)]
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _: &Event) {}
}

/// Keeps every event in memory (for tests and for storing a run's trace).
#[derive(Debug, Default)]
pub struct CollectingSink {
    events: Mutex<Vec<Event>>,
}

impl CollectingSink {
    /// A copy of the events so far.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

impl EventSink for CollectingSink {
    fn emit(&self, event: &Event) {
        self.events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(event.clone());
    }
}

/// Sends events to several sinks.
pub struct FanOut(pub Vec<std::sync::Arc<dyn EventSink>>);

impl EventSink for FanOut {
    fn emit(&self, event: &Event) {
        for sink in &self.0 {
            sink.emit(event);
        }
    }
}

/// The per-run emitter: stamps events and enforces the log line limit.
pub struct Events {
    sink: std::sync::Arc<dyn EventSink>,
    clock: std::sync::Arc<super::time::RunClock>,
    log_lines: AtomicUsize,
    /// In a replay: the time the trace reads (the journal's), instead of the clock's.
    stamp: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

impl Events {
    /// An emitter on a real clock starting now.
    pub fn new(sink: std::sync::Arc<dyn EventSink>) -> Self {
        Self::on_clock(sink, super::time::RunClock::new(Default::default()))
    }

    /// An emitter stamping events with `clock`'s time (a run's: the graph's timers and the
    /// trace then agree).
    pub fn on_clock(
        sink: std::sync::Arc<dyn EventSink>,
        clock: std::sync::Arc<super::time::RunClock>,
    ) -> Self {
        Self {
            sink,
            clock,
            log_lines: AtomicUsize::new(0),
            stamp: None,
        }
    }

    /// Stamps events with `stamp`'s milliseconds instead of the clock's (a replay's: the time
    /// of the journal's entry last replayed).
    pub fn stamped_by(mut self, stamp: std::sync::Arc<std::sync::atomic::AtomicU64>) -> Self {
        self.stamp = Some(stamp);
        self
    }

    /// Passes on an event recorded in a journal, as it was.
    pub fn emit_recorded(&self, event: &Event) {
        self.sink.emit(event);
    }

    /// Emits `kind` at `depth`. Once the run's top graph has returned, only the run's end is:
    /// the work it left running is being aborted, and whether a piece of it notices first
    /// (and says so) is up to the machine's threads, which must not change the trace.
    pub fn emit(&self, depth: usize, kind: EventKind) {
        if self.clock.ended() && !matches!(kind, EventKind::RunFinished { .. }) {
            return;
        }
        let elapsed_ms = match &self.stamp {
            Some(stamp) => stamp.load(Ordering::SeqCst),
            None => self.clock.now().monotonic_ms,
        };
        self.sink.emit(&Event {
            elapsed_ms,
            depth,
            kind,
        });
    }

    /// Emits a log line unless the run's limit is reached.
    pub fn log(&self, depth: usize, message: &str) {
        let n = self.log_lines.fetch_add(1, Ordering::Relaxed);
        if n < MAX_LOG_LINES {
            self.emit(
                depth,
                EventKind::Log {
                    message: message.to_owned(),
                },
            );
        } else if n == MAX_LOG_LINES {
            self.emit(
                depth,
                EventKind::LogsDropped {
                    limit: MAX_LOG_LINES,
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn log_lines_past_the_limit_are_dropped_and_reported_once() {
        let sink = Arc::new(CollectingSink::default());
        let events = Events::new(sink.clone());
        for i in 0..MAX_LOG_LINES + 50 {
            events.log(0, &format!("line {i}"));
        }
        let seen = sink.events();
        let logs = seen
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Log { .. }))
            .count();
        let dropped = seen
            .iter()
            .filter(|e| matches!(e.kind, EventKind::LogsDropped { .. }))
            .count();
        assert_eq!(logs, MAX_LOG_LINES);
        assert_eq!(dropped, 1);
    }

    #[test]
    fn events_serialize_with_a_tag() {
        let event = Event {
            elapsed_ms: 5,
            depth: 1,
            kind: EventKind::ToolDenied {
                tool: "fs.write".into(),
                reason: "no".into(),
            },
        };
        let json = serde_json::to_value(&event).expect("serializes");
        assert_eq!(json["event"], "tool_denied");
        assert_eq!(json["depth"], 1);
        assert_eq!(json["tool"], "fs.write");
    }
}
