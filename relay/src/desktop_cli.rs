//! `relay desktop ...`: the owner's side, over the desktop's own state file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use relay_desktop::api::{DesktopApi, HttpTransport};
use relay_desktop::lock::RelayLock;
use relay_desktop::state::{ApprovalStatus, DesktopState};
use relay_desktop::{DesktopConfig, Relay, Runtime};
use relay_protocol::GraphSessionId;
use relay_protocol::clock::{Clock, SystemClock};
use relay_service::auth::{token_kind, token_prefix};
use relay_service::store::TokenKind;
use runner::engine::EngineKind;
use runner::host::agents::{AgentProvider, NoProvider};
use runner::host::approvals::Policy;
use runner::host::mock::MockProvider;
use runner::input::read_script;
use runner::trace::for_terminal;
use tokio_util::sync::CancellationToken;

use crate::desktop_lists::{ProjectNames, listing_json};
use crate::runner_flags::{ENGINES, ProviderArgs};

/// Prints a line on stdout; a closed pipe (`relay desktop history | head -1`) ends the command
/// quietly and successfully, as the reader has all it wanted.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        if let Err(e) = writeln!(stdout, $($arg)*) {
            stdout_failed(&e);
        }
    }};
}

/// Ends the process after a failed write to stdout: 0 for a closed pipe, 1 otherwise.
fn stdout_failed(error: &std::io::Error) -> ! {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    hint(&format!("error: cannot write to stdout: {error}"));
    std::process::exit(1);
}

#[derive(Debug, Args)]
pub struct DesktopArgs {
    /// The desktop's state file (sessions, sharing, outbox, history). Default: desktop.db in
    /// the per-user data directory (Linux: $XDG_DATA_HOME/graphrelay, else
    /// ~/.local/share/graphrelay; macOS: ~/Library/Application Support/graphrelay); the
    /// environment variable RELAY_DESKTOP_DB is read too.
    #[arg(
        long,
        visible_alias = "db",
        value_name = "FILE",
        env = "RELAY_DESKTOP_STATE",
        global = true
    )]
    state: Option<PathBuf>,
    #[command(subcommand)]
    command: DesktopCommand,
}

#[derive(Debug, Subcommand)]
enum DesktopCommand {
    /// Graph sessions stored on this desktop.
    #[command(subcommand)]
    Session(SessionCommand),
    /// Projects this desktop serves.
    #[command(subcommand)]
    Project(ProjectCommand),
    /// Share (check) a session with a project.
    Share(ShareArgs),
    /// Stop sharing a session with a project.
    Unshare(ShareArgs),
    /// List what is shared: each project (with its name as the service knows it), session,
    /// slug, version and since when.
    Shares {
        /// Print JSON (one array).
        #[arg(long)]
        json: bool,
    },
    /// Runs queued for this desktop as of each enabled project's last sync (oldest first):
    /// project, graph, requesting agent, when queued and the arguments.
    Queue {
        /// Print JSON (one array).
        #[arg(long)]
        json: bool,
    },
    /// Cancel a run going on this desktop: it ends `cancelled`, "Cancelled by the owner on the
    /// desktop", with its tokens and cost so far (the running relay stops it within 2 s).
    Cancel {
        /// The run: its command id or execution id, as `relay desktop history` shows them.
        #[arg(required_unless_present = "current", conflicts_with = "current")]
        run: Option<String>,
        /// The run going now.
        #[arg(long)]
        current: bool,
    },
    /// Tool calls waiting for your approval in remotely started runs.
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// Per-tool approval policy (tools not listed are denied).
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Show, or set, the only folder the fs tools may use.
    Folder {
        /// The folder to set.
        dir: Option<PathBuf>,
    },
    /// Past executions, newest first: when queued, started and finished, the graph, the
    /// requesting agent, tokens, cost, arguments and the result or error (`--json`: the full
    /// results).
    History {
        /// Print JSON (one array).
        #[arg(long)]
        json: bool,
    },
    /// Serve the desktop's own page on loopback (sharing, tool policies, approvals, run
    /// history); prints a link with a one-time token.
    Ui {
        /// The loopback address and port to serve on (port 0: any free one).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
    },
    /// The state file itself: a consistent copy while the relay runs, its check, restoring one.
    #[command(subcommand)]
    Db(crate::db_cli::DbCommand),
    /// Run the relay: pick up queued commands and run them.
    // Boxed: the provider flags make it much larger than the other commands.
    Run(Box<RunArgs>),
}

