//! Graph runs (commands): the state machine and every operation on a run, for agents and
//! desktops alike. Plain functions over [`Runs`] (what they use), testable without HTTP.
//!
//! `queued → running → completed | failed | cancelled`. [`transition`] is the only place that
//! decides a change; each write is conditional on the status and cancel flag it was decided
//! from, and a write that lost a race is decided again on fresh state.

mod desktop;
mod machine;
pub mod owner;

pub use desktop::{
    DesktopError, command_completed, command_control, command_released, command_started,
    parse_command_id, record_report,
};
pub use machine::{Decision, RunEvent, cancel_cause_of, transition};

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::auth::AgentIdentity;
use crate::held::{Held, HeldKind, REVOKED_WHILE_WAITING};
use crate::presence::Presence;
use crate::store::notify::{Notifier, Topic};
use crate::store::{CommandRecord, InsertOutcome, QueueLimit, QueueQuota, Store, StoreError};
use relay_protocol::clock::{Clock, Timestamp};
use relay_protocol::{CommandId, EndCause, GraphSessionId, RunStatus};

/// Allowed length of an idempotency key, in characters.
pub const IDEMPOTENCY_KEY_CHARS: RangeInclusive<usize> = 8..=128;
/// Largest `arguments` object, as JSON bytes.
pub const MAX_ARGUMENTS_BYTES: usize = 64 * 1024;
/// How long a running run may go without a control poll before it is failed.
pub const DEFAULT_SILENCE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// How many times an operation re-decides after losing a write race before giving up.
const MAX_TRANSITION_ATTEMPTS: usize = 8;

/// The one answer for a run the caller may not see, whatever the reason.
pub const RUN_NOT_FOUND: &str = "Graph run not found or access removed";
/// The answer when an idempotency key comes back with different content.
pub const IDEMPOTENCY_CONFLICT: &str = "idempotency key already used with different arguments";

/// Why a run operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Unknown, foreign, revoked or malformed id: [`RUN_NOT_FOUND`].
    #[error("{RUN_NOT_FOUND}")]
    NotFound,
    /// The arguments were wrong; nothing changed.
    #[error("{0}")]
    Invalid(String),
    /// The idempotency key was used before with other content.
    #[error("{IDEMPOTENCY_CONFLICT}")]
    IdempotencyConflict,
    /// Concurrent writers kept winning; retrying later will work.
    #[error("the run is changing too quickly; try again")]
    Contended,
    /// A quota was reached; nothing was queued.
    #[error("{0}")]
    Quota(QuotaError),
    /// The token was revoked while the request waited.
    #[error("{REVOKED_WHILE_WAITING}")]
    Revoked,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What run operations use: durable state, the clock, wake-ups, the desktops' presence, the
/// held requests and the run tunables. Cheap to clone (every clone shares them).
#[derive(Clone)]
pub struct Runs {
    /// Durable state.
    pub store: Arc<dyn Store>,
    /// The only source of time.
    pub clock: Arc<dyn Clock>,
    /// Wakes long polls and waits when a run changes.
    pub notifier: Arc<dyn Notifier>,
    /// Where a desktop's requests are noted as its presence.
    pub presence: Presence,
    /// Requests held open (waiting `get_graph_run` calls, long-poll syncs).
    pub held: Held,
    /// The tunables.
    pub config: RunConfig,
}

/// The run tunables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunConfig {
    /// A running run with no control poll for this long is failed.
    pub silence_timeout: Duration,
    /// When agents are told to look at a run (about one desktop poll interval).
    pub poll_hint: Duration,
    /// How many runs may wait in the queue, per agent and per project.
    pub queue_quota: QueueQuota,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            silence_timeout: DEFAULT_SILENCE_TIMEOUT,
            poll_hint: Duration::from_secs(relay_protocol::DESKTOP_POLL_INTERVAL_SECS),
            queue_quota: QueueQuota {
                per_agent: DEFAULT_QUEUED_PER_AGENT,
                per_project: DEFAULT_QUEUED_PER_PROJECT,
            },
        }
    }
}

/// Runs one agent may have queued and not yet started, by default.
pub const DEFAULT_QUEUED_PER_AGENT: u64 = 100;
/// Runs one project may have queued and not yet started, by default.
pub const DEFAULT_QUEUED_PER_PROJECT: u64 = 1_000;

