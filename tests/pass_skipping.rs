//! The pass timer on tokio's paused time (the service called in-process, no sockets): a pass
//! due while the previous one is still busy is skipped and counted; a sharing change runs a
//! pass at once instead of waiting for the interval.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use relay_desktop::api::{DesktopApi, RouterTransport};
use relay_desktop::state::DesktopState;
use relay_desktop::{DesktopConfig, Relay, Runtime};
use relay_protocol::clock::{SystemClock, Timestamp};
use relay_service::{AppState, router, runs};
use runner::host::events::NullSink;
use runner::host::mock::MockProvider;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A graph engine stand-in that runs on tokio alone (no interpreter thread, which paused time
/// cannot see): it starts the one agent the graph would start and returns its text.
struct OneAgent;

impl runner::engine::Engine for OneAgent {
    fn name(&self) -> &'static str {
        "one-agent"
    }

    fn run(
        &self,
        _script: Arc<str>,
        _args: String,
        mut invocation: runner::host::Invocation,
    ) -> runner::host::approvals::BoxFuture<'static, Result<String, runner::engine::EngineError>>
    {
        Box::pin(async move {
            let handle = invocation
                .start_agent(graph_js::AgentRequest {
                    prompt: "p".into(),
                    system: None,
                    model: None,
                    max_tokens: None,
                    label: Some("slow".into()),
                    tools: vec![],
                    max_turns: None,
                })
                .map_err(|e| runner::engine::EngineError::Graph(e.to_string()))?;
            let (_, reply) = invocation.wait_any(&[handle]).await;
            let graph = |e: String| runner::engine::EngineError::Graph(e);
            let reply: serde_json::Value =
                serde_json::from_str(&reply.map_err(|e| graph(e.to_string()))?)
                    .map_err(|e| graph(e.to_string()))?;
            Ok(reply["text"].to_string())
        })
    }

    fn describe(
        &self,
        script: Arc<str>,
    ) -> runner::host::approvals::BoxFuture<'static, Result<graph_js::Meta, graph_js::MetaError>>
    {
        Box::pin(async move { graph_js::describe(&script, &Default::default()) })
    }
}

const SLOW: &str = r#"
export const meta = {name: "Slow", slug: "slow", version: "1"};
export default async function (args, g) { return (await g.agent({label: "slow", prompt: "p"})).text; }
"#;

struct Setup {
    app: Arc<AppState>,
    relay: Arc<Relay>,
    state: DesktopState,
    agent: relay_service::auth::AgentIdentity,
    session: relay_protocol::GraphSessionId,
    project: String,
}

async fn setup(latency_secs: u64) -> Setup {
    let common::InProcess {
        app,
        project,
        desktop,
        agent,
    } = common::in_process().await;
    let state = DesktopState::open_in_memory().expect("state");
    let meta = graph_js::describe(SLOW, &Default::default()).expect("meta");
    let now = Timestamp::from_unix_millis(1);
    let session = state
        .upsert_session(&meta, SLOW, None, now)
        .expect("session");
    state.share(&project, &session, now).expect("share");
    state
        .set_project_enabled(&project, true, now)
        .expect("enable");
    let mock = MockProvider::from_json(
        json!({"default": {"text": "done", "latency_ms": latency_secs * 1000}}),
    )
    .expect("mock");
    let relay = Relay::new(
        state.clone(),
        DesktopApi::new(Arc::new(RouterTransport(router(app.clone()))), &desktop),
        Arc::new(SystemClock),
        Runtime {
            engine: Arc::new(OneAgent),
            provider: Arc::new(mock),
            events: Arc::new(NullSink),
        },
        DesktopConfig {
            graph_timeout: Duration::from_secs(3600),
            ..DesktopConfig::default()
        },
    );
    Setup {
        app,
        relay,
        state,
        agent,
        session,
        project,
    }
}

async fn queue(setup: &Setup, key: &str) -> relay_protocol::CommandId {
    runs::queue_run(
        &setup.app.runs,
        &setup.agent,
        runs::RunRequest {
            graph_session_id: setup.session.to_string(),
            arguments: serde_json::Map::new(),
            idempotency_key: key.into(),
            max_tokens: None,
        },
    )
    .await
    .expect("queued")
    .command_id
}

