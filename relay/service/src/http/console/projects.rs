//! The projects page: each of the owner's projects with its desktops, shared graph sessions,
//! connections and operator-minted agent tokens (each with "Revoke") and chat links, and the
//! "Link chat" form.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Form;
use axum::extract::{Path, State};
use maud::{Markup, html};
use serde::Deserialize;

use super::{ConsoleResult, Refusal, Signed, csrf_field, not_found, see_other, when};
use crate::desktops::{self, DesktopView};
use crate::http::AppState;
use crate::oauth::connections::{self, Connection, Revoked};
use crate::store::{
    ChatLinkRecord, ProjectRecord, SessionSnapshot, Timestamp, TokenKind, TokenRecord,
};

/// Shared sessions a project card lists at most (a sync carries at most 100).
const MAX_SESSIONS_SHOWN: usize = 100;

/// What one project card shows.
struct ProjectCard {
    project: ProjectRecord,
    desktops: Vec<DesktopView>,
    sessions: SessionSnapshot,
    connections: Vec<Connection>,
    /// The operator-minted agent tokens that reach the project (`relay admin token create
    /// --agent NAME`), revoked ones too.
    agents: Vec<TokenRecord>,
    links: Vec<ChatLinkRecord>,
}

/// Whether `token` is an agent token the operator minted for `project_id` (not an OAuth
/// grant: those are listed, and revoked, as their connection).
fn minted_agent_of(token: &TokenRecord, project_id: &str) -> bool {
    token.kind == TokenKind::Agent
        && token.client_id.is_none()
        && token.project_id.as_deref() == Some(project_id)
}

/// The owner's projects, oldest first.
pub async fn owned_projects(
    app: &AppState,
    owner_id: &str,
) -> Result<Vec<ProjectRecord>, crate::store::StoreError> {
    app.store.projects_of_owner(owner_id).await
}

async fn cards(app: &AppState, owner_id: &str) -> Result<Vec<ProjectCard>, Refusal> {
    let desktops = desktops::list(app.store.as_ref(), owner_id, app.clock.now()).await?;
    let tokens = app.store.tokens_of_owner(owner_id).await?;
    let mut cards = Vec::new();
    for project in owned_projects(app, owner_id).await? {
        cards.push(ProjectCard {
            desktops: desktops
                .iter()
                .filter(|d| d.project_id.as_ref().is_none_or(|p| *p == project.id))
                .cloned()
                .collect(),
            sessions: app.store.sessions(&project.id, MAX_SESSIONS_SHOWN).await?,
            connections: connections::list(app.store.as_ref(), Some(owner_id), Some(&project.id))
                .await?,
            links: app.store.chat_links(&project.id).await?,
            agents: tokens
                .iter()
                .filter(|token| minted_agent_of(token, &project.id))
                .cloned()
                .collect(),
            project,
        });
    }
    Ok(cards)
}

/// `GET /console`.
pub async fn page(State(app): State<Arc<AppState>>, signed: Signed) -> ConsoleResult {
    let cards = cards(&app, &signed.owner.id).await?;
    let uses = desktops::last_uses(app.store.as_ref(), &signed.owner.id).await?;
    let body = html! {
        @if cards.is_empty() {
            p { "You have no projects yet. The operator makes one with "
                code { "relay admin project create NAME --owner " (signed.owner.name) } "." }
        }
        @for card in &cards { (project_card(&signed, card, &uses)) }
        @if !cards.is_empty() { (link_form(&signed, &cards)) }
    };
    Ok(super::page(&signed, "Projects", body))
}

fn project_card(signed: &Signed, card: &ProjectCard, uses: &HashMap<String, Timestamp>) -> Markup {
    let p = &card.project;
    html! {
        section.card id={ "project-" (p.id) } {
            h2 { (p.name) }
            p {
                a href={ "/console/projects/" (p.id) "/runs" } { "Runs" }
                " · last sync " (when(card.sessions.last_sync_at))
            }
            h3 { "Desktops" }
            @if card.desktops.is_empty() { p.muted { "No desktop token reaches this project." } }
            ul { @for d in &card.desktops {
                li {
                    span.status { @if d.online { "online" } @else { "offline" } }
                    " · last seen " (when(d.last_seen_at))
                    " · token " code { (short(&d.id)) }
                    @if d.project_id.is_none() { " (all projects)" }
                    @if d.revoked_at.is_some() { " (revoked)" }
                }
            } }
            h3 { "Shared graph sessions" }
            @if card.sessions.sessions.is_empty() { p.muted { "None shared (as of the last sync)." } }
            ul { @for s in &card.sessions.sessions {
                li { (s.meta.name) " · " code { (s.meta.slug) } }
            } }
            (connections_table(signed, &card.connections, uses))
            (agents_table(signed, &card.agents, uses))
            h3 { "Chat links" }
            @if card.links.is_empty() { p.muted { "No chat linked yet." } }
            ul { @for link in &card.links {
                li { a href={ "/console/chats/" (link.id) } { (link.host.as_str()) " chat, linked " (when(Some(link.created_at))) } }
            } }
        }
    }
}

