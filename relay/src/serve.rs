//! `relay serve`: the service on a TCP listener.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use relay_protocol::clock::SystemClock;
use relay_service::http::listener::{
    ConnectionLimits, DEFAULT_BODY_READ_TIMEOUT, DEFAULT_HEADER_READ_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_PER_ADDRESS, Front,
};
use relay_service::http::mcp::legacy_sessions::{
    DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_IDLE, DEFAULT_SESSIONS_PER_AGENT, SessionLimits,
};
use relay_service::http::proxy::Cidr;
use relay_service::http::rate::{DEFAULT_RATE_BURST, DEFAULT_RATE_PER_SECOND, RateLimit};
use relay_service::runs::{DEFAULT_QUEUED_PER_AGENT, DEFAULT_QUEUED_PER_PROJECT};
use relay_service::store::postgres::notify::PgNotifier;
use relay_service::store::postgres::{is_postgres_url, redact};
use relay_service::store::{PostgresStore, QueueQuota, SqliteStore, StoreError};
use relay_service::{self as service, AppState, ServiceConfig};

#[derive(Debug, Args)]
pub(crate) struct DbArg {
    /// The service's database: a SQLite file (created and migrated if needed; default
    /// relay.db) or a PostgreSQL URL, postgres://user@host/db (also from RELAY_DATABASE_URL,
    /// which must then agree with RELAY_DB), which several replicas may share.
    #[arg(long, env = "RELAY_DB", global = true)]
    db: Option<String>,
}

impl DbArg {
    /// The database named by `--db`, `RELAY_DB`, `RELAY_DATABASE_URL`, the config file's `db`,
    /// else `relay.db`. `RELAY_DB` and `RELAY_DATABASE_URL` naming different databases is an
    /// error: one of them was meant, and a replica must not quietly use the other.
    pub(crate) fn target(&self) -> Result<String> {
        let url = database_variables()?;
        Ok(self
            .db
            .clone()
            .or(url)
            .unwrap_or_else(|| "relay.db".to_owned()))
    }
}

