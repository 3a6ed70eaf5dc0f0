//! The owner's console over HTTP, as a browser without script uses it: every page and action
//! answers only the signed-in owner (another owner's ids are missing: the same 404), every
//! state change needs the session's CSRF token, an assignment's idempotency key makes one task,
//! Cancel and Revoke do what the agent's and the operator's tools do; and the owner API lists,
//! shows and cancels runs and lists desktops.

use std::time::Duration;

use crate::chat_support::{ChatService, claim, claim_id, submit_args};
use crate::common::oauth::{self, Browser, Page};
use crate::common::{Era, TestService, call, mcp_client, ok, queue};
use relay_service::admin;
use serde_json::{Value, json};

pub(crate) const PASSWORD: &str = "console password 1";

/// A signed-in browser of one owner.
pub(crate) struct Owner {
    pub browser: Browser,
    pub csrf: String,
}

impl Owner {
    /// Signs `name` in (their password set first, unless it is: setting one signs every
    /// browser out) through the console's sign-in page.
    pub async fn sign_in(service: &TestService, name: &str) -> Owner {
        let owner = admin::owner_named(&service.app.admin(), name)
            .await
            .expect("owner");
        let stored = service.app.store.owner_password(&owner.id).await;
        if stored.expect("password read").is_none() {
            admin::set_owner_password(&service.app.admin(), name, PASSWORD.into())
                .await
                .expect("set password");
        }
        Self::sign_in_with(service, name, PASSWORD).await
    }

    /// Signs `name` in with `password` through the console's sign-in page.
    pub async fn sign_in_with(service: &TestService, name: &str, password: &str) -> Owner {
        let browser = Browser::new();
        let page = browser.get(&format!("{}/console", service.base)).await;
        assert_eq!(
            page.input("return_to").as_deref(),
            Some("/console"),
            "{}",
            page.body
        );
        let answer = oauth::sign_in(&browser, &service.base, &page, name, password).await;
        assert_eq!(answer.status, 303, "{}", answer.body);
        let console = browser.get(&format!("{}/console", service.base)).await;
        assert_eq!(console.status, 200, "{}", console.body);
        let csrf = console
            .input("csrf")
            .expect("console forms carry the session's token");
        Owner { browser, csrf }
    }

    pub async fn get(&self, service: &TestService, path: &str) -> Page {
        self.browser.get(&format!("{}{path}", service.base)).await
    }

    /// Posts a console form with this session's CSRF token.
    pub async fn post(&self, service: &TestService, path: &str, pairs: &[(&str, &str)]) -> Page {
        let mut all = vec![("csrf", self.csrf.as_str())];
        all.extend_from_slice(pairs);
        self.browser
            .post_form(&format!("{}{path}", service.base), &all)
            .await
    }
}

/// The id at the end of a 303's `Location`.
fn created_id(page: &Page) -> String {
    assert_eq!(page.status, 303, "{}", page.body);
    let location = page.location.clone().expect("a location");
    location.rsplit('/').next().unwrap_or_default().to_owned()
}

async fn link_chat(
    service: &TestService,
    owner: &Owner,
    project: &str,
    subscribed: bool,
) -> String {
    let mut pairs = vec![("project_id", project), ("host", "chatgpt")];
    if subscribed {
        pairs.push(("event_subscription", "on"));
    }
    created_id(&owner.post(service, "/console/chats", &pairs).await)
}

async fn tasks_of(service: &TestService, link: &str) -> usize {
    service
        .app
        .store
        .link_tasks(link, 1000)
        .await
        .expect("tasks")
        .len()
}

