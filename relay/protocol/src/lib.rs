//! Wire types of the desktop API, shared by the service and the desktop relay (defined once).
//!
//! Every limit the two sides must agree on lives here as a named constant.

pub mod clock;
pub mod text;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::clock::Timestamp;

/// Most sessions one `sync` may carry; more rejects the whole sync.
pub const MAX_SYNC_SESSIONS: usize = 100;
/// Most queued commands one `sync` answer hands out (oldest first); the rest come next pass.
pub const MAX_SYNC_COMMANDS: usize = 100;
/// The most bytes of JSON the commands of one sync answer take: past it the rest wait for the
/// next passes (the first command is always handed out, whatever its size).
pub const MAX_SYNC_ANSWER_BYTES: usize = 1024 * 1024;
/// Largest completion whose JSON text still carries its `result`, in UTF-16 code units
/// (JavaScript's `JSON.stringify(x).length`).
pub const MAX_RESULT_CHARS: usize = 100_000;
/// Longest error text a completion may carry, in characters.
pub const MAX_ERROR_CHARS: usize = 2_000;
/// The error of a command whose session is no longer shared (SPEC.md §2, exact text): the
/// consent refusal, the one completion a desktop may post for a command it never started.
pub const NOT_SHARED: &str = "Graph session is no longer shared with this project";
/// Longest `execution_id`, in characters.
pub const MAX_EXECUTION_ID_CHARS: usize = 128;
/// Longest session name, in characters.
pub const MAX_SESSION_NAME_CHARS: usize = 200;
/// Longest session description, in characters.
pub const MAX_SESSION_DESCRIPTION_CHARS: usize = 2_000;
/// Longest session slug, in characters.
pub const MAX_SESSION_SLUG_CHARS: usize = 100;
/// Longest session version, in characters.
pub const MAX_SESSION_VERSION_CHARS: usize = 64;
/// Longest session status, in characters.
pub const MAX_SESSION_STATUS_CHARS: usize = 32;
/// Longest argument schema of a session (`meta.args`), as JSON text in UTF-16 code units: the
/// runner refuses a longer `meta.args` (`graph_args::MAX_SCHEMA_CHARS`, the same number).
pub const MAX_SESSION_ARGS_SCHEMA_CHARS: usize = 16_384;
/// The desktop's pass interval; agents are told to look about this long after queueing.
pub const DESKTOP_POLL_INTERVAL_SECS: u64 = 20;
/// Longest a long-polling `sync` is held (below the desktop's 30 s request timeout).
pub const MAX_SYNC_WAIT_MS: u64 = 25_000;
/// Most `running` commands one sync may name.
pub const MAX_SYNC_RUNNING: usize = 16;
/// Most projects one `projects` answer lists (oldest first); an owner with more sees the first.
pub const MAX_SERVED_PROJECTS: usize = 1_000;
/// Longest project name or agent name the desktop keeps, in characters (longer ones are cut).
pub const MAX_DISPLAY_NAME_CHARS: usize = 200;

/// Path prefix of the desktop API.
pub const DESKTOP_API_PREFIX: &str = "/external-assistants/graph-relays";

/// `POST`: upload a project's shared-session snapshot, get its queued commands.
pub fn sync_path() -> String {
    format!("{DESKTOP_API_PREFIX}/sync")
}

/// `GET`: the projects this desktop token may serve, with their names.
pub fn projects_path() -> String {
    format!("{DESKTOP_API_PREFIX}/projects")
}

/// `POST`: the desktop started running a command.
pub fn started_path(command_id: &CommandId) -> String {
    format!("{DESKTOP_API_PREFIX}/commands/{command_id}/started")
}

/// `POST`: the desktop hands back a command it reported started but will not run under that
/// execution ([`ReleasedRequest`]): the service puts it back in the queue.
pub fn released_path(command_id: &CommandId) -> String {
    format!("{DESKTOP_API_PREFIX}/commands/{command_id}/released")
}

/// `GET`: the cancel flag of a command; also the desktop's heartbeat for a running command.
pub fn control_path(command_id: &CommandId) -> String {
    format!("{DESKTOP_API_PREFIX}/commands/{command_id}/control")
}

/// `POST`: the outcome of a command.
pub fn complete_path(command_id: &CommandId) -> String {
    format!("{DESKTOP_API_PREFIX}/commands/{command_id}/complete")
}

/// `POST`: what a running command waits for and how far it got ([`RunReport`]).
pub fn report_path(command_id: &CommandId) -> String {
    format!("{DESKTOP_API_PREFIX}/commands/{command_id}/report")
}

/// A malformed identifier or field, with a message saying what is expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidInput(pub String);

/// A graph session id: `gs_` followed by 32 lowercase hex characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct GraphSessionId(String);

impl GraphSessionId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for GraphSessionId {
    type Err = InvalidInput;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let well_formed = text.strip_prefix("gs_").is_some_and(|hex| {
            hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        });
        if well_formed {
            Ok(GraphSessionId(text.to_owned()))
        } else {
            Err(InvalidInput(format!(
                "graph session id `{}` is malformed: expected `gs_` followed by 32 lowercase hex characters",
                shorten(text)
            )))
        }
    }
}

