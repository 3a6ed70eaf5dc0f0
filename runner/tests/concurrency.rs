//! `Promise.all` over agents runs them concurrently on the host, at most `max_concurrency` at a
//! time. Asserted on the event order, not on time.

use crate::common;

use runner::RunStatus;
use runner::host::events::EventKind;
use serde_json::json;

const EIGHT: &str = r#"
export default async function (args, g) {
  const replies = await Promise.all(Array.from({length: 8}, (_, i) => g.agent({label: "a" + i, prompt: "p" + i})));
  return replies.length;
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_agents_run_four_at_a_time_in_two_rounds() {
    for engine in common::engines() {
        let (mut options, sink, _) = common::options(
            engine,
            json!({"default": {"text": "ok", "latency_ms": 200}}),
        );
        options.max_concurrency = 4;
        let outcome = common::run(EIGHT, json!({}), &options).await;
        assert_eq!(outcome.status, RunStatus::Completed);
        assert_eq!(outcome.result, Some(json!(8)));
        let events = sink.events();
        assert_eq!(common::max_in_flight(&events), 4);
        // Two rounds: four starts, then finishes before the fifth start.
        let marks: Vec<char> = events
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::AgentStarted { .. } => Some('S'),
                EventKind::AgentFinished { .. } => Some('F'),
                _ => None,
            })
            .collect();
        let first_finish = marks.iter().position(|m| *m == 'F').expect("a finish");
        assert_eq!(
            first_finish, 4,
            "exactly four agents started before the first finished: {marks:?}"
        );
        assert_eq!(marks.iter().filter(|m| **m == 'S').count(), 8);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_of_one_serializes_agents() {
    for engine in common::engines() {
        let (mut options, sink, _) =
            common::options(engine, json!({"default": {"text": "ok", "latency_ms": 5}}));
        options.max_concurrency = 1;
        common::run(EIGHT, json!({}), &options).await;
        assert_eq!(common::max_in_flight(&sink.events()), 1);
    }
}
