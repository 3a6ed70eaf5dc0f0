//! `relay bench long-polls`: thousands of desktops holding a long-polling `sync` open against
//! one `relay serve` process over loopback HTTP, while agents queue runs; reports the service's
//! memory and how fast each run reaches its desktop under that load.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use relay_protocol::clock::Stopwatch;

use serde_json::{Value, json};
use tokio::sync::Mutex;

use relay_protocol::clock::{Clock, SystemClock, Timestamp};
use relay_service::admin::{self, TokenSpec};
use relay_service::store::SqliteStore;
use relay_service::{AppState, ServiceConfig};

/// How long each desktop's sync is held.
pub const LOAD_WAIT_MS: u64 = 25_000;

/// What to measure.
#[derive(Debug, Clone)]
pub struct LongPollOptions {
    /// Desktops long-polling at once (one owner and project each).
    pub desktops: usize,
    /// Runs queued while they wait (each for a random desktop).
    pub runs: usize,
    /// The `relay` binary to start as the service.
    pub server: PathBuf,
}

/// What was measured.
#[derive(Debug, Clone)]
pub struct LongPollReport {
    /// Desktops.
    pub desktops: usize,
    /// Syncs the service held (by its own `/metrics` count) when the runs were queued.
    pub held: usize,
    /// The service's resident memory after a warm-up of [`WARM_UP_DESKTOPS`] short syncs and
    /// before the measured desktops connected, in KiB: the baseline the per-desktop figure is
    /// taken from (code and runtime pages first touched by the sync path are a fixed cost).
    pub rss_idle_kib: u64,
    /// Its resident memory right after start-up, before the warm-up, in KiB.
    pub rss_cold_kib: u64,
    /// Its resident memory with every desktop's sync held, in KiB.
    pub rss_held_kib: u64,
    /// Pickup latencies (queued → the desktop's long poll answered with it), in seconds.
    pub pickup: crate::stats::Summary,
}

impl LongPollReport {
    /// The service's resident memory per waiting desktop, in KiB.
    pub fn kib_per_waiting_desktop(&self) -> f64 {
        self.rss_held_kib.saturating_sub(self.rss_idle_kib) as f64 / self.desktops.max(1) as f64
    }

    /// The same figure taken from the memory right after start-up (before the warm-up): it
    /// also counts the fixed cost of the pages the first syncs touch.
    pub fn kib_per_waiting_desktop_from_cold(&self) -> f64 {
        self.rss_held_kib.saturating_sub(self.rss_cold_kib) as f64 / self.desktops.max(1) as f64
    }

    /// The report as one JSON object (`relay bench long-polls --json`); latencies in ms.
    pub fn to_json(&self) -> Value {
        let ms = |seconds: f64| (seconds * 1_000_000.0).round() / 1000.0;
        json!({
            "desktops": self.desktops,
            "held": self.held,
            "rss_cold_kib": self.rss_cold_kib,
            "rss_idle_kib": self.rss_idle_kib,
            "warm_up_desktops": WARM_UP_DESKTOPS,
            "rss_held_kib": self.rss_held_kib,
            "kib_per_waiting_desktop": (self.kib_per_waiting_desktop() * 10.0).round() / 10.0,
            "kib_per_waiting_desktop_from_cold": (self.kib_per_waiting_desktop_from_cold() * 10.0).round() / 10.0,
            "pickup_ms": {
                "n": self.pickup.n,
                "mean": ms(self.pickup.mean),
                "p50": ms(self.pickup.p50),
                "p95": ms(self.pickup.p95),
                "max": ms(self.pickup.max),
            },
        })
    }
}

impl fmt::Display for LongPollReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} desktops long-polling one service ({} syncs held when the runs were queued)",
            self.desktops, self.held
        )?;
        writeln!(
            f,
            "service memory: {:.1} MiB idle after a warm-up of {WARM_UP_DESKTOPS} short syncs ({:.1} MiB before it), \
             {:.1} MiB with every sync held ({:.1} KiB per waiting desktop; {:.1} KiB counted from before the warm-up)",
            self.rss_idle_kib as f64 / 1024.0,
            self.rss_cold_kib as f64 / 1024.0,
            self.rss_held_kib as f64 / 1024.0,
            self.kib_per_waiting_desktop(),
            self.kib_per_waiting_desktop_from_cold()
        )?;
        writeln!(
            f,
            "pickup under that load, n={}: mean {:.1} ms, median {:.1} ms, p95 {:.1} ms, max {:.1} ms",
            self.pickup.n,
            self.pickup.mean * 1000.0,
            self.pickup.p50 * 1000.0,
            self.pickup.p95 * 1000.0,
            self.pickup.max * 1000.0
        )
    }
}

