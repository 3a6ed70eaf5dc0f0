//! Graph sessions: one graph file each, by slug.

use super::*;

pub(super) fn bump_sharing(conn: &Connection) -> Result<(), StateError> {
    conn.execute_cached(
        "INSERT INTO settings (key, value) VALUES (?1, '1')
         ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
        params![SHARING_VERSION],
    )?;
    Ok(())
}

pub(super) fn session_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Session> {
    let id: String = row.get(0)?;
    Ok(Session {
        id: id.parse().map_err(|e: relay_protocol::InvalidInput| {
            rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
        })?,
        name: row.get(1)?,
        description: row.get(2)?,
        slug: row.get(3)?,
        version: row.get(4)?,
        status: row.get(5)?,
        script: row.get(6)?,
        args_schema: row
            .get::<_, Option<String>>(7)?
            .map(|text| serde_json::from_str(&text))
            .transpose()
            .map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(
                    7,
                    rusqlite::types::Type::Text,
                    Box::new(e),
                )
            })?,
        max_tokens: row
            .get::<_, Option<i64>>(8)?
            .and_then(|n| u64::try_from(n).ok()),
        resume: row.get(9)?,
    })
}

pub(super) const SESSION_COLUMNS: &str =
    "id, name, description, slug, version, status, script, args_schema, max_tokens, resume";

/// A fresh `gs_` id.
pub fn new_session_id() -> GraphSessionId {
    let hex = uuid::Uuid::new_v4().simple().to_string();
    format!("gs_{hex}")
        .parse()
        .expect("a v4 UUID in simple form is 32 lowercase hex digits")
}

/// Sessions: add (or update by slug), list, look up.
impl DesktopState {
    /// Stores a graph, or updates the session with the same slug; returns its id.
    pub fn upsert_session(
        &self,
        meta: &graph_js::Meta,
        script: &str,
        name: Option<&str>,
        now: Timestamp,
    ) -> Result<GraphSessionId, StateError> {
        self.with_sync(|conn| {
            let tx = conn.transaction()?;
            let existing: Option<String> = tx
                .query_row_cached(
                    "SELECT id FROM graph_sessions WHERE slug = ?1",
                    params![meta.slug],
                    |row| row.get(0),
                )
                .optional()?;
            let display_name = name.unwrap_or(&meta.name);
            let args_schema = meta.args.as_ref().map(Value::to_string);
            let id = match existing {
                Some(id) => {
                    tx.execute_cached(
                        "UPDATE graph_sessions SET name = ?2, description = ?3, version = ?4,
                         script = ?5, updated_at = ?6, args_schema = ?7 WHERE id = ?1",
                        params![id, display_name, meta.description, meta.version, script, now.unix_millis(), args_schema],
                    )?;
                    id
                }
                None => {
                    let id = new_session_id().to_string();
                    tx.execute_cached(
                        "INSERT INTO graph_sessions (id, name, description, slug, version, status, script, created_at, updated_at, args_schema)
                         VALUES (?1, ?2, ?3, ?4, ?5, 'active', ?6, ?7, ?7, ?8)",
                        params![id, display_name, meta.description, meta.slug, meta.version, script, now.unix_millis(), args_schema],
                    )?;
                    id
                }
            };
            bump_sharing(&tx)?;
            tx.commit()?;
            id.parse()
                .map_err(|e: relay_protocol::InvalidInput| StateError::Invalid(e.to_string()))
        })
    }

