//! A tool's schemas, derived from its Rust types (schemars), and the decoding of a call's
//! arguments into its input type: first the strict checks with messages written for the agent
//! (an unknown argument, a missing one, a wrong JSON type, each named), read off the input
//! schema, then serde. The domain functions check ranges and formats with their own messages;
//! the schema states the same bounds for hosts.

use std::sync::Arc;

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use schemars::transform::{RecursiveTransform, Transform};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// Why a call's arguments do not fit the tool's contract, in words for the agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ArgumentError(pub String);

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

/// The `inputSchema` of type `T`, as a JSON object.
pub fn input_schema_of<T: JsonSchema>() -> Arc<JsonObject> {
    match schema_of::<T>() {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

/// The `outputSchema` of type `T`: draft 2020-12, describing what `T` serializes to, with
/// subschemas inline, and portable: no number `format`s (`uint64` and `double` are not JSON
/// Schema's, validators warn about them), no type arrays (a field without a value is left out
/// of the answer, so an optional field is its value's type and not required), descriptions on
/// one line.
///
/// # Panics
/// In debug builds, if a field of `T` may be `null` (an `Option` serialized without
/// `skip_serializing_if`): its schema would need a `null` type.
pub fn output_schema_of<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    let mut settings = SchemaSettings::draft2020_12().for_serialize();
    settings.inline_subschemas = true;
    let mut schema = settings
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    portable(&mut schema);
    within_context_budget(&mut schema);
    debug_assert!(
        !mentions_null(&schema),
        "an answer field may be null: serialize it with skip_serializing_if: {schema}"
    );
    match schema {
        Value::Object(mut map) => {
            map.remove("title");
            map.remove("description");
            Arc::new(map)
        }
        _ => Arc::new(JsonObject::new()),
    }
}

/// Keeps the descriptions of an answer's top-level fields and drops those of the fields nested
/// in them: the answer's JSON reaches the model anyway, and every conversation carries the
/// tools' list (issue 42 holds the graph tools' list to 10 KB).
fn within_context_budget(schema: &mut Value) {
    fn without_descriptions(value: &mut Value) {
        match value {
            Value::Object(map) => {
                map.remove("description");
                map.values_mut().for_each(without_descriptions);
            }
            Value::Array(items) => items.iter_mut().for_each(without_descriptions),
            _ => {}
        }
    }
    let Some(Value::Object(fields)) = schema.get_mut("properties") else {
        return;
    };
    for field in fields.values_mut() {
        let Value::Object(field) = field else {
            continue;
        };
        for (key, value) in field.iter_mut() {
            if key != "description" {
                without_descriptions(value);
            }
        }
    }
}

/// Makes `value` portable at any depth: drops number `format`s, drops the `null` alternative
/// of every property that is not required, and puts descriptions on one line.
fn portable(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let numeric = match map.get("type") {
                Some(Value::String(kind)) => kind == "integer" || kind == "number",
                Some(Value::Array(kinds)) => kinds.iter().any(|k| k == "integer" || k == "number"),
                _ => false,
            };
            if numeric {
                map.remove("format");
            }
            if let Some(Value::String(text)) = map.get_mut("description") {
                *text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            }
            let required: Vec<String> = map
                .get("required")
                .and_then(Value::as_array)
                .map(|names| {
                    names
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            if let Some(Value::Object(properties)) = map.get_mut("properties") {
                for (name, property) in properties.iter_mut() {
                    if !required.contains(name) {
                        drop_null(property);
                    }
                }
            }
            map.values_mut().for_each(portable);
        }
        Value::Array(items) => items.iter_mut().for_each(portable),
        _ => {}
    }
}

/// The schema of a field left out when it has no value: its `null` alternative removed, from a
/// type array (`["string", "null"]` becomes `"string"`) or an `anyOf`.
fn drop_null(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    if let Some(Value::Array(types)) = map.get("type") {
        let rest: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        let single = match rest.as_slice() {
            [one] => one.clone(),
            _ => Value::Array(rest),
        };
        map.insert("type".into(), single);
    }
    let any_of = map.remove("anyOf");
    if let Some(Value::Array(branches)) = any_of {
        let mut rest: Vec<Value> = branches
            .into_iter()
            .filter(|branch| branch.get("type") != Some(&Value::from("null")))
            .collect();
        match (rest.len(), rest.pop()) {
            (1, Some(Value::Object(only))) => map.extend(only),
            (_, Some(last)) => {
                rest.push(last);
                map.insert("anyOf".into(), Value::Array(rest));
            }
            (_, None) => {}
        }
    }
}

/// Whether `schema` allows `null` anywhere.
fn mentions_null(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            let null_type = match map.get("type") {
                Some(Value::String(kind)) => kind == "null",
                Some(Value::Array(kinds)) => kinds.iter().any(|k| k == "null"),
                _ => false,
            };
            null_type || map.values().any(mentions_null)
        }
        Value::Array(items) => items.iter().any(mentions_null),
        _ => false,
    }
}

