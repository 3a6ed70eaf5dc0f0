//! Agents: the provider trait (one model turn at a time, so a tool loop can run between turns
//! on the host, through the same approvals as `g.tool`), the loop itself, and the provider used
//! when none is configured. The real providers are [`super::openai`] and [`super::anthropic`],
//! chosen by model name through [`super::providers`]; the deterministic mock is
//! [`super::mock`].

use std::sync::Arc;

use graph_js::{AgentRequest, Failure, FailureCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::approvals::BoxFuture;

/// Model turns an agent may take by default when it has tools.
pub const DEFAULT_MAX_TURNS: u32 = 8;
/// Upper bound on `maxTurns`.
pub const MAX_TURNS: u32 = 32;
/// Most tool calls one model turn may ask for; a turn asking for more fails the agent (no model
/// needs more, and each call may be an approval prompt for the owner).
pub const MAX_TOOL_CALLS_PER_TURN: usize = 16;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The system prompt.
    System,
    /// The prompt (and nothing else: tool results have their own role).
    User,
    /// The model.
    Assistant,
    /// A tool result.
    Tool,
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for this call (echoed back with the result).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// Its arguments.
    pub arguments: Value,
}

/// One message of a conversation with a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who said it.
    pub role: Role,
    /// Its text.
    pub content: String,
    /// Tool calls, on assistant messages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Which call this answers, on tool messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// On tool messages: the call was refused or failed (the content says why).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl Message {
    /// A message of `role` with `content` and nothing else.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            is_error: false,
        }
    }
}

/// A tool offered to a model: its name, what it does and its JSON schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON schema of its arguments.
    pub parameters: Value,
}

/// One request for one model turn.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRequest {
    /// The model as the graph named it: `provider:model`, a bare name, or none. A provider set
    /// ([`super::providers::ProviderSet`]) resolves it and hands its provider the bare model.
    pub model: Option<String>,
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// Tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// Upper bound on generated tokens, clipped to the budget.
    pub max_tokens: Option<u32>,
    /// The agent's label.
    pub label: Option<String>,
    /// Turn number, from 1.
    pub turn: u32,
}

impl TurnRequest {
    /// The agent's prompt (the first user message).
    pub fn prompt(&self) -> &str {
        self.messages
            .iter()
            .find(|m| m.role == Role::User)
            .map_or("", |m| m.content.as_str())
    }
}

/// Tokens of one turn, as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
}

impl Usage {
    /// Input plus output.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// One model turn's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// The reply text (may be empty when the model only calls tools).
    pub text: String,
    /// Tool calls the model asked for; empty for a final answer.
    pub tool_calls: Vec<ToolCall>,
    /// Metered tokens.
    pub usage: Usage,
    /// Cost of this turn (provider price table), 0 if unknown.
    pub cost: f64,
    /// The model that answered.
    pub model: String,
    /// Why generation stopped (`stop`, `length`, `tool_calls`, …).
    pub finish_reason: String,
}

/// Something a provider reports while a turn is under way.
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderProgress {
    /// Reply characters received so far (streaming).
    Chars(usize),
    /// A request is being retried.
    Retry {
        /// Retry number, from 1.
        attempt: u32,
        /// Why the previous attempt failed.
        reason: String,
    },
}

/// Why a provider gave no turn.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProviderError {
    /// `invalid` (bad request, unknown model), `failed` or `cancelled`.
    pub code: FailureCode,
    /// What went wrong. Never contains credentials.
    pub message: String,
}

