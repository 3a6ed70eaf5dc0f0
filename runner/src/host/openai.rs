//! The OpenAI-compatible provider: `POST {base}/chat/completions`, the API that OpenAI,
//! llama.cpp's `llama-server`, Ollama, vLLM and LM Studio all speak. Replies stream as
//! server-sent events with `stream_options.include_usage`, so the trace shows progress while a
//! reply is generated and the last chunk carries the usage that feeds the budget. A server that
//! ignores `stream` and answers with one JSON document is read the same way.

use bytes::Bytes;
use graph_js::FailureCode;
use http::Uri;
use http::header::{AUTHORIZATION, HeaderMap};
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
use super::provider_config::{MaxTokensField, ProviderConfig, ProviderConfigError};
use super::sse::{Next, read_events};
use super::wire::{
    Credential, ToolNames, encode_body, estimate_usage, finish_turn, http_parts, parse_arguments,
};

/// The path under the base URL.
pub const CHAT_COMPLETIONS_PATH: &str = "/chat/completions";

/// An OpenAI-compatible chat-completions endpoint.
pub struct OpenAiProvider {
    config: ProviderConfig,
    uri: Uri,
    credential: Credential,
    client: HttpClient,
}

impl OpenAiProvider {
    /// A provider for `config`; its API key (if it names one) is read from the environment now.
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderConfigError> {
        let (uri, credential, client) = http_parts(&config, CHAT_COMPLETIONS_PATH)?;
        Ok(Self {
            config,
            uri,
            credential,
            client,
        })
    }

    /// The request body of one turn.
    fn body(&self, request: &TurnRequest, model: &str, names: &ToolNames) -> Value {
        let messages: Vec<Value> = request
            .messages
            .iter()
            .map(|m| message_json(m, names))
            .collect();
        let mut body = json!({"model": model, "messages": messages});
        if self.config.stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        if let Some(max) = request.max_tokens {
            let field = match self.config.max_tokens_field {
                MaxTokensField::MaxTokens => "max_tokens",
                MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
            };
            body[field] = json!(max);
        }
        if let Some(t) = self.config.temperature {
            body["temperature"] = json!(t);
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": names.wire(&t.name),
                        "description": t.description,
                        "parameters": t.parameters,
                    }})
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
        request: &TurnRequest,
        progress: ProgressFn<'_>,
    ) -> Result<Turn, AttemptError> {
        let response = self.client.post_json(&self.uri, headers, body, key).await?;
        let streamed = is_event_stream(&response);
        let mut reader = BodyReader::new(response, MAX_RESPONSE_BYTES);
        let mut reply = Reply::default();
        let mut meter = ProgressMeter::new(progress);
        if streamed {
            let done = read_events(&mut reader, |event| {
                if event.data.trim() == "[DONE]" {
                    return Ok(Next::Done);
                }
                let chunk: Chunk = decode_json(
                    event.data.as_bytes(),
                    "the provider streamed a chunk that is not valid",
                )?;
                meter.add(reply.apply(chunk, key)?);
                Ok(Next::More)
            })
            .await?;
            // Some servers end without `[DONE]`: fine once the reply has finished.
            if !done && reply.finish_reason.is_none() && reply.usage.is_none() {
                return Err(AttemptError::fatal(
                    FailureCode::Failed,
                    "the provider's stream ended before the reply was complete",
                ));
            }
        } else {
            let bytes = reader.read_all().await?;
            let whole: Chunk =
                decode_json(&bytes, "the provider's answer is not a chat completion")?;
            meter.add(reply.apply(whole, key)?);
        }
        reply.into_turn(names, request)
    }
}

fn message_json(message: &Message, names: &ToolNames) -> Value {
    match message.role {
        Role::System => json!({"role": "system", "content": message.content}),
        Role::User => json!({"role": "user", "content": message.content}),
        Role::Assistant => {
            let mut value = json!({"role": "assistant", "content": message.content});
            if !message.tool_calls.is_empty() {
                if message.content.is_empty() {
                    value["content"] = Value::Null;
                }
                value["tool_calls"] = message
                    .tool_calls
                    .iter()
                    .map(|c| {
                        // Arguments travel as JSON text; text the model sent that was not JSON
                        // goes back as it came.
                        let arguments = match &c.arguments {
                            Value::String(raw) => raw.clone(),
                            other => other.to_string(),
                        };
                        json!({"id": c.id, "type": "function",
                               "function": {"name": names.wire(&c.name), "arguments": arguments}})
                    })
                    .collect();
            }
            value
        }
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": message.tool_call_id.clone().unwrap_or_default(),
            "content": message.content,
        }),
    }
}

impl AgentProvider for OpenAiProvider {
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
            if let Some(key) = key {
                headers.insert(AUTHORIZATION, key.header("Bearer ")?);
            }
            let work = with_retries(&self.config.retry, self.config.timeout, progress, || {
                self.attempt(&headers, body.clone(), key, &names, request, progress)
            });
            finish_turn(&self.config, &model, work, cancel).await
        })
    }
}

