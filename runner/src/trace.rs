//! The live trace a person reads on stderr while a graph runs.

use std::io::Write;
use std::sync::Mutex;

use crate::host::events::{Event, EventKind, EventSink};

/// Prints one readable line per event.
pub struct TracePrinter {
    out: Mutex<Box<dyn Write + Send>>,
}

impl TracePrinter {
    /// A printer writing to stderr.
    pub fn stderr() -> Self {
        Self::new(Box::new(std::io::stderr()))
    }

    /// A printer writing to `out`.
    pub fn new(out: Box<dyn Write + Send>) -> Self {
        Self {
            out: Mutex::new(out),
        }
    }
}

fn label(label: &Option<String>) -> String {
    label
        .as_deref()
        .map(|l| format!(" {l}"))
        .unwrap_or_default()
}

/// One event as a line of text (without the time stamp), or `None` for events not worth a line.
pub fn describe(kind: &EventKind) -> Option<String> {
    Some(match kind {
        EventKind::RunStarted {
            run_id,
            graph,
            engine,
        } => format!("run {run_id} started: {graph} (engine {engine})"),
        EventKind::GraphStarted { handle, slug } => format!("graph #{handle} {slug} started"),
        EventKind::GraphFinished {
            handle,
            slug,
            error,
        } => match error {
            None => format!("graph #{handle} {slug} finished"),
            Some(e) => format!("graph #{handle} {slug} failed: {e}"),
        },
        EventKind::AgentStarted {
            handle,
            label: l,
            max_tokens,
        } => match max_tokens {
            Some(m) => format!("agent #{handle}{} started (max {m} tokens)", label(l)),
            None => format!("agent #{handle}{} started", label(l)),
        },
        EventKind::AgentTurn {
            handle,
            turn,
            tokens,
            tool_calls,
            ..
        } => {
            if tool_calls.is_empty() && *turn == 1 {
                return None;
            }
            if tool_calls.is_empty() {
                format!("agent #{handle} turn {turn}: {tokens} tokens, final answer")
            } else {
                format!(
                    "agent #{handle} turn {turn}: {tokens} tokens, calls {}",
                    tool_calls
                        .iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        }
        EventKind::AgentProgress { handle, chars } => {
            format!("agent #{handle} generating: {chars} characters so far")
        }
        EventKind::AgentRetry {
            handle,
            attempt,
            reason,
        } => format!("agent #{handle} retry {attempt}: {reason}"),
        EventKind::AgentFinished {
            handle,
            label: l,
            tokens,
            ..
        } => format!("agent #{handle}{} finished: {tokens} tokens", label(l)),
        EventKind::AgentFailed {
            handle,
            label: l,
            error,
        } => format!("agent #{handle}{} failed: {error}", label(l)),
        EventKind::BudgetExhausted { used, cap } => {
            format!("budget exhausted: {used} of {cap} tokens used, no further agent may start")
        }
        EventKind::ApprovalRequested { tool } => format!("tool {tool} waits for approval"),
        EventKind::ToolCalled { tool, error } => match error {
            None => format!("tool {tool} ran"),
            Some(e) => format!("tool {tool} failed: {e}"),
        },
        EventKind::ToolDenied { tool, reason } => format!("tool {tool} denied: {reason}"),
        EventKind::Log { message } => format!("log: {message}"),
        EventKind::LogsDropped { limit } => {
            format!("log limit of {limit} lines reached; further lines are dropped")
        }
        EventKind::RunFinished {
            status,
            total_tokens,
            reported_cost,
            error,
        } => match error {
            Some(e) if status != "completed" => {
                format!("run {status}: {e} ({total_tokens} tokens, cost {reported_cost})")
            }
            _ => format!("run {status}: {total_tokens} tokens, cost {reported_cost}"),
        },
    })
}

impl EventSink for TracePrinter {
    fn emit(&self, event: &Event) {
        let Some(line) = describe(&event.kind) else {
            return;
        };
        let indent = "  ".repeat(event.depth);
        let seconds = event.elapsed_ms as f64 / 1000.0;
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = writeln!(out, "[{seconds:8.3}s] {indent}{line}");
    }
}
