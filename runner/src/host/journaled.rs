//! The journal's side of [`Invocation`] and [`RunShared`]: each `host` call's answer is appended
//! to the run's journal before the graph gets it, or, in a replay, taken from the journal.

use graph_js::{ClockReading, Failure, FailureCode};
use serde_json::Value;

use super::approvals::{ApprovalRequest, Checked, NotApproved, Policy};
use super::events::{Event, EventKind};
use super::journal::{self, Call, Entry, Failed, JournalMode, Recorder, ReplayTarget, Replayer};
use super::{Invocation, Outcome, RunShared};

impl RunShared {
    /// Sets the run's journal (once, before the top graph starts).
    pub fn set_journal(&self, mode: JournalMode) {
        let _ = self.journal.set(mode);
    }

    /// The recorder, when the run is recorded.
    pub fn recorder(&self) -> Option<&std::sync::Arc<Recorder>> {
        match self.journal.get() {
            Some(JournalMode::Record(recorder) | JournalMode::Resume { recorder, .. }) => {
                Some(recorder)
            }
            _ => None,
        }
    }

    /// The replayer, when the run is a replay.
    pub fn replayer(&self) -> Option<&std::sync::Arc<Replayer>> {
        match self.journal.get() {
            Some(JournalMode::Replay(replayer) | JournalMode::Resume { replayer, .. }) => {
                Some(replayer)
            }
            _ => None,
        }
    }

    /// Appends `entry` to the journal, if the run is recorded; a journal that cannot take it
    /// stops the run, with the reason as the failure.
    pub(super) fn record(&self, entry: &Entry) -> Result<(), Failure> {
        let Some(recorder) = self.recorder() else {
            return Ok(());
        };
        recorder.append(entry).map_err(|error| {
            let message = error.to_string();
            self.stop(FailureCode::Failed, message.clone());
            Failure::failed(message)
        })
    }

    /// Journals tokens an agent turn spent.
    pub(super) fn record_usage(&self, tokens: u64, cost: f64) {
        let _ = self.record(&Entry::Usage { tokens, cost });
    }

    /// In a resume, the owner's journaled answer to this `ask` (the policy still says `ask`):
    /// an approval answered before the stop is not asked again.
    pub(super) fn journaled_approval(
        &self,
        request: &ApprovalRequest,
    ) -> Option<Result<Checked, Failure>> {
        if self.approvals.policy().get(&request.tool) != Policy::Ask {
            return None;
        }
        let answer = self.replayer()?.approval(&approval_digest(request), true)?;
        Some(
            answer
                .map(|()| Checked::Approved)
                .map_err(|why| Failure::denied(why.to_string())),
        )
    }

    /// Journals the owner's answer to an `ask` (not a cancel: nobody answered).
    pub(super) fn record_approval(
        &self,
        request: &ApprovalRequest,
        checked: &Result<Checked, Failure>,
    ) {
        if self.approvals.policy().get(&request.tool) != Policy::Ask {
            return;
        }
        let answer = match checked {
            Ok(_) => Ok(()),
            Err(failure) if failure.code == FailureCode::Denied => {
                Err(NotApproved::Denied(failure.message.clone()))
            }
            Err(_) => return,
        };
        self.journal_answer(request, &approval_digest(request), answer);
    }

    fn journal_answer(
        &self,
        request: &ApprovalRequest,
        digest: &str,
        answer: Result<(), NotApproved>,
    ) {
        let _ = self.record(&Entry::Approval {
            tool: request.tool.clone(),
            digest: digest.to_owned(),
            approved: answer.is_ok(),
            reason: answer.err().map(|why| why.to_string()),
        });
    }

