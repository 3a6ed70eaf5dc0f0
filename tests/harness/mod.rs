//! The end-to-end harness for the desktop relay: a real service on loopback, a real desktop
//! relay (its own state file, the real runner), and an rmcp client playing the chat agent.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use relay_desktop::api::{BoxFuture, DesktopApi, HttpTransport, Transport, TransportError};
use relay_desktop::state::DesktopState;
use relay_desktop::{DesktopConfig, Relay, Runtime};
use relay_protocol::GraphSessionId;
use relay_protocol::clock::SystemClock;
use runner::engine::{Engine, EngineKind};
use runner::host::events::CollectingSink;
use runner::host::mock::MockProvider;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::common::{self, Era, McpClient, TestService};

/// A graph that asks one agent and returns its text.
pub const ECHO: &str = r#"
export const meta = {name: "Echo", slug: "echo", version: "1.0.0", description: "Asks one agent."};
export default async function (args, g) {
  const r = await g.agent({label: "echo", prompt: "Say: " + (args.text ?? "hi")});
  return {tokens: r.tokens, text: r.text};
}
"#;

/// A graph that returns `args.n` copies of `args.unit` (for result bounding).
pub const BIG: &str = r#"
export const meta = {name: "Big", slug: "big", version: "1.0.0"};
export default async function (args) { return args.unit.repeat(args.n); }
"#;

/// A graph that throws an error `args.n` characters long.
pub const THROWS: &str = r#"
export const meta = {name: "Throws", slug: "throws", version: "1.0.0"};
export default async function (args) { throw args.unit.repeat(args.n); }
"#;

/// A graph that writes a file through the fs.write tool.
pub const WRITES: &str = r#"
export const meta = {name: "Writes", slug: "writes", version: "1.0.0"};
export default async function (args, g) { return g.tool("fs.write", {path: args.path, text: "written remotely"}); }
"#;

/// Fault injection between the desktop and the service.
#[derive(Default)]
pub struct Faults {
    /// Completion posts to drop before they reach the service.
    pub drop_complete_requests: std::sync::atomic::AtomicUsize,
    /// Completion posts whose answer is dropped after the service handled them.
    pub drop_complete_responses: std::sync::atomic::AtomicUsize,
    /// While set, every request fails as if the network were down.
    pub offline: std::sync::atomic::AtomicBool,
    /// Completion posts seen.
    pub complete_posts: std::sync::atomic::AtomicUsize,
    /// While set, completion posts claim `u64::MAX` tokens, which the service refuses (400).
    pub poison_completions: std::sync::atomic::AtomicBool,
}

/// A transport that forwards to another one, with [`Faults`].
pub struct FaultyTransport {
    pub inner: Arc<dyn Transport>,
    pub faults: Arc<Faults>,
}

impl Transport for FaultyTransport {
    fn send(
        &self,
        request: http::Request<Vec<u8>>,
    ) -> BoxFuture<'_, Result<http::Response<Vec<u8>>, TransportError>> {
        use std::sync::atomic::Ordering;
        Box::pin(async move {
            if self.faults.offline.load(Ordering::SeqCst) {
                return Err("network is down (injected)".into());
            }
            let is_complete = request.uri().path().ends_with("/complete");
            let request = if is_complete && self.faults.poison_completions.load(Ordering::SeqCst) {
                poisoned(request)
            } else {
                request
            };
            if is_complete {
                self.faults.complete_posts.fetch_add(1, Ordering::SeqCst);
                let take = |counter: &std::sync::atomic::AtomicUsize| {
                    counter
                        .try_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok()
                };
                if take(&self.faults.drop_complete_requests) {
                    return Err("connection reset before the request arrived (injected)".into());
                }
                if take(&self.faults.drop_complete_responses) {
                    let _ = self.inner.send(request).await;
                    return Err("connection reset before the answer arrived (injected)".into());
                }
            }
            self.inner.send(request).await
        })
    }
}

/// `request`, a completion post, claiming `u64::MAX` tokens.
fn poisoned(request: http::Request<Vec<u8>>) -> http::Request<Vec<u8>> {
    let (parts, body) = request.into_parts();
    let mut completion: Value = serde_json::from_slice(&body).expect("a completion is JSON");
    completion["total_tokens"] = json!(u64::MAX);
    http::Request::from_parts(parts, completion.to_string().into_bytes())
}

