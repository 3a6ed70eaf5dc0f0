//! The service's edges: every HTTP route (MCP, the console, the owner API, the desktop API, the
//! OAuth endpoints and pages, the probes and metrics) and the plumbing they share (listener,
//! origin checks, rate limits, request log, metrics), over one [`AppState`].
//!
//! A handler decodes, calls one function of the domain with the context that function takes
//! (`app.runs`, `app.tasks`, `app.tokens`, `app.clients`), and encodes; the domain never sees
//! [`AppState`]. The router needs no sockets ([`router`] is a tower service), so tests and the
//! simulator can call it in-process; [`serve`] runs it on a TCP listener.

pub mod answers;
pub mod console;
pub mod desktop_api;
pub mod edge;
pub mod listener;
pub mod mcp;
pub mod metrics;
pub mod oauth;
pub mod ops;
pub mod origin;
pub mod owner_api;
pub mod proxy;
pub mod rate;
pub mod request_log;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio_util::sync::CancellationToken;

use crate::auth::Tokens;
use crate::chat_tasks::sweep::SweepMode;
use crate::chat_tasks::{TaskConfig, Tasks};
use crate::held::Held;
use crate::oauth::clients::Clients;
use crate::presence::Presence;
use crate::runs::{RunConfig, Runs};
use crate::store::Store;
use crate::store::notify::{LocalNotifier, Notifier};
use crate::{runs, store};
use relay_protocol::clock::Clock;

/// How often [`serve`] fails runs whose desktop went silent (reads also check lazily).
pub const SILENCE_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// How long a stop waits for requests in flight by default (`--drain-timeout`).
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(8);

/// Where the MCP endpoint is served (the OAuth metadata names it as the protected resource).
pub const MCP_PATH: &str = "/mcp";

/// Tunables of the service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceConfig {
    /// A running run with no control poll for this long is failed.
    pub silence_timeout: Duration,
    /// When agents are told to look at a run (about one desktop poll interval).
    pub poll_hint: Duration,
    /// The public base URL (e.g. `https://relay.example.com`) used in OAuth metadata and as
    /// the relay's own origin and host ([`origin`]). `relay serve` always sets it (by default
    /// `http://` plus the bound address); unset (in-process) the metadata's base comes from
    /// each request's Host and only loopback hosts and origins are taken.
    pub public_url: Option<String>,
    /// How long an OAuth access token works (refresh tokens rotate and last 30 days).
    pub access_token_ttl: Duration,
    /// Development mode: client ID metadata documents may live on loopback or private
    /// addresses, and on plain http.
    pub dev: bool,
    /// Origins besides the public URL's whose requests are taken (normalised, like
    /// `https://app.example.com`; `relay serve --allowed-origin`).
    pub allowed_origins: Vec<String>,
    /// Whether every peer is a proxy that sets `X-Forwarded-Host`, `-Proto` and `-For`
    /// (`relay serve --trust-proxy`); otherwise only [`ServiceConfig::trusted_proxies`]' are
    /// read.
    pub trust_proxy: bool,
    /// The address ranges of the proxies in front (`relay serve --trusted-proxy`): their
    /// `X-Forwarded-*` headers count, and their connections are not capped per address.
    pub trusted_proxies: Vec<proxy::Cidr>,
    /// How long a stop waits for requests in flight once held ones are answered
    /// (`relay serve --drain-timeout`); past it the connections left are closed.
    pub drain_timeout: Duration,
    /// Whether the listener is on a loopback address, so the loopback names with its port are
    /// served hosts besides the public URL's (set by `relay serve` from the bound address).
    pub listen_loopback: bool,
    /// How long a chat task's claim holds before the task returns to the queue; zero
    /// disables leases (a claim then holds until the task finishes, is cancelled or expires).
    pub task_lease: Duration,
    /// How reads sweep lapsed leases and expired tasks; anything but the default is for the
    /// empty-poll benchmark.
    pub task_sweep: SweepMode,
    /// How many runs may wait in the queue, per agent and per project.
    pub queue_quota: store::QueueQuota,
    /// How fast one token may make requests (`None`: no limit).
    pub rate_limit: Option<rate::RateLimit>,
    /// How long and how many connections the service keeps.
    pub connections: listener::ConnectionLimits,
    /// How many 2025-era MCP sessions may be open, and how long an unused one lives.
    pub mcp_sessions: mcp::legacy_sessions::SessionLimits,
    /// How often the console's task list refreshes itself (15 s); shorter in tests.
    pub console_refresh: Duration,
    /// How often the console's runs list refreshes itself (5 s); shorter in tests.
    pub console_runs_refresh: Duration,
    /// How often `relay serve` runs the database's structure check (`quick_check`) while it
    /// serves; a failure marks it not ready (`/readyz`). `None`: never.
    pub db_check_interval: Option<Duration>,
    /// How long one structure check may run.
    pub db_check_limit: Duration,
    /// Claim chat tasks by read-then-write instead of one conditional write, so the race test
    /// can show it catches the double claims that causes. Exists only with the `naive-claim`
    /// feature, which only the service's own tests enable.
    #[cfg(feature = "naive-claim")]
    pub naive_claim: bool,
}

