//! `relay bench empty-polls`: what an empty inbox read costs with no sweep, with the sweep's
//! write transaction on every read, and with the sweep behind its read-only guard.
//!
//! Each variant is a real service on a loopback port over its own SQLite file (WAL), seeded
//! with the same history: finished tasks spread over many links. One link with nothing open is
//! polled through `/mcp` (`list_linked_chat_tasks`), and again in-process (the domain function
//! alone), so the HTTP stack's share can be told apart from the server's own work. The
//! variants take turns in small batches, so drifting machine load hits all of them alike.
//!
//! This is a measurement, so it reads the wall clock; the service under test still reads only
//! its injected clock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use relay_protocol::clock::Stopwatch;

use serde_json::{Value, json};

use relay_protocol::clock::{Clock, SystemClock};
use relay_service::admin::{self, TokenSpec};
use relay_service::auth::{AgentIdentity, Identity, authenticate};
use relay_service::chat_tasks::sweep::SweepMode;
use relay_service::chat_tasks::{TASK_TTL, agent};
use relay_service::model::{HostKind, TaskStatus};
use relay_service::store::{ChatLinkRecord, SqliteStore, TaskRecord};
use relay_service::{self, AppState, ServiceConfig};

/// Most polls, tasks or links one run accepts.
pub const MAX_BENCH_COUNT: usize = 1_000_000;
/// Most concurrent pollers.
pub const MAX_BENCH_CONCURRENCY: usize = 64;
/// Polls per variant before measuring (connections, statement caches, page cache).
const WARMUP_POLLS: usize = 50;
/// Polls one variant makes before the next takes its turn.
const BATCH_POLLS: usize = 50;

/// What to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmptyPollOptions {
    /// Measured polls per variant.
    pub polls: usize,
    /// Finished tasks in the history.
    pub tasks: usize,
    /// Links the history is spread over (the polled one among them).
    pub links: usize,
    /// Pollers at once.
    pub concurrency: usize,
}

impl Default for EmptyPollOptions {
    fn default() -> Self {
        EmptyPollOptions {
            polls: 2_000,
            tasks: 10_000,
            links: 500,
            concurrency: 1,
        }
    }
}

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Options out of range.
    #[error("{0}")]
    Invalid(String),
    /// Setting up or polling failed.
    #[error("{0}")]
    Failed(String),
}

fn failed(what: &str, error: impl fmt::Display) -> BenchError {
    BenchError::Failed(format!("{what}: {error}"))
}

/// Latency figures of one set of polls, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    /// Polls measured.
    pub count: usize,
    /// Median.
    pub p50_us: f64,
    /// Mean.
    pub mean_us: f64,
    /// 95th percentile.
    pub p95_us: f64,
}

impl Latency {
    fn of(mut samples: Vec<Duration>) -> Latency {
        samples.sort();
        let micros = |d: Duration| d.as_secs_f64() * 1e6;
        let at = |q: f64| {
            let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
            samples.get(index).copied().map(micros).unwrap_or(0.0)
        };
        let total: f64 = samples.iter().copied().map(micros).sum();
        Latency {
            count: samples.len(),
            p50_us: at(0.5),
            mean_us: if samples.is_empty() {
                0.0
            } else {
                total / samples.len() as f64
            },
            p95_us: at(0.95),
        }
    }
}

/// The figures of one variant.
#[derive(Debug, Clone, PartialEq)]
pub struct VariantReport {
    /// Which sweep.
    pub mode: SweepMode,
    /// Polls through `/mcp` over loopback HTTP.
    pub http: Latency,
    /// Calls of the domain function alone.
    pub in_process: Latency,
    /// Read-only guard checks the variant's service made.
    pub guard_checks: u64,
    /// Sweep write transactions it ran (each took the write lock).
    pub write_transactions: u64,
    /// Bytes of tool-result text of one empty inbox read.
    pub inbox_text_bytes: usize,
    /// The ratio of this variant's batch median to the baseline's in the same round, over
    /// all rounds: how far apart the two are next to how much they move round to round.
    pub round_ratio: Quartiles,
}