#[tokio::test]
async fn signed_out_browsers_sign_in_and_return_to_the_console_page_they_asked_for() {
    let service = TestService::start().await;
    let project = service.project("p", "ann").await;
    admin::set_owner_password(&service.app.admin(), "ann", PASSWORD.into())
        .await
        .expect("set password");
    let browser = Browser::new();
    let path = format!("/console/projects/{project}/runs?status=queued");
    let page = browser.get(&format!("{}{path}", service.base)).await;
    assert_eq!(page.input("return_to").as_deref(), Some(path.as_str()));
    let answer = oauth::sign_in(&browser, &service.base, &page, "ann", PASSWORD).await;
    assert_eq!(answer.location, Some(format!("{}{path}", service.base)));
    let runs = browser.get(&answer.location.expect("location")).await;
    assert_eq!(runs.status, 200);
    assert!(runs.body.contains("No runs."), "{}", runs.body);
    let csp = runs.headers["content-security-policy"]
        .to_str()
        .expect("csp");
    assert!(
        csp.contains("script-src 'self'") && csp.contains("default-src 'none'"),
        "{csp}"
    );
    assert_eq!(runs.headers["x-frame-options"], "DENY");
    assert!(!runs.body.contains("<script>"), "no inline script");
    let script = browser
        .get(&format!("{}/console/app.js", service.base))
        .await;
    assert_eq!(script.status, 200);
    assert!(script.body.contains("crypto.randomUUID()"));
}

/// Owner B's session asks for owner A's run, link, task, project and artifact: each answers
/// exactly as an id that does not exist, and B's actions on them change nothing.
#[tokio::test]
async fn another_owners_objects_answer_as_missing() {
    let service = TestService::start().await;
    let project = service.project("p", "ann").await;
    service.project("q", "bob").await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let client = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&project).await,
        Era::Current,
    )
    .await;
    let run = queue(&client, "console-run-1").await;
    let ann = Owner::sign_in(&service, "ann").await;
    let bob = Owner::sign_in(&service, "bob").await;
    let link = link_chat(&service, &ann, &project, false).await;
    let task = created_task(&service, &ann, &link, "write the report", "key-00000001").await;

    let missing = uuid::Uuid::new_v4().to_string();
    let missing_page = bob.get(&service, &format!("/console/runs/{missing}")).await;
    assert_eq!(missing_page.status, 404);
    for path in [
        format!("/console/runs/{run}"),
        format!("/console/chats/{link}"),
        format!("/console/chats/{link}/tasks"),
        format!("/console/tasks/{task}"),
        format!("/console/tasks/{task}/artifacts/a1"),
        format!("/console/projects/{project}/runs"),
        format!("/console/projects/{project}/runs/list"),
    ] {
        let page = bob.get(&service, &path).await;
        assert_eq!(page.status, 404, "{path}");
        assert_eq!(
            page.body.replace("bob", ""),
            missing_page.body.replace("bob", ""),
            "{path}: the same answer as a missing id"
        );
        assert_eq!(
            ann.get(&service, &path).await.status,
            if path.contains("artifacts") { 404 } else { 200 },
            "{path} is ann's"
        );
    }
    for path in [
        format!("/console/runs/{run}/cancel"),
        format!("/console/tasks/{task}/cancel"),
        format!("/console/chats/{link}/subscription"),
    ] {
        assert_eq!(
            bob.post(&service, &path, &[("active", "true")])
                .await
                .status,
            404,
            "{path}"
        );
    }
    let assigned = bob
        .post(
            &service,
            &format!("/console/chats/{link}/tasks"),
            &[("goal", "x"), ("idempotency_key", "key-00000002")],
        )
        .await;
    assert_eq!(assigned.status, 404);
    let stored = service.stored_task(&task).await;
    assert_eq!(stored.status.as_str(), "queued", "bob cancelled nothing");
    assert_eq!(tasks_of(&service, &link).await, 1, "bob assigned nothing");
    let run_now = ok(&call(&client, "get_graph_run", json!({"command_id": run})).await);
    assert_eq!(run_now["status"], "queued");
    // Bob's projects page does not list ann's project.
    assert!(!bob.get(&service, "/console").await.body.contains(&project));
}

async fn created_task(
    service: &TestService,
    owner: &Owner,
    link: &str,
    goal: &str,
    key: &str,
) -> String {
    let answer = owner
        .post(
            service,
            &format!("/console/chats/{link}/tasks"),
            &[("goal", goal), ("idempotency_key", key)],
        )
        .await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let tasks = service.app.store.link_tasks(link, 10).await.expect("tasks");
    tasks
        .iter()
        .find(|t| t.idempotency_key == key)
        .expect("the task")
        .id
        .to_string()
}

