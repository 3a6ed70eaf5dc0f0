//! The tool registry: each tool is declared once, as one type implementing [`McpTool`] (name,
//! title, description, scope, hints, the type its arguments decode into, the type its answer
//! serializes from, and what it does), and a [`Registry`] built from those types gives
//! `tools/list`, the dispatch of `tools/call` and the scope of every call, with no table by
//! name beside it. rmcp's `ToolRouter` and its `ToolBase`/`AsyncTool` traits are the model;
//! the service keeps its own because `tools/list` carries `securitySchemes` (the gate copies them)
//! and a call needs the agent's identity and the progress of a waiting run.

use std::future::Future;

use futures_util::future::BoxFuture;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, MetaObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::inputs::{ArgumentError, decode, input_schema_of, output_schema_of};
use super::progress::ProgressSender;
use crate::auth::{AgentIdentity, Scope};
use crate::chat_tasks::TaskError;
use crate::http::AppState;
use crate::http::oauth::insufficient_scope_challenge;
use crate::runs::RunError;
use crate::store::StoreError;

/// What a tool promises about its effects, stated on every tool so no host falls back to the
/// specification's defaults (which assume a destructive, open-world tool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hints {
    /// Whether it only reads.
    pub read_only: bool,
    /// Whether a write may destroy or replace something (hosts ask before such calls).
    pub destructive: bool,
    /// Whether repeating the same call changes nothing more.
    pub idempotent: bool,
    /// Whether it may reach beyond the relay: a graph run calls models and tools on the
    /// owner's desktop.
    pub open_world: bool,
}

impl Hints {
    /// A tool that only reads the relay.
    pub const READ: Hints = Hints {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
    };
}

/// What a tool call runs with: the service, the calling agent, and where a waiting call sends
/// its progress (when the request asked for it).
pub struct ToolContext<'a> {
    /// The service's state.
    pub app: &'a AppState,
    /// Who calls.
    pub agent: &'a AgentIdentity,
    /// The request's progress notifications, if it carried a `progressToken`.
    pub progress: Option<&'a ProgressSender>,
}

/// A tool's answer: the value (its `structuredContent`, which the tool's `outputSchema`
/// describes), whose compact JSON is also the first text block, and at most one short
/// sentence of guidance (what to call next) as a second block. A host that hands the model
/// only `content` gives it the same data as one that reads `structuredContent`.
pub struct Answer<T> {
    value: T,
    hint: Option<String>,
    failed: bool,
}

impl<T> Answer<T> {
    /// The value, with its JSON as the text.
    pub fn json(value: T) -> Self {
        Answer {
            value,
            hint: None,
            failed: false,
        }
    }

    /// The value, with its JSON as the text and `hint` (one short sentence) after it.
    pub fn with_hint(value: T, hint: Option<String>) -> Self {
        Answer {
            value,
            hint,
            failed: false,
        }
    }

    /// The same answer marked as an error result (the tool ran and reports a failure, like a
    /// run that failed), still with its value.
    pub fn failed(mut self) -> Self {
        self.failed = true;
        self
    }
}

/// Why a tool call was refused.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// Refused for a reason the agent reads (and acts on): the message says what to do.
    #[error("{0}")]
    Refused(String),
    /// The store failed; the agent gets a short retry message, the operator the details.
    #[error(transparent)]
    Store(StoreError),
}

impl From<ArgumentError> for ToolError {
    fn from(error: ArgumentError) -> Self {
        ToolError::Refused(error.0)
    }
}

impl From<RunError> for ToolError {
    /// Every refusal of the run functions is the agent's to read, in the domain's own words; a
    /// store failure is told as its cause (`tool_error_result`).
    fn from(error: RunError) -> Self {
        match error {
            RunError::Store(error) => ToolError::Store(error),
            RunError::NotFound
            | RunError::Invalid(_)
            | RunError::IdempotencyConflict
            | RunError::Contended
            | RunError::Quota(_)
            | RunError::Revoked => ToolError::Refused(error.to_string()),
        }
    }
}

