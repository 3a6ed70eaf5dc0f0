//! `relay demo`: the whole product on one machine. An embedded service (temporary SQLite, a
//! free loopback port), a desktop relay with the example graphs registered and shared, an agent
//! token, and a self-check that runs one example end to end through MCP, as a chat agent would.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ClientConfig, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use anyhow::Result;
use clap::Args;

use relay_desktop::api::{DesktopApi, HttpTransport};
use relay_desktop::state::DesktopState;
use relay_desktop::{DesktopConfig, Relay, Runtime};
use relay_protocol::clock::{Clock, SystemClock};
use relay_service::admin::{self, TokenSpec};
use relay_service::store::SqliteStore;
use relay_service::{AppState, ServiceConfig};

/// How often the demo's desktop passes (the product's default is 20 s).
pub const DEMO_POLL_INTERVAL: Duration = Duration::from_secs(2);
/// How often the self-check asks for the run's status.
pub const SELF_CHECK_POLL: Duration = Duration::from_secs(1);
/// The self-check gives up after this long.
pub const SELF_CHECK_TIMEOUT: Duration = Duration::from_secs(120);

/// What the demo needs.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// The folder of example graphs.
    pub graphs: PathBuf,
    /// The mock replies file.
    pub replies: PathBuf,
    /// Which engine runs the graphs.
    pub engine: runner::engine::EngineKind,
}

/// A running demo.
pub struct Demo {
    /// The MCP endpoint.
    pub mcp_url: String,
    /// An agent token with both scopes.
    pub agent_token: String,
    /// The project.
    pub project_id: String,
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

/// Why the demo could not start or its self-check failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Setting up failed.
    #[error("the demo could not start: {0}")]
    Setup(String),
    /// The self-check did not complete.
    #[error("the self-check failed: {0}")]
    SelfCheck(String),
}

fn setup(e: impl std::fmt::Display) -> DemoError {
    DemoError::Setup(e.to_string())
}

/// Progress for a person, on stderr.
fn say(line: &str) {
    eprintln!("demo: {line}");
}

/// What the demo's service hands out: its project, a desktop token and an agent token.
struct Credentials {
    project: String,
    desktop_token: String,
    agent_token: String,
}

async fn credentials(app: &AppState) -> Result<Credentials, DemoError> {
    let project = admin::create_project(app, "demo", Some("demo"))
        .await
        .map_err(setup)?
        .project_id;
    let desktop_token = admin::create_token(app, &project, TokenSpec::Desktop)
        .await
        .map_err(setup)?
        .token;
    let agent_token = admin::create_token(
        app,
        &project,
        TokenSpec::Agent {
            name: "demo-agent".into(),
            scopes: vec!["osfoundry:read".into(), "osfoundry:run".into()],
        },
    )
    .await
    .map_err(setup)?
    .token;
    Ok(Credentials {
        project,
        desktop_token,
        agent_token,
    })
}

/// The demo desktop's state: a folder for the fs tools, both allowed, the example graphs
/// shared with `project`, which is enabled. Returns the state and how many graphs it shares.
async fn desktop_state(
    dir: &Path,
    options: &DemoOptions,
    engine: &Arc<dyn runner::engine::Engine>,
    project: &str,
    clock: &dyn Clock,
) -> Result<(DesktopState, usize), DemoError> {
    let state = DesktopState::open(&dir.join("desktop.db")).map_err(setup)?;
    let folder = dir.join("folder");
    std::fs::create_dir_all(&folder).map_err(setup)?;
    state.set_folder(&folder).map_err(setup)?;
    for tool in ["fs.write", "fs.read"] {
        state
            .set_policy(tool, runner::host::approvals::Policy::Allow)
            .map_err(setup)?;
    }
    let shared = register_graphs(&state, engine, &options.graphs, project, clock.now()).await?;
    state
        .set_project_enabled(project, true, clock.now())
        .map_err(setup)?;
    Ok((state, shared))
}

