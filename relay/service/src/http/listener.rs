//! The service's own TCP front: every connection is bounded in time and number before a byte
//! of it reaches the router.
//!
//! - A request's headers must arrive within [`ConnectionLimits::header_read_timeout`], counted
//!   from when the connection opens or its previous answer ends (hyper measures both from the
//!   same moment), so a half-sent request and an idle keep-alive connection are both closed
//!   by then.
//! - A request's body must arrive within [`ConnectionLimits::body_read_timeout`] of its
//!   headers. A held long poll or an event stream has read its (small) body before it waits,
//!   so only the caps apply to it while it is held.
//! - At most [`ConnectionLimits::max_connections`] connections at once, and at most
//!   [`ConnectionLimits::max_per_address`] from one client address; one past a cap is closed
//!   as soon as it is accepted, so one address cannot starve the others.
//! - A connection from a trusted proxy's range ([`crate::http::proxy`]) carries many clients:
//!   it is not capped per address; instead each forwarded client may have at most
//!   [`ConnectionLimits::max_per_address`] requests in flight through it (past it, 429).
//! - Refusals are counted ([`Front::stats`], `/metrics`) and logged, at most one WARN line per
//!   [`REFUSAL_LOG_INTERVAL`] with how many were refused since the last one.
//! - A stop answers nothing itself: it stops accepting, lets every connection finish its
//!   request in flight (held ones are answered at once by the service's shutdown) and close,
//!   and closes whatever is still open after the drain timeout.

use std::collections::HashMap;
use std::future::{Future, Ready};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::future::Either;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceExt};

use crate::http::proxy::TrustedProxies;

/// The listener's own address, in the extensions of every request that came over one (beside
/// `ConnectInfo`, the peer's): the Host check needs its port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalAddr(pub SocketAddr);

/// How long and how many connections the service keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// A request's headers must arrive within this long of the connection opening or its
    /// previous answer ending (also the longest an idle keep-alive connection stays open).
    pub header_read_timeout: Duration,
    /// A request's body must arrive within this long of its headers.
    pub body_read_timeout: Duration,
    /// Connections open at once, in all.
    pub max_connections: usize,
    /// Connections open at once from one client address.
    pub max_per_address: usize,
}

/// The header read timeout (and keep-alive idle timeout) by default.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The body read timeout by default: a 1 MiB completion at 35 KiB/s.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The most a connection buffers of what it reads (and so the longest request head): hyper
/// grows a connection's read buffer while a body streams in (to about 400 KiB by default) and
/// keeps it for the connection's life, so a desktop whose connection once carried a large
/// completion would hold that much while its next long poll waits (275 KiB per waiting desktop
/// after a 512 KiB body, `tests/held_memory.rs`). Bodies still stream through in pieces.
pub const MAX_READ_BUFFER_BYTES: usize = 16 * 1024;
/// Connections at once, by default: room for 10,000 held long polls and their callers.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16_384;
/// Connections at once from one address, by default. A service behind a proxy that does not
/// pass client addresses sees one address for everyone: raise it there.
pub const DEFAULT_MAX_PER_ADDRESS: usize = 256;

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_per_address: DEFAULT_MAX_PER_ADDRESS,
        }
    }
}

/// How often at most a refused connection is logged; the line says how many were refused
/// since the one before.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// Forwarded clients whose requests in flight are counted at most (past it, a new client's
/// request is refused like one past its cap, until others finish).
pub const MAX_FORWARDED_CLIENTS: usize = 100_000;

/// Why a connection or request was refused at the front.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// [`ConnectionLimits::max_connections`] were open.
    TotalCap,
    /// The peer had [`ConnectionLimits::max_per_address`] connections open.
    PerAddress,
    /// A client behind a trusted proxy had [`ConnectionLimits::max_per_address`] requests in
    /// flight.
    PerClient,
}

impl Refused {
    /// Every reason, in the order of [`FrontStats::refused`].
    pub const ALL: [Refused; 3] = [Refused::TotalCap, Refused::PerAddress, Refused::PerClient];

    /// The `reason` label of `relay_connections_refused_total`.
    pub fn label(self) -> &'static str {
        match self {
            Refused::TotalCap => "max_connections",
            Refused::PerAddress => "per_address",
            Refused::PerClient => "per_client",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Refused::TotalCap => {
                "connection refused: --max-connections are open; raise it (and `ulimit -n`) if the machine can hold more"
            }
            Refused::PerAddress => {
                "connection refused: this address has --max-connections-per-address open; behind a proxy, name its addresses with --trusted-proxy"
            }
            Refused::PerClient => {
                "request refused (429): this client has --max-connections-per-address requests in flight through the proxy"
            }
        }
    }
}

/// What the front counts: connections open, refusals by reason, requests in flight per
/// forwarded client; shared with `/metrics` and the drain line.
#[derive(Debug, Default)]
pub struct FrontStats {
    open: AtomicUsize,
    refused: [AtomicU64; 3],
    log: Mutex<RefusalLog>,
}

