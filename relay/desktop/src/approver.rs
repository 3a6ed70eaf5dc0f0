//! `ask` tools in runs started remotely: each question becomes a pending approval in the
//! desktop's state, which the owner answers with `relay desktop approvals approve|deny ID`.
//! The run waits; no answer within the approval timeout is a denial (the request is then
//! marked `expired`).

use std::sync::Arc;
use std::time::Duration;

use runner::host::approvals::{ApprovalRequest, Approver, BoxFuture, Decision};

use super::report::RunReporter;
use super::state::{ApprovalStatus, AsyncState};
use relay_protocol::Waiting;
use relay_protocol::clock::Clock;

/// How often a waiting run looks for the owner's answer.
pub const APPROVAL_POLL_INTERVAL: Duration = Duration::from_millis(250);
/// Arguments shown to the owner are cut to this many characters.
pub const MAX_SHOWN_ARGS_CHARS: usize = 2000;

/// Asks the owner through the desktop's state.
pub struct OwnerApprover {
    state: AsyncState,
    clock: Arc<dyn Clock>,
    /// How long the run waits for an answer (the runner applies it; recorded as each
    /// question's deadline so the owner sees the time left).
    timeout: Option<Duration>,
    /// Where the run's waits are reported to the service.
    reporter: Option<Arc<RunReporter>>,
}

impl OwnerApprover {
    /// An approver over `state`.
    pub fn new(state: AsyncState, clock: Arc<dyn Clock>) -> Self {
        Self {
            state,
            clock,
            timeout: None,
            reporter: None,
        }
    }

    /// The same, noting with each question that the run waits at most `timeout`.
    pub fn waiting_at_most(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Also reports each wait to `reporter` (`owner approval of TOOL`, until `timeout` from
    /// the question), so the agent's `get_graph_run` shows what the run waits for.
    pub fn reporting(mut self, reporter: Arc<RunReporter>, timeout: Duration) -> Self {
        self.reporter = Some(reporter);
        self.timeout = Some(timeout);
        self
    }
}

/// Marks a question `expired` if the run stops waiting before anyone answered, and ends its
/// reported wait however the wait ends.
struct Unanswered<'a> {
    state: &'a AsyncState,
    clock: &'a dyn Clock,
    reporter: Option<&'a RunReporter>,
    id: String,
    answered: bool,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if let Some(reporter) = self.reporter {
            reporter.done_waiting(&self.id);
        }
        if !self.answered {
            let (id, now) = (self.id.clone(), self.clock.now());
            // A drop cannot wait: the write goes to the state's thread, which keeps its order.
            self.state.send(move |state| {
                if let Err(e) = state.decide(&id, ApprovalStatus::Expired, now) {
                    tracing::warn!(approval = %id, "cannot mark the unanswered approval expired: {e}");
                }
            });
        }
    }
}

impl Approver for OwnerApprover {
    fn permit_hint(&self, tool: &str) -> String {
        format!(
            "the desktop's owner permits it with `relay desktop policy set {tool} allow` (or `ask`, to approve each call)"
        )
    }

    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Decision> {
        Box::pin(async move {
            let id = uuid::Uuid::new_v4().to_string();
            // A question besides the policy (a call a resumed run may repeat) says why first.
            let shown = match &request.note {
                Some(note) => format!("{note}: {}", request.args),
                None => request.args.to_string(),
            };
            let args: String = shown.chars().take(MAX_SHOWN_ARGS_CHARS).collect();
            let now = self.clock.now();
            let deadline = self.timeout.map(|timeout| now.saturating_add(timeout));
            let (asked, run_id, tool) = (id.clone(), request.run_id.clone(), request.tool.clone());
            let recorded = self
                .state
                .call(move |state| state.ask_until(&asked, &run_id, &tool, &args, now, deadline))
                .await;
            if let Err(e) = recorded {
                return Decision::Denied(format!("cannot record the approval request: {e}"));
            }
            tracing::warn!(
                approval = %id, tool = %request.tool, note = request.note.as_deref().unwrap_or(""),
                "a remote run waits for your approval: relay desktop approvals approve {id} (or deny {id})"
            );
            let mut guard = Unanswered {
                state: &self.state,
                clock: self.clock.as_ref(),
                reporter: self.reporter.as_deref(),
                id: id.clone(),
                answered: false,
            };
            if let Some(reporter) = &self.reporter {
                reporter.waiting(
                    &id,
                    Waiting {
                        what: format!("owner approval of {}", request.tool),
                        until: deadline,
                    },
                );
            }
            loop {
                let asked = id.clone();
                let status = self
                    .state
                    .call(move |state| state.approval_status(&asked))
                    .await;
                match status {
                    Ok(Some(ApprovalStatus::Approved)) => {
                        guard.answered = true;
                        return Decision::Approved;
                    }
                    Ok(Some(ApprovalStatus::Denied)) => {
                        guard.answered = true;
                        return Decision::Denied(format!("the owner denied tool {}", request.tool));
                    }
                    Ok(Some(ApprovalStatus::Pending)) => {}
                    Ok(other) => {
                        guard.answered = true;
                        return Decision::Denied(format!(
                            "approval {id} for tool {} is {}",
                            request.tool,
                            other.map_or("gone", ApprovalStatus::as_str)
                        ));
                    }
                    Err(e) => {
                        return Decision::Denied(format!("cannot read the approval request: {e}"));
                    }
                }
                tokio::time::sleep(APPROVAL_POLL_INTERVAL).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::DesktopState;
    use relay_protocol::clock::{ManualClock, Timestamp};

    /// A question besides the policy (a call a resumed run may repeat) reaches the owner's
    /// pending approvals saying why, and is answered as any other.
    #[tokio::test]
    async fn a_question_with_a_note_shows_the_note_to_the_owner() {
        let state = AsyncState::new(DesktopState::open_in_memory().expect("state"));
        let clock = Arc::new(ManualClock::new(Timestamp::from_unix_millis(1)));
        let approver = OwnerApprover::new(state.clone(), clock);
        let note = "g.tool (bump) was running when the run was interrupted and may have happened: approve to run it again";
        let request = ApprovalRequest {
            run_id: "e1".into(),
            tool: "bump".into(),
            args: serde_json::json!({"by": 1}),
            note: Some(note.into()),
        };
        let asking = approver.ask(&request);
        let answering = async {
            loop {
                let pending = state.call(|s| s.approvals(false)).await.expect("approvals");
                if let Some(question) = pending.first() {
                    assert_eq!(question.tool, "bump");
                    assert_eq!(question.args, format!(r#"{note}: {{"by":1}}"#));
                    let id = question.id.clone();
                    let now = Timestamp::from_unix_millis(2);
                    state
                        .call(move |s| s.decide(&id, ApprovalStatus::Approved, now))
                        .await
                        .expect("decide");
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let (decision, ()) = tokio::join!(asking, answering);
        assert_eq!(decision, Decision::Approved);
    }
}
