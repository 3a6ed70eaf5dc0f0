//! The MCP endpoint at `/mcp`: rmcp's Streamable HTTP server (stateless current protocol and
//! 2025-era sessions from one service) behind a bearer-token gate.

mod chat;
mod errors;
mod http;
pub mod inputs;
pub mod legacy_sessions;
mod progress;
mod resources;
mod tasks;
pub mod tools;

use std::sync::Arc;

use axum::Router;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, GetTaskParams, GetTaskResult, Implementation, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, MetaObject, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
    SubscribeRequestParams, SubscriptionFilter, Tool, UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::service::SubscriptionContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Serialize;
use serde_json::{Map, Value, json};

use self::inputs::decode;
use self::tools::{
    ArgumentError, CANCEL_GRAPH_RUN, GET_GRAPH_RUN, LIST_GRAPH_SESSIONS, RUN_GRAPH_SESSION,
    ToolSpec,
};
use super::AppState;
use super::oauth;
use crate::auth::{self, AgentIdentity};
use crate::runs::{self, RunError, RunRequest};
use crate::sessions;

pub use self::http::MAX_MCP_BODY_BYTES;

/// Path of the MCP endpoint.
pub use crate::http::MCP_PATH;

const INSTRUCTIONS: &str = "Graphs run on the owner's desktop, not here. list_graph_sessions shows what the owner shares; \
run_graph_session queues a run and returns a command_id at once; get_graph_run reads progress and the result \
(look about 20 s after queueing, then every 15 s); cancel_graph_run stops it. \
Linked chat tasks are work the owner assigned to this chat (by chat_link_id): list_linked_chat_tasks shows what waits; \
claim_linked_chat_task, do the work, then submit_linked_chat_result with the claim_id.";

/// `get_graph_run`'s optional `wait_seconds`: 0 to [`runs::MAX_GET_WAIT`].
fn wait_seconds(seconds: Option<i64>) -> Result<std::time::Duration, ArgumentError> {
    let max = runs::MAX_GET_WAIT.as_secs();
    match seconds {
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
        // (`crate::http::origin`); rmcp's fixed host list would only break deployments behind a
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
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_tasks()
                .build(),
        )
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
        let agent = agent_of(&context)?;
        if !agent.has_scope(spec.scope) {
            let base = parts
                .map(|p| oauth::base_url(&self.app, &p.headers))
                .unwrap_or_default();
            return Ok(insufficient_scope_result(spec, &base).into());
        }
        let empty = Map::new();
        let arguments = request.arguments.as_ref().unwrap_or(&empty);
        let declared_tasks = context
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.supports_tasks());
        if spec.name == RUN_GRAPH_SESSION && declared_tasks {
            return Ok(self.run_as_task(spec, agent, arguments).await);
        }
        let progress = context
            .meta
            .get_progress_token()
            .map(|token| progress::ProgressSender::new(token, context.peer.clone()));
        Ok(self
            .dispatch(spec, agent, arguments, progress.as_ref())
            .await
            .into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        resources::list(&self.app, agent_of(&context)?).await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        agent_of(&context)?;
        Ok(resources::templates())
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let agent = agent_of(&context)?;
        if let Some(refusal) = tasks::missing_scope(agent, auth::Scope::Read, "resources/read") {
            return Err(refusal);
        }
        resources::read(&self.app, agent, &request.uri)
            .await
            .map(ReadResourceResponse::Complete)
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        resources::accepted(requested)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let request = context.request_context();
        let agent = agent_of(request)?;
        if let Some(refusal) =
            tasks::missing_scope(agent, auth::Scope::Read, "subscriptions/listen")
        {
            return Err(refusal);
        }
        let tasks = request
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.supports_tasks());
        resources::listen(&self.app, agent, &context, tasks).await
    }

    /// 2025-era `resources/subscribe`: acknowledged with `{}`. This service keeps no 2025
    /// session stream, so updates reach `subscriptions/listen` streams only.
    #[allow(deprecated)]
    async fn subscribe(
        &self,
        _request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        agent_of(&context).map(|_| ())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        _request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        agent_of(&context).map(|_| ())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let agent = agent_of(&context)?;
        if let Some(refusal) = tasks::missing_scope(agent, auth::Scope::Read, "tasks/get") {
            return Err(refusal);
        }
        let view = runs::get_run(&self.app.runs, agent, &request.task_id)
            .await
            .map_err(errors::run_rpc_error)?;
        // A task still working tells a client that asked for progress where it stands (tokens
        // used and cap, agents, tools, the last event) before the answer.
        if !view.status.is_terminal()
            && let Some(token) = context.meta.get_progress_token()
        {
            progress::ProgressSender::new(token, context.peer.clone())
                .send_now(&view)
                .await;
        }
        let result = run_result(&view);
        Ok(GetTaskResult::new(tasks::detailed(
            &self.app, &view, result,
        )))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let agent = agent_of(&context)?;
        if let Some(refusal) = tasks::missing_scope(agent, auth::Scope::Run, "tasks/cancel") {
            return Err(refusal);
        }
        // A finished run is left as it is and the answer is the same ack.
        runs::cancel_run(&self.app.runs, agent, &request.task_id)
            .await
            .map(|_| ())
            .map_err(errors::run_rpc_error)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let agent = agent_of(&context)?;
        // An unknown or foreign id is -32602 like for the other methods; a run never asks
        // for input, so there is nothing to update on a known one either.
        runs::get_run(&self.app.runs, agent, &request.task_id)
            .await
            .map_err(errors::run_rpc_error)?;
        Err(ErrorData::invalid_params(
            "this task never asks for input (a graph run takes its arguments when it is queued): there is nothing to update",
            None,
        ))
    }
}

