//! The pages. Labels and button texts are a contract: people, assistive technology and the
//! browser tests find the controls by them ("Shared with PROJECT", one select per tool named
//! after it, "Approve", "Deny").

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use super::{Page, Signed, secured, timeline};
use crate::state::{HistoryRow, Session, StateError};
use relay_protocol::clock::Timestamp;

/// Most runs the history page lists (newest first).
pub const MAX_RUNS_LISTED: usize = 200;
/// Characters of a result or error the history list shows.
pub const PREVIEW_CHARS: usize = 160;
/// Most decided approvals shown under the pending ones.
pub const MAX_DECIDED_SHOWN: usize = 20;

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:64rem;margin:1.5rem auto;padding:0 1rem;color:#1b1b1b;line-height:1.4}\
nav{display:flex;flex-wrap:wrap;gap:.4rem 1.2rem;margin-bottom:1rem}nav a{color:#1d4f91}nav a[aria-current]{font-weight:700;color:#1b1b1b}\
section{border:1px solid #ccc;border-radius:6px;padding:.6rem 1rem;margin:1rem 0}h2{font-size:1.15rem;margin:.3rem 0}\
label{margin-right:.4rem}.check{display:block;margin:.3rem 0}.field{display:block;margin:.5rem 0}\
button{font-size:1rem;padding:.35rem 1rem;margin:.4rem .5rem .2rem 0}select,input[type=text]{font-size:1rem;padding:.25rem}\
pre{background:#f4f4f4;padding:.5rem;overflow-x:auto;white-space:pre-wrap;word-break:break-word;max-height:40rem}\
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:.25rem .5rem;border-bottom:1px solid #ddd;vertical-align:top}\
.wide{overflow-x:auto}.timeline svg{width:100%;height:auto}.timeline .narrow{display:none}\
@media (max-width:40rem){.timeline .broad{display:none}.timeline .narrow{display:block}}.muted{color:#555}.error{color:#a40000}\
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem}dt{font-weight:600}dd{margin:0;word-break:break-word}";

/// The sections, in the nav's order: path and title.
const SECTIONS: [(&str, &str); 4] = [
    ("/", "Graph sessions"),
    ("/policies", "Tool policies"),
    ("/approvals", "Pending approvals"),
    ("/runs", "Run history"),
];

/// A whole page.
pub(crate) fn layout(status: StatusCode, current: &str, title: &str, body: Markup) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · relay desktop" }
                style { (STYLE) }
            }
            body {
                nav aria-label="Desktop" {
                    @for (path, name) in SECTIONS {
                        @if path == current { a href=(path) aria-current="page" { (name) } }
                        @else { a href=(path) { (name) } }
                    }
                }
                h1 { (title) }
                (body)
            }
        }
    };
    let mut response = (status, markup.into_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    secured(response)
}

/// A refusal or an error: a page that only says why.
pub(crate) fn refusal(status: StatusCode, text: &str) -> Response {
    let title = if status == StatusCode::UNAUTHORIZED {
        "Open the desktop page's link"
    } else if status.is_client_error() {
        "Refused"
    } else {
        "Something went wrong"
    };
    layout(status, "", title, html! { p { (text) } })
}

/// The answer to a state error: the owner's mistake (400) or the file's (500).
pub(crate) fn failure(error: &StateError) -> Response {
    match error {
        StateError::Invalid(message) => refusal(StatusCode::BAD_REQUEST, message),
        other => refusal(StatusCode::INTERNAL_SERVER_ERROR, &other.to_string()),
    }
}

fn csrf_field(signed: &Signed) -> Markup {
    html! { input type="hidden" name="csrf" value=(signed.0.csrf); }
}

fn time(millis: i64) -> String {
    Timestamp::from_unix_millis(millis)
        .to_rfc3339()
        .replace('T', " ")
}