/// Which quota refused a request, and when trying again can help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    /// The agent has this many runs queued and not yet started.
    #[error(
        "quota reached: this agent already has {0} runs queued that the desktop has not started, the most allowed; nothing was queued. Retry once some of them have started or ended (get_graph_run shows them); the desktop picks runs up on its next pass, about every {1} s"
    )]
    AgentQueue(u64, u64),
    /// The project has this many runs queued and not yet started.
    #[error(
        "quota reached: this project already has {0} runs queued that the desktop has not started, the most allowed; nothing was queued. Retry once some of them have started or ended; the desktop picks runs up on its next pass, about every {1} s"
    )]
    ProjectQueue(u64, u64),
}

impl QuotaError {
    /// When to try again, in seconds (the `Retry-After` of an HTTP answer).
    pub fn retry_after_secs(&self) -> u64 {
        match self {
            QuotaError::AgentQueue(_, poll) | QuotaError::ProjectQueue(_, poll) => *poll,
        }
    }
}

/// What an agent asks to run.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The session to run (not yet validated).
    pub graph_session_id: String,
    /// The graph's arguments.
    pub arguments: Map<String, Value>,
    /// The agent's idempotency key (not yet validated).
    pub idempotency_key: String,
    /// A token cap the agent asks for (not yet validated, at least 1): the desktop runs with
    /// the smaller of this and the owner's cap, never more than the owner allows.
    pub max_tokens: Option<i64>,
}

/// A run status in a tool's output schema: a string, one of the statuses' wire words.
pub fn run_status_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let words: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
    schemars::json_schema!({"type": "string", "enum": words})
}

/// The answer to queueing a run.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Ticket {
    /// The run's id; pass it to get_graph_run and cancel_graph_run.
    #[schemars(with = "String")]
    pub command_id: CommandId,
    /// The run's status: queued, unless this is a replay of an older request.
    #[schemars(schema_with = "run_status_schema")]
    pub status: RunStatus,
    /// True when the idempotency key returned an existing run.
    pub replayed: bool,
    /// When to look first, in seconds: a few when the desktop long-polls, else about one
    /// desktop poll interval.
    pub poll_after_seconds: u64,
}

/// An end cause in a tool's output schema: a string, one of [`EndCause`]'s wire words.
pub struct EndCauseWord;

impl schemars::JsonSchema for EndCauseWord {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "EndCause".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let words: Vec<&str> = EndCause::ALL.iter().map(|c| c.as_str()).collect();
        schemars::json_schema!({"type": "string", "enum": words})
    }

    fn inline_schema() -> bool {
        true
    }
}

/// A JSON object, its fields said in the field's description.
pub fn object_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object"})
}

/// Any JSON value but `null` (a graph's result; a `null` result is left out), as a schema
/// that names each type, so a client's validator and a model both see what may come.
pub fn any_json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"anyOf": [
        {"type": "object"}, {"type": "array"}, {"type": "string"}, {"type": "number"}, {"type": "boolean"}
    ]})
}

/// What an agent sees of a run. A field without a value is left out.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct RunView {
    /// The run's id.
    #[schemars(with = "String")]
    pub command_id: CommandId,
    /// The session it runs.
    #[schemars(with = "String")]
    pub graph_session_id: GraphSessionId,
    /// Its status.
    #[schemars(schema_with = "run_status_schema")]
    pub status: RunStatus,
    /// Whether a cancel was requested.
    pub cancel_requested: bool,
    /// When it was queued.
    #[schemars(with = "String")]
    pub created_at: Timestamp,
    /// When the desktop started it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub started_at: Option<Timestamp>,
    /// When it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub finished_at: Option<Timestamp>,
    /// When its result arrived.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub delivered_at: Option<Timestamp>,
    /// What it waits for, like an owner's approval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// When that wait ends by itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub waiting_until: Option<Timestamp>,
    /// How far it got, as its desktop last reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressView>,
    /// The project's desktop.
    pub desktop: crate::presence::DesktopStatus,
    /// Last change.
    #[schemars(with = "String")]
    pub updated_at: Timestamp,
    /// The graph's result, once completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json_schema")]
    pub result: Option<Value>,
    /// True when the result was too large to post (it is on the desktop).
    pub result_truncated: bool,
    /// Tokens metered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    /// Cost reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported_cost: Option<f64>,
    /// Why it failed or was cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why it ended, if not by its graph alone.
    // Its words are the schema's enum (docs/mcp.md says each); the tools list stays within
    // the 10 KB every conversation carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "EndCauseWord")]
    pub end_cause: Option<EndCause>,
    /// When to look again (seconds), while not finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_after_seconds: Option<u64>,
    /// The token cap asked for with max_tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The token cap it runs with, once started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_cap: Option<u64>,
    /// Resumes after desktop restarts: {count, last_at}.
    // Its fields are said in the description: the tools list stays within its 10 KB.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "object_schema")]
    pub resumed: Option<ResumedView>,
}