impl Demo {
    /// Starts the service and the desktop relay with the example graphs shared.
    pub async fn start(options: &DemoOptions) -> Result<Demo, DemoError> {
        let dir = tempfile::tempdir().map_err(setup)?;
        let store = SqliteStore::open(&dir.path().join("relay.db")).map_err(setup)?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let app = AppState::new(Arc::new(store), clock.clone(), ServiceConfig::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(setup)?;
        let base = format!("http://{}", listener.local_addr().map_err(setup)?);
        let credentials = credentials(&app).await?;
        let engine = options.engine.build().map_err(setup)?;
        let (state, shared) = desktop_state(
            dir.path(),
            options,
            &engine,
            &credentials.project,
            clock.as_ref(),
        )
        .await?;
        say(&format!(
            "service at {base}, desktop relay sharing {shared} example graphs from {}",
            options.graphs.display()
        ));
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let service = tokio::spawn(async move {
            if let Err(e) =
                relay_service::serve(listener, app, async move { stop.cancelled().await }).await
            {
                tracing::error!("the demo service stopped: {e}");
            }
        });
        let provider =
            runner::host::mock::MockProvider::from_file(&options.replies).map_err(setup)?;
        let relay = Relay::new(
            state,
            DesktopApi::new(
                Arc::new(HttpTransport::new(&base).map_err(setup)?),
                &credentials.desktop_token,
            ),
            clock,
            Runtime {
                engine,
                provider: Arc::new(provider),
                events: Arc::new(runner::trace::TracePrinter::stderr()),
            },
            DesktopConfig {
                poll_interval: DEMO_POLL_INTERVAL,
                ..DesktopConfig::default()
            },
        );
        let stop = shutdown.clone();
        let desktop = tokio::spawn(async move {
            if let Err(e) = relay.run(stop).await {
                tracing::error!("the demo desktop relay stopped: {e}");
            }
        });
        Ok(Demo {
            mcp_url: format!("{base}/mcp"),
            agent_token: credentials.agent_token,
            project_id: credentials.project,
            shutdown,
            tasks: vec![service, desktop],
            _dir: dir,
        })
    }

    /// Runs the triage example through MCP as a chat agent would; returns the finished run.
    pub async fn self_check(&self) -> Result<Value, DemoError> {
        let http = graphrelay_net::mcp_client().map_err(|e| DemoError::SelfCheck(e.to_string()))?;
        let transport = StreamableHttpClientTransport::with_client(
            http,
            StreamableHttpClientTransportConfig::with_uri(self.mcp_url.clone())
                .auth_header(self.agent_token.clone()),
        );
        let client = ClientConfig::default()
            .serve_with_lifecycle(
                transport,
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                },
            )
            .await
            .map_err(check)?;
        let agent = DemoAgent { client };
        // The desktop's first sync publishes the sessions; until then the list is empty.
        let deadline = tokio::time::Instant::now() + SELF_CHECK_TIMEOUT;
        let outcome = async {
            let triage = agent.find_triage(&self.project_id, deadline).await?;
            agent.run_triage(triage, deadline).await
        }
        .await;
        let _ = agent.client.cancel().await;
        outcome
    }

