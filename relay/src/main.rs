//! `relay`: the command-line shell over the relay library.

// The doc comments of clap's arguments are `--help` text, where a bare URL reads best.
#![allow(rustdoc::bare_urls)]

mod admin;
mod db_cli;
#[cfg(feature = "desktop")]
mod demo;
#[cfg(feature = "desktop")]
mod desktop_cli;
#[cfg(feature = "desktop")]
mod desktop_lists;
#[cfg(feature = "desktop")]
mod desktop_projects;
#[cfg(feature = "dev")]
mod dev;
mod serve;

use std::process::ExitCode;

/// jemalloc rather than the system allocator: a held long poll's connection has reserved
/// 16 KiB of HTTP buffers it has mostly not written, and jemalloc's slabs leave such memory
/// unresident where glibc's heap interleaves it with live data (docs/limits.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read once at start (the C `malloc_conf` string, under the prefix
/// tikv-jemallocator gives its symbols; `_RJEM_MALLOC_CONF` in the environment overrides
/// them): one background thread returns freed pages to the system within about 100 ms, off the
/// request path. When ten thousand desktops connect at once, pages the burst freed are then
/// mostly returned before new connections' buffers are placed on them, so a buffer a held poll
/// has not written stays unresident: about 1 KiB less per waiting desktop at 10,000 than with a
/// one-second decay and no background thread (9.1 to about 8 KiB, `relay bench long-polls`).
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: &u8 =
    &b"background_thread:true,max_background_threads:1,dirty_decay_ms:100,muzzy_decay_ms:0\0"[0];

use anyhow::Result;
use clap::{Parser, Subcommand};

/// The graph relay: queue chat agents' graph runs for owners' desktops.
#[derive(Debug, Parser)]
#[command(name = "relay", version, about)]
#[cfg_attr(
    not(feature = "desktop"),
    command(
        after_help = "This is the service-only build (no sandbox): `relay desktop`, `relay demo`, `relay sim` and `relay bench` are in the full build, `cargo install --path relay`."
    )
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the service: MCP at /mcp, the desktop API, OAuth metadata.
    Serve(serve::ServeArgs),
    /// Operator actions on the service's database: projects, tokens, chat links and tasks.
    Admin(admin::AdminArgs),
    /// The desktop relay and its owner's controls: sessions, sharing, approvals, history.
    #[cfg(feature = "desktop")]
    Desktop(desktop_cli::DesktopArgs),
    /// Everything on one machine: a service, a desktop relay with the example graphs, an agent
    /// token, and a self-check through MCP; then it keeps running for any MCP client.
    #[cfg(feature = "desktop")]
    Demo(demo::DemoArgs),
    /// The seeds' experiments replayed through the real code on a virtual clock.
    #[cfg(feature = "dev")]
    Sim(dev::SimArgs),
    /// Measure the service.
    #[cfg(feature = "dev")]
    #[command(subcommand)]
    Bench(dev::BenchCommand),
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One line with each cause said once (anyhow's own report repeats causes that
            // carry their source's message).
            eprintln!("error: {}", graphrelay_text::error_line(error.as_ref()));
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    let default_level = match cli.command {
        Command::Serve(_) => "info",
        Command::Admin(_) => "warn",
        #[cfg(feature = "desktop")]
        Command::Desktop(_) => "info",
        #[cfg(feature = "desktop")]
        Command::Demo(_) => "warn",
        #[cfg(feature = "dev")]
        Command::Bench(_) => "warn",
        #[cfg(feature = "dev")]
        Command::Sim(_) => "error",
    };
    let json =
        matches!(&cli.command, Command::Serve(args) if args.log_format == serve::LogFormat::Json);
    let log = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Reporting a failed log write goes to stderr too and panics when stderr is gone (a
        // closed pipe); the service must keep serving without its log.
        .log_internal_errors(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        );
    if json {
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
    match cli.command {
        Command::Serve(args) => serve::run(args).await,
        Command::Admin(args) => admin::run(args).await,
        #[cfg(feature = "desktop")]
        Command::Desktop(args) => desktop_cli::run(args).await,
        #[cfg(feature = "desktop")]
        Command::Demo(args) => demo::run(args).await,
        #[cfg(feature = "dev")]
        Command::Sim(args) => dev::sim(args),
        #[cfg(feature = "dev")]
        Command::Bench(command) => dev::bench(command).await,
    }
}

/// Whether log lines on stderr may carry colour codes.
fn colour_on_stderr() -> bool {
    use std::io::IsTerminal as _;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
    !no_color && std::io::stderr().is_terminal()
}
