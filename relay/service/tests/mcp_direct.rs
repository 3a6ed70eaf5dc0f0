//! The direct path of `/mcp` (plain stateless calls of read tools, answered without rmcp's
//! per-request service) answers exactly as rmcp does: every request here is sent twice, once
//! as a current client sends it (the direct path may take it) and once with a
//! `Content-Type: application/json; charset=utf-8` or a weighted `Accept`, which rmcp reads the
//! same but the direct path leaves to rmcp. Status, headers and body must be equal byte for
//! byte, and the direct path's counter says which requests it answered.

use crate::common;

use common::{TestService, mcp_client};
use serde_json::{Value, json};

/// The `_meta` of a current-protocol request.
fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "direct-test", "version": "1.0.0"},
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

/// How a request is sent.
#[derive(Clone, Copy, Debug)]
enum Form {
    /// As a current client sends it.
    Plain,
    /// The same with a `charset` parameter on its `Content-Type`.
    Charset,
    /// The same with the media types weighted in its `Accept`.
    Weighted,
}

/// One request: its body and the headers besides the media types (`None` leaves one out).
struct Case {
    what: &'static str,
    body: String,
    headers: Vec<(&'static str, Option<String>)>,
    /// Whether the direct path answers its plain form.
    direct: bool,
}

impl Case {
    /// A call of `tool` with `params` (into which `_meta` goes unless it has one), with the
    /// standard headers.
    fn call(what: &'static str, tool: &str, params: Value, direct: bool) -> Case {
        let mut params = params;
        if let Some(object) = params.as_object_mut() {
            object.insert("name".into(), json!(tool));
            object.entry("_meta").or_insert_with(meta);
        }
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
        Case {
            what,
            body: body.to_string(),
            headers: standard_headers(tool),
            direct,
        }
    }

    fn with_header(mut self, name: &'static str, value: Option<&str>) -> Case {
        self.headers.retain(|(known, _)| *known != name);
        self.headers.push((name, value.map(str::to_owned)));
        self
    }

    fn with_body(mut self, body: &str) -> Case {
        self.body = body.to_owned();
        self
    }
}

fn standard_headers(tool: &str) -> Vec<(&'static str, Option<String>)> {
    vec![
        ("mcp-protocol-version", Some("2026-07-28".to_owned())),
        ("mcp-method", Some("tools/call".to_owned())),
        ("mcp-name", Some(tool.to_owned())),
    ]
}

/// An answer as compared: status, headers but the per-request ones, body.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

async fn send(service: &TestService, token: &str, case: &Case, form: Form) -> Answer {
    let (content_type, accept) = match form {
        Form::Plain => ("application/json", "application/json, text/event-stream"),
        Form::Charset => (
            "application/json; charset=utf-8",
            "application/json, text/event-stream",
        ),
        Form::Weighted => (
            "application/json",
            "text/event-stream;q=0.9, application/json;q=1",
        ),
    };
    let mut request = common::http_client()
        .post(service.mcp_url())
        .bearer_auth(token)
        .header("content-type", content_type)
        .header("accept", accept);
    for (name, value) in &case.headers {
        if let Some(value) = value {
            request = request.header(*name, value);
        }
    }
    let response = request
        .body(case.body.clone())
        .send()
        .await
        .expect("answer");
    let status = response.status().as_u16();
    let mut headers: Vec<(String, String)> = response
        .headers()
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "date" | "x-request-id"))
        .map(|(name, value)| {
            (
                name.to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    headers.sort();
    let body = response.text().await.expect("body");
    Answer {
        status,
        headers,
        body,
    }
}

/// A service with a project whose desktop shares two graphs, a run queued, and the full
/// agent's token; the run's command id.
async fn service_with_a_run() -> (TestService, String, String) {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let token = service.full_agent(&project).await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1, 2]).await;
    let client = mcp_client(&service.mcp_url(), &token, common::Era::Current).await;
    let command = common::queue(&client, "direct-run-1").await;
    (service, token, command)
}

