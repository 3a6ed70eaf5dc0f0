//! The HTTP side of the real agent providers: one client (hyper, with rustls on the ring crypto
//! provider for https), API keys that never leave this module in any printable form, bounded
//! retries with backoff that honour `Retry-After`, a per-request timeout, and bounded reading of
//! answers. Providers build their request bodies and parse answers; everything about talking to
//! a server that may be slow, failing or hostile lives here.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use graph_js::FailureCode;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::agents::{ProgressFn, ProviderError, ProviderProgress};

/// Retries after the first attempt, by default.
pub const DEFAULT_MAX_RETRIES: u32 = 3;
/// Upper bound on configured retries: a provider that fails this often is down.
pub const MAX_RETRIES: u32 = 10;
/// Wait before the first retry when the server names none; doubles each retry.
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_millis(500);
/// Longest wait between two attempts when the server names none.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Longest `Retry-After` honoured; a server asking for more is treated as down, not waited for
/// (a run should not sit silently for many minutes inside one agent).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// Per-request timeout, by default: one whole attempt, from connecting to the last byte.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// Upper bound on the configured per-request timeout.
pub const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(3600);
/// Time allowed to open a connection, by default: TCP and, for https, the TLS handshake (a
/// server that accepts TCP and never answers a TLS hello would otherwise hold a request until
/// the per-request timeout).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Upper bound on the configured connect timeout.
pub const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest answer read from a provider (a streamed reply sends every token wrapped in JSON, so
/// this is far above any reply text a model is allowed to generate).
pub const MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;
/// How long to wait for the end of a body after the reply in it has ended.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);
/// Largest error body read, to quote from it.
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// Characters of a server's error message quoted in an agent's failure.
pub const MAX_ERROR_EXCERPT_CHARS: usize = 300;

/// What replaces an API key wherever it would otherwise appear.
pub const REDACTED: &str = "[redacted]";

/// An API key read from the environment. It cannot be printed: `Debug` shows only that it is
/// there, and it is used only as a header value marked sensitive.
#[derive(Clone)]
pub struct ApiKey(Arc<str>);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

impl ApiKey {
    /// A key given directly (an embedder's keychain, a test).
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into().into())
    }

    /// The key in the environment variable `var`, if it is set and not empty.
    pub fn from_env(var: &str) -> Option<Self> {
        std::env::var(var)
            .ok()
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .map(|v| Self(v.into()))
    }

    /// A header value carrying `prefix` and the key, marked sensitive (hyper and `Debug` then
    /// never show it).
    pub(crate) fn header(&self, prefix: &str) -> Result<HeaderValue, ProviderError> {
        let mut value = HeaderValue::from_str(&format!("{prefix}{}", self.0)).map_err(|_| {
            ProviderError::new(
                FailureCode::Invalid,
                "the API key contains characters that cannot be sent in an HTTP header",
            )
        })?;
        value.set_sensitive(true);
        Ok(value)
    }

    /// `text` with every occurrence of the key replaced.
    pub fn redact(&self, text: &str) -> String {
        if self.0.is_empty() {
            return text.to_owned();
        }
        text.replace(&*self.0, REDACTED)
    }
}

/// `text` with `key` removed, when there is a key.
pub(crate) fn redact(text: &str, key: Option<&ApiKey>) -> String {
    key.map_or_else(|| text.to_owned(), |k| k.redact(text))
}

