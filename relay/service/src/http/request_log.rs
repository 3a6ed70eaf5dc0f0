//! Every request gets an id (`x-request-id`: the caller's if it sent a sensible one, else a
//! fresh UUID), echoed in the answer and carried by a span around the request, so every log
//! line the request causes names it. The span also names the method and the matched route
//! template (never the raw path or query, which may carry ids and codes).
//!
//! Each request leaves one access line (target [`ACCESS_TARGET`]) with its status, duration
//! and client address: INFO when answered, WARN when refused (403, 421, 429, or a
//! [`Refusal`] the handler marked, like a rate-limited tool call or a failed sign-in), and
//! INFO with `aborted` when the client went away first. With `RUST_LOG=tower_http=debug`
//! `tower_http`'s own lines are added.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, MatchedPath, Request};
use axum::http::{HeaderName, HeaderValue, Method};
use relay_protocol::clock::Stopwatch;
use tower::{Layer, Service};
use tower_http::LatencyUnit;
use tower_http::classify::{ClassifiedResponse, ClassifyResponse, ServerErrorsAsFailures};
use tower_http::request_id::{MakeRequestId, MakeRequestUuid, RequestId};
use tower_http::trace::{
    DefaultOnEos, DefaultOnFailure, DefaultOnRequest, DefaultOnResponse, OnEos, OnFailure,
    OnRequest, OnResponse,
};
use tracing::{Level, Span};

use crate::http::AppState;
use crate::http::metrics::UNMATCHED_ROUTE;
use crate::http::origin::CheckOrigin;
use crate::http::proxy::TrustedProxies;

/// The header.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The target of the access lines (`RUST_LOG=…,relay::access=warn` keeps only refusals).
pub const ACCESS_TARGET: &str = "relay::access";

/// Why a request was refused, in its answer's extensions: its access line is then a WARN that
/// names it. 403, 421 and 429 answers are refusals without a mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal(pub &'static str);

impl Refusal {
    /// A tool call past its token's rate (answered 200 with an in-band tool error).
    pub const RATE_LIMITED: Refusal = Refusal("rate_limited");
    /// A sign-in with a wrong name or password.
    pub const SIGN_IN_FAILED: Refusal = Refusal("sign_in_failed");
    /// A sign-in refused by the failed-sign-in throttle.
    pub const SIGN_IN_THROTTLED: Refusal = Refusal("sign_in_throttled");

    /// The refusal an answer carries: its mark, else its status's.
    fn of<B>(response: &axum::http::Response<B>) -> Option<Refusal> {
        if let Some(mark) = response.extensions().get::<Refusal>() {
            return Some(*mark);
        }
        match response.status().as_u16() {
            403 => Some(Refusal("forbidden")),
            421 => Some(Refusal("misdirected")),
            429 => Some(Refusal("rate_limited")),
            _ => None,
        }
    }

    /// `response` marked with this refusal.
    pub fn mark<B>(self, mut response: axum::http::Response<B>) -> axum::http::Response<B> {
        response.extensions_mut().insert(self);
        response
    }
}

/// The longest caller-sent id taken; a longer one is replaced by a fresh id.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// Whether a caller's id is taken as it is: 1 to [`MAX_REQUEST_ID_LEN`] letters, digits and
/// `-_.:/+=`, so it cannot smuggle anything into a log line or balloon it.
pub fn acceptable_id(id: &[u8]) -> bool {
    (1..=MAX_REQUEST_ID_LEN).contains(&id.len())
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/+=".contains(b))
}

/// Wraps `router`: ids, the span, the echo, the request counts of [`crate::http::metrics`], and
/// innermost the Origin and Host checks when `origin` is given ([`crate::http::origin`]).
///
/// One `Router::layer` call of layers that box nothing, so a held long poll keeps no more
/// than one more boxed future for as long as it waits. `Router::layer` wraps each route, so
/// the matched route is known to the span and the counts. Outermost first: unusable ids are
/// dropped, an id is set, the request is logged in its span, echoed and counted; then its
/// origin and host are checked.
pub fn layer(router: Router, app: Arc<AppState>, origin: Option<CheckOrigin>) -> Router {
    let proxies = Arc::new(app.config.proxies());
    router.layer(
        tower::ServiceBuilder::new()
            .layer(Observe { app, proxies })
            .option_layer(origin),
    )
}

