//! The desktop relay: outbound-only. Every pass it re-sends the outbox, syncs each enabled
//! project (uploading the metadata of the sessions shared with it, at most 100) and runs the
//! queued commands it gets back, one at a time, each after re-checking consent. SPEC.md §2.
//!
//! Passes run every [`DEFAULT_POLL_INTERVAL`] and right after a change to sharing; a pass that
//! is due while the previous one is still busy is skipped (and counted). All waiting uses
//! tokio's timers, so the simulator can drive the loop on paused time.

pub mod api;
pub mod approver;
pub mod bounding;
pub mod catalog;
pub mod compiled;
pub mod disk;
pub mod jitter;
pub mod lock;
pub mod report;
pub mod state;
pub mod ui;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use graph_js::Failure;
use runner::engine::Engine;
use runner::host::agents::AgentProvider;
use runner::host::events::{Event, EventSink};
use runner::host::tools::ToolRegistry;
use runner::run::{RunOptions, RunRequest, RunStatus, run_graph};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use self::api::{ApiError, DesktopApi, Started};
use self::state::{DesktopState, OutboxEntry, StateError};
use relay_protocol::clock::{Clock, Timestamp};
use relay_protocol::{
    CommandId, CompleteRequest, CompletionStatus, DESKTOP_POLL_INTERVAL_SECS, DesktopProblem,
    MAX_SYNC_WAIT_MS, QueuedCommand, ServiceOutcome, SyncRequest,
};

/// The pass interval: the protocol's poll interval, which the service's hints assume.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(DESKTOP_POLL_INTERVAL_SECS);
/// How often a running command's cancel flag is read.
pub const DEFAULT_CONTROL_INTERVAL: Duration = Duration::from_secs(3);
/// How often the loop looks for sharing changes made by `relay desktop share` and friends.
pub const SHARING_WATCH_INTERVAL: Duration = Duration::from_secs(1);
/// How long an `ask` tool waits for the owner by default: the runner's.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = runner::host::approvals::DEFAULT_APPROVAL_TIMEOUT;
/// A remote run's wall-clock deadline by default.
pub const DEFAULT_GRAPH_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Most trace events kept per execution in the history.
pub const MAX_TRACE_EVENTS: usize = 2000;
/// The error of a command whose session is no longer shared (SPEC.md §2, exact text).
pub use relay_protocol::NOT_SHARED;
/// The long poll's wait in long-poll mode, by default: the longest the service holds one.
pub const DEFAULT_LONG_POLL: Duration = Duration::from_millis(MAX_SYNC_WAIT_MS);
/// After a failed long poll, wait this long before the next one (doubling up to the cap).
pub const LONG_POLL_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between failed long polls: one poll interval.
pub const LONG_POLL_RETRY_CAP: Duration = DEFAULT_POLL_INTERVAL;
/// In long-poll mode a pass syncs a project again after running its commands, at most this
/// many times, so work queued meanwhile starts at once.
pub const MAX_SYNCS_PER_PROJECT_PASS: usize = 100;

/// How often the relay fetches the service's projects for its token (their names for the
/// owner's listings, the list `project enable` checks against offline): at its start, then
/// this often.
pub const PROJECTS_REFRESH_INTERVAL: Duration = Duration::from_secs(10 * 60);

/// The token cap of a run arriving through the relay unless `relay desktop run
/// --default-max-tokens` sets another: a graph that loops on agents stops there with
/// `budget_exhausted` instead of spending without end.
pub const DEFAULT_REMOTE_TOKEN_CAP: u64 = 200_000;

/// Tunables of the relay loop.
#[derive(Debug, Clone)]
pub struct DesktopConfig {
    /// Time between passes.
    pub poll_interval: Duration,
    /// Time between control polls of a running command.
    pub control_interval: Duration,
    /// Time between checks for sharing changes.
    pub sharing_watch_interval: Duration,
    /// How long an `ask` waits for the owner.
    pub approval_timeout: Duration,
    /// A run's deadline.
    pub graph_timeout: Duration,
    /// Token cap for each remote run ([`DEFAULT_REMOTE_TOKEN_CAP`] unless set).
    pub token_cap: Option<u64>,
    /// Agents of one run at once.
    pub max_concurrency: usize,
    /// The folder the fs tools may use (overrides the stored one).
    pub folder: Option<PathBuf>,
    /// Completions go through the persistent outbox. Only the simulator turns this off, to
    /// show what is lost without it.
    pub outbox: bool,
    /// Long-poll mode: hold a `sync` per enabled project open this long (the service answers
    /// at once when work is queued or a running command is cancelled) and re-issue it right
    /// away. The timed passes stay as the fallback and for the outbox and metadata.
    pub long_poll: Option<Duration>,
    /// Where the long poll's reconnect jitter comes from: the system's randomness by default,
    /// or a seed (the simulator's), so that runs on virtual time repeat exactly.
    pub jitter_seed: Option<u64>,
    /// No run starts while the disk holding the state file has less than this many bytes
    /// free ([`disk::DEFAULT_MIN_FREE_SPACE`] unless set).
    pub min_free_space: u64,
    /// Reports on a running command (what it waits for, how far it got) go out at most this
    /// often.
    pub report_interval: Duration,
    /// Compiled graphs ([`compiled`]): shared sessions are compiled into components kept
    /// beside the state file, built and run with these limits (the wasm engine's), and remote
    /// runs start from them. `None` (the default): every run starts on the runtime's engine.
    pub compiled_graphs: Option<runner::engine::wasm::WasmLimits>,
}

impl Default for DesktopConfig {
    fn default() -> Self {
        Self {
            poll_interval: DEFAULT_POLL_INTERVAL,
            control_interval: DEFAULT_CONTROL_INTERVAL,
            sharing_watch_interval: SHARING_WATCH_INTERVAL,
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            graph_timeout: DEFAULT_GRAPH_TIMEOUT,
            token_cap: Some(DEFAULT_REMOTE_TOKEN_CAP),
            max_concurrency: runner::run::DEFAULT_MAX_CONCURRENCY,
            folder: None,
            outbox: true,
            long_poll: None,
            jitter_seed: None,
            min_free_space: disk::DEFAULT_MIN_FREE_SPACE,
            report_interval: report::REPORT_INTERVAL,
            compiled_graphs: None,
        }
    }
}

/// Counters a test (or the simulator) can read.
#[derive(Debug, Default)]
pub struct RelayStats {
    /// Passes started.
    pub passes: AtomicU64,
    /// Passes skipped because the previous one was still busy.
    pub passes_skipped: AtomicU64,
    /// Commands executed (the graph actually ran).
    pub executed: AtomicU64,
    /// Commands refused by the consent re-check.
    pub refused: AtomicU64,
    /// Completions delivered (2xx).
    pub delivered: AtomicU64,
}

