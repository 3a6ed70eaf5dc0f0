//! The desktop's own SQLite file: graph sessions, which projects are enabled and which sessions
//! each may see, tool policies, the fs folder, pending approvals, the outbox of completions and
//! the run history (every execution with its full result).
//!
//! rusqlite is synchronous. [`DesktopState`]'s methods block; the CLI calls them directly,
//! while the relay and the page reach the file through [`AsyncState`], whose calls run on the
//! state's own thread, so no runtime worker waits for SQLite.

use relay_sqlite::CachedStatements as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde_json::Value;

use relay_protocol::clock::Timestamp;
use relay_protocol::{CommandId, CompleteRequest, GraphSessionId, MAX_SYNC_SESSIONS, SessionMeta};
use relay_sqlite::MigrateError;

/// How long a write waits for another process's write lock (the CLI and the loop share the file).
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// Most history rows `history` lists.
pub const MAX_HISTORY_LISTED: usize = 1000;

/// Schema migrations, applied in order; `PRAGMA user_version` counts those applied.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE graph_sessions (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    slug TEXT NOT NULL UNIQUE,
    version TEXT NOT NULL,
    status TEXT NOT NULL,
    script TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE TABLE projects (
    project_id TEXT PRIMARY KEY,
    enabled INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE TABLE shares (
    project_id TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES graph_sessions(id) ON DELETE CASCADE,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (project_id, session_id)
);
CREATE TABLE tool_policies (
    tool TEXT PRIMARY KEY,
    policy TEXT NOT NULL CHECK (policy IN ('allow', 'ask', 'deny'))
);
CREATE TABLE settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    execution_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    args TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired')),
    created_at INTEGER NOT NULL,
    decided_at INTEGER
);
CREATE INDEX approvals_pending ON approvals(status, created_at);
CREATE TABLE outbox (
    command_id TEXT PRIMARY KEY,
    execution_id TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT
);
CREATE TABLE history (
    execution_id TEXT PRIMARY KEY,
    command_id TEXT NOT NULL,
    channel TEXT NOT NULL,
    project_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    slug TEXT NOT NULL,
    status TEXT NOT NULL,
    result TEXT,
    error TEXT,
    total_tokens INTEGER NOT NULL DEFAULT 0,
    reported_cost REAL NOT NULL DEFAULT 0,
    result_truncated INTEGER NOT NULL DEFAULT 0,
    trace TEXT,
    started_at INTEGER NOT NULL,
    finished_at INTEGER
);
CREATE INDEX history_by_command ON history(command_id);
"#,
    // What the service answered when it refused a completion for good (a 4xx): the history keeps
    // the refusal beside the outcome, since the completion is not sent again.
    r#"
ALTER TABLE history ADD COLUMN service_refusal TEXT;
"#,
    // Consent that holds exactly: projects disabled whose withdrawal the service has not heard
    // yet (the next contact sends it before anything runs), and the file each session came from
    // with the hash of its code (one file is one session).
    r#"
CREATE TABLE withdrawals (
    project_id TEXT PRIMARY KEY,
    version INTEGER NOT NULL
);
ALTER TABLE graph_sessions ADD COLUMN source_path TEXT;
ALTER TABLE graph_sessions ADD COLUMN content_hash TEXT;
"#,
    // What the owner sees without asking the service: its projects for this desktop's token
    // with their names (as last fetched; the settings key `service_projects_at` says when), the
    // runs queued as of the last sync, each run's request (queued when, arguments, which agent)
    // and each approval's deadline.
    r#"
CREATE TABLE service_projects (
    project_id TEXT PRIMARY KEY,
    name TEXT NOT NULL
);
CREATE TABLE queue (
    command_id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    slug TEXT NOT NULL,
    arguments TEXT NOT NULL,
    agent_id TEXT,
    agent_name TEXT,
    queued_at INTEGER NOT NULL,
    synced_at INTEGER NOT NULL
);
CREATE INDEX queue_by_project ON queue(project_id, queued_at);
ALTER TABLE history ADD COLUMN queued_at INTEGER;
ALTER TABLE history ADD COLUMN arguments TEXT;
ALTER TABLE history ADD COLUMN agent_id TEXT;
ALTER TABLE history ADD COLUMN agent_name TEXT;
ALTER TABLE approvals ADD COLUMN expires_at INTEGER;
"#,
    // A session's argument schema (its graph's `meta.args`, sent on sync) and the owner's
    // token cap for its remote runs (`relay desktop session set-cap`).
    r#"