/// How often a run's desktop resumed it from its journal after a stop, and when last: still
/// one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ResumedView {
    /// Resumes so far.
    pub count: u32,
    /// When the last one was.
    #[schemars(with = "String")]
    pub last_at: Timestamp,
}

impl ResumedView {
    /// The resumes of `command`, if it was ever resumed.
    pub fn of(command: &CommandRecord) -> Option<Self> {
        match (command.resumed, command.resumed_at) {
            (0, _) | (_, None) => None,
            (count, Some(last_at)) => Some(ResumedView { count, last_at }),
        }
    }
}

/// How far a running graph got.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ProgressView {
    /// Tokens metered so far.
    pub tokens_used: u64,
    /// The run's token cap, if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_cap: Option<u64>,
    /// Agent calls started.
    pub agents_started: u64,
    /// Agent calls finished.
    pub agents_finished: u64,
    /// Tool calls made.
    pub tools_called: u64,
    /// The last agent or tool the trace shows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_event: Option<String>,
}

impl From<relay_protocol::RunProgress> for ProgressView {
    fn from(progress: relay_protocol::RunProgress) -> Self {
        ProgressView {
            tokens_used: progress.tokens_used,
            token_cap: progress.token_cap,
            agents_started: progress.agents_started,
            agents_finished: progress.agents_finished,
            tools_called: progress.tools_called,
            last_event: progress.last_event,
        }
    }
}

/// How soon an agent looks at a run again when its desktop long-polls: that desktop picks a
/// queued run up at once, and a run can end within a second.
pub const LONG_POLL_HINT: Duration = Duration::from_secs(2);

/// When an agent should look at a run of the project whose desktop's presence is `presence`:
/// [`LONG_POLL_HINT`] while that desktop is online and long-polls, else one poll interval
/// (the tunable `poll_hint`).
pub fn poll_after(runs: &Runs, presence: Option<&crate::store::PresenceRecord>) -> Duration {
    let hint = runs.config.poll_hint;
    let long_polling = presence.is_some_and(|presence| {
        presence.long_polls
            && crate::presence::DesktopStatus::of(Some(presence), runs.clock.now()).online
    });
    if long_polling {
        hint.min(LONG_POLL_HINT)
    } else {
        hint
    }
}

impl RunView {
    /// The view of `command`, with its desktop's presence when it was read.
    fn of(
        command: &CommandRecord,
        poll_hint: Duration,
        presence: Option<&crate::store::PresenceRecord>,
        now: Timestamp,
    ) -> Self {
        let (waiting, progress) = crate::presence::reported(command);
        // A queued run waits for its desktop when the desktop says it starts none.
        let blocked = (command.status == RunStatus::Queued)
            .then(|| presence.and_then(crate::presence::problem_of))
            .flatten();
        let (waiting_for, waiting_until) = match (waiting, blocked) {
            (Some(waiting), _) => (Some(waiting.what), waiting.until),
            (None, Some(problem)) => (Some(problem.summary()), None),
            (None, None) => (None, None),
        };
        RunView {
            delivered_at: command.delivered_at,
            waiting_for,
            waiting_until,
            progress: progress.map(ProgressView::from),
            desktop: crate::presence::DesktopStatus::of(presence, now),
            command_id: command.id,
            graph_session_id: command.graph_session_id.clone(),
            status: command.status,
            cancel_requested: command.cancel_requested,
            created_at: command.created_at,
            started_at: command.started_at,
            finished_at: command.finished_at,
            updated_at: command.updated_at,
            result: command.result.clone(),
            result_truncated: command.result_truncated,
            total_tokens: command.total_tokens,
            reported_cost: command.reported_cost,
            error: command.error.clone(),
            end_cause: command.end_cause,
            poll_after_seconds: (!command.status.is_terminal()).then_some(poll_hint.as_secs()),
            max_tokens: command.max_tokens,
            token_cap: command.token_cap,
            resumed: ResumedView::of(command),
        }
    }
}

