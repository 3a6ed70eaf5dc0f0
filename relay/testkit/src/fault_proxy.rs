//! A loopback HTTP/1.1 proxy between a desktop relay and the service that loses what a real
//! network loses, on purpose: per route of the desktop API and per request it can drop the
//! request before the service sees it, drop the answer after the service committed it, delay
//! either, or reset the connection. The desktop talks to it over real TCP (an in-process relay
//! through its HTTP transport, or the `relay desktop run` process), so what the desktop sees is
//! what its HTTP client makes of a real lost answer, not a mock's error.
//!
//! One request per connection: the proxy asks the service to close after answering and tells
//! the client the same, so every request is a connection of its own that a fault can end
//! without touching another.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// Largest request head or body the proxy reads (the desktop's bodies are at most 1 MiB).
const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;
/// Largest answer the proxy relays (the desktop reads at most 16 MiB).
const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;
/// Most headers a request or an answer may have.
const MAX_HEADERS: usize = 64;

/// A route of the desktop API, as the request's path names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// `POST …/sync`.
    Sync,
    /// `GET …/projects`.
    Projects,
    /// `POST …/commands/{id}/started`.
    Started,
    /// `POST …/commands/{id}/released`.
    Released,
    /// `GET …/commands/{id}/control`.
    Control,
    /// `POST …/commands/{id}/report`.
    Report,
    /// `POST …/commands/{id}/complete`.
    Complete,
    /// Anything else.
    Other,
}

impl Route {
    /// Every route of the desktop API.
    pub const DESKTOP: [Route; 7] = [
        Route::Sync,
        Route::Projects,
        Route::Started,
        Route::Released,
        Route::Control,
        Route::Report,
        Route::Complete,
    ];

    /// The route of `path`.
    pub fn of(path: &str) -> Route {
        let path = path.split('?').next().unwrap_or(path);
        let last = path.rsplit('/').next().unwrap_or_default();
        match last {
            "sync" => Route::Sync,
            "projects" => Route::Projects,
            "started" => Route::Started,
            "released" => Route::Released,
            "control" => Route::Control,
            "report" => Route::Report,
            "complete" => Route::Complete,
            _ => Route::Other,
        }
    }
}

/// What the proxy does to a request a rule picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The request never reaches the service: the client's connection is closed once the
    /// request is read.
    DropRequest,
    /// The service gets the request and answers (it committed whatever it does); the answer is
    /// dropped and the client's connection closed.
    DropAnswer,
    /// The client's connection is reset (TCP RST) once the request is read: nothing reaches
    /// the service.
    Reset,
    /// The request reaches the service this much later.
    DelayRequest(Duration),
    /// The service's answer reaches the client this much later.
    DelayAnswer(Duration),
}

/// Which requests of a route a rule picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// The first request to each path: for the per-command routes, once per command.
    FirstPerPath,
    /// Every `n`th request of the route (the first, the `n + 1`th, ...); `1` is every one.
    EveryNth(usize),
}

#[derive(Debug, Default)]
struct Rules {
    faults: HashMap<Route, (Fault, When)>,
    seen: HashMap<Route, usize>,
    faulted: HashMap<Route, usize>,
    paths: HashSet<String>,
}

impl Rules {
    /// Counts a request to `path` and says what to do to it.
    fn pick(&mut self, path: &str) -> Option<Fault> {
        let route = Route::of(path);
        let seen = self.seen.entry(route).or_default();
        *seen += 1;
        let nth = *seen;
        let (fault, when) = *self.faults.get(&route)?;
        let picked = match when {
            When::FirstPerPath => self.paths.insert(path.to_owned()),
            When::EveryNth(n) => (nth - 1).is_multiple_of(n.max(1)),
        };
        if picked {
            *self.faulted.entry(route).or_default() += 1;
        }
        picked.then_some(fault)
    }
}

/// The proxy: listening on a loopback port until dropped (its connections end with it).
pub struct FaultProxy {
    addr: SocketAddr,
    rules: Arc<Mutex<Rules>>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// A proxy to the service at `upstream` (`http://127.0.0.1:PORT`).
    pub async fn start(upstream: &str) -> FaultProxy {
        let upstream: SocketAddr = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .expect("the upstream is http://IP:PORT");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let rules = Arc::new(Mutex::new(Rules::default()));
        let task = tokio::spawn(accept(listener, upstream, rules.clone()));
        FaultProxy { addr, rules, task }
    }

    /// The URL the desktop is given instead of the service's.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// From now on, `fault` on the requests of `route` that `when` picks (replacing the
    /// route's rule, if it had one).
    pub fn set(&self, route: Route, fault: Fault, when: When) {
        self.lock().faults.insert(route, (fault, when));
    }

    /// No faults from now on.
    pub fn clear(&self) {
        self.lock().faults.clear();
    }

    /// Requests of `route` the proxy has seen.
    pub fn seen(&self, route: Route) -> usize {
        self.lock().seen.get(&route).copied().unwrap_or(0)
    }

