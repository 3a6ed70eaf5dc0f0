//! The tools (four for graph runs, five for linked chat tasks): names, descriptions, argument
//! schemas, annotations, scopes, and the checking of the arguments an agent sends.

use std::sync::Arc;

use rmcp::model::{JsonObject, MetaObject, Tool, ToolAnnotations};
use serde_json::{Map, Value, json};

use crate::auth::Scope;
use crate::chat_tasks::{
    GOAL_PREVIEW_BYTES, INBOX_LIMIT, LINK_NOT_FOUND, MAX_ARTIFACT_BYTES, MAX_ARTIFACT_ID_CHARS,
    MAX_ARTIFACT_NAME_CHARS, MAX_ARTIFACTS_PER_TASK, MAX_MIME_CHARS, MAX_TASK_RESULT_CHARS,
    NOT_CLAIMABLE, STALE_CLAIM, TASK_CANCELLED, TASK_EXPIRED, TASK_NOT_FOUND,
};
use crate::runs::{IDEMPOTENCY_KEY_CHARS, MAX_GET_WAIT, RUN_NOT_FOUND};
use crate::sessions::LIST_LIMIT;

/// `list_graph_sessions`.
pub const LIST_GRAPH_SESSIONS: &str = "list_graph_sessions";
/// `run_graph_session`.
pub const RUN_GRAPH_SESSION: &str = "run_graph_session";
/// `get_graph_run`.
pub const GET_GRAPH_RUN: &str = "get_graph_run";
/// `cancel_graph_run`.
pub const CANCEL_GRAPH_RUN: &str = "cancel_graph_run";
/// `list_linked_chat_tasks`.
pub const LIST_LINKED_CHAT_TASKS: &str = "list_linked_chat_tasks";
/// `get_linked_chat_task`.
pub const GET_LINKED_CHAT_TASK: &str = "get_linked_chat_task";
/// `claim_linked_chat_task`.
pub const CLAIM_LINKED_CHAT_TASK: &str = "claim_linked_chat_task";
/// `submit_linked_chat_result`.
pub const SUBMIT_LINKED_CHAT_RESULT: &str = "submit_linked_chat_result";
/// `upload_linked_chat_artifact`.
pub const UPLOAD_LINKED_CHAT_ARTIFACT: &str = "upload_linked_chat_artifact";

/// One tool's contract.
#[derive(Debug, Clone, Copy)]
pub struct ToolSpec {
    /// Tool name.
    pub name: &'static str,
    /// The scope a token needs to call it.
    pub scope: Scope,
    /// Whether it only reads.
    pub read_only: bool,
    /// Whether a write may destroy or replace something (hosts ask before such calls).
    pub destructive: bool,
    /// Whether repeating the same call changes nothing more.
    pub idempotent: bool,
    /// Argument names it accepts; anything else is rejected.
    pub arguments: &'static [&'static str],
}

/// The tools, in listing order: the graph tools first, then the chat task tools.
pub const TOOLS: [ToolSpec; 9] = [
    ToolSpec {
        name: LIST_GRAPH_SESSIONS,
        scope: Scope::Read,
        read_only: true,
        destructive: false,
        idempotent: true,
        arguments: &["project_id", "limit"],
    },
    ToolSpec {
        name: RUN_GRAPH_SESSION,
        scope: Scope::Run,
        read_only: false,
        destructive: true,
        idempotent: false,
        arguments: &["graph_session_id", "arguments", "idempotency_key"],
    },
    ToolSpec {
        name: GET_GRAPH_RUN,
        scope: Scope::Read,
        read_only: true,
        destructive: false,
        idempotent: true,
        arguments: &["command_id", "wait_seconds"],
    },
    ToolSpec {
        name: CANCEL_GRAPH_RUN,
        scope: Scope::Run,
        read_only: false,
        destructive: true,
        idempotent: true,
        arguments: &["command_id"],
    },
    ToolSpec {
        name: LIST_LINKED_CHAT_TASKS,
        scope: Scope::Read,
        read_only: true,
        destructive: false,
        idempotent: true,
        arguments: &["chat_link_id"],
    },
    ToolSpec {
        name: GET_LINKED_CHAT_TASK,
        scope: Scope::Read,
        read_only: true,
        destructive: false,
        idempotent: true,
        arguments: &["chat_link_id", "task_id"],
    },
    ToolSpec {
        name: CLAIM_LINKED_CHAT_TASK,
        scope: Scope::Run,
        read_only: false,
        destructive: false,
        idempotent: true,
        arguments: &["chat_link_id", "task_id"],
    },
    ToolSpec {
        name: SUBMIT_LINKED_CHAT_RESULT,
        scope: Scope::Run,
        read_only: false,
        destructive: false,
        idempotent: true,
        arguments: &["chat_link_id", "task_id", "claim_id", "status", "result"],
    },
    ToolSpec {
        name: UPLOAD_LINKED_CHAT_ARTIFACT,
        scope: Scope::Run,
        read_only: false,
        destructive: false,
        idempotent: true,
        arguments: &[
            "chat_link_id",
            "task_id",
            "claim_id",
            "artifact_id",
            "name",
            "mime",
            "content",
        ],
    },
];

