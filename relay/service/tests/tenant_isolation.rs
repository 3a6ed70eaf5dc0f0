//! Tenants are filtered in the store's queries (`projects_of_owner`, `project_of_owner`): one
//! owner, with every kind of credential it has (an owner-wide desktop token, an owner token, a
//! console session, the OAuth consent page), tries another owner's projects, runs and
//! connections through each path that reads them, and finds them missing or refused, while
//! the owner of the objects reaches them the same way.

use crate::common::oauth::{self, Browser};
use crate::common::{Desktop, Era, TestService, call, decode, http_client, mcp_client, ok};
use crate::console::{Owner as ConsoleOwner, PASSWORD};
use relay_service::admin::{self, TokenSpec};
use serde_json::{Value, json};

const PREFIX: &str = relay_protocol::DESKTOP_API_PREFIX;

/// Ann's world (two projects, a running run whose agent asked to cancel, an OAuth
/// connection) and Bob's (one project), with the credentials each holds.
struct World {
    service: TestService,
    ann_project: String,
    ann_second: String,
    ann_run: String,
    ann_desktop: Desktop,
    ann_owner: String,
    bob_project: String,
    bob_desktop: Desktop,
    bob_owner: String,
}

async fn world() -> World {
    let service = TestService::start().await;
    let ann_project = service.project("Ann's first", "ann").await;
    let ann_second = service.project("Ann's second", "ann").await;
    let bob_project = service.project("Bob's only", "bob").await;
    for owner in ["ann", "bob"] {
        admin::set_owner_password(&service.app.admin(), owner, PASSWORD.into())
            .await
            .expect("set password");
    }
    let ann_desktop = service.owners_desktop("ann").await;
    ann_desktop.sync(&ann_project, &[1]).await;
    let agent = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&ann_project).await,
        Era::Current,
    )
    .await;
    let queued = ok(&call(
        &agent,
        "run_graph_session",
        crate::common::run_args(1, "ann-run-1", json!({})),
    )
    .await);
    let ann_run = queued["command_id"].as_str().expect("id").to_owned();
    assert_eq!(ann_desktop.started(&ann_run, "ann-exec").await.0, 200);
    ok(&call(&agent, "cancel_graph_run", json!({"command_id": ann_run})).await);
    let app = oauth::register(&service.base, "Ann's app").await;
    oauth::connect(&Browser::new(), &app, "ann", PASSWORD, &ann_project).await;
    let owner_token = |project: String| {
        let app = service.app.clone();
        async move {
            admin::create_token(&app.admin(), &project, TokenSpec::Owner)
                .await
                .expect("owner token")
                .token
        }
    };
    World {
        ann_owner: owner_token(ann_project.clone()).await,
        bob_owner: owner_token(bob_project.clone()).await,
        bob_desktop: service.owners_desktop("bob").await,
        service,
        ann_project,
        ann_second,
        ann_run,
        ann_desktop,
        bob_project,
    }
}

async fn get(desktop: &Desktop, path: &str) -> (u16, Value) {
    let response = desktop
        .http
        .get(format!("{}{path}", desktop.base))
        .bearer_auth(&desktop.token)
        .send()
        .await
        .expect("answered");
    decode(response).await
}

