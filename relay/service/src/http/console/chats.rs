//! Chat links and their tasks: "Link chat", the event subscription toggle, "Assign task" with
//! an idempotency key (made by the server for a form without script, by `crypto.randomUUID()`
//! and kept while the goal is unchanged with it), the task list the script refreshes, "Cancel",
//! results and artifact downloads.

use std::sync::Arc;

use axum::Form;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, header};
use axum::response::IntoResponse;
use maud::{Markup, html};
use serde::Deserialize;

use super::projects::CsrfForm;
use super::{
    ConsoleResult, Signed, csrf_field, fragment as html_fragment, page as console_page, see_other,
    when,
};
use crate::chat_tasks::NO_EVENT_SUBSCRIPTION_HINT;
use crate::chat_tasks::media_type;
use crate::chat_tasks::owner::{self, Acting, AssignRequest};
use crate::chat_tasks::view::{ArtifactMeta, OwnerTaskList, OwnerTaskView};
use crate::http::AppState;
use crate::store::Store;

/// What the link page says while the host is told of new tasks.
pub const SUBSCRIPTION_ACTIVE: &str = "An event subscription is active for this chat";

/// The "Link chat" form.
#[derive(Debug, Deserialize)]
pub struct LinkForm {
    csrf: Option<String>,
    project_id: Option<String>,
    host: Option<String>,
    event_subscription: Option<String>,
}

/// `POST /console/chats`.
pub async fn create(
    State(app): State<Arc<AppState>>,
    signed: Signed,
    Form(form): Form<LinkForm>,
) -> ConsoleResult {
    signed.check_csrf(form.csrf.as_deref())?;
    let identity = signed.identity();
    let link = owner::create_link(
        &app.tasks,
        Acting::Owner(&identity),
        form.project_id.as_deref().unwrap_or_default(),
        form.host.as_deref().unwrap_or_default(),
        form.event_subscription.is_some(),
    )
    .await?;
    Ok(see_other(&format!("/console/chats/{}", link.chat_link_id)))
}

/// The link page: its subscription, the assign form and its tasks.
async fn page_of_link(app: &AppState, signed: &Signed, id: &str) -> ConsoleResult {
    let identity = signed.identity();
    let list = owner::list_tasks(&app.tasks, Acting::Owner(&identity), id).await?;
    let refresh = app.config.console_refresh;
    let key = uuid::Uuid::new_v4().to_string();
    let body = html! {
        p { "A " strong { (list.host.as_str()) } " chat. " a href="/console" { "All projects" } }
        (subscription_section(signed, &list))
        section.card {
            form id="assign" method="post" action={ "/console/chats/" (list.chat_link_id) "/tasks" } {
                (csrf_field(signed))
                input type="hidden" name="idempotency_key" value=(key);
                label for="goal" { "Goal" }
                textarea id="goal" name="goal" required {}
                button type="submit" { "Assign task" }
            }
        }
        h2 { "Tasks" }
        p.muted { "The list refreshes itself every " (refresh.as_secs_f64()) " s." }
        div id="tasks" data-src={ "/console/chats/" (list.chat_link_id) "/tasks" }
            data-refresh-ms=(refresh.as_millis()) aria-live="polite" {
            (tasks(app.store.as_ref(), signed, &list).await?)
        }
    };
    Ok(console_page(signed, "Chat link", body))
}

/// `GET /console/chats/{id}`.
pub async fn page(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    signed: Signed,
) -> ConsoleResult {
    page_of_link(&app, &signed, &id).await
}

fn subscription_section(signed: &Signed, list: &OwnerTaskList) -> Markup {
    let active = list.event_subscription;
    html! {
        section.card {
            p id="subscription" {
                @if active { (SUBSCRIPTION_ACTIVE) } @else { (NO_EVENT_SUBSCRIPTION_HINT) }
            }
            form method="post" action={ "/console/chats/" (list.chat_link_id) "/subscription" } {
                (csrf_field(signed))
                input type="hidden" name="active" value=(if active { "false" } else { "true" });
                button type="submit" {
                    @if active { "Turn event subscription off" } @else { "Turn event subscription on" }
                }
            }
        }
    }
}

async fn tasks(
    store: &dyn Store,
    signed: &Signed,
    list: &OwnerTaskList,
) -> Result<Markup, super::Refusal> {
    let mut rows = Vec::with_capacity(list.tasks.len());
    for task in &list.tasks {
        let artifacts = if task.status.is_terminal() {
            store
                .artifacts(task.task_id)
                .await?
                .iter()
                .map(ArtifactMeta::of)
                .collect()
        } else {
            Vec::new()
        };
        rows.push(task_card(signed, task, &artifacts));
    }
    Ok(html! {
        @if rows.is_empty() { p.muted { "No tasks yet." } }
        @for row in rows { (row) }
    })
}

fn task_card(signed: &Signed, task: &OwnerTaskView, artifacts: &[ArtifactMeta]) -> Markup {
    html! {
        div.card data-task=(task.task_id) {
            p {
                span.status { (task.status_label) }
                " · assigned " (when(Some(task.created_at)))
                " · " a href={ "/console/tasks/" (task.task_id) } { "details" }
            }
            pre { (task.goal) }
            @if let Some(result) = &task.result { h3 { "Result" } pre { (result) } }
            (artifact_links(task, artifacts))
            @if !task.status.is_terminal() {
                form.inline method="post" action={ "/console/tasks/" (task.task_id) "/cancel" } {
                    (csrf_field(signed))
                    button type="submit" { "Cancel" }
                }
            }
        }
    }
}

