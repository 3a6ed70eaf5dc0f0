//! The desktop's client of the service's desktop API. Requests go through a [`Transport`]:
//! real HTTP for the product, or the service's router called in-process (no sockets) for the
//! simulator, with faults injected as a transport layer rather than as branches here.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use relay_protocol::{
    CommandId, CompleteRequest, CompleteResponse, ControlResponse, GraphSessionId,
    MAX_SERVED_PROJECTS, ProjectsResponse, QueuedCommand, ReleasedRequest, ReleasedResponse,
    ReportResponse, ResumedRun, RunReport, ServedProject, StartedRequest, StartedResponse,
    SyncRequest, complete_path, control_path, display_name, projects_path, released_path,
    report_path, started_path, sync_path,
};

/// A boxed future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Every request gives up after this long (the service answers in milliseconds).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer body the desktop reads.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Carries one HTTP exchange.
pub trait Transport: Send + Sync {
    /// Sends `request` (path and query only in its URI) and returns the answer.
    fn send(
        &self,
        request: Request<Vec<u8>>,
    ) -> BoxFuture<'_, Result<Response<Vec<u8>>, TransportError>>;
}

/// Why a request got no answer (or a service URL was refused), in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TransportError(pub String);

impl From<String> for TransportError {
    fn from(message: String) -> Self {
        TransportError(message)
    }
}

impl From<&str> for TransportError {
    fn from(message: &str) -> Self {
        TransportError(message.to_owned())
    }
}

/// HTTP or HTTPS (rustls, the system's roots) to a base URL.
pub struct HttpTransport {
    client: runner::host::http::WebClient,
    base: String,
}

impl HttpTransport {
    /// A transport to `base` (e.g. `http://127.0.0.1:8787` or `https://relay.example.com`).
    pub fn new(base: &str) -> Result<Self, TransportError> {
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(TransportError(format!(
                "the service URL must start with http:// or https://, got `{base}`"
            )));
        }
        format!("{base}/")
            .parse::<http::Uri>()
            .map_err(|e| format!("the service URL `{base}` is not a valid URL: {e}"))?;
        let client =
            runner::host::http::WebClient::new(CONNECT_TIMEOUT).map_err(|e| e.to_string())?;
        Ok(Self { client, base })
    }
}

/// Opening a connection to the service (TCP and TLS) may take this long.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

impl Transport for HttpTransport {
    fn send(
        &self,
        request: Request<Vec<u8>>,
    ) -> BoxFuture<'_, Result<Response<Vec<u8>>, TransportError>> {
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            let url = format!("{}{}", self.base, parts.uri);
            parts.uri = url
                .parse()
                .map_err(|e| format!("{url} is not a valid URL: {e}"))?;
            let request = Request::from_parts(parts, body);
            match tokio::time::timeout(
                REQUEST_TIMEOUT,
                self.client.send(request, MAX_RESPONSE_BYTES),
            )
            .await
            {
                Ok(answer) => answer.map_err(|e| TransportError(format!("{url}: {e}"))),
                Err(_) => Err(TransportError(format!(
                    "{url}: no answer within {} s",
                    REQUEST_TIMEOUT.as_secs()
                ))),
            }
        })
    }
}

/// The service's router called in-process.
#[derive(Clone)]
pub struct RouterTransport(pub axum::Router);

impl Transport for RouterTransport {
    fn send(
        &self,
        request: Request<Vec<u8>>,
    ) -> BoxFuture<'_, Result<Response<Vec<u8>>, TransportError>> {
        use tower::ServiceExt;
        let router = self.0.clone();
        Box::pin(async move {
            let request = request.map(axum::body::Body::from);
            let response = router
                .oneshot(request)
                .await
                .map_err(|e| format!("router: {e}"))?;
            let (parts, body) = response.into_parts();
            let bytes = axum::body::to_bytes(body, MAX_RESPONSE_BYTES)
                .await
                .map_err(|e| format!("router body: {e}"))?;
            Ok(Response::from_parts(parts, bytes.to_vec()))
        })
    }
}

/// Most of a service's `Retry-After` the desktop honours: a longer one is waited out this long
/// at a time, so a service that asked by mistake is tried again within minutes.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(10 * 60);

