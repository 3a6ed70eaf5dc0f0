//! `relay bench mcp`: what one MCP tool call costs a running `relay serve`, side by side with the
//! server's static route (`GET /healthz`) in the same run. Each phase keeps `concurrency`
//! HTTP/1.1 keep-alive connections busy for a fixed time, one request in flight per connection
//! (as `wrk -c N` does), and reports calls a second, p50 and p99. The client writes pre-built
//! requests and reads only the answer's framing, so its own cost stays small next to the
//! server's; both share the machine, which the ratio makes fair.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use relay_protocol::clock::Stopwatch;

use relay_protocol::clock::SystemClock;
use relay_service::admin::{self, TokenSpec};
use relay_service::store::SqliteStore;
use relay_service::{AppState, ServiceConfig};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::loadtest::{LoadError, Service, fail, prepare, start_service_with};

/// What to measure.
#[derive(Debug, Clone)]
pub struct McpBenchOptions {
    /// Connections kept busy at once.
    pub concurrency: usize,
    /// Measured time of each phase.
    pub phase: Duration,
    /// Unmeasured time before each phase.
    pub warm_up: Duration,
    /// The `relay` binary to start as the service.
    pub server: PathBuf,
}

/// One measured phase.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// What was called.
    pub name: String,
    /// Answers with status 200 in the measured time.
    pub calls: u64,
    /// Answers with any other status, and broken connections.
    pub errors: u64,
    /// The measured time, in seconds.
    pub seconds: f64,
    /// Median latency, in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile latency, in milliseconds.
    pub p99_ms: f64,
    /// The service's CPU time (all its threads, user and system) in the measured time; `None`
    /// where it cannot be read (no `/proc`).
    pub server_cpu: Option<Duration>,
}

impl Phase {
    /// Successful calls a second.
    pub fn per_second(&self) -> f64 {
        self.calls as f64 / self.seconds.max(f64::EPSILON)
    }

    /// The service's CPU time per successful call, in microseconds: what a call costs the
    /// service itself, apart from the client's share of the cores (it still moves with the
    /// wake-ups and contention of the moment).
    pub fn cpu_micros_per_call(&self) -> Option<f64> {
        let cpu = self.server_cpu?;
        (self.calls > 0).then(|| cpu.as_secs_f64() * 1e6 / self.calls as f64)
    }
}

/// What was measured.
#[derive(Debug, Clone, PartialEq)]
pub struct McpBenchReport {
    /// Connections kept busy at once.
    pub concurrency: usize,
    /// The phases, in the order they ran.
    pub phases: Vec<Phase>,
}

/// Names of the phases the ratio compares.
const STATIC: &str = "static route (GET /healthz)";
const STATELESS: &str = "tool call, stateless 2026-07-28 (list_graph_sessions)";
const SESSION: &str = "tool call, 2025-era session (list_graph_sessions)";
const LOOK: &str = "tool call, stateless 2026-07-28 (get_graph_run, queued)";
const STATIC_LIMITED: &str = "static route, rate limiter on";
const STATELESS_LIMITED: &str = "tool call, stateless, rate limiter on";

impl McpBenchReport {
    fn phase(&self, name: &str) -> Option<&Phase> {
        self.phases.iter().find(|p| p.name == name)
    }

    /// How many times the static route's rate the stateless tool call's rate is below it.
    pub fn ratio(&self) -> Option<f64> {
        let (fast, slow) = (self.phase(STATIC)?, self.phase(STATELESS)?);
        Some(fast.per_second() / slow.per_second().max(f64::EPSILON))
    }

    /// How many times the static route's CPU time per call the stateless tool call's is.
    pub fn cpu_ratio(&self) -> Option<f64> {
        let fast = self.phase(STATIC)?.cpu_micros_per_call()?;
        let slow = self.phase(STATELESS)?.cpu_micros_per_call()?;
        Some(slow / fast.max(f64::EPSILON))
    }

    /// The report as one JSON object.
    pub fn to_json(&self) -> Value {
        let round = |x: f64, places: i32| {
            let scale = 10f64.powi(places);
            (x * scale).round() / scale
        };
        let phases: Vec<Value> = self
            .phases
            .iter()
            .map(|p| {
                json!({
                    "name": p.name, "calls": p.calls, "errors": p.errors,
                    "calls_per_second": round(p.per_second(), 0),
                    "p50_ms": round(p.p50_ms, 3), "p99_ms": round(p.p99_ms, 3),
                    "server_cpu_us_per_call": p.cpu_micros_per_call().map(|c| round(c, 1)),
                })
            })
            .collect();
        json!({
            "concurrency": self.concurrency,
            "phases": phases,
            "ratio_to_static": self.ratio().map(|r| round(r, 2)),
            "cpu_ratio_to_static": self.cpu_ratio().map(|r| round(r, 2)),
        })
    }
}

