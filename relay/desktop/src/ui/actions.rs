//! The page's state changes: each a POST whose form carries the session's CSRF token, each the
//! same call into the desktop state as the `relay desktop …` command that does the same.

use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::access::same_secret;
use super::pages::refusal;
use super::{MAX_FORM_FIELDS, Page, Signed, secured};
use crate::state::{ApprovalStatus, DesktopState, StateError};
use relay_protocol::GraphSessionId;
use relay_protocol::clock::Timestamp;
use runner::host::approvals::Policy;

/// Why an action was refused: its status and what to tell the owner.
pub(crate) struct Refused(StatusCode, String);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        refusal(self.0, &self.1)
    }
}

impl From<StateError> for Refused {
    fn from(error: StateError) -> Self {
        match error {
            StateError::Invalid(message) => Refused(StatusCode::BAD_REQUEST, message),
            other => Refused(StatusCode::INTERNAL_SERVER_ERROR, other.to_string()),
        }
    }
}

fn bad_request(message: impl Into<String>) -> Refused {
    Refused(StatusCode::BAD_REQUEST, message.into())
}

/// A posted form whose CSRF token was checked.
struct Form(Vec<(String, String)>);

impl Form {
    /// The form in `body`, or the 403 when its `csrf` is missing or not the session's.
    fn checked(signed: &Signed, body: &[u8]) -> Result<Form, Refused> {
        let fields: Vec<(String, String)> = form_urlencoded::parse(body)
            .take(MAX_FORM_FIELDS)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let form = Form(fields);
        match form.first("csrf") {
            Some(csrf) if same_secret(&signed.0.csrf, csrf) => Ok(form),
            _ => Err(Refused(
                StatusCode::FORBIDDEN,
                "The form's CSRF token is missing or stale: reload the page and try again.".into(),
            )),
        }
    }

