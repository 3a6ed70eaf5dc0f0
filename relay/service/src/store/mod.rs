//! Durable state of the service behind one trait, so a PostgreSQL store can replace SQLite.
//!
//! The store knows no clock and no rules: callers pass timestamps and decide transitions
//! (`runs::transition`, `chat_tasks::machine::transition`); the store only makes each write
//! conditional on the state the caller read, so concurrent writers cannot both win.

pub mod auth;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod histogram;
pub mod notify;
pub mod postgres;
pub mod sqlite;

use std::future::Future;
use std::pin::Pin;

use serde_json::{Map, Value};

pub use relay_sqlite::Fault;

use crate::model::{HostKind, TaskId, TaskStatus};
pub use relay_protocol::clock::Timestamp;
use relay_protocol::{CommandId, EndCause, GraphSessionId, RunStatus, SessionMeta};

pub use auth::{
    AuthCodeRecord, AuthSweep, AuthSweepCounts, BrowserSessionRecord, IssuedTokens,
    OAuthClientRecord, OAuthTokenKind, OAuthTokenRecord, RedeemOutcome, RotateOutcome,
    SignInLinkRecord,
};
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

/// The future every store method returns (boxed so `dyn Store` works).
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// An error a store keeps as the source of a [`StoreError`] it has no type of its own for.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A storage failure. Each variant keeps the underlying error as its source; only
/// [`StoreError::Invalid`] is caused by the caller's input.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed for a cause without a name (the named ones are [`StoreError::Fault`]).
    #[error("database error: {context}{source}")]
    Sqlite {
        /// What the store was doing, ending in `": "`, or empty.
        context: String,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// PostgreSQL failed for a cause without a name (the named ones are [`StoreError::Fault`]).
    #[error("database error: {detail}")]
    Postgres {
        /// PostgreSQL's code and message, or the client's error with its causes.
        detail: String,
        /// tokio-postgres's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// No PostgreSQL connection could be had from the pool (the database does not answer, or
    /// every connection stayed busy).
    #[error("database error: no database connection: {0}")]
    Pool(#[source] deadpool_postgres::PoolError),
    /// The PostgreSQL connection pool could not be built.
    #[error("database error: cannot make a connection pool: {0}")]
    PoolBuild(#[source] deadpool_postgres::BuildError),
    /// The SQLite connection pool was closed while a call waited for it.
    #[error("database error: the connection pool is closed")]
    PoolClosed(#[source] tokio::sync::AcquireError),
    /// The blocking task running a SQLite call panicked or was cancelled.
    #[error("database error: database task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
    /// A value could not be encoded for storage (or an answer built from stored values).
    #[error("cannot encode {what}: {source}")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },
    /// The store is set up wrongly (its URL, TLS settings, schema or channel name), or the
    /// database does not behave as the store needs (WAL refused): the message says which.
    #[error("database error: {message}")]
    Setup {
        /// What is wrong and what to change.
        message: String,
        /// The underlying error, where there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// A row the store just wrote could not be read back in the same transaction: a bug of
    /// the store or a database that does not keep its promises.
    #[error("database error: {0}")]
    Inconsistent(&'static str),
    /// The system could not supply random bytes for a new secret or id.
    #[error("the system has no randomness: {0}")]
    Randomness(#[source] getrandom::Error),
    /// A stored row could not be decoded: [`Damage`] names it.
    #[error("stored data is unreadable: {0}")]
    Corrupt(Box<Damage>),
    /// The caller's value cannot be stored as given (e.g. a number past the column's range);
    /// nothing was written. The message says which value.
    #[error("{0}")]
    Invalid(String),
    /// Storage failed for a named cause: a full disk, a read-only or missing file, a damaged
    /// database, a lock held too long.
    #[error("{fault}: {detail}")]
    Fault {
        /// Which.
        fault: Fault,
        /// The database's own words (with what the store was doing, if it says).
        detail: String,
        /// The database's error.
        #[source]
        source: BoxError,
    },
    /// The database was refused when opened (empty, damaged, foreign, newer), or a copy of it
    /// failed: the error (kept whole, with its own source) says what to do.
    #[error(transparent)]
    Unusable(BoxError),
}

/// A stored object that cannot be decoded: which one (its table and key), which part of it,
/// and why. Retrying cannot help; the object has to be repaired or removed.
#[derive(Debug)]
pub struct Damage {
    /// The table holding it (empty until the row's decoder names it).
    pub table: &'static str,
    /// Its key (e.g. the command id), as stored.
    pub id: String,
    /// Which part could not be decoded (a column, a field).
    pub what: String,
    /// Why.
    pub source: BoxError,
}

impl Damage {
    /// Damage to `what` of a row not named yet: the row's decoder adds its table and key
    /// ([`Damage::in_row`]).
    pub fn of(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Damage {
            table: "",
            id: String::new(),
            what: what.into(),
            source: source.into(),
        }
    }

    /// This damage, named as part of the row `id` of `table` unless it already names one.
    #[must_use]
    pub fn in_row(mut self, table: &'static str, id: &str) -> Self {
        if self.table.is_empty() {
            self.table = table;
            id.clone_into(&mut self.id);
        }
        self
    }
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.table.is_empty() {
            write!(f, "{} row {}: ", self.table, self.id)?;
        }
        write!(f, "{}: {}", self.what, self.source)
    }
}

impl std::error::Error for Damage {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// Whether a PostgreSQL failure without a named fault passes by itself: the connection
/// closed or could not be made (an I/O error under it), or the server says so by the class of
/// its SQLSTATE (08 connection exception, 57 operator intervention such as a restart, 40 a
/// rolled-back transaction, 53 insufficient resources). A statement the server refused for
/// another reason, or a client-side encoding error, fails the same way every time.
fn postgres_retry_helps(error: &tokio_postgres::Error) -> bool {
    if let Some(db) = error.as_db_error() {
        return matches!(db.code().code().get(..2), Some("08" | "57" | "40" | "53"));
    }
    let mut cause = std::error::Error::source(error);
    while let Some(inner) = cause {
        if inner.is::<std::io::Error>() {
            return true;
        }
        cause = inner.source();
    }
    error.is_closed()
}

/// How a row keyed by a secret's hash is named in a [`Damage`]: enough of the hash to find the
/// row, not the whole of it.
pub(crate) fn hash_key(hash: &str) -> String {
    format!("{}…", hash.get(..12).unwrap_or(hash))
}

/// Below this many free bytes the disk of a SQLite database counts as full: a write that needs
/// a few more pages (a result, the log) fails.
pub const FULL_DISK_BELOW: u64 = 1024 * 1024;

/// A list read row by row: the rows that decode, and the damage of those that do not, so one
/// damaged row neither hides the others nor blocks what reads them (a project's sync, its
/// owner's list of runs).
#[derive(Debug)]
pub struct Rows<T> {
    /// The rows that decode, in the list's order.
    pub rows: Vec<T>,
    /// What is wrong with each row that does not.
    pub damaged: Vec<Damage>,
}

impl<T> Default for Rows<T> {
    fn default() -> Self {
        Rows {
            rows: Vec::new(),
            damaged: Vec::new(),
        }
    }
}

impl<T> Rows<T> {
    /// Sorts `decoded` in: a row's damage is kept beside the others; any other error ends the
    /// read.
    pub fn collect(
        decoded: impl IntoIterator<Item = Result<T, StoreError>>,
    ) -> Result<Self, StoreError> {
        let mut rows = Rows::default();
        for row in decoded {
            match row {
                Ok(row) => rows.rows.push(row),
                Err(StoreError::Corrupt(damage)) => rows.damaged.push(*damage),
                Err(other) => return Err(other),
            }
        }
        Ok(rows)
    }
}

impl From<Damage> for StoreError {
    fn from(damage: Damage) -> Self {
        StoreError::Corrupt(Box::new(damage))
    }
}

impl StoreError {
    /// The named cause of the failure, if it has one ([`StoreError::Corrupt`] is damage too).
    pub fn fault(&self) -> Option<Fault> {
        match self {
            StoreError::Fault { fault, .. } => Some(*fault),
            StoreError::Corrupt(_) => Some(Fault::Corrupt),
            StoreError::Sqlite { .. }
            | StoreError::Postgres { .. }
            | StoreError::Pool(_)
            | StoreError::PoolBuild(_)
            | StoreError::PoolClosed(_)
            | StoreError::Task(_)
            | StoreError::Encode { .. }
            | StoreError::Setup { .. }
            | StoreError::Inconsistent(_)
            | StoreError::Randomness(_)
            | StoreError::Invalid(_)
            | StoreError::Unusable(_) => None,
        }
    }

    /// A store set up wrongly, with no underlying error: `message` says what to change.
    pub fn setup(message: impl Into<String>) -> Self {
        StoreError::Setup {
            message: message.into(),
            source: None,
        }
    }

    /// A store set up wrongly, as `source` shows: `message` says what to change.
    pub fn setup_from(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        StoreError::Setup {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// Whether the same call may succeed later without anyone repairing anything: a database
    /// that does not answer (down, restarting, every connection busy), a lock or a full disk
    /// that clears, a transaction the database rolled back. Never for damage, the caller's
    /// input, a refused statement or a setting that needs a hand.
    pub fn retry_helps(&self) -> bool {
        match self {
            StoreError::Fault { fault, .. } => fault.transient(),
            StoreError::Sqlite { source, .. } => matches!(
                source.sqlite_error_code(),
                Some(rusqlite::ErrorCode::SystemIoFailure | rusqlite::ErrorCode::OutOfMemory)
            ),
            StoreError::Postgres { source, .. } => postgres_retry_helps(source),
            StoreError::Pool(_) | StoreError::PoolClosed(_) => true,
            StoreError::Task(error) => error.is_cancelled(),
            StoreError::PoolBuild(_)
            | StoreError::Encode { .. }
            | StoreError::Setup { .. }
            | StoreError::Inconsistent(_)
            | StoreError::Randomness(_)
            | StoreError::Corrupt(_)
            | StoreError::Invalid(_)
            | StoreError::Unusable(_) => false,
        }
    }

    /// The damaged object, when a stored row could not be decoded.
    pub fn damage(&self) -> Option<&Damage> {
        match self {
            StoreError::Corrupt(damage) => Some(damage),
            _ => None,
        }
    }

    /// This error as part of the row `id` of `table`: damage that names no row yet is named
    /// as that row's; every other error is unchanged.
    #[must_use]
    pub fn in_row(self, table: &'static str, id: &str) -> Self {
        match self {
            StoreError::Corrupt(damage) => StoreError::Corrupt(Box::new(damage.in_row(table, id))),
            other => other,
        }
    }

    /// What a connected agent is told: which cause, and whether retrying can help.
    pub fn agent_message(&self) -> String {
        if let StoreError::Invalid(message) = self {
            return format!(
                "The relay service cannot store this: {message}. Nothing was recorded; retrying the same request does not help."
            );
        }
        if let Some(damage) = self.damage() {
            return format!(
                "The relay service's stored data is damaged: {} row {} cannot be read (cause: corrupt). Retrying does not help until its operator repairs or removes it.",
                damage.table, damage.id
            );
        }
        let (what, retry) = match self.fault() {
            None if self.retry_helps() => {
                return "The relay service could not reach its database; try again shortly."
                    .to_owned();
            }
            None => {
                return "The relay service failed to do this (its operator's log says why); retrying does not help until it is fixed."
                    .to_owned();
            }
            Some(Fault::DiskFull) => (
                "The relay service's disk is full, so it cannot record this",
                "Retrying helps once its operator frees space (wait a minute or more); nothing recorded before is lost.",
            ),
            Some(Fault::Busy) => (
                "The relay service's database is busy",
                "Retrying in a few seconds should help.",
            ),
            Some(Fault::ReadOnly) => (
                "The relay service cannot write its database (it is read-only)",
                "Retrying does not help until its operator fixes this.",
            ),
            Some(Fault::Missing) => (
                "The relay service's database file is missing",
                "Retrying does not help until its operator restores it.",
            ),
            Some(Fault::Corrupt) => (
                "The relay service's database is damaged",
                "Retrying does not help until its operator restores it from a backup.",
            ),
        };
        let cause = self.fault().map(Fault::as_str).unwrap_or_default();
        format!("{what} (cause: {cause}). {retry}")
    }

    /// Logs the failure for the operator, at ERROR, with the cause and what to do about it.
    /// A value the caller sent that cannot be stored is the caller's matter: logged at INFO.
    pub fn log(&self, context: &str) {
        if let StoreError::Invalid(_) = self {
            tracing::info!(error = %self, "{context}: refused a value it cannot store");
            return;
        }
        match self.fault() {
            Some(fault) => tracing::error!(
                error = %self,
                cause = fault.as_str(),
                remedy = fault.remedy(),
                "{context}: {}", fault.describe()
            ),
            None => tracing::error!(error = %self, "{context}"),
        }
    }
}

/// The kind of a bearer token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// One owner's desktop relay: syncs all that owner's projects.
    Desktop,
    /// One connected chat agent on one project, with scopes.
    Agent,
    /// The owner's own API (chat links and tasks).
    Owner,
}

impl TokenKind {
    /// The kind as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenKind::Desktop => "desktop",
            TokenKind::Agent => "agent",
            TokenKind::Owner => "owner",
        }
    }

    /// Parses a stored kind.
    pub fn parse(text: &str) -> Option<TokenKind> {
        [TokenKind::Desktop, TokenKind::Agent, TokenKind::Owner]
            .into_iter()
            .find(|kind| kind.as_str() == text)
    }
}

/// An owner: has projects and desktops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRecord {
    /// Owner id (UUID).
    pub id: String,
    /// Unique name.
    pub name: String,
    /// When it was created.
    pub created_at: Timestamp,
}

/// A project of one owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectRecord {
    /// Project id (UUID).
    pub id: String,
    /// The owning owner.
    pub owner_id: String,
    /// Display name.
    pub name: String,
    /// When it was created.
    pub created_at: Timestamp,
}

/// A bearer token as stored: only the hash of its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    /// Token id (UUID), what `token revoke` takes.
    pub id: String,
    /// What the token may do.
    pub kind: TokenKind,
    /// SHA-256 of the token text, lowercase hex.
    pub token_hash: String,
    /// The owner it acts for.
    pub owner_id: String,
    /// The project (agent tokens only).
    pub project_id: Option<String>,
    /// The connected agent's name (agent tokens only).
    pub agent_name: Option<String>,
    /// Granted scopes, e.g. `osfoundry:read` (agent tokens only).
    pub scopes: Vec<String>,
    /// The OAuth client of a grant (a connection made through the authorization server);
    /// `None` for operator-minted tokens.
    pub client_id: Option<String>,
    /// The connection a grant belongs to: every live grant of one client for one owner and
    /// project shares it (the id of the first one), so runs and idempotency keys survive a
    /// new authorization. The store sets it when it stores a grant; `None` for
    /// operator-minted tokens, whose own id is their identity.
    pub connection_id: Option<String>,
    /// When it was minted.
    pub created_at: Timestamp,
    /// When it was revoked, if it was.
    pub revoked_at: Option<Timestamp>,
}

/// A session as the last sync uploaded it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRecord {
    /// The metadata the desktop sent.
    pub meta: SessionMeta,
    /// When that sync happened.
    pub synced_at: Timestamp,
}

/// A project's shared-session snapshot.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionSnapshot {
    /// Sessions ordered by name then id, at most the requested limit.
    pub sessions: Vec<SessionRecord>,
    /// When the project was last synced; `None` if never.
    pub last_sync_at: Option<Timestamp>,
}

/// What a sync's snapshot did to the one the store holds, decided by the sharing versions
/// ([`SnapshotWrite::decide`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotWrite {
    /// The snapshot replaced the held one (newer, or one of them carries no version).
    Replaced,
    /// The held snapshot has the same version: it is this snapshot, kept as it is; only the
    /// sync time moves.
    Unchanged,
    /// The held snapshot is newer: this one arrived late and is ignored.
    Stale,
}