impl fmt::Display for McpBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} connections, one request in flight each, HTTP/1.1 keep-alive on loopback",
            self.concurrency
        )?;
        for p in &self.phases {
            let cpu = p
                .cpu_micros_per_call()
                .map_or_else(|| "-".to_owned(), |c| format!("{c:.1}"));
            writeln!(
                f,
                "{:<56} {:>9.0} calls/s  p50 {:>6.2} ms  p99 {:>6.2} ms  server CPU {:>6} µs/call  ({} calls, {} errors)",
                p.name,
                p.per_second(),
                p.p50_ms,
                p.p99_ms,
                cpu,
                p.calls,
                p.errors
            )?;
        }
        if let Some(ratio) = self.cpu_ratio() {
            writeln!(
                f,
                "server CPU per call: tool call {ratio:.1}× the static route"
            )?;
        }
        match self.ratio() {
            Some(ratio) => writeln!(f, "tool call: {ratio:.1}× the static route"),
            None => writeln!(f, "tool call: no ratio (a phase is missing)"),
        }
    }
}

/// Runs the benchmark: one service without the rate limiter (static route, stateless call, a
/// 2025-era session's call, a stateless look at a queued run), then one with it (a limit far
/// above the load, so the limiter's bookkeeping runs and refuses nothing).
pub async fn mcp(options: McpBenchOptions) -> Result<McpBenchReport, LoadError> {
    let dir = tempfile::tempdir().map_err(fail)?;
    let db = dir.path().join("relay.db");
    let (agent, run) = reader(&db).await?;
    let unlimited = ["--rate-per-token", "0"];
    let service = start_service_with(&options.server, &db, &unlimited).await?;
    let mut phases = Vec::new();
    let requests = Requests::new(&service, &agent, &run).await?;
    phases.push(measure(&options, &service, STATIC, &requests.health).await?);
    phases.push(measure(&options, &service, STATELESS, &requests.stateless).await?);
    phases.push(measure(&options, &service, SESSION, &requests.session).await?);
    phases.push(measure(&options, &service, LOOK, &requests.look).await?);
    stop(service).await;
    let limited = ["--rate-per-token", "100000000", "--rate-burst", "100000000"];
    let service = start_service_with(&options.server, &db, &limited).await?;
    let requests = Requests::new(&service, &agent, &run).await?;
    phases.push(measure(&options, &service, STATIC_LIMITED, &requests.health).await?);
    phases.push(measure(&options, &service, STATELESS_LIMITED, &requests.stateless).await?);
    stop(service).await;
    Ok(McpBenchReport {
        concurrency: options.concurrency,
        phases,
    })
}

/// One project with session 1, an agent token that may read and run (the tool call reads), and
/// a run of session 1 it queued (`get_graph_run` looks at it); the token and the run's id.
async fn reader(db: &std::path::Path) -> Result<(String, String), LoadError> {
    let project = prepare(db, 1)
        .await?
        .pop()
        .ok_or_else(|| LoadError("no project was made".into()))?
        .project;
    let store = SqliteStore::open(db).map_err(fail)?;
    let app = AppState::new(
        Arc::new(store),
        Arc::new(SystemClock),
        ServiceConfig::default(),
    );
    let scopes = vec!["osfoundry:read".into(), "osfoundry:run".into()];
    let agent = TokenSpec::Agent {
        name: "bench".into(),
        scopes,
    };
    let token = admin::create_token(&app.admin(), &project, agent)
        .await
        .map_err(fail)?
        .token;
    let identity = relay_service::auth::authenticate(&app.tokens, Some(&token))
        .await
        .map_err(fail)?
        .into_agent()
        .map_err(fail)?;
    let request = relay_service::runs::RunRequest {
        graph_session_id: format!("gs_{:032x}", 1),
        arguments: serde_json::Map::new(),
        idempotency_key: "bench-look".into(),
        max_tokens: None,
    };
    let ticket = relay_service::runs::queue_run(&app.runs, &identity, request)
        .await
        .map_err(fail)?;
    Ok((token, ticket.command_id.to_string()))
}