fn connections_table(
    signed: &Signed,
    list: &[Connection],
    uses: &HashMap<String, Timestamp>,
) -> Markup {
    html! {
        h3 { "Connections" }
        @if list.is_empty() { p.muted { "No chat app is connected." } }
        @else {
            table {
                thead { tr { th { "Client" } th { "Scopes" } th { "Grants" } th { "Created" } th { "Last used" } th { "" } } }
                tbody { @for c in list {
                    tr {
                        td data-label="Client" { (c.client_name) }
                        td data-label="Scopes" { (c.scopes.join(" ")) }
                        td data-label="Grants" { (c.grants) }
                        td data-label="Created" { (c.created_at.split('.').next().unwrap_or_default().replace('T', " ")) }
                        td data-label="Last used" { (when(c.grant_ids.iter().filter_map(|id| uses.get(id).copied()).max())) }
                        td {
                            @if c.revoked_at.is_some() { span.muted { "revoked" } }
                            @else {
                                form.inline method="post" action={ "/console/connections/" (c.id) "/revoke" } {
                                    (csrf_field(signed))
                                    button type="submit" { "Revoke" }
                                }
                            }
                        }
                    }
                } }
            }
        }
    }
}

/// The operator-minted agents of a project, beside the chat apps: each with its last use and
/// "Revoke".
fn agents_table(
    signed: &Signed,
    agents: &[TokenRecord],
    uses: &HashMap<String, Timestamp>,
) -> Markup {
    html! {
        h3 { "Agent tokens" }
        @if agents.is_empty() { p.muted { "No agent token minted by the operator." } }
        @else {
            table {
                thead { tr { th { "Agent" } th { "Scopes" } th { "Created" } th { "Last used" } th { "" } } }
                tbody { @for a in agents {
                    tr data-agent-token=(a.id) {
                        td data-label="Agent" { (a.agent_name.as_deref().unwrap_or_default()) " " span.muted { "(token " code { (short(&a.id)) } ")" } }
                        td data-label="Scopes" { (a.scopes.join(" ")) }
                        td data-label="Created" { (when(Some(a.created_at))) }
                        td data-label="Last used" { (when(uses.get(&a.id).copied())) }
                        td {
                            @if a.revoked_at.is_some() { span.muted { "revoked " (when(a.revoked_at)) } }
                            @else {
                                form.inline method="post" action={ "/console/agents/" (a.id) "/revoke" } {
                                    (csrf_field(signed))
                                    button type="submit" { "Revoke" }
                                }
                            }
                        }
                    }
                } }
            }
        }
    }
}

fn link_form(signed: &Signed, cards: &[ProjectCard]) -> Markup {
    html! {
        section.card {
            h2 { "Link a chat" }
            form method="post" action="/console/chats" {
                (csrf_field(signed))
                label for="link-project" { "Project" }
                select id="link-project" name="project_id" {
                    @for card in cards { option value=(card.project.id) { (card.project.name) } }
                }
                label for="link-host" { "Host" }
                select id="link-host" name="host" {
                    option value="claude" { "claude" }
                    option value="chatgpt" { "chatgpt" }
                    option value="other" { "other" }
                }
                div.check {
                    input type="checkbox" id="link-subscription" name="event_subscription" value="on";
                    label for="link-subscription" { "Event subscription" }
                }
                button type="submit" { "Link chat" }
            }
        }
    }
}

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// A form that carries only the CSRF token.
#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    pub(super) csrf: Option<String>,
}

/// `POST /console/connections/{id}/revoke`.
pub async fn revoke(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    signed: Signed,
    Form(form): Form<CsrfForm>,
) -> ConsoleResult {
    signed.check_csrf(form.csrf.as_deref())?;
    match connections::revoke(
        app.store.as_ref(),
        Some(&signed.owner.id),
        &id,
        app.clock.now(),
    )
    .await?
    {
        Revoked::NotFound => Ok(not_found()),
        Revoked::Now | Revoked::Already => Ok(see_other("/console")),
    }
}

/// `POST /console/agents/{id}/revoke`: ends an operator-minted agent token of the owner's; any
/// other id (another owner's token, a desktop's, a grant) is not found.
pub async fn revoke_agent(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    signed: Signed,
    Form(form): Form<CsrfForm>,
) -> ConsoleResult {
    signed.check_csrf(form.csrf.as_deref())?;
    let token = app.store.token(&id).await?;
    let Some(token) = token.filter(|token| {
        token.owner_id == signed.owner.id
            && token
                .project_id
                .as_deref()
                .is_some_and(|project| minted_agent_of(token, project))
    }) else {
        return Ok(not_found());
    };
    if app.store.revoke_token(&token.id, app.clock.now()).await? {
        tracing::info!(token_id = %token.id, "the owner revoked an agent token in the console");
    }
    Ok(see_other("/console"))
}