/// How a provider retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (at most [`MAX_RETRIES`]).
    pub max_retries: u32,
    /// Wait before the first retry when the server names none.
    pub initial_backoff: Duration,
    /// Longest wait between attempts when the server names none.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: DEFAULT_MAX_RETRIES,
            initial_backoff: DEFAULT_INITIAL_BACKOFF,
            max_backoff: MAX_BACKOFF,
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (from 1): the server's `Retry-After` when it gave
    /// one (refused past [`MAX_RETRY_AFTER`]), else exponential backoff capped at `max_backoff`.
    /// No random jitter: agents of one run share one provider, and deterministic waits keep
    /// traces and tests reproducible.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Result<Duration, RetryError> {
        if let Some(wait) = retry_after {
            if wait > MAX_RETRY_AFTER {
                return Err(RetryError::WaitTooLong(wait));
            }
            return Ok(wait);
        }
        let doublings = retry.saturating_sub(1).min(31);
        let backoff = self
            .initial_backoff
            .checked_mul(1u32 << doublings)
            .unwrap_or(self.max_backoff);
        Ok(backoff.min(self.max_backoff))
    }
}

/// Why no further attempt is made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetryError {
    /// The server asks for a wait over [`MAX_RETRY_AFTER`].
    #[error(
        "the provider asks to retry after {} s, over the limit of {} s",
        .0.as_secs(),
        MAX_RETRY_AFTER.as_secs()
    )]
    WaitTooLong(Duration),
}

/// Why an HTTP client could not be set up.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// rustls refused the TLS settings.
    #[error("cannot set up TLS: {0}")]
    Tls(String),
}

/// Why a provider's base URL was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EndpointError {
    /// Not a URL.
    #[error("the base URL {base_url:?} is not a URL: {reason}")]
    NotAUrl {
        /// The base URL given.
        base_url: String,
        /// Why not.
        reason: String,
    },
    /// Not `http` or `https`.
    #[error("the base URL {0:?} must start with http:// or https://")]
    Scheme(String),
    /// No host.
    #[error("the base URL {0:?} has no host")]
    NoHost(String),
}

/// Why a [`WebClient`] exchange failed: one line that names the cause.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// No answer: the connection, TLS, or the request itself (the error and its causes).
    #[error("{0}")]
    Send(String),
    /// The answer's body could not be read, or is over the bound.
    #[error("reading the answer: {0}")]
    Read(String),
}

/// Why one attempt failed.
#[derive(Debug)]
pub(crate) enum AttemptError {
    /// Worth another attempt (429, 5xx, no connection).
    Retry {
        /// What happened, for the trace and the final error.
        reason: String,
        /// How long the server asked us to wait.
        retry_after: Option<Duration>,
    },
    /// Not worth another attempt.
    Fatal(ProviderError),
}

impl AttemptError {
    pub(crate) fn fatal(code: FailureCode, message: impl Into<String>) -> Self {
        Self::Fatal(ProviderError::new(code, message))
    }
}

/// Decodes a piece of the provider's answer; what does not decode fails the attempt for good,
/// as `{what}: {the decoder's reason}`.
pub(crate) fn decode_json<T: serde::de::DeserializeOwned>(
    json: &[u8],
    what: &str,
) -> Result<T, AttemptError> {
    serde_json::from_slice(json)
        .map_err(|e| AttemptError::fatal(FailureCode::Failed, format!("{what}: {e}")))
}

/// Runs `attempt` until it succeeds, fails for good, or the retries are used up. Each attempt
/// is bounded by `timeout`; each retry is reported through `progress` before its wait.
pub(crate) async fn with_retries<T, F, Fut>(
    policy: &RetryPolicy,
    timeout: Duration,
    progress: ProgressFn<'_>,
    mut attempt: F,
) -> Result<T, ProviderError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, AttemptError>>,
{
    let max_retries = policy.max_retries.min(MAX_RETRIES);
    let mut retries = 0u32;
    loop {
        let outcome = match tokio::time::timeout(timeout, attempt()).await {
            Ok(outcome) => outcome,
            // A timed-out generation is not retried: it may have cost the whole reply already.
            Err(_) => Err(AttemptError::fatal(
                FailureCode::Failed,
                format!(
                    "the provider gave no complete answer within {} s (the per-request timeout)",
                    timeout.as_secs_f64()
                ),
            )),
        };
        let (reason, retry_after) = match outcome {
            Ok(value) => return Ok(value),
            Err(AttemptError::Fatal(error)) => return Err(error),
            Err(AttemptError::Retry {
                reason,
                retry_after,
            }) => (reason, retry_after),
        };
        if retries >= max_retries {
            return Err(ProviderError::new(
                FailureCode::Failed,
                format!("{reason} (gave up after {retries} retries)"),
            ));
        }
        retries += 1;
        let wait = policy
            .delay(retries, retry_after)
            .map_err(|why| ProviderError::new(FailureCode::Failed, format!("{reason}; {why}")))?;
        tracing::debug!(retry = retries, wait_ms = wait.as_millis() as u64, %reason, "retrying a provider request");
        progress(ProviderProgress::Retry {
            attempt: retries,
            reason,
        });
        tokio::time::sleep(wait).await;
    }
}