/// The answer to a cancel.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CancelOutcome {
    /// The run's id.
    #[schemars(with = "String")]
    pub command_id: CommandId,
    /// Its status after the cancel.
    #[schemars(schema_with = "run_status_schema")]
    pub status: RunStatus,
    /// Whether a cancel is now requested.
    pub cancel_requested: bool,
    /// True when the run had already ended and nothing changed.
    pub already_finished: bool,
    /// What happened, in words.
    pub message: String,
}

/// Queues a run for `agent`, or returns the run its idempotency key already names.
pub async fn queue_run(
    runs: &Runs,
    agent: &AgentIdentity,
    request: RunRequest,
) -> Result<Ticket, RunError> {
    let (graph_session_id, request_hash, max_tokens) = checked_run_request(&request)?;
    let presence = runs.store.presence(&agent.project_id).await?;
    let poll_after = poll_after(runs, presence.as_ref()).as_secs();
    let ticket = |command: &CommandRecord, replayed: bool| Ticket {
        command_id: command.id,
        status: command.status,
        replayed,
        poll_after_seconds: poll_after,
    };
    // The same key must name the same request, or it could stand for two different runs.
    let replay = |existing: CommandRecord| {
        if existing.request_hash == request_hash {
            Ok(ticket(&existing, true))
        } else {
            Err(RunError::IdempotencyConflict)
        }
    };
    let session = runs
        .store
        .session(&agent.project_id, &graph_session_id)
        .await?;
    // Not shared, or arguments that do not fit the graph's schema: nothing is queued. A retry
    // after a lost response still gets its run back, even if the session was unshared or its
    // schema changed in between.
    let refusal = match &session {
        None => Some(format!(
            "graph session {graph_session_id} is not shared with this project (as of the desktop's last sync): call list_graph_sessions to see the shared sessions"
        )),
        Some(session) => arguments_misfit(session, &request.arguments),
    };
    let (Some(session), None) = (session, &refusal) else {
        let existing = runs
            .store
            .command_by_key(&agent.agent_id, &request.idempotency_key)
            .await?;
        return match existing {
            Some(existing) => replay(existing),
            None => Err(RunError::Invalid(refusal.unwrap_or_default())),
        };
    };
    let mut command = CommandRecord::queued(
        CommandId::new_random(),
        agent.project_id.clone(),
        agent.agent_id.clone(),
        graph_session_id,
        session.meta.slug,
        request.arguments,
        request.idempotency_key,
        request_hash.clone(),
        runs.clock.now(),
    );
    command.max_tokens = max_tokens;
    let quota = runs.config.queue_quota;
    match runs.store.insert_command(command, quota).await? {
        InsertOutcome::Created(created) => {
            tracing::info!(command_id = %created.id, agent = %agent.agent_id, "run queued");
            runs.notifier
                .notify(&Topic::Project(created.project_id.clone()));
            Ok(ticket(&created, false))
        }
        InsertOutcome::Existing(existing) => replay(existing),
        InsertOutcome::OverQuota(limit) => {
            tracing::info!(agent = %agent.agent_id, ?limit, "run refused: queue quota");
            Err(RunError::Quota(queue_quota_error(
                limit,
                runs.config.poll_hint.as_secs(),
            )))
        }
    }
}

fn queue_quota_error(limit: QueueLimit, poll_secs: u64) -> QuotaError {
    match limit {
        QueueLimit::Agent(n) => QuotaError::AgentQueue(n, poll_secs),
        QueueLimit::Project(n) => QuotaError::ProjectQueue(n, poll_secs),
    }
}

/// Why `arguments` do not fit the session's argument schema (its graph's `meta.args`), if
/// they do not: the failing path and what is wrong there.
fn arguments_misfit(
    session: &crate::store::SessionRecord,
    arguments: &Map<String, Value>,
) -> Option<String> {
    let schema = session.meta.args_schema.as_ref()?;
    let schema = match graph_args::ArgsSchema::compile(schema) {
        Ok(schema) => schema,
        // The desktop checks the schema before it shares the graph, so only a damaged sync
        // gets here; the graph could not take any arguments then.
        Err(error) => {
            return Some(format!(
                "graph session {} cannot be run: {error}; the owner fixes the graph's meta.args and shares it again",
                session.meta.graph_session_id
            ));
        }
    };
    let arguments = Value::Object(arguments.clone());
    schema.validate(&arguments, "arguments").err().map(|mismatch| {
        format!(
            "the arguments do not fit graph session {}'s argument schema (list_graph_sessions shows it as args_schema): {mismatch}; nothing was queued",
            session.meta.graph_session_id
        )
    })
}

