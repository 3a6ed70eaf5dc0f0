//! `relay demo`: the whole product on one machine. An embedded service (temporary SQLite, a
//! free loopback port), a desktop relay with a folder's graphs registered and shared, an agent
//! token, and a self-check that runs one graph end to end through MCP, as a chat agent would:
//! `--check SLUG`, else the first shared graph with a `.test.json` (its first case that expects
//! to complete: its args and replies); with none, the self-check is skipped.

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
pub const SELF_CHECK_TIMEOUT: Duration = Duration::from_secs(50);
/// `relay demo --once` ends within this long, whatever happens.
pub const ONCE_TIMEOUT: Duration = Duration::from_secs(60);

/// What the demo needs.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// The folder of graphs.
    pub graphs: PathBuf,
    /// The mock replies file; default: the self-check case's replies, else
    /// `GRAPHS/replies/demo.json` when there is one, else no replies.
    pub replies: Option<PathBuf>,
    /// The slug the self-check runs (default: the first shared graph with a test file).
    pub check: Option<String>,
    /// Which engine runs the graphs.
    pub engine: runner::engine::EngineKind,
}

/// What the self-check runs: a shared graph, with its arguments and what its run must end as.
#[derive(Debug, Clone)]
pub struct CheckPlan {
    /// The graph's slug.
    pub slug: String,
    /// The arguments.
    pub args: Value,
    /// The status the run must end with.
    pub status: String,
    /// The result it must end with exactly, when the case says (`expect.result`).
    pub result: Option<Value>,
    /// Text its result's JSON must hold, when the case says (`expect.result_contains`).
    pub result_contains: Option<String>,
    /// Where the plan came from, for the progress line.
    pub from: String,
}

/// A running demo.
pub struct Demo {
    /// The MCP endpoint.
    pub mcp_url: String,
    /// An agent token with both scopes.
    pub agent_token: String,
    /// The project.
    pub project_id: String,
    /// What the self-check runs; `None`: nothing to check.
    pub check: Option<CheckPlan>,
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
    let project = admin::create_project(&app.admin(), "demo", Some("demo"))
        .await
        .map_err(setup)?
        .project_id;
    let desktop_token = admin::create_token(&app.admin(), &project, TokenSpec::Desktop)
        .await
        .map_err(setup)?
        .token;
    let agent_token = admin::create_token(
        &app.admin(),
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

/// The demo desktop's state: a folder for the fs tools, both allowed, the folder's graphs
/// shared with `project`, which is enabled. Returns the state and the graphs it shares.
async fn desktop_state(
    dir: &Path,
    options: &DemoOptions,
    engine: &Arc<dyn runner::engine::Engine>,
    project: &str,
    clock: &dyn Clock,
) -> Result<(DesktopState, Vec<Shared>), DemoError> {
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

/// Says what the demo serves and shares.
fn say_shared(base: &str, graphs: &Path, shared: &[Shared]) {
    let slugs: Vec<&str> = shared.iter().map(|g| g.slug.as_str()).collect();
    say(&format!(
        "service at {base}, desktop relay sharing {} graphs from {}: {}",
        shared.len(),
        graphs.display(),
        slugs.join(", ")
    ));
}

/// The engine, saying first what may take a while.
fn prepare_engine(
    kind: runner::engine::EngineKind,
) -> Result<Arc<dyn runner::engine::Engine>, DemoError> {
    match kind {
        runner::engine::EngineKind::Wasm => {
            // Every few seconds a line says how long it has taken so far.
            let notice = runner::progress::Notice::new(
                "demo: ",
                "preparing the sandbox",
                "about 10 s the first time on this machine, cached afterwards",
                std::time::Duration::ZERO,
            );
            runner::progress::with_progress(&notice, || kind.build()).map_err(setup)
        }
        runner::engine::EngineKind::Boa => {
            say("preparing the in-process engine");
            kind.build().map_err(setup)
        }
    }
}

impl Demo {
    /// Starts the service and the desktop relay with the folder's graphs shared.
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
        let engine = prepare_engine(options.engine)?;
        say(&format!(
            "reading the graphs in {}",
            options.graphs.display()
        ));
        let (state, shared) = desktop_state(
            dir.path(),
            options,
            &engine,
            &credentials.project,
            clock.as_ref(),
        )
        .await?;
        say_shared(&base, &options.graphs, &shared);
        let (check, provider) = plan(options, &shared)?;
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let service = tokio::spawn(async move {
            if let Err(e) =
                relay_service::serve(listener, app, async move { stop.cancelled().await }).await
            {
                tracing::error!("the demo service stopped: {e}");
            }
        });
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
            check,
            shutdown,
            tasks: vec![service, desktop],
            _dir: dir,
        })
    }

