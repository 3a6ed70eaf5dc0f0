//! Behind a proxy: 300 concurrent waiting `get_graph_run` calls from 200 client addresses, all
//! through one proxy on one address. Trusted (`--trusted-proxy`), its connections are not
//! capped per address and each call is counted for the client the proxy forwards, so all 300
//! are answered; untrusted, the proxy is one address past its 256 connections, and the
//! refusals are logged and counted.

use std::net::{IpAddr, SocketAddr};

use serde_json::Value;

use crate::common::{self, Desktop};
use crate::operations::{demo_project, value};
use crate::served::{Served, call_tool, client_from, run_view, wait_for_run};

/// Waiting calls, and the client addresses they come from.
const WAITS: usize = 300;
const CLIENTS: usize = 200;
/// The default `--max-connections-per-address`.
const PER_ADDRESS: usize = 256;

/// Client address `n` of [`CLIENTS`] (the proxy itself is on 127.0.0.1, the test's own
/// requests come from 127.0.1.x).
fn client_address(n: usize) -> IpAddr {
    let n = u8::try_from(n % CLIENTS).expect("small");
    IpAddr::from([127, 3, 0, n + 1])
}

/// A client for the test's own requests (setup, cancel): not from the proxy's address, and
/// each from an address of its own, so none is refused for another's connection still
/// closing.
fn own() -> reqwest::Client {
    static NEXT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    client_from(IpAddr::from([127, 0, 1, n]))
}

/// A served relay with a project, its desktop sharing session 1, and a queued run; the
/// agent's token and the run's id.
async fn with_a_queued_run(served: &Served, db: &std::path::Path) -> (String, String) {
    let (project, desktop_token, agent_token) = demo_project(db);
    let desktop = Desktop {
        http: own(),
        base: served.base.clone(),
        token: desktop_token,
    };
    desktop.sync(&project, &[1]).await;
    let (status, answer) = call_tool(
        &own(),
        &format!("{}/mcp", served.base),
        &agent_token,
        "run_graph_session",
        common::run_args(1, "proxy-limits-1", serde_json::json!({})),
    )
    .await
    .expect("queued");
    assert_eq!(status, 200, "{answer}");
    let id = answer["result"]["structuredContent"]["command_id"]
        .as_str()
        .expect("command id")
        .to_owned();
    (agent_token, id)
}

/// Starts the 300 waits through `proxy`, each from its client's address on a connection of
/// its own.
fn start_waits(
    proxy: SocketAddr,
    token: &str,
    id: &str,
) -> Vec<tokio::task::JoinHandle<Result<(u16, Value), reqwest::Error>>> {
    (0..WAITS)
        .map(|n| {
            let http = client_from(client_address(n));
            let (mcp, token, id) = (
                format!("http://{proxy}/mcp"),
                token.to_owned(),
                id.to_owned(),
            );
            tokio::spawn(async move { wait_for_run(&http, &mcp, &token, &id).await })
        })
        .collect()
}

