//! The desktop relay's HTTP API (desktop token, JSON, size-limited bodies). Handlers decode,
//! call one function of `runs`/`sessions`, encode.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, post_service};
use axum::{Json, Router};
use relay_protocol::{
    CommandId, CompleteRequest, CompleteResponse, ControlResponse, DESKTOP_API_PREFIX,
    ProjectsResponse, ReleasedRequest, ReleasedResponse, ReportResponse, RunReport, StartedRequest,
    StartedResponse, SyncRequest,
};
use tower::Service;

use crate::auth::DesktopIdentity;
use crate::http::AppState;
use crate::http::edge::{ApiError, ApiResult, Desktop, JsonBody};
use crate::http::metrics::{ClaimKind, ClaimOutcome};
use crate::runs::DesktopError;
use crate::{runs, sessions};

/// Largest desktop request body: a completion may carry 100,000 UTF-16 units of JSON, which is
/// at most a few hundred KiB of UTF-8.
pub const MAX_DESKTOP_BODY_BYTES: usize = 1024 * 1024;

/// The desktop API routes.
pub fn routes(app: Arc<AppState>) -> Router {
    // The long poll is a service of its own that limits its own body: a route layer would box
    // its future once more for as long as it is held.
    let sync_route = Router::new().route(
        &format!("{DESKTOP_API_PREFIX}/sync"),
        post_service(SyncEndpoint(app.clone())),
    );
    Router::new()
        .route(&format!("{DESKTOP_API_PREFIX}/projects"), get(projects))
        .route(
            &format!("{DESKTOP_API_PREFIX}/commands/{{id}}/started"),
            post(started),
        )
        .route(
            &format!("{DESKTOP_API_PREFIX}/commands/{{id}}/released"),
            post(released),
        )
        .route(
            &format!("{DESKTOP_API_PREFIX}/commands/{{id}}/control"),
            get(control),
        )
        .route(
            &format!("{DESKTOP_API_PREFIX}/commands/{{id}}/complete"),
            post(complete),
        )
        .route(
            &format!("{DESKTOP_API_PREFIX}/commands/{{id}}/report"),
            post(report),
        )
        .layer(DefaultBodyLimit::max(MAX_DESKTOP_BODY_BYTES))
        .merge(sync_route)
        .with_state(app)
}

/// The long poll, `POST /sync`: a tower service rather than an axum handler, so that what a
/// held sync keeps is its own small state (issue 28's budget per waiting desktop). A handler's
/// future keeps room for the request's parts and its extractors' state for as long as it
/// waits; here the request is read and checked in a box of its own, freed before the wait, and
/// the future that waits holds only the service state, the desktop and the sync's wait.
#[derive(Clone)]
struct SyncEndpoint(Arc<AppState>);

impl Service<Request> for SyncEndpoint {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let app = self.0.clone();
        let read = Box::pin(sync_request(app.clone(), request));
        Box::pin(async move {
            // The sync waits after this match, not in its arm: a scrutinee lives to the end of
            // its match, and the request in it would stay in this future for the whole wait
            // (904 B, 664 B since; debug build).
            let (desktop, request) = match read.await {
                Ok(read) => read,
                Err(error) => return Ok(error.into_response()),
            };
            let answer = sessions::sync_project(&app.runs, &desktop, request).await;
            Ok(answer.map(Json).map_err(ApiError::from).into_response())
        })
    }
}

/// The desktop behind the token (checked first), then the body.
async fn sync_request(
    app: Arc<AppState>,
    request: Request,
) -> Result<(DesktopIdentity, SyncRequest), ApiError> {
    let (mut parts, body) = request.into_parts();
    let Desktop(desktop) = Desktop::from_request_parts(&mut parts, &app).await?;
    let body = axum::body::Body::new(http_body_util::Limited::new(body, MAX_DESKTOP_BODY_BYTES));
    let JsonBody(sync) = JsonBody::from_request(Request::from_parts(parts, body), &app).await?;
    Ok((desktop, sync))
}

async fn projects(
    State(app): State<Arc<AppState>>,
    Desktop(desktop): Desktop,
) -> ApiResult<ProjectsResponse> {
    Ok(Json(
        sessions::served_projects(app.store.as_ref(), &desktop).await?,
    ))
}

async fn started(
    State(app): State<Arc<AppState>>,
    Command(id): Command,
    Desktop(desktop): Desktop,
    JsonBody(request): JsonBody<StartedRequest>,
) -> ApiResult<StartedResponse> {
    let started = runs::command_started(&app.runs, &desktop, id, &request).await;
    let outcome = match &started {
        // A resume is no new claim: the run was won by this execution before.
        Ok(answer) if answer.replayed || request.resumed.is_some() => Some(ClaimOutcome::Replayed),
        Ok(_) => Some(ClaimOutcome::Won),
        Err(DesktopError::Conflict { .. }) => Some(ClaimOutcome::Conflict),
        Err(_) => None,
    };
    if let Some(outcome) = outcome {
        app.metrics.claims.record(ClaimKind::RunStart, outcome);
    }
    Ok(Json(started?))
}

async fn released(
    State(app): State<Arc<AppState>>,
    Command(id): Command,
    Desktop(desktop): Desktop,
    JsonBody(request): JsonBody<ReleasedRequest>,
) -> ApiResult<ReleasedResponse> {
    Ok(Json(
        runs::command_released(&app.runs, &desktop, id, &request).await?,
    ))
}

async fn control(
    State(app): State<Arc<AppState>>,
    Command(id): Command,
    Desktop(desktop): Desktop,
) -> ApiResult<ControlResponse> {
    Ok(Json(runs::command_control(&app.runs, &desktop, id).await?))
}

async fn complete(
    State(app): State<Arc<AppState>>,
    Command(id): Command,
    Desktop(desktop): Desktop,
    JsonBody(request): JsonBody<CompleteRequest>,
) -> ApiResult<CompleteResponse> {
    Ok(Json(
        runs::command_completed(&app.runs, &desktop, id, &request).await?,
    ))
}

async fn report(
    State(app): State<Arc<AppState>>,
    Command(id): Command,
    Desktop(desktop): Desktop,
    JsonBody(request): JsonBody<RunReport>,
) -> ApiResult<ReportResponse> {
    Ok(Json(
        runs::record_report(&app.runs, &desktop, id, &request).await?,
    ))
}

/// The command id of the path, parsed before the token is checked (a malformed id is a 400).
struct Command(CommandId);

impl FromRequestParts<Arc<AppState>> for Command {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let Path(id) = Path::<String>::from_request_parts(parts, app)
            .await
            .map_err(|e| ApiError::BadRequest(e.body_text()))?;
        Ok(Command(runs::parse_command_id(&id)?))
    }
}
