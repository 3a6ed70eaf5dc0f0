//! The SQL of chat links, linked chat tasks and their artifacts.
//!
//! Every write that moves a task names the state it moves from in its `WHERE`, so two writers
//! that read the same row cannot both win: the claim is one conditional `UPDATE`, a submit is
//! fenced by the claim id and lease it was decided on, an artifact lands only under a live claim.

use relay_sqlite::CachedStatements as _;
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use super::{SqliteStore, backend, corrupt, in_row, ms, ts};
use crate::model::TaskId;
use crate::store::{
    ArtifactInsertOutcome, ArtifactRecord, ChatLinkRecord, ClaimAttempt, StoreError, StoreFuture,
    SweepCounts, TaskInsertOutcome, TaskRecord,
};
use relay_protocol::clock::Timestamp;

/// The chat task tables (migration 2).
pub(super) const MIGRATION: &str = r#"
CREATE TABLE chat_links (
    id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects(id),
    host TEXT NOT NULL CHECK (host IN ('claude', 'chatgpt', 'other')),
    event_subscription INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
);
CREATE INDEX chat_links_by_project ON chat_links(project_id);
CREATE TABLE chat_tasks (
    id TEXT PRIMARY KEY,
    chat_link_id TEXT NOT NULL REFERENCES chat_links(id),
    goal TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN
        ('queued', 'claimed', 'completed', 'failed', 'cancelled', 'expired')),
    claim_id TEXT,
    lease_until INTEGER,
    claimed_at INTEGER,
    result TEXT,
    result_hash TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    finished_at INTEGER,
    expires_at INTEGER NOT NULL
);
-- One task per (link, key): a double click collides here, not in app code.
CREATE UNIQUE INDEX chat_tasks_by_idempotency_key ON chat_tasks(chat_link_id, idempotency_key);
-- The chat's inbox (open tasks of one link, oldest first) and the owner's list (newest first).
CREATE INDEX chat_tasks_by_link_status ON chat_tasks(chat_link_id, status, created_at);
CREATE INDEX chat_tasks_by_link_age ON chat_tasks(chat_link_id, created_at);
-- The sweep's read-only guard probes these: one seek each, however much history there is.
CREATE INDEX chat_tasks_by_lease ON chat_tasks(status, lease_until);
CREATE INDEX chat_tasks_by_expiry ON chat_tasks(status, expires_at);
CREATE TABLE chat_task_artifacts (
    task_id TEXT NOT NULL REFERENCES chat_tasks(id),
    artifact_id TEXT NOT NULL,
    claim_id TEXT NOT NULL,
    name TEXT NOT NULL,
    mime TEXT NOT NULL,
    content TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (task_id, artifact_id)
);
"#;

const TASK_COLUMNS: &str = "id, chat_link_id, goal, idempotency_key, status, claim_id, \
    lease_until, claimed_at, result, result_hash, created_at, updated_at, finished_at, expires_at";

const ARTIFACT_COLUMNS: &str =
    "task_id, artifact_id, claim_id, name, mime, content, size_bytes, sha256, created_at";

/// The sweep's guard: is any claim's lease lapsed, or any open task overdue? Each arm is one
/// index seek (`chat_tasks_by_lease`, `chat_tasks_by_expiry`), and `LIMIT 1` stops at the first
/// hit, so the check costs the same with ten or ten million finished tasks.
pub(super) const DUE_GUARD: &str = "SELECT 1 FROM chat_tasks \
     WHERE status = 'claimed' AND lease_until <= ?1 \
     UNION ALL \
     SELECT 1 FROM chat_tasks \
     WHERE status IN ('queued', 'claimed') AND expires_at <= ?1 \
     LIMIT 1";

/// The set form of the `Expire` arm of `chat_tasks::machine::transition`.
const EXPIRE_OVERDUE: &str = "UPDATE chat_tasks SET status = 'expired', lease_until = NULL, \
     finished_at = ?1, updated_at = ?1 \
     WHERE status IN ('queued', 'claimed') AND expires_at <= ?1";

