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
            let mut stmt = conn.prepare(
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
                .query_row(
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
            conn.execute(
                "UPDATE graph_sessions SET source_path = ?2, content_hash = ?3 WHERE id = ?1",
                params![id.as_str(), path, content_hash],
            )?;
            Ok(())
        })
    }
}
