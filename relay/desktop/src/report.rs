//! What a running command tells the service beside its result (`POST commands/{id}/report`):
//! what it waits for (the owner's approval of a tool, with the deadline) and how far it got
//! (tokens, agents, tools, the last label). The approver and the trace change the report; one
//! task per run sends the latest one when it changes, at most every
//! [`REPORT_INTERVAL`], so a burst of changes costs one request.

use std::sync::Mutex;
use std::time::Duration;

use relay_protocol::{CommandId, REPORT_INTERVAL_MS, RunProgress, RunReport, Waiting};
use runner::host::events::{Event, EventKind};

use crate::api::{ApiError, DesktopApi};

/// Reports on one run go out at most this often.
pub const REPORT_INTERVAL: Duration = Duration::from_millis(REPORT_INTERVAL_MS);

/// The latest report of one run, and the waits behind its `waiting_for`.
pub struct RunReporter {
    report: tokio::sync::watch::Sender<RunReport>,
    /// Each wait in progress, by key (an approval id), oldest first: several agents of one run
    /// may wait at once; the oldest is shown.
    waits: Mutex<Vec<(String, Waiting)>>,
}

impl RunReporter {
    /// A reporter for `execution_id` with `token_cap`, with nothing to report yet.
    pub fn new(execution_id: &str, token_cap: Option<u64>) -> Self {
        let report = RunReport {
            execution_id: execution_id.to_owned(),
            waiting_for: None,
            progress: Some(RunProgress {
                token_cap,
                ..RunProgress::default()
            }),
        };
        RunReporter {
            report: tokio::sync::watch::channel(report).0,
            waits: Mutex::new(Vec::new()),
        }
    }

    /// The run begins waiting for `waiting` (under `key`, until [`RunReporter::done_waiting`]).
    pub fn waiting(&self, key: &str, waiting: Waiting) {
        let mut waits = self.waits.lock().unwrap_or_else(|p| p.into_inner());
        waits.push((key.to_owned(), waiting));
        self.show_wait(waits.first().map(|(_, w)| w.clone()));
    }

    /// The wait under `key` ended (answered, timed out or abandoned).
    pub fn done_waiting(&self, key: &str) {
        let mut waits = self.waits.lock().unwrap_or_else(|p| p.into_inner());
        waits.retain(|(k, _)| k != key);
        self.show_wait(waits.first().map(|(_, w)| w.clone()));
    }

    fn show_wait(&self, waiting: Option<Waiting>) {
        self.report.send_if_modified(|report| {
            let changed = report.waiting_for != waiting;
            report.waiting_for = waiting;
            changed
        });
    }

    /// Counts `event` into the progress.
    pub fn observe(&self, event: &Event) {
        self.report.send_if_modified(|report| {
            let progress = report.progress.get_or_insert_with(RunProgress::default);
            count(progress, &event.kind)
        });
    }

    /// The report as it stands.
    pub fn current(&self) -> RunReport {
        self.report.borrow().clone()
    }

    /// Sends the report of `command` whenever it changes, at most every `interval`, until
    /// the task is aborted. A report that cannot be sent is dropped: the next change sends
    /// the whole state again.
    pub async fn send(
        self: std::sync::Arc<Self>,
        api: DesktopApi,
        command: CommandId,
        interval: Duration,
    ) {
        self.send_watching(api, command, interval, |_| {}).await;
    }

    /// [`RunReporter::send`], calling `on_cancel` with who asked (when the service says) each
    /// time an answer says the run is to be cancelled.
    pub async fn send_watching(
        self: std::sync::Arc<Self>,
        api: DesktopApi,
        command: CommandId,
        interval: Duration,
        on_cancel: impl Fn(Option<relay_protocol::EndCause>) + Send + 'static,
    ) {
        let mut changes = self.report.subscribe();
        loop {
            if changes.changed().await.is_err() {
                return;
            }
            let report = changes.borrow_and_update().clone();
            let mut wait = interval;
            match api.report(&command, &report).await {
                Ok(answer) if answer.cancel_requested => on_cancel(answer.cancel_cause),
                Ok(_) => {}
                // An older service has no report endpoint: the run goes on without it.
                Err(ApiError::Status { status, .. }) if status == http::StatusCode::NOT_FOUND => {
                    tracing::debug!(%command, "the service takes no run reports");
                }
                Err(e) => {
                    wait = wait.max(e.retry_after().unwrap_or_default());
                    tracing::debug!(%command, "run report not sent: {e}");
                }
            }
            tokio::time::sleep(wait).await;
        }
    }
}

