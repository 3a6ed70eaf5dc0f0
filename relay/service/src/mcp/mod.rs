//! The MCP endpoint at `/mcp`: rmcp's Streamable HTTP server (stateless current protocol and
//! 2025-era sessions from one service) behind a bearer-token gate.

mod chat;
mod http;
pub mod legacy_sessions;
pub mod tools;

use std::sync::Arc;

use axum::Router;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, MetaObject, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Serialize;
use serde_json::{Map, Value, json};

use self::tools::{
    ArgumentError, Arguments, CANCEL_GRAPH_RUN, GET_GRAPH_RUN, LIST_GRAPH_SESSIONS,
    RUN_GRAPH_SESSION, ToolSpec,
};
use super::AppState;
use super::auth::AgentIdentity;
use super::oauth;
use super::runs::{self, RunError, RunRequest};
use super::sessions;

pub use self::http::MAX_MCP_BODY_BYTES;

/// Path of the MCP endpoint.
pub use crate::MCP_PATH;

const INSTRUCTIONS: &str = "Graphs run on the owner's desktop, not here. list_graph_sessions shows what the owner shares; \
run_graph_session queues a run and returns a command_id at once; get_graph_run reads progress and the result \
(look about 20 s after queueing, then every 15 s); cancel_graph_run stops it. \
Linked chat tasks are work the owner assigned to this chat (by chat_link_id): list_linked_chat_tasks shows what waits; \
claim_linked_chat_task, do the work, then submit_linked_chat_result with the claim_id.";

/// `get_graph_run`'s optional `wait_seconds`: 0 to [`runs::MAX_GET_WAIT`].
fn wait_seconds(arguments: &Arguments<'_>) -> Result<std::time::Duration, ArgumentError> {
    let max = runs::MAX_GET_WAIT.as_secs();
    match arguments.integer("wait_seconds")? {
        None => Ok(std::time::Duration::ZERO),
        Some(seconds) => u64::try_from(seconds)
            .ok()
            .filter(|s| *s <= max)
            .map(std::time::Duration::from_secs)
            .ok_or_else(|| ArgumentError(format!("wait_seconds must be from 0 to {max}"))),
    }
}

/// The `/mcp` routes: the rmcp service behind the token gate.
pub fn routes(app: Arc<AppState>) -> Router {
    let handler = GraphTools { app: app.clone() };
    // rmcp serves every request statelessly; 2025-era sessions are the service's own
    // (`legacy_sessions`), a small record bound to the token that opened it.
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(MAX_MCP_BODY_BYTES)
        .with_cancellation_token(app.shutdown.child_token())
        // The router checks Host and Origin on every route against the public URL
        // (`crate::origin`); rmcp's fixed host list would only break deployments behind a
        // public name.
        .disable_allowed_hosts();
    let service: StreamableHttpService<GraphTools, NeverSessionManager> =
        StreamableHttpService::new(
            move || Ok(handler.clone()),
            Arc::new(NeverSessionManager::default()),
            config,
        );
    Router::new()
        .route_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            http::legacy_sessions,
        ))
        .layer(axum::middleware::from_fn_with_state(app, http::gate))
}

/// The MCP server: the graph tools over the service's run functions and the linked chat task
/// tools over `chat_tasks`.
#[derive(Clone)]
pub struct GraphTools {
    app: Arc<AppState>,
}

impl ServerHandler for GraphTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("graphrelay", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::definitions()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::spec(name).map(tools::definition)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(spec) = tools::spec(&request.name) else {
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool `{}`: the tools are {}",
                    request.name,
                    tools::TOOLS.map(|t| t.name).join(", ")
                ),
                None,
            ));
        };
        let parts = context.extensions.get::<axum::http::request::Parts>();
        let Some(agent) = parts.and_then(|p| p.extensions.get::<AgentIdentity>()) else {
            // The gate puts an identity on every request; without one nothing may run.
            return Err(ErrorData::internal_error(
                "request reached the tools without an authenticated agent",
                None,
            ));
        };
        if !agent.has_scope(spec.scope) {
            let base = parts
                .map(|p| oauth::base_url(&self.app, &p.headers))
                .unwrap_or_default();
            return Ok(insufficient_scope_result(spec, &base).into());
        }
        let empty = Map::new();
        let arguments = request.arguments.as_ref().unwrap_or(&empty);
        Ok(self.dispatch(spec, agent, arguments).await.into())
    }
}

