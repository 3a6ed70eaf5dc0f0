//! The desktop relay: outbound-only. Every pass it re-sends the outbox, syncs each enabled
//! project (uploading the metadata of the sessions shared with it, at most 100) and runs the
//! queued commands it gets back, one at a time, each after re-checking consent. SPEC.md §2.
//!
//! Passes run every [`DEFAULT_POLL_INTERVAL`] and right after a change to sharing; a pass that
//! is due while the previous one is still busy is skipped (and counted). All waiting uses
//! tokio's timers, so the simulator can drive the loop on paused time.
//!
//! The relay is one loop ([`Relay::run`]) that owns its state and takes events, the way
//! rust-analyzer's main loop does: timers, sharing changes, long-poll answers, and what its
//! tasks report (a command started or ended, the disk filled up, a pass ended). The work runs
//! in those tasks, one step per module: `pass` (a pass, and `handle`, one queued command's
//! path from consent to post, top to bottom), `consent` (the re-check before a run, and the
//! snapshot each sync carries), `execution` (starting and running a command, and bounding its
//! outcome), `outbox` (recording an end and posting it until the service has it), `withdrawal`
//! (the owed withdrawals of disabled projects) and `long_poll` (the held syncs of long-poll
//! mode). The state file is reached through [`state::AsyncState`], so no runtime worker ever
//! waits for SQLite.

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

mod consent;
mod ended;
mod execution;
mod long_poll;
mod outbox;
mod pass;
mod recovery;
mod resume;
mod trace;
mod withdrawal;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use runner::engine::Engine;
use runner::host::agents::AgentProvider;
use runner::host::events::EventSink;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use self::execution::{RunningCommand, Stop};
use self::pass::PassState;
use self::state::{AsyncState, DesktopState};
use relay_protocol::clock::Clock;
use relay_protocol::{DESKTOP_POLL_INTERVAL_SECS, DesktopProblem, EndCause, MAX_SYNC_WAIT_MS};

/// The pass interval: the protocol's poll interval, which the service's hints assume.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(DESKTOP_POLL_INTERVAL_SECS);
/// The first wait before a desktop call that must be answered is asked again.
pub const DEFAULT_CALL_RETRY: Duration = Duration::from_secs(1);
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
    /// A desktop call that must be answered (`started`) is asked again after this long, the
    /// wait doubling up to the poll interval (and never shorter than a `Retry-After`).
    pub call_retry: Duration,
    /// Reports on a running command (what it waits for, how far it got) go out at most this
    /// often.
    pub report_interval: Duration,
    /// Compiled graphs ([`compiled`]): shared sessions are compiled into components kept
    /// beside the state file, built and run with these limits (the wasm engine's), and remote
    /// runs start from them. `None` (the default): every run starts on the runtime's engine.
    pub compiled_graphs: Option<runner::engine::wasm::WasmLimits>,
    /// Resume the runs a stop interrupted from their journals (`relay desktop run
    /// --no-resume` turns it off: they are reported failed, as before issue 46).
    pub resume: bool,
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
            call_retry: DEFAULT_CALL_RETRY,
            compiled_graphs: None,
            resume: true,
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

/// A desktop token answered 401 this many times in a row stops the relay: it cannot work
/// until its owner gives it a valid token.
pub const MAX_UNAUTHORIZED: u64 = 2;

/// The desktop relay: what every step shares (the state, the service, the runtime, the
/// settings), none of it changed by the steps. What changes belongs to the loop.
pub struct Relay {
    state: AsyncState,
    api: api::DesktopApi,
    clock: Arc<dyn Clock>,
    runtime: Runtime,
    config: DesktopConfig,
    stats: Arc<RelayStats>,
    /// The shared sessions' compiled graphs, when on (and the state is a file).
    compiled: Option<Arc<compiled::CompiledGraphs>>,
    /// The interrupted executions start-up left for the first pass to resume.
    resumable: std::sync::Mutex<Vec<state::Unfinished>>,
}

/// Why the relay could not run.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The service refused the desktop token again and again.
    #[error("{0}")]
    Unauthorized(String),
    /// Another relay runs on the same state file.
    #[error(transparent)]
    Locked(#[from] lock::LockError),
}

