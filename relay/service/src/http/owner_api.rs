//! The owner's HTTP API, every route under `/owner/v1` (owner token, JSON, size-limited bodies):
//! chat links and their tasks, connections, runs, desktops.
//! Handlers decode, call one function of [`chat_tasks::owner`](crate::chat_tasks::owner), encode.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::chat_tasks::owner::{self, Acting, AssignRequest};
use crate::chat_tasks::view::{
    ArtifactContent, AssignedTask, CancelledTask, ChatLinkView, OwnerTaskDetail, OwnerTaskList,
};
use crate::desktops::{self, DesktopView};
use crate::http::AppState;
use crate::http::edge::{ApiError, ApiResult, JsonBody, Owner};
use crate::oauth::connections;
use crate::runs::CancelOutcome;
use crate::runs::owner::{self as runs_owner, OwnerRunDetail, RunFilter, RunPage};

/// Path prefix of the owner API: every owner route is under it, and nothing else of the
/// owner's is served (the unversioned `/owner/chat-links…` and `/owner/tasks/…` of earlier
/// releases answer 404).
pub const OWNER_API_PREFIX: &str = "/owner/v1";
/// Largest owner request body: a goal is at most a few thousand characters.
pub const MAX_OWNER_BODY_BYTES: usize = 64 * 1024;

/// `POST /owner/v1/chat-links` body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateLinkRequest {
    /// The project (one of the owner's).
    pub project_id: String,
    /// `claude`, `chatgpt` or `other`.
    pub host: String,
    /// Whether the host is told of new tasks.
    #[serde(default)]
    pub event_subscription: bool,
}

/// `PUT /owner/v1/chat-links/{id}/event-subscription` body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionRequest {
    /// Whether an event subscription is active.
    pub active: bool,
}

/// `POST /owner/v1/chat-links/{id}/tasks` body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssignBody {
    /// What to do.
    pub goal: String,
    /// Keep it while the goal text is unchanged: a double click or retry then makes one task.
    pub idempotency_key: String,
}

/// The owner API routes.
pub fn routes(app: Arc<AppState>) -> Router {
    let p = OWNER_API_PREFIX;
    Router::new()
        .route(&format!("{p}/chat-links"), post(create_link))
        .route(
            &format!("{p}/chat-links/{{id}}/event-subscription"),
            put(set_subscription),
        )
        .route(
            &format!("{p}/chat-links/{{id}}/tasks"),
            get(list_tasks).post(assign_task),
        )
        .route(&format!("{p}/tasks/{{id}}"), get(task_detail))
        .route(&format!("{p}/tasks/{{id}}/cancel"), post(cancel_task))
        .route(
            &format!("{p}/tasks/{{id}}/artifacts/{{artifact_id}}"),
            get(artifact),
        )
        .route(&format!("{p}/connections"), get(list_connections))
        .route(
            &format!("{p}/connections/{{id}}/revoke"),
            post(revoke_connection),
        )
        .route(&format!("{p}/projects/{{id}}/runs"), get(list_runs))
        .route(&format!("{p}/runs/{{id}}"), get(run_detail))
        .route(&format!("{p}/runs/{{id}}/cancel"), post(cancel_run))
        .route(&format!("{p}/desktops"), get(list_desktops))
        .layer(DefaultBodyLimit::max(MAX_OWNER_BODY_BYTES))
        .with_state(app)
}

async fn create_link(
    State(app): State<Arc<AppState>>,
    Owner(owner): Owner,
    JsonBody(request): JsonBody<CreateLinkRequest>,
) -> ApiResult<ChatLinkView> {
    let link = owner::create_link(
        &app.tasks,
        Acting::Owner(&owner),
        &request.project_id,
        &request.host,
        request.event_subscription,
    )
    .await?;
    Ok(Json(link))
}

async fn set_subscription(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    Owner(owner): Owner,
    JsonBody(request): JsonBody<SubscriptionRequest>,
) -> ApiResult<ChatLinkView> {
    let link =
        owner::set_event_subscription(&app.tasks, Acting::Owner(&owner), &id, request.active)
            .await?;
    Ok(Json(link))
}

async fn list_tasks(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    Owner(owner): Owner,
) -> ApiResult<OwnerTaskList> {
    Ok(Json(
        owner::list_tasks(&app.tasks, Acting::Owner(&owner), &id).await?,
    ))
}