/// One streamed chunk, or a whole non-streamed answer: the same shape with `message` in place
/// of `delta`.
#[derive(Debug, Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<UsageIn>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    delta: Option<Part>,
    #[serde(default)]
    message: Option<Part>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Part {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<CallPart>>,
}

#[derive(Debug, Deserialize)]
struct CallPart {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionPart>,
}

#[derive(Debug, Deserialize)]
struct FunctionPart {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Debug, Deserialize)]
struct UsageIn {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// A reply being put together from chunks.
#[derive(Debug, Default)]
struct Reply {
    text: String,
    calls: Vec<PartialCall>,
    usage: Option<Usage>,
    finish_reason: Option<String>,
    model: Option<String>,
}

impl Reply {
    /// Adds one chunk; returns the reply characters it carried (for progress).
    fn apply(&mut self, chunk: Chunk, key: Option<&ApiKey>) -> Result<usize, AttemptError> {
        if let Some(error) = chunk.error {
            let text = super::http::excerpt_of(json!({"error": error}).to_string().as_bytes());
            return Err(AttemptError::fatal(
                FailureCode::Failed,
                super::http::redact(&format!("the provider reported an error: {text}"), key),
            ));
        }
        if let Some(model) = chunk.model.filter(|m| !m.is_empty()) {
            self.model = Some(model);
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(Usage {
                input_tokens: usage.prompt_tokens,
                output_tokens: usage.completion_tokens,
            });
        }
        let mut chars = 0;
        // One choice is asked for (no `n`); others are ignored.
        for choice in chunk.choices.unwrap_or_default() {
            if choice.index.unwrap_or(0) != 0 {
                continue;
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            let Some(part) = choice.delta.or(choice.message) else {
                continue;
            };
            if let Some(content) = part.content {
                chars += content.chars().count();
                self.text.push_str(&content);
            }
            for (position, call) in part.tool_calls.unwrap_or_default().into_iter().enumerate() {
                // Streams number their calls; a whole answer lists them in order.
                let index = call.index.unwrap_or(position);
                if index >= MAX_TOOL_CALLS_PER_TURN {
                    return Err(AttemptError::fatal(
                        FailureCode::Failed,
                        format!(
                            "the model asked for more than {MAX_TOOL_CALLS_PER_TURN} tool calls in one turn"
                        ),
                    ));
                }
                if self.calls.len() <= index {
                    self.calls.resize_with(index + 1, PartialCall::default);
                }
                let slot = &mut self.calls[index];
                if let Some(id) = call.id.filter(|id| !id.is_empty()) {
                    slot.id = id;
                }
                if let Some(function) = call.function {
                    if let Some(name) = function.name {
                        slot.name.push_str(&name);
                    }
                    if let Some(arguments) = function.arguments {
                        chars += arguments.chars().count();
                        slot.arguments.push_str(&arguments);
                    }
                }
            }
        }
        Ok(chars)
    }

    fn into_turn(self, names: &ToolNames, request: &TurnRequest) -> Result<Turn, AttemptError> {
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (i, call) in self.calls.into_iter().enumerate() {
            if call.name.is_empty() {
                return Err(AttemptError::fatal(
                    FailureCode::Failed,
                    format!("the provider sent tool call {i} without a name"),
                ));
            }
            tool_calls.push(ToolCall {
                id: if call.id.is_empty() {
                    format!("call_{}_{i}", request.turn)
                } else {
                    call.id
                },
                name: names.real(&call.name),
                arguments: parse_arguments(&call.arguments),
            });
        }
        let usage = match self.usage {
            Some(usage) => usage,
            None => {
                // Without reported usage the budget would stop counting; an estimate keeps the
                // cap meaningful.
                tracing::warn!("the provider reported no usage; metering an estimate");
                estimate_usage(request, &self.text, &tool_calls)
            }
        };
        let finish_reason = self.finish_reason.unwrap_or_else(|| {
            if tool_calls.is_empty() {
                "stop".to_owned()
            } else {
                "tool_calls".to_owned()
            }
        });
        Ok(Turn {
            text: self.text,
            tool_calls,
            usage,
            cost: 0.0,
            model: self.model.unwrap_or_default(),
            finish_reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::agents::ToolSpec;

    fn request_with_tools() -> TurnRequest {
        TurnRequest {
            model: Some("local:smollm2".into()),
            messages: vec![
                Message::new(Role::System, "be brief"),
                Message::new(Role::User, "write it"),
                Message {
                    role: Role::Assistant,
                    content: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "call_1".into(),
                        name: "fs.write".into(),
                        arguments: json!({"path": "a.txt", "text": "x"}),
                    }],
                    tool_call_id: None,
                    is_error: false,
                },
                Message {
                    role: Role::Tool,
                    content: r#"{"error":"denied"}"#.into(),
                    tool_calls: Vec::new(),
                    tool_call_id: Some("call_1".into()),
                    is_error: true,
                },
            ],
            tools: vec![ToolSpec {
                name: "fs.write".into(),
                description: "write".into(),
                parameters: json!({"type": "object"}),
            }],
            max_tokens: Some(64),
            label: None,
            turn: 2,
        }
    }

    fn provider() -> OpenAiProvider {
        let mut config =
            ProviderConfig::new("local", super::super::provider_config::ProviderKind::OpenAi);
        config.base_url = "http://127.0.0.1:9/v1".into();
        config.model = Some("smollm2".into());
        config.temperature = Some(0.0);
        OpenAiProvider::new(config).expect("provider")
    }

    #[test]
    fn the_body_carries_tools_history_and_limits_in_the_api_format() {
        let request = request_with_tools();
        let names = ToolNames::new(&request.tools);
        let body = provider().body(&request, "smollm2", &names);
        assert_eq!(body["model"], "smollm2");
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["max_tokens"], 64);
        assert_eq!(body["temperature"], 0.0);
        assert_eq!(body["tools"][0]["function"]["name"], "fs_write");
        let messages = body["messages"].as_array().expect("messages");
        assert_eq!(messages.len(), 4);
        assert_eq!(messages[2]["content"], Value::Null);
        assert_eq!(messages[2]["tool_calls"][0]["function"]["name"], "fs_write");
        let arguments: Value = serde_json::from_str(
            messages[2]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .expect("arguments are JSON text"),
        )
        .expect("json");
        assert_eq!(arguments, json!({"path": "a.txt", "text": "x"}));
        assert_eq!(messages[3]["role"], "tool");
        assert_eq!(messages[3]["tool_call_id"], "call_1");
    }

    fn chunk(value: Value) -> Chunk {
        serde_json::from_value(value).expect("chunk")
    }

    #[test]
    fn streamed_tool_calls_are_reassembled_and_named_back() {
        let request = request_with_tools();
        let names = ToolNames::new(&request.tools);
        let mut reply = Reply::default();
        for c in [
            json!({"model": "smollm2", "choices": [{"index": 0, "delta": {"role": "assistant", "content": null}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "fs_write", "arguments": "{\"pa"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "th\": \"a\"}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52}}),
        ] {
            reply.apply(chunk(c), None).expect("applies");
        }
        let turn = reply.into_turn(&names, &request).expect("turn");
        assert_eq!(turn.finish_reason, "tool_calls");
        assert_eq!(turn.tool_calls.len(), 1);
        assert_eq!(turn.tool_calls[0].name, "fs.write");
        assert_eq!(turn.tool_calls[0].id, "c1");
        assert_eq!(turn.tool_calls[0].arguments, json!({"path": "a"}));
        assert_eq!(
            turn.usage,
            Usage {
                input_tokens: 40,
                output_tokens: 12
            }
        );
        assert_eq!(turn.model, "smollm2");
    }

    #[test]
    fn a_whole_answer_reads_like_a_stream() {
        let request = request_with_tools();
        let names = ToolNames::new(&request.tools);
        let mut reply = Reply::default();
        reply
            .apply(
                chunk(
                    json!({"model": "m", "choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "hello", "tool_calls": null}}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1}}),
                ),
                None,
            )
            .expect("applies");
        let turn = reply.into_turn(&names, &request).expect("turn");
        assert_eq!(
            (turn.text.as_str(), turn.finish_reason.as_str()),
            ("hello", "stop")
        );
        assert_eq!(turn.usage.total(), 4);
    }

    #[test]
    fn tool_calls_at_and_past_the_limit() {
        let mut reply = Reply::default();
        let calls = |n: usize| {
            (0..n)
                .map(|i| json!({"index": i, "id": format!("c{i}"), "function": {"name": "x", "arguments": "{}"}}))
                .collect::<Vec<_>>()
        };
        reply
            .apply(
                chunk(
                    json!({"choices": [{"delta": {"tool_calls": calls(MAX_TOOL_CALLS_PER_TURN)}}]}),
                ),
                None,
            )
            .expect("at the limit");
        let mut reply = Reply::default();
        assert!(
            reply
                .apply(
                    chunk(json!({"choices": [{"delta": {"tool_calls": calls(MAX_TOOL_CALLS_PER_TURN + 1)}}]})),
                    None,
                )
                .is_err()
        );
    }

    #[test]
    fn an_error_chunk_fails_the_attempt_without_the_key() {
        let path = "sk-secret-in-an-error";
        let key = ApiKey::new(path);
        let mut reply = Reply::default();
        let error = reply
            .apply(
                chunk(json!({"error": {"message": format!("bad key {path}")}})),
                Some(&key),
            )
            .unwrap_err();
        match error {
            AttemptError::Fatal(e) => {
                assert!(!e.message.contains(path), "{}", e.message);
                assert!(e.message.contains("[redacted]"));
            }
            AttemptError::Retry { .. } => panic!("not retried"),
        }
    }

    #[test]
    fn missing_usage_is_estimated_not_zero() {
        let request = request_with_tools();
        let names = ToolNames::new(&request.tools);
        let mut reply = Reply::default();
        reply
            .apply(chunk(json!({"choices": [{"delta": {"content": "abcdefgh"}, "finish_reason": "stop"}]})), None)
            .expect("applies");
        let turn = reply.into_turn(&names, &request).expect("turn");
        assert_eq!(turn.usage.output_tokens, 2);
        assert!(turn.usage.input_tokens > 0);
    }
}
