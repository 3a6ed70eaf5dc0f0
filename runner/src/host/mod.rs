//! The capabilities a graph may reach, one module each, and the per-graph [`Invocation`] that
//! wires them to an engine: it implements the `host` interface of `wit/graph.wit` (start work,
//! hand out handles, deliver each outcome once through `wait_any`).

pub mod agents;
pub mod anthropic;
pub mod approvals;
pub mod budget;
pub mod engine;
pub mod events;
pub mod graphs;
pub mod http;
pub mod journal;
mod journaled;
pub mod mock;
pub mod openai;
pub mod provider_config;
pub mod providers;
pub mod sse;
pub mod time;
pub mod tools;
pub mod wire;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use graph_js::{AgentRequest, Failure, FailureCode, Limits};
use rand::Rng as _;
use rand::rngs::StdRng;
use serde_json::Value;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use agents::{AgentContext, AgentProvider, ProviderProgress, Turn, Usage};
use approvals::{ApprovalRequest, Approvals, BoxFuture, Checked};
use budget::Budget;
use engine::Engine;
use events::{EventKind, Events};
use graphs::Catalog;
use time::{Activity, Busy, RunClock, SlotTicket, Slots};
use tools::ToolRegistry;

/// Longest `g.sleep` / retry delay.
pub const MAX_SLEEP_MS: u32 = 600_000;
/// Most handles one graph may have started and not yet collected.
pub const MAX_LIVE_HANDLES: usize = 10_000;
/// Most levels of nested arrays and objects in JSON leaving a graph (a result, a tool's or a
/// nested graph's arguments). Every hop after the graph wraps it in a few more levels (the
/// completion, the service's record, MCP's JSON-RPC answer) and common parsers, serde_json among
/// them, stop at 128: an MCP client could not read a result 125 levels deep.
pub const MAX_JSON_DEPTH: usize = 100;

/// Parses JSON text the interpreter sends out, as "`subject` `is` …" when it is refused: not
/// valid, or nested deeper than [`MAX_JSON_DEPTH`].
pub(crate) fn parse_outgoing(
    text: &str,
    subject: &str,
    is: &'static str,
) -> Result<Value, OutgoingError> {
    let too_deep = || OutgoingError::TooDeep {
        subject: subject.to_owned(),
        is,
    };
    match serde_json::from_str::<Value>(text) {
        Ok(value) if depth(&value) > MAX_JSON_DEPTH => Err(too_deep()),
        Ok(value) => Ok(value),
        // serde_json's own bound (128) calls deeper text a syntax error.
        Err(e) if e.to_string().starts_with("recursion limit exceeded") => Err(too_deep()),
        Err(reason) => Err(OutgoingError::Invalid {
            subject: subject.to_owned(),
            is,
            reason,
        }),
    }
}

/// Why JSON the interpreter sends out was refused, as "`subject` `is` …".
#[derive(Debug, thiserror::Error)]
pub(crate) enum OutgoingError {
    /// Nested deeper than [`MAX_JSON_DEPTH`].
    #[error(
        "{subject} {is} nested more than {MAX_JSON_DEPTH} levels of arrays and objects deep, the most JSON leaving a graph may have; flatten it"
    )]
    TooDeep {
        /// What the JSON is (`the result`, `fs.write: the arguments`).
        subject: String,
        /// `is` or `are`.
        is: &'static str,
    },
    /// Not valid JSON.
    #[error("{subject} {is} not valid JSON: {reason}")]
    Invalid {
        /// What the JSON is.
        subject: String,
        /// `is` or `are`.
        is: &'static str,
        /// serde_json's reason.
        reason: serde_json::Error,
    },
}

/// Levels of arrays and objects: 0 for a scalar. Recursion is bounded by serde_json's 128.
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(fields) => 1 + fields.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Everything one run shares across its graphs: the budget, approvals, providers, tools,
/// catalog, trace, concurrency slots and the cancellation that stops it all.
pub struct RunShared {
    /// The run's id (the desktop's execution id).
    pub run_id: String,
    /// The token meter.
    pub budget: Budget,
    /// Tool approvals.
    pub approvals: Approvals,
    /// Where agents run.
    pub provider: Arc<dyn AgentProvider>,
    /// Tools by name.
    pub tools: ToolRegistry,
    /// Nested graphs by slug.
    pub catalog: Arc<dyn Catalog>,
    /// The trace.
    pub events: Events,
    /// The engine nested graphs run on.
    pub engine: Arc<dyn Engine>,
    /// Interpreter limits.
    pub limits: Limits,
    /// The run clock: all time a graph sees, its timers and the trace's timestamps.
    pub clock: Arc<RunClock>,
    /// The seed of the run's random source (named in the trace).
    pub seed: u64,
    cancel: CancellationToken,
    stop_reason: OnceLock<(FailureCode, String)>,
    agent_slots: Arc<Slots>,
    live_graphs: AtomicUsize,
    /// Linear memory held by this run's sandboxed graph instances together (the top graph and
    /// every nested one); the wasm engine keeps the sum under its run-wide cap.
    pub sandbox_memory: std::sync::atomic::AtomicU64,
    /// Fuel burned by this run's sandboxed graph instances together: `--fuel` is one budget for
    /// the run, nested graphs included.
    pub sandbox_fuel_spent: std::sync::atomic::AtomicU64,
    /// Whether the trace has said that the budget is exhausted (it says so once per run).
    exhausted_reported: std::sync::atomic::AtomicBool,
    /// The run's journal, recorded or replayed (see `journal.rs`).
    journal: OnceLock<journal::JournalMode>,
}

