//! A stop drains: SIGTERM and SIGHUP stop accepting, answer every held request with what it
//! has (a waiting `get_graph_run` gets the run's view, a desktop's long poll its sync answer,
//! an MCP event stream its listen request's result), let requests in flight finish, log one
//! line with what was drained, and exit cleanly; a rolling restart of three replicas on
//! PostgreSQL costs no client an error. A client that hangs up releases its wait at once.

use std::net::IpAddr;

use relay_protocol::clock::Stopwatch;
use serde_json::{Value, json};

use crate::common::raw::RawClient;
use crate::common::{self, Desktop};
use crate::operations::demo_project;
use crate::served::{Served, call_tool, client_from, run_view, wait_for_run};

/// Waiting calls and long polls held on each replica when it is stopped.
const WAITS_PER_REPLICA: usize = 10;
const POLLS_PER_REPLICA: usize = 10;

/// Client address number `n` (each client its own, as separate chat hosts and desktops).
fn address(n: usize) -> IpAddr {
    let n = u32::try_from(n).expect("small");
    IpAddr::from([127, 2, (n / 250) as u8, (n % 250 + 1) as u8])
}

/// Queues a run of session 1 through `served`'s MCP; its command id.
async fn queue(served: &Served, agent_token: &str, key: &str) -> String {
    let mcp = format!("{}/mcp", served.base);
    let (status, answer) = call_tool(
        &client_from(address(900)),
        &mcp,
        agent_token,
        "run_graph_session",
        common::run_args(1, key, json!({})),
    )
    .await
    .expect("run_graph_session answered");
    assert_eq!(status, 200, "{answer}");
    answer["result"]["structuredContent"]["command_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a command id: {answer}"))
        .to_owned()
}

/// What the clients held on one replica got when it stopped.
type Held = Vec<tokio::task::JoinHandle<Result<(u16, Value), String>>>;

/// Holds `waits` waiting `get_graph_run` calls of `id` and `polls` long polls (knowing `id`,
/// so nothing ends them early) on `served`, each from its own address from `first` on, and
/// returns once its metrics count them all.
async fn hold(
    served: &Served,
    tokens: (&str, &str),
    project: &str,
    id: &str,
    first: usize,
) -> Held {
    let (agent_token, desktop_token) = tokens;
    let mcp = format!("{}/mcp", served.base);
    let mut held: Held = Vec::new();
    for n in 0..WAITS_PER_REPLICA {
        let (http, mcp, token, id) = (
            client_from(address(first + n)),
            mcp.clone(),
            agent_token.to_owned(),
            id.to_owned(),
        );
        held.push(tokio::spawn(async move {
            wait_for_run(&http, &mcp, &token, &id)
                .await
                .map_err(|e| e.to_string())
        }));
    }
    for n in 0..POLLS_PER_REPLICA {
        let desktop = Desktop {
            http: client_from(address(first + WAITS_PER_REPLICA + n)),
            base: served.base.clone(),
            token: desktop_token.to_owned(),
        };
        let body = json!({"project_id": project, "sessions": [], "sessions_unchanged": true, "known": [id], "wait_ms": 25_000});
        held.push(tokio::spawn(
            async move { Ok(desktop.sync_raw(&body).await) },
        ));
    }
    let (waits, polls) = (WAITS_PER_REPLICA as f64, POLLS_PER_REPLICA as f64);
    served
        .wait_for_metrics("all held", |samples| {
            let held =
                |kind| crate::operations::value(samples, "relay_held_requests", &[("kind", kind)]);
            held("get_graph_run") == waits && held("sync") == polls
        })
        .await;
    held
}

/// Every held client was answered 200: the waits with the run's view, the polls with a sync
/// answer for the project.
async fn assert_all_answered(held: Held, id: &str, project: &str) {
    for (n, client) in held.into_iter().enumerate() {
        let (status, answer) = client
            .await
            .expect("client task")
            .unwrap_or_else(|error| panic!("client {n} got no answer: {error}"));
        assert_eq!(status, 200, "client {n}: {answer}");
        if n < WAITS_PER_REPLICA {
            let view = run_view(&answer).unwrap_or_else(|| panic!("client {n}: {answer}"));
            assert_eq!(view["command_id"], id, "{answer}");
            assert_eq!(view["status"], "queued", "{answer}");
        } else {
            assert_eq!(answer["project_id"], project, "client {n}: {answer}");
        }
    }
}

