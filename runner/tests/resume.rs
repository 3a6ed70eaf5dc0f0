//! A run resumed from its journal (issue 46): the journal of a run cut at any entry (as a kill
//! leaves it) is replayed, then the run continues live. Agents whose reply was journaled are
//! not asked again and their tokens are metered from the journal; work in flight at the cut is
//! started again; the outcome is the uninterrupted run's, in both engines.

use std::sync::{Arc, Mutex};

use runner::RunStatus;
use runner::host::journal::{Journal, JournalMode, JournalSink, Recorder, Replayer};
use serde_json::json;

use crate::common::{engines, options, run};

/// Four agents (two at once, then two in turn) and a timer between them.
const FOUR_AGENTS: &str = r#"
export default async function (args, g) {
  const [a, b] = await Promise.all([
    g.agent({label: "a", prompt: "pa"}),
    g.agent({label: "b", prompt: "pb"}),
  ]);
  await g.sleep(1);
  const c = await g.agent({label: "c", prompt: "pc " + a.text + b.text});
  const d = await g.agent({label: "d", prompt: "pd " + c.text});
  return [a.text, b.text, c.text, d.text, g.budget().used];
}
"#;

fn replies() -> serde_json::Value {
    json!({"replies": [
        {"label": "a", "text": "A", "tokens": 10},
        {"label": "b", "text": "B", "tokens": 20},
        {"label": "c", "text": "C", "tokens": 40},
        {"label": "d", "text": "D", "tokens": 80}
    ]})
}

/// A journal kept in memory, one line per entry.
#[derive(Default)]
struct Lines(Mutex<Vec<String>>);

impl JournalSink for Lines {
    fn append(&self, line: &str) -> std::io::Result<()> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line.to_owned());
        Ok(())
    }
    fn finish(&self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The labels whose await the journal `lines` holds.
fn awaited(lines: &[String]) -> Vec<&'static str> {
    ["A", "B", "C", "D"]
        .iter()
        .zip(["a", "b", "c", "d"])
        .filter(|(text, _)| {
            lines.iter().any(|line| {
                line.starts_with(r#"{"k":"wait""#) && line.contains(&format!(r#"\"{text}\""#))
            })
        })
        .map(|(_, label)| label)
        .collect()
}

#[tokio::test]
async fn a_run_cut_at_any_entry_resumes_to_the_same_outcome_without_asking_again() {
    for engine in engines() {
        let name = engine.name();
        let (mut whole, _, _) = options(engine.clone(), replies());
        let recorded = Arc::new(Lines::default());
        whole.seed = Some(7);
        whole.journal = Some(JournalMode::Record(Recorder::new(recorded.clone())));
        let full = run(FOUR_AGENTS, json!({}), &whole).await;
        assert_eq!(full.status, RunStatus::Completed, "{name}: {full:?}");
        assert_eq!(full.total_tokens, 150, "{name}");
        let lines = recorded.all();
        // Every cut short of the end entry, as a kill after that line leaves the journal.
        for cut in 1..lines.len() - 1 {
            let kept = &lines[..cut];
            let journal = Journal::parse_unfinished(&(kept.join("\n") + "\n"), "cut")
                .unwrap_or_else(|e| panic!("{name} cut {cut}: {e}"));
            let (mut resumed, _, mock) = options(engine.clone(), replies());
            let appended = Arc::new(Lines::default());
            resumed.seed = Some(journal.header.seed);
            resumed.journal = Some(JournalMode::Resume {
                replayer: Replayer::resuming(&journal),
                recorder: Recorder::new(appended.clone()),
            });
            let outcome = run(FOUR_AGENTS, json!({}), &resumed).await;
            let at = format!("{name} cut after line {cut} ({})", kept[cut - 1]);
            assert_eq!(outcome.status, RunStatus::Completed, "{at}: {outcome:?}");
            let asked = mock.calls();
            for label in awaited(kept) {
                assert!(
                    !asked.iter().any(|p| p.contains(&format!("p{label}"))),
                    "{at}: agent {label} was journaled and asked again: {asked:?}"
                );
            }
            // The tokens of the agents asked again come on top, at most.
            let again: u64 = ["a", "b", "c", "d"]
                .iter()
                .zip([10, 20, 40, 80])
                .filter(|(l, _)| asked.iter().any(|p| p.contains(&format!("p{l}"))))
                .map(|(_, t)| t)
                .sum();
            assert!(
                outcome.total_tokens >= 150 && outcome.total_tokens <= 150 + again,
                "{at}: {} tokens, {again} asked again",
                outcome.total_tokens
            );
            let result = outcome.result.expect("a result");
            assert_eq!(
                result.as_array().map(|r| r[..4].to_vec()),
                Some(vec![json!("A"), json!("B"), json!("C"), json!("D")]),
                "{at}"
            );
            // The resumed run appends to its journal: no second header, its end last.
            let more = appended.all();
            assert!(
                more.iter().all(|l| !l.contains(r#""journal":"#)),
                "{at}: {more:?}"
            );
            assert!(
                more.last().is_some_and(|l| l.starts_with(r#"{"k":"end""#)),
                "{at}"
            );
        }
    }
}
