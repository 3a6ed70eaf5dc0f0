//! Durable state of the service behind one trait, so a PostgreSQL store can replace SQLite.
//!
//! The store knows no clock and no rules: callers pass timestamps and decide transitions
//! (`runs::transition`); the store only makes each write conditional on the state the
//! caller read, so concurrent writers cannot both win.

pub mod conformance;
pub mod sqlite;

use std::future::Future;
use std::pin::Pin;

use serde_json::{Map, Value};

use crate::clock::Timestamp;
use crate::protocol::{CommandId, GraphSessionId, RunStatus, SessionMeta};

pub use sqlite::SqliteStore;

/// The future every store method returns (boxed so `dyn Store` works).
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A storage failure; never caused by the caller's input.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database failed.
    #[error("database error: {0}")]
    Backend(String),
    /// A stored row could not be read back (corrupt or from a newer schema).
    #[error("stored data is unreadable: {0}")]
    Corrupt(String),
    /// The stored data contradicts the request (e.g. a name already taken).
    #[error("{0}")]
    Conflict(String),
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
    /// When it reached a terminal status.
    pub finished_at: Option<Timestamp>,
    /// When the desktop last reported on it (started or control poll).
    pub last_seen_at: Option<Timestamp>,
    /// Last change.
    pub updated_at: Timestamp,
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
            last_seen_at: None,
            updated_at: now,
        }
    }
}

/// What inserting a command under an idempotency key did.
#[derive(Debug, Clone, PartialEq)]
pub enum InsertOutcome {
    /// No command had this (agent, key): this one was stored.
    Created(CommandRecord),
    /// A command with this (agent, key) already existed; it is returned unchanged.
    Existing(CommandRecord),
}

/// The durable state of the service.
///
/// Every method is one atomic step. Implementations must pass [`conformance::run_all`].
pub trait Store: Send + Sync + 'static {
    /// The owner named `name`, created if missing.
    fn ensure_owner<'a>(&'a self, name: &'a str, now: Timestamp) -> StoreFuture<'a, OwnerRecord>;
    /// Stores a new project.
    fn insert_project(&self, project: ProjectRecord) -> StoreFuture<'_, ()>;
    /// The project with this id.
    fn project<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<ProjectRecord>>;
    /// Stores a new token.
    fn insert_token(&self, token: TokenRecord) -> StoreFuture<'_, ()>;
    /// The token whose secret hashes to `token_hash` (revoked or not).
    fn token_by_hash<'a>(&'a self, token_hash: &'a str) -> StoreFuture<'a, Option<TokenRecord>>;
    /// The token with this id (revoked or not).
    fn token<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TokenRecord>>;
    /// Revokes a token unless already revoked; true when this call revoked it.
    fn revoke_token<'a>(&'a self, id: &'a str, now: Timestamp) -> StoreFuture<'a, bool>;

    /// Replaces the project's shared-session snapshot and records the sync time.
    fn replace_sessions<'a>(
        &'a self,
        project_id: &'a str,
        sessions: Vec<SessionMeta>,
        now: Timestamp,
    ) -> StoreFuture<'a, ()>;
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

    /// Stores `command` unless its (agent, idempotency key) exists; then returns the existing one.
    fn insert_command(&self, command: CommandRecord) -> StoreFuture<'_, InsertOutcome>;
    /// The command `agent_id` queued under `idempotency_key`.
    fn command_by_key<'a>(
        &'a self,
        agent_id: &'a str,
        idempotency_key: &'a str,
    ) -> StoreFuture<'a, Option<CommandRecord>>;
    /// The command with this id.
    fn command(&self, id: CommandId) -> StoreFuture<'_, Option<CommandRecord>>;
    /// Writes `next` over the command only if it is still in `from`'s status and cancel flag;
    /// true when it was written.
    fn update_command<'a>(
        &'a self,
        from: &'a CommandRecord,
        next: &'a CommandRecord,
    ) -> StoreFuture<'a, bool>;
    /// Records a heartbeat for a running command; true if it was running.
    fn touch_running(&self, id: CommandId, now: Timestamp) -> StoreFuture<'_, bool>;
    /// Up to `limit` queued commands of the project, oldest first (ties in insertion order).
    fn queued_commands<'a>(
        &'a self,
        project_id: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<CommandRecord>>;
    /// Moves every running command last seen before `cutoff` to `failed` with `error`;
    /// returns their ids.
    fn fail_silent_runs<'a>(
        &'a self,
        cutoff: Timestamp,
        now: Timestamp,
        error: &'a str,
    ) -> StoreFuture<'a, Vec<CommandId>>;
}