/// Stops `served` with `signal` and checks its clean exit and its drain line (which counts
/// `streams` MCP event streams ended besides the held requests).
async fn stop(served: &mut Served, signal: &str, streams: usize) {
    served.signal(signal);
    let exit = served.exited().await;
    assert!(
        exit.success(),
        "a stop on SIG{signal} is a clean exit: {exit:?}"
    );
    let log = served.log();
    let drained: Vec<&String> = log.iter().filter(|l| l.contains("drained")).collect();
    assert_eq!(drained.len(), 1, "one drain line:\n{}", log.join("\n"));
    // "drained", not "drain timed out": every held request and stream ended on its own.
    let expected = format!(
        "drained: {POLLS_PER_REPLICA} held long polls, {WAITS_PER_REPLICA} waiting get_graph_run calls and {streams} event streams answered"
    );
    assert!(drained[0].contains(&expected), "{}", drained[0]);
    assert!(
        log.iter()
            .any(|l| l.contains(&format!("stopping on SIG{signal}"))),
        "{}",
        log.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_and_sighup_answer_waiting_calls_and_long_polls_with_what_they_have() {
    for signal in ["TERM", "HUP"] {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("relay.db");
        let (project, desktop_token, agent_token) = demo_project(&db);
        let db = db.to_str().expect("utf-8 path").to_owned();
        let mut served = Served::start(&db, &["--rate-per-token", "0"], &[]).await;
        let desktop = Desktop {
            http: client_from(address(901)),
            base: served.base.clone(),
            token: desktop_token.clone(),
        };
        desktop.sync(&project, &[1]).await;
        let id = queue(&served, &agent_token, &format!("drain-{signal}")).await;
        let held = hold(&served, (&agent_token, &desktop_token), &project, &id, 0).await;
        // An MCP event stream open on the run is answered and ends too.
        let listener = RawClient::new(&format!("{}/mcp", served.base), &agent_token, false);
        let mut stream = listener.listen(&[&format!("relay://runs/{id}")]).await;
        served
            .wait_for_metrics("the stream open", |samples| {
                crate::operations::value(samples, "relay_mcp_event_streams", &[]) == 1.0
            })
            .await;
        stop(&mut served, signal, 1).await;
        assert_all_answered(held, &id, &project).await;
        // The listen request's own answer ends the stream: a normal end, not a cut.
        let answer = stream.next(crate::served::PATIENCE).await;
        assert!(
            answer
                .as_ref()
                .is_some_and(|a| a["id"] == 1 && a["result"]["resultType"] == "complete"),
            "{answer:?}"
        );
        let after = stream.next(crate::served::PATIENCE).await;
        assert!(after.is_none(), "the stream ended, not {after:?}");
    }
}

/// A waiting `get_graph_run` whose client hangs up is released at once (not at its 45 s
/// deadline), and the request is counted and logged as aborted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_releases_its_wait_at_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let (project, desktop_token, agent_token) = demo_project(&db);
    let served = Served::start(db.to_str().expect("utf-8"), &[], &[]).await;
    let desktop = Desktop {
        http: client_from(address(901)),
        base: served.base.clone(),
        token: desktop_token,
    };
    desktop.sync(&project, &[1]).await;
    let id = queue(&served, &agent_token, "hang-up-key").await;
    let mcp = format!("{}/mcp", served.base);
    let waiting = {
        let (http, token, id) = (client_from(address(1)), agent_token.clone(), id.clone());
        tokio::spawn(async move { wait_for_run(&http, &mcp, &token, &id).await })
    };
    served
        .wait_for_metrics("the wait held", |samples| {
            crate::operations::value(samples, "relay_held_requests", &[("kind", "get_graph_run")])
                == 1.0
        })
        .await;
    waiting.abort();
    let watch = Stopwatch::start();
    served
        .wait_for_metrics("the wait released", |samples| {
            crate::operations::value(samples, "relay_held_requests", &[("kind", "get_graph_run")])
                == 0.0
        })
        .await;
    assert!(
        watch.elapsed() < std::time::Duration::from_secs(30),
        "released when the client hung up, not at the wait's 45 s deadline: {:?}",
        watch.elapsed()
    );
    let aborted = served
        .metric("relay_http_requests_aborted_total", &[("route", "/mcp")])
        .await;
    assert_eq!(aborted, 1.0);
    assert!(
        served
            .log()
            .iter()
            .any(|l| l.contains("client went away") && l.contains("route=/mcp")),
        "{}",
        served.log().join("\n")
    );
}

/// Three replicas on one PostgreSQL database, restarted one after another (SIGTERM, SIGHUP,
/// SIGTERM), each holding ten waiting `get_graph_run` calls and ten desktop long polls when it
/// stops: every one of the sixty clients gets a 200 with what it waited for, none a 5xx; each
/// stopped replica logs what it drained; each replacement serves the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_restart_of_three_replicas_costs_no_client_an_error() {
    let Some(url) = common::postgres_url() else {
        return;
    };
    let (db, dropper) = crate::postgres_cli::fresh_database(&url).await;
    let admin = crate::replicas::admin_on(&db).await;
    let tokens = (admin.agent_token.as_str(), admin.desktop_token.as_str());
    let args = ["--rate-per-token", "0"];
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(Served::start(&db, &args, &[]).await);
    }
    let desktop = Desktop {
        http: client_from(address(901)),
        base: replicas[0].base.clone(),
        token: admin.desktop_token.clone(),
    };
    desktop.sync(&admin.project, &[1]).await;
    let id = queue(&replicas[1], &admin.agent_token, "rolling-restart").await;
    for (n, signal) in ["TERM", "HUP", "TERM"].into_iter().enumerate() {
        let first = n * (WAITS_PER_REPLICA + POLLS_PER_REPLICA);
        let held = hold(&replicas[n], tokens, &admin.project, &id, first).await;
        stop(&mut replicas[n], signal, 0).await;
        assert_all_answered(held, &id, &admin.project).await;
        let replacement = Served::start(&db, &args, &[]).await;
        let (status, answer) = call_tool(
            &client_from(address(902)),
            &format!("{}/mcp", replacement.base),
            &admin.agent_token,
            "get_graph_run",
            json!({"command_id": id}),
        )
        .await
        .expect("the replacement answers");
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            run_view(&answer).map(|v| &v["status"]),
            Some(&json!("queued"))
        );
        replicas[n] = replacement;
    }
    drop(replicas);
    dropper.drop_database().await;
}
