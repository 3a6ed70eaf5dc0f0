//! `relay bench replicas`: several `relay serve` processes on one database, driven over
//! loopback HTTP. It measures what running past one machine rests on:
//! - claims: chat tasks each raced by several concurrent claims spread over the replicas,
//!   as claims answered a second, and the double claims (a task claimed twice; must be 0);
//! - pickup across replicas: a run queued through one replica's MCP reaches a desktop
//!   long-polling another (queued → the held sync answered with it);
//! - held long polls: each replica holds its share of desktops' syncs, and its resident memory
//!   before and with them.
//!
//! With a PostgreSQL URL it runs the replicas on it (give it a throwaway database: the bench
//! adds its projects, tokens and tasks); SQLite is one replica on a fresh file, for the same
//! figures side by side.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use futures_util::StreamExt;
use relay_protocol::clock::{Stopwatch, SystemClock};
use relay_service::admin::{self, TokenSpec};
use relay_service::chat_tasks::owner::{self, Acting, AssignRequest};
use relay_service::store::{PostgresStore, SqliteStore, Store};
use relay_service::{AppState, ServiceConfig};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::loadtest::{
    Desktop, LoadError, Service, fail, held_syncs, poll_loop, prepare_desktop, rss_kib,
    start_service, steady_rss_kib,
};
use crate::stats::Summary;

/// Claims in flight at once, over all replicas.
const CLAIMS_IN_FLIGHT: usize = 64;
/// Setup writes in flight at once.
const SETUP_IN_FLIGHT: usize = 16;

/// What to measure.
#[derive(Debug, Clone)]
pub struct ReplicaOptions {
    /// `relay serve` processes (1 on SQLite).
    pub replicas: usize,
    /// The database: a PostgreSQL URL, or `None` for a fresh SQLite file.
    pub postgres: Option<String>,
    /// Chat tasks raced for.
    pub tasks: usize,
    /// Concurrent claims per task.
    pub claims_per_task: usize,
    /// Desktops long-polling each replica.
    pub desktops_per_replica: usize,
    /// Runs queued (each through a replica other than its desktop's).
    pub runs: usize,
    /// The `relay` binary to start.
    pub server: PathBuf,
}

/// One replica's held long polls and memory.
#[derive(Debug, Clone, Copy)]
pub struct HeldFigures {
    /// Syncs it held (its own `/metrics` count).
    pub held: usize,
    /// Its resident memory before any desktop connected, in KiB.
    pub rss_idle_kib: u64,
    /// With every sync held, in KiB.
    pub rss_held_kib: u64,
}

/// What was measured.
#[derive(Debug, Clone)]
pub struct ReplicaReport {
    /// `postgres` or `sqlite`.
    pub store: &'static str,
    /// Replicas.
    pub replicas: usize,
    /// Tasks raced for.
    pub tasks: usize,
    /// Claims answered (tasks × claims per task).
    pub claims: usize,
    /// How long the claims took, in seconds.
    pub claim_seconds: f64,
    /// Tasks claimed more than once (distinct claims, or more than one fresh claim).
    pub double_claims: usize,
    /// Pickup latencies in seconds.
    pub pickup: Summary,
    /// Per replica.
    pub held: Vec<HeldFigures>,
}

impl ReplicaReport {
    /// Claims answered a second.
    pub fn claims_per_second(&self) -> f64 {
        self.claims as f64 / self.claim_seconds.max(1e-9)
    }

    /// The report as one JSON object (latencies in ms, memory in KiB).
    pub fn to_json(&self) -> Value {
        let ms = |seconds: f64| (seconds * 1_000_000.0).round() / 1000.0;
        json!({
            "store": self.store,
            "replicas": self.replicas,
            "tasks": self.tasks,
            "claims": self.claims,
            "claims_per_second": self.claims_per_second().round(),
            "double_claims": self.double_claims,
            "pickup_ms": {"n": self.pickup.n, "p50": ms(self.pickup.p50), "p95": ms(self.pickup.p95), "max": ms(self.pickup.max)},
            "held": self.held.iter().map(|h| json!({
                "held": h.held,
                "rss_idle_kib": h.rss_idle_kib,
                "rss_held_kib": h.rss_held_kib,
            })).collect::<Vec<_>>(),
        })
    }
}