#[derive(Debug, Default)]
struct RefusalLog {
    last: Option<tokio::time::Instant>,
    unlogged: u64,
}

impl FrontStats {
    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Connections (or, for [`Refused::PerClient`], requests) refused since start.
    pub fn refused(&self, reason: Refused) -> u64 {
        self.refused[reason as usize].load(Ordering::Relaxed)
    }

    fn note_refusal(&self, reason: Refused, address: IpAddr) {
        self.refused[reason as usize].fetch_add(1, Ordering::Relaxed);
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let now = tokio::time::Instant::now();
        if log
            .last
            .is_some_and(|last| now.duration_since(last) < REFUSAL_LOG_INTERVAL)
        {
            log.unlogged += 1;
            return;
        }
        let before = std::mem::take(&mut log.unlogged);
        log.last = Some(now);
        drop(log);
        tracing::warn!(
            reason = reason.label(),
            client = %address,
            refused_before_unlogged = before,
            "{}",
            reason.describe()
        );
    }
}

/// The connections open now, in all and per address, and the requests in flight of each
/// client behind a trusted proxy.
#[derive(Default)]
struct Open {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
    by_client: HashMap<IpAddr, usize>,
}

/// What the accept loop and every connection share.
struct Shared {
    limits: ConnectionLimits,
    proxies: TrustedProxies,
    stats: Arc<FrontStats>,
    open: Mutex<Open>,
}

impl Shared {
    fn open(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// How the front treats connections: its limits, the proxies it trusts, and where it counts.
pub struct Front {
    /// Times and caps.
    pub limits: ConnectionLimits,
    /// Peers whose connections carry many clients.
    pub proxies: TrustedProxies,
    /// Where connections and refusals are counted.
    pub stats: Arc<FrontStats>,
    /// How long a stop waits for connections to finish before closing them.
    pub drain_timeout: Duration,
}

impl Front {
    /// A front with `limits`, no trusted proxy, its own counts and `drain_timeout`.
    pub fn new(limits: ConnectionLimits, drain_timeout: Duration) -> Front {
        Front {
            limits,
            proxies: TrustedProxies::default(),
            stats: Arc::default(),
            drain_timeout,
        }
    }
}

/// Counts one open connection (or, with `client`, one forwarded client's request) until
/// dropped.
struct Admitted {
    shared: Arc<Shared>,
    address: IpAddr,
    /// Whether this is a forwarded client's request rather than a connection.
    client: bool,
    /// Whether the connection counts against its address's cap.
    capped: bool,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.shared.open();
        let table = if self.client {
            &mut open.by_client
        } else {
            open.total = open.total.saturating_sub(1);
            self.shared.stats.open.fetch_sub(1, Ordering::Relaxed);
            if !self.capped {
                return;
            }
            &mut open.by_address
        };
        if let Some(n) = table.get_mut(&self.address) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                table.remove(&self.address);
            }
        }
    }
}

fn admit(shared: &Arc<Shared>, address: IpAddr) -> Result<Admitted, Refused> {
    let limits = &shared.limits;
    let capped = !shared.proxies.uncapped(address);
    let mut state = shared.open();
    if state.total >= limits.max_connections {
        return Err(Refused::TotalCap);
    }
    if capped {
        let from_address = state.by_address.entry(address).or_default();
        if *from_address >= limits.max_per_address {
            return Err(Refused::PerAddress);
        }
        *from_address += 1;
    }
    state.total += 1;
    shared.stats.open.fetch_add(1, Ordering::Relaxed);
    Ok(Admitted {
        shared: shared.clone(),
        address,
        client: false,
        capped,
    })
}

/// Counts one request in flight of `client`, a forwarded client of a trusted proxy.
fn admit_client(shared: &Arc<Shared>, client: IpAddr) -> Result<Admitted, Refused> {
    let mut state = shared.open();
    let known = state.by_client.contains_key(&client);
    if !known && state.by_client.len() >= MAX_FORWARDED_CLIENTS {
        return Err(Refused::PerClient);
    }
    let in_flight = state.by_client.entry(client).or_default();
    if *in_flight >= shared.limits.max_per_address {
        return Err(Refused::PerClient);
    }
    *in_flight += 1;
    Ok(Admitted {
        shared: shared.clone(),
        address: client,
        client: true,
        capped: true,
    })
}

/// How a stop went: the connections open when it began, and those still open at the drain
/// timeout (closed then, their requests unanswered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Connections open when the stop began.
    pub connections: usize,
    /// Connections closed at the drain timeout.
    pub cut: usize,
}

