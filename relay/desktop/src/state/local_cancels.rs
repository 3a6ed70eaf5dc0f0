//! The owner's control over what runs (issue 43): a local cancel (`relay desktop cancel`, the
//! page's Cancel) is a row the running relay reads at its next sharing watch and acts on; the
//! runs a withdrawal covers, found before it is made so the command can say what it stopped;
//! and the queued runs a withdrawal cancels, kept in the history with their cause.

use relay_protocol::{EndCause, NOT_SHARED};

use super::*;

/// Most local cancels read at once: one run runs at a time, so a few are plenty.
const MAX_LOCAL_CANCELS: usize = 100;

/// A run of the history as the owner's commands name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunRef {
    /// The execution id.
    pub execution_id: String,
    /// The command id (what the agent and the service know it by).
    pub command_id: String,
    /// The project that started it.
    pub project_id: String,
    /// The session it runs.
    pub session_id: String,
    /// The session's name (its slug when the session is gone).
    pub session_name: String,
    /// `running`, `completed`, `failed` or `cancelled`.
    pub status: String,
    /// Whether its graph began (a running row that never began is a start in progress).
    pub began: bool,
}

const RUN_REF_SELECT: &str = "SELECT h.execution_id, h.command_id, h.project_id, h.session_id, \
     COALESCE(s.name, h.slug), h.status, h.began_at IS NOT NULL \
     FROM history h LEFT JOIN graph_sessions s ON s.id = h.session_id";

