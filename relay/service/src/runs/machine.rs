//! The run state machine: [`transition`] is the only place that decides how a run moves.

use relay_protocol::clock::Timestamp;
use relay_protocol::{
    CompleteRequest, CompletionStatus, EndCause, NOT_SHARED, ResumedRun, RunStatus,
};

use crate::store::CommandRecord;

/// Something that happens to a run.
#[derive(Debug, Clone, Copy)]
pub enum RunEvent<'a> {
    /// The desktop started it.
    Started {
        /// The desktop's execution id.
        execution_id: &'a str,
        /// The token cap the desktop runs it with.
        token_cap: Option<u64>,
        /// Set when the desktop resumes the run from its journal after a stop: only a run
        /// still running under this execution is resumed.
        resumed: Option<ResumedRun>,
    },
    /// The desktop hands a run it started back without running it: the answer to its
    /// `started` was lost, and it will not run it under that execution (it stopped, or it
    /// restarted before the graph began). The run goes back to the queue, or ends cancelled if
    /// the agent asked to cancel meanwhile, so it is never left `running` by a lost answer.
    Released {
        /// The execution the desktop started it under.
        execution_id: &'a str,
    },
    /// Someone asked to cancel: the agent that queued it (`cancel_graph_run`), or its project's
    /// owner (the console, the owner API). The first to ask is the one recorded.
    CancelRequested {
        /// Who asked: [`EndCause::AgentCancelled`] or [`EndCause::OwnerCancelledConsole`].
        cause: EndCause,
    },
    /// The desktop reported the outcome.
    Completed {
        /// The completion as posted.
        completion: &'a CompleteRequest,
        /// Its hash, to recognise an identical repeat.
        completion_hash: &'a str,
    },
    /// The desktop stopped polling control for longer than the silence timeout.
    DesktopSilent {
        /// The error to record.
        error: &'a str,
    },
    /// The desktop's sync no longer shares the run's session with its project (unshared,
    /// removed, or the project disabled): a queued run ends `cancelled` with the consent error.
    ConsentWithdrawn,
}

/// What [`transition`] decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Write this record over the current one (conditional on the current status and flag).
    Write(Box<CommandRecord>),
    /// Nothing to write: an identical repeat of something already recorded.
    Replay,
    /// Nothing to write: the run already ended (in this status).
    AlreadyFinished(RunStatus),
    /// The event contradicts what is recorded.
    Conflict(String),
}

/// Decides how `event` changes `current` at time `now`. The only place that moves a run: it
/// hands each kind of event to its own arm set below, all of which start from `current`.
pub fn transition(current: &CommandRecord, event: RunEvent<'_>, now: Timestamp) -> Decision {
    let mut next = current.clone();
    next.updated_at = now;
    match event {
        RunEvent::Started {
            execution_id,
            token_cap,
            resumed: None,
        } => {
            next.token_cap = token_cap;
            started(current, next, execution_id, now)
        }
        RunEvent::Started {
            execution_id,
            resumed: Some(resumed),
            ..
        } => started_resumed(current, next, execution_id, resumed, now),
        RunEvent::Released { execution_id } => released(current, next, execution_id),
        RunEvent::CancelRequested { cause } => cancel_requested(current, next, cause, now),
        RunEvent::Completed {
            completion,
            completion_hash,
        } => completed(current, next, completion, completion_hash, now),
        RunEvent::DesktopSilent { error } => match current.status {
            RunStatus::Running => {
                next.status = RunStatus::Failed;
                next.finished_at = Some(now);
                next.error = Some(error.to_owned());
                Decision::Write(Box::new(next))
            }
            RunStatus::Queued => Decision::Replay,
            status => Decision::AlreadyFinished(status),
        },
        RunEvent::ConsentWithdrawn => match current.status {
            RunStatus::Queued => {
                next.status = RunStatus::Cancelled;
                next.finished_at = Some(now);
                next.error = Some(NOT_SHARED.to_owned());
                next.end_cause = Some(EndCause::ConsentWithdrawn);
                Decision::Write(Box::new(next))
            }
            // A running run is the desktop's to stop: its consent re-check already let it start.
            RunStatus::Running => Decision::Replay,
            status => Decision::AlreadyFinished(status),
        },
    }
}

