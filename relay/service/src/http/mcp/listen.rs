//! `subscriptions/listen`: one stream per request that carries what its filter names, each
//! change once, driven by [`crate::store::notify`] (the same wake-ups as the long polls,
//! carried across replicas on PostgreSQL), never by polling the store:
//!
//! - `resourceSubscriptions`: `notifications/resources/updated` when an inbox or a run the
//!   agent may read changes (the relay's own resources, `super::resources`);
//! - `toolsListChanged`: `notifications/tools/list_changed` when the project gets a chat link
//!   (the chat task tools are listed only where one exists);
//! - `taskIds` (the tasks extension, SEP-2663): `notifications/tasks` each time one of those
//!   runs reaches a new task status, so exactly once when it finishes (at once for one already
//!   finished).
//!
//! rmcp's filter has no `taskIds` yet, so the gate reads them from the request itself
//! ([`requested_task_ids`], [`readable_tasks`]) and writes the ones it accepted into the
//! acknowledgment rmcp sends ([`acknowledge_task_ids`]).

use std::pin::Pin;

use axum::body::{Body, Bytes};
use axum::response::Response;
use futures_util::StreamExt;
use futures_util::future::select_all;
use rmcp::ErrorData;
use rmcp::model::{
    GetMeta, ServerNotification, TaskStatus, TaskStatusNotification, TaskStatusNotificationParams,
};
use rmcp::service::SubscriptionContext;
use serde_json::Value;

use super::resources::{MAX_SUBSCRIBED_URIS, ResourceUri, topic};
use crate::auth::AgentIdentity;
use crate::http::AppState;
use crate::runs;
use crate::store::notify::{Subscription, Topic};
use relay_protocol::CommandId;

/// The runs a `subscriptions/listen` request asked to hear about (`notifications.taskIds`)
/// that its agent may read, put on the request by the gate. Present only when the request
/// named task ids and declared the tasks extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenTasks(pub Vec<CommandId>);

/// The method whose acknowledgment carries the accepted filter.
const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
/// How much of a listen stream is looked through for the acknowledgment before it is passed
/// on unread (rmcp sends it first, after at most a priming event).
const MAX_ACK_SEARCH_BYTES: usize = 64 * 1024;

/// The task ids a `subscriptions/listen` message names in `params.notifications.taskIds`,
/// when its `_meta` declares the tasks extension (at most [`MAX_SUBSCRIBED_URIS`]); `None` when
/// it names none or does not declare the extension.
pub fn requested_task_ids(params: &Value) -> Option<Vec<String>> {
    let declared = params
        .pointer("/_meta/io.modelcontextprotocol~1clientCapabilities/extensions")
        .and_then(Value::as_object)
        .is_some_and(|extensions| extensions.contains_key(rmcp::model::TASKS_EXTENSION_ID));
    let ids = params.pointer("/notifications/taskIds")?.as_array()?;
    declared.then(|| {
        ids.iter()
            .filter_map(Value::as_str)
            .take(MAX_SUBSCRIBED_URIS)
            .map(str::to_owned)
            .collect()
    })
}

/// Of `ids`, the runs `agent` may read (an unknown, foreign or malformed id is left out, as
/// an unreadable resource is), each once.
pub async fn readable_tasks(app: &AppState, agent: &AgentIdentity, ids: &[String]) -> ListenTasks {
    let mut readable: Vec<CommandId> = Vec::new();
    for id in ids {
        if let Ok(view) = runs::get_run(&app.runs, agent, id).await
            && !readable.contains(&view.command_id)
        {
            readable.push(view.command_id);
        }
    }
    ListenTasks(readable)
}