/// What a run is built from (see [`crate::run::RunOptions`]).
pub struct RunParts {
    /// The run's id.
    pub run_id: String,
    /// Token cap.
    pub token_cap: Option<u64>,
    /// Tool approvals.
    pub approvals: Approvals,
    /// Agent provider.
    pub provider: Arc<dyn AgentProvider>,
    /// Tools.
    pub tools: ToolRegistry,
    /// Catalog for nested graphs.
    pub catalog: Arc<dyn Catalog>,
    /// Trace.
    pub events: Events,
    /// Engine for nested graphs.
    pub engine: Arc<dyn Engine>,
    /// Interpreter limits.
    pub limits: Limits,
    /// Agents running at once.
    pub max_concurrency: usize,
    /// Fires to stop the run.
    pub cancel: CancellationToken,
    /// The run clock (the trace's too: give `events` the same one).
    pub clock: Arc<RunClock>,
    /// The seed of the run's random source.
    pub seed: u64,
}

/// One of the run's nested graphs counted in `live_graphs`, from `start-graph` until its work
/// ends, fails to start or is dropped.
struct LiveGraph(Arc<RunShared>);

impl Drop for LiveGraph {
    fn drop(&mut self) {
        self.0.live_graphs.fetch_sub(1, Ordering::SeqCst);
    }
}

impl RunShared {
    /// Builds the shared state of one run.
    pub fn new(parts: RunParts) -> Arc<Self> {
        Arc::new(Self {
            run_id: parts.run_id,
            budget: Budget::new(parts.token_cap),
            approvals: parts.approvals,
            provider: parts.provider,
            tools: parts.tools,
            catalog: parts.catalog,
            events: parts.events,
            engine: parts.engine,
            limits: parts.limits,
            agent_slots: Slots::new(&parts.clock, parts.max_concurrency),
            clock: parts.clock,
            seed: parts.seed,
            cancel: parts.cancel,
            stop_reason: OnceLock::new(),
            live_graphs: AtomicUsize::new(0),
            sandbox_memory: std::sync::atomic::AtomicU64::new(0),
            sandbox_fuel_spent: std::sync::atomic::AtomicU64::new(0),
            exhausted_reported: std::sync::atomic::AtomicBool::new(false),
            journal: OnceLock::new(),
        })
    }

    /// Stops the run: every pending and later host call fails with `code` and `reason`.
    /// The first reason given wins.
    pub fn stop(&self, code: FailureCode, reason: impl Into<String>) {
        let _ = self.stop_reason.set((code, reason.into()));
        self.cancel.cancel();
    }

    /// Why the run was stopped, if it was.
    pub fn stopped(&self) -> Option<Failure> {
        if !self.cancel.is_cancelled() {
            return None;
        }
        Some(match self.stop_reason.get() {
            Some((code, reason)) => Failure::new(*code, reason.clone()),
            None => Failure::cancelled("the run was cancelled"),
        })
    }