    /// A tool that is not idempotent, in flight when the run was interrupted (started, no
    /// outcome journaled): when it may have happened (its policy allows it, or the owner had
    /// approved it), the owner is asked, naming the call, whether to run it again; a denial or
    /// a timeout fails the call saying it may have happened. When it cannot have happened (it
    /// waited for an approval nobody gave) it runs as any call does.
    pub(super) async fn call_tool_again(
        &self,
        depth: usize,
        name: &str,
        args: &str,
    ) -> Result<Value, Failure> {
        let interrupted = format!(
            "g.tool ({name}) was running when the run was interrupted and may have happened"
        );
        let not_again = |why: &dyn std::fmt::Display| {
            Failure::failed(format!("{interrupted}; it is not run again ({why})"))
        };
        let args = serde_json::from_str::<Value>(args).map_err(|e| not_again(&e))?;
        let request = ApprovalRequest {
            run_id: self.run_id.clone(),
            tool: name.to_owned(),
            args,
            note: Some(format!("{interrupted}: approve to run it again")),
        };
        if self.may_have_happened(&request) {
            let digest = journal::digest(&["again", name, &request.args.to_string()]);
            let answer = match self.replayer().and_then(|r| r.approval(&digest, true)) {
                Some(answer) => answer,
                None => {
                    self.events.emit(
                        depth,
                        EventKind::ApprovalRequested {
                            tool: name.to_owned(),
                        },
                    );
                    let answer = self.approvals.confirm(&request, &self.cancel).await;
                    // A stop is nobody's answer: the next resume asks again.
                    let answered = !matches!(answer, Err(NotApproved::Cancelled));
                    if answered && self.stopped().is_none() {
                        self.journal_answer(&request, &digest, answer.clone());
                    }
                    answer
                }
            };
            answer.map_err(|why| not_again(&why))?;
        }
        self.call_tool(depth, name, request.args).await
    }

    fn may_have_happened(&self, request: &ApprovalRequest) -> bool {
        match self.approvals.policy().get(&request.tool) {
            Policy::Allow => true,
            Policy::Deny => false,
            Policy::Ask => self
                .replayer()
                .and_then(|r| r.approval(&approval_digest(request), false))
                .is_some_and(|answer| answer.is_ok()),
        }
    }
}

/// What an `ask`'s journaled answer is found by: the tool and its arguments.
fn approval_digest(request: &ApprovalRequest) -> String {
    journal::digest(&[&request.tool, &request.args.to_string()])
}

impl ReplayTarget for RunShared {
    fn emit(&self, event: &Event) {
        self.events.emit_recorded(event);
    }

    fn usage(&self, tokens: u64, cost: f64) {
        self.budget.record(tokens, cost);
    }
}

/// A start the journal answered, kept so that a resume can launch it live when its outcome
/// is not in the journal (it was in flight when the run stopped).
pub(super) enum Pending {
    /// `start-agent`.
    Agent(graph_js::AgentRequest),
    /// `start-tool`: name and arguments.
    Tool(String, String),
    /// `start-graph`: slug and arguments.
    Graph(String, String),
    /// `start-sleep`: its length, and its start on the run clock when the journal has it.
    Sleep(u32, Option<u64>),
}

/// Tools a resume may run again when they were in flight at the stop: running them twice
/// leaves what running them once does (a read; a write of the same text to the same path).
const IDEMPOTENT_TOOLS: &[&str] = &["fs.read", "fs.list", "fs.write"];

impl Invocation {
    /// Keeps a replayed start's request, should it be in flight where the journal runs out.
    pub(super) fn replayed(
        &mut self,
        answer: Result<u32, Failure>,
        pending: Pending,
    ) -> Result<u32, Failure> {
        if let Ok(handle) = answer {
            self.in_flight.insert(handle, pending);
            self.next_handle = self.next_handle.max(handle);
        }
        answer
    }