/// Sets the request id (dropping one the caller sent that [`acceptable_id`] refuses), logs the
/// request in its span with `tower_http`'s trace events, echoes the id in the answer and
/// counts each answer by route, method and status.
///
/// The span (see [`request_span`]) is entered whenever the request's future runs, but not kept
/// between its polls: it is made again from the id, method and route at each poll, with the
/// same fields, so every line the request logs names it while a request that waits (a held
/// long poll) keeps no span in the subscriber (a few hundred bytes each with the fmt layer).
#[derive(Clone)]
struct Observe {
    app: Arc<AppState>,
    proxies: Arc<TrustedProxies>,
}

impl<S> Layer<S> for Observe {
    type Service = Observed<S>;

    fn layer(&self, inner: S) -> Observed<S> {
        Observed {
            inner,
            app: self.app.clone(),
            proxies: self.proxies.clone(),
        }
    }
}

#[derive(Clone)]
struct Observed<S> {
    inner: S,
    app: Arc<AppState>,
    proxies: Arc<TrustedProxies>,
}

impl<S, B> Service<Request> for Observed<S>
where
    S: Service<Request, Response = axum::http::Response<B>>,
    S::Error: std::fmt::Display + 'static,
{
    type Response = axum::http::Response<Logged<B>>;
    type Error = S::Error;
    type Future = Counted<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        let request_id = set_request_id(&mut request);
        let route = request.extensions().get::<MatchedPath>().cloned();
        let method = request.method().clone();
        let peer = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(peer)| *peer);
        let client = self.proxies.client(request.headers(), peer);
        let watch = Stopwatch::start();
        let span = request_span(&request_id, &method, route.as_ref());
        let inner = {
            let _entered = span.enter();
            DefaultOnRequest::new().on_request(&request, &span);
            self.inner.call(request)
        };
        Counted {
            inner,
            request_id,
            route,
            method,
            client,
            watch,
            answered: false,
            app: self.app.clone(),
        }
    }
}

/// The request's id, as the request now carries it: the caller's own when [`acceptable_id`]
/// takes it (and it sent one only), else a fresh UUID. Like `tower_http`'s `SetRequestId`, the
/// id is also put in the request's extensions as a [`RequestId`].
fn set_request_id(request: &mut Request) -> HeaderValue {
    let unusable = {
        let mut ids = request.headers().get_all(&REQUEST_ID).iter();
        match (ids.next(), ids.next()) {
            (None, _) => false,
            (Some(id), None) => !acceptable_id(id.as_bytes()),
            (Some(_), Some(_)) => true,
        }
    };
    if unusable {
        request.headers_mut().remove(&REQUEST_ID);
    }
    let id = match request.headers().get(&REQUEST_ID) {
        Some(id) => id.clone(),
        None => {
            let fresh = MakeRequestUuid.make_request_id(request);
            let fresh = fresh.map_or_else(
                || HeaderValue::from_static(""),
                |id| id.header_value().clone(),
            );
            request.headers_mut().insert(REQUEST_ID, fresh.clone());
            fresh
        }
    };
    if request.extensions().get::<RequestId>().is_none() {
        request.extensions_mut().insert(RequestId::new(id.clone()));
    }
    id
}

pin_project_lite::pin_project! {
    /// A request's answer: logged, echoed and counted when it is ready; logged and counted as
    /// aborted when dropped before (its client went away).
    struct Counted<F> {
        #[pin]
        inner: F,
        request_id: HeaderValue,
        route: Option<MatchedPath>,
        method: Method,
        client: Option<IpAddr>,
        watch: Stopwatch,
        answered: bool,
        app: Arc<AppState>,
    }

    impl<F> PinnedDrop for Counted<F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if *this.answered {
                return;
            }
            let route = this.route.as_ref().map_or(UNMATCHED_ROUTE, MatchedPath::as_str);
            this.app.metrics.requests.record_aborted(route, this.method);
            let span = request_span(this.request_id, this.method, this.route.as_ref());
            let _entered = span.enter();
            tracing::info!(
                target: ACCESS_TARGET,
                aborted = true,
                duration_ms = millis(this.watch.elapsed()),
                client = %Client(*this.client),
                "client went away before the answer"
            );
        }
    }
}

/// A client address as the access line shows it (`-` for none: an in-process call).
struct Client(Option<IpAddr>);

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(address) => address.fmt(f),
            None => f.write_str("-"),
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The access line of an answered request.
fn log_access<B>(response: &axum::http::Response<B>, latency: Duration, client: Option<IpAddr>) {
    let status = response.status().as_u16();
    let duration_ms = millis(latency);
    let client = Client(client);
    match Refusal::of(response) {
        Some(Refusal(refusal)) => tracing::warn!(
            target: ACCESS_TARGET,
            status,
            duration_ms,
            %client,
            refusal,
            "refused"
        ),
        None => tracing::info!(target: ACCESS_TARGET, status, duration_ms, %client, "answered"),
    }
}