    /// The token that fires when the run stops.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Calls a tool: an unknown name is `not_found`; then approvals (a tool without a policy is
    /// denied), then the tool, all abandoned if the run stops. Used by `g.tool` and by agents' tool loops alike.
    pub async fn call_tool(&self, depth: usize, name: &str, args: Value) -> Result<Value, Failure> {
        if let Some(stopped) = self.stopped() {
            return Err(stopped);
        }
        if !args.is_object() {
            return Err(Failure::invalid(format!(
                "{name}: arguments must be a JSON object"
            )));
        }
        // Existence before policy: the policy is consulted only for tools that exist, so no
        // message advises allowing a tool that does not.
        let Some(tool) = self.tools.get(name) else {
            let failure = self.tools.unknown(name);
            self.events.emit(
                depth,
                EventKind::ToolCalled {
                    tool: name.to_owned(),
                    error: Some(failure.message.clone()),
                },
            );
            return Err(failure);
        };
        let request = ApprovalRequest {
            run_id: self.run_id.clone(),
            tool: name.to_owned(),
            args,
            note: None,
        };
        let checked = match self.journaled_approval(&request) {
            Some(answer) => answer,
            None => {
                let checked = self
                    .approvals
                    .check(&request, &self.cancel, || {
                        self.events.emit(
                            depth,
                            EventKind::ApprovalRequested {
                                tool: name.to_owned(),
                            },
                        );
                    })
                    .await;
                self.record_approval(&request, &checked);
                checked
            }
        };
        if let Err(failure) = checked {
            if failure.code == FailureCode::Denied {
                self.events.emit(
                    depth,
                    EventKind::ToolDenied {
                        tool: name.to_owned(),
                        reason: failure.message.clone(),
                    },
                );
            }
            return Err(failure);
        }
        debug_assert!(matches!(checked, Ok(Checked::Allowed | Checked::Approved)));
        let outcome = tokio::select! {
            outcome = tool.call(request.args) => outcome,
            () = self.cancel.cancelled() => Err(self.stopped().unwrap_or_else(|| Failure::cancelled("the run was cancelled"))),
        };
        self.events.emit(
            depth,
            EventKind::ToolCalled {
                tool: name.to_owned(),
                error: outcome.as_ref().err().map(|f| f.to_string()),
            },
        );
        outcome
    }
}

type Outcome = Result<String, Failure>;

/// Most bytes one `random-bytes` call hands out (as `crypto.getRandomValues` allows).
pub const MAX_RANDOM_BYTES: usize = 65_536;

/// One graph's view of its run: the handles it started and the outcomes not yet collected.
/// Engines drive it through the `host` interface; dropping it aborts work still running.
pub struct Invocation {
    run: Arc<RunShared>,
    chain: Vec<String>,
    runtime: tokio::runtime::Handle,
    /// The graph's code as an activity of the run clock: busy except while it waits.
    activity: Activity,
    /// The key of this graph's random stream (the run's seed for the top graph).
    random_key: u64,
    random: StdRng,
    next_handle: u32,
    /// The graph's journaled calls so far (the last one's `seq`).
    seq: u32,
    tasks: JoinSet<(u32, Outcome, Busy)>,
    task_handles: HashMap<tokio::task::Id, u32>,
    live: HashSet<u32>,
    finished: HashMap<u32, Outcome>,
    /// The tokens of each started agent, applied to the budget when the graph awaits it.
    tallies: HashMap<u32, Arc<AtomicU64>>,
    /// The graph's file as the run names it, for the warnings the driver writes as `graph.js`.
    file: Option<String>,
    /// In a replay, the starts the journal answered and no outcome of theirs yet: a resume
    /// launches them live where the journal runs out (`journaled.rs`).
    in_flight: std::collections::BTreeMap<u32, journaled::Pending>,
    /// The run-clock time of the start the replay answered last (sleeps journal it).
    replayed_start_t: Option<u64>,
    /// A nested graph in flight when a resumed run went live: its calls' journal (else the
    /// run's journal answers, if any).
    replay: Option<Arc<journal::Replayer>>,
}

impl Drop for Invocation {
    /// A graph's work ends when it returns: what it left running is aborted (the tasks' set is
    /// dropped after this) and its timers never fire; when the top graph returns, the run clock
    /// stops too, so a run that leaves work pending ends the same way every time.
    fn drop(&mut self) {
        if self.activity.path().is_empty() {
            self.run.clock.end();
        } else {
            self.run.clock.drop_timers_under(self.activity.path());
        }
    }
}

impl Invocation {
    /// The top graph of `run`, or a nested one: `chain` is the slugs from the top down to it.
    pub fn new(run: Arc<RunShared>, chain: Vec<String>, runtime: tokio::runtime::Handle) -> Self {
        let activity = Activity::new(&run.clock, time::Path::from([]));
        let key = run.seed;
        Self::with_activity(run, chain, runtime, activity, key)
    }

    /// A graph whose code runs as `activity`, drawing on the random stream `random_key`.
    fn with_activity(
        run: Arc<RunShared>,
        chain: Vec<String>,
        runtime: tokio::runtime::Handle,
        activity: Activity,
        random_key: u64,
    ) -> Self {
        Self {
            run,
            chain,
            runtime,
            activity,
            random_key,
            random: time::stream(random_key),
            next_handle: 0,
            seq: 0,
            tasks: JoinSet::new(),
            task_handles: HashMap::new(),
            live: HashSet::new(),
            finished: HashMap::new(),
            tallies: HashMap::new(),
            file: None,
            in_flight: std::collections::BTreeMap::new(),
            replayed_start_t: None,
            replay: None,
        }
    }