    /// The journal ran out in a resume: the work in flight at the stop starts again under its
    /// handles (agents always, tools when running them twice is harmless, else that start
    /// fails naming the call that may have happened), and later starts get new handles.
    fn go_live(&mut self) {
        // The replayed tokens count against the cap from here on (applied: a journal does not
        // say which were awaited, and counting them all never lets the run spend past its cap).
        let budget = &self.run.budget;
        budget.apply(budget.used().saturating_sub(budget.applied()));
        let after = self.next_handle;
        for (handle, pending) in std::mem::take(&mut self.in_flight) {
            // Each launch takes the handle after `next_handle`: the journaled one.
            self.next_handle = handle.saturating_sub(1);
            let launched = match pending {
                Pending::Agent(request) => self.start_agent_live(request),
                Pending::Tool(name, args) if IDEMPOTENT_TOOLS.contains(&name.as_str()) => {
                    self.start_tool_live(&name, &args)
                }
                Pending::Tool(name, args) => {
                    let (run, depth) = (self.run.clone(), self.depth());
                    Ok(self.spawn(handle, async move {
                        let value = run.call_tool_again(depth, &name, &args).await?;
                        Ok(value.to_string())
                    }))
                }
                Pending::Graph(slug, args) => {
                    // It replays its own calls from the journal, then goes on live.
                    let path = super::time::child_path(self.activity.path(), handle);
                    let calls = self.journal_replayer().and_then(|r| r.nested(&path));
                    self.start_graph_live(&slug, &args, calls)
                }
                Pending::Sleep(ms, started) => self.start_sleep_live(self.left_of(ms, started)),
            };
            if let Err(failure) = launched {
                self.spawn(handle, async move { Err(failure) });
            }
        }
        self.next_handle = after;
    }

    /// What is left of a sleep of `ms` that started at `started` (ms on the run clock), on a
    /// resumed run's clock (which continues from the journal's last reading); all of it when
    /// the journal does not say when it started.
    fn left_of(&self, ms: u32, started: Option<u64>) -> u32 {
        let Some(started) = started else {
            return ms;
        };
        let due = started.saturating_add(u64::from(ms));
        let left = due.saturating_sub(self.run.clock.now().monotonic_ms);
        u32::try_from(left).unwrap_or(ms)
    }

    /// The replayer this graph's calls are answered from: its own (a nested graph in flight
    /// when a resumed run went live), else the run's.
    fn journal_replayer(&self) -> Option<std::sync::Arc<Replayer>> {
        self.replay.clone().or_else(|| self.run.replayer().cloned())
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.saturating_add(1);
        self.seq
    }

    fn path_vec(&self) -> Vec<u32> {
        self.activity.path().to_vec()
    }

    /// Asks the replay for the answer to a call; `None` when the run is not a replay.
    fn replay(
        &mut self,
        call: Call,
        this: &str,
        check: impl FnOnce(&Entry) -> Option<String>,
    ) -> Option<Result<Option<Entry>, Failure>> {
        let replayer = self.journal_replayer()?;
        let was_live = replayer.is_live();
        if replayer.runs_out(self.run.as_ref()) {
            // Once, where the top graph's journal runs out (nested graphs start live after).
            if !was_live {
                self.go_live();
            }
            return None;
        }
        self.next_seq();
        Some(
            replayer
                .answer(self.run.as_ref(), call, this, check)
                .map_err(|divergence| {
                    // A start or an await fails where the graph made it, so its error names
                    // that place; the other calls cannot fail, so the run stops.
                    if !matches!(
                        call,
                        Call::Agent | Call::Tool | Call::Graph | Call::Sleep | Call::Wait
                    ) {
                        self.run.stop(FailureCode::Failed, divergence.0.clone());
                    }
                    Failure::failed(divergence.0)
                }),
        )
    }

    /// A `start-*` answered by the replay.
    pub(super) fn replay_start(
        &mut self,
        call: Call,
        what: &str,
        digest: &str,
    ) -> Option<Result<u32, Failure>> {
        let this = format!(" ({what})");
        let answer = self.replay(call, &this, |entry| match entry {
            Entry::Start { digest: d, .. } if d == digest => None,
            Entry::Start { what: w, .. } => Some(format!(
                "was called with other inputs than the journal's {} ({w})",
                call.name()
            )),
            _ => Some("was called where the journal holds another call".to_owned()),
        })?;
        Some(match answer {
            Ok(Some(Entry::Start {
                handle: Some(handle),
                t,
                ..
            })) => {
                self.replayed_start_t = t;
                Ok(handle)
            }
            Ok(Some(Entry::Start {
                error: Some(error), ..
            })) => Err(error.into()),
            Ok(_) => Err(Failure::failed("the journal's answer has no handle")),
            Err(failure) => Err(failure),
        })
    }

