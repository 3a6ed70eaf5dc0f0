//! Scopes and tenancy: a run is visible only to the agent that started it, a token does only
//! what its scopes and kind allow, a desktop touches only its owner's projects, and revoking a
//! token takes effect on the next request.

use crate::common;

use common::{
    Desktop, Era, TestService, call, decode, err, mcp_client, ok, run_args, try_mcp_client,
};
use relay_service::admin;
use relay_service::runs::RUN_NOT_FOUND;
use serde_json::{Value, json};

async fn post_mcp(service: &TestService, token: Option<&str>, body: Value) -> reqwest::Response {
    let mut request = common::http_client()
        .post(service.mcp_url())
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("request")
}

fn modern_call(tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
    "name": tool, "arguments": arguments,
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    }}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_bad_token_gets_401_pointing_at_the_metadata() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let desktop = service.desktop(&project).await;
    let metadata = format!(
        "resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\", scope=\"osfoundry:read osfoundry:run\"",
        service.base
    );
    for token in [
        None,
        Some("gra_not-a-real-token"),
        Some(desktop.token.as_str()),
    ] {
        // No token: the challenge names the metadata and the scopes to ask for. A token that
        // does not work: `invalid_token` first (RFC 6750 §3), so a client refreshes or
        // authorizes again instead of retrying.
        let expected = match token {
            None => format!("Bearer {metadata}"),
            Some(_) => "Bearer error=\"invalid_token\", error_description=\"".to_owned(),
        };
        let response = post_mcp(
            &service,
            token,
            modern_call("list_graph_sessions", json!({"project_id": project})),
        )
        .await;
        assert_eq!(response.status().as_u16(), 401, "token {token:?}");
        let challenge = response.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            challenge.starts_with(&expected) && challenge.ends_with(&metadata),
            "token {token:?}: {challenge}"
        );
    }
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let (status, metadata) = decode(
            common::http_client()
                .get(format!("{}{path}", service.base))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(metadata["resource"], json!(service.mcp_url()));
        assert_eq!(
            metadata["scopes_supported"],
            json!(["osfoundry:read", "osfoundry:run"])
        );
        assert_eq!(metadata["bearer_methods_supported"], json!(["header"]));
    }
    assert!(
        try_mcp_client(&service.mcp_url(), "gra_wrong", Era::Sessions2025)
            .await
            .is_err()
    );
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_token_cannot_run_or_cancel() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let (reader, _) = service.agent(&project, &["osfoundry:read"]).await;
    let (runner, _) = service.agent(&project, &["osfoundry:run"]).await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;

    read_only_run_is_refused_on_the_wire(&service, &reader).await;
    assert!(
        desktop.sync(&project, &[1]).await.is_empty(),
        "nothing was queued"
    );

    // Through rmcp's client the call fails, and reading still works.
    let client = mcp_client(&service.mcp_url(), &reader, Era::Sessions2025).await;
    let refused = client
        .call_tool(
            rmcp::model::CallToolRequestParams::new("run_graph_session").with_arguments(
                run_args(1, "reader-key-2", json!({}))
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        )
        .await;
    assert!(
        refused.is_err(),
        "a read-only token must not run: {refused:?}"
    );
    ok(&call(
        &client,
        "list_graph_sessions",
        json!({"project_id": project}),
    )
    .await);

    // The run scope alone can start and cancel, but not read.
    let run_client = mcp_client(&service.mcp_url(), &runner, Era::Current).await;
    let ticket = ok(&call(
        &run_client,
        "run_graph_session",
        run_args(1, "runner-key-1", json!({})),
    )
    .await);
    let id = ticket["command_id"].as_str().unwrap().to_owned();
    let response = post_mcp(
        &service,
        Some(&reader),
        modern_call("cancel_graph_run", json!({"command_id": id})),
    )
    .await;
    assert_eq!(response.status().as_u16(), 403);
    let response = post_mcp(
        &service,
        Some(&runner),
        modern_call("get_graph_run", json!({"command_id": id})),
    )
    .await;
    assert_eq!(response.status().as_u16(), 403);
    let cancelled = ok(&call(&run_client, "cancel_graph_run", json!({"command_id": id})).await);
    assert_eq!(cancelled["status"], "cancelled");
    service.stop().await;
}