    /// Names the graph's file (`graphs/research.js`) in the warnings of its trace.
    pub fn with_file(mut self, file: impl Into<String>) -> Self {
        self.file = Some(file.into());
        self
    }

    /// The run this graph belongs to.
    pub fn run(&self) -> &Arc<RunShared> {
        &self.run
    }

    /// Nesting depth (0: the top graph).
    pub fn depth(&self) -> usize {
        self.chain.len().saturating_sub(1)
    }

    fn admit_new_handle(&mut self) -> Result<u32, Failure> {
        if let Some(stopped) = self.run.stopped() {
            return Err(stopped);
        }
        if self.live.len() >= MAX_LIVE_HANDLES {
            return Err(Failure::invalid(format!(
                "more than {MAX_LIVE_HANDLES} operations started and not awaited"
            )));
        }
        self.next_handle = self.next_handle.wrapping_add(1).max(1);
        Ok(self.next_handle)
    }

    /// A random stream for one of this graph's WASI interfaces (`tag` names it), derived from
    /// its own: the guest's standard library draws there, never on the machine.
    pub fn wasi_random(&self, tag: u64) -> StdRng {
        time::stream(time::derive_key(self.random_key, tag))
    }

    /// The path of the operation `handle` of this graph.
    fn child_path(&self, handle: u32) -> time::Path {
        time::child_path(self.activity.path(), handle)
    }

    /// Runs `work` for `handle` as an activity of its own.
    fn spawn(
        &mut self,
        handle: u32,
        work: impl std::future::Future<Output = Outcome> + Send + 'static,
    ) -> u32 {
        let activity = Activity::new(&self.run.clock, self.child_path(handle));
        self.spawn_as(handle, activity, work)
    }

    /// Runs `work` for `handle` as `activity`; its outcome reaches the graph with the activity's
    /// busy token, so the clock cannot move in between.
    fn spawn_as(
        &mut self,
        handle: u32,
        activity: Activity,
        work: impl std::future::Future<Output = Outcome> + Send + 'static,
    ) -> u32 {
        let task = self.tasks.spawn_on(
            time::scoped(activity.clone(), async move {
                let outcome = work.await;
                (handle, outcome, activity.take())
            }),
            &self.runtime,
        );
        self.task_handles.insert(task.id(), handle);
        self.live.insert(handle);
        handle
    }

    /// `start-agent`.
    pub fn start_agent(&mut self, request: AgentRequest) -> Result<u32, Failure> {
        let what = request.label.clone().unwrap_or_default();
        let inputs = serde_json::to_string(&request).unwrap_or_default();
        let digest = journal::digest(&[&inputs]);
        if let Some(answer) = self.replay_start(journal::Call::Agent, &what, &digest) {
            return self.replayed(answer, journaled::Pending::Agent(request));
        }
        let answer = self.start_agent_live(request);
        self.record_start(journal::Call::Agent, what, digest, answer)
    }

    fn start_agent_live(&mut self, request: AgentRequest) -> Result<u32, Failure> {
        agents::validate(&request)?;
        self.run
            .provider
            .check_model(request.model.as_deref())
            .map_err(Failure::from)?;
        let mut specs = Vec::with_capacity(request.tools.len());
        for name in &request.tools {
            let tool = self.run.tools.get(name).ok_or_else(|| {
                Failure::not_found(format!(
                    "agent tools: {}",
                    self.run.tools.unknown_message(name)
                ))
            })?;
            specs.push(tool.spec());
        }
        // Admitted now, against the work this graph has awaited (see budget.rs's rule).
        let (max_tokens, standing) = match self.run.budget.admit(request.max_tokens) {
            Ok(admitted) => admitted,
            Err(refused) => {
                emit_exhausted(&self.run, self.depth(), self.run.budget.applied());
                return Err(refused);
            }
        };
        let handle = self.admit_new_handle()?;
        let tally = Arc::new(AtomicU64::new(0));
        self.tallies.insert(handle, tally.clone());
        let run = self.run.clone();
        let depth = self.depth();
        // The agent's place among the slots is taken now, in the order the graph starts agents;
        // one that has a slot at once is said to start now, in that order too.
        let ticket = self.run.agent_slots.reserve(&self.child_path(handle));
        let announced = matches!(ticket, SlotTicket::Granted(_));
        if announced {
            emit_agent_started(&run, depth, handle, &request, max_tokens);
        }
        let admission = Admission {
            max_tokens,
            standing,
            tally,
            announced,
        };
        let agent = run_agent_task(run, depth, handle, ticket, request, specs, admission);
        Ok(self.spawn(handle, agent))
    }

