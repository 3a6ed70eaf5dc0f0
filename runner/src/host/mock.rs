//! The deterministic mock provider: replies come from a replies file.
//!
//! ```json
//! {"replies": [{"label": "classify", "text": "urgent", "tokens": 120},
//!              {"match": "(?i)refund", "text": "...", "latency_ms": 200, "times": 1}],
//!  "default": {"text": "ok"},
//!  "latency_ms": 0}
//! ```
//!
//! A reply is chosen as the first entry whose `label` equals the agent's label (when the entry
//! has one), whose `match` regex finds the prompt (when it has one), whose `turn` equals the
//! turn number (when it has one), and which has been used fewer than `times` times (when it
//! has a limit); otherwise `default`; otherwise the agent fails. `times` is counted in the order
//! turns are chosen: on a virtual run clock, turns asked for at the same moment are chosen in the
//! order of the agents' paths (so a graph's agents started together take a limited reply in the
//! order the graph started them, every run); on a real clock, as they arrive.
//!
//! Tokens: an entry's `tokens` is the turn's total; without it the turn counts
//! `ceil(chars / 4)` of every message sent (input) plus `ceil(chars / 4)` of the reply (output).
//! Output is clipped to the turn's `max_tokens` (and the text cut to 4 characters a token).

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use graph_js::FailureCode;
use regex::Regex;
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::agents::{AgentProvider, ProgressFn, ProviderError, ToolCall, Turn, TurnRequest, Usage};
use super::approvals::BoxFuture;

