//! The HTTP side of the real agent providers: one client (reqwest through `graphrelay_net`, with
//! rustls on the ring crypto provider for https), API keys that never leave this module in any printable form, bounded
//! retries with backoff that honour `Retry-After`, a per-request timeout, and bounded reading of
//! answers. Providers build their request bodies and parse answers; everything about talking to
//! a server that may be slow, failing or hostile lives here.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use graph_js::FailureCode;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Uri};

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

    /// A header value carrying `prefix` and the key, marked sensitive (the HTTP client and
    /// `Debug` then never show it).
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
    /// reqwest refused the client's settings.
    #[error("cannot build the HTTP client: {0}")]
    Build(String),
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

/// What every client of this module starts from: `graphrelay_net`'s builder (rustls on ring,
/// the system's roots, proxies from the environment), a bound on opening a connection, no
/// redirects followed (a provider's redirect is an answer to report, and the desktop's service
/// never sends one), and no retries but ours.
fn builder(connect_timeout: Duration) -> Result<reqwest::ClientBuilder, ClientError> {
    Ok(graphrelay_net::client_builder()?
        .connector_layer(graphrelay_net::ConnectTimeout(connect_timeout))
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never()))
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
    client: reqwest::Client,
}

impl HttpClient {
    /// A client; opening a connection may take `connect_timeout`.
    pub(crate) fn new(connect_timeout: Duration) -> Result<Self, ClientError> {
        let builder = builder(connect_timeout)?.pool_max_idle_per_host(0);
        Ok(Self {
            client: graphrelay_net::build(builder)?,
        })
    }

    /// POSTs `body` as JSON to `uri` with `headers`. A 2xx answer is returned for reading;
    /// anything else becomes an [`AttemptError`] quoting the server's message (with `key`
    /// removed from it). Dropping the future drops the request and its connection.
    pub(crate) async fn post_json(
        &self,
        uri: &Uri,
        headers: &HeaderMap,
        body: Bytes,
        key: Option<&ApiKey>,
    ) -> Result<reqwest::Response, AttemptError> {
        let url = reqwest::Url::parse(&uri.to_string())
            .map_err(|e| AttemptError::fatal(FailureCode::Invalid, e.to_string()))?;
        let mut request = reqwest::Request::new(reqwest::Method::POST, url);
        *request.body_mut() = Some(body.into());
        request
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in headers {
            request.headers_mut().insert(name.clone(), value.clone());
        }
        let response = self.client.execute(request).await.map_err(|e| {
            // The error names the host and the cause, never the headers.
            AttemptError::Retry {
                reason: redact(
                    &format!("cannot reach the provider: {}", reqwest_chain(&e)),
                    key,
                ),
                retry_after: None,
            }
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = retry_after(response.headers(), crate::clock::wall_now());
        let excerpt = redact(&error_excerpt(response).await, key);
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

impl From<graphrelay_net::NetError> for ClientError {
    fn from(error: graphrelay_net::NetError) -> Self {
        match error {
            graphrelay_net::NetError::Tls(reason) => Self::Tls(reason),
            graphrelay_net::NetError::Build(reason) => Self::Build(reason),
        }
    }
}

/// A plain HTTP(S) client for the rest of graphrelay (the desktop relay talks to its service
/// with it): the providers' TLS set-up (rustls on ring, the system's roots, which
/// `SSL_CERT_FILE` or `SSL_CERT_DIR` replace), a bound on connection set-up, connections kept
/// for reuse.
#[derive(Clone)]
pub struct WebClient {
    client: reqwest::Client,
}

impl WebClient {
    /// A client; opening a connection may take `connect_timeout`.
    pub fn new(connect_timeout: Duration) -> Result<Self, ClientError> {
        Ok(Self {
            client: graphrelay_net::build(builder(connect_timeout)?)?,
        })
    }

    /// Sends `request` (an absolute URI) and reads its answer, at most `max_bytes` of body.
    /// Errors name the cause (connection, TLS, a body too large), one line.
    pub async fn send(
        &self,
        request: http::Request<Vec<u8>>,
        max_bytes: usize,
    ) -> Result<http::Response<Vec<u8>>, WebError> {
        let request =
            reqwest::Request::try_from(request).map_err(|e| WebError::Send(reqwest_chain(&e)))?;
        let mut response = self
            .client
            .execute(request)
            .await
            .map_err(|e| WebError::Send(reqwest_chain(&e)))?;
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| {
            WebError::Read(
                std::error::Error::source(&e).map_or_else(|| e.to_string(), |c| c.to_string()),
            )
        })? {
            if bytes.len().saturating_add(chunk.len()) > max_bytes {
                // The words http-body-util's `Limited` used, which this replaced.
                return Err(WebError::Read("length limit exceeded".into()));
            }
            bytes.extend_from_slice(&chunk);
        }
        let (parts, _) = http::Response::from(response).into_parts();
        Ok(http::Response::from_parts(parts, bytes))
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

/// A reqwest error as the chain of its causes, one line. reqwest's own top line (which names the
/// URL) is left out when there is a cause, so the text is that of the hyper client under it.
fn reqwest_chain(error: &reqwest::Error) -> String {
    match std::error::Error::source(error) {
        Some(cause) => error_chain(cause),
        None => error.to_string(),
    }
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
async fn error_excerpt(response: reqwest::Response) -> String {
    let mut reader = BodyReader::new(response, MAX_ERROR_BODY_BYTES);
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
    response: reqwest::Response,
    read: usize,
    limit: usize,
}

impl BodyReader {
    pub(crate) fn new(response: reqwest::Response, limit: usize) -> Self {
        Self {
            response,
            read: 0,
            limit,
        }
    }

    /// The next data chunk, or `None` at the end.
    pub(crate) async fn next_chunk(&mut self) -> Result<Option<Bytes>, AttemptError> {
        let chunk = self.response.chunk().await.map_err(|e| {
            // Not retried: the server may already have generated (and billed) the reply.
            AttemptError::fatal(
                FailureCode::Failed,
                format!(
                    "the connection broke while the answer was arriving: {}",
                    reqwest_chain(&e)
                ),
            )
        })?;
        let Some(data) = chunk else {
            return Ok(None);
        };
        self.read = self.read.saturating_add(data.len());
        if self.read > self.limit {
            return Err(AttemptError::fatal(
                FailureCode::Failed,
                format!("the provider's answer is larger than {} bytes", self.limit),
            ));
        }
        Ok(Some(data))
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
pub(crate) fn is_event_stream(response: &reqwest::Response) -> bool {
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
