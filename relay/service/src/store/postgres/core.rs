//! Owners, projects, tokens, session snapshots and commands in PostgreSQL, and the [`Store`]
//! impl that routes every method (chat tasks and auth live beside this file).

use serde_json::{Map, Value};
use tokio_postgres::Row;
use tokio_postgres::types::{FromSql, ToSql};

use super::{PostgresStore, backend, prepared};
use crate::model::TaskId;
use crate::store::{
    ArtifactInsertOutcome, ArtifactRecord, AuthCodeRecord, AuthSweep, AuthSweepCounts, BoxError,
    BrowserSessionRecord, ChatLinkRecord, ClaimAttempt, ClaimResult, CommandQuery, CommandRecord,
    Damage, InsertOutcome, IssuedTokens, OAuthClientRecord, OAuthTokenRecord, OpenCounts,
    OwnerRecord, PresenceRecord, PresenceSync, ProjectRecord, QueueLimit, QueueQuota,
    RedeemOutcome, RotateOutcome, Rows, SessionRecord, SessionSnapshot, SignInLinkRecord,
    SnapshotWrite, Store, StoreError, StoreFuture, SweepCounts, TaskInsertOutcome, TaskRecord,
    TokenKind, TokenRecord,
};
use relay_protocol::clock::Timestamp;
use relay_protocol::{CommandId, GraphSessionId, RunStatus, SessionMeta};

/// A session's argument schema (JSON text, its graph's `meta.args`); the token cap an agent
/// asked for, and the cap the desktop ran with (reported with `started`) (migration 5).
pub(super) const ARGS_AND_CAPS_MIGRATION: &str = r#"
ALTER TABLE graph_sessions ADD COLUMN args_schema TEXT;
ALTER TABLE commands ADD COLUMN max_tokens BIGINT;
ALTER TABLE commands ADD COLUMN token_cap BIGINT;
"#;

/// The desktop's sharing version of each project's held snapshot (`NULL`: synced by a desktop
/// from before versions), so an older snapshot never replaces a newer one (migration 7).
pub(super) const SHARING_VERSION_MIGRATION: &str = r#"
ALTER TABLE project_syncs ADD COLUMN sharing_version BIGINT;
"#;

/// Who asked the service to cancel a run, and why it ended (`EndCause` wire words; `NULL`:
/// no one asked, it ended by its graph alone, or it ended before causes were kept)
/// (migration 10).
pub(super) const END_CAUSE_MIGRATION: &str = r#"
ALTER TABLE commands ADD COLUMN cancel_cause TEXT;
ALTER TABLE commands ADD COLUMN end_cause TEXT;
"#;

/// How often a run's desktop resumed it from its journal after a stop, and when last
/// (issue 46; 0 and `NULL`: never) (migration 11).
pub(super) const RESUMED_MIGRATION: &str = r#"
ALTER TABLE commands ADD COLUMN resumed BIGINT NOT NULL DEFAULT 0;
ALTER TABLE commands ADD COLUMN resumed_at BIGINT;
"#;

/// A stored cause word; one this build does not know (a newer build's) reads as none: a cause
/// only explains an end, it decides nothing.
fn cause_word(word: Option<String>) -> Option<relay_protocol::EndCause> {
    word.and_then(|word| word.parse().ok())
}

/// What the snapshot held for `project_id` (its row locked by the caller's transaction) says
/// of one at `version` ([`SnapshotWrite::decide`]); an unchanged one moves the sync time here.
async fn held_snapshot(
    transaction: &tokio_postgres::Transaction<'_>,
    project_id: &str,
    version: Option<i64>,
    now: Timestamp,
) -> Result<SnapshotWrite, StoreError> {
    let held: Option<i64> = transaction
        .query_opt(
            "SELECT sharing_version FROM project_syncs WHERE project_id = $1",
            &[&project_id],
        )
        .await
        .map_err(backend)?
        .and_then(|row| row.get(0));
    let write = SnapshotWrite::decide(held, version);
    if write == SnapshotWrite::Unchanged {
        transaction
            .execute(
                "UPDATE project_syncs SET synced_at = $2 WHERE project_id = $1",
                &[&project_id, &now.unix_millis()],
            )
            .await
            .map_err(backend)?;
    }
    Ok(write)
}

