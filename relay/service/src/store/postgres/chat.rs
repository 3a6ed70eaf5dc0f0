//! Chat links, linked chat tasks and their artifacts in PostgreSQL: the claim is one
//! conditional `UPDATE`, submits are fenced by claim id and lease, and an artifact lands only
//! under a live claim and within its task's limit (the task's row lock makes the count and the
//! insert one step).

use tokio_postgres::Row;

use super::core::{at, at_opt, corrupt, get, in_row, ms};
use super::{PostgresStore, backend};
use crate::model::TaskId;
use crate::store::{
    ArtifactInsertOutcome, ArtifactRecord, ChatLinkRecord, ClaimAttempt, ClaimResult, StoreError,
    SweepCounts, TaskInsertOutcome, TaskRecord,
};
use relay_protocol::clock::Timestamp;

/// The chat task tables (migration 2).
pub(super) const MIGRATION: &str = r#"
CREATE TABLE chat_links (
    id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects(id),
    host TEXT NOT NULL CHECK (host IN ('claude', 'chatgpt', 'other')),
    event_subscription BOOLEAN NOT NULL DEFAULT FALSE,
    created_at BIGINT NOT NULL
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
    lease_until BIGINT,
    claimed_at BIGINT,
    result TEXT,
    result_hash TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    finished_at BIGINT,
    expires_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX chat_tasks_by_idempotency_key ON chat_tasks(chat_link_id, idempotency_key);
CREATE INDEX chat_tasks_by_link_status ON chat_tasks(chat_link_id, status, created_at);
CREATE INDEX chat_tasks_by_link_age ON chat_tasks(chat_link_id, created_at);
CREATE INDEX chat_tasks_by_lease ON chat_tasks(status, lease_until);
CREATE INDEX chat_tasks_by_expiry ON chat_tasks(status, expires_at);
CREATE TABLE chat_task_artifacts (
    task_id TEXT NOT NULL REFERENCES chat_tasks(id),
    artifact_id TEXT NOT NULL,
    claim_id TEXT NOT NULL,
    name TEXT NOT NULL,
    mime TEXT NOT NULL,
    content TEXT NOT NULL,
    size_bytes BIGINT NOT NULL,
    sha256 TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (task_id, artifact_id)
);
"#;

const TASK_COLUMNS: &str = "id, chat_link_id, goal, idempotency_key, status, claim_id, \
    lease_until, claimed_at, result, result_hash, created_at, updated_at, finished_at, expires_at";

const ARTIFACT_COLUMNS: &str =
    "task_id, artifact_id, claim_id, name, mime, content, size_bytes, sha256, created_at";

/// Is any claim's lease lapsed, or any open task overdue? One index seek per arm.
const DUE_GUARD: &str = "SELECT 1 FROM chat_tasks WHERE status = 'claimed' AND lease_until <= $1 \
     UNION ALL \
     SELECT 1 FROM chat_tasks WHERE status IN ('queued', 'claimed') AND expires_at <= $1 \
     LIMIT 1";

fn task_from_row(row: &Row) -> Result<TaskRecord, StoreError> {
    let id: String = get(row, 0)?;
    in_row("chat_tasks", &id, || {
        let status: String = get(row, 4)?;
        Ok(TaskRecord {
            id: id.parse().map_err(|e| corrupt("id", e))?,
            chat_link_id: get(row, 1)?,
            goal: get(row, 2)?,
            idempotency_key: get(row, 3)?,
            status: status.parse().map_err(|e| corrupt("status", e))?,
            claim_id: get(row, 5)?,
            lease_until: at_opt(row, 6)?,
            claimed_at: at_opt(row, 7)?,
            result: get(row, 8)?,
            result_hash: get(row, 9)?,
            created_at: at(row, 10)?,
            updated_at: at(row, 11)?,
            finished_at: at_opt(row, 12)?,
            expires_at: at(row, 13)?,
        })
    })
}

pub(super) fn link_from_row(row: &Row) -> Result<ChatLinkRecord, StoreError> {
    let key: String = get(row, 0)?;
    in_row("chat_links", &key, || {
        let host: String = get(row, 2)?;
        Ok(ChatLinkRecord {
            id: key.clone(),
            project_id: get(row, 1)?,
            host: host.parse().map_err(|e| corrupt("host", e))?,
            event_subscription: get(row, 3)?,
            created_at: at(row, 4)?,
        })
    })
}

fn artifact_from_row(row: &Row) -> Result<ArtifactRecord, StoreError> {
    let task_id: String = get(row, 0)?;
    let artifact_id: String = get(row, 1)?;
    in_row(
        "chat_task_artifacts",
        &format!("{task_id}/{artifact_id}"),
        || {
            let size: i64 = get(row, 6)?;
            Ok(ArtifactRecord {
                task_id: task_id.parse().map_err(|e| corrupt("task_id", e))?,
                artifact_id: artifact_id.clone(),
                claim_id: get(row, 2)?,
                name: get(row, 3)?,
                mime: get(row, 4)?,
                content: get(row, 5)?,
                size_bytes: u64::try_from(size).map_err(|e| corrupt("size_bytes", e))?,
                sha256: get(row, 7)?,
                created_at: at(row, 8)?,
            })
        },
    )
}

fn limit(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl PostgresStore {
    pub(super) async fn insert_chat_link_impl(
        &self,
        link: ChatLinkRecord,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO chat_links (id, project_id, host, event_subscription, created_at) \
             VALUES ($1, $2, $3, $4, $5)",
            &[
                &link.id,
                &link.project_id,
                &link.host.as_str(),
                &link.event_subscription,
                &link.created_at.unix_millis(),
            ],
        )
        .await?;
        Ok(())
    }

    pub(super) async fn chat_link_impl(
        &self,
        id: &str,
    ) -> Result<Option<ChatLinkRecord>, StoreError> {
        self.query_row(
            "SELECT id, project_id, host, event_subscription, created_at FROM chat_links WHERE id = $1",
            &[&id],
            link_from_row,
        )
        .await
    }

    pub(super) async fn insert_task_impl(
        &self,
        task: TaskRecord,
    ) -> Result<TaskInsertOutcome, StoreError> {
        let inserted = self
            .execute(
                &format!(
                    "INSERT INTO chat_tasks ({TASK_COLUMNS}) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
                     ON CONFLICT (chat_link_id, idempotency_key) DO NOTHING"
                ),
                &[
                    &task.id.to_string(),
                    &task.chat_link_id,
                    &task.goal,
                    &task.idempotency_key,
                    &task.status.as_str(),
                    &task.claim_id,
                    &ms(task.lease_until),
                    &ms(task.claimed_at),
                    &task.result,
                    &task.result_hash,
                    &task.created_at.unix_millis(),
                    &task.updated_at.unix_millis(),
                    &ms(task.finished_at),
                    &task.expires_at.unix_millis(),
                ],
            )
            .await?;
        if inserted == 1 {
            return Ok(TaskInsertOutcome::Created(task));
        }
        // The winner committed before ON CONFLICT let this insert go: a new statement sees it.
        let existing = self
            .query_row(
                &format!(
                    "SELECT {TASK_COLUMNS} FROM chat_tasks WHERE chat_link_id = $1 AND idempotency_key = $2"
                ),
                &[&task.chat_link_id, &task.idempotency_key],
                task_from_row,
            )
            .await?
            .ok_or(StoreError::Inconsistent("the task of this key vanished"))?;
        Ok(TaskInsertOutcome::Existing(existing))
    }

    pub(super) async fn task_impl(&self, id: TaskId) -> Result<Option<TaskRecord>, StoreError> {
        self.query_row(
            &format!("SELECT {TASK_COLUMNS} FROM chat_tasks WHERE id = $1"),
            &[&id.to_string()],
            task_from_row,
        )
        .await
    }

    async fn tasks(
        &self,
        sql: &str,
        chat_link_id: &str,
        count: usize,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let rows = self
            .client()
            .await?
            .query(sql, &[&chat_link_id, &limit(count)])
            .await
            .map_err(backend)?;
        rows.iter().map(task_from_row).collect()
    }

    pub(super) async fn open_tasks_impl(
        &self,
        chat_link_id: &str,
        count: usize,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        self.tasks(
            &format!(
                "SELECT {TASK_COLUMNS} FROM chat_tasks \
                 WHERE chat_link_id = $1 AND status IN ('queued', 'claimed') \
                 ORDER BY created_at, id LIMIT $2"
            ),
            chat_link_id,
            count,
        )
        .await
    }

    pub(super) async fn link_tasks_impl(
        &self,
        chat_link_id: &str,
        count: usize,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        self.tasks(
            &format!(
                "SELECT {TASK_COLUMNS} FROM chat_tasks WHERE chat_link_id = $1 \
                 ORDER BY created_at DESC, id DESC LIMIT $2"
            ),
            chat_link_id,
            count,
        )
        .await
    }

    pub(super) async fn tasks_due_impl(&self, now: Timestamp) -> Result<bool, StoreError> {
        let row = self
            .client()
            .await?
            .query_opt(DUE_GUARD, &[&now.unix_millis()])
            .await
            .map_err(backend)?;
        Ok(row.is_some())
    }

    pub(super) async fn claim_task_impl(
        &self,
        attempt: ClaimAttempt,
    ) -> Result<Option<TaskRecord>, StoreError> {
        // The whole claim: of the claimers that read `queued`, exactly one matches here.
        self.query_row(
            &format!(
                "UPDATE chat_tasks SET status = 'claimed', claim_id = $3, lease_until = $4, \
                 claimed_at = $5, updated_at = $5 \
                 WHERE id = $1 AND chat_link_id = $2 AND status = 'queued' AND expires_at > $5 \
                 RETURNING {TASK_COLUMNS}"
            ),
            &[
                &attempt.task_id.to_string(),
                &attempt.chat_link_id,
                &attempt.claim_id,
                &ms(attempt.lease_until),
                &attempt.now.unix_millis(),
            ],
            task_from_row,
        )
        .await
    }

    /// The claim and, when it matched nothing, the stored row, in one statement (one round
    /// trip instead of two for every loser). The fallback `SELECT` reads the statement's
    /// snapshot: if the `UPDATE` waited for a concurrent claim's row lock, that read still
    /// says `queued` (the caller reads again); the `UPDATE` itself re-checks its `WHERE` on
    /// the committed row, so it never claims over the other claim.
    pub(super) async fn claim_task_or_current_impl(
        &self,
        attempt: ClaimAttempt,
    ) -> Result<ClaimResult, StoreError> {
        let row = self
            .query_row(
                &format!(
                    "WITH claimed AS (UPDATE chat_tasks SET status = 'claimed', claim_id = $3, \
                     lease_until = $4, claimed_at = $5, updated_at = $5 \
                     WHERE id = $1 AND chat_link_id = $2 AND status = 'queued' \
                     AND expires_at > $5 RETURNING {TASK_COLUMNS}) \
                     SELECT {TASK_COLUMNS}, TRUE FROM claimed \
                     UNION ALL \
                     SELECT {TASK_COLUMNS}, FALSE FROM chat_tasks \
                     WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM claimed)"
                ),
                &[
                    &attempt.task_id.to_string(),
                    &attempt.chat_link_id,
                    &attempt.claim_id,
                    &ms(attempt.lease_until),
                    &attempt.now.unix_millis(),
                ],
                |row| Ok((task_from_row(row)?, get::<bool>(row, 14)?)),
            )
            .await?;
        Ok(match row {
            Some((task, true)) => ClaimResult::Claimed(task),
            Some((task, false)) => ClaimResult::NotClaimed(Some(task)),
            None => ClaimResult::NotClaimed(None),
        })
    }

    pub(super) async fn claim_task_unconditionally_impl(
        &self,
        attempt: ClaimAttempt,
    ) -> Result<bool, StoreError> {
        let changed = self
            .execute(
                "UPDATE chat_tasks SET status = 'claimed', claim_id = $2, lease_until = $3, \
                 claimed_at = $4, updated_at = $4 WHERE id = $1",
                &[
                    &attempt.task_id.to_string(),
                    &attempt.claim_id,
                    &ms(attempt.lease_until),
                    &attempt.now.unix_millis(),
                ],
            )
            .await?;
        Ok(changed == 1)
    }

    pub(super) async fn update_task_impl(
        &self,
        from: &TaskRecord,
        next: &TaskRecord,
    ) -> Result<bool, StoreError> {
        let changed = self
            .execute(
                "UPDATE chat_tasks SET status = $1, claim_id = $2, lease_until = $3, \
                 claimed_at = $4, result = $5, result_hash = $6, updated_at = $7, finished_at = $8 \
                 WHERE id = $9 AND status = $10 AND claim_id IS NOT DISTINCT FROM $11 \
                 AND lease_until IS NOT DISTINCT FROM $12",
                &[
                    &next.status.as_str(),
                    &next.claim_id,
                    &ms(next.lease_until),
                    &ms(next.claimed_at),
                    &next.result,
                    &next.result_hash,
                    &next.updated_at.unix_millis(),
                    &ms(next.finished_at),
                    &from.id.to_string(),
                    &from.status.as_str(),
                    &from.claim_id,
                    &ms(from.lease_until),
                ],
            )
            .await?;
        Ok(changed == 1)
    }

    pub(super) async fn sweep_tasks_impl(&self, now: Timestamp) -> Result<SweepCounts, StoreError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(backend)?;
        // Expiry first: a claim that is both lapsed and a day old ends as `expired`.
        let expired = transaction
            .execute(
                "UPDATE chat_tasks SET status = 'expired', lease_until = NULL, finished_at = $1, \
                 updated_at = $1 WHERE status IN ('queued', 'claimed') AND expires_at <= $1",
                &[&now.unix_millis()],
            )
            .await
            .map_err(backend)?;
        let requeued = transaction
            .execute(
                "UPDATE chat_tasks SET status = 'queued', claim_id = NULL, lease_until = NULL, \
                 claimed_at = NULL, updated_at = $1 WHERE status = 'claimed' AND lease_until <= $1",
                &[&now.unix_millis()],
            )
            .await
            .map_err(backend)?;
        transaction.commit().await.map_err(backend)?;
        Ok(SweepCounts {
            requeued: usize::try_from(requeued).unwrap_or(usize::MAX),
            expired: usize::try_from(expired).unwrap_or(usize::MAX),
        })
    }

    pub(super) async fn insert_artifact_impl(
        &self,
        artifact: ArtifactRecord,
        max_per_task: usize,
    ) -> Result<ArtifactInsertOutcome, StoreError> {
        let size = i64::try_from(artifact.size_bytes)
            .map_err(|_| StoreError::Invalid("the artifact is too large to store".into()))?;
        let task_id = artifact.task_id.to_string();
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(backend)?;
        // The task's row lock: the claim check, the count and the insert are one step against
        // a concurrent upload or re-claim.
        let live = transaction
            .query_opt(
                "SELECT 1 FROM chat_tasks WHERE id = $1 AND status = 'claimed' AND claim_id = $2 \
                 AND (lease_until IS NULL OR lease_until > $3) FOR UPDATE",
                &[
                    &task_id,
                    &artifact.claim_id,
                    &artifact.created_at.unix_millis(),
                ],
            )
            .await
            .map_err(backend)?
            .is_some();
        let existing = transaction
            .query_opt(
                &format!(
                    "SELECT {ARTIFACT_COLUMNS} FROM chat_task_artifacts WHERE task_id = $1 AND artifact_id = $2"
                ),
                &[&task_id, &artifact.artifact_id],
            )
            .await
            .map_err(backend)?;
        if let Some(row) = existing {
            return Ok(ArtifactInsertOutcome::Existing(artifact_from_row(&row)?));
        }
        if !live {
            return Ok(ArtifactInsertOutcome::Refused);
        }
        let count_row = transaction
            .query_one(
                "SELECT count(*) FROM chat_task_artifacts WHERE task_id = $1",
                &[&task_id],
            )
            .await
            .map_err(backend)?;
        if get::<i64>(&count_row, 0)? >= limit(max_per_task) {
            return Ok(ArtifactInsertOutcome::Refused);
        }
        transaction
            .execute(
                &format!(
                    "INSERT INTO chat_task_artifacts ({ARTIFACT_COLUMNS}) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
                ),
                &[
                    &task_id,
                    &artifact.artifact_id,
                    &artifact.claim_id,
                    &artifact.name,
                    &artifact.mime,
                    &artifact.content,
                    &size,
                    &artifact.sha256,
                    &artifact.created_at.unix_millis(),
                ],
            )
            .await
            .map_err(backend)?;
        transaction.commit().await.map_err(backend)?;
        Ok(ArtifactInsertOutcome::Stored)
    }

    pub(super) async fn artifacts_impl(
        &self,
        task_id: TaskId,
    ) -> Result<Vec<ArtifactRecord>, StoreError> {
        let rows = self
            .client()
            .await?
            .query(
                &format!(
                    "SELECT {ARTIFACT_COLUMNS} FROM chat_task_artifacts WHERE task_id = $1 \
                     ORDER BY created_at, artifact_id"
                ),
                &[&task_id.to_string()],
            )
            .await
            .map_err(backend)?;
        rows.iter().map(artifact_from_row).collect()
    }
}