impl TryFrom<String> for GraphSessionId {
    type Error = InvalidInput;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<GraphSessionId> for String {
    fn from(id: GraphSessionId) -> String {
        id.0
    }
}

impl fmt::Display for GraphSessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A command (graph run) id: a UUID in its hyphenated form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CommandId(uuid::Uuid);

impl CommandId {
    /// A fresh random id.
    pub fn new_random() -> Self {
        CommandId(uuid::Uuid::new_v4())
    }

    /// The UUID.
    pub fn uuid(&self) -> uuid::Uuid {
        self.0
    }
}

impl FromStr for CommandId {
    type Err = InvalidInput;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        // Only the hyphenated form: the simple, braced and URN spellings would give one command
        // several ids, and ids travel in URLs and channel names.
        const HYPHENATED_LEN: usize = 36;
        match uuid::Uuid::try_parse(text) {
            Ok(uuid) if text.len() == HYPHENATED_LEN => Ok(CommandId(uuid)),
            _ => Err(InvalidInput(format!(
                "command id `{}` is not a UUID like 123e4567-e89b-12d3-a456-426614174000",
                shorten(text)
            ))),
        }
    }
}

impl TryFrom<String> for CommandId {
    type Error = InvalidInput;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<CommandId> for String {
    fn from(id: CommandId) -> String {
        id.to_string()
    }
}

impl fmt::Display for CommandId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.hyphenated(), f)
    }
}

/// The status of a graph run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Waiting for the desktop to pick it up.
    Queued,
    /// The desktop reported it started.
    Running,
    /// Finished with a result.
    Completed,
    /// Finished with an error.
    Failed,
    /// Stopped by a cancel, or never started because it was cancelled or unshared.
    Cancelled,
}

impl RunStatus {
    /// All statuses, in lifecycle order.
    pub const ALL: [RunStatus; 5] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];

    /// The status as its wire word.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the run has ended; a terminal status never changes again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled
        )
    }
}

impl FromStr for RunStatus {
    type Err = InvalidInput;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == text)
            .ok_or_else(|| InvalidInput(format!("unknown run status `{}`", shorten(text))))
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a run ended other than by its graph completing or failing on its own: the desktop's
/// completion carries it, the service and the desktop's history keep it, and the agent
/// (`get_graph_run`'s `end_cause`), the console and the owner's listings show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndCause {
    /// The agent cancelled it (`cancel_graph_run`).
    AgentCancelled,
    /// The owner cancelled it in the service's console (or through the owner API).
    OwnerCancelledConsole,
    /// The owner cancelled it on the desktop (`relay desktop cancel` or the local page).
    OwnerCancelledDesktop,
    /// The owner withdrew consent: unshared its session, removed it, or disabled its project.
    ConsentWithdrawn,
    /// The relay on the desktop stopped while it ran.
    RelayStopped,
    /// A tool's approval was not answered in time.
    ApprovalTimedOut,
    /// The owner denied a tool's approval.
    ApprovalDenied,
    /// The run reached its token cap.
    TokenCap,
    /// The run reached its deadline.
    TimedOut,
}

impl EndCause {
    /// All causes.
    pub const ALL: [EndCause; 9] = [
        EndCause::AgentCancelled,
        EndCause::OwnerCancelledConsole,
        EndCause::OwnerCancelledDesktop,
        EndCause::ConsentWithdrawn,
        EndCause::RelayStopped,
        EndCause::ApprovalTimedOut,
        EndCause::ApprovalDenied,
        EndCause::TokenCap,
        EndCause::TimedOut,
    ];

    /// The cause as its wire word (what a database column keeps).
    pub fn as_str(self) -> &'static str {
        match self {
            EndCause::AgentCancelled => "agent_cancelled",
            EndCause::OwnerCancelledConsole => "owner_cancelled_console",
            EndCause::OwnerCancelledDesktop => "owner_cancelled_desktop",
            EndCause::ConsentWithdrawn => "consent_withdrawn",
            EndCause::RelayStopped => "relay_stopped",
            EndCause::ApprovalTimedOut => "approval_timed_out",
            EndCause::ApprovalDenied => "approval_denied",
            EndCause::TokenCap => "token_cap",
            EndCause::TimedOut => "timed_out",
        }
    }

    /// The cause in words, for an error text or a listing: `Cancelled by the owner on the
    /// desktop`.
    pub fn describe(self) -> &'static str {
        match self {
            EndCause::AgentCancelled => "Cancelled by the agent",
            EndCause::OwnerCancelledConsole => "Cancelled by the owner in the console",
            EndCause::OwnerCancelledDesktop => "Cancelled by the owner on the desktop",
            EndCause::ConsentWithdrawn => "Cancelled: the owner withdrew consent",
            EndCause::RelayStopped => "Stopped: the relay on the desktop stopped",
            EndCause::ApprovalTimedOut => "Stopped: a tool's approval timed out",
            EndCause::ApprovalDenied => "Stopped: the owner denied a tool's approval",
            EndCause::TokenCap => "Stopped at the run's token cap",
            EndCause::TimedOut => "Stopped at the run's deadline",
        }
    }

    /// Whether the owner ended it (a cancel or a withdrawal), as opposed to the agent or a
    /// limit.
    pub fn is_owner(self) -> bool {
        matches!(
            self,
            EndCause::OwnerCancelledConsole
                | EndCause::OwnerCancelledDesktop
                | EndCause::ConsentWithdrawn
        )
    }
}

