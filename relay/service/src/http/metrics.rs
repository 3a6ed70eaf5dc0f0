//! `GET /metrics`: what the service did and holds, in Prometheus' text format (version 0.0.4),
//! served only on the operator's separate `--metrics-listen` address (never beside the public
//! routes).
//!
//! A small registry of its own rather than a metrics crate: a handful of families, each
//! rendered by hand. Counters and histograms are this replica's since it started (Prometheus
//! sums replicas); the run and task gauges are read from the store at each scrape, so every
//! replica reports the same database-wide figures.
//!
//! Route labels are the matched route's template (`/api/desktop/commands/:id/started`), never
//! the raw path, so ids cannot multiply the series; a request no route matched is `unmatched`.

mod process;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{Method, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::held::HeldKind;
use crate::http::AppState;
use crate::http::listener::Refused;
use crate::store::histogram::Histogram;
use crate::store::{OpenCounts, StoreStats};
use relay_protocol::clock::Timestamp;

/// The metrics path.
pub const METRICS_PATH: &str = "/metrics";

/// The route label of a request no route matched (a 404, or one the Host check refused before
/// routing).
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// Upper bounds (seconds) of the request latency buckets: from a cached read to a long poll's
/// full 25 s wait and past a `get_graph_run`'s longest, 45 s
/// ([`crate::runs::MAX_GET_WAIT`]).
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 45.0, 60.0, 120.0,
];

/// The routes and methods a replica counts at most: past it new (route, method) pairs are
/// counted as `unmatched` (the route templates are a fixed set; this only bounds a surprise).
const MAX_SERIES: usize = 256;

/// The `_bucket`, `_sum` and `_count` lines of `name`, with `labels` (`key="value"` pairs,
/// comma-separated, or empty) on each.
fn render_histogram(histogram: &Histogram, text: &mut String, name: &str, labels: &str) {
    let sep = if labels.is_empty() { "" } else { "," };
    let mut cumulative = 0;
    for (bound, count) in histogram.bounds().iter().zip(histogram.counts()) {
        cumulative += count;
        let _ = writeln!(
            text,
            "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
        );
    }
    let _ = writeln!(
        text,
        "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
        histogram.count()
    );
    let braces = |labels: &str| {
        if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        }
    };
    let _ = writeln!(text, "{name}_sum{} {}", braces(labels), histogram.sum());
    let _ = writeln!(text, "{name}_count{} {}", braces(labels), histogram.count());
}

/// One route and method's answers: how many per status, and how long they took; and the
/// requests whose client went away before the answer.
#[derive(Debug)]
struct RouteStats {
    statuses: BTreeMap<u16, u64>,
    latency: Histogram,
    aborted: u64,
}