/// Owners, projects, tokens, session snapshots, commands (migration 1).
pub(super) const MIGRATION: &str = r#"
CREATE TABLE owners (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL
);
CREATE TABLE projects (
    id TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL REFERENCES owners(id),
    name TEXT NOT NULL,
    created_at BIGINT NOT NULL
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
    created_at BIGINT NOT NULL,
    revoked_at BIGINT,
    client_id TEXT
);
CREATE INDEX tokens_by_owner ON tokens(owner_id, created_at);
CREATE TABLE graph_sessions (
    project_id TEXT NOT NULL REFERENCES projects(id),
    graph_session_id TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    slug TEXT NOT NULL,
    version TEXT NOT NULL,
    status TEXT NOT NULL,
    synced_at BIGINT NOT NULL,
    PRIMARY KEY (project_id, graph_session_id)
);
CREATE TABLE project_syncs (
    project_id TEXT PRIMARY KEY REFERENCES projects(id),
    synced_at BIGINT NOT NULL
);
CREATE TABLE commands (
    seq BIGSERIAL UNIQUE,
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
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
    execution_id TEXT,
    result TEXT,
    result_truncated BOOLEAN NOT NULL DEFAULT FALSE,
    total_tokens BIGINT,
    reported_cost DOUBLE PRECISION,
    error TEXT,
    completion_hash TEXT,
    created_at BIGINT NOT NULL,
    started_at BIGINT,
    finished_at BIGINT,
    last_seen_at BIGINT,
    updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX commands_by_idempotency_key ON commands(agent_id, idempotency_key);
CREATE INDEX commands_queued ON commands(project_id, status, created_at);
CREATE INDEX commands_running ON commands(status, last_seen_at);
CREATE INDEX commands_queued_by_agent ON commands(agent_id) WHERE status = 'queued';
"#;

pub(super) const COMMAND_COLUMNS: &str = "id, project_id, agent_id, graph_session_id, slug, \
    arguments, idempotency_key, request_hash, status, cancel_requested, execution_id, result, \
    result_truncated, total_tokens, reported_cost, error, completion_hash, created_at, \
    started_at, finished_at, last_seen_at, updated_at, delivered_at, report, max_tokens,
    token_cap, cancel_cause, end_cause, resumed, resumed_at";

pub(super) const TOKEN_COLUMNS: &str = "id, kind, token_hash, owner_id, project_id, agent_name, \
    scopes, created_at, revoked_at, client_id, connection_id";

/// Column `index` of `row`; a value that does not decode as `T` is damage, which the row's
/// decoder ([`in_row`]) names.
pub(super) fn get<'r, T: FromSql<'r>>(row: &'r Row, index: usize) -> Result<T, StoreError> {
    row.try_get(index).map_err(|error| {
        let column = row
            .columns()
            .get(index)
            .map_or_else(|| format!("column {index}"), |c| c.name().to_owned());
        Damage::of(column, error).into()
    })
}

/// Decodes row `id` of `table` with `decode`, naming the row in any damage found in it.
pub(super) fn in_row<T>(
    table: &'static str,
    id: &str,
    decode: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    decode().map_err(|error| error.in_row(table, id))
}

/// A timestamp column.
pub(super) fn at(row: &Row, index: usize) -> Result<Timestamp, StoreError> {
    Ok(Timestamp::from_unix_millis(get(row, index)?))
}

/// A nullable timestamp column.
pub(super) fn at_opt(row: &Row, index: usize) -> Result<Option<Timestamp>, StoreError> {
    Ok(get::<Option<i64>>(row, index)?.map(Timestamp::from_unix_millis))
}

/// A nullable timestamp parameter.
pub(super) fn ms(value: Option<Timestamp>) -> Option<i64> {
    value.map(Timestamp::unix_millis)
}

/// Damage to `what` in the row being decoded.
pub(super) fn corrupt(what: &str, why: impl Into<BoxError>) -> StoreError {
    Damage::of(what, why).into()
}

fn to_count(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub(super) fn token_from_row(row: &Row) -> Result<TokenRecord, StoreError> {
    let key: String = get(row, 0)?;
    in_row("tokens", &key, || {
        let kind: String = get(row, 1)?;
        let scopes: String = get(row, 6)?;
        Ok(TokenRecord {
            id: key.clone(),
            kind: TokenKind::parse(&kind)
                .ok_or_else(|| corrupt("kind", format!("`{kind}` is not a token kind")))?,
            token_hash: get(row, 2)?,
            owner_id: get(row, 3)?,
            project_id: get(row, 4)?,
            agent_name: get(row, 5)?,
            scopes: scopes.split_whitespace().map(str::to_owned).collect(),
            created_at: at(row, 7)?,
            revoked_at: at_opt(row, 8)?,
            client_id: get(row, 9)?,
            connection_id: get(row, 10)?,
        })
    })
}

pub(super) fn token_params(token: &TokenRecord) -> Vec<Box<dyn ToSql + Sync + Send>> {
    vec![
        Box::new(token.id.clone()),
        Box::new(token.kind.as_str()),
        Box::new(token.token_hash.clone()),
        Box::new(token.owner_id.clone()),
        Box::new(token.project_id.clone()),
        Box::new(token.agent_name.clone()),
        Box::new(token.scopes.join(" ")),
        Box::new(token.created_at.unix_millis()),
        Box::new(ms(token.revoked_at)),
        Box::new(token.client_id.clone()),
        Box::new(token.connection_id.clone()),
    ]
}

/// `params` as the slice tokio-postgres takes.
pub(super) fn refs(params: &[Box<dyn ToSql + Sync + Send>]) -> Vec<&(dyn ToSql + Sync)> {
    params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

pub(super) const INSERT_TOKEN: &str = "INSERT INTO tokens (id, kind, token_hash, owner_id, \
    project_id, agent_name, scopes, created_at, revoked_at, client_id, connection_id) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

fn owner_from_row(row: &Row) -> Result<OwnerRecord, StoreError> {
    let key: String = get(row, 0)?;
    in_row("owners", &key, || {
        Ok(OwnerRecord {
            id: key.clone(),
            name: get(row, 1)?,
            created_at: at(row, 2)?,
        })
    })
}

fn project_from_row(row: &Row) -> Result<ProjectRecord, StoreError> {
    let key: String = get(row, 0)?;
    in_row("projects", &key, || {
        Ok(ProjectRecord {
            id: key.clone(),
            owner_id: get(row, 1)?,
            name: get(row, 2)?,
            created_at: at(row, 3)?,
        })
    })
}

fn session_from_row(row: &Row) -> Result<SessionRecord, StoreError> {
    let id: String = get(row, 0)?;
    in_row("graph_sessions", &id, || {
        Ok(SessionRecord {
            meta: SessionMeta {
                graph_session_id: id.parse().map_err(|e| corrupt("id", e))?,
                name: get(row, 1)?,
                description: get(row, 2)?,
                slug: get(row, 3)?,
                version: get(row, 4)?,
                status: get(row, 5)?,
                args_schema: get::<Option<String>>(row, 7)?
                    .map(|text| serde_json::from_str(&text))
                    .transpose()
                    .map_err(|e| corrupt("args_schema", e))?,
            },
            synced_at: at(row, 6)?,
        })
    })
}

pub(super) fn command_from_row(row: &Row) -> Result<CommandRecord, StoreError> {
    let id: String = get(row, 0)?;
    in_row("commands", &id, || {
        let graph_session_id: String = get(row, 3)?;
        let arguments: String = get(row, 5)?;
        let status: String = get(row, 8)?;
        let result: Option<String> = get(row, 11)?;
        let total_tokens: Option<i64> = get(row, 13)?;
        let report: Option<String> = get(row, 23)?;
        Ok(CommandRecord {
            id: id.parse().map_err(|e| corrupt("id", e))?,
            project_id: get(row, 1)?,
            agent_id: get(row, 2)?,
            graph_session_id: graph_session_id
                .parse()
                .map_err(|e| corrupt("graph_session_id", e))?,
            slug: get(row, 4)?,
            arguments: serde_json::from_str::<Map<String, Value>>(&arguments)
                .map_err(|e| corrupt("arguments", e))?,
            idempotency_key: get(row, 6)?,
            request_hash: get(row, 7)?,
            status: status.parse().map_err(|e| corrupt("status", e))?,
            cancel_requested: get(row, 9)?,
            execution_id: get(row, 10)?,
            result: result
                .map(|text| serde_json::from_str(&text))
                .transpose()
                .map_err(|e| corrupt("result", e))?,
            result_truncated: get(row, 12)?,
            total_tokens: total_tokens
                .map(u64::try_from)
                .transpose()
                .map_err(|e| corrupt("total_tokens", e))?,
            reported_cost: get(row, 14)?,
            error: get(row, 15)?,
            completion_hash: get(row, 16)?,
            created_at: at(row, 17)?,
            started_at: at_opt(row, 18)?,
            finished_at: at_opt(row, 19)?,
            last_seen_at: at_opt(row, 20)?,
            updated_at: at(row, 21)?,
            delivered_at: at_opt(row, 22)?,
            // A report is advice for the agent: one that cannot be read is left out.
            report: report.and_then(|text| serde_json::from_str(&text).ok()),
            max_tokens: get::<Option<i64>>(row, 24)?.and_then(|n| u64::try_from(n).ok()),
            token_cap: get::<Option<i64>>(row, 25)?.and_then(|n| u64::try_from(n).ok()),
            cancel_cause: cause_word(get(row, 26)?),
            end_cause: cause_word(get(row, 27)?),
            resumed: u32::try_from(get::<i64>(row, 28)?).unwrap_or(0),
            resumed_at: at_opt(row, 29)?,
        })
    })
}

/// Which quota `command` would exceed, if any: counted inside the insert's transaction, under
/// the project's row lock.
async fn queue_limit(
    transaction: &deadpool_postgres::Transaction<'_>,
    command: &CommandRecord,
    quota: QueueQuota,
) -> Result<Option<QueueLimit>, StoreError> {
    let count = async |sql: &str, key: &str| {
        let row = transaction
            .query_one(sql, &[&key, &RunStatus::Queued.as_str()])
            .await
            .map_err(backend)?;
        Ok::<u64, StoreError>(u64::try_from(get::<i64>(&row, 0)?).unwrap_or(0))
    };
    let agent = count(
        "SELECT COUNT(*) FROM commands WHERE agent_id = $1 AND status = $2",
        &command.agent_id,
    )
    .await?;
    if agent >= quota.per_agent {
        return Ok(Some(QueueLimit::Agent(quota.per_agent)));
    }
    let project = count(
        "SELECT COUNT(*) FROM commands WHERE project_id = $1 AND status = $2",
        &command.project_id,
    )
    .await?;
    if project >= quota.per_project {
        return Ok(Some(QueueLimit::Project(quota.per_project)));
    }
    Ok(None)
}

fn to_sql_tokens(total_tokens: Option<u64>) -> Result<Option<i64>, StoreError> {
    total_tokens
        .map(i64::try_from)
        .transpose()
        .map_err(|_| StoreError::Invalid("total_tokens is too large to store".into()))
}

impl PostgresStore {
    async fn ensure_owner_impl(
        &self,
        name: &str,
        now: Timestamp,
    ) -> Result<OwnerRecord, StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO owners (id, name, created_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (name) DO NOTHING",
                &[&uuid::Uuid::new_v4().to_string(), &name, &now.unix_millis()],
            )
            .await
            .map_err(backend)?;
        let row = client
            .query_one(
                "SELECT id, name, created_at FROM owners WHERE name = $1",
                &[&name],
            )
            .await
            .map_err(backend)?;
        owner_from_row(&row)
    }

    async fn insert_project_impl(&self, project: ProjectRecord) -> Result<(), StoreError> {
        self.client()
            .await?
            .execute(
                "INSERT INTO projects (id, owner_id, name, created_at) VALUES ($1, $2, $3, $4)",
                &[
                    &project.id,
                    &project.owner_id,
                    &project.name,
                    &project.created_at.unix_millis(),
                ],
            )
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn query_rows<T>(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        map: fn(&Row) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let client = self.client().await?;
        let statement = prepared(&client, sql).await?;
        let rows = client.query(&statement, params).await.map_err(backend)?;
        rows.iter().map(map).collect()
    }

    pub(super) async fn query_row<T>(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        map: fn(&Row) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        let client = self.client().await?;
        let statement = prepared(&client, sql).await?;
        let row = client
            .query_opt(&statement, params)
            .await
            .map_err(backend)?;
        row.as_ref().map(map).transpose()
    }

    pub(super) async fn execute(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let client = self.client().await?;
        let statement = prepared(&client, sql).await?;
        client.execute(&statement, params).await.map_err(backend)
    }

    async fn insert_token_impl(&self, token: TokenRecord) -> Result<(), StoreError> {
        let params = token_params(&token);
        self.execute(INSERT_TOKEN, &refs(&params)).await?;
        Ok(())
    }

    async fn replace_sessions_impl(
        &self,
        project_id: &str,
        sessions: Vec<SessionMeta>,
        version: Option<i64>,
        now: Timestamp,
    ) -> Result<SnapshotWrite, StoreError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(backend)?;
        // Two syncs of one project replace the snapshot one after the other, never interleaved,
        // and each decides against the version the other left.
        transaction
            .execute(
                "SELECT 1 FROM projects WHERE id = $1 FOR UPDATE",
                &[&project_id],
            )
            .await
            .map_err(backend)?;
        let write = held_snapshot(&transaction, project_id, version, now).await?;
        match write {
            SnapshotWrite::Stale => return Ok(write),
            SnapshotWrite::Unchanged => {
                transaction.commit().await.map_err(backend)?;
                return Ok(write);
            }
            SnapshotWrite::Replaced => {}
        }
        transaction
            .execute(
                "DELETE FROM graph_sessions WHERE project_id = $1",
                &[&project_id],
            )
            .await
            .map_err(backend)?;
        let insert = transaction
            .prepare(
                "INSERT INTO graph_sessions (project_id, graph_session_id, name, description, \
                 slug, version, status, synced_at, args_schema) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .await
            .map_err(backend)?;
        for session in &sessions {
            transaction
                .execute(
                    &insert,
                    &[
                        &project_id,
                        &session.graph_session_id.as_str(),
                        &session.name,
                        &session.description,
                        &session.slug,
                        &session.version,
                        &session.status,
                        &now.unix_millis(),
                        &session.args_schema.as_ref().map(Value::to_string),
                    ],
                )
                .await
                .map_err(backend)?;
        }
        transaction
            .execute(
                "INSERT INTO project_syncs (project_id, synced_at, sharing_version) \
                 VALUES ($1, $2, $3) ON CONFLICT (project_id) DO UPDATE SET \
                 synced_at = excluded.synced_at, sharing_version = excluded.sharing_version",
                &[&project_id, &now.unix_millis(), &version],
            )
            .await
            .map_err(backend)?;
        transaction.commit().await.map_err(backend)?;
        Ok(write)
    }

    async fn sessions_impl(
        &self,
        project_id: &str,
        limit: usize,
    ) -> Result<SessionSnapshot, StoreError> {
        // One statement (one round trip, one snapshot) when the project has a session: the
        // sync time rides along on every row. A project without sessions asks for it alone.
        let rows = self
            .query_rows(
                "SELECT graph_session_id, name, description, slug, version, status, synced_at, \
                 args_schema, (SELECT synced_at FROM project_syncs WHERE project_id = $1) \
                 FROM graph_sessions WHERE project_id = $1 \
                 ORDER BY name, graph_session_id LIMIT $2",
                &[&project_id, &to_count(limit)],
                |row| Ok((session_from_row(row)?, at_opt(row, 8)?)),
            )
            .await?;
        let last_sync_at = match rows.first() {
            Some((_, synced_at)) => *synced_at,
            None => {
                self.query_row(
                    "SELECT synced_at FROM project_syncs WHERE project_id = $1",
                    &[&project_id],
                    |row| at(row, 0),
                )
                .await?
            }
        };
        Ok(SessionSnapshot {
            sessions: rows.into_iter().map(|(session, _)| session).collect(),
            last_sync_at,
        })
    }

    async fn insert_command_impl(
        &self,
        command: CommandRecord,
        quota: QueueQuota,
    ) -> Result<InsertOutcome, StoreError> {
        let arguments =
            serde_json::to_string(&command.arguments).map_err(|source| StoreError::Encode {
                what: "arguments",
                source,
            })?;
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(backend)?;
        // The project's row lock serialises the inserts that count against its quotas (an
        // agent's commands are all in its one project).
        transaction
            .execute(
                "SELECT 1 FROM projects WHERE id = $1 FOR UPDATE",
                &[&command.project_id],
            )
            .await
            .map_err(backend)?;
        let by_key = format!(
            "SELECT {COMMAND_COLUMNS} FROM commands WHERE agent_id = $1 AND idempotency_key = $2"
        );
        if let Some(row) = transaction
            .query_opt(&by_key, &[&command.agent_id, &command.idempotency_key])
            .await
            .map_err(backend)?
        {
            return Ok(InsertOutcome::Existing(command_from_row(&row)?));
        }
        if let Some(limit) = queue_limit(&transaction, &command, quota).await? {
            return Ok(InsertOutcome::OverQuota(limit));
        }
        let row = transaction
            .query_one(
                &format!(
                    "INSERT INTO commands (id, project_id, agent_id, graph_session_id, slug, \
                     arguments, idempotency_key, request_hash, status, cancel_requested, \
                     result_truncated, created_at, updated_at, max_tokens) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, FALSE, FALSE, $10, $10, $11) \
                     RETURNING {COMMAND_COLUMNS}"
                ),
                &[
                    &command.id.to_string(),
                    &command.project_id,
                    &command.agent_id,
                    &command.graph_session_id.as_str(),
                    &command.slug,
                    &arguments,
                    &command.idempotency_key,
                    &command.request_hash,
                    &RunStatus::Queued.as_str(),
                    &command.created_at.unix_millis(),
                    &to_sql_tokens(command.max_tokens)?,
                ],
            )
            .await
            .map_err(backend)?;
        let stored = command_from_row(&row)?;
        transaction.commit().await.map_err(backend)?;
        Ok(InsertOutcome::Created(stored))
    }

    async fn update_command_impl(
        &self,
        from: &CommandRecord,
        next: &CommandRecord,
    ) -> Result<bool, StoreError> {
        let result = next
            .result
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|source| StoreError::Encode {
                what: "result",
                source,
            })?;
        let changed = self
            .execute(
                "UPDATE commands SET status = $1, cancel_requested = $2, execution_id = $3, \
                 result = $4, result_truncated = $5, total_tokens = $6, reported_cost = $7, \
                 error = $8, completion_hash = $9, started_at = $10, finished_at = $11, \
                 last_seen_at = $12, updated_at = $13, delivered_at = $17, token_cap = $18, \
                 cancel_cause = $20, end_cause = $21, resumed = $22, resumed_at = $23 \
                 WHERE id = $14 AND status = $15 AND cancel_requested = $16 \
                 AND execution_id IS NOT DISTINCT FROM $19",
                &[
                    &next.status.as_str(),
                    &next.cancel_requested,
                    &next.execution_id,
                    &result,
                    &next.result_truncated,
                    &to_sql_tokens(next.total_tokens)?,
                    &next.reported_cost,
                    &next.error,
                    &next.completion_hash,
                    &ms(next.started_at),
                    &ms(next.finished_at),
                    &ms(next.last_seen_at),
                    &next.updated_at.unix_millis(),
                    &from.id.to_string(),
                    &from.status.as_str(),
                    &from.cancel_requested,
                    &ms(next.delivered_at),
                    &to_sql_tokens(next.token_cap)?,
                    &from.execution_id,
                    &next.cancel_cause.map(|c| c.as_str()),
                    &next.end_cause.map(|c| c.as_str()),
                    &i64::from(next.resumed),
                    &ms(next.resumed_at),
                ],
            )
            .await?;
        Ok(changed == 1)
    }

    async fn fail_silent_runs_impl(
        &self,
        cutoff: Timestamp,
        now: Timestamp,
        error: &str,
    ) -> Result<Vec<CommandId>, StoreError> {
        let ids = self
            .query_rows(
                "UPDATE commands SET status = 'failed', error = $1, finished_at = $2, \
                 updated_at = $2 WHERE status = 'running' AND last_seen_at < $3 RETURNING id",
                &[&error, &now.unix_millis(), &cutoff.unix_millis()],
                |row| get::<String>(row, 0),
            )
            .await?;
        ids.iter()
            .map(|id| {
                id.parse()
                    .map_err(|e| corrupt("id", e).in_row("commands", id))
            })
            .collect()
    }
}

impl Store for PostgresStore {
    fn ensure_owner<'a>(&'a self, name: &'a str, now: Timestamp) -> StoreFuture<'a, OwnerRecord> {
        Box::pin(self.ensure_owner_impl(name, now))
    }

    fn insert_project(&self, project: ProjectRecord) -> StoreFuture<'_, ()> {
        Box::pin(self.insert_project_impl(project))
    }

    fn project<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<ProjectRecord>> {
        Box::pin(async move {
            self.query_row(
                "SELECT id, owner_id, name, created_at FROM projects WHERE id = $1",
                &[&id],
                project_from_row,
            )
            .await
        })
    }

    fn all_projects(&self) -> StoreFuture<'_, Vec<ProjectRecord>> {
        Box::pin(self.query_rows(
            "SELECT id, owner_id, name, created_at FROM projects ORDER BY created_at, id",
            &[],
            project_from_row,
        ))
    }

    fn projects_of_owner<'a>(&'a self, owner_id: &'a str) -> StoreFuture<'a, Vec<ProjectRecord>> {
        Box::pin(async move {
            self.query_rows(
                "SELECT id, owner_id, name, created_at FROM projects WHERE owner_id = $1 \
                 ORDER BY created_at, id",
                &[&owner_id],
                project_from_row,
            )
            .await
        })
    }

    fn project_of_owner<'a>(
        &'a self,
        owner_id: &'a str,
        id: &'a str,
    ) -> StoreFuture<'a, Option<ProjectRecord>> {
        Box::pin(async move {
            self.query_row(
                "SELECT id, owner_id, name, created_at FROM projects \
                 WHERE id = $1 AND owner_id = $2",
                &[&id, &owner_id],
                project_from_row,
            )
            .await
        })
    }

    fn owners(&self) -> StoreFuture<'_, Vec<OwnerRecord>> {
        Box::pin(self.query_rows(
            "SELECT id, name, created_at FROM owners ORDER BY name",
            &[],
            owner_from_row,
        ))
    }

    fn insert_token(&self, token: TokenRecord) -> StoreFuture<'_, ()> {
        Box::pin(self.insert_token_impl(token))
    }

    fn token_by_hash<'a>(&'a self, token_hash: &'a str) -> StoreFuture<'a, Option<TokenRecord>> {
        Box::pin(async move {
            self.query_row(
                &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE token_hash = $1"),
                &[&token_hash],
                token_from_row,
            )
            .await
        })
    }

    fn token<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TokenRecord>> {
        Box::pin(async move {
            self.query_row(
                &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = $1"),
                &[&id],
                token_from_row,
            )
            .await
        })
    }

    fn unrevoked_tokens<'a>(&'a self, ids: &'a [String]) -> StoreFuture<'a, Vec<String>> {
        Box::pin(async move {
            self.query_rows(
                "SELECT id FROM tokens WHERE revoked_at IS NULL AND id = ANY($1)",
                &[&ids],
                |row| get(row, 0),
            )
            .await
        })
    }

    fn tokens_of_owner<'a>(&'a self, owner_id: &'a str) -> StoreFuture<'a, Vec<TokenRecord>> {
        Box::pin(async move {
            self.query_rows(
                &format!(
                    "SELECT {TOKEN_COLUMNS} FROM tokens WHERE owner_id = $1 ORDER BY created_at, id"
                ),
                &[&owner_id],
                token_from_row,
            )
            .await
        })
    }

    fn revoke_token<'a>(&'a self, id: &'a str, now: Timestamp) -> StoreFuture<'a, bool> {
        Box::pin(self.revoke_token_and_grant(id, now))
    }

    fn revoke_connection<'a>(
        &'a self,
        connection_id: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, usize> {
        Box::pin(self.revoke_connection_impl(connection_id, now))
    }

    fn owner_by_name<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<OwnerRecord>> {
        Box::pin(async move {
            self.query_row(
                "SELECT id, name, created_at FROM owners WHERE name = $1",
                &[&name],
                owner_from_row,
            )
            .await
        })
    }

    fn owner<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<OwnerRecord>> {
        Box::pin(async move {
            self.query_row(
                "SELECT id, name, created_at FROM owners WHERE id = $1",
                &[&id],
                owner_from_row,
            )
            .await
        })
    }

    fn set_owner_password<'a>(
        &'a self,
        owner_id: &'a str,
        password_hash: Option<String>,
    ) -> StoreFuture<'a, bool> {
        Box::pin(self.set_owner_password_impl(owner_id, password_hash))
    }

    fn owner_password<'a>(&'a self, owner_id: &'a str) -> StoreFuture<'a, Option<String>> {
        Box::pin(async move {
            self.query_row(
                "SELECT password_hash FROM owner_passwords WHERE owner_id = $1",
                &[&owner_id],
                |row| get::<String>(row, 0),
            )
            .await
        })
    }

    fn insert_browser_session(&self, session: BrowserSessionRecord) -> StoreFuture<'_, ()> {
        Box::pin(self.insert_browser_session_impl(session))
    }

    fn touch_browser_session<'a>(
        &'a self,
        id_hash: &'a str,
        idle_before: Timestamp,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<BrowserSessionRecord>> {
        Box::pin(self.touch_browser_session_impl(id_hash, idle_before, now))
    }

    fn end_browser_sessions<'a>(
        &'a self,
        owner_id: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, usize> {
        Box::pin(async move {
            let ended = self
                .execute(
                    "UPDATE browser_sessions SET ended_at = $1 WHERE owner_id = $2 AND ended_at IS NULL",
                    &[&now.unix_millis(), &owner_id],
                )
                .await?;
            Ok(usize::try_from(ended).unwrap_or(usize::MAX))
        })
    }

    fn insert_sign_in_link(&self, link: SignInLinkRecord) -> StoreFuture<'_, ()> {
        Box::pin(self.insert_sign_in_link_impl(link))
    }

    fn use_sign_in_link<'a>(
        &'a self,
        token_hash: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<SignInLinkRecord>> {
        Box::pin(self.use_sign_in_link_impl(token_hash, now))
    }

    fn insert_oauth_client(&self, client: OAuthClientRecord) -> StoreFuture<'_, ()> {
        Box::pin(self.insert_oauth_client_impl(client))
    }

    fn oauth_client<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<OAuthClientRecord>> {
        Box::pin(self.oauth_client_impl(id))
    }

    fn mark_oauth_client_used<'a>(&'a self, id: &'a str, now: Timestamp) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.execute(
                "UPDATE oauth_clients SET used_at = $1 WHERE id = $2 AND used_at IS NULL",
                &[&now.unix_millis(), &id],
            )
            .await?;
            Ok(())
        })
    }

    fn insert_auth_code(&self, code: AuthCodeRecord) -> StoreFuture<'_, ()> {
        Box::pin(self.insert_auth_code_impl(code))
    }

    fn auth_code<'a>(&'a self, code_hash: &'a str) -> StoreFuture<'a, Option<AuthCodeRecord>> {
        Box::pin(self.auth_code_impl(code_hash))
    }

    fn redeem_auth_code<'a>(
        &'a self,
        code_hash: &'a str,
        now: Timestamp,
        grant: TokenRecord,
        tokens: IssuedTokens,
    ) -> StoreFuture<'a, RedeemOutcome> {
        Box::pin(self.redeem_auth_code_impl(code_hash, now, grant, tokens))
    }

    fn oauth_token<'a>(&'a self, token_hash: &'a str) -> StoreFuture<'a, Option<OAuthTokenRecord>> {
        Box::pin(self.oauth_token_impl(token_hash))
    }

    fn rotate_refresh_token<'a>(
        &'a self,
        token_hash: &'a str,
        now: Timestamp,
        tokens: IssuedTokens,
    ) -> StoreFuture<'a, RotateOutcome> {
        Box::pin(self.rotate_refresh_token_impl(token_hash, now, tokens))
    }

    fn revoke_oauth_token<'a>(
        &'a self,
        token_hash: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let changed = self
                .execute(
                    "UPDATE oauth_tokens SET revoked_at = $1 WHERE token_hash = $2 AND revoked_at IS NULL",
                    &[&now.unix_millis(), &token_hash],
                )
                .await?;
            Ok(changed == 1)
        })
    }

    fn sweep_auth(&self, sweep: AuthSweep) -> StoreFuture<'_, AuthSweepCounts> {
        Box::pin(self.sweep_auth_impl(sweep))
    }

    fn replace_sessions<'a>(
        &'a self,
        project_id: &'a str,
        sessions: Vec<SessionMeta>,
        version: Option<i64>,
        now: Timestamp,
    ) -> StoreFuture<'a, SnapshotWrite> {
        Box::pin(self.replace_sessions_impl(project_id, sessions, version, now))
    }

    fn sessions<'a>(
        &'a self,
        project_id: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, SessionSnapshot> {
        Box::pin(self.sessions_impl(project_id, limit))
    }

    fn session<'a>(
        &'a self,
        project_id: &'a str,
        graph_session_id: &'a GraphSessionId,
    ) -> StoreFuture<'a, Option<SessionRecord>> {
        Box::pin(async move {
            self.query_row(
                "SELECT graph_session_id, name, description, slug, version, status, synced_at, \
                 args_schema FROM graph_sessions WHERE project_id = $1 AND graph_session_id = $2",
                &[&project_id, &graph_session_id.as_str()],
                session_from_row,
            )
            .await
        })
    }

    fn insert_command(
        &self,
        command: CommandRecord,
        quota: QueueQuota,
    ) -> StoreFuture<'_, InsertOutcome> {
        Box::pin(self.insert_command_impl(command, quota))
    }

    fn command_by_key<'a>(
        &'a self,
        agent_id: &'a str,
        idempotency_key: &'a str,
    ) -> StoreFuture<'a, Option<CommandRecord>> {
        Box::pin(async move {
            self.query_row(
                &format!(
                    "SELECT {COMMAND_COLUMNS} FROM commands WHERE agent_id = $1 AND idempotency_key = $2"
                ),
                &[&agent_id, &idempotency_key],
                command_from_row,
            )
            .await
        })
    }

    fn command(&self, id: CommandId) -> StoreFuture<'_, Option<CommandRecord>> {
        Box::pin(async move {
            self.query_row(
                &format!("SELECT {COMMAND_COLUMNS} FROM commands WHERE id = $1"),
                &[&id.to_string()],
                command_from_row,
            )
            .await
        })
    }

    fn update_command<'a>(
        &'a self,
        from: &'a CommandRecord,
        next: &'a CommandRecord,
    ) -> StoreFuture<'a, bool> {
        Box::pin(self.update_command_impl(from, next))
    }

    fn cancel_damaged_command<'a>(
        &'a self,
        id: CommandId,
        owner_id: &'a str,
        error: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let changed = self
                .execute(
                    "UPDATE commands SET status = 'cancelled', cancel_requested = TRUE, error = $1, \
                     finished_at = $2, updated_at = $2, \
                     cancel_cause = 'owner_cancelled_console', end_cause = 'owner_cancelled_console' \
                     WHERE id = $3 AND status IN ('queued', 'running') \
                     AND project_id IN (SELECT id FROM projects WHERE owner_id = $4)",
                    &[&error, &now.unix_millis(), &id.to_string(), &owner_id],
                )
                .await?;
            Ok(changed == 1)
        })
    }

    fn touch_running(&self, id: CommandId, now: Timestamp) -> StoreFuture<'_, bool> {
        Box::pin(async move {
            let changed = self
                .execute(
                    "UPDATE commands SET last_seen_at = $1 WHERE id = $2 AND status = 'running'",
                    &[&now.unix_millis(), &id.to_string()],
                )
                .await?;
            Ok(changed == 1)
        })
    }

    fn queued_commands<'a>(
        &'a self,
        project_id: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Rows<CommandRecord>> {
        Box::pin(async move {
            let client = self.client().await?;
            let statement = prepared(
                &client,
                &format!(
                    "SELECT {COMMAND_COLUMNS} FROM commands \
                     WHERE project_id = $1 AND status = 'queued' \
                     ORDER BY created_at, seq LIMIT $2"
                ),
            )
            .await?;
            let rows = client
                .query(&statement, &[&project_id, &to_count(limit)])
                .await
                .map_err(backend)?;
            Rows::collect(rows.iter().map(command_from_row))
        })
    }

    fn fail_silent_runs<'a>(
        &'a self,
        cutoff: Timestamp,
        now: Timestamp,
        error: &'a str,
    ) -> StoreFuture<'a, Vec<CommandId>> {
        Box::pin(self.fail_silent_runs_impl(cutoff, now, error))
    }

    fn insert_chat_link(&self, link: ChatLinkRecord) -> StoreFuture<'_, ()> {
        Box::pin(self.insert_chat_link_impl(link))
    }

    fn chat_link<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<ChatLinkRecord>> {
        Box::pin(self.chat_link_impl(id))
    }

    fn set_event_subscription<'a>(&'a self, id: &'a str, active: bool) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let changed = self
                .execute(
                    "UPDATE chat_links SET event_subscription = $1 WHERE id = $2",
                    &[&active, &id],
                )
                .await?;
            Ok(changed == 1)
        })
    }

    fn insert_task(&self, task: TaskRecord) -> StoreFuture<'_, TaskInsertOutcome> {
        Box::pin(self.insert_task_impl(task))
    }

    fn task(&self, id: TaskId) -> StoreFuture<'_, Option<TaskRecord>> {
        Box::pin(self.task_impl(id))
    }

    fn open_tasks<'a>(
        &'a self,
        chat_link_id: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<TaskRecord>> {
        Box::pin(self.open_tasks_impl(chat_link_id, limit))
    }

    fn open_tasks_unless_due<'a>(
        &'a self,
        chat_link_id: &'a str,
        limit: usize,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<Vec<TaskRecord>>> {
        Box::pin(async move {
            if self.tasks_due_impl(now).await? {
                return Ok(None);
            }
            self.open_tasks_impl(chat_link_id, limit).await.map(Some)
        })
    }

    fn link_tasks<'a>(
        &'a self,
        chat_link_id: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<TaskRecord>> {
        Box::pin(self.link_tasks_impl(chat_link_id, limit))
    }

    fn claim_task(&self, attempt: ClaimAttempt) -> StoreFuture<'_, Option<TaskRecord>> {
        Box::pin(self.claim_task_impl(attempt))
    }

    fn claim_task_or_current(&self, attempt: ClaimAttempt) -> StoreFuture<'_, ClaimResult> {
        Box::pin(self.claim_task_or_current_impl(attempt))
    }

    fn claim_task_unconditionally(&self, attempt: ClaimAttempt) -> StoreFuture<'_, bool> {
        Box::pin(self.claim_task_unconditionally_impl(attempt))
    }

    fn update_task<'a>(
        &'a self,
        from: &'a TaskRecord,
        next: &'a TaskRecord,
    ) -> StoreFuture<'a, bool> {
        Box::pin(self.update_task_impl(from, next))
    }

    fn tasks_due(&self, now: Timestamp) -> StoreFuture<'_, bool> {
        Box::pin(self.tasks_due_impl(now))
    }

    fn open_counts(&self, online_since: Timestamp) -> StoreFuture<'_, OpenCounts> {
        Box::pin(async move {
            let row = self
                .client()
                .await?
                .query_one(crate::store::OPEN_COUNTS, &[&online_since.unix_millis()])
                .await
                .map_err(backend)?;
            let count = |i| row.get::<_, i64>(i).try_into().unwrap_or(0);
            Ok(OpenCounts {
                runs_queued: count(0),
                runs_running: count(1),
                tasks_queued: count(2),
                tasks_claimed: count(3),
                desktops_online: count(4),
                oldest_queued_at: row
                    .try_get::<_, Option<i64>>(5)
                    .map_err(backend)?
                    .map(Timestamp::from_unix_millis),
            })
        })
    }

    fn stats(&self) -> crate::store::StoreStats {
        self.pool_stats()
    }

    fn sweep_tasks(&self, now: Timestamp) -> StoreFuture<'_, SweepCounts> {
        Box::pin(self.sweep_tasks_impl(now))
    }

    fn insert_artifact(
        &self,
        artifact: ArtifactRecord,
        max_per_task: usize,
    ) -> StoreFuture<'_, ArtifactInsertOutcome> {
        Box::pin(self.insert_artifact_impl(artifact, max_per_task))
    }

    fn artifacts(&self, task_id: TaskId) -> StoreFuture<'_, Vec<ArtifactRecord>> {
        Box::pin(self.artifacts_impl(task_id))
    }

    fn project_commands(&self, query: CommandQuery) -> StoreFuture<'_, Rows<CommandRecord>> {
        Box::pin(self.project_commands_impl(query))
    }

    fn chat_links<'a>(&'a self, project_id: &'a str) -> StoreFuture<'a, Vec<ChatLinkRecord>> {
        Box::pin(self.chat_links_impl(project_id))
    }

    fn browser_sessions<'a>(
        &'a self,
        owner_id: &'a str,
        idle_before: Timestamp,
    ) -> StoreFuture<'a, Vec<BrowserSessionRecord>> {
        Box::pin(self.browser_sessions_impl(owner_id, idle_before))
    }

    fn end_browser_session<'a>(
        &'a self,
        id_hash: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, bool> {
        Box::pin(self.end_browser_session_impl(id_hash, now))
    }

    fn record_token_use<'a>(&'a self, token_id: &'a str, now: Timestamp) -> StoreFuture<'a, ()> {
        Box::pin(self.record_token_use_impl(token_id, now))
    }

    fn token_uses<'a>(&'a self, owner_id: &'a str) -> StoreFuture<'a, Vec<(String, Timestamp)>> {
        Box::pin(self.token_uses_impl(owner_id))
    }

    fn record_presence<'a>(
        &'a self,
        project_id: &'a str,
        seen_at: Timestamp,
        sync: Option<PresenceSync<'a>>,
    ) -> StoreFuture<'a, ()> {
        Box::pin(self.record_presence_impl(project_id, seen_at, sync))
    }

    fn presence<'a>(&'a self, project_id: &'a str) -> StoreFuture<'a, Option<PresenceRecord>> {
        Box::pin(self.presence_impl(project_id))
    }

    fn record_run_report<'a>(
        &'a self,
        id: CommandId,
        execution_id: &'a str,
        report: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, bool> {
        Box::pin(self.record_run_report_impl(id, execution_id, report, now))
    }
}