impl SnapshotWrite {
    /// The one rule both stores apply, given the version `held` and the `incoming` one: a
    /// version only ever moves forward, and a snapshot without one (a desktop from before
    /// versions) is always taken, as before them.
    pub fn decide(held: Option<i64>, incoming: Option<i64>) -> SnapshotWrite {
        match (held, incoming) {
            (Some(held), Some(incoming)) if incoming < held => SnapshotWrite::Stale,
            (Some(held), Some(incoming)) if incoming == held => SnapshotWrite::Unchanged,
            _ => SnapshotWrite::Replaced,
        }
    }
}

/// A graph run requested by an agent.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandRecord {
    /// Command id.
    pub id: CommandId,
    /// The project it runs in.
    pub project_id: String,
    /// The agent token that queued it: the only one that may read or cancel it.
    pub agent_id: String,
    /// The session to run.
    pub graph_session_id: GraphSessionId,
    /// The session's slug when queued.
    pub slug: String,
    /// Arguments for the graph.
    pub arguments: Map<String, Value>,
    /// The agent's idempotency key.
    pub idempotency_key: String,
    /// Hash of what the key stands for (session and arguments).
    pub request_hash: String,
    /// Lifecycle status.
    pub status: RunStatus,
    /// The agent asked to cancel while it was running.
    pub cancel_requested: bool,
    /// The desktop's execution id, once started or completed.
    pub execution_id: Option<String>,
    /// The graph's result.
    pub result: Option<Value>,
    /// The result was too large to post.
    pub result_truncated: bool,
    /// Tokens the run metered.
    pub total_tokens: Option<u64>,
    /// Cost the run reported.
    pub reported_cost: Option<f64>,
    /// Why it failed or was cancelled.
    pub error: Option<String>,
    /// Hash of the completion recorded, to recognise an identical repeat.
    pub completion_hash: Option<String>,
    /// When it was queued.
    pub created_at: Timestamp,
    /// When the desktop started it.
    pub started_at: Option<Timestamp>,
    /// When it reached a terminal status: when the run ended on the desktop, for a run the
    /// desktop completed (the service's time otherwise).
    pub finished_at: Option<Timestamp>,
    /// When the service received the desktop's completion (`None` for a run the service
    /// ended itself).
    pub delivered_at: Option<Timestamp>,
    /// When the desktop last reported on it (started or control poll).
    pub last_seen_at: Option<Timestamp>,
    /// Last change.
    pub updated_at: Timestamp,
    /// The desktop's latest report on the running run (a [`relay_protocol::RunReport`] as
    /// JSON): what it waits for, how far it got. Written only by
    /// [`Store::record_run_report`], never by [`Store::update_command`].
    pub report: Option<Value>,
    /// The token cap the agent asked for, if any.
    pub max_tokens: Option<u64>,
    /// The token cap the desktop reported running it with (with `started`).
    pub token_cap: Option<u64>,
    /// Who asked the service to cancel it (the agent, or the owner in the console), once
    /// someone did: answered to the desktop with the cancel flag, and the run's end cause.
    pub cancel_cause: Option<EndCause>,
    /// Why it ended, when not by its graph alone (a cancel, a withdrawal, a stop, a limit).
    pub end_cause: Option<EndCause>,
    /// How often its desktop resumed it from its journal after a stop interrupted it.
    pub resumed: u32,
    /// When its desktop last resumed it.
    pub resumed_at: Option<Timestamp>,
}