    /// Every session, by slug.
    pub fn sessions(&self) -> Result<Vec<Session>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM graph_sessions ORDER BY slug"
            ))?;
            let rows = stmt.query_map([], session_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// One session.
    pub fn session(&self, id: &GraphSessionId) -> Result<Option<Session>, StateError> {
        self.with_sync(|conn| {
            Ok(conn
                .query_row_cached(
                    &format!("SELECT {SESSION_COLUMNS} FROM graph_sessions WHERE id = ?1"),
                    params![id.as_str()],
                    session_from_row,
                )
                .optional()?)
        })
    }

    /// Sets the owner's token cap for the session's remote runs (`None`: the relay's
    /// default). An agent may ask for less, never for more.
    pub fn set_session_cap(
        &self,
        id: &GraphSessionId,
        max_tokens: Option<u64>,
    ) -> Result<(), StateError> {
        if max_tokens == Some(0) {
            return Err(StateError::Invalid(
                "a token cap must be at least 1 (or `none` for the relay's default)".to_owned(),
            ));
        }
        let cap = max_tokens.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        self.with_sync(|conn| {
            let changed = conn.execute_cached(
                "UPDATE graph_sessions SET max_tokens = ?2 WHERE id = ?1",
                params![id.as_str(), cap],
            )?;
            if changed == 0 {
                return Err(StateError::Invalid(format!(
                    "no session {id}: see `relay desktop session list`"
                )));
            }
            Ok(())
        })
    }

    /// Turns resuming on or off for the session's runs a stop interrupts.
    pub fn set_session_resume(&self, id: &GraphSessionId, resume: bool) -> Result<(), StateError> {
        self.with_sync(|conn| {
            let changed = conn.execute_cached(
                "UPDATE graph_sessions SET resume = ?2 WHERE id = ?1",
                params![id.as_str(), resume],
            )?;
            if changed == 0 {
                return Err(StateError::Invalid(format!(
                    "no session {id}: see `relay desktop session list`"
                )));
            }
            Ok(())
        })
    }

    /// Whether the interrupted execution `execution_id` may be resumed by its session: false
    /// when the owner turned resuming off for it (a session removed since leaves the decision
    /// to the resume, which reports the run failed).
    pub fn session_resumes(&self, execution_id: &str) -> Result<bool, StateError> {
        self.with_sync(|conn| {
            let resume: Option<bool> = conn
                .query_row_cached(
                    "SELECT s.resume FROM history h JOIN graph_sessions s ON s.id = h.session_id
                     WHERE h.execution_id = ?1",
                    params![execution_id],
                    |row| row.get(0),
                )
                .optional()?;
            Ok(resume.unwrap_or(true))
        })
    }

    /// Removes a session (and its shares).
    pub fn remove_session(&self, id: &GraphSessionId) -> Result<(), StateError> {
        self.with_sync(|conn| {
            let removed = conn.execute_cached(
                "DELETE FROM graph_sessions WHERE id = ?1",
                params![id.as_str()],
            )?;
            if removed == 0 {
                return Err(StateError::Invalid(format!(
                    "no session {id}: see `relay desktop session list`"
                )));
            }
            bump_sharing(conn)
        })
    }
}

#[cfg(test)]
mod tests {
    use relay_protocol::CommandId;
    use relay_protocol::clock::Timestamp;

    use super::*;
    use crate::state::test_meta as meta;

    #[test]
    fn resuming_is_on_by_default_and_the_owner_turns_it_off_per_session() {
        let state = DesktopState::open_in_memory().expect("state");
        let now = Timestamp::from_unix_millis(1);
        let off = state
            .upsert_session(&meta("off"), "script", None, now)
            .expect("session");
        let on = state
            .upsert_session(&meta("on"), "script", None, now)
            .expect("session");
        for (execution, session, slug) in [("e-off", &off, "off"), ("e-on", &on, "on")] {
            state
                .begin_execution(execution, &CommandId::new_random(), "p", session, slug, now)
                .expect("begin");
        }
        assert!(state.session_resumes("e-off").expect("read"));
        state.set_session_resume(&off, false).expect("turn off");
        assert!(!state.session_resumes("e-off").expect("read"));
        assert!(state.session_resumes("e-on").expect("read"));
        let listed = state.sessions().expect("sessions");
        let resume = |id: &GraphSessionId| listed.iter().find(|s| &s.id == id).map(|s| s.resume);
        assert_eq!((resume(&off), resume(&on)), (Some(false), Some(true)));
        state.set_session_resume(&off, true).expect("turn on");
        assert!(state.session_resumes("e-off").expect("read"));
        // An execution the history does not hold leaves the decision to the resume.
        assert!(state.session_resumes("e-unknown").expect("read"));
        let unknown = new_session_id();
        assert!(state.set_session_resume(&unknown, false).is_err());
    }
}