/// `RELAY_DATABASE_URL`, after checking that `RELAY_DB` names no other database.
pub(crate) fn database_variables() -> Result<Option<String>> {
    let variable = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let (db, url) = (variable("RELAY_DB"), variable("RELAY_DATABASE_URL"));
    if let (Some(db), Some(url)) = (&db, &url)
        && db != url
    {
        anyhow::bail!(
            "RELAY_DB ({}) and RELAY_DATABASE_URL ({}) name different databases: unset the one not meant (or give --db)",
            redact(db),
            redact(url)
        );
    }
    Ok(url)
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "RELAY_LISTEN", default_value = "127.0.0.1:8787")]
    pub(crate) listen: SocketAddr,
    #[command(flatten)]
    pub(crate) db: DbArg,
    /// The address clients reach the service at, like https://relay.example.com: the OAuth
    /// metadata names it, and it is the only origin and host served besides loopback names on
    /// a loopback listener (default: http:// plus the bound listen address).
    #[arg(long, env = "RELAY_PUBLIC_URL", value_parser = parse_public_url)]
    pub(crate) public_url: Option<String>,
    /// How long an OAuth access token works, like 1h, 15m or 30s (refresh tokens rotate and
    /// last 30 days).
    #[arg(long, env = "RELAY_ACCESS_TOKEN_TTL", default_value = "1h", value_parser = parse_access_token_ttl)]
    pub(crate) access_token_ttl: Duration,
    /// Development mode: client ID metadata documents may be on plain http and on loopback or
    /// private addresses. Never on a public service.
    #[arg(long, env = "RELAY_DEV")]
    pub(crate) dev: bool,
    /// An origin whose web pages may call the service besides the public URL's, like
    /// https://console.example.com (repeatable).
    #[arg(long = "allowed-origin", env = "RELAY_ALLOWED_ORIGIN", value_delimiter = ',', value_name = "ORIGIN", value_parser = parse_allowed_origin)]
    pub(crate) allowed_origins: Vec<String>,
    /// Take X-Forwarded-Host, X-Forwarded-Proto and X-Forwarded-For from every peer (only when
    /// the service is reachable through its proxy alone; otherwise clients could claim any host
    /// or address). Prefer --trusted-proxy, which also lifts the per-address connection cap.
    #[arg(long, env = "RELAY_TRUST_PROXY")]
    pub(crate) trust_proxy: bool,
    /// The address range of a proxy in front, like 10.0.0.0/8 or 127.0.0.1 (repeatable; the
    /// variable takes a comma-separated list): its X-Forwarded-* headers count, its connections
    /// are not capped per address, and per-client limits (requests in flight, sign-in throttle,
    /// registrations) count the address it forwards.
    #[arg(
        long = "trusted-proxy",
        env = "RELAY_TRUSTED_PROXY",
        value_delimiter = ',',
        value_name = "CIDR"
    )]
    pub(crate) trusted_proxies: Vec<Cidr>,
    /// How long a stop (SIGTERM, SIGHUP, Ctrl-C) waits for requests in flight, like 8s or 1m,
    /// once held long polls and waiting get_graph_run calls are answered; past it the
    /// connections left are closed.
    #[arg(long, env = "RELAY_DRAIN_TIMEOUT", default_value = "8s", value_parser = parse_drain_timeout)]
    pub(crate) drain_timeout: Duration,
    /// Minutes a running run may go without a control poll before it is failed.
    #[arg(long, env = "RELAY_SILENCE_TIMEOUT_MINUTES", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) silence_timeout_minutes: u64,
    /// Seconds a chat task's claim holds before the task returns to the queue (0: no lease).
    #[arg(long, env = "RELAY_TASK_LEASE_SECONDS", alias = "lease-seconds", default_value_t = 1800, value_parser = clap::value_parser!(u64).range(0..=MAX_TASK_LEASE_SECS))]
    pub(crate) task_lease_seconds: u64,
    /// Serve GET /metrics (Prometheus text: requests by route and status, latencies, runs and
    /// tasks by status, claims, held long polls, wake-up lag) on this separate address, like
    /// 127.0.0.1:9187; off unless given. Keep it off the public network: it is not behind the
    /// Host and Origin checks.
    #[arg(long, env = "RELAY_METRICS_LISTEN", value_name = "ADDR")]
    pub(crate) metrics_listen: Option<SocketAddr>,
    /// How often the SQLite database's structure is checked (quick_check) while serving, like
    /// 1h or 30m; a failure makes /readyz answer not ready (0: never).
    #[arg(long, env = "RELAY_DB_CHECK_INTERVAL", default_value = "1h", value_parser = parse_db_check_interval)]
    pub(crate) db_check_interval: Duration,
    /// How long one quick_check (at start and periodically) may run before it is left
    /// unfinished with a warning, like 60s.
    #[arg(long, env = "RELAY_DB_CHECK_LIMIT", default_value = "60s", value_parser = parse_db_check_limit)]
    pub(crate) db_check_limit: Duration,
    /// How log lines are written to stderr: text, or json (one object a line, with the
    /// request's id, method and route under "span"). RUST_LOG picks what is logged (default:
    /// the service's own lines at info, one access line per request, libraries at warn).
    #[arg(long, env = "RELAY_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    /// Let RUST_LOG raise the MCP library's lines above warn: at debug they hold every
    /// message, tool arguments and results included. Without it they never do, at any level.
    #[arg(long, env = "RELAY_LOG_MCP_MESSAGES")]
    pub(crate) log_mcp_messages: bool,
    /// A TOML file of settings: each key a flag's name without the dashes in front
    /// (public-url = "https://relay.example.com", trusted-proxy = ["10.0.0.0/8"]).
    #[arg(long, env = "RELAY_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Print the settings in force (each with where it came from) as a config file, and exit.
    #[arg(long)]
    pub(crate) print_config: bool,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object a line.
    Json,
}

/// `--db-check-interval`: 0 (never) or 10 s to 7 days.
fn parse_db_check_interval(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text, Duration::ZERO, Duration::from_secs(7 * 86_400))?;
    if !duration.is_zero() && duration < Duration::from_secs(10) {
        return Err(format!("`{text}` is too often: 0 (never) or at least 10s"));
    }
    Ok(duration)
}

