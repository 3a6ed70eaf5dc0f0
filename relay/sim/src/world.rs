//! One simulated world: the real service (router in-process, in-memory SQLite, the injected
//! clock following tokio's paused time), the real desktop relay loop, and a scripted chat client
//! speaking MCP to the real `/mcp` endpoint. Faults sit between the parties and the router as a
//! transport layer, never as branches in product code.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use http::{Request, Response};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::ScenarioError;
use super::engine::{SimEngine, SimProvider};
use super::rng::Rng;
use relay_desktop::api::{BoxFuture, DesktopApi, RouterTransport, Transport, TransportError};
use relay_desktop::state::DesktopState;
use relay_desktop::{DesktopConfig, Relay, Runtime};
use relay_protocol::GraphSessionId;
use relay_protocol::clock::{Timestamp, TokioClock};
use relay_service::admin::{self, TokenSpec};
use relay_service::store::QueueQuota;
use relay_service::store::SqliteStore;
use relay_service::store::notify::Topic;
use relay_service::{AppState, ServiceConfig, router};

/// 2026-11-08T09:30:00Z, the simulated epoch.
pub const SIM_START: Timestamp = Timestamp::from_unix_millis(1_794_130_200_000);

/// Faults between one party and the service.
#[derive(Default)]
pub struct Faults {
    /// Probability (in millionths) that an answer is lost after the service handled the request.
    pub lose_answers_ppm: AtomicU64,
    /// Completion posts to lose before they reach the service.
    pub lose_completions: AtomicUsize,
    /// While set, nothing gets through (the party is offline).
    pub offline: AtomicBool,
    /// Requests that got through.
    pub requests: AtomicU64,
    rng: Mutex<Option<Rng>>,
}

impl Faults {
    /// Faults drawing from `rng` for random losses.
    pub fn with_rng(rng: Rng) -> Arc<Self> {
        Arc::new(Self {
            rng: Mutex::new(Some(rng)),
            ..Self::default()
        })
    }

    fn lose_answer(&self) -> bool {
        let ppm = self.lose_answers_ppm.load(Ordering::SeqCst);
        if ppm == 0 {
            return false;
        }
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        rng.as_mut()
            .is_some_and(|rng| rng.next_f64() * 1_000_000.0 < ppm as f64)
    }
}

/// A transport with [`Faults`] in front of another.
pub struct FaultLayer {
    inner: Arc<dyn Transport>,
    faults: Arc<Faults>,
}

impl Transport for FaultLayer {
    fn send(
        &self,
        request: Request<Vec<u8>>,
    ) -> BoxFuture<'_, Result<Response<Vec<u8>>, TransportError>> {
        Box::pin(async move {
            if self.faults.offline.load(Ordering::SeqCst) {
                return Err("offline (simulated)".into());
            }
            if request.uri().path().ends_with("/complete")
                && self
                    .faults
                    .lose_completions
                    .try_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
            {
                return Err("completion lost (simulated)".into());
            }
            self.faults.requests.fetch_add(1, Ordering::SeqCst);
            let answer = self.inner.send(request).await;
            if self.faults.lose_answer() {
                return Err("answer lost (simulated)".into());
            }
            answer
        })
    }
}

/// Why a tool call gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The answer (or the request) was lost; the caller may retry.
    Lost(String),
    /// The tool answered with an error.
    Tool(String),
}

/// A scripted chat agent speaking MCP (the current stateless protocol) to `/mcp`.
pub struct SimClient {
    transport: FaultLayer,
    token: String,
    next_id: AtomicU64,
    /// Tool calls made, by name.
    pub calls: Mutex<std::collections::BTreeMap<String, u64>>,
}

impl SimClient {
    /// Calls `tool` with `arguments`; the structured result, or why there is none.
    pub async fn call(&self, tool: &str, arguments: Value) -> Result<Value, CallError> {
        *self
            .calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(tool.to_owned())
            .or_default() += 1;
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let body = json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {
                "name": tool, "arguments": arguments,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "relay-sim", "version": "1"},
                    "io.modelcontextprotocol/clientCapabilities": {}
                }
            }
        });
        let request = Request::post("/mcp")
            .header(http::header::HOST, "localhost")
            .header(
                http::header::AUTHORIZATION,
                format!("Bearer {}", self.token),
            )
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", tool)
            .body(body.to_string().into_bytes())
            .map_err(|e| CallError::Tool(e.to_string()))?;
        let response = self
            .transport
            .send(request)
            .await
            .map_err(|e| CallError::Lost(e.0))?;
        let text = String::from_utf8_lossy(response.body()).into_owned();
        let message = if text.trim_start().starts_with('{') {
            serde_json::from_str::<Value>(&text).ok()
        } else {
            text.lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
                .find(|m| m.get("result").is_some() || m.get("error").is_some())
        }
        .ok_or_else(|| {
            CallError::Tool(format!("unreadable answer ({}): {text}", response.status()))
        })?;
        let result = &message["result"];
        if result["isError"] == true || message.get("error").is_some() {
            let text = result["content"][0]["text"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| message["error"].to_string());
            return Err(CallError::Tool(text));
        }
        Ok(result["structuredContent"].clone())
    }

    /// How many times `tool` was called.
    pub fn calls_of(&self, tool: &str) -> u64 {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(tool)
            .copied()
            .unwrap_or(0)
    }
}