    /// Journals the answer of a `start-*` before the graph gets it.
    pub(super) fn record_start(
        &mut self,
        call: Call,
        what: String,
        digest: String,
        answer: Result<u32, Failure>,
    ) -> Result<u32, Failure> {
        if self.run.recorder().is_none() {
            return answer;
        }
        let entry = Entry::Start {
            path: self.path_vec(),
            seq: self.next_seq(),
            call,
            what,
            digest,
            handle: answer.as_ref().ok().copied(),
            error: answer.as_ref().err().map(Failed::from),
            t: (call == Call::Sleep).then(|| self.run.clock.now().monotonic_ms),
        };
        self.run.record(&entry)?;
        answer
    }

    /// A `wait-any` answered by the replay.
    pub(super) fn replay_wait(&mut self, handles: &[u32]) -> Option<(u32, Outcome)> {
        let mut asked = handles.to_vec();
        asked.sort_unstable();
        let this = format!(" (of handles {handles:?})");
        let answer = self.replay(Call::Wait, &this, |entry| match entry {
            Entry::Wait { handles: h, .. } => {
                let mut recorded = h.clone();
                recorded.sort_unstable();
                (recorded != asked)
                    .then(|| format!("was made where the journal's await was of handles {h:?}"))
            }
            _ => Some("was made where the journal holds another call".to_owned()),
        })?;
        let first = handles.first().copied().unwrap_or(0);
        if let Ok(Some(Entry::Wait { handle, .. })) = &answer {
            self.in_flight.remove(handle);
        }
        Some(match answer {
            Ok(Some(Entry::Wait {
                handle, ok, error, ..
            })) => match (ok, error) {
                (Some(ok), _) => (handle, Ok(ok)),
                (None, Some(error)) => (handle, Err(error.into())),
                (None, None) => (
                    handle,
                    Err(Failure::failed("the journal's answer is empty")),
                ),
            },
            Ok(_) => (first, Err(Failure::failed("the journal's answer is empty"))),
            Err(failure) => (first, Err(failure)),
        })
    }

    /// Journals a `wait-any`'s pair before the graph gets it.
    pub(super) fn record_wait(
        &mut self,
        handles: &[u32],
        answer: (u32, Outcome),
    ) -> (u32, Outcome) {
        if self.run.recorder().is_none() {
            return answer;
        }
        let (handle, outcome) = &answer;
        let entry = Entry::Wait {
            path: self.path_vec(),
            seq: self.next_seq(),
            handles: handles.to_vec(),
            handle: *handle,
            ok: outcome.as_ref().ok().cloned(),
            error: outcome.as_ref().err().map(Failed::from),
        };
        match self.run.record(&entry) {
            Ok(()) => answer,
            Err(failure) => (*handle, Err(failure)),
        }
    }

    /// A `clock-now` answered by the replay (after a divergence: the epoch).
    pub(super) fn replay_clock(&mut self) -> Option<ClockReading> {
        let answer = self.replay(Call::Clock, "", |_| None)?;
        Some(match answer {
            Ok(Some(Entry::Clock {
                wall_ms,
                monotonic_ms,
                ..
            })) => ClockReading {
                wall_ms,
                monotonic_ms,
            },
            _ => ClockReading {
                wall_ms: 0,
                monotonic_ms: 0,
            },
        })
    }

    /// Journals a clock reading.
    pub(super) fn record_clock(&mut self, reading: ClockReading) -> ClockReading {
        if self.run.recorder().is_some() {
            let entry = Entry::Clock {
                path: self.path_vec(),
                seq: self.next_seq(),
                wall_ms: reading.wall_ms,
                monotonic_ms: reading.monotonic_ms,
            };
            let _ = self.run.record(&entry);
        }
        reading
    }

