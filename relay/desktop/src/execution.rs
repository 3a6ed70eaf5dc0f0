//! Executing a command: the start (the free-space floor, the history row, `started`), the run
//! (the engine under the control poll, the shutdown and the run reports) and the bound (the
//! outcome decided and bounded into the completion the service gets).

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use graph_js::Failure;
use runner::engine::Engine;
use runner::host::events::{Event as TraceEvent, EventKind, EventSink};
use runner::host::journal::{JournalMode, Recorder};
use runner::host::tools::ToolRegistry;
use runner::run::{RunOptions, RunOutcome, RunRequest, RunStatus, run_graph};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::api::{ApiError, DesktopApi, Started};
use crate::ended::Ended;
use crate::pass::PassState;
use crate::state::{Session, StateError, StateJournal};
use crate::trace::{Spent, TraceKeeper};
use crate::{Event, Relay, Tell, approver, bounding, catalog, report};
use relay_protocol::{
    CommandId, CompleteRequest, CompletionStatus, ControlResponse, EndCause, GraphSessionId,
    QueuedCommand,
};

/// Why a run was stopped from outside its graph: the cause its completion carries and the
/// words of its error.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stop {
    pub(crate) cause: EndCause,
    pub(crate) error: String,
}

impl Stop {
    /// A stop for `cause`, in its own words.
    pub(crate) fn of(cause: EndCause) -> Stop {
        Stop {
            cause,
            error: cause.describe().to_owned(),
        }
    }

    /// How a run stopped this way ends: `failed` when the relay stopped (the run did not
    /// choose to end and can be asked again), `cancelled` for every cancel and withdrawal.
    pub(crate) fn status(&self) -> CompletionStatus {
        if self.cause == EndCause::RelayStopped {
            CompletionStatus::Failed
        } else {
            CompletionStatus::Cancelled
        }
    }
}

/// The error of a run the relay's own stop ended (SIGTERM, Ctrl-C).
pub(crate) const RELAY_STOPPED: &str = "the desktop relay was stopped while this graph was running";

/// The command being executed, as the loop and the control poll see it.
#[derive(Clone)]
pub(crate) struct RunningCommand {
    pub(crate) id: CommandId,
    /// The project that started it, and the session and slug it runs: what the owner's
    /// consent must still cover while it runs.
    pub(crate) project: String,
    pub(crate) session: GraphSessionId,
    pub(crate) slug: String,
    cancel: CancellationToken,
    /// The first stop asked for; later ones change nothing.
    stop: Arc<OnceLock<Stop>>,
    /// The run's journal and whether the relay's stop closed it to resume the run later.
    resumable: Resumable,
}

/// A run's journal as the relay's stop sees it: closed before the run's end, it is kept for
/// the next start to resume (docs/journal.md), and the run is not reported.
#[derive(Clone, Default)]
pub(crate) struct Resumable {
    journal: Arc<OnceLock<Arc<Recorder>>>,
    kept: Arc<std::sync::atomic::AtomicBool>,
}

impl RunningCommand {
    fn new(id: CommandId, project: &str, command: &QueuedCommand) -> Self {
        Self {
            id,
            project: project.to_owned(),
            session: command.graph_session_id.clone(),
            slug: command.slug.clone(),
            cancel: CancellationToken::new(),
            stop: Arc::new(OnceLock::new()),
            resumable: Resumable::default(),
        }
    }

    /// The relay stops with resuming on: the run's journal is closed where it is (nothing the
    /// run does after this is journaled, and it stops at its next host call), so the next start
    /// resumes it. False when its end is journaled already: the run is over, and its outcome
    /// stands (a run that completed is not reported failed for a stop that came after it).
    fn keep_for_resume(&self) -> bool {
        let Some(recorder) = self.resumable.journal.get() else {
            return true;
        };
        if recorder.close() {
            self.resumable.kept.store(true, Ordering::SeqCst);
            return true;
        }
        // Not closed: ended, or the journal had failed before (then the stop ends the run).
        recorder.error().is_some()
    }

    /// Whether the relay's stop kept the run to be resumed at the next start.
    pub(crate) fn kept_for_resume(&self) -> bool {
        self.resumable.kept.load(Ordering::SeqCst)
    }