/// The `Started` arms.
fn started(
    current: &CommandRecord,
    mut next: CommandRecord,
    execution_id: &str,
    now: Timestamp,
) -> Decision {
    match current.status {
        RunStatus::Queued => {
            next.status = RunStatus::Running;
            next.execution_id = Some(execution_id.to_owned());
            next.started_at = Some(now);
            next.last_seen_at = Some(now);
            Decision::Write(Box::new(next))
        }
        RunStatus::Running if current.execution_id.as_deref() == Some(execution_id) => {
            Decision::Replay
        }
        RunStatus::Running => Decision::Conflict(format!(
            "command already started with another execution_id ({})",
            current.execution_id.as_deref().unwrap_or("none")
        )),
        status => Decision::Conflict(format!(
            "command already finished as {status}; do not run it"
        )),
    }
}

/// The `Started` arms of a desktop resuming a run from its journal: only the execution the
/// run is running under resumes it (a queued, ended or another execution's run is refused, so
/// a resume never starts a second run). A newer count is recorded with its time (between the
/// run's start and now, whatever the desktop's clock says); an older or equal one is a repeat.
fn started_resumed(
    current: &CommandRecord,
    mut next: CommandRecord,
    execution_id: &str,
    resumed: ResumedRun,
    now: Timestamp,
) -> Decision {
    match current.status {
        RunStatus::Running if current.execution_id.as_deref() == Some(execution_id) => {
            if resumed.count <= current.resumed {
                return Decision::Replay;
            }
            let earliest = current.started_at.unwrap_or(current.created_at).min(now);
            next.resumed = resumed.count;
            next.resumed_at = Some(resumed.at.clamp(earliest, now));
            next.last_seen_at = Some(now);
            Decision::Write(Box::new(next))
        }
        RunStatus::Running => Decision::Conflict(format!(
            "command runs under another execution_id ({}); only that execution may resume it",
            current.execution_id.as_deref().unwrap_or("none")
        )),
        RunStatus::Queued => Decision::Conflict(
            "command is not running; only a running run is resumed (do not run it)".to_owned(),
        ),
        status => Decision::Conflict(format!(
            "command already finished as {status}; do not run it"
        )),
    }
}

/// The error of a run that ends because `cause` cancelled it before any graph ran:
/// "Cancelled by the agent before it started", "Cancelled by the owner in the console before
/// it started".
fn cancelled_before_start(cause: EndCause) -> String {
    format!("{} before it started", cause.describe())
}

/// Who asked the service to cancel `command`, when someone did: the recorded cause, or the
/// agent for a run flagged before causes were kept (only agents could cancel then).
pub fn cancel_cause_of(command: &CommandRecord) -> Option<EndCause> {
    command
        .cancel_requested
        .then(|| command.cancel_cause.unwrap_or(EndCause::AgentCancelled))
}

/// The `Released` arms: only the execution that started the run hands it back; a run not
/// started (or released already) stays as it is.
fn released(current: &CommandRecord, mut next: CommandRecord, execution_id: &str) -> Decision {
    match current.status {
        RunStatus::Running if current.execution_id.as_deref() != Some(execution_id) => {
            Decision::Conflict(format!(
                "command runs under another execution_id ({}); only that execution may release it",
                current.execution_id.as_deref().unwrap_or("none")
            ))
        }
        RunStatus::Running if current.cancel_requested => {
            let cause = cancel_cause_of(current).unwrap_or(EndCause::AgentCancelled);
            next.status = RunStatus::Cancelled;
            next.finished_at = Some(next.updated_at);
            next.error = Some(cancelled_before_start(cause));
            next.end_cause = Some(cause);
            Decision::Write(Box::new(next))
        }
        RunStatus::Running => {
            next.status = RunStatus::Queued;
            next.execution_id = None;
            next.started_at = None;
            next.last_seen_at = None;
            next.token_cap = None;
            Decision::Write(Box::new(next))
        }
        RunStatus::Queued => Decision::Replay,
        status => Decision::AlreadyFinished(status),
    }
}