/// First quartile, median and third quartile of a set of figures.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Quartiles {
    /// 25th percentile.
    pub q1: f64,
    /// Median.
    pub median: f64,
    /// 75th percentile.
    pub q3: f64,
}

impl Quartiles {
    fn of(mut values: Vec<f64>) -> Quartiles {
        values.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let index = ((values.len() as f64 - 1.0) * q).round() as usize;
            values.get(index).copied().unwrap_or(0.0)
        };
        Quartiles {
            q1: at(0.25),
            median: at(0.5),
            q3: at(0.75),
        }
    }
}

/// The whole run.
#[derive(Debug, Clone, PartialEq)]
pub struct EmptyPollReport {
    /// What was measured.
    pub options: EmptyPollOptions,
    /// One per [`SweepMode`], in [`SweepMode::ALL`] order.
    pub variants: Vec<VariantReport>,
    /// A second no-sweep service's per-round ratio to the first: how much two identical
    /// services differ, the yardstick for "within noise".
    pub noise: Quartiles,
}

impl fmt::Display for EmptyPollReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "empty polls: {} per variant, {} poller(s), against {} finished tasks on {} links (SQLite WAL, loopback HTTP)",
            o.polls, o.concurrency, o.tasks, o.links
        )?;
        self.latency_tables(f)?;
        writeln!(
            f,
            "\nper round of {BATCH_POLLS} HTTP polls, this variant's p50 / the baseline's p50 (median [q1–q3]):"
        )?;
        let rows = self
            .variants
            .iter()
            .map(|v| (v.mode.name(), v.round_ratio))
            .chain([("no sweep, again", self.noise)]);
        for (name, r) in rows {
            writeln!(f, "{name:<16} {:>5.2} [{:.2}–{:.2}]", r.median, r.q1, r.q3)?;
        }
        writeln!(
            f,
            "(\"no sweep, again\" is a second identical no-sweep service: the noise)"
        )?;
        if let Some(variant) = self.variants.first() {
            writeln!(
                f,
                "\nan empty inbox is {} bytes of tool-result text; ratios are against \"{}\"",
                variant.inbox_text_bytes,
                variant.mode.name()
            )?;
        }
        Ok(())
    }
}

impl EmptyPollReport {
    /// The latency tables, over HTTP and in-process, each against the first variant.
    fn latency_tables(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let base = self.variants.first();
        for (title, pick) in [
            (
                "over HTTP (/mcp list_linked_chat_tasks)",
                (|v: &VariantReport| v.http) as fn(&VariantReport) -> Latency,
            ),
            (
                "in-process (chat_tasks::agent::list_tasks)",
                |v: &VariantReport| v.in_process,
            ),
        ] {
            writeln!(f, "\n{title}")?;
            writeln!(
                f,
                "{:<16} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11} {:>11}",
                "variant",
                "p50 µs",
                "mean µs",
                "p95 µs",
                "×p50",
                "×mean",
                "guard reads",
                "write txns"
            )?;
            for variant in &self.variants {
                let latency = pick(variant);
                let base = base.map(pick).unwrap_or(latency);
                let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
                writeln!(
                    f,
                    "{:<16} {:>9.1} {:>9.1} {:>9.1} {:>9.2} {:>9.2} {:>11} {:>11}",
                    variant.mode.name(),
                    latency.p50_us,
                    latency.mean_us,
                    latency.p95_us,
                    ratio(latency.p50_us, base.p50_us),
                    ratio(latency.mean_us, base.mean_us),
                    variant.guard_checks,
                    variant.write_transactions,
                )?;
            }
        }
        Ok(())
    }
}

