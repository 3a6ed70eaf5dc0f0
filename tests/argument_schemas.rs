//! End to end: a graph's `meta.args` travels with the desktop's sync, `list_graph_sessions`
//! shows it, and `run_graph_session` refuses arguments that do not fit it, naming the failing
//! path, before anything is queued; arguments that fit run as usual.

use crate::{common, harness};

use harness::World;
use relay_protocol::MAX_SESSION_ARGS_SCHEMA_CHARS;
use serde_json::json;

/// A graph whose arguments must be `{topic: string}` (and an optional list of strings).
const TOPICAL: &str = r#"
export const meta = {
  name: "Topical", slug: "topical", version: "1.0.0",
  args: {
    type: "object",
    properties: {topic: {type: "string", minLength: 1}, tags: {type: "array", items: {type: "string"}}},
    required: ["topic"],
    additionalProperties: false
  }
};
export default async function (args) { return {topic: args.topic}; }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_that_do_not_fit_the_graphs_schema_are_refused_and_nothing_is_queued() {
    let world = World::new(json!({"default": {"text": "ok"}})).await;
    let session = world.share(TOPICAL).await;

    let listed = common::ok(
        &common::call(
            &world.client,
            "list_graph_sessions",
            json!({"project_id": world.project}),
        )
        .await,
    );
    let schema = &listed["sessions"][0]["args_schema"];
    assert_eq!(schema["required"], json!(["topic"]), "{listed}");
    assert_eq!(schema["properties"]["topic"]["type"], "string");

    let refusals = [
        (json!({}), "arguments.topic: is required but missing"),
        (json!({"topic": 7}), "arguments.topic: want string"),
        (json!({"topic": "x", "tags": ["a", 2]}), "arguments.tags[1]"),
        (
            json!({"topic": "x", "extra": true}),
            "arguments.extra: is not allowed",
        ),
    ];
    for (i, (arguments, expected)) in refusals.iter().enumerate() {
        let answer = common::call(
            &world.client,
            "run_graph_session",
            json!({"graph_session_id": session.as_str(), "arguments": arguments, "idempotency_key": format!("bad-args-{i}")}),
        )
        .await;
        let message = common::err(&answer);
        assert!(message.contains(expected), "{arguments}: {message}");
        assert!(message.contains("nothing was queued"), "{message}");
    }
    // Nothing reached the desktop: a pass runs nothing and the history stays empty.
    world.relay().pass(&Default::default()).await;
    assert!(world.state.history().expect("history").is_empty());

    // Arguments that fit run as usual.
    let command = world
        .queue(
            &session,
            "good-args-1",
            json!({"topic": "rust", "tags": ["a"]}),
        )
        .await;
    world.relay().pass(&Default::default()).await;
    let run = world.get(&command).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["result"], json!({"topic": "rust"}));
    assert_eq!(world.state.history().expect("history").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graph_without_a_schema_takes_any_object_and_its_listing_has_no_schema() {
    let world = World::new(json!({"default": {"text": "ok"}})).await;
    let session = world.share(harness::ECHO).await;
    let listed = common::ok(
        &common::call(
            &world.client,
            "list_graph_sessions",
            json!({"project_id": world.project}),
        )
        .await,
    );
    assert!(
        listed["sessions"][0].get("args_schema").is_none(),
        "{listed}"
    );
    let command = world
        .queue(&session, "any-args-1", json!({"anything": [1, 2]}))
        .await;
    assert_eq!(world.get(&command).await["status"], "queued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_and_the_relay_agree_on_the_schema_size_limit() {
    assert_eq!(MAX_SESSION_ARGS_SCHEMA_CHARS, graph_args::MAX_SCHEMA_CHARS);
}
