//! What every HTTP API of the service does alike at its edge: who is asking ([`Agent`] for MCP,
//! [`Desktop`], [`Owner`]), the body ([`JsonBody`]), and one error type ([`ApiError`]) that
//! answers every refusal of the JSON APIs as `{"error": "...", "status"?: "...", "cause":
//! "..."}` with `Retry-After` on every 429 and 503 ([`super::answers`] decides each). A
//! handler is then decode → one domain function → respond.

use std::sync::Arc;

use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRef, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use relay_protocol::{ErrorBody, cause};
use serde::de::DeserializeOwned;

use super::rate::RateLimited;
use crate::auth::{
    AgentIdentity, AuthError, DesktopIdentity, Identity, OwnerIdentity, authenticate,
};
use crate::chat_tasks::TaskError;
use crate::http::{AppState, oauth};
use crate::runs::{DesktopError, RunError};

use super::answers::{self, Answer, BUSY_RETRY_AFTER_SECS};

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
    RateLimited(RateLimited),
    /// The object does not exist, or is another owner's (the same answer).
    NotFound(String),
    /// A refusal of the run functions (the owner API's runs).
    Run(RunError),
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
        ApiError::Run(error)
    }
}

impl From<TaskError> for ApiError {
    fn from(error: TaskError) -> Self {
        ApiError::Task(error)
    }
}

impl ApiError {
    /// How this refusal is answered.
    fn answer(self) -> Answer {
        match self {
            ApiError::Auth(error) => answers::auth_answer(error),
            ApiError::Desktop(error) => answers::desktop_answer(error),
            ApiError::Task(error) => answers::task_answer(error),
            ApiError::Run(error) => answers::run_answer(error, "owner request failed"),
            ApiError::BadRequest(message) => {
                Answer::new(StatusCode::BAD_REQUEST, cause::BAD_REQUEST, message)
            }
            ApiError::TooLarge(message) => {
                Answer::new(StatusCode::PAYLOAD_TOO_LARGE, cause::TOO_LARGE, message)
            }
            ApiError::RateLimited(error) => answers::rate_answer(&error),
            ApiError::NotFound(message) => {
                Answer::new(StatusCode::NOT_FOUND, cause::NOT_FOUND, message)
            }
            ApiError::Store(error) => answers::store_answer(&error, "request failed"),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let answer = self.answer();
        let body = ErrorBody {
            error: answer.message.clone(),
            status: answer.run_status,
            cause: Some(answer.cause.to_owned()),
        };
        let response = (answer.status, axum::Json(body)).into_response();
        answers::with_retry_after(response, &answer)
    }
}

/// A JSON API's answer: the value as JSON with 200, or the refusal.
pub type ApiResult<T> = Result<axum::Json<T>, ApiError>;

/// The token in an `Authorization` header value, if it is a bearer token.
pub fn bearer_token(header: Option<&http::HeaderValue>) -> Option<&str> {
    let value = header?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The identity behind the request's bearer token, checked against the store.
async fn identity(parts: &Parts, app: &AppState) -> Result<Identity, ApiError> {
    let token = bearer_token(parts.headers.get(header::AUTHORIZATION));
    let identity = authenticate(&app.tokens, token).await?;
    app.rate
        .check(identity.token_id())
        .map_err(|wait| ApiError::RateLimited(RateLimited::new(app.rate.limit(), wait)))?;
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

impl<S> FromRequestParts<S> for Agent
where
    Arc<AppState>: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = AgentRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let app = &Arc::<AppState>::from_ref(state);
        let token = bearer_token(parts.headers.get(header::AUTHORIZATION));
        match authenticate(&app.tokens, token)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_header_parsing() {
        let header = |v: &str| http::HeaderValue::from_str(v).unwrap();
        assert_eq!(bearer_token(Some(&header("Bearer abc"))), Some("abc"));
        assert_eq!(bearer_token(Some(&header("bearer  abc "))), Some("abc"));
        assert_eq!(bearer_token(Some(&header("Basic abc"))), None);
        assert_eq!(bearer_token(Some(&header("Bearer "))), None);
        assert_eq!(bearer_token(None), None);
    }
}
