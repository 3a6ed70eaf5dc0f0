//! `relay`: the command-line shell over the relay library.

mod desktop_cli;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use relay::bench::{self, EmptyPollOptions};
use relay::clock::SystemClock;
use relay::service::admin::{self, TokenSpec};
use relay::service::chat_tasks::owner::{self, Acting, AssignRequest};
use relay::service::chat_tasks::view::goal_preview;
use relay::service::store::SqliteStore;
use relay::service::{self, AppState, ServiceConfig};
use runner::trace::for_terminal;
use serde::Serialize;

/// Bytes of goal a line of `task list` shows.
const LIST_GOAL_PREVIEW_BYTES: usize = 60;

/// The graph relay: queue chat agents' graph runs for owners' desktops.
#[derive(Debug, Parser)]
#[command(name = "relay", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the service: MCP at /mcp, the desktop API, OAuth metadata.
    Serve(ServeArgs),
    /// Operator actions on the service's database: projects, tokens, chat links and tasks.
    Admin(AdminArgs),
    /// The desktop relay and its owner's controls: sessions, sharing, approvals, history.
    Desktop(desktop_cli::DesktopArgs),
    /// Everything on one machine: a service, a desktop relay with the example graphs, an agent
    /// token, and a self-check through MCP; then it keeps running for any MCP client.
    Demo(DemoArgs),
    /// The seeds' experiments replayed through the real code on a virtual clock.
    Sim(SimArgs),
    /// Measure the service.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Args)]
struct SimArgs {
    /// One scenario (pickup, serial, polling, cancel, idempotency, offline, outbox,
    /// result-size, access) or all.
    #[arg(long, default_value = "all")]
    scenario: String,
    /// Runs per sampled scenario (pickup, cancel; polling and idempotency a tenth).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    runs: u64,
    /// Seed of the random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// poll: the seed's 20 s polling desktop; longpoll: the held sync and the waiting get.
    #[arg(long, value_parser = ["poll", "longpoll"], default_value = "poll")]
    mode: String,
    /// One JSON object per scenario per line.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// Run the self-check and exit with its status.
    #[arg(long)]
    once: bool,
    /// The folder of example graphs.
    #[arg(long, default_value = "graphs")]
    graphs: PathBuf,
    /// The mock agent replies (default: GRAPHS/replies/demo.json).
    #[arg(long)]
    replies: Option<PathBuf>,
    /// The engine that runs the graphs.
    #[arg(long, value_enum, default_value_t = runner::engine::EngineKind::Wasm)]
    engine: runner::engine::EngineKind,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Empty inbox reads over loopback HTTP: no sweep vs unguarded sweep vs guarded sweep.
    EmptyPolls(EmptyPollArgs),
    /// Many desktops long-polling one `relay serve` over loopback: its memory, and pickup
    /// latency under that load.
    LongPolls(LongPollArgs),
}

#[derive(Debug, Args)]
struct LongPollArgs {
    /// Desktops long-polling at once.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..=20_000))]
    desktops: u64,
    /// Runs queued while they wait.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    runs: u64,
}

#[derive(Debug, Args)]
struct EmptyPollArgs {
    /// Measured polls per variant.
    #[arg(long, default_value_t = 2_000)]
    polls: usize,
    /// Finished tasks in the seeded history.
    #[arg(long, default_value_t = 10_000)]
    tasks: usize,
    /// Links the history is spread over.
    #[arg(long, default_value_t = 500)]
    links: usize,
    /// Pollers at once.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
}

#[derive(Debug, Args)]
struct DbArg {
    /// The service's SQLite database (created and migrated if needed).
    #[arg(long, env = "RELAY_DB", default_value = "relay.db", global = true)]
    db: PathBuf,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8787")]
    listen: SocketAddr,
    #[command(flatten)]
    db: DbArg,
    /// Public base URL for OAuth metadata, like https://relay.example.com (default: derived
    /// from each request's Host).
    #[arg(long, value_parser = parse_public_url)]
    public_url: Option<String>,
    /// Minutes a running run may go without a control poll before it is failed.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    silence_timeout_minutes: u64,
    /// Seconds a chat task's claim holds before the task returns to the queue (0: no lease).
    #[arg(long, alias = "lease-seconds", default_value_t = 1800, value_parser = clap::value_parser!(u64).range(0..=MAX_TASK_LEASE_SECS))]
    task_lease_seconds: u64,
}