impl FromStr for EndCause {
    type Err = InvalidInput;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        EndCause::ALL
            .into_iter()
            .find(|cause| cause.as_str() == text)
            .ok_or_else(|| InvalidInput(format!("unknown end cause `{}`", shorten(text))))
    }
}

impl fmt::Display for EndCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a run ended, as the desktop reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompletionStatus {
    /// The graph returned a result.
    Completed,
    /// The graph failed.
    Failed,
    /// The run was stopped or never started.
    Cancelled,
}

impl From<CompletionStatus> for RunStatus {
    fn from(status: CompletionStatus) -> RunStatus {
        match status {
            CompletionStatus::Completed => RunStatus::Completed,
            CompletionStatus::Failed => RunStatus::Failed,
            CompletionStatus::Cancelled => RunStatus::Cancelled,
        }
    }
}

/// Metadata of one graph session shared with a project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionMeta {
    /// The session's durable id.
    pub graph_session_id: GraphSessionId,
    /// Display name.
    pub name: String,
    /// What the graph does.
    #[serde(default)]
    pub description: String,
    /// The graph's slug; the desktop re-checks it before running.
    pub slug: String,
    /// The graph's version.
    #[serde(default)]
    pub version: String,
    /// The session's status on the desktop.
    #[serde(default)]
    pub status: String,
    /// The JSON Schema (draft 2020-12) the graph's arguments must fit (its `meta.args`), if
    /// it declares one: the service checks an agent's arguments against it before queueing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_schema: Option<Value>,
}

impl SessionMeta {
    /// Checks every field against its limit.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        let id = &self.graph_session_id;
        check_len(&format!("{id}: name"), &self.name, MAX_SESSION_NAME_CHARS)?;
        check_len(
            &format!("{id}: description"),
            &self.description,
            MAX_SESSION_DESCRIPTION_CHARS,
        )?;
        check_len(&format!("{id}: slug"), &self.slug, MAX_SESSION_SLUG_CHARS)?;
        check_len(
            &format!("{id}: version"),
            &self.version,
            MAX_SESSION_VERSION_CHARS,
        )?;
        check_len(
            &format!("{id}: status"),
            &self.status,
            MAX_SESSION_STATUS_CHARS,
        )?;
        if self.slug.is_empty() {
            return Err(InvalidInput(format!("{id}: slug must not be empty")));
        }
        if let Some(schema) = &self.args_schema {
            if !schema.is_object() {
                return Err(InvalidInput(format!(
                    "{id}: args_schema must be a JSON Schema object"
                )));
            }
            let chars = json_utf16_len(schema);
            if chars > MAX_SESSION_ARGS_SCHEMA_CHARS {
                return Err(InvalidInput(format!(
                    "{id}: args_schema is {chars} characters long as JSON, at most {MAX_SESSION_ARGS_SCHEMA_CHARS} are allowed"
                )));
            }
        }
        Ok(())
    }
}

/// `POST sync` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyncRequest {
    /// The project this snapshot is for.
    pub project_id: String,
    /// Every session currently shared with the project (at most [`MAX_SYNC_SESSIONS`]).
    pub sessions: Vec<SessionMeta>,
    /// Long poll: hold the answer up to this many milliseconds (at most [`MAX_SYNC_WAIT_MS`])
    /// until a command is queued for the project or one in `running` gets a cancel request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// Commands this desktop is running now: a cancel request on one ends a long poll at once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub running: Vec<CommandId>,
    /// Queued commands this desktop already knows of (from the previous answer): they do not
    /// end a long poll again, so a desktop busy with one run does not spin on the others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub known: Vec<CommandId>,
    /// The shared sessions are the same as in this desktop's previous sync: `sessions` is
    /// empty and the snapshot is kept (long polls re-issue often; rewriting it each time would
    /// make every waiting desktop a writer).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sessions_unchanged: bool,
    /// The desktop's sharing version the snapshot was read at: it grows with every change to
    /// what is shared. The service keeps the snapshot with the highest version and ignores an
    /// older one, so a sync that was slow to arrive (a long poll built before the owner
    /// unshared a session) never undoes a newer one; a snapshot at the version the service
    /// holds is that same snapshot, and is not written again. `None` (desktops from before
    /// it): the snapshot is always taken. At most [`MAX_SHARING_VERSION`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharing_version: Option<u64>,
    /// Why this desktop starts no run now (e.g. its disk is full); `None` when nothing keeps
    /// it from running work. Every sync restates it, so it clears itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<DesktopProblem>,
}

