//! The SQLite store: rusqlite with the bundled library, WAL, migrations on open.
//!
//! rusqlite is synchronous, so a call runs on tokio's blocking pool with a connection taken
//! from a small pool, and the async runtime never waits on the database's locks: except the
//! hot reads (`SqliteStore::read`), which run on the calling task over read-only connections
//! whose wait for a lock is bounded at 20 ms, and go to the blocking pool when that fails.

use relay_sqlite::CachedStatements as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};
use serde_json::{Map, Value};
use tokio::sync::Semaphore;

use super::{
    ArtifactInsertOutcome, ArtifactRecord, BoxError, ChatLinkRecord, ClaimAttempt, CommandQuery,
    CommandRecord, Damage, InsertOutcome, OpenCounts, OwnerRecord, PresenceRecord, PresenceSync,
    ProjectRecord, QueueLimit, QueueQuota, Rows, SessionRecord, SessionSnapshot, SnapshotWrite,
    Store, StoreError, StoreFuture, SweepCounts, TaskInsertOutcome, TaskRecord, TokenKind,
    TokenRecord,
};
use super::{
    AuthCodeRecord, AuthSweep, AuthSweepCounts, BrowserSessionRecord, IssuedTokens,
    OAuthClientRecord, OAuthTokenRecord, RedeemOutcome, RotateOutcome, SignInLinkRecord,
};
use crate::model::TaskId;
use relay_protocol::clock::Timestamp;
use relay_protocol::{CommandId, GraphSessionId, RunStatus, SessionMeta};
use relay_sqlite::MigrateError;

mod auth;
mod chat;
mod console;
mod presence;

/// Connections one file-backed store keeps open; WAL lets readers run beside the one writer.
const MAX_CONNECTIONS: usize = 4;
/// Read connections kept for reads on the calling task.
const MAX_READERS: usize = 8;
/// How long a read on the calling task waits for a lock before it goes to the blocking pool
/// instead (WAL readers wait only while a writer recovers or truncates the log).
const READER_BUSY_TIMEOUT: Duration = Duration::from_millis(20);
/// How long a writer waits for another connection's write lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// Token ids per statement of `unrevoked_tokens`.
const UNREVOKED_CHUNK: usize = 500;
/// Up to this many tokens, [`Store::unrevoked_tokens`] looks each up by its key.
const UNREVOKED_ONE_BY_ONE: usize = 16;

/// Schema migrations, applied in order; `PRAGMA user_version` counts those applied.
/// Never edit a released entry: append a new one.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE owners (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
);
CREATE TABLE projects (
    id TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL REFERENCES owners(id),
    name TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX projects_by_owner ON projects(owner_id);
CREATE TABLE tokens (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('desktop', 'agent', 'owner')),
    token_hash TEXT NOT NULL UNIQUE,
    owner_id TEXT NOT NULL REFERENCES owners(id),
    project_id TEXT REFERENCES projects(id),
    agent_name TEXT,
    scopes TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE TABLE graph_sessions (
    project_id TEXT NOT NULL REFERENCES projects(id),
    graph_session_id TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    slug TEXT NOT NULL,
    version TEXT NOT NULL,
    status TEXT NOT NULL,
    synced_at INTEGER NOT NULL,
    PRIMARY KEY (project_id, graph_session_id)
);
CREATE TABLE project_syncs (
    project_id TEXT PRIMARY KEY REFERENCES projects(id),
    synced_at INTEGER NOT NULL
);
CREATE TABLE commands (
    id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects(id),
    agent_id TEXT NOT NULL REFERENCES tokens(id),
    graph_session_id TEXT NOT NULL,
    slug TEXT NOT NULL,
    arguments TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    status TEXT NOT NULL
        CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    execution_id TEXT,
    result TEXT,
    result_truncated INTEGER NOT NULL DEFAULT 0,
    total_tokens INTEGER,
    reported_cost REAL,
    error TEXT,
    completion_hash TEXT,
    created_at INTEGER NOT NULL,
    started_at INTEGER,
    finished_at INTEGER,
    last_seen_at INTEGER,
    updated_at INTEGER NOT NULL
);
-- One command per (agent, key): concurrent identical requests collide here, not in app code.
CREATE UNIQUE INDEX commands_by_idempotency_key ON commands(agent_id, idempotency_key);
CREATE INDEX commands_queued ON commands(project_id, status, created_at);
CREATE INDEX commands_running ON commands(status, last_seen_at);
"#,
    chat::MIGRATION,
    // The queue quota counts an agent's queued commands at every insert.
    r#"
CREATE INDEX commands_queued_by_agent ON commands(agent_id) WHERE status = 'queued';
"#,
    auth::MIGRATION,
    // The console's lists: a project's runs newest first, and when each token was last used
    // (written at most once a minute per token, see `auth::TokenUses`).
    r#"
CREATE INDEX commands_by_project_age ON commands(project_id, created_at, id);
CREATE TABLE token_uses (
    token_id TEXT PRIMARY KEY REFERENCES tokens(id),
    last_used_at INTEGER NOT NULL
);
"#,
    presence::MIGRATION,
    // A session's argument schema (JSON text, its graph's `meta.args`); the token cap an agent
    // asked for, and the cap the desktop ran with (reported with `started`).
    r#"
ALTER TABLE graph_sessions ADD COLUMN args_schema TEXT;
ALTER TABLE commands ADD COLUMN max_tokens INTEGER;
ALTER TABLE commands ADD COLUMN token_cap INTEGER;
"#,
    SHARING_VERSION_MIGRATION,
    auth::CONNECTIONS_MIGRATION,
    presence::LONG_POLLS_MIGRATION,
    END_CAUSE_MIGRATION,
    RESUMED_MIGRATION,
];

/// How often a run's desktop resumed it from its journal after a stop, and when last
/// (issue 46; 0 and `NULL`: never).
const RESUMED_MIGRATION: &str = r#"
ALTER TABLE commands ADD COLUMN resumed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE commands ADD COLUMN resumed_at INTEGER;
"#;

/// Who asked the service to cancel a run, and why it ended (`EndCause` wire words; `NULL`:
/// no one asked, it ended by its graph alone, or it ended before causes were kept).
const END_CAUSE_MIGRATION: &str = r#"
ALTER TABLE commands ADD COLUMN cancel_cause TEXT;
ALTER TABLE commands ADD COLUMN end_cause TEXT;
"#;

/// The desktop's sharing version of each project's held snapshot (`NULL`: synced by a desktop
/// from before versions), so an older snapshot never replaces a newer one.
const SHARING_VERSION_MIGRATION: &str = r#"
ALTER TABLE project_syncs ADD COLUMN sharing_version INTEGER;
"#;

/// The schema migrations, in order: for tests that build a database as an older release left
/// it and open it with this one.
#[cfg(feature = "conformance")]
pub fn migrations() -> &'static [&'static str] {
    MIGRATIONS
}

