//! Every tool's arguments as a Rust type. The tool's `inputSchema` is derived from the type
//! (schemars), and a call's arguments are decoded into it: first the strict checks with
//! messages written for the agent (an unknown argument, a missing one, a wrong JSON type, each
//! named), read off the same schema, then serde. The domain functions check ranges and formats
//! with their own messages; the schema states the same bounds for hosts.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use schemars::transform::{RecursiveTransform, Transform};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::tools::{
    ArgumentError, CANCEL_GRAPH_RUN, CLAIM_LINKED_CHAT_TASK, GET_GRAPH_RUN, GET_LINKED_CHAT_TASK,
    LIST_GRAPH_SESSIONS, LIST_LINKED_CHAT_TASKS, RUN_GRAPH_SESSION, SUBMIT_LINKED_CHAT_RESULT,
    UPLOAD_LINKED_CHAT_ARTIFACT,
};
use crate::chat_tasks::{
    MAX_ARTIFACT_ID_CHARS, MAX_ARTIFACT_NAME_CHARS, MAX_MIME_CHARS, MAX_TASK_RESULT_CHARS,
};
use crate::runs::{IDEMPOTENCY_KEY_CHARS, MAX_GET_WAIT};
use crate::sessions::LIST_LIMIT;

/// `list_graph_sessions`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListGraphSessions {
    /// This connection's project (the only one it may list).
    pub project_id: String,
    /// How many sessions to list (20 when left out).
    #[schemars(range(min = *LIST_LIMIT.start(), max = *LIST_LIMIT.end()))]
    pub limit: Option<i64>,
}

/// `run_graph_session`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunGraphSession {
    /// A session listed by list_graph_sessions.
    pub graph_session_id: String,
    /// The graph's arguments; they must fit the session's args_schema when it has one.
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// One key per intended run; retry with the same key after a lost response.
    #[schemars(length(min = *IDEMPOTENCY_KEY_CHARS.start(), max = *IDEMPOTENCY_KEY_CHARS.end()))]
    pub idempotency_key: String,
    /// A token cap for this run, below the owner's (which always applies).
    #[schemars(range(min = 1))]
    pub max_tokens: Option<i64>,
}

/// `get_graph_run`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetGraphRun {
    /// The run's command_id from run_graph_session.
    pub command_id: String,
    /// Wait up to this many seconds for the run to finish (0 when left out).
    #[schemars(range(min = 0, max = MAX_GET_WAIT.as_secs()))]
    pub wait_seconds: Option<i64>,
}

/// `cancel_graph_run`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelGraphRun {
    /// The run's command_id from run_graph_session.
    pub command_id: String,
}

/// `list_linked_chat_tasks`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListLinkedChatTasks {
    /// The chat link the owner connected this chat with.
    pub chat_link_id: String,
}

/// `get_linked_chat_task` and `claim_linked_chat_task`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkedChatTask {
    /// The chat link the owner connected this chat with.
    pub chat_link_id: String,
    /// A task listed by list_linked_chat_tasks.
    pub task_id: String,
}

/// `submit_linked_chat_result`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitLinkedChatResult {
    /// The chat link the owner connected this chat with.
    pub chat_link_id: String,
    /// The claimed task.
    pub task_id: String,
    /// The claim_id claim_linked_chat_task returned.
    pub claim_id: String,
    /// `completed` with the answer, or `failed` with the reason.
    #[schemars(extend("enum" = ["completed", "failed"]))]
    pub status: String,
    /// The answer, or why the task failed.
    #[schemars(length(max = MAX_TASK_RESULT_CHARS))]
    pub result: String,
}

/// `upload_linked_chat_artifact`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UploadLinkedChatArtifact {
    /// The chat link the owner connected this chat with.
    pub chat_link_id: String,
    /// The claimed task.
    pub task_id: String,
    /// The claim_id claim_linked_chat_task returned.
    pub claim_id: String,
    /// A stable id of your choosing; reuse it when retrying.
    #[schemars(length(min = 1, max = MAX_ARTIFACT_ID_CHARS), regex(pattern = "^[A-Za-z0-9._:-]+$"))]
    pub artifact_id: String,
    /// The file's name.
    #[schemars(length(min = 1, max = MAX_ARTIFACT_NAME_CHARS))]
    pub name: String,
    /// Its media type, like text/markdown.
    #[schemars(length(max = MAX_MIME_CHARS))]
    pub mime: String,
    /// The text content.
    pub content: String,
}

/// The `inputSchema` of type `T`: draft 2020-12, optional fields without a `null` type, no
/// integer `format` noise, no root title or description.
fn schema_of<T: JsonSchema>() -> Value {
    let mut schema = SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>();
    RecursiveTransform(|schema: &mut schemars::Schema| {
        schema.remove("format");
        // An optional argument may be left out; `null` is accepted too but not advertised.
        let single = match schema.get("type") {
            Some(Value::Array(types))
                if types.len() == 2 && types.contains(&Value::from("null")) =>
            {
                types.iter().find(|t| *t != "null").cloned()
            }
            _ => None,
        };
        if let Some(single) = single {
            schema.insert("type".into(), single);
        }
    })
    .transform(&mut schema);
    let mut value = schema.to_value();
    if let Value::Object(map) = &mut value {
        map.remove("title");
        map.remove("description");
    }
    value
}