/// The argument names `schema` accepts, in its order.
fn argument_names(schema: &JsonObject) -> Vec<String> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| properties.keys().cloned().collect())
        .unwrap_or_default()
}

/// Decodes a call's `arguments` for tool `name`, whose input schema is `schema`, into `T`,
/// refusing (with a message for the agent) an unknown argument, a missing required one and a
/// value of the wrong JSON type.
pub fn decode<T: DeserializeOwned>(
    name: &str,
    schema: &JsonObject,
    arguments: &Map<String, Value>,
) -> Result<T, ArgumentError> {
    let none = Map::new();
    // Borrowed, not copied: every tool call passes here.
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&none);
    if let Some(unknown) = arguments.keys().find(|key| !properties.contains_key(*key)) {
        return Err(ArgumentError(format!(
            "unknown argument `{unknown}`: {name} accepts only {}",
            argument_names(schema).join(", ")
        )));
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut present = Map::new();
    for (key, property) in properties {
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
    use serde::Deserialize;
    use serde_json::json;

    /// Arguments shaped like `run_graph_session`'s.
    #[derive(Debug, Deserialize, JsonSchema)]
    #[allow(dead_code)] // Decoded for the checks; not every field is read.
    #[serde(deny_unknown_fields)]
    struct Run {
        graph_session_id: String,
        #[serde(default)]
        arguments: Map<String, Value>,
        idempotency_key: String,
        max_tokens: Option<i64>,
    }

    #[test]
    fn a_derived_schema_is_closed_and_plain() {
        let schema = input_schema_of::<Run>();
        assert_eq!(schema.get("type"), Some(&json!("object")));
        assert_eq!(schema.get("additionalProperties"), Some(&json!(false)));
        assert_eq!(
            schema["properties"]["max_tokens"],
            json!({"type": "integer"})
        );
        assert!(schema.get("title").is_none());
    }

    #[test]
    fn output_schemas_are_portable() {
        #[derive(serde::Serialize, JsonSchema)]
        #[allow(dead_code)] // Only its schema is used.
        struct Inner {
            /// Nested: left out of the listing.
            #[serde(skip_serializing_if = "Option::is_none")]
            at: Option<String>,
        }
        #[derive(serde::Serialize, JsonSchema)]
        #[allow(dead_code)] // Only its schema is used.
        struct Out {
            /// Two
            /// lines.
            count: u64,
            #[serde(skip_serializing_if = "Option::is_none")]
            cost: Option<f64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            inner: Option<Inner>,
        }
        let schema = Value::Object(output_schema_of::<Out>().as_ref().clone());
        assert_eq!(
            schema["properties"],
            json!({
                "count": {"type": "integer", "minimum": 0, "description": "Two lines."},
                "cost": {"type": "number"},
                "inner": {"type": "object", "properties": {"at": {"type": "string"}}}
            }),
            "{schema}"
        );
        assert_eq!(schema["required"], json!(["count"]), "{schema}");
    }

    #[test]
    fn decoding_names_what_is_wrong() {
        let schema = input_schema_of::<Run>();
        let decode_run = |value: Value| {
            let Value::Object(map) = value else {
                panic!("an object")
            };
            decode::<Run>("run_graph_session", &schema, &map)
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