impl fmt::Display for ReplicaReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} replica(s) on {}", self.replicas, self.store)?;
        writeln!(
            f,
            "  claims: {} tasks x {} claims in {:.2} s = {:.0} claims/s, {} double claims",
            self.tasks,
            self.claims / self.tasks.max(1),
            self.claim_seconds,
            self.claims_per_second(),
            self.double_claims
        )?;
        writeln!(
            f,
            "  pickup across replicas, n={}: p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms",
            self.pickup.n,
            self.pickup.p50 * 1000.0,
            self.pickup.p95 * 1000.0,
            self.pickup.max * 1000.0
        )?;
        for (n, held) in self.held.iter().enumerate() {
            writeln!(
                f,
                "  replica {n}: {} syncs held; memory {:.1} MiB idle, {:.1} MiB held ({:.1} KiB per held sync)",
                held.held,
                held.rss_idle_kib as f64 / 1024.0,
                held.rss_held_kib as f64 / 1024.0,
                held.rss_held_kib.saturating_sub(held.rss_idle_kib) as f64
                    / held.held.max(1) as f64
            )?;
        }
        Ok(())
    }
}

/// Runs the benchmark.
pub async fn replicas(options: ReplicaOptions) -> Result<ReplicaReport, LoadError> {
    let dir = tempfile::tempdir().map_err(fail)?;
    let sqlite = dir.path().join("relay.db");
    let (store, db): (Arc<dyn Store>, String) = match &options.postgres {
        Some(url) => (
            Arc::new(PostgresStore::connect(url).await.map_err(fail)?),
            url.clone(),
        ),
        None if options.replicas == 1 => (
            Arc::new(SqliteStore::open(&sqlite).map_err(fail)?),
            sqlite.display().to_string(),
        ),
        None => return Err(LoadError(
            "replicas share a PostgreSQL database: give --db postgres://…, or 1 replica for SQLite"
                .into(),
        )),
    };
    let app = AppState::new(store, Arc::new(SystemClock), ServiceConfig::default());
    let desktops = prepare_desktops(&app, options.replicas * options.desktops_per_replica).await?;
    let race = prepare_tasks(&app, options.tasks).await?;
    let mut services = Vec::new();
    for _ in 0..options.replicas {
        services.push(start_service(&options.server, Path::new(&db)).await?);
    }
    let watch = Stopwatch::start();
    let double_claims = claim_race(&services, &race, options.claims_per_task).await?;
    let claim_seconds = watch.elapsed().as_secs_f64();
    let (held, pickup) = hold_and_pick_up(&services, &desktops, options.runs).await?;
    for service in &mut services {
        let _ = service.server.kill().await;
    }
    Ok(ReplicaReport {
        store: if options.postgres.is_some() {
            "postgres"
        } else {
            "sqlite"
        },
        replicas: options.replicas,
        tasks: options.tasks,
        claims: options.tasks * options.claims_per_task,
        claim_seconds,
        double_claims,
        pickup,
        held,
    })
}

/// `count` desktops, made `SETUP_IN_FLIGHT` at a time.
async fn prepare_desktops(app: &AppState, count: usize) -> Result<Vec<Desktop>, LoadError> {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let made: Vec<Result<Desktop, LoadError>> = futures_util::stream::iter(0..count)
        .map(|i| {
            let name = format!("replicas-{}-{i}", &tag[..8]);
            async move { prepare_desktop(app, &name).await }
        })
        .buffered(SETUP_IN_FLIGHT)
        .collect()
        .await;
    made.into_iter().collect()
}

/// The tasks raced for: one project, a chat link, an agent token, `count` tasks.
struct Race {
    link: String,
    agent: String,
    tasks: Vec<String>,
}

async fn prepare_tasks(app: &AppState, count: usize) -> Result<Race, LoadError> {
    let project = admin::create_project(&app.admin(), "replicas-claims", Some("replicas-claims"))
        .await
        .map_err(fail)?
        .project_id;
    let scopes = vec!["osfoundry:read".into(), "osfoundry:run".into()];
    let agent = admin::create_token(
        &app.admin(),
        &project,
        TokenSpec::Agent {
            name: "claude".into(),
            scopes,
        },
    )
    .await
    .map_err(fail)?
    .token;
    let link = owner::create_link(&app.tasks, Acting::Operator, &project, "claude", false)
        .await
        .map_err(fail)?
        .chat_link_id;
    let tasks: Vec<Result<String, LoadError>> = futures_util::stream::iter(0..count)
        .map(|n| {
            let link = &link;
            async move {
                let key = format!("race-{n}");
                let request = AssignRequest {
                    chat_link_id: link,
                    goal: "Reply to the landlord",
                    idempotency_key: &key,
                };
                let assigned = owner::assign_task(&app.tasks, Acting::Operator, request)
                    .await
                    .map_err(fail)?;
                Ok(assigned.task.task_id.to_string())
            }
        })
        .buffered(SETUP_IN_FLIGHT)
        .collect()
        .await;
    Ok(Race {
        link,
        agent,
        tasks: tasks.into_iter().collect::<Result<_, _>>()?,
    })
}

