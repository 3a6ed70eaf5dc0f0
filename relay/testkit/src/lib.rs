//! What the relay's tests share: a service on a loopback port with a manual clock, MCP clients
//! for it, and (in [`chat`]) linked-chat set-ups. A dev-dependency only.

pub mod chat;
pub mod desktop_page;
pub mod fault_proxy;
pub mod oauth;
pub mod proxy;
pub mod raw;
pub mod schema;
pub mod tmpfs;
pub mod webdriver;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use relay_protocol::clock::{ManualClock, Timestamp};
use relay_service::admin::{self, TokenSpec};
use relay_service::store::SqliteStore;
use relay_service::{AppState, ServiceConfig};
use rmcp::RoleClient;
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// 2026-11-08T09:30:00Z.
pub const START: Timestamp = Timestamp::from_unix_millis(1_794_130_200_000);

/// A running service.
pub struct TestService {
    pub base: String,
    pub app: Arc<AppState>,
    pub clock: Arc<ManualClock>,
    pub db: PathBuf,
    _dir: Option<tempfile::TempDir>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestService {
    /// A service over a fresh temporary database.
    pub async fn start() -> TestService {
        Self::start_with_config(ServiceConfig::default()).await
    }

    /// A service over a fresh temporary database with `config`.
    pub async fn start_with_config(config: ServiceConfig) -> TestService {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("relay.db");
        let mut service = Self::start_at(&db, Arc::new(ManualClock::new(START)), config).await;
        service._dir = Some(dir);
        service
    }

    /// A service over the database at `db`, on a loopback port; its public URL is `base`
    /// unless `config` names one.
    pub async fn start_at(
        db: &Path,
        clock: Arc<ManualClock>,
        config: ServiceConfig,
    ) -> TestService {
        // Tests that build a reqwest client of their own after starting a service (the
        // service's, until they go through graphrelay_net) must find the TLS provider installed.
        graphrelay_net::install_crypto_provider();
        let store = SqliteStore::open(db).expect("open store");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        // As `relay serve` does: the bound address is the public URL unless one is given.
        let config = ServiceConfig {
            public_url: config.public_url.or_else(|| Some(base.clone())),
            listen_loopback: true,
            ..config
        };
        let app = AppState::new(Arc::new(store), clock.clone(), config);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(relay_service::serve(listener, app.clone(), async move {
            let _ = stopped.await;
        }));
        TestService {
            base,
            app,
            clock,
            db: db.to_owned(),
            _dir: None,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Stops the service and waits until it has stopped; returns its temp dir to keep the DB.
    pub async fn stop(mut self) -> Option<tempfile::TempDir> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("server task").expect("server result");
        }
        self._dir.take()
    }

    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// A project of `owner`.
    pub async fn project(&self, name: &str, owner: &str) -> String {
        admin::create_project(&self.app.admin(), name, Some(owner))
            .await
            .expect("create project")
            .project_id
    }

    /// An agent token on `project` with `scopes`; returns (token, token id).
    pub async fn agent(&self, project: &str, scopes: &[&str]) -> (String, String) {
        let spec = TokenSpec::Agent {
            name: "claude".into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
        };
        let token = admin::create_token(&self.app.admin(), project, spec)
            .await
            .expect("create agent token");
        (token.token, token.token_id)
    }

    /// An agent token with both scopes.
    pub async fn full_agent(&self, project: &str) -> String {
        self.agent(project, &["osfoundry:read", "osfoundry:run"])
            .await
            .0
    }

    /// A desktop client for the owner of `project`.
    pub async fn desktop(&self, project: &str) -> Desktop {
        let token = admin::create_token(&self.app.admin(), project, TokenSpec::Desktop)
            .await
            .expect("create desktop token")
            .token;
        Desktop {
            http: http_client(),
            base: self.base.clone(),
            token,
        }
    }

    /// A desktop client with a token for every project of the owner named `owner`.
    pub async fn owners_desktop(&self, owner: &str) -> Desktop {
        let token = admin::create_owner_desktop_token(&self.app.admin(), owner)
            .await
            .expect("create owner-wide desktop token")
            .token;
        Desktop {
            http: http_client(),
            base: self.base.clone(),
            token,
        }
    }
}

/// The throwaway PostgreSQL server's URL (`scripts/pg.sh start`, which `.ci/run` runs), or
/// `None` after saying why the PostgreSQL tests are skipped; `GRAPHRELAY_REQUIRE_PG=1` makes a
/// missing server a failure.
pub fn postgres_url() -> Option<String> {
    let url = std::env::var("GRAPHRELAY_PG_URL")
        .ok()
        .filter(|u| !u.is_empty());
    if url.is_none() {
        assert!(
            std::env::var("GRAPHRELAY_REQUIRE_PG").as_deref() != Ok("1"),
            "GRAPHRELAY_PG_URL is unset and GRAPHRELAY_REQUIRE_PG=1 says PostgreSQL must be there (.ci/run starts it with scripts/pg.sh)"
        );
        eprintln!(
            "skipped: no PostgreSQL (GRAPHRELAY_PG_URL=$(scripts/pg.sh start) runs these tests)"
        );
    }
    url
}

/// The workspace's root folder (where `scripts/` and `target/` are).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the workspace root")
        .to_path_buf()
}