#[tokio::test]
async fn state_changes_without_the_sessions_csrf_token_are_refused() {
    let service = TestService::start().await;
    let project = service.project("p", "ann").await;
    let ann = Owner::sign_in(&service, "ann").await;
    let link = link_chat(&service, &ann, &project, false).await;
    let url = format!("{}/console/chats/{link}/tasks", service.base);
    let pairs = [("goal", "do it"), ("idempotency_key", "key-00000003")];
    let without = ann.browser.post_form(&url, &pairs).await;
    assert_eq!(without.status, 403, "{}", without.body);
    let mut wrong = vec![("csrf", "0123456789abcdef0123456789abcdef")];
    wrong.extend_from_slice(&pairs);
    assert_eq!(ann.browser.post_form(&url, &wrong).await.status, 403);
    assert_eq!(tasks_of(&service, &link).await, 0, "nothing was assigned");
    for path in [
        "/console/chats",
        "/console/sign-out-everywhere",
        "/console/sign-out",
    ] {
        let answer = ann
            .browser
            .post_form(
                &format!("{}{path}", service.base),
                &[("project_id", &project), ("host", "claude")],
            )
            .await;
        assert_eq!(answer.status, 403, "{path}");
    }
    // A signed-out browser's form is refused the same way.
    let stranger = Browser::new();
    assert_eq!(stranger.post_form(&url, &pairs).await.status, 403);
    // Still signed in: the refusals ended nothing.
    assert_eq!(ann.get(&service, "/console").await.status, 200);
    assert_eq!(
        service
            .app
            .store
            .chat_links(&project)
            .await
            .expect("links")
            .len(),
        1
    );
}

#[tokio::test]
async fn one_idempotency_key_assigns_one_task_and_a_new_goal_a_second() {
    let service = TestService::start().await;
    let project = service.project("p", "ann").await;
    let ann = Owner::sign_in(&service, "ann").await;
    let link = link_chat(&service, &ann, &project, true).await;
    let page = ann.get(&service, &format!("/console/chats/{link}")).await;
    assert!(
        page.body
            .contains("An event subscription is active for this chat")
    );
    let key = page
        .input("idempotency_key")
        .expect("the form carries a server-made key");
    assert!(key.len() >= 8);
    let path = format!("/console/chats/{link}/tasks");
    for _ in 0..3 {
        let answer = ann
            .post(
                &service,
                &path,
                &[("goal", "summarise"), ("idempotency_key", &key)],
            )
            .await;
        assert_eq!(answer.status, 303, "{}", answer.body);
    }
    assert_eq!(
        tasks_of(&service, &link).await,
        1,
        "a double click and a resubmit make one task"
    );
    let next = ann.get(&service, &format!("/console/chats/{link}")).await;
    let next_key = next.input("idempotency_key").expect("key");
    assert_ne!(next_key, key, "each form gets its own key");
    ann.post(
        &service,
        &path,
        &[("goal", "summarise again"), ("idempotency_key", &next_key)],
    )
    .await;
    assert_eq!(tasks_of(&service, &link).await, 2);
    // The same key with another goal is a conflict, not a second task.
    let conflict = ann
        .post(
            &service,
            &path,
            &[("goal", "other"), ("idempotency_key", &key)],
        )
        .await;
    assert_eq!(conflict.status, 409);
    assert_eq!(tasks_of(&service, &link).await, 2);
    // The subscription toggles off, and the page says the host is not told.
    let off = ann
        .post(
            &service,
            &format!("/console/chats/{link}/subscription"),
            &[("active", "false")],
        )
        .await;
    assert_eq!(off.status, 303);
    let page = ann.get(&service, &format!("/console/chats/{link}")).await;
    assert!(
        page.body
            .contains("Open the host conversation to start each task.")
    );
    assert!(
        !page
            .body
            .contains("An event subscription is active for this chat")
    );
}