/// The spec of tool `name`.
pub fn spec(name: &str) -> Option<&'static ToolSpec> {
    TOOLS.iter().find(|tool| tool.name == name)
}

/// The tool's human-readable name, for hosts that label tool calls.
pub fn title(name: &str) -> &'static str {
    match name {
        LIST_GRAPH_SESSIONS => "List shared graph sessions",
        RUN_GRAPH_SESSION => "Run a graph session on the owner's desktop",
        GET_GRAPH_RUN => "Get a graph run's status and result",
        CANCEL_GRAPH_RUN => "Cancel a graph run",
        LIST_LINKED_CHAT_TASKS => "List this chat's assigned tasks",
        GET_LINKED_CHAT_TASK => "Get an assigned task",
        CLAIM_LINKED_CHAT_TASK => "Claim an assigned task",
        SUBMIT_LINKED_CHAT_RESULT => "Submit an assigned task's result",
        UPLOAD_LINKED_CHAT_ARTIFACT => "Attach a file to an assigned task",
        _ => "",
    }
}

fn description(name: &str) -> String {
    match name {
        LIST_GRAPH_SESSIONS => format!(
            "List the Graph sessions the owner's desktop shares with this connected project, as of the desktop's last sync. \
             The list is usually empty until the owner shares a session from the desktop. \
             Rejected: a project_id other than this connection's project, and a limit outside {}–{}.",
            LIST_LIMIT.start(),
            LIST_LIMIT.end()
        ),
        RUN_GRAPH_SESSION => format!(
            "Queue a Graph run on the owner's online desktop in a connected project. \
             Retrieve progress and result with get_graph_run. \
             The desktop can go offline, and local tool approvals still apply. \
             Returns a ticket (command_id, status \"queued\") at once, before the graph starts; check get_graph_run after about one desktop poll interval (20 s). \
             idempotency_key is required: after a lost response, retry with the same key to get the same run back instead of a second run. \
             Rejected: a graph_session_id not shared with this project (see list_graph_sessions), an idempotency_key outside {}–{} characters, \
             arguments other than graph_session_id, arguments and idempotency_key, and a key already used with different arguments.",
            IDEMPOTENCY_KEY_CHARS.start(),
            IDEMPOTENCY_KEY_CHARS.end()
        ),
        GET_GRAPH_RUN => format!(
            "Get the status (queued, running, completed, failed, cancelled), timestamps and result of a Graph run started by this Connected agent with run_graph_session. \
             Runs usually take about a minute: look first about 20 s after queueing, then every 15 s or so (poll_after_seconds says when); \
             or pass wait_seconds (at most {max_wait}) and the call waits for the run to finish, answering as soon as it has. \
             A result too large to post shows result_truncated: true; the full result stays on the owner's desktop. \
             A run not started by this Connected agent, an unknown id and a malformed id all get \"{RUN_NOT_FOUND}\".",
            max_wait = MAX_GET_WAIT.as_secs()
        ),
        CANCEL_GRAPH_RUN => format!(
            "Cancel a Graph run started by this Connected agent. \
             A queued run is cancelled at once and never starts; a running run gets a cancel flag that the desktop reads within seconds, and it ends as cancelled. \
             A run that already finished is left unchanged (the answer says so), and a cancelled run cannot complete. \
             A run not started by this Connected agent, an unknown id and a malformed id all get \"{RUN_NOT_FOUND}\"."
        ),
        LIST_LINKED_CHAT_TASKS => format!(
            "List the tasks the owner assigned to this linked chat that are still open (queued or claimed), oldest first, at most {INBOX_LIMIT} (more: true when others wait). \
             Each shows task_id, status and the start of the goal (at most {GOAL_PREVIEW_BYTES} bytes; the whole goal comes with claim_linked_chat_task or get_linked_chat_task). \
             An empty list means nothing is waiting: tell the user and stop, do not poll in a loop. \
             To work on a task: claim_linked_chat_task, do the work, then submit_linked_chat_result with the claim_id. \
             Rejected: a chat_link_id that is not linked to this connection's project (\"{LINK_NOT_FOUND}\")."
        ),
        GET_LINKED_CHAT_TASK => format!(
            "Get one task of this linked chat in full: status (queued, claimed, completed, failed, cancelled, expired), the whole goal, expires_at (24 h after it was assigned), lease_until while claimed, and the result once submitted. \
             Rejected: a task of another chat link, an unknown id and a malformed id all get \"{TASK_NOT_FOUND}\"."
        ),
        CLAIM_LINKED_CHAT_TASK => format!(
            "Claim a queued task of this linked chat before working on it. Returns claim_id (pass it to submit_linked_chat_result and upload_linked_chat_artifact), lease_until and the whole goal. \
             Claiming a task this chat link already holds returns the same claim again (replayed: true), so a repeated call is safe. \
             The claim lapses at lease_until: submit before then, or the task goes back to the queue and a later claim gets a new claim_id. \
             Rejected: a task that is not this chat link's, or does not exist (\"{NOT_CLAIMABLE}\"), and a finished, cancelled or expired task (\"{NOT_CLAIMABLE}: task is ...\"). A rejected claim will not succeed on retry."
        ),
        SUBMIT_LINKED_CHAT_RESULT => format!(
            "Submit the outcome of a claimed task: status \"completed\" with the answer as result, or \"failed\" with the reason as result (at most {MAX_TASK_RESULT_CHARS} characters). \
             Sending the identical submit again (e.g. after a lost response) returns ok with replayed: true; the first result is kept. \
             Rejected, and not worth retrying: a stale claim_id (\"{STALE_CLAIM}\", or its lease lapsed), a cancelled task (\"{TASK_CANCELLED}\": a cancelled task cannot be completed), an expired task (\"{TASK_EXPIRED}\"), and a different status or result for a task already finished. \
             Tell the user what was rejected instead of resubmitting."
        ),
        UPLOAD_LINKED_CHAT_ARTIFACT => format!(
            "Attach a text file (a report, a patch, a table) to a claimed task before submitting it: content at most {MAX_ARTIFACT_BYTES} bytes, at most {MAX_ARTIFACTS_PER_TASK} artifacts per task. \
             Choose a stable artifact_id (1 to {MAX_ARTIFACT_ID_CHARS} characters of letters, digits, '.', '_', ':', '-') and reuse it when retrying: the same content again is a no-op (replayed: true). \
             Rejected: different content under an artifact_id already used, a stale claim_id (\"{STALE_CLAIM}\"), a cancelled (\"{TASK_CANCELLED}\") or expired task, and a task already finished."
        ),
        _ => String::new(),
    }
}

