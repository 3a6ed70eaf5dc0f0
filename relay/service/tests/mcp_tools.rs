//! A real MCP client (rmcp) sees exactly the nine tools (four graph tools, five linked chat
//! task tools) with their contracts, and drives a run through run → get → cancel, in both
//! protocol eras.

use crate::common;

use common::chat::ChatService;
use common::{Desktop, Era, McpClient, TestService, call, err, gs, mcp_client, ok, run_args, text};
use relay_service::runs::RUN_NOT_FOUND;
use serde_json::{Value, json};

/// The nine tools with their contracts, in the order they are listed.
fn expected_tools() -> Value {
    let mut tools = graph_tools();
    tools.extend(chat_task_read_tools());
    tools.extend(chat_task_write_tools());
    Value::Array(tools)
}

/// The four graph tools: list, run, get and cancel.
fn graph_tools() -> Vec<Value> {
    vec![
        json!({
            "name": "list_graph_sessions",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "project_id": {"type": "string"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50}
                },
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
            "securitySchemes": [{"type": "oauth2", "scopes": ["osfoundry:read"]}]
        }),
        json!({
            "name": "run_graph_session",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "graph_session_id": {"type": "string"},
                    "arguments": {"type": "object", "additionalProperties": true},
                    "idempotency_key": {"type": "string", "minLength": 8, "maxLength": 128},
                    "max_tokens": {"type": "integer", "minimum": 1}
                },
                "required": ["graph_session_id", "idempotency_key"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": true},
            "securitySchemes": [{"type": "oauth2", "scopes": ["osfoundry:run"]}]
        }),
        json!({
            "name": "get_graph_run",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "command_id": {"type": "string"},
                    "wait_seconds": {"type": "integer", "minimum": 0, "maximum": 45}
                },
                "required": ["command_id"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
            "securitySchemes": [{"type": "oauth2", "scopes": ["osfoundry:read"]}]
        }),
        json!({
            "name": "cancel_graph_run",
            "inputSchema": {
                "type": "object",
                "properties": {"command_id": {"type": "string"}},
                "required": ["command_id"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true, "openWorldHint": false},
            "securitySchemes": [{"type": "oauth2", "scopes": ["osfoundry:run"]}]
        }),
    ]
}

