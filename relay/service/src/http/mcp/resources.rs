//! MCP resources that wake a host: a chat link's inbox (`relay://chat-links/{id}/tasks`) and a
//! run (`relay://runs/{command_id}`). `resources/read` answers the same JSON as
//! `list_linked_chat_tasks` and `get_graph_run`; a `subscriptions/listen` stream that names
//! them gets `notifications/resources/updated` when they change (`super::listen`).

use rmcp::ErrorData;
use rmcp::model::{
    CacheScope, ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate, SubscriptionFilter,
};
use serde_json::json;

use crate::auth::AgentIdentity;
use crate::chat_tasks::agent as chat_agent;
use crate::http::AppState;
use crate::runs;
use crate::store::notify::Topic;

use super::errors;

const INBOX_PREFIX: &str = "relay://chat-links/";
const INBOX_SUFFIX: &str = "/tasks";
const RUN_PREFIX: &str = "relay://runs/";
/// How long a resource list may be reused: links come and go rarely, and only the owner
/// creates them.
const LIST_TTL_MS: u64 = 30_000;
/// Most resource URIs one `subscriptions/listen` stream may watch.
pub const MAX_SUBSCRIBED_URIS: usize = 64;
const JSON: &str = "application/json";

/// One of this service's resource URIs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceUri {
    /// A chat link's open tasks.
    Inbox(String),
    /// A graph run.
    Run(String),
}

impl ResourceUri {
    /// The URI's resource, or `None` for a URI this service does not serve.
    pub fn parse(uri: &str) -> Option<Self> {
        if let Some(id) = uri
            .strip_prefix(INBOX_PREFIX)
            .and_then(|rest| rest.strip_suffix(INBOX_SUFFIX))
        {
            return (!id.is_empty() && !id.contains('/')).then(|| Self::Inbox(id.to_owned()));
        }
        uri.strip_prefix(RUN_PREFIX)
            .filter(|id| !id.is_empty() && !id.contains('/'))
            .map(|id| Self::Run(id.to_owned()))
    }

    fn uri(&self) -> String {
        match self {
            Self::Inbox(id) => format!("{INBOX_PREFIX}{id}{INBOX_SUFFIX}"),
            Self::Run(id) => format!("{RUN_PREFIX}{id}"),
        }
    }
}

/// The refusal for a URI that names nothing this agent may read (SEP-2164: -32602 with the
/// URI in `data`). Unknown, malformed and foreign alike.
fn not_found(uri: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "Resource not found: {uri} is not a resource of this connection (relay://chat-links/{{chat_link_id}}/tasks or relay://runs/{{command_id}}; see resources/list)"
        ),
        Some(json!({"uri": uri})),
    )
}

/// A resource's JSON could not be encoded (never expected: every field is plain data).
fn internal(error: serde_json::Error) -> ErrorData {
    tracing::error!(%error, "cannot encode a resource");
    ErrorData::internal_error(
        "The relay service could not encode this resource; retrying does not help.",
        None,
    )
}

/// `resources/list`: the inboxes of the chat links of the agent's project.
pub async fn list(app: &AppState, agent: &AgentIdentity) -> Result<ListResourcesResult, ErrorData> {
    let links = app
        .store
        .chat_links(&agent.project_id)
        .await
        .map_err(|error| errors::store_failure(&error))?;
    let resources = links
        .iter()
        .map(|link| {
            Resource::new(ResourceUri::Inbox(link.id.clone()).uri(), format!("chat-link-{}-tasks", link.id))
                .with_title(format!("Tasks assigned to chat link {}", link.id))
                .with_description("The open tasks the owner assigned to this linked chat (list_linked_chat_tasks's answer); subscribe to hear of new ones.")
                .with_mime_type(JSON)
        })
        .collect();
    Ok(ListResourcesResult::with_all_items(resources)
        .with_ttl_ms(LIST_TTL_MS)
        .with_cache_scope(CacheScope::Private))
}

/// `resources/templates/list`: a run and an inbox by id.
pub fn templates() -> ListResourceTemplatesResult {
    let templates = vec![
        ResourceTemplate::new("relay://runs/{command_id}", "graph-run")
            .with_title("A graph run started by this agent")
            .with_description(
                "get_graph_run's answer for the run; subscribe to hear when its status changes.",
            )
            .with_mime_type(JSON),
        ResourceTemplate::new("relay://chat-links/{chat_link_id}/tasks", "chat-link-tasks")
            .with_title("A linked chat's open tasks")
            .with_mime_type(JSON),
    ];
    ListResourceTemplatesResult::with_all_items(templates)
        .with_ttl_ms(LIST_TTL_MS)
        .with_cache_scope(CacheScope::Public)
}

/// `resources/read`.
pub async fn read(
    app: &AppState,
    agent: &AgentIdentity,
    uri: &str,
) -> Result<ReadResourceResult, ErrorData> {
    let resource = ResourceUri::parse(uri).ok_or_else(|| not_found(uri))?;
    let body = match &resource {
        ResourceUri::Inbox(id) => match chat_agent::list_tasks(&app.tasks, agent, id).await {
            Ok(inbox) => serde_json::to_string(&inbox).map_err(internal)?,
            Err(error) => {
                return Err(errors::task_resource_error(error).unwrap_or_else(|| not_found(uri)));
            }
        },
        ResourceUri::Run(id) => match runs::get_run(&app.runs, agent, id).await {
            Ok(view) => serde_json::to_string(&view).map_err(internal)?,
            Err(error) => {
                return Err(errors::run_resource_error(error).unwrap_or_else(|| not_found(uri)));
            }
        },
    };
    // Live state: read again (or subscribe) rather than cache.
    Ok(
        ReadResourceResult::new(vec![ResourceContents::text(body, uri).with_mime_type(JSON)])
            .with_ttl_ms(0)
            .with_cache_scope(CacheScope::Private),
    )
}

/// The topic that wakes `resource`'s subscribers, once `agent` may read it.
pub(super) async fn topic(
    app: &AppState,
    agent: &AgentIdentity,
    resource: &ResourceUri,
) -> Result<Option<Topic>, ErrorData> {
    match resource {
        ResourceUri::Inbox(id) => match chat_agent::list_tasks(&app.tasks, agent, id).await {
            Ok(_) => Ok(Some(Topic::ChatLink(id.clone()))),
            Err(error) => errors::task_resource_error(error).map_or(Ok(None), Err),
        },
        ResourceUri::Run(id) => match runs::get_run(&app.runs, agent, id).await {
            Ok(view) => Ok(Some(Topic::Run(view.command_id))),
            Err(error) => errors::run_resource_error(error).map_or(Ok(None), Err),
        },
    }
}

/// What a `subscriptions/listen` request may watch: resource updates of this service's URIs
/// (at most [`MAX_SUBSCRIBED_URIS`]) and changes of the tool list. Whether the agent may read
/// each resource is checked when the stream starts (`super::listen`).
pub fn accepted(requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
    let uris: Vec<String> = requested
        .resource_subscriptions
        .iter()
        .flatten()
        .filter(|uri| ResourceUri::parse(uri).is_some())
        .take(MAX_SUBSCRIBED_URIS)
        .cloned()
        .collect();
    let mut filter = SubscriptionFilter::new();
    filter.resource_subscriptions = Some(uris);
    filter.tools_list_changed = requested.tools_list_changed.filter(|asked| *asked);
    Some(filter)
}