impl CommandRecord {
    /// A freshly queued command.
    #[allow(clippy::too_many_arguments)]
    pub fn queued(
        id: CommandId,
        project_id: String,
        agent_id: String,
        graph_session_id: GraphSessionId,
        slug: String,
        arguments: Map<String, Value>,
        idempotency_key: String,
        request_hash: String,
        now: Timestamp,
    ) -> Self {
        CommandRecord {
            id,
            project_id,
            agent_id,
            graph_session_id,
            slug,
            arguments,
            idempotency_key,
            request_hash,
            status: RunStatus::Queued,
            cancel_requested: false,
            execution_id: None,
            result: None,
            result_truncated: false,
            total_tokens: None,
            reported_cost: None,
            error: None,
            completion_hash: None,
            created_at: now,
            started_at: None,
            finished_at: None,
            delivered_at: None,
            last_seen_at: None,
            updated_at: now,
            report: None,
            max_tokens: None,
            token_cap: None,
            cancel_cause: None,
            end_cause: None,
            resumed: 0,
            resumed_at: None,
        }
    }
}

/// When a project's desktop was last heard from, and what keeps it from running work, if
/// anything (the `problem` of its last sync).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresenceRecord {
    /// The project.
    pub project_id: String,
    /// The last request of its desktop that was written (at most every few seconds).
    pub seen_at: Timestamp,
    /// The desktop's problem as JSON text (a [`relay_protocol::DesktopProblem`]), if any.
    pub problem: Option<String>,
    /// Whether its last sync was a long poll (then it picks a queued run up at once).
    pub long_polls: bool,
}

