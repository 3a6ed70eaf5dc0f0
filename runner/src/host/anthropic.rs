//! The Anthropic provider: `POST {base}/messages` (the Messages API) with `x-api-key` and
//! `anthropic-version`, tools as `tools[].input_schema`, tool calls as `tool_use` content blocks
//! and their results as `tool_result` blocks in the next user message, usage as
//! `usage.input_tokens` / `output_tokens`. Replies stream as server-sent events (`message_start`,
//! `content_block_*`, `message_delta`, `message_stop`); a whole JSON message is read too.

use std::collections::BTreeMap;

use bytes::Bytes;
use graph_js::FailureCode;
use http::Uri;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::agents::{
    AgentProvider, MAX_TOOL_CALLS_PER_TURN, Message, ProgressFn, ProviderError, Role, ToolCall,
    Turn, TurnRequest, Usage,
};
use super::approvals::BoxFuture;
use super::http::{
    ApiKey, AttemptError, BodyReader, HttpClient, MAX_RESPONSE_BYTES, ProgressMeter, decode_json,
    is_event_stream, with_retries,
};
use super::provider_config::{ProviderConfig, ProviderConfigError};
use super::sse::{Next, read_events};
use super::wire::{Credential, ToolNames, encode_body, finish_turn, http_parts, parse_arguments};

/// The path under the base URL.
pub const MESSAGES_PATH: &str = "/messages";
/// The API version sent in `anthropic-version`.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` when neither the agent nor the budget sets one (the API requires it).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
/// Most content blocks one reply may have (text and tool calls together).
pub const MAX_CONTENT_BLOCKS: usize = 2 * MAX_TOOL_CALLS_PER_TURN + 16;

/// An Anthropic Messages API endpoint.
pub struct AnthropicProvider {
    config: ProviderConfig,
    uri: Uri,
    credential: Credential,
    client: HttpClient,
}

impl AnthropicProvider {
    /// A provider for `config`; its API key is read from the environment now.
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderConfigError> {
        let (uri, credential, client) = http_parts(&config, MESSAGES_PATH)?;
        Ok(Self {
            config,
            uri,
            credential,
            client,
        })
    }

    fn body(&self, request: &TurnRequest, model: &str, names: &ToolNames) -> Value {
        let system: Vec<&str> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::System)
            .map(|m| m.content.as_str())
            .collect();
        let mut body = json!({
            "model": model,
            "max_tokens": request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            "messages": messages_json(&request.messages, names),
        });
        if !system.is_empty() {
            body["system"] = json!(system.join("\n\n"));
        }
        if self.config.stream {
            body["stream"] = json!(true);
        }
        if let Some(t) = self.config.temperature {
            // The Messages API accepts 0 to 1.
            body["temperature"] = json!(t.min(1.0));
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    json!({"name": names.wire(&t.name), "description": t.description,
                           "input_schema": t.parameters})
                })
                .collect();
        }
        body
    }

    async fn attempt(
        &self,
        headers: &HeaderMap,
        body: Bytes,
        key: Option<&ApiKey>,
        names: &ToolNames,
        progress: ProgressFn<'_>,
    ) -> Result<Turn, AttemptError> {
        let response = self.client.post_json(&self.uri, headers, body, key).await?;
        let streamed = is_event_stream(&response);
        let mut reader = BodyReader::new(response, MAX_RESPONSE_BYTES);
        let mut reply = Reply::default();
        let mut meter = ProgressMeter::new(progress);
        if streamed {
            let done = read_events(&mut reader, |event| {
                let parsed: StreamEvent = decode_json(
                    event.data.as_bytes(),
                    "the provider streamed an event that is not valid",
                )?;
                Ok(if reply.apply(parsed, key, &mut meter)? {
                    Next::Done
                } else {
                    Next::More
                })
            })
            .await?;
            if !done && reply.stop_reason.is_none() {
                return Err(AttemptError::fatal(
                    FailureCode::Failed,
                    "the provider's stream ended before the reply was complete",
                ));
            }
        } else {
            let bytes = reader.read_all().await?;
            let message: MessageIn = decode_json(&bytes, "the provider's answer is not a message")?;
            reply.whole(message, &mut meter)?;
        }
        reply.into_turn(names)
    }
}