    fn first(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn required(&self, name: &str) -> Result<&str, Refused> {
        self.first(name)
            .ok_or_else(|| bad_request(format!("The form has no `{name}` field.")))
    }
}

/// After a change, back to the page it was made on.
fn back_to(path: &'static str) -> Response {
    secured((StatusCode::SEE_OTHER, [(header::LOCATION, path)]).into_response())
}

/// Shares a session with the checked projects and unshares it from the unchecked ones, among
/// those the form showed (a project enabled after the page was drawn is left as it is).
pub(crate) async fn sharing(
    State(page): State<Arc<Page>>,
    Extension(signed): Extension<Signed>,
    body: Bytes,
) -> Response {
    super::on_state(
        page.state.clone(),
        move |state| -> Result<Response, Refused> {
            let form = Form::checked(&signed, &body)?;
            let session: GraphSessionId = form
                .required("session")?
                .parse()
                .map_err(|e: relay_protocol::InvalidInput| bad_request(e.0))?;
            apply_sharing(state, page.clock.now(), &form, &session)?;
            Ok(back_to(super::HOME))
        },
    )
    .await
}

fn apply_sharing(
    state: &DesktopState,
    now: Timestamp,
    form: &Form,
    session: &GraphSessionId,
) -> Result<(), StateError> {
    let known = state.projects()?;
    for project in form.all("project") {
        if !known.iter().any(|(id, _)| id == project) {
            return Err(StateError::Invalid(format!(
                "no project {project} on this desktop: enable it first"
            )));
        }
        let want = form.all("shared").any(|p| p == project);
        let has = state
            .shared_sessions(project)?
            .iter()
            .any(|s| &s.id == session);
        match (want, has) {
            (true, false) => {
                // As `relay desktop share`: a project disabled since the page was drawn would
                // take a share that reaches no agent.
                state.check_shareable(project)?;
                state.share(project, session, now)?;
            }
            (false, true) => state.unshare(project, session)?,
            _ => {}
        }
    }
    Ok(())
}

/// Enables or disables a project.
pub(crate) async fn project(
    State(page): State<Arc<Page>>,
    Extension(signed): Extension<Signed>,
    body: Bytes,
) -> Response {
    super::on_state(
        page.state.clone(),
        move |state| -> Result<Response, Refused> {
            let form = Form::checked(&signed, &body)?;
            let project = form.required("project")?.trim();
            let enabled = match form.required("enabled")? {
                "true" => true,
                "false" => false,
                other => {
                    return Err(bad_request(format!(
                        "`enabled` is true or false, not {other}"
                    )));
                }
            };
            state.set_project_enabled(project, enabled, page.clock.now())?;
            Ok(back_to(super::HOME))
        },
    )
    .await
}

/// Sets the policy of every tool the form names (only tools the relay has).
pub(crate) async fn policies(
    State(page): State<Arc<Page>>,
    Extension(signed): Extension<Signed>,
    body: Bytes,
) -> Response {
    super::on_state(
        page.state.clone(),
        move |state| -> Result<Response, Refused> {
            let form = Form::checked(&signed, &body)?;
            let mut changes = Vec::new();
            for tool in super::known_tools() {
                if let Some(value) = form.first(&tool) {
                    let policy = value
                        .parse::<Policy>()
                        .map_err(|e| bad_request(e.to_string()))?;
                    changes.push((tool, policy));
                }
            }
            for (tool, policy) in changes {
                state.set_policy(&tool, policy)?;
            }
            Ok(back_to("/policies"))
        },
    )
    .await
}

/// Approves or denies a pending tool call, as `relay desktop approvals approve|deny ID` does.
pub(crate) async fn decide(
    State(page): State<Arc<Page>>,
    Extension(signed): Extension<Signed>,
    body: Bytes,
) -> Response {
    super::on_state(page.state.clone(), move |state| -> Result<Response, Refused> {
        let form = Form::checked(&signed, &body)?;
        let id = form.required("id")?;
        let decision = match form.required("decision")? {
            "approve" => ApprovalStatus::Approved,
            "deny" => ApprovalStatus::Denied,
            other => {
                return Err(bad_request(format!(
                    "the decision is approve or deny, not {other}"
                )));
            }
        };
        // As the CLI: a decision nothing would act on is refused, not recorded.
        if state.approval_run_live(id)? == Some(false) {
            return Err(Refused(
                StatusCode::CONFLICT,
                format!(
                    "Approval {id} belongs to a run that is no longer running, so nothing would act on the decision; the run history shows how it ended."
                ),
            ));
        }
        if let Some(path) = state.path()
            && crate::lock::RelayLock::holder(path)
                .map_err(|e| Refused(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
                .is_none()
        {
            return Err(Refused(
                StatusCode::CONFLICT,
                format!(
                    "No `relay desktop run` is running on this state file, so the run that asked approval {id} is not live and nothing would act on the decision."
                ),
            ));
        }
        if !state.decide(id, decision, page.clock.now())? {
            return Err(Refused(
                StatusCode::CONFLICT,
                format!("No pending approval {id}: it was answered already, or it expired."),
            ));
        }
        Ok(back_to("/approvals"))
    })
    .await
}

/// Cancels a running run, as `relay desktop cancel RUN` does: the running relay stops it within
/// its sharing watch; back to the run's page, which then shows how it ended.
pub(crate) async fn cancel(
    State(page): State<Arc<Page>>,
    Extension(signed): Extension<Signed>,
    body: Bytes,
) -> Response {
    super::on_state(page.state.clone(), move |state| -> Result<Response, Refused> {
        let form = Form::checked(&signed, &body)?;
        let run = form.required("run")?;
        let Some(found) = state.find_run(run)? else {
            return Err(Refused(
                StatusCode::NOT_FOUND,
                format!("No run {run} is in the history."),
            ));
        };
        if found.status != "running" || !found.began {
            return Err(Refused(
                StatusCode::CONFLICT,
                format!(
                    "Run {} is not running (it is {}), so there is nothing to cancel.",
                    found.command_id, found.status
                ),
            ));
        }
        if let Some(path) = state.path()
            && crate::lock::RelayLock::holder(path)
                .map_err(|e| Refused(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
                .is_none()
        {
            return Err(Refused(
                StatusCode::CONFLICT,
                "No `relay desktop run` is running on this state file, so no run is going; its next start reports the run as failed.".to_owned(),
            ));
        }
        let command = found
            .command_id
            .parse()
            .map_err(|e: relay_protocol::InvalidInput| bad_request(e.0))?;
        state.request_cancel(&command, page.clock.now())?;
        Ok(secured(
            (
                StatusCode::SEE_OTHER,
                [(header::LOCATION, format!("/runs/{}", found.execution_id))],
            )
                .into_response(),
        ))
    })
    .await
}
