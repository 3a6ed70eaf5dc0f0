//! The runs of a project, newest first and paged, refreshed in place by the script; one run's
//! detail; "Cancel" on queued and running runs (the agent's `cancel_graph_run` semantics).

use std::sync::Arc;

use axum::Form;
use axum::extract::{Path, Query, State};
use maud::{Markup, html};
use serde::Deserialize;

use super::{
    ConsoleResult, Signed, csrf_field, fragment as html_fragment, page as console_page, see_other,
    when,
};
use crate::http::AppState;
use crate::runs::owner::{self, OwnerRunSummary, RunFilter, RunPage};
use crate::store::ProjectRecord;
use relay_protocol::RunStatus;

/// The runs list's query: filters and the page cursor.
#[derive(Debug, Default, Deserialize)]
pub struct RunsQuery {
    status: Option<String>,
    connection: Option<String>,
    before: Option<String>,
    limit: Option<usize>,
}

impl RunsQuery {
    fn filter(&self) -> RunFilter {
        RunFilter {
            status: self.status.clone(),
            connection: self.connection.clone(),
            before: self.before.clone(),
            limit: self.limit,
        }
    }

    /// The query string that repeats these filters (and `before`, if any).
    fn query_string(&self, before: Option<&str>) -> String {
        let mut pairs = url::form_urlencoded::Serializer::new(String::new());
        for (key, value) in [
            ("status", self.status.as_deref()),
            ("connection", self.connection.as_deref()),
            ("before", before),
        ] {
            if let Some(value) = value.filter(|v| !v.is_empty()) {
                pairs.append_pair(key, value);
            }
        }
        if let Some(limit) = self.limit {
            pairs.append_pair("limit", &limit.to_string());
        }
        pairs.finish()
    }
}

async fn project(
    app: &AppState,
    signed: &Signed,
    id: &str,
) -> Result<ProjectRecord, super::Refusal> {
    match app.store.project_of_owner(&signed.owner.id, id).await? {
        Some(project) => Ok(project),
        None => Err(super::Refusal::new(super::not_found())),
    }
}

/// `GET /console/projects/{id}/runs`.
pub async fn page(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(query): Query<RunsQuery>,
    signed: Signed,
) -> ConsoleResult {
    let project = project(&app, &signed, &id).await?;
    let runs = owner::list_runs(&app.runs, &signed.owner.id, &project.id, query.filter()).await?;
    let names = owner::connection_names(&app.runs, &signed.owner.id).await?;
    let mut agents: Vec<(String, String)> = crate::oauth::connections::list(
        app.store.as_ref(),
        Some(&signed.owner.id),
        Some(&project.id),
    )
    .await?
    .into_iter()
    .map(|c| (c.id, c.client_name))
    .collect();
    for token in app.store.tokens_of_owner(&signed.owner.id).await? {
        if token.project_id.as_deref() == Some(&project.id)
            && token.kind == crate::store::TokenKind::Agent
            && !agents.iter().any(|(id, _)| *id == token.id)
        {
            agents.push((
                token.id.clone(),
                names.get(&token.id).cloned().unwrap_or_default(),
            ));
        }
    }
    let src = format!(
        "/console/projects/{}/runs/list?{}",
        project.id,
        query.query_string(query.before.as_deref())
    );
    let refresh = app.config.console_runs_refresh.as_millis();
    let body = html! {
        p { "Project " strong { (project.name) } ". The list refreshes itself every "
            (app.config.console_runs_refresh.as_secs_f64()) " s." }
        (filters(&project, &query, &agents))
        div id="runs" data-src=(src) data-refresh-ms=(refresh) aria-live="polite" {
            (list(&signed, &project, &query, &runs))
        }
    };
    Ok(console_page(&signed, "Runs", body))
}

fn filters(project: &ProjectRecord, query: &RunsQuery, agents: &[(String, String)]) -> Markup {
    let status = query.status.as_deref().unwrap_or_default();
    let connection = query.connection.as_deref().unwrap_or_default();
    html! {
        form method="get" action={ "/console/projects/" (project.id) "/runs" } {
            label for="filter-status" { "Status" }
            select id="filter-status" name="status" {
                option value="" selected[status.is_empty()] { "any" }
                @for s in [RunStatus::Queued, RunStatus::Running, RunStatus::Completed, RunStatus::Failed, RunStatus::Cancelled] {
                    option value=(s.as_str()) selected[status == s.as_str()] { (s.as_str()) }
                }
            }
            label for="filter-connection" { "Connection" }
            select id="filter-connection" name="connection" {
                option value="" selected[connection.is_empty()] { "any" }
                @for (id, name) in agents {
                    option value=(id) selected[connection == id] { (name) " (" (id.get(..8).unwrap_or(id)) ")" }
                }
            }
            button type="submit" { "Filter" }
        }
    }
}

