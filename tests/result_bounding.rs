//! Results are bounded all or nothing at 100,000 UTF-16 units of completion JSON; the full
//! result stays in the desktop's history; errors arrive cut to 2,000 characters.

use crate::harness;

use harness::{BIG, THROWS, World};
use relay_protocol::{CompletionStatus, MAX_ERROR_CHARS, MAX_RESULT_CHARS, json_utf16_len};
use serde_json::{Value, json};

/// Units of the completion JSON besides the result text itself.
fn overhead(execution_id: &str) -> usize {
    let empty = relay_desktop::bounding::completion(
        execution_id,
        CompletionStatus::Completed,
        Some(Value::String(String::new())),
        0,
        0.0,
        None,
    );
    json_utf16_len(&empty.bounded_view())
}

async fn run_big(
    world: &World,
    session: &relay_protocol::GraphSessionId,
    key: &str,
    unit: &str,
    n: usize,
) -> Value {
    let command = world
        .queue(session, key, json!({"unit": unit, "n": n}))
        .await;
    world.relay().pass(&Default::default()).await;
    world.get(&command).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_bounded_in_utf16_units_all_or_nothing() {
    let world = World::new(json!({})).await;
    let session = world.share(BIG).await;
    // Execution ids are UUIDs: 36 characters.
    let fixed = overhead("00000000-0000-0000-0000-000000000000");

    // ASCII: one unit over the limit → truncated, whole.
    let over = run_big(
        &world,
        &session,
        "key-bound-1",
        "a",
        MAX_RESULT_CHARS - fixed + 1,
    )
    .await;
    assert_eq!(over["status"], "completed");
    assert_eq!(
        over["result_truncated"], true,
        "{}",
        over["result_truncated"]
    );
    assert!(
        over.get("result").is_none_or(Value::is_null),
        "never half a result"
    );
    let history = world.state.history().expect("history");
    let full = history[0].result.as_ref().expect("the full result is kept");
    assert_eq!(
        full.as_str().map(str::len),
        Some(MAX_RESULT_CHARS - fixed + 1)
    );
    assert!(history[0].result_truncated);

    // Japanese exactly at the limit fits, and is about three times that in UTF-8 bytes.
    let japanese = run_big(
        &world,
        &session,
        "key-bound-2",
        "日",
        MAX_RESULT_CHARS - fixed,
    )
    .await;
    let text = japanese["result"].as_str().expect("the result arrived");
    assert_eq!(text.chars().count(), MAX_RESULT_CHARS - fixed);
    assert_eq!(text.len(), 3 * (MAX_RESULT_CHARS - fixed));

    // An emoji counts two.
    let pairs = (MAX_RESULT_CHARS - fixed) / 2;
    let fits = run_big(&world, &session, "key-bound-3", "😀", pairs).await;
    assert!(fits["result"].is_string(), "{}", fits["result_truncated"]);
    let over = run_big(&world, &session, "key-bound-4", "😀", pairs + 1).await;
    assert_eq!(over["result_truncated"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5000_character_error_arrives_as_2000() {
    let world = World::new(json!({})).await;
    let session = world.share(THROWS).await;
    let command = world
        .queue(&session, "key-bound-5", json!({"unit": "e", "n": 5000}))
        .await;
    world.relay().pass(&Default::default()).await;
    let run = world.get(&command).await;
    assert_eq!(run["status"], "failed");
    assert_eq!(
        run["error"].as_str().map(|e| e.chars().count()),
        Some(MAX_ERROR_CHARS)
    );
    let history = world.state.history().expect("history");
    assert_eq!(
        history[0].error.as_deref().map(|e| e.chars().count()),
        Some(MAX_ERROR_CHARS)
    );
}

/// A result as deep as a graph may return reaches the agent through MCP (whose JSON-RPC answer
/// wraps it in a few more levels; at 125 levels an MCP client's parser used to refuse the whole
/// answer), and one level deeper fails the run saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deepest_result_a_graph_may_return_reaches_the_agent() {
    let world = World::new(json!({})).await;
    let session = world
        .share(
            r#"export const meta = {name: "Deep", slug: "deep", version: "1"};
export default async function (args) { let v = 1; for (let i = 0; i < args.n; i++) v = [v]; return v; }"#,
        )
        .await;
    let deepest = runner::host::MAX_JSON_DEPTH;
    for n in [deepest, deepest + 1, 125] {
        let command = world
            .queue(&session, &format!("key-deep-{n}"), json!({"n": n}))
            .await;
        world.relay().pass(&Default::default()).await;
        let got = world.get(&command).await;
        if n == deepest {
            assert_eq!(got["status"], "completed", "{got}");
            let mut result = &got["result"];
            for _ in 0..n {
                result = &result[0];
            }
            assert_eq!(result, &json!(1));
        } else {
            assert_eq!(got["status"], "failed", "{n}");
            assert!(
                got["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("nested more than 100 levels")),
                "{got}"
            );
        }
    }
}