/// The https-or-http connector with a bound on the whole connection set-up.
#[derive(Clone)]
struct Connector {
    inner: HttpsConnector<HttpConnector>,
    timeout: Duration,
}

type Connecting = std::pin::Pin<
    Box<
        dyn Future<
                Output = Result<
                    <HttpsConnector<HttpConnector> as tower::Service<Uri>>::Response,
                    BoxError,
                >,
            > + Send,
    >,
>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<Uri> for Connector {
    type Response = <HttpsConnector<HttpConnector> as tower::Service<Uri>>::Response;
    type Error = BoxError;
    type Future = Connecting;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, connecting).await {
                Ok(connected) => connected,
                Err(_) => Err(format!(
                    "no connection within {} s (TCP connect and TLS handshake)",
                    timeout.as_secs_f64()
                )
                .into()),
            }
        })
    }
}

/// An HTTP client for one provider: http and https (rustls, ring, the system's roots), HTTP/1.1,
/// one connection per request.
///
/// Connections are not kept for reuse: llama.cpp's `llama-server` closes a connection right
/// after a streamed reply while announcing keep-alive, so the next turn, sent at once on the
/// pooled connection, raced the close and failed ("connection closed before message
/// completed") into a retry with backoff. A new connection costs a handshake per turn, little
/// next to a model's reply.
#[derive(Clone)]
pub(crate) struct HttpClient {
    client: Client<Connector, Full<Bytes>>,
}

/// TLS settings shared by every client: loading the system's roots reads many files, once.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, ClientError> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, ClientError>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            for error in &found.errors {
                tracing::warn!("while loading the system's TLS roots: {error}");
            }
            let (added, ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                tracing::warn!(
                    ignored,
                    "no TLS root certificates found: https providers will fail to connect"
                );
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| ClientError::Tls(e.to_string()))?
                .with_root_certificates(roots)
                .with_no_client_auth();
            Ok(Arc::new(config))
        })
        .clone()
}

impl HttpClient {
    /// A client; opening a connection may take `connect_timeout`.
    pub(crate) fn new(connect_timeout: Duration) -> Result<Self, ClientError> {
        Ok(Self {
            client: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build(connector(connect_timeout)?),
        })
    }

    /// POSTs `body` as JSON to `uri` with `headers`. A 2xx answer is returned for reading;
    /// anything else becomes an [`AttemptError`] quoting the server's message (with `key`
    /// removed from it).
    pub(crate) async fn post_json(
        &self,
        uri: &Uri,
        headers: &HeaderMap,
        body: Bytes,
        key: Option<&ApiKey>,
    ) -> Result<hyper::Response<Incoming>, AttemptError> {
        let mut request = hyper::Request::post(uri.clone())
            .body(Full::new(body))
            .map_err(|e| AttemptError::fatal(FailureCode::Invalid, e.to_string()))?;
        request
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in headers {
            request.headers_mut().insert(name.clone(), value.clone());
        }
        let response = self.client.request(request).await.map_err(|e| {
            // The error names the host and the cause, never the headers.
            AttemptError::Retry {
                reason: redact(
                    &format!("cannot reach the provider: {}", error_chain(&e)),
                    key,
                ),
                retry_after: None,
            }
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = retry_after(response.headers(), SystemTime::now());
        let excerpt = redact(&error_excerpt(response.into_body()).await, key);
        let what = format!(
            "HTTP {}{}",
            status.as_u16(),
            if excerpt.is_empty() {
                String::new()
            } else {
                format!(": {excerpt}")
            }
        );
        Err(classify(status, what, retry_after))
    }
}

/// The https-or-http connector every client uses.
fn connector(connect_timeout: Duration) -> Result<Connector, ClientError> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config((*tls_config()?).clone())
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Connector {
        inner: https,
        timeout: connect_timeout,
    })
}