/// The longest lease `--task-lease-seconds` takes: a task expires after a day anyway.
const MAX_TASK_LEASE_SECS: u64 = 24 * 60 * 60;

#[derive(Debug, Args)]
struct AdminArgs {
    #[command(flatten)]
    db: DbArg,
    /// Print a JSON object with every detail instead of one plain value.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Debug, Subcommand)]
enum AdminCommand {
    /// Projects.
    #[command(subcommand)]
    Project(ProjectCommand),
    /// Bearer tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Chat conversations linked to a project, which the owner hands tasks to.
    #[command(subcommand)]
    ChatLink(ChatLinkCommand),
    /// Tasks for linked chats.
    #[command(subcommand)]
    Task(TaskCommand),
}

#[derive(Debug, Subcommand)]
enum ChatLinkCommand {
    /// Link a chat to a project; prints the link id (give it to the chat).
    Create {
        /// The project.
        #[arg(long, value_name = "ID")]
        project: String,
        /// The host the chat lives on.
        #[arg(long, value_parser = ["claude", "chatgpt", "other"])]
        host: String,
        /// The host is told when a task arrives (ChatGPT work chats with MCP events).
        #[arg(long)]
        event_subscription: bool,
    },
    /// Record whether the link's host has an event subscription; prints the link id.
    Subscription {
        /// The link.
        id: String,
        /// true or false.
        #[arg(long, action = clap::ArgAction::Set, value_name = "BOOL")]
        active: bool,
    },
}

#[derive(Debug, Subcommand)]
enum TaskCommand {
    /// Assign a task to a linked chat; prints the task id.
    Assign {
        /// The chat link.
        #[arg(long, value_name = "ID")]
        link: String,
        /// What the chat should do.
        #[arg(long)]
        goal: String,
        /// Repeat with the same key to get the same task back instead of a second one
        /// (default: a fresh key, so a new task).
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
    },
    /// List a link's tasks, newest first, with their status labels.
    List {
        /// The chat link.
        #[arg(long, value_name = "ID")]
        link: String,
    },
    /// Cancel a task (a finished one is left as it is); prints the task id.
    Cancel {
        /// The task.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
enum ProjectCommand {
    /// Create a project; prints its id.
    Create {
        /// Project name.
        name: String,
        /// Owner name (created if new); one owner's desktop serves all its projects.
        #[arg(long)]
        owner: Option<String>,
    },
    /// List the projects, oldest first: one per line, its id, name and owner.
    List,
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Mint a token; prints it (shown only once).
    Create(TokenCreateArgs),
    /// List the tokens that reach a project, revoked ones too (never their secret): one per
    /// line, its id, kind, when it was made, whether it works, and an agent's name and scopes.
    List {
        /// The project.
        #[arg(long, value_name = "ID")]
        project: String,
    },
    /// Revoke a token by its id (or the token itself); prints the token id.
    Revoke {
        /// Token id (`token list` shows them), or the token text.
        id: String,
    },
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("kind").required(true).args(["desktop", "agent", "owner"]))]
struct TokenCreateArgs {
    /// A desktop token: lets the project owner's desktop sync all that owner's projects.
    #[arg(long)]
    desktop: bool,
    /// An agent token for the connected agent NAME on this project (needs --scope).
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,
    /// An owner token for the project owner's own API.
    #[arg(long)]
    owner: bool,
    /// The project.
    #[arg(long, value_name = "ID")]
    project: String,
    /// Scope of an agent token: osfoundry:read and/or osfoundry:run (repeatable).
    #[arg(long = "scope", value_name = "SCOPE")]
    scopes: Vec<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One line with each cause said once (anyhow's own report repeats causes that
            // carry their source's message).
            eprintln!("error: {}", runner::output::error_line(error.as_ref()));
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    let default_level = match cli.command {
        Command::Serve(_) => "info",
        Command::Admin(_) | Command::Bench(_) => "warn",
        Command::Desktop(_) => "info",
        Command::Demo(_) => "warn",
        Command::Sim(_) => "error",
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Reporting a failed log write goes to stderr too and panics when stderr is gone (a
        // closed pipe); the service must keep serving without its log.
        .log_internal_errors(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .init();
    match cli.command {
        Command::Serve(args) => serve(args).await,
        Command::Admin(args) => run_admin(args).await,
        Command::Desktop(args) => desktop_cli::run(args).await,
        Command::Demo(args) => demo(args).await,
        Command::Sim(args) => sim(args),
        Command::Bench(BenchCommand::LongPolls(args)) => {
            let report = relay::loadtest::long_polls(relay::loadtest::LongPollOptions {
                desktops: usize::try_from(args.desktops).unwrap_or(usize::MAX),
                runs: usize::try_from(args.runs).unwrap_or(usize::MAX),
                server: std::env::current_exe().context("cannot find the relay binary")?,
            })
            .await?;
            print!("{report}");
            Ok(())
        }
        Command::Bench(BenchCommand::EmptyPolls(args)) => {
            let options = EmptyPollOptions {
                polls: args.polls,
                tasks: args.tasks,
                links: args.links,
                concurrency: args.concurrency,
            };
            let report = bench::empty_polls(options)
                .await
                .context("the benchmark failed")?;
            print!("{report}");
            Ok(())
        }
    }
}

fn sim(args: SimArgs) -> Result<()> {
    let options = relay::sim::SimOptions {
        scenario: args.scenario,
        runs: usize::try_from(args.runs).unwrap_or(usize::MAX),
        seed: args.seed,
        long_poll: args.mode == "longpoll",
    };
    let started = std::time::Instant::now();
    let json = args.json;
    // The simulation runs its own paused-time runtimes, off this one.
    std::thread::scope(|scope| -> Result<()> {
        scope
            .spawn(|| {
                relay::sim::run(&options, |name, report, seconds| {
                    if json {
                        println!("{}", report.json);
                    } else {
                        for line in &report.lines {
                            println!("{line}");
                        }
                    }
                    eprintln!("sim: {name} done in {seconds:.1} s of wall time");
                })
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the simulation thread panicked"))??;
        Ok(())
    })?;
    eprintln!(
        "sim: finished in {:.1} s of wall time",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn demo(args: DemoArgs) -> Result<()> {
    let options = relay::demo::DemoOptions {
        replies: args
            .replies
            .clone()
            .unwrap_or_else(|| args.graphs.join("replies").join("demo.json")),
        graphs: args.graphs,
        engine: args.engine,
    };
    let demo = relay::demo::Demo::start(&options).await?;
    let checked = demo.self_check().await;
    match &checked {
        Ok(run) => eprintln!(
            "demo: self-check passed: {}",
            serde_json::to_string(&run["result"])?
        ),
        Err(e) => eprintln!("demo: {e}"),
    }
    if args.once {
        demo.stop().await;
        checked?;
        return Ok(());
    }
    println!("MCP URL: {}", demo.mcp_url);
    println!("Token:   {}", demo.agent_token);
    println!("Project: {}", demo.project_id);
    eprintln!(
        "demo: connect any MCP client (e.g. the MCP Inspector) with that URL and bearer token (Authorization: Bearer <token>); list_graph_sessions takes that project_id; Ctrl-C stops everything"
    );
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
    eprintln!("demo: stopping");
    demo.stop().await;
    Ok(())
}

async fn open_state(db: &Path, config: ServiceConfig) -> Result<Arc<AppState>> {
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

async fn serve(args: ServeArgs) -> Result<()> {
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

async fn run_admin(args: AdminArgs) -> Result<()> {
    let app = open_state(&args.db.db, ServiceConfig::default()).await?;
    match args.command {
        AdminCommand::Project(ProjectCommand::Create { name, owner }) => {
            let project = admin::create_project(&app, &name, owner.as_deref()).await?;
            print(args.json, &project, &project.project_id)
        }
        AdminCommand::Project(ProjectCommand::List) => {
            let projects = admin::list_projects(&app).await?;
            if args.json {
                println!("{}", serde_json::to_string(&projects)?);
                return Ok(());
            }
            if projects.is_empty() {
                eprintln!("no projects yet; `relay admin project create NAME` makes one");
            }
            for p in &projects {
                println!(
                    "{}  {}  (owner {})",
                    p.project_id,
                    for_terminal(&p.name),
                    for_terminal(&p.owner)
                );
            }
            Ok(())
        }
        AdminCommand::Token(TokenCommand::List { project }) => {
            let tokens = admin::list_tokens(&app, &project).await?;
            if args.json {
                println!("{}", serde_json::to_string(&tokens)?);
                return Ok(());
            }
            for t in &tokens {
                let state = t
                    .revoked_at
                    .map_or_else(|| "active".to_owned(), |at| format!("revoked {at}"));
                let agent = t.agent_name.as_deref().map_or_else(String::new, |name| {
                    format!("  {} ({})", for_terminal(name), t.scopes.join(" "))
                });
                println!(
                    "{}  {:<7}  created {}  {state}{agent}",
                    t.token_id, t.kind, t.created_at
                );
            }
            Ok(())
        }
        AdminCommand::Token(TokenCommand::Create(create)) => {
            let spec = match (create.desktop, create.agent, create.owner) {
                (true, None, false) => TokenSpec::Desktop,
                (false, None, true) => TokenSpec::Owner,
                (false, Some(name), false) => TokenSpec::Agent {
                    name,
                    scopes: create.scopes.clone(),
                },
                _ => anyhow::bail!("choose exactly one of --desktop, --agent NAME, --owner"),
            };
            if !matches!(spec, TokenSpec::Agent { .. }) && !create.scopes.is_empty() {
                anyhow::bail!("--scope applies to agent tokens only (--agent NAME)");
            }
            let token = admin::create_token(&app, &create.project, spec).await?;
            print(args.json, &token, &token.token)
        }
        AdminCommand::Token(TokenCommand::Revoke { id }) => {
            let revoked = admin::revoke_token(&app, &id).await?;
            if !revoked.newly_revoked {
                tracing::warn!(token_id = %revoked.token_id, "token was already revoked");
            }
            print(args.json, &revoked, &revoked.token_id)
        }
        AdminCommand::ChatLink(ChatLinkCommand::Create {
            project,
            host,
            event_subscription,
        }) => {
            let link =
                owner::create_link(&app, Acting::Operator, &project, &host, event_subscription)
                    .await?;
            print(args.json, &link, &link.chat_link_id)
        }
        AdminCommand::ChatLink(ChatLinkCommand::Subscription { id, active }) => {
            let link = owner::set_event_subscription(&app, Acting::Operator, &id, active).await?;
            print(args.json, &link, &link.chat_link_id)
        }
        AdminCommand::Task(TaskCommand::Assign {
            link,
            goal,
            idempotency_key,
        }) => {
            let key = idempotency_key.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
            let request = AssignRequest {
                chat_link_id: &link,
                goal: &goal,
                idempotency_key: &key,
            };
            let assigned = owner::assign_task(&app, Acting::Operator, request).await?;
            if assigned.replayed {
                tracing::warn!(task_id = %assigned.task.task_id, "this key already assigned the task; no second task was made");
            }
            print(args.json, &assigned, &assigned.task.task_id.to_string())
        }
        AdminCommand::Task(TaskCommand::List { link }) => {
            let list = owner::list_tasks(&app, Acting::Operator, &link).await?;
            if args.json {
                println!("{}", serde_json::to_string(&list)?);
                return Ok(());
            }
            for task in &list.tasks {
                println!(
                    "{}\t{}\t{}",
                    task.task_id,
                    task.status_label,
                    goal_preview(&task.goal, LIST_GOAL_PREVIEW_BYTES)
                );
            }
            if let Some(hint) = list.hint {
                println!("{hint}");
            }
            Ok(())
        }
        AdminCommand::Task(TaskCommand::Cancel { id }) => {
            let cancelled = owner::cancel_task(&app, Acting::Operator, &id).await?;
            if cancelled.already_finished {
                tracing::warn!(task_id = %cancelled.task_id, status = %cancelled.status, "the task had already ended; nothing changed");
            }
            print(args.json, &cancelled, &cancelled.task_id.to_string())
        }
    }
}

fn print(json: bool, detail: &impl Serialize, plain: &str) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(detail)?);
    } else {
        println!("{plain}");
    }
    Ok(())
}

/// `--public-url`: an absolute http(s) URL with a host and no query or fragment, without its
/// trailing slash. It goes into OAuth metadata and the quoted `WWW-Authenticate` challenge, so
/// anything else would hand MCP clients an address they cannot use.
fn parse_public_url(text: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(text).map_err(|e| {
        format!(
            "{e}; give the address MCP clients reach the service at, like https://relay.example.com"
        )
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "the scheme must be http or https, not {}",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("the URL has no host".into());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("the URL may not have a query (?) or fragment (#)".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("the URL may not carry a user name or password".into());
    }
    let text = url.as_str().trim_end_matches('/');
    if let Some(c) = text
        .chars()
        .find(|c| !c.is_ascii_graphic() || matches!(c, '"' | '\\' | '<' | '>'))
    {
        return Err(format!("the URL may not contain {c:?}"));
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
            quoted.as_ref().is_err_and(|e| e.contains("'\"'")),
            "{quoted:?}"
        );
    }
}
