//! `relay bench sessions`: what 2025-era MCP sessions cost a running `relay serve`. Agent
//! tokens each open sessions with `initialize`; the report gives the service's resident memory
//! before and after, the sessions the caps keep, and the KiB each kept session costs.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::loadtest::{LoadError, fail, prepare, rss_kib, start_service};

/// What to measure.
#[derive(Debug, Clone)]
pub struct SessionBenchOptions {
    /// Agent tokens that open sessions.
    pub tokens: usize,
    /// `initialize` calls per token.
    pub per_token: usize,
    /// The `relay` binary to start as the service.
    pub server: PathBuf,
}

/// What was measured.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionBenchReport {
    /// Agent tokens.
    pub tokens: usize,
    /// `initialize` calls answered with a session.
    pub opened: usize,
    /// Sessions the caps keep open at the end (per token and in all).
    pub kept: usize,
    /// The service's resident memory before the first `initialize`, in KiB.
    pub rss_before_kib: u64,
    /// Its resident memory after the last one, in KiB.
    pub rss_after_kib: u64,
}

impl SessionBenchReport {
    /// Memory per kept session, in KiB.
    pub fn kib_per_session(&self) -> f64 {
        self.rss_after_kib.saturating_sub(self.rss_before_kib) as f64 / self.kept.max(1) as f64
    }
}

impl fmt::Display for SessionBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "sessions: {} initialize calls from {} tokens, {} sessions kept by the caps",
            self.opened, self.tokens, self.kept
        )?;
        writeln!(
            f,
            "service RSS: {:.1} MiB before, {:.1} MiB after (+{:.1} MiB), {:.2} KiB per kept session",
            self.rss_before_kib as f64 / 1024.0,
            self.rss_after_kib as f64 / 1024.0,
            self.rss_after_kib.saturating_sub(self.rss_before_kib) as f64 / 1024.0,
            self.kib_per_session()
        )
    }
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"relay-bench","version":"1"}}}"#;

/// Initialize calls in flight at once.
const CONCURRENCY: usize = 16;

/// Runs the benchmark.
pub async fn sessions(options: SessionBenchOptions) -> Result<SessionBenchReport, LoadError> {
    let dir = tempfile::tempdir().map_err(fail)?;
    let db = dir.path().join("relay.db");
    let agents: Vec<String> = prepare(&db, options.tokens.max(1))
        .await?
        .into_iter()
        .map(|d| d.agent)
        .collect();
    let service = start_service(&options.server, &db).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_before_kib = rss_kib(service.pid)?;
    let mut calls: Vec<String> = Vec::new();
    for agent in &agents {
        calls.extend(std::iter::repeat_n(agent.clone(), options.per_token));
    }
    let mut opened = 0;
    for batch in calls.chunks(CONCURRENCY) {
        let mut in_flight = tokio::task::JoinSet::new();
        for token in batch {
            let http = service.http.clone();
            let url = format!("{}/mcp", service.base);
            let token = token.clone();
            in_flight.spawn(async move {
                http.post(url)
                    .bearer_auth(token)
                    .header("accept", "application/json, text/event-stream")
                    .header("content-type", "application/json")
                    .body(INITIALIZE)
                    .send()
                    .await
                    .map(|r| r.headers().contains_key("mcp-session-id"))
            });
        }
        while let Some(answer) = in_flight.join_next().await {
            if answer.map_err(fail)?.map_err(fail)? {
                opened += 1;
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_after_kib = rss_kib(service.pid)?;
    let per_token = options
        .per_token
        .min(relay_service::http::mcp::legacy_sessions::DEFAULT_SESSIONS_PER_AGENT);
    let kept = (agents.len() * per_token)
        .min(relay_service::http::mcp::legacy_sessions::DEFAULT_MAX_SESSIONS);
    let mut server = service.server;
    let _ = server.kill().await;
    Ok(SessionBenchReport {
        tokens: agents.len(),
        opened,
        kept,
        rss_before_kib,
        rss_after_kib,
    })
}