ALTER TABLE graph_sessions ADD COLUMN args_schema TEXT;
ALTER TABLE graph_sessions ADD COLUMN max_tokens INTEGER;
"#,
    // When the graph of an execution began, once the service said to run it: an execution a
    // stop interrupted before that never ran, so the relay that starts hands it back to the
    // service's queue instead of reporting a failure (issue 49).
    // Rows an older relay left running may have run: they are reported failed, as before.
    r#"
ALTER TABLE history ADD COLUMN began_at INTEGER;
UPDATE history SET began_at = started_at WHERE status = 'running';
"#,
    // The owner in control (issue 43): why each run ended when not by its graph alone (a cancel,
    // a withdrawal, a stop, a limit: `relay_protocol::EndCause`), and the owner's local cancels
    // (`relay desktop cancel`, the page's Cancel) waiting for the running relay to act on them.
    // The history's `reported_cost` now grows while a run runs, as its tokens do.
    r#"
ALTER TABLE history ADD COLUMN end_cause TEXT;
CREATE TABLE local_cancels (
    command_id TEXT PRIMARY KEY,
    requested_at INTEGER NOT NULL
);
"#,
    // The run journal of each execution (issue 46, docs/journal.md): every answer the host gave
    // its graph, one JSON line per row in the order given (`seq` from 1; the header is row 1),
    // written before the answer reached the graph. Deleted once the run's end is posted. How
    // often a run was resumed from it after a stop, and when last.
    r#"
CREATE TABLE journal (
    execution_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    line TEXT NOT NULL,
    PRIMARY KEY (execution_id, seq)
) WITHOUT ROWID;
ALTER TABLE history ADD COLUMN resumed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE history ADD COLUMN resumed_at INTEGER;
"#,
    // Resuming per session (issue 46): 0 when the owner turned it off for the session
    // (`session add --no-resume`, `session set-resume ID off`): its interrupted runs are
    // reported failed, as before resuming.
    r#"
ALTER TABLE graph_sessions ADD COLUMN resume INTEGER NOT NULL DEFAULT 1;
"#,
];

/// The columns of the state file that hold JSON, as the state reads them: what `relay desktop db
/// check` parses in its decode pass.
pub const JSON_COLUMNS: &[relay_sqlite::rows::JsonColumn] = {
    use relay_sqlite::rows::{JsonColumn, Shape};
    const fn json(table: &'static str, column: &'static str, shape: Shape) -> JsonColumn {
        JsonColumn {
            table,
            column,
            shape,
        }
    }
    &[
        json("graph_sessions", "args_schema", Shape::Any),
        json("outbox", "body", Shape::Object),
        json("history", "result", Shape::Any),
        json("history", "trace", Shape::Any),
        json("history", "arguments", Shape::Object),
        json("queue", "arguments", Shape::Object),
        json("journal", "line", Shape::Object),
    ]
};

/// Why the desktop state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// SQLite failed.
    #[error("desktop state: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A request that can never succeed, with what to do instead.
    #[error("{0}")]
    Invalid(String),
    /// The file was refused when opened (empty, damaged, not a state file) or could not be
    /// copied: the message names the file and what to do.
    #[error("{0}")]
    Unusable(String),
    /// The state's thread could not answer (it stopped, or the call panicked).
    #[error("desktop state: {0}")]
    Task(String),
}

