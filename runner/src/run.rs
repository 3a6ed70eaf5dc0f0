//! `run_graph`: the one entry point that runs a graph with a hard token cap, approvals and a
//! deadline, and reports exactly one outcome. Used by the CLI and by the desktop relay.

use std::sync::Arc;
use std::time::Duration;

use graph_js::{FailureCode, Limits};
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::host::agents::{AgentProvider, NoProvider};
use crate::host::approvals::{
    ApprovalPolicy, Approvals, Approver, DEFAULT_APPROVAL_TIMEOUT, NobodyToAsk,
};
use crate::host::engine::Engine;
use crate::host::events::{EventKind, EventSink, Events, FanOut, NullSink};
use crate::host::graphs::{Catalog, EmptyCatalog};
use crate::host::journal::{self, Entry, Header, JournalMode, RecordEvents};
use crate::host::time::{ClockSetting, RunClock, fresh_seed};
use crate::host::tools::ToolRegistry;
use crate::host::{Invocation, RunParts, RunShared};

/// Agents of one run running at once, by default.
pub const DEFAULT_MAX_CONCURRENCY: usize = 4;
/// Upper bound on `max_concurrency`.
pub const MAX_CONCURRENCY: usize = 64;
/// A run's wall-clock deadline, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// After a cancel or the deadline, how long `run_graph` waits for the engine to stop before it
/// reports the outcome anyway.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// The graph returned a result.
    Completed,
    /// The graph threw, hit a limit, or could not start.
    Failed,
    /// The run was cancelled from outside.
    Cancelled,
}

impl RunStatus {
    /// The status as written in outcomes.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }
}

/// The one outcome of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunOutcome {
    /// The run's id.
    pub run_id: String,
    /// How it ended.
    pub status: RunStatus,
    /// The graph's result, when completed.
    pub result: Option<Value>,
    /// Why it did not complete.
    pub error: Option<String>,
    /// Tokens metered over the whole run.
    pub total_tokens: u64,
    /// Cost reported by providers.
    pub reported_cost: f64,
    /// Where the graph's own code failed (the error text starts with it), when it did.
    pub location: Option<crate::location::Location>,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The module text.
    pub script: Arc<str>,
    /// Arguments (must be a JSON object).
    pub args: Value,
    /// Name for the trace (slug or file name).
    pub graph: String,
    /// Run id to use; a fresh UUID otherwise.
    pub run_id: Option<String>,
}

/// How to run it.
#[derive(Clone)]
pub struct RunOptions {
    /// The engine.
    pub engine: Arc<dyn Engine>,
    /// Where agents run.
    pub provider: Arc<dyn AgentProvider>,
    /// Tools.
    pub tools: ToolRegistry,
    /// Tool approval policy.
    pub policy: ApprovalPolicy,
    /// Who answers `ask`.
    pub approver: Arc<dyn Approver>,
    /// How long an `ask` waits.
    pub approval_timeout: Duration,
    /// Nested graphs by slug.
    pub catalog: Arc<dyn Catalog>,
    /// Hard token cap.
    pub token_cap: Option<u64>,
    /// Agents at once.
    pub max_concurrency: usize,
    /// Wall-clock deadline.
    pub timeout: Duration,
    /// Where the trace goes.
    pub events: Arc<dyn EventSink>,
    /// Interpreter limits.
    pub limits: Limits,
    /// The seed of the run's random source; a fresh one from the OS when `None`.
    pub seed: Option<u64>,
    /// The run clock: real, or virtual from a fixed start.
    pub clock: ClockSetting,
    /// The run's journal: recorded (`runner run --record`) or replayed (`runner replay`).
    pub journal: Option<JournalMode>,
}

impl RunOptions {
    /// Defaults: no provider, no tools allowed, no catalog, no cap, 4 agents at once, 300 s.
    pub fn new(engine: Arc<dyn Engine>) -> Self {
        Self {
            engine,
            provider: Arc::new(NoProvider),
            tools: ToolRegistry::default(),
            policy: ApprovalPolicy::default(),
            approver: Arc::new(NobodyToAsk),
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            catalog: Arc::new(EmptyCatalog),
            token_cap: None,
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            timeout: DEFAULT_TIMEOUT,
            events: Arc::new(NullSink),
            limits: Limits::default(),
            seed: None,
            clock: ClockSetting::Real,
            journal: None,
        }
    }
}

