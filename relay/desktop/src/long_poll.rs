//! Long-poll mode: one held `sync` per enabled project, asked again as soon as it ends. The
//! service answers at once when work is queued for the project or the running command is
//! cancelled, so work starts and cancels land in a round trip instead of a poll interval. The
//! loop keeps each project's poll ([`Polls`]) and starts one task per request ([`poll`]),
//! which reads the project's snapshot (only when its sharing version moved since the service
//! took it), asks, and hands the answer back to the loop.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use relay_protocol::{CommandId, DesktopProblem, SyncRequest};
use tokio::task::AbortHandle;

use crate::api::ApiError;
use crate::jitter::Jitter;
use crate::state::{Session, Snapshot};
use crate::{Event, LONG_POLL_RETRY, LONG_POLL_RETRY_CAP, Relay, Tell, consent};

/// Every enabled project's long poll, as the loop keeps them.
pub(crate) struct Polls {
    /// How long the service may hold each (`None`: long-poll mode is off).
    wait: Option<Duration>,
    /// Where each poll's reconnect jitter comes from ([`crate::DesktopConfig::jitter_seed`]).
    jitter_seed: Option<u64>,
    polls: HashMap<String, Poll>,
    /// Numbers every request, so the answer of one the loop gave up on is told apart.
    requests: u64,
}

/// One project's long poll.
struct Poll {
    /// The request under way (or waiting to be sent).
    request: u64,
    task: Option<AbortHandle>,
    /// Waiting out a failure: not asked again early when the running command changes.
    backing_off: bool,
    /// The next wait after a failure (doubling up to [`LONG_POLL_RETRY_CAP`]).
    retry: Duration,
    jitter: Jitter,
    /// Queued commands already handed to a pass: they do not end the next long poll.
    known: Vec<CommandId>,
    /// The sharing version the service last took this project's snapshot at; the sessions
    /// are sent again only when it moves (and after a failed sync).
    uploaded: Option<i64>,
}

/// One long-poll request to send.
#[derive(Clone)]
pub(crate) struct Ask {
    project: String,
    request: u64,
    /// Wait this long first (after a failure).
    delay: Duration,
    wait: Duration,
    known: Vec<CommandId>,
    uploaded: Option<i64>,
    /// The command running now (unless its cancel was seen), filled in by the loop.
    pub(crate) running: Option<CommandId>,
    /// Why no run starts now, filled in by the loop.
    pub(crate) problem: Option<DesktopProblem>,
}

/// A long poll's end, for the loop.
pub(crate) struct Answered {
    project: String,
    request: u64,
    outcome: Outcome,
}

enum Outcome {
    /// The service answered; the snapshot it holds is at `version` when one was sent.
    Answered {
        version: Option<i64>,
        queued: Vec<CommandId>,
        cancel_requested: Vec<CommandId>,
    },
    /// No answer, or a refusal.
    Failed(ApiError),
    /// The project's withdrawal is owed: the next pass sends it, then the poll goes on.
    Withheld,
}

/// What the loop does about an answer.
pub(crate) struct Handled {
    /// Commands the agent asked to cancel.
    pub(crate) cancel_requested: Vec<CommandId>,
    /// A queued command not seen before: run a pass now.
    pub(crate) news: bool,
    /// The next request.
    pub(crate) next: Vec<Ask>,
}

impl Polls {
    /// No polls yet; `wait` is the long-poll mode's hold (`None`: off).
    pub(crate) fn new(wait: Option<Duration>, jitter_seed: Option<u64>) -> Self {
        Polls {
            wait,
            jitter_seed,
            polls: HashMap::new(),
            requests: 0,
        }
    }

    /// Whether long-poll mode is on.
    pub(crate) fn on(&self) -> bool {
        self.wait.is_some()
    }

    /// Stops the polls of projects no longer enabled; returns the first requests of the newly
    /// enabled ones.
    pub(crate) fn follow(&mut self, enabled: &[String]) -> Vec<Ask> {
        if !self.on() {
            return Vec::new();
        }
        self.polls.retain(|project, poll| {
            let keep = enabled.contains(project);
            if !keep && let Some(task) = &poll.task {
                task.abort();
            }
            keep
        });
        let mut asks = Vec::new();
        for project in enabled {
            if self.polls.contains_key(project) {
                continue;
            }
            self.polls.insert(
                project.clone(),
                Poll {
                    request: 0,
                    task: None,
                    backing_off: false,
                    retry: LONG_POLL_RETRY,
                    jitter: Jitter::new(self.jitter_seed),
                    known: Vec::new(),
                    uploaded: None,
                },
            );
            asks.extend(self.ask(project, Duration::ZERO));
        }
        asks
    }

    /// The running command changed: every poll under way is asked again at once, naming what
    /// runs now (those waiting out a failure keep waiting).
    pub(crate) fn reissue(&mut self) -> Vec<Ask> {
        let projects: Vec<String> = self
            .polls
            .iter()
            .filter(|(_, poll)| !poll.backing_off)
            .map(|(project, _)| project.clone())
            .collect();
        let mut asks = Vec::new();
        for project in projects {
            if let Some(task) = self.polls.get_mut(&project).and_then(|p| p.task.take()) {
                task.abort();
            }
            asks.extend(self.ask(&project, Duration::ZERO));
        }
        asks
    }

