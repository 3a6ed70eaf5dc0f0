//! `relay serve`: the service on a TCP listener.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use relay_protocol::clock::SystemClock;
use relay_service::store::SqliteStore;
use relay_service::{self as service, AppState, ServiceConfig};

#[derive(Debug, Args)]
pub(crate) struct DbArg {
    /// The service's SQLite database (created and migrated if needed).
    #[arg(long, env = "RELAY_DB", default_value = "relay.db", global = true)]
    pub(crate) db: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8787")]
    pub(crate) listen: SocketAddr,
    #[command(flatten)]
    pub(crate) db: DbArg,
    /// Public base URL for OAuth metadata, like https://relay.example.com (default: derived
    /// from each request's Host).
    #[arg(long, value_parser = parse_public_url)]
    pub(crate) public_url: Option<String>,
    /// Minutes a running run may go without a control poll before it is failed.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) silence_timeout_minutes: u64,
    /// Seconds a chat task's claim holds before the task returns to the queue (0: no lease).
    #[arg(long, alias = "lease-seconds", default_value_t = 1800, value_parser = clap::value_parser!(u64).range(0..=MAX_TASK_LEASE_SECS))]
    pub(crate) task_lease_seconds: u64,
}

/// The longest lease `--task-lease-seconds` takes: a task expires after a day anyway.
const MAX_TASK_LEASE_SECS: u64 = 24 * 60 * 60;

pub(crate) async fn open_state(db: &Path, config: ServiceConfig) -> Result<Arc<AppState>> {
    let path = db.to_owned();
    let store = tokio::task::spawn_blocking(move || SqliteStore::open(&path))
        .await
        .context("opening the database was interrupted")?
        .with_context(|| format!("cannot use the database {}", db.display()))?;
    Ok(AppState::new(
        Arc::new(store),
        Arc::new(SystemClock),
        config,
    ))
}

/// Runs the service until Ctrl-C.
pub(crate) async fn run(args: ServeArgs) -> Result<()> {
    let config = ServiceConfig {
        silence_timeout: Duration::from_secs(args.silence_timeout_minutes * 60),
        public_url: args.public_url,
        task_lease: Duration::from_secs(args.task_lease_seconds),
        ..ServiceConfig::default()
    };
    let app = open_state(&args.db.db, config).await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}: is another service using it?",
                args.listen
            )
        })?;
    let address = listener.local_addr()?;
    tracing::info!(db = %args.db.db.display(), "serving MCP at http://{address}/mcp");
    let shutdown = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
        tracing::info!("shutting down");
    };
    service::serve(listener, app, shutdown)
        .await
        .context("the server stopped with an error")
}

/// Why `--public-url` was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct PublicUrlError(String);

/// `--public-url`: an absolute http(s) URL with a host and no query or fragment, without its
/// trailing slash. It goes into OAuth metadata and the quoted `WWW-Authenticate` challenge, so
/// anything else would hand MCP clients an address they cannot use.
fn parse_public_url(text: &str) -> Result<String, PublicUrlError> {
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

#[cfg(test)]
mod tests {
    use super::parse_public_url;

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