#[tokio::test(start_paused = true)]
async fn a_pass_due_while_the_previous_is_busy_is_skipped() {
    let setup = setup(50).await;
    // Make the session known to the service, then queue one 50 s run.
    setup.relay.pass(&CancellationToken::new()).await;
    let command = queue(&setup, "key-skip-1").await;
    let before = setup.relay.stats().passes.load(Ordering::SeqCst);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(setup.relay.clone().run(shutdown.clone()));
    // Passes are due at 0, 20, 40 and 60 s; the one at 0 s runs the 50 s graph, so 20 and 40
    // find it busy.
    tokio::time::sleep(Duration::from_secs(70)).await;
    shutdown.cancel();
    task.await.expect("joined").expect("relay ran");
    let stats = setup.relay.stats();
    assert_eq!(
        stats.passes_skipped.load(Ordering::SeqCst),
        2,
        "the passes due at 20 s and 40 s"
    );
    assert_eq!(
        stats.passes.load(Ordering::SeqCst) - before,
        2,
        "the passes at 0 s and 60 s"
    );
    let view = runs::get_run(&setup.app.runs, &setup.agent, &command.to_string())
        .await
        .expect("run");
    assert_eq!(view.status, relay_protocol::RunStatus::Completed);
}

#[tokio::test(start_paused = true)]
async fn a_sharing_change_runs_a_pass_at_once() {
    let setup = setup(1).await;
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(setup.relay.clone().run(shutdown.clone()));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        setup.relay.stats().passes.load(Ordering::SeqCst),
        1,
        "only the first pass so far"
    );
    setup
        .state
        .unshare(&setup.project, &setup.session)
        .expect("unshare");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        setup.relay.stats().passes.load(Ordering::SeqCst),
        2,
        "the change ran a pass well before the 20 s interval"
    );
    shutdown.cancel();
    task.await.expect("joined").expect("relay ran");
}

/// A service that answers every request 503 with `Retry-After`, noting when each came.
struct Busy {
    retry_after_secs: u64,
    calls: std::sync::Mutex<Vec<(tokio::time::Instant, String)>>,
}

impl relay_desktop::api::Transport for Busy {
    fn send(
        &self,
        request: http::Request<Vec<u8>>,
    ) -> relay_desktop::api::BoxFuture<
        '_,
        Result<http::Response<Vec<u8>>, relay_desktop::api::TransportError>,
    > {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((tokio::time::Instant::now(), request.uri().path().to_owned()));
        let body = json!({"error": "the database is busy: retry after Retry-After seconds", "cause": "busy"});
        let answer = http::Response::builder()
            .status(http::StatusCode::SERVICE_UNAVAILABLE)
            .header(http::header::RETRY_AFTER, self.retry_after_secs.to_string())
            .body(body.to_string().into_bytes())
            .map_err(|e| relay_desktop::api::TransportError(e.to_string()));
        Box::pin(async move { answer })
    }
}

/// The service's `Retry-After` paces the passes: after a 503 asking for 50 s, the passes due
/// at 20 s and 40 s leave the service alone, and the one at 60 s asks again.
#[tokio::test(start_paused = true)]
async fn a_retry_after_keeps_the_passes_away_until_it_passes() {
    let state = DesktopState::open_in_memory().expect("state");
    let meta = graph_js::describe(SLOW, &Default::default()).expect("meta");
    let now = Timestamp::from_unix_millis(1);
    let session = state
        .upsert_session(&meta, SLOW, None, now)
        .expect("session");
    state.share("p", &session, now).expect("share");
    state.set_project_enabled("p", true, now).expect("enable");
    let busy = Arc::new(Busy {
        retry_after_secs: 50,
        calls: std::sync::Mutex::default(),
    });
    let relay = Relay::new(
        state,
        DesktopApi::new(busy.clone(), "desktop-token"),
        Arc::new(SystemClock),
        Runtime {
            engine: Arc::new(OneAgent),
            provider: Arc::new(
                MockProvider::from_json(json!({"default": {"text": "x"}})).expect("mock"),
            ),
            events: Arc::new(NullSink),
        },
        DesktopConfig::default(),
    );
    let start = tokio::time::Instant::now();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(relay.clone().run(shutdown.clone()));
    tokio::time::sleep(Duration::from_secs(70)).await;
    shutdown.cancel();
    task.await.expect("joined").expect("relay ran");
    let calls = busy.calls.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let at: Vec<u64> = calls
        .iter()
        .map(|(when, _)| (*when - start).as_secs())
        .collect();
    assert_eq!(
        at,
        [0, 60],
        "one call per pass that may call, none while the service asked to wait: {calls:?}"
    );
    assert_eq!(
        relay.stats().passes.load(Ordering::SeqCst),
        4,
        "passes at 0, 20, 40, 60 s"
    );
}
