//! What the desktop tells about itself and its runs, in PostgreSQL: when each project's
//! desktop was last heard from and what keeps it from running work, and the latest report on
//! each running run, beside when its completion arrived.

use super::PostgresStore;
use super::core::{at, get};
use crate::store::{PresenceRecord, PresenceSync, StoreError};
use relay_protocol::CommandId;
use relay_protocol::clock::Timestamp;

/// Presence, run reports and delivery times (migration 5).
pub(super) const MIGRATION: &str = r#"
CREATE TABLE desktop_presence (
    project_id TEXT PRIMARY KEY REFERENCES projects(id),
    seen_at BIGINT NOT NULL,
    problem TEXT
);
ALTER TABLE commands ADD COLUMN delivered_at BIGINT;
ALTER TABLE commands ADD COLUMN report TEXT;
"#;

/// Whether each project's desktop long-polls (migration 8).
pub(super) const LONG_POLLS_MIGRATION: &str = r#"
ALTER TABLE desktop_presence ADD COLUMN long_polls BOOLEAN NOT NULL DEFAULT FALSE;
"#;

impl PostgresStore {
    pub(super) async fn record_presence_impl(
        &self,
        project_id: &str,
        seen_at: Timestamp,
        sync: Option<PresenceSync<'_>>,
    ) -> Result<(), StoreError> {
        let (replace, problem, long_polls) = match sync {
            Some(sync) => (true, sync.problem, sync.long_polls),
            None => (false, None, false),
        };
        self.execute(
            "INSERT INTO desktop_presence (project_id, seen_at, problem, long_polls) \
             VALUES ($1, $2, $3, $5) \
             ON CONFLICT (project_id) DO UPDATE SET \
             seen_at = GREATEST(desktop_presence.seen_at, excluded.seen_at), \
             problem = CASE WHEN $4 THEN excluded.problem ELSE desktop_presence.problem END, \
             long_polls = CASE WHEN $4 THEN excluded.long_polls ELSE desktop_presence.long_polls END",
            &[&project_id, &seen_at.unix_millis(), &problem, &replace, &long_polls],
        )
        .await?;
        Ok(())
    }

    pub(super) async fn presence_impl(
        &self,
        project_id: &str,
    ) -> Result<Option<PresenceRecord>, StoreError> {
        self.query_row(
            "SELECT project_id, seen_at, problem, long_polls FROM desktop_presence \
             WHERE project_id = $1",
            &[&project_id],
            |row| {
                Ok(PresenceRecord {
                    project_id: get(row, 0)?,
                    seen_at: at(row, 1)?,
                    problem: get(row, 2)?,
                    long_polls: get(row, 3)?,
                })
            },
        )
        .await
    }

    pub(super) async fn record_run_report_impl(
        &self,
        id: CommandId,
        execution_id: &str,
        report: &str,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let changed = self
            .execute(
                "UPDATE commands SET report = $1, \
                 last_seen_at = GREATEST(COALESCE(last_seen_at, 0), $2) \
                 WHERE id = $3 AND status = 'running' AND execution_id = $4",
                &[&report, &now.unix_millis(), &id.to_string(), &execution_id],
            )
            .await?;
        Ok(changed == 1)
    }
}