/// The project ids of a desktop's project list, sorted.
async fn served(desktop: &Desktop) -> Vec<String> {
    let (status, body) = get(desktop, &format!("{PREFIX}/projects")).await;
    assert_eq!(status, 200, "{body}");
    let mut ids: Vec<String> = body["projects"]
        .as_array()
        .expect("projects")
        .iter()
        .map(|p| p["project_id"].as_str().expect("id").to_owned())
        .collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desktop_reaches_only_its_owners_projects_and_runs() {
    let w = world().await;
    let mut anns = vec![w.ann_project.clone(), w.ann_second.clone()];
    anns.sort();
    assert_eq!(served(&w.ann_desktop).await, anns);
    assert_eq!(
        served(&w.bob_desktop).await,
        std::slice::from_ref(&w.bob_project)
    );
    let (status, body) = w
        .bob_desktop
        .sync_raw(&json!({"project_id": w.ann_project, "sessions": []}))
        .await;
    assert_eq!(
        (status, &body["cause"]),
        (403, &json!("forbidden")),
        "{body}"
    );
    let run = &w.ann_run;
    assert_eq!(w.bob_desktop.started(run, "bob-exec").await.0, 404);
    assert_eq!(w.bob_desktop.control(run).await.0, 404);
    let report = json!({"execution_id": "ann-exec"});
    let path = format!("{PREFIX}/commands/{run}/report");
    assert_eq!(w.bob_desktop.post(&path, &report).await.0, 404);
    let completion = json!({"execution_id": "ann-exec", "status": "completed", "result": {}});
    let (status, body) = w.bob_desktop.complete(run, &completion).await;
    assert_eq!(
        (status, &body["cause"]),
        (404, &json!("not_found")),
        "{body}"
    );
    // A sync of Bob's own project naming Ann's run as running learns nothing of its cancel.
    let sync = |project: &str| json!({"project_id": project, "sessions": [], "running": [run]});
    let (status, bob_sync) = w.bob_desktop.sync_raw(&sync(&w.bob_project)).await;
    assert_eq!(status, 200, "{bob_sync}");
    assert!(!bob_sync.to_string().contains(run.as_str()), "{bob_sync}");
    let (_, ann_sync) = w.ann_desktop.sync_raw(&sync(&w.ann_project)).await;
    assert_eq!(ann_sync["cancel_requested"], json!([run]), "{ann_sync}");
    // Nothing Bob tried changed Ann's run.
    assert_eq!(w.ann_desktop.control(run).await.0, 200);
    w.service.stop().await;
}

/// `method path` of the owner API with `token`: (status, body).
async fn owner_api(
    w: &World,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = http_client()
        .request(method, format!("{}/owner/v1{path}", w.service.base))
        .bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    decode(request.send().await.expect("answered")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_token_reaches_only_its_owners_projects_runs_and_connections() {
    use reqwest::Method;
    let w = world().await;
    let (ann, bob) = (w.ann_owner.as_str(), w.bob_owner.as_str());
    let runs = format!("/projects/{}/runs", w.ann_project);
    let (status, listed) = owner_api(&w, ann, Method::GET, &runs, None).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["runs"][0]["command_id"], json!(w.ann_run));
    let (_, connections) = owner_api(&w, ann, Method::GET, "/connections", None).await;
    let connection = connections["connections"][0]["id"]
        .as_str()
        .expect("Ann's connection")
        .to_owned();

    let run = format!("/runs/{}", w.ann_run);
    for (method, path) in [
        (Method::GET, runs.clone()),
        (Method::GET, run.clone()),
        (Method::POST, format!("{run}/cancel")),
        (Method::POST, format!("/connections/{connection}/revoke")),
    ] {
        let (status, body) = owner_api(&w, bob, method.clone(), &path, None).await;
        assert_eq!(status, 404, "{method} {path}: {body}");
        assert_eq!(body["cause"], "not_found", "{body}");
    }
    let (_, bobs) = owner_api(&w, bob, Method::GET, "/connections", None).await;
    assert_eq!(bobs["connections"], json!([]), "{bobs}");
    let link = json!({"project_id": w.ann_project, "host": "claude"});
    let (status, body) = owner_api(&w, bob, Method::POST, "/chat-links", Some(link)).await;
    assert_eq!(status, 400, "{body}");
    // Ann's connection still works.
    let (_, connections) = owner_api(&w, ann, Method::GET, "/connections", None).await;
    assert_eq!(connections["connections"][0]["revoked_at"], Value::Null);
    w.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_and_the_consent_page_show_only_the_owners_projects() {
    let w = world().await;
    let bob = ConsoleOwner::sign_in(&w.service, "bob").await;
    let page = bob.get(&w.service, "/console").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Bob&#39;s only") || page.body.contains("Bob's only"));
    assert!(!page.body.contains("Ann"), "{}", page.body);
    let runs = format!("/console/projects/{}/runs", w.ann_project);
    assert_eq!(bob.get(&w.service, &runs).await.status, 404);
    let ann = ConsoleOwner::sign_in(&w.service, "ann").await;
    assert_eq!(ann.get(&w.service, &runs).await.status, 200);

    let app = oauth::register(&w.service.base, "Bob's app").await;
    let pkce = oauth::pkce();
    let browser = Browser::new();
    let consent = oauth::consent_page(&browser, &app, &pkce, "st", "bob", PASSWORD).await;
    let offered: Vec<String> = consent.options().into_iter().map(|(id, _)| id).collect();
    assert_eq!(offered, std::slice::from_ref(&w.bob_project));
    let scopes = ["osfoundry:read"];
    let base = &w.service.base;
    let refused = oauth::decide(&browser, base, &consent, &w.ann_project, &scopes, "allow").await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(
        refused.body.contains("Not your project"),
        "{}",
        refused.body
    );
    w.service.stop().await;
}
