//! A graph's argument schema: `meta.args`, a JSON Schema (draft 2020-12).
//!
//! `runner check` refuses a graph whose schema is not a valid schema, `runner run --args` and
//! `runner test` check the arguments before the graph starts, and the relay service checks an
//! agent's arguments before it queues a run. All of them go through [`ArgsSchema`], so a schema
//! the runner accepts is one the service accepts, with the same messages.
//!
//! A schema is self-contained: it may refer to its own `$defs`, never to another document
//! (nothing is read from disk or the network while compiling one).

use std::fmt;

use boon::{CompileError, Compiler, Draft, ErrorKind, InstanceToken, SchemaIndex, Schemas};
use serde_json::Value;

/// Longest accepted schema, as JSON text in UTF-16 code units (JavaScript's
/// `JSON.stringify(meta.args).length`). The relay's sync carries at most this much per session.
pub const MAX_SCHEMA_CHARS: usize = 16_384;

/// The only `$schema` a graph may name (or leave out).
pub const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// Where the schema is filed while it is compiled: relative `$ref`s resolve under it and find
/// nothing.
const SCHEMA_URL: &str = "https://graphrelay.invalid/meta-args.json";

/// Why `meta.args` is not a usable argument schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The schema's JSON text is longer than [`MAX_SCHEMA_CHARS`].
    #[error("meta.args is {0} characters long as JSON, at most {MAX_SCHEMA_CHARS} are allowed")]
    TooLarge(usize),
    /// The schema is not a JSON object.
    #[error(
        "meta.args must be a JSON Schema object, like {{ type: \"object\", properties: {{ ... }} }}"
    )]
    NotAnObject,
    /// The schema's `type` does not admit an object, which arguments always are.
    #[error("meta.args.type must allow \"object\": a graph's arguments are always an object")]
    NotForObjects,
    /// `$schema` names another draft.
    #[error("meta.args.$schema must be \"{DRAFT_2020_12}\" (or left out), not {0}")]
    Draft(String),
    /// The schema breaks the draft 2020-12 metaschema or refers to another document.
    #[error("meta.args is not a valid JSON Schema (draft 2020-12): {0}")]
    Invalid(String),
}

/// Arguments that do not fit the schema: the first failing place and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Where, as a path under the arguments' name: `args.topic`, `arguments.items[2]`.
    pub path: String,
    /// What is wrong there.
    pub reason: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

impl std::error::Error for Mismatch {}

/// A compiled argument schema.
pub struct ArgsSchema {
    schemas: Schemas,
    index: SchemaIndex,
}

impl fmt::Debug for ArgsSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArgsSchema").finish_non_exhaustive()
    }
}

impl ArgsSchema {
    /// Checks `schema` (size, shape, draft, the metaschema, no outside references) and
    /// compiles it.
    pub fn compile(schema: &Value) -> Result<Self, SchemaError> {
        let chars = json_utf16_len(schema);
        if chars > MAX_SCHEMA_CHARS {
            return Err(SchemaError::TooLarge(chars));
        }
        let Value::Object(map) = schema else {
            return Err(SchemaError::NotAnObject);
        };
        match map.get("$schema") {
            None => {}
            Some(Value::String(url)) if url.trim_end_matches('#') == DRAFT_2020_12 => {}
            Some(other) => return Err(SchemaError::Draft(other.to_string())),
        }
        if !admits_objects(map.get("type")) {
            return Err(SchemaError::NotForObjects);
        }
        let mut compiler = Compiler::new();
        compiler.set_default_draft(Draft::V2020_12);
        compiler.use_loader(Box::new(NoOtherDocuments));
        compiler
            .add_resource(SCHEMA_URL, schema.clone())
            .map_err(|e| SchemaError::Invalid(compile_message(&e)))?;
        let mut schemas = Schemas::new();
        let index = compiler
            .compile(SCHEMA_URL, &mut schemas)
            .map_err(|e| SchemaError::Invalid(compile_message(&e)))?;
        Ok(Self { schemas, index })
    }

    /// Checks `args` against the schema; a mismatch names its path under `root` (the
    /// arguments' own name where the caller passes them: `args`, `arguments`).
    pub fn validate(&self, args: &Value, root: &str) -> Result<(), Mismatch> {
        match self.schemas.validate(args, self.index) {
            Ok(()) => Ok(()),
            Err(error) => Err(mismatch(&error, root)),
        }
    }
}

/// Whether a schema's `type` lets an object through.
fn admits_objects(kind: Option<&Value>) -> bool {
    match kind {
        None => true,
        Some(Value::String(name)) => name == "object",
        Some(Value::Array(names)) => names.iter().any(|name| name == "object"),
        // Not a type name at all: the metaschema check names it.
        Some(_) => true,
    }
}

/// Refuses every document but the schema itself (the metaschemas are built into boon).
struct NoOtherDocuments;

impl boon::UrlLoader for NoOtherDocuments {
    fn load(&self, url: &str) -> Result<Value, Box<dyn std::error::Error>> {
        Err(format!(
            "meta.args may not refer to another document ({url}); put the definitions under $defs and refer to them as \"#/$defs/NAME\""
        )
        .into())
    }
}

/// A compile error in words: a metaschema violation names its place inside `meta.args`.
fn compile_message(error: &CompileError) -> String {
    match error {
        CompileError::ValidationError { src, .. } => mismatch(src, "meta.args").to_string(),
        CompileError::LoadUrlError { src, .. } => src.to_string(),
        other => other.to_string().replace(SCHEMA_URL, "meta.args"),
    }
}