/// The `CancelRequested` arms: the first cancel's cause is the one kept (a second asker
/// changes nothing).
fn cancel_requested(
    current: &CommandRecord,
    mut next: CommandRecord,
    cause: EndCause,
    now: Timestamp,
) -> Decision {
    match current.status {
        RunStatus::Queued => {
            next.status = RunStatus::Cancelled;
            next.cancel_requested = true;
            next.cancel_cause = Some(cause);
            next.end_cause = Some(cause);
            next.finished_at = Some(now);
            next.error = Some(cancelled_before_start(cause));
            Decision::Write(Box::new(next))
        }
        RunStatus::Running if current.cancel_requested => Decision::Replay,
        RunStatus::Running => {
            next.cancel_requested = true;
            next.cancel_cause = Some(cause);
            Decision::Write(Box::new(next))
        }
        status => Decision::AlreadyFinished(status),
    }
}

/// The `Completed` arms: a live run records the outcome; an ended one accepts only an
/// identical repeat.
fn completed(
    current: &CommandRecord,
    mut next: CommandRecord,
    completion: &CompleteRequest,
    completion_hash: &str,
    now: Timestamp,
) -> Decision {
    match current.status {
        RunStatus::Queued if !is_consent_refusal(completion) => Decision::Conflict(
            "the command has not started: report `started` before completing it (a command that never started may only be refused for consent: cancelled with the not-shared error)".to_owned(),
        ),
        RunStatus::Running if current.execution_id.as_deref() != Some(&completion.execution_id) => {
            Decision::Conflict(format!(
                "command started with another execution_id ({}); only that execution may complete it",
                current.execution_id.as_deref().unwrap_or("none")
            ))
        }
        RunStatus::Queued | RunStatus::Running => {
            // Once the agent cancelled, the outcome is `cancelled` even if the graph managed
            // to finish between the flag and the stop.
            let status = if current.cancel_requested {
                RunStatus::Cancelled
            } else {
                RunStatus::from(completion.status)
            };
            next.status = status;
            next.execution_id = Some(completion.execution_id.clone());
            next.completion_hash = Some(completion_hash.to_owned());
            next.finished_at = Some(desktop_end(current, completion, now));
            next.delivered_at = Some(now);
            next.last_seen_at = Some(now);
            next.total_tokens = completion.total_tokens;
            next.reported_cost = completion.reported_cost;
            let keeps_result = status == RunStatus::Completed;
            next.result = completion.result.clone().filter(|_| keeps_result);
            next.result_truncated = completion.result_truncated && keeps_result;
            let (end_cause, error) = completed_cause(current, completion, status);
            next.end_cause = end_cause;
            next.error = error;
            Decision::Write(Box::new(next))
        }
        status if current.completion_hash.as_deref() == Some(completion_hash) => {
            debug_assert!(status.is_terminal());
            Decision::Replay
        }
        // The service already cancelled it for the same reason, when the desktop's sync
        // withdrew the session: the desktop's own refusal agrees and changes nothing.
        RunStatus::Cancelled
            if current.error.as_deref() == Some(NOT_SHARED) && is_consent_refusal(completion) =>
        {
            Decision::Replay
        }
        status => Decision::Conflict(format!(
            "command already finished as {status} with a different completion"
        )),
    }
}