/// Everything one scenario needs.
pub struct World {
    /// The service.
    pub app: Arc<AppState>,
    /// The project.
    pub project: String,
    /// The shared stand-in session.
    pub session: GraphSessionId,
    /// The desktop relay.
    pub relay: Arc<Relay>,
    /// Faults on the desktop's side.
    pub desktop_faults: Arc<Faults>,
    /// Faults on the agent's side.
    pub client_faults: Arc<Faults>,
    /// The agent.
    pub client: SimClient,
    /// A second agent on the same project.
    pub other_client: SimClient,
    /// The stand-in engine (counts executions).
    pub engine: Arc<SimEngine>,
    shutdown: CancellationToken,
    relay_task: Option<tokio::task::JoinHandle<()>>,
}

/// How the world's desktop behaves.
#[derive(Debug, Clone, Copy)]
pub struct WorldOptions {
    /// Long-poll mode instead of the seed's 20 s polling.
    pub long_poll: bool,
    /// The persistent outbox (the simulator's switch only).
    pub outbox: bool,
}

/// The world's desktop, agent and second agent tokens.
async fn sim_tokens(
    app: &Arc<AppState>,
    project: &str,
) -> Result<(String, String, String), ScenarioError> {
    let token = |spec| {
        let app = app.clone();
        let project = project.to_owned();
        async move {
            admin::create_token(&app.admin(), &project, spec)
                .await
                .map(|t| t.token)
                .map_err(|e| e.to_string())
        }
    };
    let desktop_token = token(TokenSpec::Desktop).await?;
    let agent = |name: &str| TokenSpec::Agent {
        name: name.into(),
        scopes: vec!["osfoundry:read".into(), "osfoundry:run".into()],
    };
    let agent_token = token(agent("claude")).await?;
    let other_token = token(agent("someone-else")).await?;

    Ok((desktop_token, agent_token, other_token))
}

/// The desktop's state: the stand-in graph as one session, shared with the enabled project.
fn sim_desktop_state(project: &str) -> Result<(DesktopState, GraphSessionId), ScenarioError> {
    let state = DesktopState::open_in_memory().map_err(|e| e.to_string())?;
    let meta = graph_js::Meta {
        name: "Simulated graph".into(),
        slug: "sim".into(),
        version: "1.0.0".into(),
        description: "The simulator's stand-in: its agent takes the run time it is given.".into(),
        args: None,
    };
    let session = state
        .upsert_session(&meta, SimEngine::SCRIPT, None, SIM_START)
        .map_err(|e| e.to_string())?;
    state
        .share(project, &session, SIM_START)
        .map_err(|e| e.to_string())?;
    state
        .set_project_enabled(project, true, SIM_START)
        .map_err(|e| e.to_string())?;
    Ok((state, session))
}

/// The desktop relay of a world, over the faulty transport to the in-process router.
fn sim_relay(
    state: DesktopState,
    transport: Arc<FaultLayer>,
    desktop_token: &str,
    clock: Arc<dyn relay_protocol::clock::Clock>,
    engine: &Arc<SimEngine>,
    options: &WorldOptions,
) -> Arc<Relay> {
    Relay::new(
        state,
        DesktopApi::new(transport, desktop_token),
        clock,
        Runtime {
            engine: engine.clone(),
            provider: Arc::new(SimProvider),
            events: Arc::new(runner::host::events::NullSink),
        },
        DesktopConfig {
            long_poll: options
                .long_poll
                .then_some(relay_desktop::DEFAULT_LONG_POLL),
            outbox: options.outbox,
            graph_timeout: Duration::from_secs(24 * 3600),
            // Virtual time repeats only if the jitter does; a fixed seed leaves the
            // scenarios' own random stream as it was.
            jitter_seed: Some(SIM_JITTER_SEED),
            ..DesktopConfig::default()
        },
    )
}

/// The seed of the desktop's reconnect jitter in every world.
const SIM_JITTER_SEED: u64 = 1;