#[tokio::test]
async fn tasks_cancel_and_finished_ones_show_results_and_artifact_downloads() {
    let chat = crate::chat_support::chat_setup(relay_service::ServiceConfig::default()).await;
    let service = &chat.service;
    let ann = Owner::sign_in(service, "alice").await;
    let open = created_task(service, &ann, &chat.link, "to cancel", "key-00000010").await;
    let done = created_task(service, &ann, &chat.link, "to finish", "key-00000011").await;
    let cancelled = ann
        .post(service, &format!("/console/tasks/{open}/cancel"), &[])
        .await;
    assert_eq!(cancelled.status, 303, "{}", cancelled.body);
    assert_eq!(
        service.stored_task(&open).await.status.as_str(),
        "cancelled"
    );

    let claimed = claim(&chat.client, &chat.link, &done).await;
    let claim = claim_id(&claimed);
    ok(&call(&chat.client, "upload_linked_chat_artifact", json!({"chat_link_id": chat.link, "task_id": done,
        "claim_id": claim, "artifact_id": "a1", "name": "report.md", "mime": "text/markdown", "content": "# Report"})).await);
    ok(&call(
        &chat.client,
        "submit_linked_chat_result",
        submit_args(&chat.link, &done, &claim, "completed", "all done"),
    )
    .await);
    let page = ann
        .get(service, &format!("/console/chats/{}", chat.link))
        .await;
    assert!(page.body.contains("all done"), "{}", page.body);
    assert!(page.body.contains("Cancelled") && page.body.contains("Completed"));
    let download = ann
        .get(service, &format!("/console/tasks/{done}/artifacts/a1"))
        .await;
    assert_eq!(download.status, 200);
    assert_eq!(download.body, "# Report");
    assert_eq!(download.headers["content-type"], "text/markdown");
    assert_eq!(
        download.headers["content-disposition"],
        "attachment; filename=\"report.md\""
    );
    scripts_download_as_bytes(&chat, &ann).await;
    let fragment = ann
        .get(service, &format!("/console/chats/{}/tasks", chat.link))
        .await;
    assert!(fragment.body.contains("report.md") && !fragment.body.contains("<html"));
    assert_eq!(fragment.headers["x-console-fragment"], "1");
}

/// The second red team (issue 44): an agent's artifact typed as a script, a style sheet or a
/// page downloads as bytes, so the console's origin serves nothing its `script-src 'self'`
/// would run.
async fn scripts_download_as_bytes(chat: &crate::chat_support::Chat, ann: &Owner) {
    let service = &chat.service;
    let task = created_task(service, ann, &chat.link, "write a script", "key-00000077").await;
    let claim = claim_id(&claim(&chat.client, &chat.link, &task).await);
    let types = [
        "text/javascript",
        "application/javascript; charset=utf-8",
        "Text/HTML",
        "text/css",
        "image/svg+xml",
        "application/xhtml+xml",
        "text/xml",
    ];
    for (n, mime) in types.iter().enumerate() {
        let id = format!("s{n}");
        ok(&call(
            &chat.client,
            "upload_linked_chat_artifact",
            json!({"chat_link_id": chat.link,
            "task_id": task, "claim_id": claim, "artifact_id": id, "name": "x.js", "mime": mime,
            "content": "alert(document.cookie)"}),
        )
        .await);
        let download = ann
            .get(service, &format!("/console/tasks/{task}/artifacts/{id}"))
            .await;
        assert_eq!(download.status, 200);
        assert_eq!(
            download.headers["content-type"], "application/octet-stream",
            "{mime}"
        );
        assert_eq!(download.headers["x-content-type-options"], "nosniff");
    }
    ok(&call(
        &chat.client,
        "upload_linked_chat_artifact",
        json!({"chat_link_id": chat.link,
        "task_id": task, "claim_id": claim, "artifact_id": "plain", "name": "notes.txt",
        "mime": "text/plain; charset=utf-8", "content": "notes"}),
    )
    .await);
    let download = ann
        .get(service, &format!("/console/tasks/{task}/artifacts/plain"))
        .await;
    assert_eq!(
        download.headers["content-type"],
        "text/plain; charset=utf-8"
    );
}