/// Requests answered since start, by route template and method.
#[derive(Debug, Default)]
pub struct Requests(Mutex<BTreeMap<(String, &'static str), RouteStats>>);

impl Requests {
    /// Counts one answer of `route` to `method` with `status` after `took`.
    pub fn record(&self, route: &str, method: &Method, status: u16, took: Duration) {
        self.with(route, method, |stats| {
            *stats.statuses.entry(status).or_default() += 1;
            stats.latency.observe(took);
        });
    }

    /// Counts one request of `route` to `method` whose client went away before its answer.
    pub fn record_aborted(&self, route: &str, method: &Method) {
        self.with(route, method, |stats| stats.aborted += 1);
    }

    fn with(&self, route: &str, method: &Method, change: impl FnOnce(&mut RouteStats)) {
        let mut routes = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut key = (route_label(route), method_label(method));
        if !routes.contains_key(&key) && routes.len() >= MAX_SERIES {
            key.0 = UNMATCHED_ROUTE.to_owned();
        }
        let stats = routes.entry(key).or_insert_with(|| RouteStats {
            statuses: BTreeMap::new(),
            latency: Histogram::new(&LATENCY_BUCKETS),
            aborted: 0,
        });
        change(stats);
    }

    fn render(&self, text: &mut String) {
        let routes = self.0.lock().unwrap_or_else(|p| p.into_inner());
        family(
            text,
            "relay_http_requests_total",
            "counter",
            "HTTP requests answered, by matched route template, method and status.",
        );
        for ((route, method), stats) in routes.iter() {
            for (status, count) in &stats.statuses {
                let _ = writeln!(
                    text,
                    "relay_http_requests_total{{route=\"{}\",method=\"{method}\",status=\"{status}\"}} {count}",
                    escape(route)
                );
            }
        }
        family(
            text,
            "relay_http_requests_aborted_total",
            "counter",
            "Requests whose client went away before the answer, by matched route template and method.",
        );
        for ((route, method), stats) in routes.iter().filter(|(_, s)| s.aborted > 0) {
            let _ = writeln!(
                text,
                "relay_http_requests_aborted_total{{route=\"{}\",method=\"{method}\"}} {}",
                escape(route),
                stats.aborted
            );
        }
        family(
            text,
            "relay_http_request_duration_seconds",
            "histogram",
            "How long answers took, by matched route template and method (held long polls included).",
        );
        for ((route, method), stats) in routes.iter() {
            let labels = format!("route=\"{}\",method=\"{method}\"", escape(route));
            render_histogram(
                &stats.latency,
                text,
                "relay_http_request_duration_seconds",
                &labels,
            );
        }
    }
}

/// A route template as a label: `{id}` written `:id`, as many Prometheus tools expect (some
/// parsers refuse braces inside label values).
fn route_label(route: &str) -> String {
    route.replace('{', ":").replace('}', "")
}

/// A bounded method label (any other method is `other`).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// A label value with `\`, `"` and newlines escaped, as the text format asks.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// What a claim came to.
#[derive(Debug, Clone, Copy)]
pub enum ClaimOutcome {
    /// This request's claim was written.
    Won,
    /// The claimant already held it and got its claim back.
    Replayed,
    /// Someone else holds it (or it is finished): refused.
    Conflict,
}

/// What is claimed.
#[derive(Debug, Clone, Copy)]
pub enum ClaimKind {
    /// A chat task (`claim_linked_chat_task`).
    ChatTask,
    /// A queued run, by its desktop's `started`.
    RunStart,
}

/// Claims since start, by kind and outcome.
#[derive(Debug, Default)]
pub struct Claims([[AtomicU64; 3]; 2]);

impl Claims {
    /// Counts one claim.
    pub fn record(&self, kind: ClaimKind, outcome: ClaimOutcome) {
        self.0[kind as usize][outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// How many claims of `kind` came to `outcome`.
    pub fn count(&self, kind: ClaimKind, outcome: ClaimOutcome) -> u64 {
        self.0[kind as usize][outcome as usize].load(Ordering::Relaxed)
    }

    fn render(&self, text: &mut String) {
        family(
            text,
            "relay_claims_total",
            "counter",
            "Claims of chat tasks and of queued runs (a desktop's started), by outcome: won, replayed (the holder again), conflict (refused).",
        );
        for (kind, kind_name) in [
            (ClaimKind::ChatTask, "chat_task"),
            (ClaimKind::RunStart, "run_start"),
        ] {
            for (outcome, name) in [
                (ClaimOutcome::Won, "won"),
                (ClaimOutcome::Replayed, "replayed"),
                (ClaimOutcome::Conflict, "conflict"),
            ] {
                let _ = writeln!(
                    text,
                    "relay_claims_total{{kind=\"{kind_name}\",outcome=\"{name}\"}} {}",
                    self.count(kind, outcome)
                );
            }
        }
    }
}

/// What an MCP tool call came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ToolOutcome {
    /// The tool answered a result.
    Ok,
    /// The tool answered a tool error (`isError`): a refusal of the domain, bad arguments.
    ToolError,
    /// Refused before the tool ran: a missing scope, an unknown tool.
    Refused,
    /// Refused because the token is past its request rate.
    RateLimited,
}

impl ToolOutcome {
    /// The `result` label.
    pub fn label(self) -> &'static str {
        match self {
            ToolOutcome::Ok => "ok",
            ToolOutcome::ToolError => "tool_error",
            ToolOutcome::Refused => "refused",
            ToolOutcome::RateLimited => "rate_limited",
        }
    }
}

/// The `tool` label of a call naming no tool the service has.
pub const UNKNOWN_TOOL: &str = "unknown";

/// MCP tool calls since start, by tool and outcome. Callers pass a tool name of the registry
/// or [`UNKNOWN_TOOL`], so the series are bounded by the registry.
#[derive(Debug, Default)]
pub struct ToolCalls {
    calls: Mutex<BTreeMap<(String, ToolOutcome), u64>>,
    /// Of those, answered by the MCP endpoint's direct path (`http::mcp::direct`).
    direct: AtomicU64,
}

impl ToolCalls {
    /// Counts one call of `tool` that came to `outcome`.
    pub fn record(&self, tool: &str, outcome: ToolOutcome) {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let mut key = (tool.to_owned(), outcome);
        if !calls.contains_key(&key) && calls.len() >= MAX_SERIES {
            key.0 = UNKNOWN_TOOL.to_owned();
        }
        *calls.entry(key).or_default() += 1;
    }

    /// How many calls of `tool` came to `outcome`.
    pub fn count(&self, tool: &str, outcome: ToolOutcome) -> u64 {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        calls.get(&(tool.to_owned(), outcome)).copied().unwrap_or(0)
    }

    /// Counts one call answered by the direct path.
    pub fn count_direct(&self) {
        self.direct.fetch_add(1, Ordering::Relaxed);
    }

    /// How many calls the direct path answered.
    pub fn direct(&self) -> u64 {
        self.direct.load(Ordering::Relaxed)
    }

    fn render(&self, text: &mut String) {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        family(
            text,
            "relay_mcp_tool_calls_total",
            "counter",
            "MCP tool calls, by tool and result: ok, tool_error (the tool answered isError), refused (missing scope, unknown tool), rate_limited.",
        );
        for ((tool, outcome), count) in calls.iter() {
            let _ = writeln!(
                text,
                "relay_mcp_tool_calls_total{{tool=\"{}\",result=\"{}\"}} {count}",
                escape(tool),
                outcome.label()
            );
        }
        drop(calls);
        family(
            text,
            "relay_mcp_direct_tool_calls_total",
            "counter",
            "Of the MCP tool calls, those the service answered without rmcp's per-request service: plain stateless 2026-07-28 calls of read tools.",
        );
        let _ = writeln!(text, "relay_mcp_direct_tool_calls_total {}", self.direct());
    }
}

/// A count of things open now (event streams), each held by an [`OpenGuard`].
#[derive(Debug, Default)]
pub struct OpenCount(Arc<AtomicUsize>);

/// Counts one open thing until dropped.
#[derive(Debug)]
pub struct OpenGuard(Arc<AtomicUsize>);

impl OpenCount {
    /// Counts one more until the guard is dropped.
    pub fn enter(&self) -> OpenGuard {
        self.0.fetch_add(1, Ordering::Relaxed);
        OpenGuard(self.0.clone())
    }

    /// How many are open now.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// This replica's counters, histograms and held requests.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests answered.
    pub requests: Requests,
    /// Claims made.
    pub claims: Claims,
    /// MCP tool calls by outcome.
    pub tools: ToolCalls,
    /// MCP `subscriptions/listen` event streams open now.
    pub streams: OpenCount,
}

impl Metrics {
    /// MCP event streams open now.
    pub fn streams(&self) -> usize {
        self.streams.get()
    }
}

/// The metrics route (for the separate metrics listener).
pub fn routes(app: Arc<AppState>) -> Router {
    Router::new()
        .route(METRICS_PATH, get(metrics))
        .with_state(app)
}

async fn metrics(State(app): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(&app).await,
    )
}

/// `# HELP` and `# TYPE` of a family.
fn family(text: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A gauge family with its samples (`labels` in braces, or empty).
fn gauge(text: &mut String, name: &str, help: &str, samples: &[(&str, u64)]) {
    family(text, name, "gauge", help);
    for (labels, value) in samples {
        let _ = writeln!(text, "{name}{labels} {value}");
    }
}

/// The long-poll syncs held now, read from the metrics text [`render`] wrote (by the load
/// tests and the simulator, which watch a service from outside).
pub fn held_syncs(metrics: &str) -> Option<u64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix("relay_held_requests{kind=\"sync\"} "))
        .and_then(|count| count.trim().parse().ok())
}