/// Why a desktop API call did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The request did not get an answer (offline, timeout): try again later.
    #[error("the service could not be reached: {0}")]
    Unreachable(String),
    /// The service answered with an error status.
    #[error("the service answered {status}{}: {message}", cause.as_ref().map(|c| format!(" ({c})")).unwrap_or_default())]
    Status {
        /// The HTTP status.
        status: StatusCode,
        /// Its error message.
        message: String,
        /// Which way its storage failed, when it said (`disk_full`, `read_only`, `missing`,
        /// `corrupt`, `busy`).
        cause: Option<String>,
        /// How long it asked the desktop to wait before trying again (`Retry-After`, at most
        /// [`MAX_RETRY_AFTER`]).
        retry_after: Option<Duration>,
    },
    /// The answer was not what the protocol says.
    #[error("the service's answer is malformed: {0}")]
    Malformed(String),
}

impl ApiError {
    /// Whether trying again later can help: network trouble, a 5xx, a 401 the owner can fix
    /// with a new token, a 408 or a 429. Every other 4xx is the service's final word on this
    /// request, which sending it again will not change.
    pub fn is_retryable(&self) -> bool {
        match self {
            ApiError::Unreachable(_) | ApiError::Malformed(_) => true,
            ApiError::Status { status, .. } => {
                !status.is_client_error()
                    || matches!(
                        *status,
                        StatusCode::UNAUTHORIZED
                            | StatusCode::REQUEST_TIMEOUT
                            | StatusCode::TOO_MANY_REQUESTS
                    )
            }
        }
    }

    /// The service's own message, when it answered with an error status.
    pub fn service_message(&self) -> Option<&str> {
        match self {
            ApiError::Status { message, .. } => Some(message),
            ApiError::Unreachable(_) | ApiError::Malformed(_) => None,
        }
    }

    /// The error status, when the service answered with one.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ApiError::Status { status, .. } => Some(*status),
            ApiError::Unreachable(_) | ApiError::Malformed(_) => None,
        }
    }

    /// Which way the service's storage failed, when it said.
    pub fn cause(&self) -> Option<&str> {
        match self {
            ApiError::Status { cause, .. } => cause.as_deref(),
            ApiError::Unreachable(_) | ApiError::Malformed(_) => None,
        }
    }

    /// How long the service asked the desktop to wait before calling it again, when it did:
    /// every retry of the desktop waits at least this long.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ApiError::Status { retry_after, .. } => *retry_after,
            ApiError::Unreachable(_) | ApiError::Malformed(_) => None,
        }
    }
}

/// The wait a refusal's `Retry-After` asks for: whole seconds (the form this service sends),
/// at most [`MAX_RETRY_AFTER`]; a date or anything else is not read.
fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

/// A command as the sync answer carried it, before validation: a malformed entry is refused
/// on its own, before anything is written, instead of failing the whole answer.
#[derive(Debug, Clone, Deserialize)]
pub struct RawCommand {
    /// Claimed command id.
    pub command_id: Value,
    /// Claimed session id.
    pub graph_session_id: Value,
    /// The slug.
    #[serde(default)]
    pub slug: Value,
    /// The arguments.
    #[serde(default)]
    pub arguments: Value,
    /// When queued.
    #[serde(default)]
    pub created_at: Value,
    /// The agent that queued it (absent from older services).
    #[serde(default)]
    pub agent_id: Value,
    /// Its name.
    #[serde(default)]
    pub agent_name: Value,
    /// The agent's token cap, if it asked for one.
    #[serde(default)]
    pub max_tokens: Value,
}

impl RawCommand {
    /// Validates the command: a UUID id, a `gs_` session id, a slug and an object of arguments.
    pub fn validate(self) -> Result<QueuedCommand, MalformedCommand> {
        let id = self
            .command_id
            .as_str()
            .ok_or("command_id is not a string")?;
        let command_id: CommandId = id.parse().map_err(|e: relay_protocol::InvalidInput| e.0)?;
        let session: GraphSessionId = self
            .graph_session_id
            .as_str()
            .ok_or("graph_session_id is not a string")?
            .parse()
            .map_err(|e: relay_protocol::InvalidInput| e.0)?;
        let slug = self.slug.as_str().ok_or("slug is not a string")?.to_owned();
        let arguments = match self.arguments {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            _ => return Err("arguments is not an object".into()),
        };
        let created_at =
            serde_json::from_value(self.created_at).map_err(|e| format!("created_at: {e}"))?;
        let max_tokens = match self.max_tokens {
            Value::Null => None,
            value => Some(
                value
                    .as_u64()
                    .filter(|n| *n > 0)
                    .ok_or("max_tokens is not a positive whole number")?,
            ),
        };
        Ok(QueuedCommand {
            command_id,
            graph_session_id: session,
            slug,
            arguments,
            created_at,
            agent_id: optional_name(self.agent_id, "agent_id")?,
            agent_name: optional_name(self.agent_name, "agent_name")?,
            max_tokens,
        })
    }
}