#[tokio::test]
async fn the_owner_cancels_queued_and_running_runs_and_is_named_as_who_cancelled() {
    let service = TestService::start().await;
    let project = service.project("p", "ann").await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let client = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&project).await,
        Era::Current,
    )
    .await;
    let queued = queue(&client, "console-run-q").await;
    let running = queue(&client, "console-run-r").await;
    assert_eq!(desktop.started(&running, "exec-1").await.0, 200);
    let ann = Owner::sign_in(&service, "ann").await;
    let list = ann
        .get(&service, &format!("/console/projects/{project}/runs"))
        .await;
    assert_eq!(
        list.body.matches(">Cancel</button>").count(),
        2,
        "{}",
        list.body
    );

    assert_eq!(
        ann.post(&service, &format!("/console/runs/{queued}/cancel"), &[])
            .await
            .status,
        303
    );
    let run = ok(&call(&client, "get_graph_run", json!({"command_id": queued})).await);
    assert_eq!(run["status"], "cancelled", "a queued run never starts");
    assert_eq!(run["end_cause"], "owner_cancelled_console", "{run}");
    assert_eq!(
        run["error"], "Cancelled by the owner in the console before it started",
        "not the agent's cancel"
    );
    assert_eq!(
        ann.post(&service, &format!("/console/runs/{running}/cancel"), &[])
            .await
            .status,
        303
    );
    assert_eq!(
        desktop.control(&running).await.1,
        json!({"cancel_requested": true, "cancel_cause": "owner_cancelled_console"}),
        "the desktop is told to stop, and who asked"
    );
    stops_with_the_owners_cause_and_cost(&service, &ann, &desktop, &client, &running).await;
}

/// The desktop stops the running run the owner cancelled in the console: `get_graph_run` and
/// the console say the owner cancelled it, with the tokens and cost the desktop measured.
async fn stops_with_the_owners_cause_and_cost(
    service: &TestService,
    ann: &Owner,
    desktop: &crate::common::Desktop,
    client: &crate::common::McpClient,
    running: &str,
) {
    // An older desktop calls every cancel the agent's: the service's record of who asked wins.
    let completion = json!({"execution_id": "exec-1", "status": "cancelled",
        "error": "Cancelled by the agent", "cause": "agent_cancelled",
        "total_tokens": 120, "reported_cost": 0.0015});
    assert_eq!(desktop.complete(running, &completion).await.0, 200);
    let run = ok(&call(client, "get_graph_run", json!({"command_id": running})).await);
    assert_eq!(run["end_cause"], "owner_cancelled_console", "{run}");
    assert_eq!(
        run["error"], "Cancelled by the owner in the console",
        "{run}"
    );
    assert_eq!(
        run["reported_cost"], 0.0015,
        "the cost the desktop measured is kept"
    );
    assert_eq!(run["total_tokens"], 120);
    let detail = ann.get(service, &format!("/console/runs/{running}")).await;
    assert!(
        detail.body.contains("cancelled") && !detail.body.contains(">Cancel</button>"),
        "{}",
        detail.body
    );
    assert!(
        detail
            .body
            .contains("Cancelled by the owner in the console")
            && detail.body.contains("$0.001500")
            && !detail.body.contains("by the agent"),
        "the console says the owner cancelled it, with the desktop's cost: {}",
        detail.body
    );
}

#[tokio::test]
async fn revoke_ends_the_connections_next_mcp_call() {
    let service = TestService::start().await;
    let project = service.project("Notes", "ann").await;
    let ann = Owner::sign_in(&service, "ann").await;
    let app = oauth::register(&service.base, "Claude").await;
    let tokens = oauth::connect(&ann.browser, &app, "ann", PASSWORD, &project).await;
    assert_eq!(oauth::mcp_status(&service.base, &tokens.access).await, 200);
    let page = ann.get(&service, "/console").await;
    assert!(
        page.body.contains("Claude") && page.body.contains(">Revoke</button>"),
        "{}",
        page.body
    );
    let connections =
        relay_service::oauth::connections::list(service.app.store.as_ref(), None, Some(&project))
            .await
            .expect("list");
    let id = &connections[0].id;
    assert_eq!(
        ann.post(&service, &format!("/console/connections/{id}/revoke"), &[])
            .await
            .status,
        303
    );
    assert_eq!(oauth::mcp_status(&service.base, &tokens.access).await, 401);
    let page = ann.get(&service, "/console").await;
    assert!(page.body.contains("revoked") && !page.body.contains(">Revoke</button>"));
    // Another owner cannot revoke it (nor learn it exists).
    service.project("q", "bob").await;
    let bob = Owner::sign_in(&service, "bob").await;
    assert_eq!(
        bob.post(&service, &format!("/console/connections/{id}/revoke"), &[])
            .await
            .status,
        404
    );
}