/// Highest [`SyncRequest::sharing_version`]: what a signed 64-bit column holds.
pub const MAX_SHARING_VERSION: u64 = i64::MAX as u64;

/// The cause of a [`DesktopProblem`] when the disk holding the desktop's state is too full to
/// record a run safely.
pub const DISK_FULL: &str = "disk_full";
/// Longest [`DesktopProblem::detail`], in characters.
pub const MAX_PROBLEM_DETAIL_CHARS: usize = 500;
/// Longest [`Waiting::what`] and [`RunProgress::last_event`], in characters.
pub const MAX_REPORT_TEXT_CHARS: usize = 200;

/// Why a desktop starts no run now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesktopProblem {
    /// A word for the cause: [`DISK_FULL`], or another a newer desktop knows.
    pub cause: String,
    /// What is wrong and what the desktop's owner does about it.
    pub detail: String,
}

impl DesktopProblem {
    /// Checks the field lengths.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        check_len("problem.cause", &self.cause, 64)?;
        check_len("problem.detail", &self.detail, MAX_PROBLEM_DETAIL_CHARS)?;
        if self.cause.trim().is_empty() {
            return Err(InvalidInput("problem.cause must not be empty".into()));
        }
        Ok(())
    }

    /// How an agent is told why its run waits: `desktop: disk full`.
    pub fn summary(&self) -> String {
        format!("desktop: {}", self.cause.replace('_', " "))
    }
}

/// `POST commands/{id}/report` body: what a running command waits for and how far it got.
/// Each report replaces the one before; the desktop sends one when either changes, at most
/// every [`REPORT_INTERVAL_MS`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RunReport {
    /// The execution reporting (the one `started` named).
    pub execution_id: String,
    /// What the run waits for now, if anything (e.g. the owner's approval of a tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<Waiting>,
    /// How far the run got.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<RunProgress>,
}

/// Reports on one run go out at most this often (later changes are coalesced).
pub const REPORT_INTERVAL_MS: u64 = 2_000;

/// What a run waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    /// In words, e.g. `owner approval of fs.write`.
    pub what: String,
    /// When the wait ends by itself (an approval nobody answers is denied then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Timestamp>,
}

/// How far a running graph got.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RunProgress {
    /// Tokens metered so far.
    pub tokens_used: u64,
    /// The run's token cap, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_cap: Option<u64>,
    /// Agent calls started.
    pub agents_started: u64,
    /// Agent calls finished.
    pub agents_finished: u64,
    /// Tool calls made.
    pub tools_called: u64,
    /// The label of the last trace event with one (an agent's or a tool's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event: Option<String>,
}

impl RunReport {
    /// Checks the execution id and the text lengths.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        check_execution_id(&self.execution_id)?;
        if let Some(waiting) = &self.waiting_for {
            check_len("waiting_for.what", &waiting.what, MAX_REPORT_TEXT_CHARS)?;
        }
        if let Some(progress) = &self.progress {
            if let Some(label) = &progress.last_event {
                check_len("progress.last_event", label, MAX_REPORT_TEXT_CHARS)?;
            }
            if progress.tokens_used > MAX_TOTAL_TOKENS {
                return Err(InvalidInput(format!(
                    "progress.tokens_used may be at most {MAX_TOTAL_TOKENS}"
                )));
            }
        }
        Ok(())
    }
}

/// `POST commands/{id}/report` answer (200).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportResponse {
    /// True when the report was recorded (false: the run is no longer running).
    pub recorded: bool,
    /// Whether the agent asked to cancel.
    pub cancel_requested: bool,
    /// Who asked to cancel, when someone did (the agent, or the owner in the console).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_cause: Option<EndCause>,
}

impl SyncRequest {
    /// Checks the session count, every session, that no id repeats, and the long-poll fields.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        if self.wait_ms.is_some_and(|wait| wait > MAX_SYNC_WAIT_MS) {
            return Err(InvalidInput(format!(
                "wait_ms may be at most {MAX_SYNC_WAIT_MS}"
            )));
        }
        if self.running.len() > MAX_SYNC_RUNNING {
            return Err(InvalidInput(format!(
                "running names at most {MAX_SYNC_RUNNING} commands"
            )));
        }
        if self
            .sharing_version
            .is_some_and(|version| version > MAX_SHARING_VERSION)
        {
            return Err(InvalidInput(format!(
                "sharing_version may be at most {MAX_SHARING_VERSION}"
            )));
        }
        if self.sessions_unchanged && !self.sessions.is_empty() {
            return Err(InvalidInput(
                "sessions_unchanged: true goes with an empty sessions list".into(),
            ));
        }
        if let Some(problem) = &self.problem {
            problem.validate()?;
        }
        if self.known.len() > MAX_SYNC_COMMANDS {
            return Err(InvalidInput(format!(
                "known names at most {MAX_SYNC_COMMANDS} commands"
            )));
        }
        if self.sessions.len() > MAX_SYNC_SESSIONS {
            return Err(InvalidInput(format!(
                "a sync carries at most {MAX_SYNC_SESSIONS} sessions, this one has {}: share fewer sessions with the project",
                self.sessions.len()
            )));
        }
        let mut seen = std::collections::BTreeSet::new();
        for session in &self.sessions {
            session.validate()?;
            if !seen.insert(session.graph_session_id.as_str()) {
                return Err(InvalidInput(format!(
                    "session {} appears twice in one sync",
                    session.graph_session_id
                )));
            }
        }
        Ok(())
    }
}