/// Sends `case` plainly and in the other two forms; the answers must be equal, and the
/// direct path must have answered the plain one exactly when the case says so.
async fn compare(service: &TestService, token: &str, case: &Case) {
    let before = service.app.metrics.tools.direct();
    let plain = send(service, token, case, Form::Plain).await;
    let taken = service.app.metrics.tools.direct() - before;
    assert_eq!(
        taken,
        u64::from(case.direct),
        "{}: the direct path answered {taken} of 1 (expected {})",
        case.what,
        case.direct
    );
    for form in [Form::Charset, Form::Weighted] {
        let before = service.app.metrics.tools.direct();
        let other = send(service, token, case, form).await;
        assert_eq!(
            service.app.metrics.tools.direct(),
            before,
            "{}: the {form:?} form must go to rmcp",
            case.what
        );
        assert_eq!(
            plain, other,
            "{}: plain and {form:?} answers differ",
            case.what
        );
    }
}

/// Calls the direct path answers: each read tool, with good and bad arguments.
fn read_calls(command: &str) -> Vec<Case> {
    let calls = [
        ("a listing", "list_graph_sessions", json!({"arguments": {}})),
        (
            "a listing of one",
            "list_graph_sessions",
            json!({"arguments": {"limit": 1}}),
        ),
        ("no arguments at all", "list_graph_sessions", json!({})),
        (
            "a limit out of range",
            "list_graph_sessions",
            json!({"arguments": {"limit": 0}}),
        ),
        (
            "an unknown argument",
            "list_graph_sessions",
            json!({"arguments": {"bogus": true}}),
        ),
        (
            "another project's id",
            "list_graph_sessions",
            json!({"arguments": {"project_id": "prj_somebody_else"}}),
        ),
        (
            "a run",
            "get_graph_run",
            json!({"arguments": {"command_id": command}}),
        ),
        (
            "a run that does not exist",
            "get_graph_run",
            json!({"arguments": {"command_id": "cmd_00000000000000000000000000000000"}}),
        ),
        (
            "a run without its id",
            "get_graph_run",
            json!({"arguments": {}}),
        ),
        (
            "chat tasks of no link",
            "list_linked_chat_tasks",
            json!({"arguments": {}}),
        ),
        (
            "a chat task that does not exist",
            "get_linked_chat_task",
            json!({"arguments": {"chat_link_id": "cl_none", "task_id": "ct_none"}}),
        ),
        (
            "more keys in _meta",
            "list_graph_sessions",
            json!({"arguments": {}, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "x", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {"roots": {}},
                "example.com/trace": "abc"
            }}),
        ),
    ];
    calls
        .into_iter()
        .map(|(what, tool, params)| Case::call(what, tool, params, true))
        .collect()
}

/// Read calls in bodies of their own: a string id, a lone surrogate (mended first).
fn read_bodies() -> Vec<Case> {
    let string_id = json!({"jsonrpc": "2.0", "id": "req-é", "method": "tools/call",
        "params": {"name": "list_graph_sessions", "arguments": {}, "_meta": meta()}});
    let surrogate = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"get_graph_run","arguments":{{"command_id":"cmd_\ud83d"}},"_meta":{}}}}}"#,
        meta()
    );
    vec![
        Case::call("a string id", "list_graph_sessions", json!({}), true)
            .with_body(&string_id.to_string()),
        Case::call("a lone surrogate", "get_graph_run", json!({}), true).with_body(&surrogate),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_calls_answer_as_rmcp_does_byte_for_byte() {
    let (service, token, command) = service_with_a_run().await;
    for case in read_calls(&command).iter().chain(&read_bodies()) {
        compare(&service, &token, case).await;
    }
    service.stop().await;
}

/// A plain listing but for what `change` does to it; rmcp answers it.
fn listing_but(what: &'static str, change: impl FnOnce(Case) -> Case) -> Case {
    let mut case = change(Case::call(
        what,
        "list_graph_sessions",
        json!({"arguments": {}}),
        false,
    ));
    case.what = what;
    case
}

/// Calls whose `_meta` or tool keeps them from the direct path.
fn other_calls() -> Vec<Case> {
    let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let meta_with = |key: &str, value: Value| {
        let mut meta = meta();
        meta[key] = value;
        meta
    };
    let calls = [
        (
            "a progress token",
            "list_graph_sessions",
            json!({"_meta": meta_with("progressToken", json!("p-1"))}),
        ),
        (
            "the tasks extension",
            "list_graph_sessions",
            json!({"_meta": meta_with("io.modelcontextprotocol/clientCapabilities", tasks)}),
        ),
        (
            "no client capabilities",
            "list_graph_sessions",
            json!({"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "x", "version": "1"}
            }}),
        ),
        (
            "a tool that writes",
            "cancel_graph_run",
            json!({"arguments": {"command_id": "cmd_00000000000000000000000000000000"}}),
        ),
        ("an unknown tool", "no_such_tool", json!({"arguments": {}})),
        (
            "arguments that are not an object",
            "list_graph_sessions",
            json!({"arguments": [1]}),
        ),
    ];
    calls
        .into_iter()
        .map(|(what, tool, params)| Case::call(what, tool, params, false))
        .collect()
}