/// Cancels the run (so every held wait answers at once) and collects the answers: how many
/// were a 200 with the run's view, and every other outcome.
async fn cancel_and_collect(
    served: &Served,
    token: &str,
    id: &str,
    waits: Vec<tokio::task::JoinHandle<Result<(u16, Value), reqwest::Error>>>,
) -> (usize, Vec<String>) {
    let (status, answer) = call_tool(
        &own(),
        &format!("{}/mcp", served.base),
        token,
        "cancel_graph_run",
        serde_json::json!({"command_id": id}),
    )
    .await
    .expect("cancel answered");
    assert_eq!(status, 200, "{answer}");
    let (mut viewed, mut other) = (0, Vec::new());
    for wait in waits {
        match wait.await.expect("wait task") {
            Ok((200, answer)) if run_view(&answer).is_some_and(|v| v["command_id"] == id) => {
                viewed += 1;
            }
            Ok((status, answer)) => other.push(format!("{status}: {answer}")),
            Err(error) => other.push(error.to_string()),
        }
    }
    (viewed, other)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_hundred_waits_through_a_trusted_proxy_are_all_answered() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let served = Served::start(
        db.to_str().expect("utf-8"),
        &["--trusted-proxy", "127.0.0.1/32", "--rate-per-token", "0"],
        &[],
    )
    .await;
    let (token, id) = with_a_queued_run(&served, &db).await;
    let proxy =
        common::proxy::forwarding_proxy(SocketAddr::from(([127, 0, 0, 1], 0)), served.address)
            .await;
    let waits = start_waits(proxy, &token, &id);
    served
        .wait_for_metrics("all 300 held", |samples| {
            value(samples, "relay_held_requests", &[("kind", "get_graph_run")]) == WAITS as f64
        })
        .await;
    let (viewed, other) = cancel_and_collect(&served, &token, &id, waits).await;
    assert_eq!((viewed, other.len()), (WAITS, 0), "{other:#?}");
    let refused = served.metric("relay_connections_refused_total", &[]).await;
    assert_eq!(refused, 0.0);
    // Each call is the forwarded client's, in its access line.
    let log = served.log();
    for n in [0, CLIENTS - 1] {
        let client = format!("client={}", client_address(n));
        assert!(
            log.iter()
                .any(|l| l.contains("route=/mcp") && l.contains(&client)),
            "{client}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_waits_through_an_untrusted_proxy_are_capped_and_the_refusals_counted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let served = Served::start(db.to_str().expect("utf-8"), &["--rate-per-token", "0"], &[]).await;
    let (token, id) = with_a_queued_run(&served, &db).await;
    let proxy =
        common::proxy::forwarding_proxy(SocketAddr::from(([127, 0, 0, 1], 0)), served.address)
            .await;
    let waits = start_waits(proxy, &token, &id);
    let over = (WAITS - PER_ADDRESS) as f64;
    served
        .wait_for_metrics("256 held and 44 refused", |samples| {
            value(samples, "relay_held_requests", &[("kind", "get_graph_run")])
                == PER_ADDRESS as f64
                && value(
                    samples,
                    "relay_connections_refused_total",
                    &[("reason", "per_address")],
                ) == over
        })
        .await;
    let (viewed, other) = cancel_and_collect(&served, &token, &id, waits).await;
    assert_eq!(
        (viewed, other.len()),
        (PER_ADDRESS, WAITS - PER_ADDRESS),
        "{other:#?}"
    );
    let warned: Vec<String> = served
        .log()
        .into_iter()
        .filter(|l| l.contains(" WARN ") && l.contains("connection refused"))
        .collect();
    assert!(
        warned
            .first()
            .is_some_and(|l| l.contains("reason=\"per_address\"") && l.contains("client=127.0.0.1")),
        "{warned:#?}"
    );
}

/// Through a trusted proxy each forwarded client has its own cap on requests in flight: with
/// `--max-connections-per-address 1`, the second wait of each of the 100 clients that send two
/// is answered 429 at once (and counted), the first waits on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forwarded_client_past_its_own_cap_is_answered_429() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let args = [
        "--trusted-proxy",
        "127.0.0.1",
        "--rate-per-token",
        "0",
        "--max-connections-per-address",
        "1",
    ];
    let served = Served::start(db.to_str().expect("utf-8"), &args, &[]).await;
    let (token, id) = with_a_queued_run(&served, &db).await;
    let proxy =
        common::proxy::forwarding_proxy(SocketAddr::from(([127, 0, 0, 1], 0)), served.address)
            .await;
    let waits = start_waits(proxy, &token, &id);
    let over = (WAITS - CLIENTS) as f64;
    served
        .wait_for_metrics("200 held and 100 refused", |samples| {
            value(samples, "relay_held_requests", &[("kind", "get_graph_run")]) == CLIENTS as f64
                && value(
                    samples,
                    "relay_connections_refused_total",
                    &[("reason", "per_client")],
                ) == over
        })
        .await;
    let (viewed, other) = cancel_and_collect(&served, &token, &id, waits).await;
    assert_eq!(viewed, CLIENTS);
    assert_eq!(other.len(), WAITS - CLIENTS);
    assert!(other.iter().all(|o| o.starts_with("429")), "{other:#?}");
}