/// A queued command handed to the desktop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuedCommand {
    /// The command id; also names the run's channel `graph:external:<command id>`.
    pub command_id: CommandId,
    /// The session to run.
    pub graph_session_id: GraphSessionId,
    /// The session's slug when the command was queued; the desktop re-checks it.
    pub slug: String,
    /// The graph's arguments (a JSON object).
    pub arguments: Map<String, Value>,
    /// When the agent queued it.
    pub created_at: Timestamp,
    /// The connected agent that queued it (its token or grant id), for the owner's history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// That agent's name, at most [`MAX_DISPLAY_NAME_CHARS`] characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_name: Option<String>,
    /// The token cap the agent asked for (`run_graph_session`'s `max_tokens`), if any: the
    /// desktop runs with the smaller of this and the owner's cap, never more than the owner's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// One project a desktop token may serve, as the service knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServedProject {
    /// The project id (what `relay desktop project enable` takes).
    pub project_id: String,
    /// Its name, at most [`MAX_DISPLAY_NAME_CHARS`] characters.
    pub name: String,
}

/// `GET projects` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectsResponse {
    /// The projects this token may sync, oldest first (at most [`MAX_SERVED_PROJECTS`]).
    pub projects: Vec<ServedProject>,
}

/// `text` cut to at most [`MAX_DISPLAY_NAME_CHARS`] characters, counted in UTF-16 units like
/// every limit here (a name to show, never a key).
pub fn display_name(text: &str) -> String {
    let mut units = 0;
    text.chars()
        .take_while(|c| {
            units += c.len_utf16();
            units <= MAX_DISPLAY_NAME_CHARS
        })
        .collect()
}

/// `POST sync` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyncResponse {
    /// The project synced.
    pub project_id: String,
    /// The project's queued commands, oldest first (at most [`MAX_SYNC_COMMANDS`]).
    pub commands: Vec<QueuedCommand>,
    /// Of the request's `running` commands, those with a cancel request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cancel_requested: Vec<CommandId>,
    /// Queued commands the service cannot read (their stored rows are damaged): not handed
    /// out, so the project's other commands still run; the owner sees them in the console.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub damaged: Vec<DamagedCommand>,
}

/// A queued command whose stored row the service cannot decode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DamagedCommand {
    /// Its id, as stored.
    pub command_id: String,
    /// What is damaged, and what to do.
    pub error: String,
}

/// `POST commands/{id}/started` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedRequest {
    /// The desktop's id for this execution (its run history key).
    pub execution_id: String,
    /// The token cap the run runs with: the owner's (per session, else the desktop's default),
    /// lowered to the agent's `max_tokens` if it asked for less. `None`: no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_cap: Option<u64>,
    /// Set when the desktop resumes this execution from its journal after a stop interrupted
    /// it (it sends `started` again under the same execution id). Left out otherwise, so a
    /// service from before resuming reads the request as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<ResumedRun>,
}

/// A run the desktop resumed from its journal after a stop interrupted it (docs/journal.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumedRun {
    /// How often the desktop has resumed the run, this time included (at least 1).
    pub count: u32,
    /// When it resumed it this time, by the desktop's clock.
    pub at: Timestamp,
}

/// `POST commands/{id}/started` answer (200).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedResponse {
    /// Always true on 200.
    pub ok: bool,
    /// True when this was a repeat of an earlier identical `started`.
    pub replayed: bool,
    /// Whether the agent already asked to cancel.
    pub cancel_requested: bool,
    /// Who asked to cancel, when someone did (the agent, or the owner in the console).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_cause: Option<EndCause>,
}

/// `POST commands/{id}/released` body: the execution that started the command and hands it
/// back. Sent when the answer to `started` was lost and the desktop will not run the command
/// under that execution (it stopped, or restarted before the graph began); a repeat is
/// harmless.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleasedRequest {
    /// The execution id the desktop sent with `started`.
    pub execution_id: String,
}

/// `POST commands/{id}/released` answer (200): where the command stands now. `queued` (back in
/// the queue, or never started), `cancelled` (the agent had asked to cancel), or another
/// terminal status (it had ended); a 409 when another execution runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleasedResponse {
    /// Always true on 200.
    pub ok: bool,
    /// The command's status after the release.
    pub status: RunStatus,
    /// True when nothing changed (it was not running under this execution).
    pub replayed: bool,
}