/// The authenticated agent the gate put on the request.
fn agent_of(context: &RequestContext<RoleServer>) -> Result<&AgentIdentity, ErrorData> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<AgentIdentity>())
        // The gate puts an identity on every request; without one nothing may run.
        .ok_or_else(|| {
            ErrorData::internal_error(
                "request reached the tools without an authenticated agent",
                None,
            )
        })
}

/// `get_graph_run`'s answer for `view`: a failed run is an error result (the tool ran and
/// reported an error), anything else a success.
fn run_result(view: &runs::RunView) -> CallToolResult {
    let text = run_text(view);
    if view.status == relay_protocol::RunStatus::Failed {
        let mut result = CallToolResult::structured_error(to_value(view));
        result.content = vec![ContentBlock::text(text)];
        result
    } else {
        success_result(to_value(view), text)
    }
}

impl GraphTools {
    /// `run_graph_session` for a client that declared the tasks extension: the run as a task
    /// (a flat `CreateTaskResult`), or the same tool error as without tasks when nothing was
    /// queued.
    async fn run_as_task(
        &self,
        spec: &'static ToolSpec,
        agent: &AgentIdentity,
        arguments: &Map<String, Value>,
    ) -> CallToolResponse {
        let request = decode::<inputs::RunGraphSession>(spec.name, arguments).map(run_request);
        let request = match request {
            Ok(request) => request,
            Err(message) => return error_result(&message.0).into(),
        };
        match tasks::create(&self.app, agent, request).await {
            Ok(task) => CallToolResponse::Task(CreateTaskResult::new(task)),
            Err(error) => errors::run_tool_error(error, spec.name).into(),
        }
    }

    async fn dispatch(
        &self,
        spec: &'static ToolSpec,
        agent: &AgentIdentity,
        arguments: &Map<String, Value>,
        progress: Option<&progress::ProgressSender>,
    ) -> CallToolResult {
        let app = &self.app;
        if chat::is_chat_tool(spec.name) {
            return chat::dispatch(app, spec, agent, arguments).await;
        }
        let outcome = match spec.name {
            LIST_GRAPH_SESSIONS => match decode(spec.name, arguments) {
                Ok(input) => self.list(agent, input).await,
                Err(message) => Err(invalid(message)),
            },
            RUN_GRAPH_SESSION => match decode(spec.name, arguments) {
                Ok(input) => self.run(agent, input).await,
                Err(message) => Err(invalid(message)),
            },
            GET_GRAPH_RUN => match decode::<inputs::GetGraphRun>(spec.name, arguments)
                .and_then(|input| Ok((input.command_id, wait_seconds(input.wait_seconds)?)))
            {
                Ok((id, wait)) => {
                    let on_change =
                        |view: &runs::RunView| -> futures_util::future::BoxFuture<'static, ()> {
                            match progress {
                                Some(sender) => sender.send(view),
                                None => Box::pin(async {}),
                            }
                        };
                    runs::get_run_watching(&app.runs, agent, &id, wait, Some(&on_change))
                        .await
                        .map(|view| {
                            let text = run_text(&view);
                            (to_value(&view), text)
                        })
                }
                Err(message) => Err(invalid(message)),
            },
            CANCEL_GRAPH_RUN => match decode::<inputs::CancelGraphRun>(spec.name, arguments) {
                Ok(input) => runs::cancel_run(&app.runs, agent, &input.command_id)
                    .await
                    .map(|outcome| (to_value(&outcome), outcome.message.clone())),
                Err(message) => Err(invalid(message)),
            },
            _ => Err(RunError::Invalid(format!("unknown tool `{}`", spec.name))),
        };
        match outcome {
            Ok((structured, text)) => success_result(structured, text),
            Err(error) => errors::run_tool_error(error, spec.name),
        }
    }

    async fn list(
        &self,
        agent: &AgentIdentity,
        input: inputs::ListGraphSessions,
    ) -> Result<(Value, String), RunError> {
        let list = sessions::list_sessions(
            self.app.store.as_ref(),
            agent,
            &input.project_id,
            input.limit,
        )
        .await?;
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
        input: inputs::RunGraphSession,
    ) -> Result<(Value, String), RunError> {
        let request = run_request(input);
        let ticket = runs::queue_run(&self.app.runs, agent, request).await?;
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

/// `run_graph_session`'s arguments as the run functions take them.
fn run_request(input: inputs::RunGraphSession) -> RunRequest {
    RunRequest {
        graph_session_id: input.graph_session_id,
        idempotency_key: input.idempotency_key,
        arguments: input.arguments,
        max_tokens: input.max_tokens,
    }
}

fn run_text(view: &runs::RunView) -> String {
    let mut text = format!("Run {} is {}.", view.command_id, view.status);
    if let Some(error) = &view.error {
        text.push_str(&format!(" Error: {error}"));
    }
    if let Some(waiting) = &view.waiting_for {
        text.push_str(&format!(" It waits for {waiting}"));
        if let Some(until) = view.waiting_until {
            text.push_str(&format!(" (until {until})"));
        }
        text.push('.');
    }
    if !view.status.is_terminal() && !view.desktop.online {
        text.push_str(" The desktop is offline: the run moves once it is back.");
    }
    if view.result_truncated {
        text.push_str(" The result was too large to post; it is on the owner's desktop.");
    }
    if let (Some(cap), Some(asked)) = (view.token_cap, view.max_tokens)
        && cap < asked
    {
        text.push_str(&format!(
            " It runs with the owner's token cap of {cap}, below the {asked} asked for."
        ));
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