    /// The service asked to cancel (`cause`: who asked it, the agent when it does not say).
    /// The outcome is then `cancelled` whatever happens next.
    pub(crate) fn cancel(&self, cause: Option<EndCause>) {
        self.stop_with(Stop::of(cause.unwrap_or(EndCause::AgentCancelled)));
    }

    /// Stops the run once, for `stop`'s reason (the first reason given stands).
    pub(crate) fn stop_with(&self, stop: Stop) {
        let cause = stop.cause;
        if self.stop.set(stop).is_ok() {
            tracing::info!(command = %self.id, cause = %cause, "stopping the run");
        }
        self.cancel.cancel();
    }

    /// Why the run was stopped from outside, if it was.
    pub(crate) fn stopped(&self) -> Option<&Stop> {
        self.stop.get()
    }

    /// Whether a cancel (or a withdrawal) was seen: the run ends `cancelled` (long polls no
    /// longer watch the command then). The relay's own stop is not one.
    pub(crate) fn cancel_seen(&self) -> bool {
        self.stopped()
            .is_some_and(|stop| stop.status() == CompletionStatus::Cancelled)
    }
}

/// The trace sink of a stopped run: its last event says how the run really ends (a relay stop
/// is `failed`, a withdrawal names the owner), so the trace and the completion agree.
struct Agreeing {
    inner: Arc<dyn EventSink>,
    running: RunningCommand,
}

impl EventSink for Agreeing {
    fn emit(&self, event: &TraceEvent) {
        if let (
            EventKind::RunFinished {
                status,
                total_tokens,
                reported_cost,
                ..
            },
            Some(stop),
        ) = (&event.kind, self.running.stopped())
            && status == RunStatus::Cancelled.as_str()
        {
            let agreeing = TraceEvent {
                kind: EventKind::RunFinished {
                    status: relay_protocol::RunStatus::from(stop.status())
                        .as_str()
                        .to_owned(),
                    total_tokens: *total_tokens,
                    reported_cost: *reported_cost,
                    error: Some(stop.error.clone()),
                },
                ..event.clone()
            };
            return self.inner.emit(&agreeing);
        }
        self.inner.emit(event);
    }
}

/// One execution of a queued command on this desktop.
pub(crate) struct Execution {
    /// The execution id the service records with `started`.
    id: String,
    /// The log channel (`graph:external:<command id>`).
    channel: String,
    /// The command's cancel state.
    running: RunningCommand,
    /// The project that started it: its nested graphs are the sessions shared with it.
    project: String,
    /// Its token cap ([`crate::state::Session::run_token_cap`]).
    token_cap: Option<u64>,
    /// What the engine runs.
    request: RunRequest,
    /// The journal of the run this execution resumes (issue 46), if it resumes one.
    resume: Option<Arc<runner::host::journal::Journal>>,
}

/// How the service answered `started`, as the start step takes it.
pub(crate) enum StartAnswer {
    /// Run it (a replay of an earlier start under this execution counts).
    Go {
        /// Someone already asked to cancel: who (`None`: the service did not say).
        cancel_requested: Option<Option<EndCause>>,
    },
    /// Do not run it, for this reason.
    Refused(String),
    /// The relay stopped before the service answered.
    Stopped,
}

/// What a run left: its outcome, its trace for the history, and what became of a seen cancel
/// reported while the engine wound down.
pub(crate) struct Ran {
    outcome: RunOutcome,
    trace: Value,
    early: Early,
    /// The last limit the run met (its token cap, an approval denied or timed out).
    limit: Option<EndCause>,
}

/// A seen cancel's outcome, reported before the engine stopped.
#[derive(Clone)]
enum Early {
    /// Not reported early.
    None,
    /// The service settled it.
    Delivered,
    /// Posted without an answer: the service may hold it, so the run's end is this same
    /// completion (a repeat is then a replay, not a conflicting second outcome).
    Posted(Box<CompleteRequest>),
}

