//! OAuth through real clients: the MCP Python SDK and headless Chromium find `relay serve`'s
//! authorization server, sign in as the owner, consent, and reach `/mcp` with the tokens they
//! were given. No token is minted with `relay admin token create`: the connection the owner
//! allowed is the only access there is.
//!
//! The clients come from `.ci/run`: `GRAPHRELAY_PYTHON` names a python with the pinned SDK
//! (`scripts/python-env.sh`), and chromedriver is on `PATH`. Without them these tests say so
//! and pass, unless `GRAPHRELAY_REQUIRE_PYTHON_MCP=1` or `GRAPHRELAY_REQUIRE_CHROMIUM=1`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use relay_testkit::webdriver::{self, Chromium};
use serde_json::{Value, json};
use sha2::Digest;

use crate::cli::{plain, relay};

pub(crate) const OWNER: &str = "alice";
pub(crate) const PASSWORD: &str = "correct horse battery staple";
const PROJECT_NAME: &str = "Demo";
const SCOPES: [&str; 2] = ["osfoundry:read", "osfoundry:run"];
/// The Python client's name when it registers; the connection is listed under it.
const PYTHON_CLIENT_NAME: &str = "Python SDK test";
const BROWSER_CLIENT_NAME: &str = "Chromium test";
/// How long the Python client may take in all: it sleeps past a 2 s token once.
const PYTHON_TIMEOUT: Duration = Duration::from_secs(150);
/// The server log lines kept for a failure message.
const LOG_LINES_KEPT: usize = 200;

/// `Some(value)` of `variable`, or `None` after saying why the test is skipped; with
/// `require` set to `1`, the missing client fails the test instead.
pub(crate) fn client_or_skip<T>(found: Option<T>, require: &str, what: &str) -> Option<T> {
    if found.is_some() {
        return found;
    }
    assert!(
        std::env::var(require).as_deref() != Ok("1"),
        "{what} is missing and {require}=1 says it must be there (.ci/run sets it up)"
    );
    eprintln!("skipped: {what} is missing (.ci/run sets it up; {require}=1 makes this a failure)");
    None
}

fn python_or_skip() -> Option<PathBuf> {
    let python = std::env::var_os("GRAPHRELAY_PYTHON").map(PathBuf::from);
    client_or_skip(
        python,
        "GRAPHRELAY_REQUIRE_PYTHON_MCP",
        "GRAPHRELAY_PYTHON (a python with the MCP SDK, from scripts/python-env.sh)",
    )
}

fn chromium_or_skip() -> Option<PathBuf> {
    client_or_skip(
        webdriver::chromedriver(),
        "GRAPHRELAY_REQUIRE_CHROMIUM",
        "chromedriver (Debian's chromium-driver)",
    )
}

/// An owner with a password and one project, all through `relay admin`; returns the project id.
pub(crate) fn owner_with_project(db: &Path) -> String {
    let project = plain(&relay(
        db,
        &["project", "create", PROJECT_NAME, "--owner", OWNER],
    ));
    let mut child = Command::new(env!("CARGO_BIN_EXE_relay"))
        .arg("admin")
        .arg("--db")
        .arg(db)
        .args(["owner", "set-password", OWNER, "--password-stdin"])
        .env_remove("RELAY_DB")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run relay");
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "{PASSWORD}").expect("write the password");
    drop(stdin);
    let output = child.wait_with_output().expect("relay exits");
    assert!(
        output.status.success(),
        "owner set-password failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    project
}