/// At the HTTP level, a read-only token's run gets 403 insufficient_scope, and the body is the
/// in-band isError result.
async fn read_only_run_is_refused_on_the_wire(service: &TestService, reader: &str) {
    let response = post_mcp(
        service,
        Some(reader),
        modern_call("run_graph_session", run_args(1, "reader-key-1", json!({}))),
    )
    .await;
    assert_eq!(response.status().as_u16(), 403);
    let challenge = response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        challenge.starts_with("Bearer error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(challenge.contains("scope=\"osfoundry:run\""));
    assert!(challenge.contains("resource_metadata=\""));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["id"], 7);
    assert_eq!(body["result"]["isError"], true);
    assert_eq!(
        body["result"]["_meta"]["mcp/www_authenticate"],
        json!([challenge])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_agent_sees_the_same_error_as_for_an_unknown_run() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let a = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&project).await,
        Era::Current,
    )
    .await;
    let b = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&project).await,
        Era::Current,
    )
    .await;
    let ticket = ok(&call(
        &a,
        "run_graph_session",
        run_args(1, "agent-a-key", json!({})),
    )
    .await);
    let id = ticket["command_id"].as_str().unwrap().to_owned();

    let unknown = uuid::Uuid::new_v4().to_string();
    for (tool, command_id) in [
        ("get_graph_run", id.as_str()),
        ("cancel_graph_run", id.as_str()),
        ("get_graph_run", unknown.as_str()),
        ("cancel_graph_run", unknown.as_str()),
        ("get_graph_run", "not-a-uuid"),
        ("cancel_graph_run", "'; DROP TABLE commands; --"),
    ] {
        let result = call(&b, tool, json!({"command_id": command_id})).await;
        assert_eq!(err(&result), RUN_NOT_FOUND, "{tool} {command_id}");
        // No structuredContent on an error: it could not fit the tool's output schema.
        assert_eq!(result.structured_content, None);
    }
    let run = ok(&call(&a, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["status"], "queued", "B's cancel changed nothing");

    // An agent of another project cannot list this one.
    let other_project = service.project("q", "alice").await;
    let c = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&other_project).await,
        Era::Current,
    )
    .await;
    let refused = call(&c, "list_graph_sessions", json!({"project_id": project})).await;
    assert!(err(&refused).contains("this connection is for project"));
    let refused = call(
        &c,
        "run_graph_session",
        run_args(1, "agent-c-key", json!({})),
    )
    .await;
    assert!(err(&refused).contains("not shared with this project"));
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desktop_touches_only_its_owners_projects() {
    let service = TestService::start().await;
    let x_project = service.project("x", "owner-x").await;
    let y_project = service.project("y", "owner-y").await;
    let x_second = service.project("x2", "owner-x").await;
    let x_desktop = service.owners_desktop("owner-x").await;
    let y_desktop = service.desktop(&y_project).await;
    y_desktop.sync(&y_project, &[1]).await;
    let y_agent = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&y_project).await,
        Era::Current,
    )
    .await;
    let ticket = ok(&call(
        &y_agent,
        "run_graph_session",
        run_args(1, "y-agent-key", json!({})),
    )
    .await);
    let id = ticket["command_id"].as_str().unwrap().to_owned();

    // An owner-wide desktop token serves all of its owner's projects, and only those.
    x_desktop.sync(&x_project, &[4]).await;
    x_desktop.sync(&x_second, &[5]).await;
    let (status, body) = x_desktop
        .sync_raw(&json!({"project_id": y_project, "sessions": [common::session(9)]}))
        .await;
    assert_eq!(status, 403, "{body}");
    let listed = ok(&call(
        &y_agent,
        "list_graph_sessions",
        json!({"project_id": y_project}),
    )
    .await);
    assert_eq!(
        listed["sessions"][0]["graph_session_id"],
        json!(common::gs(1)),
        "Y's snapshot is untouched"
    );
    let (status, _) = x_desktop
        .sync_raw(&json!({"project_id": "no-such-project", "sessions": []}))
        .await;
    assert_eq!(status, 403);

    assert_eq!(x_desktop.started(&id, "x-exec").await.0, 404);
    assert_eq!(x_desktop.control(&id).await.0, 404);
    let completion =
        json!({"execution_id": "x-exec", "status": "completed", "result": {"stolen": true}});
    assert_eq!(x_desktop.complete(&id, &completion).await.0, 404);
    let unknown = uuid::Uuid::new_v4().to_string();
    assert_eq!(x_desktop.complete(&unknown, &completion).await.0, 404);
    let run = ok(&call(&y_agent, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["status"], "queued");

    // Agent tokens are not desktop tokens.
    let agent_as_desktop = common::Desktop {
        http: common::http_client(),
        base: service.base.clone(),
        token: service.full_agent(&y_project).await,
    };
    assert_eq!(
        agent_as_desktop
            .sync_raw(&json!({"project_id": y_project, "sessions": []}))
            .await
            .0,
        401
    );
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_fails_at_once() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let (token, token_id) = service
        .agent(&project, &["osfoundry:read", "osfoundry:run"])
        .await;
    for era in [Era::Sessions2025, Era::Current] {
        let client = mcp_client(&service.mcp_url(), &token, era).await;
        ok(&call(
            &client,
            "list_graph_sessions",
            json!({"project_id": project}),
        )
        .await);
        client.cancel().await.expect("close");
    }
    let client = mcp_client(&service.mcp_url(), &token, Era::Sessions2025).await;
    let ticket = ok(&call(
        &client,
        "run_graph_session",
        run_args(1, "before-revoke", json!({})),
    )
    .await);

    let revoked = admin::revoke_token(&service.app.admin(), &token_id)
        .await
        .expect("revoke");
    assert!(revoked.newly_revoked);
    // The open session's very next request is refused.
    let after = client
        .call_tool(
            rmcp::model::CallToolRequestParams::new("list_graph_sessions")
                .with_arguments(json!({"project_id": project}).as_object().unwrap().clone()),
        )
        .await;
    assert!(
        after.is_err(),
        "a revoked token must fail at once: {after:?}"
    );
    let response = post_mcp(
        &service,
        Some(&token),
        modern_call("get_graph_run", json!({"command_id": ticket["command_id"]})),
    )
    .await;
    assert_eq!(response.status().as_u16(), 401);

    // A new token for the same agent is a new identity: the old run is gone for it.
    let fresh = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&project).await,
        Era::Current,
    )
    .await;
    let result = call(
        &fresh,
        "get_graph_run",
        json!({"command_id": ticket["command_id"]}),
    )
    .await;
    assert_eq!(err(&result), RUN_NOT_FOUND);

    desktop_token_is_revoked_by_its_text(&service, &desktop, &project).await;
    service.stop().await;
}

