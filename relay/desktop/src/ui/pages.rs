//! The pages. Labels and button texts are a contract: people, assistive technology and the
//! browser tests find the controls by them ("Shared with PROJECT", one select per tool named
//! after it, "Approve", "Deny").

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use super::live::{self, Names, Relay, agent, run_cost};
use super::{Page, Signed, secured, timeline};
use crate::state::{
    ApprovalRow, ApprovalStatus, HistoryRow, QueuedRow, RunEnd, Session, StateError,
};
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
#now{margin:0 0 1rem}#now p{margin:.3rem 0}.banner{padding:.4rem .7rem;border-radius:6px}.up{background:#e7f3e7;border:1px solid #9c9}.down{background:#fbeaea;border:1px solid #d99}\
.preview{max-width:28rem;overflow-wrap:anywhere}\
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

/// A page that keeps itself current: the panel of what goes on now, the body, and the script
/// that refreshes every region marked `data-live`.
pub(crate) fn live_page(current: &str, title: &str, panel: Markup, body: Markup) -> Response {
    let body = html! {
        (panel)
        (body)
        script src=(live::SCRIPT_PATH) data-refresh=(live::REFRESH_MS) {}
    };
    layout(StatusCode::OK, current, title, body)
}

/// The names and the panel every live page needs.
fn common(state: &crate::state::DesktopState) -> Result<(Names, Markup), StateError> {
    let names = Names::of(state)?;
    let panel = live::panel(state, &names)?;
    Ok((names, panel))
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
            Ok::<_, StateError>((state.sessions()?, projects, enabled, shared, common(state)?))
        })();
        let (sessions, projects, enabled, shared, (names, panel)) = match loaded {
            Ok(loaded) => loaded,
            Err(e) => return failure(&e),
        };
        let body = html! {
            p.muted { "What each project may run on this desktop. The relay checks this again right before every run." }
            @if sessions.is_empty() {
                p { "No graph sessions yet: " code { "relay desktop session add FILE" } " adds one." }
            }
            @for (n, session) in sessions.iter().enumerate() {
                (session_section(&signed, n, session, &enabled, &shared, &names))
            }
            (projects_section(&signed, &projects, &names))
        };
        live_page("/", "Graph sessions", panel, body)
    })
    .await
}

/// The project's name for a label, or its id when the service gave none.
fn project_label<'a>(names: &'a Names, project: &'a str) -> &'a str {
    names.name(project).unwrap_or(project)
}

fn session_section(
    signed: &Signed,
    n: usize,
    session: &Session,
    enabled: &[String],
    shared: &[Vec<Session>],
    names: &Names,
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
                        span.check title=(project) {
                            input type="checkbox" id=(id) name="shared" value=(project) checked[on];
                            label for=(id) { "Shared with " (project_label(names, project)) }
                        }
                    }
                    button type="submit" { "Save sharing" }
                }
            }
        }
    }
}