/// Graph sessions with their sharing per enabled project, and the projects.
pub(crate) async fn sessions(
    State(page): State<Arc<Page>>,
    Extension(signed): Extension<Signed>,
) -> Response {
    super::on_state(page.state.clone(), move |state| {
        let loaded = (|| {
            let projects = state.projects()?;
            let enabled: Vec<String> = projects
                .iter()
                .filter(|(_, on)| *on)
                .map(|(id, _)| id.clone())
                .collect();
            let mut shared = Vec::new();
            for project in &enabled {
                shared.push(state.shared_sessions(project)?);
            }
            Ok::<_, StateError>((state.sessions()?, projects, enabled, shared))
        })();
        let (sessions, projects, enabled, shared) = match loaded {
            Ok(loaded) => loaded,
            Err(e) => return failure(&e),
        };
        let body = html! {
            p.muted { "What each project may run on this desktop. The relay checks this again right before every run." }
            @if sessions.is_empty() {
                p { "No graph sessions yet: " code { "relay desktop session add FILE" } " adds one." }
            }
            @for (n, session) in sessions.iter().enumerate() {
                (session_section(&signed, n, session, &enabled, &shared))
            }
            (projects_section(&signed, &projects))
        };
        layout(StatusCode::OK, "/", "Graph sessions", body)
    })
    .await
}

fn session_section(
    signed: &Signed,
    n: usize,
    session: &Session,
    enabled: &[String],
    shared: &[Vec<Session>],
) -> Markup {
    html! {
        section {
            h2 { (session.name) }
            p.muted { code { (session.slug) } " · version " (session.version) " · " code { (session.id) } }
            @if !session.description.is_empty() { p { (session.description) } }
            @if enabled.is_empty() {
                p { "No project is enabled: enable one below to share this session." }
            } @else {
                form method="post" action="/sharing" {
                    (csrf_field(signed))
                    input type="hidden" name="session" value=(session.id);
                    @for (p, project) in enabled.iter().enumerate() {
                        @let id = format!("share-{n}-{p}");
                        @let on = shared[p].iter().any(|s| s.id == session.id);
                        input type="hidden" name="project" value=(project);
                        span.check {
                            input type="checkbox" id=(id) name="shared" value=(project) checked[on];
                            label for=(id) { "Shared with " (project) }
                        }
                    }
                    button type="submit" { "Save sharing" }
                }
            }
        }
    }
}

fn projects_section(signed: &Signed, projects: &[(String, bool)]) -> Markup {
    html! {
        section {
            h2 { "Projects" }
            @if projects.is_empty() { p { "No projects yet." } }
            table {
                @for (project, on) in projects {
                    tr {
                        td { code { (project) } }
                        td { @if *on { "enabled" } @else { "disabled" } }
                        td {
                            form method="post" action="/projects" {
                                (csrf_field(signed))
                                input type="hidden" name="project" value=(project);
                                input type="hidden" name="enabled" value=(if *on { "false" } else { "true" });
                                button type="submit" { @if *on { "Disable " } @else { "Enable " } (project) }
                            }
                        }
                    }
                }
            }
            form method="post" action="/projects" {
                (csrf_field(signed))
                input type="hidden" name="enabled" value="true";
                label.field for="new-project" { "Project id" }
                input type="text" id="new-project" name="project" required maxlength="128";
                button type="submit" { "Enable project" }
            }
        }
    }
}

/// One select per tool: allow, ask or deny.
pub(crate) async fn policies(
    State(page): State<Arc<Page>>,
    Extension(signed): Extension<Signed>,
) -> Response {
    super::on_state(page.state.clone(), move |state| {
        let policy = match state.policy() {
            Ok(policy) => policy,
            Err(e) => return failure(&e),
        };
        let body = html! {
            p.muted { "What a remotely started run may do with each tool: run it, ask you first (under Pending approvals), or refuse it. A tool with no policy set is denied." }
            form method="post" action="/policies" {
                (csrf_field(&signed))
                @for (n, tool) in super::known_tools().iter().enumerate() {
                    @let id = format!("policy-{n}");
                    @let current = policy.get(tool).as_str();
                    span.field {
                        label for=(id) { (tool) }
                        select id=(id) name=(tool) {
                            @for choice in ["allow", "ask", "deny"] {
                                option value=(choice) selected[choice == current] { (choice) }
                            }
                        }
                    }
                }
                button type="submit" { "Save policies" }
            }
        };
        layout(StatusCode::OK, "/policies", "Tool policies", body)
    })
    .await
}

