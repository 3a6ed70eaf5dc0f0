//! The owner's console in real headless Chromium, controls found by their labels and button
//! texts: linking chats with and without an event subscription, one task for a double click,
//! a second for a changed goal, a half-typed goal kept across the list's refresh, Cancel, a run
//! that completes on the runs page without a reload, Cancel on a running run, Revoke → 401, and
//! another owner's URLs → 404. Screenshots of the runs and tasks pages at 1280 px and 375 px go
//! to `target/screenshots/`.
//!
//! chromedriver comes from `.ci/run` (Debian's chromium-driver). Without it these tests say so
//! and pass, unless `GRAPHRELAY_REQUIRE_CHROMIUM=1`.

use std::path::PathBuf;
use std::time::Duration;

use crate::chat_support::ChatService;
use crate::common::oauth::{self, Browser};
use crate::common::{Era, TestService, mcp_client, queue};
use relay_protocol::clock::Stopwatch;
use relay_service::console::ConsoleRefresh;
use relay_service::{ServiceConfig, admin};
use relay_testkit::webdriver::{self, Chromium};
use serde_json::json;

const PASSWORD: &str = "console browser password";
/// The lists refresh this often in these tests (15 s and 5 s in production).
const REFRESH: Duration = Duration::from_millis(700);
/// How long a page may take to show what a test waits for.
const PATIENCE: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(100);

/// One browser at a time: two Chromiums on a small CI machine make each other's waits flaky.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn chromium_or_skip() -> bool {
    if webdriver::chromedriver().is_some() {
        return true;
    }
    assert!(
        std::env::var("GRAPHRELAY_REQUIRE_CHROMIUM").as_deref() != Ok("1"),
        "chromedriver is missing and GRAPHRELAY_REQUIRE_CHROMIUM=1 says it must be there (.ci/run sets it up)"
    );
    eprintln!(
        "skipped: chromedriver (Debian's chromium-driver) is missing (.ci/run sets it up; GRAPHRELAY_REQUIRE_CHROMIUM=1 makes this a failure)"
    );
    false
}

fn screenshots() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    target.join("screenshots")
}

/// Screenshots of the current page at 1280 px and 375 px wide, as `{name}-1280.png` and
/// `{name}-375.png`; the window is left at 1280 px.
async fn shoot(browser: &Chromium, name: &str) {
    for width in [375, 1280] {
        browser
            .set_window_size(width, 900)
            .await
            .expect("window size");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let path = screenshots().join(format!("{name}-{width}.png"));
        browser.save_screenshot(&path).await.expect("screenshot");
        println!("saved {}", path.display());
    }
}

async fn service() -> TestService {
    TestService::start_with_config(ServiceConfig {
        console_refresh: ConsoleRefresh {
            runs: REFRESH,
            tasks: REFRESH,
        },
        ..ServiceConfig::default()
    })
    .await
}

async fn sign_in(browser: &Chromium, service: &TestService, owner: &str) {
    admin::set_owner_password(&service.app, owner, PASSWORD.into())
        .await
        .expect("set password");
    browser
        .goto(&format!("{}/console", service.base))
        .await
        .expect("open the console");
    browser
        .type_into("Owner name", owner)
        .await
        .expect("owner name");
    browser
        .type_into("Password", PASSWORD)
        .await
        .expect("password");
    browser.click_button("Sign in").await.expect("sign in");
    // The sign-in page is served at the console's own URL, so wait for what only a signed-in
    // page has rather than for the URL.
    wait_for_page(browser, "the signed-in console", |s| {
        s.contains(">Sign out</button>") && s.contains("<h1>Projects</h1>")
    })
    .await;
}

/// Waits until the page's source satisfies `done`; the source then.
async fn wait_for_page(browser: &Chromium, what: &str, done: impl Fn(&str) -> bool) -> String {
    let clock = Stopwatch::start();
    loop {
        let source = browser.source().await.expect("page source");
        if done(&source) {
            return source;
        }
        assert!(
            clock.elapsed() < PATIENCE,
            "the page never showed {what}:\n{source}"
        );
        tokio::time::sleep(POLL).await;
    }
}