impl Relay {
    /// A relay over `state` (its calls then run on the state's own thread), talking to the
    /// service through `api`.
    pub fn new(
        state: DesktopState,
        api: api::DesktopApi,
        clock: Arc<dyn Clock>,
        runtime: Runtime,
        config: DesktopConfig,
    ) -> Arc<Self> {
        let compiled = config
            .compiled_graphs
            .zip(state.path())
            .map(|(limits, path)| {
                Arc::new(
                    compiled::CompiledGraphs::new(
                        compiled::artifact_dir(path),
                        limits,
                        runtime.engine.clone(),
                    )
                    .with_floor(config.min_free_space),
                )
            });
        Arc::new(Self {
            compiled,
            state: AsyncState::new(state),
            api,
            clock,
            runtime,
            config,
            stats: Arc::new(RelayStats::default()),
            resumable: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<RelayStats> {
        &self.stats
    }

    /// The state, through its blocking API (tests, the CLI).
    pub fn state(&self) -> &DesktopState {
        self.state.blocking()
    }

    /// The shared sessions' compiled graphs, when they are on.
    pub fn compiled(&self) -> Option<&Arc<compiled::CompiledGraphs>> {
        self.compiled.as_ref()
    }

    /// Compiles, in the background, the sessions shared with enabled projects that have no
    /// compiled graph, and removes the compiled graphs none of them needs.
    async fn prepare_compiled(&self) {
        let Some(compiled) = &self.compiled else {
            return;
        };
        let read = self.state.call(|state| {
            let mut scripts = Vec::new();
            for project in state.enabled_projects()? {
                scripts.extend(
                    state
                        .shared_sessions(&project)?
                        .into_iter()
                        .map(|s| s.script),
                );
            }
            Ok(scripts)
        });
        match read.await {
            Ok(mut scripts) => {
                scripts.sort();
                scripts.dedup();
                compiled.prepare(scripts);
            }
            Err(e) => tracing::warn!("cannot read the shared sessions to compile them: {e}"),
        }
    }

    /// Runs the loop until `shutdown` fires: a pass at once, then every poll interval and
    /// right after each sharing change, a consent pass beside a busy pass on every sharing
    /// change, and in long-poll mode one held sync per enabled project. A running graph is
    /// stopped on shutdown and reported failed. A state error is logged and retried; only a
    /// refused token (twice in a row) or another relay on the same state file ends it.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) -> Result<(), RelayError> {
        // One relay per state file, held until this returns (an in-memory state has no file).
        let _lock = match self.state().path() {
            Some(path) => Some(lock::RelayLock::acquire(path)?),
            None => None,
        };
        let start_up_owed = !self.start_up().await;
        let (tell, events) = mpsc::unbounded_channel();
        let main = MainLoop {
            relay: self.clone(),
            // Stopped from outside, or by the loop itself when its token is refused.
            shutdown: shutdown.child_token(),
            tell: Tell(Some(tell)),
            idle_pass: Some(Box::new(PassState::new(start_up_owed))),
            pass_again: false,
            running: None,
            problem: None,
            polls: long_poll::Polls::new(self.config.long_poll, self.config.jitter_seed),
            unauthorized: 0,
            halted: None,
            passes: JoinSet::new(),
            background: JoinSet::new(),
        };
        main.run(events).await
    }
}

/// What the loop reacts to, besides its timers. Every event comes from a task the loop
/// started; none asks anything back, so a task never waits for the loop.
enum Event {
    /// The sharing version changed (the watch read a new one).
    SharingChanged,
    /// The enabled projects, as last read (the long polls follow them).
    Enabled(Vec<String>),
    /// A pass started running this command (`Some`), or it ended (`None`).
    Running(Option<RunningCommand>),
    /// Why no run starts now, as a pass last found it (every sync says it).
    Problem(Option<DesktopProblem>),
    /// A pass ended, handing its working state back.
    PassEnded(Box<PassState>),
    /// The owner asked here to cancel these commands (each still running, by the history).
    LocalCancels(Vec<relay_protocol::CommandId>),
    /// A sync was answered: accepted, refused as unauthorized (401), or neither.
    Synced(consent::Heard),
    /// A long poll ended.
    LongPolled(long_poll::Answered),
}

/// Where a step tells the loop what happened: the loop's channel, or nowhere for a step run
/// outside the loop ([`Relay::pass`], [`Relay::consent_pass`]). Unbounded, and bounded by
/// construction: each task sends a handful of events per command or poll.
#[derive(Clone, Default)]
struct Tell(Option<mpsc::UnboundedSender<Event>>);

impl Tell {
    fn send(&self, event: Event) {
        if let Some(events) = &self.0 {
            // The loop has stopped: nothing acts on the news any more.
            let _ = events.send(event);
        }
    }
}

/// The loop and everything it owns. Only the loop's own methods change it, each in reaction
/// to a timer or an event; no method here awaits anything but the next event, so a slow
/// service or a locked state file never holds it up.
struct MainLoop {
    relay: Arc<Relay>,
    shutdown: CancellationToken,
    tell: Tell,
    /// The passes' working state while no pass runs; a pass holds it while it runs, so a pass
    /// due meanwhile is skipped.
    idle_pass: Option<Box<PassState>>,
    /// A pass was due while one ran; in long-poll mode one more runs right after.
    pass_again: bool,
    /// The command running now: long polls name it, and a cancel they hear stops it.
    running: Option<RunningCommand>,
    /// Why no run starts now, as the last pass found it.
    problem: Option<DesktopProblem>,
    /// Long-poll mode's held syncs, one per enabled project.
    polls: long_poll::Polls,
    /// Syncs answered 401 in a row; at [`MAX_UNAUTHORIZED`] the relay stops.
    unauthorized: u64,
    /// Why the relay stopped by itself (its token was refused), once it did.
    halted: Option<String>,
    /// Passes and consent passes: waited for at shutdown (a running graph is reported).
    passes: JoinSet<()>,
    /// The sharing watch, long polls and reads for them: aborted at shutdown.
    background: JoinSet<()>,
}

impl MainLoop {
    async fn run(mut self, mut events: mpsc::UnboundedReceiver<Event>) -> Result<(), RelayError> {
        let config = &self.relay.config;
        let mut ticker = tokio::time::interval(config.poll_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.background.spawn(consent::watch_sharing(
            self.relay.clone(),
            self.tell.clone(),
        ));
        self.prepare_compiled();
        self.read_enabled();
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => break,
                _ = ticker.tick() => self.pass_due(),
                Some(event) = events.recv() => self.handle(event),
                Some(_) = self.passes.join_next(), if !self.passes.is_empty() => {}
                Some(_) = self.background.join_next(), if !self.background.is_empty() => {}
            }
        }
        self.background.abort_all();
        while self.passes.join_next().await.is_some() {}
        while self.background.join_next().await.is_some() {}
        match self.halted {
            Some(message) => Err(RelayError::Unauthorized(message)),
            None => Ok(()),
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::SharingChanged => self.sharing_changed(),
            Event::Enabled(projects) => {
                let polls = self.polls.follow(&projects);
                self.spawn_polls(polls);
            }
            Event::Running(running) => {
                self.running = running;
                // Long polls ask again at once, naming what runs now.
                let polls = self.polls.reissue();
                self.spawn_polls(polls);
            }
            Event::Problem(problem) => self.problem = problem,
            Event::PassEnded(pass) => {
                self.idle_pass = Some(pass);
                if std::mem::take(&mut self.pass_again) && !self.shutdown.is_cancelled() {
                    self.pass_due();
                }
            }
            Event::LocalCancels(ids) => self.local_cancels(ids),
            Event::Synced(heard) => self.heard(heard),
            Event::LongPolled(answered) => self.long_polled(answered),
        }
    }

    /// Starts a pass unless the previous one is still busy (then it is skipped and counted;
    /// in long-poll mode one more runs right after the busy one, so queued work is not left
    /// for the next interval).
    fn pass_due(&mut self) {
        let Some(mut pass) = self.idle_pass.take() else {
            self.relay
                .stats
                .passes_skipped
                .fetch_add(1, Ordering::Relaxed);
            if self.relay.config.long_poll.is_some() {
                self.pass_again = true;
            }
            tracing::debug!("the previous pass is still busy: skipping this one");
            return;
        };
        let (relay, tell, shutdown) =
            (self.relay.clone(), self.tell.clone(), self.shutdown.clone());
        self.passes.spawn(async move {
            relay.run_pass(&mut pass, &tell, &shutdown).await;
            tell.send(Event::PassEnded(pass));
        });
    }

    /// Tells the service the new sharing at once (beside a busy pass too: a withdrawal never
    /// waits for a running graph), compiles what is newly shared, follows the enabled projects
    /// with the long polls, and runs a pass now.
    fn sharing_changed(&mut self) {
        tracing::info!("sharing changed: telling the service and running a pass now");
        self.recheck_running();
        let (relay, tell, problem) = (self.relay.clone(), self.tell.clone(), self.problem.clone());
        self.passes
            .spawn(async move { relay.tell_sharing(&tell, problem.as_ref()).await });
        self.prepare_compiled();
        self.read_enabled();
        self.pass_due();
    }

    /// Stops the running command if the owner asked here to cancel it, and forgets the
    /// requests it acted on (one for a run not started yet waits for it).
    fn local_cancels(&mut self, ids: Vec<relay_protocol::CommandId>) {
        let Some(running) = &self.running else {
            return;
        };
        if !ids.contains(&running.id) {
            return;
        }
        running.stop_with(execution::Stop::of(
            relay_protocol::EndCause::OwnerCancelledDesktop,
        ));
        let (relay, id) = (self.relay.clone(), running.id);
        self.background.spawn(async move {
            if let Err(e) = relay
                .state
                .call(move |state| state.clear_local_cancels(&[id]))
                .await
            {
                tracing::warn!(command = %id, "cannot forget the owner's cancel it acted on: {e}");
            }
        });
    }

    /// Stops the running command when the sharing change withdrew the owner's consent for it
    /// (its session unshared or removed, its project disabled).
    fn recheck_running(&mut self) {
        let Some(running) = self.running.clone().filter(|r| !r.cancel_seen()) else {
            return;
        };
        let relay = self.relay.clone();
        self.background.spawn(async move {
            let (project, session, slug) = (
                running.project.clone(),
                running.session.clone(),
                running.slug.clone(),
            );
            if let Some(error) = relay.withdrawn(project, session, slug).await {
                running.stop_with(Stop {
                    cause: EndCause::ConsentWithdrawn,
                    error: error.to_owned(),
                });
            }
        });
    }

    fn prepare_compiled(&mut self) {
        let relay = self.relay.clone();
        self.background
            .spawn(async move { relay.prepare_compiled().await });
    }

    /// Reads the enabled projects for the long polls (long-poll mode only).
    fn read_enabled(&mut self) {
        if !self.polls.on() {
            return;
        }
        let (relay, tell) = (self.relay.clone(), self.tell.clone());
        self.background.spawn(async move {
            match relay.state.call(|state| state.enabled_projects()).await {
                Ok(projects) => tell.send(Event::Enabled(projects)),
                // The next sharing change reads them again; the passes go on meanwhile.
                Err(e) => {
                    tracing::error!("cannot read the enabled projects for the long polls: {e}")
                }
            }
        });
    }

    /// Counts syncs answered 401 in a row; the second stops the relay with a message saying
    /// what to do (any accepted sync resets the count).
    fn heard(&mut self, heard: consent::Heard) {
        match heard {
            consent::Heard::Accepted => self.unauthorized = 0,
            consent::Heard::Other => {}
            consent::Heard::Unauthorized => self.unauthorized += 1,
        }
        if self.unauthorized < MAX_UNAUTHORIZED || self.halted.is_some() {
            return;
        }
        let message = format!(
            "the service refused this relay's desktop token {MAX_UNAUTHORIZED} times in a row (401): it is revoked, expired or not a desktop token of this service; mint a new one with `relay admin token create --desktop` (or on the console) and start `relay desktop run --token ...` with it"
        );
        tracing::error!("{message}");
        self.halted = Some(message);
        self.shutdown.cancel();
    }

    /// Acts on a long poll's end: a cancel of the running command stops it, a queued command
    /// not seen before runs a pass now; the poll is asked again (at once, or after a wait
    /// when it failed).
    fn long_polled(&mut self, answered: long_poll::Answered) {
        let Some(outcome) = self.polls.answered(answered) else {
            return;
        };
        if let Some(running) = &self.running
            && outcome.cancel_requested.contains(&running.id)
        {
            // A sync answer does not say who asked: the control flag does (one quick call;
            // the agent when it cannot be read).
            let (relay, running) = (self.relay.clone(), running.clone());
            self.background.spawn(async move {
                let cause = match relay.api.control(&running.id).await {
                    Ok(answer) => answer.cancel_cause,
                    Err(e) => {
                        tracing::debug!(command = %running.id, "cannot read who cancelled the run: {e}");
                        None
                    }
                };
                running.cancel(cause);
            });
        }
        self.spawn_polls(outcome.next);
        if outcome.news {
            self.pass_due();
        }
    }

    /// Starts the long polls the loop asked for, each naming what runs now.
    fn spawn_polls(&mut self, polls: Vec<long_poll::Ask>) {
        for mut ask in polls {
            // A command whose cancel was already seen is not watched again.
            ask.running = self
                .running
                .as_ref()
                .filter(|r| !r.cancel_seen())
                .map(|r| r.id);
            ask.problem = self.problem.clone();
            let task = self.background.spawn(long_poll::poll(
                self.relay.clone(),
                self.tell.clone(),
                ask.clone(),
            ));
            self.polls.started(&ask, task);
        }
    }
}
