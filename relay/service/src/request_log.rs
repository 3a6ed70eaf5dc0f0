//! Every request gets an id (`x-request-id`: the caller's if it sent a sensible one, else a
//! fresh UUID), echoed in the answer and carried by a span around the request, so every log
//! line the request causes names it. The span also names the method and the matched route
//! template (never the raw path or query, which may carry ids and codes). With
//! `RUST_LOG=tower_http=debug` each answer is logged with its status and latency.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderName, Method};
use relay_protocol::clock::Stopwatch;
use tower::{Layer, Service};
use tower_http::LatencyUnit;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::{DefaultOnFailure, DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::AppState;
use crate::metrics::UNMATCHED_ROUTE;
use crate::origin::CheckOrigin;

/// The header.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

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

/// Wraps `router`: ids, the span, the echo, the request counts of [`crate::metrics`], and
/// innermost the Origin and Host checks when `origin` is given ([`crate::origin`]).
///
/// One `Router::layer` call of layers that box nothing, so a held long poll keeps no more
/// than one more boxed future for as long as it waits. `Router::layer` wraps each route, so
/// the matched route is known to the span and the counts. Outermost first: unusable ids are
/// dropped and the answer is counted; an id is set; it is echoed; the span is entered; the
/// request's origin and host are checked.
pub fn layer(router: Router, app: Arc<AppState>, origin: Option<CheckOrigin>) -> Router {
    router.layer(
        tower::ServiceBuilder::new()
            .layer(Observe { app })
            .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
            .layer(PropagateRequestIdLayer::new(REQUEST_ID))
            .layer(
                TraceLayer::new_for_http()
                    .make_span_with(request_span)
                    .on_response(DefaultOnResponse::new().latency_unit(LatencyUnit::Millis))
                    // The service logs its own failures (a store fault, say) with their cause;
                    // the 5xx itself is one more line only on request.
                    .on_failure(DefaultOnFailure::new().level(Level::DEBUG)),
            )
            .option_layer(origin),
    )
}

/// Drops an id the caller sent that [`acceptable_id`] refuses (a fresh one is set instead),
/// and counts each answer by route, method and status.
#[derive(Clone)]
struct Observe {
    app: Arc<AppState>,
}

impl<S> Layer<S> for Observe {
    type Service = Observed<S>;

    fn layer(&self, inner: S) -> Observed<S> {
        Observed {
            inner,
            app: self.app.clone(),
        }
    }
}

#[derive(Clone)]
struct Observed<S> {
    inner: S,
    app: Arc<AppState>,
}

impl<S, B> Service<Request> for Observed<S>
where
    S: Service<Request, Response = axum::http::Response<B>>,
{
    type Response = axum::http::Response<B>;
    type Error = S::Error;
    type Future = Counted<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
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
        Counted {
            route: request.extensions().get::<MatchedPath>().cloned(),
            method: request.method().clone(),
            watch: Stopwatch::start(),
            app: self.app.clone(),
            inner: self.inner.call(request),
        }
    }
}

pin_project_lite::pin_project! {
    /// A request's answer, counted when it is ready.
    struct Counted<F> {
        #[pin]
        inner: F,
        route: Option<MatchedPath>,
        method: Method,
        watch: Stopwatch,
        app: Arc<AppState>,
    }
}

impl<F, B, E> Future for Counted<F>
where
    F: Future<Output = Result<axum::http::Response<B>, E>>,
{
    type Output = Result<axum::http::Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let answer = std::task::ready!(this.inner.poll(cx));
        if let Ok(response) = &answer {
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
        }
        Poll::Ready(answer)
    }
}

/// The request's span. At ERROR level, so that it is enabled whenever any of the request's
/// events is (a filter of `warn` would otherwise drop an INFO span and the id with it).
fn request_span(request: &Request) -> tracing::Span {
    let id = request
        .headers()
        .get(&REQUEST_ID)
        .and_then(|id| id.to_str().ok())
        .unwrap_or("");
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED_ROUTE, MatchedPath::as_str);
    tracing::error_span!(
        "request",
        request_id = %id,
        method = %request.method(),
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