/// Runs one graph to exactly one outcome. `cancel` stops it from outside: the outcome is then
/// `cancelled`, whatever the graph did in between.
pub async fn run_graph(
    request: RunRequest,
    options: &RunOptions,
    cancel: CancellationToken,
) -> RunOutcome {
    let run_id = request
        .run_id
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let run = new_run(&run_id, options, cancel.child_token());
    let header = write_header(&request, options, &run);
    run.events.emit(
        0,
        EventKind::RunStarted {
            run_id: run_id.clone(),
            graph: request.graph.clone(),
            engine: options.engine.name().to_owned(),
            seed: run.seed,
            clock: run.clock.setting().to_string(),
        },
    );
    let (status, result, error) = if let Err(error) = header {
        (RunStatus::Failed, None, Some(error.to_string()))
    } else if request.args.is_object() {
        let ran = run_top_graph(&request, options, &run, &cancel).await;
        replay_checked(&run, ran)
    } else {
        (
            RunStatus::Failed,
            None,
            Some("the arguments must be a JSON object".to_owned()),
        )
    };
    // A cancel seen at any point decides the outcome, even if the graph finished meanwhile.
    let (status, result, error) = if cancel.is_cancelled() {
        (
            RunStatus::Cancelled,
            None,
            Some("the run was cancelled".to_owned()),
        )
    } else {
        (status, result, error)
    };
    // Stops work the graph started and never awaited.
    run.stop(FailureCode::Cancelled, "the run has ended");
    // A run whose journal could not be written fails: its record is incomplete.
    let (status, result, error) = match run.recorder().and_then(|r| r.error()) {
        Some(journal_error) => (RunStatus::Failed, None, Some(journal_error.to_string())),
        None => (status, result, error),
    };
    let location = match status {
        RunStatus::Failed => error.as_deref().and_then(crate::location::of),
        _ => None,
    };
    let outcome = RunOutcome {
        run_id,
        status,
        result,
        error,
        total_tokens: run.budget.used(),
        reported_cost: run.budget.cost(),
        location,
    };
    run.events.emit(
        0,
        EventKind::RunFinished {
            status: outcome.status.as_str().to_owned(),
            total_tokens: outcome.total_tokens,
            reported_cost: outcome.reported_cost,
            error: outcome.error.clone(),
        },
    );
    record_end(&run, &outcome)
}

/// Writes the journal's header, when the run is recorded; the error fails the run.
fn write_header(
    request: &RunRequest,
    options: &RunOptions,
    run: &RunShared,
) -> Result<(), journal::RecordError> {
    let Some(recorder) = run.recorder() else {
        return Ok(());
    };
    if run.replayer().is_some() {
        // A resume appends to the journal it resumes: its header is there.
        return Ok(());
    }
    let header = Header {
        journal: journal::JOURNAL_VERSION,
        runner: env!("CARGO_PKG_VERSION").to_owned(),
        graph: request.graph.clone(),
        script_sha256: journal::sha256_hex(&request.script),
        script: request.script.to_string(),
        args: request.args.clone(),
        seed: run.seed,
        clock: run.clock.setting().to_string(),
        engine: options.engine.name().to_owned(),
        token_cap: options.token_cap,
    };
    recorder.header(&header)
}

/// A replay's outcome: the divergence, when the graph met one (even if it caught the error),
/// or the journal's calls it never made.
fn replay_checked(
    run: &RunShared,
    ran: (RunStatus, Option<Value>, Option<String>),
) -> (RunStatus, Option<Value>, Option<String>) {
    let Some(replayer) = run.replayer() else {
        return ran;
    };
    match replayer.finish(run) {
        Ok(()) => ran,
        // The graph's own error names where it met the divergence, when it did not catch it.
        Err(divergence) => match ran {
            (RunStatus::Failed, None, Some(error)) if error.contains(&divergence.0) => {
                (RunStatus::Failed, None, Some(error))
            }
            _ => (RunStatus::Failed, None, Some(divergence.0)),
        },
    }
}

/// Ends the journal of a recorded run with its outcome, and makes it durable; a journal that
/// cannot take its end fails the run.
fn record_end(run: &RunShared, outcome: &RunOutcome) -> RunOutcome {
    let Some(recorder) = run.recorder() else {
        return outcome.clone();
    };
    let end = Entry::End {
        status: outcome.status.as_str().to_owned(),
        result: outcome.result.clone(),
        error: outcome.error.clone(),
        total_tokens: outcome.total_tokens,
        t: run.clock.now().monotonic_ms,
    };
    match recorder.append(&end).and_then(|()| recorder.finish()) {
        Ok(()) => outcome.clone(),
        Err(error) => RunOutcome {
            status: RunStatus::Failed,
            result: None,
            error: Some(error.to_string()),
            location: None,
            ..outcome.clone()
        },
    }
}