    /// Applies the tokens of `handle`'s agent to the budget: the graph now has its outcome.
    fn apply_tokens(&mut self, handle: u32) {
        if let Some(tally) = self.tallies.remove(&handle) {
            self.run.budget.apply(tally.swap(0, Ordering::SeqCst));
        }
    }

    /// `start-tool`.
    pub fn start_tool(&mut self, name: &str, args: &str) -> Result<u32, Failure> {
        let digest = journal::digest(&[name, args]);
        if let Some(answer) = self.replay_start(journal::Call::Tool, name, &digest) {
            let pending = journaled::Pending::Tool(name.to_owned(), args.to_owned());
            return self.replayed(answer, pending);
        }
        let answer = self.start_tool_live(name, args);
        self.record_start(journal::Call::Tool, name.to_owned(), digest, answer)
    }

    fn start_tool_live(&mut self, name: &str, args: &str) -> Result<u32, Failure> {
        let args = parse_outgoing(args, &format!("{name}: the arguments"), "are")
            .map_err(|e| Failure::invalid(e.to_string()))?;
        if !args.is_object() {
            return Err(Failure::invalid(format!(
                "{name}: arguments must be a JSON object"
            )));
        }
        let handle = self.admit_new_handle()?;
        let run = self.run.clone();
        let depth = self.depth();
        let name = name.to_owned();
        Ok(self.spawn(handle, async move {
            let value = run.call_tool(depth, &name, args).await?;
            Ok(value.to_string())
        }))
    }

    /// `start-graph`.
    pub fn start_graph(&mut self, slug: &str, args: &str) -> Result<u32, Failure> {
        let digest = journal::digest(&[slug, args]);
        if let Some(answer) = self.replay_start(journal::Call::Graph, slug, &digest) {
            let pending = journaled::Pending::Graph(slug.to_owned(), args.to_owned());
            return self.replayed(answer, pending);
        }
        let answer = self.start_graph_live(slug, args, None);
        self.record_start(journal::Call::Graph, slug.to_owned(), digest, answer)
    }

    /// Starts the nested graph `slug`; `replay` answers its calls first (it was in flight when
    /// a resumed run went live).
    fn start_graph_live(
        &mut self,
        slug: &str,
        args: &str,
        replay: Option<Arc<journal::Replayer>>,
    ) -> Result<u32, Failure> {
        graphs::check_depth(&self.chain, slug)?;
        let parsed = parse_outgoing(args, &format!("graph {slug}: the arguments"), "are")
            .map_err(|e| Failure::invalid(e.to_string()))?;
        if !parsed.is_object() {
            return Err(Failure::invalid(format!(
                "graph {slug}: arguments must be a JSON object"
            )));
        }
        let handle = self.admit_new_handle()?;
        let running = self.run.live_graphs.fetch_add(1, Ordering::SeqCst);
        let live = LiveGraph(self.run.clone());
        if running >= graphs::MAX_LIVE_GRAPHS {
            return Err(Failure::failed(format!(
                "more than {} nested graphs running at once in this run",
                graphs::MAX_LIVE_GRAPHS
            )));
        }
        let mut chain = self.chain.clone();
        chain.push(slug.to_owned());
        // The nested graph's code is the operation's activity, and draws on a stream of its own.
        let activity = Activity::new(&self.run.clock, self.child_path(handle));
        let mut child = Invocation::with_activity(
            self.run.clone(),
            chain,
            self.runtime.clone(),
            activity.clone(),
            time::derive_key(self.random_key, u64::from(handle)),
        );
        child.replay = replay;
        let run = self.run.clone();
        let depth = self.depth();
        let slug = slug.to_owned();
        let args = args.to_owned();
        Ok(self.spawn_as(handle, activity, async move {
            // The catalog may read its folder now, on the run's first nested call.
            let source = run.catalog.lookup(&slug).await?;
            check_nested_args(&slug, &source.meta, &parsed)?;
            run.events.emit(
                depth,
                EventKind::GraphStarted {
                    handle,
                    slug: slug.clone(),
                },
            );
            // A built component runs on its own engine, a source on the run's.
            let engine = source.engine.as_ref().unwrap_or(&run.engine);
            let file = source
                .file
                .as_deref()
                .map_or_else(|| format!("{slug}.js"), str::to_owned);
            let child = child.with_file(file.clone());
            let outcome = engine.run(source.script.clone(), args, child).await;
            let outcome = outcome.map_err(|e| crate::location::name_file(&e.to_string(), &file));
            drop(live);
            run.events.emit(
                depth,
                EventKind::GraphFinished {
                    handle,
                    slug: slug.clone(),
                    error: outcome.as_ref().err().cloned(),
                },
            );
            match outcome {
                Ok(json) => Ok(json),
                Err(_) if run.cancel.is_cancelled() => Err(stopped_failure(&run)),
                Err(e) => Err(Failure::failed(nested_failure(&slug, &e))),
            }
        }))
    }

