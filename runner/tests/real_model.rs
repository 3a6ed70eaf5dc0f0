//! Graphs against a real model: llama.cpp's `llama-server` with SmolLM2-135M (set up by
//! `scripts/local-llm.sh build model`; see `common/llm.rs` for how tests find it). A recording
//! proxy sits between the provider and the server, so the tests compare the run's metering with
//! the usage the server itself reported, see which requests were dropped, and inject faults.
//!
//! Assertions are about structure (status, usage, finish reasons, tool names and arguments),
//! never about wording. The model emits a tool call reliably only when asked to copy a
//! `<tool_call>` block verbatim, so the tool-loop prompts do exactly that.

use crate::common;

use std::sync::Arc;

use common::llm::{LocalLlm, MODEL};
use common::server::{Record, Scripted, TestServer};
use runner::host::approvals::Policy;
use runner::host::events::{CollectingSink, Event, EventKind};
use runner::host::provider_config::{Price, ProviderConfig};
use runner::host::tools::ToolRegistry;
use runner::{RunOutcome, RunStatus};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Prices for the cost check (USD per million tokens).
const PRICE: Price = Price {
    input_per_million: 1.0,
    output_per_million: 2.0,
};

/// The model, and a recording proxy in front of it answering `script` first.
async fn model_behind_proxy(script: Vec<Scripted>) -> Option<(LocalLlm, TestServer)> {
    let llm = common::llm::local_llm().await?;
    let proxy = TestServer::start(script, Some(llm.origin.clone())).await;
    Some((llm, proxy))
}

fn local_entry(proxy: &TestServer) -> ProviderConfig {
    let mut entry = common::openai_entry("local", &proxy.base_url(), MODEL);
    entry.models.insert(MODEL.to_owned(), PRICE);
    entry
}

