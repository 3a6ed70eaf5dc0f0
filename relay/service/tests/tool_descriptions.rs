//! Tool and field descriptions are written for two readers, rustdoc and a model: in the
//! `tools/list` the service answers, every description (each tool's and every one nested in
//! its schemas) is plain sentences, with no rustdoc link, code span or markdown link; no schema
//! carries a `format` JSON Schema does not define; and every status field lists its values.

use crate::common;

use common::TestService;
use common::chat::ChatService;
use common::raw::RawClient;
use serde_json::Value;

/// The `format`s JSON Schema (draft 2020-12) defines.
const STANDARD_FORMATS: [&str; 19] = [
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Every `(path, key, value)` under `value`, depth first.
fn walk<'a>(value: &'a Value, path: String, out: &mut Vec<(String, &'a str, &'a Value)>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                out.push((path.clone(), key.as_str(), child));
                walk(child, format!("{path}/{key}"), out);
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                walk(item, format!("{path}/{index}"), out);
            }
        }
        _ => {}
    }
}

/// What is wrong with the listing, one line per finding.
fn findings(tools: &[Value]) -> Vec<String> {
    let mut found = Vec::new();
    for tool in tools {
        let name = tool["name"].as_str().unwrap_or("?");
        let mut entries = Vec::new();
        walk(tool, String::new(), &mut entries);
        for (path, key, value) in entries {
            // Inside `properties` the keys are field names, not schema keywords.
            if path.ends_with("/properties") {
                continue;
            }
            match (key, value) {
                ("description", Value::String(text)) => {
                    for mark in ["[", "`", "]("] {
                        if text.contains(mark) {
                            found.push(format!("{name}{path}: `{mark}` in description: {text}"));
                        }
                    }
                }
                ("format", Value::String(format))
                    if !STANDARD_FORMATS.contains(&format.as_str()) =>
                {
                    found.push(format!("{name}{path}: non-standard format `{format}`"));
                }
                _ => {}
            }
        }
        found.extend(status_without_enum(name, tool));
    }
    found
}

/// The status a session's desktop gives it: the desktop's own word, passed through as the
/// protocol carries it (any text); listing values here would make a newer desktop's answer
/// break the schema.
const DESKTOPS_WORD: &str = "list_graph_sessions/outputSchema/$defs/SessionEntry/properties";

/// The `status` properties of the tool's schemas that do not list their values.
fn status_without_enum(name: &str, tool: &Value) -> Vec<String> {
    let mut entries = Vec::new();
    walk(tool, String::new(), &mut entries);
    entries
        .into_iter()
        .filter(|(path, key, _)| path.ends_with("/properties") && *key == "status")
        .filter(|(path, _, _)| format!("{name}{path}") != DESKTOPS_WORD)
        .filter(|(_, _, schema)| schema.get("enum").is_none())
        .map(|(path, _, schema)| format!("{name}{path}/status has no enum: {schema}"))
        .collect()
}

#[tokio::test]
async fn every_description_in_tools_list_is_plain_sentences_and_every_schema_portable() {
    let service = TestService::start().await;
    let project = service.project("Notes", "ann").await;
    // With a chat link, so the chat-task tools are listed (and checked) too.
    service.link_chat(&project, "claude").await;
    let token = service.full_agent(&project).await;
    let client = RawClient::new(&service.mcp_url(), &token, false);
    let listed = client.result("tools/list", serde_json::json!({})).await;
    let tools = listed["tools"].as_array().expect("tools").clone();
    assert_eq!(tools.len(), 9, "{listed}");
    let described = tools
        .iter()
        .filter(|tool| tool["description"].as_str().is_some_and(|d| !d.is_empty()))
        .count();
    assert_eq!(described, 9, "every tool is described");
    let problems = findings(&tools);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_check_finds_rustdoc_syntax_formats_and_open_status_fields() {
    let tool = serde_json::json!({
        "name": "t",
        "description": "Runs [`Graph`]s.",
        "outputSchema": {"properties": {
            "count": {"type": "integer", "format": "uint64", "description": "How many (see [docs](x))."},
            "status": {"type": "string", "description": "Its status"},
            "created_at": {"type": "string", "format": "date-time"}
        }}
    });
    let found = findings(&[tool]);
    assert_eq!(found.len(), 6, "{found:#?}");
}
