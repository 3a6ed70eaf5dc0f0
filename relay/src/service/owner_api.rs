//! The owner's HTTP API for linked chat tasks (owner token, JSON, size-limited bodies).
//! Handlers decode, call one function of [`chat_tasks::owner`](super::chat_tasks::owner), encode.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::auth::{AuthError, Identity, OwnerIdentity, authenticate, bearer_token};
use super::chat_tasks::TaskError;
use super::chat_tasks::owner::{self, Acting, AssignRequest};

/// Path prefix of the owner API.
pub const OWNER_API_PREFIX: &str = "/owner";
/// Largest owner request body: a goal is at most a few thousand characters.
pub const MAX_OWNER_BODY_BYTES: usize = 64 * 1024;

/// `POST /owner/chat-links` body.
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

/// `PUT /owner/chat-links/{id}/event-subscription` body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionRequest {
    /// Whether an event subscription is active.
    pub active: bool,
}

/// `POST /owner/chat-links/{id}/tasks` body.
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
        .layer(DefaultBodyLimit::max(MAX_OWNER_BODY_BYTES))
        .with_state(app)
}

async fn create_link(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let outcome = async {
        let owner = owner_identity(&app, &headers).await?;
        let request: CreateLinkRequest = decode(&body)?;
        Ok(owner::create_link(
            &app,
            Acting::Owner(&owner),
            &request.project_id,
            &request.host,
            request.event_subscription,
        )
        .await?)
    };
    respond(outcome.await)
}

async fn set_subscription(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let outcome = async {
        let owner = owner_identity(&app, &headers).await?;
        let request: SubscriptionRequest = decode(&body)?;
        Ok(owner::set_event_subscription(&app, Acting::Owner(&owner), &id, request.active).await?)
    };
    respond(outcome.await)
}

async fn list_tasks(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let outcome = async {
        let owner = owner_identity(&app, &headers).await?;
        Ok(owner::list_tasks(&app, Acting::Owner(&owner), &id).await?)
    };
    respond(outcome.await)
}

async fn assign_task(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let outcome = async {
        let owner = owner_identity(&app, &headers).await?;
        let request: AssignBody = decode(&body)?;
        let request = AssignRequest {
            chat_link_id: &id,
            goal: &request.goal,
            idempotency_key: &request.idempotency_key,
        };
        Ok(owner::assign_task(&app, Acting::Owner(&owner), request).await?)
    };
    respond(outcome.await)
}

async fn task_detail(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let outcome = async {
        let owner = owner_identity(&app, &headers).await?;
        Ok(owner::task_detail(&app, Acting::Owner(&owner), &id).await?)
    };
    respond(outcome.await)
}

async fn cancel_task(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let outcome = async {
        let owner = owner_identity(&app, &headers).await?;
        Ok(owner::cancel_task(&app, Acting::Owner(&owner), &id).await?)
    };
    respond(outcome.await)
}

async fn artifact(
    State(app): State<Arc<AppState>>,
    Path((id, artifact_id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let outcome = async {
        let owner = owner_identity(&app, &headers).await?;
        Ok(owner::artifact(&app, Acting::Owner(&owner), &id, &artifact_id).await?)
    };
    respond(outcome.await)
}

/// Why an owner request was refused.
enum Failure {
    Auth(AuthError),
    BadRequest(String),
    Task(TaskError),
}

impl From<TaskError> for Failure {
    fn from(error: TaskError) -> Self {
        Failure::Task(error)
    }
}

async fn owner_identity(app: &AppState, headers: &HeaderMap) -> Result<OwnerIdentity, Failure> {
    let token = bearer_token(headers.get(header::AUTHORIZATION));
    authenticate(app, token)
        .await
        .and_then(Identity::into_owner)
        .map_err(Failure::Auth)
}

fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, Failure> {
    serde_json::from_slice(body).map_err(|e| {
        Failure::BadRequest(format!(
            "the request body is not valid JSON for this endpoint: {e}"
        ))
    })
}

/// `{"error": "..."}`, the body of every non-2xx owner API answer.
#[derive(Serialize)]
struct ErrorBody {
    error: String,
}

fn respond<T: Serialize>(outcome: Result<T, Failure>) -> Response {
    let error = match outcome {
        Ok(value) => return (StatusCode::OK, axum::Json(value)).into_response(),
        Err(error) => error,
    };
    let (status, message) = match error {
        Failure::Auth(AuthError::Store(error)) => {
            tracing::error!(%error, "token check failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the service cannot check tokens right now; retry later".to_owned(),
            )
        }
        Failure::Auth(error) => (StatusCode::UNAUTHORIZED, error.to_string()),
        Failure::BadRequest(message) => (StatusCode::BAD_REQUEST, message),
        Failure::Task(error) => match error {
            TaskError::Invalid(message) => (StatusCode::BAD_REQUEST, message),
            TaskError::LinkNotFound | TaskError::TaskNotFound | TaskError::ArtifactNotFound => {
                (StatusCode::NOT_FOUND, error.to_string())
            }
            TaskError::Conflict(_) | TaskError::Refused(_) => {
                (StatusCode::CONFLICT, error.to_string())
            }
            TaskError::Contended => (StatusCode::SERVICE_UNAVAILABLE, error.to_string()),
            TaskError::Store(error) => {
                tracing::error!(%error, "owner request failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the service failed to record this; retry later".to_owned(),
                )
            }
        },
    };
    (status, axum::Json(ErrorBody { error: message })).into_response()
}