/// What the relay needs to run graphs.
pub struct Runtime {
    /// The engine (the wasm sandbox by default).
    pub engine: Arc<dyn Engine>,
    /// Where agents run.
    pub provider: Arc<dyn AgentProvider>,
    /// Where run traces go live (the history keeps a copy of each).
    pub events: Arc<dyn EventSink>,
}

/// The desktop relay.
pub struct Relay {
    state: DesktopState,
    api: DesktopApi,
    clock: Arc<dyn Clock>,
    runtime: Runtime,
    config: DesktopConfig,
    stats: Arc<RelayStats>,
    busy: AtomicBool,
    /// A pass was asked for while one was busy (long-poll mode runs another right after).
    pending: AtomicBool,
    /// Wakes the loop to run a pass now (long-poll answers).
    wake: tokio::sync::Notify,
    /// The command running now, with the token that stops it and whether a cancel was seen.
    running: Mutex<Option<RunningCommand>>,
    /// Bumped whenever the running command changes: long polls re-issue naming the new one.
    running_changed: tokio::sync::watch::Sender<u64>,
    /// Held while sessions are read and uploaded (and withdrawals sent), so a consent pass and
    /// a pass's sync never cross: the service always ends with the newer snapshot.
    consent: tokio::sync::Mutex<()>,
    /// Syncs answered 401 in a row; at [`MAX_UNAUTHORIZED`] the relay stops.
    unauthorized: AtomicU64,
    /// Why the relay stopped by itself (the token was refused), once it did.
    halted: Mutex<Option<String>>,
    /// Fires when the relay stops by itself.
    halt: CancellationToken,
    /// Why no run starts now (the disk of the state is too full), as every sync tells the
    /// service.
    problem: Mutex<Option<DesktopProblem>>,
    /// Finished executions whose end could not be written to the state: posted until
    /// delivered, written once the state takes writes again.
    unrecorded: Mutex<Vec<Unrecorded>>,
    /// When the service's project list was last fetched (`None`: due at the next pass).
    projects_fetched: Mutex<Option<tokio::time::Instant>>,
    /// The shared sessions' compiled graphs, when on (and the state is a file).
    compiled: Option<Arc<compiled::CompiledGraphs>>,
}

/// A finished execution whose end the state could not take (its disk was full). The result is
/// never dropped: it is posted (completions are idempotent) until delivered, kept in memory,
/// and written to the history (or the outbox, if still undelivered) once writes work again.
struct Unrecorded {
    command_id: CommandId,
    full_result: Option<Value>,
    trace: Option<Value>,
    completion: CompleteRequest,
    finished_at: Timestamp,
    delivered: bool,
    /// What the service's answer adds to the history row: its own outcome, or its refusal.
    note: Option<ServiceNote>,
}

/// What the service said about a completion that the history keeps.
#[derive(Clone)]
enum ServiceNote {
    /// It had ended the run itself; this outcome stands.
    Outcome(ServiceOutcome),
    /// It refused the completion for good, with this message.
    Refused(String),
}

/// How one post of a completion went.
enum Posted {
    /// Acknowledged (2xx), maybe with the service's own outcome.
    Delivered(Option<ServiceOutcome>),
    /// Refused for good (4xx), with the service's message.
    Refused(String),
    /// Not delivered; try again later.
    Failed(String),
}

/// A desktop token answered 401 this many times in a row stops the relay: it cannot work
/// until its owner gives it a valid token.
pub const MAX_UNAUTHORIZED: u64 = 2;

/// The command being executed.
#[derive(Clone)]
struct RunningCommand {
    id: CommandId,
    cancel: CancellationToken,
    cancel_seen: Arc<AtomicBool>,
}

impl RunningCommand {
    /// Stops the run once; the outcome is then `cancelled` whatever happens next.
    fn cancel(&self) {
        if !self.cancel_seen.swap(true, Ordering::SeqCst) {
            tracing::info!(command = %self.id, "cancel requested: stopping the run");
        }
        self.cancel.cancel();
    }
}

/// One execution of a queued command on this desktop.
struct Execution {
    /// The execution id the service records with `started`.
    id: String,
    /// The log channel (`graph:external:<command id>`).
    channel: String,
    /// The command's cancel state.
    running: RunningCommand,
    /// The project that started it: its nested graphs are the sessions shared with it.
    project: String,
    /// Its token cap ([`state::Session::run_token_cap`]).
    token_cap: Option<u64>,
}