/// `--drain-timeout`: 1 s to 1 hour.
fn parse_drain_timeout(text: &str) -> Result<Duration, String> {
    parse_duration(text, Duration::from_secs(1), Duration::from_secs(3600))
}

/// `--db-check-limit`: 1 s to 1 hour.
fn parse_db_check_limit(text: &str) -> Result<Duration, String> {
    parse_duration(text, Duration::from_secs(1), Duration::from_secs(3600))
}

/// What the service holds under load: sessions, connections, quotas (docs/limits.md).
#[derive(Debug, Args)]
pub(crate) struct LimitArgs {
    /// 2025-era MCP sessions open at once, in all (past it the busiest token's oldest ends).
    #[arg(long, env = "RELAY_MAX_MCP_SESSIONS", default_value_t = DEFAULT_MAX_SESSIONS as u64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_mcp_sessions: u64,
    /// 2025-era MCP sessions one agent token may hold (past it its oldest ends).
    #[arg(long, env = "RELAY_MAX_MCP_SESSIONS_PER_AGENT", default_value_t = DEFAULT_SESSIONS_PER_AGENT as u64, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    max_mcp_sessions_per_agent: u64,
    /// Seconds an unused MCP session lives.
    #[arg(long, env = "RELAY_MCP_SESSION_IDLE_SECONDS", default_value_t = DEFAULT_SESSION_IDLE.as_secs(), value_parser = clap::value_parser!(u64).range(1..=86_400))]
    mcp_session_idle_seconds: u64,
    /// Seconds a request's headers may take from the connection opening or its last answer
    /// ending (also how long an idle keep-alive connection stays open).
    #[arg(long, env = "RELAY_HEADER_READ_TIMEOUT_SECONDS", default_value_t = DEFAULT_HEADER_READ_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..=600))]
    header_read_timeout_seconds: u64,
    /// Seconds a request's body may take after its headers.
    #[arg(long, env = "RELAY_BODY_READ_TIMEOUT_SECONDS", default_value_t = DEFAULT_BODY_READ_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..=3_600))]
    body_read_timeout_seconds: u64,
    /// Connections open at once, in all.
    #[arg(long, env = "RELAY_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS as u64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections: u64,
    /// Connections open at once from one client address; behind a --trusted-proxy, requests
    /// in flight of one forwarded client (past it: 429), the proxy itself uncapped.
    #[arg(long, env = "RELAY_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = DEFAULT_MAX_PER_ADDRESS as u64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections_per_address: u64,
    /// Runs one agent may have queued and not yet started.
    #[arg(long, env = "RELAY_MAX_QUEUED_PER_AGENT", default_value_t = DEFAULT_QUEUED_PER_AGENT, value_parser = clap::value_parser!(u64).range(1..))]
    max_queued_per_agent: u64,
    /// Runs one project may have queued and not yet started.
    #[arg(long, env = "RELAY_MAX_QUEUED_PER_PROJECT", default_value_t = DEFAULT_QUEUED_PER_PROJECT, value_parser = clap::value_parser!(u64).range(1..))]
    max_queued_per_project: u64,
    /// Requests a second one token may make, sustained (0: no limit).
    #[arg(long, env = "RELAY_RATE_PER_TOKEN", default_value_t = DEFAULT_RATE_PER_SECOND)]
    rate_per_token: u32,
    /// Requests one token may make at once after a quiet spell.
    #[arg(long, env = "RELAY_RATE_BURST", default_value_t = DEFAULT_RATE_BURST, value_parser = clap::value_parser!(u32).range(1..))]
    rate_burst: u32,
}