/// An optional name of the answer: a string (cut to the display length) or nothing.
fn optional_name(value: Value, field: &str) -> Result<Option<String>, MalformedCommand> {
    match value {
        Value::Null => Ok(None),
        Value::String(text) => Ok(Some(display_name(&text))),
        _ => Err(format!("{field} is not a string").into()),
    }
}

/// Why a queued command from the service does not fit the protocol, in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MalformedCommand(pub String);

impl From<String> for MalformedCommand {
    fn from(message: String) -> Self {
        MalformedCommand(message)
    }
}

impl From<&str> for MalformedCommand {
    fn from(message: &str) -> Self {
        MalformedCommand(message.to_owned())
    }
}

/// A sync answer before validation.
#[derive(Debug, Default, Deserialize)]
pub struct SyncAnswer {
    /// The queued commands, unvalidated.
    #[serde(default)]
    pub commands: Vec<RawCommand>,
    /// Running commands (of those the request named) with a cancel request.
    #[serde(default)]
    pub cancel_requested: Vec<Value>,
    /// Queued commands the service cannot read (damaged rows), which it does not hand out.
    #[serde(default)]
    pub damaged: Vec<relay_protocol::DamagedCommand>,
}

/// What `started` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// Go ahead (the agent may already have asked to cancel).
    Go {
        /// The cancel flag.
        cancel_requested: bool,
        /// Who asked to cancel, when the service says (the agent or the owner in the console).
        cancel_cause: Option<relay_protocol::EndCause>,
    },
    /// Do not run it: it was cancelled while queued, or is already finished.
    Refused(String),
}

/// The desktop API with one desktop token.
#[derive(Clone)]
pub struct DesktopApi {
    transport: Arc<dyn Transport>,
    token: String,
}

