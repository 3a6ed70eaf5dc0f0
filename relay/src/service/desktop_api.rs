//! The desktop relay's HTTP API (desktop token, JSON, size-limited bodies). Handlers decode,
//! call one function of `runs`/`sessions`, encode.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::AppState;
use super::auth::{AuthError, DesktopIdentity, Identity, authenticate, bearer_token};
use super::runs::{self, DesktopError, RunError};
use super::sessions;
use crate::protocol::{
    CompleteRequest, DESKTOP_API_PREFIX, ErrorBody, StartedRequest, SyncRequest,
};

/// Largest desktop request body: a completion may carry 100,000 UTF-16 units of JSON, which is
/// at most a few hundred KiB of UTF-8.
pub const MAX_DESKTOP_BODY_BYTES: usize = 1024 * 1024;

/// The desktop API routes.
pub fn routes(app: Arc<AppState>) -> Router {
    Router::new()
        .route(&format!("{DESKTOP_API_PREFIX}/sync"), post(sync))
        .route(
            &format!("{DESKTOP_API_PREFIX}/commands/{{id}}/started"),
            post(started),
        )
        .route(
            &format!("{DESKTOP_API_PREFIX}/commands/{{id}}/control"),
            get(control),
        )
        .route(
            &format!("{DESKTOP_API_PREFIX}/commands/{{id}}/complete"),
            post(complete),
        )
        .layer(DefaultBodyLimit::max(MAX_DESKTOP_BODY_BYTES))
        .with_state(app)
}

async fn sync(State(app): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    let outcome = async {
        let desktop = desktop(&app, &headers).await?;
        let request: SyncRequest = decode(&body)?;
        Ok(sessions::sync_project(&app, &desktop, request).await?)
    };
    respond(outcome.await)
}

async fn started(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let outcome = async {
        let id = runs::parse_command_id(&id).map_err(Failure::Desktop)?;
        let desktop = desktop(&app, &headers).await?;
        let request: StartedRequest = decode(&body)?;
        Ok(runs::command_started(&app, &desktop, id, &request).await?)
    };
    respond(outcome.await)
}

async fn control(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let outcome = async {
        let id = runs::parse_command_id(&id).map_err(Failure::Desktop)?;
        let desktop = desktop(&app, &headers).await?;
        Ok(runs::command_control(&app, &desktop, id).await?)
    };
    respond(outcome.await)
}

async fn complete(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let outcome = async {
        let id = runs::parse_command_id(&id).map_err(Failure::Desktop)?;
        let desktop = desktop(&app, &headers).await?;
        let request: CompleteRequest = decode(&body)?;
        Ok(runs::command_completed(&app, &desktop, id, &request).await?)
    };
    respond(outcome.await)
}

/// Why a desktop request was refused.
enum Failure {
    Auth(AuthError),
    Desktop(DesktopError),
}

impl From<DesktopError> for Failure {
    fn from(error: DesktopError) -> Self {
        Failure::Desktop(error)
    }
}

async fn desktop(app: &AppState, headers: &HeaderMap) -> Result<DesktopIdentity, Failure> {
    let token = bearer_token(headers.get(header::AUTHORIZATION));
    authenticate(app, token)
        .await
        .and_then(Identity::into_desktop)
        .map_err(Failure::Auth)
}

fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, Failure> {
    serde_json::from_slice(body).map_err(|e| {
        Failure::Desktop(DesktopError::BadRequest(format!(
            "the request body is not valid JSON for this endpoint: {e}"
        )))
    })
}

fn respond<T: Serialize>(outcome: Result<T, Failure>) -> Response {
    let error = match outcome {
        Ok(value) => return (StatusCode::OK, axum::Json(value)).into_response(),
        Err(error) => error,
    };
    let (status, message, run_status) = match error {
        Failure::Auth(AuthError::Store(error)) => {
            tracing::error!(%error, "token check failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the service cannot check tokens right now; retry later".to_owned(),
                None,
            )
        }
        Failure::Auth(error) => (StatusCode::UNAUTHORIZED, error.to_string(), None),
        Failure::Desktop(DesktopError::BadRequest(message)) => {
            (StatusCode::BAD_REQUEST, message, None)
        }
        Failure::Desktop(DesktopError::Forbidden(message)) => {
            (StatusCode::FORBIDDEN, message, None)
        }
        Failure::Desktop(DesktopError::NotFound(message)) => (StatusCode::NOT_FOUND, message, None),
        Failure::Desktop(DesktopError::Conflict { message, status }) => {
            (StatusCode::CONFLICT, message, Some(status))
        }
        Failure::Desktop(DesktopError::Run(RunError::Contended)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            RunError::Contended.to_string(),
            None,
        ),
        Failure::Desktop(DesktopError::Run(error)) => {
            tracing::error!(%error, "desktop request failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the service failed to record this; retry later".to_owned(),
                None,
            )
        }
    };
    let body = ErrorBody {
        error: message,
        status: run_status,
    };
    (status, axum::Json(body)).into_response()
}