/// The schemas, by tool name, derived once.
static SCHEMAS: LazyLock<HashMap<&'static str, Arc<JsonObject>>> = LazyLock::new(|| {
    let schemas = [
        (LIST_GRAPH_SESSIONS, schema_of::<ListGraphSessions>()),
        (RUN_GRAPH_SESSION, schema_of::<RunGraphSession>()),
        (GET_GRAPH_RUN, schema_of::<GetGraphRun>()),
        (CANCEL_GRAPH_RUN, schema_of::<CancelGraphRun>()),
        (LIST_LINKED_CHAT_TASKS, schema_of::<ListLinkedChatTasks>()),
        (GET_LINKED_CHAT_TASK, schema_of::<LinkedChatTask>()),
        (CLAIM_LINKED_CHAT_TASK, schema_of::<LinkedChatTask>()),
        (
            SUBMIT_LINKED_CHAT_RESULT,
            schema_of::<SubmitLinkedChatResult>(),
        ),
        (
            UPLOAD_LINKED_CHAT_ARTIFACT,
            schema_of::<UploadLinkedChatArtifact>(),
        ),
    ];
    schemas
        .into_iter()
        .map(|(name, schema)| match schema {
            Value::Object(map) => (name, Arc::new(map)),
            _ => (name, Arc::new(JsonObject::new())),
        })
        .collect()
});

/// Tool `name`'s `inputSchema` (an empty object schema for an unknown name).
pub fn input_schema(name: &str) -> Arc<JsonObject> {
    SCHEMAS.get(name).cloned().unwrap_or_default()
}

/// The argument names tool `name` accepts, in the schema's order.
pub fn argument_names(name: &str) -> Vec<String> {
    SCHEMAS
        .get(name)
        .and_then(|schema| schema.get("properties"))
        .and_then(Value::as_object)
        .map(|properties| properties.keys().cloned().collect())
        .unwrap_or_default()
}

/// Decodes a call's `arguments` for tool `name` into `T`, refusing (with a message for the
/// agent) an unknown argument, a missing required one and a value of the wrong JSON type.
pub fn decode<T: DeserializeOwned>(
    name: &'static str,
    arguments: &Map<String, Value>,
) -> Result<T, ArgumentError> {
    let schema = input_schema(name);
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Some(unknown) = arguments.keys().find(|key| !properties.contains_key(*key)) {
        return Err(ArgumentError(format!(
            "unknown argument `{unknown}`: {name} accepts only {}",
            argument_names(name).join(", ")
        )));
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut present = Map::new();
    for (key, property) in &properties {
        match arguments.get(key) {
            None | Some(Value::Null) if !required.contains(&key.as_str()) => {}
            None => {
                return Err(ArgumentError(format!("{name} needs the argument `{key}`")));
            }
            Some(value) => {
                check_type(key, property, value)?;
                present.insert(key.clone(), value.clone());
            }
        }
    }
    serde_json::from_value(Value::Object(present))
        .map_err(|e| ArgumentError(format!("{name}: {e}")))
}

/// `value` has the JSON type the property's schema names.
fn check_type(key: &str, property: &Value, value: &Value) -> Result<(), ArgumentError> {
    let fits = match property.get("type").and_then(Value::as_str) {
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("object") => value.is_object(),
        _ => true,
    };
    if fits {
        return Ok(());
    }
    Err(ArgumentError(
        match property.get("type").and_then(Value::as_str) {
            Some("string") => format!("`{key}` must be a string"),
            Some("integer") => format!("`{key}` must be a whole number"),
            _ => format!("`{key}` must be a JSON object"),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_tool_has_a_closed_derived_schema() {
        for tool in super::super::tools::TOOLS {
            let schema = input_schema(tool.name);
            assert_eq!(schema.get("type"), Some(&json!("object")), "{}", tool.name);
            assert_eq!(
                schema.get("additionalProperties"),
                Some(&json!(false)),
                "{}",
                tool.name
            );
            assert!(!argument_names(tool.name).is_empty(), "{}", tool.name);
        }
    }

    #[test]
    fn decoding_names_what_is_wrong() {
        let decode_run = |value: Value| {
            let Value::Object(map) = value else {
                panic!("an object")
            };
            decode::<RunGraphSession>(RUN_GRAPH_SESSION, &map)
        };
        let ok = decode_run(
            json!({"graph_session_id": "gs", "idempotency_key": "k", "max_tokens": null}),
        )
        .expect("decodes");
        assert!(ok.arguments.is_empty() && ok.max_tokens.is_none());
        let cases = [
            (
                json!({"graph_session_id": "gs", "idempotency_key": "k", "x": 1}),
                "unknown argument `x`: run_graph_session accepts only graph_session_id, arguments, idempotency_key, max_tokens",
            ),
            (
                json!({"graph_session_id": "gs"}),
                "run_graph_session needs the argument `idempotency_key`",
            ),
            (
                json!({"graph_session_id": 1, "idempotency_key": "k"}),
                "`graph_session_id` must be a string",
            ),
            (
                json!({"graph_session_id": "gs", "idempotency_key": "k", "arguments": []}),
                "`arguments` must be a JSON object",
            ),
            (
                json!({"graph_session_id": "gs", "idempotency_key": "k", "max_tokens": 1.5}),
                "`max_tokens` must be a whole number",
            ),
        ];
        for (value, expected) in cases {
            let error = decode_run(value.clone()).expect_err("refused");
            assert_eq!(error.0, expected, "{value}");
        }
    }
}
