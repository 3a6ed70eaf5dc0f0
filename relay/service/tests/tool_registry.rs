//! A tool is declared in one place: a test-only tool, added to the registry as one type, is
//! listed in `tools/list` with its schemas, annotations and `securitySchemes`, is dispatched by
//! `tools/call` (its arguments decoded strictly), and is refused to a token without its scope,
//! in-band and at the HTTP level, like the product's own tools.

use crate::common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, header};
use relay_service::admin::{self, TokenSpec};
use relay_service::auth::Scope;
use relay_service::http::mcp::standard_tools;
use relay_service::http::mcp::tools::{Answer, Hints, McpTool, ToolContext, ToolError};
use relay_service::{AppState, router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tower::ServiceExt;

/// The test-only tool's arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EchoInput {
    /// The words to say back.
    words: String,
}

/// The test-only tool's answer.
#[derive(Serialize, JsonSchema)]
struct Echoed {
    /// The words, said back by the named agent.
    said: String,
}

/// A tool that says the words back, naming the calling agent: the whole declaration.
struct Echo;

impl McpTool for Echo {
    type Input = EchoInput;
    type Output = Echoed;
    const NAME: &'static str = "echo_for_test";
    const TITLE: &'static str = "Say the words back";
    const SCOPE: Scope = Scope::Run;
    const HINTS: Hints = Hints::READ;

    fn description() -> String {
        "Say the words back, as the calling agent.".to_owned()
    }

    async fn call(cx: ToolContext<'_>, input: EchoInput) -> Result<Answer<Echoed>, ToolError> {
        if input.words.is_empty() {
            return Err(ToolError::Refused("say some words".into()));
        }
        let said = format!("{} says {}", cx.agent.agent_name, input.words);
        Ok(Answer::with_hint(
            Echoed { said },
            Some("Say more.".to_owned()),
        ))
    }
}

/// The answer of one current-protocol JSON-RPC request to `/mcp` of `router`, in-process.
async fn mcp(router: &axum::Router, token: &str, method: &str, params: Value) -> (u16, Value) {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "registry-test", "version": "1.0.0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let name = params["name"].as_str().map(str::to_owned);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut request = Request::post("/mcp")
        .header(header::HOST, "127.0.0.1")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header(header::CONTENT_TYPE, "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    let request = request.body(Body::from(body.to_string())).expect("request");
    let response = router.clone().oneshot(request).await.expect("answered");
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get(header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body");
    let text = String::from_utf8_lossy(&bytes);
    let mut answer = common::raw::answer_of(&text).unwrap_or(Value::Null);
    if let Some(challenge) = challenge {
        answer["www_authenticate"] = Value::from(challenge);
    }
    (status, answer)
}

async fn agent_token(app: &Arc<AppState>, project: &str, scopes: &[&str]) -> String {
    let spec = TokenSpec::Agent {
        name: "tester".into(),
        scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
    };
    admin::create_token(&app.admin(), project, spec)
        .await
        .expect("agent token")
        .token
}

/// A chat link on `project`, so all nine standard tools are listed.
async fn link_a_chat(app: &relay_service::AppState, project: &str) {
    relay_service::chat_tasks::owner::create_link(
        &app.tasks,
        relay_service::chat_tasks::owner::Acting::Operator,
        project,
        "claude",
        false,
    )
    .await
    .expect("chat link");
}

#[tokio::test]
async fn a_tool_added_in_one_place_is_listed_dispatched_and_scope_checked() {
    let common::InProcess { app, project, .. } = common::in_process().await;
    link_a_chat(&app, &project).await;
    let full = agent_token(&app, &project, &["osfoundry:read", "osfoundry:run"]).await;
    let read_only = agent_token(&app, &project, &["osfoundry:read"]).await;
    let with_echo =
        relay_service::http::router_with_tools(app.clone(), standard_tools().with::<Echo>());

    let (_, listed) = mcp(&with_echo, &full, "tools/list", json!({})).await;
    let tools = listed["result"]["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 10, "the nine tools and the test's: {listed}");
    let echo = tools.last().expect("listed last, after the nine");
    assert_eq!(echo["name"], "echo_for_test");
    assert_eq!(echo["title"], "Say the words back");
    assert_eq!(
        echo["description"],
        "Say the words back, as the calling agent."
    );
    assert_eq!(
        echo["inputSchema"]["properties"]["words"]["type"], "string",
        "{echo}"
    );
    assert_eq!(echo["inputSchema"]["required"], json!(["words"]));
    assert_eq!(echo["outputSchema"]["properties"]["said"]["type"], "string");
    assert_eq!(echo["annotations"]["readOnlyHint"], true);
    assert_eq!(
        echo["securitySchemes"],
        json!([{"type": "oauth2", "scopes": ["osfoundry:run"]}])
    );

    let call = |words: Value| json!({"name": "echo_for_test", "arguments": {"words": words}});
    let (status, answer) = mcp(&with_echo, &full, "tools/call", call(json!("hello"))).await;
    assert_eq!(status, 200);
    assert_eq!(
        answer["result"]["structuredContent"]["said"],
        "tester says hello"
    );
    // The text is the structured content's JSON.
    assert_eq!(
        answer["result"]["content"][0]["text"],
        r#"{"said":"tester says hello"}"#
    );
    let (_, refused) = mcp(&with_echo, &full, "tools/call", call(json!(""))).await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert_eq!(refused["result"]["content"][0]["text"], "say some words");
    let (_, mistyped) = mcp(&with_echo, &full, "tools/call", call(json!(7))).await;
    assert_eq!(
        mistyped["result"]["content"][0]["text"],
        "`words` must be a string"
    );

    let (status, denied) = mcp(&with_echo, &read_only, "tools/call", call(json!("hi"))).await;
    assert_eq!(status, 403, "{denied}");
    assert_eq!(denied["result"]["isError"], true);
    common::assert_scope_refusal(&denied, "osfoundry:run");
    let challenge = denied["www_authenticate"].as_str().expect("a challenge");
    assert!(
        challenge.contains("insufficient_scope") && challenge.contains("osfoundry:run"),
        "{challenge}"
    );

    // The product's own router does not have it.
    let (_, standard) = mcp(&router(app.clone()), &full, "tools/list", json!({})).await;
    let names: Vec<&str> = standard["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert_eq!(names.len(), 9);
    assert!(!names.contains(&"echo_for_test"));
    let (_, unknown) = mcp(&router(app), &full, "tools/call", call(json!("hi"))).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
}