/// Which quota `command` would exceed, if any: counted inside the insert's transaction.
fn queue_limit_reached(
    transaction: &rusqlite::Transaction<'_>,
    command: &CommandRecord,
    quota: QueueQuota,
) -> Result<Option<QueueLimit>, StoreError> {
    let count = |sql: &str, key: &str| -> Result<u64, StoreError> {
        transaction
            .query_row_cached(sql, params![key, RunStatus::Queued.as_str()], |row| {
                row.get::<_, i64>(0)
            })
            .map(|n| u64::try_from(n).unwrap_or(0))
            .map_err(backend)
    };
    let agent = count(
        "SELECT COUNT(*) FROM commands WHERE agent_id = ?1 AND status = ?2",
        &command.agent_id,
    )?;
    if agent >= quota.per_agent {
        return Ok(Some(QueueLimit::Agent(quota.per_agent)));
    }
    let project = count(
        "SELECT COUNT(*) FROM commands WHERE project_id = ?1 AND status = ?2",
        &command.project_id,
    )?;
    if project >= quota.per_project {
        return Ok(Some(QueueLimit::Project(quota.per_project)));
    }
    Ok(None)
}

const COMMAND_COLUMNS: &str = "id, project_id, agent_id, graph_session_id, slug, arguments, \
    idempotency_key, request_hash, status, cancel_requested, execution_id, result, \
    result_truncated, total_tokens, reported_cost, error, completion_hash, created_at, \
    started_at, finished_at, last_seen_at, updated_at, delivered_at, report, max_tokens,
    token_cap, cancel_cause, end_cause, resumed, resumed_at";

const TOKEN_COLUMNS: &str = "id, kind, token_hash, owner_id, project_id, agent_name, scopes, \
    created_at, revoked_at, client_id, connection_id";

/// The columns of the service's SQLite file that hold JSON, as its row decoders read them: what
/// `relay admin db check` parses in its decode pass.
pub const JSON_COLUMNS: &[relay_sqlite::rows::JsonColumn] = {
    use relay_sqlite::rows::{JsonColumn, Shape};
    &[
        JsonColumn {
            table: "commands",
            column: "arguments",
            shape: Shape::Object,
        },
        JsonColumn {
            table: "commands",
            column: "result",
            shape: Shape::Any,
        },
        JsonColumn {
            table: "commands",
            column: "report",
            shape: Shape::Object,
        },
        JsonColumn {
            table: "graph_sessions",
            column: "args_schema",
            shape: Shape::Any,
        },
        JsonColumn {
            table: "oauth_clients",
            column: "metadata",
            shape: Shape::Object,
        },
    ]
};

/// A [`Store`] over one SQLite database file (or one in-memory database).
#[derive(Clone)]
pub struct SqliteStore {
    pool: Arc<Pool>,
}

struct Pool {
    /// `None` for an in-memory database, which lives in its single connection.
    path: Option<PathBuf>,
    idle: Mutex<Vec<Connection>>,
    /// Connections for reads run on the calling task ([`SqliteStore::read`]), with a short busy
    /// timeout; never more than [`MAX_READERS`] kept.
    readers: Mutex<Vec<Connection>>,
    permits: Arc<Semaphore>,
    /// How many permits there are.
    size: usize,
    /// Calls waiting for a permit now.
    waiting: std::sync::atomic::AtomicUsize,
    /// How long calls took, the wait for a permit included.
    latency: super::histogram::SharedHistogram,
}

impl Pool {
    fn new(path: Option<PathBuf>, connection: Connection, size: usize) -> Pool {
        Pool {
            path,
            idle: Mutex::new(vec![connection]),
            readers: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(size)),
            size,
            waiting: std::sync::atomic::AtomicUsize::new(0),
            latency: super::histogram::SharedHistogram::new(&super::STORE_LATENCY_BUCKETS),
        }
    }
}

impl SqliteStore {
    /// The schema version this build migrates a SQLite database to.
    pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

    /// Opens the database at `path` with its checks ([`relay_sqlite::open_checked`]: created
    /// and migrated only where no file exists; an empty, damaged or foreign file is refused) and
    /// the default limit on the open check. Blocking: call it before serving, or from a
    /// blocking task.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_checked(path, relay_sqlite::DEFAULT_CHECK_LIMIT)
    }

    /// [`SqliteStore::open`] with `check_limit` on the open `quick_check`; a check that runs
    /// past it is logged at WARN and the file is used (the periodic check goes on looking).
    pub fn open_checked(path: &Path, check_limit: Duration) -> Result<Self, StoreError> {
        let options = relay_sqlite::OpenOptions {
            busy_timeout: BUSY_TIMEOUT,
            check_limit,
            restore: RESTORE_HINT,
            program: relay_sqlite::identity::SERVICE,
        };
        let opened =
            relay_sqlite::open_checked(path, MIGRATIONS, &options).map_err(|e| match e {
                relay_sqlite::OpenError::Sqlite { error, .. } => {
                    let context = format!("cannot open the database {}", path.display());
                    with_context(backend(error), &context)
                }
                other => StoreError::Unusable(other.into()),
            })?;
        if let relay_sqlite::Check::Unfinished(limit) = opened.check {
            tracing::warn!(
                db = %path.display(),
                limit_secs = limit.as_secs(),
                "the open check (quick_check) did not finish in time; the database is used unchecked"
            );
        }
        let connection = opened.connection;
        prepare(&connection).map_err(backend)?;
        Ok(SqliteStore {
            pool: Arc::new(Pool::new(
                Some(path.to_owned()),
                connection,
                MAX_CONNECTIONS,
            )),
        })
    }

    /// Writes a consistent copy of the database to the new file `target` while the service
    /// runs ([`relay_sqlite::backup_into`]): every commit made before it began, and nothing
    /// half-written.
    pub async fn backup_into(&self, target: PathBuf) -> Result<(), StoreError> {
        self.call(move |connection| {
            relay_sqlite::backup_into(connection, &target)
                .map_err(|e| StoreError::Unusable(e.into()))
        })
        .await
    }

    /// A fresh private in-memory database (one connection, so calls are serialised).
    pub fn open_in_memory() -> Result<Self, StoreError> {
        let connection = open_connection(None)?;
        Ok(SqliteStore {
            pool: Arc::new(Pool::new(None, connection, 1)),
        })
    }

    /// Runs `work` with a pooled connection on the blocking pool.
    fn call<T, F>(&self, work: F) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let pool = self.pool.clone();
        Box::pin(async move {
            let watch = relay_protocol::clock::Stopwatch::start();
            // The permit and the connection travel into the blocking task and come back to the
            // pool when it ends, even if the caller stopped waiting (a long poll's deadline, a
            // cancelled request): an in-memory database lives in its one connection, and a
            // connection lost with a dropped future would lose the database.
            pool.waiting
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let permit = pool.permits.clone().acquire_owned().await;
            pool.waiting
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            let permit = permit.map_err(StoreError::PoolClosed)?;
            if pool.path.is_none() {
                // An in-memory database does no I/O: its statements take microseconds, less than
                // handing them to another thread would.
                let Some(mut connection) = pool.idle.lock().ok().and_then(|mut idle| idle.pop())
                else {
                    return Err(StoreError::Inconsistent(
                        "the in-memory connection is missing",
                    ));
                };
                let result = work(&mut connection);
                pool.latency.observe(watch.elapsed());
                if let Ok(mut idle) = pool.idle.lock() {
                    idle.push(connection);
                }
                drop(permit);
                return result;
            }
            let blocking = tokio::task::spawn_blocking(move || {
                let idle = pool.idle.lock().map(|mut idle| idle.pop()).ok().flatten();
                let mut connection = match idle {
                    Some(connection) => connection,
                    None => open_connection(pool.path.as_deref())?,
                };
                let result = work(&mut connection);
                pool.latency.observe(watch.elapsed());
                if let Ok(mut idle) = pool.idle.lock() {
                    idle.push(connection);
                }
                drop(permit);
                result
            });
            blocking.await.map_err(StoreError::Task)?
        })
    }
}