/// Characters per token in the estimate.
pub const CHARS_PER_TOKEN: u64 = 4;
/// Largest accepted simulated latency.
pub const MAX_LATENCY_MS: u64 = 600_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RepliesFile {
    #[serde(default)]
    replies: Vec<ReplyEntry>,
    #[serde(default)]
    default: Option<ReplyEntry>,
    #[serde(default)]
    latency_ms: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplyEntry {
    #[serde(default)]
    label: Option<String>,
    #[serde(default, rename = "match")]
    pattern: Option<String>,
    #[serde(default)]
    turn: Option<u32>,
    #[serde(default)]
    times: Option<u32>,
    #[serde(default)]
    text: String,
    #[serde(default)]
    tokens: Option<u64>,
    #[serde(default)]
    cost: Option<f64>,
    #[serde(default)]
    latency_ms: Option<u64>,
    #[serde(default)]
    tool_calls: Vec<MockToolCall>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct MockToolCall {
    name: String,
    #[serde(default)]
    arguments: Value,
}

struct Reply {
    entry: ReplyEntry,
    regex: Option<Regex>,
}

/// Why a replies file was refused.
#[derive(Debug, thiserror::Error)]
pub enum MockError {
    /// The file could not be read.
    #[error("cannot read the replies file {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// What went wrong (including a file over the size limit).
        reason: crate::input::InputError,
    },
    /// The JSON is not a replies file.
    #[error("the replies file is not valid: {0}")]
    Invalid(String),
}

/// The mock provider.
pub struct MockProvider {
    replies: Vec<Reply>,
    default: Option<ReplyEntry>,
    latency: Duration,
    used: Mutex<Vec<u32>>,
    calls: Mutex<Vec<String>>,
}

impl MockProvider {
    /// Reads a replies file.
    pub fn from_file(path: &Path) -> Result<Self, MockError> {
        let text = crate::input::read_text_at_most(path, crate::input::MAX_DATA_FILE_BYTES)
            .map_err(|reason| MockError::Read {
                path: path.display().to_string(),
                reason,
            })?;
        let value: Value =
            serde_json::from_str(&text).map_err(|e| MockError::Invalid(e.to_string()))?;
        Self::from_json(value)
    }

    /// Builds the provider from a replies value.
    pub fn from_json(value: Value) -> Result<Self, MockError> {
        let file: RepliesFile =
            serde_json::from_value(value).map_err(|e| MockError::Invalid(e.to_string()))?;
        let mut replies = Vec::with_capacity(file.replies.len());
        for (i, entry) in file.replies.into_iter().enumerate() {
            check_latency(entry.latency_ms)?;
            let regex = match &entry.pattern {
                Some(p) => Some(Regex::new(p).map_err(|e| {
                    MockError::Invalid(format!("replies[{i}].match is not a valid regex: {e}"))
                })?),
                None => None,
            };
            replies.push(Reply { entry, regex });
        }
        check_latency(file.latency_ms)?;
        if let Some(default) = &file.default {
            check_latency(default.latency_ms)?;
        }
        let used = vec![0; replies.len()];
        Ok(Self {
            replies,
            default: file.default,
            latency: Duration::from_millis(file.latency_ms.unwrap_or(0)),
            used: Mutex::new(used),
            calls: Mutex::new(Vec::new()),
        })
    }

    /// Prompts of every turn answered so far, in order (tests use it to prove a graph never ran).
    pub fn calls(&self) -> Vec<String> {
        self.calls
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn choose(&self, request: &TurnRequest) -> Option<ReplyEntry> {
        let prompt = request.prompt();
        let mut used = self
            .used
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for (i, reply) in self.replies.iter().enumerate() {
            let e = &reply.entry;
            let label_ok = e.label.is_none() || e.label == request.label;
            let match_ok = reply.regex.as_ref().is_none_or(|r| r.is_match(prompt));
            let turn_ok = e.turn.is_none_or(|t| t == request.turn);
            let times_ok = e.times.is_none_or(|t| used[i] < t);
            if label_ok && match_ok && turn_ok && times_ok {
                used[i] += 1;
                return Some(e.clone());
            }
        }
        self.default.clone()
    }
}

fn check_latency(latency: Option<u64>) -> Result<(), MockError> {
    match latency {
        Some(ms) if ms > MAX_LATENCY_MS => Err(MockError::Invalid(format!(
            "latency_ms {ms} is over the limit of {MAX_LATENCY_MS}"
        ))),
        _ => Ok(()),
    }
}

fn estimate(chars: usize) -> u64 {
    (chars as u64).div_ceil(CHARS_PER_TOKEN)
}

/// The turn `entry` answers to `request`: usage from `tokens` or estimated, and the reply
/// clipped to the request's `max_tokens`.
fn reply_turn(entry: ReplyEntry, request: &TurnRequest) -> Turn {
    let sent: usize = request
        .messages
        .iter()
        .map(|m| m.content.chars().count())
        .sum();
    let mut text = entry.text;
    let generated = text.chars().count()
        + entry
            .tool_calls
            .iter()
            .map(|c| c.name.len() + c.arguments.to_string().len())
            .sum::<usize>();
    let mut usage = match entry.tokens {
        Some(total) => {
            let input = estimate(sent).min(total);
            Usage {
                input_tokens: input,
                output_tokens: total - input,
            }
        }
        None => Usage {
            input_tokens: estimate(sent),
            output_tokens: estimate(generated),
        },
    };
    let mut finish_reason = if entry.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    if let Some(max) = request.max_tokens {
        let max = u64::from(max);
        if usage.output_tokens > max {
            usage.output_tokens = max;
            let keep = usize::try_from(max * CHARS_PER_TOKEN).unwrap_or(usize::MAX);
            text = text.chars().take(keep).collect();
            finish_reason = "length";
        }
    }
    let tool_calls = entry
        .tool_calls
        .into_iter()
        .enumerate()
        .map(|(i, c)| ToolCall {
            id: format!("call_{}_{i}", request.turn),
            name: c.name,
            arguments: c.arguments,
        })
        .collect();
    Turn {
        text,
        tool_calls,
        usage,
        cost: entry.cost.unwrap_or(0.0),
        // The graph may name `provider:model`; the mock answers as the model part.
        model: request.model.as_deref().map_or_else(
            || "mock".to_owned(),
            |m| m.split_once(':').map_or(m, |(_, name)| name).to_owned(),
        ),
        finish_reason: finish_reason.to_owned(),
    }
}

/// Waits `duration` on the run clock, or ends with `cancelled` when the run is cancelled first.
async fn wait(duration: Duration, cancel: &CancellationToken) -> Result<(), ProviderError> {
    tokio::select! {
        () = crate::host::time::sleep(duration) => Ok(()),
        () = cancel.cancelled() => Err(ProviderError::new(
            FailureCode::Cancelled,
            "the run was cancelled during a generation",
        )),
    }
}

impl AgentProvider for MockProvider {
    fn turn<'a>(
        &'a self,
        request: &'a TurnRequest,
        _progress: ProgressFn<'a>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Turn, ProviderError>> {
        Box::pin(async move {
            // On a virtual clock, turns asked for at the same moment queue on the clock first
            // and are answered one at a time in the order of the agents' paths (the handles from
            // the top graph down), so which of them a reply limited by `times` fits is decided
            // by the graph, not by the order the machine ran them in. A real clock skips a zero
            // wait: there they are chosen as they arrive.
            wait(Duration::ZERO, cancel).await?;
            self.calls
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(request.prompt().to_owned());
            let Some(entry) = self.choose(request) else {
                return Err(ProviderError::new(
                    FailureCode::Failed,
                    format!(
                        "mock provider: no reply matches label {:?} and prompt {:?} (turn {}), and the replies file has no default",
                        request.label.as_deref().unwrap_or(""),
                        request.prompt().chars().take(80).collect::<String>(),
                        request.turn
                    ),
                ));
            };
            let latency = entry.latency_ms.map_or(self.latency, Duration::from_millis);
            // On the run clock: a virtual one moves by the latency instead of waiting, and
            // orders replies due at the same time by the agents' paths (so even a latency of 0
            // goes through it); a real one skips a zero wait.
            wait(latency, cancel).await?;
            if let Some(error) = &entry.error {
                return Err(ProviderError::new(FailureCode::Failed, error.clone()));
            }
            Ok(reply_turn(entry, request))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::agents::{Message, Role};

    fn request(
        label: Option<&str>,
        prompt: &str,
        turn: u32,
        max_tokens: Option<u32>,
    ) -> TurnRequest {
        TurnRequest {
            model: None,
            messages: vec![Message::new(Role::User, prompt)],
            tools: Vec::new(),
            max_tokens,
            label: label.map(str::to_owned),
            turn,
        }
    }

    async fn ask(mock: &MockProvider, r: &TurnRequest) -> Result<Turn, ProviderError> {
        mock.turn(r, &|_| {}, &CancellationToken::new()).await
    }

    #[tokio::test]
    async fn label_then_regex_then_default() {
        let mock = MockProvider::from_json(serde_json::json!({
            "replies": [
                {"label": "classify", "text": "urgent", "tokens": 120},
                {"match": "(?i)refund", "text": "refund policy"}
            ],
            "default": {"text": "ok"}
        }))
        .expect("valid");
        let a = ask(&mock, &request(Some("classify"), "anything", 1, None))
            .await
            .expect("reply");
        assert_eq!((a.text.as_str(), a.usage.total()), ("urgent", 120));
        let b = ask(&mock, &request(None, "I want a REFUND", 1, None))
            .await
            .expect("reply");
        assert_eq!(b.text, "refund policy");
        let c = ask(&mock, &request(Some("other"), "hello", 1, None))
            .await
            .expect("reply");
        assert_eq!(c.text, "ok");
        assert_eq!(mock.calls().len(), 3);
    }

    #[tokio::test]
    async fn tokens_default_to_a_quarter_of_the_characters_rounded_up() {
        let mock = MockProvider::from_json(serde_json::json!({"default": {"text": "hello"}}))
            .expect("valid");
        // prompt 9 chars -> 3 tokens, reply 5 chars -> 2 tokens
        let t = ask(&mock, &request(None, "123456789", 1, None))
            .await
            .expect("reply");
        assert_eq!(
            t.usage,
            Usage {
                input_tokens: 3,
                output_tokens: 2
            }
        );
    }

    #[tokio::test]
    async fn output_is_clipped_to_max_tokens() {
        let mock =
            MockProvider::from_json(serde_json::json!({"default": {"text": "x".repeat(400)}}))
                .expect("valid");
        let t = ask(&mock, &request(None, "p", 1, Some(10)))
            .await
            .expect("reply");
        assert_eq!(t.usage.output_tokens, 10);
        assert_eq!(t.text.len(), 40);
        assert_eq!(t.finish_reason, "length");
    }

    #[tokio::test]
    async fn times_limits_reuse_and_no_match_without_default_fails() {
        let mock = MockProvider::from_json(serde_json::json!({
            "replies": [{"label": "draft", "text": "bad", "times": 1}, {"label": "draft", "text": "good"}]
        }))
        .expect("valid");
        let r = request(Some("draft"), "p", 1, None);
        assert_eq!(ask(&mock, &r).await.expect("reply").text, "bad");
        assert_eq!(ask(&mock, &r).await.expect("reply").text, "good");
        assert_eq!(ask(&mock, &r).await.expect("reply").text, "good");
        let none = ask(&mock, &request(Some("other"), "p", 1, None))
            .await
            .unwrap_err();
        assert_eq!(none.code, FailureCode::Failed);
    }

    #[test]
    fn bad_files_are_refused_with_a_reason() {
        let bad_regex =
            MockProvider::from_json(serde_json::json!({"replies": [{"match": "(", "text": ""}]}));
        assert!(matches!(bad_regex, Err(MockError::Invalid(ref m)) if m.contains("regex")));
        let unknown = MockProvider::from_json(serde_json::json!({"replies": [], "extra": 1}));
        assert!(unknown.is_err());
        let slow = MockProvider::from_json(serde_json::json!({"latency_ms": MAX_LATENCY_MS + 1}));
        assert!(slow.is_err());
    }

    #[tokio::test]
    async fn cancel_interrupts_latency() {
        let mock = MockProvider::from_json(
            serde_json::json!({"default": {"text": "x", "latency_ms": 600000}}),
        )
        .expect("valid");
        let cancel = CancellationToken::new();
        cancel.cancel();
        let err = mock
            .turn(&request(None, "p", 1, None), &|_| {}, &cancel)
            .await
            .unwrap_err();
        assert_eq!(err.code, FailureCode::Cancelled);
    }
}