/// The two read-only linked chat task tools: list and get.
fn chat_task_read_tools() -> Vec<Value> {
    vec![
        json!({
            "name": "list_linked_chat_tasks",
            "inputSchema": {
                "type": "object",
                "properties": {"chat_link_id": {"type": "string"}},
                "required": ["chat_link_id"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
            "securitySchemes": [{"type": "oauth2", "scopes": ["osfoundry:read"]}]
        }),
        json!({
            "name": "get_linked_chat_task",
            "inputSchema": {
                "type": "object",
                "properties": {"chat_link_id": {"type": "string"}, "task_id": {"type": "string"}},
                "required": ["chat_link_id", "task_id"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
            "securitySchemes": [{"type": "oauth2", "scopes": ["osfoundry:read"]}]
        }),
    ]
}

/// The three linked chat task tools that change a task: claim, submit and upload.
fn chat_task_write_tools() -> Vec<Value> {
    vec![
        json!({
            "name": "claim_linked_chat_task",
            "inputSchema": {
                "type": "object",
                "properties": {"chat_link_id": {"type": "string"}, "task_id": {"type": "string"}},
                "required": ["chat_link_id", "task_id"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
            "securitySchemes": [{"type": "oauth2", "scopes": ["osfoundry:run"]}]
        }),
        json!({
            "name": "submit_linked_chat_result",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "chat_link_id": {"type": "string"},
                    "task_id": {"type": "string"},
                    "claim_id": {"type": "string"},
                    "status": {"type": "string", "enum": ["completed", "failed"]},
                    "result": {"type": "string", "maxLength": 100000}
                },
                "required": ["chat_link_id", "task_id", "claim_id", "status", "result"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
            "securitySchemes": [{"type": "oauth2", "scopes": ["osfoundry:run"]}]
        }),
        json!({
            "name": "upload_linked_chat_artifact",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "chat_link_id": {"type": "string"},
                    "task_id": {"type": "string"},
                    "claim_id": {"type": "string"},
                    "artifact_id": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[A-Za-z0-9._:-]+$"},
                    "name": {"type": "string", "minLength": 1, "maxLength": 200},
                    "mime": {"type": "string", "maxLength": 100},
                    "content": {"type": "string"}
                },
                "required": ["chat_link_id", "task_id", "claim_id", "artifact_id", "name", "mime", "content"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
            "securitySchemes": [{"type": "oauth2", "scopes": ["osfoundry:run"]}]
        }),
    ]
}

/// What each chat task tool's description must warn about, so a model does not retry in a loop.
const REJECTIONS: [(&str, &[&str]); 5] = [
    (
        "list_linked_chat_tasks",
        &["Rejected", "do not poll in a loop"],
    ),
    (
        "get_linked_chat_task",
        &["Rejected", "task not found on this chat link"],
    ),
    (
        "claim_linked_chat_task",
        &["Rejected", "not claimable", "replayed: true"],
    ),
    (
        "submit_linked_chat_result",
        &[
            "Rejected",
            "rejected: stale claim, task was re-claimed",
            "rejected: task is cancelled",
            "a cancelled task cannot be completed",
            "replayed: true",
        ],
    ),
    (
        "upload_linked_chat_artifact",
        &[
            "Rejected",
            "different content",
            "stale claim",
            "replayed: true",
        ],
    ),
];

/// The tool's title, and for the graph tools the `outputSchema` derived from the answer types
/// (`common::call` checks every answer against it).
fn check_title_and_output_schema(tool: &Value) {
    let name = tool["name"].as_str().unwrap();
    let title = tool["title"].as_str().unwrap_or_default();
    let declared = relay_service::http::mcp::standard_tools()
        .definition(name)
        .and_then(|tool| tool.title.clone());
    assert_eq!(Some(title), declared.as_deref());
    assert!(title.len() > 10, "{name} has a title");
    {
        // Derived from the answer types; `common::call` checks every answer against it.
        assert_eq!(tool["outputSchema"]["type"], "object", "{name}");
        let schema = &tool["outputSchema"];
        let wrong = json!({"command_id": 7});
        assert!(
            common::schema::check(schema, &wrong).is_err(),
            "{name}: {schema}"
        );
    }
    if name == "get_graph_run" {
        // Who or what ended a run: an optional field, one of the cause words.
        let schema = &tool["outputSchema"];
        let words: Vec<&str> = relay_protocol::EndCause::ALL
            .iter()
            .map(|cause| cause.as_str())
            .collect();
        assert_eq!(schema["properties"]["end_cause"]["enum"], json!(words));
        let required = schema["required"].as_array().expect("required");
        assert!(!required.contains(&json!("end_cause")), "{schema}");
    }
}

/// `schema` without `$schema`, `description` and `default`: the constraints alone.
fn without_notes(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| !matches!(key.as_str(), "$schema" | "description" | "default"))
                .map(|(key, value)| (key.clone(), without_notes(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_notes).collect()),
        other => other.clone(),
    }
}

async fn check_listing(era: Era) {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    service.link_chat(&project, "claude").await; // the chat-task tools need a chat link
    let token = service.full_agent(&project).await;
    let client = mcp_client(&service.mcp_url(), &token, era).await;
    let tools = client.list_all_tools().await.expect("list tools");
    let listed = serde_json::to_value(&tools).expect("tools as JSON");
    let expected = expected_tools();
    assert_eq!(tools.len(), 9, "exactly nine tools");
    for (tool, want) in listed
        .as_array()
        .unwrap()
        .iter()
        .zip(expected.as_array().unwrap())
    {
        assert_eq!(tool["name"], want["name"]);
        check_title_and_output_schema(tool);
        // Derived from the input types: draft 2020-12, with a description per argument.
        assert_eq!(
            tool["inputSchema"]["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        assert_eq!(
            without_notes(&tool["inputSchema"]),
            want["inputSchema"],
            "{}",
            want["name"]
        );
        assert_eq!(tool["annotations"], want["annotations"], "{}", want["name"]);
        // rmcp's client keeps `_meta`; the top-level copy is checked on the raw wire below.
        assert_eq!(tool["_meta"]["securitySchemes"], want["securitySchemes"]);
    }
    let run = &listed[1]["description"];
    let run = run.as_str().unwrap();
    assert!(run.starts_with(
        "Queue a Graph run on the owner's online desktop in a connected project. \
         Retrieve progress and result with get_graph_run. \
         The desktop can go offline, and local tool approvals still apply."
    ));
    assert!(run.contains("Rejected"));
    let description = |tool: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == tool)
            .unwrap()["description"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    for tool in ["get_graph_run", "cancel_graph_run"] {
        assert!(description(tool).contains(RUN_NOT_FOUND), "{tool}");
    }
    for (tool, warnings) in REJECTIONS {
        let description = description(tool);
        for warning in warnings {
            assert!(
                description.contains(warning),
                "{tool} must mention {warning:?}"
            );
        }
    }
    client.cancel().await.expect("close client");
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_nine_tools_in_the_current_era() {
    check_listing(Era::Current).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_nine_tools_in_the_2025_session_era() {
    check_listing(Era::Sessions2025).await;
}

async fn raw_mcp(
    service: &TestService,
    token: &str,
    body: Value,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut request = common::http_client()
        .post(service.mcp_url())
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let text = response.text().await.expect("body");
    let value = if content_type.starts_with("text/event-stream") {
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|message| message.get("result").is_some() || message.get("error").is_some())
            .unwrap_or(Value::Null)
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, headers, value)
}

fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

/// `tools/list` in the current era (stateless, per-request metadata), answered 200.
async fn list_tools_now(service: &TestService, token: &str) -> Value {
    let (status, _, body) = raw_mcp(
        service,
        token,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": modern_meta()}}),
        &[("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/list")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_carries_top_level_security_schemes_on_the_wire() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    service.link_chat(&project, "claude").await;
    let token = service.full_agent(&project).await;
    let expected = expected_tools();

    // Current era: a stateless request with per-request metadata, answered as JSON.
    let body = list_tools_now(&service, &token).await;
    let tools = body["result"]["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 9);
    for (tool, want) in tools.iter().zip(expected.as_array().unwrap()) {
        assert_eq!(
            tool["securitySchemes"], want["securitySchemes"],
            "{}",
            want["name"]
        );
        assert_eq!(tool["_meta"]["securitySchemes"], want["securitySchemes"]);
    }

    // 2025 era: initialize, then tools/list in the session, answered as SSE.
    let (status, headers, _) = raw_mcp(
        &service,
        &token,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        &[],
    )
    .await;
    assert_eq!(status, 200);
    let session = headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a 2025 initialize opens a session")
        .to_owned();
    let session_header = [
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    let (status, _, _) = raw_mcp(
        &service,
        &token,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        &session_header,
    )
    .await;
    assert_eq!(status, 202);
    let (status, _, body) = raw_mcp(
        &service,
        &token,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        &session_header,
    )
    .await;
    assert_eq!(status, 200);
    let tools = body["result"]["tools"]
        .as_array()
        .expect("tools in the session");
    for (tool, want) in tools.iter().zip(expected.as_array().unwrap()) {
        assert_eq!(
            tool["securitySchemes"], want["securitySchemes"],
            "{}",
            want["name"]
        );
    }
    service.stop().await;
}

async fn run_get_cancel(era: Era) {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let token = service.full_agent(&project).await;
    let desktop = service.desktop(&project).await;
    let client = mcp_client(&service.mcp_url(), &token, era).await;

    lists_only_what_the_owner_shared(&client, &desktop, &project).await;

    let result = call(
        &client,
        "run_graph_session",
        run_args(1, "first-run-key", json!({"ticket": "T-7"})),
    )
    .await;
    assert!(
        text(&result).contains("get_graph_run"),
        "the text copy names the next step"
    );
    let ticket = ok(&result);
    assert_eq!(ticket["status"], "queued");
    assert_eq!(ticket["poll_after_seconds"], 20);
    let id = ticket["command_id"].as_str().unwrap().to_owned();
    assert!(uuid::Uuid::parse_str(&id).is_ok());

    let run = ok(&call(&client, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["status"], "queued");
    assert_eq!(run["created_at"], "2026-11-08T09:30:00.000Z");
    assert_eq!(run["poll_after_seconds"], 20);
    assert_eq!(run["result_truncated"], false);
    // What a queued run does not have yet is left out rather than null, so every field keeps
    // one type (portable schemas, Inspector --strict).
    for key in [
        "started_at",
        "finished_at",
        "result",
        "total_tokens",
        "reported_cost",
        "error",
    ] {
        assert!(run.get(key).is_none(), "a queued run has no `{key}`: {run}");
    }

    let commands = desktop.sync(&project, &[1, 2]).await;
    assert_eq!(commands.len(), 1);
    assert_eq!(commands[0]["command_id"], json!(id));
    assert_eq!(commands[0]["slug"], "graph-1");
    assert_eq!(commands[0]["arguments"], json!({"ticket": "T-7"}));
    assert_eq!(desktop.started(&id, "exec-1").await.0, 200);
    let run = ok(&call(&client, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["status"], "running");

    cancel_the_running_run(&client, &desktop, &id).await;

    let unknown = call(
        &client,
        "get_graph_run",
        json!({"command_id": uuid::Uuid::new_v4().to_string()}),
    )
    .await;
    assert_eq!(err(&unknown), RUN_NOT_FOUND);
    client.cancel().await.expect("close client");
    service.stop().await;
}

/// Before the owner shares a session the list is empty; after, `limit` caps it.
async fn lists_only_what_the_owner_shared(client: &McpClient, desktop: &Desktop, project: &str) {
    let listed = ok(&call(
        client,
        "list_graph_sessions",
        json!({"project_id": project}),
    )
    .await);
    assert_eq!(
        listed["sessions"],
        json!([]),
        "empty until the owner shares a session"
    );
    assert_eq!(listed["project_id"], json!(project));

    desktop.sync(project, &[1, 2]).await;
    let listed = ok(&call(
        client,
        "list_graph_sessions",
        json!({"project_id": project, "limit": 1}),
    )
    .await);
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 1);
    assert_eq!(listed["sessions"][0]["graph_session_id"], json!(gs(1)));
}

/// A cancel of a running run is a request the desktop sees and answers; a second cancel of
/// the finished run says it already finished.
async fn cancel_the_running_run(client: &McpClient, desktop: &Desktop, id: &str) {
    let cancelled = ok(&call(client, "cancel_graph_run", json!({"command_id": id})).await);
    assert_eq!(cancelled["status"], "running");
    assert_eq!(cancelled["cancel_requested"], true);
    let (_, control) = desktop.control(id).await;
    assert_eq!(control["cancel_requested"], true);
    let (status, _) = desktop
        .complete(id, &json!({"execution_id": "exec-1", "status": "cancelled", "total_tokens": 12, "reported_cost": 0.01}))
        .await;
    assert_eq!(status, 200);
    let run = ok(&call(client, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["status"], "cancelled");
    assert_eq!(run["total_tokens"], 12);
    assert_eq!(run["poll_after_seconds"], Value::Null);

    let again = ok(&call(client, "cancel_graph_run", json!({"command_id": id})).await);
    assert_eq!(again["already_finished"], true);
    assert!(
        text(&call(client, "cancel_graph_run", json!({"command_id": id})).await)
            .contains("already finished")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drives_run_get_cancel_in_the_current_era() {
    run_get_cancel(Era::Current).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drives_run_get_cancel_in_a_2025_session() {
    run_get_cancel(Era::Sessions2025).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_an_emoji_from_a_js_client_arrives_as_a_replacement_character() {
    // `JSON.stringify("cut 😀".slice(0, 5))` writes the lone surrogate as `\ud83d`; serde
    // refuses it, so the whole call used to fail as a parse error.
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let token = service.full_agent(&project).await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let body = format!(
        r#"{{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {{
            "name": "run_graph_session",
            "arguments": {{"graph_session_id": "{}", "idempotency_key": "half-an-emoji-\ud83d",
                "arguments": {{"note": "cut \ud83d", "upper": "\uDE00 x", "whole": "\ud83d\ude00", "escaped": "\\ud83d"}}}},
            "_meta": {}}}}}"#,
        common::gs(1),
        modern_meta()
    );
    let response = common::http_client()
        .post(service.mcp_url())
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "run_graph_session")
        .body(body)
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    let answer = response.text().await.expect("an answer");
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).expect("a JSON-RPC answer");
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    let queued = desktop.sync(&project, &[1]).await;
    assert_eq!(queued.len(), 1, "{queued:?}");
    assert_eq!(
        queued[0]["arguments"],
        json!({"note": "cut \u{fffd}", "upper": "\u{fffd} x", "whole": "😀", "escaped": "\\ud83d"})
    );
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_is_not_json_gets_a_json_rpc_parse_error() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let token = service.full_agent(&project).await;
    for body in ["{not json", "", "[1, 2"] {
        let response = common::http_client()
            .post(service.mcp_url())
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
            .send()
            .await
            .expect("request");
        assert_eq!(response.status().as_u16(), 400, "{body:?}");
        let answer: Value = response.json().await.expect("a JSON-RPC answer");
        assert_eq!(answer["error"]["code"], -32700, "{answer}");
        assert_eq!(answer["id"], Value::Null);
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("not JSON")),
            "{answer}"
        );
    }
    // The service is unaffected: a well-formed request right after is answered.
    let body = list_tools_now(&service, &token).await;
    // No chat link: the four graph tools.
    assert_eq!(body["result"]["tools"].as_array().map(Vec::len), Some(4));
}

/// Opens a 2025-era session and returns its id.
async fn open_session(service: &TestService, token: &str) -> String {
    let (status, headers, body) = raw_mcp(
        service,
        token,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        &[],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a 2025 initialize opens a session")
        .to_owned()
}

async fn delete_session(service: &TestService, token: &str, session: &str) -> u16 {
    common::http_client()
        .delete(service.mcp_url())
        .bearer_auth(token)
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .expect("request")
        .status()
        .as_u16()
}

/// `tools/list` in a 2025-era session: the status and the answer.
async fn list_in_session(service: &TestService, token: &str, session: &str) -> (u16, Value) {
    let (status, _, body) = raw_mcp(
        service,
        token,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        &[
            ("mcp-session-id", session),
            ("mcp-protocol-version", "2025-11-25"),
        ],
    )
    .await;
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_session_answers_no_content_once_and_not_found_after() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let token = service.full_agent(&project).await;
    let session = open_session(&service, &token).await;
    let other = open_session(&service, &token).await;
    // 204, as the official SDKs expect (the Python SDK logs a 202 as a failed termination).
    assert_eq!(delete_session(&service, &token, &session).await, 204);
    // The ended session is gone: a second end and a request in it are both 404, so a client
    // knows to start a new one.
    assert_eq!(delete_session(&service, &token, &session).await, 404);
    let (status, _) = list_in_session(&service, &token, &session).await;
    assert_eq!(status, 404);
    // An id that never existed, and no token at all, change nothing.
    assert_eq!(
        delete_session(&service, &token, "no-such-session").await,
        404
    );
    let anonymous = common::http_client()
        .delete(service.mcp_url())
        .header("mcp-session-id", other.as_str())
        .send()
        .await
        .expect("request");
    assert_eq!(anonymous.status().as_u16(), 401);
    // The other session still works.
    let (status, body) = list_in_session(&service, &token, &other).await;
    assert_eq!(status, 200, "{body}");
    // No chat link: the four graph tools.
    assert_eq!(body["result"]["tools"].as_array().map(Vec::len), Some(4));
    service.stop().await;
}