/// The conversation in the API's shape: user and assistant turns, assistant tool calls as
/// `tool_use` blocks, and each run of tool results as one user message of `tool_result` blocks
/// (the API wants a tool call's result in the very next user message).
fn messages_json(messages: &[Message], names: &ToolNames) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut results: Vec<Value> = Vec::new();
    for message in messages {
        if message.role != Role::Tool && !results.is_empty() {
            out.push(json!({"role": "user", "content": std::mem::take(&mut results)}));
        }
        match message.role {
            Role::System => {}
            Role::User => out.push(json!({"role": "user", "content": message.content})),
            Role::Assistant => {
                let mut blocks = Vec::new();
                if !message.content.is_empty() {
                    blocks.push(json!({"type": "text", "text": message.content}));
                }
                for call in &message.tool_calls {
                    // `input` must be an object; anything else came from a broken reply.
                    let input = if call.arguments.is_object() {
                        call.arguments.clone()
                    } else {
                        json!({})
                    };
                    blocks.push(json!({"type": "tool_use", "id": call.id,
                                       "name": names.wire(&call.name), "input": input}));
                }
                out.push(json!({"role": "assistant", "content": blocks}));
            }
            Role::Tool => results.push(json!({
                "type": "tool_result",
                "tool_use_id": message.tool_call_id.clone().unwrap_or_default(),
                "content": message.content,
                "is_error": message.is_error,
            })),
        }
    }
    if !results.is_empty() {
        out.push(json!({"role": "user", "content": results}));
    }
    out
}

impl AgentProvider for AnthropicProvider {
    fn check_model(&self, model: Option<&str>) -> Result<(), ProviderError> {
        self.config.model_for(model)?;
        self.credential.key(&self.config).map(|_| ())
    }

    fn turn<'a>(
        &'a self,
        request: &'a TurnRequest,
        progress: ProgressFn<'a>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Turn, ProviderError>> {
        Box::pin(async move {
            let model = self.config.model_for(request.model.as_deref())?;
            let key = self.credential.key(&self.config)?;
            let names = ToolNames::new(&request.tools);
            let body = encode_body(&self.body(request, &model, &names))?;
            let mut headers = HeaderMap::new();
            headers.insert(
                HeaderName::from_static("anthropic-version"),
                HeaderValue::from_static(ANTHROPIC_VERSION),
            );
            if let Some(key) = key {
                headers.insert(HeaderName::from_static("x-api-key"), key.header("")?);
            }
            let work = with_retries(&self.config.retry, self.config.timeout, progress, || {
                self.attempt(&headers, body.clone(), key, &names, progress)
            });
            finish_turn(&self.config, &model, work, cancel).await
        })
    }
}

#[derive(Debug, Deserialize)]
struct MessageIn {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    content: Vec<BlockIn>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<UsageIn>,
}