impl ServiceConfig {
    /// The run tunables in it.
    pub fn run_config(&self) -> RunConfig {
        RunConfig {
            silence_timeout: self.silence_timeout,
            poll_hint: self.poll_hint,
            queue_quota: self.queue_quota,
        }
    }

    /// Which peers speak for their clients.
    pub fn proxies(&self) -> proxy::TrustedProxies {
        proxy::TrustedProxies {
            any: self.trust_proxy,
            ranges: self.trusted_proxies.clone(),
        }
    }

    /// The chat task tunables in it.
    pub fn task_config(&self) -> TaskConfig {
        TaskConfig {
            lease: self.task_lease,
            sweep: self.task_sweep,
            #[cfg(feature = "naive-claim")]
            naive_claim: self.naive_claim,
        }
    }
}

impl Default for ServiceConfig {
    fn default() -> Self {
        // The domain's tunables default where the domain says.
        let runs = RunConfig::default();
        let tasks = TaskConfig::default();
        ServiceConfig {
            silence_timeout: runs.silence_timeout,
            poll_hint: runs.poll_hint,
            public_url: None,
            access_token_ttl: crate::oauth::DEFAULT_ACCESS_TOKEN_TTL,
            dev: false,
            allowed_origins: Vec::new(),
            trust_proxy: false,
            trusted_proxies: Vec::new(),
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            listen_loopback: false,
            task_lease: tasks.lease,
            task_sweep: tasks.sweep,
            queue_quota: runs.queue_quota,
            rate_limit: Some(rate::RateLimit::default()),
            connections: listener::ConnectionLimits::default(),
            mcp_sessions: mcp::legacy_sessions::SessionLimits::default(),
            console_refresh: console::TASKS_REFRESH,
            console_runs_refresh: console::RUNS_REFRESH,
            db_check_interval: Some(ops::DEFAULT_DB_CHECK_INTERVAL),
            db_check_limit: relay_sqlite::DEFAULT_CHECK_LIMIT,
            #[cfg(feature = "naive-claim")]
            naive_claim: false,
        }
    }
}