impl LimitArgs {
    /// These limits in `config`.
    fn apply(&self, config: &mut ServiceConfig) {
        let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        config.mcp_sessions = SessionLimits {
            per_agent: count(self.max_mcp_sessions_per_agent),
            total: count(self.max_mcp_sessions),
            idle: Duration::from_secs(self.mcp_session_idle_seconds),
        };
        config.connections = ConnectionLimits {
            header_read_timeout: Duration::from_secs(self.header_read_timeout_seconds),
            body_read_timeout: Duration::from_secs(self.body_read_timeout_seconds),
            max_connections: count(self.max_connections),
            max_per_address: count(self.max_connections_per_address),
        };
        config.queue_quota = QueueQuota {
            per_agent: self.max_queued_per_agent,
            per_project: self.max_queued_per_project,
        };
        config.rate_limit = (self.rate_per_token > 0).then_some(RateLimit {
            per_second: self.rate_per_token,
            burst: self.rate_burst,
        });
    }
}

/// Descriptors kept for the database, logs and the listener beside the connections.
const RESERVED_FILES: u64 = 64;

/// Raises the soft limit on open files to the hard one (connections are files); returns the
/// limit in force, if it could be read.
fn raise_open_file_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write this one struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    Some(limit.rlim_cur)
}

/// The longest lease `--task-lease-seconds` takes: a task expires after a day anyway.
const MAX_TASK_LEASE_SECS: u64 = 24 * 60 * 60;

/// The PostgreSQL channel the replicas of one database wake each other on.
const WAKEUP_CHANNEL: &str = "relay_wakeups";

pub(crate) async fn open_state(db: &DbArg, config: ServiceConfig) -> Result<Arc<AppState>> {
    let target = db.target()?;
    if is_postgres_url(&target) {
        let store = PostgresStore::connect(&target).await.map_err(|error| {
            let refused = matches!(error, StoreError::Unusable(_));
            let context = if refused {
                format!("cannot use the PostgreSQL database {}", redact(&target))
            } else {
                format!(
                    "cannot use the PostgreSQL database {} (is it running, and the URL right?)",
                    redact(&target)
                )
            };
            anyhow::Error::new(error).context(context)
        })?;
        // Wake-ups (long-poll pickup, cancel push, waiting reads) cross replicas.
        let notifier = PgNotifier::start(&target, WAKEUP_CHANNEL)
            .await
            .context("cannot listen for wake-ups on the PostgreSQL database")?;
        return Ok(AppState::with_notifier(
            Arc::new(store),
            Arc::new(SystemClock),
            config,
            notifier,
        ));
    }
    let path = PathBuf::from(&target);
    let limit = config.db_check_limit;
    let store = tokio::task::spawn_blocking(move || SqliteStore::open_checked(&path, limit))
        .await
        .context("opening the database was interrupted")?
        .with_context(|| format!("cannot use the database {target}"))?;
    Ok(AppState::new(
        Arc::new(store),
        Arc::new(SystemClock),
        config,
    ))
}

impl ServeArgs {
    /// The service's tunables these flags give, for a listener bound at `address`.
    fn config(&self, address: SocketAddr) -> ServiceConfig {
        let mut config = ServiceConfig {
            silence_timeout: Duration::from_secs(self.silence_timeout_minutes * 60),
            public_url: Some(
                self.public_url
                    .clone()
                    .unwrap_or_else(|| format!("http://{address}")),
            ),
            allowed_origins: self.allowed_origins.clone(),
            trust_proxy: self.trust_proxy,
            trusted_proxies: self.trusted_proxies.clone(),
            drain_timeout: self.drain_timeout,
            listen_loopback: address.ip().is_loopback(),
            access_token_ttl: self.access_token_ttl,
            dev: self.dev,
            task_lease: Duration::from_secs(self.task_lease_seconds),
            db_check_interval: Some(self.db_check_interval).filter(|every| !every.is_zero()),
            db_check_limit: self.db_check_limit,
            ..ServiceConfig::default()
        };
        self.limits.apply(&mut config);
        config
    }
}