/// The first leaf of a validation error's tree, as a path and a reason.
fn mismatch(error: &boon::ValidationError<'_, '_>, root: &str) -> Mismatch {
    let mut leaf = error;
    while let Some(first) = leaf.causes.first() {
        leaf = first;
    }
    let mut path = path_of(&leaf.instance_location.tokens, root);
    let reason = match &leaf.kind {
        ErrorKind::Required { want } => {
            push_property(&mut path, want.first().copied().unwrap_or_default());
            "is required but missing".to_owned()
        }
        ErrorKind::AdditionalProperties { got } => {
            push_property(&mut path, got.first().map_or("", |name| name.as_ref()));
            "is not allowed (the schema lists the properties it accepts)".to_owned()
        }
        ErrorKind::DependentRequired { prop, missing } => {
            let missing = missing.first().copied().unwrap_or_default();
            push_property(&mut path, missing);
            format!("is required when {prop} is present")
        }
        ErrorKind::FalseSchema => "is not allowed".to_owned(),
        other => other.to_string(),
    };
    Mismatch { path, reason }
}

/// `root.key[3]["odd key"]` for a list of instance tokens.
fn path_of(tokens: &[InstanceToken<'_>], root: &str) -> String {
    let mut path = root.to_owned();
    for token in tokens {
        match token {
            InstanceToken::Prop(name) => push_property(&mut path, name),
            InstanceToken::Item(index) => path.push_str(&format!("[{index}]")),
        }
    }
    path
}

fn push_property(path: &mut String, name: &str) {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    if plain {
        path.push('.');
        path.push_str(name);
    } else {
        path.push('[');
        path.push_str(&Value::String(name.to_owned()).to_string());
        path.push(']');
    }
}

/// Length of `value`'s JSON text in UTF-16 code units.
pub fn json_utf16_len(value: &Value) -> usize {
    value.to_string().encode_utf16().count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn topic_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "topic": {"type": "string", "minLength": 1},
                "tags": {"type": "array", "items": {"type": "string"}},
                "odd key": {"type": "integer"}
            },
            "required": ["topic"],
            "additionalProperties": false
        })
    }

    #[test]
    fn arguments_that_fit_pass_and_others_name_the_failing_path() {
        let schema = ArgsSchema::compile(&topic_schema()).expect("a valid schema");
        assert_eq!(schema.validate(&json!({"topic": "rust"}), "args"), Ok(()));
        let cases = [
            (json!({}), "args.topic", "is required but missing"),
            (
                json!({"topic": 7}),
                "args.topic",
                "want string, but got number",
            ),
            (
                json!({"topic": "x", "tags": ["a", 2]}),
                "args.tags[1]",
                "want string",
            ),
            (
                json!({"topic": "x", "odd key": "y"}),
                "args[\"odd key\"]",
                "want integer",
            ),
            (
                json!({"topic": "x", "extra": 1}),
                "args.extra",
                "is not allowed",
            ),
            (json!({"topic": ""}), "args.topic", "length must be >=1"),
        ];
        for (args, path, reason) in cases {
            let mismatch = schema.validate(&args, "args").expect_err("refused");
            assert_eq!(mismatch.path, path, "{args}: {mismatch}");
            assert!(mismatch.reason.contains(reason), "{args}: {mismatch}");
        }
        let named = schema
            .validate(&json!({}), "arguments")
            .expect_err("refused");
        assert_eq!(
            named.to_string(),
            "arguments.topic: is required but missing"
        );
    }

    #[test]
    fn a_bad_schema_is_refused_naming_what_is_wrong() {
        let cases = [
            (json!("object"), "must be a JSON Schema object"),
            (json!({"type": "array"}), "must allow \"object\""),
            (
                json!({"$schema": "http://json-schema.org/draft-07/schema#"}),
                "draft-07",
            ),
            (
                json!({"type": "object", "properties": {"topic": {"type": "strin"}}}),
                "meta.args.properties.topic.type",
            ),
            (
                json!({"type": "object", "required": "topic"}),
                "meta.args.required",
            ),
            (
                json!({"type": "object", "properties": {"a": {"$ref": "other.json"}}}),
                "may not refer to another document",
            ),
            (
                json!({"properties": {"a": {"$ref": "file:///etc/passwd"}}}),
                "may not refer to another document",
            ),
        ];
        for (schema, expected) in cases {
            let error = ArgsSchema::compile(&schema).expect_err("refused");
            assert!(error.to_string().contains(expected), "{schema}: {error}");
        }
        let local = json!({
            "$defs": {"name": {"type": "string"}},
            "properties": {"a": {"$ref": "#/$defs/name"}}
        });
        let schema = ArgsSchema::compile(&local).expect("a local $ref is fine");
        assert!(schema.validate(&json!({"a": 1}), "args").is_err());
        ArgsSchema::compile(&json!({"$schema": DRAFT_2020_12})).expect("the draft may be named");
    }

    #[test]
    fn the_schema_size_limit_is_exact() {
        let padded = |chars: usize| {
            let empty = json!({"description": ""});
            let pad = chars - json_utf16_len(&empty);
            json!({"description": "ü".repeat(pad)})
        };
        assert_eq!(json_utf16_len(&padded(MAX_SCHEMA_CHARS)), MAX_SCHEMA_CHARS);
        ArgsSchema::compile(&padded(MAX_SCHEMA_CHARS)).expect("at the limit");
        assert_eq!(
            ArgsSchema::compile(&padded(MAX_SCHEMA_CHARS + 1)).map(|_| ()),
            Err(SchemaError::TooLarge(MAX_SCHEMA_CHARS + 1))
        );
    }
}