impl SqliteStore {
    /// Runs the read `work` on the calling task when the database is a file: a hot read (a
    /// token, a project's sessions, a run) takes microseconds from SQLite's cache, far less than
    /// the two thread switches of the blocking pool, and a WAL reader never waits for writers.
    /// Its time is bounded by [`READER_BUSY_TIMEOUT`] on a read-only connection; a read that
    /// fails in any way (busy, a connection that cannot be opened) is run again through the
    /// blocking pool with the usual patience, so a failure is reported as
    /// [`SqliteStore::call`] reports it.
    fn read<T, F>(&self, work: F) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: Fn(&mut Connection) -> Result<T, StoreError> + Send + Clone + 'static,
    {
        let store = self.clone();
        Box::pin(async move {
            let pool = &store.pool;
            if let Some(path) = pool.path.as_deref() {
                let kept = pool.readers.lock().ok().and_then(|mut idle| idle.pop());
                if let Some(mut connection) = kept.or_else(|| open_reader(path).ok()) {
                    let watch = relay_protocol::clock::Stopwatch::start();
                    let result = work(&mut connection);
                    pool.latency.observe(watch.elapsed());
                    if let Ok(mut idle) = pool.readers.lock()
                        && idle.len() < MAX_READERS
                    {
                        idle.push(connection);
                    }
                    if let Ok(value) = result {
                        return Ok(value);
                    }
                }
            }
            store.call(work).await
        })
    }
}

/// A read-only connection to the file for [`SqliteStore::read`].
fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let connection = Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    connection.busy_timeout(READER_BUSY_TIMEOUT)?;
    relay_sqlite::cache_statements(&connection)?;
    Ok(connection)
}

/// What `relay serve` and `relay admin` refusals say to restore with.
const RESTORE_HINT: &str = "stop relay serve, then `relay admin db restore BACKUP`";

/// Another connection to the database: a file that already passed its open check (never
/// created here, so a file deleted under the service is reported missing, not made anew), or a
/// fresh in-memory database.
fn open_connection(path: Option<&Path>) -> Result<Connection, StoreError> {
    let mut connection = match path {
        Some(path) => Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::default().difference(rusqlite::OpenFlags::SQLITE_OPEN_CREATE),
        )
        .map_err(|e| {
            with_context(
                backend(e),
                &format!("cannot open database {}", path.display()),
            )
        })?,
        None => Connection::open_in_memory().map_err(backend)?,
    };
    connection.busy_timeout(BUSY_TIMEOUT).map_err(backend)?;
    if path.is_some() {
        let mode = relay_sqlite::use_wal(&connection, BUSY_TIMEOUT).map_err(backend)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Setup {
                message: format!("the database refused WAL mode (got {mode})"),
                source: None,
            });
        }
    }
    prepare(&connection).map_err(backend)?;
    if path.is_none() {
        migrate(&mut connection)?;
    }
    Ok(connection)
}

/// Per-connection settings. FULL: a queued run or a recorded completion must survive a crash
/// right after the answer.
fn prepare(connection: &Connection) -> rusqlite::Result<()> {
    relay_sqlite::cache_statements(connection)?;
    connection.execute_batch("PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL;")
}

fn with_context(error: StoreError, context: &str) -> StoreError {
    match error {
        StoreError::Fault {
            fault,
            detail,
            source,
        } => StoreError::Fault {
            fault,
            detail: format!("{context}: {detail}"),
            source,
        },
        StoreError::Sqlite {
            context: inner,
            source,
        } => StoreError::Sqlite {
            context: format!("{context}: {inner}"),
            source,
        },
        other => other,
    }
}

fn migrate(connection: &mut Connection) -> Result<(), StoreError> {
    relay_sqlite::migrate(connection, MIGRATIONS).map_err(|e| match e {
        MigrateError::Newer { found, known } => StoreError::Unusable(
            format!(
                "the database has schema version {found}, newer than this build knows ({known}): upgrade relay"
            )
            .into(),
        ),
        MigrateError::Sqlite(e) => backend(e),
    })
}

/// A rusqlite error as a [`StoreError`]: a named fault, damage a row decoder found, or
/// SQLite's own error kept as the source.
fn backend(error: rusqlite::Error) -> StoreError {
    let error = match damage_of(error) {
        Ok(damage) => return damage.into(),
        Err(error) => error,
    };
    match relay_sqlite::Fault::of(&error) {
        Some(fault) => StoreError::Fault {
            fault,
            detail: error.to_string(),
            source: Box::new(error),
        },
        None => StoreError::Sqlite {
            context: String::new(),
            source: error,
        },
    }
}

/// Decodes row `id` of `table` with `decode`: a value in it that cannot be read (a column of
/// another type, text that is not UTF-8, a field that does not parse) is damage naming the row.
fn in_row<T>(
    table: &'static str,
    id: &str,
    decode: impl FnOnce() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    decode().map_err(|error| match damage_of(error) {
        Ok(damage) => damaged(damage.in_row(table, id)),
        Err(error) => error,
    })
}

/// The damage `error` reports when it is a failure to decode a stored value; otherwise the
/// error back.
fn damage_of(error: rusqlite::Error) -> Result<Damage, rusqlite::Error> {
    match error {
        rusqlite::Error::FromSqlConversionFailure(column, kind, source) => {
            match source.downcast::<Damage>() {
                Ok(damage) => Ok(*damage),
                Err(source) => Ok(Damage::of(format!("column {column} ({kind})"), source)),
            }
        }
        rusqlite::Error::InvalidColumnType(column, name, kind) => Ok(Damage::of(
            format!("column {column} ({name})"),
            format!("it holds {kind}, not what the store writes there"),
        )),
        rusqlite::Error::IntegralValueOutOfRange(column, value) => Ok(Damage::of(
            format!("column {column}"),
            format!("{value} is out of range"),
        )),
        rusqlite::Error::Utf8Error(column, error) => {
            Ok(Damage::of(format!("column {column}"), error))
        }
        other => Err(other),
    }
}

/// `damage` as the error a row decoder returns; [`backend`] turns it back into damage.
fn damaged(damage: Damage) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Null, Box::new(damage))
}

/// Damage to `what` in the row being decoded.
fn corrupt(what: &str, why: impl Into<BoxError>) -> rusqlite::Error {
    damaged(Damage::of(what, why))
}

fn ts(value: Option<i64>) -> Option<Timestamp> {
    value.map(Timestamp::from_unix_millis)
}

fn ms(value: Option<Timestamp>) -> Option<i64> {
    value.map(Timestamp::unix_millis)
}

