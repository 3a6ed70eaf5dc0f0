//! `ask` approvals waiting for, or answered by, the owner.

use super::*;

/// Pending approvals.
impl DesktopState {
    /// Records a question to the owner (with no deadline on record).
    pub fn ask(
        &self,
        id: &str,
        execution_id: &str,
        tool: &str,
        args: &str,
        now: Timestamp,
    ) -> Result<(), StateError> {
        self.ask_until(id, execution_id, tool, args, now, None)
    }

    /// Records a question to the owner that the run stops waiting for at `deadline`.
    pub fn ask_until(
        &self,
        id: &str,
        execution_id: &str,
        tool: &str,
        args: &str,
        now: Timestamp,
        deadline: Option<Timestamp>,
    ) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute_cached(
                "INSERT INTO approvals (id, execution_id, tool, args, status, created_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, 'pending', ?5, ?6)",
                params![
                    id,
                    execution_id,
                    tool,
                    args,
                    now.unix_millis(),
                    deadline.map(Timestamp::unix_millis)
                ],
            )?;
            Ok(())
        })
    }

    /// The status of an approval.
    pub fn approval_status(&self, id: &str) -> Result<Option<ApprovalStatus>, StateError> {
        self.with_sync(|conn| {
            Ok(conn
                .query_row_cached(
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
            let changed = conn.execute_cached(
                "UPDATE approvals SET status = ?2, decided_at = ?3 WHERE id = ?1 AND status = 'pending'",
                params![id, decision.as_str(), now.unix_millis()],
            )?;
            Ok(changed == 1)
        })
    }

    /// Approvals, newest first, each with the graph, project and agent of the run asking;
    /// only pending ones unless `all`.
    pub fn approvals(&self, all: bool) -> Result<Vec<ApprovalRow>, StateError> {
        self.with_sync(|conn| {
            let filter = if all {
                ""
            } else {
                "WHERE a.status = 'pending'"
            };
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT a.id, a.execution_id, a.tool, a.args, a.status, a.created_at, a.expires_at,
                        h.slug, h.project_id, h.agent_id, h.agent_name
                 FROM approvals a LEFT JOIN history h ON h.execution_id = a.execution_id {filter}
                 ORDER BY a.created_at DESC LIMIT 1000"
            ))?;
            let rows = stmt.query_map([], |row| {
                Ok(ApprovalRow {
                    id: row.get(0)?,
                    execution_id: row.get(1)?,
                    tool: row.get(2)?,
                    args: row.get(3)?,
                    status: row.get(4)?,
                    created_at: row.get(5)?,
                    expires_at: row.get(6)?,
                    slug: row.get(7)?,
                    project_id: row.get(8)?,
                    agent_id: row.get(9)?,
                    agent_name: row.get(10)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}