/// A plain HTTP(S) client for the rest of graphrelay (the desktop relay talks to its service
/// with it): the providers' TLS set-up (rustls on ring, the system's roots, which
/// `SSL_CERT_FILE` or `SSL_CERT_DIR` replace), a bound on connection set-up, connections kept
/// for reuse.
#[derive(Clone)]
pub struct WebClient {
    client: Client<Connector, Full<Bytes>>,
}

impl WebClient {
    /// A client; opening a connection may take `connect_timeout`.
    pub fn new(connect_timeout: Duration) -> Result<Self, ClientError> {
        Ok(Self {
            client: Client::builder(TokioExecutor::new()).build(connector(connect_timeout)?),
        })
    }

    /// Sends `request` (an absolute URI) and reads its answer, at most `max_bytes` of body.
    /// Errors name the cause (connection, TLS, a body too large), one line.
    pub async fn send(
        &self,
        request: http::Request<Vec<u8>>,
        max_bytes: usize,
    ) -> Result<http::Response<Vec<u8>>, WebError> {
        let response = self
            .client
            .request(request.map(|body| Full::new(Bytes::from(body))))
            .await
            .map_err(|e| WebError::Send(error_chain(&e)))?;
        let (parts, body) = response.into_parts();
        let limited = http_body_util::Limited::new(body, max_bytes);
        let bytes = limited
            .collect()
            .await
            .map_err(|e| WebError::Read(e.to_string()))?
            .to_bytes();
        Ok(http::Response::from_parts(parts, bytes.to_vec()))
    }
}

/// What a non-2xx status means for the attempt.
fn classify(status: StatusCode, what: String, retry_after: Option<Duration>) -> AttemptError {
    match status.as_u16() {
        // 408 request timeout, 409 (a concurrent-request conflict some gateways report),
        // 429 rate limited, 5xx the server's trouble (529: Anthropic's "overloaded").
        408 | 409 | 429 | 500..=599 => AttemptError::Retry {
            reason: format!("the provider answered {what}"),
            retry_after,
        },
        400 | 404 | 413 | 422 => AttemptError::fatal(
            FailureCode::Invalid,
            format!("the provider refused the request: {what}"),
        ),
        401 | 403 => AttemptError::fatal(
            FailureCode::Failed,
            format!("the provider refused the credentials: {what}"),
        ),
        _ => AttemptError::fatal(FailureCode::Failed, format!("the provider answered {what}")),
    }
}

/// The error and its sources, one line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The wait a server asks for: `retry-after-ms` (OpenAI, Azure), else `Retry-After` in seconds
/// or as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(HeaderName::from_bytes(name.as_bytes()).ok()?)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64((ms / 1000.0).min(u32::MAX as f64)));
    }
    let value = text("retry-after")?;
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0)
            .then(|| Duration::from_secs_f64(seconds.min(u32::MAX as f64)));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A short quote of an error body: the `error.message` of a JSON error (both APIs use that
/// shape), else the text, cut to [`MAX_ERROR_EXCERPT_CHARS`].
async fn error_excerpt(body: Incoming) -> String {
    let mut reader = BodyReader::new(body, MAX_ERROR_BODY_BYTES);
    let mut bytes = Vec::new();
    while let Ok(Some(chunk)) = reader.next_chunk().await {
        bytes.extend_from_slice(&chunk);
    }
    excerpt_of(&bytes)
}

pub(crate) fn excerpt_of(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let message = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| {
            let error = v.get("error")?;
            error
                .get("message")
                .and_then(|m| m.as_str())
                .map(str::to_owned)
                .or_else(|| error.as_str().map(str::to_owned))
        })
        .unwrap_or_else(|| text.trim().to_owned());
    cut(&message, MAX_ERROR_EXCERPT_CHARS)
}