/// Runs `scripts/pg.sh ACTION` on a PostgreSQL cluster of a test's own in `dir` (serving TLS
/// only, with the certificates in `tls_dir`, when that is given); what it printed, trimmed (the
/// cluster's URL, for `start`). A failure fails the test with pg.sh's stderr.
pub fn pg_sh(action: &str, dir: &Path, tls_dir: Option<&Path>) -> String {
    let mut command = std::process::Command::new("bash");
    command
        .arg(workspace_root().join("scripts/pg.sh"))
        .arg(action)
        .env("PG_DIR", dir);
    if let Some(tls_dir) = tls_dir {
        command.env("PG_TLS_DIR", tls_dir);
    }
    let output = command.output().expect("run scripts/pg.sh");
    assert!(
        output.status.success(),
        "pg.sh {action}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A plain HTTP client, as the desktop and owner helpers use.
pub fn http_client() -> reqwest::Client {
    graphrelay_net::client().expect("HTTP client")
}

/// `gs_` id number `n`.
pub fn gs(n: u32) -> String {
    format!("gs_{n:032x}")
}

/// Sync metadata of session `n`.
pub fn session(n: u32) -> Value {
    json!({
        "graph_session_id": gs(n),
        "name": format!("Graph {n}"),
        "description": "A test graph",
        "slug": format!("graph-{n}"),
        "version": "1.0.0",
        "status": "active",
    })
}

/// A desktop relay speaking the desktop API.
pub struct Desktop {
    pub http: reqwest::Client,
    pub base: String,
    pub token: String,
}

const PREFIX: &str = "/external-assistants/graph-relays";

impl Desktop {
    pub async fn sync_raw(&self, body: &Value) -> (u16, Value) {
        self.post(&format!("{PREFIX}/sync"), body).await
    }

    /// Syncs `sessions` for `project`, expecting success; returns the queued commands.
    pub async fn sync(&self, project: &str, sessions: &[u32]) -> Vec<Value> {
        let sessions: Vec<Value> = sessions.iter().map(|&n| session(n)).collect();
        let (status, body) = self
            .sync_raw(&json!({"project_id": project, "sessions": sessions}))
            .await;
        assert_eq!(status, 200, "sync failed: {body}");
        body["commands"].as_array().cloned().unwrap_or_default()
    }

    pub async fn started(&self, id: &str, execution_id: &str) -> (u16, Value) {
        self.post(
            &format!("{PREFIX}/commands/{id}/started"),
            &json!({"execution_id": execution_id}),
        )
        .await
    }

    pub async fn control(&self, id: &str) -> (u16, Value) {
        let response = self
            .http
            .get(format!("{}{PREFIX}/commands/{id}/control", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("control request");
        decode(response).await
    }

    pub async fn complete(&self, id: &str, body: &Value) -> (u16, Value) {
        self.post(&format!("{PREFIX}/commands/{id}/complete"), body)
            .await
    }

    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await
            .expect("desktop request");
        decode(response).await
    }
}

pub async fn decode(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Which MCP protocol era a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// The current stateless protocol (`server/discover`, per-request metadata).
    Current,
    /// 2025: `initialize` and an `Mcp-Session-Id`.
    Sessions2025,
}

pub type McpClient = RunningService<RoleClient, ClientConfig>;

/// An rmcp client on `url` with `token`.
pub async fn mcp_client(url: &str, token: &str, era: Era) -> McpClient {
    try_mcp_client(url, token, era)
        .await
        .expect("MCP client starts")
}

pub async fn try_mcp_client(
    url: &str,
    token: &str,
    era: Era,
) -> Result<McpClient, Box<rmcp::service::ClientInitializeError>> {
    let transport = StreamableHttpClientTransport::with_client(
        graphrelay_net::mcp_client().expect("MCP HTTP client"),
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token.to_owned()),
    );
    let lifecycle = match era {
        Era::Current => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
        Era::Sessions2025 => ClientLifecycleMode::Initialize,
    };
    ClientConfig::default()
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .map_err(Box::new)
}

/// Calls `tool` with `arguments`, expecting a tool result (error or not).
pub async fn call(client: &McpClient, tool: &str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("tool arguments must be an object");
    };
    let result = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
        .expect("tool call answered");
    check_output(tool, &result);
    result
}

/// A successful answer's `structuredContent` fits the tool's `outputSchema`.
pub fn check_output(tool: &str, result: &CallToolResult) {
    let schema = relay_service::http::mcp::standard_tools()
        .definition(tool)
        .and_then(|definition| definition.output_schema.clone());
    let (Some(schema), Some(structured)) = (schema, &result.structured_content) else {
        return;
    };
    if result.is_error == Some(true) {
        return;
    }
    let schema = Value::Object(schema.as_ref().clone());
    if let Err(why) = schema::check(&schema, structured) {
        panic!(
            "{tool}'s answer does not fit its outputSchema: {why}\nanswer: {structured}\nschema: {schema}"
        );
    }
}

/// The structured content of a successful result.
pub fn ok(result: &CallToolResult) -> Value {
    assert_ne!(
        result.is_error,
        Some(true),
        "tool failed: {:?}",
        result.content
    );
    result
        .structured_content
        .clone()
        .expect("structured content")
}

/// The text of an error result.
pub fn err(result: &CallToolResult) -> String {
    assert_eq!(
        result.is_error,
        Some(true),
        "expected a tool error: {:?}",
        result.structured_content
    );
    text(result)
}

/// An in-band 403 as JSON-RPC `body`: an error whose text and `_meta` challenge name the
/// missing `scope`, and no `structuredContent` (it could not fit the tool's output schema).
pub fn assert_scope_refusal(body: &Value, scope: &str) {
    let result = &body["result"];
    assert_eq!(result["isError"], true, "{body}");
    assert!(result.get("structuredContent").is_none(), "{body}");
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains(scope), "{body}");
    let challenge = result["_meta"]["mcp/www_authenticate"][0]
        .as_str()
        .unwrap_or_default();
    assert!(challenge.contains(&format!("scope=\"{scope}\"")), "{body}");
}