/// `relay serve` on a loopback port, killed when dropped; its log is kept for failure messages.
pub(crate) struct Serve {
    child: std::process::Child,
    pub(crate) base: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Serve {
    pub(crate) async fn start(db: &Path, extra: &[&str]) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_relay"))
            .args(["serve", "--listen", "127.0.0.1:0", "--db"])
            .arg(db)
            .args(extra)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start relay serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (found, url) = tokio::sync::oneshot::channel();
        let kept = log.clone();
        // Reads the log to its end, so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut found = Some(found);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(start) = line.find("http://")
                    && let Some(end) = line[start..].find("/mcp")
                    && let Some(found) = found.take()
                {
                    let _ = found.send(line[start..start + end].to_owned());
                }
                let mut kept = kept.lock().expect("log");
                if kept.len() == LOG_LINES_KEPT {
                    kept.remove(0);
                }
                kept.push(line);
            }
        });
        let base = tokio::time::timeout(Duration::from_secs(60), url)
            .await
            .expect("relay serve logs its MCP URL within 60 s")
            .expect("relay serve logs its MCP URL");
        Serve { child, base, log }
    }

    pub(crate) fn log(&self) -> String {
        self.log.lock().expect("log").join("\n")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `relay admin connection list --project PROJECT --json`.
pub(crate) fn connections(db: &Path, project: &str) -> Vec<Value> {
    let listed = plain(&relay(
        db,
        &["connection", "list", "--project", project, "--json"],
    ));
    serde_json::from_str::<Value>(&listed)
        .expect("JSON")
        .as_array()
        .expect("an array of connections")
        .clone()
}

/// The one connection on `project`: named `client_name`, the owner's, with both scopes.
fn assert_one_connection(db: &Path, project: &str, client_name: &str) -> Value {
    let listed = connections(db, project);
    assert_eq!(listed.len(), 1, "one connection: {listed:?}");
    let connection = listed[0].clone();
    assert_eq!(connection["client_name"], client_name, "{connection}");
    assert_eq!(connection["project_id"], project, "{connection}");
    assert_eq!(connection["owner"], OWNER, "{connection}");
    assert!(connection["revoked_at"].is_null(), "{connection}");
    let mut scopes: Vec<&str> = connection["scopes"]
        .as_array()
        .expect("scopes")
        .iter()
        .map(|s| s.as_str().expect("a scope"))
        .collect();
    scopes.sort_unstable();
    assert_eq!(scopes, SCOPES, "{connection}");
    connection
}

/// The test minted no token with `relay admin token create`, and the clients got none any other
/// way: the project's admin-token list is still empty.
fn assert_no_admin_token(db: &Path, project: &str) {
    let listed = plain(&relay(
        db,
        &["--json", "token", "list", "--project", project],
    ));
    let tokens: Value = serde_json::from_str(&listed).expect("JSON");
    assert_eq!(tokens, json!([]), "no admin-minted token: {tokens}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_connects_through_oauth_and_refreshes() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let project = owner_with_project(&db);
    let serve = Serve::start(&db, &["--access-token-ttl", "2s"]).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/mcp_oauth_client.py");
    let run = tokio::process::Command::new(&python)
        .arg(&script)
        .args([
            "--base",
            &serve.base,
            "--owner",
            OWNER,
            "--password",
            PASSWORD,
        ])
        .args(["--project", &project, "--sleep-seconds", "4"])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(PYTHON_TIMEOUT, run)
        .await
        .expect("the Python client finishes within its timeout")
        .expect("run the Python client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the Python client failed:\n{}\n--- relay serve's log:\n{}",
        String::from_utf8_lossy(&output.stderr),
        serve.log()
    );
    let report: Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("one JSON line");
    assert_python_report(&report, &project);
    let connection = assert_one_connection(&db, &project, PYTHON_CLIENT_NAME);
    assert_eq!(connection["client_id"], report["client_id"], "{connection}");
    assert_no_admin_token(&db, &project);
    drop(serve);
}

/// What the Python client saw: the tools, two answered calls, one sign-in and one refresh.
fn assert_python_report(report: &Value, project: &str) {
    let tools = report["tools"].as_array().expect("tools");
    assert!(tools.contains(&json!("list_graph_sessions")), "{report}");
    for call in ["first_call", "second_call"] {
        assert_eq!(report[call]["project_id"], project, "{call}: {report}");
        assert!(report[call]["sessions"].is_array(), "{call}: {report}");
    }
    // Registered once, the owner asked once; the second call needed the refreshed token.
    assert_eq!(report["registrations"], 1, "{report}");
    assert_eq!(report["authorizations"], 1, "{report}");
    assert_eq!(
        report["token_grants"],
        json!(["authorization_code", "refresh_token"]),
        "{report}"
    );
    assert_eq!(report["refreshed"], true, "{report}");
    assert_eq!(report["token_sets"], 2, "{report}");
    assert_eq!(report["access_tokens_distinct"], true, "{report}");
    assert_eq!(report["refresh_tokens_rotated"], true, "{report}");
    assert_eq!(report["second_call_used_refreshed_token"], true, "{report}");
    // The consent page said who was asking.
    assert_eq!(report["consent_named_client"], true, "{report}");
    assert_eq!(report["consent_named_redirect_host"], true, "{report}");
    let granted = report["granted_scope"].as_str().expect("granted scope");
    for scope in SCOPES {
        assert!(granted.split(' ').any(|s| s == scope), "{report}");
    }
}

/// A page on a loopback port that shows a labelled form, and records the query of each request
/// to `/cb`; `/done` is where the form lands.
async fn loopback_pages() -> (String, tokio::sync::mpsc::Receiver<String>) {
    use axum::extract::RawQuery;
    use axum::response::Html;
    let (seen, queries) = tokio::sync::mpsc::channel::<String>(8);
    let form = Html(
        r#"<!doctype html><form method="get" action="/cb">
<label for="who">Owner name</label><input id="who" name="who">
<label for="secret">Password</label><input id="secret" name="secret" type="password">
<label for="pick">Project</label><select id="pick" name="pick">
<option value="p1">First</option><option value="p2">Bob's "second"</option></select>
<input type="checkbox" name="scope" value="read" id="scope-read" checked><label for="scope-read">Read</label>
<button type="button">Not this</button><button type="submit">Sign in</button></form>"#,
    );
    let app = axum::Router::new()
        .route("/form", axum::routing::get(move || async move { form }))
        .route(
            "/cb",
            axum::routing::get(move |RawQuery(query): RawQuery| async move {
                let _ = seen.send(query.unwrap_or_default()).await;
                Html("<!doctype html><p>You can close this window.</p>")
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, queries)
}

/// The WebDriver client fills fields found by their labels, picks an option by its text, and
/// clicks a button by its text, on a page served here; this needs no OAuth server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_fills_a_form_by_its_labels() {
    if chromium_or_skip().is_none() {
        return;
    }
    let (base, mut queries) = loopback_pages().await;
    let browser = Chromium::start().await.expect("start Chromium");
    browser.goto(&format!("{base}/form")).await.expect("load");
    browser
        .type_into("Owner name", "alice")
        .await
        .expect("name");
    browser
        .type_into("Password", "s3cret & more")
        .await
        .expect("password");
    browser
        .select("Project", "Bob's \"second\"")
        .await
        .expect("select");
    let read = browser.field("Read").await.expect("checkbox");
    assert!(browser.is_selected(&read).await.expect("selected"));
    assert_eq!(
        browser
            .value(&browser.field("Project").await.expect("select"))
            .await
            .expect("value"),
        "p2"
    );
    assert!(browser.field("Nothing like this").await.is_err());
    browser.click_button("Sign in").await.expect("click");
    let query = tokio::time::timeout(Duration::from_secs(30), queries.recv())
        .await
        .expect("the form is submitted")
        .expect("a query");
    assert_eq!(query, "who=alice&secret=s3cret+%26+more&pick=p2&scope=read");
    let landed = browser
        .wait_for_url(|url| url.contains("/cb?"))
        .await
        .expect("the browser follows the form");
    assert!(landed.starts_with(&base), "{landed}");
    assert!(
        browser
            .source()
            .await
            .expect("source")
            .contains("close this window")
    );
    browser.quit().await.expect("quit");
}

/// PKCE S256 (RFC 7636): a verifier of 64 unreserved characters and its challenge.
fn pkce() -> (String, String) {
    let verifier = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let digest = sha2::Sha256::digest(verifier.as_bytes());
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest);
    (verifier, challenge)
}

/// `pairs` as `application/x-www-form-urlencoded`.
fn form_body(pairs: &[(&str, &str)]) -> String {
    let mut url = reqwest::Url::parse("http://form.invalid/").expect("a URL");
    url.query_pairs_mut().extend_pairs(pairs);
    url.query().unwrap_or_default().to_owned()
}

/// The service's metadata (RFC 9728, RFC 8414) as the contract states it; returns the
/// authorization server's.
async fn discover(http: &reqwest::Client, base: &str) -> Value {
    let get = |path: &str| {
        let url = format!("{base}{path}");
        async move {
            let response = http.get(&url).send().await.expect("metadata request");
            assert_eq!(response.status().as_u16(), 200, "{url}");
            response.json::<Value>().await.expect("metadata JSON")
        }
    };
    let resource = get("/.well-known/oauth-protected-resource/mcp").await;
    assert_eq!(resource["resource"], format!("{base}/mcp"), "{resource}");
    assert_eq!(
        resource["authorization_servers"],
        json!([base]),
        "{resource}"
    );
    assert_eq!(resource["scopes_supported"], json!(SCOPES), "{resource}");
    let server = get("/.well-known/oauth-authorization-server").await;
    assert_eq!(
        server["authorization_endpoint"],
        format!("{base}/oauth/authorize"),
        "{server}"
    );
    assert_eq!(
        server["token_endpoint"],
        format!("{base}/oauth/token"),
        "{server}"
    );
    assert_eq!(
        server["registration_endpoint"],
        format!("{base}/oauth/register"),
        "{server}"
    );
    assert_eq!(
        server["code_challenge_methods_supported"],
        json!(["S256"]),
        "{server}"
    );
    server
}

/// Registers a public client (RFC 7591) that comes back to `redirect_uri`; returns its id.
async fn register(http: &reqwest::Client, endpoint: &str, redirect_uri: &str) -> String {
    let response = http
        .post(endpoint)
        .json(&json!({
            "client_name": BROWSER_CLIENT_NAME,
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }))
        .send()
        .await
        .expect("register");
    let status = response.status();
    let body: Value = response.json().await.expect("registration JSON");
    assert!(status.is_success(), "registration: {status}: {body}");
    body["client_id"].as_str().expect("client_id").to_owned()
}

/// In the browser, as the owner would: sign in by the labels, pick the project by its name,
/// keep both scopes, allow.
async fn sign_in_and_allow(browser: &Chromium, authorize: &str) {
    browser
        .goto(authorize)
        .await
        .expect("open the authorization URL");
    browser
        .type_into("Owner name", OWNER)
        .await
        .expect("owner name");
    browser
        .type_into("Password", PASSWORD)
        .await
        .expect("password");
    browser.click_button("Sign in").await.expect("sign in");
    // The consent page: it names the client and where it sends the owner back.
    if let Err(error) = browser.select("Project", PROJECT_NAME).await {
        let at = browser.url().await.unwrap_or_default();
        let page = browser.source().await.unwrap_or_default();
        panic!("no consent page after signing in: {error}\nat {at}:\n{page}");
    }
    let page = browser.source().await.expect("consent page");
    assert!(
        page.contains(BROWSER_CLIENT_NAME),
        "the client is named: {page}"
    );
    assert!(
        page.contains("127.0.0.1"),
        "the redirect host is named: {page}"
    );
    for label in ["Read graph sessions and runs", "Start and cancel runs"] {
        let scope = browser.field(label).await.expect("a scope checkbox");
        assert!(
            browser.is_selected(&scope).await.expect("checked"),
            "{label}"
        );
    }
    browser.click_button("Allow").await.expect("allow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_signs_in_and_consents_by_label() {
    if chromium_or_skip().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let project = owner_with_project(&db);
    let serve = Serve::start(&db, &[]).await;
    let listed = connect_through_browser(&serve.base, &project, &|| serve.log()).await;
    assert_eq!(listed["project_id"], project, "{listed}");
    assert!(listed["sessions"].is_array(), "{listed}");
    assert_one_connection(&db, &project, BROWSER_CLIENT_NAME);
    assert_no_admin_token(&db, &project);
    drop(serve);
}

/// A client registered over plain HTTP, the owner's part in Chromium, the code exchanged with
/// its PKCE verifier, and `list_graph_sessions` called with the access token; its answer.
/// `log` gives the server's log for a failure message.
async fn connect_through_browser(base: &str, project: &str, log: &dyn Fn() -> String) -> Value {
    let http = relay_testkit::http_client();
    let server = discover(&http, base).await;
    let (pages, mut callbacks) = loopback_pages().await;
    let redirect_uri = format!("{pages}/cb");
    let registration = server["registration_endpoint"].as_str().expect("endpoint");
    let client_id = register(&http, registration, &redirect_uri).await;
    let (verifier, challenge) = pkce();
    let state = uuid::Uuid::new_v4().to_string();
    let resource = format!("{base}/mcp");
    let mut authorize =
        reqwest::Url::parse(server["authorization_endpoint"].as_str().expect("endpoint"))
            .expect("authorization endpoint");
    authorize.query_pairs_mut().extend_pairs([
        ("response_type", "code"),
        ("client_id", &client_id),
        ("redirect_uri", &redirect_uri),
        ("scope", &SCOPES.join(" ")),
        ("state", &state),
        ("code_challenge", &challenge),
        ("code_challenge_method", "S256"),
        ("resource", &resource),
    ]);

    let browser = Chromium::start().await.expect("start Chromium");
    sign_in_and_allow(&browser, authorize.as_str()).await;
    let query = tokio::time::timeout(Duration::from_secs(30), callbacks.recv())
        .await
        .unwrap_or_else(|_| panic!("no callback within 30 s; the server's log:\n{}", log()))
        .expect("a callback");
    browser.quit().await.expect("quit");
    let param = query_param(&redirect_uri, &query);
    assert_eq!(param("state"), state, "the state comes back unchanged");
    let code = param("code");
    let tokens = exchange(
        &http,
        &server,
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", &redirect_uri),
            ("client_id", &client_id),
            ("code_verifier", &verifier),
            ("resource", &resource),
        ],
    )
    .await;
    let access = tokens["access_token"].as_str().expect("access_token");
    list_graph_sessions(&http, &resource, access, project).await
}

/// A lookup of the parameters of the callback's `query`, which must hold the one asked for.
fn query_param(redirect_uri: &str, query: &str) -> impl Fn(&str) -> String {
    let pairs: Vec<(String, String)> = reqwest::Url::parse(&format!("{redirect_uri}?{query}"))
        .expect("callback URL")
        .query_pairs()
        .into_owned()
        .collect();
    move |name| {
        pairs
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
            .unwrap_or_else(|| panic!("the callback has no {name}: {pairs:?}"))
    }
}

/// A token request (RFC 6749 §4.1.3) that must succeed; its JSON.
async fn exchange(http: &reqwest::Client, server: &Value, form: &[(&str, &str)]) -> Value {
    let response = http
        .post(server["token_endpoint"].as_str().expect("token endpoint"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(form))
        .send()
        .await
        .expect("token request");
    let status = response.status();
    let body: Value = response.json().await.expect("token JSON");
    assert_eq!(status.as_u16(), 200, "token request: {body}");
    assert_eq!(
        body["token_type"]
            .as_str()
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Some("bearer"),
        "{body}"
    );
    body
}

/// `tools/call list_graph_sessions` over the stateless protocol, as the service's own tests
/// send it; the result's structured content.
async fn list_graph_sessions(
    http: &reqwest::Client,
    mcp: &str,
    token: &str,
    project: &str,
) -> Value {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
    "name": "list_graph_sessions",
    "arguments": {"project_id": project, "limit": 10},
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "chromium-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    }}});
    let response = http
        .post(mcp)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "list_graph_sessions")
        .json(&call)
        .send()
        .await
        .expect("MCP request");
    let status = response.status();
    let text = response.text().await.expect("MCP body");
    assert_eq!(status.as_u16(), 200, "tools/call: {text}");
    // A JSON body, or one SSE event whose data is the JSON-RPC response.
    let json = text
        .lines()
        .find_map(|line| line.strip_prefix("data:"))
        .unwrap_or(&text);
    let answer: Value = serde_json::from_str(json.trim()).expect("JSON-RPC response");
    assert_ne!(answer["result"]["isError"], true, "{answer}");
    answer["result"]["structuredContent"].clone()
}

/// The status `/mcp` answers a `tools/list` with `token`.
async fn mcp_status(http: &reqwest::Client, base: &str, token: &str) -> u16 {
    http.post(format!("{base}/mcp"))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/list")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}}}),
        )
        .send()
        .await
        .expect("MCP answered")
        .status()
        .as_u16()
}

/// The project's desktop shares one session, through the desktop API; returns its id.
async fn share_one_session(db: &Path, base: &str, project: &str) -> String {
    let token = plain(&relay(
        db,
        &["token", "create", "--desktop", "--project", project],
    ));
    let session = format!("gs_{:032x}", 1);
    let response = relay_testkit::http_client()
        .post(format!("{base}/external-assistants/graph-relays/sync"))
        .bearer_auth(token)
        .json(&json!({"project_id": project, "sessions": [
            {"graph_session_id": session, "name": "g", "slug": "g", "status": "active"}]}))
        .send()
        .await
        .expect("sync");
    assert_eq!(response.status().as_u16(), 200, "the desktop synced");
    session
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_authorized_twice_is_one_connection_with_its_runs_and_keys() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let project = owner_with_project(&db);
    let serve = Serve::start(&db, &[]).await;
    let session = share_one_session(&db, &serve.base, &project).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/mcp_oauth_client.py");
    let run = tokio::process::Command::new(&python)
        .arg(&script)
        .args([
            "--base",
            &serve.base,
            "--owner",
            OWNER,
            "--password",
            PASSWORD,
        ])
        .args([
            "--project",
            &project,
            "--reauthorize-with-session",
            &session,
        ])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(PYTHON_TIMEOUT, run)
        .await
        .expect("the Python client finishes within its timeout")
        .expect("run the Python client");
    assert!(
        output.status.success(),
        "the Python client failed:\n{}\n--- relay serve's log:\n{}",
        String::from_utf8_lossy(&output.stderr),
        serve.log()
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("one JSON line");
    // One registration, two authorizations: the second grant reads the first one's run and
    // gets the same run back for the same key.
    assert_eq!(report["registrations"], 1, "{report}");
    assert_eq!(report["authorizations"], 2, "{report}");
    let command = &report["first_command"];
    assert_eq!(report["second_read"]["command_id"], *command, "{report}");
    assert_eq!(report["second_read"]["status"], "queued", "{report}");
    assert_eq!(report["second_ticket"]["command_id"], *command, "{report}");
    assert_eq!(report["second_ticket"]["replayed"], true, "{report}");

    let connection = assert_one_connection(&db, &project, PYTHON_CLIENT_NAME);
    assert_eq!(connection["grants"], 2, "{connection}");
    let id = connection["id"].as_str().expect("connection id");
    plain(&relay(&db, &["connection", "revoke", id]));
    let http = relay_testkit::http_client();
    for token in report["access_tokens"].as_array().expect("tokens") {
        let token = token.as_str().expect("a token");
        assert_eq!(mcp_status(&http, &serve.base, token).await, 401, "{token}");
    }
    drop(serve);
}