fn token_from_row(row: &Row<'_>) -> rusqlite::Result<TokenRecord> {
    let key: String = row.get(0)?;
    in_row("tokens", &key, || {
        let kind: String = row.get(1)?;
        let scopes: String = row.get(6)?;
        Ok(TokenRecord {
            id: key.clone(),
            kind: TokenKind::parse(&kind)
                .ok_or_else(|| corrupt("kind", format!("`{kind}` is not a token kind")))?,
            token_hash: row.get(2)?,
            owner_id: row.get(3)?,
            project_id: row.get(4)?,
            agent_name: row.get(5)?,
            scopes: scopes.split_whitespace().map(str::to_owned).collect(),
            created_at: Timestamp::from_unix_millis(row.get(7)?),
            revoked_at: ts(row.get(8)?),
            client_id: row.get(9)?,
            connection_id: row.get(10)?,
        })
    })
}

fn owner_from_row(row: &Row<'_>) -> rusqlite::Result<OwnerRecord> {
    let key: String = row.get(0)?;
    in_row("owners", &key, || {
        Ok(OwnerRecord {
            id: key.clone(),
            name: row.get(1)?,
            created_at: Timestamp::from_unix_millis(row.get(2)?),
        })
    })
}

fn project_from_row(row: &Row<'_>) -> rusqlite::Result<ProjectRecord> {
    let key: String = row.get(0)?;
    in_row("projects", &key, || {
        Ok(ProjectRecord {
            id: key.clone(),
            owner_id: row.get(1)?,
            name: row.get(2)?,
            created_at: Timestamp::from_unix_millis(row.get(3)?),
        })
    })
}

/// A project's sessions in listing order, each row with the project's last sync time (column 8).
const SESSIONS_WITH_SYNC: &str = "SELECT graph_session_id, name, description, slug, version, \
     status, synced_at, args_schema, \
     (SELECT synced_at FROM project_syncs WHERE project_id = ?1) \
     FROM graph_sessions WHERE project_id = ?1 ORDER BY name, graph_session_id LIMIT ?2";

fn session_from_row(row: &Row<'_>) -> rusqlite::Result<SessionRecord> {
    let id: String = row.get(0)?;
    in_row("graph_sessions", &id, || {
        Ok(SessionRecord {
            meta: SessionMeta {
                graph_session_id: id.parse().map_err(|e| corrupt("id", e))?,
                name: row.get(1)?,
                description: row.get(2)?,
                slug: row.get(3)?,
                version: row.get(4)?,
                status: row.get(5)?,
                args_schema: row
                    .get::<_, Option<String>>(7)?
                    .map(|text| serde_json::from_str(&text))
                    .transpose()
                    .map_err(|e| corrupt("args_schema", e))?,
            },
            synced_at: Timestamp::from_unix_millis(row.get(6)?),
        })
    })
}

pub(super) fn command_from_row(row: &Row<'_>) -> rusqlite::Result<CommandRecord> {
    let id: String = row.get(0)?;
    in_row("commands", &id, || {
        let graph_session_id: String = row.get(3)?;
        let arguments: String = row.get(5)?;
        let status: String = row.get(8)?;
        let result: Option<String> = row.get(11)?;
        let total_tokens: Option<i64> = row.get(13)?;
        let report: Option<String> = row.get(23)?;
        Ok(CommandRecord {
            id: id.parse().map_err(|e| corrupt("id", e))?,
            project_id: row.get(1)?,
            agent_id: row.get(2)?,
            graph_session_id: graph_session_id
                .parse()
                .map_err(|e| corrupt("graph_session_id", e))?,
            slug: row.get(4)?,
            arguments: serde_json::from_str::<Map<String, Value>>(&arguments)
                .map_err(|e| corrupt("arguments", e))?,
            idempotency_key: row.get(6)?,
            request_hash: row.get(7)?,
            status: status.parse().map_err(|e| corrupt("status", e))?,
            cancel_requested: row.get(9)?,
            execution_id: row.get(10)?,
            result: result
                .map(|text| serde_json::from_str(&text))
                .transpose()
                .map_err(|e| corrupt("result", e))?,
            result_truncated: row.get(12)?,
            total_tokens: total_tokens
                .map(u64::try_from)
                .transpose()
                .map_err(|e| corrupt("total_tokens", e))?,
            reported_cost: row.get(14)?,
            error: row.get(15)?,
            completion_hash: row.get(16)?,
            created_at: Timestamp::from_unix_millis(row.get(17)?),
            started_at: ts(row.get(18)?),
            finished_at: ts(row.get(19)?),
            last_seen_at: ts(row.get(20)?),
            updated_at: Timestamp::from_unix_millis(row.get(21)?),
            delivered_at: ts(row.get(22)?),
            // A report is advice for the agent: one that cannot be read is left out.
            report: report.and_then(|text| serde_json::from_str(&text).ok()),
            max_tokens: from_sql_tokens(row.get(24)?),
            token_cap: from_sql_tokens(row.get(25)?),
            cancel_cause: cause_word(row.get(26)?),
            end_cause: cause_word(row.get(27)?),
            resumed: resumed_count(row.get(28)?),
            resumed_at: ts(row.get(29)?),
        })
    })
}

/// A stored cause word; one this build does not know (a newer build's) reads as none: a cause
/// only explains an end, it decides nothing.
fn cause_word(word: Option<String>) -> Option<relay_protocol::EndCause> {
    word.and_then(|word| word.parse().ok())
}

/// A stored resume count; one out of range (never written) reads as none.
fn resumed_count(count: i64) -> u32 {
    u32::try_from(count).unwrap_or(0)
}

/// A stored token count; a negative one (never written) reads as none.
fn from_sql_tokens(tokens: Option<i64>) -> Option<u64> {
    tokens.and_then(|n| u64::try_from(n).ok())
}

fn to_sql_tokens(total_tokens: Option<u64>) -> Result<Option<i64>, StoreError> {
    total_tokens
        .map(i64::try_from)
        .transpose()
        .map_err(|_| StoreError::Invalid("total_tokens is too large to store".into()))
}

fn select_command(
    connection: &Connection,
    id: CommandId,
) -> rusqlite::Result<Option<CommandRecord>> {
    connection
        .query_row_cached(
            &format!("SELECT {COMMAND_COLUMNS} FROM commands WHERE id = ?1"),
            [id.to_string()],
            command_from_row,
        )
        .optional()
}