/// The list the script replaces: a table of runs and the link to older ones.
fn list(signed: &Signed, project: &ProjectRecord, query: &RunsQuery, runs: &RunPage) -> Markup {
    html! {
        @for damaged in &runs.damaged {
            p.error data-damaged-run=(damaged.command_id) {
                strong { "Damaged run " code { (damaged.command_id) } ": " } (damaged.error)
                " "
                form.inline method="post" action={ "/console/runs/" (damaged.command_id) "/cancel" } {
                    (csrf_field(signed))
                    input type="hidden" name="back" value="list";
                    input type="hidden" name="project" value=(project.id);
                    button type="submit" { "Cancel" }
                }
            }
        }
        @if runs.runs.is_empty() { p.muted { "No runs." } }
        @else {
            table.runs {
                thead { tr {
                    th { "Status" } th { "Graph" } th { "Connection" } th { "Queued (UTC)" } th { "Started" }
                    th { "Finished" } th { "Tokens" } th { "Cost" } th { "Result or error" } th { span.muted { "Action" } }
                } }
                tbody { @for run in &runs.runs { (row(signed, run)) } }
            }
        }
        @if let Some(next) = &runs.next {
            p { a href={ "/console/projects/" (project.id) "/runs?" (query.query_string(Some(next))) } { "Older runs" } }
        }
    }
}

fn row(signed: &Signed, run: &OwnerRunSummary) -> Markup {
    html! {
        tr data-run=(run.command_id) {
            td data-label="Status" {
                a.status href={ "/console/runs/" (run.command_id) } { (run.status.as_str()) }
                (status_note(run))
            }
            td data-label="Graph" { code { (run.slug) } }
            td data-label="Connection" { (run.connection_name) }
            td.t data-label="Queued" { (when(Some(run.created_at))) }
            td.t data-label="Started" { (when(run.started_at)) }
            td.t data-label="Finished" { (when(run.finished_at)) }
            td data-label="Tokens" { (tokens(run)) }
            td data-label="Cost" { (cost(run)) }
            td data-label="Result" { (outcome(run)) }
            td.action { (cancel_button(signed, run, "list")) }
        }
    }
}

/// What the status word alone does not say: a requested cancel, what a running run waits
/// for, who or what ended it.
fn status_note(run: &OwnerRunSummary) -> Markup {
    html! {
        @if run.cancel_requested && !run.status.is_terminal() { " (cancel requested)" }
        @if let Some(waiting) = &run.waiting_for {
            span.note data-waiting="" { "waiting for " (waiting) }
        }
        @if let Some(cause) = run.end_cause {
            span.note data-end-cause=(cause.as_str()) { (cause.describe()) }
        }
        @if let Some(resumed) = run.resumed {
            span.note data-resumed=(resumed.count) {
                "resumed " (resumed.count) "x after a desktop restart"
            }
        }
    }
}

/// Tokens: a running run's so far (as its desktop last reported), else the total metered.
fn tokens(run: &OwnerRunSummary) -> String {
    match (run.status, run.tokens_so_far, run.total_tokens) {
        (RunStatus::Running, Some(so_far), _) => format!("{so_far} so far"),
        (_, _, Some(total)) => total.to_string(),
        _ => "—".to_owned(),
    }
}

/// The cost as money: none yet for a queued run, unknown until the desktop reports it.
fn cost(run: &OwnerRunSummary) -> String {
    match (run.status, run.reported_cost) {
        (RunStatus::Queued, _) => "—".to_owned(),
        (RunStatus::Running, _) | (_, None) => "unknown".to_owned(),
        (_, Some(cost)) => money(cost),
    }
}

/// Most significant digits a cost shows.
const COST_DIGITS: i32 = 4;

/// A cost in US dollars with [`COST_DIGITS`] significant digits (at least cents):
/// `$0.002400`, `$12.35`; never a float's noise (`0.0024000000000000002`).
pub fn money(cost: f64) -> String {
    if !cost.is_finite() || cost <= 0.0 {
        return "$0.00".to_owned();
    }
    let magnitude = cost.log10().floor() as i32;
    let decimals = (COST_DIGITS - 1 - magnitude).clamp(2, 12);
    format!("${cost:.*}", decimals as usize)
}

/// How many characters of an error a list shows (the run's page shows all of it).
pub const ERROR_PREVIEW_CHARS: usize = 200;

/// `text`'s first [`ERROR_PREVIEW_CHARS`] characters, and whether that cut it.
fn preview(text: &str) -> (String, bool) {
    let cut = text.chars().count() > ERROR_PREVIEW_CHARS;
    (text.chars().take(ERROR_PREVIEW_CHARS).collect(), cut)
}