/// The session id, the hash of what the idempotency key stands for and the agent's token cap,
/// once the request's session id, key, arguments and cap are checked.
fn checked_run_request(
    request: &RunRequest,
) -> Result<(GraphSessionId, String, Option<u64>), RunError> {
    let graph_session_id: GraphSessionId = request
        .graph_session_id
        .parse()
        .map_err(|e: relay_protocol::InvalidInput| RunError::Invalid(e.0))?;
    check_idempotency_key(&request.idempotency_key)?;
    let arguments_len = serde_json::to_vec(&request.arguments)
        .map(|bytes| bytes.len())
        .unwrap_or(usize::MAX);
    if arguments_len > MAX_ARGUMENTS_BYTES {
        return Err(RunError::Invalid(format!(
            "arguments are {arguments_len} bytes of JSON, at most {MAX_ARGUMENTS_BYTES} are allowed: pass references (paths, ids) instead of content"
        )));
    }
    let max_tokens = match request.max_tokens {
        None => None,
        Some(n) => Some(u64::try_from(n).ok().filter(|n| *n >= 1).ok_or_else(|| {
            RunError::Invalid(format!(
                "max_tokens must be a whole number of at least 1, got {n}: it lowers the owner's token cap for this run"
            ))
        })?),
    };
    // A key without a cap hashes as it always did, so runs queued before caps existed
    // replay unchanged.
    let mut hashed = serde_json::json!({
        "graph_session_id": graph_session_id.as_str(),
        "arguments": request.arguments,
    });
    if let (Some(cap), Value::Object(map)) = (max_tokens, &mut hashed) {
        map.insert("max_tokens".into(), Value::from(cap));
    }
    let request_hash = sha256_hex(&canonical_json(&hashed));
    Ok((graph_session_id, request_hash, max_tokens))
}

fn check_idempotency_key(key: &str) -> Result<(), RunError> {
    let chars = relay_protocol::text::utf16_len(key);
    if IDEMPOTENCY_KEY_CHARS.contains(&chars) {
        Ok(())
    } else {
        Err(RunError::Invalid(format!(
            "idempotency_key is {chars} characters long; it must be {} to {} characters. Use one key per intended run and reuse it only to retry that run",
            IDEMPOTENCY_KEY_CHARS.start(),
            IDEMPOTENCY_KEY_CHARS.end()
        )))
    }
}

/// Longest wait `get_graph_run` accepts: well under the ~60 s chat hosts allow a tool call.
pub const MAX_GET_WAIT: Duration = Duration::from_secs(45);

/// Told each newer view of a run while a `get_graph_run` waits (the MCP progress
/// notifications of a request that carried a `progressToken`); the wait goes on once the
/// returned future is done.
pub type OnChange<'a> =
    &'a (dyn Fn(&RunView) -> futures_util::future::BoxFuture<'static, ()> + Send + Sync);

/// [`get_run`], waiting up to `wait` (at most [`MAX_GET_WAIT`]) for the run to finish: it
/// answers as soon as the run is terminal, or with its current state when the wait ends.
pub async fn get_run_waiting(
    runs: &Runs,
    agent: &AgentIdentity,
    command_id: &str,
    wait: Duration,
) -> Result<RunView, RunError> {
    get_run_watching(runs, agent, command_id, wait, None).await
}