/// The end cause and error of a run the desktop completed as `status`. The cancel the service
/// recorded wins over the desktop's cause (an older desktop says the agent cancelled whoever
/// asked), and its words replace the desktop's; else the desktop's cause stands (a consent
/// refusal without one is a withdrawal), with the desktop's error or the cause's words.
fn completed_cause(
    current: &CommandRecord,
    completion: &CompleteRequest,
    status: RunStatus,
) -> (Option<EndCause>, Option<String>) {
    if let Some(cause) = cancel_cause_of(current) {
        let error = if completion.status == CompletionStatus::Cancelled {
            cause.describe().to_owned()
        } else {
            // The graph ended on its own between the flag and the stop.
            format!("{} while running", cause.describe())
        };
        return (Some(cause), Some(error));
    }
    let cause = completion
        .cause
        .or_else(|| is_consent_refusal(completion).then_some(EndCause::ConsentWithdrawn));
    let error = completion.error.clone().or_else(|| {
        cause
            .filter(|_| status != RunStatus::Completed)
            .map(|cause| cause.describe().to_owned())
    });
    (cause, error)
}

/// When the run ended: the desktop's `finished_at`, kept between the run's start (its queueing,
/// if it never started) and the completion's arrival, since the desktop's clock may be off; the
/// arrival when the desktop sent none.
fn desktop_end(current: &CommandRecord, completion: &CompleteRequest, now: Timestamp) -> Timestamp {
    let earliest = current.started_at.unwrap_or(current.created_at).min(now);
    completion
        .finished_at
        .map_or(now, |at| at.clamp(earliest, now))
}