/// Every text content, one block a line: a success's JSON and then its hint, or an error's
/// message.
pub fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text())
        .map(|t| t.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first text content parsed as JSON, which must be the result's structured content: a
/// host that hands its model only `content` gives it the same data.
pub fn text_json(result: &CallToolResult) -> Value {
    let first = result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default();
    let parsed: Value = serde_json::from_str(&first)
        .unwrap_or_else(|e| panic!("the first text block is not JSON ({e}): {first}"));
    assert_eq!(
        Some(&parsed),
        result.structured_content.as_ref(),
        "the text is the structured content"
    );
    parsed
}

/// A run request for session `n` under `key`.
pub fn run_args(n: u32, key: &str, arguments: Value) -> Value {
    json!({"graph_session_id": gs(n), "arguments": arguments, "idempotency_key": key})
}

/// A service with project `p` (owner `alice`), its desktop sharing session 1, and an agent
/// client with both scopes.
pub struct Setup {
    pub service: TestService,
    pub project: String,
    pub desktop: Desktop,
    pub client: McpClient,
}

/// The usual starting point of a test: see [`Setup`].
pub async fn setup(era: Era) -> Setup {
    setup_with(era, ServiceConfig::default()).await
}

/// [`setup`] with a service configured by `config`.
pub async fn setup_with(era: Era, config: ServiceConfig) -> Setup {
    let service = TestService::start_with_config(config).await;
    let project = service.project("p", "alice").await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let client = mcp_client(&service.mcp_url(), &service.full_agent(&project).await, era).await;
    Setup {
        service,
        project,
        desktop,
        client,
    }
}

/// Queues a run of session 1 under `key`; returns its command id.
pub async fn queue(client: &McpClient, key: &str) -> String {
    let ticket = ok(&call(client, "run_graph_session", run_args(1, key, json!({}))).await);
    ticket["command_id"]
        .as_str()
        .expect("command id")
        .to_owned()
}

/// A service for in-process tests on tokio's clock (paused time): in-memory store, one project,
/// its desktop token, and an agent with both scopes (already authenticated).
pub struct InProcess {
    pub app: Arc<AppState>,
    pub project: String,
    pub desktop: String,
    pub agent: relay_service::auth::AgentIdentity,
}

/// See [`InProcess`].
pub async fn in_process() -> InProcess {
    let store = SqliteStore::open_in_memory().expect("store");
    let clock = relay_protocol::clock::TokioClock::starting_at(START);
    let app = AppState::new(Arc::new(store), Arc::new(clock), ServiceConfig::default());
    let project = admin::create_project(&app.admin(), "p", None)
        .await
        .expect("project")
        .project_id;
    let desktop = admin::create_token(&app.admin(), &project, TokenSpec::Desktop)
        .await
        .expect("token")
        .token;
    let agent = admin::create_token(
        &app.admin(),
        &project,
        TokenSpec::Agent {
            name: "a".into(),
            scopes: vec!["osfoundry:run".into(), "osfoundry:read".into()],
        },
    )
    .await
    .expect("agent");
    let agent = relay_service::auth::authenticate(&app.tokens, Some(&agent.token))
        .await
        .expect("auth")
        .into_agent()
        .expect("agent identity");
    InProcess {
        app,
        project,
        desktop,
        agent,
    }
}
