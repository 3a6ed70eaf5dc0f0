//! What every HTTP API of the service does alike at its edge: who is asking ([`Agent`] for MCP,
//! [`Desktop`], [`Owner`]), the body ([`JsonBody`]), and one error type ([`ApiError`]) that
//! answers every refusal of the JSON APIs as `{"error": "...", "status"?: "..."}`. A handler is
//! then decode → one domain function → respond.

use std::sync::Arc;

use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use relay_protocol::{ErrorBody, RunStatus};
use serde::de::DeserializeOwned;

use crate::auth::{
    AgentIdentity, AuthError, DesktopIdentity, Identity, OwnerIdentity, authenticate, bearer_token,
};
use crate::chat_tasks::TaskError;
use crate::runs::{DesktopError, QuotaError, RunError};
use crate::{AppState, oauth};

/// Why a request to a JSON API was refused; its [`IntoResponse`] is the one error shape.
#[derive(Debug)]
pub enum ApiError {
    /// The bearer token was missing, unknown, revoked or of the wrong kind.
    Auth(AuthError),
    /// A refusal of the desktop API's domain functions.
    Desktop(DesktopError),
    /// A refusal of the chat tasks' domain functions.
    Task(TaskError),
    /// The body (or a path part) could not be read as this endpoint's input.
    BadRequest(String),
    /// The body was larger than the endpoint takes.
    TooLarge(String),
    /// The token is past its request rate.
    RateLimited(QuotaError),
    /// The object does not exist, or is another owner's (the same answer).
    NotFound(String),
    /// The store failed.
    Store(crate::store::StoreError),
}

impl From<crate::store::StoreError> for ApiError {
    fn from(error: crate::store::StoreError) -> Self {
        ApiError::Store(error)
    }
}

impl From<AuthError> for ApiError {
    fn from(error: AuthError) -> Self {
        ApiError::Auth(error)
    }
}

impl From<DesktopError> for ApiError {
    fn from(error: DesktopError) -> Self {
        ApiError::Desktop(error)
    }
}

impl From<RunError> for ApiError {
    fn from(error: RunError) -> Self {
        match error {
            RunError::NotFound => ApiError::NotFound(RunError::NotFound.to_string()),
            RunError::Invalid(message) => ApiError::BadRequest(message),
            RunError::Store(error) => ApiError::Store(error),
            other => ApiError::Desktop(DesktopError::Run(other)),
        }
    }
}

impl From<TaskError> for ApiError {
    fn from(error: TaskError) -> Self {
        ApiError::Task(error)
    }
}

/// How a refusal is answered.
struct Answer {
    status: StatusCode,
    message: String,
    run_status: Option<RunStatus>,
    retry_after: Option<u64>,
    cause: Option<&'static str>,
}

impl Answer {
    fn new(status: StatusCode, message: String, run_status: Option<RunStatus>) -> Self {
        Answer {
            status,
            message,
            run_status,
            retry_after: None,
            cause: None,
        }
    }
}

/// Seconds a client is told to wait after a busy database.
const BUSY_RETRY_AFTER_SECS: u64 = 5;
/// Seconds a client is told to wait after a full disk (freeing space takes an operator).
const DISK_FULL_RETRY_AFTER_SECS: u64 = 30;

/// A store failure as an answer, logged for the operator with its cause and remedy: 503 with
/// `Retry-After` for a cause that passes (a busy lock, a full disk), 500 naming the cause for
/// one that needs the operator's hand (read-only, missing, damaged), and 503 with `fallback`
/// for one without a name (a database that does not answer).
fn store_answer(error: &crate::store::StoreError, context: &str, fallback: &str) -> Answer {
    error.log(context);
    let Some(fault) = error.fault() else {
        let mut answer = Answer::new(StatusCode::SERVICE_UNAVAILABLE, fallback.to_owned(), None);
        // Most often the database is down or restarting: worth a retry, as for a busy one.
        answer.retry_after = Some(BUSY_RETRY_AFTER_SECS);
        return answer;
    };
    let mut answer = if fault.transient() {
        let mut answer = Answer::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{}: the service cannot record this now; retry after Retry-After seconds",
                fault.describe()
            ),
            None,
        );
        answer.retry_after = Some(match fault {
            crate::store::Fault::DiskFull => DISK_FULL_RETRY_AFTER_SECS,
            _ => BUSY_RETRY_AFTER_SECS,
        });
        answer
    } else {
        Answer::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "{}: retrying does not help until the service's operator repairs it",
                fault.describe()
            ),
            None,
        )
    };
    answer.cause = Some(fault.as_str());
    answer
}