    /// `start-sleep`.
    pub fn start_sleep(&mut self, ms: u32) -> Result<u32, Failure> {
        let what = format!("{ms} ms");
        let digest = journal::digest(&[&what]);
        if let Some(answer) = self.replay_start(journal::Call::Sleep, &what, &digest) {
            let started = self.replayed_start_t.take();
            return self.replayed(answer, journaled::Pending::Sleep(ms, started));
        }
        let answer = self.start_sleep_live(ms);
        self.record_start(journal::Call::Sleep, what, digest, answer)
    }

    fn start_sleep_live(&mut self, ms: u32) -> Result<u32, Failure> {
        if ms > MAX_SLEEP_MS {
            return Err(Failure::invalid(format!(
                "sleep of {ms} ms is over the limit of {MAX_SLEEP_MS} ms"
            )));
        }
        let handle = self.admit_new_handle()?;
        let run = self.run.clone();
        Ok(self.spawn(handle, async move {
            tokio::select! {
                () = time::sleep(Duration::from_millis(u64::from(ms))) => Ok("null".to_owned()),
                () = run.cancel.cancelled() => Err(stopped_failure(&run)),
            }
        }))
    }

    /// `wait-any`: the first of `handles` to finish, with its outcome (delivered once).
    pub async fn wait_any(&mut self, handles: &[u32]) -> (u32, Outcome) {
        if let Some(answer) = self.replay_wait(handles) {
            return answer;
        }
        let answer = self.wait_any_live(handles).await;
        self.record_wait(handles, answer)
    }

    async fn wait_any_live(&mut self, handles: &[u32]) -> (u32, Outcome) {
        let Some(&first) = handles.first() else {
            return (
                0,
                Err(Failure::invalid("wait-any needs at least one handle")),
            );
        };
        if let Some(&unknown) = handles
            .iter()
            .find(|h| !self.live.contains(h) && !self.finished.contains_key(h))
        {
            return (
                unknown,
                Err(Failure::invalid(format!(
                    "handle {unknown} was not started by this graph or was already collected"
                ))),
            );
        }
        loop {
            for &handle in handles {
                if let Some(outcome) = self.finished.remove(&handle) {
                    self.apply_tokens(handle);
                    return (handle, outcome);
                }
            }
            if let Some(stopped) = self.run.stopped() {
                return (first, Err(stopped));
            }
            // The graph waits: the clock may move until an outcome hands it a busy token.
            drop(self.activity.take());
            let joined = tokio::select! {
                // An outcome ready as the run stops is collected first, as the loop above
                // hands out collected ones before it looks at the stop: not a random pick.
                biased;
                joined = self.tasks.join_next_with_id() => joined,
                () = self.run.cancel.cancelled() => {
                    self.activity.resume_fresh();
                    continue;
                }
            };
            match joined {
                Some(Ok((id, (handle, outcome, busy)))) => {
                    self.activity.resume(busy);
                    self.task_handles.remove(&id);
                    self.live.remove(&handle);
                    self.finished.insert(handle, outcome);
                }
                Some(Err(error)) => {
                    self.activity.resume_fresh();
                    let Some(handle) = self.task_handles.remove(&error.id()) else {
                        continue;
                    };
                    self.live.remove(&handle);
                    let reason = if error.is_panic() {
                        "the host operation crashed"
                    } else {
                        "the host operation was aborted"
                    };
                    self.finished.insert(handle, Err(Failure::failed(reason)));
                }
                None => {
                    self.activity.resume_fresh();
                    return (
                        first,
                        Err(Failure::invalid("nothing is running for these handles")),
                    );
                }
            }
        }
    }

    /// `tokens-used`: the tokens of the work graphs have awaited (what admission counts).
    pub fn tokens_used(&mut self) -> u64 {
        if let Some(used) = self.replay_tokens() {
            return used;
        }
        let used = self.run.budget.applied();
        self.record_tokens(used)
    }

    /// `token-cap`.
    pub fn token_cap(&self) -> Option<u64> {
        self.run.budget.cap()
    }

    /// `clock-now`.
    pub fn clock_now(&mut self) -> graph_js::ClockReading {
        if let Some(reading) = self.replay_clock() {
            return reading;
        }
        let reading = self.run.clock.now();
        self.record_clock(reading)
    }