impl Relay {
    /// The start step: the execution's history row, then `started`, asked until the service
    /// answers, always with the same execution id (a replayed answer is a go, so a lost answer
    /// never strands the run), then the note that the graph begins. `None` when it does not
    /// run now: the service refused (cancelled while queued, or ended), or the relay stopped
    /// before it answered (then the command is handed back, or the next start does it).
    pub(crate) async fn start(
        &self,
        project: &str,
        command: &QueuedCommand,
        session: Session,
        shutdown: &CancellationToken,
    ) -> Result<Option<Execution>, StateError> {
        let execution_id = uuid::Uuid::new_v4().to_string();
        let id = command.command_id;
        let channel = format!("graph:external:{id}");
        let (begun, begun_project, begun_command, now) = (
            execution_id.clone(),
            project.to_owned(),
            command.clone(),
            self.clock.now(),
        );
        self.state
            .call(move |state| state.begin_command(&begun, &begun_project, &begun_command, now))
            .await?;
        let token_cap = session.run_token_cap(self.config.token_cap, command.max_tokens);
        let cancel_requested = match self
            .started_until_answered(&id, &execution_id, token_cap, None, shutdown)
            .await
        {
            StartAnswer::Go { cancel_requested } => cancel_requested,
            StartAnswer::Refused(reason) => {
                tracing::info!(%channel, "the service says not to run it: {reason}");
                return self.forget_execution(execution_id).await;
            }
            StartAnswer::Stopped => {
                // The start may have landed: hand it back now if the service answers, else
                // the next start of the relay does.
                self.hand_back(&id, &execution_id).await;
                return Ok(None);
            }
        };
        let (began, now) = (execution_id.clone(), self.clock.now());
        if let Err(e) = self
            .state
            .call(move |state| state.mark_began(&began, now))
            .await
        {
            // Unnoted, a stop now would hand back a run that ran: it does not run now.
            tracing::error!(%channel, "cannot note that the run begins, handing it back: {e}");
            self.hand_back(&id, &execution_id).await;
            return Err(e);
        }
        tracing::info!(%channel, slug = %session.slug, execution = %execution_id, "running");
        let running = RunningCommand::new(id, project, command);
        if let Some(cause) = cancel_requested {
            running.cancel(cause);
        }
        let request = RunRequest {
            script: session.script.clone().into(),
            args: Value::Object(command.arguments.clone()),
            graph: session.slug.clone(),
            run_id: Some(execution_id.clone()),
        };
        Ok(Some(Execution {
            id: execution_id,
            channel,
            running,
            project: project.to_owned(),
            token_cap,
            request,
            resume: None,
        }))
    }

    /// An interrupted execution resumed from its `journal`, under its own id: the service said
    /// to go on with it (`started` again with that id).
    pub(crate) fn resumed_execution(
        &self,
        history: &crate::state::HistoryRow,
        session: &Session,
        journal: runner::host::journal::Journal,
        token_cap: Option<u64>,
        command_id: CommandId,
    ) -> Execution {
        let running = RunningCommand {
            id: command_id,
            project: history.project_id.clone(),
            session: session.id.clone(),
            slug: session.slug.clone(),
            cancel: CancellationToken::new(),
            stop: Arc::new(OnceLock::new()),
            resumable: Resumable::default(),
        };
        Execution {
            id: history.execution_id.clone(),
            channel: history.channel.clone(),
            running,
            project: history.project_id.clone(),
            token_cap,
            request: RunRequest {
                script: session.script.clone().into(),
                args: journal.header.args.clone(),
                graph: session.slug.clone(),
                run_id: Some(history.execution_id.clone()),
            },
            resume: Some(Arc::new(journal)),
        }
    }

    async fn forget_execution(
        &self,
        execution_id: String,
    ) -> Result<Option<Execution>, StateError> {
        self.state
            .call(move |state| state.forget_execution(&execution_id))
            .await?;
        Ok(None)
    }