impl GraphTools {
    async fn dispatch(
        &self,
        spec: &'static ToolSpec,
        agent: &AgentIdentity,
        arguments: &Map<String, Value>,
    ) -> CallToolResult {
        let arguments = match Arguments::new(spec, arguments) {
            Ok(arguments) => arguments,
            Err(message) => return error_result(&message.0),
        };
        let app = &self.app;
        if chat::is_chat_tool(spec.name) {
            return chat::dispatch(app, spec, agent, &arguments).await;
        }
        let outcome = match spec.name {
            LIST_GRAPH_SESSIONS => self.list(agent, &arguments).await,
            RUN_GRAPH_SESSION => self.run(agent, &arguments).await,
            GET_GRAPH_RUN => match (arguments.string("command_id"), wait_seconds(&arguments)) {
                (Ok(id), Ok(wait)) => {
                    runs::get_run_waiting(app, agent, id, wait)
                        .await
                        .map(|view| {
                            let text = run_text(&view);
                            (to_value(&view), text)
                        })
                }
                (Err(message), _) | (_, Err(message)) => Err(RunError::Invalid(message.0)),
            },
            CANCEL_GRAPH_RUN => match arguments.string("command_id") {
                Ok(id) => runs::cancel_run(app, agent, id)
                    .await
                    .map(|outcome| (to_value(&outcome), outcome.message.clone())),
                Err(message) => Err(RunError::Invalid(message.0)),
            },
            _ => Err(RunError::Invalid(format!("unknown tool `{}`", spec.name))),
        };
        match outcome {
            Ok((structured, text)) => success_result(structured, text),
            Err(RunError::Store(error)) => {
                error.log(&format!("tool {} failed", spec.name));
                error_result(&error.agent_message())
            }
            Err(error) => error_result(&error.to_string()),
        }
    }

    async fn list(
        &self,
        agent: &AgentIdentity,
        arguments: &Arguments<'_>,
    ) -> Result<(Value, String), RunError> {
        let project_id = arguments.string("project_id").map_err(invalid)?;
        let limit = arguments.integer("limit").map_err(invalid)?;
        let list = sessions::list_sessions(&self.app, agent, project_id, limit).await?;
        let mut text = match list.sessions.len() {
            0 => "No graph sessions are shared with this project yet; the owner shares them from the desktop.".to_owned(),
            1 => "1 graph session is shared with this project.".to_owned(),
            n => format!("{n} graph sessions are shared with this project."),
        };
        match list.last_sync_at {
            Some(at) => text.push_str(&format!(" The desktop last synced at {at}.")),
            None => text.push_str(" The desktop has not synced this project yet."),
        }
        Ok((to_value(&list), text))
    }

    async fn run(
        &self,
        agent: &AgentIdentity,
        arguments: &Arguments<'_>,
    ) -> Result<(Value, String), RunError> {
        let request = RunRequest {
            graph_session_id: arguments
                .string("graph_session_id")
                .map_err(invalid)?
                .to_owned(),
            idempotency_key: arguments
                .string("idempotency_key")
                .map_err(invalid)?
                .to_owned(),
            arguments: arguments.object("arguments").map_err(invalid)?,
        };
        let ticket = runs::queue_run(&self.app, agent, request).await?;
        let text = if ticket.replayed {
            format!(
                "This idempotency key already queued run {} (status {}); no second run was started. Check it with get_graph_run.",
                ticket.command_id, ticket.status
            )
        } else {
            format!(
                "Queued run {}. The desktop picks it up on its next pass; check get_graph_run in about {} s.",
                ticket.command_id, ticket.poll_after_seconds
            )
        };
        Ok((to_value(&ticket), text))
    }
}

fn run_text(view: &runs::RunView) -> String {
    let mut text = format!("Run {} is {}.", view.command_id, view.status);
    if let Some(error) = &view.error {
        text.push_str(&format!(" Error: {error}"));
    }
    if view.result_truncated {
        text.push_str(" The result was too large to post; it is on the owner's desktop.");
    }
    if let Some(seconds) = view.poll_after_seconds {
        text.push_str(&format!(" Check again in about {seconds} s."));
    }
    text
}

fn to_value(value: &impl Serialize) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// A tool result: `structuredContent` plus a short text copy.
fn success_result(structured: Value, text: String) -> CallToolResult {
    let mut result = CallToolResult::structured(structured);
    result.content = vec![ContentBlock::text(text)];
    result
}

/// A tool error the model can read: the message as text and as `structuredContent.error`.
fn error_result(message: &str) -> CallToolResult {
    let mut result = CallToolResult::structured_error(json!({ "error": message }));
    result.content = vec![ContentBlock::text(message)];
    result
}

/// The in-band form of a 403: an error result carrying the challenge in
/// `_meta["mcp/www_authenticate"]`, for hosts that read it there.
pub(crate) fn insufficient_scope_result(spec: &ToolSpec, base_url: &str) -> CallToolResult {
    let message = format!(
        "This connection's token lacks the {} scope that {} needs: ask the owner for a token with that scope.",
        spec.scope, spec.name
    );
    let mut result = CallToolResult::structured_error(json!({
        "error": "insufficient_scope",
        "required_scope": spec.scope.as_str(),
        "message": message,
    }));
    result.content = vec![ContentBlock::text(message)];
    let mut meta = Map::new();
    meta.insert(
        "mcp/www_authenticate".into(),
        json!([oauth::insufficient_scope_challenge(
            base_url, spec.name, spec.scope
        )]),
    );
    result.meta = Some(MetaObject(meta));
    result
}

/// An argument that does not fit the tool's contract, as the run functions' refusal.
fn invalid(error: ArgumentError) -> RunError {
    RunError::Invalid(error.0)
}