async fn assign_task(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    Owner(owner): Owner,
    JsonBody(request): JsonBody<AssignBody>,
) -> ApiResult<AssignedTask> {
    let request = AssignRequest {
        chat_link_id: &id,
        goal: &request.goal,
        idempotency_key: &request.idempotency_key,
    };
    Ok(Json(
        owner::assign_task(&app.tasks, Acting::Owner(&owner), request).await?,
    ))
}

async fn task_detail(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    Owner(owner): Owner,
) -> ApiResult<OwnerTaskDetail> {
    Ok(Json(
        owner::task_detail(&app.tasks, Acting::Owner(&owner), &id).await?,
    ))
}

async fn cancel_task(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    Owner(owner): Owner,
) -> ApiResult<CancelledTask> {
    Ok(Json(
        owner::cancel_task(&app.tasks, Acting::Owner(&owner), &id).await?,
    ))
}

async fn artifact(
    State(app): State<Arc<AppState>>,
    Path((id, artifact_id)): Path<(String, String)>,
    Owner(owner): Owner,
) -> ApiResult<ArtifactContent> {
    let content = owner::artifact(&app.tasks, Acting::Owner(&owner), &id, &artifact_id).await?;
    Ok(Json(content))
}

/// `GET /owner/v1/connections` answer.
#[derive(Debug, Clone, Serialize)]
pub struct ConnectionList {
    /// The owner's connections, revoked ones too, oldest first.
    pub connections: Vec<connections::Connection>,
}

/// `POST /owner/v1/connections/{id}/revoke` answer.
#[derive(Debug, Clone, Serialize)]
pub struct RevokedConnection {
    /// The connection.
    pub id: String,
    /// Always true: the connection does not work any more.
    pub revoked: bool,
    /// True when it had been revoked before this request.
    pub already_revoked: bool,
}

async fn list_connections(
    State(app): State<Arc<AppState>>,
    Owner(owner): Owner,
) -> ApiResult<ConnectionList> {
    let connections = connections::list(app.store.as_ref(), Some(&owner.owner_id), None).await?;
    Ok(Json(ConnectionList { connections }))
}

async fn revoke_connection(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    Owner(owner): Owner,
) -> ApiResult<RevokedConnection> {
    let already_revoked = match connections::revoke(
        app.store.as_ref(),
        Some(&owner.owner_id),
        &id,
        app.clock.now(),
    )
    .await?
    {
        connections::Revoked::Now => false,
        connections::Revoked::Already => true,
        connections::Revoked::NotFound => {
            return Err(ApiError::NotFound(format!(
                "connection {id} not found: GET /owner/v1/connections lists yours"
            )));
        }
    };
    Ok(Json(RevokedConnection {
        id,
        revoked: true,
        already_revoked,
    }))
}

/// `GET /owner/v1/projects/{id}/runs` query: `status`, `connection` (a connection's or agent
/// token's id), `before` (the `next` of the page before), `limit` (1–200, default 50).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    /// Only runs in this status.
    pub status: Option<String>,
    /// Only runs of this connection.
    pub connection: Option<String>,
    /// The page cursor.
    pub before: Option<String>,
    /// Page size.
    pub limit: Option<usize>,
}

async fn list_runs(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    Owner(owner): Owner,
    Query(query): Query<RunsQuery>,
) -> ApiResult<RunPage> {
    let filter = RunFilter {
        status: query.status,
        connection: query.connection,
        before: query.before,
        limit: query.limit,
    };
    Ok(Json(
        runs_owner::list_runs(&app.runs, &owner.owner_id, &id, filter).await?,
    ))
}

async fn run_detail(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    Owner(owner): Owner,
) -> ApiResult<OwnerRunDetail> {
    Ok(Json(
        runs_owner::run_detail(&app.runs, &owner.owner_id, &id).await?,
    ))
}

async fn cancel_run(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    Owner(owner): Owner,
) -> ApiResult<CancelOutcome> {
    Ok(Json(
        runs_owner::cancel_run(&app.runs, &owner.owner_id, &id).await?,
    ))
}

/// `GET /owner/v1/desktops` answer.
#[derive(Debug, Clone, Serialize)]
pub struct DesktopList {
    /// The owner's desktop tokens, revoked ones too, oldest first.
    pub desktops: Vec<DesktopView>,
}

async fn list_desktops(
    State(app): State<Arc<AppState>>,
    Owner(owner): Owner,
) -> ApiResult<DesktopList> {
    let desktops = desktops::list(app.store.as_ref(), &owner.owner_id, app.clock.now()).await?;
    Ok(Json(DesktopList { desktops }))
}