async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let clock = Stopwatch::start();
    while !done().await {
        assert!(clock.elapsed() < PATIENCE, "never: {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// Whether the runs list shows run `id` in `status`.
fn shows(source: &str, id: &str, status: &str) -> bool {
    source.contains(&format!("/console/runs/{id}\">{status}<"))
}

async fn task_count(service: &TestService, link: &str) -> usize {
    service
        .app
        .store
        .link_tasks(link, 1000)
        .await
        .expect("tasks")
        .len()
}

/// Links a chat on `host` from the projects page; the link's id.
async fn link_chat(
    browser: &Chromium,
    service: &TestService,
    host: &str,
    subscribed: bool,
) -> String {
    browser
        .goto(&format!("{}/console", service.base))
        .await
        .expect("projects");
    browser.select("Host", host).await.expect("host");
    if subscribed {
        let checkbox = browser.field("Event subscription").await.expect("checkbox");
        browser.click(&checkbox).await.expect("tick");
        assert!(browser.is_selected(&checkbox).await.expect("ticked"));
    }
    browser.click_button("Link chat").await.expect("link chat");
    let url = browser
        .wait_for_url(|url| url.contains("/console/chats/"))
        .await
        .expect("the link's page");
    url.rsplit('/').next().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_links_chats_assigns_once_per_goal_keeps_typing_and_cancels() {
    if !chromium_or_skip() {
        return;
    }
    let _one = ONE_BROWSER.lock().await;
    let service = service().await;
    service.project("Demo", "ann").await;
    let browser = Chromium::start().await.expect("start Chromium");
    sign_in(&browser, &service, "ann").await;

    link_chat(&browser, &service, "chatgpt", true).await;
    wait_for_page(&browser, "the active subscription", |s| {
        s.contains("An event subscription is active for this chat")
    })
    .await;
    let link = link_chat(&browser, &service, "claude", false).await;
    let page = wait_for_page(&browser, "the hint", |s| {
        s.contains("Open the host conversation to start each task.")
    })
    .await;
    assert!(!page.contains("An event subscription is active for this chat"));

    browser
        .type_into("Goal", "Summarise the week")
        .await
        .expect("goal");
    let assign = browser.button("Assign task").await.expect("button");
    browser.double_click(&assign).await.expect("double click");
    wait_for_page(&browser, "the task", |s| {
        s.contains("Summarise the week") && s.contains("Waiting for Claude")
    })
    .await;
    // Let a second request of the double click land, if one was sent.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        task_count(&service, &link).await,
        1,
        "a double click makes one task"
    );
    service.clock.advance(Duration::from_secs(1));

    browser
        .type_into("Goal", "Plan next week")
        .await
        .expect("goal");
    browser.click_button("Assign task").await.expect("assign");
    wait_for("a second task", async || {
        task_count(&service, &link).await == 2
    })
    .await;
    wait_for_page(&browser, "the second task", |s| {
        s.contains("Plan next week")
    })
    .await;
    service.clock.advance(Duration::from_secs(1));

    // A half-typed goal survives the list's refresh, which shows a task assigned elsewhere.
    browser
        .type_into("Goal", "Half-typed go")
        .await
        .expect("goal");
    service
        .assign_goal(&link, "Assigned from the CLI", "cli-key-0001")
        .await;
    wait_for_page(&browser, "the refreshed list", |s| {
        s.contains("Assigned from the CLI")
    })
    .await;
    tokio::time::sleep(REFRESH * 2).await;
    let goal = browser.field("Goal").await.expect("goal field");
    assert_eq!(
        browser.value(&goal).await.expect("value"),
        "Half-typed go",
        "the typed goal is kept"
    );
    assert_eq!(task_count(&service, &link).await, 3);
    shoot(&browser, "console-tasks").await;

    // The first "Cancel" is the newest open task's.
    browser.click_button("Cancel").await.expect("cancel");
    wait_for("a cancelled task", async || {
        let tasks = service
            .app
            .store
            .link_tasks(&link, 10)
            .await
            .expect("tasks");
        tasks.iter().any(|t| t.status.as_str() == "cancelled")
    })
    .await;
    wait_for_page(&browser, "the cancelled task", |s| s.contains("Cancelled")).await;
    browser.quit().await.expect("quit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_watches_a_run_complete_cancels_one_revokes_and_keeps_owners_apart() {
    if !chromium_or_skip() {
        return;
    }
    let _one = ONE_BROWSER.lock().await;
    let service = service().await;
    let project = service.project("Demo", "ann").await;
    service.project("Other", "bob").await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    // The connection the owner allowed: its runs are listed under it, Revoke ends it.
    admin::set_owner_password(&service.app, "ann", PASSWORD.into())
        .await
        .expect("password");
    let app = oauth::register(&service.base, "Claude Desktop").await;
    let tokens = oauth::connect(&Browser::new(), &app, "ann", PASSWORD, &project).await;
    let client = mcp_client(&service.mcp_url(), &tokens.access, Era::Current).await;

    let browser = Chromium::start().await.expect("start Chromium");
    sign_in(&browser, &service, "ann").await;
    browser
        .goto(&format!("{}/console/projects/{project}/runs", service.base))
        .await
        .expect("runs");
    wait_for_page(&browser, "an empty list", |s| s.contains("No runs.")).await;
    browser
        .execute(
            "window.notReloaded = true; window.scrollTo(0, 0);",
            json!([]),
        )
        .await
        .expect("mark");

    let run = queue(&client, "browser-run-1").await;
    wait_for_page(&browser, "the queued run", |s| shows(s, &run, "queued")).await;
    desktop.sync(&project, &[1]).await;
    assert_eq!(desktop.started(&run, "exec-1").await.0, 200);
    let completion = json!({"execution_id": "exec-1", "status": "completed",
        "result": {"summary": "Three tickets closed"}, "total_tokens": 321, "reported_cost": 0.0042});
    assert_eq!(desktop.complete(&run, &completion).await.0, 200);
    let page = wait_for_page(&browser, "the completed run", |s| {
        shows(s, &run, "completed") && s.contains("Three tickets closed")
    })
    .await;
    assert!(
        page.contains("Claude Desktop") && page.contains("321"),
        "{page}"
    );
    let same_page = browser
        .execute("return window.notReloaded === true;", json!([]))
        .await
        .expect("marker");
    assert_eq!(same_page, json!(true), "the list changed without a reload");

    // Cancel on a running run flags it for the desktop (the newest run, so the first Cancel).
    service.clock.advance(Duration::from_secs(90));
    let running = queue(&client, "browser-run-2").await;
    assert_eq!(desktop.started(&running, "exec-2").await.0, 200);
    wait_for_page(&browser, "the running run", |s| {
        shows(s, &running, "running")
    })
    .await;
    shoot(&browser, "console-runs").await;
    browser.click_button("Cancel").await.expect("cancel");
    wait_for("the cancel flag", async || {
        desktop.control(&running).await.1 == json!({"cancel_requested": true})
    })
    .await;

    browser
        .goto(&format!("{}/console", service.base))
        .await
        .expect("projects");
    browser.click_button("Revoke").await.expect("revoke");
    wait_for("the revocation", async || {
        oauth::mcp_status(&service.base, &tokens.access).await == 401
    })
    .await;

    // Owner B, signed in in the same browser, finds none of A's objects.
    let link = service.link_chat(&project, "claude").await;
    let task = service.assign_goal(&link, "A's task", "a-key-00001").await;
    browser.click_button("Sign out").await.expect("sign out");
    browser
        .field("Owner name")
        .await
        .expect("signed out: the sign-in form");
    sign_in(&browser, &service, "bob").await;
    for path in [
        format!("/console/runs/{run}"),
        format!("/console/chats/{link}"),
        format!("/console/tasks/{task}"),
    ] {
        browser
            .goto(&format!("{}{path}", service.base))
            .await
            .expect("open");
        let source = browser.source().await.expect("source");
        assert!(
            source.contains("Not found") && !source.contains("A's task"),
            "{path}: {source}"
        );
    }
    browser.quit().await.expect("quit");
}