/// Desktop tokens revoke the same way as agent tokens, by token text too.
async fn desktop_token_is_revoked_by_its_text(
    service: &TestService,
    desktop: &Desktop,
    project: &str,
) {
    assert_eq!(
        desktop
            .sync_raw(&json!({"project_id": project, "sessions": []}))
            .await
            .0,
        200
    );
    admin::revoke_token(&service.app.admin(), &desktop.token)
        .await
        .expect("revoke by text");
    assert_eq!(
        desktop
            .sync_raw(&json!({"project_id": project, "sessions": []}))
            .await
            .0,
        401
    );
}

/// A desktop token minted for a project reaches that project only; one minted for the owner
/// reaches all of the owner's projects (`relay admin token create --desktop --owner NAME`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_desktop_token_reaches_its_project_only() {
    let service = TestService::start().await;
    let first = service.project("p1", "alice").await;
    let third = service.project("p3", "alice").await;
    let p1_desktop = service.desktop(&first).await;
    let alice_desktop = service.owners_desktop("alice").await;
    p1_desktop.sync(&first, &[1]).await;
    let (status, body) = p1_desktop
        .sync_raw(&json!({"project_id": third, "sessions": [common::session(3)]}))
        .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or("")
            .contains("--desktop --owner"),
        "the refusal says how to reach all projects: {body}"
    );
    alice_desktop.sync(&third, &[3]).await;
    alice_desktop.sync(&first, &[1]).await;

    // The project token cannot touch the other project's commands either.
    let agent = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&third).await,
        Era::Current,
    )
    .await;
    let ticket = ok(&call(
        &agent,
        "run_graph_session",
        run_args(3, "p3-run-key", json!({})),
    )
    .await);
    let id = ticket["command_id"].as_str().unwrap().to_owned();
    assert_eq!(p1_desktop.started(&id, "p1-exec").await.0, 404);
    assert_eq!(p1_desktop.control(&id).await.0, 404);
    assert_eq!(alice_desktop.started(&id, "alice-exec").await.0, 200);
    let listed = relay_service::admin::list_tokens(&service.app.admin(), &third)
        .await
        .expect("tokens");
    assert!(
        listed
            .iter()
            .filter(|t| t.kind == "desktop")
            .all(|t| t.project_id.is_none()),
        "P3's list shows the owner-wide desktop token, not P1's: {listed:?}"
    );
}
