//! The desktop page (`relay desktop ui`) drives a real desktop relay through the shared state
//! file: turning sharing off on the page makes the next queued run end with the consent
//! refusal; an `ask` tool call waits under "Pending approvals" until "Approve" (the run goes on)
//! or "Deny" (it fails, as with `relay desktop approvals deny`). The browser test clicks the same
//! controls by their labels in headless Chromium and keeps screenshots of the run's timeline.
//! The page keeps itself current: with a real `relay desktop run` process, an approval appears
//! without a reload while a half-typed input keeps its text, a queued run is listed, and once the
//! relay is killed the banner says so and the approval is shown as not live.

use crate::harness;

use std::sync::Arc;
use std::time::Duration;

use harness::{ECHO, WRITES, World};
use relay_desktop::NOT_SHARED;
use relay_desktop::state::DesktopState;
use relay_protocol::clock::SystemClock;
use relay_testkit::desktop_page::{PageClient, form_value};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The page served over its own connection to the world's state file, as `relay desktop ui`
/// would from another process; stops when the token is cancelled (or dropped with the test).
pub struct ServedPage {
    pub url: String,
    pub stop: CancellationToken,
}

impl Drop for ServedPage {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub async fn serve_page(world: &World) -> ServedPage {
    let state = DesktopState::open(&world.state_dir.path().join("desktop.db")).expect("state");
    let listen = relay_desktop::ui::loopback_listen("127.0.0.1:0").expect("loopback");
    let bound = relay_desktop::ui::bind(listen, state, Arc::new(SystemClock))
        .await
        .expect("bind");
    let url = bound.url.clone();
    let stop = CancellationToken::new();
    tokio::spawn(bound.serve(stop.clone()));
    ServedPage { url, stop }
}

/// Waits until the page lists a pending approval; returns the page's HTML.
pub async fn wait_for_pending(client: &PageClient) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let page = client.get("/approvals").await.body;
        if page.contains(">Approve</button>") {
            return page;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no approval appeared on the page: {page}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharing_turned_off_on_the_page_makes_the_next_run_end_with_the_consent_refusal() {
    let world = World::new(json!({"default": {"text": "must not run"}})).await;
    let session = world.share(ECHO).await;
    let page = serve_page(&world).await;
    let client = PageClient::open(&page.url).await;
    let home = client.get("/").await.body;
    assert!(
        home.contains(">Shared with p</label>"),
        "the project is named as the service names it: {home}"
    );
    assert!(
        home.contains(&format!("title=\"{}\"", world.project)),
        "{home}"
    );
    let command = world.queue(&session, "key-page-consent", json!({})).await;
    // The form as the page draws it, with the box unchecked: the project listed, not `shared`.
    let saved = client
        .post(
            "/",
            "/sharing",
            &[("session", session.as_str()), ("project", &world.project)],
        )
        .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    world.relay().pass(&Default::default()).await;
    let run = world.get(&command).await;
    assert_eq!(run["status"], "cancelled", "{run}");
    assert_eq!(run["error"], NOT_SHARED);
    assert!(world.mock.calls().is_empty(), "the graph never ran");
}

/// A WRITES run whose fs.write the page set to `ask`, answered on the page with `decision`.
async fn answered_on_the_page(decision: &str) -> (serde_json::Value, tempfile::TempDir) {
    let world = World::new(json!({})).await;
    let folder = tempfile::tempdir().expect("folder");
    world.state.set_folder(folder.path()).expect("folder");
    let session = world.share(WRITES).await;
    let page = serve_page(&world).await;
    let client = PageClient::open(&page.url).await;
    let set = client
        .post("/policies", "/policies", &[("fs.write", "ask")])
        .await;
    assert_eq!(set.status, 303, "{}", set.body);
    let command = world
        .queue(&session, "key-page-ask", json!({"path": "out/note.md"}))
        .await;
    let relay = world.relay();
    let (stop, task) = harness::start(&relay);
    let pending = wait_for_pending(&client).await;
    assert!(
        pending.contains("fs.write") && pending.contains("out/note.md"),
        "the tool and its arguments are shown: {pending}"
    );
    let execution = world.state.history().expect("history")[0]
        .execution_id
        .clone();
    assert!(pending.contains(&execution), "the run is shown: {pending}");
    let id = form_value(&pending, "id").expect("an approval id");
    let answered = client
        .post(
            "/approvals",
            "/approvals/decide",
            &[("id", &id), ("decision", decision)],
        )
        .await;
    assert_eq!(answered.status, 303, "{}", answered.body);
    let run = world.wait_terminal(&command, Duration::from_secs(30)).await;
    stop.cancel();
    task.await.expect("relay");
    (run, folder)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_on_the_page_lets_the_run_go_on() {
    let (run, folder) = answered_on_the_page("approve").await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        std::fs::read_to_string(folder.path().join("out/note.md")).expect("file"),
        "written remotely"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_on_the_page_ends_the_run_as_the_cli_does() {
    let (run, folder) = answered_on_the_page("deny").await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"]
            .as_str()
            .unwrap_or("")
            .contains("the owner denied tool fs.write"),
        "{run}"
    );
    assert!(!folder.path().join("out").exists());
}

/// Two agents at once, a third after them, then a file written through an `ask` tool: a
/// timeline with bars that overlap and follow each other.
const REPORT: &str = r#"
export const meta = {name: "Report", slug: "report", version: "1.0.0", description: "Two agents draft, a third writes, the report is saved."};
export default async function (args, g) {
  const [facts, check] = await Promise.all([
    g.agent({label: "researcher", prompt: "Find facts"}),
    g.agent({label: "critic", prompt: "Check facts"}),
  ]);
  const report = await g.agent({label: "writer", prompt: "Write: " + facts.text + " " + check.text});
  await g.tool("fs.write", {path: "report.md", text: report.text});
  return {report: report.text};
}
"#;

/// Viewport widths of the screenshots, and the height of the window.
const SCREENSHOT_WIDTHS: [u32; 2] = [1280, 375];
const SCREENSHOT_HEIGHT: u32 = 1400;

/// `Some(chromedriver)`, or `None` after saying the test is skipped; with
/// `GRAPHRELAY_REQUIRE_CHROMIUM=1` (as `.ci/run` sets) a missing one fails the test.
fn chromium_or_skip() -> Option<std::path::PathBuf> {
    let found = relay_testkit::webdriver::chromedriver();
    if found.is_none() {
        assert!(
            std::env::var("GRAPHRELAY_REQUIRE_CHROMIUM").as_deref() != Ok("1"),
            "chromedriver is missing and GRAPHRELAY_REQUIRE_CHROMIUM=1 says it must be there"
        );
        eprintln!("skipped: chromedriver (Debian's chromium-driver) is missing");
    }
    found
}

/// `target/screenshots/`, beside the profile directory this test binary is in.
fn screenshots_dir() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let target = exe
        .ancestors()
        .nth(3)
        .expect("test binaries live in target/<profile>/deps");
    let dir = target.join("screenshots");
    std::fs::create_dir_all(&dir).expect("screenshots folder");
    dir
}

/// The width a PNG says it has (its IHDR chunk).
fn png_width(png: &[u8]) -> u32 {
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    u32::from_be_bytes(png[16..20].try_into().expect("four bytes"))
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_shares_sets_a_policy_approves_and_sees_the_timeline() {
    if chromium_or_skip().is_none() {
        return;
    }
    let world = World::new(json!({"replies": [
        {"label": "researcher", "text": "three facts", "tokens": 120, "latency_ms": 300},
        {"label": "critic", "text": "two hold", "tokens": 80, "latency_ms": 500},
        {"label": "writer", "text": "the report", "tokens": 200, "latency_ms": 200}
    ]}))
    .await;
    let folder = tempfile::tempdir().expect("folder");
    world.state.set_folder(folder.path()).expect("folder");
    let session = world.share(REPORT).await;
    let page = serve_page(&world).await;
    let browser = relay_testkit::webdriver::Chromium::start()
        .await
        .expect("start Chromium");
    browser.goto(&page.url).await.expect("open the link");
    let home = browser
        .wait_for_url(|url| !url.contains("token="))
        .await
        .expect("the link lands on the page");
    assert!(home.ends_with('/'), "{home}");
    save_screenshots(&browser, "desktop-sessions").await;
    toggle_sharing(&browser, &world, &session).await;
    browser
        .goto(&format!("{}/policies", origin(&page)))
        .await
        .expect("policies");
    browser.select("fs.write", "ask").await.expect("pick ask");
    browser.click_button("Save policies").await.expect("save");
    wait_until("fs.write is ask", || {
        world.state.policy().expect("policy").get("fs.write")
            == runner::host::approvals::Policy::Ask
    })
    .await;
    let command = world.queue(&session, "key-browser", json!({})).await;
    let (stop, task) = harness::start(&world.relay());
    approve_in_browser(&browser, &page).await;
    let run = world.wait_terminal(&command, Duration::from_secs(30)).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        std::fs::read_to_string(folder.path().join("report.md")).expect("written"),
        "the report"
    );
    stop.cancel();
    task.await.expect("relay");
    let execution = world.state.history().expect("history")[0]
        .execution_id
        .clone();
    screenshot_timeline(&browser, &page, &execution).await;
    browser.quit().await.expect("quit");
}

fn origin(page: &ServedPage) -> String {
    page.url.split("/?").next().expect("a link").to_owned()
}

/// Unchecks "Shared with <project>" and saves, then checks it again.
async fn toggle_sharing(
    browser: &relay_testkit::webdriver::Chromium,
    world: &World,
    session: &relay_protocol::GraphSessionId,
) {
    // The project by its name (the test service calls it "p"), its id in the tooltip.
    let label = "Shared with p".to_owned();
    let shared = || {
        world
            .state
            .shared_sessions(&world.project)
            .expect("shares")
            .iter()
            .any(|s| &s.id == session)
    };
    for want in [false, true] {
        let checkbox = browser.field(&label).await.expect("the sharing checkbox");
        assert_eq!(
            browser.is_selected(&checkbox).await.expect("checked?"),
            !want
        );
        browser.click(&checkbox).await.expect("toggle");
        browser.click_button("Save sharing").await.expect("save");
        wait_until("the sharing changed", || shared() == want).await;
    }
}

async fn approve_in_browser(browser: &relay_testkit::webdriver::Chromium, page: &ServedPage) {
    let approvals = format!("{}/approvals", origin(page));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        browser.goto(&approvals).await.expect("approvals");
        let source = browser.source().await.expect("source");
        if source.contains(">Approve</button>") {
            assert!(
                source.contains("fs.write") && source.contains("report.md"),
                "{source}"
            );
            save_screenshots(browser, "desktop-approvals").await;
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no approval: {source}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    browser.click_button("Approve").await.expect("approve");
}

async fn screenshot_timeline(
    browser: &relay_testkit::webdriver::Chromium,
    page: &ServedPage,
    execution: &str,
) {
    browser
        .goto(&format!("{}/runs/{execution}", origin(page)))
        .await
        .expect("the run");
    let source = browser.source().await.expect("source");
    for agent in ["researcher", "critic", "writer"] {
        assert!(source.contains(&format!("agent {agent}")), "{source}");
    }
    assert!(
        source.contains("the report") && source.contains("tool fs.write"),
        "{source}"
    );
    save_screenshots(browser, "desktop-timeline").await;
}

/// Screenshots of the current page at each of [`SCREENSHOT_WIDTHS`], as `NAME-WIDTH.png`; the
/// window is left at the last width.
async fn save_screenshots(browser: &relay_testkit::webdriver::Chromium, name: &str) {
    let dir = screenshots_dir();
    for width in SCREENSHOT_WIDTHS {
        browser
            .set_window_size(width, SCREENSHOT_HEIGHT)
            .await
            .expect("resize");
        let png = browser.screenshot().await.expect("take a screenshot");
        let taken = png_width(&png);
        assert!(
            taken >= width * 9 / 10 && taken <= width * 2,
            "a {width} px window took a {taken} px screenshot"
        );
        std::fs::write(dir.join(format!("{name}-{width}.png")), &png).expect("save the screenshot");
    }
}

/// `relay desktop run` as its own process over the world's state file; killed (SIGKILL) when
/// dropped.
struct RelayProcess(std::process::Child);

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_relay(world: &World) -> RelayProcess {
    let dir = world.state_dir.path();
    let replies = dir.join("replies.json");
    std::fs::write(&replies, json!({"default": {"text": "unused"}}).to_string()).expect("replies");
    let log = std::fs::File::create(dir.join("relay.log")).expect("log");
    let child = std::process::Command::new(harness::relay_binary())
        .args(["desktop", "--state"])
        .arg(dir.join("desktop.db"))
        .args(["run", "--service", &world.service.base, "--token"])
        .arg(&world.desktop_token)
        .args(["--engine", "boa", "--poll-interval", "0.2"])
        .args(["--control-interval", "0.2", "--approval-timeout", "600"])
        .arg("--replies")
        .arg(&replies)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("relay desktop run starts");
    RelayProcess(child)
}

/// Waits (at most `limit`) until the page the browser holds, never reloaded, satisfies `done`;
/// returns its source and how long it took.
async fn wait_for_source(
    browser: &relay_testkit::webdriver::Chromium,
    what: &str,
    limit: Duration,
    done: impl Fn(&str) -> bool,
) -> (String, Duration) {
    let started = tokio::time::Instant::now();
    loop {
        let source = browser.source().await.expect("source");
        if done(&source) {
            return (source, started.elapsed());
        }
        assert!(
            started.elapsed() < limit,
            "not within {limit:?}: {what}: {source}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Marks the page the browser holds, so a reload (which would lose the mark) is seen.
async fn mark_page(browser: &relay_testkit::webdriver::Chromium) {
    browser
        .execute("window.notReloaded = true; return true;", json!([]))
        .await
        .expect("mark the page");
}

async fn still_marked(browser: &relay_testkit::webdriver::Chromium) -> bool {
    browser
        .execute("return window.notReloaded === true;", json!([]))
        .await
        .expect("read the mark")
        == json!(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_page_keeps_itself_current_and_says_when_no_relay_runs() {
    if chromium_or_skip().is_none() {
        return;
    }
    let world = World::new(json!({"default": {"text": "unused"}})).await;
    let folder = tempfile::tempdir().expect("folder");
    world.state.set_folder(folder.path()).expect("folder");
    world
        .state
        .set_policy("fs.write", runner::host::approvals::Policy::Ask)
        .expect("ask");
    let session = world.share(WRITES).await;
    let page = serve_page(&world).await;
    let browser = relay_testkit::webdriver::Chromium::start()
        .await
        .expect("start Chromium");
    browser.goto(&page.url).await.expect("open the link");
    browser
        .wait_for_url(|url| !url.contains("token="))
        .await
        .expect("the link lands on the page");
    assert!(
        browser
            .source()
            .await
            .expect("source")
            .contains("No relay is running")
    );
    browser
        .type_into("Project id", "half-typ")
        .await
        .expect("type");
    mark_page(&browser).await;
    let relay = approval_arrives_on_the_open_page(&browser, &world, &session).await;
    let (asking, waiting) = the_other_run_is_listed_as_queued(&browser, &page, &world).await;
    the_killed_relay_shows_on_the_open_page(&browser, &page, relay, asking).await;
    for file in [asking, waiting] {
        assert!(!folder.path().join(file).exists(), "nothing was approved");
    }
    browser.quit().await.expect("quit");
}

/// Starts the relay with two runs queued; the first asks for approval and the open home page
/// shows it within 2 s, keeping its half-typed input.
async fn approval_arrives_on_the_open_page(
    browser: &relay_testkit::webdriver::Chromium,
    world: &World,
    session: &relay_protocol::GraphSessionId,
) -> RelayProcess {
    // Two runs: the relay runs one at a time, so one waits for approval, the other stays queued.
    world
        .queue(session, "key-live-1", json!({"path": "first.md"}))
        .await;
    world
        .queue(session, "key-live-2", json!({"path": "second.md"}))
        .await;
    let relay = spawn_relay(world);
    wait_until("the run asks for approval", || {
        !world.state.approvals(false).expect("approvals").is_empty()
    })
    .await;
    let (_, took) = wait_for_source(
        browser,
        "the approval on the open page",
        Duration::from_secs(2),
        |s| {
            s.contains("your approval of <code>fs.write</code>") && s.contains("A relay is running")
        },
    )
    .await;
    eprintln!("the approval appeared on the open page {took:?} after it was asked");
    let field = browser.field("Project id").await.expect("the field");
    assert_eq!(
        browser.value(&field).await.expect("value"),
        "half-typ",
        "the half-typed input keeps its text"
    );
    assert!(still_marked(browser).await, "the page was not reloaded");
    save_screenshots(browser, "desktop-live-sessions").await;
    relay
}

/// The run that does not ask waits behind the one that does: the runs page lists it as
/// queued. Returns the asking run's and the waiting run's files.
async fn the_other_run_is_listed_as_queued(
    browser: &relay_testkit::webdriver::Chromium,
    page: &ServedPage,
    world: &World,
) -> (&'static str, &'static str) {
    let asked = world.state.approvals(false).expect("approvals")[0]
        .args
        .clone();
    let (asking, waiting) = if asked.contains("first.md") {
        ("first.md", "second.md")
    } else {
        ("second.md", "first.md")
    };
    wait_until("the relay's sync saw the other run", || {
        !world.state.queued().expect("queue").is_empty()
    })
    .await;
    browser
        .goto(&format!("{}/runs", origin(page)))
        .await
        .expect("runs");
    let (runs, _) = wait_for_source(browser, "the queued run", Duration::from_secs(5), |s| {
        s.contains("id=\"queued\"")
    })
    .await;
    let queued = runs
        .split("id=\"queued\"")
        .nth(1)
        .and_then(|rest| rest.split("id=\"history\"").next())
        .expect("the queued region");
    assert!(
        queued.contains(waiting) && queued.contains("writes") && !queued.contains(asking),
        "the waiting run is listed as queued: {queued}"
    );
    save_screenshots(browser, "desktop-queue").await;
    (asking, waiting)
}

/// Kills the relay while the approvals page is open: within 3 s it says no relay runs and the
/// approval is not live, without a reload.
async fn the_killed_relay_shows_on_the_open_page(
    browser: &relay_testkit::webdriver::Chromium,
    page: &ServedPage,
    relay: RelayProcess,
    asking: &str,
) {
    browser
        .goto(&format!("{}/approvals", origin(page)))
        .await
        .expect("approvals");
    assert!(
        browser
            .source()
            .await
            .expect("source")
            .contains(">Approve</button>")
    );
    mark_page(browser).await;
    drop(relay);
    let (approvals, took) = wait_for_source(
        browser,
        "the killed relay on the open page",
        Duration::from_secs(3),
        |s| {
            s.contains("No relay is running")
                && s.contains("Not live")
                && !s.contains(">Approve</button>")
        },
    )
    .await;
    eprintln!("the page said the relay stopped {took:?} after it was killed");
    assert!(
        approvals.contains(asking),
        "the approval is still shown: {approvals}"
    );
    assert!(still_marked(browser).await, "the page was not reloaded");
    save_screenshots(browser, "desktop-approvals-not-live").await;
}