/// Listings whose headers or body keep them from the direct path.
fn other_forms() -> Vec<Case> {
    let unknown_version = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
    "params": {"name": "list_graph_sessions", "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2099-01-01",
        "io.modelcontextprotocol/clientInfo": {"name": "x", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    }}});
    let notification = json!({"jsonrpc": "2.0", "method": "tools/call",
        "params": {"name": "list_graph_sessions", "_meta": meta()}});
    let old_jsonrpc = json!({"jsonrpc": "1.0", "id": 1, "method": "tools/call",
        "params": {"name": "list_graph_sessions", "_meta": meta()}});
    let base64 = "=?base64?bGlzdF9ncmFwaF9zZXNzaW9ucw==?=";
    vec![
        listing_but("Mcp-Name not the body's", |c| {
            c.with_header("mcp-name", Some("get_graph_run"))
        }),
        listing_but("no Mcp-Name", |c| c.with_header("mcp-name", None)),
        listing_but("Mcp-Name in Base64", |c| {
            c.with_header("mcp-name", Some(base64))
        }),
        listing_but("Mcp-Method not tools/call", |c| {
            c.with_header("mcp-method", Some("tools/list"))
        }),
        listing_but("no protocol version header", |c| {
            c.with_header("mcp-protocol-version", None)
        }),
        listing_but("another protocol version header", |c| {
            c.with_header("mcp-protocol-version", Some("2025-11-25"))
        }),
        listing_but("an Mcp-Param header", |c| {
            c.with_header("mcp-param-limit", Some("1"))
        }),
        listing_but("a session id", |c| {
            c.with_header("mcp-session-id", Some("not-a-session"))
        }),
        listing_but("a protocol version rmcp does not know", |c| {
            c.with_header("mcp-protocol-version", Some("2099-01-01"))
                .with_body(&unknown_version.to_string())
        }),
        listing_but("a notification (no id)", |c| {
            c.with_body(&notification.to_string())
        }),
        listing_but("jsonrpc 1.0", |c| c.with_body(&old_jsonrpc.to_string())),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_but_the_plain_case_is_left_to_rmcp() {
    let (service, token, _) = service_with_a_run().await;
    for case in other_calls().iter().chain(&other_forms()) {
        compare(&service, &token, case).await;
    }
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_direct_path_keeps_the_gates_refusals() {
    // A token without the read scope is refused by the gate before either path, with its
    // challenge.
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let (run_only, _) = service.agent(&project, &["osfoundry:run"]).await;
    let case = Case::call("", "list_graph_sessions", json!({"arguments": {}}), false);
    let answer = send(&service, &run_only, &case, Form::Plain).await;
    assert_eq!(answer.status, 403, "{answer:?}");
    assert!(
        answer
            .headers
            .iter()
            .any(|(name, value)| name == "www-authenticate" && value.contains("insufficient_scope")),
        "{answer:?}"
    );
    assert_eq!(service.app.metrics.tools.direct(), 0);
    // A forged token gets the gate's 401 whichever form it is in.
    let answer = send(&service, "forged-token", &case, Form::Plain).await;
    assert_eq!(answer.status, 401, "{answer:?}");
    service.stop().await;
}