/// What the edges hold: the domain's contexts they call with, and their own state (MCP
/// sessions, rate limits, the authorization server's throttles, metrics).
pub struct AppState {
    /// Durable state.
    pub store: Arc<dyn Store>,
    /// The only source of time.
    pub clock: Arc<dyn Clock>,
    /// Tunables.
    pub config: ServiceConfig,
    /// Cancelled when the service shuts down; ends open MCP sessions, streams and waits.
    pub shutdown: CancellationToken,
    /// Wakes long polls (`sync` with a wait, `get_graph_run` with a wait).
    pub notifier: Arc<dyn Notifier>,
    /// Checking bearer tokens.
    pub tokens: Tokens,
    /// Runs, shared sessions and the desktops' presence.
    pub runs: Runs,
    /// Linked chat tasks.
    pub tasks: Tasks,
    /// OAuth clients: registrations and metadata documents.
    pub clients: Clients,
    /// The open 2025-era MCP sessions.
    pub mcp_sessions: mcp::legacy_sessions::McpSessions,
    /// Each token's request rate.
    pub rate: rate::RateLimiter,
    /// The authorization server's endpoints' in-memory state (sign-in throttle, registrations).
    pub oauth: oauth::OAuthState,
    /// Requests answered and claims made (`/metrics`).
    pub metrics: metrics::Metrics,
    /// What the last periodic structure check found wrong with the database, if anything.
    pub db_damage: ops::DbDamage,
    /// The listener's connections and refusals (`/metrics`, the drain line).
    pub front: Arc<listener::FrontStats>,
    /// Cancelled once a stop has drained (or when the service ends): what must outlive the
    /// shutdown's answers, rmcp's own streams, ends then.
    pub drained: CancellationToken,
}

impl AppState {
    /// State over `store` and `clock`.
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, config: ServiceConfig) -> Arc<Self> {
        Self::with_notifier(store, clock, config, Arc::new(LocalNotifier::default()))
    }

    /// State over `store` and `clock` whose wake-ups go through `notifier` (across replicas,
    /// say).
    pub fn with_notifier(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        config: ServiceConfig,
        notifier: Arc<dyn Notifier>,
    ) -> Arc<Self> {
        let shutdown = CancellationToken::new();
        let runs = Runs {
            store: store.clone(),
            clock: clock.clone(),
            notifier: notifier.clone(),
            presence: Presence::new(store.clone(), clock.clone()),
            held: Held::new(store.clone(), shutdown.clone()),
            config: config.run_config(),
        };
        let tasks = Tasks {
            store: store.clone(),
            clock: clock.clone(),
            notifier: notifier.clone(),
            config: config.task_config(),
            sweeps: Arc::default(),
        };
        Arc::new(AppState {
            tokens: Tokens::new(store.clone(), clock.clone()),
            clients: Clients::new(store.clone(), clock.clone(), config.dev),
            runs,
            tasks,
            store,
            clock,
            shutdown,
            notifier,
            mcp_sessions: mcp::legacy_sessions::McpSessions::new(config.mcp_sessions),
            rate: rate::RateLimiter::new(config.rate_limit),
            oauth: oauth::OAuthState::default(),
            metrics: metrics::Metrics::default(),
            db_damage: ops::DbDamage::default(),
            front: Arc::default(),
            drained: CancellationToken::new(),
            config,
        })
    }
}

impl AppState {
    /// The context of the operator's actions (`relay admin`) over this state's store and
    /// clock.
    pub fn admin(&self) -> crate::admin::Admin {
        crate::admin::Admin {
            store: self.store.clone(),
            clock: self.clock.clone(),
        }
    }
}

/// The whole service as one router: `/mcp`, the desktop API, the owner API and the OAuth
/// authorization server, every route behind the Origin and Host checks ([`origin`]); the
/// probes beside them; all of it counted ([`metrics`]) and traced with a request id
/// ([`request_log`]).
pub fn router(app: Arc<AppState>) -> Router {
    router_with_tools(app, mcp::standard_tools())
}

/// [`router`] with `tools` as its MCP tools (a test adds one of its own).
pub fn router_with_tools(app: Arc<AppState>, tools: mcp::tools::Registry) -> Router {
    let routes = Router::new()
        .merge(mcp::routes(app.clone(), tools))
        .merge(desktop_api::routes(app.clone()))
        .merge(owner_api::routes(app.clone()))
        .merge(oauth::routes(app.clone()))
        .merge(console::routes(app.clone()));
    // Last, so that it covers every route merged above, including any added later; the
    // probes stay outside the Origin and Host checks (they come with the orchestrator's Host).
    let checks = origin::CheckOrigin::new(&app.config);
    let probes = request_log::layer(ops::routes(app.clone()), app.clone(), None);
    request_log::layer(routes, app, Some(checks)).merge(probes)
}

