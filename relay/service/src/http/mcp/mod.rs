//! The MCP endpoint at `/mcp`: rmcp's Streamable HTTP server (stateless current protocol and
//! 2025-era sessions from one service) behind a bearer-token gate, serving the tools of a
//! [`Registry`] ([`standard_tools`] in the product).

pub mod chat;
mod direct;
mod errors;
pub mod graph;
mod http;
pub mod inputs;
pub mod legacy_sessions;
mod listen;
pub mod progress;
mod resources;
mod tasks;
pub mod tools;

use std::sync::Arc;

use axum::Router;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CreateTaskResult, DiscoverResult,
    GetTaskParams, GetTaskResult, Implementation, InitializeRequestParams, InitializeResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
    SubscribeRequestParams, SubscriptionFilter, Tool, UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::service::SubscriptionContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value};

use self::chat::{
    ClaimLinkedChatTask, GetLinkedChatTask, ListLinkedChatTasks, SubmitLinkedChatResult,
    UploadLinkedChatArtifact,
};
use self::graph::{
    CancelGraphRun, GetGraphRun, ListGraphSessions, RunGraphSession, RunGraphSessionInput,
};
use self::inputs::decode;
use self::tools::{
    McpTool, Registry, ToolContext, ToolError, error_result, insufficient_scope_result,
};
use super::metrics::{ToolOutcome, UNKNOWN_TOOL};
use super::oauth;
use super::{AppState, MCP_PATH};
use crate::auth::{self, AgentIdentity};
use crate::runs;

pub use self::http::MAX_MCP_BODY_BYTES;

/// What the server tells a connection at `initialize` and `server/discover`: which project it
/// acts for, and how the tools fit together, with the chat task tools only where the project
/// has a chat link (they are listed only there).
pub fn instructions(project_id: &str, project_name: Option<&str>, chat_links: bool) -> String {
    let project = match project_name {
        Some(name) => format!(
            "the owner's project {} (project_id {project_id})",
            serde_json::Value::from(name)
        ),
        None => format!("the owner's project {project_id}"),
    };
    let wait = runs::MAX_GET_WAIT.as_secs();
    let mut text = format!(
        "This connection acts for {project}. Graphs run on the owner's desktop, not here. \
list_graph_sessions (no arguments needed) shows the graphs the owner shares; run_graph_session queues a run and returns its command_id at once; \
get_graph_run with wait_seconds {wait} waits for the run and returns its result: call it instead of waiting yourself, and again while the run is not finished; \
cancel_graph_run stops a run."
    );
    if chat_links {
        text.push_str(
            " Linked chat tasks are work the owner assigned to a chat (by chat_link_id): list_linked_chat_tasks shows what waits; \
claim_linked_chat_task, do the work, then submit_linked_chat_result with the claim_id.",
        );
    }
    text
}

/// The product's tools, in listing order: the graph tools first, then the chat task tools.
pub fn standard_tools() -> Registry {
    Registry::new()
        .with::<ListGraphSessions>()
        .with::<RunGraphSession>()
        .with::<GetGraphRun>()
        .with::<CancelGraphRun>()
        .with::<ListLinkedChatTasks>()
        .with::<GetLinkedChatTask>()
        .with::<ClaimLinkedChatTask>()
        .with::<SubmitLinkedChatResult>()
        .with::<UploadLinkedChatArtifact>()
}

/// The service and the tools it offers, shared by the gate and the MCP server.
#[derive(Clone)]
pub struct Mcp {
    app: Arc<AppState>,
    tools: Arc<Registry>,
}

impl axum::extract::FromRef<Mcp> for Arc<AppState> {
    fn from_ref(mcp: &Mcp) -> Self {
        mcp.app.clone()
    }
}

/// The `/mcp` routes serving `tools`: the rmcp service behind the token gate.
pub fn routes(app: Arc<AppState>, tools: Registry) -> Router {
    let mcp = Mcp {
        app: app.clone(),
        tools: Arc::new(tools),
    };
    let handler = GraphTools { mcp: mcp.clone() };
    // rmcp serves every request statelessly; 2025-era sessions are the service's own
    // (`legacy_sessions`), a small record bound to the token that opened it.
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(MAX_MCP_BODY_BYTES)
        // Not the shutdown: rmcp drops the answer of every request in flight when its token is
        // cancelled (a 500), and a stop must answer held calls (`held`) with what they have.
        // rmcp's streams end once the stop has drained.
        .with_cancellation_token(app.drained.child_token())
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
            app,
            http::legacy_sessions,
        ))
        .layer(axum::middleware::from_fn_with_state(mcp, http::gate))
}