/// The set form of the `LeaseLapsed` arm of `chat_tasks::machine::transition`.
const REQUEUE_LAPSED: &str = "UPDATE chat_tasks SET status = 'queued', claim_id = NULL, \
     lease_until = NULL, claimed_at = NULL, updated_at = ?1 \
     WHERE status = 'claimed' AND lease_until <= ?1";

fn task_from_row(row: &Row<'_>) -> rusqlite::Result<TaskRecord> {
    let id: String = row.get(0)?;
    in_row("chat_tasks", &id, || {
        let status: String = row.get(4)?;
        Ok(TaskRecord {
            id: id.parse().map_err(|e| corrupt("id", e))?,
            chat_link_id: row.get(1)?,
            goal: row.get(2)?,
            idempotency_key: row.get(3)?,
            status: status.parse().map_err(|e| corrupt("status", e))?,
            claim_id: row.get(5)?,
            lease_until: ts(row.get(6)?),
            claimed_at: ts(row.get(7)?),
            result: row.get(8)?,
            result_hash: row.get(9)?,
            created_at: Timestamp::from_unix_millis(row.get(10)?),
            updated_at: Timestamp::from_unix_millis(row.get(11)?),
            finished_at: ts(row.get(12)?),
            expires_at: Timestamp::from_unix_millis(row.get(13)?),
        })
    })
}

pub(super) fn link_from_row(row: &Row<'_>) -> rusqlite::Result<ChatLinkRecord> {
    let key: String = row.get(0)?;
    in_row("chat_links", &key, || {
        let host: String = row.get(2)?;
        Ok(ChatLinkRecord {
            id: key.clone(),
            project_id: row.get(1)?,
            host: host.parse().map_err(|e| corrupt("host", e))?,
            event_subscription: row.get(3)?,
            created_at: Timestamp::from_unix_millis(row.get(4)?),
        })
    })
}

fn artifact_from_row(row: &Row<'_>) -> rusqlite::Result<ArtifactRecord> {
    let task_id: String = row.get(0)?;
    let artifact_id: String = row.get(1)?;
    in_row(
        "chat_task_artifacts",
        &format!("{task_id}/{artifact_id}"),
        || {
            let size: i64 = row.get(6)?;
            Ok(ArtifactRecord {
                task_id: task_id.parse().map_err(|e| corrupt("task_id", e))?,
                artifact_id: artifact_id.clone(),
                claim_id: row.get(2)?,
                name: row.get(3)?,
                mime: row.get(4)?,
                content: row.get(5)?,
                size_bytes: u64::try_from(size).map_err(|e| corrupt("size_bytes", e))?,
                sha256: row.get(7)?,
                created_at: Timestamp::from_unix_millis(row.get(8)?),
            })
        },
    )
}

fn insert_link_row(connection: &Connection, link: &ChatLinkRecord) -> rusqlite::Result<usize> {
    connection.execute_cached(
        "INSERT INTO chat_links (id, project_id, host, event_subscription, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            link.id,
            link.project_id,
            link.host.as_str(),
            link.event_subscription,
            link.created_at.unix_millis()
        ],
    )
}

fn insert_task_row(
    connection: &Connection,
    task: &TaskRecord,
    on_conflict: &str,
) -> rusqlite::Result<usize> {
    connection.execute_cached(
        &format!(
            "INSERT INTO chat_tasks ({TASK_COLUMNS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) {on_conflict}"
        ),
        params![
            task.id.to_string(),
            task.chat_link_id,
            task.goal,
            task.idempotency_key,
            task.status.as_str(),
            task.claim_id,
            ms(task.lease_until),
            ms(task.claimed_at),
            task.result,
            task.result_hash,
            task.created_at.unix_millis(),
            task.updated_at.unix_millis(),
            ms(task.finished_at),
            task.expires_at.unix_millis(),
        ],
    )
}

fn select_task(connection: &Connection, id: TaskId) -> rusqlite::Result<Option<TaskRecord>> {
    connection
        .query_row_cached(
            &format!("SELECT {TASK_COLUMNS} FROM chat_tasks WHERE id = ?1"),
            [id.to_string()],
            task_from_row,
        )
        .optional()
}