/// `text` cut to `max` characters, with an ellipsis when cut.
pub(crate) fn cut(text: &str, max: usize) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

/// Reads a body chunk by chunk, refusing more than `limit` bytes in all.
pub(crate) struct BodyReader {
    body: Incoming,
    read: usize,
    limit: usize,
}

impl BodyReader {
    pub(crate) fn new(body: Incoming, limit: usize) -> Self {
        Self {
            body,
            read: 0,
            limit,
        }
    }

    /// The next data chunk, or `None` at the end.
    pub(crate) async fn next_chunk(&mut self) -> Result<Option<Bytes>, AttemptError> {
        loop {
            let Some(frame) = self.body.frame().await else {
                return Ok(None);
            };
            let frame = frame.map_err(|e| {
                // Not retried: the server may already have generated (and billed) the reply.
                AttemptError::fatal(
                    FailureCode::Failed,
                    format!(
                        "the connection broke while the answer was arriving: {}",
                        error_chain(&e)
                    ),
                )
            })?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            self.read = self.read.saturating_add(data.len());
            if self.read > self.limit {
                return Err(AttemptError::fatal(
                    FailureCode::Failed,
                    format!("the provider's answer is larger than {} bytes", self.limit),
                ));
            }
            return Ok(Some(data));
        }
    }

    /// Reads what is left after the end of a reply (usually nothing but the body's end), so
    /// the connection can be reused; gives up quietly after [`DRAIN_TIMEOUT`].
    pub(crate) async fn drain(&mut self) {
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
            while let Ok(Some(_)) = self.next_chunk().await {}
        })
        .await;
    }

    /// The whole rest of the body.
    pub(crate) async fn read_all(&mut self) -> Result<Vec<u8>, AttemptError> {
        let mut bytes = Vec::new();
        while let Some(chunk) = self.next_chunk().await? {
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }
}

/// Whether an answer is a server-sent event stream (else it is one JSON document: some
/// compatible servers ignore `stream`).
pub(crate) fn is_event_stream(response: &hyper::Response<Incoming>) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

/// Parses and checks a provider base URL (`http` or `https`, with a host) and appends `path`.
pub(crate) fn endpoint(base_url: &str, path: &str) -> Result<Uri, EndpointError> {
    let base = base_url.trim().trim_end_matches('/');
    let uri: Uri = format!("{base}{path}")
        .parse()
        .map_err(|e: http::uri::InvalidUri| EndpointError::NotAUrl {
            base_url: base_url.to_owned(),
            reason: e.to_string(),
        })?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(EndpointError::Scheme(base_url.to_owned())),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(EndpointError::NoHost(base_url.to_owned()));
    }
    Ok(uri)
}

/// Reports reply progress at most every this many characters (plus the first), so a long
/// reply shows a line now and then in the trace instead of one event per token.
pub const PROGRESS_STEP_CHARS: usize = 256;

/// Tracks reply characters and reports them through `progress` in steps.
pub(crate) struct ProgressMeter<'a> {
    progress: ProgressFn<'a>,
    chars: usize,
    reported: usize,
}

impl<'a> ProgressMeter<'a> {
    pub(crate) fn new(progress: ProgressFn<'a>) -> Self {
        Self {
            progress,
            chars: 0,
            reported: 0,
        }
    }