/// An operator-minted agent token is listed beside the connections with its last use, and
/// its owner's Revoke ends it (its next call gets 401); another owner's forged Revoke and one
/// without the session's CSRF token change nothing.
#[tokio::test]
async fn a_minted_agent_is_listed_and_only_its_owner_revokes_it() {
    let service = TestService::start().await;
    let project = service.project("p", "ann").await;
    service.desktop(&project).await.sync(&project, &[1]).await;
    let (token, id) = service
        .agent(&project, &["osfoundry:read", "osfoundry:run"])
        .await;
    let client = mcp_client(&service.mcp_url(), &token, Era::Current).await;
    queue(&client, "minted-agent-run").await;
    client.cancel().await.ok();
    let ann = Owner::sign_in(&service, "ann").await;
    let page = ann.get(&service, "/console").await;
    let row = page
        .body
        .split(&format!("data-agent-token=\"{id}\""))
        .nth(1)
        .and_then(|rest| rest.split("</tr>").next())
        .unwrap_or_else(|| panic!("the agent is listed: {}", page.body))
        .to_owned();
    let last_used = row
        .split("data-label=\"Last used\">")
        .nth(1)
        .and_then(|rest| rest.split("</td>").next())
        .unwrap_or_default();
    assert!(
        row.contains("claude") && last_used.ends_with(" UTC") && row.contains(">Revoke</button>"),
        "named, with its last use and Revoke: {row}"
    );

    let url = format!("{}/console/agents/{id}/revoke", service.base);
    assert_eq!(
        ann.browser.post_form(&url, &[]).await.status,
        403,
        "no CSRF"
    );
    let wrong = [("csrf", "0123456789abcdef0123456789abcdef")];
    assert_eq!(ann.browser.post_form(&url, &wrong).await.status, 403);
    service.project("q", "bob").await;
    let bob = Owner::sign_in(&service, "bob").await;
    let forged = bob
        .post(&service, &format!("/console/agents/{id}/revoke"), &[])
        .await;
    assert_eq!(
        forged.status, 404,
        "another owner's token is missing to bob"
    );
    assert_eq!(
        oauth::mcp_status(&service.base, &token).await,
        200,
        "still works"
    );

    let revoked = ann
        .post(&service, &format!("/console/agents/{id}/revoke"), &[])
        .await;
    assert_eq!(revoked.status, 303, "{}", revoked.body);
    assert_eq!(oauth::mcp_status(&service.base, &token).await, 401);
    let page = ann.get(&service, "/console").await;
    assert!(
        page.body.contains("revoked ") && !page.body.contains(">Revoke</button>"),
        "{}",
        page.body
    );
}

/// The second red team (issue 44): a password is changed because the old one may be known, so
/// the change signs out every browser, including one an intruder signed in with it.
#[tokio::test]
async fn a_password_change_signs_every_browser_out() {
    let service = TestService::start().await;
    service.project("p", "ann").await;
    let owner = Owner::sign_in(&service, "ann").await;
    let intruder = Owner::sign_in(&service, "ann").await;
    let changed = admin::set_owner_password(&service.app.admin(), "ann", "a new password 2".into())
        .await
        .expect("set password");
    assert_eq!(changed.sessions_ended, 2);
    for browser in [&owner, &intruder] {
        let page = browser.get(&service, "/console/account").await;
        assert!(
            page.input("return_to").is_some(),
            "signed out: {}",
            page.body
        );
        assert_eq!(
            browser
                .post(&service, "/console/sign-out-everywhere", &[])
                .await
                .status,
            403,
            "a form of the ended session does nothing"
        );
    }
    let fresh = Browser::new();
    let page = fresh.get(&format!("{}/console", service.base)).await;
    let old = oauth::sign_in(&fresh, &service.base, &page, "ann", PASSWORD).await;
    assert_eq!(old.status, 401, "the old password is gone");
    let again = Owner::sign_in_with(&service, "ann", "a new password 2").await;
    let page = again.get(&service, "/console/account").await;
    assert_eq!(
        page.body.matches("signed in on ").count(),
        1,
        "{}",
        page.body
    );
}