/// One variant's running service and what polls it.
struct Variant {
    mode: SweepMode,
    app: Arc<AppState>,
    url: String,
    token: String,
    agent: AgentIdentity,
    link: String,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    http_samples: Vec<Duration>,
    /// The median of each batch over HTTP, in turn order.
    batch_p50s: Vec<f64>,
    in_process_samples: Vec<Duration>,
    inbox_text_bytes: usize,
}

fn poll_body(link: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "list_linked_chat_tasks",
        "arguments": {"chat_link_id": link},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "relay-bench", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}
        }
    }})
}

/// Sends one poll; returns the tool-result text, which must be the empty inbox.
async fn poll(client: &reqwest::Client, variant: &Variant) -> Result<String, BenchError> {
    let response = client
        .post(&variant.url)
        .bearer_auth(&variant.token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "list_linked_chat_tasks")
        .json(&poll_body(&variant.link))
        .send()
        .await
        .map_err(|e| failed("poll", e))?;
    let status = response.status();
    let body: Value = response
        .json()
        .await
        .map_err(|e| failed("poll answer", e))?;
    let text = body
        .pointer("/result/content/0/text")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if !status.is_success() || body.pointer("/result/structuredContent/tasks") != Some(&json!([])) {
        return Err(BenchError::Failed(format!(
            "a poll did not read an empty inbox (HTTP {status}): {body}"
        )));
    }
    Ok(text)
}

async fn start_variant(
    dir: &std::path::Path,
    mode: SweepMode,
    options: EmptyPollOptions,
) -> Result<Variant, BenchError> {
    let path = dir.join(format!(
        "{}-{}.db",
        mode.name().replace(' ', "-"),
        uuid::Uuid::new_v4()
    ));
    let store = tokio::task::spawn_blocking(move || SqliteStore::open(&path))
        .await
        .map_err(|e| failed("opening the database", e))?
        .map_err(|e| failed("opening the database", e))?;
    let config = ServiceConfig {
        task_sweep: mode,
        ..ServiceConfig::default()
    };
    let app = AppState::new(Arc::new(store.clone()), Arc::new(SystemClock), config);
    let project = admin::create_project(&app.admin(), "bench", None)
        .await
        .map_err(|e| failed("creating the project", e))?;
    let spec = TokenSpec::Agent {
        name: "bench".into(),
        scopes: vec!["osfoundry:read".into()],
    };
    let token = admin::create_token(&app.admin(), &project.project_id, spec)
        .await
        .map_err(|e| failed("minting a token", e))?
        .token;
    let agent = authenticate(&app.tokens, Some(&token))
        .await
        .and_then(Identity::into_agent)
        .map_err(|e| failed("checking the token", e))?;
    seed_history(&store, &project.project_id, options).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| failed("binding a loopback port", e))?;
    let address = listener
        .local_addr()
        .map_err(|e| failed("reading the port", e))?;
    let server = tokio::spawn(relay_service::serve(
        listener,
        app.clone(),
        std::future::pending(),
    ));
    Ok(Variant {
        mode,
        app,
        url: format!("http://{address}/mcp"),
        token,
        agent,
        // Link 0 holds history like every other, and nothing open.
        link: link_id(0),
        server,
        http_samples: Vec::with_capacity(options.polls),
        batch_p50s: Vec::new(),
        in_process_samples: Vec::with_capacity(options.polls),
        inbox_text_bytes: 0,
    })
}

/// The id of link `n` of the seeded history (deterministic, so every variant polls the same).
fn link_id(n: usize) -> String {
    uuid::Uuid::from_u128(0xbe_0000_0000 + n as u128).to_string()
}