/// The consent refusal: `cancelled` with exactly the not-shared error and no result, which the
/// desktop posts for a command whose session is no longer shared, without starting it.
fn is_consent_refusal(completion: &CompleteRequest) -> bool {
    completion.status == CompletionStatus::Cancelled
        && completion.error.as_deref() == Some(NOT_SHARED)
        && completion.result.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_protocol::CommandId;
    use serde_json::Map;

    use crate::runs::canonical_json;

    fn command(status: RunStatus, cancel_requested: bool) -> CommandRecord {
        let mut command = CommandRecord::queued(
            CommandId::new_random(),
            "p".into(),
            "a".into(),
            "gs_00000000000000000000000000000001".parse().unwrap(),
            "slug".into(),
            Map::new(),
            "key-0001".into(),
            "h".into(),
            Timestamp::EPOCH,
        );
        command.status = status;
        command.cancel_requested = cancel_requested;
        command.execution_id = Some("exec".into());
        command.completion_hash = status.is_terminal().then(|| "done".to_owned());
        command
    }

    fn completion(status: CompletionStatus) -> CompleteRequest {
        CompleteRequest {
            execution_id: "exec".into(),
            status,
            result: Some(serde_json::json!({"r": 1})),
            result_truncated: false,
            total_tokens: Some(3),
            reported_cost: Some(0.5),
            error: None,
            finished_at: None,
            cause: None,
        }
    }

    fn written(decision: Decision) -> CommandRecord {
        match decision {
            Decision::Write(next) => *next,
            other => panic!("expected a write, got {other:?}"),
        }
    }

    const NOW: Timestamp = Timestamp::from_unix_millis(5_000);

    #[test]
    fn a_completion_ends_the_run_when_the_desktop_says_and_is_delivered_now() {
        let mut running = command(RunStatus::Running, false);
        running.completion_hash = None;
        running.started_at = Some(Timestamp::from_unix_millis(1_000));
        let at = |millis: i64| {
            let mut done = completion(CompletionStatus::Completed);
            done.finished_at = Some(Timestamp::from_unix_millis(millis));
            done
        };
        let finish = |completion: &CompleteRequest| {
            written(transition(
                &running,
                RunEvent::Completed {
                    completion,
                    completion_hash: "h",
                },
                NOW,
            ))
        };
        // Ended during an outage, delivered later.
        let late = finish(&at(2_000));
        assert_eq!(late.finished_at, Some(Timestamp::from_unix_millis(2_000)));
        assert_eq!(late.delivered_at, Some(NOW));
        // A desktop clock that is off never puts the end before the start or after delivery.
        assert_eq!(finish(&at(9_000)).finished_at, Some(NOW));
        assert_eq!(
            finish(&at(10)).finished_at,
            Some(Timestamp::from_unix_millis(1_000))
        );
        // An older desktop sends no time: the arrival stands for it.
        let untimed = finish(&completion(CompletionStatus::Completed));
        assert_eq!(untimed.finished_at, Some(NOW));
    }

    #[test]
    fn start_moves_queued_to_running_once() {
        let started = written(transition(
            &command(RunStatus::Queued, false),
            RunEvent::Started {
                execution_id: "e1",
                token_cap: None,
                resumed: None,
            },
            NOW,
        ));
        assert_eq!(started.status, RunStatus::Running);
        assert_eq!(started.started_at, Some(NOW));
        assert_eq!(started.last_seen_at, Some(NOW));
        let running = command(RunStatus::Running, false);
        let same = RunEvent::Started {
            execution_id: "exec",
            token_cap: None,
            resumed: None,
        };
        assert_eq!(transition(&running, same, NOW), Decision::Replay);
        let other = RunEvent::Started {
            execution_id: "e2",
            token_cap: None,
            resumed: None,
        };
        assert!(matches!(
            transition(&running, other, NOW),
            Decision::Conflict(_)
        ));
        for status in [
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Cancelled,
        ] {
            assert!(matches!(
                transition(&command(status, false), same, NOW),
                Decision::Conflict(_)
            ));
        }
    }

    #[test]
    fn only_the_running_execution_resumes_its_run_and_each_resume_is_counted_once() {
        let mut running = command(RunStatus::Running, false);
        running.started_at = Some(Timestamp::from_unix_millis(1_000));
        let resume = |execution_id, count, at| RunEvent::Started {
            execution_id,
            token_cap: None,
            resumed: Some(ResumedRun {
                count,
                at: Timestamp::from_unix_millis(at),
            }),
        };
        let once = written(transition(&running, resume("exec", 1, 2_000), NOW));
        assert_eq!((once.status, once.resumed), (RunStatus::Running, 1));
        assert_eq!(once.resumed_at, Some(Timestamp::from_unix_millis(2_000)));
        assert_eq!(once.execution_id.as_deref(), Some("exec"));
        // The same resume asked again (its answer lost), or an older one: nothing changes.
        assert_eq!(
            transition(&once, resume("exec", 1, 3_000), NOW),
            Decision::Replay
        );
        let twice = written(transition(&once, resume("exec", 2, 3_000), NOW));
        assert_eq!(twice.resumed, 2);
        // A desktop clock that is off never puts the resume before the start or after now.
        let early = written(transition(&running, resume("exec", 1, 10), NOW));
        assert_eq!(early.resumed_at, running.started_at);
        let late = written(transition(&running, resume("exec", 1, 90_000), NOW));
        assert_eq!(late.resumed_at, Some(NOW));
        // Another execution (a forged id, another desktop), a queued run, an ended run.
        assert!(matches!(
            transition(&running, resume("forged", 1, 2_000), NOW),
            Decision::Conflict(m) if m.contains("another execution_id (exec)")
        ));
        assert!(matches!(
            transition(&command(RunStatus::Queued, false), resume("exec", 1, 2_000), NOW),
            Decision::Conflict(m) if m.contains("not running")
        ));
        for status in [
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Cancelled,
        ] {
            assert!(matches!(
                transition(&command(status, false), resume("exec", 1, 2_000), NOW),
                Decision::Conflict(m) if m.contains("already finished")
            ));
        }
    }

    #[test]
    fn a_release_by_the_starting_execution_puts_the_run_back_in_the_queue() {
        let mut running = command(RunStatus::Running, false);
        running.started_at = Some(NOW);
        running.last_seen_at = Some(NOW);
        running.token_cap = Some(10);
        let release = |execution_id| RunEvent::Released { execution_id };
        let queued = written(transition(&running, release("exec"), NOW));
        assert_eq!(queued.status, RunStatus::Queued);
        assert_eq!(queued.execution_id, None);
        assert_eq!((queued.started_at, queued.last_seen_at), (None, None));
        assert_eq!(queued.token_cap, None);
        // Started again afterwards, by any execution.
        let again = written(transition(
            &queued,
            RunEvent::Started {
                execution_id: "e2",
                token_cap: None,
                resumed: None,
            },
            NOW,
        ));
        assert_eq!(again.status, RunStatus::Running);
        // A repeat after the release, or a release of a run never started: nothing to do.
        assert_eq!(transition(&queued, release("exec"), NOW), Decision::Replay);
        assert!(matches!(
            transition(&running, release("another"), NOW),
            Decision::Conflict(m) if m.contains("another execution_id (exec)")
        ));
        // The agent cancelled meanwhile: the run ends, it does not go back to the queue.
        let cancelled = written(transition(
            &command(RunStatus::Running, true),
            release("exec"),
            NOW,
        ));
        assert_eq!(cancelled.status, RunStatus::Cancelled);
        assert_eq!(cancelled.finished_at, Some(NOW));
        for status in [
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Cancelled,
        ] {
            assert_eq!(
                transition(&command(status, false), release("exec"), NOW),
                Decision::AlreadyFinished(status)
            );
        }
    }

    #[test]
    fn cancel_ends_queued_flags_running_and_leaves_finished() {
        let cancelled = written(transition(
            &command(RunStatus::Queued, false),
            RunEvent::CancelRequested {
                cause: EndCause::AgentCancelled,
            },
            NOW,
        ));
        assert_eq!(cancelled.status, RunStatus::Cancelled);
        assert_eq!(cancelled.finished_at, Some(NOW));
        let flagged = written(transition(
            &command(RunStatus::Running, false),
            RunEvent::CancelRequested {
                cause: EndCause::AgentCancelled,
            },
            NOW,
        ));
        assert_eq!(flagged.status, RunStatus::Running);
        assert!(flagged.cancel_requested);
        assert_eq!(
            transition(
                &command(RunStatus::Running, true),
                RunEvent::CancelRequested {
                    cause: EndCause::AgentCancelled,
                },
                NOW
            ),
            Decision::Replay
        );
        for status in [
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Cancelled,
        ] {
            assert_eq!(
                transition(
                    &command(status, false),
                    RunEvent::CancelRequested {
                        cause: EndCause::AgentCancelled,
                    },
                    NOW
                ),
                Decision::AlreadyFinished(status)
            );
        }
    }

    #[test]
    fn completion_after_a_cancel_flag_is_cancelled() {
        let request = completion(CompletionStatus::Completed);
        let event = RunEvent::Completed {
            completion: &request,
            completion_hash: "h1",
        };
        let done = written(transition(&command(RunStatus::Running, false), event, NOW));
        assert_eq!(done.status, RunStatus::Completed);
        assert_eq!(done.result, request.result);
        let cancelled = written(transition(&command(RunStatus::Running, true), event, NOW));
        assert_eq!(cancelled.status, RunStatus::Cancelled);
        assert_eq!(cancelled.result, None);
        assert_eq!(cancelled.total_tokens, Some(3));
        assert!(cancelled.error.is_some());
        let unshared = CompleteRequest {
            result: None,
            error: Some(NOT_SHARED.into()),
            ..completion(CompletionStatus::Cancelled)
        };
        let from_queued = written(transition(
            &command(RunStatus::Queued, false),
            RunEvent::Completed {
                completion: &unshared,
                completion_hash: "h2",
            },
            NOW,
        ));
        assert_eq!(from_queued.status, RunStatus::Cancelled);
    }

    #[test]
    fn only_the_started_execution_completes_a_run_and_a_queued_one_only_for_consent() {
        let other = CompleteRequest {
            execution_id: "another".into(),
            ..completion(CompletionStatus::Completed)
        };
        let refused = transition(
            &command(RunStatus::Running, false),
            RunEvent::Completed {
                completion: &other,
                completion_hash: "h",
            },
            NOW,
        );
        assert!(
            matches!(&refused, Decision::Conflict(m) if m.contains("another execution_id (exec)")),
            "{refused:?}"
        );
        let mut queued = command(RunStatus::Queued, false);
        queued.execution_id = None;
        for status in [CompletionStatus::Completed, CompletionStatus::Failed] {
            let request = completion(status);
            let decision = transition(
                &queued,
                RunEvent::Completed {
                    completion: &request,
                    completion_hash: "h",
                },
                NOW,
            );
            assert!(
                matches!(&decision, Decision::Conflict(m) if m.contains("has not started")),
                "{decision:?}"
            );
        }
        // Cancelled, but not the consent refusal's words: not a consent refusal either.
        let cancelled = CompleteRequest {
            result: None,
            error: Some("something else".into()),
            ..completion(CompletionStatus::Cancelled)
        };
        assert!(matches!(
            transition(
                &queued,
                RunEvent::Completed {
                    completion: &cancelled,
                    completion_hash: "h",
                },
                NOW,
            ),
            Decision::Conflict(_)
        ));
    }

    #[test]
    fn a_finished_run_replays_its_own_completion_and_refuses_others() {
        let finished = command(RunStatus::Completed, false);
        let request = completion(CompletionStatus::Completed);
        let same = RunEvent::Completed {
            completion: &request,
            completion_hash: "done",
        };
        assert_eq!(transition(&finished, same, NOW), Decision::Replay);
        let other = RunEvent::Completed {
            completion: &request,
            completion_hash: "other",
        };
        assert!(matches!(
            transition(&finished, other, NOW),
            Decision::Conflict(_)
        ));
    }

    #[test]
    fn withdrawn_consent_cancels_only_queued_runs_with_the_consent_error() {
        let next = written(transition(
            &command(RunStatus::Queued, false),
            RunEvent::ConsentWithdrawn,
            Timestamp::EPOCH,
        ));
        assert_eq!(next.status, RunStatus::Cancelled);
        assert_eq!(next.error.as_deref(), Some(NOT_SHARED));
        assert_eq!(next.end_cause, Some(EndCause::ConsentWithdrawn));
        assert!(next.finished_at.is_some());
        assert_eq!(
            transition(
                &command(RunStatus::Running, false),
                RunEvent::ConsentWithdrawn,
                Timestamp::EPOCH
            ),
            Decision::Replay
        );
        assert_eq!(
            transition(
                &command(RunStatus::Completed, false),
                RunEvent::ConsentWithdrawn,
                Timestamp::EPOCH
            ),
            Decision::AlreadyFinished(RunStatus::Completed)
        );
        let mut withdrawn = command(RunStatus::Cancelled, false);
        withdrawn.error = Some(NOT_SHARED.into());
        let refusal = CompleteRequest {
            execution_id: "another".into(),
            status: CompletionStatus::Cancelled,
            result: None,
            result_truncated: false,
            total_tokens: Some(0),
            reported_cost: Some(0.0),
            error: Some(NOT_SHARED.into()),
            finished_at: None,
            cause: None,
        };
        assert_eq!(
            transition(
                &withdrawn,
                RunEvent::Completed {
                    completion: &refusal,
                    completion_hash: "other"
                },
                Timestamp::EPOCH
            ),
            Decision::Replay,
            "the desktop's own refusal of a withdrawn run is no conflict"
        );
    }

    #[test]
    fn only_running_runs_go_silent() {
        let event = RunEvent::DesktopSilent { error: "silent" };
        let failed = written(transition(&command(RunStatus::Running, true), event, NOW));
        assert_eq!(failed.status, RunStatus::Failed);
        assert_eq!(failed.error.as_deref(), Some("silent"));
        assert_eq!(
            transition(&command(RunStatus::Queued, false), event, NOW),
            Decision::Replay
        );
        assert_eq!(
            transition(&command(RunStatus::Completed, false), event, NOW),
            Decision::AlreadyFinished(RunStatus::Completed)
        );
    }

    #[test]
    fn a_cancel_keeps_who_asked_and_the_first_asker_stands() {
        let owner = RunEvent::CancelRequested {
            cause: EndCause::OwnerCancelledConsole,
        };
        let agent = RunEvent::CancelRequested {
            cause: EndCause::AgentCancelled,
        };
        let queued = written(transition(&command(RunStatus::Queued, false), owner, NOW));
        assert_eq!(queued.end_cause, Some(EndCause::OwnerCancelledConsole));
        assert_eq!(
            queued.error.as_deref(),
            Some("Cancelled by the owner in the console before it started")
        );
        let by_agent = written(transition(&command(RunStatus::Queued, false), agent, NOW));
        assert_eq!(
            by_agent.error.as_deref(),
            Some("Cancelled by the agent before it started")
        );
        let flagged = written(transition(&command(RunStatus::Running, false), owner, NOW));
        assert_eq!(flagged.cancel_cause, Some(EndCause::OwnerCancelledConsole));
        assert_eq!(flagged.end_cause, None, "still running");
        assert_eq!(
            cancel_cause_of(&flagged),
            Some(EndCause::OwnerCancelledConsole)
        );
        assert_eq!(transition(&flagged, agent, NOW), Decision::Replay);
        // Flagged before causes were kept: only agents could cancel then.
        assert_eq!(
            cancel_cause_of(&command(RunStatus::Running, true)),
            Some(EndCause::AgentCancelled)
        );
        let released = written(transition(
            &flagged,
            RunEvent::Released {
                execution_id: "exec",
            },
            NOW,
        ));
        assert_eq!(released.end_cause, Some(EndCause::OwnerCancelledConsole));
        assert_eq!(
            released.error.as_deref(),
            Some("Cancelled by the owner in the console before it started")
        );
    }

    #[test]
    fn the_services_cancel_cause_wins_over_the_desktops_and_the_cost_is_kept() {
        let mut flagged = command(RunStatus::Running, false);
        flagged.completion_hash = None;
        flagged.cancel_requested = true;
        flagged.cancel_cause = Some(EndCause::OwnerCancelledConsole);
        let stopped = CompleteRequest {
            result: None,
            reported_cost: Some(0.0015),
            total_tokens: Some(120),
            error: Some("Cancelled by the agent".into()),
            cause: Some(EndCause::AgentCancelled),
            ..completion(CompletionStatus::Cancelled)
        };
        let done = written(transition(
            &flagged,
            RunEvent::Completed {
                completion: &stopped,
                completion_hash: "h",
            },
            NOW,
        ));
        assert_eq!(done.status, RunStatus::Cancelled);
        assert_eq!(done.end_cause, Some(EndCause::OwnerCancelledConsole));
        assert_eq!(
            done.error.as_deref(),
            Some("Cancelled by the owner in the console")
        );
        assert_eq!(
            (done.total_tokens, done.reported_cost),
            (Some(120), Some(0.0015))
        );
        // No cancel of the service's: the desktop's cause and words stand.
        let mut running = command(RunStatus::Running, false);
        running.completion_hash = None;
        let withdrawn = CompleteRequest {
            result: None,
            error: None,
            cause: Some(EndCause::OwnerCancelledDesktop),
            ..completion(CompletionStatus::Cancelled)
        };
        let local = written(transition(
            &running,
            RunEvent::Completed {
                completion: &withdrawn,
                completion_hash: "h",
            },
            NOW,
        ));
        assert_eq!(local.end_cause, Some(EndCause::OwnerCancelledDesktop));
        assert_eq!(
            local.error.as_deref(),
            Some("Cancelled by the owner on the desktop")
        );
        // A graph that ended by itself has no cause.
        let plain = written(transition(
            &running,
            RunEvent::Completed {
                completion: &completion(CompletionStatus::Completed),
                completion_hash: "h",
            },
            NOW,
        ));
        assert_eq!((plain.end_cause, plain.error), (None, None));
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let a = serde_json::json!({"b": 1, "a": {"d": [1, {"z": 0, "y": 1}], "c": "x"}});
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"c":"x","d":[1,{"y":1,"z":0}]},"b":1}"#
        );
    }
}
