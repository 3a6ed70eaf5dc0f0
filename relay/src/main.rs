//! `relay`: the command-line shell over the relay library.

// The doc comments of clap's arguments are `--help` text, where a bare URL reads best.
#![allow(rustdoc::bare_urls)]

mod admin;
mod config;
mod db_cli;
#[cfg(feature = "desktop")]
mod demo;
#[cfg(feature = "desktop")]
mod desktop_cli;
#[cfg(feature = "desktop")]
mod desktop_control;
#[cfg(feature = "desktop")]
mod desktop_lists;
#[cfg(feature = "desktop")]
mod desktop_projects;
#[cfg(feature = "dev")]
mod dev;
mod logging;
#[cfg(feature = "desktop")]
/// The runner's flags this binary shares with `runner` (the provider flags, the engine and
/// provider value names): one source compiled into both binaries, so clap stays out of the
/// runner's library.
#[path = "../../runner/src/bin/runner/flags.rs"]
mod runner_flags;
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
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

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
    #[command(after_help = config::PRECEDENCE)]
    Serve(Box<serve::ServeArgs>),
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
    let cli = match parse() {
        Ok(Some(cli)) => cli,
        Ok(None) => return ExitCode::SUCCESS,
        Err(error) => return fail(&error),
    };
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(&error),
    }
}

fn fail(error: &anyhow::Error) -> ExitCode {
    // One line with each cause said once (anyhow's own report repeats causes that carry their
    // source's message).
    eprintln!("error: {}", graphrelay_text::error_line(error.as_ref()));
    ExitCode::FAILURE
}

/// The command line, with `relay serve`'s config file under its flags; `None` when it was
/// answered already (`relay serve --print-config`). clap's own errors, `--help` and
/// `--version` exit here.
fn parse() -> Result<Option<Cli>> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let command = Cli::command().version(version()).long_version(version());
    let (mut command, file) = config::with_file(command, &args)?;
    let matches = command
        .try_get_matches_from_mut(&args)
        .unwrap_or_else(|error| error.exit());
    if let Some(("serve", serve)) = matches.subcommand()
        && serve.get_flag("print_config")
        && let Some(definition) = command.find_subcommand("serve")
    {
        serve::database_variables()?;
        print!("{}", config::print(definition, serve, file.as_ref()));
        return Ok(None);
    }
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    Ok(Some(cli))
}

/// `relay --version`: the version and the database schema versions this build speaks.
fn version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| {
        #[allow(unused_mut)] // Only the full build names the desktop's state.
        let mut text = format!(
            "{} (schema versions: service database {} on SQLite, {} on PostgreSQL",
            env!("CARGO_PKG_VERSION"),
            relay_service::store::SqliteStore::SCHEMA_VERSION,
            relay_service::store::PostgresStore::SCHEMA_VERSION,
        );
        #[cfg(feature = "desktop")]
        text.push_str(&format!(
            "; desktop state {}",
            relay_desktop::state::DesktopState::SCHEMA_VERSION
        ));
        text.push(')');
        text
    })
}

async fn run(cli: Cli) -> Result<()> {
    let default = match cli.command {
        Command::Serve(_) => logging::SERVE_DEFAULT,
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
    let (json, mcp_messages) = match &cli.command {
        Command::Serve(args) => (
            args.log_format == serve::LogFormat::Json,
            args.log_mcp_messages,
        ),
        _ => (false, true),
    };
    logging::init(&logging::LogSetup {
        default,
        json,
        mcp_messages,
    });
    match cli.command {
        Command::Serve(args) => serve::run(*args).await,
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