/// Why the load test failed.
#[derive(Debug, thiserror::Error)]
#[error("the measurement failed: {0}")]
pub struct LoadError(pub(crate) String);

pub(crate) fn fail(e: impl fmt::Display) -> LoadError {
    LoadError(e.to_string())
}

pub(crate) struct Desktop {
    pub(crate) project: String,
    pub(crate) token: String,
    pub(crate) agent: String,
}

pub(crate) fn rss_kib(pid: u32) -> Result<u64, LoadError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(fail)?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| LoadError("no VmRSS in /proc status".into()))
}

/// Runs the load test.
pub async fn long_polls(options: LongPollOptions) -> Result<LongPollReport, LoadError> {
    let dir = tempfile::tempdir().map_err(fail)?;
    let db = dir.path().join("relay.db");
    let desktops = prepare(&db, options.desktops).await?;
    let Service {
        mut server,
        pid,
        base,
        metrics,
        http,
    } = start_service(&options.server, &db).await?;
    let rss_cold_kib = rss_kib(pid)?;
    warm_up(&base, &desktops).await?;
    let rss_idle_kib = steady_rss_kib(pid).await?;

    let in_flight = Arc::new(AtomicUsize::new(0));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let stop = tokio_util::sync::CancellationToken::new();
    let mut pollers = tokio::task::JoinSet::new();
    for desktop in &desktops {
        pollers.spawn(poll_loop(
            http.clone(),
            base.clone(),
            desktop.project.clone(),
            desktop.token.clone(),
            in_flight.clone(),
            latencies.clone(),
            stop.clone(),
        ));
    }
    let settle = Stopwatch::start();
    while in_flight.load(Ordering::SeqCst) < desktops.len()
        && settle.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Sent is not yet held: wait until the service holds them all (its own count), then until
    // its memory stops moving (the allocator returning what accepting and checking them took).
    let held = held_syncs(&http, &metrics, desktops.len()).await?;
    let rss_held_kib = steady_rss_kib(pid).await?;

    queue_runs(&http, &base, &desktops, options.runs).await?;
    let waiting = Stopwatch::start();
    while latencies.lock().await.len() < options.runs && waiting.elapsed() < Duration::from_secs(30)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    pollers.abort_all();
    let _ = server.kill().await;
    let samples = latencies.lock().await.clone();
    Ok(LongPollReport {
        desktops: desktops.len(),
        held,
        rss_idle_kib,
        rss_cold_kib,
        rss_held_kib,
        pickup: crate::stats::Summary::of(&samples),
    })
}

/// Desktops whose short syncs warm the service up before its idle memory is read.
pub const WARM_UP_DESKTOPS: usize = 16;
/// How long each warm-up sync is held (it is answered empty after this).
const WARM_UP_WAIT_MS: u64 = 200;

/// Warms the service up: the first [`WARM_UP_DESKTOPS`] desktops each hold one short sync at
/// once, on connections of their own that are closed afterwards, so that the code and runtime
/// pages the sync path first touches are resident before the idle reading, not counted per
/// desktop.
async fn warm_up(base: &str, desktops: &[Desktop]) -> Result<(), LoadError> {
    let http = graphrelay_net::client_builder()
        .map_err(fail)?
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(fail)?;
    let prefix = format!("{base}{}", relay_protocol::DESKTOP_API_PREFIX);
    let mut syncs = tokio::task::JoinSet::new();
    for desktop in desktops.iter().take(WARM_UP_DESKTOPS) {
        let request = http
            .post(format!("{prefix}/sync"))
            .bearer_auth(&desktop.token)
            .json(&json!({"project_id": desktop.project, "sessions": [], "sessions_unchanged": true, "wait_ms": WARM_UP_WAIT_MS}));
        syncs.spawn(async move {
            let answer = request.send().await.map_err(fail)?;
            let status = answer.status();
            answer.bytes().await.map_err(fail)?;
            if status.is_success() {
                Ok(())
            } else {
                Err(LoadError(format!("a warm-up sync answered {status}")))
            }
        });
    }
    while let Some(done) = syncs.join_next().await {
        done.map_err(fail)??;
    }
    Ok(())
}

/// Readings of the service's memory this far apart must agree to count as steady.
const STEADY_INTERVAL: Duration = Duration::from_millis(500);
/// Two readings that differ by less than this share of the first agree.
const STEADY_TOLERANCE: f64 = 0.005;
/// How long the memory may take to settle: well within one held sync ([`LOAD_WAIT_MS`]), so
/// that no desktop has re-issued its sync yet when it is read.
const STEADY_WITHIN: Duration = Duration::from_secs(15);

