//! The authorization server's happy paths, driven as a chat app and its owner's browser would:
//! discovery, registration, sign-in, consent, the code exchange with PKCE, refresh, and the
//! connection as an agent (its runs, its listing, its revocation).

use std::time::Duration;

use crate::common::oauth::{self, Browser};
use crate::common::{Era, TestService, call, ok, try_mcp_client};
use relay_service::admin;
use relay_service::oauth::connections;
use serde_json::{Value, json};

pub(crate) const PASSWORD: &str = "correct horse battery";

/// A service with owner `ann` (password set) and her project `Notes`.
pub(crate) async fn service() -> (TestService, String) {
    let service = TestService::start().await;
    let project = service.project("Notes", "ann").await;
    admin::set_owner_password(&service.app.admin(), "ann", PASSWORD.into())
        .await
        .expect("set password");
    (service, project)
}

async fn get_json(url: &str) -> Value {
    let response = crate::common::http_client()
        .get(url)
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), 200, "{url}");
    response.json().await.expect("json")
}

#[tokio::test]
async fn metadata_points_from_the_resource_to_the_authorization_server() {
    let (service, _) = service().await;
    let base = &service.base;
    let resource = get_json(&format!("{base}/.well-known/oauth-protected-resource/mcp")).await;
    assert_eq!(resource["resource"], format!("{base}/mcp"));
    assert_eq!(resource["authorization_servers"], json!([base]));
    assert_eq!(resource["bearer_methods_supported"], json!(["header"]));
    assert_eq!(
        resource["scopes_supported"],
        json!(["osfoundry:read", "osfoundry:run"])
    );
    let server = get_json(&format!("{base}/.well-known/oauth-authorization-server")).await;
    assert_eq!(server["issuer"], json!(base));
    for (field, path) in [
        ("authorization_endpoint", "/oauth/authorize"),
        ("token_endpoint", "/oauth/token"),
        ("registration_endpoint", "/oauth/register"),
        ("revocation_endpoint", "/oauth/revoke"),
    ] {
        assert_eq!(server[field], format!("{base}{path}"), "{field}");
    }
    assert_eq!(server["response_types_supported"], json!(["code"]));
    assert_eq!(
        server["grant_types_supported"],
        json!(["authorization_code", "refresh_token"])
    );
    assert_eq!(server["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(
        server["token_endpoint_auth_methods_supported"],
        json!(["none", "client_secret_post", "client_secret_basic"])
    );
    assert_eq!(server["client_id_metadata_document_supported"], json!(true));
}

#[tokio::test]
async fn a_chat_app_connects_calls_tools_and_refreshes() {
    let (service, project) = service().await;
    let app = oauth::register(&service.base, "Claude").await;
    let browser = Browser::new();
    let tokens = oauth::connect(&browser, &app, "ann", PASSWORD, &project).await;
    assert!(tokens.access.starts_with("grt_") && tokens.refresh.starts_with("grr_"));

    let client = try_mcp_client(&service.mcp_url(), &tokens.access, Era::Current)
        .await
        .expect("the access token opens MCP");
    let listed = ok(&call(
        &client,
        "list_graph_sessions",
        json!({"project_id": project, "limit": 10}),
    )
    .await);
    assert_eq!(listed["sessions"], json!([]), "{listed}");
    // The grant is a connected agent: it queues runs under its own identity.
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let queued = ok(&call(
        &client,
        "run_graph_session",
        crate::common::run_args(1, "key-oauth-1", json!({})),
    )
    .await);
    let command = queued["command_id"]
        .as_str()
        .expect("command id")
        .to_owned();
    let read = ok(&call(&client, "get_graph_run", json!({"command_id": command})).await);
    assert_eq!(read["status"], "queued");
    client.cancel().await.ok();

    // Past its lifetime the access token stops working; the refresh token gets a new one.
    service.clock.advance(Duration::from_secs(3601));
    assert_eq!(oauth::mcp_status(&service.base, &tokens.access).await, 401);
    let (status, refreshed) = app.refresh(&tokens.refresh).await;
    assert_eq!(status, 200, "{refreshed}");
    assert_eq!(refreshed["token_type"], "Bearer");
    assert_eq!(refreshed["expires_in"], 3600);
    assert_eq!(refreshed["scope"], "osfoundry:read osfoundry:run");
    let access = refreshed["access_token"].as_str().expect("access");
    assert_ne!(access, tokens.access);
    assert_ne!(
        refreshed["refresh_token"],
        json!(tokens.refresh),
        "refresh tokens rotate"
    );
    let client = try_mcp_client(&service.mcp_url(), access, Era::Sessions2025)
        .await
        .expect("the refreshed token opens MCP");
    let read = ok(&call(&client, "get_graph_run", json!({"command_id": command})).await);
    assert_eq!(
        read["status"], "queued",
        "the same agent reads its run after a refresh"
    );

    let listed = connections::list(service.app.store.as_ref(), None, None)
        .await
        .expect("list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].client_name, "Claude");
    assert_eq!(listed[0].project_id, project);
    assert_eq!(listed[0].owner, "ann");
    assert_eq!(listed[0].scopes, ["osfoundry:read", "osfoundry:run"]);
    assert!(listed[0].revoked_at.is_none());
}

#[tokio::test]
async fn only_the_consented_scopes_are_granted() {
    let (service, project) = service().await;
    let app = oauth::register(&service.base, "Reader").await;
    let browser = Browser::new();
    let pkce = oauth::pkce();
    let page = oauth::consent_page(&browser, &app, &pkce, "s", "ann", PASSWORD).await;
    assert!(page.body.contains("Reader"), "the page names the client");
    assert!(page.body.contains("127.0.0.1"), "and where answers go");
    assert!(page.body.contains("Read graph sessions and runs"));
    assert!(page.body.contains("Start and cancel runs"));
    assert_eq!(page.options(), [(project.clone(), "Notes".to_owned())]);
    let answer = oauth::decide(
        &browser,
        &service.base,
        &page,
        &project,
        &["osfoundry:read"],
        "allow",
    )
    .await;
    let code = answer.redirect_param("code").expect("code");
    let (status, tokens) = app.exchange(&code, &pkce.verifier).await;
    assert_eq!(status, 200, "{tokens}");
    assert_eq!(tokens["scope"], "osfoundry:read");
    let client = try_mcp_client(
        &service.mcp_url(),
        tokens["access_token"].as_str().expect("token"),
        Era::Current,
    )
    .await
    .expect("MCP");
    let Value::Object(arguments) = crate::common::run_args(1, "key-scope-1", json!({})) else {
        panic!("arguments are an object");
    };
    let refused = client
        .call_tool(
            rmcp::model::CallToolRequestParams::new("run_graph_session").with_arguments(arguments),
        )
        .await
        .expect_err("no run scope was granted");
    assert!(
        format!("{refused:?}").contains("needs the osfoundry:run scope"),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_confidential_client_authenticates_with_its_secret() {
    let (service, project) = service().await;
    let (status, registered) = oauth::register_raw(
        &service.base,
        &json!({"client_name": "Server app", "redirect_uris": ["https://app.example/cb"]}),
    )
    .await;
    assert_eq!(status, 201, "{registered}");
    assert_eq!(
        registered["token_endpoint_auth_method"],
        "client_secret_basic"
    );
    let secret = registered["client_secret"]
        .as_str()
        .expect("a secret")
        .to_owned();
    let mut app = oauth::App {
        base: service.base.clone(),
        client_id: registered["client_id"].as_str().expect("id").to_owned(),
        client_secret: Some("wrong".into()),
        redirect_uri: "https://app.example/cb".into(),
    };
    let browser = Browser::new();
    let pkce = oauth::pkce();
    let page = oauth::consent_page(&browser, &app, &pkce, "s", "ann", PASSWORD).await;
    let answer = oauth::decide(
        &browser,
        &service.base,
        &page,
        &project,
        &["osfoundry:read"],
        "allow",
    )
    .await;
    assert!(
        answer
            .location
            .as_deref()
            .is_some_and(|l| l.starts_with("https://app.example/cb?"))
    );
    let code = answer.redirect_param("code").expect("code");
    let (status, refused) = app.exchange(&code, &pkce.verifier).await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (401, Some("invalid_client"))
    );
    app.client_secret = Some(secret);
    let (status, tokens) = app.exchange(&code, &pkce.verifier).await;
    assert_eq!(status, 200, "{tokens}");
}

#[tokio::test]
async fn a_sign_in_link_works_once() {
    let service = TestService::start().await;
    let project = service.project("Notes", "bea").await;
    let link = admin::sign_in_link(
        &service.app.admin(),
        "bea",
        Duration::from_secs(600),
        |secret| relay_service::http::oauth::sign_in_link_url(&service.base, secret),
    )
    .await
    .expect("link");
    let browser = Browser::new();
    let page = browser.get(&link.url).await;
    assert_eq!(page.status, 200);
    let post = |page: oauth::Page| {
        let browser = &browser;
        let base = service.base.clone();
        async move {
            browser
                .post_form(
                    &format!("{base}/oauth/sign-in/link"),
                    &[
                        ("csrf", &page.input("csrf").expect("csrf")),
                        ("link", &page.input("link").expect("link")),
                    ],
                )
                .await
        }
    };
    let signed_in = post(page.clone()).await;
    assert_eq!(signed_in.status, 200, "{}", signed_in.body);
    assert!(
        signed_in.body.contains("signed in as bea"),
        "{}",
        signed_in.body
    );
    // Signed in without a password, bea can consent.
    let app = oauth::register(&service.base, "Claude").await;
    let pkce = oauth::pkce();
    let consent = browser
        .get(&app.authorize_url(&pkce.challenge, "s", &[]))
        .await;
    assert!(consent.input("authorization").is_some(), "{}", consent.body);
    assert!(consent.body.contains(&project));
    // The link is spent.
    let again = post(page).await;
    assert_eq!(again.status, 410, "{}", again.body);
    // Signing out everywhere ends the session.
    assert_eq!(
        admin::sign_out_all(&service.app.admin(), "bea")
            .await
            .expect("sign out"),
        1
    );
    let page = browser
        .get(&app.authorize_url(&pkce.challenge, "s", &[]))
        .await;
    assert!(
        page.input("authorization").is_none(),
        "signed out: the sign-in page again"
    );
    assert!(page.body.contains("Owner name"));
}

#[tokio::test]
async fn a_browser_session_expires_after_twelve_idle_hours() {
    let (service, _project) = service().await;
    let app = oauth::register(&service.base, "Claude").await;
    let browser = Browser::new();
    let pkce = oauth::pkce();
    oauth::consent_page(&browser, &app, &pkce, "s", "ann", PASSWORD).await;
    service.clock.advance(Duration::from_secs(11 * 3600));
    let page = browser
        .get(&app.authorize_url(&pkce.challenge, "s", &[]))
        .await;
    assert!(
        page.input("authorization").is_some(),
        "11 idle hours: still signed in"
    );
    service.clock.advance(Duration::from_secs(12 * 3600 + 1));
    let page = browser
        .get(&app.authorize_url(&pkce.challenge, "s", &[]))
        .await;
    assert!(
        page.input("authorization").is_none(),
        "12 idle hours: signed out"
    );
}

#[tokio::test]
async fn pages_cannot_be_framed_and_cookies_are_http_only() {
    let (service, _) = service().await;
    let app = oauth::register(&service.base, "Claude").await;
    let browser = Browser::new();
    let pkce = oauth::pkce();
    let page = browser
        .get(&app.authorize_url(&pkce.challenge, "s", &[]))
        .await;
    let header = |name: &str| {
        page.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    assert!(header("content-security-policy").contains("frame-ancestors 'none'"));
    assert_eq!(header("x-frame-options"), "DENY");
    let set_cookie = header("set-cookie");
    assert!(
        set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Lax"),
        "{set_cookie}"
    );
    let signed = oauth::sign_in(&browser, &service.base, &page, "ann", PASSWORD).await;
    let cookie = signed
        .headers
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert!(
        cookie.starts_with("graphrelay_session=") && cookie.contains("HttpOnly"),
        "{cookie}"
    );
}

/// `get_graph_run` of `command` through `token`: its status, or the refusal's text.
async fn run_status(service: &TestService, token: &str, command: &str) -> String {
    let client = try_mcp_client(&service.mcp_url(), token, Era::Current)
        .await
        .expect("the token opens MCP");
    let answer = call(&client, "get_graph_run", json!({"command_id": command})).await;
    client.cancel().await.ok();
    if answer.is_error == Some(true) {
        crate::common::text(&answer)
    } else {
        ok(&answer)["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// `run_graph_session` of session 1 under `key` through `token`: its ticket.
async fn queue_under(service: &TestService, token: &str, key: &str) -> Value {
    let client = try_mcp_client(&service.mcp_url(), token, Era::Current)
        .await
        .expect("the token opens MCP");
    let ticket = ok(&call(
        &client,
        "run_graph_session",
        crate::common::run_args(1, key, json!({})),
    )
    .await);
    client.cancel().await.ok();
    ticket
}

#[tokio::test]
async fn authorizing_the_same_client_again_keeps_its_runs_and_keys_and_one_revoke_ends_both() {
    let (service, project) = service().await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let app = oauth::register(&service.base, "Claude").await;
    let first = oauth::connect(&Browser::new(), &app, "ann", PASSWORD, &project).await;
    let ticket = queue_under(&service, &first.access, "key-reauthorized").await;
    let command = ticket["command_id"].as_str().expect("command id");
    // The host lost its tokens and asks the owner again: a second grant of the same identity
    // (client, owner, project) reads the first grant's run and gets it back for its key.
    let second = oauth::connect(&Browser::new(), &app, "ann", PASSWORD, &project).await;
    assert_ne!(first.access, second.access);
    assert_eq!(
        run_status(&service, &second.access, command).await,
        "queued"
    );
    let again = queue_under(&service, &second.access, "key-reauthorized").await;
    assert_eq!(again["command_id"], command, "{again}");
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(run_status(&service, &first.access, command).await, "queued");

    let listed = connections::list(service.app.store.as_ref(), None, None)
        .await
        .expect("list");
    assert_eq!(listed.len(), 1, "one connection per identity: {listed:?}");
    assert_eq!(listed[0].grants, 2, "{listed:?}");
    // The owner sees the same in the console, and its one Revoke ends both grants.
    let owner = crate::console::Owner::sign_in_with(&service, "ann", PASSWORD).await;
    let page = owner.get(&service, "/console").await;
    let revoke = format!("/console/connections/{}/revoke", listed[0].id);
    assert_eq!(
        page.body.matches("data-label=\"Client\"").count(),
        1,
        "{}",
        page.body
    );
    assert!(
        page.body.contains("<td data-label=\"Grants\">2</td>"),
        "{}",
        page.body
    );
    assert_eq!(page.body.matches("/revoke\"").count(), 1, "{}", page.body);
    assert!(page.body.contains(&revoke), "{}", page.body);
    let revoked = owner.post(&service, &revoke, &[]).await;
    assert_eq!(revoked.status, 303, "{}", revoked.body);
    for token in [&first.access, &second.access] {
        assert_eq!(oauth::mcp_status(&service.base, token).await, 401);
    }
    for token in [&first.refresh, &second.refresh] {
        let (status, answer) = app.refresh(token).await;
        assert_eq!(status, 400, "{answer}");
    }
}

#[tokio::test]
async fn a_step_up_from_read_to_run_is_the_same_connection() {
    let (service, project) = service().await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let app = oauth::register(&service.base, "Claude").await;
    let browser = Browser::new();
    let pkce = oauth::pkce();
    let page = oauth::consent_page(&browser, &app, &pkce, "st-read", "ann", PASSWORD).await;
    let answer = oauth::decide(
        &browser,
        &app.base,
        &page,
        &project,
        &["osfoundry:read"],
        "allow",
    )
    .await;
    let code = answer.redirect_param("code").expect("a code");
    let (status, read_only) = app.exchange(&code, &pkce.verifier).await;
    assert_eq!(status, 200, "{read_only}");
    let full = oauth::connect(&browser, &app, "ann", PASSWORD, &project).await;
    let ticket = queue_under(&service, &full.access, "key-step-up").await;
    let command = ticket["command_id"].as_str().expect("command id");
    let read_only = read_only["access_token"].as_str().expect("access");
    assert_eq!(run_status(&service, read_only, command).await, "queued");
    let listed = connections::list(service.app.store.as_ref(), None, None)
        .await
        .expect("list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].scopes, ["osfoundry:read", "osfoundry:run"]);
}