    /// Asks `started` with the same execution id until the service answers it, waiting
    /// [`crate::DesktopConfig::call_retry`] (doubling up to the poll interval, and at least
    /// what a `Retry-After` asks) between tries, until the relay stops. `resumed` says the
    /// execution resumes from its journal.
    pub(crate) async fn started_until_answered(
        &self,
        id: &CommandId,
        execution_id: &str,
        token_cap: Option<u64>,
        resumed: Option<relay_protocol::ResumedRun>,
        shutdown: &CancellationToken,
    ) -> StartAnswer {
        let mut wait = self.config.call_retry;
        loop {
            let error = match self.api.started(id, execution_id, token_cap, resumed).await {
                Ok(Started::Go {
                    cancel_requested,
                    cancel_cause,
                }) => {
                    return StartAnswer::Go {
                        cancel_requested: cancel_requested.then_some(cancel_cause),
                    };
                }
                Ok(Started::Refused(reason)) => return StartAnswer::Refused(reason),
                Err(e) if !e.is_retryable() => return StartAnswer::Refused(e.to_string()),
                Err(e) => e,
            };
            let pause = wait.max(error.retry_after().unwrap_or_default());
            tracing::warn!(command = %id, execution = execution_id, "no answer to `started` yet, asking again in {pause:?}: {error}");
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = shutdown.cancelled() => return StartAnswer::Stopped,
            }
            wait = (wait * 2).min(self.config.poll_interval.max(self.config.call_retry));
        }
    }

    /// The run step: runs the graph with the control poll, the run reports, the token writer
    /// and the shutdown watching it, telling the loop while it runs.
    pub(crate) async fn execute(
        &self,
        pass: &mut PassState,
        execution: &Execution,
        tell: &Tell,
        shutdown: &CancellationToken,
    ) -> Ran {
        let running = &execution.running;
        tell.send(Event::Running(Some(running.clone())));
        let reporter = Arc::new(report::RunReporter::new(&execution.id, execution.token_cap));
        let trace = Arc::new(TraceKeeper::reporting(reporter.clone()));
        let mut watchers = tokio::task::JoinSet::new();
        watchers.spawn(control_poll(
            self.api.clone(),
            running.clone(),
            self.config.control_interval,
        ));
        watchers.spawn(stop_on(
            shutdown.clone(),
            running.clone(),
            self.config.resume,
        ));
        // What the run waits for and how far it got, told to the service as it changes (and a
        // cancel its answers carry stops the run, as the control poll's does).
        let heard = running.clone();
        watchers.spawn(reporter.clone().send_watching(
            self.api.clone(),
            running.id,
            self.config.report_interval,
            move |cause| heard.cancel(cause),
        ));
        watchers.spawn(trace.record_tokens(self.state.clone(), execution.id.clone()));
        let options = self.run_options(trace.clone(), execution, reporter).await;
        self.stats.executed.fetch_add(1, Ordering::Relaxed);
        let run = run_graph(execution.request.clone(), &options, running.cancel.clone());
        tokio::pin!(run);
        // In long-poll mode a seen cancel is reported at once (the outcome is decided the moment
        // the cancel is seen), while the engine winds down; the next command still waits for it.
        let early = if self.config.long_poll.is_some() {
            tokio::select! {
                // A run the cancel ended is ready with it: the cancel is told first, so its
                // report never depends on which of the two the select happens to poll first.
                biased;
                () = running.cancel.cancelled(), if !shutdown.is_cancelled() => None,
                outcome = &mut run => Some(outcome),
            }
        } else {
            Some((&mut run).await)
        };
        let reported_early = if early.is_none() && running.cancel_seen() {
            self.report_cancel_early(pass, execution, trace.spent())
                .await
        } else {
            Early::None
        };
        let outcome = match early {
            Some(outcome) => outcome,
            None => run.await,
        };
        watchers.abort_all();
        tell.send(Event::Running(None));
        Ran {
            outcome,
            trace: trace.to_json(),
            early: reported_early,
            limit: trace.limit_met(),
        }
    }

    /// Posts the `cancelled` outcome of a run whose cancel was seen, before its engine stopped,
    /// with who stopped it and what it spent so far; says whether the service settled it (if
    /// not, that same completion goes through the outbox: its answer may have been lost after
    /// the service took it).
    async fn report_cancel_early(
        &self,
        pass: &mut PassState,
        execution: &Execution,
        spent: Spent,
    ) -> Early {
        let stop = execution
            .running
            .stopped()
            .cloned()
            .unwrap_or_else(|| Stop::of(EndCause::AgentCancelled));
        let completion = bounding::completion(
            &execution.id,
            stop.status(),
            None,
            spent.tokens,
            spent.cost,
            Some(&stop.error),
        );
        let completion = CompleteRequest {
            finished_at: Some(self.clock.now()),
            cause: Some(stop.cause),
            ..completion
        };
        tracing::info!(channel = %execution.channel, "cancel seen: reporting the outcome while the engine stops");
        if self
            .deliver(pass, &execution.running.id, &completion, 0)
            .await
        {
            Early::Delivered
        } else {
            Early::Posted(Box::new(completion))
        }
    }

    /// The engine a run of `script` starts on: its compiled graph when compiled graphs are on
    /// and it is ready (never waiting for a build), else the runtime's engine.
    fn engine_for(&self, script: &Arc<str>) -> Arc<dyn Engine> {
        match &self.compiled {
            Some(compiled) => compiled.engine_for(script),
            None => self.runtime.engine.clone(),
        }
    }

    async fn run_options(
        &self,
        trace: Arc<TraceKeeper>,
        execution: &Execution,
        reporter: Arc<report::RunReporter>,
    ) -> RunOptions {
        let mut options = RunOptions::new(self.engine_for(&execution.request.script));
        options.provider = self.runtime.provider.clone();
        options.tools = self.tools().await;
        options.policy = match self.state.call(|state| state.policy()).await {
            Ok(policy) => policy,
            Err(e) => {
                // Every tool is then denied, which the run reports: safe, and said.
                tracing::error!(channel = %execution.channel, "cannot read the tool policies, so every tool is denied in this run: {e}");
                runner::host::approvals::ApprovalPolicy::default()
            }
        };
        options.approver = Arc::new(
            approver::OwnerApprover::new(self.state.clone(), self.clock.clone())
                .reporting(reporter, self.config.approval_timeout),
        );
        options.approval_timeout = self.config.approval_timeout;
        options.catalog = Arc::new(catalog::SharedCatalog::new(
            self.state.clone(),
            &execution.project,
        ));
        options.token_cap = execution.token_cap;
        options.max_concurrency = self.config.max_concurrency;
        options.timeout = self.config.graph_timeout;
        options.journal = self.journal_of(execution);
        options.events = Arc::new(Agreeing {
            inner: Arc::new(runner::host::events::FanOut(vec![
                self.runtime.events.clone(),
                trace,
            ])),
            running: execution.running.clone(),
        });
        options
    }

    /// The run's journal, written to the desktop state (docs/journal.md). A state that cannot
    /// start it leaves the run unrecorded, said in the log.
    fn journal_of(&self, execution: &Execution) -> Option<JournalMode> {
        match StateJournal::new(self.state.blocking().clone(), &execution.id) {
            Ok(sink) => {
                let recorder = Recorder::new(Arc::new(sink));
                let _ = execution.running.resumable.journal.set(recorder.clone());
                Some(match &execution.resume {
                    Some(journal) => JournalMode::Resume {
                        replayer: runner::host::journal::Replayer::resuming(journal),
                        recorder,
                    },
                    None => JournalMode::Record(recorder),
                })
            }
            Err(e) => {
                tracing::error!(channel = %execution.channel, "cannot start the run's journal in the desktop state, so this run is not recorded: {e}");
                None
            }
        }
    }

    /// The fs tools over the configured folder (the relay's `--folder`, else the stored one).
    async fn tools(&self) -> ToolRegistry {
        let folder = match &self.config.folder {
            Some(folder) => Ok(Some(folder.clone())),
            None => self.state.call(|state| state.folder()).await,
        };
        match folder {
            Ok(Some(folder)) => ToolRegistry::standard(Some(folder)).unwrap_or_else(|e| {
                tracing::warn!("the fs tools are unavailable: {e}");
                ToolRegistry::with_unusable_folder(Failure::failed(format!(
                    "{}; choose another with `relay desktop folder DIR`",
                    e.message
                )))
            }),
            Ok(None) => ToolRegistry::with_unusable_folder(Failure::invalid(
                "no folder is set for the fs tools on this desktop; its owner sets one with `relay desktop folder DIR`",
            )),
            Err(e) => ToolRegistry::with_unusable_folder(Failure::failed(format!(
                "the desktop cannot read which folder the fs tools may use ({e}); try the run again"
            ))),
        }
    }
}