/// How long the service may take to hold every desktop's sync once all were sent.
const HOLD_WITHIN: Duration = Duration::from_secs(20);

/// The syncs the service holds, read from its `/metrics` until it holds `expected` of them
/// (or the last count after [`HOLD_WITHIN`]).
pub(crate) async fn held_syncs(
    http: &reqwest::Client,
    metrics: &str,
    expected: usize,
) -> Result<usize, LoadError> {
    let started = Stopwatch::start();
    loop {
        let text = http
            .get(metrics)
            .send()
            .await
            .map_err(fail)?
            .text()
            .await
            .map_err(fail)?;
        let held = relay_service::http::metrics::held_syncs(&text)
            .and_then(|count| usize::try_from(count).ok())
            .ok_or_else(|| LoadError(format!("no held sync count in {metrics}")))?;
        if held >= expected || started.elapsed() >= HOLD_WITHIN {
            return Ok(held);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The service's resident memory once two readings in a row agree (or the last reading after
/// [`STEADY_WITHIN`]).
pub(crate) async fn steady_rss_kib(pid: u32) -> Result<u64, LoadError> {
    let started = Stopwatch::start();
    let mut last = rss_kib(pid)?;
    loop {
        tokio::time::sleep(STEADY_INTERVAL).await;
        let now = rss_kib(pid)?;
        let moved = now.abs_diff(last) as f64 / last.max(1) as f64;
        if moved < STEADY_TOLERANCE || started.elapsed() >= STEADY_WITHIN {
            return Ok(now);
        }
        last = now;
    }
}

/// A `relay serve` child process and an HTTP client for it.
pub(crate) struct Service {
    pub(crate) server: tokio::process::Child,
    pub(crate) pid: u32,
    pub(crate) base: String,
    /// Its `/metrics` URL (on a listener of its own).
    pub(crate) metrics: String,
    pub(crate) http: reqwest::Client,
}

/// Starts `relay serve` on a free loopback port over `db`, without a rate limit (a benchmark is
/// no abuse), and waits until it answers.
pub(crate) async fn start_service(
    server: &std::path::Path,
    db: &std::path::Path,
) -> Result<Service, LoadError> {
    start_service_with(server, db, &["--rate-per-token", "0"]).await
}

/// Starts `relay serve` on a free loopback port over `db` with `extra` arguments and waits until
/// it answers.
pub(crate) async fn start_service_with(
    server: &std::path::Path,
    db: &std::path::Path,
    extra: &[&str],
) -> Result<Service, LoadError> {
    let free_port = || -> Result<u16, LoadError> {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").map_err(fail)?;
        Ok(probe.local_addr().map_err(fail)?.port())
    };
    let port = free_port()?;
    let metrics_port = free_port()?;
    let base = format!("http://127.0.0.1:{port}");
    let metrics = format!("http://127.0.0.1:{metrics_port}/metrics");
    let server = tokio::process::Command::new(server)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--db"])
        .arg(db)
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics_port}")])
        // Every simulated desktop connects from 127.0.0.1.
        .args(["--max-connections-per-address", "1000000"])
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| LoadError(format!("cannot start {}: {e}", server.display())))?;
    let pid = server
        .id()
        .ok_or_else(|| LoadError("the service exited".into()))?;
    let http = graphrelay_net::client_builder()
        .map_err(fail)?
        .pool_max_idle_per_host(usize::MAX)
        .timeout(Duration::from_secs(60))
        .build()
        .map_err(fail)?;
    // Wait until it answers.
    let ready = Stopwatch::start();
    while http
        .get(format!("{base}/.well-known/oauth-protected-resource"))
        .send()
        .await
        .is_err()
    {
        if ready.elapsed() > Duration::from_secs(30) {
            return Err(LoadError("the service did not start".into()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(Service {
        server,
        pid,
        base,
        metrics,
        http,
    })
}

/// Queues one run of session 1 through `base`'s MCP endpoint as `agent` (a stateless
/// `tools/call` of `run_graph_session` with idempotency key `key`); any answer but 2xx fails.
pub(crate) async fn queue_one(
    http: &reqwest::Client,
    base: &str,
    agent: &str,
    id: usize,
    key: &str,
) -> Result<(), LoadError> {
    let call = json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "run_graph_session", "arguments": {
            "graph_session_id": format!("gs_{:032x}", 1), "arguments": {}, "idempotency_key": key
        }, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "relay-bench", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}
        }}
    });
    let answer = http
        .post(format!("{base}/mcp"))
        .bearer_auth(agent)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "run_graph_session")
        .json(&call)
        .send()
        .await
        .map_err(fail)?;
    if !answer.status().is_success() {
        let status = answer.status();
        let body = answer.text().await.unwrap_or_default();
        return Err(LoadError(format!(
            "queueing a run answered {status}: {body}"
        )));
    }
    Ok(())
}

