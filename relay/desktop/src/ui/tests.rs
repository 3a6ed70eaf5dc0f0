//! The page's promises, through its router: who may use it, the CSRF rule, and that each
//! action changes the desktop state as the matching CLI command does.

use super::*;
use crate::state::ApprovalStatus;
use axum::body::Body;
use axum::http::{Method, Request as HttpRequest};
use relay_protocol::clock::{ManualClock, Timestamp};
use runner::host::approvals::Policy;
use serde_json::json;
use tower::ServiceExt;

const ADDRESS: &str = "127.0.0.1:4567";
const HOST: &str = "127.0.0.1:4567";
const ORIGIN: &str = "http://127.0.0.1:4567";
const COOKIE: &str = "relay_desktop_4567";

/// A page over an in-memory state, signed in: the router, the cookie header and the CSRF token.
struct Fixture {
    state: DesktopState,
    router: Router,
    url: String,
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

impl Fixture {
    fn new() -> Self {
        Self::over(DesktopState::open_in_memory().expect("state"))
    }

    fn over(state: DesktopState) -> Self {
        let clock = Arc::new(ManualClock::new(Timestamp::from_unix_millis(1_000)));
        let page = DesktopPage::new(state.clone(), clock, ADDRESS.parse().expect("address"))
            .expect("page");
        Fixture {
            state,
            router: page.router,
            url: page.url,
        }
    }

    fn token_path(&self) -> String {
        self.url
            .strip_prefix(ORIGIN)
            .expect("the URL is on the served address")
            .to_owned()
    }

    async fn send(&self, request: HttpRequest<Body>) -> Answer {
        let response = self.router.clone().oneshot(request).await.expect("answer");
        let status = response.status();
        let headers = response.headers().clone();
        let body = axum::body::to_bytes(response.into_body(), 1 << 22)
            .await
            .expect("body");
        Answer {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    async fn get(&self, path: &str, cookie: Option<&str>) -> Answer {
        let mut request = HttpRequest::get(path).header(header::HOST, HOST);
        if let Some(cookie) = cookie {
            request = request.header(header::COOKIE, format!("{COOKIE}={cookie}"));
        }
        self.send(request.body(Body::empty()).expect("request"))
            .await
    }

    /// Opens the link: the session cookie's value.
    async fn sign_in(&self) -> String {
        let answer = self.get(&self.token_path(), None).await;
        assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
        assert_eq!(answer.headers[header::LOCATION], "/");
        let set = answer.headers[header::SET_COOKIE]
            .to_str()
            .expect("text")
            .to_owned();
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict"),
            "{set}"
        );
        let value = set.strip_prefix(&format!("{COOKIE}=")).expect("our cookie");
        value.split(';').next().expect("value").to_owned()
    }

    /// The CSRF token the signed-in page's forms carry.
    async fn csrf(&self, cookie: &str) -> String {
        let page = self.get("/", Some(cookie)).await.body;
        let at = page
            .find("name=\"csrf\" value=\"")
            .expect("a form with a CSRF token")
            + 19;
        page[at..at + 64].to_owned()
    }

    async fn post(&self, path: &str, cookie: &str, form: &str) -> Answer {
        let request = HttpRequest::builder()
            .method(Method::POST)
            .uri(path)
            .header(header::HOST, HOST)
            .header(header::ORIGIN, ORIGIN)
            .header(header::COOKIE, format!("{COOKIE}={cookie}"))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(form.to_owned()))
            .expect("request");
        self.send(request).await
    }