impl ApiError {
    /// How this refusal is answered.
    fn parts(self) -> Answer {
        match self {
            ApiError::Auth(AuthError::Store(error)) => store_answer(
                &error,
                "token check failed",
                "the service cannot check tokens right now; retry later",
            ),
            ApiError::Auth(error) => Answer::new(StatusCode::UNAUTHORIZED, error.to_string(), None),
            ApiError::BadRequest(message) => Answer::new(StatusCode::BAD_REQUEST, message, None),
            ApiError::TooLarge(message) => {
                Answer::new(StatusCode::PAYLOAD_TOO_LARGE, message, None)
            }
            ApiError::RateLimited(error) => {
                let mut answer =
                    Answer::new(StatusCode::TOO_MANY_REQUESTS, error.to_string(), None);
                answer.retry_after = Some(error.retry_after_secs());
                answer
            }
            ApiError::NotFound(message) => Answer::new(StatusCode::NOT_FOUND, message, None),
            ApiError::Store(error) => store_answer(
                &error,
                "owner request failed",
                "the service cannot answer this right now; retry later",
            ),
            ApiError::Desktop(error) => desktop_parts(error),
            ApiError::Task(error) => task_parts(error),
        }
    }
}

fn desktop_parts(error: DesktopError) -> Answer {
    match error {
        DesktopError::BadRequest(message) => Answer::new(StatusCode::BAD_REQUEST, message, None),
        DesktopError::Forbidden(message) => Answer::new(StatusCode::FORBIDDEN, message, None),
        DesktopError::NotFound(message) => Answer::new(StatusCode::NOT_FOUND, message, None),
        DesktopError::Revoked => Answer::new(
            StatusCode::UNAUTHORIZED,
            DesktopError::Revoked.to_string(),
            None,
        ),
        DesktopError::Conflict { message, status } => {
            Answer::new(StatusCode::CONFLICT, message, Some(status))
        }
        DesktopError::Run(RunError::Contended) => Answer::new(
            StatusCode::SERVICE_UNAVAILABLE,
            RunError::Contended.to_string(),
            None,
        ),
        DesktopError::Run(RunError::Store(error)) => store_answer(
            &error,
            "desktop request failed",
            "the service cannot record this right now; retry later",
        ),
        // Nothing the caller did, and worth a retry, so 503 rather than 500.
        DesktopError::Run(error) => {
            tracing::error!(%error, "desktop request failed");
            Answer::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the service cannot record this right now; retry later".to_owned(),
                None,
            )
        }
    }
}

