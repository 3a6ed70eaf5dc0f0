//! The desktop's own SQLite file: graph sessions, which projects are enabled and which sessions
//! each may see, tool policies, the fs folder, pending approvals, the outbox of completions and
//! the run history (every execution with its full result).
//!
//! rusqlite is synchronous; every call runs on tokio's blocking pool.

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
];

/// Why the desktop state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// SQLite failed.
    #[error("desktop state: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A request that can never succeed, with what to do instead.
    #[error("{0}")]
    Invalid(String),
    /// A blocking task did not finish.
    #[error("desktop state: the database task stopped: {0}")]
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
        }
    }
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
    /// When it started (ms since the epoch).
    pub started_at: i64,
    /// When it ended.
    pub finished_at: Option<i64>,
    /// Set when the service refused the completion for good (a 4xx): its message. The
    /// completion is then not sent again.
    pub refused_by_service: Option<String>,
}

/// The desktop's state file. Cloning shares the connection.
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
    /// Opens (creating and migrating) the state file at `path`.
    pub fn open(path: &Path) -> Result<Self, StateError> {
        let conn = relay_sqlite::open_private(path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        relay_sqlite::use_wal(&conn, BUSY_TIMEOUT)?;
        Self::init(conn, Some(path.to_path_buf()))
    }

    /// An in-memory state (tests).
    pub fn open_in_memory() -> Result<Self, StateError> {
        Self::init(Connection::open_in_memory()?, None)
    }

    fn init(mut conn: Connection, path: Option<PathBuf>) -> Result<Self, StateError> {
        conn.pragma_update(None, "foreign_keys", true)?;
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

    /// Runs `work` on the blocking pool with the connection.
    pub async fn with<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, StateError> + Send + 'static,
    ) -> Result<T, StateError> {
        let state = self.clone();
        tokio::task::spawn_blocking(move || work(&mut state.lock()))
            .await
            .map_err(|e| StateError::Task(e.to_string()))?
    }

    /// Runs `work` right here (CLI commands and drop guards).
    pub fn with_sync<T>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, StateError>,
    ) -> Result<T, StateError> {
        work(&mut self.lock())
    }
}

fn bump_sharing(conn: &Connection) -> Result<(), StateError> {
    conn.execute(
        "INSERT INTO settings (key, value) VALUES (?1, '1')
         ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
        params![SHARING_VERSION],
    )?;
    Ok(())
}

fn session_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Session> {
    let id: String = row.get(0)?;
    Ok(Session {
        id: id.parse().map_err(|e: relay_protocol::InvalidInput| {
            rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
        })?,
        name: row.get(1)?,
        description: row.get(2)?,
        slug: row.get(3)?,
        version: row.get(4)?,
        status: row.get(5)?,
        script: row.get(6)?,
    })
}

const SESSION_COLUMNS: &str = "id, name, description, slug, version, status, script";

/// A fresh `gs_` id.
pub fn new_session_id() -> GraphSessionId {
    let hex = uuid::Uuid::new_v4().simple().to_string();
    format!("gs_{hex}")
        .parse()
        .expect("a v4 UUID in simple form is 32 lowercase hex digits")
}

/// Sessions: add (or update by slug), list, look up.
impl DesktopState {
    /// Stores a graph, or updates the session with the same slug; returns its id.
    pub fn upsert_session(
        &self,
        meta: &graph_js::Meta,
        script: &str,
        name: Option<&str>,
        now: Timestamp,
    ) -> Result<GraphSessionId, StateError> {
        self.with_sync(|conn| {
            let tx = conn.transaction()?;
            let existing: Option<String> = tx
                .query_row(
                    "SELECT id FROM graph_sessions WHERE slug = ?1",
                    params![meta.slug],
                    |row| row.get(0),
                )
                .optional()?;
            let display_name = name.unwrap_or(&meta.name);
            let id = match existing {
                Some(id) => {
                    tx.execute(
                        "UPDATE graph_sessions SET name = ?2, description = ?3, version = ?4,
                         script = ?5, updated_at = ?6 WHERE id = ?1",
                        params![id, display_name, meta.description, meta.version, script, now.unix_millis()],
                    )?;
                    id
                }
                None => {
                    let id = new_session_id().to_string();
                    tx.execute(
                        "INSERT INTO graph_sessions (id, name, description, slug, version, status, script, created_at, updated_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, 'active', ?6, ?7, ?7)",
                        params![id, display_name, meta.description, meta.slug, meta.version, script, now.unix_millis()],
                    )?;
                    id
                }
            };
            bump_sharing(&tx)?;
            tx.commit()?;
            id.parse()
                .map_err(|e: relay_protocol::InvalidInput| StateError::Invalid(e.to_string()))
        })
    }