    fn session(&self, slug: &str) -> GraphSessionIdText {
        let meta = graph_js::Meta {
            name: format!("Graph {slug}"),
            slug: slug.into(),
            version: "1".into(),
            description: String::new(),
            args: None,
        };
        let id = self
            .state
            .upsert_session(&meta, "script", None, Timestamp::from_unix_millis(1))
            .expect("session");
        GraphSessionIdText(id.to_string())
    }
}

struct GraphSessionIdText(String);

fn shared(state: &DesktopState, project: &str) -> Vec<String> {
    state
        .shared_sessions(project)
        .expect("shares")
        .into_iter()
        .map(|s| s.id.to_string())
        .collect()
}

#[tokio::test]
async fn without_the_cookie_or_with_a_wrong_one_every_page_is_refused() {
    let fixture = Fixture::new();
    for path in ["/", "/policies", "/approvals", "/runs", "/runs/x"] {
        assert_eq!(
            fixture.get(path, None).await.status,
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
        let wrong = fixture.get(path, Some(&"0".repeat(64))).await;
        assert_eq!(wrong.status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(wrong.body.contains("relay desktop ui"), "{}", wrong.body);
    }
    let cookie = fixture.sign_in().await;
    assert_eq!(fixture.get("/", Some(&cookie)).await.status, StatusCode::OK);
    assert_eq!(
        fixture.get("/", Some(&cookie[1..])).await.status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn the_link_works_once_and_a_wrong_token_never() {
    let fixture = Fixture::new();
    let wrong = fixture
        .get(&format!("/?token={}", "f".repeat(64)), None)
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.headers.get(header::SET_COOKIE).is_none());
    let cookie = fixture.sign_in().await;
    let again = fixture.get(&fixture.token_path(), None).await;
    assert_eq!(again.status, StatusCode::UNAUTHORIZED);
    assert!(again.headers.get(header::SET_COOKIE).is_none());
    assert!(again.body.contains("works once"), "{}", again.body);
    assert_eq!(fixture.get("/", Some(&cookie)).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_foreign_host_or_origin_is_refused_even_with_the_cookie() {
    let fixture = Fixture::new();
    let rebound = HttpRequest::get(fixture.token_path())
        .header(header::HOST, "attacker.example:4567")
        .body(Body::empty())
        .expect("request");
    assert_eq!(fixture.send(rebound).await.status, StatusCode::FORBIDDEN);
    let cookie = fixture.sign_in().await;
    for host in ["attacker.example:4567", "localhost:4567", "127.0.0.1:80"] {
        let request = HttpRequest::get("/")
            .header(header::HOST, host)
            .header(header::COOKIE, format!("{COOKIE}={cookie}"))
            .body(Body::empty())
            .expect("request");
        assert_eq!(
            fixture.send(request).await.status,
            StatusCode::FORBIDDEN,
            "{host}"
        );
    }
    let csrf = fixture.csrf(&cookie).await;
    let request = HttpRequest::builder()
        .method(Method::POST)
        .uri("/projects")
        .header(header::HOST, HOST)
        .header(header::ORIGIN, "http://attacker.example")
        .header(header::COOKIE, format!("{COOKIE}={cookie}"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("csrf={csrf}&project=p&enabled=true")))
        .expect("request");
    assert_eq!(fixture.send(request).await.status, StatusCode::FORBIDDEN);
    assert!(fixture.state.projects().expect("projects").is_empty());
}

#[test]
fn only_a_loopback_listen_address_is_taken() {
    for good in ["127.0.0.1:0", "127.0.0.1:8888", "[::1]:0"] {
        assert!(loopback_listen(good).is_ok(), "{good}");
    }
    for public in ["0.0.0.0:0", "192.168.1.10:8888", "[::]:0"] {
        let error = loopback_listen(public).unwrap_err().to_string();
        assert!(error.contains("not a loopback address"), "{error}");
    }
    assert_eq!(
        loopback_listen("localhost:8888").expect("localhost"),
        "127.0.0.1:8888".parse::<SocketAddr>().expect("address")
    );
    let error = loopback_listen("my-laptop.local:0")
        .unwrap_err()
        .to_string();
    assert!(error.contains("127.0.0.1:0"), "{error}");
}

#[tokio::test]
async fn a_post_without_the_sessions_csrf_token_is_refused_and_changes_nothing() {
    let fixture = Fixture::new();
    let cookie = fixture.sign_in().await;
    for form in [
        "project=p&enabled=true".to_owned(),
        format!("csrf={}&project=p&enabled=true", "0".repeat(64)),
        format!("csrf={cookie}&project=p&enabled=true"),
        String::new(),
    ] {
        let answer = fixture.post("/projects", &cookie, &form).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{form}");
    }
    assert!(fixture.state.projects().expect("projects").is_empty());
    let csrf = fixture.csrf(&cookie).await;
    let answer = fixture
        .post(
            "/projects",
            &cookie,
            &format!("csrf={csrf}&project=p&enabled=true"),
        )
        .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    assert_eq!(
        fixture.state.projects().expect("projects"),
        vec![("p".to_owned(), true)]
    );
}

#[tokio::test]
async fn every_answer_forbids_framing_and_script() {
    let fixture = Fixture::new();
    let refused = fixture.get("/", None).await;
    let cookie = fixture.sign_in().await;
    let page = fixture.get("/", Some(&cookie)).await;
    for answer in [refused, page] {
        assert_eq!(answer.headers[header::X_FRAME_OPTIONS], "DENY");
        let csp = answer.headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .expect("text");
        assert!(
            csp.contains("default-src 'none'")
                && csp.contains("script-src 'self';")
                && !csp.contains("unsafe-eval"),
            "only the page's own script file runs: {csp}"
        );
        let scripts: Vec<&str> = answer.body.split("<script").skip(1).collect();
        assert!(
            scripts
                .iter()
                .all(|s| s.starts_with(" src=\"/live.js\"") && s.contains("></script>")),
            "no inline script: {}",
            answer.body
        );
    }
    let script = fixture.get("/live.js", Some(&cookie)).await;
    assert_eq!(script.status, StatusCode::OK);
    assert!(
        script.headers[header::CONTENT_TYPE]
            .to_str()
            .is_ok_and(|t| t.starts_with("text/javascript")),
        "{:?}",
        script.headers
    );
    assert!(script.body.contains("data-live"), "{}", script.body);
    assert_eq!(
        fixture.get("/live.js", None).await.status,
        StatusCode::UNAUTHORIZED,
        "the script is behind the same cookie"
    );
}

#[tokio::test]
async fn without_a_relay_the_banner_says_so_and_approvals_are_not_live() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("desktop.db");
    let fixture = Fixture::over(DesktopState::open(&path).expect("state"));
    let now = Timestamp::from_unix_millis(5);
    live_runs(&fixture, &["exec-1"], now);
    fixture.state.record_tokens("exec-1", 120).expect("tokens");
    fixture
        .state
        .ask("a1", "exec-1", "fs.write", r#"{"path":"out/note.md"}"#, now)
        .expect("ask");
    let cookie = fixture.sign_in().await;
    let page = fixture.get("/approvals", Some(&cookie)).await.body;
    assert!(
        page.contains("No relay is running on this state file"),
        "{page}"
    );
    assert!(
        page.contains("Not live") && !page.contains(">Approve</button>"),
        "{page}"
    );
    assert!(
        page.contains("Interrupted"),
        "the stale run is told as such: {page}"
    );
    let lock = crate::lock::RelayLock::acquire(&path).expect("lock");
    let page = fixture.get("/approvals", Some(&cookie)).await.body;
    assert!(
        page.contains("A relay is running on this state file (process "),
        "{page}"
    );
    assert!(
        page.contains(">Approve</button>") && !page.contains("Not live"),
        "{page}"
    );
    let home = fixture.get("/", Some(&cookie)).await.body;
    assert!(
        home.contains("120 tokens so far")
            && home.contains("waiting for")
            && home.contains("your approval of <code>fs.write</code>"),
        "every page says what runs and what it waits for: {home}"
    );
    drop(lock);
    let home = fixture.get("/", Some(&cookie)).await.body;
    assert!(home.contains("No relay is running"), "{home}");
}

#[tokio::test]
async fn projects_and_agents_are_named_and_queued_runs_are_listed() {
    let fixture = Fixture::new();
    let now = Timestamp::from_unix_millis(5);
    let session = fixture.session("report");
    let session_id: relay_protocol::GraphSessionId = session.0.parse().expect("id");
    fixture
        .state
        .set_project_enabled("p", true, now)
        .expect("p");
    fixture.state.share("p", &session_id, now).expect("share");
    let served = relay_protocol::ServedProject {
        project_id: "p".into(),
        name: "Blog posts".into(),
    };
    fixture
        .state
        .set_service_projects(&[served], now)
        .expect("names");
    let queued = relay_protocol::QueuedCommand {
        command_id: relay_protocol::CommandId::new_random(),
        graph_session_id: session_id,
        slug: "report".into(),
        arguments: json!({"topic": "owls"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        created_at: now,
        agent_id: Some("tok_1".into()),
        agent_name: Some("claude".into()),
        max_tokens: None,
    };
    fixture
        .state
        .note_queue("p", &[queued], now)
        .expect("queue");
    let cookie = fixture.sign_in().await;
    let home = fixture.get("/", Some(&cookie)).await.body;
    assert!(home.contains(">Shared with Blog posts</label>"), "{home}");
    assert!(home.contains(">Disable Blog posts</button>"), "{home}");
    assert!(
        home.contains("1 run</a> queued") || home.contains("1 run queued"),
        "{home}"
    );
    let runs = fixture.get("/runs", Some(&cookie)).await.body;
    assert!(
        runs.contains("owls") && runs.contains("claude") && runs.contains("Blog posts"),
        "the queued run is listed with its project and agent by name: {runs}"
    );
}

/// Ends the running `execution` with `status` and `error` (7 tokens, a cost with float noise).
fn end_run(
    fixture: &Fixture,
    execution: &str,
    status: relay_protocol::CompletionStatus,
    error: &str,
) {
    let command = fixture
        .state
        .history()
        .expect("history")
        .into_iter()
        .find(|h| h.execution_id == execution)
        .expect("run")
        .command_id
        .parse::<relay_protocol::CommandId>()
        .expect("command");
    let completion = crate::bounding::completion(
        execution,
        status,
        None,
        7,
        0.002_400_000_000_000_000_2,
        Some(error),
    );
    fixture
        .state
        .finish_execution(
            &command,
            None,
            None,
            &completion,
            Timestamp::from_unix_millis(5),
        )
        .expect("finish");
}

#[tokio::test]
async fn decided_approvals_say_what_really_happened() {
    let fixture = Fixture::new();
    let now = Timestamp::from_unix_millis(5);
    live_runs(&fixture, &["e-ok", "e-timeout", "e-stop", "e-cancel"], now);
    let answers = [
        ("a1", "e-ok", ApprovalStatus::Approved),
        ("a2", "e-timeout", ApprovalStatus::Expired),
        ("a3", "e-stop", ApprovalStatus::Expired),
        ("a4", "e-cancel", ApprovalStatus::Expired),
    ];
    for (id, execution, answer) in answers {
        let state = &fixture.state;
        state
            .ask(id, execution, "fs.write", "{}", now)
            .expect("ask");
        state.decide(id, answer, now).expect("answer");
    }
    use relay_protocol::CompletionStatus::{Cancelled, Failed};
    end_run(
        &fixture,
        "e-timeout",
        Failed,
        "no answer to the approval request for tool fs.write within 600 s; a timeout counts as a denial",
    );
    end_run(
        &fixture,
        "e-stop",
        Failed,
        "the desktop relay was stopped while this graph was running",
    );
    end_run(&fixture, "e-cancel", Cancelled, "Cancelled by the owner");
    let cookie = fixture.sign_in().await;
    let page = fixture.get("/approvals", Some(&cookie)).await.body;
    let decided = page.split("Decided").nth(1).expect("a decided table");
    for outcome in [
        "approved",
        "timed out",
        "relay stopped",
        "cancelled: Cancelled by the owner",
    ] {
        assert!(
            decided.contains(&format!("<td>{outcome}</td>")),
            "{outcome}: {decided}"
        );
    }
    assert!(!decided.contains(">expired<"), "{decided}");
    let runs = fixture.get("/runs", Some(&cookie)).await.body;
    assert!(
        runs.contains("<th>Cost</th>") && runs.contains("<th>Agent</th>"),
        "{runs}"
    );
    assert!(
        runs.contains("$0.0024") && !runs.contains("0.0024000000000000002"),
        "{runs}"
    );
    assert!(
        runs.contains("<td>unknown</td>"),
        "the running run's cost is unknown: {runs}"
    );
    let running = fixture.get("/runs/e-ok", Some(&cookie)).await.body;
    assert!(
        running.contains("still going") && !running.contains("No agents or tools ran"),
        "{running}"
    );
}

#[tokio::test]
async fn projects_are_enabled_and_disabled_on_the_page() {
    let fixture = Fixture::new();
    let cookie = fixture.sign_in().await;
    let csrf = fixture.csrf(&cookie).await;
    let enable = format!("csrf={csrf}&project=p&enabled=true");
    assert_eq!(
        fixture.post("/projects", &cookie, &enable).await.status,
        StatusCode::SEE_OTHER
    );
    let page = fixture.get("/", Some(&cookie)).await.body;
    assert!(page.contains(">Disable p</button>"), "{page}");
    let disable = format!("csrf={csrf}&project=p&enabled=false");
    assert_eq!(
        fixture.post("/projects", &cookie, &disable).await.status,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        fixture.state.projects().expect("projects"),
        vec![("p".to_owned(), false)]
    );
    let empty = format!("csrf={csrf}&project=%20&enabled=true");
    assert_eq!(
        fixture.post("/projects", &cookie, &empty).await.status,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn the_sharing_toggle_shares_and_unshares_a_session_per_project() {
    let fixture = Fixture::new();
    let session = fixture.session("triage");
    let now = Timestamp::from_unix_millis(1);
    fixture
        .state
        .set_project_enabled("p", true, now)
        .expect("enable");
    fixture
        .state
        .set_project_enabled("q", true, now)
        .expect("enable");
    let cookie = fixture.sign_in().await;
    let page = fixture.get("/", Some(&cookie)).await.body;
    assert!(
        page.contains(">Shared with p</label>") && page.contains(">Shared with q</label>"),
        "{page}"
    );
    let csrf = fixture.csrf(&cookie).await;
    let share = format!(
        "csrf={csrf}&session={}&project=p&project=q&shared=q",
        session.0
    );
    assert_eq!(
        fixture.post("/sharing", &cookie, &share).await.status,
        StatusCode::SEE_OTHER
    );
    assert!(shared(&fixture.state, "p").is_empty());
    assert_eq!(shared(&fixture.state, "q"), vec![session.0.clone()]);
    let version = fixture.state.sharing_version().expect("version");
    let unshare = format!("csrf={csrf}&session={}&project=p&project=q", session.0);
    assert_eq!(
        fixture.post("/sharing", &cookie, &unshare).await.status,
        StatusCode::SEE_OTHER
    );
    assert!(shared(&fixture.state, "q").is_empty());
    assert!(
        fixture.state.sharing_version().expect("version") > version,
        "the relay sees the change"
    );
    let unknown = format!("csrf={csrf}&session={}&project=zz&shared=zz", session.0);
    assert_eq!(
        fixture.post("/sharing", &cookie, &unknown).await.status,
        StatusCode::BAD_REQUEST
    );
    assert!(shared(&fixture.state, "zz").is_empty());
}

#[tokio::test]
async fn the_sharing_toggle_refuses_a_project_disabled_since_the_page_was_drawn() {
    let fixture = Fixture::new();
    let session = fixture.session("triage");
    let now = Timestamp::from_unix_millis(1);
    fixture
        .state
        .set_project_enabled("p", true, now)
        .expect("enable");
    let cookie = fixture.sign_in().await;
    let csrf = fixture.csrf(&cookie).await;
    fixture
        .state
        .set_project_enabled("p", false, now)
        .expect("disabled meanwhile");
    let share = format!("csrf={csrf}&session={}&project=p&shared=p", session.0);
    let refused = fixture.post("/sharing", &cookie, &share).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
    assert!(
        refused.body.contains("is disabled on this desktop")
            && refused.body.contains("relay desktop project enable p"),
        "{}",
        refused.body
    );
    assert!(shared(&fixture.state, "p").is_empty(), "nothing shared");
    // Unsharing from a disabled project stays possible.
    fixture
        .state
        .share("p", &session.0.parse().expect("id"), now)
        .expect("shared");
    let unshare = format!("csrf={csrf}&session={}&project=p", session.0);
    assert_eq!(
        fixture.post("/sharing", &cookie, &unshare).await.status,
        StatusCode::SEE_OTHER
    );
    assert!(shared(&fixture.state, "p").is_empty());
}

#[tokio::test]
async fn tool_policies_are_set_from_one_select_per_tool() {
    let fixture = Fixture::new();
    let cookie = fixture.sign_in().await;
    let page = fixture.get("/policies", Some(&cookie)).await.body;
    for tool in ["fs.read", "fs.write", "fs.list"] {
        assert!(page.contains(&format!(">{tool}</label>")), "{page}");
    }
    let csrf = fixture.csrf(&cookie).await;
    let form = format!("csrf={csrf}&fs.read=allow&fs.write=ask&fs.list=deny&made.up=allow");
    assert_eq!(
        fixture.post("/policies", &cookie, &form).await.status,
        StatusCode::SEE_OTHER
    );
    let policy = fixture.state.policy().expect("policy");
    assert_eq!(policy.get("fs.read"), Policy::Allow);
    assert_eq!(policy.get("fs.write"), Policy::Ask);
    assert_eq!(policy.get("fs.list"), Policy::Deny);
    assert!(policy.iter().all(|(tool, _)| tool != "made.up"));
    let bad = format!("csrf={csrf}&fs.read=sometimes");
    assert_eq!(
        fixture.post("/policies", &cookie, &bad).await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        fixture.state.policy().expect("policy").get("fs.read"),
        Policy::Allow
    );
}

/// Runs the history holds as running: their approvals may be answered.
fn live_runs(fixture: &Fixture, executions: &[&str], now: Timestamp) {
    let session = crate::state::new_session_id();
    for execution in executions {
        let command = relay_protocol::CommandId::new_random();
        fixture
            .state
            .begin_execution(execution, &command, "p", &session, "slug", now)
            .expect("a live run");
    }
}

#[tokio::test]
async fn a_decision_for_a_run_that_ended_is_refused_and_not_recorded() {
    let fixture = Fixture::new();
    let now = Timestamp::from_unix_millis(5);
    fixture
        .state
        .ask("a3", "exec-ended", "fs.write", "{}", now)
        .expect("ask");
    let cookie = fixture.sign_in().await;
    let csrf = fixture.csrf(&cookie).await;
    let ended = format!("csrf={csrf}&id=a3&decision=approve");
    let refused = fixture.post("/approvals/decide", &cookie, &ended).await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert!(
        refused.body.contains("no longer running"),
        "{}",
        refused.body
    );
    assert_eq!(
        fixture.state.approval_status("a3").expect("status"),
        Some(ApprovalStatus::Pending),
        "nothing recorded for a run that is not live"
    );
}

#[tokio::test]
async fn approve_and_deny_answer_pending_approvals_once() {
    let fixture = Fixture::new();
    let now = Timestamp::from_unix_millis(5);
    live_runs(&fixture, &["exec-1", "exec-2"], now);
    fixture
        .state
        .ask("a1", "exec-1", "fs.write", r#"{"path":"out/note.md"}"#, now)
        .expect("ask");
    fixture
        .state
        .ask("a2", "exec-2", "fs.read", r#"{"path":"in.txt"}"#, now)
        .expect("ask");
    let cookie = fixture.sign_in().await;
    let page = fixture.get("/approvals", Some(&cookie)).await.body;
    assert!(
        page.contains("fs.write") && page.contains("out/note.md") && page.contains("exec-1"),
        "{page}"
    );
    assert!(
        page.contains(">Approve</button>") && page.contains(">Deny</button>"),
        "{page}"
    );
    let csrf = fixture.csrf(&cookie).await;
    let approve = format!("csrf={csrf}&id=a1&decision=approve");
    assert_eq!(
        fixture
            .post("/approvals/decide", &cookie, &approve)
            .await
            .status,
        StatusCode::SEE_OTHER
    );
    let deny = format!("csrf={csrf}&id=a2&decision=deny");
    assert_eq!(
        fixture
            .post("/approvals/decide", &cookie, &deny)
            .await
            .status,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        fixture.state.approval_status("a1").expect("status"),
        Some(ApprovalStatus::Approved)
    );
    assert_eq!(
        fixture.state.approval_status("a2").expect("status"),
        Some(ApprovalStatus::Denied)
    );
    // a1 was approved: denying it now is refused, and the approval stays.
    let deny_a1 = format!("csrf={csrf}&id=a1&decision=deny");
    let again = fixture.post("/approvals/decide", &cookie, &deny_a1).await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert_eq!(
        fixture.state.approval_status("a1").expect("status"),
        Some(ApprovalStatus::Approved)
    );
    let page = fixture.get("/approvals", Some(&cookie)).await.body;
    assert!(page.contains("No tool call is waiting"), "{page}");
}

#[tokio::test]
async fn a_run_shows_its_full_result_even_when_posted_truncated_and_its_timeline() {
    let fixture = Fixture::new();
    let command: relay_protocol::CommandId = uuid::Uuid::new_v4().to_string().parse().expect("id");
    let session = fixture.session("big");
    let session_id: relay_protocol::GraphSessionId = session.0.parse().expect("id");
    let now = Timestamp::from_unix_millis(10);
    fixture
        .state
        .begin_execution("exec-big", &command, "p", &session_id, "big", now)
        .expect("begin");
    let full = json!({"text": "x".repeat(120_000), "end": "the last words"});
    let completion = crate::bounding::completion(
        "exec-big",
        relay_protocol::CompletionStatus::Completed,
        Some(full.clone()),
        42,
        0.0,
        None,
    );
    assert!(completion.result_truncated);
    let trace = json!([
        {"elapsed_ms": 0, "depth": 0, "event": "agent_started", "handle": 1, "label": "writer", "max_tokens": null},
        {"elapsed_ms": 50, "depth": 0, "event": "agent_finished", "handle": 1, "label": "writer", "tokens": 42, "cost": 0.0},
        {"elapsed_ms": 60, "depth": 0, "event": "tool_called", "tool": "fs.write", "error": null}
    ]);
    fixture
        .state
        .finish_execution(&command, Some(&full), Some(&trace), &completion, now)
        .expect("finish");
    let cookie = fixture.sign_in().await;
    let list = fixture.get("/runs", Some(&cookie)).await.body;
    assert!(
        list.contains("/runs/exec-big") && list.contains("posted truncated"),
        "{list}"
    );
    assert!(
        list.contains("Newest run") && list.contains("the last words") && list.contains("<svg"),
        "the newest run is shown in full on the history page"
    );
    let run = fixture.get("/runs/exec-big", Some(&cookie)).await;
    assert_eq!(run.status, StatusCode::OK);
    assert!(run.body.contains("the last words") && run.body.contains(&"x".repeat(120_000)));
    assert!(run.body.contains("The full result is kept here"));
    assert!(run.body.contains("<svg") && run.body.contains("agent writer · 42 tokens"));
    assert!(run.body.contains("Tokens per agent"));
    assert_eq!(
        fixture.get("/runs/nope", Some(&cookie)).await.status,
        StatusCode::NOT_FOUND
    );
}
