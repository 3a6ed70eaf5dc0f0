//! The Anthropic provider speaks the Messages API. No Anthropic endpoint is reachable from this
//! machine or from CI, so these tests replay responses in the documented format (streamed
//! events and whole messages, `tool_use` blocks, `usage.input_tokens` / `output_tokens`,
//! `overloaded_error`) from a local HTTP server, and check what the provider sent: the headers,
//! the tools and the `tool_result` blocks that carry tool results (or denials) back.

use crate::common;

use common::server::{Scripted, TestServer};
use runner::RunStatus;
use runner::host::anthropic::ANTHROPIC_VERSION;
use runner::host::events::EventKind;
use runner::host::http::ApiKey;
use runner::host::provider_config::{ProviderConfig, ProviderKind};
use runner::host::tools::ToolRegistry;
use serde_json::{Value, json};

const KEY: &str = "sk-ant-test-0123456789";

fn entry(server: &TestServer) -> ProviderConfig {
    let mut config = ProviderConfig::new("claude", ProviderKind::Anthropic);
    config.base_url = server.base_url();
    config.model = Some("claude-haiku-4-5".into());
    config.api_key = Some(ApiKey::new(KEY));
    config.retry.initial_backoff = std::time::Duration::from_millis(10);
    config
}

/// A streamed message: optional text, optional tool_use, a stop reason and usage.
fn streamed(
    text: &str,
    tool: Option<(&str, &str, Value)>,
    stop: &str,
    input: u64,
    output: u64,
) -> Scripted {
    let mut events: Vec<(Option<&str>, Value)> = vec![(
        Some("message_start"),
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
            "content": [], "model": "claude-haiku-4-5", "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input, "output_tokens": 1}}}),
    )];
    events.push((
        Some("content_block_start"),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ));
    events.push((Some("ping"), json!({"type": "ping"})));
    events.push((
        Some("content_block_delta"),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
    ));
    events.push((
        Some("content_block_stop"),
        json!({"type": "content_block_stop", "index": 0}),
    ));
    if let Some((id, name, input)) = tool {
        let json_text = input.to_string();
        let (a, b) = json_text.split_at(json_text.len() / 2);
        events.push((
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": 1,
                   "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        ));
        for part in [a, b] {
            events.push((
                Some("content_block_delta"),
                json!({"type": "content_block_delta", "index": 1,
                       "delta": {"type": "input_json_delta", "partial_json": part}}),
            ));
        }
        events.push((
            Some("content_block_stop"),
            json!({"type": "content_block_stop", "index": 1}),
        ));
    }
    events.push((
        Some("message_delta"),
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": {"output_tokens": output}}),
    ));
    events.push((Some("message_stop"), json!({"type": "message_stop"})));
    Scripted::sse(&events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_reply_is_metered_and_sent_with_the_documented_headers() {
    let server = TestServer::start(vec![streamed("Hello.", None, "end_turn", 25, 7)], None).await;
    let (mut options, sink) =
        common::options_with(common::boa(), common::provider_set(vec![entry(&server)]));
    options.token_cap = Some(1000);
    let script = r#"export default async function (a, g) {
        const r = await g.agent({prompt: "Say hello", system: "Be brief.", model: "claude"});
        return {text: r.text, tokens: r.tokens, model: r.model, finish: r.finish_reason};
    }"#;
    let outcome = common::run(script, json!({}), &options).await;
    assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
    assert_eq!(
        outcome.result,
        Some(
            json!({"text": "Hello.", "tokens": 32, "model": "claude-haiku-4-5", "finish": "stop"})
        )
    );
    assert_eq!(outcome.total_tokens, 32);
    let records = server.records();
    assert_eq!(records.len(), 1);
    let request = &records[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.headers["x-api-key"], KEY);
    assert_eq!(request.headers["anthropic-version"], ANTHROPIC_VERSION);
    assert!(request.headers.get("authorization").is_none());
    assert_eq!(request.body["model"], "claude-haiku-4-5");
    assert_eq!(request.body["max_tokens"], 1000, "clipped to the token cap");
    assert_eq!(request.body["system"], "Be brief.");
    assert_eq!(request.body["stream"], true);
    assert_eq!(
        request.body["messages"],
        json!([{"role": "user", "content": "Say hello"}])
    );
    assert!(
        sink.events()
            .iter()
            .any(|e| matches!(e.kind, EventKind::AgentProgress { .. }))
    );
}

const TOOL_AGENT: &str = r#"export default async function (a, g) {
    try {
        const r = await g.agent({prompt: "Write the note", tools: ["fs.write"], maxTurns: 3});
        return {text: r.text, turns: r.turns, tokens: r.tokens};
    } catch (e) { return {code: e.code, message: e.message}; }
}"#;

fn tool_script() -> Vec<Scripted> {
    vec![
        streamed(
            "I'll write it.",
            Some((
                "toolu_01",
                "fs_write",
                json!({"path": "note.txt", "text": "hello"}),
            )),
            "tool_use",
            40,
            20,
        ),
        streamed("Done.", None, "end_turn", 80, 3),
    ]
}

fn turn_summaries(events: &[runner::host::events::Event]) -> Vec<(String, Vec<(String, Value)>)> {
    common::turns(events)
        .into_iter()
        .filter_map(|k| match k {
            EventKind::AgentTurn {
                finish_reason,
                tool_calls,
                ..
            } => Some((
                finish_reason.clone(),
                tool_calls
                    .iter()
                    .map(|c| (c.name.clone(), c.arguments.clone()))
                    .collect(),
            )),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_tool_use_runs_and_its_result_goes_back_as_a_tool_result() {
    let server = TestServer::start(tool_script(), None).await;
    let folder = tempfile::tempdir().expect("tempdir");
    let (mut options, sink) =
        common::options_with(common::boa(), common::provider_set(vec![entry(&server)]));
    options.tools = ToolRegistry::standard(Some(folder.path().to_path_buf())).expect("tools");
    options
        .policy
        .set("fs.write", runner::host::approvals::Policy::Allow);
    let outcome = common::run(TOOL_AGENT, json!({}), &options).await;
    assert_eq!(
        outcome.result,
        Some(json!({"text": "Done.", "turns": 2, "tokens": 143}))
    );
    assert_eq!(outcome.total_tokens, 143);
    assert_eq!(
        std::fs::read_to_string(folder.path().join("note.txt")).expect("written"),
        "hello"
    );
    assert_eq!(
        turn_summaries(&sink.events()),
        vec![
            (
                "tool_calls".to_owned(),
                vec![(
                    "fs.write".to_owned(),
                    json!({"path": "note.txt", "text": "hello"})
                )]
            ),
            ("stop".to_owned(), vec![]),
        ]
    );
    let records = server.records();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].body["tools"][0]["name"], "fs_write");
    assert!(records[0].body["tools"][0]["input_schema"].is_object());
    let second = records[1].body["messages"].as_array().expect("messages");
    assert_eq!(second.len(), 3);
    assert_eq!(second[1]["role"], "assistant");
    assert_eq!(second[1]["content"][1]["type"], "tool_use");
    assert_eq!(second[1]["content"][1]["id"], "toolu_01");
    assert_eq!(
        second[1]["content"][1]["input"],
        json!({"path": "note.txt", "text": "hello"})
    );
    let result = &second[2]["content"][0];
    assert_eq!(second[2]["role"], "user");
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], "toolu_01");
    assert_eq!(result["is_error"], false);
    assert_eq!(
        serde_json::from_str::<Value>(result["content"].as_str().expect("text")).expect("json"),
        json!({"bytes": 5})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_tool_use_goes_back_as_an_error_and_writes_nothing() {
    let server = TestServer::start(tool_script(), None).await;
    let folder = tempfile::tempdir().expect("tempdir");
    let (mut options, sink) =
        common::options_with(common::boa(), common::provider_set(vec![entry(&server)]));
    options.tools = ToolRegistry::standard(Some(folder.path().to_path_buf())).expect("tools");
    let outcome = common::run(TOOL_AGENT, json!({}), &options).await;
    assert_eq!(outcome.result.expect("result")["text"], "Done.");
    assert!(!folder.path().join("note.txt").exists());
    assert!(sink.events().iter().any(|e| matches!(
        &e.kind,
        EventKind::ToolDenied { tool, .. } if tool == "fs.write"
    )));
    let records = server.records();
    let result = &records[1].body["messages"][2]["content"][0];
    assert_eq!(result["is_error"], true);
    let content: Value =
        serde_json::from_str(result["content"].as_str().expect("text")).expect("json");
    assert_eq!(content["error"], "denied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_message_and_an_overloaded_retry() {
    let server = TestServer::start(
        vec![
            Scripted::status(
                529,
                Some("0"),
                json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            ),
            Scripted::json(
                200,
                json!({"id": "msg_2", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
                       "content": [{"type": "text", "text": "Hi"}], "stop_reason": "max_tokens",
                       "stop_sequence": null,
                       "usage": {"input_tokens": 9, "output_tokens": 4, "cache_read_input_tokens": 1}}),
            ),
        ],
        None,
    )
    .await;
    let mut config = entry(&server);
    config.stream = false;
    let (options, sink) = common::options_with(common::boa(), common::provider_set(vec![config]));
    let script = r#"export default async function (a, g) {
        const r = await g.agent({prompt: "p", maxTokens: 4});
        return {text: r.text, tokens: r.tokens, finish: r.finish_reason};
    }"#;
    let outcome = common::run(script, json!({}), &options).await;
    assert_eq!(
        outcome.result,
        Some(json!({"text": "Hi", "tokens": 14, "finish": "length"}))
    );
    let retries = common::retries(&sink.events());
    assert_eq!(retries.len(), 1);
    assert!(retries[0].1.contains("529") && retries[0].1.contains("Overloaded"));
    let records = server.records();
    assert_eq!(records[1].body["max_tokens"], 4);
    assert!(records[1].body.get("stream").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_is_invalid_before_any_request() {
    let server = TestServer::start(Vec::new(), None).await;
    let mut config = entry(&server);
    config.api_key = None;
    config.api_key_env = Some("GRAPHRELAY_TEST_KEY_THAT_IS_NEVER_SET".into());
    let (options, _) = common::options_with(common::boa(), common::provider_set(vec![config]));
    let script = r#"export default async function (a, g) {
        try { await g.agent("p"); return "ran"; } catch (e) { return [e.code, e.message]; }
    }"#;
    let outcome = common::run(script, json!({}), &options).await;
    let result = outcome.result.expect("result");
    assert_eq!(result[0], "invalid");
    assert!(
        result[1]
            .as_str()
            .is_some_and(|m| m.contains("GRAPHRELAY_TEST_KEY_THAT_IS_NEVER_SET is not set")),
        "{result}"
    );
    assert!(server.records().is_empty());
}