async fn stop(service: Service) {
    let mut server = service.server;
    let _ = server.kill().await;
    let _ = server.wait().await;
}

/// The raw requests each phase repeats.
struct Requests {
    health: Vec<u8>,
    stateless: Vec<u8>,
    session: Vec<u8>,
    look: Vec<u8>,
}

const CLIENT_INFO: &str = r#"{"name":"relay-bench","version":"1"}"#;

impl Requests {
    /// Builds them, opening the 2025-era session, and checks once that each answers as the
    /// benchmark expects (a tool result that is no error).
    async fn new(service: &Service, agent: &str, run: &str) -> Result<Requests, LoadError> {
        let host = service.base.trim_start_matches("http://").to_owned();
        let health = format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes();
        let stateless = stateless_call(&host, agent, 1, "list_graph_sessions", json!({}))?;
        let session_id = open_session(service, agent).await?;
        let session_body = json!({
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "list_graph_sessions", "arguments": {}}
        });
        let session = post_mcp(
            &host,
            agent,
            &[
                ("mcp-protocol-version", "2025-11-25"),
                ("mcp-session-id", &session_id),
            ],
            &session_body.to_string(),
        );
        let look = stateless_call(&host, agent, 3, "get_graph_run", json!({"command_id": run}))?;
        for request in [&stateless, &session, &look] {
            check_once(&service.base, request).await?;
        }
        Ok(Requests {
            health,
            stateless,
            session,
            look,
        })
    }
}

/// A raw stateless 2026-07-28 `tools/call` of `tool` with `arguments`: its `_meta` and its
/// `Mcp-Method`/`Mcp-Name` headers, as a current client sends it.
fn stateless_call(
    host: &str,
    agent: &str,
    id: u64,
    tool: &str,
    arguments: Value,
) -> Result<Vec<u8>, LoadError> {
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": serde_json::from_str::<Value>(CLIENT_INFO).map_err(fail)?,
            "io.modelcontextprotocol/clientCapabilities": {}
        }}
    });
    Ok(post_mcp(
        host,
        agent,
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", tool),
        ],
        &body.to_string(),
    ))
}

/// A raw `POST /mcp` with the agent's token, the extra headers and the JSON body.
fn post_mcp(host: &str, agent: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {agent}\r\n\
         Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    request.into_bytes()
}

/// `initialize` and `notifications/initialized` of a 2025-era session; its id.
async fn open_session(service: &Service, agent: &str) -> Result<String, LoadError> {
    let url = format!("{}/mcp", service.base);
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": serde_json::from_str::<Value>(CLIENT_INFO).map_err(fail)?}
    });
    let answer = service
        .http
        .post(&url)
        .bearer_auth(agent)
        .header("accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .map_err(fail)?;
    let id = answer
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .ok_or_else(|| {
            LoadError(format!(
                "initialize answered {} without a session",
                answer.status()
            ))
        })?;
    let initialized = service
        .http
        .post(&url)
        .bearer_auth(agent)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &id)
        .header("mcp-protocol-version", "2025-11-25")
        .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .send()
        .await
        .map_err(fail)?;
    if !initialized.status().is_success() {
        return Err(LoadError(format!(
            "notifications/initialized answered {}",
            initialized.status()
        )));
    }
    Ok(id)
}

/// Sends `request` once on a fresh connection; fails unless it answers 200 with a tool result
/// that is no error.
async fn check_once(base: &str, request: &[u8]) -> Result<(), LoadError> {
    let addr = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).await.map_err(fail)?;
    stream.write_all(request).await.map_err(fail)?;
    let mut buffer = Vec::new();
    let answer = read_answer(&mut stream, &mut buffer).await?;
    let body = String::from_utf8_lossy(&answer.body);
    if answer.status != 200 || !body.contains("\"result\"") || body.contains("\"isError\":true") {
        return Err(LoadError(format!(
            "the tool call answered {}: {body}",
            answer.status
        )));
    }
    Ok(())
}