    /// `random-bytes`: fills `out` (at most [`MAX_RANDOM_BYTES`] of it) from this graph's
    /// stream of the run's random source.
    pub fn random_bytes(&mut self, out: &mut [u8]) {
        let n = out.len().min(MAX_RANDOM_BYTES);
        self.journal_random(n);
        self.random.fill_bytes(&mut out[..n]);
    }

    /// `log`.
    pub fn log(&mut self, message: &str) {
        self.journal_log();
        let cut: String = message.chars().take(graph_js::MAX_LOG_LINE_CHARS).collect();
        // The driver's warnings name the file as `graph.js`, the only name it knows.
        let named = match (cut.strip_prefix(graph_js::WARNING_PREFIX), &self.file) {
            (Some(rest), Some(file)) => format!(
                "{}{}",
                graph_js::WARNING_PREFIX,
                crate::location::name_file(rest, file)
            ),
            _ => cut,
        };
        self.run.events.log(self.depth(), &named);
    }
}

/// How the budget admitted an agent when the graph started it.
struct Admission {
    /// Its first turn's `max_tokens`, clipped to what remained.
    max_tokens: Option<u32>,
    /// The applied tokens it was admitted against.
    standing: u64,
    /// Its own tokens so far, applied when the graph awaits it.
    tally: Arc<AtomicU64>,
    /// Whether the trace already says it started (it had a slot at once).
    announced: bool,
}

fn emit_agent_started(
    run: &RunShared,
    depth: usize,
    handle: u32,
    request: &AgentRequest,
    max_tokens: Option<u32>,
) {
    run.events.emit(
        depth,
        EventKind::AgentStarted {
            handle,
            label: request.label.clone(),
            max_tokens,
        },
    );
}

/// An agent started (and admitted) by `start-agent`, once it has one of the run's agent slots:
/// run through the agent loop, reported in the trace. It is not checked again when it gets its
/// slot: when other agents finish must not decide whether it runs.
async fn run_agent_task(
    run: Arc<RunShared>,
    depth: usize,
    handle: u32,
    ticket: SlotTicket,
    request: AgentRequest,
    specs: Vec<agents::ToolSpec>,
    admission: Admission,
) -> Result<String, Failure> {
    let activity = time::current();
    let _permit = tokio::select! {
        permit = ticket.wait(&activity) => permit,
        () = run.cancel.cancelled() => return Err(stopped_failure(&run)),
    };
    let max_tokens = admission.max_tokens;
    if !admission.announced {
        emit_agent_started(&run, depth, handle, &request, max_tokens);
    }
    let context = AgentCtx {
        run: run.clone(),
        depth,
        handle,
        standing: admission.standing,
        tally: admission.tally,
    };
    let outcome = agents::run_agent(
        &run.provider,
        &context,
        &request,
        specs,
        max_tokens,
        &run.cancel,
    )
    .await;
    report_agent(&run, depth, handle, request.label.clone(), outcome)
}

/// Reports an agent's outcome in the trace and turns it into what the graph gets: the reply as
/// JSON, or the failure (the run's stop for a cancelled agent).
fn report_agent(
    run: &RunShared,
    depth: usize,
    handle: u32,
    label: Option<String>,
    outcome: Result<agents::AgentReply, Failure>,
) -> Result<String, Failure> {
    match outcome {
        Ok(reply) => {
            run.events.emit(
                depth,
                EventKind::AgentFinished {
                    handle,
                    label: reply.label.clone(),
                    tokens: reply.tokens,
                    cost: reply.cost,
                },
            );
            serde_json::to_string(&reply)
                .map_err(|e| Failure::failed(format!("cannot encode the reply: {e}")))
        }
        Err(failure) => {
            run.events.emit(
                depth,
                EventKind::AgentFailed {
                    handle,
                    label,
                    error: failure.to_string(),
                },
            );
            if failure.code == FailureCode::Cancelled {
                Err(stopped_failure(run))
            } else {
                Err(failure)
            }
        }
    }
}

fn stopped_failure(run: &RunShared) -> Failure {
    run.stopped()
        .unwrap_or_else(|| Failure::cancelled("the run was cancelled"))
}

/// Says in the trace, the first time only, that the budget is exhausted: `used` tokens (as
/// admission counted them) reached the cap.
fn emit_exhausted(run: &RunShared, depth: usize, used: u64) {
    if run
        .exhausted_reported
        .swap(true, std::sync::atomic::Ordering::SeqCst)
    {
        return;
    }
    run.events.emit(
        depth,
        EventKind::BudgetExhausted {
            used,
            cap: run.budget.cap().unwrap_or(0),
        },
    );
}

