//! What outlives a stopped relay: the tokens a run spent so far (written as they grow, so a
//! crash still reports them) and approvals whose run is no longer live.

use super::*;

/// Token use as it grows, and approvals of runs that ended.
impl DesktopState {
    /// Records the tokens a running execution has spent so far.
    pub fn record_tokens(&self, execution_id: &str, tokens: u64) -> Result<(), StateError> {
        let tokens = i64::try_from(tokens).unwrap_or(i64::MAX);
        self.with_sync(|conn| {
            conn.execute_cached(
                "UPDATE history SET total_tokens = ?2 WHERE execution_id = ?1 AND status = 'running'",
                params![execution_id, tokens],
            )?;
            Ok(())
        })
    }

    /// Records the tokens and the cost a running execution has spent so far (a relay killed
    /// mid-run reports both at its next start).
    pub fn record_spent(
        &self,
        execution_id: &str,
        tokens: u64,
        cost: f64,
    ) -> Result<(), StateError> {
        let tokens = i64::try_from(tokens).unwrap_or(i64::MAX);
        let cost = if cost.is_finite() && cost > 0.0 {
            cost
        } else {
            0.0
        };
        self.with_sync(|conn| {
            conn.execute_cached(
                "UPDATE history SET total_tokens = ?2, reported_cost = ?3
                 WHERE execution_id = ?1 AND status = 'running'",
                params![execution_id, tokens, cost],
            )?;
            Ok(())
        })
    }

    /// The tokens and cost recorded for an execution (0 when it is unknown).
    pub fn execution_spent(&self, execution_id: &str) -> Result<(u64, f64), StateError> {
        self.with_sync(|conn| {
            let spent: Option<(i64, f64)> = conn
                .query_row_cached(
                    "SELECT total_tokens, reported_cost FROM history WHERE execution_id = ?1",
                    params![execution_id],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()?;
            Ok(spent.map_or((0, 0.0), |(t, c)| (u64::try_from(t).unwrap_or(0), c)))
        })
    }

    /// The tokens recorded for an execution (0 when it is unknown).
    pub fn execution_tokens(&self, execution_id: &str) -> Result<u64, StateError> {
        self.with_sync(|conn| {
            let tokens: Option<i64> = conn
                .query_row_cached(
                    "SELECT total_tokens FROM history WHERE execution_id = ?1",
                    params![execution_id],
                    |row| row.get(0),
                )
                .optional()?;
            Ok(tokens.map_or(0, |t| u64::try_from(t).unwrap_or(0)))
        })
    }

    /// Marks every pending approval of `execution_id` expired (its run stopped); returns how
    /// many there were.
    pub fn expire_approvals_of(
        &self,
        execution_id: &str,
        now: Timestamp,
    ) -> Result<usize, StateError> {
        self.with_sync(|conn| {
            Ok(conn.execute_cached(
                "UPDATE approvals SET status = 'expired', decided_at = ?2
                 WHERE execution_id = ?1 AND status = 'pending'",
                params![execution_id, now.unix_millis()],
            )?)
        })
    }

    /// Whether the run that asked approval `id` is still running (`None`: no such approval).
    pub fn approval_run_live(&self, id: &str) -> Result<Option<bool>, StateError> {
        self.with_sync(|conn| {
            let found: Option<Option<String>> = conn
                .query_row_cached(
                    "SELECT h.status FROM approvals a
                     LEFT JOIN history h ON h.execution_id = a.execution_id
                     WHERE a.id = ?1",
                    params![id],
                    |row| row.get(0),
                )
                .optional()?;
            Ok(found.map(|status| status.as_deref() == Some("running")))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_grow_only_while_running_and_approvals_of_an_ended_run_expire() {
        let state = DesktopState::open_in_memory().expect("state");
        let now = Timestamp::from_unix_millis(1);
        let command = CommandId::new_random();
        let session = super::sessions::new_session_id();
        state
            .begin_execution("e1", &command, "p", &session, "slug", now)
            .expect("begin");
        state.record_tokens("e1", 42).expect("tokens");
        assert_eq!(state.execution_tokens("e1").expect("read"), 42);
        state.ask("a1", "e1", "fs.write", "{}", now).expect("ask");
        assert_eq!(state.approval_run_live("a1").expect("live"), Some(true));
        assert_eq!(state.approval_run_live("nope").expect("read"), None);
        assert_eq!(state.expire_approvals_of("e1", now).expect("expire"), 1);
        assert_eq!(
            state.approval_status("a1").expect("status"),
            Some(ApprovalStatus::Expired)
        );
        state.ask("a2", "gone", "fs.write", "{}", now).expect("ask");
        assert_eq!(
            state.approval_run_live("a2").expect("live"),
            Some(false),
            "a run the history does not hold as running is not live"
        );
    }
}
