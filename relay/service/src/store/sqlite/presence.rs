//! The SQL of what the desktop tells about itself and its runs: when each project's desktop
//! was last heard from and what keeps it from running work, and the latest report on each
//! running run (what it waits for, how far it got), beside when its completion arrived.

use relay_sqlite::CachedStatements as _;
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

/// Whether each project's desktop long-polls (migration 9).
pub(super) const LONG_POLLS_MIGRATION: &str = r#"
ALTER TABLE desktop_presence ADD COLUMN long_polls INTEGER NOT NULL DEFAULT 0;
"#;

impl SqliteStore {
    pub(super) fn record_presence_impl(
        &self,
        project_id: String,
        seen_at: Timestamp,
        sync: Option<(Option<String>, bool)>,
    ) -> StoreFuture<'static, ()> {
        self.call(move |connection| {
            let (replace, problem, long_polls) = match sync {
                Some((problem, long_polls)) => (true, problem, long_polls),
                None => (false, None, false),
            };
            connection
                .execute_cached(
                    "INSERT INTO desktop_presence (project_id, seen_at, problem, long_polls) \
                     VALUES (?1, ?2, ?3, ?5) \
                     ON CONFLICT(project_id) DO UPDATE SET \
                     seen_at = max(seen_at, excluded.seen_at), \
                     problem = CASE WHEN ?4 THEN excluded.problem ELSE problem END, \
                     long_polls = CASE WHEN ?4 THEN excluded.long_polls ELSE long_polls END",
                    params![
                        project_id,
                        seen_at.unix_millis(),
                        problem,
                        replace,
                        long_polls
                    ],
                )
                .map_err(backend)?;
            Ok(())
        })
    }

    pub(super) fn presence_impl(
        &self,
        project_id: String,
    ) -> StoreFuture<'static, Option<PresenceRecord>> {
        // Read on the calling task: every look at a run (`get_graph_run`) asks it.
        self.read(move |connection| {
            connection
                .prepare_cached(
                    "SELECT project_id, seen_at, problem, long_polls FROM desktop_presence \
                     WHERE project_id = ?1",
                )
                .and_then(|mut statement| {
                    statement
                        .query_row([&project_id], |row| {
                            Ok(PresenceRecord {
                                project_id: row.get(0)?,
                                seen_at: Timestamp::from_unix_millis(row.get(1)?),
                                problem: row.get(2)?,
                                long_polls: row.get(3)?,
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
                .execute_cached(
                    "UPDATE commands SET report = ?1, last_seen_at = max(coalesce(last_seen_at, 0), ?2) \
                     WHERE id = ?3 AND status = 'running' AND execution_id = ?4",
                    params![report, now.unix_millis(), id.to_string(), execution_id],
                )
                .map_err(backend)?;
            Ok(changed == 1)
        })
    }
}