impl Execution {
    /// The run's end to record and post, or `None` when the relay's stop kept the run to be
    /// resumed at the next start (then nothing is posted and its execution stays running in
    /// the state, with its journal).
    pub(crate) fn end(&self, ran: Ran, shutdown: &CancellationToken) -> Option<Ended> {
        if self.running.kept_for_resume() {
            tracing::warn!(channel = %self.channel, execution = %self.id, "1 run interrupted; it resumes at the next start");
            return None;
        }
        Some(self.bound(ran, shutdown))
    }

    /// The bound step: once a stop was asked for, the outcome is the stop's (`cancelled` for a
    /// cancel or a withdrawal, even if the graph finished between the flag and the stop;
    /// `failed` for the relay's own stop), with its cause; a run that failed on a limit says
    /// which; the result and error are bounded (all or nothing).
    pub(crate) fn bound(&self, ran: Ran, shutdown: &CancellationToken) -> Ended {
        let outcome = ran.outcome;
        let stopped = self.running.stopped().cloned().or_else(|| {
            (shutdown.is_cancelled() && outcome.status == RunStatus::Cancelled).then(|| Stop {
                cause: EndCause::RelayStopped,
                error: RELAY_STOPPED.to_owned(),
            })
        });
        let (status, error, cause) = match stopped {
            Some(stop) => (stop.status(), Some(stop.error), Some(stop.cause)),
            None => {
                let status = match outcome.status {
                    RunStatus::Completed => CompletionStatus::Completed,
                    RunStatus::Failed => CompletionStatus::Failed,
                    RunStatus::Cancelled => CompletionStatus::Cancelled,
                };
                let cause = (status == CompletionStatus::Failed)
                    .then(|| failure_cause(outcome.error.as_deref(), ran.limit))
                    .flatten();
                (status, outcome.error.clone(), cause)
            }
        };
        let result = (status == CompletionStatus::Completed)
            .then(|| outcome.result.clone())
            .flatten();
        let mut completion = bounding::completion(
            &self.id,
            status,
            result,
            outcome.total_tokens,
            outcome.reported_cost,
            error.as_deref(),
        );
        completion.cause = cause;
        let cancelled = completion.status == CompletionStatus::Cancelled;
        if let (true, Early::Posted(posted)) = (cancelled, ran.early.clone()) {
            completion = *posted;
        }
        tracing::info!(channel = %self.channel, status = ?completion.status, truncated = completion.result_truncated, "finished");
        Ended {
            full_result: outcome.result,
            trace: Some(ran.trace),
            // Already delivered: the history keeps the final figures.
            delivered: cancelled && matches!(ran.early, Early::Delivered),
            ..Ended::new(self.running.id, completion)
        }
    }
}