/// A graph session stored on this desktop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Session {
    /// `gs_` + 32 lowercase hex.
    pub id: GraphSessionId,
    /// Display name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// The graph's slug.
    pub slug: String,
    /// The graph's version.
    pub version: String,
    /// `active`.
    pub status: String,
    /// The module text.
    #[serde(skip)]
    pub script: String,
    /// The graph's `meta.args` (the JSON Schema of its arguments), if it declares one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args_schema: Option<Value>,
    /// The owner's token cap for this session's remote runs; `None`: the relay's default.
    pub max_tokens: Option<u64>,
    /// Whether a run of it a stop interrupted is resumed from its journal (the relay's
    /// `--no-resume` turns resuming off for every session).
    pub resume: bool,
}

impl Session {
    /// The metadata a sync uploads.
    pub fn meta(&self) -> SessionMeta {
        SessionMeta {
            graph_session_id: self.id.clone(),
            name: self.name.clone(),
            description: self.description.clone(),
            slug: self.slug.clone(),
            version: self.version.clone(),
            status: self.status.clone(),
            args_schema: self.args_schema.clone(),
        }
    }

    /// The token cap a remote run of this session gets: the owner's cap for the session, else
    /// `default` (the relay's `--default-max-tokens`), lowered to the agent's `asked` cap if
    /// that is smaller. An agent can ask for less, never for more.
    pub fn run_token_cap(&self, default: Option<u64>, asked: Option<u64>) -> Option<u64> {
        match (self.max_tokens.or(default), asked) {
            (Some(owner), Some(asked)) => Some(owner.min(asked)),
            (owner, None) => owner,
            (None, asked) => asked,
        }
    }
}

/// An execution a stop interrupted: it began and never finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfinished {
    /// The execution.
    pub execution_id: String,
    /// The command it ran.
    pub command_id: CommandId,
    /// Whether its graph began (the service had said to run it): if not, nothing of it ran.
    pub began: bool,
}

/// One queued completion.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxEntry {
    /// The command it completes.
    pub command_id: CommandId,
    /// What to post.
    pub body: CompleteRequest,
    /// Posts tried so far.
    pub attempts: u32,
}

/// Where an approval request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalStatus {
    /// Asked, not answered yet.
    Pending,
    /// The owner approved it.
    Approved,
    /// The owner denied it.
    Denied,
    /// Nobody answered before the run stopped waiting.
    Expired,
}

impl ApprovalStatus {
    /// The stored (and printed) name.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Expired => "expired",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [
            ApprovalStatus::Pending,
            ApprovalStatus::Approved,
            ApprovalStatus::Denied,
            ApprovalStatus::Expired,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }
}

impl std::fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl rusqlite::types::FromSql for ApprovalStatus {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let text = value.as_str()?;
        ApprovalStatus::parse(text).ok_or_else(|| {
            rusqlite::types::FromSqlError::Other(
                format!("`{text}` is not an approval status").into(),
            )
        })
    }
}

/// A pending (or decided) approval request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApprovalRow {
    /// Its id, for `approve ID` / `deny ID`.
    pub id: String,
    /// The execution asking.
    pub execution_id: String,
    /// The tool.
    pub tool: String,
    /// Its arguments (JSON text).
    pub args: String,
    /// Where it stands.
    pub status: ApprovalStatus,
    /// When it was asked (ms since the epoch).
    pub created_at: i64,
    /// When the run stops waiting and counts it a denial (ms since the epoch).
    pub expires_at: Option<i64>,
    /// The graph (slug) whose run asks.
    pub slug: Option<String>,
    /// The project that started that run.
    pub project_id: Option<String>,
    /// The agent that queued that run (its token or grant id).
    pub agent_id: Option<String>,
    /// That agent's name.
    pub agent_name: Option<String>,
}

