//! What is shared, as the owner sees it: each share with its session and since when.

use super::*;

/// One session shared with one project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShareRow {
    /// The project.
    pub project_id: String,
    /// Its name as the service knows it (from the project list last fetched; `None` when the
    /// list was never fetched or does not hold the project).
    pub project_name: Option<String>,
    /// Whether this desktop serves the project now (a share of a disabled one reaches nobody).
    pub project_enabled: bool,
    /// The session.
    pub session_id: String,
    /// Its slug.
    pub slug: String,
    /// Its display name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// When it was shared (ms since the epoch).
    pub since: i64,
}

/// The share listing.
impl DesktopState {
    /// Every share, by project and slug.
    pub fn shares(&self) -> Result<Vec<ShareRow>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT sh.project_id, COALESCE(p.enabled, 0), s.id, s.slug, s.name, s.version, sh.created_at,
                        sp.name
                 FROM shares sh JOIN graph_sessions s ON s.id = sh.session_id
                 LEFT JOIN projects p ON p.project_id = sh.project_id
                 LEFT JOIN service_projects sp ON sp.project_id = sh.project_id
                 ORDER BY sh.project_id, s.slug",
            )?;
            let rows = stmt.query_map([], |row| {
                Ok(ShareRow {
                    project_id: row.get(0)?,
                    project_enabled: row.get(1)?,
                    session_id: row.get(2)?,
                    slug: row.get(3)?,
                    name: row.get(4)?,
                    version: row.get(5)?,
                    since: row.get(6)?,
                    project_name: row.get(7)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

/// Most running runs the page's "now" panel lists (a relay runs one at a time; older relays'
/// unreported rows may add a few).
pub const MAX_RUNNING_LISTED: usize = 20;

/// A run going on now, as the page's panel shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunningRow {
    /// The execution.
    pub execution_id: String,
    /// The graph's slug.
    pub slug: String,
    /// The project that started it.
    pub project_id: String,
    /// The agent that queued it (its token or grant id).
    pub agent_id: Option<String>,
    /// That agent's name.
    pub agent_name: Option<String>,
    /// Tokens spent so far (written as they grow).
    pub total_tokens: u64,
    /// When it started (ms since the epoch).
    pub started_at: i64,
    /// The tool whose `ask` approval it waits for, if it waits for one.
    pub waiting_for: Option<String>,
}

/// How a run stands or ended, in short: what the approvals page needs to say why an unanswered
/// approval stopped waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnd {
    /// `running`, `completed`, `failed` or `cancelled`.
    pub status: String,
    /// Its error.
    pub error: Option<String>,
    /// When it ended (ms since the epoch).
    pub finished_at: Option<i64>,
}

/// The names and the running runs the owner's screens show, read only.
impl DesktopState {
    /// The service's name of each project it listed for this desktop, as last fetched.
    pub fn project_names(&self) -> Result<std::collections::HashMap<String, String>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare_cached("SELECT project_id, name FROM service_projects")?;
            let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    /// How the execution stands or ended (`None`: not in the history).
    pub fn run_end(&self, execution_id: &str) -> Result<Option<RunEnd>, StateError> {
        self.with_sync(|conn| {
            Ok(conn
                .query_row_cached(
                    "SELECT status, error, finished_at FROM history WHERE execution_id = ?1",
                    params![execution_id],
                    |row| {
                        Ok(RunEnd {
                            status: row.get(0)?,
                            error: row.get(1)?,
                            finished_at: row.get(2)?,
                        })
                    },
                )
                .optional()?)
        })
    }

    /// The runs going on now, newest first, each with what it waits for.
    pub fn running(&self) -> Result<Vec<RunningRow>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT h.execution_id, h.slug, h.project_id, h.agent_id, h.agent_name,
                        h.total_tokens, h.started_at,
                        (SELECT a.tool FROM approvals a
                         WHERE a.execution_id = h.execution_id AND a.status = 'pending'
                         ORDER BY a.created_at LIMIT 1)
                 FROM history h WHERE h.status = 'running'
                 ORDER BY h.started_at DESC, h.execution_id LIMIT ?1",
            )?;
            let limit = i64::try_from(MAX_RUNNING_LISTED).unwrap_or(i64::MAX);
            let rows = stmt.query_map(params![limit], |row| {
                let tokens: i64 = row.get(5)?;
                Ok(RunningRow {
                    execution_id: row.get(0)?,
                    slug: row.get(1)?,
                    project_id: row.get(2)?,
                    agent_id: row.get(3)?,
                    agent_name: row.get(4)?,
                    total_tokens: u64::try_from(tokens).unwrap_or(0),
                    started_at: row.get(6)?,
                    waiting_for: row.get(7)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listing_shows_exactly_what_is_shared() {
        let state = DesktopState::open_in_memory().expect("state");
        let now = Timestamp::from_unix_millis(5);
        let meta = |slug: &str| graph_js::Meta {
            name: format!("Graph {slug}"),
            slug: slug.into(),
            version: "2.0.0".into(),
            description: String::new(),
            args: None,
        };
        let a = state.upsert_session(&meta("a"), "s", None, now).expect("a");
        let b = state.upsert_session(&meta("b"), "s", None, now).expect("b");
        state.set_project_enabled("p", true, now).expect("enable");
        state.share("p", &a, now).expect("share");
        state.share("q", &b, now).expect("share");
        state.share("p", &b, now).expect("share");
        state.unshare("p", &b).expect("unshare");
        let shares = state.shares().expect("list");
        let seen: Vec<(&str, &str, bool)> = shares
            .iter()
            .map(|s| (s.project_id.as_str(), s.slug.as_str(), s.project_enabled))
            .collect();
        assert_eq!(seen, vec![("p", "a", true), ("q", "b", false)]);
        assert_eq!(shares[0].since, 5);
        assert_eq!(shares[0].version, "2.0.0");
    }

    #[test]
    fn running_runs_say_what_they_wait_for_and_names_come_from_the_service_list() {
        let state = DesktopState::open_in_memory().expect("state");
        let now = Timestamp::from_unix_millis(5);
        let session = super::super::sessions::new_session_id();
        let command = CommandId::new_random();
        state
            .begin_execution("e1", &command, "p", &session, "report", now)
            .expect("begin");
        state.record_tokens("e1", 120).expect("tokens");
        let running = state.running().expect("running");
        assert_eq!(running.len(), 1);
        assert_eq!(
            (running[0].total_tokens, running[0].waiting_for.as_deref()),
            (120, None)
        );
        state.ask("a1", "e1", "fs.write", "{}", now).expect("ask");
        let running = state.running().expect("running");
        assert_eq!(running[0].waiting_for.as_deref(), Some("fs.write"));
        assert!(state.project_names().expect("names").is_empty());
        let served = relay_protocol::ServedProject {
            project_id: "p".into(),
            name: "Blog".into(),
        };
        state.set_service_projects(&[served], now).expect("names");
        assert_eq!(
            state
                .project_names()
                .expect("names")
                .get("p")
                .map(String::as_str),
            Some("Blog")
        );
    }
}

/// Where a session's code came from: the file and the hash of its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSource {
    /// The session.
    pub id: GraphSessionId,
    /// The graph file it was added from (`None` for sessions added before files were noted).
    pub path: Option<String>,
    /// The SHA-256 of its code, hex.
    pub content_hash: Option<String>,
}

/// Sessions by file: one graph file is one session.
impl DesktopState {
    /// The session holding `slug`, with the file and code hash it came from.
    pub fn session_source(&self, slug: &str) -> Result<Option<SessionSource>, StateError> {
        self.with_sync(|conn| {
            let found: Option<(String, Option<String>, Option<String>)> = conn
                .query_row_cached(
                    "SELECT id, source_path, content_hash FROM graph_sessions WHERE slug = ?1",
                    params![slug],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                )
                .optional()?;
            found
                .map(|(id, path, content_hash)| {
                    Ok(SessionSource {
                        id: id.parse().map_err(|e: relay_protocol::InvalidInput| {
                            StateError::Invalid(e.to_string())
                        })?,
                        path,
                        content_hash,
                    })
                })
                .transpose()
        })
    }

    /// Notes the file and code hash a session now comes from.
    pub fn set_session_source(
        &self,
        id: &GraphSessionId,
        path: &str,
        content_hash: &str,
    ) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute_cached(
                "UPDATE graph_sessions SET source_path = ?2, content_hash = ?3 WHERE id = ?1",
                params![id.as_str(), path, content_hash],
            )?;
            Ok(())
        })
    }
}