/// The completion an execution reports: once a cancel was seen the outcome is `cancelled`,
/// even if the graph finished between the flag and the stop; a run stopped by the relay's own
/// shutdown is `failed`, not the agent's cancel.
fn final_completion(
    execution: &Execution,
    outcome: &runner::run::RunOutcome,
    shutdown: &CancellationToken,
) -> CompleteRequest {
    let (status, error) = if execution.running.cancel_seen.load(Ordering::SeqCst) {
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
    bounding::completion(
        &execution.id,
        status,
        result,
        outcome.total_tokens,
        outcome.reported_cost,
        error.as_deref(),
    )
}

/// Why the relay could not run.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The state file failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The service refused the desktop token again and again.
    #[error("{0}")]
    Unauthorized(String),
    /// Another relay runs on the same state file.
    #[error(transparent)]
    Locked(#[from] lock::LockError),
}

impl Relay {
    /// A relay over `state`, talking to the service through `api`.
    pub fn new(
        state: DesktopState,
        api: DesktopApi,
        clock: Arc<dyn Clock>,
        runtime: Runtime,
        config: DesktopConfig,
    ) -> Arc<Self> {
        let compiled = config
            .compiled_graphs
            .zip(state.path())
            .map(|(limits, path)| {
                Arc::new(compiled::CompiledGraphs::new(
                    compiled::artifact_dir(path),
                    limits,
                    runtime.engine.clone(),
                ))
            });
        Arc::new(Self {
            compiled,
            state,
            api,
            clock,
            runtime,
            config,
            stats: Arc::new(RelayStats::default()),
            busy: AtomicBool::new(false),
            pending: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
            running: Mutex::new(None),
            running_changed: tokio::sync::watch::channel(0).0,
            consent: tokio::sync::Mutex::new(()),
            unauthorized: AtomicU64::new(0),
            halted: Mutex::new(None),
            halt: CancellationToken::new(),
            problem: Mutex::new(None),
            unrecorded: Mutex::new(Vec::new()),
            projects_fetched: Mutex::new(None),
        })
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<RelayStats> {
        &self.stats
    }

    /// The state.
    pub fn state(&self) -> &DesktopState {
        &self.state
    }

    /// The shared sessions' compiled graphs, when they are on.
    pub fn compiled(&self) -> Option<&Arc<compiled::CompiledGraphs>> {
        self.compiled.as_ref()
    }

    /// Compiles, in the background, the sessions shared with enabled projects that have no
    /// compiled graph, and removes the compiled graphs none of them needs.
    fn prepare_compiled(&self) {
        let Some(compiled) = &self.compiled else {
            return;
        };
        let mut scripts = Vec::new();
        for project in self.state.enabled_projects().unwrap_or_default() {
            match self.state.shared_sessions(&project) {
                Ok(sessions) => scripts.extend(sessions.into_iter().map(|s| s.script)),
                Err(e) => {
                    tracing::warn!(
                        project,
                        "cannot read the shared sessions to compile them: {e}"
                    );
                    return;
                }
            }
        }
        scripts.sort();
        scripts.dedup();
        compiled.prepare(scripts);
    }

    /// The engine a run of `script` starts on: its compiled graph when compiled graphs are on
    /// and it is ready (never waiting for a build), else the runtime's engine.
    fn engine_for(&self, script: &Arc<str>) -> Arc<dyn Engine> {
        match &self.compiled {
            Some(compiled) => compiled.engine_for(script),
            None => self.runtime.engine.clone(),
        }
    }

    /// Runs passes until `shutdown` fires: one at once, then every poll interval and right
    /// after each sharing change. A running graph is stopped on shutdown and reported failed.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) -> Result<(), RelayError> {
        // One relay per state file, held until this returns (an in-memory state has no file).
        let _lock = match self.state.path() {
            Some(path) => Some(lock::RelayLock::acquire(path)?),
            None => None,
        };
        // Stopped from outside, or by the relay itself when its token is refused.
        let shutdown = shutdown.child_token();
        self.recover_unfinished().await?;
        self.prepare_compiled();
        let mut ticker = tokio::time::interval(self.config.poll_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut watch = tokio::time::interval(self.config.sharing_watch_interval);
        watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sharing = self.state.sharing_version()?;
        let mut passes = tokio::task::JoinSet::new();
        let mut long_polls: std::collections::HashMap<String, tokio::task::AbortHandle> =
            Default::default();
        let mut polls = tokio::task::JoinSet::new();
        let mut consents = tokio::task::JoinSet::new();
        self.reconcile_long_polls(&mut long_polls, &mut polls, &shutdown)?;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = self.halt.cancelled() => {
                    shutdown.cancel();
                    break;
                }
                _ = ticker.tick() => self.clone().trigger(&mut passes, &shutdown),
                () = self.wake.notified() => self.clone().trigger(&mut passes, &shutdown),
                _ = watch.tick() => {
                    let now = self.state.sharing_version()?;
                    if now != sharing {
                        sharing = now;
                        tracing::info!("sharing changed: telling the service and running a pass now");
                        // Beside a busy pass too: a withdrawal never waits for a running graph.
                        consents.spawn(self.clone().consent_pass_owned());
                        self.prepare_compiled();
                        self.reconcile_long_polls(&mut long_polls, &mut polls, &shutdown)?;
                        self.clone().trigger(&mut passes, &shutdown);
                    }
                }
                Some(_) = passes.join_next(), if !passes.is_empty() => {}
                Some(_) = polls.join_next(), if !polls.is_empty() => {}
                Some(_) = consents.join_next(), if !consents.is_empty() => {}
            }
        }
        polls.abort_all();
        while consents.join_next().await.is_some() {}
        while passes.join_next().await.is_some() {}
        while polls.join_next().await.is_some() {}
        let halted = self
            .halted
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        match halted {
            Some(message) => Err(RelayError::Unauthorized(message)),
            None => Ok(()),
        }
    }

    /// Counts syncs answered 401 in a row; the second stops the relay with a message saying
    /// what to do (any other answer resets the count).
    fn watch_auth<T>(&self, answer: &Result<T, ApiError>) {
        let refused = matches!(
            answer,
            Err(ApiError::Status { status, .. }) if *status == http::StatusCode::UNAUTHORIZED
        );
        if !refused {
            if answer.is_ok() {
                self.unauthorized.store(0, Ordering::SeqCst);
            }
            return;
        }
        if self.unauthorized.fetch_add(1, Ordering::SeqCst) + 1 < MAX_UNAUTHORIZED {
            return;
        }
        let message = format!(
            "the service refused this relay's desktop token {MAX_UNAUTHORIZED} times in a row (401): it is revoked, expired or not a desktop token of this service; mint a new one with `relay admin token create --desktop` (or on the console) and start `relay desktop run --token ...` with it"
        );
        tracing::error!("{message}");
        *self
            .halted
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(message);
        self.halt.cancel();
    }

    /// Long-poll mode: one long poll per enabled project, started and stopped as projects are
    /// enabled and disabled.
    fn reconcile_long_polls(
        self: &Arc<Self>,
        live: &mut std::collections::HashMap<String, tokio::task::AbortHandle>,
        polls: &mut tokio::task::JoinSet<()>,
        shutdown: &CancellationToken,
    ) -> Result<(), RelayError> {
        let Some(wait) = self.config.long_poll else {
            return Ok(());
        };
        let enabled = self.state.enabled_projects()?;
        live.retain(|project, handle| {
            let keep = enabled.contains(project);
            if !keep {
                handle.abort();
            }
            keep
        });
        for project in enabled {
            if live.contains_key(&project) {
                continue;
            }
            let relay = self.clone();
            let shutdown = shutdown.clone();
            let handle = polls.spawn(relay.long_poll(project.clone(), wait, shutdown));
            live.insert(project, handle);
        }
        Ok(())
    }

    /// Holds a `sync` open for `project`, again and again: queued work runs a pass at once, a
    /// cancel request stops the running command at once.
    async fn long_poll(
        self: Arc<Self>,
        project: String,
        wait: Duration,
        shutdown: CancellationToken,
    ) {
        let mut retry = LONG_POLL_RETRY;
        let mut jitter = jitter::Jitter::new(self.config.jitter_seed);
        // Queued commands already handed to a pass: they do not end the next long poll.
        let mut known: Vec<CommandId> = Vec::new();
        let mut running_changed = self.running_changed.subscribe();
        // The sharing version the service last got the sessions of; they are sent again only
        // when it changes (and after a failed sync).
        let mut uploaded: Option<i64> = None;
        while !shutdown.is_cancelled() {
            running_changed.mark_unchanged();
            let version = self.state.sharing_version().ok();
            let unchanged = uploaded.is_some() && uploaded == version;
            let request = self.long_poll_request(&project, wait, unchanged, &known);
            let answer = tokio::select! {
                answer = self.api.sync(&request) => {
                    self.watch_auth(&answer);
                    answer
                }
                // A command started or ended: ask again, naming what runs now.
                _ = running_changed.changed() => continue,
                () = shutdown.cancelled() => return,
            };
            match answer {
                Ok(answer) => {
                    retry = LONG_POLL_RETRY;
                    uploaded = version;
                    known = self.take_answer(&project, answer, &known);
                }
                Err(e) => {
                    uploaded = None;
                    // Jitter spreads the reconnects of many desktops that lost the service at
                    // once (a restart), so they do not all come back in the same instant.
                    let wait = jitter.spread(retry);
                    tracing::warn!(project, "long poll failed, retrying in {wait:?}: {e}");
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = shutdown.cancelled() => return,
                    }
                    retry = (retry * 2).min(LONG_POLL_RETRY_CAP);
                }
            }
        }
    }

    /// The next long-poll `sync` of `project`: the shared sessions unless they are
    /// `unchanged` since the last upload, the running command (unless its cancel was already
    /// seen) and the queued commands already handed to a pass.
    fn long_poll_request(
        &self,
        project: &str,
        wait: Duration,
        unchanged: bool,
        known: &[CommandId],
    ) -> SyncRequest {
        let sessions = if unchanged {
            Vec::new()
        } else {
            match self.state.shared_sessions(project) {
                Ok(sessions) => sessions.iter().map(|s| s.meta()).collect(),
                Err(e) => {
                    tracing::error!(project, "cannot read the shared sessions: {e}");
                    Vec::new()
                }
            }
        };
        // A command whose cancel was already seen is not watched again.
        let running = self
            .current()
            .filter(|r| !r.cancel_seen.load(Ordering::SeqCst))
            .map(|r| vec![r.id])
            .unwrap_or_default();
        SyncRequest {
            project_id: project.to_owned(),
            sessions,
            wait_ms: Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
            running,
            known: known.to_vec(),
            sessions_unchanged: unchanged,
            problem: self.problem(),
            sharing_version: None,
        }
    }

    /// Acts on a long poll's answer: a cancel of the running command stops it, a queued
    /// command not seen before wakes a pass. Returns the queued commands now known.
    fn take_answer(
        &self,
        project: &str,
        answer: api::SyncAnswer,
        known: &[CommandId],
    ) -> Vec<CommandId> {
        for id in &answer.cancel_requested {
            if let Some(running) = self.current()
                && id.as_str() == Some(running.id.to_string().as_str())
            {
                running.cancel();
            }
        }
        // Every id the answer names, well-formed command or not: a malformed one must not end
        // each next long poll at once as news.
        let queued: Vec<CommandId> = answer
            .commands
            .iter()
            .filter_map(|c| c.command_id.as_str().and_then(|id| id.parse().ok()))
            .collect();
        self.take_commands(project, answer.commands, false);
        if queued.iter().any(|id| !known.contains(id)) {
            self.wake.notify_one();
        }
        queued
    }

    fn current(&self) -> Option<RunningCommand> {
        self.running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn set_current(&self, command: Option<RunningCommand>) {
        *self
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = command;
        self.running_changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Starts a pass unless the previous one is still busy (then it is skipped and counted; in
    /// long-poll mode the busy pass runs another right after, so queued work is not left for
    /// the next interval).
    fn trigger(
        self: Arc<Self>,
        passes: &mut tokio::task::JoinSet<()>,
        shutdown: &CancellationToken,
    ) {
        if self.busy.swap(true, Ordering::SeqCst) {
            self.stats.passes_skipped.fetch_add(1, Ordering::Relaxed);
            if self.config.long_poll.is_some() {
                self.pending.store(true, Ordering::SeqCst);
            }
            tracing::debug!("the previous pass is still busy: skipping this one");
            return;
        }
        let shutdown = shutdown.clone();
        passes.spawn(async move {
            loop {
                self.pass(&shutdown).await;
                if !self.pending.swap(false, Ordering::SeqCst) || shutdown.is_cancelled() {
                    break;
                }
            }
            self.busy.store(false, Ordering::SeqCst);
        });
    }

    /// One pass: outbox first, then each enabled project's sync and its commands, serially.
    pub async fn pass(&self, shutdown: &CancellationToken) {
        self.stats.passes.fetch_add(1, Ordering::Relaxed);
        self.mend_unrecorded().await;
        self.deliver_outbox().await;
        self.refresh_projects().await;
        {
            let _consent = self.consent.lock().await;
            self.deliver_withdrawals().await;
        }
        let projects = match self.state.enabled_projects() {
            Ok(p) => p,
            Err(e) => {
                tracing::error!("cannot read the enabled projects: {e}");
                return;
            }
        };
        // One sync per project and pass (SPEC.md §2); in long-poll mode the project is synced
        // again after its commands ran, until nothing is queued.
        let syncs = if self.config.long_poll.is_some() {
            MAX_SYNCS_PER_PROJECT_PASS
        } else {
            1
        };
        for project in projects {
            for _ in 0..syncs {
                if shutdown.is_cancelled() {
                    return;
                }
                // Checked before the sync, so the sync tells the service why nothing starts.
                let blocked = self.check_disk().is_some();
                let commands = match self.sync(&project).await {
                    Ok(commands) => commands,
                    Err(e) => {
                        tracing::warn!(project, "sync failed: {e}");
                        break;
                    }
                };
                if commands.is_empty() || blocked {
                    // Below the free-space floor the commands stay queued on the service.
                    break;
                }
                for command in commands {
                    if shutdown.is_cancelled() {
                        return;
                    }
                    if let Err(e) = self.handle(&project, command, shutdown).await {
                        tracing::error!(project, "a command could not be handled: {e}");
                    }
                }
            }
        }
    }

    /// A plain `sync` of `project` carrying its shared sessions (none once it is disabled).
    async fn upload(&self, project: &str) -> Result<api::SyncAnswer, String> {
        let _consent = self.consent.lock().await;
        let sessions = self
            .state
            .shared_sessions(project)
            .map_err(|e| e.to_string())?;
        let request = SyncRequest {
            project_id: project.to_owned(),
            sessions: sessions.iter().map(|s| s.meta()).collect(),
            wait_ms: None,
            running: Vec::new(),
            known: Vec::new(),
            sessions_unchanged: false,
            problem: self.problem(),
            sharing_version: None,
        };
        let answer = self.api.sync(&request).await;
        self.watch_auth(&answer);
        answer.map_err(|e| e.to_string())
    }

    /// Tells the service at once what is shared now (SPEC.md §2, withdrawal): the withdrawals
    /// of disabled projects first, then the snapshot of each enabled one. The service drops
    /// what is gone from `list_graph_sessions` and cancels its queued runs. Runs beside a busy
    /// pass; the commands the syncs return are left to the passes.
    pub async fn consent_pass(&self) {
        {
            let _consent = self.consent.lock().await;
            self.deliver_withdrawals().await;
        }
        let projects = match self.state.enabled_projects() {
            Ok(p) => p,
            Err(e) => {
                tracing::error!("cannot read the enabled projects: {e}");
                return;
            }
        };
        for project in projects {
            match self.upload(&project).await {
                Ok(answer) => {
                    self.take_commands(&project, answer.commands, false);
                }
                Err(e) => tracing::warn!(
                    project,
                    "cannot tell the service the new sharing yet (the next pass tries again): {e}"
                ),
            }
        }
    }

    async fn consent_pass_owned(self: Arc<Self>) {
        self.consent_pass().await;
    }

    /// Sends each owed withdrawal (an empty snapshot of a disabled project); the caller holds
    /// the consent lock. A withdrawal the service refuses for good is dropped with a warning.
    async fn deliver_withdrawals(&self) {
        let owed = match self.state.pending_withdrawals() {
            Ok(owed) => owed,
            Err(e) => {
                tracing::error!("cannot read the owed withdrawals: {e}");
                return;
            }
        };
        for (project, version) in owed {
            let request = SyncRequest {
                project_id: project.clone(),
                sessions: Vec::new(),
                wait_ms: None,
                running: Vec::new(),
                known: Vec::new(),
                sessions_unchanged: false,
                problem: self.problem(),
                sharing_version: None,
            };
            let delivered = match self.api.sync(&request).await {
                Ok(_) => {
                    tracing::info!(
                        project,
                        "the service knows the project is disabled: its sessions are withdrawn"
                    );
                    true
                }
                Err(e) if !e.is_retryable() => {
                    tracing::warn!(
                        project,
                        "the service refused the withdrawal for good, not sending it again: {e}"
                    );
                    true
                }
                Err(e) => {
                    tracing::warn!(
                        project,
                        "cannot tell the service the project is disabled yet, retrying at the next pass: {e}"
                    );
                    false
                }
            };
            if delivered && let Err(e) = self.state.withdrawal_delivered(&project, version) {
                tracing::error!(project, "cannot note the withdrawal as delivered: {e}");
            }
        }
    }

    async fn sync(&self, project: &str) -> Result<Vec<QueuedCommand>, String> {
        let raw = self.upload(project).await?;
        Ok(self.take_commands(project, raw.commands, true))
    }

    /// The well-formed commands of a sync answer, noted as `project`'s queue for the owner's
    /// listing (`relay desktop queue`). A malformed one is refused before anything of it is
    /// written, and said once (`warn`) by the pass that would have run it.
    fn take_commands(
        &self,
        project: &str,
        raw: Vec<api::RawCommand>,
        warn: bool,
    ) -> Vec<QueuedCommand> {
        let mut commands = Vec::with_capacity(raw.len());
        for command in raw {
            match command.validate() {
                Ok(command) => commands.push(command),
                Err(reason) if warn => {
                    tracing::warn!(project, "ignoring a malformed command: {reason}");
                }
                Err(_) => {}
            }
        }
        if let Err(e) = self.state.note_queue(project, &commands, self.clock.now()) {
            tracing::warn!(
                project,
                "cannot note the queued runs for the owner's listing: {e}"
            );
        }
        commands
    }

    /// Fetches the service's projects for this token when due ([`PROJECTS_REFRESH_INTERVAL`]),
    /// keeps them for the owner's listings, and warns about an enabled project the service
    /// does not know for this token (its syncs can only be refused).
    async fn refresh_projects(&self) {
        let due = self
            .projects_fetched
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .is_none_or(|at| at.elapsed() >= PROJECTS_REFRESH_INTERVAL);
        if !due {
            return;
        }
        let projects = match self.api.projects().await {
            Ok(projects) => projects,
            Err(e) => {
                tracing::debug!("cannot fetch the service's projects for this token: {e}");
                if !e.is_retryable() {
                    // An older service without the list: ask again after the interval only.
                    self.projects_fetched_now();
                }
                return;
            }
        };
        self.projects_fetched_now();
        if let Err(e) = self.state.set_service_projects(&projects, self.clock.now()) {
            tracing::warn!("cannot keep the service's project list: {e}");
        }
        for project in self.state.enabled_projects().unwrap_or_default() {
            if !projects.iter().any(|p| p.project_id == project) {
                tracing::warn!(
                    project,
                    "this project is enabled here, but the service knows no such project for this desktop token: check the id (`relay desktop project list`), or use a desktop token of the project's owner"
                );
            }
        }
    }

    fn projects_fetched_now(&self) {
        *self
            .projects_fetched
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(tokio::time::Instant::now());
    }

    /// Re-sends every completion the service has not acknowledged.
    pub async fn deliver_outbox(&self) {
        let entries = match self.state.outbox() {
            Ok(entries) => entries,
            Err(e) => {
                tracing::error!("cannot read the outbox: {e}");
                return;
            }
        };
        for entry in entries {
            self.deliver(&entry).await;
        }
    }

    /// Posts one completion; removes it from the outbox on a 2xx, or on an answer that can
    /// never change (a 409 for a conflicting completion is logged and dropped).
    async fn deliver(&self, entry: &OutboxEntry) -> bool {
        match self.post(&entry.command_id, &entry.body).await {
            Posted::Delivered(outcome) => {
                if let Some(outcome) = &outcome
                    && let Err(e) = self.state.note_service_outcome(&entry.command_id, outcome)
                {
                    tracing::error!(command = %entry.command_id, "cannot note the service's outcome in the history: {e}");
                }
                self.forget(&entry.command_id);
                true
            }
            Posted::Refused(message) => {
                if let Err(e2) = self.state.note_refused(&entry.command_id, &message) {
                    tracing::error!(command = %entry.command_id, "cannot note the refusal in the history: {e2}");
                }
                self.forget(&entry.command_id);
                false
            }
            Posted::Failed(error) => {
                tracing::warn!(command = %entry.command_id, attempts = entry.attempts + 1, "completion not delivered, will retry next pass: {error}");
                if let Err(e2) = self.state.note_outbox_failure(&entry.command_id, &error) {
                    tracing::error!("cannot update the outbox: {e2}");
                }
                false
            }
        }
    }

    /// Posts one completion and says how it went (logging what the history cannot show).
    async fn post(&self, command_id: &CommandId, body: &CompleteRequest) -> Posted {
        match self.api.complete(command_id, body).await {
            Ok(answer) => {
                self.stats.delivered.fetch_add(1, Ordering::Relaxed);
                if let Some(outcome) = &answer.already_finished {
                    let reason = outcome.error.as_deref().unwrap_or("no reason given");
                    tracing::warn!(command = %command_id, status = %outcome.status, "the service had already ended this run, so its outcome stands and the history takes it: {reason}");
                }
                tracing::info!(command = %command_id, replayed = answer.replayed, "completion delivered");
                Posted::Delivered(answer.already_finished)
            }
            Err(e) if !e.is_retryable() => {
                tracing::error!(command = %command_id, "the service refused the completion for good, not sending it again: {e}");
                Posted::Refused(e.service_message().unwrap_or("no message").to_owned())
            }
            Err(e) => Posted::Failed(e.to_string()),
        }
    }

    /// Posts a completion the state could not take, unless it was delivered already.
    async fn post_unrecorded(&self, entry: &mut Unrecorded) {
        if entry.delivered {
            return;
        }
        match self.post(&entry.command_id, &entry.completion).await {
            Posted::Delivered(outcome) => {
                entry.delivered = true;
                entry.note = outcome.map(ServiceNote::Outcome);
            }
            Posted::Refused(message) => {
                entry.delivered = true;
                entry.note = Some(ServiceNote::Refused(message));
            }
            Posted::Failed(error) => {
                tracing::warn!(command = %entry.command_id, "completion (kept in memory) not delivered, will retry next pass: {error}");
            }
        }
    }

    /// Writes a kept completion's end to the state: the history row only once it was
    /// delivered, or the history and the outbox (which then delivers it) if not yet.
    fn record_unrecorded(&self, entry: &Unrecorded) -> Result<(), StateError> {
        let (result, trace) = (entry.full_result.as_ref(), entry.trace.as_ref());
        if !entry.delivered {
            return self.state.finish_execution(
                &entry.command_id,
                result,
                trace,
                &entry.completion,
                entry.finished_at,
            );
        }
        self.state
            .record_end(result, trace, &entry.completion, entry.finished_at)?;
        let execution = &entry.completion.execution_id;
        match &entry.note {
            Some(ServiceNote::Outcome(outcome)) => {
                self.state.note_service_outcome_of(execution, outcome)
            }
            Some(ServiceNote::Refused(message)) => self.state.note_refused_of(execution, message),
            None => Ok(()),
        }
    }

    /// Posts and writes the completions kept in memory (the state could not take them).
    async fn mend_unrecorded(&self) {
        let kept = std::mem::take(
            &mut *self
                .unrecorded
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        let mut still = Vec::new();
        for mut entry in kept {
            self.post_unrecorded(&mut entry).await;
            match self.record_unrecorded(&entry) {
                Ok(()) => {
                    tracing::info!(command = %entry.command_id, delivered = entry.delivered, "the end of the run is recorded in the history now that the desktop state takes writes again")
                }
                Err(e) => {
                    tracing::debug!(command = %entry.command_id, "the state still cannot record the end of the run: {e}");
                    still.push(entry);
                }
            }
        }
        self.unrecorded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .extend(still);
    }

    /// Keeps `entry` in memory after the state refused it: posted now, written later.
    async fn keep_unrecorded(&self, mut entry: Unrecorded, error: &StateError) {
        tracing::error!(command = %entry.command_id, "cannot record the end of the run in the desktop state ({error}); the result is posted anyway and kept in memory until it is delivered and recorded");
        self.post_unrecorded(&mut entry).await;
        self.unrecorded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(entry);
    }

    /// Why no run starts now, as the next sync tells the service.
    fn problem(&self) -> Option<DesktopProblem> {
        self.problem
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Checks the free space where the state lives against the floor; returns the problem
    /// while it is below (logging one line when that begins and one when it ends).
    fn check_disk(&self) -> Option<DesktopProblem> {
        let path = self.state.path()?;
        let floor = self.config.min_free_space;
        let low = match disk::free_bytes(path) {
            Ok(free) => (free < floor).then(|| disk::disk_full(path, free, floor)),
            Err(e) => {
                tracing::debug!("cannot read the free space of {}: {e}", path.display());
                None
            }
        };
        let mut problem = self
            .problem
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match (problem.is_some(), low) {
            (false, Some(low)) => {
                tracing::error!("disk full: {}", low.detail);
                *problem = Some(low);
            }
            (true, None) => {
                tracing::info!(
                    "free space on the disk of the desktop's state is back above the floor: runs start again"
                );
                *problem = None;
            }
            // Still low: the first description stands, so syncs do not change it each time.
            _ => {}
        }
        problem.clone()
    }

    fn forget(&self, command_id: &CommandId) {
        if let Err(e) = self.state.remove_from_outbox(command_id) {
            tracing::error!(command = %command_id, "cannot remove a delivered completion from the outbox: {e}");
        }
    }

    /// Records the end of an execution and posts it: through the outbox (written first, in the
    /// same transaction as the history), or directly when the outbox is off.
    async fn complete(
        &self,
        command_id: &CommandId,
        full_result: Option<&Value>,
        trace: Option<&Value>,
        mut completion: CompleteRequest,
    ) -> Result<(), RelayError> {
        let now = self.clock.now();
        let finished_at = *completion.finished_at.get_or_insert(now);
        if let Err(error) =
            self.state
                .finish_execution(command_id, full_result, trace, &completion, finished_at)
            && self.config.outbox
        {
            let entry = Unrecorded {
                command_id: *command_id,
                full_result: full_result.cloned(),
                trace: trace.cloned(),
                completion,
                finished_at,
                delivered: false,
                note: None,
            };
            self.keep_unrecorded(entry, &error).await;
            return Ok(());
        }
        let entry = OutboxEntry {
            command_id: *command_id,
            body: completion,
            attempts: 0,
        };
        if self.config.outbox {
            self.deliver(&entry).await;
        } else {
            self.forget(command_id);
            if let Err(e) = self.api.complete(&entry.command_id, &entry.body).await {
                tracing::warn!(command = %command_id, "completion lost (no outbox): {e}");
            } else {
                self.stats.delivered.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Executions that began and never finished (the relay stopped while they ran) are
    /// reported failed, through the outbox.
    async fn recover_unfinished(&self) -> Result<(), RelayError> {
        for (execution_id, command_id) in self.state.unfinished_executions()? {
            // Written as they grew: what the run spent before the relay stopped.
            let tokens = self.state.execution_tokens(&execution_id)?;
            let expired = self
                .state
                .expire_approvals_of(&execution_id, self.clock.now())?;
            tracing::warn!(command = %command_id, tokens, expired_approvals = expired, "reporting a run the relay stopped during as failed");
            let completion = bounding::completion(
                &execution_id,
                CompletionStatus::Failed,
                None,
                tokens,
                0.0,
                Some("the desktop relay stopped while this graph was running"),
            );
            self.state
                .finish_execution(&command_id, None, None, &completion, self.clock.now())?;
        }
        Ok(())
    }

    /// Handles one command: consent re-check, `started`, the run with its control poll, and
    /// the bounded completion.
    async fn handle(
        &self,
        project: &str,
        command: QueuedCommand,
        shutdown: &CancellationToken,
    ) -> Result<(), RelayError> {
        let execution_id = uuid::Uuid::new_v4().to_string();
        let id = command.command_id;
        let channel = format!("graph:external:{id}");
        if self.check_disk().is_some() {
            // Checked before every start: it stays queued; the next sync tells the service why.
            return Ok(());
        }
        let Some(session) =
            self.state
                .consented_session(project, &command.graph_session_id, &command.slug)?
        else {
            return self.refuse_unshared(project, &command, &execution_id).await;
        };
        self.state
            .begin_command(&execution_id, project, &command, self.clock.now())?;
        let token_cap = session.run_token_cap(self.config.token_cap, command.max_tokens);
        let Some(cancel_requested) = self
            .report_start(&id, &execution_id, token_cap, &channel)
            .await?
        else {
            return Ok(());
        };
        tracing::info!(%channel, slug = %session.slug, execution = %execution_id, "running");
        let running = RunningCommand {
            id,
            cancel: CancellationToken::new(),
            cancel_seen: Arc::new(AtomicBool::new(false)),
        };
        if cancel_requested {
            running.cancel();
        }
        let request = RunRequest {
            script: session.script.clone().into(),
            args: Value::Object(command.arguments.clone()),
            graph: session.slug.clone(),
            run_id: Some(execution_id.clone()),
        };
        let execution = Execution {
            id: execution_id,
            channel,
            running,
            project: project.to_owned(),
            token_cap,
        };
        let (outcome, trace, reported_early) = self.execute(&execution, request, shutdown).await?;
        let completion = final_completion(&execution, &outcome, shutdown);
        tracing::info!(channel = %execution.channel, status = ?completion.status, truncated = completion.result_truncated, "finished");
        let trace = trace.to_json();
        if reported_early && completion.status == CompletionStatus::Cancelled {
            // Already delivered; keep the final figures in the history only.
            let entry = Unrecorded {
                command_id: id,
                full_result: outcome.result,
                trace: Some(trace),
                completion,
                finished_at: self.clock.now(),
                delivered: true,
                note: None,
            };
            return self.record_or_keep(entry).await;
        }
        self.complete(&id, outcome.result.as_ref(), Some(&trace), completion)
            .await
    }

    /// Writes `entry`'s end to the state, or keeps it in memory when the state cannot take it.
    async fn record_or_keep(&self, entry: Unrecorded) -> Result<(), RelayError> {
        if let Err(error) = self.record_unrecorded(&entry) {
            self.keep_unrecorded(entry, &error).await;
        }
        Ok(())
    }

    /// The consent re-check failed: the command ends `cancelled` with the not-shared error,
    /// and the graph never runs.
    async fn refuse_unshared(
        &self,
        project: &str,
        command: &QueuedCommand,
        execution_id: &str,
    ) -> Result<(), RelayError> {
        let id = command.command_id;
        self.stats.refused.fetch_add(1, Ordering::Relaxed);
        tracing::info!(channel = %format!("graph:external:{id}"), "consent re-check failed: {NOT_SHARED}");
        self.state
            .begin_command(execution_id, project, command, self.clock.now())?;
        let completion = bounding::completion(
            execution_id,
            CompletionStatus::Cancelled,
            None,
            0,
            0.0,
            Some(NOT_SHARED),
        );
        self.complete(&id, None, None, completion).await
    }

    /// Tells the service the command starts: whether a cancel is already asked for, or `None`
    /// when it must not run now (refused, or the service is unreachable: it stays queued).
    async fn report_start(
        &self,
        id: &CommandId,
        execution_id: &str,
        token_cap: Option<u64>,
        channel: &str,
    ) -> Result<Option<bool>, RelayError> {
        match self.api.started(id, execution_id, token_cap).await {
            Ok(Started::Go { cancel_requested }) => Ok(Some(cancel_requested)),
            Ok(Started::Refused(reason)) => {
                tracing::info!(%channel, "the service says not to run it: {reason}");
                self.state.forget_execution(execution_id)?;
                Ok(None)
            }
            Err(e) => {
                // The command stays queued on the service and comes back next pass.
                tracing::warn!(%channel, "cannot report the start, not running it now: {e}");
                self.state.forget_execution(execution_id)?;
                Ok(None)
            }
        }
    }

    /// Runs the graph with the control poll and the shutdown watching it; returns its outcome,
    /// its trace, and whether a seen cancel was already reported while the engine wound down.
    async fn execute(
        &self,
        execution: &Execution,
        request: RunRequest,
        shutdown: &CancellationToken,
    ) -> Result<(runner::run::RunOutcome, Arc<TraceKeeper>, bool), RelayError> {
        let running = &execution.running;
        self.set_current(Some(running.clone()));
        let control = tokio::spawn(control_poll(
            self.api.clone(),
            running.clone(),
            self.config.control_interval,
        ));
        let stop_on_shutdown = {
            let cancel = running.cancel.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                shutdown.cancelled().await;
                cancel.cancel();
            })
        };
        // What the run waits for and how far it got, told to the service as it changes.
        let reporter = Arc::new(report::RunReporter::new(&execution.id, execution.token_cap));
        let reports = tokio::spawn(reporter.clone().send(
            self.api.clone(),
            running.id,
            self.config.report_interval,
        ));
        let mut keeper = TraceKeeper::recording(self.state.clone(), &execution.id);
        keeper.reporter = Some(reporter.clone());
        let trace = Arc::new(keeper);
        let engine = self.engine_for(&request.script);
        let options = self.run_options(trace.clone(), execution, reporter, engine)?;
        self.stats.executed.fetch_add(1, Ordering::Relaxed);
        let run = run_graph(request, &options, running.cancel.clone());
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
        let reported_early = early.is_none();
        if reported_early && running.cancel_seen.load(Ordering::SeqCst) {
            self.report_cancel_early(execution, &trace).await;
        }
        let outcome = match early {
            Some(outcome) => outcome,
            None => run.await,
        };
        control.abort();
        stop_on_shutdown.abort();
        reports.abort();
        self.set_current(None);
        Ok((outcome, trace, reported_early))
    }

    async fn report_cancel_early(&self, execution: &Execution, trace: &TraceKeeper) {
        let completion = bounding::completion(
            &execution.id,
            CompletionStatus::Cancelled,
            None,
            trace.tokens(),
            0.0,
            Some("Cancelled by the agent"),
        );
        let completion = CompleteRequest {
            finished_at: Some(self.clock.now()),
            ..completion
        };
        tracing::info!(channel = %execution.channel, "cancel seen: reporting the outcome while the engine stops");
        let entry = OutboxEntry {
            command_id: execution.running.id,
            body: completion,
            attempts: 0,
        };
        self.deliver(&entry).await;
    }

    fn run_options(
        &self,
        trace: Arc<TraceKeeper>,
        execution: &Execution,
        reporter: Arc<report::RunReporter>,
        engine: Arc<dyn Engine>,
    ) -> Result<RunOptions, RelayError> {
        let project = execution.project.as_str();
        let mut options = RunOptions::new(engine);
        options.provider = self.runtime.provider.clone();
        let folder = match &self.config.folder {
            Some(folder) => Some(folder.clone()),
            None => self.state.folder()?,
        };
        options.tools = match folder {
            Some(folder) => ToolRegistry::standard(Some(folder)).unwrap_or_else(|e| {
                tracing::warn!("the fs tools are unavailable: {e}");
                ToolRegistry::with_unusable_folder(Failure::failed(format!(
                    "{}; choose another with `relay desktop folder DIR`",
                    e.message
                )))
            }),
            None => ToolRegistry::with_unusable_folder(Failure::invalid(
                "no folder is set for the fs tools on this desktop; its owner sets one with `relay desktop folder DIR`",
            )),
        };
        options.policy = self.state.policy()?;
        options.approver = Arc::new(
            approver::OwnerApprover::new(self.state.clone(), self.clock.clone())
                .reporting(reporter, self.config.approval_timeout),
        );
        options.approval_timeout = self.config.approval_timeout;
        options.catalog = Arc::new(catalog::SharedCatalog::new(self.state.clone(), project));
        options.token_cap = execution.token_cap;
        options.max_concurrency = self.config.max_concurrency;
        options.timeout = self.config.graph_timeout;
        options.events = Arc::new(runner::host::events::FanOut(vec![
            self.runtime.events.clone(),
            trace,
        ]));
        Ok(options)
    }
}

/// Reads the cancel flag every `interval` until it is set; then stops the run, once.
async fn control_poll(api: DesktopApi, running: RunningCommand, interval: Duration) {
    let id = running.id;
    loop {
        tokio::time::sleep(interval).await;
        match api.control(&id).await {
            Ok(true) => {
                running.cancel();
                return;
            }
            Ok(false) => {}
            Err(ApiError::Unreachable(e)) => {
                tracing::debug!(command = %id, "control poll failed, trying again: {e}")
            }
            Err(e) => tracing::warn!(command = %id, "control poll refused: {e}"),
        }
    }
}

/// Keeps a run's first [`MAX_TRACE_EVENTS`] events for the history, and (when recording)
/// writes the tokens spent to the history as they grow, so a relay killed mid-run still
/// reports them at its next start.
#[derive(Default)]
struct TraceKeeper {
    events: Mutex<Vec<Event>>,
    /// Metered tokens so far (every event, even past the kept ones).
    tokens: AtomicU64,
    recording: Option<(DesktopState, String)>,
    /// Where the run's progress is counted for the service.
    reporter: Option<Arc<report::RunReporter>>,
}

impl TraceKeeper {
    /// A keeper that records the tokens of `execution_id` in `state` as they grow.
    fn recording(state: DesktopState, execution_id: &str) -> Self {
        Self {
            recording: Some((state, execution_id.to_owned())),
            ..Self::default()
        }
    }

    /// Tokens metered so far (the sum of finished turns).
    fn tokens(&self) -> u64 {
        self.tokens.load(Ordering::SeqCst)
    }

    fn to_json(&self) -> Value {
        let events = self
            .events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        serde_json::to_value(&*events).unwrap_or(Value::Null)
    }
}

impl EventSink for TraceKeeper {
    fn emit(&self, event: &Event) {
        if let Some(reporter) = &self.reporter {
            reporter.observe(event);
        }
        // Streaming progress comes once per chunk of a reply: kept, it would crowd the agents'
        // and tools' ends (what the history's timeline draws) out of the first events.
        if matches!(
            event.kind,
            runner::host::events::EventKind::AgentProgress { .. }
        ) {
            return;
        }
        if let runner::host::events::EventKind::AgentTurn { tokens, .. } = event.kind {
            let total = self.tokens.fetch_add(tokens, Ordering::SeqCst) + tokens;
            if let Some((state, execution_id)) = &self.recording
                && let Err(e) = state.record_tokens(execution_id, total)
            {
                tracing::warn!(execution = %execution_id, "cannot record the tokens spent so far: {e}");
            }
        }
        let mut events = self
            .events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if events.len() < MAX_TRACE_EVENTS {
            events.push(event.clone());
        }
    }
}

#[cfg(test)]
mod trace_keeping {
    use super::*;
    use runner::host::events::EventKind;

    #[test]
    fn the_history_trace_skips_streaming_progress_and_keeps_a_bounded_number_of_events() {
        let keeper = TraceKeeper::default();
        let at = |elapsed_ms, kind| Event {
            elapsed_ms,
            depth: 0,
            kind,
        };
        for chars in 0..(MAX_TRACE_EVENTS * 2) {
            keeper.emit(&at(1, EventKind::AgentProgress { handle: 1, chars }));
        }
        keeper.emit(&at(
            2,
            EventKind::AgentFinished {
                handle: 1,
                label: None,
                tokens: 7,
                cost: 0.0,
            },
        ));
        let kept = keeper.to_json();
        assert_eq!(kept.as_array().map(Vec::len), Some(1), "{kept}");
        assert_eq!(kept[0]["event"], "agent_finished");
        for n in 0..(MAX_TRACE_EVENTS + 10) {
            keeper.emit(&at(
                3,
                EventKind::Log {
                    message: n.to_string(),
                },
            ));
        }
        assert_eq!(
            keeper.to_json().as_array().map(Vec::len),
            Some(MAX_TRACE_EVENTS)
        );
    }
}
