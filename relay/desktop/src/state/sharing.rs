//! Projects this desktop serves, and which sessions each may run: the consent the relay re-checks before every command.

use super::sessions::{SESSION_COLUMNS, bump_sharing, session_from_row};
use super::*;

/// Projects and sharing.
impl DesktopState {
    /// Enables or disables a project for this desktop.
    pub fn set_project_enabled(
        &self,
        project_id: &str,
        enabled: bool,
        now: Timestamp,
    ) -> Result<(), StateError> {
        check_project_id(project_id)?;
        self.with_sync(|conn| {
            let tx = conn.transaction()?;
            tx.execute_cached(
                "INSERT INTO projects (project_id, enabled, updated_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT(project_id) DO UPDATE SET enabled = ?2, updated_at = ?3",
                params![project_id, enabled, now.unix_millis()],
            )?;
            bump_sharing(&tx)?;
            if !enabled {
                // The service is told at the next contact, before anything of it can run; it
                // stays owed even if the project is enabled again in between.
                tx.execute_cached(
                    "INSERT INTO withdrawals (project_id, version)
                     SELECT ?1, CAST(value AS INTEGER) FROM settings WHERE key = ?2
                     ON CONFLICT(project_id) DO UPDATE SET version = excluded.version",
                    params![project_id, SHARING_VERSION],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    /// Projects disabled whose withdrawal the service has not acknowledged yet, each with the
    /// sharing version it was recorded at.
    pub fn pending_withdrawals(&self) -> Result<Vec<(String, i64)>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT project_id, version FROM withdrawals ORDER BY project_id",
            )?;
            let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// The service acknowledged the withdrawal recorded at `version` (a later disable of the
    /// same project stays owed).
    pub fn withdrawal_delivered(&self, project_id: &str, version: i64) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute_cached(
                "DELETE FROM withdrawals WHERE project_id = ?1 AND version = ?2",
                params![project_id, version],
            )?;
            Ok(())
        })
    }

    /// The enabled projects.
    pub fn enabled_projects(&self) -> Result<Vec<String>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT project_id FROM projects WHERE enabled = 1 ORDER BY project_id",
            )?;
            let rows = stmt.query_map([], |row| row.get(0))?;
            Ok(rows.collect::<Result<Vec<String>, _>>()?)
        })
    }

    /// Every project with its enabled flag.
    pub fn projects(&self) -> Result<Vec<(String, bool)>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn
                .prepare_cached("SELECT project_id, enabled FROM projects ORDER BY project_id")?;
            let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Shares (checks) a session with a project; at most [`MAX_SYNC_SESSIONS`] per project.
    pub fn share(
        &self,
        project_id: &str,
        session: &GraphSessionId,
        now: Timestamp,
    ) -> Result<(), StateError> {
        check_project_id(project_id)?;
        self.with_sync(|conn| {
            let tx = conn.transaction()?;
            let exists: bool = tx
                .query_row_cached("SELECT 1 FROM graph_sessions WHERE id = ?1", params![session.as_str()], |_| Ok(true))
                .optional()?
                .unwrap_or(false);
            if !exists {
                return Err(StateError::Invalid(format!(
                    "no session {session}: add it first with `relay desktop session add FILE`"
                )));
            }
            let shared: i64 = tx.query_row_cached(
                "SELECT COUNT(*) FROM shares WHERE project_id = ?1 AND session_id != ?2",
                params![project_id, session.as_str()],
                |row| row.get(0),
            )?;
            if usize::try_from(shared).unwrap_or(usize::MAX) >= MAX_SYNC_SESSIONS {
                return Err(StateError::Invalid(format!(
                    "project {project_id} already has {MAX_SYNC_SESSIONS} shared sessions, the most one sync carries: unshare one first"
                )));
            }
            tx.execute_cached(
                "INSERT OR IGNORE INTO shares (project_id, session_id, created_at) VALUES (?1, ?2, ?3)",
                params![project_id, session.as_str(), now.unix_millis()],
            )?;
            bump_sharing(&tx)?;
            tx.commit()?;
            Ok(())
        })
    }

    /// Unshares a session from a project.
    pub fn unshare(&self, project_id: &str, session: &GraphSessionId) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute_cached(
                "DELETE FROM shares WHERE project_id = ?1 AND session_id = ?2",
                params![project_id, session.as_str()],
            )?;
            bump_sharing(conn)
        })
    }

    /// The sessions shared with a project (at most [`MAX_SYNC_SESSIONS`]).
    pub fn shared_sessions(&self, project_id: &str) -> Result<Vec<Session>, StateError> {
        self.with_sync(|conn| shared_sessions(conn, project_id))
    }

    /// What a sync tells the service about `project_id` now, read at once with the sharing
    /// version it belongs to: the sessions the project may run (none while it is disabled),
    /// or nothing while its withdrawal is owed, which the service must hear first.
    pub fn snapshot(&self, project_id: &str) -> Result<Snapshot, StateError> {
        self.snapshot_since(project_id, None)
    }

    /// [`DesktopState::snapshot`], or [`Snapshot::Unchanged`] (without reading the sessions)
    /// when the sharing version is still `held`, the one the service took.
    pub fn snapshot_since(
        &self,
        project_id: &str,
        held: Option<i64>,
    ) -> Result<Snapshot, StateError> {
        self.with_sync(|conn| {
            let tx = conn.transaction()?;
            let owed = tx
                .query_row_cached(
                    "SELECT 1 FROM withdrawals WHERE project_id = ?1",
                    params![project_id],
                    |_| Ok(()),
                )
                .optional()?
                .is_some();
            if owed {
                return Ok(Snapshot::Withheld);
            }
            let version = sharing_version(&tx)?;
            if held == Some(version) {
                return Ok(Snapshot::Unchanged { version });
            }
            let enabled = tx
                .query_row_cached(
                    "SELECT enabled FROM projects WHERE project_id = ?1",
                    params![project_id],
                    |row| row.get::<_, bool>(0),
                )
                .optional()?
                .unwrap_or(false);
            let sessions = if enabled {
                shared_sessions(&tx, project_id)?
            } else {
                Vec::new()
            };
            Ok(Snapshot::Current { version, sessions })
        })
    }

    /// Moves the sharing version to at least `now` (in milliseconds) and returns it: a relay
    /// does this as it starts, so the snapshots it sends are newer than any an earlier relay
    /// sent, even from a state file restored from a backup or made anew.
    pub fn renew_sharing_version(&self, now: Timestamp) -> Result<i64, StateError> {
        self.with_sync(|conn| {
            let tx = conn.transaction()?;
            let renewed = sharing_version(&tx)?
                .saturating_add(1)
                .max(now.unix_millis());
            tx.execute_cached(
                "INSERT INTO settings (key, value) VALUES (?1, ?2)
                 ON CONFLICT(key) DO UPDATE SET value = ?2",
                params![SHARING_VERSION, renewed.to_string()],
            )?;
            tx.commit()?;
            Ok(renewed)
        })
    }

    /// The consent check right before a command runs: the project is enabled, the session is
    /// shared with it, and its slug is still `slug`. Returns the session when all hold.
    pub fn consented_session(
        &self,
        project_id: &str,
        session: &GraphSessionId,
        slug: &str,
    ) -> Result<Option<Session>, StateError> {
        self.with_sync(|conn| {
            let found = conn
                .query_row_cached(
                    &format!(
                        "SELECT {} FROM graph_sessions s
                         JOIN shares ON shares.session_id = s.id AND shares.project_id = ?1
                         JOIN projects p ON p.project_id = ?1 AND p.enabled = 1
                         WHERE s.id = ?2 AND s.slug = ?3",
                        SESSION_COLUMNS
                            .split(", ")
                            .map(|c| format!("s.{c}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    params![project_id, session.as_str(), slug],
                    session_from_row,
                )
                .optional()?;
            Ok(found)
        })
    }

    /// A counter that grows whenever sharing changes (the loop runs a pass right after).
    pub fn sharing_version(&self) -> Result<i64, StateError> {
        self.with_sync(|conn| sharing_version(conn))
    }
}

/// What a sync carries of one project's sharing ([`DesktopState::snapshot`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Snapshot {
    /// The sessions the project may run now (none while it is disabled), as of `version`.
    Current {
        /// The sharing version they were read at.
        version: i64,
        /// The sessions (at most [`MAX_SYNC_SESSIONS`]).
        sessions: Vec<Session>,
    },
    /// The sharing version is still the one the service took (`version`): nothing to send.
    Unchanged {
        /// The sharing version.
        version: i64,
    },
    /// The project's withdrawal is owed: no snapshot of it goes out before the withdrawal.
    Withheld,
}

fn sharing_version(conn: &Connection) -> Result<i64, StateError> {
    Ok(conn
        .query_row_cached(
            "SELECT CAST(value AS INTEGER) FROM settings WHERE key = ?1",
            params![SHARING_VERSION],
            |row| row.get(0),
        )
        .optional()?
        .unwrap_or(0))
}

fn shared_sessions(conn: &Connection, project_id: &str) -> Result<Vec<Session>, StateError> {
    /// The statement, written once (the pass reads it for every enabled project).
    static SHARED_SESSIONS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "SELECT {} FROM graph_sessions s JOIN shares ON shares.session_id = s.id
             WHERE shares.project_id = ?1 ORDER BY s.slug LIMIT ?2",
            SESSION_COLUMNS
                .split(", ")
                .map(|c| format!("s.{c}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    });
    let mut stmt = conn.prepare_cached(&SHARED_SESSIONS)?;
    let rows = stmt.query_map(
        params![project_id, MAX_SYNC_SESSIONS as i64],
        session_from_row,
    )?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

pub(super) fn check_project_id(project_id: &str) -> Result<(), StateError> {
    const MAX_PROJECT_ID_CHARS: usize = 128;
    if project_id.trim().is_empty()
        || relay_protocol::text::utf16_len(project_id) > MAX_PROJECT_ID_CHARS
    {
        return Err(StateError::Invalid(format!(
            "a project id is 1 to {MAX_PROJECT_ID_CHARS} characters (the id `relay admin project create` printed)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::state::test_meta as meta;

    #[test]
    fn consent_needs_enabled_project_shared_session_and_same_slug() {
        let state = DesktopState::open_in_memory().expect("state");
        let now = Timestamp::from_unix_millis(1);
        let id = state
            .upsert_session(&meta("triage"), "script", None, now)
            .expect("added");
        assert!(
            state
                .consented_session("p", &id, "triage")
                .expect("query")
                .is_none(),
            "nothing shared yet"
        );
        state.share("p", &id, now).expect("share");
        assert!(
            state
                .consented_session("p", &id, "triage")
                .expect("query")
                .is_none(),
            "project not enabled"
        );
        state.set_project_enabled("p", true, now).expect("enable");
        assert!(
            state
                .consented_session("p", &id, "triage")
                .expect("query")
                .is_some()
        );
        assert!(
            state
                .consented_session("p", &id, "other-slug")
                .expect("query")
                .is_none()
        );
        assert!(
            state
                .consented_session("q", &id, "triage")
                .expect("query")
                .is_none()
        );
        state.set_project_enabled("p", false, now).expect("disable");
        assert!(
            state
                .consented_session("p", &id, "triage")
                .expect("query")
                .is_none()
        );
    }

    /// A sync's snapshot is read with its version; a disabled project's is empty; one whose
    /// withdrawal is owed is withheld until the withdrawal is delivered; the version only grows
    /// (a relay's start moves it to at least its clock's time).
    #[test]
    fn a_snapshot_carries_its_version_and_waits_for_an_owed_withdrawal() {
        let state = DesktopState::open_in_memory().expect("state");
        let now = Timestamp::from_unix_millis(1);
        let id = state
            .upsert_session(&meta("triage"), "script", None, now)
            .expect("added");
        state.share("p", &id, now).expect("share");
        state.set_project_enabled("p", true, now).expect("enable");
        let current = state.sharing_version().expect("version");
        let Snapshot::Current { version, sessions } = state.snapshot("p").expect("read") else {
            panic!("an enabled project has a snapshot");
        };
        assert_eq!(version, current);
        assert_eq!(sessions.len(), 1);
        assert_eq!(
            state.snapshot_since("p", Some(version)).expect("read"),
            Snapshot::Unchanged { version }
        );
        state.set_project_enabled("p", false, now).expect("disable");
        assert_eq!(state.snapshot("p").expect("read"), Snapshot::Withheld);
        let (project, owed) = state.pending_withdrawals().expect("owed").remove(0);
        state
            .withdrawal_delivered(&project, owed)
            .expect("delivered");
        let Snapshot::Current { version, sessions } = state.snapshot("p").expect("read") else {
            panic!("a delivered withdrawal leaves an empty snapshot");
        };
        assert!(
            version > current && sessions.is_empty(),
            "{version} {sessions:?}"
        );
        let renewed = state
            .renew_sharing_version(Timestamp::from_unix_millis(1_700_000_000_000))
            .expect("renew");
        assert_eq!(renewed, 1_700_000_000_000);
        let again = state
            .renew_sharing_version(Timestamp::from_unix_millis(5))
            .expect("renew");
        assert_eq!(again, renewed + 1, "never backwards");
        state.share("p", &id, now).expect("share");
        assert_eq!(state.sharing_version().expect("version"), again + 1);
    }

    #[test]
    fn adding_the_same_slug_updates_the_session_and_keeps_its_id() {
        let state = DesktopState::open_in_memory().expect("state");
        let now = Timestamp::from_unix_millis(1);
        let first = state
            .upsert_session(&meta("a"), "v1", None, now)
            .expect("added");
        let again = state
            .upsert_session(&meta("a"), "v2", Some("Renamed"), now)
            .expect("updated");
        assert_eq!(first, again);
        let sessions = state.sessions().expect("list");
        assert_eq!(sessions.len(), 1);
        assert_eq!(sessions[0].script, "v2");
        assert_eq!(sessions[0].name, "Renamed");
        assert!(first.as_str().starts_with("gs_") && first.as_str().len() == 35);
    }

    #[test]
    fn a_project_shares_at_most_the_sync_limit() {
        let state = DesktopState::open_in_memory().expect("state");
        let now = Timestamp::from_unix_millis(1);
        for i in 0..MAX_SYNC_SESSIONS {
            let id = state
                .upsert_session(&meta(&format!("g{i}")), "s", None, now)
                .expect("added");
            state.share("p", &id, now).expect("share");
        }
        let extra = state
            .upsert_session(&meta("extra"), "s", None, now)
            .expect("added");
        let refused = state.share("p", &extra, now).unwrap_err();
        assert!(
            refused.to_string().contains("unshare one first"),
            "{refused}"
        );
        assert_eq!(
            state.shared_sessions("p").expect("list").len(),
            MAX_SYNC_SESSIONS
        );
    }

    #[test]
    fn sharing_changes_bump_the_version() {
        let state = DesktopState::open_in_memory().expect("state");
        let now = Timestamp::from_unix_millis(1);
        let v0 = state.sharing_version().expect("v");
        let id = state
            .upsert_session(&meta("a"), "s", None, now)
            .expect("added");
        state.share("p", &id, now).expect("share");
        let v1 = state.sharing_version().expect("v");
        assert!(v1 > v0);
        state.unshare("p", &id).expect("unshare");
        assert!(state.sharing_version().expect("v") > v1);
    }
}