impl From<TaskError> for ToolError {
    /// As for [`RunError`]: the domain's words, or the store failure's cause.
    fn from(error: TaskError) -> Self {
        match error {
            TaskError::Store(error) => ToolError::Store(error),
            TaskError::Invalid(_)
            | TaskError::LinkNotFound
            | TaskError::TaskNotFound
            | TaskError::ArtifactNotFound
            | TaskError::Refused(_)
            | TaskError::Conflict(_)
            | TaskError::Contended => ToolError::Refused(error.to_string()),
        }
    }
}

/// One MCP tool, declared in one place.
pub trait McpTool: Send + Sync + 'static {
    /// The arguments: decoded strictly (an unknown, missing or mistyped argument is named to
    /// the agent) and the source of the tool's `inputSchema`.
    type Input: DeserializeOwned + JsonSchema + Send + 'static;
    /// The answer: the source of the tool's `outputSchema`.
    type Output: Serialize + JsonSchema + Send + 'static;
    /// The tool's name.
    const NAME: &'static str;
    /// Its human-readable name, for hosts that label tool calls.
    const TITLE: &'static str;
    /// The scope a token needs to call it.
    const SCOPE: Scope;
    /// What it promises about its effects.
    const HINTS: Hints;
    /// Whether it works on a linked chat's tasks, so that only a connection whose project has
    /// a chat link lists it (every other conversation would carry its definition for nothing).
    const NEEDS_CHAT_LINK: bool = false;

    /// What it does, for the model: plain sentences.
    fn description() -> String;

    /// Runs it for `cx.agent`.
    fn call(
        cx: ToolContext<'_>,
        input: Self::Input,
    ) -> impl Future<Output = Result<Answer<Self::Output>, ToolError>> + Send;
}

/// A call with its arguments, type-erased: decode (against the tool's input schema), run,
/// encode.
type Call = for<'a> fn(
    ToolContext<'a>,
    &'a JsonObject,
    &'a Map<String, Value>,
) -> BoxFuture<'a, CallToolResult>;

/// One registered tool: its definition as listed, its scope, and its call.
struct Route {
    definition: Tool,
    scope: Scope,
    needs_chat_link: bool,
    call: Call,
}

/// The tools a service offers, in listing order.
#[derive(Default)]
pub struct Registry {
    routes: Vec<Route>,
}

impl Registry {
    /// No tools yet.
    pub fn new() -> Self {
        Registry::default()
    }

    /// The registry with tool `T` added after the others.
    ///
    /// # Panics
    /// If a tool of the same name is registered already: two tools cannot share a name.
    pub fn with<T: McpTool>(mut self) -> Self {
        assert!(
            self.route(T::NAME).is_none(),
            "two tools are named {}",
            T::NAME
        );
        self.routes.push(Route {
            definition: definition::<T>(),
            scope: T::SCOPE,
            needs_chat_link: T::NEEDS_CHAT_LINK,
            call: call::<T>,
        });
        self
    }

    fn route(&self, name: &str) -> Option<&Route> {
        self.routes
            .iter()
            .find(|route| route.definition.name == name)
    }

    /// Every tool's definition, in listing order.
    pub fn definitions(&self) -> Vec<Tool> {
        self.routes
            .iter()
            .map(|route| route.definition.clone())
            .collect()
    }

    /// The definitions a connection lists, in listing order: every tool when its project has
    /// a chat link, else those that need none.
    pub fn listed(&self, chat_links: bool) -> Vec<Tool> {
        self.routes
            .iter()
            .filter(|route| chat_links || !route.needs_chat_link)
            .map(|route| route.definition.clone())
            .collect()
    }

    /// Whether some tool is listed only where a chat link exists.
    pub fn has_chat_tools(&self) -> bool {
        self.routes.iter().any(|route| route.needs_chat_link)
    }

    /// Tool `name`'s definition.
    pub fn definition(&self, name: &str) -> Option<&Tool> {
        self.route(name).map(|route| &route.definition)
    }

    /// The scope tool `name` needs.
    pub fn scope(&self, name: &str) -> Option<Scope> {
        self.route(name).map(|route| route.scope)
    }

    /// The tools' names, in listing order.
    pub fn names(&self) -> Vec<&str> {
        self.routes
            .iter()
            .map(|route| route.definition.name.as_ref())
            .collect()
    }

