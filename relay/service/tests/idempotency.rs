//! The same agent and key never start a second run: not under 50 concurrent calls, not after
//! a lost response, not a day later; the same key with other content is refused.

use crate::common;

use std::time::Duration;

use common::{Era, TestService, call, err, mcp_client, ok, run_args};
use relay_service::runs::IDEMPOTENCY_CONFLICT;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_identical_calls_create_one_command() {
    const CALLS: usize = 50;
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let token = service.full_agent(&project).await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let client = mcp_client(&service.mcp_url(), &token, Era::Current).await;
    let calls = (0..CALLS).map(|_| {
        let peer = client.peer().clone();
        tokio::spawn(async move {
            let arguments = run_args(1, "concurrent-key", json!({"n": 1}));
            peer.call_tool(
                rmcp::model::CallToolRequestParams::new("run_graph_session")
                    .with_arguments(arguments.as_object().unwrap().clone()),
            )
            .await
            .expect("answered")
        })
    });
    let mut ids = std::collections::BTreeSet::new();
    let mut created = 0;
    for task in calls.collect::<Vec<_>>() {
        let ticket = ok(&task.await.expect("task"));
        ids.insert(ticket["command_id"].as_str().unwrap().to_owned());
        if ticket["replayed"] == false {
            created += 1;
        }
    }
    assert_eq!(ids.len(), 1, "all {CALLS} calls got the same command");
    assert_eq!(created, 1, "exactly one call created it");
    assert_eq!(
        desktop.sync(&project, &[1]).await.len(),
        1,
        "one command is queued"
    );
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_lost_response_gets_the_same_command() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let token = service.full_agent(&project).await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1, 2]).await;

    // The first attempt's response is lost: the request is sent and its answer dropped.
    let lost = common::http_client()
        .post(service.mcp_url())
        .bearer_auth(&token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "run_graph_session")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "run_graph_session",
            "arguments": run_args(1, "lost-response-key", json!({"draft": "mail"})),
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}
            }}}),
        )
        .send()
        .await
        .expect("sent");
    assert_eq!(lost.status().as_u16(), 200);
    drop(lost);
    let queued = desktop.sync(&project, &[1, 2]).await;
    assert_eq!(queued.len(), 1);

    let client = mcp_client(&service.mcp_url(), &token, Era::Sessions2025).await;
    let retry = ok(&call(
        &client,
        "run_graph_session",
        run_args(1, "lost-response-key", json!({"draft": "mail"})),
    )
    .await);
    assert_eq!(retry["command_id"], queued[0]["command_id"]);
    assert_eq!(retry["replayed"], true);

    // Key order inside the arguments does not make them different.
    let reordered = ok(&call(
        &client,
        "run_graph_session",
        json!({
            "idempotency_key": "lost-response-key",
            "arguments": {"draft": "mail"},
            "graph_session_id": common::gs(1),
        }),
    )
    .await);
    assert_eq!(reordered["command_id"], queued[0]["command_id"]);

    // A day later (and after the session was unshared) the key still finds its run.
    service.clock.advance(Duration::from_secs(25 * 3600));
    desktop.sync(&project, &[2]).await;
    let later = ok(&call(
        &client,
        "run_graph_session",
        run_args(1, "lost-response-key", json!({"draft": "mail"})),
    )
    .await);
    assert_eq!(later["command_id"], queued[0]["command_id"]);
    // The unshare withdrew it (issue 32): the retry finds it ended, and no second one exists.
    assert_eq!(later["status"], "cancelled", "{later}");
    let id = later["command_id"].as_str().expect("id");
    let run = ok(&call(&client, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["end_cause"], "consent_withdrawn", "{run}");
    assert_eq!(
        desktop.sync(&project, &[1, 2]).await.len(),
        0,
        "no new command"
    );
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_with_different_content_is_rejected() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let token = service.full_agent(&project).await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1, 2]).await;
    let client = mcp_client(&service.mcp_url(), &token, Era::Current).await;
    let first = ok(&call(
        &client,
        "run_graph_session",
        run_args(1, "changing-key", json!({"a": 1})),
    )
    .await);

    let changed_arguments = call(
        &client,
        "run_graph_session",
        run_args(1, "changing-key", json!({"a": 2})),
    )
    .await;
    assert_eq!(err(&changed_arguments), IDEMPOTENCY_CONFLICT);
    let changed_session = call(
        &client,
        "run_graph_session",
        run_args(2, "changing-key", json!({"a": 1})),
    )
    .await;
    assert_eq!(err(&changed_session), IDEMPOTENCY_CONFLICT);
    let commands = desktop.sync(&project, &[1, 2]).await;
    assert_eq!(commands.len(), 1);
    assert_eq!(commands[0]["command_id"], first["command_id"]);
    assert_eq!(
        commands[0]["arguments"],
        json!({"a": 1}),
        "the first request stands"
    );
    desktop.sync(&project, &[2]).await;
    let unshared_and_changed = call(
        &client,
        "run_graph_session",
        run_args(1, "changing-key", json!({"a": 3})),
    )
    .await;
    assert_eq!(err(&unshared_and_changed), IDEMPOTENCY_CONFLICT);
    // The unshare withdrew the first run (issue 32); the conflict queued nothing new.
    assert!(desktop.sync(&project, &[1, 2]).await.is_empty());

    // Keys belong to one agent: another agent's same key is its own run.
    let other = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&project).await,
        Era::Current,
    )
    .await;
    let theirs = ok(&call(
        &other,
        "run_graph_session",
        run_args(1, "changing-key", json!({"a": 2})),
    )
    .await);
    assert_ne!(theirs["command_id"], first["command_id"]);
    assert_eq!(theirs["replayed"], false);
    service.stop().await;
}