fn artifact_links(task: &OwnerTaskView, artifacts: &[ArtifactMeta]) -> Markup {
    html! {
        @if !artifacts.is_empty() {
            ul { @for a in artifacts {
                li { a href={ "/console/tasks/" (task.task_id) "/artifacts/" (a.artifact_id) } download { (a.name) }
                     " (" (a.mime) ", " (a.size_bytes) " bytes)" }
            } }
        }
    }
}

/// `GET /console/chats/{id}/tasks`: the task list alone, for the script's refresh.
pub async fn fragment(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    signed: Signed,
) -> ConsoleResult {
    let identity = signed.identity();
    let list = owner::list_tasks(&app.tasks, Acting::Owner(&identity), &id).await?;
    Ok(html_fragment(
        tasks(app.store.as_ref(), &signed, &list).await?,
    ))
}

/// The "Assign task" form.
#[derive(Debug, Deserialize)]
pub struct AssignForm {
    csrf: Option<String>,
    goal: Option<String>,
    idempotency_key: Option<String>,
}

/// `POST /console/chats/{id}/tasks`: a repeat with the same key creates no second task.
pub async fn assign(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    signed: Signed,
    Form(form): Form<AssignForm>,
) -> ConsoleResult {
    signed.check_csrf(form.csrf.as_deref())?;
    let identity = signed.identity();
    // Browsers send textarea line breaks as CRLF; the goal is stored as typed.
    let goal = form.goal.unwrap_or_default().replace("\r\n", "\n");
    let request = AssignRequest {
        chat_link_id: &id,
        goal: &goal,
        idempotency_key: form.idempotency_key.as_deref().unwrap_or_default(),
    };
    owner::assign_task(&app.tasks, Acting::Owner(&identity), request).await?;
    Ok(see_other(&format!("/console/chats/{id}")))
}

/// The subscription toggle.
#[derive(Debug, Deserialize)]
pub struct SubscriptionForm {
    csrf: Option<String>,
    active: Option<String>,
}

/// `POST /console/chats/{id}/subscription`.
pub async fn subscription(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    signed: Signed,
    Form(form): Form<SubscriptionForm>,
) -> ConsoleResult {
    signed.check_csrf(form.csrf.as_deref())?;
    let identity = signed.identity();
    let active = form.active.as_deref() == Some("true");
    owner::set_event_subscription(&app.tasks, Acting::Owner(&identity), &id, active).await?;
    Ok(see_other(&format!("/console/chats/{id}")))
}

/// `GET /console/tasks/{id}`.
pub async fn task(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    signed: Signed,
) -> ConsoleResult {
    let identity = signed.identity();
    let detail = owner::task_detail(&app.tasks, Acting::Owner(&identity), &id).await?;
    let t = &detail.task;
    let body = html! {
        p { a href={ "/console/chats/" (t.chat_link_id) } { "Back to the chat link" } }
        (task_card(&signed, t, &detail.artifacts))
        p.muted { "Expires " (when(Some(t.expires_at))) @if let Some(done) = t.finished_at { " · finished " (when(Some(done))) } }
    };
    Ok(console_page(&signed, "Task", body))
}

/// `POST /console/tasks/{id}/cancel`.
pub async fn cancel(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    signed: Signed,
    Form(form): Form<CsrfForm>,
) -> ConsoleResult {
    signed.check_csrf(form.csrf.as_deref())?;
    let identity = signed.identity();
    let detail = owner::task_detail(&app.tasks, Acting::Owner(&identity), &id).await?;
    owner::cancel_task(&app.tasks, Acting::Owner(&identity), &id).await?;
    Ok(see_other(&format!(
        "/console/chats/{}",
        detail.task.chat_link_id
    )))
}

/// The artifact types a download keeps: text a browser only shows. An agent chooses the type,
/// and from the console's origin a script, style or HTML type would be loadable under the
/// console's `script-src 'self'` (issue 44), so every other type is served as
/// `application/octet-stream`, which with `nosniff` no browser runs or renders.
const SHOWN_AS_IS: [&str; 8] = [
    "text/plain",
    "text/markdown",
    "text/csv",
    "text/tab-separated-values",
    "text/x-diff",
    "text/x-patch",
    "application/json",
    "application/x-ndjson",
];

/// The `Content-Type` an artifact of media type `mime` is downloaded with.
fn download_type(mime: &str) -> HeaderValue {
    let shown = media_type::essence(mime).is_some_and(|e| SHOWN_AS_IS.contains(&e.as_str()));
    shown
        .then(|| HeaderValue::from_str(mime).ok())
        .flatten()
        .unwrap_or_else(|| HeaderValue::from_static("application/octet-stream"))
}

/// `GET /console/tasks/{id}/artifacts/{artifact_id}`: the file, as an attachment of its type
/// (or as `application/octet-stream`: [`SHOWN_AS_IS`]).
pub async fn artifact(
    State(app): State<Arc<AppState>>,
    Path((id, artifact_id)): Path<(String, String)>,
    signed: Signed,
) -> ConsoleResult {
    let identity = signed.identity();
    let content = owner::artifact(&app.tasks, Acting::Owner(&identity), &id, &artifact_id).await?;
    let mut response = content.content.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, download_type(&content.meta.mime));
    let name: String = content
        .meta
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if let Ok(disposition) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, disposition);
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; sandbox"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}
