//! `ask` approvals waiting for, or answered by, the owner.

use super::*;

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