/// The agent loop's view of the run. Its later turns are admitted against the tokens that stood
/// when it was admitted plus its own, never against other work's timing.
struct AgentCtx {
    run: Arc<RunShared>,
    depth: usize,
    handle: u32,
    standing: u64,
    tally: Arc<AtomicU64>,
}

impl AgentCtx {
    fn standing(&self) -> u64 {
        self.standing
            .saturating_add(self.tally.load(Ordering::SeqCst))
    }
}

impl AgentContext for AgentCtx {
    fn admit(&self, max_tokens: Option<u32>) -> Result<Option<u32>, Failure> {
        let standing = self.standing();
        let admitted = self.run.budget.admit_from(standing, max_tokens);
        if admitted.is_err() {
            emit_exhausted(&self.run, self.depth, standing);
        }
        admitted
    }

    fn record(&self, usage: Usage, cost: f64) {
        self.run.budget.record(usage.total(), cost);
        self.run.record_usage(usage.total(), cost);
        self.tally.fetch_add(usage.total(), Ordering::SeqCst);
    }

    fn exhausted(&self) -> Option<Failure> {
        let standing = self.standing();
        if self.run.budget.reached(standing) {
            emit_exhausted(&self.run, self.depth, standing);
            Some(self.run.budget.exhausted_failure(standing))
        } else {
            None
        }
    }

    fn call_tool<'a>(
        &'a self,
        name: &'a str,
        args: Value,
    ) -> BoxFuture<'a, Result<Value, Failure>> {
        Box::pin(self.run.call_tool(self.depth, name, args))
    }

    fn on_turn(&self, turn_number: u32, turn: &Turn) {
        self.run.events.emit(
            self.depth,
            EventKind::AgentTurn {
                handle: self.handle,
                turn: turn_number,
                tokens: turn.usage.total(),
                input_tokens: turn.usage.input_tokens,
                output_tokens: turn.usage.output_tokens,
                model: turn.model.clone(),
                finish_reason: turn.finish_reason.clone(),
                tool_calls: turn
                    .tool_calls
                    .iter()
                    .map(|c| events::TurnToolCall {
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    })
                    .collect(),
            },
        );
    }

    fn on_progress(&self, progress: ProviderProgress) {
        let kind = match progress {
            ProviderProgress::Chars(chars) => EventKind::AgentProgress {
                handle: self.handle,
                chars,
            },
            ProviderProgress::Retry { attempt, reason } => EventKind::AgentRetry {
                handle: self.handle,
                attempt,
                reason,
            },
        };
        self.run.events.emit(self.depth, kind);
    }
}

/// Checks a nested graph's arguments against its `meta.args` schema before it starts: a
/// mismatch is `invalid`, names the failing path under `args`, and the graph never runs.
fn check_nested_args(slug: &str, meta: &graph_js::Meta, args: &Value) -> Result<(), Failure> {
    crate::args::check(meta, args, "args")
        .map_err(|message| Failure::invalid(format!("graph {slug}: {message}")))
}

/// The failure of a nested graph `slug` that failed with `error`: its location, when its own
/// code failed, comes first, so that it survives any cut.
fn nested_failure(slug: &str, error: &str) -> String {
    if let Some(short) = too_deep(error) {
        return short;
    }
    match graph_js::leading_location(error) {
        Some(leading) => format!(
            "{}: graph {slug} failed: {}",
            &error[..leading.rest - 2],
            &error[leading.rest..]
        ),
        None => format!("graph {slug} failed: {error}"),
    }
}

/// A nesting-limit refusal, however many graphs it failed through, said once: the place of the
/// call that went too deep, the limit's sentence and the code frame, without one `graph … failed:`
/// per level.
fn too_deep(error: &str) -> Option<String> {
    let at = error.find(graphs::NESTING_LIMIT)?;
    let mut before = &error[..at];
    loop {
        let peeled = before.strip_suffix("failed: ").map(|rest| {
            // `graph SLUG failed: ` (a slug has no space) or a failure's `failed: ` code.
            match rest.strip_suffix(' ').and_then(|r| r.rsplit_once("graph ")) {
                Some((head, slug)) if !slug.contains(' ') => head,
                _ => rest,
            }
        });
        match peeled {
            Some(rest) if rest.len() < before.len() => before = rest,
            _ => break,
        }
    }
    let place = before.trim_end().rsplit(' ').next().unwrap_or_default();
    let located = format!("{place} ");
    if graph_js::leading_location(&located).is_some() {
        Some(format!("{located}{}", &error[at..]))
    } else {
        Some(error[at..].to_owned())
    }
}