    /// Calls tool `name` with `arguments` (`None`: no such tool). The caller checked the
    /// scope ([`Registry::scope`]).
    pub async fn call(
        &self,
        name: &str,
        cx: ToolContext<'_>,
        arguments: &Map<String, Value>,
    ) -> Option<CallToolResult> {
        let route = self.route(name)?;
        Some((route.call)(cx, &route.definition.input_schema, arguments).await)
    }
}

/// The rmcp definition of tool `T`; `securitySchemes` rides in `_meta` and is copied to the
/// top level of `tools/list` on the way out (rmcp's `Tool` has no field for it).
fn definition<T: McpTool>() -> Tool {
    let annotations = ToolAnnotations::new()
        .read_only(T::HINTS.read_only)
        .destructive(T::HINTS.destructive)
        .idempotent(T::HINTS.idempotent)
        .open_world(T::HINTS.open_world);
    let mut meta = Map::new();
    meta.insert("securitySchemes".into(), security_schemes(T::SCOPE));
    let mut tool = Tool::new(T::NAME, T::description(), input_schema_of::<T::Input>())
        .with_title(T::TITLE)
        .with_annotations(annotations)
        .with_meta(MetaObject(meta));
    tool.output_schema = Some(output_schema_of::<T::Output>());
    tool
}

fn call<'a, T: McpTool>(
    cx: ToolContext<'a>,
    schema: &'a JsonObject,
    arguments: &'a Map<String, Value>,
) -> BoxFuture<'a, CallToolResult> {
    Box::pin(async move {
        let outcome = match decode::<T::Input>(T::NAME, schema, arguments) {
            Ok(input) => T::call(cx, input).await,
            Err(refusal) => Err(refusal.into()),
        };
        match outcome {
            Ok(answer) => encode(answer),
            Err(error) => tool_error_result(error, T::NAME),
        }
    })
}

/// The tool result of `answer`: its value as `structuredContent` and, the same bytes, as the
/// first text block; the hint, if any, as a second.
pub(super) fn encode<T: Serialize>(answer: Answer<T>) -> CallToolResult {
    let value = match serde_json::to_value(&answer.value) {
        Ok(value) => value,
        Err(error) => {
            tracing::error!(%error, "a tool answer could not be encoded");
            return error_result(
                "The relay service could not encode this answer; retrying does not help.",
            );
        }
    };
    let mut result = if answer.failed {
        CallToolResult::structured_error(value)
    } else {
        CallToolResult::structured(value)
    };
    if let Some(hint) = answer.hint {
        result.content.push(ContentBlock::text(hint));
    }
    result
}

/// `[{"type": "oauth2", "scopes": [scope]}]`: how a host learns which scope a tool needs.
pub fn security_schemes(scope: Scope) -> Value {
    json!([{"type": "oauth2", "scopes": [scope.as_str()]}])
}

/// A refused tool call, as the tool error the model reads: the refusal in the domain's words
/// ([`ToolError`]'s conversions name every variant), or for a store failure its cause and
/// whether retrying helps, logged for the operator.
pub(crate) fn tool_error_result(error: ToolError, tool: &str) -> CallToolResult {
    match error {
        ToolError::Store(error) => {
            error.log(&format!("tool {tool} failed"));
            error_result(&error.agent_message())
        }
        ToolError::Refused(message) => error_result(&message),
    }
}

/// A tool error the model can read: `isError` with the message as its one text block and no
/// `structuredContent`. A client validates any `structuredContent` against the tool's
/// `outputSchema` (the TypeScript SDK throws when it does not fit, so the model would never
/// see the message), and an error has no value of the answer's shape to give.
pub fn error_result(message: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

/// The in-band form of a 403 for tool `name`, which needs `scope`: an error result whose text
/// says what is missing, carrying the challenge in `_meta["mcp/www_authenticate"]` for hosts
/// that read it there.
pub fn insufficient_scope_result(name: &str, scope: Scope, base_url: &str) -> CallToolResult {
    let message = format!(
        "This connection's token lacks the {scope} scope that {name} needs: ask the owner for a token with that scope."
    );
    let mut meta = Map::new();
    meta.insert(
        "mcp/www_authenticate".into(),
        json!([insufficient_scope_challenge(base_url, name, scope)]),
    );
    error_result(&message).with_meta(Some(MetaObject(meta)))
}