/// Tokens the server reported for each request, `(prompt, completion)`.
fn server_usage(records: &[Record]) -> Vec<(u64, u64)> {
    records
        .iter()
        .map(|r| {
            r.openai_usage()
                .unwrap_or_else(|| panic!("the server reported no usage: {r:?}"))
        })
        .collect()
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

/// One turn of the trace: input and output tokens, finish reason, tool calls (name, arguments).
type TurnFields = (u64, u64, String, Vec<(String, Value)>);

fn turn_fields(events: &[Event]) -> Vec<TurnFields> {
    common::turns(events)
        .into_iter()
        .filter_map(|k| match k {
            EventKind::AgentTurn {
                input_tokens,
                output_tokens,
                finish_reason,
                tool_calls,
                ..
            } => Some((
                *input_tokens,
                *output_tokens,
                finish_reason.clone(),
                tool_calls
                    .iter()
                    .map(|c| (c.name.clone(), c.arguments.clone()))
                    .collect(),
            )),
            _ => None,
        })
        .collect()
}

/// Each reply of the parallel-agents graph is one request's usage, a single turn on the model,
/// and each request asked for the agent's limit and streamed with usage.
fn check_parallel_replies(outcome: &RunOutcome, records: &[Record], usage: &[(u64, u64)]) {
    let replies = outcome.result.clone().expect("result");
    let replies = replies.as_array().expect("array");
    assert_eq!(
        sorted(
            replies
                .iter()
                .map(|r| r["tokens"].as_u64().expect("tokens"))
                .collect()
        ),
        sorted(usage.iter().map(|(p, c)| p + c).collect()),
        "each agent's tokens are one request's usage"
    );
    for reply in replies {
        assert!(
            matches!(reply["finish"].as_str(), Some("stop" | "length")),
            "{reply}"
        );
        assert_eq!(reply["turns"], 1);
        assert_eq!(reply["model"], MODEL);
        assert_eq!(reply["empty"], false);
    }
    // Each request asked for the agent's limit and streamed with usage.
    for record in records {
        assert_eq!(record.body["max_tokens"], 24);
        assert_eq!(record.body["stream_options"]["include_usage"], true);
        assert_eq!(record.body["model"], MODEL);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_agents_complete_and_tokens_equal_the_servers_usage() {
    let Some((_llm, proxy)) = model_behind_proxy(Vec::new()).await else {
        return;
    };
    let (options, sink) = common::options_with(
        common::boa(),
        common::provider_set(vec![local_entry(&proxy)]),
    );
    let script = r#"
    export default async function (args, g) {
      const topics = ["the sea", "the moon", "a cat"];
      const replies = await Promise.all(topics.map((t, i) =>
        g.agent({prompt: `Write one short sentence about ${t}.`, maxTokens: 24, label: `a${i}`})));
      return replies.map((r) => ({tokens: r.tokens, finish: r.finish_reason, turns: r.turns,
                                  model: r.model, empty: r.text.length === 0}));
    }"#;
    let outcome = common::run(script, json!({}), &options).await;
    assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
    let records = proxy.settled().await;
    assert_eq!(records.len(), 3);
    assert!(
        records
            .iter()
            .all(|r| r.status == 200 && r.openai_usage().is_some()),
        "{records:?}"
    );
    let usage = server_usage(&records);
    let total: u64 = usage.iter().map(|(p, c)| p + c).sum();
    assert_eq!(
        outcome.total_tokens, total,
        "metered = the server's reported usage"
    );
    let expected_cost: f64 = usage
        .iter()
        .map(|&(p, c)| (p as f64 * 1.0 + c as f64 * 2.0) / 1e6)
        .sum();
    assert!((outcome.reported_cost - expected_cost).abs() < 1e-12);

    check_parallel_replies(&outcome, &records, &usage);
    let events = sink.events();
    let turns = turn_fields(&events);
    assert_eq!(
        sorted(turns.iter().map(|t| (t.0, t.1)).collect()),
        sorted(usage.clone())
    );
    assert_eq!(
        sorted(turns.iter().map(|t| t.2.clone()).collect()),
        sorted(records.iter().flat_map(Record::finish_reasons).collect()),
        "finish reasons as the server reported them"
    );
    assert!(
        common::max_in_flight(&events) >= 2,
        "the agents ran in parallel"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e.kind, EventKind::AgentProgress { .. })),
        "streaming progress reached the trace"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_token_cap_refuses_the_next_wave_with_real_counts() {
    let Some((_llm, proxy)) = model_behind_proxy(Vec::new()).await else {
        return;
    };
    let (mut options, sink) = common::options_with(
        common::boa(),
        common::provider_set(vec![local_entry(&proxy)]),
    );
    options.token_cap = Some(40);
    let script = r#"
    export default async function (args, g) {
      const wave = (n) => Promise.all([0, 1].map((i) =>
        g.agent({prompt: `Name a color (${n}.${i}).`, maxTokens: 16})));
      const first = await wave(1);
      try { await wave(2); return {second: "ran"}; }
      catch (e) {
        return {first: first.map((r) => r.tokens), code: e.code, message: e.message, budget: g.budget()};
      }
    }"#;
    let outcome = common::run(script, json!({}), &options).await;
    assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
    let result = outcome.result.expect("result");
    let records = proxy.settled().await;
    assert_eq!(records.len(), 2, "the second wave sent no request");
    let used: u64 = server_usage(&records).iter().map(|(p, c)| p + c).sum();
    assert!(used >= 40, "the first wave reached the cap");
    assert_eq!(result["code"], "budget_exhausted");
    assert_eq!(result["budget"], json!({"used": used, "cap": 40}));
    assert!(
        result["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("{used} of 40 tokens"))),
        "{result}"
    );
    assert_eq!(outcome.total_tokens, used);
    for record in &records {
        assert_eq!(
            record.body["max_tokens"], 16,
            "min(maxTokens, what remained)"
        );
    }
    assert!(
        sink.events()
            .iter()
            .any(|e| matches!(e.kind, EventKind::BudgetExhausted { cap: 40, .. }))
    );
}

/// A prompt the small model answers with exactly this tool call.
fn tool_prompt(path: &str) -> String {
    format!(
        "Reply with exactly this text and nothing else:\n<tool_call>\n{{\"name\": \"fs_write\", \"arguments\": {{\"path\": \"{path}\", \"text\": \"hello\"}}}}\n</tool_call>"
    )
}

const TOOL_GRAPH: &str = r#"
export default async function (args, g) {
  try {
    const r = await g.agent({prompt: args.prompt, tools: ["fs.write"], maxTurns: args.maxTurns});
    return {ok: true, turns: r.turns, finish: r.finish_reason};
  } catch (e) { return {ok: false, code: e.code, message: e.message}; }
}"#;

struct ToolRun {
    result: Value,
    events: Vec<Event>,
    records: Vec<Record>,
}

async fn tool_run(
    proxy: &TestServer,
    folder: &std::path::Path,
    allow: bool,
    path: &str,
    max_turns: u32,
) -> ToolRun {
    tool_run_capped(proxy, folder, allow, path, max_turns, None).await
}

async fn tool_run_capped(
    proxy: &TestServer,
    folder: &std::path::Path,
    allow: bool,
    path: &str,
    max_turns: u32,
    token_cap: Option<u64>,
) -> ToolRun {
    let (mut options, sink) = common::options_with(
        common::boa(),
        common::provider_set(vec![local_entry(proxy)]),
    );
    options.token_cap = token_cap;
    options.tools = ToolRegistry::standard(Some(folder.to_path_buf())).expect("tools");
    if allow {
        options.policy.set("fs.write", Policy::Allow);
    }
    let outcome = common::run(
        TOOL_GRAPH,
        json!({"prompt": tool_prompt(path), "maxTurns": max_turns}),
        &options,
    )
    .await;
    assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
    let records = proxy.settled().await;
    let used: u64 = server_usage(&records).iter().map(|(p, c)| p + c).sum();
    assert_eq!(outcome.total_tokens, used, "every turn is metered");
    ToolRun {
        result: outcome.result.expect("result"),
        events: sink.events(),
        records,
    }
}

/// The first turn: the model called fs.write with the arguments it was told to copy.
fn assert_first_turn_calls_the_tool(run: &ToolRun, path: &str) {
    let turns = turn_fields(&run.events);
    assert!(!turns.is_empty());
    assert_eq!(turns[0].2, "tool_calls", "{turns:?}");
    assert_eq!(
        turns[0].3,
        vec![(
            "fs.write".to_owned(),
            json!({"path": path, "text": "hello"})
        )]
    );
    assert_eq!(
        run.records[0].finish_reasons(),
        vec!["tool_calls".to_owned()]
    );
    assert_eq!(
        run.records[0].body["tools"][0]["function"]["name"],
        "fs_write"
    );
}

/// The loop ends at a final answer or at maxTurns, whichever the model makes come first.
fn assert_bounded(run: &ToolRun, max_turns: u32) {
    assert!(
        run.records.len() as u32 <= max_turns,
        "{}",
        run.records.len()
    );
    if run.result["ok"] == false {
        assert_eq!(run.result["code"], "failed", "{}", run.result);
        assert!(
            run.result["message"]
                .as_str()
                .is_some_and(|m| m.contains("maxTurns")),
            "{}",
            run.result
        );
        assert_eq!(run.records.len() as u32, max_turns);
    }
}

/// The tool message of the second request, as JSON.
fn tool_result_sent_back(run: &ToolRun) -> Value {
    let messages = run.records[1].body["messages"]
        .as_array()
        .expect("messages");
    let tool = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("a tool message went back to the model");
    let assistant = messages
        .iter()
        .find(|m| m["role"] == "assistant")
        .expect("the model's call is in the history");
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "fs_write");
    assert_eq!(tool["tool_call_id"], assistant["tool_calls"][0]["id"]);
    serde_json::from_str(tool["content"].as_str().expect("text")).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_that_is_not_allowed_is_denied_and_the_denial_goes_back() {
    let Some((_llm, proxy)) = model_behind_proxy(Vec::new()).await else {
        return;
    };
    let folder = tempfile::tempdir().expect("tempdir");
    let run = tool_run(&proxy, folder.path(), false, "note.txt", 2).await;
    assert_first_turn_calls_the_tool(&run, "note.txt");
    assert!(!folder.path().join("note.txt").exists(), "nothing written");
    assert!(run.events.iter().any(|e| matches!(
        &e.kind,
        EventKind::ToolDenied { tool, .. } if tool == "fs.write"
    )));
    assert!(
        !run.events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::ToolCalled { .. })),
        "the tool never ran"
    );
    assert_eq!(
        run.records.len(),
        2,
        "the denial was sent back to the model"
    );
    assert_eq!(tool_result_sent_back(&run)["error"], "denied");
    assert_bounded(&run, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_tool_call_runs_confined_to_the_folder() {
    let Some((llm, proxy)) = model_behind_proxy(Vec::new()).await else {
        return;
    };
    let outer = tempfile::tempdir().expect("tempdir");
    let folder = outer.path().join("work");
    std::fs::create_dir(&folder).expect("folder");

    let run = tool_run(&proxy, &folder, true, "note.txt", 2).await;
    assert_first_turn_calls_the_tool(&run, "note.txt");
    assert_eq!(
        std::fs::read_to_string(folder.join("note.txt")).expect("written"),
        "hello"
    );
    assert_eq!(tool_result_sent_back(&run), json!({"bytes": 5}));
    assert_bounded(&run, 2);

    // Allowed, but not outside the folder.
    let proxy = TestServer::start(Vec::new(), Some(llm.origin.clone())).await;
    let run = tool_run(&proxy, &folder, true, "../escape.txt", 2).await;
    assert_first_turn_calls_the_tool(&run, "../escape.txt");
    assert!(!outer.path().join("escape.txt").exists(), "confined");
    assert_eq!(tool_result_sent_back(&run)["error"], "denied");
    assert_bounded(&run, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_turns_bounds_the_loop() {
    let Some((_llm, proxy)) = model_behind_proxy(Vec::new()).await else {
        return;
    };
    let folder = tempfile::tempdir().expect("tempdir");
    let run = tool_run(&proxy, folder.path(), true, "note.txt", 1).await;
    assert_first_turn_calls_the_tool(&run, "note.txt");
    assert_eq!(run.result["ok"], false);
    assert_eq!(run.result["code"], "failed");
    assert!(
        run.result["message"]
            .as_str()
            .is_some_and(|m| m.contains("all 1 turns (maxTurns)")),
        "{}",
        run.result
    );
    assert_eq!(run.records.len(), 1, "one turn, one request");
    assert!(
        !folder.path().join("note.txt").exists(),
        "the last turn's tool calls are not run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_used_up_by_a_turn_ends_the_loop_budget_exhausted() {
    let Some((_llm, proxy)) = model_behind_proxy(Vec::new()).await else {
        return;
    };
    let folder = tempfile::tempdir().expect("tempdir");
    // The offered tool's schema alone makes the first prompt far longer than this.
    let cap = 100;
    let run = tool_run_capped(&proxy, folder.path(), true, "note.txt", 8, Some(cap)).await;
    assert_first_turn_calls_the_tool(&run, "note.txt");
    assert_eq!(run.records.len(), 1, "no second turn was sent");
    let (prompt, completion) = run.records[0].openai_usage().expect("usage");
    assert!(prompt + completion >= cap);
    assert_eq!(
        run.records[0].body["max_tokens"], cap,
        "clipped to the budget"
    );
    assert_eq!(run.result["ok"], false);
    assert_eq!(run.result["code"], "budget_exhausted", "{}", run.result);
    assert!(
        run.result["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("{} of {cap} tokens", prompt + completion))),
        "real counts: {}",
        run.result
    );
    assert_eq!(common::turns(&run.events).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_during_a_generation_ends_the_run_cancelled_and_drops_the_request() {
    let Some((llm, proxy)) = model_behind_proxy(Vec::new()).await else {
        return;
    };
    let (mut options, _) = common::options_with(
        common::boa(),
        common::provider_set(vec![local_entry(&proxy)]),
    );
    let cancel = CancellationToken::new();
    let sink = Arc::new(common::CancelOn {
        events: CollectingSink::default(),
        cancel: cancel.clone(),
        when: Box::new(|k| matches!(k, EventKind::AgentProgress { .. })),
    });
    options.events = sink.clone();
    let script = r#"export default async function (a, g) {
        return (await g.agent({prompt: "Count from 1 to 500, separated by commas.", maxTokens: 1500})).text;
    }"#;
    let outcome = common::run_with_cancel(script, json!({}), &options, cancel).await;
    assert_eq!(outcome.status, RunStatus::Cancelled, "{outcome:?}");
    let records = proxy.settled().await;
    assert_eq!(records.len(), 1);
    assert!(
        records[0].dropped && !records[0].completed,
        "the request was dropped mid-generation"
    );
    assert_eq!(records[0].openai_usage(), None, "the server never finished");
    assert!(
        !sink
            .events
            .events()
            .iter()
            .any(|e| matches!(e.kind, EventKind::AgentTurn { .. })),
        "no turn completed"
    );
    assert!(
        common::llm::becomes_idle(&llm.origin).await,
        "the server stopped generating"
    );
    // Its only slot is free again: a new request is served.
    let (options, _) = common::options_with(
        common::boa(),
        common::provider_set(vec![local_entry(&proxy)]),
    );
    let quick = common::run(
        "export default async function (a, g) { return (await g.agent({prompt: 'Say hi.', maxTokens: 8})).turns; }",
        json!({}),
        &options,
    )
    .await;
    assert_eq!(quick.result, Some(json!(1)), "{quick:?}");
    drop(llm);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_in_front_of_the_model_is_retried_once() {
    let Some((_llm, proxy)) = model_behind_proxy(vec![Scripted::status(
        429,
        Some("0"),
        json!({"error": {"message": "rate limited"}}),
    )])
    .await
    else {
        return;
    };
    let (options, sink) = common::options_with(
        common::boa(),
        common::provider_set(vec![local_entry(&proxy)]),
    );
    let outcome = common::run(
        "export default async function (a, g) { return (await g.agent({prompt: 'Say hi.', maxTokens: 8})).tokens; }",
        json!({}),
        &options,
    )
    .await;
    assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
    let records = proxy.settled().await;
    let statuses: Vec<u16> = records.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![429, 200]);
    let (p, c) = records[1].openai_usage().expect("usage");
    assert_eq!(outcome.result, Some(json!(p + c)));
    assert_eq!(outcome.total_tokens, p + c);
    let retries = common::retries(&sink.events());
    assert_eq!(retries.len(), 1);
    assert!(retries[0].1.contains("429"), "{retries:?}");
}

/// Straight to llama-server, no proxy: it closes the connection after every streamed reply
/// (while announcing keep-alive), and a turn sent at once on a kept connection used to fail
/// into a retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_to_back_turns_on_the_server_itself_need_no_retry() {
    let Some(llm) = common::llm::local_llm().await else {
        return;
    };
    let (options, sink) = common::options_with(
        common::boa(),
        common::provider_set(vec![common::openai_entry("local", &llm.base_url, MODEL)]),
    );
    let script = r#"export default async function (a, g) {
        const tokens = [];
        for (let i = 0; i < 8; i++) {
          tokens.push((await g.agent({prompt: `Say one word (${i}).`, maxTokens: 4})).tokens);
        }
        return tokens;
    }"#;
    let outcome = common::run(script, json!({}), &options).await;
    assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
    let events = sink.events();
    assert_eq!(common::retries(&events), Vec::new());
    let per_agent: Vec<u64> = outcome
        .result
        .expect("result")
        .as_array()
        .expect("array")
        .iter()
        .map(|t| t.as_u64().expect("tokens"))
        .collect();
    assert_eq!(per_agent.len(), 8);
    assert_eq!(outcome.total_tokens, per_agent.iter().sum::<u64>());
    assert_eq!(common::turns(&events).len(), 8);
}

fn stdout_json(output: &std::process::Output) -> Value {
    let text = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}): {text}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_cli_runs_a_graph_on_the_model_in_the_sandbox() {
    let Some((_llm, proxy)) = model_behind_proxy(Vec::new()).await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = dir.path().join("pair.js");
    std::fs::write(
        &graph,
        r#"export const meta = {name: "Pair", slug: "pair", version: "1"};
export default async function (args, g) {
  const [a, b] = await Promise.all([
    g.agent({prompt: "Name a fruit.", model: "local:smollm2", maxTokens: 12}),
    g.agent({prompt: "Name a tree.", model: "local", maxTokens: 12}),
  ]);
  return {models: [a.model, b.model], tokens: a.tokens + b.tokens};
}"#,
    )
    .expect("graph");
    let providers = dir.path().join("providers.toml");
    std::fs::write(
        &providers,
        format!(
            "[providers.local]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"smollm2\"\ntemperature = 0.0\n",
            proxy.base_url()
        ),
    )
    .expect("providers");
    // The wasm sandbox (the default engine) with a providers file.
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_runner"))
        .arg("run")
        .arg(&graph)
        .arg("--providers")
        .arg(&providers)
        .output()
        .await
        .expect("runs");
    assert!(output.status.success(), "{output:?}");
    let printed = stdout_json(&output);
    let records = proxy.settled().await;
    let used: u64 = server_usage(&records).iter().map(|(p, c)| p + c).sum();
    assert_eq!(printed["status"], "completed");
    assert_eq!(printed["total_tokens"], used);
    assert_eq!(printed["result"]["tokens"], used);
    assert_eq!(printed["result"]["models"], json!([MODEL, MODEL]));

    // The same graph with the single-provider flags: its model names must then use `openai:`.
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_runner"))
        .arg("run")
        .arg(&graph)
        .args(["--engine", "boa", "--provider", "openai", "--base-url"])
        .arg(proxy.base_url())
        .args(["--model", MODEL])
        .output()
        .await
        .expect("runs");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let printed = stdout_json(&output);
    assert!(
        printed["error"]
            .as_str()
            .is_some_and(|e| e.contains("unknown provider \"local\"")),
        "{printed}"
    );
}