/// One execution in the run history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryRow {
    /// The execution id.
    pub execution_id: String,
    /// The command it ran.
    pub command_id: String,
    /// `graph:external:<command id>`.
    pub channel: String,
    /// The project.
    pub project_id: String,
    /// The session.
    pub session_id: String,
    /// The slug.
    pub slug: String,
    /// `running`, `completed`, `failed` or `cancelled`.
    pub status: String,
    /// The full result, even when the posted one was truncated.
    pub result: Option<Value>,
    /// The error.
    pub error: Option<String>,
    /// Tokens.
    pub total_tokens: u64,
    /// Cost.
    pub reported_cost: f64,
    /// Whether the posted completion had to leave the result out.
    pub result_truncated: bool,
    /// When the agent queued it (ms since the epoch; `None` in rows from older relays).
    pub queued_at: Option<i64>,
    /// When it started (ms since the epoch).
    pub started_at: i64,
    /// When it ended.
    pub finished_at: Option<i64>,
    /// Set when the service refused the completion for good (a 4xx): its message. The
    /// completion is then not sent again.
    pub refused_by_service: Option<String>,
    /// The graph's arguments.
    pub arguments: Option<Value>,
    /// The agent that queued it (its token or grant id).
    pub agent_id: Option<String>,
    /// That agent's name.
    pub agent_name: Option<String>,
    /// Why it ended, when not by its graph alone (`consent_withdrawn`, `relay_stopped`, ...).
    pub end_cause: Option<relay_protocol::EndCause>,
    /// How often the run was resumed from its journal after a stop interrupted it.
    pub resumed: u32,
    /// When it was last resumed (Unix ms).
    pub resumed_at: Option<i64>,
}

/// The desktop's state file, with a blocking API. Cloning shares the connection: in a relay
/// only its [`AsyncState`] thread uses it, and the lock around it lets a test (or a command
/// in the same process) hold a blocking handle to the same in-memory database.
#[derive(Clone)]
pub struct DesktopState {
    conn: Arc<Mutex<Connection>>,
    path: Option<PathBuf>,
}

/// The settings key of the sharing version (bumped by every change to what is shared).
const SHARING_VERSION: &str = "sharing_version";
/// The settings key of the fs folder.
const FOLDER: &str = "folder";

impl DesktopState {
    /// The schema version this build migrates a state file to.
    pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

    /// Opens the state file at `path` with its checks ([`relay_sqlite::open_checked`]: created
    /// only where no file exists; an empty, damaged or foreign file is refused, see
    /// [`StateError::Unusable`]) and migrates it.
    pub fn open(path: &Path) -> Result<Self, StateError> {
        let options = relay_sqlite::OpenOptions {
            busy_timeout: BUSY_TIMEOUT,
            check_limit: relay_sqlite::DEFAULT_CHECK_LIMIT,
            restore: "stop the relay, then `relay desktop db restore BACKUP`",
            program: relay_sqlite::identity::DESKTOP,
        };
        let opened = relay_sqlite::open_checked(path, MIGRATIONS, &options).map_err(|e| match e {
            relay_sqlite::OpenError::Sqlite { error, .. } => StateError::Sqlite(error),
            relay_sqlite::OpenError::Newer { found, known, .. } => StateError::Invalid(format!(
                "the desktop state has schema version {found}, newer than this relay knows ({known}): \
                 upgrade relay, or give another file with --state"
            )),
            other => StateError::Unusable(other.to_string()),
        })?;
        if let relay_sqlite::Check::Unfinished(limit) = opened.check {
            tracing::warn!(
                state = %path.display(),
                limit_secs = limit.as_secs(),
                "the open check (quick_check) of the desktop state did not finish in time; it is used unchecked"
            );
        }
        Self::init(opened.connection, Some(path.to_path_buf()))
    }