async fn seed_history(
    store: &SqliteStore,
    project_id: &str,
    options: EmptyPollOptions,
) -> Result<(), BenchError> {
    let now = SystemClock.now();
    let created = |i: usize| {
        // All older than a day and finished: history, nothing due for a sweep.
        now.saturating_sub(TASK_TTL * 2)
            .saturating_sub(Duration::from_secs(i as u64))
    };
    let links: Vec<ChatLinkRecord> = (0..options.links)
        .map(|n| ChatLinkRecord {
            id: link_id(n),
            project_id: project_id.to_owned(),
            host: HostKind::Claude,
            event_subscription: false,
            created_at: created(options.tasks + n),
        })
        .collect();
    let finished = [
        TaskStatus::Completed,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
        TaskStatus::Expired,
    ];
    let tasks: Vec<TaskRecord> = (0..options.tasks)
        .map(|i| {
            let at = created(i);
            let mut task = TaskRecord::queued(
                link_id(i % options.links),
                format!(
                    "Historical task {i}: summarise the feedback of week {}",
                    i % 52
                ),
                format!("bench-{i}"),
                at,
                TASK_TTL,
            );
            task.status = finished[i % finished.len()];
            task.claim_id = Some(uuid::Uuid::from_u128(i as u128).to_string());
            task.result = Some(format!("Result {i}"));
            task.finished_at = Some(at.saturating_add(Duration::from_secs(60)));
            task.updated_at = at.saturating_add(Duration::from_secs(60));
            task
        })
        .collect();
    store
        .import_chat_history(links, tasks)
        .await
        .map_err(|e| failed("seeding the history", e))
}

async fn run_http_batch(
    client: &reqwest::Client,
    variant: &Variant,
    polls: usize,
    concurrency: usize,
) -> Result<Vec<Duration>, BenchError> {
    let per_worker = polls.div_ceil(concurrency);
    let workers = (0..concurrency).map(|worker| {
        let count = per_worker.min(polls.saturating_sub(worker * per_worker));
        async move {
            let mut samples = Vec::with_capacity(count);
            for _ in 0..count {
                let start = Stopwatch::start();
                poll(client, variant).await?;
                samples.push(start.elapsed());
            }
            Ok::<_, BenchError>(samples)
        }
    });
    let mut samples = Vec::with_capacity(polls);
    for result in futures_util::future::join_all(workers).await {
        samples.extend(result?);
    }
    Ok(samples)
}

async fn run_in_process_batch(
    variant: &Variant,
    polls: usize,
) -> Result<Vec<Duration>, BenchError> {
    let mut samples = Vec::with_capacity(polls);
    for _ in 0..polls {
        let start = Stopwatch::start();
        let inbox = agent::list_tasks(&variant.app.tasks, &variant.agent, &variant.link)
            .await
            .map_err(|e| failed("in-process poll", e))?;
        samples.push(start.elapsed());
        if !inbox.tasks.is_empty() {
            return Err(BenchError::Failed("the polled inbox is not empty".into()));
        }
    }
    Ok(samples)
}

fn check(options: EmptyPollOptions) -> Result<(), BenchError> {
    let in_range = |what: &str, value: usize, min: usize, max: usize| {
        if (min..=max).contains(&value) {
            Ok(())
        } else {
            Err(BenchError::Invalid(format!(
                "{what} must be {min} to {max}, got {value}"
            )))
        }
    };
    in_range("--polls", options.polls, 1, MAX_BENCH_COUNT)?;
    in_range("--tasks", options.tasks, 0, MAX_BENCH_COUNT)?;
    in_range("--links", options.links, 1, MAX_BENCH_COUNT)?;
    in_range(
        "--concurrency",
        options.concurrency,
        1,
        MAX_BENCH_CONCURRENCY,
    )
}