/// `response` (a listen stream) with `accepted` written into its acknowledgment as
/// `notifications.taskIds`. The events before it pass unchanged; so does the whole stream if no
/// acknowledgment shows up within [`MAX_ACK_SEARCH_BYTES`].
pub fn acknowledge_task_ids(response: Response, accepted: &ListenTasks) -> Response {
    let ids: Vec<Value> = accepted
        .0
        .iter()
        .map(|id| Value::from(id.to_string()))
        .collect();
    let (mut parts, body) = response.into_parts();
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    let mut pending: Option<Vec<u8>> = Some(Vec::new());
    let stream = body.into_data_stream().map(move |chunk| {
        let chunk = chunk?;
        let Some(buffer) = pending.as_mut() else {
            return Ok(chunk);
        };
        buffer.extend_from_slice(&chunk);
        let (out, done) = rewrite_events(buffer, &ids);
        if done || buffer.len() > MAX_ACK_SEARCH_BYTES {
            let mut out = out;
            out.extend_from_slice(buffer);
            pending = None;
            return Ok(Bytes::from(out));
        }
        Ok::<_, axum::Error>(Bytes::from(out))
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

/// Takes the complete events off the front of `buffer`, rewriting the acknowledgment among
/// them; returns their bytes and whether the acknowledgment was seen.
fn rewrite_events(buffer: &mut Vec<u8>, ids: &[Value]) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    while let Some(end) = find(buffer, b"\n\n") {
        let event: Vec<u8> = buffer.drain(..end + 2).collect();
        match acknowledgment_with(&event, ids) {
            Some(rewritten) => {
                out.extend_from_slice(&rewritten);
                return (out, true);
            }
            None => out.extend_from_slice(&event),
        }
    }
    (out, false)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// The SSE `event` rewritten with `ids` as its accepted task ids, if it is the
/// acknowledgment; its other lines (`id:`, `retry:`) are kept.
fn acknowledgment_with(event: &[u8], ids: &[Value]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(event).ok()?;
    let mut found = false;
    let mut lines = Vec::new();
    for line in text.trim_end_matches('\n').split('\n') {
        let data = line.strip_prefix("data:").map(str::trim_start);
        let mut message: Option<Value> = data.and_then(|d| serde_json::from_str(d).ok());
        let ack = message.as_mut().filter(|m| m["method"] == ACKNOWLEDGED);
        match ack.and_then(|m| m.pointer_mut("/params/notifications")) {
            Some(Value::Object(notifications)) => {
                notifications.insert("taskIds".into(), Value::Array(ids.to_vec()));
                found = true;
                lines.push(format!("data: {}", message.unwrap_or_default()));
            }
            _ => lines.push(line.to_owned()),
        }
    }
    found.then(|| format!("{}\n\n", lines.join("\n")).into_bytes())
}

/// One thing a listen stream watches.
enum Watch {
    /// A resource, as its URI was named.
    Resource(String),
    /// The project's chat links (the tool list).
    Tools,
    /// A run asked for by task id, with the task status last told.
    Task(CommandId, TaskStatus),
}

/// Runs one `subscriptions/listen` stream until the client goes away or the service stops.
pub async fn listen(
    app: &AppState,
    agent: &AgentIdentity,
    context: &SubscriptionContext,
    tasks: &ListenTasks,
) -> Result<(), ErrorData> {
    let mut watched = resources_watched(app, agent, context).await?;
    if context.accepted().tools_list_changed == Some(true) {
        let topic = Topic::ProjectLinks(agent.project_id.clone());
        watched.push((Watch::Tools, app.notifier.subscribe(&topic)));
    }
    for id in &tasks.0 {
        // Subscribed before the read, so a change in between is seen, not missed.
        let changes = app.notifier.subscribe(&Topic::Run(*id));
        let Some(status) = send_task_status(app, agent, context, *id, None).await else {
            continue;
        };
        if !is_final(status) {
            watched.push((Watch::Task(*id, status), changes));
        }
    }
    loop {
        let changed = {
            let waits: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = watched
                .iter_mut()
                .map(|(_, changes)| {
                    Box::pin(changes.changed()) as Pin<Box<dyn Future<Output = ()> + Send>>
                })
                .collect();
            if waits.is_empty() {
                tokio::select! {
                    () = context.cancelled() => return Ok(()),
                    () = app.shutdown.cancelled() => return Ok(()),
                }
            }
            tokio::select! {
                (_, index, _) = select_all(waits) => index,
                () = context.cancelled() => return Ok(()),
                () = app.shutdown.cancelled() => return Ok(()),
            }
        };
        let Some((watch, _)) = watched.get_mut(changed) else {
            continue;
        };
        let sink = context.sink();
        let (sent, finished) = match watch {
            Watch::Resource(uri) => (
                sink.notify_resource_updated(uri.clone()).await.is_ok(),
                false,
            ),
            Watch::Tools => (sink.notify_tool_list_changed().await.is_ok(), false),
            Watch::Task(id, last) => {
                if let Some(status) = send_task_status(app, agent, context, *id, Some(*last)).await
                {
                    *last = status;
                }
                (true, is_final(*last))
            }
        };
        if !sent {
            // The stream is gone.
            return Ok(());
        }
        if finished {
            watched.remove(changed);
        }
    }
}

/// The accepted resources the agent may read, each with its wake-ups.
async fn resources_watched(
    app: &AppState,
    agent: &AgentIdentity,
    context: &SubscriptionContext,
) -> Result<Vec<(Watch, Subscription)>, ErrorData> {
    let mut watched = Vec::new();
    for uri in context.accepted().resource_subscriptions.iter().flatten() {
        let Some(resource) = ResourceUri::parse(uri) else {
            continue;
        };
        match topic(app, agent, &resource).await? {
            Some(topic) => {
                watched.push((Watch::Resource(uri.clone()), app.notifier.subscribe(&topic)))
            }
            None => tracing::debug!(%uri, "listen: not a resource of this agent; not watched"),
        }
    }
    Ok(watched)
}

fn is_final(status: TaskStatus) -> bool {
    !matches!(status, TaskStatus::Working | TaskStatus::InputRequired)
}

/// Reads the run now and, when its task status differs from `last` (the first read of a run
/// already finished counts), sends `notifications/tasks` with the task as `tasks/get` would
/// answer it. Returns the status read (`None` when the run can no longer be read).
async fn send_task_status(
    app: &AppState,
    agent: &AgentIdentity,
    context: &SubscriptionContext,
    command_id: CommandId,
    last: Option<TaskStatus>,
) -> Option<TaskStatus> {
    let view = runs::get_run(&app.runs, agent, &command_id.to_string())
        .await
        .ok()?;
    let task = super::tasks::detailed(app, &view, super::graph::run_result(&view));
    let status = task.status();
    let news = match last {
        Some(last) => last != status,
        None => is_final(status),
    };
    if !news {
        return Some(status);
    }
    let mut notification = ServerNotification::TaskStatusNotification(TaskStatusNotification::new(
        TaskStatusNotificationParams::new(task),
    ));
    notification
        .get_meta_mut()
        .set_subscription_id(context.request_context().id.clone());
    // rmcp's subscription sink does not route task notifications yet (it has no task filter),
    // so this goes to the stream's peer directly, tagged with the stream's id like the rest.
    let sent = context
        .request_context()
        .peer
        .send_notification(notification)
        .await;
    if let Err(error) = sent {
        tracing::debug!(%error, "a task status notification found no stream");
    }
    Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_acknowledgment_gets_the_accepted_task_ids() {
        let ack =
            json!({"jsonrpc": "2.0", "method": ACKNOWLEDGED, "params": {"notifications": {}}});
        let mut buffer =
            format!("data:\nid: 0\nretry: 3000\n\nid: 1\ndata: {ack}\n\ndata: x").into_bytes();
        let (out, done) = rewrite_events(&mut buffer, &[json!("a")]);
        assert!(done);
        let out = String::from_utf8(out).unwrap();
        let expected = json!({"jsonrpc": "2.0", "method": ACKNOWLEDGED, "params": {"notifications": {"taskIds": ["a"]}}});
        assert_eq!(
            out,
            format!("data:\nid: 0\nretry: 3000\n\nid: 1\ndata: {expected}\n\n")
        );
        assert_eq!(buffer, b"data: x", "the rest waits for its end");
    }

    #[test]
    fn task_ids_count_only_with_the_extension_declared() {
        let params = |extensions: Value| {
            json!({"notifications": {"taskIds": ["t1", 7, "t2"]}, "_meta": {
                "io.modelcontextprotocol/clientCapabilities": {"extensions": extensions}}})
        };
        assert_eq!(
            requested_task_ids(&params(json!({"io.modelcontextprotocol/tasks": {}}))),
            Some(vec!["t1".to_owned(), "t2".to_owned()])
        );
        assert_eq!(requested_task_ids(&params(json!({}))), None);
        assert_eq!(
            requested_task_ids(&json!({"notifications": {"resourceSubscriptions": []}})),
            None
        );
    }
}