/// Runs the service until SIGTERM, SIGHUP or Ctrl-C, then drains it.
pub(crate) async fn run(args: ServeArgs) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}: is another service using it?",
                args.listen
            )
        })?;
    let address = listener.local_addr()?;
    warn_at_start(&args, address);
    let config = args.config(address);
    let max_connections = config.connections.max_connections;
    let files = raise_open_file_limit();
    if files.is_some_and(|files| files < max_connections as u64 + RESERVED_FILES) {
        tracing::warn!(
            open_files = files,
            max_connections,
            "the process may open fewer files than --max-connections needs; raise `ulimit -n` or lower --max-connections"
        );
    }
    let public_url = config.public_url.clone().unwrap_or_default();
    let drain = args.drain_timeout;
    let app = open_state(&args.db, config).await?;
    // Before the line that tells callers the service is up, so /metrics is up by then too.
    if let Some(metrics_address) = args.metrics_listen {
        serve_metrics(metrics_address, &app).await?;
    }
    tracing::info!(db = %redact(&args.db.target()?), %public_url, "serving MCP at http://{address}/mcp");
    let shutdown = async move {
        let which = stop_signal().await;
        tracing::info!(
            signal = which,
            "stopping on {which}: no new connections, held requests answered now, requests in flight finish within {} s (--drain-timeout)",
            drain.as_secs()
        );
    };
    service::serve(listener, app, shutdown)
        .await
        .context("the server stopped with an error")
}

/// The settings an operator should hear about before the service takes requests: a listener on
/// every address that serves only its own address's name, and `--dev`.
fn warn_at_start(args: &ServeArgs, address: SocketAddr) {
    if args.public_url.is_none() && address.ip().is_unspecified() {
        tracing::warn!(
            "listening on {address} without --public-url: only requests for http://{address} are served; set --public-url to the address clients use"
        );
    }
    if args.dev {
        tracing::warn!(
            "development mode (--dev): client metadata documents are fetched from plain http and from loopback, private and other internal addresses, so anyone who can open /oauth/authorize can make this service send requests into its network; never use --dev on a service others can reach"
        );
    }
}

/// Serves `/metrics` on its own listener until the service stops.
async fn serve_metrics(address: SocketAddr, app: &Arc<relay_service::AppState>) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| {
            format!("cannot listen for metrics on {address}: is another service using it?")
        })?;
    tracing::info!(
        "metrics at http://{}{}",
        listener.local_addr()?,
        relay_service::http::metrics::METRICS_PATH
    );
    let stop = app.drained.clone();
    // Scraped while the service drains, and not counted among its connections.
    let front = Front::new(ConnectionLimits::default(), Duration::from_secs(1));
    tokio::spawn(relay_service::http::listener::serve(
        listener,
        relay_service::http::metrics::routes(app.clone()),
        front,
        async move { stop.cancelled().await },
    ));
    Ok(())
}

/// Resolves on Ctrl-C or (on Unix) SIGTERM or SIGHUP, with the signal's name. SIGHUP stops
/// like SIGTERM: the service reads its settings only at start, so a restart (by the
/// supervisor) is how new ones take effect.
async fn stop_signal() -> &'static str {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (term, hangup) = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) {
            (Ok(term), Ok(hangup)) => (term, hangup),
            (Err(error), _) | (_, Err(error)) => {
                tracing::warn!(%error, "cannot listen for SIGTERM and SIGHUP; only Ctrl-C stops the service");
                ctrl_c.await;
                return "SIGINT";
            }
        };
        let (mut term, mut hangup) = (term, hangup);
        tokio::select! {
            () = ctrl_c => "SIGINT",
            _ = term.recv() => "SIGTERM",
            _ = hangup.recv() => "SIGHUP",
        }
    }
    #[cfg(not(unix))]
    {
        ctrl_c.await;
        "Ctrl-C"
    }
}

/// A duration like `90s`, `10m`, `1h` or `2d` (a bare number is seconds), between `min` and
/// `max`.
pub(crate) fn parse_duration(text: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration: write it like 90s, 10m, 1h or 2d"))?;
    let seconds = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1,
        "m" | "min" | "mins" => 60,
        "h" | "hour" | "hours" => 3600,
        "d" | "day" | "days" => 86_400,
        other => return Err(format!("unknown unit `{other}`: use s, m, h or d")),
    };
    let duration = Duration::from_secs(number.saturating_mul(seconds));
    if duration < min || duration > max {
        return Err(format!(
            "`{text}` is out of range: between {} s and {} s",
            min.as_secs(),
            max.as_secs()
        ));
    }
    Ok(duration)
}

