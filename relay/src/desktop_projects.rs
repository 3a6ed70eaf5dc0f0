//! `relay desktop project enable ID`: the id is checked against the service's projects for the
//! desktop token before the desktop serves it, so a typo or another owner's project is refused
//! instead of leaving a relay whose syncs are all refused.
//!
//! When the service cannot be reached (or is not given), the list fetched last (by `relay
//! desktop run` or an earlier check, kept in the state file) decides; with no list yet the
//! project is enabled with a warning that it was not checked: a desktop set up offline still
//! works, and the relay warns at its first contact if the service does not know the project.

use std::sync::Arc;

use anyhow::{Result, bail};
use relay_desktop::api::{ApiError, DesktopApi, HttpTransport};
use relay_desktop::state::{DesktopState, ServiceProjects};
use relay_protocol::ServedProject;
use relay_protocol::clock::{Clock, SystemClock, Timestamp};
use runner::trace::for_terminal;

/// Most projects a refusal names (the rest are counted).
const MAX_PROJECTS_NAMED: usize = 10;

/// What the check found out about the id.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// The service (or its list fetched at `fetched_at`) has the project, with this name.
    Known {
        name: String,
        fetched_at: Option<i64>,
    },
    /// Nothing to check against: why.
    Unchecked(String),
}

/// Checks `id` as the module says, then enables it. Progress and warnings go to stderr.
pub async fn enable(
    state: &DesktopState,
    id: &str,
    service: Option<String>,
    token: Option<String>,
) -> Result<()> {
    let verdict = check(state, id, service, token).await?;
    state.set_project_enabled(id, true, SystemClock.now())?;
    match verdict {
        Verdict::Known {
            name,
            fetched_at: None,
        } => note(&format!(
            "project {id} ({}) is served by this desktop",
            for_terminal(&name)
        )),
        Verdict::Known {
            name,
            fetched_at: Some(at),
        } => note(&format!(
            "project {id} ({}) is served by this desktop; checked against the service's project list of {}",
            for_terminal(&name),
            Timestamp::from_unix_millis(at).to_rfc3339()
        )),
        Verdict::Unchecked(why) => note(&format!(
            "warning: project {id} is enabled unchecked: {why}; if the service does not know it, the relay says so at its first contact and its syncs are refused"
        )),
    }
    Ok(())
}

async fn check(
    state: &DesktopState,
    id: &str,
    service: Option<String>,
    token: Option<String>,
) -> Result<Verdict> {
    const GIVE: &str = "give --service URL and --token T (or RELAY_SERVICE_URL and RELAY_DESKTOP_TOKEN), as to `relay desktop run`";
    let unreachable = match (service, token) {
        (Some(service), Some(token)) => match ask(&service, &token).await {
            Ok(projects) => {
                state.set_service_projects(&projects, SystemClock.now())?;
                return live_verdict(id, &service, &projects);
            }
            Err(Asked::Refused(message)) => bail!(message),
            Err(Asked::Unreachable(why)) => {
                note(&format!(
                    "cannot ask the service at {service} about project {id}: {why}"
                ));
                format!("the service at {service} cannot be reached ({why})")
            }
        },
        (None, None) => format!("no service was given to check it with ({GIVE})"),
        _ => bail!("to check project {id} against the service, {GIVE}: both are needed"),
    };
    match state.service_projects()? {
        Some(known) => cached_verdict(id, &known, &unreachable),
        None => Ok(Verdict::Unchecked(format!(
            "{unreachable}, and no project list was fetched from it yet"
        ))),
    }
}

/// Why the service gave no list.
enum Asked {
    /// It answered for good: the token is not one it accepts (the message says what to do).
    Refused(String),
    /// No answer, or one that may change (5xx, an older service without the list).
    Unreachable(String),
}

