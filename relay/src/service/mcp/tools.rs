//! The four graph tools: names, descriptions, argument schemas, annotations, scopes, and the
//! checking of the arguments an agent sends.

use std::sync::Arc;

use rmcp::model::{JsonObject, MetaObject, Tool, ToolAnnotations};
use serde_json::{Map, Value, json};

use crate::service::auth::Scope;
use crate::service::runs::{IDEMPOTENCY_KEY_CHARS, MAX_GET_WAIT, RUN_NOT_FOUND};
use crate::service::sessions::LIST_LIMIT;

/// `list_graph_sessions`.
pub const LIST_GRAPH_SESSIONS: &str = "list_graph_sessions";
/// `run_graph_session`.
pub const RUN_GRAPH_SESSION: &str = "run_graph_session";
/// `get_graph_run`.
pub const GET_GRAPH_RUN: &str = "get_graph_run";
/// `cancel_graph_run`.
pub const CANCEL_GRAPH_RUN: &str = "cancel_graph_run";

/// One tool's contract.
#[derive(Debug, Clone, Copy)]
pub struct ToolSpec {
    /// Tool name.
    pub name: &'static str,
    /// The scope a token needs to call it.
    pub scope: Scope,
    /// Whether it only reads.
    pub read_only: bool,
    /// Argument names it accepts; anything else is rejected.
    pub arguments: &'static [&'static str],
}

/// The tools, in listing order.
pub const TOOLS: [ToolSpec; 4] = [
    ToolSpec {
        name: LIST_GRAPH_SESSIONS,
        scope: Scope::Read,
        read_only: true,
        arguments: &["project_id", "limit"],
    },
    ToolSpec {
        name: RUN_GRAPH_SESSION,
        scope: Scope::Run,
        read_only: false,
        arguments: &["graph_session_id", "arguments", "idempotency_key"],
    },
    ToolSpec {
        name: GET_GRAPH_RUN,
        scope: Scope::Read,
        read_only: true,
        arguments: &["command_id", "wait_seconds"],
    },
    ToolSpec {
        name: CANCEL_GRAPH_RUN,
        scope: Scope::Run,
        read_only: false,
        arguments: &["command_id"],
    },
];

/// The spec of tool `name`.
pub fn spec(name: &str) -> Option<&'static ToolSpec> {
    TOOLS.iter().find(|tool| tool.name == name)
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
        _ => String::new(),
    }
}

/// The exact JSON Schema of tool `name`'s arguments.
pub fn input_schema(name: &str) -> Value {
    match name {
        LIST_GRAPH_SESSIONS => json!({
            "type": "object",
            "properties": {
                "project_id": {"type": "string"},
                "limit": {"type": "integer", "minimum": LIST_LIMIT.start(), "maximum": LIST_LIMIT.end()}
            },
            "required": ["project_id"],
            "additionalProperties": false
        }),
        RUN_GRAPH_SESSION => json!({
            "type": "object",
            "properties": {
                "graph_session_id": {"type": "string"},
                "arguments": {"type": "object"},
                "idempotency_key": {
                    "type": "string",
                    "minLength": IDEMPOTENCY_KEY_CHARS.start(),
                    "maxLength": IDEMPOTENCY_KEY_CHARS.end()
                }
            },
            "required": ["graph_session_id", "idempotency_key"],
            "additionalProperties": false
        }),
        GET_GRAPH_RUN => json!({
            "type": "object",
            "properties": {
                "command_id": {"type": "string"},
                "wait_seconds": {"type": "integer", "minimum": 0, "maximum": MAX_GET_WAIT.as_secs()}
            },
            "required": ["command_id"],
            "additionalProperties": false
        }),
        _ => json!({
            "type": "object",
            "properties": {"command_id": {"type": "string"}},
            "required": ["command_id"],
            "additionalProperties": false
        }),
    }
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
    } else if spec.name == CANCEL_GRAPH_RUN {
        ToolAnnotations::new()
            .read_only(false)
            .destructive(true)
            .idempotent(true)
    } else {
        ToolAnnotations::new().read_only(false).destructive(true)
    };
    let mut meta = Map::new();
    meta.insert("securitySchemes".into(), security_schemes(spec.scope));
    Tool::new(spec.name, description(spec.name), Arc::new(schema))
        .with_annotations(annotations)
        .with_meta(MetaObject(meta))
}

/// All four definitions, in listing order.
pub fn definitions() -> Vec<Tool> {
    TOOLS.iter().map(definition).collect()
}

/// Arguments of one call, checked against the tool's contract.
pub struct Arguments<'a> {
    tool: &'static str,
    map: &'a Map<String, Value>,
}

impl<'a> Arguments<'a> {
    /// Rejects any argument the tool does not accept.
    pub fn new(spec: &'static ToolSpec, map: &'a Map<String, Value>) -> Result<Self, String> {
        if let Some(unknown) = map
            .keys()
            .find(|key| !spec.arguments.contains(&key.as_str()))
        {
            return Err(format!(
                "unknown argument `{unknown}`: {} accepts only {}",
                spec.name,
                spec.arguments.join(", ")
            ));
        }
        Ok(Arguments {
            tool: spec.name,
            map,
        })
    }

    /// A required string argument.
    pub fn string(&self, key: &str) -> Result<&'a str, String> {
        match self.map.get(key) {
            Some(Value::String(text)) => Ok(text),
            Some(_) => Err(format!("`{key}` must be a string")),
            None => Err(format!("{} needs the argument `{key}`", self.tool)),
        }
    }

    /// An optional integer argument.
    pub fn integer(&self, key: &str) -> Result<Option<i64>, String> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(number)) => number
                .as_i64()
                .map(Some)
                .ok_or_else(|| format!("`{key}` must be a whole number")),
            Some(_) => Err(format!("`{key}` must be a whole number")),
        }
    }

    /// An optional object argument (empty when absent).
    pub fn object(&self, key: &str) -> Result<Map<String, Value>, String> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(Map::new()),
            Some(Value::Object(object)) => Ok(object.clone()),
            Some(_) => Err(format!("`{key}` must be a JSON object")),
        }
    }
}