/// The metrics as Prometheus text.
pub async fn render(app: &AppState) -> String {
    let mut text = String::new();
    app.metrics.requests.render(&mut text);
    app.metrics.claims.render(&mut text);
    app.metrics.tools.render(&mut text);
    render_store_gauges(app, &mut text).await;
    render_store_stats(&app.store.stats(), &mut text);
    render_held(app, &mut text);
    render_front(app, &mut text);
    render_build_info(&mut text);
    process::render(&mut text);
    text
}

/// A count as a sample value.
fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// What this replica holds open: held requests, event streams, 2025-era MCP sessions, what
/// the held requests wait on, and the wake-ups' lag.
fn render_held(app: &AppState, text: &mut String) {
    gauge(
        text,
        "relay_held_requests",
        "Requests held open now: desktops' long-poll syncs and agents' waiting get_graph_run calls.",
        &[
            (
                "{kind=\"sync\"}",
                count(app.runs.held.count(HeldKind::Sync)),
            ),
            (
                "{kind=\"get_graph_run\"}",
                count(app.runs.held.count(HeldKind::RunWait)),
            ),
        ],
    );
    gauge(
        text,
        "relay_mcp_event_streams",
        "MCP subscriptions/listen event streams open now.",
        &[("", count(app.metrics.streams()))],
    );
    gauge(
        text,
        "relay_mcp_sessions",
        "2025-era MCP sessions (Mcp-Session-Id) open in this replica.",
        &[("", count(app.mcp_sessions.count(None)))],
    );
    gauge(
        text,
        "relay_wakeup_topics",
        "Topics (projects, runs) that held requests wait on in this process.",
        &[("", count(app.notifier.topics()))],
    );
    gauge(
        text,
        "relay_watched_tokens",
        "Tokens of held requests checked together for revocation.",
        &[("", count(app.runs.held.watched_tokens()))],
    );
    if let Some(lag) = app.notifier.lag() {
        family(
            text,
            "relay_notify_lag_seconds",
            "histogram",
            "From a wake-up's NOTIFY on one replica to its arrival at this replica's listener (across machines this includes their clocks' difference).",
        );
        render_histogram(&lag, text, "relay_notify_lag_seconds", "");
    }
}