    /// Every session, by slug.
    pub fn sessions(&self) -> Result<Vec<Session>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare(&format!(
                "SELECT {SESSION_COLUMNS} FROM graph_sessions ORDER BY slug"
            ))?;
            let rows = stmt.query_map([], session_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// One session.
    pub fn session(&self, id: &GraphSessionId) -> Result<Option<Session>, StateError> {
        self.with_sync(|conn| {
            Ok(conn
                .query_row(
                    &format!("SELECT {SESSION_COLUMNS} FROM graph_sessions WHERE id = ?1"),
                    params![id.as_str()],
                    session_from_row,
                )
                .optional()?)
        })
    }

    /// Removes a session (and its shares).
    pub fn remove_session(&self, id: &GraphSessionId) -> Result<(), StateError> {
        self.with_sync(|conn| {
            let removed = conn.execute(
                "DELETE FROM graph_sessions WHERE id = ?1",
                params![id.as_str()],
            )?;
            if removed == 0 {
                return Err(StateError::Invalid(format!(
                    "no session {id}: see `relay desktop session list`"
                )));
            }
            bump_sharing(conn)
        })
    }
}

/// Projects and sharing.
impl DesktopState {
    /// Enables or disables a project for this desktop.
    pub fn set_project_enabled(
        &self,
        project_id: &str,
        enabled: bool,
        now: Timestamp,
    ) -> Result<(), StateError> {
        check_project_id(project_id)?;
        self.with_sync(|conn| {
            conn.execute(
                "INSERT INTO projects (project_id, enabled, updated_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT(project_id) DO UPDATE SET enabled = ?2, updated_at = ?3",
                params![project_id, enabled, now.unix_millis()],
            )?;
            bump_sharing(conn)
        })
    }

