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
use crate::common::{Desktop, Era, McpClient, TestService, mcp_client, queue};
use relay_protocol::clock::Stopwatch;
use relay_service::{ServiceConfig, admin};
use relay_testkit::webdriver::{self, Chromium};
use serde_json::{Value, json};

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
        console_refresh: REFRESH,
        console_runs_refresh: REFRESH,
        ..ServiceConfig::default()
    })
    .await
}

async fn sign_in(browser: &Chromium, service: &TestService, owner: &str) {
    admin::set_owner_password(&service.app.admin(), owner, PASSWORD.into())
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

/// "Link chat" with and without "Event subscription"; each link page says which. The second
/// link's id (a Claude chat, no subscription), whose page is open.
async fn links_chats_both_ways(browser: &Chromium, service: &TestService) -> String {
    link_chat(browser, service, "chatgpt", true).await;
    wait_for_page(browser, "the active subscription", |s| {
        s.contains("An event subscription is active for this chat")
    })
    .await;
    let link = link_chat(browser, service, "claude", false).await;
    let page = wait_for_page(browser, "the hint", |s| {
        s.contains("Open the host conversation to start each task.")
    })
    .await;
    assert!(!page.contains("An event subscription is active for this chat"));
    link
}

/// A double click on "Assign task" makes one task; a changed goal makes a second.
async fn assigns_once_per_goal(browser: &Chromium, service: &TestService, link: &str) {
    browser
        .type_into("Goal", "Summarise the week")
        .await
        .expect("goal");
    let assign = browser.button("Assign task").await.expect("button");
    browser.double_click(&assign).await.expect("double click");
    wait_for_page(browser, "the task", |s| {
        s.contains("Summarise the week") && s.contains("Waiting for Claude")
    })
    .await;
    // Let a second request of the double click land, if one was sent.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let count = task_count(service, link).await;
    assert_eq!(count, 1, "a double click makes one task");
    service.clock.advance(Duration::from_secs(1));

    browser
        .type_into("Goal", "Plan next week")
        .await
        .expect("goal");
    browser.click_button("Assign task").await.expect("assign");
    wait_for("a second task", async || {
        task_count(service, link).await == 2
    })
    .await;
    wait_for_page(browser, "the second task", |s| s.contains("Plan next week")).await;
    service.clock.advance(Duration::from_secs(1));
}

/// A half-typed goal survives the list's refresh, which shows a task assigned elsewhere.
async fn keeps_a_half_typed_goal(browser: &Chromium, service: &TestService, link: &str) {
    browser
        .type_into("Goal", "Half-typed go")
        .await
        .expect("goal");
    service
        .assign_goal(link, "Assigned from the CLI", "cli-key-0001")
        .await;
    wait_for_page(browser, "the refreshed list", |s| {
        s.contains("Assigned from the CLI")
    })
    .await;
    let key = idempotency_key(browser).await;
    tokio::time::sleep(REFRESH * 2).await;
    let goal = browser.field("Goal").await.expect("goal field");
    let typed = browser.value(&goal).await.expect("value");
    assert_eq!(typed, "Half-typed go", "the typed goal is kept");
    assert_eq!(idempotency_key(browser).await, key, "and its key");
    browser.type_into("Goal", "al").await.expect("more goal");
    assert_ne!(
        idempotency_key(browser).await,
        key,
        "a changed goal gets a new key"
    );
    assert_eq!(task_count(service, link).await, 3);
}

/// The assign form's idempotency key as it is now (a hidden input's value is its attribute,
/// so the server's and the script's keys cannot be told apart; a changed goal shows the script).
async fn idempotency_key(browser: &Chromium) -> String {
    let key = browser
        .execute(
            "return document.querySelector('#assign input[name=idempotency_key]').value;",
            json!([]),
        )
        .await
        .expect("key");
    key.as_str().expect("a key").to_owned()
}

/// The first "Cancel" (the newest open task's) cancels it.
async fn cancels_a_task(browser: &Chromium, service: &TestService, link: &str) {
    browser.click_button("Cancel").await.expect("cancel");
    wait_for("a cancelled task", async || {
        let tasks = service.app.store.link_tasks(link, 10).await.expect("tasks");
        tasks.iter().any(|t| t.status.as_str() == "cancelled")
    })
    .await;
    wait_for_page(browser, "the cancelled task", |s| s.contains("Cancelled")).await;
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
    let link = links_chats_both_ways(&browser, &service).await;
    assigns_once_per_goal(&browser, &service, &link).await;
    keeps_a_half_typed_goal(&browser, &service, &link).await;
    shoot(&browser, "console-tasks").await;
    cancels_a_task(&browser, &service, &link).await;
    browser.quit().await.expect("quit");
}

/// A service with ann's project shared by her desktop, bob's project, and a connection ann
/// allowed through the authorization server.
struct Runs {
    service: TestService,
    project: String,
    desktop: Desktop,
    access: String,
    client: McpClient,
}

async fn runs_setup() -> Runs {
    let service = service().await;
    let project = service.project("Demo", "ann").await;
    service.project("Other", "bob").await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    admin::set_owner_password(&service.app.admin(), "ann", PASSWORD.into())
        .await
        .expect("password");
    let app = oauth::register(&service.base, "Claude Desktop").await;
    let tokens = oauth::connect(&Browser::new(), &app, "ann", PASSWORD, &project).await;
    let client = mcp_client(&service.mcp_url(), &tokens.access, Era::Current).await;
    Runs {
        service,
        project,
        desktop,
        access: tokens.access,
        client,
    }
}

/// A run queued through MCP shows up queued and then completed, without a reload.
async fn watches_a_run_complete(browser: &Chromium, runs: &Runs) -> String {
    let Runs {
        service,
        project,
        desktop,
        ..
    } = runs;
    let url = format!("{}/console/projects/{project}/runs", service.base);
    browser.goto(&url).await.expect("runs");
    wait_for_page(browser, "an empty list", |s| s.contains("No runs.")).await;
    browser
        .execute("window.notReloaded = true;", json!([]))
        .await
        .expect("mark");
    let run = queue(&runs.client, "browser-run-1").await;
    wait_for_page(browser, "the queued run", |s| shows(s, &run, "queued")).await;
    desktop.sync(project, &[1]).await;
    assert_eq!(desktop.started(&run, "exec-1").await.0, 200);
    let completion = json!({"execution_id": "exec-1", "status": "completed",
        "result": {"summary": "Three tickets closed"}, "total_tokens": 321, "reported_cost": 0.0042});
    assert_eq!(desktop.complete(&run, &completion).await.0, 200);
    let page = wait_for_page(browser, "the completed run", |s| {
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
    run
}

/// "Cancel" on a running run (the newest, so the first Cancel) flags it for the desktop.
async fn cancels_a_running_run(browser: &Chromium, runs: &Runs) {
    runs.service.clock.advance(Duration::from_secs(90));
    let running = queue(&runs.client, "browser-run-2").await;
    assert_eq!(runs.desktop.started(&running, "exec-2").await.0, 200);
    wait_for_page(browser, "the running run", |s| {
        shows(s, &running, "running")
    })
    .await;
    shoot(browser, "console-runs").await;
    browser.click_button("Cancel").await.expect("cancel");
    wait_for("the cancel flag", async || {
        runs.desktop.control(&running).await.1
            == json!({"cancel_requested": true, "cancel_cause": "owner_cancelled_console"})
    })
    .await;
    // The desktop stops it and reports what it spent: the list says who cancelled it and what
    // it cost.
    let completion = json!({"execution_id": "exec-2", "status": "cancelled",
        "cause": "owner_cancelled_console", "total_tokens": 120, "reported_cost": 0.0015});
    assert_eq!(runs.desktop.complete(&running, &completion).await.0, 200);
    wait_for_page(browser, "the owner's cancel and its cost", |s| {
        shows(s, &running, "cancelled")
            && s.contains("Cancelled by the owner in the console")
            && s.contains("$0.001500")
    })
    .await;
}

/// "Revoke" on the projects page: the connection's next MCP call gets 401.
async fn revokes_the_connection(browser: &Chromium, runs: &Runs) {
    let base = &runs.service.base;
    browser
        .goto(&format!("{base}/console"))
        .await
        .expect("projects");
    browser.click_button("Revoke").await.expect("revoke");
    wait_for("the revocation", async || {
        oauth::mcp_status(base, &runs.access).await == 401
    })
    .await;
}

/// Owner B, signed in in the same browser, finds none of A's objects.
async fn keeps_owners_apart(browser: &Chromium, runs: &Runs, run: &str) {
    let service = &runs.service;
    let link = service.link_chat(&runs.project, "claude").await;
    let task = service.assign_goal(&link, "A's task", "a-key-00001").await;
    browser.click_button("Sign out").await.expect("sign out");
    browser
        .field("Owner name")
        .await
        .expect("signed out: the sign-in form");
    sign_in(browser, service, "bob").await;
    for path in [
        format!("/console/runs/{run}"),
        format!("/console/chats/{link}"),
        format!("/console/tasks/{task}"),
    ] {
        let url = format!("{}{path}", service.base);
        browser.goto(&url).await.expect("open");
        let source = browser.source().await.expect("source");
        assert!(
            source.contains("Not found") && !source.contains("A's task"),
            "{path}: {source}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_watches_a_run_complete_cancels_one_revokes_and_keeps_owners_apart() {
    if !chromium_or_skip() {
        return;
    }
    let _one = ONE_BROWSER.lock().await;
    let runs = runs_setup().await;
    let browser = Chromium::start().await.expect("start Chromium");
    sign_in(&browser, &runs.service, "ann").await;
    let run = watches_a_run_complete(&browser, &runs).await;
    cancels_a_running_run(&browser, &runs).await;
    revokes_the_connection(&browser, &runs).await;
    keeps_owners_apart(&browser, &runs, &run).await;
    browser.quit().await.expect("quit");
}

/// Horizontal overflow of the page at the window's width: `[scrollWidth, clientWidth]`.
async fn widths(browser: &Chromium) -> (u64, u64) {
    let answer = browser
        .execute(
            "var d = document.documentElement; return [d.scrollWidth, d.clientWidth];",
            json!([]),
        )
        .await
        .expect("widths");
    let at = |i: usize| answer[i].as_u64().expect("a width");
    (at(0), at(1))
}

/// Every "Cancel" button's left and right edge, and the viewport's width.
async fn cancel_buttons(browser: &Chromium) -> (Vec<(f64, f64)>, f64) {
    let answer = browser
        .execute(
            "var edges = Array.from(document.querySelectorAll('button'))
               .filter(function (b) { return b.textContent.trim() === 'Cancel'; })
               .map(function (b) { var r = b.getBoundingClientRect(); return [r.left, r.right]; });
             return [edges, document.documentElement.clientWidth];",
            json!([]),
        )
        .await
        .expect("buttons");
    let edges = answer[0]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| {
            (
                e[0].as_f64().unwrap_or(-1.0),
                e[1].as_f64().unwrap_or(f64::MAX),
            )
        })
        .collect();
    (edges, answer[1].as_f64().expect("viewport"))
}

/// 50 runs of an operator-minted agent: 47 failed with 2,000-character errors (one a single
/// unbroken word, one with a float's noisy cost), one waiting for an approval, one running, one
/// queued. Returns the agent's token and the waiting run's id.
async fn fifty_runs(service: &TestService, project: &str, desktop: &Desktop) -> (String, String) {
    let (token, _) = service
        .agent(project, &["osfoundry:read", "osfoundry:run"])
        .await;
    let client = mcp_client(&service.mcp_url(), &token, Era::Current).await;
    let words = "the tool refused the write because the path lies outside the project ";
    for n in 0..47 {
        let id = queue(&client, &format!("fifty-run-{n:04}")).await;
        let execution = format!("exec-f{n}");
        assert_eq!(desktop.started(&id, &execution).await.0, 200);
        let error: String = if n == 0 {
            "x".repeat(2_000)
        } else {
            words.chars().cycle().take(2_000).collect()
        };
        let cost: Value = if n == 1 {
            serde_json::from_str("0.0024000000000000002").expect("a number")
        } else {
            json!(0.001)
        };
        let completion = json!({"execution_id": execution, "status": "failed",
            "error": error, "total_tokens": 50, "reported_cost": cost});
        assert_eq!(desktop.complete(&id, &completion).await.0, 200);
        service.clock.advance(Duration::from_millis(10));
    }
    let waiting = queue(&client, "fifty-run-waiting").await;
    assert_eq!(desktop.started(&waiting, "exec-w").await.0, 200);
    let report = json!({"execution_id": "exec-w",
        "waiting_for": {"what": "owner approval of fs.write"},
        "progress": {"tokens_used": 120, "agents_started": 1, "agents_finished": 1, "tools_called": 0}});
    let path = format!("/external-assistants/graph-relays/commands/{waiting}/report");
    assert_eq!(desktop.post(&path, &report).await.0, 200);
    let running = queue(&client, "fifty-run-running").await;
    assert_eq!(desktop.started(&running, "exec-r").await.0, 200);
    queue(&client, "fifty-run-queued").await;
    client.cancel().await.ok();
    (token, waiting)
}

/// The runs table at 1280 px with 50 runs whose errors are 2,000 characters: no horizontal
/// scroll, every Cancel inside the viewport, a waiting run says what it waits for and its
/// tokens so far, costs print as money ("unknown" while running); the same page at 375 px
/// does not scroll sideways either. Then the operator-minted agent that queued them is listed
/// beside the connections and revoked from there: its next MCP call gets 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_runs_fit_1280_px_show_waits_and_a_minted_agent_is_revoked() {
    if !chromium_or_skip() {
        return;
    }
    let _one = ONE_BROWSER.lock().await;
    let service = service().await;
    let project = service.project("Demo", "ann").await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let (token, waiting) = fifty_runs(&service, &project, &desktop).await;
    let browser = Chromium::start().await.expect("start Chromium");
    sign_in(&browser, &service, "ann").await;
    browser
        .goto(&format!("{}/console/projects/{project}/runs", service.base))
        .await
        .expect("runs");
    browser.set_window_size(1280, 900).await.expect("1280 px");
    let page = wait_for_page(&browser, "the waiting run", |s| {
        s.contains("waiting for owner approval of fs.write")
    })
    .await;
    assert_eq!(page.matches("data-run=").count(), 50, "one page of 50 runs");
    assert!(page.contains("120 so far"), "tokens so far, not —");
    assert!(page.contains(&format!("/console/runs/{waiting}\">running<")));
    assert!(page.contains("$0.002400") && !page.contains("0.0024000000000000002"));
    assert!(page.contains("unknown"), "a running run's cost is unknown");
    let (scroll, client) = widths(&browser).await;
    assert!(
        scroll <= client,
        "no horizontal scroll at 1280 px: {scroll} > {client}"
    );
    let (buttons, viewport) = cancel_buttons(&browser).await;
    assert_eq!(
        buttons.len(),
        3,
        "the queued and both running runs: {buttons:?}"
    );
    for (left, right) in &buttons {
        assert!(
            *left >= 0.0 && *right <= viewport,
            "Cancel at {left}..{right} of {viewport}"
        );
    }
    shoot(&browser, "console-runs-50").await;
    browser.set_window_size(375, 900).await.expect("375 px");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (scroll, client) = widths(&browser).await;
    assert!(
        scroll <= client,
        "no horizontal scroll at 375 px: {scroll} > {client}"
    );
    browser.set_window_size(1280, 900).await.expect("1280 px");

    browser
        .goto(&format!("{}/console", service.base))
        .await
        .expect("projects");
    let page = wait_for_page(&browser, "the minted agent", |s| {
        s.contains("Agent tokens") && s.contains("data-agent-token=")
    })
    .await;
    assert!(page.contains("claude"), "named: {page}");
    assert_eq!(oauth::mcp_status(&service.base, &token).await, 200);
    browser.click_button("Revoke").await.expect("revoke");
    wait_for("the revocation", async || {
        oauth::mcp_status(&service.base, &token).await == 401
    })
    .await;
    wait_for_page(&browser, "the revoked agent", |s| s.contains("revoked ")).await;
    browser.quit().await.expect("quit");
}