impl Store for SqliteStore {
    fn check_structure(&self, limit: Duration) -> StoreFuture<'_, Option<String>> {
        self.call(move |connection| {
            match relay_sqlite::quick_check(connection, limit).map_err(backend)? {
                relay_sqlite::Check::Damaged(problems) => Ok(Some(problems)),
                relay_sqlite::Check::Passed => Ok(None),
                relay_sqlite::Check::Unfinished(limit) => {
                    tracing::warn!(
                        limit_secs = limit.as_secs(),
                        "the periodic quick_check did not finish in time; raise the limit or check less often"
                    );
                    Ok(None)
                }
            }
        })
    }

    fn ensure_owner<'a>(&'a self, name: &'a str, now: Timestamp) -> StoreFuture<'a, OwnerRecord> {
        let name = name.to_owned();
        self.call(move |connection| {
            let transaction = connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend)?;
            transaction
                .execute_cached(
                    "INSERT INTO owners (id, name, created_at) VALUES (?1, ?2, ?3) \
                     ON CONFLICT(name) DO NOTHING",
                    params![uuid::Uuid::new_v4().to_string(), name, now.unix_millis()],
                )
                .map_err(backend)?;
            let owner = transaction
                .query_row_cached(
                    "SELECT id, name, created_at FROM owners WHERE name = ?1",
                    [&name],
                    owner_from_row,
                )
                .map_err(backend)?;
            transaction.commit().map_err(backend)?;
            Ok(owner)
        })
    }

    fn insert_project(&self, project: ProjectRecord) -> StoreFuture<'_, ()> {
        self.call(move |connection| {
            connection
                .execute_cached(
                    "INSERT INTO projects (id, owner_id, name, created_at) VALUES (?1, ?2, ?3, ?4)",
                    params![
                        project.id,
                        project.owner_id,
                        project.name,
                        project.created_at.unix_millis()
                    ],
                )
                .map_err(backend)?;
            Ok(())
        })
    }

    fn project<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<ProjectRecord>> {
        let id = id.to_owned();
        self.call(move |connection| {
            connection
                .query_row_cached(
                    "SELECT id, owner_id, name, created_at FROM projects WHERE id = ?1",
                    [id],
                    project_from_row,
                )
                .optional()
                .map_err(backend)
        })
    }

    fn all_projects(&self) -> StoreFuture<'_, Vec<ProjectRecord>> {
        self.call(move |connection| {
            connection
                .prepare_cached(
                    "SELECT id, owner_id, name, created_at FROM projects ORDER BY created_at, id",
                )
                .and_then(|mut statement| {
                    statement
                        .query_map([], project_from_row)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(backend)
        })
    }

    fn projects_of_owner<'a>(&'a self, owner_id: &'a str) -> StoreFuture<'a, Vec<ProjectRecord>> {
        let owner_id = owner_id.to_owned();
        self.call(move |connection| {
            connection
                .prepare_cached(
                    "SELECT id, owner_id, name, created_at FROM projects WHERE owner_id = ?1 \
                     ORDER BY created_at, id",
                )
                .and_then(|mut statement| {
                    statement
                        .query_map([owner_id], project_from_row)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(backend)
        })
    }

    fn project_of_owner<'a>(
        &'a self,
        owner_id: &'a str,
        id: &'a str,
    ) -> StoreFuture<'a, Option<ProjectRecord>> {
        let (owner_id, id) = (owner_id.to_owned(), id.to_owned());
        // Read on the calling task: every desktop request (each control poll) asks it.
        self.read(move |connection| {
            connection
                .query_row_cached(
                    "SELECT id, owner_id, name, created_at FROM projects \
                     WHERE id = ?1 AND owner_id = ?2",
                    [&id, &owner_id],
                    project_from_row,
                )
                .optional()
                .map_err(backend)
        })
    }

    fn owners(&self) -> StoreFuture<'_, Vec<OwnerRecord>> {
        self.call(move |connection| {
            connection
                .prepare_cached("SELECT id, name, created_at FROM owners ORDER BY name")
                .and_then(|mut statement| {
                    statement
                        .query_map([], owner_from_row)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(backend)
        })
    }

    fn insert_token(&self, token: TokenRecord) -> StoreFuture<'_, ()> {
        self.call(move |connection| {
            connection
                .execute_cached(
                    &format!(
                        "INSERT INTO tokens ({TOKEN_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
                    ),
                    params![
                        token.id,
                        token.kind.as_str(),
                        token.token_hash,
                        token.owner_id,
                        token.project_id,
                        token.agent_name,
                        token.scopes.join(" "),
                        token.created_at.unix_millis(),
                        ms(token.revoked_at),
                        token.client_id,
                        token.connection_id,
                    ],
                )
                .map_err(backend)?;
            Ok(())
        })
    }

    fn token_by_hash<'a>(&'a self, token_hash: &'a str) -> StoreFuture<'a, Option<TokenRecord>> {
        let token_hash = token_hash.to_owned();
        self.read(move |connection| {
            connection
                .query_row_cached(
                    &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE token_hash = ?1"),
                    [&token_hash],
                    token_from_row,
                )
                .optional()
                .map_err(backend)
        })
    }

    fn token<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TokenRecord>> {
        let id = id.to_owned();
        // Read on the calling task: every request with an OAuth access token asks it.
        self.read(move |connection| {
            connection
                .query_row_cached(
                    &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = ?1"),
                    [&id],
                    token_from_row,
                )
                .optional()
                .map_err(backend)
        })
    }

    fn unrevoked_tokens<'a>(&'a self, ids: &'a [String]) -> StoreFuture<'a, Vec<String>> {
        let ids = ids.to_vec();
        self.call(move |connection| {
            let mut valid = Vec::with_capacity(ids.len());
            if ids.len() <= UNREVOKED_ONE_BY_ONE {
                // A few tokens (the usual held requests): one cached statement looked up per
                // id, where an `IN` list would build a temporary b-tree and a new statement text.
                let mut statement = connection
                    .prepare_cached("SELECT 1 FROM tokens WHERE id = ?1 AND revoked_at IS NULL")
                    .map_err(backend)?;
                for id in ids {
                    if statement.exists(params![id]).map_err(backend)? {
                        valid.push(id);
                    }
                }
                return Ok(valid);
            }
            // SQLite binds at most 32,766 parameters; chunks keep each statement small.
            for chunk in ids.chunks(UNREVOKED_CHUNK) {
                let marks = vec!["?"; chunk.len()].join(",");
                let mut statement = connection
                    .prepare_cached(&format!(
                        "SELECT id FROM tokens WHERE revoked_at IS NULL AND id IN ({marks})"
                    ))
                    .map_err(backend)?;
                let rows = statement
                    .query_map(rusqlite::params_from_iter(chunk), |row| row.get(0))
                    .and_then(|rows| rows.collect::<rusqlite::Result<Vec<String>>>())
                    .map_err(backend)?;
                valid.extend(rows);
            }
            Ok(valid)
        })
    }

    fn tokens_of_owner<'a>(&'a self, owner_id: &'a str) -> StoreFuture<'a, Vec<TokenRecord>> {
        let owner_id = owner_id.to_owned();
        self.call(move |connection| {
            connection
                .prepare_cached(&format!(
                    "SELECT {TOKEN_COLUMNS} FROM tokens WHERE owner_id = ?1 ORDER BY created_at, id"
                ))
                .and_then(|mut statement| {
                    statement
                        .query_map([owner_id], token_from_row)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(backend)
        })
    }

    fn revoke_token<'a>(&'a self, id: &'a str, now: Timestamp) -> StoreFuture<'a, bool> {
        let id = id.to_owned();
        self.call(move |connection| {
            auth::revoke_token_and_grant(connection, &id, now).map_err(backend)
        })
    }

    fn revoke_connection<'a>(
        &'a self,
        connection_id: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, usize> {
        let id = connection_id.to_owned();
        self.call(move |connection| auth::revoke_connection(connection, &id, now).map_err(backend))
    }

    fn owner_by_name<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<OwnerRecord>> {
        self.owner_by_impl("name", name.to_owned())
    }

    fn owner<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<OwnerRecord>> {
        self.owner_by_impl("id", id.to_owned())
    }

    fn set_owner_password<'a>(
        &'a self,
        owner_id: &'a str,
        password_hash: Option<String>,
    ) -> StoreFuture<'a, bool> {
        self.set_owner_password_impl(owner_id.to_owned(), password_hash)
    }

    fn owner_password<'a>(&'a self, owner_id: &'a str) -> StoreFuture<'a, Option<String>> {
        self.owner_password_impl(owner_id.to_owned())
    }

    fn insert_browser_session(&self, session: BrowserSessionRecord) -> StoreFuture<'_, ()> {
        self.insert_browser_session_impl(session)
    }

    fn touch_browser_session<'a>(
        &'a self,
        id_hash: &'a str,
        idle_before: Timestamp,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<BrowserSessionRecord>> {
        self.touch_browser_session_impl(id_hash.to_owned(), idle_before, now)
    }

    fn end_browser_sessions<'a>(
        &'a self,
        owner_id: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, usize> {
        self.end_browser_sessions_impl(owner_id.to_owned(), now)
    }

    fn insert_sign_in_link(&self, link: SignInLinkRecord) -> StoreFuture<'_, ()> {
        self.insert_sign_in_link_impl(link)
    }

    fn use_sign_in_link<'a>(
        &'a self,
        token_hash: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<SignInLinkRecord>> {
        self.use_sign_in_link_impl(token_hash.to_owned(), now)
    }

    fn insert_oauth_client(&self, client: OAuthClientRecord) -> StoreFuture<'_, ()> {
        self.insert_oauth_client_impl(client)
    }

    fn oauth_client<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<OAuthClientRecord>> {
        self.oauth_client_impl(id.to_owned())
    }

    fn mark_oauth_client_used<'a>(&'a self, id: &'a str, now: Timestamp) -> StoreFuture<'a, ()> {
        self.mark_oauth_client_used_impl(id.to_owned(), now)
    }

    fn insert_auth_code(&self, code: AuthCodeRecord) -> StoreFuture<'_, ()> {
        self.insert_auth_code_impl(code)
    }

    fn auth_code<'a>(&'a self, code_hash: &'a str) -> StoreFuture<'a, Option<AuthCodeRecord>> {
        self.auth_code_impl(code_hash.to_owned())
    }

    fn redeem_auth_code<'a>(
        &'a self,
        code_hash: &'a str,
        now: Timestamp,
        grant: TokenRecord,
        tokens: IssuedTokens,
    ) -> StoreFuture<'a, RedeemOutcome> {
        self.redeem_auth_code_impl(code_hash.to_owned(), now, grant, tokens)
    }

    fn oauth_token<'a>(&'a self, token_hash: &'a str) -> StoreFuture<'a, Option<OAuthTokenRecord>> {
        self.oauth_token_impl(token_hash.to_owned())
    }

    fn rotate_refresh_token<'a>(
        &'a self,
        token_hash: &'a str,
        now: Timestamp,
        tokens: IssuedTokens,
    ) -> StoreFuture<'a, RotateOutcome> {
        self.rotate_refresh_token_impl(token_hash.to_owned(), now, tokens)
    }

    fn revoke_oauth_token<'a>(
        &'a self,
        token_hash: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, bool> {
        self.revoke_oauth_token_impl(token_hash.to_owned(), now)
    }

    fn sweep_auth(&self, sweep: AuthSweep) -> StoreFuture<'_, AuthSweepCounts> {
        self.sweep_auth_impl(sweep)
    }

    fn replace_sessions<'a>(
        &'a self,
        project_id: &'a str,
        sessions: Vec<SessionMeta>,
        version: Option<i64>,
        now: Timestamp,
    ) -> StoreFuture<'a, SnapshotWrite> {
        let project_id = project_id.to_owned();
        self.call(move |connection| {
            let transaction = connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend)?;
            let held: Option<i64> = transaction
                .query_row_cached(
                    "SELECT sharing_version FROM project_syncs WHERE project_id = ?1",
                    [&project_id],
                    |row| row.get(0),
                )
                .optional()
                .map_err(backend)?
                .flatten();
            let write = SnapshotWrite::decide(held, version);
            match write {
                SnapshotWrite::Stale => return Ok(write),
                SnapshotWrite::Unchanged => {
                    transaction
                        .execute_cached(
                            "UPDATE project_syncs SET synced_at = ?2 WHERE project_id = ?1",
                            params![project_id, now.unix_millis()],
                        )
                        .map_err(backend)?;
                    transaction.commit().map_err(backend)?;
                    return Ok(write);
                }
                SnapshotWrite::Replaced => {}
            }
            transaction
                .execute_cached(
                    "DELETE FROM graph_sessions WHERE project_id = ?1",
                    [&project_id],
                )
                .map_err(backend)?;
            {
                let mut insert = transaction
                    .prepare_cached(
                        "INSERT INTO graph_sessions (project_id, graph_session_id, name, \
                         description, slug, version, status, synced_at, args_schema) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                    )
                    .map_err(backend)?;
                for session in &sessions {
                    insert
                        .execute(params![
                            project_id,
                            session.graph_session_id.as_str(),
                            session.name,
                            session.description,
                            session.slug,
                            session.version,
                            session.status,
                            now.unix_millis(),
                            session.args_schema.as_ref().map(Value::to_string),
                        ])
                        .map_err(backend)?;
                }
            }
            transaction
                .execute_cached(
                    "INSERT INTO project_syncs (project_id, synced_at, sharing_version) \
                     VALUES (?1, ?2, ?3) ON CONFLICT(project_id) DO UPDATE SET \
                     synced_at = excluded.synced_at, sharing_version = excluded.sharing_version",
                    params![project_id, now.unix_millis(), version],
                )
                .map_err(backend)?;
            transaction.commit().map_err(backend)?;
            Ok(write)
        })
    }

    fn sessions<'a>(
        &'a self,
        project_id: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, SessionSnapshot> {
        let project_id = project_id.to_owned();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |connection| {
            // One statement (one read of the file's state) when the project has a session:
            // the sync time rides along on every row. A project without sessions asks for it
            // alone.
            let rows = connection
                .prepare_cached(SESSIONS_WITH_SYNC)
                .and_then(|mut statement| {
                    statement
                        .query_map(params![project_id, limit], |row| {
                            Ok((session_from_row(row)?, row.get::<_, Option<i64>>(8)?))
                        })?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(backend)?;
            let synced_at = match rows.first() {
                Some((_, synced_at)) => *synced_at,
                None => connection
                    .query_row_cached(
                        "SELECT synced_at FROM project_syncs WHERE project_id = ?1",
                        [&project_id],
                        |row| row.get::<_, i64>(0),
                    )
                    .optional()
                    .map_err(backend)?,
            };
            Ok(SessionSnapshot {
                sessions: rows.into_iter().map(|(session, _)| session).collect(),
                last_sync_at: synced_at.map(Timestamp::from_unix_millis),
            })
        })
    }

    fn session<'a>(
        &'a self,
        project_id: &'a str,
        graph_session_id: &'a GraphSessionId,
    ) -> StoreFuture<'a, Option<SessionRecord>> {
        let project_id = project_id.to_owned();
        let graph_session_id = graph_session_id.as_str().to_owned();
        self.call(move |connection| {
            connection
                .query_row_cached(
                    "SELECT graph_session_id, name, description, slug, version, status, synced_at, \
                     args_schema FROM graph_sessions WHERE project_id = ?1 AND graph_session_id = ?2",
                    params![project_id, graph_session_id],
                    session_from_row,
                )
                .optional()
                .map_err(backend)
        })
    }

    fn insert_command(
        &self,
        command: CommandRecord,
        quota: QueueQuota,
    ) -> StoreFuture<'_, InsertOutcome> {
        self.call(move |connection| {
            let arguments =
                serde_json::to_string(&command.arguments).map_err(|source| StoreError::Encode {
                    what: "arguments",
                    source,
                })?;
            let transaction = connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend)?;
            let existing = transaction
                .query_row_cached(
                    &format!(
                        "SELECT {COMMAND_COLUMNS} FROM commands \
                         WHERE agent_id = ?1 AND idempotency_key = ?2"
                    ),
                    params![command.agent_id, command.idempotency_key],
                    command_from_row,
                )
                .optional()
                .map_err(backend)?;
            if let Some(existing) = existing {
                return Ok(InsertOutcome::Existing(existing));
            }
            if let Some(limit) = queue_limit_reached(&transaction, &command, quota)? {
                return Ok(InsertOutcome::OverQuota(limit));
            }
            transaction
                .execute_cached(
                    "INSERT INTO commands (id, project_id, agent_id, graph_session_id, slug, \
                     arguments, idempotency_key, request_hash, status, cancel_requested, \
                     result_truncated, created_at, updated_at, max_tokens) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0, 0, ?10, ?10, ?11)",
                    params![
                        command.id.to_string(),
                        command.project_id,
                        command.agent_id,
                        command.graph_session_id.as_str(),
                        command.slug,
                        arguments,
                        command.idempotency_key,
                        command.request_hash,
                        RunStatus::Queued.as_str(),
                        command.created_at.unix_millis(),
                        to_sql_tokens(command.max_tokens)?,
                    ],
                )
                .map_err(backend)?;
            let stored = select_command(&transaction, command.id)
                .map_err(backend)?
                .ok_or(StoreError::Inconsistent("inserted command vanished"))?;
            transaction.commit().map_err(backend)?;
            Ok(InsertOutcome::Created(stored))
        })
    }

    fn command_by_key<'a>(
        &'a self,
        agent_id: &'a str,
        idempotency_key: &'a str,
    ) -> StoreFuture<'a, Option<CommandRecord>> {
        let (agent_id, idempotency_key) = (agent_id.to_owned(), idempotency_key.to_owned());
        self.call(move |connection| {
            connection
                .query_row_cached(
                    &format!(
                        "SELECT {COMMAND_COLUMNS} FROM commands \
                         WHERE agent_id = ?1 AND idempotency_key = ?2"
                    ),
                    params![agent_id, idempotency_key],
                    command_from_row,
                )
                .optional()
                .map_err(backend)
        })
    }

    fn command(&self, id: CommandId) -> StoreFuture<'_, Option<CommandRecord>> {
        self.read(move |connection| select_command(connection, id).map_err(backend))
    }

    fn update_command<'a>(
        &'a self,
        from: &'a CommandRecord,
        next: &'a CommandRecord,
    ) -> StoreFuture<'a, bool> {
        let id = from.id.to_string();
        let (from_status, from_cancel) = (from.status, from.cancel_requested);
        let from_execution = from.execution_id.clone();
        let next = next.clone();
        self.call(move |connection| {
            let result = next
                .result
                .as_ref()
                .map(serde_json::to_string)
                .transpose()
                .map_err(|source| StoreError::Encode {
                    what: "result",
                    source,
                })?;
            let changed = connection
                .execute_cached(
                    "UPDATE commands SET status = ?1, cancel_requested = ?2, execution_id = ?3, \
                     result = ?4, result_truncated = ?5, total_tokens = ?6, reported_cost = ?7, \
                     error = ?8, completion_hash = ?9, started_at = ?10, finished_at = ?11, \
                     last_seen_at = ?12, updated_at = ?13, delivered_at = ?17, token_cap = ?18, \
                     cancel_cause = ?20, end_cause = ?21, resumed = ?22, resumed_at = ?23 \
                     WHERE id = ?14 AND status = ?15 AND cancel_requested = ?16 \
                     AND execution_id IS ?19",
                    params![
                        next.status.as_str(),
                        next.cancel_requested,
                        next.execution_id,
                        result,
                        next.result_truncated,
                        to_sql_tokens(next.total_tokens)?,
                        next.reported_cost,
                        next.error,
                        next.completion_hash,
                        ms(next.started_at),
                        ms(next.finished_at),
                        ms(next.last_seen_at),
                        next.updated_at.unix_millis(),
                        id,
                        from_status.as_str(),
                        from_cancel,
                        ms(next.delivered_at),
                        to_sql_tokens(next.token_cap)?,
                        from_execution,
                        next.cancel_cause.map(|c| c.as_str()),
                        next.end_cause.map(|c| c.as_str()),
                        next.resumed,
                        ms(next.resumed_at),
                    ],
                )
                .map_err(backend)?;
            Ok(changed == 1)
        })
    }

    fn cancel_damaged_command<'a>(
        &'a self,
        id: CommandId,
        owner_id: &'a str,
        error: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, bool> {
        let (owner_id, error) = (owner_id.to_owned(), error.to_owned());
        self.call(move |connection| {
            let changed = connection
                .execute_cached(
                    "UPDATE commands SET status = 'cancelled', cancel_requested = 1, error = ?1, \
                     finished_at = ?2, updated_at = ?2, \
                     cancel_cause = 'owner_cancelled_console', end_cause = 'owner_cancelled_console' \
                     WHERE id = ?3 AND status IN ('queued', 'running') \
                     AND project_id IN (SELECT id FROM projects WHERE owner_id = ?4)",
                    params![error, now.unix_millis(), id.to_string(), owner_id],
                )
                .map_err(backend)?;
            Ok(changed == 1)
        })
    }

    fn touch_running(&self, id: CommandId, now: Timestamp) -> StoreFuture<'_, bool> {
        self.call(move |connection| {
            let changed = connection
                .execute_cached(
                    "UPDATE commands SET last_seen_at = ?1 WHERE id = ?2 AND status = 'running'",
                    params![now.unix_millis(), id.to_string()],
                )
                .map_err(backend)?;
            Ok(changed == 1)
        })
    }

    fn queued_commands<'a>(
        &'a self,
        project_id: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Rows<CommandRecord>> {
        let project_id = project_id.to_owned();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.call(move |connection| {
            let mut statement = connection
                .prepare_cached(&format!(
                    "SELECT {COMMAND_COLUMNS} FROM commands \
                     WHERE project_id = ?1 AND status = 'queued' \
                     ORDER BY created_at, rowid LIMIT ?2"
                ))
                .map_err(backend)?;
            let decoded = statement
                .query_map(params![project_id, limit], command_from_row)
                .map_err(backend)?
                .map(|row| row.map_err(backend));
            Rows::collect(decoded)
        })
    }

    fn fail_silent_runs<'a>(
        &'a self,
        cutoff: Timestamp,
        now: Timestamp,
        error: &'a str,
    ) -> StoreFuture<'a, Vec<CommandId>> {
        let error = error.to_owned();
        self.call(move |connection| {
            let ids = connection
                .prepare_cached(
                    "UPDATE commands SET status = 'failed', error = ?1, finished_at = ?2, \
                     updated_at = ?2 WHERE status = 'running' AND last_seen_at < ?3 RETURNING id",
                )
                .and_then(|mut statement| {
                    statement
                        .query_map(
                            params![error, now.unix_millis(), cutoff.unix_millis()],
                            |row| row.get::<_, String>(0),
                        )?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(backend)?;
            ids.iter()
                .map(|id| {
                    id.parse()
                        .map_err(|e| StoreError::from(Damage::of("id", e).in_row("commands", id)))
                })
                .collect()
        })
    }

    fn insert_chat_link(&self, link: ChatLinkRecord) -> StoreFuture<'_, ()> {
        self.insert_chat_link_impl(link)
    }

    fn chat_link<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<ChatLinkRecord>> {
        self.chat_link_impl(id.to_owned())
    }

    fn set_event_subscription<'a>(&'a self, id: &'a str, active: bool) -> StoreFuture<'a, bool> {
        self.set_event_subscription_impl(id.to_owned(), active)
    }

    fn insert_task(&self, task: TaskRecord) -> StoreFuture<'_, TaskInsertOutcome> {
        self.insert_task_impl(task)
    }

    fn task(&self, id: TaskId) -> StoreFuture<'_, Option<TaskRecord>> {
        self.task_impl(id)
    }

    fn open_tasks<'a>(
        &'a self,
        chat_link_id: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<TaskRecord>> {
        self.open_tasks_impl(chat_link_id.to_owned(), limit)
    }

    fn open_tasks_unless_due<'a>(
        &'a self,
        chat_link_id: &'a str,
        limit: usize,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<Vec<TaskRecord>>> {
        self.open_tasks_unless_due_impl(chat_link_id.to_owned(), limit, now)
    }

    fn link_tasks<'a>(
        &'a self,
        chat_link_id: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<TaskRecord>> {
        self.link_tasks_impl(chat_link_id.to_owned(), limit)
    }

    fn claim_task(&self, attempt: ClaimAttempt) -> StoreFuture<'_, Option<TaskRecord>> {
        self.claim_task_impl(attempt)
    }

    fn claim_task_unconditionally(&self, attempt: ClaimAttempt) -> StoreFuture<'_, bool> {
        self.claim_task_unconditionally_impl(attempt)
    }

    fn update_task<'a>(
        &'a self,
        from: &'a TaskRecord,
        next: &'a TaskRecord,
    ) -> StoreFuture<'a, bool> {
        self.update_task_impl(from, next)
    }

    fn tasks_due(&self, now: Timestamp) -> StoreFuture<'_, bool> {
        self.tasks_due_impl(now)
    }

    fn open_counts(&self, online_since: Timestamp) -> StoreFuture<'_, OpenCounts> {
        self.call(move |connection| {
            connection
                .query_row_cached(super::OPEN_COUNTS, [online_since.unix_millis()], |row| {
                    let count = |i| row.get::<_, i64>(i).map(|n| u64::try_from(n).unwrap_or(0));
                    Ok(OpenCounts {
                        runs_queued: count(0)?,
                        runs_running: count(1)?,
                        tasks_queued: count(2)?,
                        tasks_claimed: count(3)?,
                        desktops_online: count(4)?,
                        oldest_queued_at: row
                            .get::<_, Option<i64>>(5)?
                            .map(Timestamp::from_unix_millis),
                    })
                })
                .map_err(backend)
        })
    }

    fn stats(&self) -> super::StoreStats {
        let pool = &self.pool;
        let in_use = pool.size.saturating_sub(pool.permits.available_permits());
        let idle = pool.idle.lock().map_or(0, |idle| idle.len());
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        super::StoreStats {
            latency: pool.latency.snapshot(),
            pool_max: count(pool.size),
            pool_open: count(idle + in_use),
            pool_in_use: count(in_use),
            pool_waiting: count(pool.waiting.load(std::sync::atomic::Ordering::Relaxed)),
        }
    }

    fn sweep_tasks(&self, now: Timestamp) -> StoreFuture<'_, SweepCounts> {
        self.sweep_tasks_impl(now)
    }

    fn insert_artifact(
        &self,
        artifact: ArtifactRecord,
        max_per_task: usize,
    ) -> StoreFuture<'_, ArtifactInsertOutcome> {
        self.insert_artifact_impl(artifact, max_per_task)
    }

    fn artifacts(&self, task_id: TaskId) -> StoreFuture<'_, Vec<ArtifactRecord>> {
        self.artifacts_impl(task_id)
    }

    fn disk_full(&self) -> Option<String> {
        let path = self.pool.path.as_deref()?;
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty())?;
        let stats = rustix::fs::statvfs(dir).ok()?;
        let free = stats.f_bavail.saturating_mul(stats.f_frsize);
        (free < super::FULL_DISK_BELOW).then(|| {
            format!(
                "the disk holding the database {} is full ({free} bytes free)",
                path.display()
            )
        })
    }

    fn project_commands(&self, query: CommandQuery) -> StoreFuture<'_, Rows<CommandRecord>> {
        self.project_commands_impl(query)
    }

    fn chat_links<'a>(&'a self, project_id: &'a str) -> StoreFuture<'a, Vec<ChatLinkRecord>> {
        self.chat_links_impl(project_id.to_owned())
    }

    fn browser_sessions<'a>(
        &'a self,
        owner_id: &'a str,
        idle_before: Timestamp,
    ) -> StoreFuture<'a, Vec<BrowserSessionRecord>> {
        self.browser_sessions_impl(owner_id.to_owned(), idle_before)
    }

    fn end_browser_session<'a>(
        &'a self,
        id_hash: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, bool> {
        self.end_browser_session_impl(id_hash.to_owned(), now)
    }

    fn record_token_use<'a>(&'a self, token_id: &'a str, now: Timestamp) -> StoreFuture<'a, ()> {
        self.record_token_use_impl(token_id.to_owned(), now)
    }

    fn token_uses<'a>(&'a self, owner_id: &'a str) -> StoreFuture<'a, Vec<(String, Timestamp)>> {
        self.token_uses_impl(owner_id.to_owned())
    }

    fn record_presence<'a>(
        &'a self,
        project_id: &'a str,
        seen_at: Timestamp,
        sync: Option<PresenceSync<'a>>,
    ) -> StoreFuture<'a, ()> {
        self.record_presence_impl(
            project_id.to_owned(),
            seen_at,
            sync.map(|sync| (sync.problem.map(str::to_owned), sync.long_polls)),
        )
    }

    fn presence<'a>(&'a self, project_id: &'a str) -> StoreFuture<'a, Option<PresenceRecord>> {
        self.presence_impl(project_id.to_owned())
    }

    fn record_run_report<'a>(
        &'a self,
        id: CommandId,
        execution_id: &'a str,
        report: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, bool> {
        self.record_run_report_impl(id, execution_id.to_owned(), report.to_owned(), now)
    }
}

#[cfg(test)]
mod opening {
    use super::*;

    #[test]
    fn processes_opening_a_new_database_at_once_all_succeed() {
        // `relay serve` and `relay admin` started together on a fresh machine.
        let failures = relay_sqlite::open_at_once_failures("relay.db", |path| {
            SqliteStore::open(path).map(drop).map_err(|e| e.to_string())
        });
        assert!(failures.is_empty(), "{failures:?}");
    }
}
