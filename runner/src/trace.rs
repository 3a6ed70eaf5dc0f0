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

/// Text made safe to print on a terminal (in `graphrelay-text`, which the service-only `relay`
/// shares).
pub use graphrelay_text::{for_terminal, for_terminal_framed};

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
            seed,
            clock,
        } => format!("run {run_id} started: {graph} (engine {engine}, seed {seed}, clock {clock})"),
        EventKind::GraphStarted { handle, slug } => format!("graph #{handle} {slug} started"),
        EventKind::GraphFinished {
            handle,
            slug,
            error,
        } => match error {
            None => format!("graph #{handle} {slug} finished"),
            Some(e) => format!("graph #{handle} {slug} failed: {e}"),
        },
        EventKind::AgentStarted { .. }
        | EventKind::AgentTurn { .. }
        | EventKind::AgentProgress { .. }
        | EventKind::AgentRetry { .. }
        | EventKind::AgentFinished { .. }
        | EventKind::AgentFailed { .. } => return describe_agent(kind),
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

/// An agent's event as a line of text, or `None` for a first turn that is also the last.
fn describe_agent(kind: &EventKind) -> Option<String> {
    Some(match kind {
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
        _ => return None,
    })
}

/// One event as the trace prints it (time stamp, indent by depth, control characters escaped),
/// or `None` for events not worth a line.
pub fn line(event: &Event) -> Option<String> {
    let text = describe(&event.kind)?;
    let indent = "  ".repeat(event.depth);
    let seconds = event.elapsed_ms as f64 / 1000.0;
    // A code frame's lines sit under the text, past the time stamp: no trace line starts so.
    let under = format!("{:12}{indent}", "");
    Some(format!(
        "[{seconds:8.3}s] {indent}{}",
        for_terminal_framed(&text, &under)
    ))
}

impl EventSink for TracePrinter {
    fn emit(&self, event: &Event) {
        let Some(line) = line(event) else {
            return;
        };
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = writeln!(out, "{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_line_cannot_redraw_the_trace() {
        let buffer = std::sync::Arc::new(Mutex::new(Vec::new()));
        struct Shared(std::sync::Arc<Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().expect("buffer").extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let printer = TracePrinter::new(Box::new(Shared(buffer.clone())));
        printer.emit(&Event {
            elapsed_ms: 5,
            depth: 0,
            kind: EventKind::Log {
                message: "\u{1b}[1A\rapprove tool fs.read with {}? [y/N]\nfake".into(),
            },
        });
        let printed = String::from_utf8(buffer.lock().expect("buffer").clone()).expect("UTF-8");
        assert_eq!(
            printed,
            "[   0.005s] log: \\u{1b}[1A\\rapprove tool fs.read with {}? [y/N]\\nfake\n"
        );
    }
}
