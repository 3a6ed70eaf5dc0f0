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

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

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

/// The connections open now, in all and per address.
#[derive(Default)]
struct Open {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// Counts one open connection until dropped.
struct Admitted {
    open: Arc<Mutex<Open>>,
    address: IpAddr,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.by_address.get_mut(&self.address) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.by_address.remove(&self.address);
            }
        }
    }
}

fn admit(open: &Arc<Mutex<Open>>, address: IpAddr, limits: &ConnectionLimits) -> Option<Admitted> {
    let mut state = open.lock().unwrap_or_else(|p| p.into_inner());
    let from_address = state.by_address.get(&address).copied().unwrap_or(0);
    if state.total >= limits.max_connections || from_address >= limits.max_per_address {
        return None;
    }
    state.total += 1;
    *state.by_address.entry(address).or_default() += 1;
    Some(Admitted {
        open: open.clone(),
        address,
    })
}

/// Serves `router` on `listener` under `limits` until `shutdown` completes; then every
/// connection is asked to close once its request in flight is answered.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let open = Arc::new(Mutex::new(Open::default()));
    let stopping = CancellationToken::new();
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
        let Some(admitted) = admit(&open, peer.ip(), &limits) else {
            tracing::debug!(%peer, "connection refused: at the connection cap");
            drop(stream);
            continue;
        };
        connections.spawn(serve_connection(
            stream,
            peer,
            router.clone(),
            limits,
            stopping.clone(),
            admitted,
        ));
    }
    stopping.cancel();
    connections.close();
    connections.wait().await;
    Ok(())
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    router: Router,
    limits: ConnectionLimits,
    stopping: CancellationToken,
    _admitted: Admitted,
) {
    let local = stream.local_addr().ok().map(LocalAddr);
    let service = TowerToHyperService::new(router.map_request(
        move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            if let Some(local) = local {
                request.extensions_mut().insert(local);
            }
            // Here rather than as a router layer, which would box every request's future once
            // more for as long as it is held.
            request.map(|body| Body::new(DeadlineBody::new(body, limits.body_read_timeout)))
        },
    ));
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_READ_BUFFER_BYTES)
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => log_end(result),
        () = stopping.cancelled() => {
            connection.as_mut().graceful_shutdown();
            log_end(connection.await);
        }
    }
}

fn log_end(result: Result<(), hyper::Error>) {
    if let Err(error) = result {
        // Timeouts and resets are how hostile or broken clients end; they are not the
        // service's failures.
        tracing::debug!(%error, "connection ended");
    }
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