fn run_ref(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRef> {
    Ok(RunRef {
        execution_id: row.get(0)?,
        command_id: row.get(1)?,
        project_id: row.get(2)?,
        session_id: row.get(3)?,
        session_name: row.get(4)?,
        status: row.get(5)?,
        began: row.get(6)?,
    })
}

/// Local cancels, and what a withdrawal covers.
impl DesktopState {
    /// Asks the running relay to cancel the run of `command_id` (it reads the request within a
    /// sharing watch interval).
    pub fn request_cancel(&self, command_id: &CommandId, now: Timestamp) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute_cached(
                "INSERT INTO local_cancels (command_id, requested_at) VALUES (?1, ?2)
                 ON CONFLICT(command_id) DO NOTHING",
                params![command_id.to_string(), now.unix_millis()],
            )?;
            Ok(())
        })
    }

    /// What the relay's watch reads every interval, in one statement: the sharing version
    /// ([`DesktopState::sharing_version`]) and whether any local cancel waits (without sorting
    /// them, as [`DesktopState::local_cancels`] does).
    pub fn sharing_and_cancels(&self) -> Result<(i64, bool), StateError> {
        self.with_sync(|conn| {
            Ok(conn.query_row_cached(
                "SELECT (SELECT CAST(value AS INTEGER) FROM settings WHERE key = ?1),
                        EXISTS (SELECT 1 FROM local_cancels)",
                params![super::SHARING_VERSION],
                |row| Ok((row.get::<_, Option<i64>>(0)?.unwrap_or(0), row.get(1)?)),
            )?)
        })
    }

    /// The commands the owner asked to cancel here, oldest first.
    pub fn local_cancels(&self) -> Result<Vec<CommandId>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT command_id FROM local_cancels ORDER BY requested_at, command_id LIMIT ?1",
            )?;
            let rows = stmt.query_map(params![MAX_LOCAL_CANCELS as i64], |row| {
                row.get::<_, String>(0)
            })?;
            let mut out = Vec::new();
            for row in rows {
                if let Ok(id) = row?.parse() {
                    out.push(id);
                }
            }
            Ok(out)
        })
    }

    /// Forgets local cancels the relay has acted on (or found nothing running for).
    pub fn clear_local_cancels(&self, ids: &[CommandId]) -> Result<(), StateError> {
        self.with_sync(|conn| {
            let tx = conn.transaction()?;
            for id in ids {
                tx.execute_cached(
                    "DELETE FROM local_cancels WHERE command_id = ?1",
                    params![id.to_string()],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    /// The run `run` names: a command id or an execution id, as the lists show them.
    pub fn find_run(&self, run: &str) -> Result<Option<RunRef>, StateError> {
        self.with_sync(|conn| {
            Ok(conn
                .query_row_cached(
                    &format!(
                        "{RUN_REF_SELECT} WHERE h.execution_id = ?1 OR h.command_id = ?1
                         ORDER BY h.started_at DESC LIMIT 1"
                    ),
                    params![run.trim()],
                    run_ref,
                )
                .optional()?)
        })
    }

    /// The runs whose graph runs now (by the history: the relay that ran one may have been
    /// killed), newest first.
    pub fn running_runs(&self) -> Result<Vec<RunRef>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "{RUN_REF_SELECT} WHERE h.status = 'running' AND h.began_at IS NOT NULL
                 ORDER BY h.started_at DESC, h.execution_id LIMIT ?1"
            ))?;
            let rows = stmt.query_map(params![MAX_LOCAL_CANCELS as i64], run_ref)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// The running runs a withdrawal covers: of `project` (all of it when `session` is
    /// `None`), of `session` (in every project when `project` is `None`).
    pub fn running_covered(
        &self,
        project: Option<&str>,
        session: Option<&GraphSessionId>,
    ) -> Result<Vec<RunRef>, StateError> {
        Ok(self
            .running_runs()?
            .into_iter()
            .filter(|run| project.is_none_or(|p| p == run.project_id))
            .filter(|run| session.is_none_or(|s| s.as_str() == run.session_id))
            .collect())
    }

    /// Moves the queued runs (as last synced) whose consent is gone into the history, ended
    /// `cancelled` with [`NOT_SHARED`] and the cause `consent_withdrawn`: the service cancels
    /// them when it hears the snapshot (or withdrawal) about to be sent. Returns their ids.
    pub fn withdraw_unconsented_queue(&self, now: Timestamp) -> Result<Vec<CommandId>, StateError> {
        self.with_sync(|conn| {
            let tx = conn.transaction()?;
            let ids: Vec<String> = {
                let mut stmt = tx.prepare_cached(
                    "SELECT q.command_id FROM queue q WHERE NOT EXISTS (
                         SELECT 1 FROM graph_sessions s
                         JOIN shares ON shares.session_id = s.id AND shares.project_id = q.project_id
                         JOIN projects p ON p.project_id = q.project_id AND p.enabled = 1
                         WHERE s.id = q.session_id AND s.slug = q.slug)
                     ORDER BY q.queued_at LIMIT ?1",
                )?;
                let rows = stmt.query_map(params![MAX_LOCAL_CANCELS as i64], |row| row.get(0))?;
                rows.collect::<Result<_, _>>()?
            };
            for id in &ids {
                tx.execute_cached(
                    "INSERT OR IGNORE INTO history (execution_id, command_id, channel, project_id,
                     session_id, slug, status, error, started_at, finished_at, queued_at,
                     arguments, agent_id, agent_name, end_cause)
                     SELECT ?2, command_id, 'graph:external:' || command_id, project_id, session_id,
                     slug, 'cancelled', ?3, ?4, ?4, queued_at, arguments, agent_id, agent_name, ?5
                     FROM queue WHERE command_id = ?1",
                    params![
                        id,
                        uuid::Uuid::new_v4().to_string(),
                        NOT_SHARED,
                        now.unix_millis(),
                        EndCause::ConsentWithdrawn.as_str()
                    ],
                )?;
                tx.execute_cached("DELETE FROM queue WHERE command_id = ?1", params![id])?;
            }
            tx.commit()?;
            Ok(ids.iter().filter_map(|id| id.parse().ok()).collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::state::test_meta as meta;

    #[test]
    fn a_local_cancel_is_read_once_cleared_and_runs_are_found_by_either_id() {
        let state = DesktopState::open_in_memory().expect("state");
        let now = Timestamp::from_unix_millis(1);
        let session = state
            .upsert_session(&meta("a"), "script", None, now)
            .expect("session");
        let command = CommandId::new_random();
        state
            .begin_execution("e1", &command, "p", &session, "a", now)
            .expect("begin");
        assert!(state.running_runs().expect("runs").is_empty(), "not began");
        state.mark_began("e1", now).expect("began");
        let found = state.find_run(&command.to_string()).expect("find");
        assert_eq!(found.as_ref().map(|r| r.execution_id.as_str()), Some("e1"));
        assert_eq!(
            found.map(|r| r.session_name),
            Some("Graph a".to_owned()),
            "named"
        );
        assert_eq!(
            state.find_run("e1").expect("find").map(|r| r.command_id),
            Some(command.to_string())
        );
        assert_eq!(state.find_run("nope").expect("find"), None);
        assert_eq!(
            state
                .running_covered(Some("p"), None)
                .expect("covered")
                .len(),
            1
        );
        assert!(
            state
                .running_covered(Some("other"), None)
                .expect("covered")
                .is_empty()
        );
        state.request_cancel(&command, now).expect("cancel");
        state.request_cancel(&command, now).expect("twice is once");
        assert_eq!(state.local_cancels().expect("read"), vec![command]);
        state.clear_local_cancels(&[command]).expect("clear");
        assert!(state.local_cancels().expect("read").is_empty());
    }

    #[test]
    fn queued_runs_whose_consent_is_gone_enter_the_history_with_their_cause() {
        let state = DesktopState::open_in_memory().expect("state");
        let now = Timestamp::from_unix_millis(1);
        let project = "11111111-1111-4111-8111-111111111111";
        state
            .set_project_enabled(project, true, now)
            .expect("enable");
        let kept = state
            .upsert_session(&meta("kept"), "s1", None, now)
            .expect("s");
        let gone = state
            .upsert_session(&meta("gone"), "s2", None, now)
            .expect("s");
        state.share(project, &kept, now).expect("share");
        state.share(project, &gone, now).expect("share");
        let queued = |session: &GraphSessionId, slug: &str| relay_protocol::QueuedCommand {
            command_id: CommandId::new_random(),
            graph_session_id: session.clone(),
            slug: slug.into(),
            arguments: serde_json::Map::new(),
            created_at: now,
            agent_id: Some("agent".into()),
            agent_name: Some("Agent".into()),
            max_tokens: None,
        };
        let (a, b) = (queued(&kept, "kept"), queued(&gone, "gone"));
        state
            .note_queue(project, &[a.clone(), b.clone()], now)
            .expect("queue");
        assert!(
            state
                .withdraw_unconsented_queue(now)
                .expect("none")
                .is_empty()
        );
        state.unshare(project, &gone).expect("unshare");
        let later = Timestamp::from_unix_millis(9);
        assert_eq!(
            state.withdraw_unconsented_queue(later).expect("one"),
            vec![b.command_id]
        );
        let history = state.history().expect("history");
        assert_eq!(history.len(), 1);
        assert_eq!(history[0].command_id, b.command_id.to_string());
        assert_eq!(history[0].status, "cancelled");
        assert_eq!(history[0].error.as_deref(), Some(NOT_SHARED));
        assert_eq!(history[0].end_cause, Some(EndCause::ConsentWithdrawn));
        assert_eq!(history[0].agent_name.as_deref(), Some("Agent"));
        assert_eq!(
            state.queued().expect("queue").len(),
            1,
            "the shared one stays"
        );
        assert!(
            state
                .withdraw_unconsented_queue(later)
                .expect("once")
                .is_empty()
        );
    }
}
