//! What a waiting desktop costs the service, counted exactly: a counting allocator tallies the
//! heap bytes and blocks the service's own threads hold while `HELD` desktops each keep one
//! long-poll `sync` waiting over a real loopback connection. The clients run on the test's
//! thread, whose allocations are not counted, so the figure is the service's alone.
//!
//! The service logs as `relay serve` does (the fmt subscriber with its default filter, the
//! relay's lines at `info` and the libraries' at `warn`, here into a sink), so what the
//! subscriber keeps for a request's span counts too.
//!
//! `relay bench long-polls` measures the same thing from outside, as resident memory; this
//! test names the parts (`--nocapture` prints them) and fails when the held state outgrows its
//! budget.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use relay_protocol::clock::SystemClock;
use relay_service::admin::{self, TokenSpec};
use relay_service::store::SqliteStore;
use relay_service::{AppState, ServiceConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Desktops holding a sync at once.
const HELD: usize = 400;
/// The heap an open, idle connection may hold: 16 KiB of it are hyper's read and write buffers
/// (8 KiB each, reserved when the connection opens and not configurable), mostly unwritten and
/// so mostly not resident; the rest is the connection's task and socket registration.
const CONNECTION_HEAP_BUDGET: i64 = 20 * 1024;
/// The heap a held sync may add to its connection: the request's boxed futures down the
/// router, its held state, its wake-up subscription and its token watch (debug build: 6.7 KiB
/// before issue 28; 4,120 B with the Origin check a `from_fn` middleware and the sync an axum
/// handler; 2,101 B since they box nothing more and the sync waits on its small state). With
/// the service logging as `relay serve` does: 2,606 B while the request's span was kept for
/// the whole wait; 1,953 B since the span is made only while the request runs; 1,717 B since
/// the sync service's future keeps no room for the request it read.
const HELD_SYNC_HEAP_BUDGET: i64 = 2048;
/// The size of the sync's own future while it is held (debug build: 744 B, 568 B since
/// `sync_project` keeps no room for its request).
const HELD_FUTURE_BUDGET: usize = 768;

struct Counting;

static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);
static LIVE_BLOCKS: AtomicI64 = AtomicI64::new(0);
/// Live blocks by size class (bucket k holds sizes in [2^k, 2^(k+1))).
static BY_CLASS: [AtomicI64; 32] = [const { AtomicI64::new(0) }; 32];

fn class(size: usize) -> usize {
    (usize::BITS - size.max(1).leading_zeros() - 1).min(31) as usize
}