/// What a desktop's sync says of it, beside that it was heard from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PresenceSync<'a> {
    /// Its problem as JSON text, or `None` when nothing keeps it from running work.
    pub problem: Option<&'a str>,
    /// Whether it long-polls.
    pub long_polls: bool,
}

/// What inserting a command under an idempotency key did.
#[derive(Debug, Clone, PartialEq)]
pub enum InsertOutcome {
    /// No command had this (agent, key): this one was stored.
    Created(CommandRecord),
    /// A command with this (agent, key) already existed; it is returned unchanged.
    Existing(CommandRecord),
    /// Nothing was stored: the agent or the project already has as many queued (not yet
    /// started) commands as the quota allows.
    OverQuota(QueueLimit),
}

/// How many commands may wait in the queue (queued, not yet started) at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueQuota {
    /// Per agent token.
    pub per_agent: u64,
    /// Per project, all its agents together.
    pub per_project: u64,
}

/// Which queue quota a command did not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueLimit {
    /// The agent's ([`QueueQuota::per_agent`]).
    Agent(u64),
    /// The project's ([`QueueQuota::per_project`]).
    Project(u64),
}

/// A chat conversation on a host, linked to one project, that the owner hands tasks to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatLinkRecord {
    /// Link id (UUID); the chat passes it to every task tool.
    pub id: String,
    /// The project whose agent tokens may use the link.
    pub project_id: String,
    /// The host the conversation lives on.
    pub host: HostKind,
    /// Whether the host is told when a task arrives (otherwise a person must open the chat).
    pub event_subscription: bool,
    /// When it was created.
    pub created_at: Timestamp,
}