    pub(crate) fn add(&mut self, chars: usize) {
        if chars == 0 {
            return;
        }
        self.chars = self.chars.saturating_add(chars);
        if self.reported == 0 || self.chars - self.reported >= PROGRESS_STEP_CHARS {
            self.reported = self.chars;
            (self.progress)(ProviderProgress::Chars(self.chars));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let policy = RetryPolicy {
            max_retries: 10,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(4),
        };
        let waits: Vec<u128> = (1..=6)
            .map(|n| policy.delay(n, None).expect("delay").as_millis())
            .collect();
        assert_eq!(waits, vec![500, 1000, 2000, 4000, 4000, 4000]);
        // Far past any shift width: still the cap, no overflow.
        assert_eq!(
            policy.delay(u32::MAX, None),
            Ok(Duration::from_secs(4)),
            "no overflow"
        );
    }

    #[test]
    fn retry_after_is_honoured_up_to_the_limit_and_refused_past_it() {
        let policy = RetryPolicy::default();
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(7))),
            Ok(Duration::from_secs(7))
        );
        assert_eq!(
            policy.delay(1, Some(MAX_RETRY_AFTER)),
            Ok(MAX_RETRY_AFTER),
            "at the limit"
        );
        let past = policy
            .delay(1, Some(MAX_RETRY_AFTER + Duration::from_secs(1)))
            .unwrap_err();
        assert!(past.to_string().contains("over the limit"), "{past}");
    }

    #[test]
    fn retry_after_headers_in_every_form() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, HeaderValue::from_str(value).expect("value"));
            }
            map
        };
        assert_eq!(
            retry_after(&headers(&[("retry-after", "3")]), now),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "0.25")]), now),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "1"), ("retry-after-ms", "20")]),
                now
            ),
            Some(Duration::from_millis(20)),
            "milliseconds win"
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            retry_after(&headers(&[("retry-after", &later)]), now),
            Some(Duration::from_secs(30))
        );
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(
            retry_after(&headers(&[("retry-after", &past)]), now),
            Some(Duration::ZERO)
        );
        for junk in ["soon", "-1", "NaN"] {
            assert_eq!(
                retry_after(&headers(&[("retry-after", junk)]), now),
                None,
                "{junk}"
            );
        }
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn statuses_are_classified() {
        for code in [408, 409, 429, 500, 502, 503, 504, 529] {
            let status = StatusCode::from_u16(code).expect("status");
            assert!(
                matches!(
                    classify(status, "x".into(), None),
                    AttemptError::Retry { .. }
                ),
                "{code} is retried"
            );
        }
        for (code, expected) in [
            (400, FailureCode::Invalid),
            (404, FailureCode::Invalid),
            (401, FailureCode::Failed),
            (403, FailureCode::Failed),
            (302, FailureCode::Failed),
        ] {
            let status = StatusCode::from_u16(code).expect("status");
            match classify(status, "x".into(), None) {
                AttemptError::Fatal(e) => assert_eq!(e.code, expected, "{code}"),
                AttemptError::Retry { .. } => panic!("{code} must not be retried"),
            }
        }
    }

    #[test]
    fn excerpts_quote_the_error_message_and_are_cut() {
        assert_eq!(
            excerpt_of(br#"{"error": {"message": "model not found", "type": "x"}}"#),
            "model not found"
        );
        assert_eq!(excerpt_of(br#"{"error": "busy"}"#), "busy");
        assert_eq!(excerpt_of(b"  plain text \n"), "plain text");
        let long = "y".repeat(MAX_ERROR_EXCERPT_CHARS + 10);
        let cut_text = excerpt_of(long.as_bytes());
        assert_eq!(cut_text.chars().count(), MAX_ERROR_EXCERPT_CHARS + 1);
        assert!(cut_text.ends_with('…'));
        let exact = "z".repeat(MAX_ERROR_EXCERPT_CHARS);
        assert_eq!(excerpt_of(exact.as_bytes()), exact, "at the limit: not cut");
    }

    #[test]
    fn keys_are_redacted_and_never_debug_printed() {
        let key = ApiKey::new("sk-test-123");
        assert_eq!(format!("{key:?}"), "ApiKey([redacted])");
        assert_eq!(
            key.redact("bad key sk-test-123 and sk-test-123"),
            "bad key [redacted] and [redacted]"
        );
        let header = key.header("Bearer ").expect("header");
        assert!(header.is_sensitive());
        assert!(!format!("{header:?}").contains("sk-test"));
    }

    #[test]
    fn endpoints_are_checked() {
        assert_eq!(
            endpoint("http://127.0.0.1:8088/v1/", "/chat/completions")
                .expect("url")
                .to_string(),
            "http://127.0.0.1:8088/v1/chat/completions"
        );
        for bad in ["ftp://x/v1", "127.0.0.1:8088", "not a url", "http:///v1"] {
            assert!(endpoint(bad, "/messages").is_err(), "{bad}");
        }
    }

    #[test]
    fn progress_is_reported_in_steps() {
        let seen = Mutex::new(Vec::new());
        let report = |p: ProviderProgress| {
            if let ProviderProgress::Chars(n) = p {
                seen.lock().expect("lock").push(n);
            }
        };
        let mut meter = ProgressMeter::new(&report);
        meter.add(0);
        meter.add(1);
        for _ in 0..PROGRESS_STEP_CHARS {
            meter.add(1);
        }
        assert_eq!(
            *seen.lock().expect("lock"),
            vec![1, 1 + PROGRESS_STEP_CHARS]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn retries_are_bounded_and_reported() {
        let reports = Mutex::new(Vec::new());
        let report = |p: ProviderProgress| reports.lock().expect("lock").push(p);
        let policy = RetryPolicy {
            max_retries: 2,
            ..RetryPolicy::default()
        };
        let mut attempts = 0;
        let error = with_retries(&policy, Duration::from_secs(5), &report, || {
            attempts += 1;
            async {
                Err::<(), _>(AttemptError::Retry {
                    reason: "HTTP 503".into(),
                    retry_after: None,
                })
            }
        })
        .await
        .unwrap_err();
        assert_eq!(attempts, 3, "the first attempt and two retries");
        assert_eq!(error.code, FailureCode::Failed);
        assert!(
            error.message.contains("gave up after 2 retries"),
            "{}",
            error.message
        );
        assert_eq!(reports.lock().expect("lock").len(), 2);

        let mut attempts = 0;
        let ok = with_retries(&policy, Duration::from_secs(5), &report, || {
            attempts += 1;
            let n = attempts;
            async move {
                if n == 1 {
                    Err(AttemptError::Retry {
                        reason: "HTTP 429".into(),
                        retry_after: Some(Duration::ZERO),
                    })
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(ok, Ok(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_attempt_times_out_and_is_not_retried() {
        let mut attempts = 0;
        let error = with_retries(
            &RetryPolicy::default(),
            Duration::from_secs(2),
            &|_| {},
            || {
                attempts += 1;
                async {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    Ok::<(), AttemptError>(())
                }
            },
        )
        .await
        .unwrap_err();
        assert_eq!(attempts, 1);
        assert!(
            error.message.contains("per-request timeout"),
            "{}",
            error.message
        );
    }

    #[tokio::test(start_paused = true)]
    async fn configured_retries_are_capped() {
        let policy = RetryPolicy {
            max_retries: u32::MAX,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(1),
        };
        let mut attempts = 0u32;
        let _ = with_retries(&policy, Duration::from_secs(1), &|_| {}, || {
            attempts += 1;
            async {
                Err::<(), _>(AttemptError::Retry {
                    reason: "down".into(),
                    retry_after: None,
                })
            }
        })
        .await;
        assert_eq!(attempts, MAX_RETRIES + 1);
    }
}
