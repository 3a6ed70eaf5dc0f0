//! End to end: a remote run's token cap. The owner's cap for the session replaces the relay's
//! default; an agent may ask for less with `max_tokens` and the run stops there; asking for
//! more than the owner allows runs at the owner's cap, and the run view says so.

use crate::{common, harness};

use harness::World;
use relay_protocol::GraphSessionId;
use serde_json::{Value, json};

/// A graph that starts one agent after another until the budget refuses the next.
const LOOPS: &str = r#"
export const meta = {name: "Loops", slug: "loops", version: "1.0.0"};
export default async function (args, g) {
  for (;;) { await g.agent({label: "step", prompt: "go on"}); }
}
"#;

/// Every agent turn costs 100 tokens.
fn hundred_per_turn() -> Value {
    json!({"default": {"text": "more", "tokens": 100}})
}

/// Queues a run of `session` asking for `max_tokens` (if any), runs one pass, and returns the
/// finished run and the text `get_graph_run` gave with it.
async fn run_asking(
    world: &World,
    session: &GraphSessionId,
    key: &str,
    max_tokens: Option<u64>,
) -> (Value, String) {
    let mut arguments = json!({"graph_session_id": session.as_str(), "idempotency_key": key});
    if let Some(cap) = max_tokens {
        arguments["max_tokens"] = json!(cap);
    }
    let ticket = common::ok(&common::call(&world.client, "run_graph_session", arguments).await);
    let command = ticket["command_id"]
        .as_str()
        .expect("command id")
        .to_owned();
    world.relay().pass(&Default::default()).await;
    let answer = common::call(
        &world.client,
        "get_graph_run",
        json!({"command_id": command}),
    )
    .await;
    // A failed run is a tool error that still carries the run.
    let run = answer.structured_content.clone().expect("structured run");
    (run, common::text(&answer))
}

/// The run failed with `budget_exhausted` having spent the cap and less than one more turn.
fn assert_spent_about(run: &Value, cap: u64) {
    let spent = run["total_tokens"].as_u64().expect("tokens");
    assert!((cap..cap + 100).contains(&spent), "cap {cap}: {run}");
    let error = run["error"].as_str().unwrap_or_default();
    assert!(error.contains("budget_exhausted"), "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_asking_for_fewer_tokens_stops_there() {
    let world = World::new(hundred_per_turn()).await;
    let session = world.share(LOOPS).await;
    let (run, _) = run_asking(&world, &session, "cap-less-1", Some(250)).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"]
            .as_str()
            .unwrap_or_default()
            .contains("budget_exhausted"),
        "{run}"
    );
    // The run stops at the cap: the last turn is clipped to what is left, the next agent is
    // refused.
    assert_spent_about(&run, 250);
    assert_eq!(
        world.state.history().expect("history")[0].end_cause,
        Some(relay_protocol::EndCause::TokenCap),
        "the cause the completion carried"
    );
    assert_eq!(run["max_tokens"], 250);
    assert_eq!(run["token_cap"], 250);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asking_for_more_than_the_owners_cap_runs_at_the_owners_cap_and_says_so() {
    let world = World::new(hundred_per_turn()).await;
    let session = world.share(LOOPS).await;
    world
        .state
        .set_session_cap(&session, Some(400))
        .expect("owner's cap");
    let (run, text) = run_asking(&world, &session, "cap-more-1", Some(5_000)).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_spent_about(&run, 400);
    assert_eq!(run["max_tokens"], 5_000);
    assert_eq!(run["token_cap"], 400);
    assert!(
        text.contains("owner's token cap of 400, below the 5000 asked for"),
        "{text}"
    );

    // Without an ask the owner's cap replaces the relay's default.
    let (run, _) = run_asking(&world, &session, "cap-none-1", None).await;
    assert_spent_about(&run, 400);
    assert_eq!(run["max_tokens"], Value::Null);
    assert_eq!(run["token_cap"], 400);

    // The owner's cap removed: the relay's default applies again.
    world.state.set_session_cap(&session, None).expect("clear");
    let (run, _) = run_asking(&world, &session, "cap-some-1", Some(150)).await;
    assert_eq!(run["token_cap"], 150);
    assert_spent_about(&run, 150);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cap_below_one_is_refused_and_queues_nothing() {
    let world = World::new(hundred_per_turn()).await;
    let session = world.share(LOOPS).await;
    for (i, cap) in [json!(0), json!(-5), json!(1.5), json!("100")]
        .iter()
        .enumerate()
    {
        let answer = common::call(
            &world.client,
            "run_graph_session",
            json!({"graph_session_id": session.as_str(), "idempotency_key": format!("cap-bad-{i}"), "max_tokens": cap}),
        )
        .await;
        let message = common::err(&answer);
        assert!(message.contains("max_tokens"), "{cap}: {message}");
    }
    world.relay().pass(&Default::default()).await;
    assert!(world.state.history().expect("history").is_empty());
    assert!(world.state.set_session_cap(&session, Some(0)).is_err());
}
