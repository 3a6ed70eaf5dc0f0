//! The hard token cap: the next wave is refused once the cap is reached, agents already running
//! finish and count, and `total_tokens` is the sum of every finished agent.

use crate::common;

use runner::RunStatus;
use runner::host::events::EventKind;
use runner::host::time::ClockSetting;
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
async fn agents_started_together_are_all_admitted_even_when_they_wait_for_a_slot() {
    for engine in common::engines() {
        let replies = json!({"default": {"text": "x", "tokens": 100, "latency_ms": 20}});
        let (mut options, _sink, mock) = common::options(engine, replies);
        options.token_cap = Some(100);
        options.max_concurrency = 2;
        // Three agents started in one JS turn under the cap are all admitted against the budget
        // as it stood then; the third waits for a slot and still runs, whenever the others
        // finish. The next turn's agent is refused.
        let script = r#"export default async function (args, g) {
            const texts = await Promise.all(["a", "b", "c"].map((label) => g.agent({label, prompt: label})));
            const seen = g.budget().used;
            try { await g.agent("d"); } catch (e) { return {texts: texts.map((r) => r.text), seen, refused: e.code}; }
        }"#;
        let outcome = common::run(script, json!({}), &options).await;
        assert_eq!(
            outcome.result,
            Some(json!({"texts": ["x", "x", "x"], "seen": 300, "refused": "budget_exhausted"}))
        );
        assert_eq!(outcome.total_tokens, 300);
        assert_eq!(mock.calls().len(), 3);
    }
}

/// Whether a finished agent counts for admission does not depend on when it finished: a graph
/// that starts a second agent after an instant one finished but before it awaited it still
/// admits it, in every run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_agent_counts_once_the_graph_awaits_it() {
    for engine in common::engines() {
        let replies = json!({"replies": [{"label": "instant", "text": "x", "tokens": 100}],
                             "default": {"text": "y", "tokens": 10}});
        let (mut options, _sink, _mock) = common::options(engine, replies);
        options.token_cap = Some(100);
        let script = r#"export default async function (args, g) {
            const instant = g.agent({label: "instant", prompt: "i"});
            // Real time passes: the instant agent has long finished, but it is not awaited.
            await new Promise((resolve) => { let n = 0; while (n < 200000) n++; resolve(); });
            const before = g.budget().used;
            const second = g.agent({label: "second", prompt: "s"});
            const [a, b] = await Promise.all([instant, second]);
            let after;
            try { await g.agent("third"); } catch (e) { after = e.code; }
            return {before, texts: [a.text, b.text], used: g.budget().used, after};
        }"#;
        for _ in 0..5 {
            let outcome = common::run(script, json!({}), &options).await;
            assert_eq!(
                outcome.result,
                Some(
                    json!({"before": 0, "texts": ["x", "y"], "used": 110, "after": "budget_exhausted"})
                ),
                "{outcome:?}"
            );
            assert_eq!(outcome.total_tokens, 110);
        }
    }
}

/// The waves example (graphs/waves.js) with a cap that falls inside a wave: zero-latency replies,
/// and uneven delays with some zero. Every run, in both engines, gives the same result, the same
/// total and the same trace, event by event with its virtual time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cap_inside_a_wave_gives_the_same_trace_on_every_run_in_both_engines() {
    let script = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../graphs/waves.js"),
    )
    .expect("the example graph");
    let zero = json!({"default": {"text": "fact", "tokens": 50}});
    let uneven = json!({"replies": [
        {"match": "Wave 1, angle 1:", "text": "slow", "tokens": 40, "latency_ms": 37},
        {"match": "Wave 1, angle 2:", "text": "instant", "tokens": 40},
        {"match": "Wave 2, angle 1:", "text": "instant", "tokens": 40},
        {"match": "Wave 2, angle 2:", "text": "slowest", "tokens": 40, "latency_ms": 120}
    ], "default": {"text": "late", "tokens": 40, "latency_ms": 11}});
    for (replies, width, cap, total) in [(zero, 2, 150, 200), (uneven, 3, 200, 240)] {
        let mut first: Option<(serde_json::Value, Vec<String>)> = None;
        for engine in common::engines() {
            for _ in 0..20 {
                let (mut options, sink, _) = common::options(engine.clone(), replies.clone());
                options.token_cap = Some(cap);
                options.seed = Some(26);
                options.clock = ClockSetting::parse("fixed:2026-01-01T00:00:00Z").expect("clock");
                let args = json!({"topic": "tides", "waves": 5, "width": width});
                let outcome = common::run(&script, args, &options).await;
                assert_eq!(outcome.total_tokens, total, "{outcome:?}");
                assert_eq!(
                    outcome
                        .result
                        .as_ref()
                        .map(|r| r["waves_completed"].clone()),
                    Some(json!(2))
                );
                // The run's id and engine name differ by design.
                let trace: Vec<String> = sink
                    .events()
                    .iter()
                    .filter(|e| !matches!(e.kind, EventKind::RunStarted { .. }))
                    .map(|e| serde_json::to_string(e).expect("an event"))
                    .collect();
                let result = outcome.result.clone().expect("completed");
                match &first {
                    None => first = Some((result, trace)),
                    Some((result_1, trace_1)) => {
                        assert_eq!(&result, result_1);
                        assert_eq!(&trace, trace_1, "the trace differs from the first run's");
                    }
                }
            }
        }
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