fn task_parts(error: TaskError) -> Answer {
    let answer = |status, message| Answer::new(status, message, None);
    match error {
        TaskError::Invalid(message) => answer(StatusCode::BAD_REQUEST, message),
        TaskError::LinkNotFound | TaskError::TaskNotFound | TaskError::ArtifactNotFound => {
            answer(StatusCode::NOT_FOUND, error.to_string())
        }
        TaskError::Conflict(_) | TaskError::Refused(_) => {
            answer(StatusCode::CONFLICT, error.to_string())
        }
        TaskError::Contended => answer(StatusCode::SERVICE_UNAVAILABLE, error.to_string()),
        TaskError::Store(error) => store_answer(
            &error,
            "owner request failed",
            "the service cannot record this right now; retry later",
        ),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let answer = self.parts();
        let body = ErrorBody {
            error: answer.message,
            status: answer.run_status,
            cause: answer.cause.map(str::to_owned),
        };
        let mut response = (answer.status, axum::Json(body)).into_response();
        if let Some(seconds) = answer.retry_after
            && let Ok(value) = axum::http::HeaderValue::from_str(&seconds.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        response
    }
}

/// A JSON API's answer: the value as JSON with 200, or the refusal.
pub type ApiResult<T> = Result<axum::Json<T>, ApiError>;

/// The identity behind the request's bearer token, checked against the store.
async fn identity(parts: &Parts, app: &AppState) -> Result<Identity, ApiError> {
    let token = bearer_token(parts.headers.get(header::AUTHORIZATION));
    let identity = authenticate(app, token).await?;
    app.rate
        .check(identity.token_id())
        .map_err(|wait| ApiError::RateLimited(QuotaError::from_rate(app.rate.limit(), wait)))?;
    Ok(identity)
}

/// The desktop relay making the request (a desktop token, else 401).
pub struct Desktop(pub DesktopIdentity);

impl FromRequestParts<Arc<AppState>> for Desktop {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let desktop = identity(parts, app).await?.into_desktop()?;
        Ok(Desktop(desktop))
    }
}

/// The owner making the request (an owner token, else 401).
pub struct Owner(pub OwnerIdentity);

impl FromRequestParts<Arc<AppState>> for Owner {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let owner = identity(parts, app).await?.into_owner()?;
        Ok(Owner(owner))
    }
}

/// The connected agent making an MCP request (an agent token). Refusals follow the MCP
/// authorization rules: 401 with the `WWW-Authenticate` challenge that names the protected
/// resource's metadata, or 503 when tokens cannot be checked.
pub struct Agent(pub AgentIdentity);

/// Why an MCP request has no agent behind it.
pub enum AgentRejection {
    /// The store could not check the token.
    Unavailable,
    /// No token, an unknown or revoked one, or another kind's; `base` is the public URL.
    Unauthorized {
        /// The public base URL, for the challenge's metadata address.
        base: String,
        /// What was wrong with the token.
        error: AuthError,
    },
}

impl IntoResponse for AgentRejection {
    fn into_response(self) -> Response {
        match self {
            AgentRejection::Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, BUSY_RETRY_AFTER_SECS.to_string())],
                "Service Unavailable: the relay service cannot check the token now (its database does not answer); retry after Retry-After seconds",
            )
                .into_response(),
            AgentRejection::Unauthorized { base, error } => oauth::unauthorized(&base, &error),
        }
    }
}

impl FromRequestParts<Arc<AppState>> for Agent {
    type Rejection = AgentRejection;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let token = bearer_token(parts.headers.get(header::AUTHORIZATION));
        match authenticate(app, token)
            .await
            .and_then(Identity::into_agent)
        {
            Ok(agent) => Ok(Agent(agent)),
            Err(AuthError::Store(error)) => {
                error.log("token check failed");
                Err(AgentRejection::Unavailable)
            }
            Err(error) => Err(AgentRejection::Unauthorized {
                base: oauth::base_url(app, &parts.headers),
                error,
            }),
        }
    }
}

/// A JSON body read within the route's `DefaultBodyLimit` and decoded as `T`; a body that is
/// too large or not this endpoint's JSON is refused in the one error shape.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let body = axum::body::Bytes::from_request(request, state)
            .await
            .map_err(body_rejection)?;
        serde_json::from_slice(&body).map(JsonBody).map_err(|e| {
            ApiError::BadRequest(format!(
                "the request body is not valid JSON for this endpoint: {e}"
            ))
        })
    }
}

fn body_rejection(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::TooLarge(format!(
            "the request body is too large for this endpoint: {}",
            rejection.body_text()
        ))
    } else {
        ApiError::BadRequest(format!(
            "the request body could not be read: {}",
            rejection.body_text()
        ))
    }
}