/// The `relay` binary beside this test's own (`target/<profile>/relay`): another package's
/// binary, which `cargo test --workspace` builds with the `relay` package's own tests.
pub fn relay_binary() -> std::path::PathBuf {
    // A copy of the binary can be named (the shared target directory's may be another
    // worktree's build by the time the test runs).
    if let Some(binary) = std::env::var_os("GRAPHRELAY_RELAY_BIN") {
        return binary.into();
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binaries live in target/<profile>/deps");
    let binary = profile_dir.join(format!("relay{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.is_file(),
        "{} is missing: build it first with `cargo build -p relay` (cargo test --workspace does)",
        binary.display()
    );
    binary
}

/// Fast intervals for tests.
pub fn fast_config() -> DesktopConfig {
    DesktopConfig {
        poll_interval: Duration::from_millis(200),
        control_interval: Duration::from_millis(100),
        sharing_watch_interval: Duration::from_millis(50),
        approval_timeout: Duration::from_secs(5),
        graph_timeout: Duration::from_secs(60),
        ..DesktopConfig::default()
    }
}

/// A service, its project, an agent client, and everything a desktop needs.
pub struct World {
    pub service: TestService,
    pub project: String,
    pub desktop_token: String,
    pub client: McpClient,
    pub state: DesktopState,
    pub state_dir: tempfile::TempDir,
    pub faults: Arc<Faults>,
    pub mock: Arc<MockProvider>,
    pub events: Arc<CollectingSink>,
}

impl World {
    /// A world whose mock agent answers with `replies`.
    pub async fn new(replies: Value) -> World {
        let service = TestService::start().await;
        let project = service.project("p", "alice").await;
        let desktop_token = relay_service::admin::create_token(
            &service.app.admin(),
            &project,
            relay_service::admin::TokenSpec::Desktop,
        )
        .await
        .expect("desktop token")
        .token;
        let client = common::mcp_client(
            &service.mcp_url(),
            &service.full_agent(&project).await,
            Era::Current,
        )
        .await;
        let state_dir = tempfile::tempdir().expect("tempdir");
        let state = DesktopState::open(&state_dir.path().join("desktop.db")).expect("state");
        World {
            service,
            project,
            desktop_token,
            client,
            state,
            state_dir,
            faults: Arc::new(Faults::default()),
            mock: Arc::new(MockProvider::from_json(replies).expect("replies")),
            events: Arc::new(CollectingSink::default()),
        }
    }

    /// Gives the desktop a shared folder (`shared` in its state folder) with `fs.write` under
    /// `policy`; the folder's path.
    pub fn shared_folder(&self, policy: runner::host::approvals::Policy) -> std::path::PathBuf {
        let folder = self.state_dir.path().join("shared");
        std::fs::create_dir_all(&folder).expect("folder");
        self.state.set_folder(&folder).expect("folder set");
        self.state.set_policy("fs.write", policy).expect("policy");
        folder
    }

    /// Adds `script` as a session, shares it with the project (enabled) and runs one pass so
    /// the service knows it is shared.
    pub async fn share(&self, script: &str) -> GraphSessionId {
        let meta = graph_js::describe(script, &Default::default()).expect("meta");
        let now = relay_protocol::clock::Timestamp::from_unix_millis(1);
        let id = self
            .state
            .upsert_session(&meta, script, None, now)
            .expect("session");
        self.state.share(&self.project, &id, now).expect("share");
        self.state
            .set_project_enabled(&self.project, true, now)
            .expect("enable");
        self.relay().pass(&Default::default()).await;
        id
    }

    /// A desktop relay over this world's state, with `engine` and `config`.
    pub fn relay_with(&self, engine: Arc<dyn Engine>, config: DesktopConfig) -> Arc<Relay> {
        let state = DesktopState::open(&self.state_dir.path().join("desktop.db")).expect("state");
        self.relay_over(state, Arc::new(SystemClock), engine, config)
    }

    /// A desktop relay over `state` (anywhere) on `clock`, with `engine` and `config`.
    pub fn relay_over(
        &self,
        state: DesktopState,
        clock: Arc<dyn relay_protocol::clock::Clock>,
        engine: Arc<dyn Engine>,
        config: DesktopConfig,
    ) -> Arc<Relay> {
        let http: Arc<dyn Transport> =
            Arc::new(HttpTransport::new(&self.service.base).expect("transport"));
        let transport = Arc::new(FaultyTransport {
            inner: http,
            faults: self.faults.clone(),
        });
        Relay::new(
            state,
            DesktopApi::new(transport, &self.desktop_token),
            clock,
            Runtime {
                engine,
                provider: self.mock.clone(),
                events: self.events.clone(),
            },
            config,
        )
    }

    /// A desktop relay over `state` that reaches the service at `base` (a proxy in front of
    /// this world's service) over plain HTTP, with no injected faults of its own.
    pub fn relay_through(
        &self,
        base: &str,
        state: DesktopState,
        clock: Arc<dyn relay_protocol::clock::Clock>,
        engine: Arc<dyn Engine>,
        config: DesktopConfig,
    ) -> Arc<Relay> {
        let http: Arc<dyn Transport> = Arc::new(HttpTransport::new(base).expect("transport"));
        Relay::new(
            state,
            DesktopApi::new(http, &self.desktop_token),
            clock,
            Runtime {
                engine,
                provider: self.mock.clone(),
                events: self.events.clone(),
            },
            config,
        )
    }

    /// A relay on the boa engine with fast intervals.
    pub fn relay(&self) -> Arc<Relay> {
        self.relay_with(EngineKind::Boa.build().expect("boa"), fast_config())
    }

    /// Queues a run of `session` through MCP; returns the command id.
    pub async fn queue(&self, session: &GraphSessionId, key: &str, arguments: Value) -> String {
        let result = common::call(
            &self.client,
            "run_graph_session",
            json!({"graph_session_id": session.as_str(), "arguments": arguments, "idempotency_key": key}),
        )
        .await;
        common::ok(&result)["command_id"]
            .as_str()
            .expect("command id")
            .to_owned()
    }

    /// Reads a run through MCP.
    pub async fn get(&self, command_id: &str) -> Value {
        common::ok(
            &common::call(
                &self.client,
                "get_graph_run",
                json!({"command_id": command_id}),
            )
            .await,
        )
    }

    /// Waits (polling every 20 ms, at most `limit`) until the run's status is terminal.
    pub async fn wait_terminal(&self, command_id: &str, limit: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let run = self.get(command_id).await;
            if matches!(
                run["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            ) {
                return run;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "run never finished: {run}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Runs `relay`'s loop in the background; cancel the token to stop it.
pub fn start(relay: &Arc<Relay>) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let relay = relay.clone();
        let shutdown = shutdown.clone();
        async move {
            relay.run(shutdown).await.expect("relay runs");
        }
    });
    (shutdown, task)
}

/// A `relay desktop run` process over a world's state file, killed when the test ends however
/// it ends; its stderr goes to `log`.
pub struct RelayProcess {
    pub child: std::process::Child,
    pub log: std::path::PathBuf,
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RelayProcess {
    /// What the relay logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl World {
    /// The world's desktop state file.
    pub fn state_path(&self) -> std::path::PathBuf {
        self.state_dir.path().join("desktop.db")
    }

    /// Starts `relay desktop run` on this world's state (log `NAME.log`), answering agents with
    /// `replies`, polling every 0.2 s, with `extra` flags.
    pub fn spawn_relay(&self, name: &str, replies: &Value, extra: &[&str]) -> RelayProcess {
        let dir = self.state_dir.path();
        let replies_file = dir.join("replies.json");
        std::fs::write(&replies_file, replies.to_string()).expect("replies");
        let log = dir.join(format!("{name}.log"));
        let child = std::process::Command::new(relay_binary())
            .args(["desktop", "--state"])
            .arg(self.state_path())
            .args(["run", "--service", &self.service.base, "--token"])
            .arg(&self.desktop_token)
            .args(["--engine", "boa", "--poll-interval", "0.2"])
            .args(["--control-interval", "0.2", "--approval-timeout", "600"])
            .arg("--replies")
            .arg(&replies_file)
            .args(extra)
            .env("NO_COLOR", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("relay desktop run starts");
        RelayProcess { child, log }
    }
}

/// `relay desktop --state STATE ARGS…`, run to its end.
pub fn desktop_cli(state: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(relay_binary())
        .args(["desktop", "--state"])
        .arg(state)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("relay desktop runs")
}

/// Polls `done` every 20 ms until it holds; fails naming `what` after 30 s.
pub async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