    /// Runs the planned graph through MCP as a chat agent would; returns the finished run
    /// (`None` when there is nothing to check).
    pub async fn self_check(&self) -> Result<Option<Value>, DemoError> {
        let Some(plan) = &self.check else {
            return Ok(None);
        };
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
            let session = agent
                .find_session(&self.project_id, &plan.slug, deadline)
                .await?;
            agent.run_session(session, plan, deadline).await
        }
        .await;
        let _ = agent.client.cancel().await;
        outcome.map(Some)
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

    /// Lists the sessions until the graph `slug` is shared; returns its session id.
    async fn find_session(
        &self,
        project_id: &str,
        slug: &str,
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
            if let Some(found) = sessions.iter().find(|s| s["slug"] == slug) {
                say(&format!(
                    "agent: list_graph_sessions → {} shared sessions",
                    sessions.len()
                ));
                return Ok(found["graph_session_id"].clone());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(DemoError::SelfCheck(format!(
                    "the desktop never shared the graph {slug}"
                )));
            }
            tokio::time::sleep(SELF_CHECK_POLL).await;
        }
    }

    /// Queues the planned graph and follows it to its end; a run that does not end as the plan
    /// expects fails.
    async fn run_session(
        &self,
        session: Value,
        plan: &CheckPlan,
        deadline: tokio::time::Instant,
    ) -> Result<Value, DemoError> {
        let ticket = self
            .call(
                "run_graph_session",
                json!({"graph_session_id": session, "arguments": plan.args, "idempotency_key": uuid::Uuid::new_v4().to_string()}),
            )
            .await?;
        let command = ticket["command_id"].clone();
        say(&format!(
            "agent: run_graph_session {} → command {} ({})",
            plan.slug,
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
            if matches!(status.as_str(), "completed" | "failed" | "cancelled") {
                if status != plan.status {
                    return Err(DemoError::SelfCheck(format!(
                        "the run ended {status}, {} expects {}: {}",
                        plan.from, plan.status, run["error"]
                    )));
                }
                return plan.compare_result(run);
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

impl CheckPlan {
    /// The run, when its result is what the case expects (exactly, and holding the text it
    /// names); otherwise what differs.
    fn compare_result(&self, run: Value) -> Result<Value, DemoError> {
        let got = &run["result"];
        if let Some(expected) = &self.result
            && got != expected
        {
            return Err(DemoError::SelfCheck(format!(
                "the run's result differs from what {} expects: expected {expected}, got {got}",
                self.from
            )));
        }
        if let Some(needle) = &self.result_contains
            && !got.to_string().contains(needle.as_str())
        {
            return Err(DemoError::SelfCheck(format!(
                "the run's result does not hold {needle:?}, which {} expects: got {got}",
                self.from
            )));
        }
        Ok(run)
    }
}

/// The case whose result the self-check compares: a run through the service takes the
/// desktop's seed, clock and folder, not the case's, so the result of a case that fixes them
/// is not compared (its status still is), and the owner is told.
fn comparable<'a>(
    case: Option<&'a runner::testing::FileCase>,
    from: &str,
) -> Option<&'a runner::testing::FileCase> {
    case.filter(|c| {
        let own = c.case.seed.is_some() || c.case.clock.is_some() || !c.case.files.is_empty();
        if own {
            say(&format!(
                "{from} fixes a seed, clock or files, which a run through the service does not take: its status is checked, not its result"
            ));
        }
        !own
    })
}

/// A graph the demo shares.
#[derive(Debug, Clone)]
struct Shared {
    slug: String,
    file: PathBuf,
}

/// What the self-check runs (`--check SLUG`, else the first shared graph with a test case that
/// expects to complete) and the mock provider the desktop answers agents with.
fn plan(
    options: &DemoOptions,
    shared: &[Shared],
) -> Result<(Option<CheckPlan>, runner::host::mock::MockProvider), DemoError> {
    let cases = test_cases(&options.graphs)?;
    let case_of = |graph: &Shared| {
        let same = |c: &&runner::testing::FileCase| {
            c.graph.canonicalize().ok() == graph.file.canonicalize().ok()
        };
        cases
            .iter()
            .filter(same)
            .find(|c| c.case.expect.status == Some(runner::RunStatus::Completed))
            .or_else(|| {
                cases
                    .iter()
                    .filter(same)
                    .find(|c| c.case.expect.status.is_some())
            })
            .cloned()
    };
    let (graph, case) = match &options.check {
        Some(slug) => {
            let Some(graph) = shared.iter().find(|g| &g.slug == slug) else {
                let known: Vec<&str> = shared.iter().map(|g| g.slug.as_str()).collect();
                return Err(DemoError::Setup(format!(
                    "--check {slug}: no shared graph has that slug (they are {})",
                    known.join(", ")
                )));
            };
            (graph, case_of(graph))
        }
        None => match shared.iter().find_map(|g| case_of(g).map(|c| (g, Some(c)))) {
            Some(found) => found,
            None => {
                say(&format!(
                    "no graph in {} has a .test.json, so there is no self-check (pass --check SLUG to run one with no arguments)",
                    options.graphs.display()
                ));
                return Ok((None, replies_or_none(replies_file(options, None)?)?));
            }
        },
    };
    let from = match &case {
        Some(c) => format!(
            "{} ({})",
            c.graph.with_extension("test.json").display(),
            c.case.name.as_deref().unwrap_or("its first case")
        ),
        None => "--check".to_owned(),
    };
    let provider = replies_or_none(replies_file(options, case.as_ref())?)?;
    let comparable = comparable(case.as_ref(), &from);
    let plan = CheckPlan {
        slug: graph.slug.clone(),
        args: case
            .as_ref()
            .map_or_else(|| json!({}), |c| c.case.args.clone()),
        status: case
            .as_ref()
            .and_then(|c| c.case.expect.status)
            .map_or("completed", runner::RunStatus::as_str)
            .to_owned(),
        result: comparable.and_then(|c| c.case.expect.result.clone()),
        result_contains: comparable.and_then(|c| c.case.expect.result_contains.clone()),
        from,
    };
    say(&format!(
        "self-check: {} with the args of {}",
        plan.slug, plan.from
    ));
    Ok((Some(plan), provider))
}

/// `found`, or a mock provider with no replies (an agent then fails, saying nothing matched).
fn replies_or_none(
    found: Option<runner::host::mock::MockProvider>,
) -> Result<runner::host::mock::MockProvider, DemoError> {
    match found {
        Some(mock) => Ok(mock),
        None => runner::host::mock::MockProvider::from_json(json!({})).map_err(setup),
    }
}

/// Every case of the folder's test files (a test file that cannot be read is said and skipped).
fn test_cases(dir: &Path) -> Result<Vec<runner::testing::FileCase>, DemoError> {
    let files = runner::testing::find_tests(dir).map_err(setup)?;
    let mut cases = Vec::new();
    for file in files {
        match runner::testing::read_test_file(&file) {
            Ok(found) => cases.extend(found),
            Err(e) => say(&format!("not used for the self-check: {e}")),
        }
    }
    Ok(cases)
}

/// The replies the desktop answers with: `--replies`, else the self-check case's own, else
/// `GRAPHS/replies/demo.json` when it exists.
fn replies_file(
    options: &DemoOptions,
    case: Option<&runner::testing::FileCase>,
) -> Result<Option<runner::host::mock::MockProvider>, DemoError> {
    use runner::host::mock::MockProvider;
    if let Some(file) = &options.replies {
        return MockProvider::from_file(file).map(Some).map_err(setup);
    }
    if let Some(case) = case {
        let base = case.graph.parent().unwrap_or(Path::new("."));
        if let Some(mock) = runner::testing::case_replies(&case.case, base).map_err(setup)? {
            return Ok(Some(mock));
        }
    }
    let default = options.graphs.join("replies").join("demo.json");
    if default.is_file() {
        return MockProvider::from_file(&default).map(Some).map_err(setup);
    }
    Ok(None)
}

/// Registers every graph in `dir` and shares it with `project`; returns how many.
async fn register_graphs(
    state: &DesktopState,
    engine: &Arc<dyn runner::engine::Engine>,
    dir: &Path,
    project: &str,
    now: relay_protocol::clock::Timestamp,
) -> Result<Vec<Shared>, DemoError> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        DemoError::Setup(format!(
            "cannot read the example graphs in {}: {e} (run from the repository root or pass --graphs DIR)",
            dir.display()
        ))
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "js") || runner::typescript::is_typescript(p)
        })
        .collect();
    files.sort();
    let mut shared = Vec::new();
    for file in files {
        // A TypeScript graph is shared with its types erased, as `relay desktop session add`
        // stores it.
        let script = runner::input::read_script(&file)
            .map_err(|e| DemoError::Setup(format!("{}: {e}", file.display())))?;
        let meta = engine
            .describe(script.clone().into())
            .await
            .map_err(|e| DemoError::Setup(format!("{}: {e}", file.display())))?;
        let id = state
            .upsert_session(&meta, &script, None, now)
            .map_err(setup)?;
        state.share(project, &id, now).map_err(setup)?;
        shared.push(Shared {
            slug: meta.slug.clone(),
            file,
        });
    }
    if shared.is_empty() {
        return Err(DemoError::Setup(format!(
            "no *.js or *.ts graphs in {}",
            dir.display()
        )));
    }
    Ok(shared)
}

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Run the self-check and exit with its status (within 60 s).
    #[arg(long)]
    once: bool,
    /// The folder of graphs to share.
    #[arg(long, default_value = "graphs")]
    graphs: PathBuf,
    /// The mock agent replies (default: the self-check case's replies, else
    /// GRAPHS/replies/demo.json when there is one).
    #[arg(long)]
    replies: Option<PathBuf>,
    /// The graph the self-check runs (default: the first shared graph with a .test.json).
    #[arg(long, value_name = "SLUG")]
    check: Option<String>,
    /// The engine that runs the graphs.
    #[arg(long, value_parser = crate::runner_flags::ENGINES, default_value_t = runner::engine::EngineKind::Wasm)]
    engine: runner::engine::EngineKind,
}