/// The cause of a run that failed on its own: its deadline or its token cap (the runner's
/// words), else the last limit it met (the failure came after it).
fn failure_cause(error: Option<&str>, limit: Option<EndCause>) -> Option<EndCause> {
    if error.is_some_and(|e| e.contains("wall-clock deadline exceeded")) {
        return Some(EndCause::TimedOut);
    }
    if error.is_some_and(|e| e.contains("budget_exhausted") || e.contains("token cap reached")) {
        return Some(EndCause::TokenCap);
    }
    limit
}

/// Reads the cancel flag every `interval` (or after the wait the service asked for) until it
/// is set; then stops the run, once, with who asked.
async fn control_poll(api: DesktopApi, running: RunningCommand, interval: std::time::Duration) {
    let id = running.id;
    let mut wait = interval;
    loop {
        tokio::time::sleep(wait).await;
        wait = interval;
        match api.control(&id).await {
            Ok(ControlResponse {
                cancel_requested: true,
                cancel_cause,
            }) => {
                running.cancel(cancel_cause);
                return;
            }
            Ok(_) => {}
            Err(e) => {
                wait = wait.max(e.retry_after().unwrap_or_default());
                if matches!(e, ApiError::Unreachable(_)) {
                    tracing::debug!(command = %id, "control poll failed, trying again: {e}");
                } else {
                    tracing::warn!(command = %id, "control poll refused, trying again in {wait:?}: {e}");
                }
            }
        }
    }
}