/// Queues `runs` runs through MCP, each for a desktop picked at random (seeded), 20 ms apart.
async fn queue_runs(
    http: &reqwest::Client,
    base: &str,
    desktops: &[Desktop],
    runs: usize,
) -> Result<(), LoadError> {
    let mut rng = crate::rng::Rng::new(42);
    for i in 0..runs {
        let desktop = &desktops[(rng.next_u64() % desktops.len() as u64) as usize];
        queue_one(http, base, &desktop.agent, i, &format!("load-{i:08}")).await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Creates one owner, project, desktop token and agent token per desktop, with session 1
/// shared, directly in the database the service will open.
pub(crate) async fn prepare(db: &std::path::Path, count: usize) -> Result<Vec<Desktop>, LoadError> {
    let store = SqliteStore::open(db).map_err(fail)?;
    let app = AppState::new(
        Arc::new(store),
        Arc::new(SystemClock),
        ServiceConfig::default(),
    );
    let mut desktops = Vec::with_capacity(count);
    for i in 0..count {
        desktops.push(prepare_desktop(&app, &format!("load-{i}")).await?);
    }
    Ok(desktops)
}

/// One owner (named after `name`), project, desktop token and agent token, with session 1
/// shared.
pub(crate) async fn prepare_desktop(app: &AppState, name: &str) -> Result<Desktop, LoadError> {
    let project = admin::create_project(&app.admin(), name, Some(&format!("owner-{name}")))
        .await
        .map_err(fail)?
        .project_id;
    let token = admin::create_token(&app.admin(), &project, TokenSpec::Desktop)
        .await
        .map_err(fail)?
        .token;
    let agent = admin::create_token(
        &app.admin(),
        &project,
        TokenSpec::Agent {
            name: "load".into(),
            scopes: vec!["osfoundry:run".into()],
        },
    )
    .await
    .map_err(fail)?
    .token;
    let session = relay_protocol::SessionMeta {
        graph_session_id: format!("gs_{:032x}", 1)
            .parse()
            .map_err(|e: relay_protocol::InvalidInput| fail(e.0))?,
        name: "g".into(),
        description: String::new(),
        slug: "g".into(),
        version: "1".into(),
        status: "active".into(),
        args_schema: None,
    };
    app.store
        .replace_sessions(&project, vec![session], None, app.clock.now())
        .await
        .map_err(fail)?;
    Ok(Desktop {
        project,
        token,
        agent,
    })
}

pub(crate) async fn poll_loop(
    http: reqwest::Client,
    base: String,
    project: String,
    token: String,
    in_flight: Arc<AtomicUsize>,
    latencies: Arc<Mutex<Vec<f64>>>,
    stop: tokio_util::sync::CancellationToken,
) {
    let prefix = format!("{base}{}", relay_protocol::DESKTOP_API_PREFIX);
    while !stop.is_cancelled() {
        in_flight.fetch_add(1, Ordering::SeqCst);
        let answer = http
            .post(format!("{prefix}/sync"))
            .bearer_auth(&token)
            .json(&json!({"project_id": project, "sessions": [], "sessions_unchanged": true, "wait_ms": LOAD_WAIT_MS}))
            .send()
            .await;
        in_flight.fetch_sub(1, Ordering::SeqCst);
        let Ok(answer) = answer else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let Ok(body) = answer.json::<Value>().await else {
            continue;
        };
        let received = SystemClock.now();
        for command in body["commands"].as_array().cloned().unwrap_or_default() {
            let created = command["created_at"]
                .as_str()
                .and_then(Timestamp::parse_rfc3339);
            if let Some(created) = created {
                let seconds = (received.unix_millis() - created.unix_millis()) as f64 / 1000.0;
                latencies.lock().await.push(seconds.max(0.0));
            }
            // Take it off the queue, as a desktop would.
            let id = command["command_id"].as_str().unwrap_or_default();
            let _ = http
                .post(format!("{prefix}/commands/{id}/started"))
                .bearer_auth(&token)
                .json(&json!({"execution_id": format!("load-{id}")}))
                .send()
                .await;
            let _ = http
                .post(format!("{prefix}/commands/{id}/complete"))
                .bearer_auth(&token)
                .json(&json!({"execution_id": format!("load-{id}"), "status": "completed", "result": null, "total_tokens": 0, "reported_cost": 0.0}))
                .send()
                .await;
        }
    }
}