/// A run's shared state, from `options`; `stop` ends the work it starts.
fn new_run(run_id: &str, options: &RunOptions, stop: CancellationToken) -> Arc<RunShared> {
    let clock = match &options.journal {
        Some(JournalMode::Resume { replayer, .. }) => {
            RunClock::continuing(options.clock, replayer.last_ms())
        }
        _ => RunClock::new(options.clock),
    };
    let sink = match &options.journal {
        Some(JournalMode::Record(recorder)) => Arc::new(FanOut(vec![
            options.events.clone(),
            Arc::new(RecordEvents(recorder.clone())),
        ])) as Arc<dyn EventSink>,
        // The replayed events are in the journal already: only the live ones are appended.
        Some(JournalMode::Resume { replayer, recorder }) => Arc::new(FanOut(vec![
            options.events.clone(),
            Arc::new(journal::RecordLiveEvents(
                recorder.clone(),
                replayer.clone(),
            )),
        ])),
        _ => options.events.clone(),
    };
    let mut events = Events::on_clock(sink, clock.clone());
    if let Some(JournalMode::Replay(replayer)) = &options.journal {
        events = events.stamped_by(replayer.stamp());
    }
    let run = RunShared::new(RunParts {
        run_id: run_id.to_owned(),
        token_cap: options.token_cap,
        approvals: Approvals::new(
            options.policy.clone(),
            options.approver.clone(),
            options.approval_timeout,
        ),
        provider: options.provider.clone(),
        tools: options.tools.clone(),
        catalog: options.catalog.clone(),
        events,
        engine: options.engine.clone(),
        limits: options.limits,
        max_concurrency: options.max_concurrency.clamp(1, MAX_CONCURRENCY),
        cancel: stop,
        clock,
        seed: options.seed.unwrap_or_else(fresh_seed),
    });
    if let Some(mode) = &options.journal {
        run.set_journal(mode.clone());
    }
    run
}

/// Runs the top graph under the deadline and `cancel`: its status, result and error.
async fn run_top_graph(
    request: &RunRequest,
    options: &RunOptions,
    run: &Arc<RunShared>,
    cancel: &CancellationToken,
) -> (RunStatus, Option<Value>, Option<String>) {
    let invocation = Invocation::new(
        run.clone(),
        vec![request.graph.clone()],
        tokio::runtime::Handle::current(),
    )
    .with_file(request.graph.clone());
    let mut finished =
        options
            .engine
            .run(request.script.clone(), request.args.to_string(), invocation);
    let outcome = tokio::select! {
        // In this order, not at random: a graph that finished as the cancel (or the deadline)
        // came keeps its outcome, so the same run ends the same way every time (a random pick
        // moved the simulator's cancel figures between two runs of one build).
        biased;
        finished = &mut finished => Some(finished),
        () = cancel.cancelled() => {
            run.stop(FailureCode::Cancelled, "the run was cancelled");
            None
        }
        () = tokio::time::sleep(options.timeout) => {
            run.stop(FailureCode::Failed, format!(
                "wall-clock deadline exceeded: the run took longer than {} s (--timeout)",
                options.timeout.as_secs_f64()
            ));
            None
        }
    };
    match outcome {
        Some(Ok(json)) => match crate::host::parse_outgoing(&json, "the result", "is") {
            Ok(value) => (RunStatus::Completed, Some(value), None),
            Err(e) => (RunStatus::Failed, None, Some(e.to_string())),
        },
        Some(Err(error)) => {
            let named = crate::location::name_file(&error.to_string(), &request.graph);
            (
                RunStatus::Failed,
                None,
                Some(crate::location::location_first(&named)),
            )
        }
        None => {
            // Give the engine a moment to stop, so the tokens and the trace are final when
            // the outcome is reported. An interpreter that cannot be interrupted (boa inside
            // a runaway built-in) is not waited for beyond the grace.
            let _ = tokio::time::timeout(STOP_GRACE, &mut finished).await;
            let reason = run
                .stopped()
                .map(|f| f.message)
                .unwrap_or_else(|| "the run was cancelled".to_owned());
            (RunStatus::Failed, None, Some(reason))
        }
    }
}
