//! A run resumed from its journal (issue 46): the journal of a run cut at any entry (as a kill
//! leaves it) is replayed, then the run continues live. Agents whose reply was journaled are
//! not asked again and their tokens are metered from the journal; work in flight at the cut is
//! started again; the outcome is the uninterrupted run's, in both engines.

use std::sync::{Arc, Mutex};

use runner::RunStatus;
use runner::host::approvals::{ApprovalRequest, Approver, BoxFuture, Decision, Policy};
use runner::host::journal::{Journal, JournalMode, JournalSink, Recorder, Replayer};
use runner::host::tools::ToolRegistry;
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

/// Makes the run of `options` record its journal into the lines returned.
fn record(options: &mut runner::run::RunOptions) -> Arc<Lines> {
    let lines = Arc::new(Lines::default());
    options.journal = Some(JournalMode::Record(Recorder::new(lines.clone())));
    lines
}

/// Makes the run of `options` resume the cut journal `kept` with the journal's seed, as a
/// restarted desktop does, appending to the lines returned.
fn resume_from(options: &mut runner::run::RunOptions, kept: &[String]) -> Arc<Lines> {
    let journal = Journal::parse_unfinished(&(kept.join("\n") + "\n"), "cut")
        .unwrap_or_else(|e| panic!("a cut journal: {e}"));
    let appended = Arc::new(Lines::default());
    options.seed = Some(journal.header.seed);
    options.journal = Some(JournalMode::Resume {
        replayer: Replayer::resuming(&journal),
        recorder: Recorder::new(appended.clone()),
    });
    appended
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

/// Checks a run resumed from the cut journal `kept` (`at` names the cut): no agent whose await
/// the journal holds was asked again (`asked`: the mock's prompts, each `p` and the agent's
/// label first), and its tokens are the uninterrupted run's 150 plus at most those of the
/// agents asked again.
fn assert_not_asked_again(at: &str, kept: &[String], asked: &[String], total_tokens: u64) {
    let was_asked = |label: &str| asked.iter().any(|p| p.starts_with(&format!("p{label}")));
    for label in awaited(kept) {
        assert!(
            !was_asked(label),
            "{at}: agent {label} was journaled and asked again: {asked:?}"
        );
    }
    // The tokens of the agents asked again come on top, at most.
    let again: u64 = ["a", "b", "c", "d"]
        .iter()
        .zip([10, 20, 40, 80])
        .filter(|(label, _)| was_asked(label))
        .map(|(_, tokens)| tokens)
        .sum();
    assert!(
        (150..=150 + again).contains(&total_tokens),
        "{at}: {total_tokens} tokens, {again} asked again"
    );
}

#[tokio::test]
async fn a_run_cut_at_any_entry_resumes_to_the_same_outcome_without_asking_again() {
    for engine in engines() {
        let name = engine.name();
        let (mut whole, _, _) = options(engine.clone(), replies());
        whole.seed = Some(7);
        let recorded = record(&mut whole);
        let full = run(FOUR_AGENTS, json!({}), &whole).await;
        assert_eq!(full.status, RunStatus::Completed, "{name}: {full:?}");
        assert_eq!(full.total_tokens, 150, "{name}");
        let lines = recorded.all();
        // Every cut short of the end entry, as a kill after that line leaves the journal.
        for cut in 1..lines.len() - 1 {
            let kept = &lines[..cut];
            let (mut resumed, _, mock) = options(engine.clone(), replies());
            let appended = resume_from(&mut resumed, kept);
            let outcome = run(FOUR_AGENTS, json!({}), &resumed).await;
            let at = format!("{name} cut after line {cut} ({})", kept[cut - 1]);
            assert_eq!(outcome.status, RunStatus::Completed, "{at}: {outcome:?}");
            assert_not_asked_again(&at, kept, &mock.calls(), outcome.total_tokens);
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

/// A tool that is not idempotent: each call bumps a count.
struct Bump(std::sync::atomic::AtomicUsize);

impl runner::host::tools::Tool for Bump {
    fn spec(&self) -> runner::host::agents::ToolSpec {
        runner::host::agents::ToolSpec {
            name: "bump".into(),
            description: "Bumps a count.".into(),
            parameters: json!({"type": "object"}),
        }
    }
    fn call(
        &self,
        _args: serde_json::Value,
    ) -> runner::host::approvals::BoxFuture<'_, Result<serde_json::Value, graph_js::Failure>> {
        let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        Box::pin(async move { Ok(json!(n)) })
    }
}

/// Answers every question with `answer`, keeping each question.
struct Owner {
    answer: Decision,
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl Approver for Owner {
    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Decision> {
        self.asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(request.clone());
        let answer = self.answer.clone();
        Box::pin(async move { answer })
    }
}

impl Owner {
    fn new(answer: Decision) -> Arc<Owner> {
        Arc::new(Owner {
            answer,
            asked: Mutex::new(Vec::new()),
        })
    }
    fn asked(&self) -> Vec<ApprovalRequest> {
        self.asked.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// An agent, a tool, another agent.
const AGENT_TOOL_AGENT: &str = r#"
export default async function (args, g) {
  const a = await g.agent({label: "a", prompt: "pa"});
  const r = await g.tool(args.tool, args.args);
  const b = await g.agent({label: "b", prompt: "pb"});
  return [a.text, r, b.text];
}
"#;

/// Runs AGENT_TOOL_AGENT with `tool` under `policy`, answered by `owner`; returns the outcome
/// and the journal's lines.
async fn recorded(
    engine: Arc<dyn runner::engine::Engine>,
    args: &serde_json::Value,
    policy: Policy,
    tools: ToolRegistry,
    owner: Arc<Owner>,
) -> (runner::RunOutcome, Vec<String>) {
    let (mut options, _, _) = options(engine, replies());
    options.seed = Some(7);
    options.tools = tools;
    options
        .policy
        .set(args["tool"].as_str().expect("tool"), policy);
    options.approver = owner;
    let lines = record(&mut options);
    let outcome = run(AGENT_TOOL_AGENT, args.clone(), &options).await;
    (outcome, lines.all())
}

/// Resumes the journal `kept` (a cut) with `tools` under `policy`, answered by `owner`.
async fn resumed(
    engine: Arc<dyn runner::engine::Engine>,
    args: &serde_json::Value,
    kept: &[String],
    policy: Policy,
    tools: ToolRegistry,
    owner: Arc<Owner>,
) -> runner::RunOutcome {
    let (mut options, _, _) = options(engine, replies());
    options.tools = tools;
    options
        .policy
        .set(args["tool"].as_str().expect("tool"), policy);
    options.approver = owner;
    resume_from(&mut options, kept);
    run(AGENT_TOOL_AGENT, args.clone(), &options).await
}

/// The lines of `lines` up to and including the first that starts with `prefix`.
fn cut_after(lines: &[String], prefix: &str) -> Vec<String> {
    let at = lines
        .iter()
        .position(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} in {lines:?}"));
    lines[..=at].to_vec()
}

#[tokio::test]
async fn an_ask_answered_before_the_stop_is_not_asked_again() {
    for engine in engines() {
        let name = engine.name();
        let folder = tempfile::tempdir().expect("folder");
        let tools = || ToolRegistry::standard(Some(folder.path().to_path_buf())).expect("fs tools");
        let args = json!({"tool": "fs.write", "args": {"path": "out.txt", "text": "once"}});
        let owner = Owner::new(Decision::Approved);
        let (full, lines) =
            recorded(engine.clone(), &args, Policy::Ask, tools(), owner.clone()).await;
        assert_eq!(full.status, RunStatus::Completed, "{name}: {full:?}");
        assert_eq!(owner.asked().len(), 1, "{name}");
        // The journal holds the answer; cut there, the write is in flight at the stop.
        let kept = cut_after(&lines, r#"{"k":"approval""#);
        assert!(
            kept.last()
                .is_some_and(|l| l.contains(r#""approved":true"#)),
            "{kept:?}"
        );
        std::fs::remove_file(folder.path().join("out.txt")).expect("written once");
        let again = Owner::new(Decision::Denied("would deny".into()));
        let outcome = resumed(
            engine.clone(),
            &args,
            &kept,
            Policy::Ask,
            tools(),
            again.clone(),
        )
        .await;
        assert_eq!(outcome.status, RunStatus::Completed, "{name}: {outcome:?}");
        assert!(
            again.asked().is_empty(),
            "{name}: asked again: {:?}",
            again.asked()
        );
        assert_eq!(
            std::fs::read_to_string(folder.path().join("out.txt")).expect("written"),
            "once"
        );
    }
}

/// The tools of a run: `bump` alone.
fn bump_registry(bump: &Arc<Bump>) -> ToolRegistry {
    let mut tools = ToolRegistry::default();
    tools.register(bump.clone());
    tools
}

/// Resumes the cut `kept` of AGENT_TOOL_AGENT calling `bump` (allowed), the owner answering
/// `answer`: the outcome, how often `bump` ran, and what the owner was asked.
async fn resume_bump(
    engine: Arc<dyn runner::engine::Engine>,
    kept: &[String],
    answer: Decision,
) -> (runner::RunOutcome, usize, Vec<ApprovalRequest>) {
    let args = json!({"tool": "bump", "args": {"by": 1}});
    let owner = Owner::new(answer);
    let bump = Arc::new(Bump(Default::default()));
    let tools = bump_registry(&bump);
    let outcome = resumed(engine, &args, kept, Policy::Allow, tools, owner.clone()).await;
    let ran = bump.0.load(std::sync::atomic::Ordering::SeqCst);
    (outcome, ran, owner.asked())
}

#[tokio::test]
async fn a_tool_in_flight_at_the_stop_asks_the_owner_before_it_runs_again() {
    const MAY_HAVE: &str =
        "g.tool (bump) was running when the run was interrupted and may have happened";
    for engine in engines() {
        let name = engine.name();
        let args = json!({"tool": "bump", "args": {"by": 1}});
        let first = Arc::new(Bump(Default::default()));
        let owner = Owner::new(Decision::Approved);
        let (full, lines) = recorded(
            engine.clone(),
            &args,
            Policy::Allow,
            bump_registry(&first),
            owner,
        )
        .await;
        assert_eq!(full.status, RunStatus::Completed, "{name}: {full:?}");
        // Cut after the tool's start: it may have run, its outcome is not journaled.
        let kept = cut_after(&lines, r#"{"k":"start","path":[],"seq":3"#);
        assert!(
            kept.last().is_some_and(|l| l.contains(r#""what":"bump""#)),
            "{kept:?}"
        );

        let (outcome, ran, asked) = resume_bump(engine.clone(), &kept, Decision::Approved).await;
        assert_eq!(outcome.status, RunStatus::Completed, "{name}: {outcome:?}");
        assert_eq!(ran, 1, "{name}: run again once");
        assert_eq!(asked.len(), 1, "{name}: {asked:?}");
        assert_eq!(asked[0].tool, "bump");
        assert_eq!(asked[0].args, json!({"by": 1}));
        assert!(
            asked[0]
                .note
                .as_deref()
                .is_some_and(|n| n.contains(MAY_HAVE)),
            "{name}: {asked:?}"
        );

        let denied = Decision::Denied("the owner denied tool bump".into());
        let (outcome, ran, asked) = resume_bump(engine.clone(), &kept, denied).await;
        assert_eq!(outcome.status, RunStatus::Failed, "{name}: {outcome:?}");
        let error = outcome.error.unwrap_or_default();
        assert!(
            error.contains(&format!("{MAY_HAVE}; it is not run again")),
            "{name}: {error}"
        );
        assert_eq!(ran, 0, "{name}: not run again");
        assert_eq!(asked.len(), 1, "{name}");
    }
}

/// A sleep started first and awaited last, two agents and three clock readings in between.
const SLEEP_ACROSS: &str = r#"
export default async function (args, g) {
  const sleeping = g.sleep(400);
  await g.agent({label: "a", prompt: "pa"});
  const mid = Date.now();
  await g.agent({label: "b", prompt: "pb"});
  const late = Date.now();
  await sleeping;
  const end = Date.now();
  return [mid, late, end];
}
"#;

#[tokio::test]
async fn a_timer_in_flight_continues_for_its_time_left_on_the_journaled_clock() {
    const START_MS: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    let replies = json!({"replies": [
        {"label": "a", "text": "A", "tokens": 1, "latency_ms": 300},
        {"label": "b", "text": "B", "tokens": 1, "latency_ms": 50}
    ]});
    for engine in engines() {
        let name = engine.name();
        let (mut whole, _, _) = options(engine.clone(), replies.clone());
        whole.clock = runner::host::time::ClockSetting::Fixed(START_MS);
        let recorded = record(&mut whole);
        let full = run(SLEEP_ACROSS, json!({}), &whole).await;
        let expected = json!([START_MS + 300, START_MS + 350, START_MS + 400]);
        assert_eq!(full.result, Some(expected.clone()), "{name}: {full:?}");
        // Cut after the reading at 300 ms: the sleep (due at 400 ms) is in flight.
        let lines = recorded.all();
        let kept = cut_after(&lines, r#"{"k":"clock""#);
        assert!(
            kept.iter()
                .any(|l| l.contains(r#""what":"400 ms""#) && l.contains(r#""t":0"#)),
            "{name}: the sleep's start is journaled with its time: {kept:?}"
        );
        let (mut resumed, _, mock) = options(engine.clone(), replies.clone());
        resumed.clock = runner::host::time::ClockSetting::Fixed(START_MS);
        resume_from(&mut resumed, &kept);
        let outcome = run(SLEEP_ACROSS, json!({}), &resumed).await;
        // The clock goes on from 300 ms (b answers at 350, not 50) and the sleep ends when it
        // was due (400 ms), not 400 ms after the resume (700).
        assert_eq!(outcome.result, Some(expected), "{name}: {outcome:?}");
        assert_eq!(mock.calls().len(), 1, "{name}: only b is asked");
    }
}

#[tokio::test]
async fn a_resumed_runs_real_clock_goes_on_from_the_journal_and_its_sleep_waits_only_what_was_left()
{
    let replies = json!({"replies": [
        {"label": "a", "text": "A", "tokens": 1, "latency_ms": 300},
        {"label": "b", "text": "B", "tokens": 1, "latency_ms": 10}
    ]});
    for engine in engines() {
        let name = engine.name();
        let (mut whole, _, _) = options(engine.clone(), replies.clone());
        let recorded = record(&mut whole);
        let full = run(SLEEP_ACROSS, json!({}), &whole).await;
        assert_eq!(full.status, RunStatus::Completed, "{name}: {full:?}");
        let kept = cut_after(&recorded.all(), r#"{"k":"clock""#);
        let journal = Journal::parse_unfinished(&(kept.join("\n") + "\n"), "cut").expect("cut");
        let last = Replayer::resuming(&journal).last_ms();
        assert!(last >= 300, "{name}: the journal's clock read {last} ms");
        let (mut resumed, sink, _) = options(engine.clone(), replies.clone());
        resume_from(&mut resumed, &kept);
        let started = runner::clock::Stopwatch::start();
        let outcome = run(SLEEP_ACROSS, json!({}), &resumed).await;
        let took = started.elapsed();
        assert_eq!(outcome.status, RunStatus::Completed, "{name}: {outcome:?}");
        // At most about 100 ms were left of the sleep; waiting all of it again takes 400.
        assert!(
            took < std::time::Duration::from_millis(400),
            "{name}: the resumed run took {took:?}"
        );
        // The trace's clock goes on from the journal's last reading, not from 0.
        let finished = sink
            .events()
            .iter()
            .find(|e| matches!(e.kind, runner::host::events::EventKind::RunFinished { .. }))
            .map(|e| e.elapsed_ms)
            .expect("the run's end");
        assert!(
            finished >= last,
            "{name}: the run ended at {finished} ms, the journal had read {last} ms"
        );
    }
}

/// A graph whose nested graph runs three agents in turn, after an agent of its own.
const WITH_NESTED: &str = r#"
export default async function (args, g) {
  const a = await g.agent({label: "a", prompt: "pa"});
  const inner = await g.graph("inner", {from: a.text});
  return [a.text, inner, g.budget().used];
}
"#;

const INNER: &str = r#"export const meta = {name: "Inner", slug: "inner", version: "1"};
export default async function (args, g) {
  const b = await g.agent({label: "b", prompt: "pb " + args.from});
  const c = await g.agent({label: "c", prompt: "pc " + b.text});
  await g.sleep(5);
  const d = await g.agent({label: "d", prompt: "pd " + c.text});
  return b.text + c.text + d.text;
}
"#;

/// `options` with the nested graph `inner` in the catalog.
fn with_inner(
    engine: Arc<dyn runner::engine::Engine>,
) -> (
    runner::run::RunOptions,
    Arc<runner::host::mock::MockProvider>,
) {
    use runner::host::graphs::{FolderCatalog, GraphSource};
    let (mut options, _, mock) = options(engine, replies());
    let mut catalog = FolderCatalog::default();
    catalog.insert(GraphSource {
        meta: graph_js::describe(INNER, &graph_js::Limits::default()).expect("meta"),
        script: INNER.into(),
        file: Some("graphs/inner.js".into()),
        engine: None,
    });
    options.catalog = Arc::new(catalog);
    (options, mock)
}

/// A run cut while its nested graph was running resumes that graph from its own journaled
/// calls: the nested graph's agents whose replies were journaled are not asked again (it does
/// not start over), and the outcome and tokens are the uninterrupted run's.
#[tokio::test]
async fn a_nested_graph_in_flight_at_the_cut_goes_on_from_its_journal() {
    for engine in engines() {
        let name = engine.name();
        let (mut whole, _) = with_inner(engine.clone());
        whole.seed = Some(3);
        let recorded = record(&mut whole);
        let full = run(WITH_NESTED, json!({}), &whole).await;
        assert_eq!(full.status, RunStatus::Completed, "{name}: {full:?}");
        assert_eq!(full.total_tokens, 150, "{name}");
        let lines = recorded.all();
        for cut in 1..lines.len() - 1 {
            let kept = &lines[..cut];
            let (mut resumed, mock) = with_inner(engine.clone());
            resume_from(&mut resumed, kept);
            let outcome = run(WITH_NESTED, json!({}), &resumed).await;
            let at = format!("{name} cut after line {cut} ({})", kept[cut - 1]);
            assert_eq!(outcome.status, RunStatus::Completed, "{at}: {outcome:?}");
            let result = outcome.result.clone().expect("a result");
            assert_eq!(
                result.as_array().map(|r| r[..2].to_vec()),
                Some(vec![json!("A"), json!("BCD")]),
                "{at}: {outcome:?}"
            );
            assert_not_asked_again(&at, kept, &mock.calls(), outcome.total_tokens);
        }
    }
}