/// Keeps the connections busy through the warm-up and the measured time; the measured figures.
async fn measure(
    options: &McpBenchOptions,
    service: &Service,
    name: &str,
    request: &[u8],
) -> Result<Phase, LoadError> {
    let addr = service.base.trim_start_matches("http://").to_owned();
    let request = Arc::new(request.to_vec());
    let clock = Stopwatch::start();
    let begin = options.warm_up;
    let end = begin + options.phase;
    let mut connections = tokio::task::JoinSet::new();
    for _ in 0..options.concurrency.max(1) {
        connections.spawn(connection(
            addr.clone(),
            Arc::clone(&request),
            clock,
            (begin, end),
        ));
    }
    let pid = service.pid;
    let cpu = tokio::spawn(async move {
        tokio::time::sleep(begin.saturating_sub(clock.elapsed())).await;
        let before = cpu_time(pid);
        tokio::time::sleep(end.saturating_sub(clock.elapsed())).await;
        Some(cpu_time(pid)?.saturating_sub(before?))
    });
    let (mut latencies, mut errors) = (Vec::new(), 0);
    while let Some(done) = connections.join_next().await {
        let (mine, failed) = done.map_err(fail)??;
        latencies.extend(mine);
        errors += failed;
    }
    eprintln!("relay bench mcp: {name}: {} calls", latencies.len());
    latencies.sort_unstable();
    let rank = |q: f64| {
        let index = ((q * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len().max(1));
        latencies.get(index - 1).copied().unwrap_or(0) as f64 / 1000.0
    };
    Ok(Phase {
        name: name.to_owned(),
        calls: latencies.len() as u64,
        errors,
        seconds: options.phase.as_secs_f64(),
        p50_ms: rank(0.50),
        p99_ms: rank(0.99),
        server_cpu: cpu.await.map_err(fail)?,
    })
}

/// The CPU time process `pid` has used so far, user and system, of all its threads (finished
/// ones included), from `/proc/PID/stat` (in USER_HZ ticks, 100 a second on Linux).
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which may hold spaces and parentheses: the state is
    // the line's third field, utime and stime its 14th and 15th.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |field: usize| fields.get(field - 3)?.parse::<u64>().ok();
    Some(Duration::from_millis((ticks(14)? + ticks(15)?) * 10))
}

/// One connection's loop: the latencies (µs) of the answers with status 200 that began inside
/// the measured time, and the count of the other answers there.
async fn connection(
    addr: String,
    request: Arc<Vec<u8>>,
    clock: Stopwatch,
    (begin, end): (Duration, Duration),
) -> Result<(Vec<u32>, u64), LoadError> {
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut buffer = Vec::with_capacity(16 * 1024);
    let mut stream = TcpStream::connect(&addr).await.map_err(fail)?;
    stream.set_nodelay(true).map_err(fail)?;
    loop {
        let sent = clock.elapsed();
        if sent >= end {
            return Ok((latencies, errors));
        }
        let answer = match stream.write_all(&request).await {
            Ok(()) => read_answer(&mut stream, &mut buffer).await,
            Err(e) => Err(fail(e)),
        };
        let counted = sent >= begin;
        match answer {
            Ok(answer) if answer.status == 200 => {
                if counted {
                    let micros = (clock.elapsed() - sent).as_micros();
                    latencies.push(u32::try_from(micros).unwrap_or(u32::MAX));
                }
                if answer.close {
                    stream = reconnect(&addr, &mut buffer).await?;
                }
            }
            _ => {
                errors += u64::from(counted);
                stream = reconnect(&addr, &mut buffer).await?;
            }
        }
    }
}

async fn reconnect(addr: &str, buffer: &mut Vec<u8>) -> Result<TcpStream, LoadError> {
    buffer.clear();
    let stream = TcpStream::connect(addr).await.map_err(fail)?;
    stream.set_nodelay(true).map_err(fail)?;
    Ok(stream)
}

/// The parts of an answer the benchmark looks at.
struct Answer {
    status: u16,
    close: bool,
    body: Vec<u8>,
}

/// The most an answer's head may hold.
const MAX_HEAD: usize = 64 * 1024;

/// Reads one HTTP/1.1 answer (a `Content-Length` or chunked body); bytes past it stay in
/// `buffer` for the next one.
async fn read_answer(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Result<Answer, LoadError> {
    let head_end = loop {
        if let Some(at) = find(buffer, b"\r\n\r\n") {
            break at + 4;
        }
        if buffer.len() > MAX_HEAD {
            return Err(LoadError("an answer's head is too long".into()));
        }
        fill(stream, buffer).await?;
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| LoadError(format!("not an HTTP answer: {head}")))?;
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
    };
    let close = header("connection:").is_some_and(|v| v == "close");
    buffer.drain(..head_end);
    let body = if let Some(length) = header("content-length:") {
        let length: usize = length.parse().map_err(fail)?;
        while buffer.len() < length {
            fill(stream, buffer).await?;
        }
        buffer.drain(..length).collect()
    } else if header("transfer-encoding:").is_some_and(|v| v.contains("chunked")) {
        read_chunked(stream, buffer).await?
    } else {
        Vec::new()
    };
    Ok(Answer {
        status,
        close,
        body,
    })
}