/// A task the owner assigned to a linked chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRecord {
    /// Task id.
    pub id: TaskId,
    /// The only link that may see, claim and finish it.
    pub chat_link_id: String,
    /// What the owner asks for.
    pub goal: String,
    /// The owner's idempotency key, unique per link.
    pub idempotency_key: String,
    /// Lifecycle status.
    pub status: TaskStatus,
    /// The current claim (the fencing token of submits and uploads); kept once finished.
    pub claim_id: Option<String>,
    /// When the current claim lapses; `None` when leases are disabled or nothing is claimed.
    pub lease_until: Option<Timestamp>,
    /// When the current claim was made.
    pub claimed_at: Option<Timestamp>,
    /// The chat's answer (or why it failed).
    pub result: Option<String>,
    /// `sha256(status + result)`, to recognise an identical repeat of the submit.
    pub result_hash: Option<String>,
    /// When it was assigned.
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Timestamp,
    /// When it reached a terminal status.
    pub finished_at: Option<Timestamp>,
    /// When an unfinished task becomes `expired`.
    pub expires_at: Timestamp,
}

impl TaskRecord {
    /// A freshly assigned task that expires `ttl` after `now`.
    pub fn queued(
        chat_link_id: String,
        goal: String,
        idempotency_key: String,
        now: Timestamp,
        ttl: std::time::Duration,
    ) -> Self {
        TaskRecord {
            id: TaskId::new_random(),
            chat_link_id,
            goal,
            idempotency_key,
            status: TaskStatus::Queued,
            claim_id: None,
            lease_until: None,
            claimed_at: None,
            result: None,
            result_hash: None,
            created_at: now,
            updated_at: now,
            finished_at: None,
            expires_at: now.saturating_add(ttl),
        }
    }
}

/// What inserting a task under an idempotency key did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskInsertOutcome {
    /// No task of the link had this key: this one was stored.
    Created(TaskRecord),
    /// A task of the link with this key already existed; it is returned unchanged.
    Existing(TaskRecord),
}

/// A claim the store is asked to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimAttempt {
    /// The task.
    pub task_id: TaskId,
    /// The link claiming it; only the task's own link can.
    pub chat_link_id: String,
    /// The new claim id.
    pub claim_id: String,
    /// When the claim lapses (`None`: never).
    pub lease_until: Option<Timestamp>,
    /// When the claim is made.
    pub now: Timestamp,
}

/// What [`Store::claim_task_or_current`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimResult {
    /// The conditional write matched: the task, now claimed by the attempt.
    Claimed(TaskRecord),
    /// It matched nothing: the task as stored (`None`: no such task).
    NotClaimed(Option<TaskRecord>),
}

/// Runs and chat tasks not finished, database-wide (`/metrics`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpenCounts {
    /// Runs waiting for their desktop: the queue's depth.
    pub runs_queued: u64,
    /// Runs their desktop started and has not finished.
    pub runs_running: u64,
    /// Chat tasks waiting for their chat.
    pub tasks_queued: u64,
    /// Chat tasks a chat holds a claim on.
    pub tasks_claimed: u64,
    /// Projects whose desktop was heard from at or after the `online_since` asked for.
    pub desktops_online: u64,
    /// When the oldest run still queued was queued.
    pub oldest_queued_at: Option<Timestamp>,
}

/// The SQL both stores count open runs and tasks with: each count is a range of an index that
/// leads with `status` (`commands_running`, `chat_tasks_by_lease`), never a scan of history;
/// the presence count reads one row per project. `$1`: the earliest time a desktop counted as
/// online was heard from (Unix milliseconds).
pub(crate) const OPEN_COUNTS: &str = "SELECT \
    (SELECT COUNT(*) FROM commands WHERE status = 'queued'), \
    (SELECT COUNT(*) FROM commands WHERE status = 'running'), \
    (SELECT COUNT(*) FROM chat_tasks WHERE status = 'queued'), \
    (SELECT COUNT(*) FROM chat_tasks WHERE status = 'claimed'), \
    (SELECT COUNT(*) FROM desktop_presence WHERE seen_at >= $1), \
    (SELECT MIN(created_at) FROM commands WHERE status = 'queued')";

/// How a store's connections are used and how long its calls take (`/metrics`).
#[derive(Debug, Clone)]
pub struct StoreStats {
    /// How long store calls took, waiting for a connection included.
    pub latency: histogram::Histogram,
    /// Connections the pool may open.
    pub pool_max: u64,
    /// Connections open now.
    pub pool_open: u64,
    /// Connections in use by a call now.
    pub pool_in_use: u64,
    /// Calls waiting for a connection now.
    pub pool_waiting: u64,
}

/// Upper bounds (seconds) of the store call latency buckets: from a cached read to a call that
/// waited out a busy lock or a slow network.
pub const STORE_LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// What one lazy sweep changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SweepCounts {
    /// Claims whose lease lapsed, now `queued` again.
    pub requeued: usize,
    /// Unfinished tasks past `expires_at`, now `expired`.
    pub expired: usize,
}

/// A file the chat attached to a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactRecord {
    /// The task.
    pub task_id: TaskId,
    /// The chat's stable id for the file; a retry reuses it.
    pub artifact_id: String,
    /// The claim it was uploaded under.
    pub claim_id: String,
    /// File name.
    pub name: String,
    /// Media type, e.g. `text/markdown`.
    pub mime: String,
    /// The content.
    pub content: String,
    /// Size of the content in bytes (UTF-8).
    pub size_bytes: u64,
    /// SHA-256 of the content, lowercase hex.
    pub sha256: String,
    /// When it was stored.
    pub created_at: Timestamp,
}

/// What inserting an artifact did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArtifactInsertOutcome {
    /// Stored.
    Stored,
    /// The task already has an artifact with this id; it is returned unchanged.
    Existing(ArtifactRecord),
    /// Not stored: the task is not claimed under this claim id, or it has the most artifacts
    /// allowed.
    Refused,
}

