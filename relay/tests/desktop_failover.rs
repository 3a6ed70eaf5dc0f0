//! A real `relay desktop run` process long-polls two `relay serve` replicas on one PostgreSQL
//! database through a load balancer (a TCP proxy in the test that sends each new connection to
//! replica A while A accepts, then to B). A run queued before A is SIGKILLed, and still running
//! on the desktop when it is, completes exactly once, its completion landing on B; a run
//! queued after the kill is picked up through B. Needs `GRAPHRELAY_PG_URL` (scripts/pg.sh).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::common::{self, Era};
use crate::desktop_providers::{
    desktop, share_a_graph_that_asks_a_model, spawn_desktop_relay, wait_until_finished,
    wait_until_synced,
};
use crate::postgres_cli::fresh_database;
use crate::replicas::{admin_on, failover_proxy, start_replicas};

/// How long the desktop may take to pick a queued run up and ask the provider.
const PICKUP_DEADLINE: Duration = Duration::from_secs(60);

/// A stand-in OpenAI-compatible provider that holds every chat completion until the gate
/// opens, then streams "hi from the provider". Each request that arrives is announced on the
/// channel and counted.
struct GatedProvider {
    base: String,
    gate: watch::Sender<bool>,
    arrived: mpsc::UnboundedReceiver<()>,
    count: Arc<AtomicUsize>,
}

async fn gated_provider() -> GatedProvider {
    let (gate, opened) = watch::channel(false);
    let (arrival, arrived) = mpsc::unbounded_channel();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |axum::Json(_body): axum::Json<Value>| {
            let mut opened = opened.clone();
            let arrival = arrival.clone();
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                let _ = arrival.send(());
                let _ = opened.wait_for(|open| *open).await;
                let chunks = [
                    json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi from the provider"}, "finish_reason": null}]}),
                    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
                    json!({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}}),
                ];
                let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
                body.push_str("data: [DONE]\n\n");
                ([("content-type", "text/event-stream")], body)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}/v1", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    GatedProvider {
        base,
        gate,
        arrived,
        count,
    }
}

/// Queues a run of `session` with `key` through `agent`; its command id.
async fn queue(agent: &common::McpClient, session: &str, key: &str) -> String {
    let queued = common::call(
        agent,
        "run_graph_session",
        json!({"graph_session_id": session, "arguments": {"question": "hello?"},
               "idempotency_key": key}),
    )
    .await;
    common::ok(&queued)["command_id"]
        .as_str()
        .expect("command id")
        .to_owned()
}

/// The desktop's history rows of `command`.
fn executions_of(history: &Value, command: &str) -> Vec<Value> {
    history
        .as_array()
        .expect("a list")
        .iter()
        .filter(|row| row["command_id"] == command)
        .cloned()
        .collect()
}

/// Each of `commands` ran once: one provider call each, one completed execution each in the
/// desktop's history.
fn each_ran_once(provider: &GatedProvider, state: &std::path::Path, commands: [&str; 2]) {
    assert_eq!(provider.count.load(Ordering::SeqCst), commands.len());
    let history: Value =
        serde_json::from_str(&desktop(state, &["history", "--json"])).expect("history as JSON");
    for command in commands {
        let rows = executions_of(&history, command);
        assert_eq!(rows.len(), 1, "{command}: {rows:?}");
        assert_eq!(rows[0]["status"], "completed", "{rows:?}");
    }
}

/// Waits (up to [`PICKUP_DEADLINE`]) until the replica whose `/metrics` is at `metrics`
/// holds at least `count` long-poll syncs.
async fn held_syncs_reach(metrics: &str, count: u32) {
    let http = common::http_client();
    let deadline = tokio::time::Instant::now() + PICKUP_DEADLINE;
    loop {
        let text = http
            .get(metrics)
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text");
        let held = relay_service::http::metrics::held_syncs(&text).unwrap_or(0);
        if held >= u64::from(count) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{metrics}: {held} syncs held"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_desktop_process_long_polls_through_a_failover_and_its_run_completes_once() {
    let Some(url) = common::postgres_url() else {
        return;
    };
    let (db, dropper) = fresh_database(&url).await;
    let admin = admin_on(&db).await;
    let mut replicas = start_replicas(&db, 2).await;
    let balancer = failover_proxy(replicas.bases.clone()).await;
    let agent_b = common::mcp_client(
        &format!("{}/mcp", replicas.bases[1]),
        &admin.agent_token,
        Era::Current,
    )
    .await;
    let mut provider = gated_provider().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("desktop.db");
    let providers = dir.path().join("providers.toml");
    let session = share_a_graph_that_asks_a_model(
        dir.path(),
        &state,
        &providers,
        &admin.project,
        &provider.base,
    );
    let log_path = dir.path().join("relay.log");
    // Long-poll mode; timed passes every 5 s only as the fallback (and for the outbox).
    let relay = spawn_desktop_relay(
        &state,
        &providers,
        [&balancer, &admin.desktop_token],
        &log_path,
        &["--long-poll", "--poll-interval", "5"],
    );
    wait_until_synced(&agent_b, &admin.project, &session).await;

    // Queued through B while the desktop long-polls A: the desktop picks it up and its graph
    // waits on the provider.
    held_syncs_reach(&replicas.metrics[0], 1).await;
    let first = queue(&agent_b, &session, "failover-1").await;
    tokio::time::timeout(PICKUP_DEADLINE, provider.arrived.recv())
        .await
        .expect("the desktop picked the run up and asked the provider");
    let run =
        common::ok(&common::call(&agent_b, "get_graph_run", json!({"command_id": first})).await);
    assert_eq!(run["status"], "running", "{run}");

    // A dies mid-run; only then does the graph finish.
    replicas.children[0].0.kill().expect("SIGKILL replica A");
    replicas.children[0].0.wait().expect("replica A exits");
    provider.gate.send_replace(true);
    let run = wait_until_finished(&agent_b, &first).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        run["result"],
        json!({"text": "hi from the provider", "tokens": 15, "model": "m"}),
        "{run}"
    );

    // The desktop's long poll is held by B now, and a run queued after the kill reaches it.
    held_syncs_reach(&replicas.metrics[1], 1).await;
    let second = queue(&agent_b, &session, "failover-2").await;
    let run = wait_until_finished(&agent_b, &second).await;
    assert_eq!(run["status"], "completed", "{run}");

    drop(relay);
    each_ran_once(&provider, &state, [&first, &second]);
    let log = std::fs::read_to_string(&log_path).expect("the relay's log");
    assert!(
        log.contains("long poll failed"),
        "the desktop's poll held by A was cut, and it said so"
    );
    agent_b.cancel().await.ok();
    drop(replicas);
    dropper.drop_database().await;
}