async fn ask(service: &str, token: &str) -> Result<Vec<ServedProject>, Asked> {
    let transport = HttpTransport::new(service).map_err(|e| Asked::Refused(e.to_string()))?;
    let api = DesktopApi::new(Arc::new(transport), token);
    match api.projects().await {
        Ok(projects) => Ok(projects),
        Err(ApiError::Status {
            status, message, ..
        }) if matches!(status.as_u16(), 401 | 403) => Err(Asked::Refused(format!(
            "the service at {service} refused this desktop token ({status}: {message}): it is revoked, expired or not a desktop token of this service; mint one with `relay admin token create --desktop` and give it with --token"
        ))),
        Err(other) => Err(Asked::Unreachable(other.to_string())),
    }
}

fn live_verdict(id: &str, service: &str, projects: &[ServedProject]) -> Result<Verdict> {
    match projects.iter().find(|p| p.project_id == id) {
        Some(project) => Ok(Verdict::Known {
            name: project.name.clone(),
            fetched_at: None,
        }),
        None => bail!(
            "the service at {service} knows no project {id} for this desktop token, so nothing of it would reach this desktop: check the id; {}",
            served_list(projects)
        ),
    }
}

fn cached_verdict(id: &str, known: &ServiceProjects, unreachable: &str) -> Result<Verdict> {
    match known.name_of(id) {
        Some(name) => Ok(Verdict::Known {
            name: name.to_owned(),
            fetched_at: Some(known.fetched_at),
        }),
        None => bail!(
            "{unreachable}, and its project list for this desktop token (fetched {}) has no project {id}: check the id; {}; if the project was created since, enable it while the service can be reached",
            Timestamp::from_unix_millis(known.fetched_at).to_rfc3339(),
            served_list(&known.projects)
        ),
    }
}

/// "the token serves: ID (NAME), …" with at most [`MAX_PROJECTS_NAMED`] named.
fn served_list(projects: &[ServedProject]) -> String {
    if projects.is_empty() {
        return "the token serves no project at all: mint a desktop token for the project's owner (`relay admin token create --desktop --project ID`)".to_owned();
    }
    let mut named: Vec<String> = projects
        .iter()
        .take(MAX_PROJECTS_NAMED)
        .map(|p| format!("{} ({})", p.project_id, for_terminal(&p.name)))
        .collect();
    if projects.len() > MAX_PROJECTS_NAMED {
        named.push(format!("and {} more", projects.len() - MAX_PROJECTS_NAMED));
    }
    format!("the token serves {}", named.join(", "))
}

/// A line for the person at the terminal (stderr; a closed stderr is no reason to fail).
fn note(text: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(n: usize) -> Vec<ServedProject> {
        (0..n)
            .map(|i| ServedProject {
                project_id: format!("p{i}"),
                name: format!("Project {i}"),
            })
            .collect()
    }

    #[test]
    fn an_unknown_id_is_refused_naming_the_tokens_projects() {
        let error = live_verdict("bogus", "http://s", &served(2))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("knows no project bogus")
                && error.contains("p0 (Project 0), p1 (Project 1)"),
            "{error}"
        );
        let many = live_verdict("bogus", "http://s", &served(12))
            .unwrap_err()
            .to_string();
        assert!(
            many.contains("and 2 more") && !many.contains("p10"),
            "{many}"
        );
        let none = live_verdict("bogus", "http://s", &[])
            .unwrap_err()
            .to_string();
        assert!(none.contains("serves no project at all"), "{none}");
        assert_eq!(
            live_verdict("p1", "http://s", &served(2)).expect("known"),
            Verdict::Known {
                name: "Project 1".into(),
                fetched_at: None
            }
        );
    }

    #[test]
    fn offline_the_list_fetched_last_decides() {
        let known = ServiceProjects {
            fetched_at: 0,
            projects: served(1),
        };
        let error = cached_verdict("bogus", &known, "the service cannot be reached")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("the service cannot be reached")
                && error.contains("fetched 1970-01-01T00:00:00")
                && error.contains("has no project bogus"),
            "{error}"
        );
        assert_eq!(
            cached_verdict("p0", &known, "offline").expect("known"),
            Verdict::Known {
                name: "Project 0".into(),
                fetched_at: Some(0)
            }
        );
    }
}