/// `GET commands/{id}/control` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlResponse {
    /// Stop the run: the agent cancelled it, or the service no longer expects its result.
    pub cancel_requested: bool,
    /// Who asked to cancel, when someone did (the agent, or the owner in the console).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_cause: Option<EndCause>,
}

/// `POST commands/{id}/complete` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompleteRequest {
    /// The desktop's id for this execution.
    pub execution_id: String,
    /// How the run ended.
    pub status: CompletionStatus,
    /// The graph's result, when the whole completion fits [`MAX_RESULT_CHARS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// True instead of `result` when the result did not fit.
    #[serde(default, skip_serializing_if = "is_false")]
    pub result_truncated: bool,
    /// Tokens the run metered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    /// Cost the run reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_cost: Option<f64>,
    /// Error text, at most [`MAX_ERROR_CHARS`] characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the run ended on the desktop (by the desktop's clock); the completion may reach
    /// the service much later, after an outage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Timestamp>,
    /// Why it ended, when not by its graph alone (a cancel, a withdrawal, a stop, a limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<EndCause>,
}

/// The most tokens a completion may report: far above any run's (a run at 10,000 tokens a
/// second for a year stays below it), and what a signed 64-bit column holds with room to add.
pub const MAX_TOTAL_TOKENS: u64 = 1 << 50;

fn is_false(value: &bool) -> bool {
    !*value
}

impl CompleteRequest {
    /// Checks the limits a completion must respect.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        check_execution_id(&self.execution_id)?;
        if self.result_truncated && self.result.is_some() {
            return Err(InvalidInput(
                "a completion carries either `result` or `result_truncated: true`, not both".into(),
            ));
        }
        if let Some(error) = &self.error {
            check_len("error", error, MAX_ERROR_CHARS)?;
        }
        if let Some(tokens) = self.total_tokens
            && tokens > MAX_TOTAL_TOKENS
        {
            return Err(InvalidInput(format!(
                "total_tokens is {tokens}, more than {MAX_TOTAL_TOKENS}: report the tokens the run metered"
            )));
        }
        if let Some(cost) = self.reported_cost
            && !(cost.is_finite() && cost >= 0.0)
        {
            return Err(InvalidInput(
                "reported_cost must be a finite number of at least 0".into(),
            ));
        }
        if self.result.is_some() {
            let length = json_utf16_len(&self.bounded_view());
            if length > MAX_RESULT_CHARS {
                return Err(InvalidInput(format!(
                    "the completion's JSON text is {length} characters, more than {MAX_RESULT_CHARS}: post `result_truncated: true` without `result` instead"
                )));
            }
        }
        Ok(())
    }

    /// The object whose JSON length decides whether the result fits:
    /// `{execution_id, status, result, total_tokens, reported_cost}`.
    pub fn bounded_view(&self) -> Value {
        serde_json::json!({
            "execution_id": self.execution_id,
            "status": self.status,
            "result": self.result,
            "total_tokens": self.total_tokens,
            "reported_cost": self.reported_cost,
        })
    }
}

/// `POST commands/{id}/complete` answer (200).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompleteResponse {
    /// Always true on 200.
    pub ok: bool,
    /// True when this repeated an identical, already recorded completion.
    pub replayed: bool,
    /// Set when the service had already ended the run itself (failed it for the desktop's
    /// silence): this completion is not recorded, and this is the outcome that stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub already_finished: Option<ServiceOutcome>,
}

/// How the service ended a run on its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceOutcome {
    /// The status it recorded.
    pub status: RunStatus,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why, as a cause word, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<EndCause>,
}

/// The body of every non-2xx desktop API answer (and owner API answer).
///
/// Every refusal the service's API answers carries a [`cause`](ErrorBody::cause), one word of
/// [`cause`](mod@cause) a client can act on without reading the text. Every 429 and every 503
/// also carries `Retry-After` (seconds): the service asks to be asked again, no sooner. A 500
/// carries none: retrying does not help until the operator acts (the cause says why).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What was wrong and what to do.
    pub error: String,
    /// The command's status, when the refusal is about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RunStatus>,
    /// Which kind of refusal, one of [`cause`](mod@cause)'s words (`None` only from a service
    /// older than the words).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