/// Each task claimed by `per_task` concurrent calls spread over the replicas; the tasks with
/// more than one claim.
async fn claim_race(
    services: &[Service],
    race: &Race,
    per_task: usize,
) -> Result<usize, LoadError> {
    let in_flight = (CLAIMS_IN_FLIGHT / per_task.max(1)).max(1);
    let outcomes: Vec<Result<bool, LoadError>> =
        futures_util::stream::iter(race.tasks.iter().enumerate())
            .map(|(n, task)| async move {
                let racing =
                    (0..per_task).map(|k| claim(&services[(n + k) % services.len()], race, task));
                let answers = futures_util::future::join_all(racing).await;
                let answers: Vec<Value> = answers.into_iter().collect::<Result<_, _>>()?;
                let fresh = answers.iter().filter(|a| a["replayed"] == false).count();
                let ids: BTreeSet<&str> = answers
                    .iter()
                    .filter_map(|a| a["claim_id"].as_str())
                    .collect();
                Ok(fresh != 1 || ids.len() != 1)
            })
            .buffer_unordered(in_flight)
            .collect()
            .await;
    let mut doubles = 0;
    for outcome in outcomes {
        doubles += usize::from(outcome?);
    }
    Ok(doubles)
}

/// One `claim_linked_chat_task` call; its structured answer.
async fn claim(service: &Service, race: &Race, task: &str) -> Result<Value, LoadError> {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "claim_linked_chat_task",
            "arguments": {"chat_link_id": race.link, "task_id": task},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "relay-bench", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}
            }}
    });
    let answer = service
        .http
        .post(format!("{}/mcp", service.base))
        .bearer_auth(&race.agent)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "claim_linked_chat_task")
        .json(&body)
        .send()
        .await
        .map_err(fail)?;
    let status = answer.status();
    let text = answer.text().await.map_err(fail)?;
    let message = serde_json::from_str::<Value>(&text).ok().or_else(|| {
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .find_map(|data| {
                serde_json::from_str::<Value>(data.trim())
                    .ok()
                    .filter(|m| m.get("id").is_some())
            })
    });
    match message.map(|m| m["result"]["structuredContent"].clone()) {
        Some(result) if result.is_object() => Ok(result),
        _ => Err(LoadError(format!("a claim answered {status}: {text}"))),
    }
}

/// Each replica's share of the desktops long-polls it; once all are held, each replica's
/// memory is read and `runs` runs are queued, each through a replica other than its desktop's.
async fn hold_and_pick_up(
    services: &[Service],
    desktops: &[Desktop],
    runs: usize,
) -> Result<(Vec<HeldFigures>, Summary), LoadError> {
    let mut idle = Vec::new();
    for service in services {
        idle.push(rss_kib(service.pid)?);
    }
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let stop = tokio_util::sync::CancellationToken::new();
    let mut pollers = tokio::task::JoinSet::new();
    for (n, desktop) in desktops.iter().enumerate() {
        let service = &services[n % services.len()];
        pollers.spawn(poll_loop(
            service.http.clone(),
            service.base.clone(),
            desktop.project.clone(),
            desktop.token.clone(),
            Arc::new(AtomicUsize::new(0)),
            latencies.clone(),
            stop.clone(),
        ));
    }
    let share = desktops.len() / services.len().max(1);
    let mut held = Vec::new();
    for (service, rss_idle_kib) in services.iter().zip(idle) {
        let count = held_syncs(&service.http, &service.metrics, share).await?;
        held.push((count, rss_idle_kib));
    }
    let mut figures = Vec::new();
    for (service, (count, rss_idle_kib)) in services.iter().zip(held) {
        figures.push(HeldFigures {
            held: count,
            rss_idle_kib,
            rss_held_kib: steady_rss_kib(service.pid).await?,
        });
    }
    queue_elsewhere(services, desktops, runs).await?;
    let waiting = Stopwatch::start();
    while latencies.lock().await.len() < runs && waiting.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    pollers.abort_all();
    let samples = latencies.lock().await.clone();
    Ok((figures, Summary::of(&samples)))
}

/// Queues `runs` runs 20 ms apart, run `i` for desktop `i` (spread), through the replica after
/// its desktop's.
async fn queue_elsewhere(
    services: &[Service],
    desktops: &[Desktop],
    runs: usize,
) -> Result<(), LoadError> {
    for i in 0..runs {
        let n = (i * 7919) % desktops.len().max(1);
        let desktop = &desktops[n];
        let service = &services[(n + 1) % services.len()];
        crate::loadtest::queue_one(
            &service.http,
            &service.base,
            &desktop.agent,
            i,
            &format!("replicas-{i:08}"),
        )
        .await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