impl ProviderError {
    /// A provider error of `code`.
    pub fn new(code: FailureCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl From<ProviderError> for Failure {
    fn from(e: ProviderError) -> Self {
        Failure::new(e.code, e.message)
    }
}

/// A progress callback.
pub type ProgressFn<'a> = &'a (dyn Fn(ProviderProgress) + Send + Sync);

/// A model provider: answers one turn at a time.
pub trait AgentProvider: Send + Sync {
    /// Checks, before an agent starts, that this provider can serve `model` (as the graph named
    /// it): an unknown provider or model is `invalid` at once, not after a slot and a request.
    fn check_model(&self, model: Option<&str>) -> Result<(), ProviderError> {
        let _ = model;
        Ok(())
    }

    /// Answers `request`. Must stop promptly (with a `cancelled` error) once `cancel` fires.
    fn turn<'a>(
        &'a self,
        request: &'a TurnRequest,
        progress: ProgressFn<'a>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Turn, ProviderError>>;
}

/// The provider used when none is configured: every agent fails and says how to configure one.
#[derive(Debug, Default)]
pub struct NoProvider;

impl AgentProvider for NoProvider {
    fn turn<'a>(
        &'a self,
        _: &'a TurnRequest,
        _: ProgressFn<'a>,
        _: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Turn, ProviderError>> {
        Box::pin(async {
            Err(ProviderError::new(
                FailureCode::Invalid,
                "no agent provider is configured: pass --provider openai|anthropic --model NAME, --providers FILE, or --replies FILE for the mock provider",
            ))
        })
    }
}

/// Validates an agent request before it is started.
pub fn validate(request: &AgentRequest) -> Result<u32, Failure> {
    if request.prompt.is_empty() {
        return Err(Failure::invalid("agent prompt must not be empty"));
    }
    match request.max_turns {
        None => Ok(DEFAULT_MAX_TURNS),
        Some(n) if (1..=MAX_TURNS).contains(&n) => Ok(n),
        Some(n) => Err(Failure::invalid(format!(
            "maxTurns must be from 1 to {MAX_TURNS}, got {n}"
        ))),
    }
}

/// What the agent loop needs from the run: budget, tools, trace.
pub trait AgentContext: Send + Sync {
    /// Admits one more turn (see [`super::budget::Budget::admit`]).
    fn admit(&self, max_tokens: Option<u32>) -> Result<Option<u32>, Failure>;
    /// Records one turn's usage.
    fn record(&self, usage: Usage, cost: f64);
    /// Whether the budget is exhausted.
    fn exhausted(&self) -> Option<Failure>;
    /// Calls a tool through approvals and confinement.
    fn call_tool<'a>(&'a self, name: &'a str, args: Value)
    -> BoxFuture<'a, Result<Value, Failure>>;
    /// Reports a finished turn.
    fn on_turn(&self, turn_number: u32, turn: &Turn);
    /// Reports provider progress.
    fn on_progress(&self, progress: ProviderProgress);
}

/// The reply a graph gets from `g.agent`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentReply {
    /// The final text.
    pub text: String,
    /// Tokens of all turns.
    pub tokens: u64,
    /// The agent's label.
    pub label: Option<String>,
    /// The model that answered.
    pub model: String,
    /// Cost of all turns.
    pub cost: f64,
    /// Turns taken.
    pub turns: u32,
    /// Why the last turn's generation stopped (`stop`, `length`, ...).
    pub finish_reason: String,
}

/// Runs one agent: a single turn, or with `tools` a loop of turns and tool calls, until a final
/// answer or `max_turns`. Every turn is admitted by the budget and metered; when the budget runs
/// out mid-loop the agent ends with `budget_exhausted` after the current turn.
pub async fn run_agent(
    provider: &Arc<dyn AgentProvider>,
    context: &dyn AgentContext,
    request: &AgentRequest,
    tools: Vec<ToolSpec>,
    first_max_tokens: Option<u32>,
    cancel: &CancellationToken,
) -> Result<AgentReply, Failure> {
    let max_turns = validate(request)?;
    let mut messages = Vec::new();
    if let Some(system) = &request.system {
        messages.push(Message::new(Role::System, system.clone()));
    }
    messages.push(Message::new(Role::User, request.prompt.clone()));
    let offered: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
    let mut tokens = 0u64;
    let mut cost = 0.0f64;
    let mut max_tokens = first_max_tokens;
    for turn_number in 1..=max_turns {
        if turn_number > 1 {
            max_tokens = context.admit(request.max_tokens)?;
        }
        let turn_request = TurnRequest {
            model: request.model.clone(),
            messages: messages.clone(),
            tools: tools.clone(),
            max_tokens,
            label: request.label.clone(),
            turn: turn_number,
        };
        let progress = |p: ProviderProgress| context.on_progress(p);
        let turn = provider
            .turn(&turn_request, &progress, cancel)
            .await
            .map_err(Failure::from)?;
        context.record(turn.usage, turn.cost);
        tokens = tokens.saturating_add(turn.usage.total());
        cost += turn.cost;
        context.on_turn(turn_number, &turn);
        if turn.tool_calls.is_empty() {
            return Ok(AgentReply {
                text: turn.text,
                tokens,
                label: request.label.clone(),
                model: turn.model,
                cost,
                turns: turn_number,
                finish_reason: turn.finish_reason,
            });
        }
        if turn.tool_calls.len() > MAX_TOOL_CALLS_PER_TURN {
            return Err(Failure::failed(format!(
                "the model asked for {} tool calls in one turn, over the limit of {MAX_TOOL_CALLS_PER_TURN}",
                turn.tool_calls.len()
            )));
        }
        if turn_number == max_turns {
            return Err(Failure::failed(format!(
                "the agent used all {max_turns} turns (maxTurns) without a final answer"
            )));
        }
        answer_tool_calls(context, &offered, &turn, &mut messages).await?;
        if let Some(exhausted) = context.exhausted() {
            return Err(exhausted);
        }
    }
    Err(Failure::failed("the agent loop ended without an answer"))
}

/// Adds the model's turn and the outcome of each tool call it made to `messages` (a tool that
/// was not offered, or that failed, is answered with the error); a cancel ends the agent.
async fn answer_tool_calls(
    context: &dyn AgentContext,
    offered: &[String],
    turn: &Turn,
    messages: &mut Vec<Message>,
) -> Result<(), Failure> {
    messages.push(Message {
        role: Role::Assistant,
        content: turn.text.clone(),
        tool_calls: turn.tool_calls.clone(),
        tool_call_id: None,
        is_error: false,
    });
    for call in &turn.tool_calls {
        let outcome = if offered.iter().any(|name| name == &call.name) {
            context.call_tool(&call.name, call.arguments.clone()).await
        } else {
            Err(Failure::not_found(format!(
                "tool {} was not offered to this agent",
                call.name
            )))
        };
        let (content, is_error) = match outcome {
            Ok(value) => (value.to_string(), false),
            Err(failure) if failure.code == FailureCode::Cancelled => return Err(failure),
            Err(failure) => (
                serde_json::json!({"error": failure.code.as_str(), "message": failure.message})
                    .to_string(),
                true,
            ),
        };
        messages.push(Message {
            role: Role::Tool,
            content,
            tool_calls: Vec::new(),
            tool_call_id: Some(call.id.clone()),
            is_error,
        });
    }
    Ok(())
}