    /// Opens the state file at `path` for reading only, without its checks or migrations:
    /// what the owner's lists use when [`DesktopState::open`] cannot write (a full disk). The
    /// file must be a desktop state of this build's schema; with no room for SQLite's log beside
    /// it, it is read as it stands in the file.
    pub fn open_read_only(path: &Path) -> Result<Self, StateError> {
        use rusqlite::OpenFlags;
        let read_only = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(path, read_only)?;
        let conn = match conn.query_row("PRAGMA user_version", [], |row| row.get::<_, i64>(0)) {
            Ok(_) => conn,
            // No room for the shared-memory file: read the file itself, immutable.
            Err(_) => {
                let uri = format!("file:{}?immutable=1", path.display());
                Connection::open_with_flags(uri, read_only)?
            }
        };
        let version: i64 = conn.query_row_cached("PRAGMA user_version", [], |row| row.get(0))?;
        let found = relay_sqlite::identity::identify(&conn)?;
        if found.program() != Some(relay_sqlite::identity::DESKTOP)
            || usize::try_from(version).ok() != Some(MIGRATIONS.len())
        {
            return Err(StateError::Unusable(format!(
                "{} cannot be read without writing to it: it is not a desktop state of this relay's schema (version {version})",
                path.display()
            )));
        }
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            path: Some(path.to_path_buf()),
        })
    }

    /// Writes a consistent copy of the state file to the new file `target` while it is in
    /// use (`VACUUM INTO`).
    pub fn backup_into(&self, target: &Path) -> Result<(), StateError> {
        self.with_sync(|conn| {
            relay_sqlite::backup_into(conn, target).map_err(|e| StateError::Unusable(e.to_string()))
        })
    }

    /// An in-memory state (tests).
    pub fn open_in_memory() -> Result<Self, StateError> {
        Self::init(Connection::open_in_memory()?, None)
    }

    fn init(mut conn: Connection, path: Option<PathBuf>) -> Result<Self, StateError> {
        conn.pragma_update(None, "foreign_keys", true)?;
        relay_sqlite::cache_statements(&conn)?;
        relay_sqlite::migrate(&mut conn, MIGRATIONS).map_err(|e| match e {
            MigrateError::Newer { found, known } => StateError::Invalid(format!(
                "the desktop state has schema version {found}, newer than this relay knows ({known}): \
                 upgrade relay, or give another file with --state"
            )),
            MigrateError::Sqlite(e) => StateError::Sqlite(e),
        })?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            path,
        })
    }

    /// The file, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `work` with the connection, right here: it blocks (async code goes through
    /// [`AsyncState`]).
    pub fn with_sync<T>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, StateError>,
    ) -> Result<T, StateError> {
        work(&mut self.lock())
    }
}

mod approvals;
mod calls;
mod executions;
mod journal;
mod listing;
mod liveness;
mod local_cancels;
mod queue;
mod served;
mod sessions;
mod settings;
mod sharing;

pub use calls::AsyncState;
pub use journal::StateJournal;
pub use listing::{MAX_RUNNING_LISTED, RunEnd, RunningRow, SessionSource, ShareRow};
pub use local_cancels::RunRef;
pub use queue::QueuedRow;
pub use served::ServiceProjects;
pub use sessions::new_session_id;
pub use sharing::Snapshot;

/// The meta of a test graph with `slug`, for the state's unit tests.
#[cfg(test)]
pub(crate) fn test_meta(slug: &str) -> graph_js::Meta {
    graph_js::Meta {
        name: format!("Graph {slug}"),
        slug: slug.into(),
        version: "1".into(),
        description: String::new(),
        args: None,
    }
}

#[cfg(test)]
mod opening {
    use super::*;

    #[test]
    fn a_state_file_from_a_newer_relay_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("desktop.db");
        drop(DesktopState::open(&path).expect("created"));
        let newer = i64::try_from(MIGRATIONS.len() + 3).expect("small");
        Connection::open(&path)
            .and_then(|c| c.pragma_update(None, "user_version", newer))
            .expect("marked newer");
        let error = DesktopState::open(&path)
            .err()
            .expect("refused")
            .to_string();
        assert!(
            error.contains(&format!("schema version {newer}"))
                && error.contains(&MIGRATIONS.len().to_string())
                && error.contains("upgrade"),
            "{error}"
        );
        let version: i64 = Connection::open(&path)
            .and_then(|c| c.pragma_query_value(None, "user_version", |row| row.get(0)))
            .expect("readable");
        assert_eq!(version, newer);
    }

    #[test]
    fn processes_opening_a_new_state_file_at_once_all_succeed() {
        // `relay desktop run` and a control command started together on a fresh machine.
        let failures = relay_sqlite::open_at_once_failures("desktop.db", |path| {
            DesktopState::open(path)
                .and_then(|state| state.sessions())
                .map(drop)
                .map_err(|e| e.to_string())
        });
        assert!(failures.is_empty(), "{failures:?}");
    }
}
