//! The service's projects for this desktop's token, as last fetched: their names for the
//! owner's listings (offline too), and the list `project enable` checks an id against when the
//! service cannot be asked.

use relay_protocol::ServedProject;

use super::sharing::check_project_id;
use super::*;

/// The settings key of when the service's project list was last fetched.
const SERVICE_PROJECTS_AT: &str = "service_projects_at";

/// The service's projects for this desktop's token, as last fetched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServiceProjects {
    /// When they were fetched (ms since the epoch).
    pub fetched_at: i64,
    /// The projects, by id.
    pub projects: Vec<ServedProject>,
}

impl ServiceProjects {
    /// The name of `project_id`, if the service listed it.
    pub fn name_of(&self, project_id: &str) -> Option<&str> {
        self.projects
            .iter()
            .find(|p| p.project_id == project_id)
            .map(|p| p.name.as_str())
    }
}

/// The service's project list, and whether a project may be shared with.
impl DesktopState {
    /// Replaces the cached project list with what the service answered now (ids that no
    /// project id on this desktop could be are left out).
    pub fn set_service_projects(
        &self,
        projects: &[ServedProject],
        now: Timestamp,
    ) -> Result<(), StateError> {
        self.with_sync(|conn| {
            let tx = conn.transaction()?;
            tx.execute_cached("DELETE FROM service_projects", [])?;
            for project in projects {
                if check_project_id(&project.project_id).is_err() {
                    continue;
                }
                tx.execute_cached(
                    "INSERT OR REPLACE INTO service_projects (project_id, name) VALUES (?1, ?2)",
                    params![project.project_id, project.name],
                )?;
            }
            tx.execute_cached(
                "INSERT INTO settings (key, value) VALUES (?1, ?2)
                 ON CONFLICT(key) DO UPDATE SET value = ?2",
                params![SERVICE_PROJECTS_AT, now.unix_millis().to_string()],
            )?;
            tx.commit()?;
            Ok(())
        })
    }

    /// The service's project list as last fetched, or `None` if it never was.
    pub fn service_projects(&self) -> Result<Option<ServiceProjects>, StateError> {
        self.with_sync(|conn| {
            let fetched_at: Option<i64> = conn
                .query_row_cached(
                    "SELECT CAST(value AS INTEGER) FROM settings WHERE key = ?1",
                    params![SERVICE_PROJECTS_AT],
                    |row| row.get(0),
                )
                .optional()?;
            let Some(fetched_at) = fetched_at else {
                return Ok(None);
            };
            let mut stmt = conn.prepare_cached(
                "SELECT project_id, name FROM service_projects ORDER BY project_id",
            )?;
            let rows = stmt.query_map([], |row| {
                Ok(ServedProject {
                    project_id: row.get(0)?,
                    name: row.get(1)?,
                })
            })?;
            Ok(Some(ServiceProjects {
                fetched_at,
                projects: rows.collect::<Result<Vec<_>, _>>()?,
            }))
        })
    }

    /// Refuses to share with a project this desktop does not serve, or has disabled: such a
    /// share would reach no agent. The `relay desktop share` command and the page both ask.
    pub fn check_shareable(&self, project_id: &str) -> Result<(), StateError> {
        let enabled = self
            .projects()?
            .into_iter()
            .find(|(id, _)| id == project_id)
            .map(|(_, enabled)| enabled);
        match enabled {
            Some(true) => Ok(()),
            Some(false) => Err(StateError::Invalid(format!(
                "project {project_id} is disabled on this desktop, so a share would reach no agent: enable it first with `relay desktop project enable {project_id}`"
            ))),
            None => Err(StateError::Invalid(format!(
                "this desktop does not serve a project {project_id}: check the id (`relay desktop project list` shows the served ones), or serve it first with `relay desktop project enable {project_id}`"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(id: &str, name: &str) -> ServedProject {
        ServedProject {
            project_id: id.into(),
            name: name.into(),
        }
    }

    #[test]
    fn the_project_list_is_replaced_whole_and_names_the_shares() {
        let state = DesktopState::open_in_memory().expect("state");
        assert_eq!(
            state.service_projects().expect("read"),
            None,
            "never fetched"
        );
        let now = Timestamp::from_unix_millis(7);
        state
            .set_service_projects(&[served("p", "Support"), served("q", "Old")], now)
            .expect("cached");
        state
            .set_service_projects(
                &[
                    served("p", "Support desk"),
                    served(&"x".repeat(500), "bad id"),
                ],
                Timestamp::from_unix_millis(9),
            )
            .expect("cached again");
        let cached = state.service_projects().expect("read").expect("fetched");
        assert_eq!(cached.fetched_at, 9);
        assert_eq!(cached.projects, vec![served("p", "Support desk")]);
        assert_eq!(cached.name_of("p"), Some("Support desk"));
        assert_eq!(cached.name_of("q"), None, "gone from the service's list");

        state.set_service_projects(&[], now).expect("emptied");
        let cached = state.service_projects().expect("read").expect("fetched");
        assert!(cached.projects.is_empty(), "an empty list is a list");
    }

    #[test]
    fn only_an_enabled_project_may_be_shared_with() {
        let state = DesktopState::open_in_memory().expect("state");
        let now = Timestamp::from_unix_millis(1);
        let unknown = state.check_shareable("p").unwrap_err().to_string();
        assert!(unknown.contains("does not serve a project p"), "{unknown}");
        state
            .set_project_enabled("p", false, now)
            .expect("disabled");
        let disabled = state.check_shareable("p").unwrap_err().to_string();
        assert!(
            disabled.contains("is disabled on this desktop"),
            "{disabled}"
        );
        state.set_project_enabled("p", true, now).expect("enabled");
        state.check_shareable("p").expect("shareable");
    }
}