impl<F, B, E> Future for Counted<F>
where
    F: Future<Output = Result<axum::http::Response<B>, E>>,
    E: std::fmt::Display + 'static,
{
    type Output = Result<axum::http::Response<Logged<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let span = request_span(this.request_id, this.method, this.route.as_ref());
        let _entered = span.enter();
        let answer = std::task::ready!(this.inner.poll(cx));
        *this.answered = true;
        let latency = this.watch.elapsed();
        let mut response = match answer {
            Ok(response) => response,
            Err(error) => {
                let failure = ServerErrorsAsFailures::new().classify_error(&error);
                DefaultOnFailure::new()
                    .level(Level::DEBUG)
                    .on_failure(failure, latency, &span);
                return Poll::Ready(Err(error));
            }
        };
        log_response(&response, latency, &span);
        log_access(&response, latency, *this.client);
        if let Some(current) = response.headers().get(&REQUEST_ID) {
            if response.extensions().get::<RequestId>().is_none() {
                let current = RequestId::new(current.clone());
                response.extensions_mut().insert(current);
            }
        } else {
            let id = this.request_id.clone();
            response.headers_mut().insert(REQUEST_ID, id.clone());
            response.extensions_mut().insert(RequestId::new(id));
        }
        let route = this
            .route
            .as_ref()
            .map_or(UNMATCHED_ROUTE, MatchedPath::as_str);
        this.app.metrics.requests.record(
            route,
            this.method,
            response.status().as_u16(),
            this.watch.elapsed(),
        );
        let body_span = span.clone();
        Poll::Ready(Ok(response.map(|body| Logged::new(body, body_span))))
    }
}

/// `tower_http`'s answer line (`RUST_LOG=tower_http=debug`), with its latency in
/// milliseconds, and a 5xx's failure line. The service logs its own failures (a store fault,
/// say) with their cause; the 5xx itself is one more line only on request.
fn log_response<B>(response: &axum::http::Response<B>, latency: Duration, span: &Span) {
    let failure = match ServerErrorsAsFailures::new().classify_response(response) {
        ClassifiedResponse::Ready(Err(failure)) => Some(failure),
        ClassifiedResponse::Ready(Ok(())) | ClassifiedResponse::RequiresEos(_) => None,
    };
    DefaultOnResponse::new()
        .latency_unit(LatencyUnit::Millis)
        .on_response(response, latency, span);
    if let Some(failure) = failure {
        DefaultOnFailure::new()
            .level(Level::DEBUG)
            .on_failure(failure, latency, span);
    }
}

pin_project_lite::pin_project! {
    /// An answer's body, read in the request's span; its end is logged (`tower_http`'s end of
    /// stream line).
    pub struct Logged<B> {
        #[pin]
        inner: B,
        span: Span,
        started: Option<Stopwatch>,
    }
}

impl<B> Logged<B> {
    fn new(inner: B, span: Span) -> Self {
        Logged {
            inner,
            span,
            started: Some(Stopwatch::start()),
        }
    }
}

impl<B: http_body::Body> http_body::Body for Logged<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let _entered = this.span.enter();
        let frame = std::task::ready!(this.inner.poll_frame(cx));
        let trailers = match &frame {
            Some(Ok(frame)) => frame.trailers_ref(),
            Some(Err(_)) => return Poll::Ready(frame),
            None => None,
        };
        if (frame.is_none() || trailers.is_some())
            && let Some(started) = this.started.take()
        {
            DefaultOnEos::new().on_eos(trailers, started.elapsed(), this.span);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The request's span. At ERROR level, so that it is enabled whenever any of the request's
/// events is (a filter of `warn` would otherwise drop an INFO span and the id with it).
fn request_span(id: &HeaderValue, method: &Method, route: Option<&MatchedPath>) -> Span {
    let id = id.to_str().unwrap_or("");
    let route = route.map_or(UNMATCHED_ROUTE, MatchedPath::as_str);
    tracing::error_span!(
        "request",
        request_id = %id,
        method = %method,
        route = %route,
    )
}

#[cfg(test)]
mod tests {
    use super::acceptable_id;

    #[test]
    fn only_short_plain_ids_are_taken() {
        for good in ["abc", "7f1c-22", "req:1/2+3=", &"a".repeat(128)] {
            assert!(acceptable_id(good.as_bytes()), "{good}");
        }
        for bad in ["", "a b", "a\"b", "é", &"a".repeat(129), "x\ty"] {
            assert!(!acceptable_id(bad.as_bytes()), "{bad:?}");
        }
    }
}