/// Which runs of a project a listing asks for, newest first (by creation time, then id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandQuery {
    /// The project.
    pub project_id: String,
    /// Only runs in this status.
    pub status: Option<RunStatus>,
    /// Only runs this agent token (connection) queued.
    pub agent_id: Option<String>,
    /// Only runs after this one in the newest-first order (`created_at`, id): the page cursor.
    pub before: Option<(Timestamp, CommandId)>,
    /// At most this many.
    pub limit: usize,
}

/// The durable state of the service.
///
/// Every method is one atomic step. Implementations must pass the conformance suite
/// (`conformance::run_all`, behind the `conformance` feature).
pub trait Store: Send + Sync + 'static {
    /// The owner named `name`, created if missing.
    fn ensure_owner<'a>(&'a self, name: &'a str, now: Timestamp) -> StoreFuture<'a, OwnerRecord>;
    /// Stores a new project.
    fn insert_project(&self, project: ProjectRecord) -> StoreFuture<'_, ()>;
    /// The project with this id.
    fn project<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<ProjectRecord>>;
    /// Every owner's projects, oldest first (ties by id): for the operator's listing only
    /// (`relay admin project list`); a request lists one owner's
    /// ([`Store::projects_of_owner`]).
    fn all_projects(&self) -> StoreFuture<'_, Vec<ProjectRecord>>;
    /// The owner's projects, oldest first (ties by id), filtered in the query.
    fn projects_of_owner<'a>(&'a self, owner_id: &'a str) -> StoreFuture<'a, Vec<ProjectRecord>>;
    /// The project with this id if it is the owner's (another owner's reads as missing).
    fn project_of_owner<'a>(
        &'a self,
        owner_id: &'a str,
        id: &'a str,
    ) -> StoreFuture<'a, Option<ProjectRecord>>;
    /// Every owner, by name.
    fn owners(&self) -> StoreFuture<'_, Vec<OwnerRecord>>;
    /// Stores a new token.
    fn insert_token(&self, token: TokenRecord) -> StoreFuture<'_, ()>;
    /// The token whose secret hashes to `token_hash` (revoked or not).
    fn token_by_hash<'a>(&'a self, token_hash: &'a str) -> StoreFuture<'a, Option<TokenRecord>>;
    /// The token with this id (revoked or not).
    fn token<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TokenRecord>>;
    /// Of `ids`, those of tokens that exist and are not revoked (in any order): one read for
    /// every held request's token at once.
    fn unrevoked_tokens<'a>(&'a self, ids: &'a [String]) -> StoreFuture<'a, Vec<String>>;
    /// Every token acting for this owner (revoked or not), oldest first (ties by id).
    fn tokens_of_owner<'a>(&'a self, owner_id: &'a str) -> StoreFuture<'a, Vec<TokenRecord>>;
    /// Revokes a token unless already revoked, and with a grant every access and refresh token
    /// of it; true when this call revoked it.
    fn revoke_token<'a>(&'a self, id: &'a str, now: Timestamp) -> StoreFuture<'a, bool>;
    /// Revokes, in one step, every grant of the connection `connection_id` that is not revoked
    /// yet and every access and refresh token of them; how many grants this call revoked.
    fn revoke_connection<'a>(
        &'a self,
        connection_id: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, usize>;

    /// The owner named `name`.
    fn owner_by_name<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<OwnerRecord>>;
    /// The owner with this id.
    fn owner<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<OwnerRecord>>;
    /// Sets (or with `None` clears) the owner's password hash; true if the owner exists.
    fn set_owner_password<'a>(
        &'a self,
        owner_id: &'a str,
        password_hash: Option<String>,
    ) -> StoreFuture<'a, bool>;
    /// The owner's password hash (PHC string), if one is set.
    fn owner_password<'a>(&'a self, owner_id: &'a str) -> StoreFuture<'a, Option<String>>;
    /// Stores a new browser session.
    fn insert_browser_session(&self, session: BrowserSessionRecord) -> StoreFuture<'_, ()>;
    /// The live session whose secret hashes to `id_hash` (not ended, seen at or after
    /// `idle_before`), its `last_seen_at` moved to `now` in the same step.
    fn touch_browser_session<'a>(
        &'a self,
        id_hash: &'a str,
        idle_before: Timestamp,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<BrowserSessionRecord>>;
    /// Ends every browser session of the owner; how many were live.
    fn end_browser_sessions<'a>(
        &'a self,
        owner_id: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, usize>;
    /// Stores a new sign-in link.
    fn insert_sign_in_link(&self, link: SignInLinkRecord) -> StoreFuture<'_, ()>;
    /// Marks the link used if it is unused and unexpired at `now`; the link when it was.
    fn use_sign_in_link<'a>(
        &'a self,
        token_hash: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<SignInLinkRecord>>;
    /// Stores a new registered client.
    fn insert_oauth_client(&self, client: OAuthClientRecord) -> StoreFuture<'_, ()>;
    /// The registered client with this id.
    fn oauth_client<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<OAuthClientRecord>>;
    /// Records the client's first use (an authorization granted); later calls change nothing.
    fn mark_oauth_client_used<'a>(&'a self, id: &'a str, now: Timestamp) -> StoreFuture<'a, ()>;
    /// Stores a new authorization code.
    fn insert_auth_code(&self, code: AuthCodeRecord) -> StoreFuture<'_, ()>;
    /// The code whose text hashes to `code_hash` (used or not).
    fn auth_code<'a>(&'a self, code_hash: &'a str) -> StoreFuture<'a, Option<AuthCodeRecord>>;
    /// In one step: marks the code used (if unused and unexpired at `now`), stores `grant`
    /// and `tokens`, and records the grant on the code. The grant joins the connection of the
    /// live grants of the same client, owner and project if there are any (the first one's
    /// id), else starts its own (its id); its `connection_id` as given is ignored.
    fn redeem_auth_code<'a>(
        &'a self,
        code_hash: &'a str,
        now: Timestamp,
        grant: TokenRecord,
        tokens: IssuedTokens,
    ) -> StoreFuture<'a, RedeemOutcome>;
    /// The OAuth token whose text hashes to `token_hash`.
    fn oauth_token<'a>(&'a self, token_hash: &'a str) -> StoreFuture<'a, Option<OAuthTokenRecord>>;
    /// In one step: marks the refresh token used (if current: unused, unexpired, unrevoked,
    /// its grant unrevoked) and stores `tokens` for the same grant.
    fn rotate_refresh_token<'a>(
        &'a self,
        token_hash: &'a str,
        now: Timestamp,
        tokens: IssuedTokens,
    ) -> StoreFuture<'a, RotateOutcome>;
    /// Revokes one OAuth token; true when this call revoked it.
    fn revoke_oauth_token<'a>(
        &'a self,
        token_hash: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, bool>;
    /// Removes lapsed sessions, links, unused registrations, and expired codes and tokens.
    fn sweep_auth(&self, sweep: AuthSweep) -> StoreFuture<'_, AuthSweepCounts>;

    /// Replaces the project's shared-session snapshot, taken at the desktop's sharing
    /// `version`, and records the sync time, unless the held snapshot is as new or newer
    /// ([`SnapshotWrite::decide`]; the decision and the write are one transaction).
    fn replace_sessions<'a>(
        &'a self,
        project_id: &'a str,
        sessions: Vec<SessionMeta>,
        version: Option<i64>,
        now: Timestamp,
    ) -> StoreFuture<'a, SnapshotWrite>;
    /// Up to `limit` sessions of the project's snapshot.
    fn sessions<'a>(
        &'a self,
        project_id: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, SessionSnapshot>;
    /// One session of the project's snapshot.
    fn session<'a>(
        &'a self,
        project_id: &'a str,
        graph_session_id: &'a GraphSessionId,
    ) -> StoreFuture<'a, Option<SessionRecord>>;

    /// Stores `command` unless its (agent, idempotency key) exists (then returns the existing
    /// one, whatever the quota) or its agent or project already has `quota`'s worth of queued
    /// commands. The check and the insert are one atomic step.
    fn insert_command(
        &self,
        command: CommandRecord,
        quota: QueueQuota,
    ) -> StoreFuture<'_, InsertOutcome>;
    /// The command `agent_id` queued under `idempotency_key`.
    fn command_by_key<'a>(
        &'a self,
        agent_id: &'a str,
        idempotency_key: &'a str,
    ) -> StoreFuture<'a, Option<CommandRecord>>;
    /// The command with this id.
    fn command(&self, id: CommandId) -> StoreFuture<'_, Option<CommandRecord>>;
    /// Writes `next` over the command only if it is still in `from`'s status, cancel flag and
    /// execution (a run released and started again is not the run `from` read); true when it
    /// was written.
    fn update_command<'a>(
        &'a self,
        from: &'a CommandRecord,
        next: &'a CommandRecord,
    ) -> StoreFuture<'a, bool>;
    /// Ends command `id`, whose row cannot be decoded, as cancelled with `error`, without
    /// reading it: only while it is queued or running and in a project of `owner_id`; true
    /// when it was ended. The owner's way out of a damaged run (the rest of its row stays as
    /// it is, for the operator).
    fn cancel_damaged_command<'a>(
        &'a self,
        id: CommandId,
        owner_id: &'a str,
        error: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, bool>;
    /// Records a heartbeat for a running command; true if it was running.
    fn touch_running(&self, id: CommandId, now: Timestamp) -> StoreFuture<'_, bool>;
    /// Up to `limit` queued commands of the project, oldest first (ties in insertion order);
    /// a row that cannot be decoded is named among the damaged, and the others are read.
    fn queued_commands<'a>(
        &'a self,
        project_id: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Rows<CommandRecord>>;
    /// How many runs and chat tasks are open, by status, database-wide; how many desktops were
    /// heard from since `online_since`; when the oldest queued run was queued.
    fn open_counts(&self, online_since: Timestamp) -> StoreFuture<'_, OpenCounts>;
    /// How the store's connections are used now and how long its calls have taken.
    fn stats(&self) -> StoreStats;
    /// Moves every running command last seen before `cutoff` to `failed` with `error`;
    /// returns their ids.
    fn fail_silent_runs<'a>(
        &'a self,
        cutoff: Timestamp,
        now: Timestamp,
        error: &'a str,
    ) -> StoreFuture<'a, Vec<CommandId>>;

    /// Stores a new chat link.
    fn insert_chat_link(&self, link: ChatLinkRecord) -> StoreFuture<'_, ()>;
    /// The chat link with this id.
    fn chat_link<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<ChatLinkRecord>>;
    /// Records whether the link's host has an event subscription; true if the link exists.
    fn set_event_subscription<'a>(&'a self, id: &'a str, active: bool) -> StoreFuture<'a, bool>;
    /// Stores `task` unless its (link, idempotency key) exists; then returns the existing one.
    fn insert_task(&self, task: TaskRecord) -> StoreFuture<'_, TaskInsertOutcome>;
    /// The task with this id.
    fn task(&self, id: TaskId) -> StoreFuture<'_, Option<TaskRecord>>;
    /// Up to `limit` queued or claimed tasks of the link, oldest first.
    fn open_tasks<'a>(
        &'a self,
        chat_link_id: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<TaskRecord>>;
    /// [`Store::tasks_due`] and [`Store::open_tasks`] in one step, so the guard of an inbox read
    /// costs one more indexed probe rather than one more round trip: `None` when something is
    /// due (sweep, then read again), else the open tasks.
    fn open_tasks_unless_due<'a>(
        &'a self,
        chat_link_id: &'a str,
        limit: usize,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<Vec<TaskRecord>>>;
    /// Up to `limit` tasks of the link in any status, newest first.
    fn link_tasks<'a>(
        &'a self,
        chat_link_id: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<TaskRecord>>;
    /// Claims a queued task of `attempt.chat_link_id` in one conditional write; the claimed
    /// task, or `None` when it was not queued, not that link's, or unknown.
    fn claim_task(&self, attempt: ClaimAttempt) -> StoreFuture<'_, Option<TaskRecord>>;
    /// [`Store::claim_task`], and when it matched nothing the task as stored (what a claimer
    /// needs to replay or refuse). By default two calls; PostgreSQL answers in one statement,
    /// whose fallback read may predate a claim committed while the write waited for the row
    /// (READ COMMITTED: one snapshot per statement), so a `queued` answer is read again.
    fn claim_task_or_current(&self, attempt: ClaimAttempt) -> StoreFuture<'_, ClaimResult> {
        Box::pin(async move {
            let task_id = attempt.task_id;
            if let Some(task) = self.claim_task(attempt).await? {
                return Ok(ClaimResult::Claimed(task));
            }
            Ok(ClaimResult::NotClaimed(self.task(task_id).await?))
        })
    }
    /// Writes a claim with no condition on the status: the read-then-write race that
    /// [`Store::claim_task`] prevents. Only the test-only naive claim uses it.
    fn claim_task_unconditionally(&self, attempt: ClaimAttempt) -> StoreFuture<'_, bool>;
    /// Writes `next` over the task only if its status, claim id and lease are still `from`'s;
    /// true when it was written.
    fn update_task<'a>(
        &'a self,
        from: &'a TaskRecord,
        next: &'a TaskRecord,
    ) -> StoreFuture<'a, bool>;
    /// Whether any lease lapsed or unfinished task expired by `now`: a read-only check, so a
    /// caller can skip [`Store::sweep_tasks`] (and its write lock) when nothing is due.
    fn tasks_due(&self, now: Timestamp) -> StoreFuture<'_, bool>;
    /// Expires unfinished tasks past `expires_at` and requeues claims whose lease lapsed.
    fn sweep_tasks(&self, now: Timestamp) -> StoreFuture<'_, SweepCounts>;
    /// Stores `artifact` if its task is claimed under `artifact.claim_id` and has fewer than
    /// `max_per_task` artifacts; an existing (task, artifact id) is returned instead.
    fn insert_artifact(
        &self,
        artifact: ArtifactRecord,
        max_per_task: usize,
    ) -> StoreFuture<'_, ArtifactInsertOutcome>;
    /// The task's artifacts, oldest first.
    fn artifacts(&self, task_id: TaskId) -> StoreFuture<'_, Vec<ArtifactRecord>>;

    /// Up to `query.limit` commands of a project matching `query`, newest first; a row that
    /// cannot be decoded is named among the damaged, and the others are read.
    fn project_commands(&self, query: CommandQuery) -> StoreFuture<'_, Rows<CommandRecord>>;
    /// Every chat link of the project, oldest first (ties by id).
    fn chat_links<'a>(&'a self, project_id: &'a str) -> StoreFuture<'a, Vec<ChatLinkRecord>>;
    /// The owner's live browser sessions (not ended, seen at or after `idle_before`), newest
    /// first.
    fn browser_sessions<'a>(
        &'a self,
        owner_id: &'a str,
        idle_before: Timestamp,
    ) -> StoreFuture<'a, Vec<BrowserSessionRecord>>;
    /// Ends one browser session; true if it was live.
    fn end_browser_session<'a>(&'a self, id_hash: &'a str, now: Timestamp)
    -> StoreFuture<'a, bool>;
    /// Records that the token was used at `now` (never moving the time back).
    fn record_token_use<'a>(&'a self, token_id: &'a str, now: Timestamp) -> StoreFuture<'a, ()>;
    /// When each token of the owner was last used, as recorded: (token id, time).
    fn token_uses<'a>(&'a self, owner_id: &'a str) -> StoreFuture<'a, Vec<(String, Timestamp)>>;
    /// Notes that the desktop of `project_id` was heard from at `seen_at` (never moving the
    /// time back); a sync (`Some`) also replaces its problem and polling mode, any other
    /// request (`None`) keeps them.
    fn record_presence<'a>(
        &'a self,
        project_id: &'a str,
        seen_at: Timestamp,
        sync: Option<PresenceSync<'a>>,
    ) -> StoreFuture<'a, ()>;
    /// The presence of `project_id`'s desktop, if it was ever heard from.
    fn presence<'a>(&'a self, project_id: &'a str) -> StoreFuture<'a, Option<PresenceRecord>>;
    /// Replaces the report of command `id` with `report` (JSON text) and marks it seen at
    /// `now`, if it is running under `execution_id`; false otherwise.
    fn record_run_report<'a>(
        &'a self,
        id: CommandId,
        execution_id: &'a str,
        report: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, bool>;
    /// Whether the disk holding the database is full, in words naming it (SQLite: less than
    /// [`FULL_DISK_BELOW`] free where its file is); `None` when there is room or the store
    /// cannot tell (PostgreSQL's server keeps its own disk: a full one shows as
    /// [`Fault::DiskFull`] errors on writes).
    fn disk_full(&self) -> Option<String> {
        None
    }

    /// Checks the database's own structure (SQLite: `PRAGMA quick_check`, stopped after
    /// `limit`): `Some(what is wrong)` when it is damaged, `None` when it passed or the store
    /// has no such check (PostgreSQL's damage shows as [`Fault::Corrupt`] errors instead).
    fn check_structure(&self, limit: std::time::Duration) -> StoreFuture<'_, Option<String>> {
        let _ = limit;
        Box::pin(async { Ok(None) })
    }
}