#[tokio::test]
async fn sessions_list_and_sign_out_here_or_everywhere() {
    let service = TestService::start().await;
    service.project("p", "ann").await;
    let first = Owner::sign_in(&service, "ann").await;
    let second = Owner::sign_in(&service, "ann").await;
    let third = Owner::sign_in(&service, "ann").await;
    let page = first.get(&service, "/console/account").await;
    assert_eq!(
        page.body.matches("signed in on ").count(),
        3,
        "{}",
        page.body
    );
    let out = first.post(&service, "/console/sign-out", &[]).await;
    assert_eq!(out.status, 303);
    assert!(
        first
            .get(&service, "/console")
            .await
            .input("return_to")
            .is_some(),
        "signed out here"
    );
    assert_eq!(
        second.get(&service, "/console").await.status,
        200,
        "the others stay signed in"
    );
    assert_eq!(
        second
            .post(&service, "/console/sign-out-everywhere", &[])
            .await
            .status,
        303
    );
    for owner in [&second, &third] {
        assert!(
            owner
                .get(&service, "/console")
                .await
                .input("return_to")
                .is_some(),
            "signed out everywhere"
        );
    }
}

async fn owner_api(service: &TestService, token: &str, method: &str, path: &str) -> (u16, Value) {
    let http = crate::common::http_client();
    let url = format!("{}/owner/v1{path}", service.base);
    let request = if method == "POST" {
        http.post(url)
    } else {
        http.get(url)
    };
    crate::common::decode(request.bearer_auth(token).send().await.expect("answered")).await
}

/// A service with ann's project (five runs queued a second apart by one agent, its desktop
/// synced), bob's project, and an owner token for each.
struct Api {
    service: TestService,
    project: String,
    agent_id: String,
    runs: Vec<String>,
    ann: String,
    bob: String,
}

async fn api_setup() -> Api {
    let service = TestService::start().await;
    let project = service.project("p", "ann").await;
    let other = service.project("q", "bob").await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let scopes = ["osfoundry:read", "osfoundry:run"];
    let (agent_token, agent_id) = service.agent(&project, &scopes).await;
    let client = mcp_client(&service.mcp_url(), &agent_token, Era::Current).await;
    let mut runs = Vec::new();
    for n in 0..5 {
        runs.push(queue(&client, &format!("api-run-key-{n}")).await);
        service.clock.advance(Duration::from_secs(1));
    }
    let ann = service.mint_owner_token(&project).await;
    let bob = service.mint_owner_token(&other).await;
    Api {
        service,
        project,
        agent_id,
        runs,
        ann,
        bob,
    }
}

#[tokio::test]
async fn the_owner_api_pages_runs_newest_first() {
    let Api {
        service,
        project,
        runs,
        ann,
        ..
    } = api_setup().await;
    let list = |query: String| {
        let path = format!("/projects/{project}/runs?{query}");
        let (service, ann) = (&service, &ann);
        async move { owner_api(service, ann, "GET", &path).await }
    };
    let (status, first) = list("limit=2".into()).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        first["runs"][0]["command_id"],
        runs[4].as_str(),
        "newest first"
    );
    assert_eq!(first["runs"][0]["connection_name"], "claude");
    let next = first["next"].as_str().expect("a next page");
    let (_, second) = list(format!("limit=2&before={next}")).await;
    assert_eq!(second["runs"][0]["command_id"], runs[2].as_str());
    let next = second["next"].as_str().expect("a next page");
    let (_, last) = list(format!("limit=2&before={next}")).await;
    assert_eq!(last["runs"].as_array().expect("runs").len(), 1);
    assert!(last["next"].is_null());
    assert_eq!(list("limit=200".into()).await.0, 200, "the largest page");
    assert_eq!(list("limit=201".into()).await.0, 400, "one past it");
    assert_eq!(list("limit=0".into()).await.0, 400);
    assert_eq!(list("status=sleeping".into()).await.0, 400);
    assert_eq!(list("before=nonsense".into()).await.0, 400);
}