/// The MCP server: the registry's tools, and runs as resources and tasks.
#[derive(Clone)]
pub struct GraphTools {
    mcp: Mcp,
}

impl ServerHandler for GraphTools {
    /// Everything the server can do for a current-era (stateless) client: rmcp accepts a
    /// `subscriptions/listen` filter only within these. A 2025-era session is told less at
    /// `initialize` (see there).
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("graphrelay", env!("CARGO_PKG_VERSION")))
    }

    /// A 2025-era session (`initialize`, `Mcp-Session-Id`): served statelessly like every
    /// request, it has no stream for the server to push on (`GET /mcp` answers 405) and no
    /// memory of the capabilities it declared. So it is offered only what it gets: tools and
    /// resources to read, without subscriptions, list changes or tasks.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        let mut info = self.negotiate_initialize(&request)?;
        info.capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .build();
        info.instructions = Some(self.instructions_for(agent_of(&context)?).await?);
        Ok(info)
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        let instructions = self.instructions_for(agent_of(&context)?).await?;
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info().with_instructions(instructions),
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let agent = agent_of(&context)?;
        let chat_links = self.has_chat_links(agent).await?;
        Ok(ListToolsResult::with_all_items(
            self.mcp.tools.listed(chat_links),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.mcp.tools.definition(name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let site = CallSite {
            agent: agent_of(&context)?,
            parts: context.extensions.get::<axum::http::request::Parts>(),
            declared_tasks: context
                .client_capabilities()
                .is_some_and(|capabilities| capabilities.supports_tasks()),
            progress: context
                .meta
                .get_progress_token()
                .map(|token| progress::ProgressSender::new(token, context.peer.clone())),
            gone: Some(&context.ct),
        };
        self.call(&request.name, request.arguments.as_ref(), site)
            .await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        resources::list(&self.mcp.app, agent_of(&context)?).await
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
        resources::read(&self.mcp.app, agent, &request.uri)
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
        let _open = self.mcp.app.metrics.streams.enter();
        let request = context.request_context();
        let agent = agent_of(request)?;
        if let Some(refusal) =
            tasks::missing_scope(agent, auth::Scope::Read, "subscriptions/listen")
        {
            return Err(refusal);
        }
        let tasks = request
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<listen::ListenTasks>())
            .cloned()
            .unwrap_or(listen::ListenTasks(Vec::new()));
        listen::listen(&self.mcp.app, agent, &context, &tasks).await
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
        let view = runs::get_run(&self.mcp.app.runs, agent, &request.task_id)
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
        let result = graph::run_result(&view);
        Ok(GetTaskResult::new(tasks::detailed(
            &self.mcp.app,
            &view,
            result,
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
        runs::cancel_run(&self.mcp.app.runs, agent, &request.task_id)
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
        runs::get_run(&self.mcp.app.runs, agent, &request.task_id)
            .await
            .map_err(errors::run_rpc_error)?;
        Err(ErrorData::invalid_params(
            "this task never asks for input (a graph run takes its arguments when it is queued): there is nothing to update",
            None,
        ))
    }
}

/// What a tool call knows of its request besides the tool and its arguments.
struct CallSite<'a> {
    /// The authenticated caller.
    agent: &'a AgentIdentity,
    /// The HTTP request's head (for the base URL a scope challenge names).
    parts: Option<&'a axum::http::request::Parts>,
    /// Whether the client declared the tasks extension.
    declared_tasks: bool,
    /// The request's progress notifications, if it carried a `progressToken`.
    progress: Option<progress::ProgressSender>,
    /// Cancelled when the client went away (rmcp's request token).
    gone: Option<&'a tokio_util::sync::CancellationToken>,
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

impl GraphTools {
    /// A `tools/call` of `name` with `arguments`, for rmcp's `call_tool` and the direct path
    /// ([`direct`]) alike: the registry's tool (or the run as a task), its scope checked and
    /// its outcome counted.
    async fn call(
        &self,
        name: &str,
        arguments: Option<&Map<String, Value>>,
        site: CallSite<'_>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tools = &self.mcp.tools;
        let Some(scope) = tools.scope(name) else {
            return Err(self.unknown_tool(name));
        };
        let app = &self.mcp.app;
        let agent = site.agent;
        if !agent.has_scope(scope) {
            app.metrics.tools.record(name, ToolOutcome::Refused);
            let base = site
                .parts
                .map(|p| oauth::base_url(app, &p.headers))
                .unwrap_or_default();
            return Ok(insufficient_scope_result(name, scope, &base).into());
        }
        let empty = Map::new();
        let arguments = arguments.unwrap_or(&empty);
        // The one call the registry does not model: a run asked for as a task.
        if name == RunGraphSession::NAME && site.declared_tasks {
            let response = self.run_as_task(agent, arguments).await;
            let outcome = match &response {
                CallToolResponse::Task(_) => ToolOutcome::Ok,
                _ => ToolOutcome::ToolError,
            };
            app.metrics.tools.record(name, outcome);
            return Ok(response);
        }
        let cx = ToolContext {
            app,
            agent,
            progress: site.progress.as_ref(),
        };
        let call = tools.call(name, cx, arguments);
        // A client that hung up (or cancelled the request) releases a waiting call at once;
        // rmcp cancels the context's token then, but would let the handler run on. (On the
        // direct path the call is dropped with the request instead.)
        let result = match site.gone {
            Some(gone) if name == GetGraphRun::NAME => {
                tokio::select! {
                    result = call => result,
                    () = gone.cancelled() => {
                        return Err(ErrorData::internal_error("the client went away", None));
                    }
                }
            }
            _ => call.await,
        };
        // The scope lookup above found the tool, so the registry has it.
        let result = result.unwrap_or_else(|| error_result(&format!("unknown tool `{name}`")));
        let outcome = if result.is_error == Some(true) {
            ToolOutcome::ToolError
        } else {
            ToolOutcome::Ok
        };
        app.metrics.tools.record(name, outcome);
        Ok(result.into())
    }

    /// The refusal of a call naming no tool of the registry (counted as refused).
    fn unknown_tool(&self, name: &str) -> ErrorData {
        let tools = &self.mcp.tools;
        self.mcp
            .app
            .metrics
            .tools
            .record(UNKNOWN_TOOL, ToolOutcome::Refused);
        ErrorData::invalid_params(
            format!(
                "unknown tool `{name}`: the tools are {}",
                tools.names().join(", ")
            ),
            None,
        )
    }

    /// Whether `agent`'s project has a chat link (then the chat task tools are listed). Not
    /// asked when no tool needs one.
    async fn has_chat_links(&self, agent: &AgentIdentity) -> Result<bool, ErrorData> {
        if !self.mcp.tools.has_chat_tools() {
            return Ok(false);
        }
        let links = self
            .mcp
            .app
            .store
            .chat_links(&agent.project_id)
            .await
            .map_err(|error| errors::store_failure(&error))?;
        Ok(!links.is_empty())
    }

    /// The instructions for `agent`'s connection, naming its project.
    async fn instructions_for(&self, agent: &AgentIdentity) -> Result<String, ErrorData> {
        let project = self
            .mcp
            .app
            .store
            .project(&agent.project_id)
            .await
            .map_err(|error| errors::store_failure(&error))?;
        let chat_links = self.has_chat_links(agent).await?;
        Ok(instructions(
            &agent.project_id,
            project.as_ref().map(|p| p.name.as_str()),
            chat_links,
        ))
    }

    /// `run_graph_session` for a client that declared the tasks extension: the run as a task
    /// (a flat `CreateTaskResult`), or the same tool error as without tasks when nothing was
    /// queued.
    async fn run_as_task(
        &self,
        agent: &AgentIdentity,
        arguments: &Map<String, Value>,
    ) -> CallToolResponse {
        let Some(schema) = self
            .mcp
            .tools
            .definition(RunGraphSession::NAME)
            .map(|tool| tool.input_schema.clone())
        else {
            return error_result("run_graph_session is not offered here").into();
        };
        let input = decode::<RunGraphSessionInput>(RunGraphSession::NAME, &schema, arguments);
        let request = match input {
            Ok(input) => input.into(),
            Err(message) => return error_result(&message.0).into(),
        };
        match tasks::create(&self.mcp.app, agent, request).await {
            Ok(task) => CallToolResponse::Task(CreateTaskResult::new(task)),
            Err(error) => {
                tools::tool_error_result(ToolError::from(error), RunGraphSession::NAME).into()
            }
        }
    }
}