/// Serves [`router`] on `listener` until `shutdown` resolves, sweeping silent runs meanwhile;
/// then drains: stops accepting, answers every held request (long polls, waiting
/// `get_graph_run` calls, event streams) with what it has, lets requests in flight finish for
/// up to [`ServiceConfig::drain_timeout`], and logs one line saying what was drained.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let sweeper = tokio::spawn(sweep_silent_runs(app.clone()));
    let checker = tokio::spawn(ops::check_database_periodically(app.clone()));
    let front = listener::Front {
        limits: app.config.connections,
        proxies: app.config.proxies(),
        stats: app.front.clone(),
        drain_timeout: app.config.drain_timeout,
    };
    let draining = Arc::new(std::sync::Mutex::new(None));
    let stop = {
        let (app, draining) = (app.clone(), draining.clone());
        async move {
            shutdown.await;
            let held = Draining::begin(&app);
            *draining.lock().unwrap_or_else(|p| p.into_inner()) = Some(held);
            // Held requests answer what they have now; open MCP streams end.
            app.shutdown.cancel();
        }
    };
    let result = listener::serve(listener, router(app.clone()), front, stop).await;
    app.shutdown.cancel();
    app.drained.cancel();
    sweeper.abort();
    checker.abort();
    let began = draining.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let (Ok(drained), Some(began)) = (&result, began) {
        began.log(*drained);
    }
    result.map(|_| ())
}

/// What was held when a stop began, for the drain line.
struct Draining {
    syncs: usize,
    waits: usize,
    streams: usize,
    watch: relay_protocol::clock::Stopwatch,
}

impl Draining {
    fn begin(app: &AppState) -> Draining {
        use crate::held::HeldKind;
        Draining {
            syncs: app.runs.held.count(HeldKind::Sync),
            waits: app.runs.held.count(HeldKind::RunWait),
            streams: app.metrics.streams(),
            watch: relay_protocol::clock::Stopwatch::start(),
        }
    }

    /// The one line a stop leaves: what it answered and closed, and what it had to cut.
    fn log(self, drained: listener::Drained) {
        let took_ms = u64::try_from(self.watch.elapsed().as_millis()).unwrap_or(u64::MAX);
        if drained.cut == 0 {
            tracing::info!(
                held_syncs = self.syncs,
                waiting_get_graph_run = self.waits,
                event_streams = self.streams,
                connections = drained.connections,
                took_ms,
                "drained: {} held long polls, {} waiting get_graph_run calls and {} event streams answered; {} connections closed",
                self.syncs,
                self.waits,
                self.streams,
                drained.connections
            );
        } else {
            tracing::warn!(
                held_syncs = self.syncs,
                waiting_get_graph_run = self.waits,
                event_streams = self.streams,
                connections = drained.connections,
                cut = drained.cut,
                took_ms,
                "drain timed out: {} held long polls, {} waiting get_graph_run calls and {} event streams answered; {} of {} connections still busy were closed (raise --drain-timeout if requests need longer)",
                self.syncs,
                self.waits,
                self.streams,
                drained.cut,
                drained.connections
            );
        }
    }
}

async fn sweep_silent_runs(app: Arc<AppState>) {
    let mut interval = tokio::time::interval(SILENCE_SWEEP_INTERVAL);
    loop {
        interval.tick().await;
        if let Err(error) = runs::fail_silent_runs(&app.runs).await {
            tracing::error!(%error, "sweeping silent runs failed");
        }
        if let Err(error) = crate::oauth::sweep(app.store.as_ref(), app.clock.now()).await {
            tracing::error!(%error, "sweeping lapsed sign-in and OAuth state failed");
        }
    }
}