    /// The enabled projects.
    pub fn enabled_projects(&self) -> Result<Vec<String>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn
                .prepare("SELECT project_id FROM projects WHERE enabled = 1 ORDER BY project_id")?;
            let rows = stmt.query_map([], |row| row.get(0))?;
            Ok(rows.collect::<Result<Vec<String>, _>>()?)
        })
    }

    /// Every project with its enabled flag.
    pub fn projects(&self) -> Result<Vec<(String, bool)>, StateError> {
        self.with_sync(|conn| {
            let mut stmt =
                conn.prepare("SELECT project_id, enabled FROM projects ORDER BY project_id")?;
            let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Shares (checks) a session with a project; at most [`MAX_SYNC_SESSIONS`] per project.
    pub fn share(
        &self,
        project_id: &str,
        session: &GraphSessionId,
        now: Timestamp,
    ) -> Result<(), StateError> {
        check_project_id(project_id)?;
        self.with_sync(|conn| {
            let tx = conn.transaction()?;
            let exists: bool = tx
                .query_row("SELECT 1 FROM graph_sessions WHERE id = ?1", params![session.as_str()], |_| Ok(true))
                .optional()?
                .unwrap_or(false);
            if !exists {
                return Err(StateError::Invalid(format!(
                    "no session {session}: add it first with `relay desktop session add FILE`"
                )));
            }
            let shared: i64 = tx.query_row(
                "SELECT COUNT(*) FROM shares WHERE project_id = ?1 AND session_id != ?2",
                params![project_id, session.as_str()],
                |row| row.get(0),
            )?;
            if usize::try_from(shared).unwrap_or(usize::MAX) >= MAX_SYNC_SESSIONS {
                return Err(StateError::Invalid(format!(
                    "project {project_id} already has {MAX_SYNC_SESSIONS} shared sessions, the most one sync carries: unshare one first"
                )));
            }
            tx.execute(
                "INSERT OR IGNORE INTO shares (project_id, session_id, created_at) VALUES (?1, ?2, ?3)",
                params![project_id, session.as_str(), now.unix_millis()],
            )?;
            bump_sharing(&tx)?;
            tx.commit()?;
            Ok(())
        })
    }

    /// Unshares a session from a project.
    pub fn unshare(&self, project_id: &str, session: &GraphSessionId) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute(
                "DELETE FROM shares WHERE project_id = ?1 AND session_id = ?2",
                params![project_id, session.as_str()],
            )?;
            bump_sharing(conn)
        })
    }

    /// The sessions shared with a project (at most [`MAX_SYNC_SESSIONS`]).
    pub fn shared_sessions(&self, project_id: &str) -> Result<Vec<Session>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare(&format!(
                "SELECT {} FROM graph_sessions s JOIN shares ON shares.session_id = s.id
                 WHERE shares.project_id = ?1 ORDER BY s.slug LIMIT ?2",
                SESSION_COLUMNS
                    .split(", ")
                    .map(|c| format!("s.{c}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))?;
            let rows = stmt.query_map(
                params![project_id, MAX_SYNC_SESSIONS as i64],
                session_from_row,
            )?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// The consent check right before a command runs: the project is enabled, the session is
    /// shared with it, and its slug is still `slug`. Returns the session when all hold.
    pub fn consented_session(
        &self,
        project_id: &str,
        session: &GraphSessionId,
        slug: &str,
    ) -> Result<Option<Session>, StateError> {
        self.with_sync(|conn| {
            let found = conn
                .query_row(
                    &format!(
                        "SELECT {} FROM graph_sessions s
                         JOIN shares ON shares.session_id = s.id AND shares.project_id = ?1
                         JOIN projects p ON p.project_id = ?1 AND p.enabled = 1
                         WHERE s.id = ?2 AND s.slug = ?3",
                        SESSION_COLUMNS
                            .split(", ")
                            .map(|c| format!("s.{c}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    params![project_id, session.as_str(), slug],
                    session_from_row,
                )
                .optional()?;
            Ok(found)
        })
    }

    /// A counter that changes whenever sharing changes (the loop runs a pass right after).
    pub fn sharing_version(&self) -> Result<i64, StateError> {
        self.with_sync(|conn| {
            Ok(conn
                .query_row(
                    "SELECT CAST(value AS INTEGER) FROM settings WHERE key = ?1",
                    params![SHARING_VERSION],
                    |row| row.get(0),
                )
                .optional()?
                .unwrap_or(0))
        })
    }
}

fn check_project_id(project_id: &str) -> Result<(), StateError> {
    const MAX_PROJECT_ID_CHARS: usize = 128;
    if project_id.trim().is_empty()
        || relay_protocol::text::utf16_len(project_id) > MAX_PROJECT_ID_CHARS
    {
        return Err(StateError::Invalid(format!(
            "a project id is 1 to {MAX_PROJECT_ID_CHARS} characters (the id `relay admin project create` printed)"
        )));
    }
    Ok(())
}

/// Tool policies and the folder.
impl DesktopState {
    /// Sets a tool's policy.
    pub fn set_policy(
        &self,
        tool: &str,
        policy: runner::host::approvals::Policy,
    ) -> Result<(), StateError> {
        if tool.trim().is_empty() {
            return Err(StateError::Invalid(
                "the tool name must not be empty".into(),
            ));
        }
        self.with_sync(|conn| {
            conn.execute(
                "INSERT INTO tool_policies (tool, policy) VALUES (?1, ?2)
                 ON CONFLICT(tool) DO UPDATE SET policy = ?2",
                params![tool, policy.as_str()],
            )?;
            Ok(())
        })
    }

    /// The policy table (tools not listed are denied).
    pub fn policy(&self) -> Result<runner::host::approvals::ApprovalPolicy, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare("SELECT tool, policy FROM tool_policies ORDER BY tool")?;
            let rows = stmt.query_map([], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
            })?;
            let mut policy = runner::host::approvals::ApprovalPolicy::default();
            for row in rows {
                let (tool, value) = row?;
                let parsed = value.parse().map_err(StateError::Invalid)?;
                policy.set(tool, parsed);
            }
            Ok(policy)
        })
    }

    /// Sets the folder the fs tools may use.
    pub fn set_folder(&self, folder: &Path) -> Result<(), StateError> {
        let canonical = folder.canonicalize().map_err(|e| {
            StateError::Invalid(format!(
                "the folder {} cannot be used: {e}",
                folder.display()
            ))
        })?;
        if !canonical.is_dir() {
            return Err(StateError::Invalid(format!(
                "{} is not a folder; give the folder the fs tools may use",
                folder.display()
            )));
        }
        // Stored as text: a lossy copy of a non-UTF-8 path would name another folder.
        let Some(text) = canonical.to_str().map(str::to_owned) else {
            return Err(StateError::Invalid(format!(
                "the folder {} has a name that is not UTF-8; rename it or give another",
                folder.display()
            )));
        };
        self.with_sync(|conn| {
            conn.execute(
                "INSERT INTO settings (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = ?2",
                params![FOLDER, text],
            )?;
            Ok(())
        })
    }

    /// The folder the fs tools may use, if set.
    pub fn folder(&self) -> Result<Option<PathBuf>, StateError> {
        self.with_sync(|conn| {
            Ok(conn
                .query_row(
                    "SELECT value FROM settings WHERE key = ?1",
                    params![FOLDER],
                    |row| row.get::<_, String>(0),
                )
                .optional()?
                .map(PathBuf::from))
        })
    }
}

/// Pending approvals.
impl DesktopState {
    /// Records a question to the owner.
    pub fn ask(
        &self,
        id: &str,
        execution_id: &str,
        tool: &str,
        args: &str,
        now: Timestamp,
    ) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute(
                "INSERT INTO approvals (id, execution_id, tool, args, status, created_at)
                 VALUES (?1, ?2, ?3, ?4, 'pending', ?5)",
                params![id, execution_id, tool, args, now.unix_millis()],
            )?;
            Ok(())
        })
    }

    /// The status of an approval.
    pub fn approval_status(&self, id: &str) -> Result<Option<ApprovalStatus>, StateError> {
        self.with_sync(|conn| {
            Ok(conn
                .query_row(
                    "SELECT status FROM approvals WHERE id = ?1",
                    params![id],
                    |row| row.get(0),
                )
                .optional()?)
        })
    }

    /// Answers a pending approval (approved, denied, or expired when nobody did in time).
    pub fn decide(
        &self,
        id: &str,
        decision: ApprovalStatus,
        now: Timestamp,
    ) -> Result<bool, StateError> {
        self.with_sync(|conn| {
            let changed = conn.execute(
                "UPDATE approvals SET status = ?2, decided_at = ?3 WHERE id = ?1 AND status = 'pending'",
                params![id, decision.as_str(), now.unix_millis()],
            )?;
            Ok(changed == 1)
        })
    }

    /// Approvals, newest first; only pending ones unless `all`.
    pub fn approvals(&self, all: bool) -> Result<Vec<ApprovalRow>, StateError> {
        self.with_sync(|conn| {
            let filter = if all { "" } else { "WHERE status = 'pending'" };
            let mut stmt = conn.prepare(&format!(
                "SELECT id, execution_id, tool, args, status, created_at FROM approvals {filter}
                 ORDER BY created_at DESC LIMIT 1000"
            ))?;
            let rows = stmt.query_map([], |row| {
                Ok(ApprovalRow {
                    id: row.get(0)?,
                    execution_id: row.get(1)?,
                    tool: row.get(2)?,
                    args: row.get(3)?,
                    status: row.get(4)?,
                    created_at: row.get(5)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

/// The outbox and the history.
impl DesktopState {
    /// Records that an execution started.
    pub fn begin_execution(
        &self,
        execution_id: &str,
        command_id: &CommandId,
        project_id: &str,
        session: &GraphSessionId,
        slug: &str,
        now: Timestamp,
    ) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute(
                "INSERT INTO history (execution_id, command_id, channel, project_id, session_id, slug, status, started_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', ?7)",
                params![
                    execution_id,
                    command_id.to_string(),
                    format!("graph:external:{command_id}"),
                    project_id,
                    session.as_str(),
                    slug,
                    now.unix_millis()
                ],
            )?;
            Ok(())
        })
    }

    /// Forgets an execution that never started (the service refused it or was unreachable).
    pub fn forget_execution(&self, execution_id: &str) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute(
                "DELETE FROM history WHERE execution_id = ?1",
                params![execution_id],
            )?;
            Ok(())
        })
    }

    /// Records how an execution ended and queues its completion, in one transaction: the
    /// completion is durable before anything is posted.
    pub fn finish_execution(
        &self,
        command_id: &CommandId,
        full_result: Option<&Value>,
        trace: Option<&Value>,
        completion: &CompleteRequest,
        now: Timestamp,
    ) -> Result<(), StateError> {
        let body = serde_json::to_string(completion)
            .map_err(|e| StateError::Invalid(format!("cannot encode the completion: {e}")))?;
        let result = full_result.map(Value::to_string);
        let trace = trace.map(Value::to_string);
        self.with_sync(|conn| {
            let tx = conn.transaction()?;
            tx.execute(
                "UPDATE history SET status = ?2, result = ?3, error = ?4, total_tokens = ?5,
                 reported_cost = ?6, result_truncated = ?7, trace = ?8, finished_at = ?9
                 WHERE execution_id = ?1",
                params![
                    completion.execution_id,
                    relay_protocol::RunStatus::from(completion.status).as_str(),
                    result,
                    completion.error,
                    completion.total_tokens.unwrap_or(0) as i64,
                    completion.reported_cost.unwrap_or(0.0),
                    completion.result_truncated,
                    trace,
                    now.unix_millis()
                ],
            )?;
            tx.execute(
                "INSERT INTO outbox (command_id, execution_id, body, created_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(command_id) DO UPDATE SET execution_id = ?2, body = ?3, attempts = 0, last_error = NULL",
                params![command_id.to_string(), completion.execution_id, body, now.unix_millis()],
            )?;
            tx.commit()?;
            Ok(())
        })
    }

    /// Notes in the history that the service refused the completion waiting in the outbox for
    /// `command_id` for good, with its message.
    pub fn note_refused(&self, command_id: &CommandId, message: &str) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute(
                "UPDATE history SET service_refusal = ?2
                 WHERE execution_id = (SELECT execution_id FROM outbox WHERE command_id = ?1)",
                params![command_id.to_string(), message],
            )?;
            Ok(())
        })
    }

    /// Executions that began and never finished (the relay stopped while they ran).
    pub fn unfinished_executions(&self) -> Result<Vec<(String, CommandId)>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare(
                "SELECT execution_id, command_id FROM history WHERE status = 'running' ORDER BY started_at",
            )?;
            let rows = stmt.query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)))?;
            let mut out = Vec::new();
            for row in rows {
                let (execution, command) = row?;
                if let Ok(command) = command.parse() {
                    out.push((execution, command));
                }
            }
            Ok(out)
        })
    }

    /// Completions waiting to be posted, oldest first.
    pub fn outbox(&self) -> Result<Vec<OutboxEntry>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare(
                "SELECT command_id, body, attempts FROM outbox ORDER BY created_at, command_id",
            )?;
            let rows = stmt.query_map([], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, u32>(2)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (command, body, attempts) = row?;
                match (command.parse(), serde_json::from_str(&body)) {
                    (Ok(command_id), Ok(body)) => out.push(OutboxEntry {
                        command_id,
                        body,
                        attempts,
                    }),
                    _ => tracing::error!(command, "unreadable outbox entry left in place"),
                }
            }
            Ok(out)
        })
    }

    /// Removes a delivered (or finally refused) completion.
    pub fn remove_from_outbox(&self, command_id: &CommandId) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute(
                "DELETE FROM outbox WHERE command_id = ?1",
                params![command_id.to_string()],
            )?;
            Ok(())
        })
    }

    /// Notes a failed post attempt.
    pub fn note_outbox_failure(
        &self,
        command_id: &CommandId,
        error: &str,
    ) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute(
                "UPDATE outbox SET attempts = attempts + 1, last_error = ?2 WHERE command_id = ?1",
                params![command_id.to_string(), error],
            )?;
            Ok(())
        })
    }

    /// The run history, newest first.
    pub fn history(&self) -> Result<Vec<HistoryRow>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare(
                "SELECT execution_id, command_id, channel, project_id, session_id, slug, status, result,
                        error, total_tokens, reported_cost, result_truncated, started_at, finished_at,
                        service_refusal
                 FROM history ORDER BY started_at DESC, execution_id LIMIT ?1",
            )?;
            let rows = stmt.query_map(params![MAX_HISTORY_LISTED as i64], |row| {
                let result: Option<String> = row.get(7)?;
                Ok(HistoryRow {
                    execution_id: row.get(0)?,
                    command_id: row.get(1)?,
                    channel: row.get(2)?,
                    project_id: row.get(3)?,
                    session_id: row.get(4)?,
                    slug: row.get(5)?,
                    status: row.get(6)?,
                    result: result.and_then(|r| serde_json::from_str(&r).ok()),
                    error: row.get(8)?,
                    total_tokens: row.get::<_, i64>(9)?.max(0) as u64,
                    reported_cost: row.get(10)?,
                    result_truncated: row.get(11)?,
                    started_at: row.get(12)?,
                    finished_at: row.get(13)?,
                    refused_by_service: row.get(14)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(slug: &str) -> graph_js::Meta {
        graph_js::Meta {
            name: format!("Graph {slug}"),
            slug: slug.into(),
            version: "1".into(),
            description: String::new(),
        }
    }

    #[test]
    fn consent_needs_enabled_project_shared_session_and_same_slug() {
        let state = DesktopState::open_in_memory().expect("state");
        let now = Timestamp::from_unix_millis(1);
        let id = state
            .upsert_session(&meta("triage"), "script", None, now)
            .expect("added");
        assert!(
            state
                .consented_session("p", &id, "triage")
                .expect("query")
                .is_none(),
            "nothing shared yet"
        );
        state.share("p", &id, now).expect("share");
        assert!(
            state
                .consented_session("p", &id, "triage")
                .expect("query")
                .is_none(),
            "project not enabled"
        );
        state.set_project_enabled("p", true, now).expect("enable");
        assert!(
            state
                .consented_session("p", &id, "triage")
                .expect("query")
                .is_some()
        );
        assert!(
            state
                .consented_session("p", &id, "other-slug")
                .expect("query")
                .is_none()
        );
        assert!(
            state
                .consented_session("q", &id, "triage")
                .expect("query")
                .is_none()
        );
        state.set_project_enabled("p", false, now).expect("disable");
        assert!(
            state
                .consented_session("p", &id, "triage")
                .expect("query")
                .is_none()
        );
    }

    #[test]
    fn adding_the_same_slug_updates_the_session_and_keeps_its_id() {
        let state = DesktopState::open_in_memory().expect("state");
        let now = Timestamp::from_unix_millis(1);
        let first = state
            .upsert_session(&meta("a"), "v1", None, now)
            .expect("added");
        let again = state
            .upsert_session(&meta("a"), "v2", Some("Renamed"), now)
            .expect("updated");
        assert_eq!(first, again);
        let sessions = state.sessions().expect("list");
        assert_eq!(sessions.len(), 1);
        assert_eq!(sessions[0].script, "v2");
        assert_eq!(sessions[0].name, "Renamed");
        assert!(first.as_str().starts_with("gs_") && first.as_str().len() == 35);
    }

    #[test]
    fn a_project_shares_at_most_the_sync_limit() {
        let state = DesktopState::open_in_memory().expect("state");
        let now = Timestamp::from_unix_millis(1);
        for i in 0..MAX_SYNC_SESSIONS {
            let id = state
                .upsert_session(&meta(&format!("g{i}")), "s", None, now)
                .expect("added");
            state.share("p", &id, now).expect("share");
        }
        let extra = state
            .upsert_session(&meta("extra"), "s", None, now)
            .expect("added");
        let refused = state.share("p", &extra, now).unwrap_err();
        assert!(
            refused.to_string().contains("unshare one first"),
            "{refused}"
        );
        assert_eq!(
            state.shared_sessions("p").expect("list").len(),
            MAX_SYNC_SESSIONS
        );
    }

    #[test]
    fn sharing_changes_bump_the_version() {
        let state = DesktopState::open_in_memory().expect("state");
        let now = Timestamp::from_unix_millis(1);
        let v0 = state.sharing_version().expect("v");
        let id = state
            .upsert_session(&meta("a"), "s", None, now)
            .expect("added");
        state.share("p", &id, now).expect("share");
        let v1 = state.sharing_version().expect("v");
        assert!(v1 > v0);
        state.unshare("p", &id).expect("unshare");
        assert!(state.sharing_version().expect("v") > v1);
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
