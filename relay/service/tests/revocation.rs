//! Revoking a token ends what it holds: a waiting `get_graph_run` answers revoked (and never
//! the result that arrives after), and a held long-poll `sync` answers 401, within a second or
//! so of the revocation, also when it is revoked from another process (`relay admin`).

use crate::common;

use std::time::Duration;

use common::{Era, Setup, call, err, mcp_client, ok, queue, setup};
use relay_protocol::DESKTOP_API_PREFIX;
use relay_service::admin;
use relay_service::held::REVOKED_WHILE_WAITING;
use serde_json::json;

/// Far above the revocation check's 500 ms: the test shows the wait ends early, not a figure.
const GENEROUS: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_get_graph_run_ends_as_revoked_and_never_gets_the_result() {
    let Setup {
        service,
        project,
        desktop,
        ..
    } = setup(Era::Current).await;
    let (token, token_id) = service
        .agent(&project, &["osfoundry:read", "osfoundry:run"])
        .await;
    let agent = mcp_client(&service.mcp_url(), &token, Era::Current).await;
    let id = queue(&agent, "revoke-wait-key").await;
    assert_eq!(desktop.started(&id, "e1").await.0, 200);
    let waiter = mcp_client(&service.mcp_url(), &token, Era::Current).await;
    let waiting = {
        let id = id.clone();
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let answer = call(
                &waiter,
                "get_graph_run",
                json!({"command_id": id, "wait_seconds": 40}),
            )
            .await;
            (answer, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    admin::revoke_token(&service.app.admin(), &token_id)
        .await
        .expect("revoke");
    let (answer, waited) = tokio::time::timeout(GENEROUS, waiting)
        .await
        .expect("the wait ends soon after the revocation")
        .expect("task");
    assert!(err(&answer).contains(REVOKED_WHILE_WAITING), "{answer:?}");
    assert!(waited < GENEROUS, "{waited:?}");
    let done = json!({"execution_id": "e1", "status": "completed", "result": {"secret": 1}});
    assert_eq!(desktop.complete(&id, &done).await.0, 200);
    let serde_json::Value::Object(arguments) = json!({"command_id": id}) else {
        unreachable!("a literal object");
    };
    let after = agent
        .call_tool(
            rmcp::model::CallToolRequestParams::new("get_graph_run").with_arguments(arguments),
        )
        .await;
    assert!(
        format!("{after:?}").contains("AuthRequired"),
        "a revoked token gets 401, never the result: {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_long_poll_answers_401_once_its_desktop_token_is_revoked() {
    let Setup {
        service,
        project,
        desktop,
        client: agent,
    } = setup(Era::Current).await;
    let held = {
        let desktop_http = desktop.http.clone();
        let url = format!("{}{DESKTOP_API_PREFIX}/sync", service.base);
        let token = desktop.token.clone();
        let project = project.clone();
        tokio::spawn(async move {
            desktop_http
                .post(url)
                .bearer_auth(token)
                .json(&json!({"project_id": project, "sessions": [], "sessions_unchanged": true, "wait_ms": 25_000}))
                .send()
                .await
                .expect("held sync")
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tokens = admin::list_tokens(&service.app.admin(), &project)
        .await
        .expect("tokens");
    let desktop_token = tokens
        .iter()
        .find(|t| t.kind == "desktop")
        .expect("the desktop's token");
    admin::revoke_token(&service.app.admin(), &desktop_token.token_id)
        .await
        .expect("revoke");
    let answer = tokio::time::timeout(GENEROUS, held)
        .await
        .expect("the held sync ends soon after the revocation")
        .expect("task");
    assert_eq!(answer.status(), 401);
    let body: serde_json::Value = answer.json().await.expect("JSON error");
    assert_eq!(body["error"], REVOKED_WHILE_WAITING);
    // The agent is unaffected.
    ok(&call(
        &agent,
        "list_graph_sessions",
        json!({"project_id": project}),
    )
    .await);
}
