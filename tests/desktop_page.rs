//! The desktop page (`relay desktop ui`) drives a real desktop relay through the shared state
//! file: turning sharing off on the page makes the next queued run end with the consent
//! refusal; an `ask` tool call waits under "Pending approvals" until "Approve" (the run goes on)
//! or "Deny" (it fails, as with `relay desktop approvals deny`). The browser test clicks the same
//! controls by their labels in headless Chromium and keeps screenshots of the run's timeline.

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
        home.contains(&format!(">Shared with {}</label>", world.project)),
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