/// Tool calls waiting for the owner, each with "Approve" and "Deny".
pub(crate) async fn approvals(
    State(page): State<Arc<Page>>,
    Extension(signed): Extension<Signed>,
) -> Response {
    super::on_state(page.state.clone(), move |state| {
        let (all, history) = match state
            .approvals(true)
            .and_then(|a| Ok((a, state.history()?)))
        {
            Ok(loaded) => loaded,
            Err(e) => return failure(&e),
        };
        let run_of = |execution: &str| history.iter().find(|h| h.execution_id == execution);
        let (pending, decided): (Vec<_>, Vec<_>) = all
            .iter()
            .partition(|a| a.status == crate::state::ApprovalStatus::Pending);
        let body = html! {
            @if pending.is_empty() { p { "No tool call is waiting for your approval." } }
            @for approval in &pending {
                section {
                    h2 { "Tool " code { (approval.tool) } }
                    dl {
                        dt { "Tool" } dd { code { (approval.tool) } }
                        dt { "Arguments" } dd { pre { (approval.args) } }
                        dt { "Run" } dd {
                            a href=(format!("/runs/{}", approval.execution_id)) { (approval.execution_id) }
                            @if let Some(run) = run_of(&approval.execution_id) {
                                " · " code { (run.slug) } " for project " code { (run.project_id) }
                            }
                        }
                        @if let Some(name) = &approval.agent_name { dt { "Requested by" } dd { (name) } }
                        dt { "Asked" } dd { (time(approval.created_at)) }
                        @if let Some(at) = approval.expires_at { dt { "Denied if unanswered at" } dd { (time(at)) } }
                    }
                    form method="post" action="/approvals/decide" {
                        (csrf_field(&signed))
                        input type="hidden" name="id" value=(approval.id);
                        button type="submit" name="decision" value="approve" { "Approve" }
                        button type="submit" name="decision" value="deny" { "Deny" }
                    }
                }
            }
            @if !decided.is_empty() {
                h2 { "Decided" }
                div.wide { table {
                    tr { th { "Tool" } th { "Decision" } th { "Run" } th { "Asked" } }
                    @for approval in decided.iter().take(MAX_DECIDED_SHOWN) {
                        tr {
                            td { code { (approval.tool) } }
                            td { (approval.status) }
                            td { a href=(format!("/runs/{}", approval.execution_id)) { (approval.execution_id) } }
                            td { (time(approval.created_at)) }
                        }
                    }
                } }
            }
        };
        layout(StatusCode::OK, "/approvals", "Pending approvals", body)
    })
    .await
}

/// The run history, newest first.
pub(crate) async fn runs(State(page): State<Arc<Page>>) -> Response {
    super::on_state(page.state.clone(), move |state| {
        let loaded = state.history().and_then(|history| {
            let newest = match history.first() {
                Some(run) => state.execution(&run.execution_id)?,
                None => None,
            };
            Ok((history, newest))
        });
        let (history, newest) = match loaded {
            Ok(loaded) => loaded,
            Err(e) => return failure(&e),
        };
        let body = html! {
            @if history.is_empty() { p { "No runs yet." } }
            @else {
                div.wide { table {
                    tr { th { "Started" } th { "Graph" } th { "Project" } th { "Status" } th { "Tokens" } th { "Result or error" } }
                    @for run in history.iter().take(MAX_RUNS_LISTED) {
                        tr {
                            td { a href=(format!("/runs/{}", run.execution_id)) { (time(run.started_at)) } }
                            td { code { (run.slug) } }
                            td { code { (run.project_id) } }
                            td { (run.status) @if run.result_truncated { " (posted truncated)" } }
                            td { (run.total_tokens) }
                            td { (preview(run)) }
                        }
                    }
                } }
            }
            @if let Some((run, trace)) = &newest {
                section {
                    h2 { "Newest run: " code { (run.slug) } }
                    (run_details(run, trace.as_ref()))
                }
            }
        };
        layout(StatusCode::OK, "/runs", "Run history", body)
    })
    .await
}

/// The start of a run's result or error, for the list.
fn preview(run: &HistoryRow) -> String {
    let text = match (&run.error, &run.result) {
        (Some(error), _) => error.clone(),
        (None, Some(result)) => result.to_string(),
        (None, None) => String::new(),
    };
    let mut shown: String = text.chars().take(PREVIEW_CHARS).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    shown
}