#[derive(Debug, Subcommand)]
enum SessionCommand {
    /// Store a graph (or update the session with the same slug); prints its `gs_` id.
    Add {
        /// The graph file.
        file: PathBuf,
        /// Display name (default: the graph's meta.name).
        #[arg(long)]
        name: Option<String>,
        /// Put this file's code into the session whose slug it has, though that session came
        /// from another file (it stays shared with the same projects).
        #[arg(long)]
        replace: bool,
        /// The owner's token cap for this session's remote runs, instead of the relay's
        /// `--default-max-tokens` (see `session set-cap`).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        max_tokens: Option<u64>,
        /// Do not resume this session's runs a stop interrupts: report them failed, as the
        /// relay's `run --no-resume` does for every session (see `session set-resume`).
        #[arg(long = "no-resume")]
        no_resume: bool,
    },
    /// Turn resuming on or off for a session: `on` (the default) resumes its runs a stop
    /// interrupted from their journals when the relay starts again, `off` reports them failed.
    SetResume {
        /// The session id.
        id: String,
        /// `on` or `off`.
        #[arg(value_name = "on|off", value_parser = parse_on_off, action = clap::ArgAction::Set)]
        resume: bool,
    },
    /// Set the owner's token cap for a session's remote runs: N tokens, or `none` for the
    /// relay's `--default-max-tokens`. An agent may ask for less (`max_tokens`), never more.
    SetCap {
        /// The session id.
        id: String,
        /// The cap in tokens (at least 1), or `none`.
        #[arg(value_name = "N|none", value_parser = parse_cap)]
        max_tokens: Cap,
    },
    /// List the sessions.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a session (and unshare it everywhere).
    Remove {
        /// The session id.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
enum ProjectCommand {
    /// Serve this project (sync it every pass). The id is checked against the service's
    /// projects for the desktop token (given as to `run`): one it does not know is refused. When
    /// the service cannot be reached (or is not given), the id is checked against the project
    /// list fetched last (by `run`, or an earlier `enable`); with no list yet, the project is
    /// enabled with a warning that it was not checked.
    Enable {
        /// The project id.
        id: String,
        #[command(flatten)]
        service: ServiceArgs,
    },
    /// Stop serving this project.
    Disable {
        /// The project id.
        id: String,
    },
    /// List projects, their names as the service knows them, and whether they are enabled.
    List {
        /// Print JSON (one array).
        #[arg(long)]
        json: bool,
    },
}

/// The service to ask and the desktop token to ask with (as `relay desktop run` takes them).
#[derive(Debug, Args)]
struct ServiceArgs {
    /// The service's base URL.
    #[arg(long, env = "RELAY_SERVICE_URL")]
    service: Option<String>,
    /// The desktop token (`relay admin token create --desktop`).
    #[arg(long, env = "RELAY_DESKTOP_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

#[derive(Debug, Args)]
struct ShareArgs {
    /// The project id.
    #[arg(long)]
    project: String,
    /// The session id (`gs_...`).
    #[arg(long)]
    session: String,
}

#[derive(Debug, Subcommand)]
enum ApprovalsCommand {
    /// List pending approvals (`--all` for decided ones too): the tool, the graph, project and
    /// agent of the run asking, and the time left before no answer counts as a denial.
    List {
        /// Include decided and expired ones.
        #[arg(long)]
        all: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approve a pending tool call.
    Approve {
        /// The approval id.
        id: String,
    },
    /// Deny a pending tool call.
    Deny {
        /// The approval id.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Set a tool's policy: allow, ask or deny.
    Set {
        /// The tool (e.g. fs.write).
        tool: String,
        /// allow, ask or deny.
        policy: Policy,
    },
    /// List the policies (tools with none set are denied).
    List {
        /// Print JSON (one array: every tool the relay has, with its policy and whether it was
        /// set).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The service's base URL.
    #[arg(long, env = "RELAY_SERVICE_URL")]
    service: String,
    /// The desktop token (`relay admin token create --desktop`).
    #[arg(long, env = "RELAY_DESKTOP_TOKEN", hide_env_values = true)]
    token: String,
    /// Seconds between passes.
    #[arg(long = "poll-interval", default_value_t = 20.0)]
    poll_interval: f64,
    /// Seconds between cancel-flag reads of a running command.
    #[arg(long = "control-interval", default_value_t = 3.0)]
    control_interval: f64,
    /// Long-poll mode: hold a sync per enabled project open (up to 25 s) so queued runs and
    /// cancels arrive at once; the timed passes stay for the outbox and as the fallback. A
    /// failed long poll is retried after 1 s, doubling up to the poll interval.
    #[arg(long = "long-poll")]
    long_poll: bool,
    /// Do not resume the runs a stop interrupted from their journals: report them failed
    /// ("the desktop relay stopped while this graph was running").
    #[arg(long = "no-resume")]
    no_resume: bool,
    /// The engine: the wasm sandbox, or boa in-process (trusted graphs only).
    #[arg(long, value_parser = ENGINES, default_value_t = EngineKind::Wasm)]
    engine: EngineKind,
    /// Run every graph from its script: do not compile shared graphs into components of
    /// their own (kept in `<state>.compiled/`; wasm engine only).
    #[arg(long = "no-compiled-graphs")]
    no_compiled_graphs: bool,
    /// Mock agent provider replies file.
    #[arg(long, conflicts_with_all = ["provider", "providers"])]
    replies: Option<PathBuf>,
    /// Real agent providers (the same flags and providers file as `runner run`).
    #[command(flatten)]
    providers: ProviderArgs,
    /// The only folder the fs tools may use (default: `relay desktop folder`).
    #[arg(long)]
    folder: Option<PathBuf>,
    /// Seconds an `ask` tool waits for your approval; no answer is a denial.
    #[arg(long = "approval-timeout", default_value_t = 600.0)]
    approval_timeout: f64,
    /// Seconds a remote run may take.
    #[arg(long = "graph-timeout", default_value_t = 1800.0)]
    graph_timeout: f64,
    /// Token cap for each remote run (every agent call of the run counts against it); a run
    /// that reaches it stops with `budget_exhausted`.
    #[arg(long = "default-max-tokens", alias = "max-tokens", default_value_t = relay_desktop::DEFAULT_REMOTE_TOKEN_CAP, value_parser = clap::value_parser!(u64).range(1..))]
    default_max_tokens: u64,
    /// No run starts while the disk holding the state file has less free than this (bytes, or
    /// e.g. 64MiB, 1GiB); waiting agents are told `desktop: disk full`.
    #[arg(long = "min-free-space", default_value = "64MiB", value_parser = relay_desktop::disk::parse_size)]
    min_free_space: u64,
}

fn seconds(name: &str, value: f64) -> Result<Duration> {
    if !(value.is_finite() && value > 0.0 && value <= 86_400.0) {
        bail!("{name} must be a number of seconds above 0 and at most 86400");
    }
    Ok(Duration::from_secs_f64(value))
}

/// `on` or `off` on the command line.
fn parse_on_off(text: &str) -> Result<bool, String> {
    match text {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("`{other}` is neither `on` nor `off`")),
    }
}

/// A session's token cap on the command line: a whole number of tokens, or `none`.
#[derive(Debug, Clone, Copy)]
struct Cap(Option<u64>);

fn parse_cap(text: &str) -> Result<Cap, String> {
    if text.eq_ignore_ascii_case("none") {
        return Ok(Cap(None));
    }
    match text.parse::<u64>() {
        Ok(n) if n > 0 => Ok(Cap(Some(n))),
        _ => Err(format!(
            "`{text}` is not a token cap: pass a whole number of tokens (at least 1) or `none`"
        )),
    }
}

fn session_id(text: &str) -> Result<GraphSessionId> {
    text.parse()
        .map_err(|e: relay_protocol::InvalidInput| anyhow::anyhow!(e.0))
}

/// The tools the relay has, by name.
fn known_tools() -> Vec<String> {
    runner::host::tools::ToolRegistry::standard(None)
        .map(|tools| tools.specs().into_iter().map(|spec| spec.name).collect())
        .unwrap_or_default()
}

/// A note for the person at the terminal, beside a list (on stderr: stdout keeps only the list).
/// A closed stderr is no reason to fail.
fn hint(text: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

pub async fn run(args: DesktopArgs) -> Result<()> {
    let db_alias = std::env::var_os("RELAY_DESKTOP_DB").map(PathBuf::from);
    let state = state_path(args.state, db_alias, default_data_dir())?;
    match args.command {
        // A check or a restore must not open (or create) the state file.
        DesktopCommand::Db(command) => db(&state, &command),
        command => {
            if let Some(folder) = state.parent().filter(|p| !p.as_os_str().is_empty()) {
                // Only the owner reads the desktop's state (its tokens, results, history).
                create_private_dir(folder).with_context(|| {
                    format!(
                        "cannot create the folder of the desktop state {}",
                        state.display()
                    )
                })?;
            }
            on_state(&state, command).await
        }
    }
}

/// The state file: `--state`/`--db` (or RELAY_DESKTOP_STATE), else RELAY_DESKTOP_DB, else
/// desktop.db in the per-user data directory `data_dir`.
fn state_path(
    flag: Option<PathBuf>,
    db_alias: Option<PathBuf>,
    data_dir: Option<PathBuf>,
) -> Result<PathBuf> {
    let given = |p: &PathBuf| !p.as_os_str().is_empty();
    if let Some(path) = flag.filter(given).or(db_alias.filter(given)) {
        return Ok(path);
    }
    match data_dir {
        Some(dir) => Ok(dir.join("desktop.db")),
        None => bail!(
            "there is no per-user data directory here (no home directory) for the desktop state: give a file with --state FILE or RELAY_DESKTOP_STATE"
        ),
    }
}

/// The per-user data directory of graphrelay, if the platform has one.
fn default_data_dir() -> Option<PathBuf> {
    directories::ProjectDirs::from("", "", "graphrelay").map(|dirs| dirs.data_dir().to_path_buf())
}

/// Creates `dir` and its parents; a folder made here is readable by its owner only.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

impl DesktopCommand {
    /// Whether the command only reads the state (a list): on a full disk it reads the file
    /// without writing.
    fn only_reads(&self) -> bool {
        matches!(
            self,
            DesktopCommand::Shares { .. }
                | DesktopCommand::Queue { .. }
                | DesktopCommand::History { .. }
                | DesktopCommand::Folder { dir: None }
                | DesktopCommand::Session(SessionCommand::List { .. })
                | DesktopCommand::Project(ProjectCommand::List { .. })
                | DesktopCommand::Approvals(ApprovalsCommand::List { .. })
                | DesktopCommand::Policy(PolicyCommand::List { .. })
        )
    }
}

/// Opens the state for `command`. On a full disk the owner is told so (naming the disk, the
/// file and what to do), and a list reads the file without writing when it cannot be opened
/// as usual.
fn open_for(path: &Path, command: &DesktopCommand) -> Result<DesktopState> {
    let full = relay_desktop::disk::full_state_disk(path);
    if let Some(full) = &full {
        hint(&format!("warning: {full}"));
    }
    match DesktopState::open(path) {
        Ok(state) => Ok(state),
        Err(_) if full.is_some() && command.only_reads() => DesktopState::open_read_only(path)
            .with_context(|| format!("cannot read the desktop state {}", path.display())),
        Err(e) => {
            let why = match full {
                Some(full) => format!("cannot use the desktop state: {full}"),
                None => format!("cannot use the desktop state {}", path.display()),
            };
            Err(anyhow::Error::new(e).context(why))
        }
    }
}

async fn on_state(path: &Path, command: DesktopCommand) -> Result<()> {
    let state = open_for(path, &command)?;
    let now = SystemClock.now();
    match command {
        DesktopCommand::Session(command) => session(&state, command).await?,
        DesktopCommand::Project(command) => project(&state, command).await?,
        DesktopCommand::Share(share) => {
            let session = session_id(&share.session)?;
            state.check_shareable(&share.project)?;
            state.share(&share.project, &session, now)?;
            out!("{}", share.session);
        }
        DesktopCommand::Shares { json } => shares(&state, json)?,
        DesktopCommand::Queue { json } => queue(&state, json)?,
        DesktopCommand::Unshare(share) => {
            let session = session_id(&share.session)?;
            let covered =
                crate::desktop_control::covered(&state, Some(&share.project), Some(&session))?;
            state.unshare(&share.project, &session)?;
            out!("{}", share.session);
            print_lines(crate::desktop_control::confirm(&state, covered).await);
        }
        DesktopCommand::Cancel { run, current } => {
            print_lines(crate::desktop_control::cancel(&state, run.as_deref(), current).await?);
        }
        DesktopCommand::Folder { dir } => {
            if let Some(dir) = dir {
                state.set_folder(&dir)?;
            }
            match state.folder()? {
                Some(folder) => out!("{}", folder.display()),
                None => bail!("no folder is set: `relay desktop folder DIR` sets one"),
            }
        }
        DesktopCommand::Approvals(command) => approvals(&state, command)?,
        DesktopCommand::Policy(command) => policy(&state, command)?,
        DesktopCommand::History { json } => history(&state, json)?,
        DesktopCommand::Ui { listen } => serve_page(state, &listen).await?,
        DesktopCommand::Db(command) => {
            drop(state);
            db(path, &command)?;
        }
        DesktopCommand::Run(run) => run_relay(state, *run).await?,
    }
    Ok(())
}

/// `relay desktop db …` on the state file at `path`.
fn db(path: &Path, command: &crate::db_cli::DbCommand) -> Result<()> {
    use crate::db_cli::DbCommand;
    match command {
        DbCommand::Backup { file } => {
            if !path.is_file() {
                bail!(
                    "there is no desktop state at {}: give it with --state or RELAY_DESKTOP_STATE",
                    path.display()
                );
            }
            let state = DesktopState::open(path)
                .with_context(|| format!("cannot back up the desktop state {}", path.display()))?;
            state.backup_into(file)?;
            println!("{}", file.display());
            Ok(())
        }
        DbCommand::Check { file } => crate::db_cli::check(
            file,
            &relay_sqlite::Expected {
                program: relay_sqlite::identity::DESKTOP,
                json: relay_desktop::state::JSON_COLUMNS,
            },
        ),
        DbCommand::Restore { file } => {
            crate::db_cli::restore(file, path, relay_sqlite::identity::DESKTOP)
        }
        DbCommand::Version => {
            crate::db_cli::sqlite_version(path, DesktopState::SCHEMA_VERSION, false)
        }
    }
}

async fn session(state: &DesktopState, command: SessionCommand) -> Result<()> {
    match command {
        SessionCommand::Add {
            file,
            name,
            replace,
            max_tokens,
            no_resume,
        } => {
            let id = add_session(state, &file, name.as_deref(), replace, SystemClock.now()).await?;
            if let Some(cap) = max_tokens {
                state.set_session_cap(&id, Some(cap))?;
            }
            if no_resume {
                state.set_session_resume(&id, false)?;
            }
            out!("{id}");
        }
        SessionCommand::SetResume { id, resume } => {
            state.set_session_resume(&session_id(&id)?, resume)?;
            hint(&if resume {
                format!("runs of {id} a stop interrupts are resumed when the relay starts again")
            } else {
                format!("runs of {id} a stop interrupts are reported failed, not resumed")
            });
            out!("{id}");
        }
        SessionCommand::SetCap { id, max_tokens } => {
            state.set_session_cap(&session_id(&id)?, max_tokens.0)?;
            match max_tokens.0 {
                Some(cap) => hint(&format!(
                    "remote runs of {id} stop at {cap} tokens (an agent may ask for less)"
                )),
                None => hint(&format!(
                    "remote runs of {id} get the relay's --default-max-tokens"
                )),
            }
            out!("{id}");
        }
        SessionCommand::List { json } => session_list(state, json)?,
        SessionCommand::Remove { id } => {
            let session = session_id(&id)?;
            let covered = crate::desktop_control::covered(state, None, Some(&session))?;
            state.remove_session(&session)?;
            out!("{id}");
            print_lines(crate::desktop_control::confirm(state, covered).await);
        }
    }
    Ok(())
}

/// `relay desktop session list`: each session with the projects it is shared with, by name.
fn session_list(state: &DesktopState, json: bool) -> Result<()> {
    let sessions = state.sessions()?;
    let shares = state.shares()?;
    let names = ProjectNames::of(state)?;
    if json {
        let mut listed = listing_json(&sessions, &names)?;
        for (row, session) in listed.as_array_mut().into_iter().flatten().zip(&sessions) {
            let shared: Vec<serde_json::Value> = shares
                .iter()
                .filter(|share| share.session_id == session.id.as_str())
                .map(|share| {
                    serde_json::json!({
                        "project_id": share.project_id,
                        "project_name": names.name(&share.project_id),
                    })
                })
                .collect();
            row["shared_with"] = serde_json::Value::Array(shared);
        }
        out!("{listed}");
        return Ok(());
    }
    if sessions.is_empty() {
        hint("no sessions yet; `relay desktop session add FILE` adds a graph");
    }
    for s in sessions {
        let projects: Vec<String> = shares
            .iter()
            .filter(|share| share.session_id == s.id.as_str())
            .map(|share| names.label(&share.project_id))
            .collect();
        let mut shared = if projects.is_empty() {
            "not shared".to_owned()
        } else {
            format!("shared with {}", projects.join(", "))
        };
        if !s.resume {
            shared.push_str("  no resume");
        }
        out!(
            "{}  {}  {}  {shared}  {}",
            s.id,
            s.slug,
            for_terminal(&s.version),
            for_terminal(&s.name)
        );
    }
    Ok(())
}

async fn project(state: &DesktopState, command: ProjectCommand) -> Result<()> {
    match command {
        ProjectCommand::Enable { id, service } => {
            crate::desktop_projects::enable(state, &id, service.service, service.token).await?;
            out!("{id}");
        }
        ProjectCommand::Disable { id } => {
            let covered = crate::desktop_control::covered(state, Some(&id), None)?;
            state.set_project_enabled(&id, false, SystemClock.now())?;
            out!("{id}");
            print_lines(crate::desktop_control::confirm(state, covered).await);
        }
        ProjectCommand::List { json } => {
            let projects = state.projects()?;
            let names = ProjectNames::of(state)?;
            if json {
                let rows: Vec<serde_json::Value> = projects
                    .iter()
                    .map(|(id, enabled)| serde_json::json!({"project_id": id, "enabled": enabled}))
                    .collect();
                out!("{}", listing_json(&rows, &names)?);
                return Ok(());
            }
            if projects.is_empty() {
                hint("no projects yet; `relay desktop project enable ID` serves one");
            }
            for (id, enabled) in projects {
                let name = names
                    .name(&id)
                    .map_or_else(String::new, |name| format!("  {}", for_terminal(name)));
                out!(
                    "{id}  {}{name}",
                    if enabled { "enabled" } else { "disabled" }
                );
            }
        }
    }
    Ok(())
}

fn approvals(state: &DesktopState, command: ApprovalsCommand) -> Result<()> {
    match command {
        ApprovalsCommand::List { all, json } => {
            let approvals = state.approvals(all)?;
            let names = ProjectNames::of(state)?;
            if json {
                out!("{}", listing_json(&approvals, &names)?);
            } else {
                if approvals.is_empty() {
                    hint(if all {
                        "no approvals yet"
                    } else {
                        "no approvals waiting (`--all` shows decided ones)"
                    });
                }
                let now = SystemClock.now();
                for a in approvals {
                    out!("{}", crate::desktop_lists::approval_line(&a, now, &names));
                }
            }
        }
        ApprovalsCommand::Approve { id } => {
            decide(state, &id, ApprovalStatus::Approved, SystemClock.now())?;
        }
        ApprovalsCommand::Deny { id } => {
            decide(state, &id, ApprovalStatus::Denied, SystemClock.now())?;
        }
    }
    Ok(())
}

fn policy(state: &DesktopState, command: PolicyCommand) -> Result<()> {
    match command {
        PolicyCommand::Set { tool, policy } => {
            // A policy for a tool the relay does not have would change nothing: a typo would
            // leave the real tool at its default (deny) while the owner believes otherwise.
            // The runner's check, so `--allow` and a policy name a typo's nearest tool alike.
            runner::host::tools::ToolRegistry::standard(None)
                .map_err(|e| anyhow::anyhow!("{}", e.message))?
                .check_known([tool.as_str()])
                .map_err(|reason| anyhow::anyhow!("the relay has no such tool: {reason}"))?;
            state.set_policy(&tool, policy)?;
            out!("{tool} {}", policy.as_str());
        }
        PolicyCommand::List { json } => {
            let policy = state.policy()?;
            if json {
                let rows: Vec<serde_json::Value> = known_tools()
                    .into_iter()
                    .chain(policy.iter().map(|(tool, _)| tool.to_owned()))
                    .collect::<std::collections::BTreeSet<String>>()
                    .into_iter()
                    .map(|tool| {
                        let set = policy.iter().any(|(t, _)| *t == tool);
                        serde_json::json!({"tool": tool, "policy": policy.get(&tool).as_str(), "set": set})
                    })
                    .collect();
                out!("{}", serde_json::Value::Array(rows));
                return Ok(());
            }
            for (tool, policy) in policy.iter() {
                out!("{tool} {}", policy.as_str());
            }
            let unset: Vec<String> = known_tools()
                .into_iter()
                .filter(|tool| !policy.iter().any(|(set, _)| set == tool))
                .collect();
            if !unset.is_empty() {
                hint(&format!(
                    "denied, as no policy is set: {}; `relay desktop policy set TOOL allow|ask|deny` sets one",
                    unset.join(", ")
                ));
            }
        }
    }
    Ok(())
}

fn print_lines(lines: Vec<String>) {
    for line in lines {
        out!("{line}");
    }
}

fn history(state: &DesktopState, json: bool) -> Result<()> {
    let history = state.history()?;
    let names = ProjectNames::of(state)?;
    if json {
        out!("{}", listing_json(&history, &names)?);
    } else {
        if history.is_empty() {
            hint("no executions yet");
        }
        for h in history {
            out!("{}", crate::desktop_lists::history_line(&h, &names));
        }
    }
    Ok(())
}

/// `relay desktop queue`: the runs waiting on the service for this desktop, as last synced.
fn queue(state: &DesktopState, json: bool) -> Result<()> {
    let queued = state.queued()?;
    let names = ProjectNames::of(state)?;
    if json {
        out!("{}", listing_json(&queued, &names)?);
        return Ok(());
    }
    if queued.is_empty() {
        hint(
            "no runs queued as of the last sync of each enabled project (the relay syncs every pass while `relay desktop run` runs)",
        );
    }
    for q in queued {
        out!("{}", crate::desktop_lists::queue_line(&q, &names));
    }
    Ok(())
}

fn decide(
    state: &DesktopState,
    id: &str,
    decision: ApprovalStatus,
    now: relay_protocol::clock::Timestamp,
) -> Result<()> {
    check_live(state, id)?;
    if state.decide(id, decision, now)? {
        out!("{id}");
        Ok(())
    } else {
        bail!("no pending approval {id}: see `relay desktop approvals list` (it may have expired)")
    }
}

/// `relay desktop ui`: the link on stdout (alone, for scripts), the rest on stderr.
async fn serve_page(state: DesktopState, listen: &str) -> Result<()> {
    let listen = relay_desktop::ui::loopback_listen(listen)?;
    let bound = relay_desktop::ui::bind(listen, state, Arc::new(SystemClock)).await?;
    out!("{}", bound.url);
    hint(
        "Open the link above in your browser: it works once, in one browser. Ctrl-C stops the page.",
    );
    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_signal.cancel();
        }
    });
    bound
        .serve(shutdown)
        .await
        .context("the desktop page stopped")
}

/// Reads a graph, checks its `meta` in the sandbox and stores it.
/// A session is one graph file: another file with a taken slug is refused unless `replace`;
/// a change of a shared session's code says which projects it stays shared with.
pub async fn add_session(
    state: &DesktopState,
    file: &Path,
    name: Option<&str>,
    replace: bool,
    now: relay_protocol::clock::Timestamp,
) -> Result<GraphSessionId> {
    let script =
        read_script(file).with_context(|| format!("cannot read the graph {}", file.display()))?;
    let engine = EngineKind::Wasm.build()?;
    let meta = engine
        .describe(script.clone().into())
        .await
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let path = file
        .canonicalize()
        .unwrap_or_else(|_| file.to_path_buf())
        .display()
        .to_string();
    let hash = relay_service::runs::sha256_hex(&script);
    let before = state.session_source(&meta.slug)?;
    if let Some(before) = &before
        && let Some(other) = before.path.as_deref()
        && other != path
        && !replace
    {
        bail!(
            "slug `{}` is already session {} from {other}; {path} is another file: give it its own slug in its meta, or pass --replace to put its code into that session (it stays shared with the same projects)",
            meta.slug,
            before.id
        );
    }
    let id = state.upsert_session(&meta, &script, name, now)?;
    state.set_session_source(&id, &path, &hash)?;
    let changed = before
        .as_ref()
        .is_some_and(|b| b.content_hash.as_deref() != Some(hash.as_str()));
    if changed {
        let projects: Vec<String> = state
            .shares()?
            .into_iter()
            .filter(|s| s.session_id == id.as_str())
            .map(|s| s.project_id)
            .collect();
        if projects.is_empty() {
            hint(&format!(
                "session {id} now runs the code of {path}; it is not shared"
            ));
        } else {
            hint(&format!(
                "session {id} now runs the code of {path} (version {}); it stays shared with {}, whose agents see it after the relay's next sync",
                for_terminal(&meta.version),
                projects.join(", ")
            ));
        }
    }
    Ok(id)
}

/// Refuses a desktop token that could only fail at every request: an empty one (an unset
/// variable), one with a space or line break (read from a file), or another kind's token.
fn check_desktop_token(token: &str) -> Result<()> {
    const MINT: &str = "`relay admin token create --desktop` prints one";
    if token.is_empty() {
        bail!("--token is empty: give the desktop token; {MINT}");
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        bail!(
            "--token holds a space, line break or other character no token has: copy it again; {MINT}"
        );
    }
    let (whose, kind) = match token_kind(token) {
        Some(kind @ TokenKind::Agent) => ("an agent's", kind),
        Some(kind @ TokenKind::Owner) => ("an owner's", kind),
        Some(TokenKind::Desktop) | None => return Ok(()),
    };
    bail!(
        "--token is {whose} token ({}…); the desktop needs a desktop token ({}…); {MINT}",
        token_prefix(kind),
        token_prefix(TokenKind::Desktop)
    )
}

async fn run_relay(state: DesktopState, args: RunArgs) -> Result<()> {
    check_desktop_token(&args.token)?;
    // One relay per state file: refused before anything else is said or done.
    if let Some(path) = state.path()
        && let Some(holder) = RelayLock::holder(path)?
    {
        bail!(
            "another relay ({holder}) already runs on the state file {}: stop it first, or give this one its own state file with --state",
            path.display()
        );
    }
    if state.enabled_projects()?.is_empty() {
        tracing::warn!(
            "no project is enabled on this desktop, so nothing will be picked up; `relay desktop project enable ID` enables one (the relay sees it at its next pass)"
        );
    }
    let config = DesktopConfig {
        poll_interval: seconds("--poll-interval", args.poll_interval)?,
        control_interval: seconds("--control-interval", args.control_interval)?,
        long_poll: args.long_poll.then_some(relay_desktop::DEFAULT_LONG_POLL),
        approval_timeout: seconds("--approval-timeout", args.approval_timeout)?,
        graph_timeout: seconds("--graph-timeout", args.graph_timeout)?,
        token_cap: Some(args.default_max_tokens),
        folder: args.folder,
        min_free_space: args.min_free_space,
        resume: !args.no_resume,
        // The wasm engine's limits: `EngineKind::Wasm.build()` uses the defaults.
        compiled_graphs: (args.engine == EngineKind::Wasm && !args.no_compiled_graphs)
            .then(runner::engine::wasm::WasmLimits::default),
        ..DesktopConfig::default()
    };
    let provider: Arc<dyn AgentProvider> = match &args.replies {
        Some(path) => Arc::new(MockProvider::from_file(path)?),
        None => args
            .providers
            .build()?
            .unwrap_or_else(|| Arc::new(NoProvider)),
    };
    let transport = HttpTransport::new(&args.service).map_err(|e| anyhow::anyhow!(e))?;
    let api = DesktopApi::new(Arc::new(transport), &args.token);
    let runtime = Runtime {
        engine: args.engine.build()?,
        provider,
        events: Arc::new(runner::trace::TracePrinter::stderr()),
    };
    let state_file = state.path().map(Path::to_path_buf).unwrap_or_default();
    let relay = Relay::new(state, api, Arc::new(SystemClock), runtime, config);
    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    let resume = !args.no_resume;
    tokio::spawn(async move {
        let signal = stop_signal().await;
        if resume {
            tracing::info!(
                "{signal}: stopping the relay; a running graph is interrupted and resumes from its journal at the next start, its pending approvals expire"
            );
        } else {
            tracing::info!(
                "{signal}: stopping the relay; a running graph ends failed and is reported (--no-resume), its pending approvals expire"
            );
        }
        on_signal.cancel();
    });
    tracing::info!(service = %args.service, state = %state_file.display(), "desktop relay running; Ctrl-C (or SIGTERM, SIGHUP) stops it");
    relay.run(shutdown).await?;
    Ok(())
}

/// Waits for Ctrl-C, SIGTERM or SIGHUP (all stop the relay the same clean way); names it.
async fn stop_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let (Ok(mut term), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) {
            return tokio::select! {
                _ = tokio::signal::ctrl_c() => "Ctrl-C",
                _ = term.recv() => "SIGTERM",
                _ = hup.recv() => "SIGHUP",
            };
        }
    }
    let _ = tokio::signal::ctrl_c().await;
    "Ctrl-C"
}

/// `relay desktop shares`: what each project's agents can start.
fn shares(state: &DesktopState, json: bool) -> Result<()> {
    let shares = state.shares()?;
    if json {
        out!("{}", listing_json(&shares, &ProjectNames::of(state)?)?);
        return Ok(());
    }
    if shares.is_empty() {
        hint(
            "nothing is shared; `relay desktop share --project ID --session gs_...` shares a session",
        );
    }
    for s in shares {
        let name = s
            .project_name
            .as_deref()
            .map_or_else(String::new, |name| format!(" ({})", for_terminal(name)));
        out!(
            "{}{name}{}  {}  {}  {}  since {}",
            s.project_id,
            if s.project_enabled { "" } else { " (disabled)" },
            s.session_id,
            s.slug,
            for_terminal(&s.version),
            relay_protocol::clock::Timestamp::from_unix_millis(s.since).to_rfc3339()
        );
    }
    Ok(())
}

/// Refuses a decision nothing would act on: the run that asked has ended, or no relay runs.
fn check_live(state: &DesktopState, id: &str) -> Result<()> {
    match state.approval_run_live(id)? {
        None => bail!("no approval {id}: see `relay desktop approvals list`"),
        Some(false) => bail!(
            "approval {id} belongs to a run that is no longer running, so nothing would act on the decision: `relay desktop history` shows how it ended; the agent can start it again"
        ),
        Some(true) => {}
    }
    if let Some(path) = state.path()
        && RelayLock::holder(path)?.is_none()
    {
        bail!(
            "no `relay desktop run` is running on {}, so the run that asked approval {id} is not live and nothing would act on the decision; the relay's next start reports that run failed and expires its approvals",
            path.display()
        );
    }
    Ok(())
}