/// Reads a chunked body up to its last chunk and the empty trailer.
async fn read_chunked(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Result<Vec<u8>, LoadError> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(at) = find(buffer, b"\r\n") {
                break at;
            }
            fill(stream, buffer).await?;
        };
        let size_text = String::from_utf8_lossy(&buffer[..line_end]).to_string();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| LoadError(format!("a bad chunk size: {size_text:?}")))?;
        while buffer.len() < line_end + 2 + size + 2 {
            fill(stream, buffer).await?;
        }
        body.extend_from_slice(&buffer[line_end + 2..line_end + 2 + size]);
        buffer.drain(..line_end + 2 + size + 2);
        if size == 0 {
            return Ok(body);
        }
    }
}

async fn fill(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Result<(), LoadError> {
    let mut chunk = [0u8; 8192];
    let read = stream.read(&mut chunk).await.map_err(fail)?;
    if read == 0 {
        return Err(LoadError("the service closed the connection".into()));
    }
    buffer.extend_from_slice(&chunk[..read]);
    Ok(())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(name: &str, calls: u64) -> Phase {
        Phase {
            name: name.into(),
            calls,
            errors: 0,
            seconds: 2.0,
            p50_ms: 1.0,
            p99_ms: 2.0,
            server_cpu: None,
        }
    }

    #[test]
    fn the_ratio_compares_the_stateless_call_with_the_static_route() {
        let report = McpBenchReport {
            concurrency: 32,
            phases: vec![phase(STATIC, 90_000), phase(STATELESS, 30_000)],
        };
        assert_eq!(report.ratio(), Some(3.0));
        assert!(
            report
                .to_string()
                .ends_with("tool call: 3.0× the static route\n")
        );
        assert_eq!(report.to_json()["ratio_to_static"], json!(3.0));
        let partial = McpBenchReport {
            concurrency: 32,
            phases: vec![phase(STATIC, 1)],
        };
        assert_eq!(partial.ratio(), None);
    }

    #[test]
    fn the_cpu_ratio_compares_the_service_cpu_time_per_call() {
        let with_cpu = |name, calls, millis| Phase {
            server_cpu: Some(Duration::from_millis(millis)),
            ..phase(name, calls)
        };
        // 90,000 calls in 1.8 s of CPU (20 µs each) against 30,000 in 2.4 s (80 µs each).
        let report = McpBenchReport {
            concurrency: 32,
            phases: vec![
                with_cpu(STATIC, 90_000, 1800),
                with_cpu(STATELESS, 30_000, 2400),
            ],
        };
        assert_eq!(report.phases[0].cpu_micros_per_call(), Some(20.0));
        assert_eq!(report.cpu_ratio(), Some(4.0));
        let text = report.to_string();
        assert!(text.contains("server CPU   20.0 µs/call"), "{text}");
        assert!(
            text.ends_with(
                "server CPU per call: tool call 4.0× the static route\ntool call: 3.0× the static route\n"
            ),
            "{text}"
        );
        assert_eq!(report.to_json()["cpu_ratio_to_static"], json!(4.0));
        assert_eq!(
            report.to_json()["phases"][1]["server_cpu_us_per_call"],
            json!(80.0)
        );
        // Without the service's CPU time (or without calls) there is no figure, not a zero.
        let unknown = McpBenchReport {
            concurrency: 32,
            phases: vec![phase(STATIC, 90_000), with_cpu(STATELESS, 0, 2400)],
        };
        assert_eq!(unknown.cpu_ratio(), None);
        assert!(!unknown.to_string().contains("server CPU per call"));
    }

    #[test]
    fn the_cpu_time_of_this_process_is_read_and_grows() {
        let pid = std::process::id();
        let before = cpu_time(pid).expect("this process's /proc/PID/stat");
        // Work until the count moves (a tick is 10 ms of CPU), however busy the machine is.
        let watch = Stopwatch::start();
        let mut x = 0u64;
        let mut after = before;
        while after == before && watch.elapsed() < Duration::from_secs(30) {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            after = cpu_time(pid).expect("read again");
        }
        assert!(
            after > before,
            "{before:?} then {after:?} after 30 s of work"
        );
        assert_eq!(cpu_time(u32::MAX), None, "no such process");
    }
}
