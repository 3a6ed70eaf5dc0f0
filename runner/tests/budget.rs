//! The hard token cap: the next wave is refused once the cap is reached, agents already running
//! finish and count, and `total_tokens` is the sum of every finished agent.

use crate::common;

use runner::RunStatus;
use runner::host::events::EventKind;
use serde_json::json;

const WAVES: &str = r#"
export const meta = {name: "w", slug: "w", version: "1"};
export default async function (args, g) {
  const done = [];
  for (const wave of args.waves) {
    try {
      const replies = await Promise.all(wave.map((label) => g.agent({label, prompt: label})));
      done.push(replies.map((r) => r.label + ":" + r.tokens));
    } catch (e) {
      return {done, refused: e.code, used: g.budget().used};
    }
  }
  return {done};
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_wave_is_refused_while_running_agents_finish_and_count() {
    for engine in common::engines() {
        // Wave 2 has a fast and a slow agent. The fast one pushes the run past the cap while the
        // slow one is still running: the slow one finishes and counts; wave 3 is refused.
        let replies = json!({"replies": [
            {"label": "a1", "text": "x", "tokens": 100, "latency_ms": 20},
            {"label": "a2", "text": "x", "tokens": 100, "latency_ms": 20},
            {"label": "fast", "text": "x", "tokens": 60, "latency_ms": 20},
            {"label": "slow", "text": "x", "tokens": 40, "latency_ms": 300},
            {"label": "never", "text": "x", "tokens": 100}
        ]});
        let (mut options, sink, mock) = common::options(engine, replies);
        options.token_cap = Some(250);
        let outcome = common::run(
            WAVES,
            json!({"waves": [["a1", "a2"], ["fast", "slow"], ["never", "again"]]}),
            &options,
        )
        .await;
        assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
        assert_eq!(
            outcome.result,
            Some(
                json!({"done": [["a1:100", "a2:100"], ["fast:51", "slow:40"]], "refused": "budget_exhausted", "used": 291})
            )
        );
        // fast's 59 generated tokens were clipped to the 50 that remained when wave 2 started.
        assert_eq!(
            outcome.total_tokens, 291,
            "the sum of all four finished agents"
        );
        assert!(
            !mock.calls().iter().any(|p| p == "never"),
            "wave 3 never reached the provider"
        );

        let events = sink.events();
        let finished: u64 = events
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::AgentFinished { tokens, .. } => Some(tokens),
                _ => None,
            })
            .sum();
        assert_eq!(finished, outcome.total_tokens);
        // The fast agent crossed the cap before the slow one finished.
        let position = |label: &str| {
            events
                .iter()
                .position(|e| matches!(&e.kind, EventKind::AgentFinished { label: Some(l), .. } if l == label))
                .expect("finished")
        };
        assert!(position("fast") < position("slow"));
        // Said once, however many agents were refused.
        let exhausted: Vec<_> = events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::BudgetExhausted { .. }))
            .collect();
        assert_eq!(exhausted.len(), 1, "{exhausted:?}");
        assert!(matches!(
            exhausted[0].kind,
            EventKind::BudgetExhausted {
                used: 291,
                cap: 250
            }
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_waiting_for_a_slot_are_checked_again_when_they_get_one() {
    for engine in common::engines() {
        let replies = json!({"default": {"text": "x", "tokens": 100, "latency_ms": 20}});
        let (mut options, _sink, mock) = common::options(engine, replies);
        options.token_cap = Some(100);
        options.max_concurrency = 2;
        // Three agents started together under the cap; the third waits for a slot, and by the
        // time it gets one the cap is reached, so it is refused instead of overrunning further.
        let script = r#"export default async function (args, g) {
            try { await Promise.all(["a", "b", "c"].map((label) => g.agent({label, prompt: label}))); }
            catch (e) { await g.sleep(200); return {refused: e.code, used: g.budget().used}; }
        }"#;
        let outcome = common::run(script, json!({}), &options).await;
        assert_eq!(
            outcome.result,
            Some(json!({"refused": "budget_exhausted", "used": 200}))
        );
        assert_eq!(outcome.total_tokens, 200);
        assert_eq!(mock.calls().len(), 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_tokens_is_clipped_to_the_remaining_budget() {
    for engine in common::engines() {
        let replies = json!({"default": {"text": "y".repeat(4000)}});
        let (mut options, _sink, _mock) = common::options(engine, replies);
        options.token_cap = Some(60);
        let outcome = common::run(
            r#"export default async function (a, g) { const r = await g.agent({prompt: "p", maxTokens: 100000}); return r.tokens; }"#,
            json!({}),
            &options,
        )
        .await;
        // 1 prompt token, output clipped to the 60 that remained.
        assert_eq!(outcome.result, Some(json!(61)));
        assert_eq!(outcome.total_tokens, 61);
    }
}