/// The exact JSON Schema of tool `name`'s arguments.
pub fn input_schema(name: &str) -> Value {
    match name {
        LIST_GRAPH_SESSIONS => object_schema(
            json!({
                "project_id": {"type": "string"},
                "limit": {"type": "integer", "minimum": LIST_LIMIT.start(), "maximum": LIST_LIMIT.end()}
            }),
            &["project_id"],
        ),
        RUN_GRAPH_SESSION => object_schema(
            json!({
                "graph_session_id": {"type": "string"},
                "arguments": {"type": "object"},
                "idempotency_key": {
                    "type": "string",
                    "minLength": IDEMPOTENCY_KEY_CHARS.start(),
                    "maxLength": IDEMPOTENCY_KEY_CHARS.end()
                }
            }),
            &["graph_session_id", "idempotency_key"],
        ),
        GET_GRAPH_RUN => object_schema(
            json!({
                "command_id": {"type": "string"},
                "wait_seconds": {"type": "integer", "minimum": 0, "maximum": MAX_GET_WAIT.as_secs()}
            }),
            &["command_id"],
        ),
        LIST_LINKED_CHAT_TASKS
        | GET_LINKED_CHAT_TASK
        | CLAIM_LINKED_CHAT_TASK
        | SUBMIT_LINKED_CHAT_RESULT
        | UPLOAD_LINKED_CHAT_ARTIFACT => chat_input_schema(name),
        _ => object_schema(json!({"command_id": {"type": "string"}}), &["command_id"]),
    }
}

/// The argument schemas of the linked-chat tools.
fn chat_input_schema(name: &str) -> Value {
    match name {
        LIST_LINKED_CHAT_TASKS => object_schema(
            json!({"chat_link_id": {"type": "string"}}),
            &["chat_link_id"],
        ),
        GET_LINKED_CHAT_TASK | CLAIM_LINKED_CHAT_TASK => object_schema(
            json!({
                "chat_link_id": {"type": "string"},
                "task_id": {"type": "string"}
            }),
            &["chat_link_id", "task_id"],
        ),
        SUBMIT_LINKED_CHAT_RESULT => object_schema(
            json!({
                "chat_link_id": {"type": "string"},
                "task_id": {"type": "string"},
                "claim_id": {"type": "string"},
                "status": {"type": "string", "enum": ["completed", "failed"]},
                "result": {"type": "string", "maxLength": MAX_TASK_RESULT_CHARS}
            }),
            &["chat_link_id", "task_id", "claim_id", "status", "result"],
        ),
        _ => object_schema(
            json!({
                "chat_link_id": {"type": "string"},
                "task_id": {"type": "string"},
                "claim_id": {"type": "string"},
                "artifact_id": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_ARTIFACT_ID_CHARS,
                    "pattern": "^[A-Za-z0-9._:-]+$"
                },
                "name": {"type": "string", "minLength": 1, "maxLength": MAX_ARTIFACT_NAME_CHARS},
                "mime": {"type": "string", "maxLength": MAX_MIME_CHARS},
                "content": {"type": "string"}
            }),
            &[
                "chat_link_id",
                "task_id",
                "claim_id",
                "artifact_id",
                "name",
                "mime",
                "content",
            ],
        ),
    }
}