impl World {
    /// Builds a world and starts its desktop relay.
    pub async fn new(options: WorldOptions, rng: &mut Rng) -> Result<World, ScenarioError> {
        let store = SqliteStore::open_in_memory().map_err(|e| e.to_string())?;
        let clock: Arc<dyn relay_protocol::clock::Clock> =
            Arc::new(TokioClock::starting_at(SIM_START));
        // The seeds' experiments queue more runs than one agent may keep waiting (the
        // idempotency scenario keeps its desktop offline while a tenth of --runs queue, and
        // more without a key): the queue quota guards the service against a runaway agent and
        // is not what they measure.
        let config = ServiceConfig {
            queue_quota: QueueQuota {
                per_agent: u64::MAX,
                per_project: u64::MAX,
            },
            ..ServiceConfig::default()
        };
        let app = AppState::new(Arc::new(store), clock.clone(), config);
        let project = admin::create_project(&app.admin(), "sim", Some("sim"))
            .await
            .map_err(|e| e.to_string())?
            .project_id;
        let (desktop_token, agent_token, other_token) = sim_tokens(&app, &project).await?;
        let routed: Arc<dyn Transport> = Arc::new(RouterTransport(router(app.clone())));
        let desktop_faults = Faults::with_rng(rng.fork());
        let client_faults = Faults::with_rng(rng.fork());
        let client = |token: String, faults: Arc<Faults>| SimClient {
            transport: FaultLayer {
                inner: routed.clone(),
                faults,
            },
            token,
            next_id: AtomicU64::new(1),
            calls: Mutex::new(Default::default()),
        };

        let (state, session) = sim_desktop_state(&project)?;
        let engine = Arc::new(SimEngine::default());
        let desktop_transport = Arc::new(FaultLayer {
            inner: routed.clone(),
            faults: desktop_faults.clone(),
        });
        let relay = sim_relay(
            state,
            desktop_transport,
            &desktop_token,
            clock,
            &engine,
            &options,
        );
        let mut world = World {
            app,
            project,
            session,
            relay,
            desktop_faults,
            client: client(agent_token, client_faults.clone()),
            other_client: client(other_token, Faults::with_rng(rng.fork())),
            client_faults,
            engine,
            shutdown: CancellationToken::new(),
            relay_task: None,
        };
        // The desktop's pass phase is random relative to every request: start it at a random
        // offset within one interval.
        let phase = rng.next_f64() * relay_desktop::DEFAULT_POLL_INTERVAL.as_secs_f64();
        tokio::time::sleep(Duration::from_secs_f64(phase)).await;
        let relay = world.relay.clone();
        let shutdown = world.shutdown.clone();
        world.relay_task = Some(tokio::spawn(async move {
            if let Err(e) = relay.run(shutdown).await {
                tracing::error!("the simulated desktop relay stopped: {e}");
            }
        }));
        // Let the first pass publish the shared session.
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok(world)
    }

    /// The simulated time (the service's clock).
    pub fn now(&self) -> Timestamp {
        self.app.clock.now()
    }

    /// Queues a run of the stand-in that takes `duration`; returns the command id.
    pub async fn queue(&self, duration: Duration, key: &str) -> Result<String, CallError> {
        self.queue_with(duration, key, None).await
    }

    /// Queues a run whose result is `result` (for result bounding).
    pub async fn queue_with(
        &self,
        duration: Duration,
        key: &str,
        result: Option<Value>,
    ) -> Result<String, CallError> {
        let mut arguments =
            json!({"duration_ms": u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)});
        if let Some(result) = result {
            arguments["result"] = result;
        }
        let ticket = self
            .client
            .call(
                "run_graph_session",
                json!({"graph_session_id": self.session.as_str(), "arguments": arguments, "idempotency_key": key}),
            )
            .await?;
        ticket["command_id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| CallError::Tool(format!("no command id in {ticket}")))
    }

    /// The run as the service has it (read directly: observing is not a tool call).
    pub async fn view(&self, command: &str) -> Result<relay_service::runs::RunView, ScenarioError> {
        relay_service::runs::get_run(&self.app.runs, &self.observer().await?, command)
            .await
            .map_err(|e| ScenarioError(e.to_string()))
    }

    /// Waits (virtual time) until the run is terminal, at most `limit`: reads the run whenever
    /// it changes, and at least every [`relay_service::runs::MAX_GET_WAIT`]. The simulator's eye,
    /// not a chat host: it holds no request open (a held `get_graph_run` would have the service
    /// check its token twice a second, work no scenario models).
    pub async fn wait_terminal(
        &self,
        command: &str,
        limit: Duration,
    ) -> Result<relay_service::runs::RunView, ScenarioError> {
        let observer = self.observer().await?;
        let runs = &self.app.runs;
        let deadline = tokio::time::Instant::now() + limit;
        let id = command
            .parse()
            .map_err(|_| ScenarioError(format!("not a command id: {command}")))?;
        let mut changes = runs.notifier.subscribe(&Topic::Run(id));
        loop {
            // Read after subscribing: a change in between is then seen, not waited for.
            let view = relay_service::runs::get_run(runs, &observer, command)
                .await
                .map_err(|e| e.to_string())?;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if view.status.is_terminal() || left.is_zero() {
                return Ok(view);
            }
            tokio::select! {
                () = changes.changed() => {}
                () = tokio::time::sleep(left.min(relay_service::runs::MAX_GET_WAIT)) => {}
            }
        }
    }

    async fn observer(&self) -> Result<relay_service::auth::AgentIdentity, ScenarioError> {
        relay_service::auth::authenticate(&self.app.tokens, Some(&self.client.token))
            .await
            .map_err(|e| e.to_string())?
            .into_agent()
            .map_err(|e| ScenarioError(e.to_string()))
    }

    /// Stops the desktop relay.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.relay_task.take() {
            let _ = task.await;
        }
    }
}