/// [`get_run_waiting`], telling `on_change` of every newer view while it waits (each wake-up
/// of the run's topic: a status change, a desktop report).
pub async fn get_run_watching(
    runs: &Runs,
    agent: &AgentIdentity,
    command_id: &str,
    wait: Duration,
    on_change: Option<OnChange<'_>>,
) -> Result<RunView, RunError> {
    if wait > MAX_GET_WAIT {
        return Err(RunError::Invalid(format!(
            "wait_seconds may be at most {}",
            MAX_GET_WAIT.as_secs()
        )));
    }
    let view = get_run(runs, agent, command_id).await?;
    if view.status.is_terminal() || wait.is_zero() {
        return Ok(view);
    }
    let deadline = tokio::time::Instant::now() + wait;
    let mut changes = runs.notifier.subscribe(&Topic::Run(view.command_id));
    // Read again after subscribing: a change in between is then seen, not waited for.
    let mut view = get_run(runs, agent, command_id).await?;
    let _held = runs.held.hold(HeldKind::RunWait);
    let mut watch = runs.held.watch_token(&agent.token_id);
    let revoked = watch.changed();
    tokio::pin!(revoked);
    while !view.status.is_terminal() {
        tokio::select! {
            () = changes.changed() => {}
            () = tokio::time::sleep_until(deadline) => {
                // Nothing woke the wait, but time passed: the desktop's presence (online or
                // not) is as of now, not as of the last change.
                view = get_run(runs, agent, command_id).await?;
                break;
            }
            () = runs.held.shutting_down() => break,
            () = &mut revoked => return Err(RunError::Revoked),
        }
        view = get_run(runs, agent, command_id).await?;
        if let Some(on_change) = on_change {
            on_change(&view).await;
        }
    }
    // A revocation that lands with the result still keeps the result from the revoked token.
    if !crate::auth::still_valid(runs.store.as_ref(), &agent.token_id).await? {
        return Err(RunError::Revoked);
    }
    Ok(view)
}

/// The run `command_id` if `agent` started it, after failing it if its desktop went silent.
pub async fn get_run(
    runs: &Runs,
    agent: &AgentIdentity,
    command_id: &str,
) -> Result<RunView, RunError> {
    let command = own_command(runs, agent, command_id).await?;
    let command = fail_if_silent(runs, command).await?;
    let presence = runs.store.presence(&command.project_id).await?;
    Ok(RunView::of(
        &command,
        poll_after(runs, presence.as_ref()),
        presence.as_ref(),
        runs.clock.now(),
    ))
}

/// Cancels the run `command_id` that `agent` started.
pub async fn cancel_run(
    runs: &Runs,
    agent: &AgentIdentity,
    command_id: &str,
) -> Result<CancelOutcome, RunError> {
    let command = own_command(runs, agent, command_id).await?;
    cancel_command(runs, command, EndCause::AgentCancelled).await
}

/// Cancels `command` for whoever may, `cause` naming who: its agent (`cancel_graph_run`) or
/// its project's owner.
async fn cancel_command(
    runs: &Runs,
    command: CommandRecord,
    cause: EndCause,
) -> Result<CancelOutcome, RunError> {
    let command = fail_if_silent(runs, command).await?;
    let (command, decision) = apply(runs, command, RunEvent::CancelRequested { cause }).await?;
    let (already_finished, message) = match (decision, command.status) {
        (Decision::AlreadyFinished(status), _) => (
            true,
            format!("The run already finished as {status}; nothing was changed."),
        ),
        (_, RunStatus::Cancelled) => (
            false,
            "The run was cancelled before it started; the desktop will never run it.".to_owned(),
        ),
        _ => (
            false,
            "Cancel requested: the desktop stops the run at its next control poll (a few seconds); check get_graph_run for the final status.".to_owned(),
        ),
    };
    Ok(CancelOutcome {
        command_id: command.id,
        status: command.status,
        cancel_requested: command.cancel_requested,
        already_finished,
        message,
    })
}

async fn own_command(
    runs: &Runs,
    agent: &AgentIdentity,
    command_id: &str,
) -> Result<CommandRecord, RunError> {
    // Malformed, unknown and foreign ids all get the same answer, so an id learned by
    // someone else confirms nothing.
    let id: CommandId = command_id.parse().map_err(|_| RunError::NotFound)?;
    match runs.store.command(id).await? {
        Some(command) if command.agent_id == agent.agent_id => Ok(command),
        _ => Err(RunError::NotFound),
    }
}

/// The error recorded for a run whose desktop stopped reporting.
pub fn silent_desktop_error(timeout: Duration) -> String {
    format!(
        "The desktop stopped reporting on this run: no control poll for {} minutes, so it is marked failed. Its result, if any, stays on the desktop; run it again when the desktop is online.",
        timeout.as_secs() / 60
    )
}