fn outcome(run: &OwnerRunSummary) -> Markup {
    html! {
        @if let Some(error) = &run.error {
            @let (shown, cut) = preview(error);
            span.error { (shown) @if cut { "… " a href={ "/console/runs/" (run.command_id) } { "(all of it)" } } }
        }
        @if let Some(preview) = &run.result_preview {
            code { (preview) @if run.preview_cut { "… " a href={ "/console/runs/" (run.command_id) } { "(all of it)" } } }
        }
        @if run.result_truncated { " " strong { "(truncated: the full result is on the desktop)" } }
    }
}

/// "Cancel" on a queued or running run; `back` says where the answer returns to (`list`: the
/// project's runs, else the run's page).
fn cancel_button(signed: &Signed, run: &OwnerRunSummary, back: &str) -> Markup {
    html! {
        @if matches!(run.status, RunStatus::Queued | RunStatus::Running) && !run.cancel_requested {
            form.inline method="post" action={ "/console/runs/" (run.command_id) "/cancel" } {
                (csrf_field(signed))
                input type="hidden" name="back" value=(back);
                button type="submit" { "Cancel" }
            }
        }
    }
}

/// `GET /console/projects/{id}/runs/list`: the list alone, for the script's refresh.
pub async fn fragment(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(query): Query<RunsQuery>,
    signed: Signed,
) -> ConsoleResult {
    let project = project(&app, &signed, &id).await?;
    let runs = owner::list_runs(&app.runs, &signed.owner.id, &project.id, query.filter()).await?;
    Ok(html_fragment(list(&signed, &project, &query, &runs)))
}

/// `GET /console/runs/{id}`.
pub async fn detail(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    signed: Signed,
) -> ConsoleResult {
    let run = owner::run_detail(&app.runs, &signed.owner.id, &id).await?;
    let s = &run.summary;
    let result = run
        .result
        .as_ref()
        .map(|r| serde_json::to_string_pretty(r).unwrap_or_default());
    let arguments = serde_json::to_string_pretty(&run.arguments).unwrap_or_default();
    let body = html! {
        p { a href={ "/console/projects/" (s.project_id) "/runs" } { "All runs of this project" } }
        dl {
            dt { "Status" } dd { span.status { (s.status.as_str()) } (status_note(s)) }
            dt { "Graph" } dd { code { (s.slug) } " (" code { (s.graph_session_id.as_str()) } ")" }
            dt { "Connection" } dd { (s.connection_name) }
            dt { "Queued" } dd { (when(Some(s.created_at))) }
            dt { "Started" } dd { (when(s.started_at)) }
            dt { "Finished" } dd { (when(s.finished_at)) }
            @if let Some(resumed) = s.resumed {
                dt { "Resumed" }
                dd data-resumed=(resumed.count) {
                    "the desktop restarted during this run and resumed it from its journal ("
                    (resumed.count) "x, last " (when(Some(resumed.last_at))) ")"
                }
            }
            dt { "Tokens" } dd { (tokens(s)) }
            dt { "Cost" } dd { (cost(s)) }
        }
        (cancel_button(&signed, s, "run"))
        h2 { "Arguments" } pre { (arguments) }
        @if let Some(error) = &s.error { h2 { "Error" } p.error { (error) } }
        @if let Some(result) = result { h2 { "Result" } pre { (result) } }
        @if s.result_truncated { p { strong { "The result was truncated: it was too large to post; the full result is on the desktop." } } }
    };
    Ok(console_page(&signed, "Run", body))
}

/// `POST /console/runs/{id}/cancel`.
pub async fn cancel(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    signed: Signed,
    Form(form): Form<CancelForm>,
) -> ConsoleResult {
    signed.check_csrf(form.csrf.as_deref())?;
    let outcome = owner::cancel_run(&app.runs, &signed.owner.id, &id).await?;
    if let (Some("list"), Some(project)) = (form.back.as_deref(), &form.project) {
        // A damaged run, whose own row cannot tell its project: the form names it, and only
        // a project of the owner's is returned to.
        let project = self::project(&app, &signed, project).await?;
        return Ok(see_other(&format!("/console/projects/{}/runs", project.id)));
    }
    if form.back.as_deref() == Some("list") {
        let run = owner::run_detail(&app.runs, &signed.owner.id, &id).await?;
        return Ok(see_other(&format!(
            "/console/projects/{}/runs",
            run.summary.project_id
        )));
    }
    Ok(see_other(&format!("/console/runs/{}", outcome.command_id)))
}

/// The "Cancel" form of a run.
#[derive(Debug, Deserialize)]
pub struct CancelForm {
    csrf: Option<String>,
    back: Option<String>,
    /// The project whose runs the answer returns to (a damaged run's form).
    project: Option<String>,
}