/// `--access-token-ttl`: 1 s to 1 day.
fn parse_access_token_ttl(text: &str) -> Result<Duration, String> {
    parse_duration(text, Duration::from_secs(1), Duration::from_secs(86_400))
}

/// `sign-in-link --ttl`: 10 s to 1 day.
pub(crate) fn parse_sign_in_link_ttl(text: &str) -> Result<Duration, String> {
    parse_duration(text, Duration::from_secs(10), Duration::from_secs(86_400))
}

/// Why `--public-url` was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct PublicUrlError(String);

/// `--public-url`: an absolute http(s) URL with a host and no query or fragment, without its
/// trailing slash. It goes into OAuth metadata and the quoted `WWW-Authenticate` challenge, so
/// anything else would hand MCP clients an address they cannot use.
pub(crate) fn parse_public_url(text: &str) -> Result<String, PublicUrlError> {
    let url = reqwest::Url::parse(text).map_err(|e| {
        PublicUrlError(format!(
            "{e}; give the address MCP clients reach the service at, like https://relay.example.com"
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(PublicUrlError(format!(
            "the scheme must be http or https, not {}",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(PublicUrlError("the URL has no host".into()));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(PublicUrlError(
            "the URL may not have a query (?) or fragment (#)".into(),
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(PublicUrlError(
            "the URL may not carry a user name or password".into(),
        ));
    }
    let text = url.as_str().trim_end_matches('/');
    if let Some(c) = text
        .chars()
        .find(|c| !c.is_ascii_graphic() || matches!(c, '"' | '\\' | '<' | '>'))
    {
        return Err(PublicUrlError(format!("the URL may not contain {c:?}")));
    }
    Ok(text.to_owned())
}

/// `--allowed-origin`: an absolute http(s) origin (`scheme://host[:port]`, no path), normalised.
fn parse_allowed_origin(text: &str) -> Result<String, relay_service::http::origin::OriginError> {
    relay_service::http::origin::normalise_origin(text)
}

#[cfg(test)]
mod tests {
    use super::{parse_allowed_origin, parse_duration, parse_public_url};
    use std::time::Duration;

    #[test]
    fn durations_take_a_unit_and_a_range() {
        let any = |t: &str| parse_duration(t, Duration::ZERO, Duration::from_secs(1_000_000));
        assert_eq!(any("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(any("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(any("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(any("2d"), Ok(Duration::from_secs(172_800)));
        assert_eq!(any("45"), Ok(Duration::from_secs(45)));
        assert!(any("ten minutes").is_err());
        assert!(any("5w").is_err());
        assert!(any("").is_err());
        assert!(parse_duration("2h", Duration::ZERO, Duration::from_secs(3600)).is_err());
    }

    #[test]
    fn an_allowed_origin_is_an_http_origin_without_a_path() {
        assert_eq!(
            parse_allowed_origin("HTTPS://Console.Example.com:443").as_deref(),
            Ok("https://console.example.com")
        );
        for bad in [
            "not-a-url",
            "null",
            "https://a.example/app",
            "ws://a.example",
        ] {
            assert!(parse_allowed_origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn public_url_must_be_an_absolute_http_url_and_loses_its_trailing_slash() {
        assert_eq!(
            parse_public_url("https://relay.example.com/").as_deref(),
            Ok("https://relay.example.com")
        );
        assert_eq!(
            parse_public_url("http://10.0.0.2:8787/relay/").as_deref(),
            Ok("http://10.0.0.2:8787/relay")
        );
        for bad in [
            "not a url",
            "relay.example.com",
            "ftp://relay.example.com",
            "https://relay.example.com/?x=1",
            "https://relay.example.com/#top",
            "https://user:secret@relay.example.com",
            "file:///etc",
        ] {
            assert!(parse_public_url(bad).is_err(), "{bad}");
        }
        // It goes inside the quoted WWW-Authenticate parameter.
        let quoted = parse_public_url("https://a\"b.example/");
        assert!(
            quoted
                .as_ref()
                .is_err_and(|e| e.to_string().contains("'\"'")),
            "{quoted:?}"
        );
    }
}