/// One run: its full result, its error and its timeline.
pub(crate) async fn run(
    State(page): State<Arc<Page>>,
    Extension(signed): Extension<Signed>,
    Path(execution_id): Path<String>,
) -> Response {
    super::on_state(page.state.clone(), move |state| {
        let (run, trace) = match state.execution(&execution_id) {
            Ok(Some(found)) => found,
            Ok(None) => {
                return refusal(
                    StatusCode::NOT_FOUND,
                    "No run with this id is in the history.",
                );
            }
            Err(e) => return failure(&e),
        };
        let body = html! {
            @if run.status == "running" { (cancel_form(&signed, &run.execution_id)) }
            (run_details(&run, trace.as_ref()))
        };
        layout(
            StatusCode::OK,
            "/runs",
            &format!("Run of {}", run.slug),
            body,
        )
    })
    .await
}

fn run_details(run: &HistoryRow, trace: Option<&serde_json::Value>) -> Markup {
    let timeline = trace.map(timeline::from_trace);
    html! {
        (run_facts(run))
        h2 { "Result" }
        @if run.result_truncated {
            p { "The result was too long to post (over 100,000 characters), so the service has only the truncation flag. The full result is kept here." }
        }
        @match &run.result {
            Some(result) => pre { (serde_json::to_string_pretty(result).unwrap_or_default()) },
            None => p.muted { "No result." },
        }
        @if let Some(error) = &run.error { h2 { "Error" } pre.error { (error) } }
        h2 { "Timeline" }
        @match &timeline {
            Some(timeline) if !timeline.bars.is_empty() => {
                div.timeline {
                    div.broad { (timeline::svg_in(timeline, timeline::Layout::WIDE)) }
                    div.narrow { (timeline::svg_in(timeline, timeline::Layout::NARROW)) }
                }
                @if timeline.cut { p.muted { "Only the first " (timeline::MAX_BARS) " bars are drawn." } }
                (agent_tokens(timeline))
            }
            _ => p.muted { "No agents or tools ran, or no trace was kept for this run." },
        }
    }
}

/// The Cancel of a running run, as `relay desktop cancel` does it.
fn cancel_form(signed: &Signed, execution_id: &str) -> Markup {
    html! {
        form method="post" action="/runs/cancel" {
            (csrf_field(signed))
            input type="hidden" name="run" value=(execution_id);
            button type="submit" { "Cancel this run" }
            span.muted { " It ends cancelled, by you, with its tokens and cost so far." }
        }
    }
}

fn run_facts(run: &HistoryRow) -> Markup {
    html! {
        dl {
            dt { "Status" } dd { (run.status) }
            @if let Some(cause) = run.end_cause { dt { "Ended by" } dd { (cause.describe()) } }
            dt { "Project" } dd { code { (run.project_id) } }
            dt { "Session" } dd { code { (run.session_id) } }
            dt { "Channel" } dd { code { (run.channel) } }
            dt { "Execution" } dd { code { (run.execution_id) } }
            @if let Some(name) = &run.agent_name { dt { "Requested by" } dd { (name) } }
            @if let Some(arguments) = &run.arguments { dt { "Arguments" } dd { pre { (arguments) } } }
            @if let Some(at) = run.queued_at { dt { "Queued" } dd { (time(at)) } }
            dt { "Started" } dd { (time(run.started_at)) }
            dt { "Finished" } dd { @match run.finished_at { Some(at) => (time(at)), None => "still running" } }
            dt { "Tokens" } dd { (run.total_tokens) }
            dt { "Cost" } dd { (run.reported_cost) }
            @if let Some(refusal) = &run.refused_by_service {
                dt { "Refused by the service" } dd.error { (refusal) }
            }
        }
    }
}

fn agent_tokens(timeline: &timeline::Timeline) -> Markup {
    html! {
        h2 { "Tokens per agent" }
        div.wide { table {
            tr { th { "Agent" } th { "Tokens" } th { "From" } th { "To" } }
            @for bar in timeline.bars.iter().filter(|b| b.lane == timeline::Lane::Agent) {
                tr {
                    td { (bar.label) @if bar.failure.is_some() { " (failed)" } }
                    td { (bar.tokens.unwrap_or(0)) }
                    td { (bar.start_ms) " ms" }
                    td { (bar.end_ms) " ms" }
                }
            }
        } }
    }
}