fn projects_section(signed: &Signed, projects: &[(String, bool)], names: &Names) -> Markup {
    html! {
        section {
            h2 { "Projects" }
            @if projects.is_empty() { p { "No projects yet." } }
            table {
                @for (project, on) in projects {
                    tr {
                        td { @if let Some(name) = names.name(project) { (name) " " } code.muted { (project) } }
                        td { @if *on { "enabled" } @else { "disabled" } }
                        td {
                            form method="post" action="/projects" {
                                (csrf_field(signed))
                                input type="hidden" name="project" value=(project);
                                input type="hidden" name="enabled" value=(if *on { "false" } else { "true" });
                                button type="submit" { @if *on { "Disable " } @else { "Enable " } (project_label(names, project)) }
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
        let (policy, (_, panel)) = match state.policy().and_then(|p| Ok((p, common(state)?))) {
            Ok(loaded) => loaded,
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
        live_page("/policies", "Tool policies", panel, body)
    })
    .await
}

/// Everything the approvals page shows, read in one go.
struct ApprovalsView {
    pending: Vec<(ApprovalRow, bool)>,
    decided: Vec<(ApprovalRow, Option<RunEnd>)>,
    relay: Relay,
    names: Names,
    panel: Markup,
}

fn approvals_view(state: &crate::state::DesktopState) -> Result<ApprovalsView, StateError> {
    let (names, panel) = common(state)?;
    let mut pending = Vec::new();
    let mut decided = Vec::new();
    for approval in state.approvals(true)? {
        if approval.status == ApprovalStatus::Pending {
            let live = state.approval_run_live(&approval.id)? == Some(true);
            pending.push((approval, live));
        } else if decided.len() < MAX_DECIDED_SHOWN {
            let end = state.run_end(&approval.execution_id)?;
            decided.push((approval, end));
        }
    }
    Ok(ApprovalsView {
        pending,
        decided,
        relay: Relay::of(state),
        names,
        panel,
    })
}

/// Tool calls waiting for the owner, each with "Approve" and "Deny" while its run is live.
pub(crate) async fn approvals(
    State(page): State<Arc<Page>>,
    Extension(signed): Extension<Signed>,
) -> Response {
    super::on_state(page.state.clone(), move |state| {
        let view = match approvals_view(state) {
            Ok(view) => view,
            Err(e) => return failure(&e),
        };
        let now = page.clock.now();
        let body = html! {
            div #pending data-live {
                @if view.pending.is_empty() { p { "No tool call is waiting for your approval." } }
                @for (approval, run_live) in &view.pending {
                    (pending_section(&signed, approval, *run_live, &view))
                }
            }
            div #decided data-live { (decided_table(&view, now)) }
        };
        live_page("/approvals", "Pending approvals", view.panel.clone(), body)
    })
    .await
}

fn pending_section(
    signed: &Signed,
    approval: &ApprovalRow,
    run_live: bool,
    view: &ApprovalsView,
) -> Markup {
    let not_live = match (run_live, view.relay.may_be_live()) {
        (false, _) => Some(
            "Not live: the run that asked is no longer running, so nothing would act on an answer. The run history shows how it ended.",
        ),
        (true, false) => Some(
            "Not live: no relay is running on this state file, so nothing would act on an answer. Its next start reports the run failed.",
        ),
        (true, true) => None,
    };
    html! {
        section {
            h2 { "Tool " code { (approval.tool) } }
            dl {
                dt { "Tool" } dd { code { (approval.tool) } }
                dt { "Arguments" } dd { pre { (approval.args) } }
                dt { "Run" } dd {
                    a href=(format!("/runs/{}", approval.execution_id)) {
                        @match &approval.slug { Some(slug) => code { (slug) }, None => code { (approval.execution_id) } }
                    }
                    @if let Some(project) = &approval.project_id { " for project " (view.names.project(project)) }
                }
                dt { "Requested by" } dd { (agent(approval.agent_name.as_deref(), approval.agent_id.as_deref())) }
                dt { "Asked" } dd { (time(approval.created_at)) }
                @if let Some(at) = approval.expires_at { dt { "Denied if unanswered at" } dd { (time(at)) } }
            }
            @match not_live {
                Some(why) => p.error.not-live { (why) },
                None => form method="post" action="/approvals/decide" {
                    (csrf_field(signed))
                    input type="hidden" name="id" value=(approval.id);
                    button type="submit" name="decision" value="approve" { "Approve" }
                    button type="submit" name="decision" value="deny" { "Deny" }
                },
            }
        }
    }
}

fn decided_table(view: &ApprovalsView, now: Timestamp) -> Markup {
    html! {
        @if !view.decided.is_empty() {
            h2 { "Decided" }
            div.wide { table {
                tr { th { "Tool" } th { "Graph" } th { "Agent" } th { "Outcome" } th { "Project" } th { "Asked" } }
                @for (approval, end) in &view.decided {
                    tr {
                        td { code { (approval.tool) } }
                        td { a href=(format!("/runs/{}", approval.execution_id)) {
                            @match &approval.slug { Some(slug) => code { (slug) }, None => code { (approval.execution_id) } }
                        } }
                        td { (agent(approval.agent_name.as_deref(), approval.agent_id.as_deref())) }
                        td { (outcome(approval, end.as_ref(), now)) }
                        td { @if let Some(project) = &approval.project_id { (view.names.project(project)) } }
                        td { (time(approval.created_at)) }
                    }
                }
            } }
        }
    }
}

/// What became of an approval, in the owner's words: an `expired` one is told by why its run
/// stopped waiting (the approval timed out, the relay stopped, the run was cancelled).
pub(crate) fn outcome(approval: &ApprovalRow, run: Option<&RunEnd>, now: Timestamp) -> String {
    match approval.status {
        ApprovalStatus::Approved => return "approved".to_owned(),
        ApprovalStatus::Denied => return "denied".to_owned(),
        ApprovalStatus::Pending => return "pending".to_owned(),
        ApprovalStatus::Expired => {}
    }
    let Some(run) = run else {
        return "not answered (the run is not in the history)".to_owned();
    };
    let error = run.error.as_deref().unwrap_or_default();
    let ended = run.finished_at.unwrap_or(now.unix_millis());
    if error.contains("no answer to the approval request") {
        "timed out".to_owned()
    } else if error.contains("relay stopped") || error.contains("relay was stopped") {
        "relay stopped".to_owned()
    } else if run.status == "cancelled" {
        if error.is_empty() {
            "cancelled".to_owned()
        } else {
            format!("cancelled: {error}")
        }
    } else if approval.expires_at.is_some_and(|at| at <= ended) {
        "timed out".to_owned()
    } else {
        format!("not answered before the run ended ({})", run.status)
    }
}

/// The run history, newest first, and the runs queued as of the last sync.
pub(crate) async fn runs(State(page): State<Arc<Page>>) -> Response {
    super::on_state(page.state.clone(), move |state| {
        let loaded = state.history().and_then(|history| {
            let newest = match history.first() {
                Some(run) => state.execution(&run.execution_id)?,
                None => None,
            };
            Ok((history, newest, state.queued()?, common(state)?))
        });
        let (history, newest, queued, (names, panel)) = match loaded {
            Ok(loaded) => loaded,
            Err(e) => return failure(&e),
        };
        let body = html! {
            div #queued data-live { (queue_table(&queued, &names)) }
            div #history data-live { (history_table(&history, &names)) }
            @if let Some((run, trace)) = &newest {
                section #newest data-live {
                    h2 { "Newest run: " code { (run.slug) } }
                    (run_details(run, trace.as_ref(), &names, &[]))
                }
            }
        };
        live_page("/runs", "Run history", panel, body)
    })
    .await
}

fn queue_table(queued: &[QueuedRow], names: &Names) -> Markup {
    html! {
        h2 { "Queued" }
        @if queued.is_empty() {
            p.muted { "No run is queued for this desktop as of the last sync." }
        } @else {
            p.muted { "As of the last sync of each enabled project; each starts when the relay picks it up." }
            div.wide { table {
                tr { th { "Queued" } th { "Graph" } th { "Project" } th { "Agent" } th { "Arguments" } th { "Synced" } }
                @for run in queued {
                    tr.queued {
                        td { (time(run.queued_at)) }
                        td { code { (run.slug) } }
                        td { (names.project(&run.project_id)) }
                        td { (agent(run.agent_name.as_deref(), run.agent_id.as_deref())) }
                        td.preview { (cut(&run.arguments.to_string())) }
                        td { (time(run.synced_at)) }
                    }
                }
            } }
        }
    }
}

fn history_table(history: &[HistoryRow], names: &Names) -> Markup {
    html! {
        h2 { "Runs" }
        @if history.is_empty() { p { "No runs yet." } }
        @else {
            div.wide { table {
                tr { th { "Started" } th { "Graph" } th { "Project" } th { "Agent" } th { "Status" } th { "Tokens" } th { "Cost" } th { "Result or error" } }
                @for run in history.iter().take(MAX_RUNS_LISTED) {
                    tr {
                        td { a href=(format!("/runs/{}", run.execution_id)) { (time(run.started_at)) } }
                        td { code { (run.slug) } }
                        td { (names.project(&run.project_id)) }
                        td { (agent(run.agent_name.as_deref(), run.agent_id.as_deref())) }
                        td { (status_text(run)) @if run.result_truncated { " (posted truncated)" } }
                        td { (run.total_tokens) }
                        td { (run_cost(&run.status, run.reported_cost)) }
                        td.preview { (preview(run)) }
                    }
                }
            } }
        }
    }
}

/// A run's status as the owner reads it. Where the history keeps why a run ended (its cause),
/// it goes here after the status.
fn status_text(run: &HistoryRow) -> String {
    run.status.clone()
}

/// `text` cut to [`PREVIEW_CHARS`] characters (an ellipsis marks the cut).
fn cut(text: &str) -> String {
    let mut shown: String = text.chars().take(PREVIEW_CHARS).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    shown
}

/// The start of a run's result or error, for the list.
fn preview(run: &HistoryRow) -> String {
    let text = match (&run.error, &run.result) {
        (Some(error), _) => error.clone(),
        (None, Some(result)) => result.to_string(),
        (None, None) => String::new(),
    };
    cut(&text)
}

/// One run: its full result, its error and its timeline.
pub(crate) async fn run(
    State(page): State<Arc<Page>>,
    Extension(signed): Extension<Signed>,
    Path(execution_id): Path<String>,
) -> Response {
    super::on_state(page.state.clone(), move |state| {
        let loaded = state.execution(&execution_id).and_then(|found| {
            let answers = state
                .approvals(true)?
                .into_iter()
                .filter(|a| a.execution_id == execution_id)
                .collect::<Vec<_>>();
            Ok((found, answers, common(state)?))
        });
        let ((run, trace), answers, (names, panel)) = match loaded {
            Ok((Some(found), answers, common)) => (found, answers, common),
            Ok((None, _, _)) => {
                return refusal(
                    StatusCode::NOT_FOUND,
                    "No run with this id is in the history.",
                );
            }
            Err(e) => return failure(&e),
        };
        let body = html! {
            div #run data-live {
                @if run.status == "running" { (cancel_form(&signed, &run.execution_id)) }
                (run_details(&run, trace.as_ref(), &names, &answers))
            }
        };
        live_page("/runs", &format!("Run of {}", run.slug), panel, body)
    })
    .await
}

/// The owner's answers to a run's approvals, oldest first, by tool: what the timeline writes
/// after "asked you".
fn answers_by_tool(approvals: &[ApprovalRow]) -> Vec<(String, String)> {
    let mut oldest_first: Vec<&ApprovalRow> = approvals.iter().collect();
    oldest_first.sort_by_key(|a| a.created_at);
    oldest_first
        .into_iter()
        .map(|a| {
            let answer = match a.status {
                ApprovalStatus::Approved => "you approved",
                ApprovalStatus::Denied => "you denied",
                ApprovalStatus::Pending => "waiting for you",
                ApprovalStatus::Expired => "not answered",
            };
            (a.tool.clone(), answer.to_owned())
        })
        .collect()
}

fn run_details(
    run: &HistoryRow,
    trace: Option<&serde_json::Value>,
    names: &Names,
    approvals: &[ApprovalRow],
) -> Markup {
    let timeline = trace
        .map(timeline::from_trace)
        .map(|t| timeline::with_answers(t, &answers_by_tool(approvals)));
    let waiting = approvals
        .iter()
        .find(|a| a.status == ApprovalStatus::Pending && run.status == "running");
    html! {
        (run_facts(run, names))
        @if let Some(approval) = waiting {
            p { "Waiting for " a href="/approvals" { "your approval of " code { (approval.tool) } } "." }
        }
        h2 { "Result" }
        @if run.result_truncated {
            p { "The result was too long to post (over 100,000 characters), so the service has only the truncation flag. The full result is kept here." }
        }
        @match &run.result {
            Some(result) => pre { (serde_json::to_string_pretty(result).unwrap_or_default()) },
            None if run.status == "running" => p.muted { "Still running." },
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
            _ if run.status == "running" => p.muted {
                "The run is still going: " (run.total_tokens) " tokens so far. Its timeline is drawn when it ends."
            },
            _ if run.total_tokens > 0 => p.muted { "No trace was kept for this run, so its timeline cannot be drawn." },
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

fn run_facts(run: &HistoryRow, names: &Names) -> Markup {
    html! {
        dl {
            dt { "Status" } dd { (status_text(run)) }
            @if let Some(cause) = run.end_cause { dt { "Ended by" } dd { (cause.describe()) } }
            dt { "Project" } dd { (names.project(&run.project_id)) " " code.muted { (run.project_id) } }
            dt { "Requested by" } dd { (agent(run.agent_name.as_deref(), run.agent_id.as_deref())) }
            dt { "Session" } dd { code { (run.session_id) } }
            dt { "Channel" } dd { code { (run.channel) } }
            dt { "Execution" } dd { code { (run.execution_id) } }
            @if let Some(arguments) = &run.arguments { dt { "Arguments" } dd { pre { (arguments) } } }
            @if let Some(at) = run.queued_at { dt { "Queued" } dd { (time(at)) } }
            dt { "Started" } dd { (time(run.started_at)) }
            dt { "Finished" } dd { @match run.finished_at { Some(at) => (time(at)), None => "still running" } }
            dt { "Tokens" } dd { (run.total_tokens) @if run.status == "running" { " so far" } }
            dt { "Cost" } dd { (run_cost(&run.status, run.reported_cost)) }
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
                    td { (timeline::elapsed(bar.start_ms)) }
                    td { (timeline::elapsed(bar.end_ms)) }
                }
            }
        } }
    }
}