thread_local! {
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

fn counted() -> bool {
    COUNTED.try_with(Cell::get).unwrap_or(false)
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let block = unsafe { System.alloc(layout) };
        if !block.is_null() && counted() {
            LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
            LIVE_BLOCKS.fetch_add(1, Ordering::Relaxed);
            BY_CLASS[class(layout.size())].fetch_add(1, Ordering::Relaxed);
        }
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        if counted() {
            LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
            LIVE_BLOCKS.fetch_sub(1, Ordering::Relaxed);
            BY_CLASS[class(layout.size())].fetch_sub(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded with the caller's block and layout.
        unsafe { System.dealloc(block, layout) }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's block, layout and size.
        let moved = unsafe { System.realloc(block, layout, new_size) };
        if !moved.is_null() && counted() {
            LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
            BY_CLASS[class(layout.size())].fetch_sub(1, Ordering::Relaxed);
            BY_CLASS[class(new_size)].fetch_add(1, Ordering::Relaxed);
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The counters are global: the tests that read them take turns.
static COUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn counting_alone() -> std::sync::MutexGuard<'static, ()> {
    COUNTING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn classes() -> Vec<i64> {
    BY_CLASS.iter().map(|c| c.load(Ordering::SeqCst)).collect()
}

fn print_classes(what: &str, before: &[i64], after: &[i64]) {
    let mut parts = Vec::new();
    for (k, (b, a)) in before.iter().zip(after).enumerate() {
        let per = (a - b) as f64 / HELD as f64;
        if per.abs() >= 0.05 {
            parts.push(format!(
                "{}-{} B: {per:.1}",
                1usize << k,
                (1usize << (k + 1)) - 1
            ));
        }
    }
    eprintln!("{what}, blocks per desktop by size: {}", parts.join(", "));
}

fn snapshot() -> (i64, i64) {
    (
        LIVE_BYTES.load(Ordering::SeqCst),
        LIVE_BLOCKS.load(Ordering::SeqCst),
    )
}

/// The service on its own runtime, every thread of which is counted, logging as `relay serve`
/// does by default.
fn service_runtime() -> tokio::runtime::Runtime {
    static LOGGING: std::sync::Once = std::sync::Once::new();
    LOGGING.call_once(|| {
        tracing_subscriber::fmt()
            .with_writer(std::io::sink)
            .log_internal_errors(false)
            // `relay serve`'s default filter (`relay/src/logging.rs`).
            .with_env_filter(tracing_subscriber::EnvFilter::new("warn,relay=info"))
            .init();
    });
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(|| COUNTED.with(|c| c.set(true)))
        .build()
        .expect("service runtime")
}

struct Fleet {
    app: Arc<AppState>,
    address: std::net::SocketAddr,
    desktops: Vec<(String, String)>,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn fleet(count: usize) -> Fleet {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("relay.db")).expect("store");
    let app = AppState::new(
        Arc::new(store),
        Arc::new(SystemClock),
        ServiceConfig {
            listen_loopback: true,
            // Every test desktop connects from 127.0.0.1.
            connections: relay_service::http::listener::ConnectionLimits {
                max_per_address: usize::MAX,
                ..Default::default()
            },
            ..ServiceConfig::default()
        },
    );
    let mut desktops = Vec::with_capacity(count);
    for i in 0..count {
        let project = admin::create_project(&app.admin(), &format!("p{i}"), Some(&format!("o{i}")))
            .await
            .expect("project")
            .project_id;
        let token = admin::create_token(&app.admin(), &project, TokenSpec::Desktop)
            .await
            .expect("token")
            .token;
        desktops.push((project, token));
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(relay_service::serve(listener, app.clone(), async move {
        let _ = stopped.await;
    }));
    Fleet {
        app,
        address,
        desktops,
        _dir: dir,
        _stop: stop,
    }
}

fn sync_request(
    address: std::net::SocketAddr,
    project: &str,
    token: &str,
    wait_ms: u64,
) -> Vec<u8> {
    let body = serde_json::json!({
        "project_id": project, "sessions": [], "sessions_unchanged": true, "wait_ms": wait_ms
    })
    .to_string();
    format!(
        "POST {}/sync HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        relay_protocol::DESKTOP_API_PREFIX,
        body.len()
    )
    .into_bytes()
}

/// Sends one sync and reads its whole answer (the connection then closes).
async fn sync_once(address: std::net::SocketAddr, project: &str, token: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    let mut request = sync_request(address, project, token, 0);
    // Ask the service to close afterwards, so the answer ends with the stream.
    let at = request
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("head");
    request.splice(at..at, b"\r\nconnection: close".iter().copied());
    stream.write_all(&request).await.expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("read");
    answer
}

/// Waits until the counters stop moving for a while (held requests parked, buffers settled).
fn settle() -> (i64, i64) {
    let mut last = snapshot();
    let mut still = 0;
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(100));
        let now = snapshot();
        if (now.0 - last.0).abs() < 4096 {
            still += 1;
            if still >= 10 {
                return now;
            }
        } else {
            still = 0;
        }
        last = now;
    }
    last
}

/// The service on its runtime with `count` desktops that share nothing and have each synced
/// once, so every cache the first sync fills is filled before a baseline is taken; and a
/// runtime for the clients. The service's runtime must live as long as the test: bind it to a
/// name (`_service`), not to `_`.
fn synced_fleet(count: usize) -> (tokio::runtime::Runtime, Fleet, tokio::runtime::Runtime) {
    let service = service_runtime();
    let fleet = service.block_on(fleet(count));
    let clients = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    clients.block_on(async {
        for (project, token) in &fleet.desktops {
            let answer = sync_once(fleet.address, project, token).await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        }
    });
    (service, fleet, clients)
}

#[test]
fn a_waiting_desktop_costs_the_service_a_few_kib_of_heap() {
    let _alone = counting_alone();
    let (_service, fleet, clients) = synced_fleet(HELD);
    let (bytes_before, blocks_before) = settle();
    let classes_before = classes();
    let mut streams = clients.block_on(async {
        let mut streams = Vec::with_capacity(HELD);
        for _ in 0..HELD {
            let stream = tokio::net::TcpStream::connect(fleet.address)
                .await
                .expect("connect");
            streams.push(stream);
        }
        streams
    });
    let (bytes_open, _) = settle();
    let classes_open = classes();
    clients.block_on(async {
        for (stream, (project, token)) in streams.iter_mut().zip(&fleet.desktops) {
            stream
                .write_all(&sync_request(fleet.address, project, token, 25_000))
                .await
                .expect("write");
        }
    });
    let (bytes_held, blocks_held) = settle();
    let classes_held = classes();
    print_classes("an open connection", &classes_before, &classes_open);
    print_classes("its held sync", &classes_open, &classes_held);
    let per_connection = (bytes_open - bytes_before) / HELD as i64;
    let per_sync = (bytes_held - bytes_open) / HELD as i64;
    let per_waiter = (bytes_held - bytes_before) / HELD as i64;
    let blocks = (blocks_held - blocks_before) as f64 / HELD as f64;
    eprintln!("an open connection before its request: {per_connection} B");
    eprintln!(
        "held syncs: {HELD}; service heap {bytes_before} B before, {bytes_held} B held: {per_waiter} B and {blocks:.1} blocks per waiting desktop"
    );
    drop(streams);
    drop(fleet);
    assert!(
        per_connection <= CONNECTION_HEAP_BUDGET,
        "an open connection holds {per_connection} B of the service's heap, over the budget of {CONNECTION_HEAP_BUDGET} B"
    );
    assert!(
        per_sync <= HELD_SYNC_HEAP_BUDGET,
        "a held sync adds {per_sync} B of heap to its connection, over the budget of {HELD_SYNC_HEAP_BUDGET} B"
    );
}

/// The answer to one request on `stream`, read to the end of its body (the connection stays
/// open).
async fn read_answer(stream: &mut tokio::net::TcpStream) -> String {
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let read = stream.read(&mut chunk).await.expect("read");
        assert!(read > 0, "the connection closed mid-answer");
        answer.extend_from_slice(&chunk[..read]);
        let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|value| value.trim().parse().ok())
            .expect("a content-length");
        if answer.len() >= end + 4 + length {
            return String::from_utf8_lossy(&answer).into_owned();
        }
    }
}

/// Desktops whose connection first carried a large request body.
const LARGE_BODY_DESKTOPS: usize = 100;
/// The large body: half of the desktop API's limit, as a sync with many long session
/// descriptions might be.
const LARGE_BODY_BYTES: usize = 512 * 1024;
/// The heap a waiting desktop's connection and its held sync may keep after the connection
/// carried a large body: hyper grows a connection's read buffer while a body streams in and
/// keeps it for the connection's life, up to the listener's `max_buf_size`.
/// 275 KiB before the listener capped it at 16 KiB (`MAX_READ_BUFFER_BYTES`), 28 KiB since.
const AFTER_LARGE_BODY_HEAP_BUDGET: i64 = 36 * 1024;

#[test]
fn a_large_body_before_the_wait_leaves_no_large_buffer_behind() {
    let _alone = counting_alone();
    let (_service, fleet, clients) = synced_fleet(LARGE_BODY_DESKTOPS);
    let (bytes_before, _) = settle();
    let streams = clients.block_on(async {
        let mut streams = Vec::with_capacity(LARGE_BODY_DESKTOPS);
        for (project, token) in &fleet.desktops {
            let mut stream = tokio::net::TcpStream::connect(fleet.address)
                .await
                .expect("connect");
            let body = serde_json::json!({
                "project_id": project, "sessions": [], "sessions_unchanged": true,
                "padding": "x".repeat(LARGE_BODY_BYTES)
            })
            .to_string();
            let request = format!(
                "POST {}/sync HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                relay_protocol::DESKTOP_API_PREFIX,
                fleet.address,
                body.len()
            );
            stream.write_all(request.as_bytes()).await.expect("write");
            let answer = read_answer(&mut stream).await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            stream
                .write_all(&sync_request(fleet.address, project, token, 25_000))
                .await
                .expect("write");
            streams.push(stream);
        }
        streams
    });
    let (bytes_held, _) = settle();
    let per_waiter = (bytes_held - bytes_before) / LARGE_BODY_DESKTOPS as i64;
    eprintln!(
        "after a {LARGE_BODY_BYTES} B body, a waiting desktop's connection and sync: {per_waiter} B"
    );
    drop(streams);
    drop(fleet);
    assert!(
        per_waiter <= AFTER_LARGE_BODY_HEAP_BUDGET,
        "after a large body a waiting desktop holds {per_waiter} B of the service's heap, over the budget of {AFTER_LARGE_BODY_HEAP_BUDGET} B"
    );
}

#[test]
fn a_held_sync_future_is_small() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let fleet = fleet(1).await;
        let (project, token) = &fleet.desktops[0];
        let desktop = relay_service::auth::authenticate(&fleet.app.tokens, Some(token))
            .await
            .expect("authenticate")
            .into_desktop()
            .expect("a desktop token");
        let request: relay_protocol::SyncRequest = serde_json::from_value(serde_json::json!({
            "project_id": project, "sessions": [], "sessions_unchanged": true, "wait_ms": 1
        }))
        .expect("request");
        let held = relay_service::sessions::sync_project(&fleet.app.runs, &desktop, request);
        let size = std::mem::size_of_val(&held);
        eprintln!("the sync future: {size} B");
        assert!(
            size <= HELD_FUTURE_BUDGET,
            "the sync future is {size} B, over the budget of {HELD_FUTURE_BUDGET} B"
        );
        held.await.expect("the sync answers");
    });
}