async fn fail_if_silent(runs: &Runs, command: CommandRecord) -> Result<CommandRecord, RunError> {
    let now = runs.clock.now();
    let cutoff = now.saturating_sub(runs.config.silence_timeout);
    let silent = command.status == RunStatus::Running
        && command.last_seen_at.is_none_or(|seen| seen < cutoff);
    if !silent {
        return Ok(command);
    }
    let error = silent_desktop_error(runs.config.silence_timeout);
    let (command, _) = apply(runs, command, RunEvent::DesktopSilent { error: &error }).await?;
    Ok(command)
}

/// Fails every running run whose desktop has been silent longer than the timeout.
pub async fn fail_silent_runs(runs: &Runs) -> Result<Vec<CommandId>, RunError> {
    let now = runs.clock.now();
    let error = silent_desktop_error(runs.config.silence_timeout);
    let failed = runs
        .store
        .fail_silent_runs(now.saturating_sub(runs.config.silence_timeout), now, &error)
        .await?;
    for id in &failed {
        tracing::warn!(command_id = %id, "desktop went silent; run failed");
    }
    Ok(failed)
}

/// What a run whose stored row cannot be decoded is called wherever it is shown (the desktop's
/// sync, the owner's list): which row, what is damaged, and that retrying will not help.
pub fn damaged_run_message(damage: &crate::store::Damage) -> String {
    format!(
        "the service's stored run {} is damaged ({}: {}) and cannot be read; it is not handed to the desktop, and retrying does not help: its owner cancels it on the console, or the operator repairs the row",
        damage.id, damage.what, damage.source
    )
}

/// Most queued runs one withdrawal looks at: above any project's queue quota.
const MAX_WITHDRAWN_PER_SYNC: u64 = 100_000;

/// Cancels, with the consent error, every queued run of `project_id` whose session is not in
/// `shared` (the desktop's latest snapshot): unshared, removed, or the project disabled. The
/// desktop would refuse them anyway; this ends them at once, so the agent is not left waiting
/// and a later re-share or re-enable never starts them. Returns the runs cancelled.
pub async fn withdraw_unshared(
    runs: &Runs,
    project_id: &str,
    shared: &[GraphSessionId],
) -> Result<Vec<CommandId>, RunError> {
    let limit = runs
        .config
        .queue_quota
        .per_project
        .clamp(1, MAX_WITHDRAWN_PER_SYNC);
    let queued = runs
        .store
        .queued_commands(project_id, usize::try_from(limit).unwrap_or(usize::MAX))
        .await?;
    // A damaged run is not handed out either; its owner cancels it on the console.
    let mut withdrawn = Vec::new();
    for command in queued.rows {
        if shared.contains(&command.graph_session_id) {
            continue;
        }
        let id = command.id;
        let (after, _) = apply(runs, command, RunEvent::ConsentWithdrawn).await?;
        if after.status == RunStatus::Cancelled {
            tracing::info!(command_id = %id, project_id, "queued run cancelled: its session is no longer shared");
            withdrawn.push(id);
        }
    }
    Ok(withdrawn)
}

/// Applies `event` to `command`, re-deciding on fresh state when a concurrent write won.
/// Returns the command as stored afterwards and the decision that held.
async fn apply(
    runs: &Runs,
    mut command: CommandRecord,
    event: RunEvent<'_>,
) -> Result<(CommandRecord, Decision), RunError> {
    for _ in 0..MAX_TRANSITION_ATTEMPTS {
        let decision = transition(&command, event, runs.clock.now());
        let Decision::Write(next) = &decision else {
            return Ok((command, decision));
        };
        if runs.store.update_command(&command, next).await? {
            runs.notifier.notify(&Topic::Run(next.id));
            // A cancel flag on a running command wakes its desktop's long-polling sync.
            if next.cancel_requested
                && !command.cancel_requested
                && next.status == RunStatus::Running
            {
                runs.notifier
                    .notify(&Topic::Project(next.project_id.clone()));
            }
            return Ok(((**next).clone(), decision));
        }
        command = runs
            .store
            .command(command.id)
            .await?
            .ok_or(RunError::NotFound)?;
    }
    Err(RunError::Contended)
}

/// JSON text of `value` with object keys sorted, so equal values hash equally whatever
/// order their keys arrived in.
pub fn canonical_json(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                out.push('{');
                for (index, (key, value)) in entries.into_iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push(':');
                    write(value, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// SHA-256 of `text`, lowercase hex.
pub fn sha256_hex(text: &str) -> String {
    crate::auth::hex(&Sha256::digest(text.as_bytes()))
}