    /// Requests of `route` a fault was applied to.
    pub fn faulted(&self, route: Route) -> usize {
        self.lock().faulted.get(&route).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Rules> {
        self.rules.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // The accept loop owns every connection's task: aborting it ends them all.
        self.task.abort();
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, rules: Arc<Mutex<Rules>>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                connections.spawn(relay_one(client, upstream, rules.clone()));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// One request of one connection, with its fault, if a rule picks it.
async fn relay_one(mut client: TcpStream, upstream: SocketAddr, rules: Arc<Mutex<Rules>>) {
    let Some(request) = read_request(&mut client).await else {
        return;
    };
    let fault = rules
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .pick(&request.path);
    match fault {
        Some(Fault::DropRequest) => return,
        Some(Fault::Reset) => {
            // A zero linger turns the close into a reset.
            let _ = client.set_zero_linger();
            return;
        }
        Some(Fault::DelayRequest(wait)) => tokio::time::sleep(wait).await,
        _ => {}
    }
    let Some(answer) = forward(upstream, &request.bytes).await else {
        return;
    };
    match fault {
        Some(Fault::DropAnswer) => return,
        Some(Fault::DelayAnswer(wait)) => tokio::time::sleep(wait).await,
        _ => {}
    }
    let _ = client.write_all(&answer).await;
    let _ = client.shutdown().await;
}

/// A request as read from the client, rewritten to close its connection after the answer.
struct Request {
    path: String,
    bytes: Vec<u8>,
}

async fn read_request(client: &mut TcpStream) -> Option<Request> {
    let mut buffer = Vec::new();
    let (head_len, path, headers, body_len) = loop {
        let mut chunk = [0u8; 16 * 1024];
        let n = client.read(&mut chunk).await.ok()?;
        if n == 0 || buffer.len() + n > MAX_REQUEST_BYTES {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut slots);
        if let httparse::Status::Complete(head_len) = parsed.parse(&buffer).ok()? {
            let start = format!("{} {} HTTP/1.1", parsed.method?, parsed.path?);
            let headers = kept_headers(parsed.headers, &start);
            let body_len = content_length(parsed.headers);
            break (head_len, parsed.path?.to_owned(), headers, body_len);
        }
    };
    while buffer.len() < head_len + body_len {
        let mut chunk = [0u8; 16 * 1024];
        let n = client.read(&mut chunk).await.ok()?;
        if n == 0 || buffer.len() + n > MAX_REQUEST_BYTES {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let mut bytes = headers.into_bytes();
    bytes.extend_from_slice(&buffer[head_len..head_len + body_len]);
    Some(Request { path, bytes })
}

/// The head again, from `start` (the request or status line), with every header but
/// `Connection`, which becomes `close`.
fn kept_headers(headers: &[httparse::Header<'_>], start: &str) -> String {
    let mut head = format!("{start}\r\n");
    for header in headers {
        if !header.name.eq_ignore_ascii_case("connection") {
            head.push_str(header.name);
            head.push_str(": ");
            head.push_str(&String::from_utf8_lossy(header.value));
            head.push_str("\r\n");
        }
    }
    head.push_str("Connection: close\r\n\r\n");
    head
}

fn content_length(headers: &[httparse::Header<'_>]) -> usize {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Sends `request` to the service and reads its whole answer (the service closes after it),
/// rewritten to tell the client the connection closes.
async fn forward(upstream: SocketAddr, request: &[u8]) -> Option<Vec<u8>> {
    let mut service = TcpStream::connect(upstream).await.ok()?;
    service.write_all(request).await.ok()?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let n = service.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        if answer.len() + n > MAX_ANSWER_BYTES {
            return None;
        }
        answer.extend_from_slice(&chunk[..n]);
    }
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut slots);
    let httparse::Status::Complete(head_len) = parsed.parse(&answer).ok()? else {
        return None;
    };
    let start = format!(
        "HTTP/1.1 {} {}",
        parsed.code?,
        parsed.reason.unwrap_or_default()
    );
    let mut bytes = kept_headers(parsed.headers, &start).into_bytes();
    bytes.extend_from_slice(&answer[head_len..]);
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_named_by_the_paths_last_segment() {
        let command =
            "/external-assistants/graph-relays/commands/6f1f3f5e-8c8b-4a6e-9d2b-0b8c2a9e7d11";
        assert_eq!(Route::of(&format!("{command}/started")), Route::Started);
        assert_eq!(Route::of(&format!("{command}/released")), Route::Released);
        assert_eq!(Route::of(&format!("{command}/control")), Route::Control);
        assert_eq!(
            Route::of("/external-assistants/graph-relays/sync"),
            Route::Sync
        );
        assert_eq!(Route::of("/mcp"), Route::Other);
    }

    #[test]
    fn rules_pick_once_per_path_or_every_nth_request() {
        let mut rules = Rules::default();
        rules
            .faults
            .insert(Route::Started, (Fault::DropAnswer, When::FirstPerPath));
        rules
            .faults
            .insert(Route::Sync, (Fault::Reset, When::EveryNth(2)));
        assert_eq!(rules.pick("/c/1/started"), Some(Fault::DropAnswer));
        assert_eq!(rules.pick("/c/1/started"), None);
        assert_eq!(rules.pick("/c/2/started"), Some(Fault::DropAnswer));
        let syncs: Vec<_> = (0..4).map(|_| rules.pick("/sync").is_some()).collect();
        assert_eq!(syncs, [true, false, true, false]);
        assert_eq!(rules.pick("/c/1/control"), None);
        assert_eq!(rules.faulted[&Route::Started], 2);
        assert_eq!(rules.seen[&Route::Sync], 4);
    }
}