/// Counts one trace event; true if the progress changed.
fn count(progress: &mut RunProgress, kind: &EventKind) -> bool {
    let label = |label: &Option<String>, what: &str| {
        Some(
            label
                .clone()
                .unwrap_or_else(|| what.to_owned())
                .chars()
                .take(relay_protocol::MAX_REPORT_TEXT_CHARS)
                .collect::<String>(),
        )
    };
    match kind {
        EventKind::AgentStarted { label: l, .. } => {
            progress.agents_started += 1;
            progress.last_event = label(l, "agent");
        }
        EventKind::AgentTurn { tokens, .. } => {
            progress.tokens_used = progress.tokens_used.saturating_add(*tokens);
        }
        EventKind::AgentFinished { label: l, .. } | EventKind::AgentFailed { label: l, .. } => {
            progress.agents_finished += 1;
            progress.last_event = label(l, "agent");
        }
        EventKind::ToolCalled { tool, .. } => {
            progress.tools_called += 1;
            progress.last_event = label(&Some(tool.clone()), "tool");
        }
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use crate::api::{BoxFuture, Transport, TransportError};

    /// Answers every request 200 and counts the reports.
    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl Transport for Counting {
        fn send(
            &self,
            request: http::Request<Vec<u8>>,
        ) -> BoxFuture<'_, Result<http::Response<Vec<u8>>, TransportError>> {
            assert!(request.uri().path().ends_with("/report"));
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async {
                http::Response::builder()
                    .status(200)
                    .body(br#"{"recorded":true,"cancel_requested":false}"#.to_vec())
                    .map_err(|e| TransportError(e.to_string()))
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn changes_are_coalesced_into_one_report_per_interval() {
        let transport = Arc::new(Counting::default());
        let api = DesktopApi::new(transport.clone(), "grd_0123456789abcdef0123456789abcdef");
        let reporter = Arc::new(RunReporter::new("e1", None));
        let task = tokio::spawn(reporter.clone().send(
            api,
            CommandId::new_random(),
            REPORT_INTERVAL,
        ));
        let turn = |tokens| {
            event(EventKind::AgentTurn {
                handle: 1,
                turn: 1,
                tokens,
                input_tokens: 0,
                output_tokens: tokens,
                model: "m".into(),
                finish_reason: "stop".into(),
                tool_calls: Vec::new(),
            })
        };
        // Fifty changes within half an interval: the first goes at once, the rest wait.
        for _ in 0..50 {
            reporter.observe(&turn(1));
            tokio::time::sleep(REPORT_INTERVAL / 100).await;
        }
        assert_eq!(transport.0.load(Ordering::SeqCst), 1);
        tokio::time::sleep(REPORT_INTERVAL).await;
        assert_eq!(transport.0.load(Ordering::SeqCst), 2, "one more, coalesced");
        // Nothing changes, nothing is sent.
        tokio::time::sleep(REPORT_INTERVAL * 5).await;
        assert_eq!(transport.0.load(Ordering::SeqCst), 2);
        assert_eq!(reporter.current().progress.map(|p| p.tokens_used), Some(50));
        task.abort();
    }

    fn event(kind: EventKind) -> Event {
        Event {
            elapsed_ms: 0,
            depth: 0,
            kind,
        }
    }

    #[test]
    fn the_report_shows_the_oldest_wait_and_counts_progress() {
        let reporter = RunReporter::new("e1", Some(1000));
        let wait = |what: &str| Waiting {
            what: what.to_owned(),
            until: None,
        };
        reporter.waiting("a", wait("owner approval of fs.write"));
        reporter.waiting("b", wait("owner approval of fs.list"));
        assert_eq!(
            reporter.current().waiting_for,
            Some(wait("owner approval of fs.write"))
        );
        reporter.done_waiting("a");
        assert_eq!(
            reporter.current().waiting_for,
            Some(wait("owner approval of fs.list"))
        );
        reporter.done_waiting("b");
        assert_eq!(reporter.current().waiting_for, None);
        reporter.observe(&event(EventKind::AgentStarted {
            handle: 1,
            label: Some("draft".into()),
            max_tokens: None,
        }));
        reporter.observe(&event(EventKind::AgentFinished {
            handle: 1,
            label: Some("draft".into()),
            tokens: 7,
            cost: 0.0,
        }));
        let progress = reporter.current().progress.expect("progress");
        assert_eq!((progress.agents_started, progress.agents_finished), (1, 1));
        assert_eq!(progress.token_cap, Some(1000));
        assert_eq!(progress.last_event.as_deref(), Some("draft"));
    }
}