/// A closed object schema: these properties, these required, nothing else.
fn object_schema(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false
    })
}

/// `[{"type": "oauth2", "scopes": [scope]}]`: how a host learns which scope a tool needs.
pub fn security_schemes(scope: Scope) -> Value {
    json!([{"type": "oauth2", "scopes": [scope.as_str()]}])
}

/// The rmcp definition of a tool; `securitySchemes` rides in `_meta` and is copied to the
/// top level of `tools/list` on the way out (rmcp's `Tool` has no field for it).
pub fn definition(spec: &ToolSpec) -> Tool {
    let schema = match input_schema(spec.name) {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    let annotations = if spec.read_only {
        ToolAnnotations::new().read_only(true)
    } else if spec.idempotent {
        ToolAnnotations::new()
            .read_only(false)
            .destructive(spec.destructive)
            .idempotent(true)
    } else {
        ToolAnnotations::new()
            .read_only(false)
            .destructive(spec.destructive)
    };
    let mut meta = Map::new();
    meta.insert("securitySchemes".into(), security_schemes(spec.scope));
    let tool = Tool::new(spec.name, description(spec.name), Arc::new(schema))
        .with_title(title(spec.name))
        .with_annotations(annotations)
        .with_meta(MetaObject(meta));
    with_output_schema(tool)
}

/// The tool with the `outputSchema` derived from the type its successful answer serializes.
fn with_output_schema(tool: Tool) -> Tool {
    match tool.name.as_ref() {
        LIST_GRAPH_SESSIONS => tool.with_output_schema::<crate::sessions::SessionList>(),
        RUN_GRAPH_SESSION => tool.with_output_schema::<crate::runs::Ticket>(),
        GET_GRAPH_RUN => tool.with_output_schema::<crate::runs::RunView>(),
        CANCEL_GRAPH_RUN => tool.with_output_schema::<crate::runs::CancelOutcome>(),
        _ => tool,
    }
}

/// All definitions, in listing order.
pub fn definitions() -> Vec<Tool> {
    TOOLS.iter().map(definition).collect()
}

/// Why a call's arguments do not fit the tool's contract, in words for the agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ArgumentError(pub String);

/// Arguments of one call, checked against the tool's contract.
pub struct Arguments<'a> {
    tool: &'static str,
    map: &'a Map<String, Value>,
}

impl<'a> Arguments<'a> {
    /// Rejects any argument the tool does not accept.
    pub fn new(
        spec: &'static ToolSpec,
        map: &'a Map<String, Value>,
    ) -> Result<Self, ArgumentError> {
        if let Some(unknown) = map
            .keys()
            .find(|key| !spec.arguments.contains(&key.as_str()))
        {
            return Err(ArgumentError(format!(
                "unknown argument `{unknown}`: {} accepts only {}",
                spec.name,
                spec.arguments.join(", ")
            )));
        }
        Ok(Arguments {
            tool: spec.name,
            map,
        })
    }

    /// A required string argument.
    pub fn string(&self, key: &str) -> Result<&'a str, ArgumentError> {
        match self.map.get(key) {
            Some(Value::String(text)) => Ok(text),
            Some(_) => Err(ArgumentError(format!("`{key}` must be a string"))),
            None => Err(ArgumentError(format!(
                "{} needs the argument `{key}`",
                self.tool
            ))),
        }
    }

    /// An optional integer argument.
    pub fn integer(&self, key: &str) -> Result<Option<i64>, ArgumentError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(number)) => number
                .as_i64()
                .map(Some)
                .ok_or_else(|| ArgumentError(format!("`{key}` must be a whole number"))),
            Some(_) => Err(ArgumentError(format!("`{key}` must be a whole number"))),
        }
    }

    /// An optional object argument (empty when absent).
    pub fn object(&self, key: &str) -> Result<Map<String, Value>, ArgumentError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(Map::new()),
            Some(Value::Object(object)) => Ok(object.clone()),
            Some(_) => Err(ArgumentError(format!("`{key}` must be a JSON object"))),
        }
    }
}