/// The words of [`ErrorBody::cause`], with the status each comes with.
pub mod cause {
    /// 400: the request is wrong; sending it again unchanged fails again.
    pub const BAD_REQUEST: &str = "bad_request";
    /// 413: the body is larger than the endpoint takes.
    pub const TOO_LARGE: &str = "too_large";
    /// 401: the token is missing, unknown, expired, revoked or of another kind.
    pub const UNAUTHORIZED: &str = "unauthorized";
    /// 401: the token was revoked while the service held the request.
    pub const REVOKED: &str = "revoked";
    /// 403: not this token's (a project of another owner, or of another project's token).
    pub const FORBIDDEN: &str = "forbidden";
    /// 404: unknown, or another owner's (the same answer).
    pub const NOT_FOUND: &str = "not_found";
    /// 409: contradicts what is recorded; `status` says the command's status when it is about
    /// one.
    pub const CONFLICT: &str = "conflict";
    /// 429 with `Retry-After`: the token is past its request rate.
    pub const RATE_LIMITED: &str = "rate_limited";
    /// 429 with `Retry-After`: a queue quota is full.
    pub const QUOTA: &str = "quota";
    /// 503 with `Retry-After`: concurrent writers kept winning; a retry will get through.
    pub const CONTENDED: &str = "contended";
    /// 503 with `Retry-After`: the service's database does not answer (down, restarting, no
    /// connection free).
    pub const UNAVAILABLE: &str = "unavailable";
    /// 503 with `Retry-After`: the disk holding the service's database is full.
    pub const DISK_FULL: &str = "disk_full";
    /// 503 with `Retry-After`: the service's database is busy (a lock held too long).
    pub const BUSY: &str = "busy";
    /// 500: the service's database cannot be written (read-only).
    pub const READ_ONLY: &str = "read_only";
    /// 500: the service's database file is missing.
    pub const MISSING: &str = "missing";
    /// 500: the service's database, or the stored object the request is about, is damaged.
    pub const CORRUPT: &str = "corrupt";
    /// 500: the service failed in a way a retry does not fix (its log says how).
    pub const INTERNAL: &str = "internal";
}

/// Checks an `execution_id`: non-empty, at most [`MAX_EXECUTION_ID_CHARS`] characters.
pub fn check_execution_id(execution_id: &str) -> Result<(), InvalidInput> {
    if execution_id.trim().is_empty() {
        return Err(InvalidInput("execution_id must not be empty".into()));
    }
    check_len("execution_id", execution_id, MAX_EXECUTION_ID_CHARS)
}

fn check_len(what: &str, text: &str, max_chars: usize) -> Result<(), InvalidInput> {
    let chars = crate::text::utf16_len(text);
    if chars > max_chars {
        return Err(InvalidInput(format!(
            "{what} is {chars} characters long, at most {max_chars} are allowed"
        )));
    }
    Ok(())
}

/// Length of `value`'s JSON text in UTF-16 code units: JavaScript's `JSON.stringify(x).length`.
pub fn json_utf16_len(value: &impl Serialize) -> usize {
    struct Utf16Counter(usize);
    impl std::io::Write for Utf16Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            // Counting lead bytes works however serde_json splits its writes: continuation
            // bytes count zero, a 4-byte sequence is one surrogate pair (two units).
            self.0 += bytes
                .iter()
                .map(|&b| match b {
                    0x80..=0xBF => 0,
                    0xF0..=0xFF => 2,
                    _ => 1,
                })
                .sum::<usize>();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Utf16Counter(0);
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.0,
        Err(_) => usize::MAX,
    }
}

