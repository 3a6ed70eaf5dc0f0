//! Where log lines go and which are written: stderr, as text or JSON; `RUST_LOG` picks what
//! is logged, over a default for each command.
//!
//! `relay serve` by default writes the relay's own lines at INFO (one access line per request
//! among them) and every library's at WARN. The MCP library (rmcp) logs whole messages at
//! DEBUG (tool arguments and results) and a few lines per request at INFO, so unless
//! `--log-mcp-messages` is given it stays at WARN whatever `RUST_LOG` says.

use tracing_subscriber::EnvFilter;

/// `relay serve`'s default filter: the relay's crates (`relay`, `relay_service`, …, and the
/// access lines' `relay::access`) at INFO, everything else at WARN.
pub(crate) const SERVE_DEFAULT: &str = "warn,relay=info";

/// The MCP library's target.
const RMCP: &str = "rmcp";

/// How the log is set up for one command.
pub(crate) struct LogSetup {
    /// The filter when `RUST_LOG` is unset or unreadable.
    pub(crate) default: &'static str,
    /// One JSON object a line instead of text.
    pub(crate) json: bool,
    /// Whether `RUST_LOG` may raise rmcp above WARN.
    pub(crate) mcp_messages: bool,
}

/// The filter of `setup` over `rust_log` (the variable's value, if set).
pub(crate) fn filter(setup: &LogSetup, rust_log: Option<&str>) -> EnvFilter {
    let directives = match rust_log {
        Some(text) if !setup.mcp_messages => text
            .split(',')
            .filter(|directive| !directive.trim_start().starts_with(RMCP))
            .collect::<Vec<_>>()
            .join(","),
        Some(text) => text.to_owned(),
        None => setup.default.to_owned(),
    };
    let filter = EnvFilter::try_new(&directives).unwrap_or_else(|_| EnvFilter::new(setup.default));
    if setup.mcp_messages {
        return filter;
    }
    match format!("{RMCP}=warn").parse() {
        Ok(cap) => filter.add_directive(cap),
        Err(_) => filter,
    }
}

/// Starts logging to stderr as `setup` says.
pub(crate) fn init(setup: &LogSetup) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let log = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Reporting a failed log write goes to stderr too and panics when stderr is gone (a
        // closed pipe); the service must keep serving without its log.
        .log_internal_errors(false)
        .with_env_filter(filter(setup, rust_log.as_deref()));
    if setup.json {
        // One object a line, the event's fields at its top level and the request's span
        // (its request_id, method and route) under "span".
        log.json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .init();
    } else {
        // Colour only on a terminal, and never with NO_COLOR set (https://no-color.org): a
        // redirected log gets plain text.
        log.with_ansi(colour_on_stderr()).init();
    }
}

/// Whether log lines on stderr may carry colour codes.
fn colour_on_stderr() -> bool {
    use std::io::IsTerminal as _;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
    !no_color && std::io::stderr().is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether, under `filter`, rmcp's DEBUG lines and the service's INFO lines are written.
    fn written(filter: EnvFilter) -> (bool, bool) {
        use tracing_subscriber::layer::SubscriberExt as _;
        let subscriber = tracing_subscriber::registry().with(filter);
        tracing::subscriber::with_default(subscriber, || {
            (
                tracing::enabled!(target: "rmcp::service", tracing::Level::DEBUG),
                tracing::enabled!(target: "relay_service::runs", tracing::Level::INFO),
            )
        })
    }

    #[test]
    fn rmcp_stays_at_warn_unless_asked() {
        let capped = LogSetup {
            default: SERVE_DEFAULT,
            json: false,
            mcp_messages: false,
        };
        assert_eq!(written(filter(&capped, None)), (false, true));
        for rust_log in ["debug", "rmcp=debug,info", "info, rmcp::service=trace"] {
            let (rmcp, _) = written(filter(&capped, Some(rust_log)));
            assert!(!rmcp, "{rust_log}");
        }
        let asked = LogSetup {
            mcp_messages: true,
            ..capped
        };
        assert_eq!(
            written(filter(&asked, Some("rmcp=debug,info"))),
            (true, true)
        );
    }
}
