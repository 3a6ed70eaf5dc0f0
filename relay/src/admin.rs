//! `relay admin`: operator actions on the service's database.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use graphrelay_text::for_terminal;
use relay_service::admin::{self, TokenSpec};
use relay_service::chat_tasks::owner::{self, Acting, AssignRequest};
use relay_service::chat_tasks::view::goal_preview;
use relay_service::oauth::connections;
use relay_service::{AppState, ServiceConfig};
use serde::Serialize;

use std::path::{Path, PathBuf};

use anyhow::bail;
use relay_service::store::SqliteStore;
use relay_service::store::postgres::is_postgres_url;

use crate::db_cli::{self, DbCommand};
use crate::serve::{DbArg, open_state};

/// Bytes of goal a line of `task list` shows.
const LIST_GOAL_PREVIEW_BYTES: usize = 60;

#[derive(Debug, Args)]
pub(crate) struct AdminArgs {
    #[command(flatten)]
    db: DbArg,
    /// Print a JSON object with every detail instead of one plain value.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Debug, Subcommand)]
pub(crate) enum AdminCommand {
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
    /// Owners' sign-in: passwords, one-time links, signing out.
    #[command(subcommand)]
    Owner(OwnerCommand),
    /// Connections: chat apps an owner connected through OAuth.
    #[command(subcommand)]
    Connection(ConnectionCommand),
    /// The SQLite database file itself: backup, check, restore.
    #[command(subcommand)]
    Db(DbCommand),
}

#[derive(Debug, Subcommand)]
pub(crate) enum OwnerCommand {
    /// Set the owner's sign-in password (argon2id, at least 12 characters); prints the owner.
    SetPassword {
        /// The owner.
        name: String,
        /// Read the password from the first line of stdin (the only way: never a flag).
        #[arg(long, required = true)]
        password_stdin: bool,
    },
    /// Print a one-time URL that signs the owner in (for owners without a password).
    SignInLink {
        /// The owner.
        name: String,
        /// How long the link works, like 10m, 1h or 90s (at most 24h).
        #[arg(long, default_value = "10m", value_parser = crate::serve::parse_sign_in_link_ttl)]
        ttl: std::time::Duration,
        /// The service's public URL, as `relay serve --public-url` has it.
        #[arg(long, env = "RELAY_PUBLIC_URL", default_value = "http://127.0.0.1:8787", value_parser = crate::serve::parse_public_url)]
        public_url: String,
    },
    /// Sign the owner out of every browser; prints how many sessions ended.
    SignOutAll {
        /// The owner.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ConnectionCommand {
    /// List connections, revoked ones too: one per line, its id, client name, project, scopes,
    /// when it was made and whether it works.
    List {
        /// Only this project's.
        #[arg(long, value_name = "ID")]
        project: Option<String>,
    },
    /// Revoke a connection by its id; it fails on its next request. Prints the id.
    Revoke {
        /// The connection's id (`connection list` shows them).
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ChatLinkCommand {
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
pub(crate) enum TaskCommand {
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
pub(crate) enum ProjectCommand {
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
pub(crate) enum TokenCommand {
    /// Mint a token; prints it (shown only once).
    Create(TokenCreateArgs),
    /// List the operator-minted tokens that reach a project (connections made through OAuth:
    /// `connection list`), revoked ones too (never their secret): one per
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
#[command(
    after_help = "A desktop token reaches one project: `--desktop --project ID` syncs that project only, \
`--desktop --owner NAME` every project of the owner NAME (today's and later ones)."
)]
pub(crate) struct TokenCreateArgs {
    /// A desktop token: with --project ID it syncs that project only; with --owner NAME, every
    /// project of that owner.
    #[arg(long)]
    desktop: bool,
    /// An agent token for the connected agent NAME on this project (needs --scope).
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,
    /// An owner token for the project owner's own API (with --project); with --desktop, the
    /// owner NAME whose projects the desktop token reaches.
    #[arg(long, value_name = "NAME", num_args = 0..=1)]
    owner: Option<Option<String>>,
    /// The project.
    #[arg(long, value_name = "ID")]
    project: Option<String>,
    /// Scope of an agent token: osfoundry:read and/or osfoundry:run (repeatable).
    #[arg(long = "scope", value_name = "SCOPE")]
    scopes: Vec<String>,
}

/// What `token create` mints.
enum TokenTarget {
    /// A token for one project.
    Project(String, TokenSpec),
    /// A desktop token for all of this owner's projects.
    OwnersDesktop(String),
}

/// Reads `token create`'s flags: exactly one kind, and what it reaches.
fn token_target(create: TokenCreateArgs) -> Result<TokenTarget> {
    const KIND: &str = "choose exactly one of --desktop, --agent NAME, --owner";
    if create.agent.is_none() && !create.scopes.is_empty() {
        anyhow::bail!("--scope applies to agent tokens only (--agent NAME)");
    }
    match (create.desktop, create.agent, create.owner, create.project) {
        (true, None, Some(Some(owner)), None) => Ok(TokenTarget::OwnersDesktop(owner)),
        (true, None, Some(Some(_)), Some(_)) => anyhow::bail!(
            "--desktop takes --project ID (that project only) or --owner NAME (all of NAME's projects), not both"
        ),
        (true, None, Some(None), _) => {
            anyhow::bail!("--owner needs the owner's NAME with --desktop: --desktop --owner NAME")
        }
        (true, None, None, Some(project)) => Ok(TokenTarget::Project(project, TokenSpec::Desktop)),
        (true, None, None, None) => anyhow::bail!(
            "--desktop needs --project ID (that project only) or --owner NAME (all of the owner's projects)"
        ),
        (false, None, Some(None), Some(project)) => {
            Ok(TokenTarget::Project(project, TokenSpec::Owner))
        }
        (false, None, Some(Some(_)), _) => anyhow::bail!(
            "an owner token takes --project ID, not a name (--owner NAME goes with --desktop)"
        ),
        (false, Some(name), None, Some(project)) => Ok(TokenTarget::Project(
            project,
            TokenSpec::Agent {
                name,
                scopes: create.scopes,
            },
        )),
        (false, None, None, _) => anyhow::bail!("{KIND}"),
        (_, _, _, None) => anyhow::bail!("--project ID is needed: the project the token is for"),
        _ => anyhow::bail!("{KIND}"),
    }
}

/// Runs one `relay admin` command against the service's database.
pub(crate) async fn run(args: AdminArgs) -> Result<()> {
    match args.command {
        AdminCommand::Db(command) => db(&args.db, args.json, command).await,
        command => on_state(&args.db, args.json, command).await,
    }
}

async fn on_state(db_arg: &DbArg, json: bool, command: AdminCommand) -> Result<()> {
    let app = open_state(db_arg, ServiceConfig::default()).await?;
    let args = Json { json };
    match command {
        AdminCommand::Project(command) => project(&app, args.json, command).await,
        AdminCommand::Token(command) => token(&app, args.json, command).await,
        AdminCommand::ChatLink(command) => chat_link(&app, args.json, command).await,
        AdminCommand::Task(command) => task(&app, args.json, command).await,
        AdminCommand::Owner(command) => owner_command(&app, args.json, command).await,
        AdminCommand::Connection(command) => connection(&app, args.json, command).await,
        AdminCommand::Db(command) => db(db_arg, json, command).await,
    }
}

/// `--json`, as the state commands read it.
struct Json {
    json: bool,
}

/// `relay admin db …` on the service's SQLite file (never opened as the service's state: a
/// restore needs it closed, and a check must not touch it).
async fn db(db: &DbArg, json: bool, command: DbCommand) -> Result<()> {
    let target = db.target()?;
    if matches!(command, DbCommand::Version) {
        return db_version(&target, json).await;
    }
    if is_postgres_url(&target) {
        bail!(
            "`relay admin db` works on the SQLite file; for PostgreSQL use its own tools (pg_dump, pg_restore, amcheck)"
        );
    }
    let path = PathBuf::from(&target);
    match command {
        DbCommand::Backup { file } => {
            if !path.is_file() {
                bail!(
                    "there is no database at {target}: give the service's file with --db or RELAY_DB"
                );
            }
            let opened = path.clone();
            let store = tokio::task::spawn_blocking(move || SqliteStore::open(&opened))
                .await
                .context("opening the database was interrupted")?
                .with_context(|| format!("cannot back up the database {target}"))?;
            store
                .backup_into(file.clone())
                .await
                .with_context(|| format!("cannot back up the database {target}"))?;
            println!("{}", file.display());
            Ok(())
        }
        DbCommand::Check { file } => db_cli::check(
            &file,
            &relay_sqlite::Expected {
                program: relay_sqlite::identity::SERVICE,
                json: relay_service::store::sqlite::JSON_COLUMNS,
            },
        ),
        DbCommand::Restore { file } => {
            db_cli::restore(&file, &path, relay_sqlite::identity::SERVICE)
        }
        DbCommand::Version => db_version(&target, json).await,
    }
}

/// `relay admin db version`: the database's schema version against this build's, read
/// without migrating or changing it.
async fn db_version(target: &str, json: bool) -> Result<()> {
    if !is_postgres_url(target) {
        return db_cli::sqlite_version(Path::new(target), SqliteStore::SCHEMA_VERSION, json);
    }
    let found = relay_service::store::PostgresStore::schema_version(target)
        .await
        .with_context(|| {
            format!(
                "cannot read the schema version of {}",
                relay_service::store::postgres::redact(target)
            )
        })?;
    db_cli::Versions {
        found,
        speaks: relay_service::store::PostgresStore::SCHEMA_VERSION,
    }
    .report(json)
}

async fn owner_command(app: &AppState, json: bool, command: OwnerCommand) -> Result<()> {
    match command {
        OwnerCommand::SetPassword { name, .. } => {
            let mut line = String::new();
            std::io::stdin()
                .read_line(&mut line)
                .context("cannot read the password from stdin")?;
            let password = line.trim_end_matches(['\r', '\n']).to_owned();
            if password.is_empty() {
                anyhow::bail!(
                    "no password on stdin: pipe one line, e.g. `printf '%s\\n' \"$PASSWORD\" | relay admin owner set-password {name} --password-stdin`"
                );
            }
            let set = admin::set_owner_password(&app.admin(), &name, password).await?;
            let owner = set.owner;
            eprintln!(
                "password set; {} signs in as `{}`; {} browser session(s) signed out",
                owner.name, owner.name, set.sessions_ended
            );
            print(
                json,
                &serde_json::json!({
                    "owner": owner.name,
                    "owner_id": owner.id,
                    "sessions_ended": set.sessions_ended,
                }),
                &owner.name,
            )
        }
        OwnerCommand::SignInLink {
            name,
            ttl,
            public_url,
        } => {
            let link = admin::sign_in_link(&app.admin(), &name, ttl, |secret| {
                relay_service::http::oauth::sign_in_link_url(&public_url, secret)
            })
            .await?;
            eprintln!(
                "open this once in {}'s browser before {}",
                link.owner, link.expires_at
            );
            print(json, &link, &link.url)
        }
        OwnerCommand::SignOutAll { name } => {
            let ended = admin::sign_out_all(&app.admin(), &name).await?;
            print(
                json,
                &serde_json::json!({"owner": name, "sessions_ended": ended}),
                &ended.to_string(),
            )
        }
    }
}

async fn connection(app: &AppState, json: bool, command: ConnectionCommand) -> Result<()> {
    match command {
        ConnectionCommand::List { project } => {
            let list = connections::list(app.store.as_ref(), None, project.as_deref()).await?;
            if json {
                println!("{}", serde_json::to_string(&list)?);
                return Ok(());
            }
            if list.is_empty() {
                eprintln!(
                    "no connections yet: an owner makes one by adding the relay to a chat app"
                );
            }
            for c in &list {
                let state = c
                    .revoked_at
                    .as_ref()
                    .map_or_else(|| "active".to_owned(), |at| format!("revoked {at}"));
                println!(
                    "{}  {}  project {}  ({})  created {}  {state}",
                    c.id,
                    for_terminal(&c.client_name),
                    c.project_id,
                    c.scopes.join(" "),
                    c.created_at
                );
            }
            Ok(())
        }
        ConnectionCommand::Revoke { id } => {
            match connections::revoke(app.store.as_ref(), None, &id, app.clock.now()).await? {
                connections::Revoked::NotFound => anyhow::bail!(
                    "no connection {id}: `relay admin connection list` shows them (operator-minted tokens are revoked with `relay admin token revoke`)"
                ),
                outcome => {
                    if outcome == connections::Revoked::Already {
                        tracing::warn!(connection = %id, "connection was already revoked");
                    }
                    print(json, &serde_json::json!({"id": id, "revoked": true}), &id)
                }
            }
        }
    }
}

async fn project(app: &AppState, json: bool, command: ProjectCommand) -> Result<()> {
    match command {
        ProjectCommand::Create { name, owner } => {
            let project = admin::create_project(&app.admin(), &name, owner.as_deref()).await?;
            print(json, &project, &project.project_id)
        }
        ProjectCommand::List => {
            let projects = admin::list_projects(&app.admin()).await?;
            if json {
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
    }
}

async fn token(app: &AppState, json: bool, command: TokenCommand) -> Result<()> {
    match command {
        TokenCommand::List { project } => {
            let tokens = admin::list_tokens(&app.admin(), &project).await?;
            if json {
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
        TokenCommand::Create(create) => {
            let token = match token_target(create)? {
                TokenTarget::Project(project, spec) => {
                    admin::create_token(&app.admin(), &project, spec).await?
                }
                TokenTarget::OwnersDesktop(owner) => {
                    admin::create_owner_desktop_token(&app.admin(), &owner).await?
                }
            };
            print(json, &token, &token.token)
        }
        TokenCommand::Revoke { id } => {
            let revoked = admin::revoke_token(&app.admin(), &id).await?;
            if !revoked.newly_revoked {
                tracing::warn!(token_id = %revoked.token_id, "token was already revoked");
            }
            print(json, &revoked, &revoked.token_id)
        }
    }
}

async fn chat_link(app: &AppState, json: bool, command: ChatLinkCommand) -> Result<()> {
    let link = match command {
        ChatLinkCommand::Create {
            project,
            host,
            event_subscription,
        } => {
            owner::create_link(
                &app.tasks,
                Acting::Operator,
                &project,
                &host,
                event_subscription,
            )
            .await?
        }
        ChatLinkCommand::Subscription { id, active } => {
            owner::set_event_subscription(&app.tasks, Acting::Operator, &id, active).await?
        }
    };
    print(json, &link, &link.chat_link_id)
}

async fn task(app: &AppState, json: bool, command: TaskCommand) -> Result<()> {
    match command {
        TaskCommand::Assign {
            link,
            goal,
            idempotency_key,
        } => {
            let key = idempotency_key.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
            let request = AssignRequest {
                chat_link_id: &link,
                goal: &goal,
                idempotency_key: &key,
            };
            let assigned = owner::assign_task(&app.tasks, Acting::Operator, request).await?;
            if assigned.replayed {
                tracing::warn!(task_id = %assigned.task.task_id, "this key already assigned the task; no second task was made");
            }
            print(json, &assigned, &assigned.task.task_id.to_string())
        }
        TaskCommand::List { link } => {
            let list = owner::list_tasks(&app.tasks, Acting::Operator, &link).await?;
            if json {
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
        TaskCommand::Cancel { id } => {
            let cancelled = owner::cancel_task(&app.tasks, Acting::Operator, &id).await?;
            if cancelled.already_finished {
                tracing::warn!(task_id = %cancelled.task_id, status = %cancelled.status, "the task had already ended; nothing changed");
            }
            print(json, &cancelled, &cancelled.task_id.to_string())
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