#[tokio::test]
async fn the_owner_api_filters_shows_and_cancels_runs_of_its_owner_only() {
    let api = api_setup().await;
    let Api {
        service,
        project,
        runs,
        ann,
        bob,
        ..
    } = &api;
    let cancel = format!("/runs/{}/cancel", runs[0]);
    let (status, cancelled) = owner_api(service, ann, "POST", &cancel).await;
    assert_eq!(
        (status, cancelled["status"].as_str()),
        (200, Some("cancelled")),
        "{cancelled}"
    );
    let filtered = format!(
        "/projects/{project}/runs?status=cancelled&connection={}",
        api.agent_id
    );
    let (_, only) = owner_api(service, ann, "GET", &filtered).await;
    assert_eq!(only["runs"].as_array().expect("runs").len(), 1);
    assert_eq!(
        only["runs"][0]["end_cause"], "owner_cancelled_console",
        "the owner API says who cancelled it: {only}"
    );
    let stranger = format!(
        "/projects/{project}/runs?connection={}",
        uuid::Uuid::new_v4()
    );
    let (_, none) = owner_api(service, ann, "GET", &stranger).await;
    assert!(none["runs"].as_array().expect("runs").is_empty());
    let (status, detail) = owner_api(service, ann, "GET", &format!("/runs/{}", runs[1])).await;
    assert_eq!((status, detail["status"].as_str()), (200, Some("queued")));
    assert_eq!(detail["slug"], "graph-1");
    // Bob's token sees none of it: the same 404 as for ids that do not exist.
    for path in [
        format!("/runs/{}", runs[1]),
        format!("/projects/{project}/runs"),
    ] {
        assert_eq!(owner_api(service, bob, "GET", &path).await.0, 404, "{path}");
    }
    let bobs_cancel = format!("/runs/{}/cancel", runs[1]);
    assert_eq!(owner_api(service, bob, "POST", &bobs_cancel).await.0, 404);
    let missing = format!("/runs/{}", uuid::Uuid::new_v4());
    assert_eq!(owner_api(service, ann, "GET", &missing).await.0, 404);
}

#[tokio::test]
async fn the_owner_api_lists_desktops_online_until_they_fall_silent() {
    let Api {
        service, ann, bob, ..
    } = api_setup().await;
    let (status, desktops) = owner_api(&service, &ann, "GET", "/desktops").await;
    assert_eq!(status, 200);
    assert_eq!(desktops["desktops"].as_array().expect("desktops").len(), 1);
    assert_eq!(
        desktops["desktops"][0]["online"], true,
        "it synced just now: {desktops}"
    );
    service
        .clock
        .advance(relay_service::desktops::ONLINE_WITHIN + Duration::from_secs(1));
    let (_, later) = owner_api(&service, &ann, "GET", "/desktops").await;
    assert_eq!(
        later["desktops"][0]["online"], false,
        "silent for longer than the window"
    );
    let (_, bobs) = owner_api(&service, &bob, "GET", "/desktops").await;
    assert!(bobs["desktops"].as_array().expect("list").is_empty());
}

/// The weight and server time of the runs page with 200 runs (printed; bounded loosely so a
/// regression that multiplies them fails).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runs_page_with_200_runs_stays_light() {
    let service = TestService::start_with_config(relay_service::ServiceConfig {
        queue_quota: relay_service::store::QueueQuota {
            per_agent: 1000,
            per_project: 1000,
        },
        rate_limit: None,
        ..relay_service::ServiceConfig::default()
    })
    .await;
    let project = service.project("p", "ann").await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let client = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&project).await,
        Era::Current,
    )
    .await;
    for n in 0..200 {
        let id = queue(&client, &format!("weight-run-{n:04}")).await;
        if n % 2 == 0 {
            desktop.started(&id, &format!("exec-{n}")).await;
            let completion = json!({"execution_id": format!("exec-{n}"), "status": "completed",
                "result": {"summary": "x".repeat(300), "n": n}, "total_tokens": 1234, "reported_cost": 0.0123});
            desktop.complete(&id, &completion).await;
        }
    }
    let ann = Owner::sign_in(&service, "ann").await;
    let path = format!("/console/projects/{project}/runs?limit=200");
    ann.get(&service, &path).await;
    let mut times = Vec::new();
    let mut bytes = 0;
    for _ in 0..5 {
        let started = relay_protocol::clock::Stopwatch::start();
        let page = ann.get(&service, &path).await;
        times.push(started.elapsed());
        assert_eq!(page.status, 200);
        assert_eq!(page.body.matches("data-run=").count(), 200);
        bytes = page.body.len();
    }
    times.sort();
    println!(
        "runs page with 200 runs: {bytes} bytes, median {:?} (min {:?}, max {:?}) over HTTP on loopback",
        times[2], times[0], times[4]
    );
    assert!(bytes < 400_000, "{bytes} bytes");
}