/// Runs the three variants side by side (and a second no-sweep service, whose difference from
/// the first is the noise) and reports their figures.
pub async fn empty_polls(options: EmptyPollOptions) -> Result<EmptyPollReport, BenchError> {
    check(options)?;
    let dir = tempfile::tempdir().map_err(|e| failed("creating a temporary directory", e))?;
    let mut variants = Vec::new();
    for mode in SweepMode::ALL.into_iter().chain([SweepMode::Off]) {
        variants.push(start_variant(dir.path(), mode, options).await?);
    }
    let client = graphrelay_net::client_builder()
        .map_err(|e| failed("building the HTTP client", e))?
        .pool_max_idle_per_host(MAX_BENCH_CONCURRENCY)
        .build()
        .map_err(|e| failed("building the HTTP client", e))?;
    for variant in &mut variants {
        let text = poll(&client, variant).await?;
        variant.inbox_text_bytes = text.len();
        run_http_batch(&client, variant, WARMUP_POLLS, options.concurrency).await?;
        run_in_process_batch(variant, WARMUP_POLLS).await?;
    }
    let counters = measure_http(&client, &mut variants, options).await?;
    measure_in_process(&mut variants, options).await?;
    let baseline = variants
        .first()
        .map(|v| v.batch_p50s.clone())
        .unwrap_or_default();
    let mut report = EmptyPollReport {
        options,
        variants: Vec::new(),
        noise: Quartiles::default(),
    };
    for (variant, (guard_checks, write_transactions)) in variants.into_iter().zip(counters) {
        variant.app.shutdown.cancel();
        variant.server.abort();
        if report.variants.len() == SweepMode::ALL.len() {
            report.noise = Quartiles::of(round_ratios(&variant.batch_p50s, &baseline));
            continue;
        }
        report.variants.push(VariantReport {
            mode: variant.mode,
            http: Latency::of(variant.http_samples),
            in_process: Latency::of(variant.in_process_samples),
            guard_checks,
            write_transactions,
            inbox_text_bytes: variant.inbox_text_bytes,
            round_ratio: Quartiles::of(round_ratios(&variant.batch_p50s, &baseline)),
        });
    }
    Ok(report)
}

/// The measured HTTP polls, in rounds that rotate which variant goes first; returns each
/// variant's guard reads and write transactions during them.
async fn measure_http(
    client: &reqwest::Client,
    variants: &mut [Variant],
    options: EmptyPollOptions,
) -> Result<Vec<(u64, u64)>, BenchError> {
    let counters: Vec<_> = variants
        .iter()
        .map(|v| {
            (
                v.app.tasks.sweeps.guard_checks(),
                v.app.tasks.sweeps.write_transactions(),
            )
        })
        .collect();
    let mut done = 0;
    let mut turn = 0;
    while done < options.polls {
        let batch = BATCH_POLLS.min(options.polls - done);
        // Rotate who goes first, so no variant always follows the same neighbour.
        for offset in 0..variants.len() {
            let index = (turn + offset) % variants.len();
            let variant = &variants[index];
            let samples = run_http_batch(client, variant, batch, options.concurrency).await?;
            variants[index]
                .batch_p50s
                .push(Latency::of(samples.clone()).p50_us);
            variants[index].http_samples.extend(samples);
        }
        done += batch;
        turn += 1;
    }
    // The HTTP polls' share of the counters, before the in-process polls add theirs.
    Ok(variants
        .iter()
        .zip(counters)
        .map(|(variant, (checks, writes))| {
            (
                variant.app.tasks.sweeps.guard_checks() - checks,
                variant.app.tasks.sweeps.write_transactions() - writes,
            )
        })
        .collect())
}

/// The measured in-process polls, round by round.
async fn measure_in_process(
    variants: &mut [Variant],
    options: EmptyPollOptions,
) -> Result<(), BenchError> {
    let mut done = 0;
    while done < options.polls {
        let batch = BATCH_POLLS.min(options.polls - done);
        for variant in variants.iter_mut() {
            let samples = run_in_process_batch(variant, batch).await?;
            variant.in_process_samples.extend(samples);
        }
        done += batch;
    }
    Ok(())
}

fn round_ratios(own: &[f64], baseline: &[f64]) -> Vec<f64> {
    own.iter()
        .zip(baseline)
        .filter(|(_, base)| **base > 0.0)
        .map(|(own, base)| own / base)
        .collect()
}
