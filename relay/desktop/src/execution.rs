//! Executing a command: the start (the free-space floor, the history row, `started`), the run
//! (the engine under the control poll, the shutdown and the run reports) and the bound (the
//! outcome decided and bounded into the completion the service gets).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use graph_js::Failure;
use runner::engine::Engine;
use runner::host::tools::ToolRegistry;
use runner::run::{RunOptions, RunOutcome, RunRequest, RunStatus, run_graph};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::api::{ApiError, DesktopApi, Started};
use crate::ended::Ended;
use crate::pass::PassState;
use crate::state::{Session, StateError};
use crate::trace::TraceKeeper;
use crate::{Event, Relay, Tell, approver, bounding, catalog, report};
use relay_protocol::{CommandId, CompleteRequest, CompletionStatus, QueuedCommand};

/// The command being executed, as the loop and the control poll see it.
#[derive(Clone)]
pub(crate) struct RunningCommand {
    pub(crate) id: CommandId,
    cancel: CancellationToken,
    cancel_seen: Arc<AtomicBool>,
}

impl RunningCommand {
    fn new(id: CommandId) -> Self {
        Self {
            id,
            cancel: CancellationToken::new(),
            cancel_seen: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Stops the run once; the outcome is then `cancelled` whatever happens next.
    pub(crate) fn cancel(&self) {
        if !self.cancel_seen.swap(true, Ordering::SeqCst) {
            tracing::info!(command = %self.id, "cancel requested: stopping the run");
        }
        self.cancel.cancel();
    }

    /// Whether a cancel was seen (long polls no longer watch the command then).
    pub(crate) fn cancel_seen(&self) -> bool {
        self.cancel_seen.load(Ordering::SeqCst)
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
}

/// What a run left: its outcome, its trace for the history, and whether a seen cancel was
/// already delivered while the engine wound down.
pub(crate) struct Ran {
    outcome: RunOutcome,
    trace: Value,
    delivered_early: bool,
}

impl Relay {
    /// The start step: the execution's history row, then `started`. `None` when it does not
    /// run now: the disk is below the floor, or the service refused or did not answer (the
    /// command then stays queued there and comes back).
    pub(crate) async fn start(
        &self,
        project: &str,
        command: &QueuedCommand,
        session: Session,
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
        let cancel_requested = match self.api.started(&id, &execution_id, token_cap).await {
            Ok(Started::Go { cancel_requested }) => cancel_requested,
            Ok(Started::Refused(reason)) => {
                tracing::info!(%channel, "the service says not to run it: {reason}");
                return self.forget_execution(execution_id).await;
            }
            Err(e) => {
                // The command stays queued on the service and comes back next pass.
                tracing::warn!(%channel, "cannot report the start, not running it now: {e}");
                return self.forget_execution(execution_id).await;
            }
        };
        tracing::info!(%channel, slug = %session.slug, execution = %execution_id, "running");
        let running = RunningCommand::new(id);
        if cancel_requested {
            running.cancel();
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
        }))
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
        watchers.spawn(stop_on(shutdown.clone(), running.cancel.clone()));
        // What the run waits for and how far it got, told to the service as it changes.
        watchers.spawn(reporter.clone().send(
            self.api.clone(),
            running.id,
            self.config.report_interval,
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
                outcome = &mut run => Some(outcome),
                () = running.cancel.cancelled(), if !shutdown.is_cancelled() => None,
            }
        } else {
            Some((&mut run).await)
        };
        let delivered_early = early.is_none()
            && running.cancel_seen()
            && self
                .report_cancel_early(pass, execution, trace.tokens())
                .await;
        let outcome = match early {
            Some(outcome) => outcome,
            None => run.await,
        };
        watchers.abort_all();
        tell.send(Event::Running(None));
        Ran {
            outcome,
            trace: trace.to_json(),
            delivered_early,
        }
    }

    /// Posts the `cancelled` outcome of a run whose cancel was seen, before its engine stopped;
    /// whether the service settled it (if not, the run's end goes through the outbox).
    async fn report_cancel_early(
        &self,
        pass: &mut PassState,
        execution: &Execution,
        tokens: u64,
    ) -> bool {
        let completion = bounding::completion(
            &execution.id,
            CompletionStatus::Cancelled,
            None,
            tokens,
            0.0,
            Some("Cancelled by the agent"),
        );
        let completion = CompleteRequest {
            finished_at: Some(self.clock.now()),
            ..completion
        };
        tracing::info!(channel = %execution.channel, "cancel seen: reporting the outcome while the engine stops");
        self.deliver(pass, &execution.running.id, &completion, 0)
            .await
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
        options.events = Arc::new(runner::host::events::FanOut(vec![
            self.runtime.events.clone(),
            trace,
        ]));
        options
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
    /// The bound step: once a cancel was seen the outcome is `cancelled`, even if the graph
    /// finished between the flag and the stop; a run stopped by the relay's own shutdown is
    /// `failed`, not the agent's cancel; the result and error are bounded (all or nothing).
    pub(crate) fn bound(&self, ran: Ran, shutdown: &CancellationToken) -> Ended {
        let outcome = ran.outcome;
        let (status, error) = if self.running.cancel_seen() {
            (
                CompletionStatus::Cancelled,
                Some("Cancelled by the agent".to_owned()),
            )
        } else if shutdown.is_cancelled() && outcome.status == RunStatus::Cancelled {
            (
                CompletionStatus::Failed,
                Some("the desktop relay was stopped while this graph was running".to_owned()),
            )
        } else {
            let status = match outcome.status {
                RunStatus::Completed => CompletionStatus::Completed,
                RunStatus::Failed => CompletionStatus::Failed,
                RunStatus::Cancelled => CompletionStatus::Cancelled,
            };
            (status, outcome.error.clone())
        };
        let result = (status == CompletionStatus::Completed)
            .then(|| outcome.result.clone())
            .flatten();
        let completion = bounding::completion(
            &self.id,
            status,
            result,
            outcome.total_tokens,
            outcome.reported_cost,
            error.as_deref(),
        );
        tracing::info!(channel = %self.channel, status = ?completion.status, truncated = completion.result_truncated, "finished");
        Ended {
            full_result: outcome.result,
            trace: Some(ran.trace),
            // Already delivered: the history keeps the final figures.
            delivered: ran.delivered_early && completion.status == CompletionStatus::Cancelled,
            ..Ended::new(self.running.id, completion)
        }
    }
}

/// Reads the cancel flag every `interval` (or after the wait the service asked for) until it
/// is set; then stops the run, once.
async fn control_poll(api: DesktopApi, running: RunningCommand, interval: std::time::Duration) {
    let id = running.id;
    let mut wait = interval;
    loop {
        tokio::time::sleep(wait).await;
        wait = interval;
        match api.control(&id).await {
            Ok(true) => {
                running.cancel();
                return;
            }
            Ok(false) => {}
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

/// Stops the run when the relay stops.
async fn stop_on(shutdown: CancellationToken, cancel: CancellationToken) {
    shutdown.cancelled().await;
    cancel.cancel();
}
