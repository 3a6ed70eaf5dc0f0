//! What a desktop learns from the service about whom it serves (issue 32): the projects its
//! token may sync, by name (never another owner's), and for each queued run the agent that
//! queued it.

use crate::common;

use common::{Desktop, TestService, call, decode, ok, run_args};
use relay_protocol::projects_path;
use serde_json::{Value, json};

async fn projects_of(desktop: &Desktop) -> (u16, Value) {
    projects_with(desktop, Some(&desktop.token)).await
}

async fn projects_with(desktop: &Desktop, token: Option<&str>) -> (u16, Value) {
    let mut request = desktop
        .http
        .get(format!("{}{}", desktop.base, projects_path()));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    decode(request.send().await.expect("projects request")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desktop_token_lists_exactly_the_projects_it_may_serve() {
    let service = TestService::start().await;
    let support = service.project("Support desk", "alice").await;
    let research = service.project("Research", "alice").await;
    let foreign = service.project("Bob's secret", "bob").await;
    let scoped = service.desktop(&support).await;
    let owner_wide = service.owners_desktop("alice").await;

    let (status, body) = projects_of(&scoped).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"projects": [{"project_id": support, "name": "Support desk"}]}),
        "a token minted for one project serves that one only"
    );
    let (status, body) = projects_of(&owner_wide).await;
    assert_eq!(status, 200, "{body}");
    // The test clock stands still, so both projects were made at one moment: the order among
    // equal times is the store's, and only the set is asserted.
    let mut listed = body["projects"].as_array().cloned().unwrap_or_default();
    listed.sort_by_key(|p| p["name"].as_str().map(str::to_owned));
    assert_eq!(
        listed,
        vec![
            json!({"project_id": research, "name": "Research"}),
            json!({"project_id": support, "name": "Support desk"}),
        ],
        "all of the owner's projects: {body}"
    );
    assert!(
        !body.to_string().contains(&foreign) && !body.to_string().contains("Bob"),
        "another owner's project is never named: {body}"
    );

    // Without a token, with another kind's, with a made-up one or a revoked one: nothing.
    let (agent_token, _) = service.agent(&support, &["osfoundry:read"]).await;
    for token in [
        None,
        Some(agent_token.as_str()),
        Some("grd_forged0123456789"),
    ] {
        let (status, body) = projects_with(&scoped, token).await;
        assert!(matches!(status, 401 | 403), "{token:?}: {status} {body}");
        assert!(!body.to_string().contains("Support desk"), "{body}");
    }
    relay_service::admin::revoke_token(&service.app.admin(), &scoped.token)
        .await
        .expect("revoked");
    assert_eq!(projects_of(&scoped).await.0, 401);
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_queued_command_names_the_agent_that_queued_it() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let (claude, claude_id) = service
        .agent(&project, &["osfoundry:read", "osfoundry:run"])
        .await;
    let client = common::mcp_client(&service.mcp_url(), &claude, common::Era::Current).await;
    let ticket = ok(&call(
        &client,
        "run_graph_session",
        run_args(1, "key-agent-named", json!({"ticket": "printer on fire"})),
    )
    .await);
    let commands = desktop.sync(&project, &[1]).await;
    assert_eq!(commands.len(), 1, "{commands:?}");
    assert_eq!(commands[0]["command_id"], ticket["command_id"]);
    assert_eq!(commands[0]["agent_id"], claude_id.as_str());
    assert_eq!(commands[0]["agent_name"], "claude");
    assert_eq!(
        commands[0]["arguments"],
        json!({"ticket": "printer on fire"})
    );
    service.stop().await;
}