#[derive(Debug, Deserialize)]
struct BlockIn {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    input: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct UsageIn {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

impl UsageIn {
    /// Prompt tokens: cache writes and reads are prompt tokens too, and are billed.
    fn input(&self) -> Option<u64> {
        self.input_tokens.map(|n| {
            n.saturating_add(self.cache_creation_input_tokens.unwrap_or(0))
                .saturating_add(self.cache_read_input_tokens.unwrap_or(0))
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StreamEvent {
    MessageStart {
        message: MessageIn,
    },
    ContentBlockStart {
        index: usize,
        content_block: BlockIn,
    },
    ContentBlockDelta {
        index: usize,
        delta: DeltaIn,
    },
    ContentBlockStop {
        #[serde(rename = "index")]
        _index: usize,
    },
    MessageDelta {
        delta: MessageDeltaIn,
        #[serde(default)]
        usage: Option<UsageIn>,
    },
    MessageStop,
    Ping,
    Error {
        error: Value,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Deserialize)]
struct DeltaIn {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    partial_json: Option<String>,
}

#[derive(Debug, Deserialize)]
struct MessageDeltaIn {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Debug)]
enum Block {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        /// `input` from the block's start (complete in a whole message).
        input: Option<Value>,
        /// Streamed JSON text, which replaces `input` when any arrived.
        json: String,
    },
    /// Thinking and other blocks a tool loop does not use.
    Other,
}

#[derive(Debug, Default)]
struct Reply {
    blocks: BTreeMap<usize, Block>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    stop_reason: Option<String>,
    model: Option<String>,
}

impl Reply {
    fn block(&mut self, index: usize, block: BlockIn) -> Result<usize, AttemptError> {
        if index >= MAX_CONTENT_BLOCKS {
            return Err(AttemptError::fatal(
                FailureCode::Failed,
                format!("the reply has more than {MAX_CONTENT_BLOCKS} content blocks"),
            ));
        }
        let (block, chars) = match block.kind.as_str() {
            "text" => {
                let text = block.text.unwrap_or_default();
                let chars = text.chars().count();
                (Block::Text(text), chars)
            }
            "tool_use" => (
                Block::ToolUse {
                    id: block.id.unwrap_or_default(),
                    name: block.name.unwrap_or_default(),
                    input: block.input,
                    json: String::new(),
                },
                0,
            ),
            _ => (Block::Other, 0),
        };
        self.blocks.insert(index, block);
        Ok(chars)
    }

    fn usage(&mut self, usage: &UsageIn) {
        if let Some(input) = usage.input() {
            self.input_tokens = Some(input);
        }
        if let Some(output) = usage.output_tokens {
            self.output_tokens = Some(output);
        }
    }

    /// Applies one streamed event; `true` once the message has ended.
    fn apply(
        &mut self,
        event: StreamEvent,
        key: Option<&ApiKey>,
        meter: &mut ProgressMeter<'_>,
    ) -> Result<bool, AttemptError> {
        match event {
            StreamEvent::MessageStart { message } => {
                self.model = message.model;
                if let Some(usage) = &message.usage {
                    self.usage(usage);
                }
            }
            StreamEvent::ContentBlockStart {
                index,
                content_block,
            } => meter.add(self.block(index, content_block)?),
            StreamEvent::ContentBlockDelta { index, delta } => {
                let block = self.blocks.get_mut(&index).ok_or_else(|| {
                    AttemptError::fatal(
                        FailureCode::Failed,
                        format!("the provider streamed a delta for block {index} before its start"),
                    )
                })?;
                match (block, delta.kind.as_str()) {
                    (Block::Text(text), "text_delta") => {
                        let part = delta.text.unwrap_or_default();
                        meter.add(part.chars().count());
                        text.push_str(&part);
                    }
                    (Block::ToolUse { json, .. }, "input_json_delta") => {
                        let part = delta.partial_json.unwrap_or_default();
                        meter.add(part.chars().count());
                        json.push_str(&part);
                    }
                    // Thinking, signatures and kinds added later carry nothing the loop uses.
                    _ => {}
                }
            }
            StreamEvent::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.stop_reason {
                    self.stop_reason = Some(reason);
                }
                if let Some(usage) = &usage {
                    self.usage(usage);
                }
            }
            StreamEvent::MessageStop => return Ok(true),
            StreamEvent::Error { error } => return Err(stream_failure(&error, key)),
            StreamEvent::ContentBlockStop { .. } | StreamEvent::Ping | StreamEvent::Unknown => {}
        }
        Ok(false)
    }

    fn whole(
        &mut self,
        message: MessageIn,
        meter: &mut ProgressMeter<'_>,
    ) -> Result<(), AttemptError> {
        self.model = message.model;
        self.stop_reason = message.stop_reason;
        if let Some(usage) = &message.usage {
            self.usage(usage);
        }
        for (index, block) in message.content.into_iter().enumerate() {
            meter.add(self.block(index, block)?);
        }
        Ok(())
    }

    fn into_turn(self, names: &ToolNames) -> Result<Turn, AttemptError> {
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        for block in self.blocks.into_values() {
            match block {
                Block::Text(part) => text.push_str(&part),
                Block::ToolUse {
                    id,
                    name,
                    input,
                    json,
                } => {
                    if name.is_empty() {
                        return Err(AttemptError::fatal(
                            FailureCode::Failed,
                            "the provider sent a tool_use block without a name",
                        ));
                    }
                    let arguments = if json.is_empty() {
                        input.unwrap_or_else(|| json!({}))
                    } else {
                        parse_arguments(&json)
                    };
                    tool_calls.push(ToolCall {
                        id,
                        name: names.real(&name),
                        arguments,
                    });
                }
                Block::Other => {}
            }
        }
        let (Some(input_tokens), Some(output_tokens)) = (self.input_tokens, self.output_tokens)
        else {
            // The Messages API always reports usage; a reply without it is not one.
            return Err(AttemptError::fatal(
                FailureCode::Failed,
                "the provider's reply carries no usage (usage.input_tokens and output_tokens)",
            ));
        };
        let finish_reason = match self.stop_reason.as_deref() {
            Some("end_turn" | "stop_sequence") | None => "stop",
            Some("max_tokens") => "length",
            Some("tool_use") => "tool_calls",
            Some(other) => other,
        }
        .to_owned();
        Ok(Turn {
            text,
            tool_calls,
            usage: Usage {
                input_tokens,
                output_tokens,
            },
            cost: 0.0,
            model: self.model.unwrap_or_default(),
            finish_reason,
        })
    }
}

/// An `error` event in the stream: overloaded and transient errors are worth a retry.
fn stream_failure(error: &Value, key: Option<&ApiKey>) -> AttemptError {
    let kind = error.get("type").and_then(Value::as_str).unwrap_or("error");
    let message = super::http::excerpt_of(json!({"error": error}).to_string().as_bytes());
    let reason = super::http::redact(&format!("the provider reported {kind}: {message}"), key);
    match kind {
        "overloaded_error" | "rate_limit_error" | "api_error" => AttemptError::Retry {
            reason,
            retry_after: None,
        },
        _ => AttemptError::fatal(FailureCode::Failed, reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::agents::ToolSpec;
    use crate::host::provider_config::ProviderKind;

    fn provider() -> AnthropicProvider {
        let mut config = ProviderConfig::new("claude", ProviderKind::Anthropic);
        config.base_url = "http://127.0.0.1:9/v1".into();
        config.model = Some("claude-haiku-4-5".into());
        config.api_key = Some(ApiKey::new("sk-ant-test"));
        AnthropicProvider::new(config).expect("provider")
    }

    fn history() -> TurnRequest {
        let call = |id: &str| ToolCall {
            id: id.into(),
            name: "fs.read".into(),
            arguments: json!({"path": id}),
        };
        let result = |id: &str, is_error: bool| Message {
            role: Role::Tool,
            content: "r".into(),
            tool_calls: Vec::new(),
            tool_call_id: Some(id.into()),
            is_error,
        };
        TurnRequest {
            model: None,
            messages: vec![
                Message::new(Role::System, "sys"),
                Message::new(Role::User, "read both"),
                Message {
                    role: Role::Assistant,
                    content: "reading".into(),
                    tool_calls: vec![call("t1"), call("t2")],
                    tool_call_id: None,
                    is_error: false,
                },
                result("t1", false),
                result("t2", true),
            ],
            tools: vec![ToolSpec {
                name: "fs.read".into(),
                description: "read".into(),
                parameters: json!({"type": "object"}),
            }],
            max_tokens: None,
            label: None,
            turn: 2,
        }
    }

    #[test]
    fn the_body_has_system_tools_and_grouped_tool_results() {
        let request = history();
        let names = ToolNames::new(&request.tools);
        let body = provider().body(&request, "claude-haiku-4-5", &names);
        assert_eq!(body["system"], "sys");
        assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
        assert_eq!(body["tools"][0]["name"], "fs_read");
        assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
        let messages = body["messages"].as_array().expect("messages");
        assert_eq!(messages.len(), 3, "{messages:?}");
        assert_eq!(messages[1]["content"][1]["type"], "tool_use");
        assert_eq!(messages[1]["content"][1]["name"], "fs_read");
        assert_eq!(messages[1]["content"][2]["input"], json!({"path": "t2"}));
        let results = messages[2]["content"].as_array().expect("results");
        assert_eq!(messages[2]["role"], "user");
        assert_eq!(results.len(), 2);
        assert_eq!(results[1]["tool_use_id"], "t2");
        assert_eq!(results[1]["is_error"], true);
    }

    fn events(list: &[Value]) -> Result<Turn, AttemptError> {
        let names = ToolNames::new(&history().tools);
        let mut reply = Reply::default();
        let report = |_| {};
        let mut meter = ProgressMeter::new(&report);
        for event in list {
            let parsed: StreamEvent = serde_json::from_value(event.clone()).expect("event");
            if reply.apply(parsed, None, &mut meter)? {
                break;
            }
        }
        reply.into_turn(&names)
    }

    #[test]
    fn a_streamed_tool_use_becomes_a_tool_call() {
        let turn = events(&[
            json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "model": "claude-haiku-4-5", "usage": {"input_tokens": 25, "cache_read_input_tokens": 5, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Reading."}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "ping"}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "fs_read", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": "}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"a.md\"}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 17}}),
            json!({"type": "message_stop"}),
        ])
        .expect("turn");
        assert_eq!(turn.text, "Reading.");
        assert_eq!(turn.finish_reason, "tool_calls");
        assert_eq!(
            turn.tool_calls,
            vec![ToolCall {
                id: "toolu_1".into(),
                name: "fs.read".into(),
                arguments: json!({"path": "a.md"})
            }]
        );
        assert_eq!(
            turn.usage,
            Usage {
                input_tokens: 30,
                output_tokens: 17
            }
        );
        assert_eq!(turn.model, "claude-haiku-4-5");
    }

    #[test]
    fn stream_errors_are_retried_when_transient() {
        let overloaded = events(&[
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ]);
        assert!(matches!(overloaded, Err(AttemptError::Retry { .. })));
        let invalid = events(&[
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}),
        ]);
        assert!(matches!(invalid, Err(AttemptError::Fatal(_))));
    }

    #[test]
    fn a_reply_without_usage_is_refused() {
        let turn = events(&[
            json!({"type": "message_start", "message": {"content": [], "model": "m"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
            json!({"type": "message_stop"}),
        ]);
        assert!(matches!(turn, Err(AttemptError::Fatal(_))));
    }

    #[test]
    fn blocks_past_the_limit_are_refused() {
        let at_limit = MAX_CONTENT_BLOCKS - 1;
        assert!(events(&[json!({"type": "content_block_start", "index": at_limit, "content_block": {"type": "text", "text": ""}})]).is_err_and(|e| matches!(e, AttemptError::Fatal(ref p) if p.message.contains("usage"))));
        let past = events(&[
            json!({"type": "content_block_start", "index": MAX_CONTENT_BLOCKS, "content_block": {"type": "text", "text": ""}}),
        ]);
        assert!(
            matches!(past, Err(AttemptError::Fatal(ref p)) if p.message.contains("content blocks"))
        );
    }
}