/// Serves `router` on `listener` as `front` says until `shutdown` completes; then every
/// connection is asked to close once its request in flight is answered, and those still open
/// after `front.drain_timeout` are closed.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    front: Front,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<Drained> {
    let shared = Arc::new(Shared {
        limits: front.limits,
        proxies: front.proxies,
        stats: front.stats,
        open: Mutex::default(),
    });
    let stopping = CancellationToken::new();
    let cut = CancellationToken::new();
    let connections = tokio_util::task::TaskTracker::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors or a connection reset before it was accepted: wait a
                    // moment instead of spinning, and keep serving the connections we have.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let admitted = match admit(&shared, peer.ip()) {
            Ok(admitted) => admitted,
            Err(reason) => {
                shared.stats.note_refusal(reason, peer.ip());
                drop(stream);
                continue;
            }
        };
        let stop = Stop {
            graceful: stopping.clone(),
            cut: cut.clone(),
        };
        connections.spawn(serve_connection(
            stream,
            peer,
            router.clone(),
            stop,
            admitted,
        ));
    }
    drop(listener);
    let at_stop = shared.stats.open();
    stopping.cancel();
    connections.close();
    let finished = tokio::time::timeout(front.drain_timeout, connections.wait()).await;
    let left = if finished.is_ok() {
        0
    } else {
        let left = shared.stats.open();
        cut.cancel();
        connections.wait().await;
        left
    };
    Ok(Drained {
        connections: at_stop,
        cut: left,
    })
}

/// A connection's two stops: finish the request in flight and close, or close now.
struct Stop {
    graceful: CancellationToken,
    cut: CancellationToken,
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    router: Router,
    stop: Stop,
    admitted: Admitted,
) {
    let limits = admitted.shared.limits;
    let local = stream.local_addr().ok().map(LocalAddr);
    let routed = router.map_request(move |mut request: hyper::Request<hyper::body::Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        if let Some(local) = local {
            request.extensions_mut().insert(local);
        }
        // Here rather than as a router layer, which would box every request's future once
        // more for as long as it is held.
        request.map(|body| Body::new(DeadlineBody::new(body, limits.body_read_timeout)))
    });
    let through_proxy = !admitted.capped;
    let service = TowerToHyperService::new(PerClient {
        inner: routed,
        shared: through_proxy.then(|| (admitted.shared.clone(), peer)),
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_READ_BUFFER_BYTES)
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => log_end(result),
        () = stop.graceful.cancelled() => {
            connection.as_mut().graceful_shutdown();
            tokio::select! {
                result = connection.as_mut() => log_end(result),
                () = stop.cut.cancelled() => {}
            }
        }
    }
    drop(admitted);
}

fn log_end(result: Result<(), hyper::Error>) {
    if let Err(error) = result {
        // Timeouts and resets are how hostile or broken clients end; they are not the
        // service's failures.
        tracing::debug!(%error, "connection ended");
    }
}

/// The router of one connection; on a trusted proxy's connection (`shared` set) each request
/// is first admitted against its forwarded client's cap.
#[derive(Clone)]
struct PerClient<S> {
    inner: S,
    shared: Option<(Arc<Shared>, SocketAddr)>,
}

impl<S, B> Service<hyper::Request<B>> for PerClient<S>
where
    S: Service<hyper::Request<B>, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Either<Ready<Result<Response, S::Error>>, Slotted<S::Future>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: hyper::Request<B>) -> Self::Future {
        let Some((shared, peer)) = &self.shared else {
            return Either::Right(Slotted {
                inner: self.inner.call(request),
                _slot: None,
            });
        };
        let client = shared
            .proxies
            .client(request.headers(), Some(*peer))
            .unwrap_or(peer.ip());
        match admit_client(shared, client) {
            Ok(slot) => Either::Right(Slotted {
                inner: self.inner.call(request),
                _slot: Some(slot),
            }),
            Err(reason) => {
                shared.stats.note_refusal(reason, client);
                Either::Left(std::future::ready(Ok(too_many_in_flight(
                    shared.limits.max_per_address,
                ))))
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// A request's answer, holding its client's place until it is ready (or dropped).
    struct Slotted<F> {
        #[pin]
        inner: F,
        _slot: Option<Admitted>,
    }
}

impl<F: Future> Future for Slotted<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().inner.poll(cx)
    }
}

/// 429 for a forwarded client past its requests in flight.
fn too_many_in_flight(cap: usize) -> Response {
    let body = relay_protocol::ErrorBody {
        error: format!(
            "too many requests in flight from this client address ({cap} at once through the proxy): retry when one has finished"
        ),
        status: None,
        cause: Some(relay_protocol::cause::RATE_LIMITED.to_owned()),
    };
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, "1")],
        axum::Json(body),
    )
        .into_response()
}

/// A body that fails once its deadline passes before it has ended.
struct DeadlineBody {
    inner: hyper::body::Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
}

impl DeadlineBody {
    fn new(inner: hyper::body::Incoming, timeout: Duration) -> Self {
        DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            timeout,
        }
    }
}

/// The body of a request did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {} s", .0.as_secs())]
struct BodyTimedOut(Duration);

impl http_body::Body for DeadlineBody {
    type Data = axum::body::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut(self.timeout)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