/// Stops the run when the relay stops; with `resume`, its journal is closed first, so the run
/// stays in the state to be resumed at the next start.
async fn stop_on(shutdown: CancellationToken, running: RunningCommand, resume: bool) {
    shutdown.cancelled().await;
    if resume && !running.keep_for_resume() {
        return;
    }
    running.stop_with(Stop {
        cause: EndCause::RelayStopped,
        error: RELAY_STOPPED.to_owned(),
    });
}

#[cfg(test)]
mod stops {
    use super::*;
    use crate::api::{BoxFuture, Transport, TransportError};

    /// Answers every request 200 with `body`.
    struct Answers(&'static str);

    impl Transport for Answers {
        fn send(
            &self,
            _request: http::Request<Vec<u8>>,
        ) -> BoxFuture<'_, Result<http::Response<Vec<u8>>, TransportError>> {
            let body = self.0.as_bytes().to_vec();
            Box::pin(async move {
                http::Response::builder()
                    .status(200)
                    .body(body)
                    .map_err(|e| TransportError(e.to_string()))
            })
        }
    }

    fn running() -> RunningCommand {
        let command = QueuedCommand {
            command_id: CommandId::new_random(),
            graph_session_id: crate::state::new_session_id(),
            slug: "a".into(),
            arguments: serde_json::Map::new(),
            created_at: relay_protocol::clock::Timestamp::from_unix_millis(1),
            agent_id: None,
            agent_name: None,
            max_tokens: None,
        };
        RunningCommand::new(command.command_id, "p", &command)
    }

    fn api(body: &'static str) -> DesktopApi {
        DesktopApi::new(
            Arc::new(Answers(body)),
            "grd_0123456789abcdef0123456789abcdef",
        )
    }

    /// The owner's console cancel is told as the owner's, not the agent's; a service that does
    /// not say who asked means the agent, as before.
    #[tokio::test(start_paused = true)]
    async fn a_control_answer_names_who_cancelled() {
        let console = running();
        control_poll(
            api(r#"{"cancel_requested":true,"cancel_cause":"owner_cancelled_console"}"#),
            console.clone(),
            std::time::Duration::from_secs(1),
        )
        .await;
        assert_eq!(
            console.stopped(),
            Some(&Stop::of(EndCause::OwnerCancelledConsole))
        );
        assert!(console.cancel_seen());
        assert_eq!(
            console.stopped().map(|s| s.error.as_str()),
            Some("Cancelled by the owner in the console")
        );
        let agent = running();
        control_poll(
            api(r#"{"cancel_requested":true}"#),
            agent.clone(),
            std::time::Duration::from_secs(1),
        )
        .await;
        assert_eq!(agent.stopped(), Some(&Stop::of(EndCause::AgentCancelled)));
    }

    /// The first reason stands; the relay's own stop ends a run `failed`, not cancelled.
    #[test]
    fn the_first_stop_stands_and_a_relay_stop_is_no_cancel() {
        let stopped = running();
        stopped.stop_with(Stop {
            cause: EndCause::RelayStopped,
            error: RELAY_STOPPED.into(),
        });
        stopped.stop_with(Stop::of(EndCause::OwnerCancelledDesktop));
        assert_eq!(
            stopped.stopped().map(|s| s.cause),
            Some(EndCause::RelayStopped)
        );
        assert!(!stopped.cancel_seen());
        assert_eq!(
            stopped.stopped().map(Stop::status),
            Some(CompletionStatus::Failed)
        );
        assert!(stopped.cancel.is_cancelled());
    }

    #[test]
    fn a_failure_on_a_limit_names_it() {
        assert_eq!(
            failure_cause(
                Some("wall-clock deadline exceeded: the run took longer than 1 s (--timeout)"),
                None
            ),
            Some(EndCause::TimedOut)
        );
        assert_eq!(
            failure_cause(Some("boom"), Some(EndCause::TokenCap)),
            Some(EndCause::TokenCap)
        );
        assert_eq!(failure_cause(Some("boom"), None), None);
    }
}