/// `relay demo`: starts both sides, prints what an MCP client needs, runs the self-check, then
/// serves until Ctrl-C (or stops at once with `--once`, within [`ONCE_TIMEOUT`]).
pub(crate) async fn run(args: DemoArgs) -> Result<()> {
    let once = args.once;
    let options = DemoOptions {
        replies: args.replies,
        check: args.check,
        graphs: args.graphs,
        engine: args.engine,
    };
    if !once {
        // Ctrl-C is heard from the start, also while preparing and during the self-check.
        let interrupted = CancellationToken::new();
        let on_ctrl_c = interrupted.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                on_ctrl_c.cancel();
            }
        });
        let demo = tokio::select! {
            started = start_and_check(&options) => started?.0,
            () = interrupted.cancelled() => {
                eprintln!("demo: stopping");
                return Ok(());
            }
        };
        return serve(demo, &interrupted).await;
    }
    match tokio::time::timeout(ONCE_TIMEOUT, start_and_check(&options)).await {
        Ok(Ok((demo, checked))) => {
            demo.stop().await;
            checked?;
            Ok(())
        }
        Ok(Err(e)) => Err(e),
        Err(_) => anyhow::bail!(
            "relay demo --once did not finish within {} s; run it without --once to watch it",
            ONCE_TIMEOUT.as_secs()
        ),
    }
}

/// Starts the demo, prints the MCP URL, token and project, and runs the self-check.
async fn start_and_check(options: &DemoOptions) -> Result<(Demo, Result<(), DemoError>)> {
    let demo = Demo::start(options).await?;
    println!("MCP URL: {}", demo.mcp_url);
    println!("Token:   {}", demo.agent_token);
    println!("Project: {}", demo.project_id);
    let checked = match demo.self_check().await {
        Ok(Some(run)) => {
            eprintln!(
                "demo: self-check passed: {}",
                serde_json::to_string(&run["result"])?
            );
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(e) => {
            eprintln!("demo: {e}");
            Err(e)
        }
    };
    Ok((demo, checked))
}

/// Serves until Ctrl-C (`interrupted`).
async fn serve(demo: Demo, interrupted: &CancellationToken) -> Result<()> {
    eprintln!(
        "demo: connect any MCP client (e.g. the MCP Inspector) with that URL and bearer token (Authorization: Bearer <token>); list_graph_sessions takes that project_id; Ctrl-C stops everything"
    );
    interrupted.cancelled().await;
    eprintln!("demo: stopping");
    demo.stop().await;
    Ok(())
}