/// The listener's connections open and refused.
fn render_front(app: &AppState, text: &mut String) {
    gauge(
        text,
        "relay_connections_open",
        "Client connections open now.",
        &[("", count(app.front.open()))],
    );
    family(
        text,
        "relay_connections_refused_total",
        "counter",
        "Connections closed as soon as accepted, by the cap that refused them (max_connections, per_address), and requests a forwarded client made past its cap through a trusted proxy (per_client, answered 429).",
    );
    for reason in Refused::ALL {
        let _ = writeln!(
            text,
            "relay_connections_refused_total{{reason=\"{}\"}} {}",
            reason.label(),
            app.front.refused(reason)
        );
    }
}

/// The store's call latency and connection pool.
fn render_store_stats(stats: &StoreStats, text: &mut String) {
    family(
        text,
        "relay_store_call_duration_seconds",
        "histogram",
        "How long store calls took, waiting for a pooled connection included.",
    );
    render_histogram(
        &stats.latency,
        text,
        "relay_store_call_duration_seconds",
        "",
    );
    gauge(
        text,
        "relay_store_pool_connections",
        "The store's connection pool: the most it opens (max), open now (open), in use by a call now (in_use).",
        &[
            ("{state=\"max\"}", stats.pool_max),
            ("{state=\"open\"}", stats.pool_open),
            ("{state=\"in_use\"}", stats.pool_in_use),
        ],
    );
    gauge(
        text,
        "relay_store_pool_waiting",
        "Store calls waiting for a pooled connection now.",
        &[("", stats.pool_waiting)],
    );
}