    /// A `tokens-used` answered by the replay.
    pub(super) fn replay_tokens(&mut self) -> Option<u64> {
        let answer = self.replay(Call::Tokens, "", |_| None)?;
        Some(match answer {
            Ok(Some(Entry::Tokens { used, .. })) => used,
            _ => 0,
        })
    }

    /// Journals a `tokens-used` answer.
    pub(super) fn record_tokens(&mut self, used: u64) -> u64 {
        if self.run.recorder().is_some() {
            let entry = Entry::Tokens {
                path: self.path_vec(),
                seq: self.next_seq(),
                used,
            };
            let _ = self.run.record(&entry);
        }
        used
    }

    /// Journals (or, in a replay, checks) a `random-bytes` call of `n` bytes: the bytes are the
    /// graph's stream of the run's seed, the same in the replay.
    pub(super) fn journal_random(&mut self, n: usize) {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        let this = format!(" ({n} bytes)");
        let replayed = self.replay(Call::Random, &this, |entry| match entry {
            Entry::Random { n: recorded, .. } if *recorded == n => None,
            Entry::Random { n: recorded, .. } => Some(format!(
                "was made where the journal's call took {recorded} bytes"
            )),
            _ => Some("was made where the journal holds another call".to_owned()),
        });
        if replayed.is_some() || self.run.recorder().is_none() {
            return;
        }
        let entry = Entry::Random {
            path: self.path_vec(),
            seq: self.next_seq(),
            n,
        };
        let _ = self.run.record(&entry);
    }

    /// Journals a `log` call (its line is the trace event that follows).
    pub(super) fn journal_log(&mut self) {
        if self.replay(Call::Log, "", |_| None).is_some() || self.run.recorder().is_none() {
            return;
        }
        let entry = Entry::Log {
            path: self.path_vec(),
            seq: self.next_seq(),
            t: self.run.clock.now().monotonic_ms,
        };
        let _ = self.run.record(&entry);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use crate::host::journal::{JournalMode, JournalSink, Recorder};
    use crate::run::{RunOptions, RunRequest, RunStatus, run_graph};

    /// A sink that takes `room` lines, then fails as a full disk does.
    struct Filling {
        room: usize,
        taken: AtomicUsize,
    }

    impl JournalSink for Filling {
        fn append(&self, _: &str) -> std::io::Result<()> {
            if self.taken.fetch_add(1, Ordering::SeqCst) < self.room {
                Ok(())
            } else {
                Err(std::io::Error::other("the disk is full"))
            }
        }
        fn finish(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A journal that stops taking entries mid-run stops the run at its next host call: no
    /// agent starts unrecorded, and the run fails naming the journal.
    #[tokio::test]
    async fn a_journal_that_fails_mid_run_stops_the_run() {
        let script = "export const meta = {name: 'S', slug: 's', version: '1'};\n\
            export default async function (args, g) {\n\
              for (let i = 0; i < 10; i++) await g.agent({prompt: `step ${i}`});\n\
              return 'all ten';\n\
            }";
        let mut options = RunOptions::new(Arc::new(crate::engine::boa::BoaEngine::default()));
        let replies = serde_json::json!({"default": {"text": "ok", "tokens": 10}});
        options.provider =
            Arc::new(crate::host::mock::MockProvider::from_json(replies).expect("replies"));
        let sink = Arc::new(Filling {
            room: 12,
            taken: AtomicUsize::new(0),
        });
        options.journal = Some(JournalMode::Record(Recorder::new(sink)));
        let request = RunRequest {
            script: script.into(),
            args: serde_json::json!({}),
            graph: "s.js".to_owned(),
            run_id: None,
        };
        let outcome = run_graph(request, &options, Default::default()).await;
        assert_eq!(outcome.status, RunStatus::Failed, "{outcome:?}");
        let error = outcome.error.clone().unwrap_or_default();
        assert!(
            error.contains("cannot write the run's journal: the disk is full"),
            "{error}"
        );
        assert!(
            outcome.total_tokens < 50,
            "the run stopped early: {outcome:?}"
        );
    }
}