    /// Notes the task that sends `ask`.
    pub(crate) fn started(&mut self, ask: &Ask, task: AbortHandle) {
        match self.polls.get_mut(&ask.project) {
            Some(poll) if poll.request == ask.request => poll.task = Some(task),
            _ => task.abort(),
        }
    }

    /// Takes a poll's end; `None` for the answer of a request given up on.
    pub(crate) fn answered(&mut self, answered: Answered) -> Option<Handled> {
        let Answered {
            project,
            request,
            outcome,
        } = answered;
        let poll = self.polls.get_mut(&project)?;
        if poll.request != request {
            return None;
        }
        poll.task = None;
        let (handled, delay) = match outcome {
            Outcome::Answered {
                version,
                queued,
                cancel_requested,
            } => {
                poll.retry = LONG_POLL_RETRY;
                poll.backing_off = false;
                if version.is_some() {
                    poll.uploaded = version;
                }
                let news = queued.iter().any(|id| !poll.known.contains(id));
                poll.known = queued;
                let handled = Handled {
                    cancel_requested,
                    news,
                    next: Vec::new(),
                };
                (handled, Duration::ZERO)
            }
            Outcome::Failed(error) => {
                poll.uploaded = None;
                let delay = poll.back_off(error.retry_after());
                tracing::warn!(project, "long poll failed, retrying in {delay:?}: {error}");
                (Handled::nothing(), delay)
            }
            Outcome::Withheld => {
                let delay = poll.back_off(None);
                tracing::debug!(
                    project,
                    "the project's withdrawal is owed: its long poll waits {delay:?} for a pass to deliver it"
                );
                (Handled::nothing(), delay)
            }
        };
        Some(Handled {
            next: self.ask(&project, delay).into_iter().collect(),
            ..handled
        })
    }

    /// The next request of `project`'s poll, after `delay`.
    fn ask(&mut self, project: &str, delay: Duration) -> Option<Ask> {
        let wait = self.wait?;
        let poll = self.polls.get_mut(project)?;
        self.requests += 1;
        poll.request = self.requests;
        Some(Ask {
            project: project.to_owned(),
            request: poll.request,
            delay,
            wait,
            known: poll.known.clone(),
            uploaded: poll.uploaded,
            running: None,
            problem: None,
        })
    }
}

impl Poll {
    /// The wait before asking again after a failure: the doubling retry, spread by jitter so
    /// many desktops that lost the service at once (a restart) do not all come back in the
    /// same instant, and never shorter than the service asked for.
    fn back_off(&mut self, asked: Option<Duration>) -> Duration {
        let spread = self.jitter.spread(self.retry);
        self.retry = (self.retry * 2).min(LONG_POLL_RETRY_CAP);
        self.backing_off = true;
        asked.map_or(spread, |asked| spread.max(asked))
    }
}

impl Handled {
    fn nothing() -> Self {
        Handled {
            cancel_requested: Vec::new(),
            news: false,
            next: Vec::new(),
        }
    }
}

/// Sends one long-poll request (after its delay) and hands its end to the loop.
pub(crate) async fn poll(relay: Arc<Relay>, tell: Tell, ask: Ask) {
    if !ask.delay.is_zero() {
        tokio::time::sleep(ask.delay).await;
    }
    let outcome = relay.ask(&tell, &ask).await;
    tell.send(Event::LongPolled(Answered {
        project: ask.project,
        request: ask.request,
        outcome,
    }));
}

impl Relay {
    /// One long-poll `sync`: the project's snapshot unless the service holds it already, the
    /// running command, and the queued commands already handed to a pass.
    async fn ask(&self, tell: &Tell, ask: &Ask) -> Outcome {
        let (project, uploaded) = (ask.project.clone(), ask.uploaded);
        let snapshot = self
            .state
            .call(move |state| state.snapshot_since(&project, uploaded))
            .await;
        let (sessions, version) = match snapshot {
            Ok(Snapshot::Withheld) => return Outcome::Withheld,
            Ok(Snapshot::Unchanged { version }) => (None, Some(version)),
            Ok(Snapshot::Current { version, sessions }) => (
                Some(sessions.iter().map(Session::meta).collect()),
                Some(version),
            ),
            Err(e) => {
                // The poll still waits for work; the next pass sends the snapshot.
                tracing::error!(project = %ask.project, "cannot read the shared sessions, asking without them: {e}");
                (None, None)
            }
        };
        let request = SyncRequest {
            project_id: ask.project.clone(),
            sessions_unchanged: sessions.is_none(),
            sharing_version: sessions
                .is_some()
                .then(|| version.and_then(|v| u64::try_from(v).ok()))
                .flatten(),
            sessions: sessions.unwrap_or_default(),
            wait_ms: Some(u64::try_from(ask.wait.as_millis()).unwrap_or(u64::MAX)),
            running: ask.running.into_iter().collect(),
            known: ask.known.clone(),
            problem: ask.problem.clone(),
        };
        match self.sync(tell, &request).await {
            Ok(answer) => {
                let (queued, cancel_requested) = consent::named_ids(&answer);
                self.take_commands(&ask.project, answer.commands, false);
                Outcome::Answered {
                    version,
                    queued,
                    cancel_requested,
                }
            }
            Err(e) => Outcome::Failed(e),
        }
    }
}
