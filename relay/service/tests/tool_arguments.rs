//! Bad tool arguments get a clear tool error and change nothing: unknown properties, missing
//! or mistyped ones, key length 8–128, limit 1–50, malformed ids (tested at and past each
//! limit).

use crate::common;

use common::{Era, TestService, call, err, gs, mcp_client, ok, run_args};
use relay_service::runs::{MAX_ARGUMENTS_BYTES, RUN_NOT_FOUND};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_run_arguments_are_refused_and_queue_nothing() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let client = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&project).await,
        Era::Current,
    )
    .await;

    for (arguments, expected) in bad_run_arguments() {
        let message = err(&call(&client, "run_graph_session", arguments.clone()).await);
        assert!(message.contains(expected), "{arguments}: {message}");
    }
    assert!(
        desktop.sync(&project, &[1]).await.is_empty(),
        "nothing was queued"
    );

    // At the limits: 8 and 128 characters (counted as characters, not bytes) are fine.
    for key in ["k".repeat(8), "ü".repeat(128)] {
        ok(&call(&client, "run_graph_session", run_args(1, &key, json!({}))).await);
    }
    ok(&call(
        &client,
        "run_graph_session",
        json!({"graph_session_id": gs(1), "idempotency_key": "no-arguments"}),
    )
    .await);
    assert_eq!(desktop.sync(&project, &[1]).await.len(), 3);
    service.stop().await;
}

/// Arguments `run_graph_session` refuses, each with a part of the message that says why.
fn bad_run_arguments() -> [(Value, &'static str); 11] {
    [
        (
            json!({"graph_session_id": gs(1), "idempotency_key": "key-00001", "extra": 1}),
            "unknown argument `extra`",
        ),
        (
            json!({"graph_session_id": gs(1)}),
            "needs the argument `idempotency_key`",
        ),
        (
            json!({"idempotency_key": "key-00001"}),
            "needs the argument `graph_session_id`",
        ),
        (
            run_args(1, &"k".repeat(7), json!({})),
            "must be 8 to 128 characters",
        ),
        (
            run_args(1, &"k".repeat(129), json!({})),
            "must be 8 to 128 characters",
        ),
        (run_args(1, "", json!({})), "must be 8 to 128 characters"),
        (
            json!({"graph_session_id": gs(1), "idempotency_key": 12345678}),
            "`idempotency_key` must be a string",
        ),
        (
            json!({"graph_session_id": gs(1), "idempotency_key": "key-00001", "arguments": [1]}),
            "`arguments` must be a JSON object",
        ),
        (
            json!({"graph_session_id": "gs_XYZ", "idempotency_key": "key-00001"}),
            "expected `gs_` followed by 32 lowercase hex",
        ),
        (
            run_args(2, "key-00001", json!({})),
            "not shared with this project",
        ),
        (
            run_args(
                1,
                "key-00001",
                json!({"big": "x".repeat(MAX_ARGUMENTS_BYTES)}),
            ),
            "at most 65536 are allowed",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_limit_is_1_to_50() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &(0..60).collect::<Vec<_>>()).await;
    let client = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&project).await,
        Era::Sessions2025,
    )
    .await;
    let listed = |limit: serde_json::Value| {
        let client = &client;
        let project = project.clone();
        async move {
            call(
                client,
                "list_graph_sessions",
                json!({"project_id": project, "limit": limit}),
            )
            .await
        }
    };
    for limit in [1, 50] {
        let sessions = ok(&listed(json!(limit)).await)["sessions"]
            .as_array()
            .unwrap()
            .len();
        assert_eq!(sessions, limit);
    }
    for limit in [json!(0), json!(51), json!(-1), json!(2.5), json!("10")] {
        let message = err(&listed(limit.clone()).await);
        assert!(
            message.contains("limit") || message.contains("whole number"),
            "{limit}: {message}"
        );
    }
    let default = ok(&call(
        &client,
        "list_graph_sessions",
        json!({"project_id": project}),
    )
    .await);
    assert_eq!(default["sessions"].as_array().unwrap().len(), 20);
    let message = err(&call(
        &client,
        "list_graph_sessions",
        json!({"project_id": project, "cursor": "x"}),
    )
    .await);
    assert!(message.contains("unknown argument `cursor`"));
    // Without project_id: the connection's own project.
    let own = ok(&call(&client, "list_graph_sessions", json!({})).await);
    assert_eq!(own["project_id"], project.as_str());
    assert_eq!(own["sessions"].as_array().map(Vec::len), Some(20));
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_id_arguments_are_checked() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let client = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&project).await,
        Era::Current,
    )
    .await;
    for tool in ["get_graph_run", "cancel_graph_run"] {
        assert_eq!(
            err(&call(&client, tool, json!({"command_id": "x"})).await),
            RUN_NOT_FOUND
        );
        let message = err(&call(&client, tool, json!({"command_id": 5})).await);
        assert!(message.contains("must be a string"), "{message}");
        let message = err(&call(&client, tool, json!({"command_id": "x", "force": true})).await);
        assert!(message.contains("unknown argument `force`"), "{message}");
    }
    service.stop().await;
}
