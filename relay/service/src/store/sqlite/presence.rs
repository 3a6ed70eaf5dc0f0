//! The SQL of what the desktop tells about itself and its runs: when each project's desktop
//! was last heard from and what keeps it from running work, and the latest report on each
//! running run (what it waits for, how far it got), beside when its completion arrived.

use rusqlite::{OptionalExtension, params};

use super::{SqliteStore, backend};
use crate::store::{PresenceRecord, StoreFuture};
use relay_protocol::CommandId;
use relay_protocol::clock::Timestamp;

/// Presence, run reports and delivery times (migration 6).
pub(super) const MIGRATION: &str = r#"
CREATE TABLE desktop_presence (
    project_id TEXT PRIMARY KEY REFERENCES projects(id),
    seen_at INTEGER NOT NULL,
    problem TEXT
);
ALTER TABLE commands ADD COLUMN delivered_at INTEGER;
ALTER TABLE commands ADD COLUMN report TEXT;
"#;

impl SqliteStore {
    pub(super) fn record_presence_impl(
        &self,
        project_id: String,
        seen_at: Timestamp,
        problem: Option<Option<String>>,
    ) -> StoreFuture<'static, ()> {
        self.call(move |connection| {
            let (replace, problem) = match problem {
                Some(problem) => (true, problem),
                None => (false, None),
            };
            connection
                .execute(
                    "INSERT INTO desktop_presence (project_id, seen_at, problem) VALUES (?1, ?2, ?3) \
                     ON CONFLICT(project_id) DO UPDATE SET \
                     seen_at = max(seen_at, excluded.seen_at), \
                     problem = CASE WHEN ?4 THEN excluded.problem ELSE problem END",
                    params![project_id, seen_at.unix_millis(), problem, replace],
                )
                .map_err(backend)?;
            Ok(())
        })
    }

    pub(super) fn presence_impl(
        &self,
        project_id: String,
    ) -> StoreFuture<'static, Option<PresenceRecord>> {
        self.call(move |connection| {
            connection
                .prepare_cached(
                    "SELECT project_id, seen_at, problem FROM desktop_presence WHERE project_id = ?1",
                )
                .and_then(|mut statement| {
                    statement
                        .query_row([project_id], |row| {
                            Ok(PresenceRecord {
                                project_id: row.get(0)?,
                                seen_at: Timestamp::from_unix_millis(row.get(1)?),
                                problem: row.get(2)?,
                            })
                        })
                        .optional()
                })
                .map_err(backend)
        })
    }

    pub(super) fn record_run_report_impl(
        &self,
        id: CommandId,
        execution_id: String,
        report: String,
        now: Timestamp,
    ) -> StoreFuture<'static, bool> {
        self.call(move |connection| {
            let changed = connection
                .execute(
                    "UPDATE commands SET report = ?1, last_seen_at = max(coalesce(last_seen_at, 0), ?2) \
                     WHERE id = ?3 AND status = 'running' AND execution_id = ?4",
                    params![report, now.unix_millis(), id.to_string(), execution_id],
                )
                .map_err(backend)?;
            Ok(changed == 1)
        })
    }
}