/// `relay_build_info`: the version and the schema versions this build speaks.
fn render_build_info(text: &mut String) {
    family(
        text,
        "relay_build_info",
        "gauge",
        "Always 1: the build's version and the database schema versions it speaks.",
    );
    let _ = writeln!(
        text,
        "relay_build_info{{version=\"{}\",sqlite_schema=\"{}\",postgres_schema=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        crate::store::SqliteStore::SCHEMA_VERSION,
        crate::store::PostgresStore::SCHEMA_VERSION,
    );
}

/// The desktops online and the queue's oldest run, database-wide.
fn render_operating_gauges(open: &OpenCounts, now: Timestamp, text: &mut String) {
    gauge(
        text,
        "relay_desktops_online",
        "Projects whose desktop was heard from within two poll intervals, database-wide.",
        &[("", open.desktops_online)],
    );
    let age = open.oldest_queued_at.map_or(0.0, |queued| {
        now.saturating_duration_since(queued).as_secs_f64()
    });
    family(
        text,
        "relay_oldest_queued_run_age_seconds",
        "gauge",
        "How long the oldest run still queued has waited for its desktop (0: none queued), database-wide.",
    );
    let _ = writeln!(text, "relay_oldest_queued_run_age_seconds {age}");
}

/// The open runs and chat tasks by status, read from the store (database-wide); on a store
/// failure `relay_store_up` is 0 and the gauges are left out rather than reported as zero.
async fn render_store_gauges(app: &AppState, text: &mut String) {
    let now = app.clock.now();
    let online_since = now.saturating_sub(crate::presence::OFFLINE_AFTER);
    match app.store.open_counts(online_since).await {
        Ok(open) => {
            render_operating_gauges(&open, now, text);
            gauge(
                text,
                "relay_store_up",
                "1 when the store answered this scrape's reads, 0 when it did not.",
                &[("", 1)],
            );
            gauge(
                text,
                "relay_runs",
                "Runs not finished, by status, database-wide; queued is the queue's depth.",
                &[
                    ("{status=\"queued\"}", open.runs_queued),
                    ("{status=\"running\"}", open.runs_running),
                ],
            );
            gauge(
                text,
                "relay_chat_tasks",
                "Chat tasks not finished, by status, database-wide.",
                &[
                    ("{status=\"queued\"}", open.tasks_queued),
                    ("{status=\"claimed\"}", open.tasks_claimed),
                ],
            );
        }
        Err(error) => {
            tracing::warn!(%error, "metrics: the store did not answer the run counts");
            gauge(
                text,
                "relay_store_up",
                "1 when the store answered this scrape's reads, 0 when it did not.",
                &[("", 0)],
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_renders_cumulative_buckets_sum_and_count() {
        let mut histogram = Histogram::new(&[0.25, 1.0]);
        histogram.observe(Duration::from_millis(250));
        histogram.observe(Duration::from_millis(500));
        histogram.observe(Duration::from_secs(2));
        let mut text = String::new();
        render_histogram(&histogram, &mut text, "x", "route=\"/a\"");
        assert_eq!(
            text,
            "x_bucket{route=\"/a\",le=\"0.25\"} 1\n\
             x_bucket{route=\"/a\",le=\"1\"} 2\n\
             x_bucket{route=\"/a\",le=\"+Inf\"} 3\n\
             x_sum{route=\"/a\"} 2.75\n\
             x_count{route=\"/a\"} 3\n"
        );
    }

    #[test]
    fn routes_past_the_series_bound_are_counted_as_unmatched() {
        let requests = Requests::default();
        for n in 0..MAX_SERIES + 10 {
            requests.record(&format!("/r{n}"), &Method::GET, 200, Duration::ZERO);
        }
        let routes = requests.0.lock().expect("lock");
        assert_eq!(routes.len(), MAX_SERIES + 1);
        let unmatched = &routes[&(UNMATCHED_ROUTE.to_owned(), "GET")];
        assert_eq!(unmatched.statuses[&200], 10);
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