/// At most 40 characters of `text`, for quoting untrusted input in messages.
fn shorten(text: &str) -> String {
    const QUOTE_CHARS: usize = 40;
    if text.chars().count() <= QUOTE_CHARS {
        text.to_owned()
    } else {
        let head: String = text.chars().take(QUOTE_CHARS).collect();
        format!("{head}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_session_ids_are_gs_and_32_lowercase_hex() {
        let good = format!("gs_{}", "0123456789abcdef".repeat(2));
        assert!(good.parse::<GraphSessionId>().is_ok());
        for bad in [
            format!("gs_{}", "0123456789ABCDEF".repeat(2)),
            format!("gs_{}", "a".repeat(31)),
            format!("gs_{}", "a".repeat(33)),
            format!("xs_{}", "a".repeat(32)),
            format!("gs_{}g", "a".repeat(31)),
            String::new(),
        ] {
            assert!(bad.parse::<GraphSessionId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_started_without_a_resume_is_what_older_peers_send_and_read() {
        let plain = StartedRequest {
            execution_id: "e1".into(),
            token_cap: None,
            resumed: None,
        };
        let text = serde_json::to_string(&plain).expect("encodes");
        assert_eq!(text, r#"{"execution_id":"e1"}"#);
        assert_eq!(
            serde_json::from_str::<StartedRequest>(&text).ok(),
            Some(plain)
        );
        let resumed = StartedRequest {
            resumed: Some(ResumedRun {
                count: 2,
                at: Timestamp::from_unix_millis(1_000),
            }),
            ..StartedRequest {
                execution_id: "e1".into(),
                token_cap: Some(5),
                resumed: None,
            }
        };
        let text = serde_json::to_string(&resumed).expect("encodes");
        assert_eq!(
            text,
            r#"{"execution_id":"e1","token_cap":5,"resumed":{"count":2,"at":"1970-01-01T00:00:01.000Z"}}"#
        );
        assert_eq!(
            serde_json::from_str::<StartedRequest>(&text).ok(),
            Some(resumed)
        );
    }

    #[test]
    fn command_ids_are_hyphenated_uuids() {
        let id = CommandId::new_random();
        assert_eq!(id.to_string().parse::<CommandId>(), Ok(id));
        let simple = id.uuid().simple().to_string();
        assert!(simple.parse::<CommandId>().is_err());
        assert!(format!("{{{id}}}").parse::<CommandId>().is_err());
        assert!("not-a-uuid".parse::<CommandId>().is_err());
    }

    #[test]
    fn utf16_length_counts_like_javascript() {
        assert_eq!(json_utf16_len(&"abc"), 5);
        // Japanese: one unit each, three UTF-8 bytes each.
        assert_eq!(json_utf16_len(&"日本語"), 5);
        // An emoji outside the BMP is a surrogate pair: two units.
        assert_eq!(json_utf16_len(&"😀"), 4);
        assert_eq!(json_utf16_len(&"\n"), 4);
    }

    fn completion_with_text(text: String) -> CompleteRequest {
        CompleteRequest {
            execution_id: "e".into(),
            status: CompletionStatus::Completed,
            result: Some(Value::String(text)),
            result_truncated: false,
            total_tokens: Some(1),
            reported_cost: Some(0.0),
            error: None,
            finished_at: None,
            cause: None,
        }
    }

    #[test]
    fn completion_result_limit_is_exact() {
        let overhead = json_utf16_len(&completion_with_text(String::new()).bounded_view());
        let fits = completion_with_text("日".repeat(MAX_RESULT_CHARS - overhead));
        assert_eq!(json_utf16_len(&fits.bounded_view()), MAX_RESULT_CHARS);
        assert!(fits.validate().is_ok());
        let too_long = completion_with_text("日".repeat(MAX_RESULT_CHARS - overhead + 1));
        assert!(too_long.validate().is_err());
    }

    #[test]
    fn display_names_are_cut_at_the_limit_in_utf16_units() {
        assert_eq!(display_name("Support desk"), "Support desk");
        let long = "x".repeat(MAX_DISPLAY_NAME_CHARS + 5);
        assert_eq!(display_name(&long).len(), MAX_DISPLAY_NAME_CHARS);
        // Two units each: half as many fit, and a pair is never split.
        let emoji = "😀".repeat(MAX_DISPLAY_NAME_CHARS);
        assert_eq!(
            display_name(&emoji).chars().count(),
            MAX_DISPLAY_NAME_CHARS / 2
        );
    }

    #[test]
    fn a_queued_command_names_its_agent_only_when_known() {
        let without = serde_json::json!({
            "command_id": CommandId::new_random().to_string(),
            "graph_session_id": format!("gs_{}", "a".repeat(32)),
            "slug": "s",
            "arguments": {},
            "created_at": "2026-11-08T09:30:00.000Z",
        });
        let command: QueuedCommand =
            serde_json::from_value(without.clone()).expect("an older service's command");
        assert_eq!(
            (command.agent_id.as_deref(), command.agent_name.as_deref()),
            (None, None)
        );
        assert_eq!(serde_json::to_value(&command).expect("json"), without);
    }

    #[test]
    fn sync_session_limit_is_exact() {
        let session = |i: usize| SessionMeta {
            graph_session_id: format!("gs_{i:032x}").parse().unwrap(),
            name: "n".into(),
            description: String::new(),
            slug: "s".into(),
            version: "1".into(),
            status: "active".into(),
            args_schema: None,
        };
        let mut sync = SyncRequest {
            project_id: "p".into(),
            sessions: (0..MAX_SYNC_SESSIONS).map(session).collect(),
            wait_ms: None,
            running: Vec::new(),
            known: Vec::new(),
            sessions_unchanged: false,
            problem: None,
            sharing_version: Some(MAX_SHARING_VERSION),
        };
        assert!(sync.validate().is_ok());
        sync.sharing_version = Some(MAX_SHARING_VERSION + 1);
        assert!(sync.validate().is_err());
        sync.sharing_version = None;
        sync.sessions.push(session(MAX_SYNC_SESSIONS));
        assert!(sync.validate().is_err());
    }

    #[test]
    fn a_sessions_argument_schema_limit_is_exact() {
        let with_schema = |schema: Value| SessionMeta {
            graph_session_id: format!("gs_{:032x}", 1).parse().unwrap(),
            name: "n".into(),
            description: String::new(),
            slug: "s".into(),
            version: "1".into(),
            status: "active".into(),
            args_schema: Some(schema),
        };
        let padded = |chars: usize| {
            let overhead = json_utf16_len(&serde_json::json!({"description": ""}));
            serde_json::json!({"description": "日".repeat(chars - overhead)})
        };
        let at_limit = padded(MAX_SESSION_ARGS_SCHEMA_CHARS);
        assert_eq!(json_utf16_len(&at_limit), MAX_SESSION_ARGS_SCHEMA_CHARS);
        assert!(with_schema(at_limit).validate().is_ok());
        let past = with_schema(padded(MAX_SESSION_ARGS_SCHEMA_CHARS + 1))
            .validate()
            .expect_err("one character past the limit");
        assert!(past.0.contains("at most 16384"), "{past}");
        let not_object = with_schema(serde_json::json!("string"))
            .validate()
            .expect_err("a schema is an object");
        assert!(not_object.0.contains("JSON Schema object"), "{not_object}");
    }
}