impl DesktopApi {
    /// A client sending `token` over `transport`.
    pub fn new(transport: Arc<dyn Transport>, token: &str) -> Self {
        Self {
            transport,
            token: token.to_owned(),
        }
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: String,
        body: Option<Vec<u8>>,
    ) -> Result<T, ApiError> {
        let mut builder = Request::builder().method(method).uri(&path).header(
            http::header::AUTHORIZATION,
            format!("Bearer {}", self.token),
        );
        if body.is_some() {
            builder = builder.header(http::header::CONTENT_TYPE, "application/json");
        }
        let request = builder
            .body(body.unwrap_or_default())
            .map_err(|e| ApiError::Malformed(e.to_string()))?;
        let response = self
            .transport
            .send(request)
            .await
            .map_err(|e| ApiError::Unreachable(e.0))?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let bytes = response.into_body();
        if !status.is_success() {
            let (message, cause) = match serde_json::from_slice::<relay_protocol::ErrorBody>(&bytes)
            {
                Ok(body) => (body.error, body.cause),
                Err(_) => (
                    String::from_utf8_lossy(&bytes).chars().take(500).collect(),
                    None,
                ),
            };
            return Err(ApiError::Status {
                status,
                message,
                cause,
                retry_after,
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| ApiError::Malformed(format!("{path}: {e}")))
    }

    /// Uploads a project's shared sessions; returns its queued commands (unvalidated) and the
    /// cancel requests on the commands the request named as running.
    pub async fn sync(&self, request: &SyncRequest) -> Result<SyncAnswer, ApiError> {
        let body = serde_json::to_vec(request).map_err(|e| ApiError::Malformed(e.to_string()))?;
        self.call(Method::POST, sync_path(), Some(body)).await
    }

    /// The projects this desktop token may serve, with their names as the service knows them
    /// (at most [`MAX_SERVED_PROJECTS`]; names cut to the display length).
    pub async fn projects(&self) -> Result<Vec<ServedProject>, ApiError> {
        let answer: ProjectsResponse = self.call(Method::GET, projects_path(), None).await?;
        Ok(answer
            .projects
            .into_iter()
            .take(MAX_SERVED_PROJECTS)
            .map(|p| ServedProject {
                name: display_name(&p.name),
                project_id: p.project_id,
            })
            .collect())
    }

    /// Reports that a command started, or (with `resumed`) that this execution resumes it from
    /// its journal after a stop.
    pub async fn started(
        &self,
        id: &CommandId,
        execution_id: &str,
        token_cap: Option<u64>,
        resumed: Option<ResumedRun>,
    ) -> Result<Started, ApiError> {
        let body = serde_json::to_vec(&StartedRequest {
            execution_id: execution_id.to_owned(),
            token_cap,
            resumed,
        })
        .map_err(|e| ApiError::Malformed(e.to_string()))?;
        match self
            .call::<StartedResponse>(Method::POST, started_path(id), Some(body))
            .await
        {
            Ok(answer) => Ok(Started::Go {
                cancel_requested: answer.cancel_requested,
                cancel_cause: answer.cancel_cause,
            }),
            Err(ApiError::Status {
                status: StatusCode::CONFLICT,
                message,
                ..
            }) => Ok(Started::Refused(message)),
            Err(other) => Err(other),
        }
    }

    /// Hands back a command this desktop reported started under `execution_id` and will not
    /// run under it; the answer says where the command stands now.
    pub async fn released(
        &self,
        id: &CommandId,
        execution_id: &str,
    ) -> Result<ReleasedResponse, ApiError> {
        let body = serde_json::to_vec(&ReleasedRequest {
            execution_id: execution_id.to_owned(),
        })
        .map_err(|e| ApiError::Malformed(e.to_string()))?;
        self.call(Method::POST, released_path(id), Some(body)).await
    }

    /// Reads the cancel flag and who asked (and tells the service the desktop is alive).
    pub async fn control(&self, id: &CommandId) -> Result<ControlResponse, ApiError> {
        self.call(Method::GET, control_path(id), None).await
    }

    /// Posts a completion.
    pub async fn complete(
        &self,
        id: &CommandId,
        completion: &CompleteRequest,
    ) -> Result<CompleteResponse, ApiError> {
        let body =
            serde_json::to_vec(completion).map_err(|e| ApiError::Malformed(e.to_string()))?;
        self.call(Method::POST, complete_path(id), Some(body)).await
    }

    /// Tells the service what a running command waits for and how far it got.
    pub async fn report(
        &self,
        id: &CommandId,
        report: &RunReport,
    ) -> Result<ReportResponse, ApiError> {
        let body = serde_json::to_vec(report).map_err(|e| ApiError::Malformed(e.to_string()))?;
        self.call(Method::POST, report_path(id), Some(body)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers every request with 503, a storage cause and a `Retry-After`.
    struct Busy(&'static str);

    impl Transport for Busy {
        fn send(
            &self,
            _request: Request<Vec<u8>>,
        ) -> BoxFuture<'_, Result<Response<Vec<u8>>, TransportError>> {
            let retry_after = self.0;
            Box::pin(async move {
                let body = serde_json::json!({"error": "the database is busy: retry after Retry-After seconds", "cause": "busy"});
                Response::builder()
                    .status(StatusCode::SERVICE_UNAVAILABLE)
                    .header(http::header::RETRY_AFTER, retry_after)
                    .body(body.to_string().into_bytes())
                    .map_err(|e| TransportError(e.to_string()))
            })
        }
    }

    fn id() -> CommandId {
        "6f1f3f5e-8c8b-4a6e-9d2b-0b8c2a9e7d11".parse().expect("id")
    }

    #[tokio::test]
    async fn a_refusal_keeps_the_services_cause_and_retry_after() {
        let api = DesktopApi::new(Arc::new(Busy("5")), "token");
        let error = api.control(&id()).await.expect_err("refused");
        assert_eq!(error.status(), Some(StatusCode::SERVICE_UNAVAILABLE));
        assert_eq!(error.cause(), Some("busy"));
        assert_eq!(error.retry_after(), Some(Duration::from_secs(5)));
        assert!(error.is_retryable());
        let text = error.to_string();
        assert!(
            text.contains("(busy)") && text.contains("Retry-After"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_retry_after_is_honoured_up_to_its_bound_and_only_in_seconds() {
        let api = DesktopApi::new(Arc::new(Busy("86400")), "token");
        let error = api.control(&id()).await.expect_err("refused");
        assert_eq!(error.retry_after(), Some(MAX_RETRY_AFTER));
        let api = DesktopApi::new(Arc::new(Busy("Wed, 21 Oct 2015 07:28:00 GMT")), "token");
        let error = api.control(&id()).await.expect_err("refused");
        assert_eq!(error.retry_after(), None);
    }
}