fn select_tasks(
    connection: &Connection,
    sql: &str,
    chat_link_id: &str,
    limit: usize,
) -> Result<Vec<TaskRecord>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    connection
        .prepare_cached(sql)
        .and_then(|mut statement| {
            statement
                .query_map(params![chat_link_id, limit], task_from_row)?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(backend)
}

fn select_open_tasks(
    connection: &Connection,
    chat_link_id: &str,
    limit: usize,
) -> Result<Vec<TaskRecord>, StoreError> {
    select_tasks(
        connection,
        &format!(
            "SELECT {TASK_COLUMNS} FROM chat_tasks \
             WHERE chat_link_id = ?1 AND status IN ('queued', 'claimed') \
             ORDER BY created_at, id LIMIT ?2"
        ),
        chat_link_id,
        limit,
    )
}

fn any_due(connection: &Connection, now: Timestamp) -> Result<bool, StoreError> {
    connection
        .prepare_cached(DUE_GUARD)
        .and_then(|mut statement| {
            statement
                .query_row([now.unix_millis()], |_| Ok(()))
                .optional()
        })
        .map(|hit| hit.is_some())
        .map_err(backend)
}

impl SqliteStore {
    pub(super) fn insert_chat_link_impl(&self, link: ChatLinkRecord) -> StoreFuture<'static, ()> {
        self.call(move |connection| {
            insert_link_row(connection, &link).map_err(backend)?;
            Ok(())
        })
    }

    pub(super) fn chat_link_impl(
        &self,
        id: String,
    ) -> StoreFuture<'static, Option<ChatLinkRecord>> {
        self.call(move |connection| {
            connection
                .prepare_cached(
                    "SELECT id, project_id, host, event_subscription, created_at \
                     FROM chat_links WHERE id = ?1",
                )
                .and_then(|mut statement| statement.query_row([id], link_from_row).optional())
                .map_err(backend)
        })
    }

    pub(super) fn set_event_subscription_impl(
        &self,
        id: String,
        active: bool,
    ) -> StoreFuture<'static, bool> {
        self.call(move |connection| {
            let changed = connection
                .execute_cached(
                    "UPDATE chat_links SET event_subscription = ?1 WHERE id = ?2",
                    params![active, id],
                )
                .map_err(backend)?;
            Ok(changed == 1)
        })
    }

    pub(super) fn insert_task_impl(
        &self,
        task: TaskRecord,
    ) -> StoreFuture<'static, TaskInsertOutcome> {
        self.call(move |connection| {
            let transaction = connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend)?;
            let inserted = insert_task_row(
                &transaction,
                &task,
                "ON CONFLICT(chat_link_id, idempotency_key) DO NOTHING",
            )
            .map_err(backend)?;
            let outcome = if inserted == 1 {
                TaskInsertOutcome::Created(task)
            } else {
                let existing = transaction
                    .query_row_cached(
                        &format!(
                            "SELECT {TASK_COLUMNS} FROM chat_tasks \
                             WHERE chat_link_id = ?1 AND idempotency_key = ?2"
                        ),
                        params![task.chat_link_id, task.idempotency_key],
                        task_from_row,
                    )
                    .map_err(backend)?;
                TaskInsertOutcome::Existing(existing)
            };
            transaction.commit().map_err(backend)?;
            Ok(outcome)
        })
    }

    pub(super) fn task_impl(&self, id: TaskId) -> StoreFuture<'static, Option<TaskRecord>> {
        self.call(move |connection| select_task(connection, id).map_err(backend))
    }

    pub(super) fn open_tasks_impl(
        &self,
        chat_link_id: String,
        limit: usize,
    ) -> StoreFuture<'static, Vec<TaskRecord>> {
        self.call(move |connection| select_open_tasks(connection, &chat_link_id, limit))
    }

    pub(super) fn open_tasks_unless_due_impl(
        &self,
        chat_link_id: String,
        limit: usize,
        now: Timestamp,
    ) -> StoreFuture<'static, Option<Vec<TaskRecord>>> {
        self.call(move |connection| {
            if any_due(connection, now)? {
                return Ok(None);
            }
            select_open_tasks(connection, &chat_link_id, limit).map(Some)
        })
    }

    pub(super) fn link_tasks_impl(
        &self,
        chat_link_id: String,
        limit: usize,
    ) -> StoreFuture<'static, Vec<TaskRecord>> {
        self.call(move |connection| {
            select_tasks(
                connection,
                &format!(
                    "SELECT {TASK_COLUMNS} FROM chat_tasks WHERE chat_link_id = ?1 \
                     ORDER BY created_at DESC, id DESC LIMIT ?2"
                ),
                &chat_link_id,
                limit,
            )
        })
    }

    pub(super) fn claim_task_impl(
        &self,
        attempt: ClaimAttempt,
    ) -> StoreFuture<'static, Option<TaskRecord>> {
        self.call(move |connection| {
            // The whole claim: of the claimers that read `queued`, exactly one matches here.
            connection
                .prepare_cached(&format!(
                    "UPDATE chat_tasks SET status = 'claimed', claim_id = ?3, lease_until = ?4, \
                     claimed_at = ?5, updated_at = ?5 \
                     WHERE id = ?1 AND chat_link_id = ?2 AND status = 'queued' \
                     AND expires_at > ?5 RETURNING {TASK_COLUMNS}"
                ))
                .and_then(|mut statement| {
                    statement
                        .query_row(
                            params![
                                attempt.task_id.to_string(),
                                attempt.chat_link_id,
                                attempt.claim_id,
                                ms(attempt.lease_until),
                                attempt.now.unix_millis(),
                            ],
                            task_from_row,
                        )
                        .optional()
                })
                .map_err(backend)
        })
    }

    pub(super) fn claim_task_unconditionally_impl(
        &self,
        attempt: ClaimAttempt,
    ) -> StoreFuture<'static, bool> {
        self.call(move |connection| {
            let changed = connection
                .execute_cached(
                    "UPDATE chat_tasks SET status = 'claimed', claim_id = ?2, lease_until = ?3, \
                     claimed_at = ?4, updated_at = ?4 WHERE id = ?1",
                    params![
                        attempt.task_id.to_string(),
                        attempt.claim_id,
                        ms(attempt.lease_until),
                        attempt.now.unix_millis(),
                    ],
                )
                .map_err(backend)?;
            Ok(changed == 1)
        })
    }

    pub(super) fn update_task_impl(
        &self,
        from: &TaskRecord,
        next: &TaskRecord,
    ) -> StoreFuture<'static, bool> {
        let from = (
            from.id.to_string(),
            from.status,
            from.claim_id.clone(),
            ms(from.lease_until),
        );
        let next = next.clone();
        self.call(move |connection| {
            let (id, status, claim_id, lease_until) = from;
            let changed = connection
                .prepare_cached(
                    "UPDATE chat_tasks SET status = ?1, claim_id = ?2, lease_until = ?3, \
                     claimed_at = ?4, result = ?5, result_hash = ?6, updated_at = ?7, \
                     finished_at = ?8 \
                     WHERE id = ?9 AND status = ?10 AND claim_id IS ?11 AND lease_until IS ?12",
                )
                .and_then(|mut statement| {
                    statement.execute(params![
                        next.status.as_str(),
                        next.claim_id,
                        ms(next.lease_until),
                        ms(next.claimed_at),
                        next.result,
                        next.result_hash,
                        next.updated_at.unix_millis(),
                        ms(next.finished_at),
                        id,
                        status.as_str(),
                        claim_id,
                        lease_until,
                    ])
                })
                .map_err(backend)?;
            Ok(changed == 1)
        })
    }

    pub(super) fn tasks_due_impl(&self, now: Timestamp) -> StoreFuture<'static, bool> {
        self.call(move |connection| any_due(connection, now))
    }

    pub(super) fn sweep_tasks_impl(&self, now: Timestamp) -> StoreFuture<'static, SweepCounts> {
        self.call(move |connection| {
            let transaction = connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend)?;
            // Expiry first: a claim that is both lapsed and a day old ends as `expired`, not
            // back in the queue.
            let expired = transaction
                .execute_cached(EXPIRE_OVERDUE, [now.unix_millis()])
                .map_err(backend)?;
            let requeued = transaction
                .execute_cached(REQUEUE_LAPSED, [now.unix_millis()])
                .map_err(backend)?;
            transaction.commit().map_err(backend)?;
            Ok(SweepCounts { requeued, expired })
        })
    }

    pub(super) fn insert_artifact_impl(
        &self,
        artifact: ArtifactRecord,
        max_per_task: usize,
    ) -> StoreFuture<'static, ArtifactInsertOutcome> {
        self.call(move |connection| {
            let size = i64::try_from(artifact.size_bytes)
                .map_err(|_| StoreError::Invalid("the artifact is too large to store".into()))?;
            let max = i64::try_from(max_per_task).unwrap_or(i64::MAX);
            // One statement: the claim check, the count limit and the insert cannot be split
            // by a concurrent re-claim or upload.
            let inserted = connection
                .execute_cached(
                    &format!(
                        "INSERT INTO chat_task_artifacts ({ARTIFACT_COLUMNS}) \
                         SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9 \
                         WHERE EXISTS (SELECT 1 FROM chat_tasks WHERE id = ?1 \
                             AND status = 'claimed' AND claim_id = ?3 \
                             AND (lease_until IS NULL OR lease_until > ?9)) \
                         AND (SELECT count(*) FROM chat_task_artifacts WHERE task_id = ?1) < ?10 \
                         ON CONFLICT(task_id, artifact_id) DO NOTHING"
                    ),
                    params![
                        artifact.task_id.to_string(),
                        artifact.artifact_id,
                        artifact.claim_id,
                        artifact.name,
                        artifact.mime,
                        artifact.content,
                        size,
                        artifact.sha256,
                        artifact.created_at.unix_millis(),
                        max,
                    ],
                )
                .map_err(backend)?;
            if inserted == 1 {
                return Ok(ArtifactInsertOutcome::Stored);
            }
            let existing = connection
                .query_row_cached(
                    &format!(
                        "SELECT {ARTIFACT_COLUMNS} FROM chat_task_artifacts \
                         WHERE task_id = ?1 AND artifact_id = ?2"
                    ),
                    params![artifact.task_id.to_string(), artifact.artifact_id],
                    artifact_from_row,
                )
                .optional()
                .map_err(backend)?;
            Ok(match existing {
                Some(existing) => ArtifactInsertOutcome::Existing(existing),
                None => ArtifactInsertOutcome::Refused,
            })
        })
    }

    pub(super) fn artifacts_impl(
        &self,
        task_id: TaskId,
    ) -> StoreFuture<'static, Vec<ArtifactRecord>> {
        self.call(move |connection| {
            connection
                .prepare_cached(&format!(
                    "SELECT {ARTIFACT_COLUMNS} FROM chat_task_artifacts WHERE task_id = ?1 \
                     ORDER BY created_at, artifact_id"
                ))
                .and_then(|mut statement| {
                    statement
                        .query_map([task_id.to_string()], artifact_from_row)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(backend)
        })
    }

    /// Stores `links` and `tasks` as they are, in one transaction: for seeding history (the
    /// empty-poll benchmark) and imports. Fails on any duplicate.
    pub async fn import_chat_history(
        &self,
        links: Vec<ChatLinkRecord>,
        tasks: Vec<TaskRecord>,
    ) -> Result<(), StoreError> {
        self.call(move |connection| {
            let transaction = connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend)?;
            for link in &links {
                insert_link_row(&transaction, link).map_err(backend)?;
            }
            for task in &tasks {
                insert_task_row(&transaction, task, "").map_err(backend)?;
            }
            transaction.commit().map_err(backend)
        })
        .await
    }

    /// The query plan SQLite chose for the sweep's guard, one line per step (for tests that
    /// pin it to index seeks).
    pub async fn due_guard_plan(&self) -> Result<Vec<String>, StoreError> {
        self.call(|connection| {
            connection
                .prepare_cached(&format!("EXPLAIN QUERY PLAN {DUE_GUARD}"))
                .and_then(|mut statement| {
                    statement
                        .query_map([0_i64], |row| row.get::<_, String>(3))?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(backend)
        })
        .await
    }
}