    /// Stops the service and the relay and waits for both.
    pub async fn stop(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

fn check(error: impl std::fmt::Display) -> DemoError {
    DemoError::SelfCheck(error.to_string())
}

/// The self-check's chat agent: an MCP client with the demo's agent token.
struct DemoAgent {
    client: rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>,
}

impl DemoAgent {
    /// Calls `tool`; a tool error fails the self-check.
    async fn call(&self, tool: &str, arguments: Value) -> Result<Value, DemoError> {
        let Value::Object(arguments) = arguments else {
            return Err(DemoError::SelfCheck("arguments must be an object".into()));
        };
        let result = self
            .client
            .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
            .await
            .map_err(check)?;
        if result.is_error == Some(true) {
            return Err(DemoError::SelfCheck(format!(
                "{tool}: {:?}",
                result.content
            )));
        }
        result
            .structured_content
            .ok_or_else(|| DemoError::SelfCheck(format!("{tool}: no structured content")))
    }

    /// Lists the sessions until the triage graph is shared; returns its session id.
    async fn find_triage(
        &self,
        project_id: &str,
        deadline: tokio::time::Instant,
    ) -> Result<Value, DemoError> {
        loop {
            let listed = self
                .call(
                    "list_graph_sessions",
                    json!({"project_id": project_id, "limit": 50}),
                )
                .await?;
            let sessions = listed["sessions"].as_array().cloned().unwrap_or_default();
            if let Some(triage) = sessions.iter().find(|s| s["slug"] == "triage") {
                say(&format!(
                    "agent: list_graph_sessions → {} shared sessions",
                    sessions.len()
                ));
                return Ok(triage["graph_session_id"].clone());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(DemoError::SelfCheck(
                    "the desktop never shared the triage graph".into(),
                ));
            }
            tokio::time::sleep(SELF_CHECK_POLL).await;
        }
    }

    /// Queues the triage graph and follows it to its end; a run that does not complete fails.
    async fn run_triage(
        &self,
        triage: Value,
        deadline: tokio::time::Instant,
    ) -> Result<Value, DemoError> {
        let args =
            json!({"ticket": "Checkout is down for every customer since 09:12", "id": "DEMO-1"});
        let ticket = self
            .call(
                "run_graph_session",
                json!({"graph_session_id": triage, "arguments": args, "idempotency_key": uuid::Uuid::new_v4().to_string()}),
            )
            .await?;
        let command = ticket["command_id"].clone();
        say(&format!(
            "agent: run_graph_session triage → command {} ({})",
            command.as_str().unwrap_or("?"),
            ticket["status"].as_str().unwrap_or("?")
        ));
        let mut last = String::new();
        loop {
            let run = self
                .call("get_graph_run", json!({"command_id": command}))
                .await?;
            let status = run["status"].as_str().unwrap_or("").to_owned();
            if status != last {
                say(&format!("agent: get_graph_run → {status}"));
                last = status.clone();
            }
            match status.as_str() {
                "completed" => return Ok(run),
                "failed" | "cancelled" => {
                    return Err(DemoError::SelfCheck(format!(
                        "the run ended {status}: {}",
                        run["error"]
                    )));
                }
                _ => {}
            }
            if tokio::time::Instant::now() > deadline {
                return Err(DemoError::SelfCheck(
                    "the run did not finish in time".into(),
                ));
            }
            tokio::time::sleep(SELF_CHECK_POLL).await;
        }
    }
}

/// Registers every graph in `dir` and shares it with `project`; returns how many.
async fn register_graphs(
    state: &DesktopState,
    engine: &Arc<dyn runner::engine::Engine>,
    dir: &Path,
    project: &str,
    now: relay_protocol::clock::Timestamp,
) -> Result<usize, DemoError> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        DemoError::Setup(format!(
            "cannot read the example graphs in {}: {e} (run from the repository root or pass --graphs DIR)",
            dir.display()
        ))
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "js"))
        .collect();
    files.sort();
    let mut shared = 0;
    for file in files {
        let script = std::fs::read_to_string(&file).map_err(setup)?;
        let meta = engine
            .describe(script.clone().into())
            .await
            .map_err(|e| DemoError::Setup(format!("{}: {e}", file.display())))?;
        let id = state
            .upsert_session(&meta, &script, None, now)
            .map_err(setup)?;
        state.share(project, &id, now).map_err(setup)?;
        shared += 1;
    }
    if shared == 0 {
        return Err(DemoError::Setup(format!(
            "no *.js graphs in {}",
            dir.display()
        )));
    }
    Ok(shared)
}

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
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

/// `relay demo`: starts both sides, runs the self-check, then serves until Ctrl-C (or stops at
/// once with `--once`).
pub(crate) async fn run(args: DemoArgs) -> Result<()> {
    let options = DemoOptions {
        replies: args
            .replies
            .clone()
            .unwrap_or_else(|| args.graphs.join("replies").join("demo.json")),
        graphs: args.graphs,
        engine: args.engine,
    };
    let demo = Demo::start(&options).await?;
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
