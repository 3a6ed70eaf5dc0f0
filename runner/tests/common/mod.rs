//! Helpers shared by the runner's integration tests.
#![allow(dead_code)]

pub mod doc_commands;
pub mod llm;
pub mod server;

use std::sync::Arc;

use runner::RunStatus;
use runner::engine::wasm::{ComponentCache, DEFAULT_MAX_COMPONENTS, WasmLimits, build_component};
use runner::engine::{Engine, EngineKind};
use runner::host::events::{CollectingSink, Event, EventKind};
use runner::host::mock::MockProvider;
use runner::run::{RunOptions, RunOutcome, RunRequest, run_graph};
use tokio_util::sync::CancellationToken;

/// A graph that calls itself with no base case (slug `loop`).
pub const SELF_CALLING: &str = r#"
export const meta = {name: "Loop", slug: "loop", version: "1"};
export default async function (args, g) { return g.graph("loop", {n: (args.n ?? 0) + 1}); }
"#;

/// A graph that calls itself `args.n` deep and lists the levels (slug `countdown`).
pub const COUNTDOWN: &str = r#"
export const meta = {name: "Countdown", slug: "countdown", version: "1"};
export default async function (args, g) {
  if (args.n === 0) return ["done"];
  const rest = await g.graph("countdown", {n: args.n - 1});
  return [args.n, ...rest];
}
"#;

/// `script` with a `meta` export added at its end when it has none (so no line or column of
/// it moves): every run checks the graph's meta, and most tests are about something else.
pub fn with_meta(script: &str) -> String {
    let has_meta = [
        "export const meta",
        "export let meta",
        "export var meta",
        "export { meta",
    ]
    .iter()
    .any(|form| script.contains(form));
    // An empty script is a compiled graph's: it holds its own meta.
    if has_meta || script.is_empty() {
        script.to_owned()
    } else {
        format!(
            "{script}\nexport const meta = {{name: \"Test\", slug: \"test\", version: \"1\"}};\n"
        )
    }
}

/// The engines every behaviour is checked on: the sandbox and the in-process interpreter.
pub fn engines() -> Vec<Arc<dyn Engine>> {
    [EngineKind::Wasm, EngineKind::Boa]
        .into_iter()
        .map(|kind| kind.build().expect("the engine starts"))
        .collect()
}

/// Options with a mock provider built from `replies` and a collecting trace.
pub fn options(
    engine: Arc<dyn Engine>,
    replies: serde_json::Value,
) -> (RunOptions, Arc<CollectingSink>, Arc<MockProvider>) {
    let sink = Arc::new(CollectingSink::default());
    let mock = Arc::new(MockProvider::from_json(replies).expect("valid replies"));
    let mut options = RunOptions::new(engine);
    options.provider = mock.clone();
    options.events = sink.clone();
    (options, sink, mock)
}

/// `script` built into a component (`runner build`) and loaded as an engine.
pub async fn compiled(script: &str) -> Arc<dyn Engine> {
    let bytes = build_component(script, WasmLimits::default())
        .await
        .expect("the graph builds");
    let components = ComponentCache::new(DEFAULT_MAX_COMPONENTS);
    Arc::new(
        components
            .component(&bytes, WasmLimits::default())
            .expect("it loads"),
    )
}

/// Runs `script` in both engines; each must complete with `expected`.
pub async fn completes_with(script: &str, expected: serde_json::Value) {
    for engine in engines() {
        let name = engine.name();
        let (options, _, _) = options(engine, serde_json::json!({}));
        let outcome = run(script, serde_json::json!({}), &options).await;
        assert_eq!(outcome.status, RunStatus::Completed, "{name}: {outcome:?}");
        assert_eq!(outcome.result.as_ref(), Some(&expected), "{name}");
    }
}

/// Runs `script` with `args`.
pub async fn run(script: &str, args: serde_json::Value, options: &RunOptions) -> RunOutcome {
    run_with_cancel(script, args, options, CancellationToken::new()).await
}

/// Runs `script` with `args` as the graph file `file` (the name its errors' locations give).
pub async fn run_as(
    script: &str,
    file: &str,
    args: serde_json::Value,
    options: &RunOptions,
) -> RunOutcome {
    let request = RunRequest {
        script: with_meta(script).into(),
        args,
        graph: file.into(),
        run_id: None,
    };
    run_graph(request, options, CancellationToken::new()).await
}

/// Runs `script` with `args`, cancellable.
pub async fn run_with_cancel(
    script: &str,
    args: serde_json::Value,
    options: &RunOptions,
    cancel: CancellationToken,
) -> RunOutcome {
    run_graph(
        RunRequest {
            script: with_meta(script).into(),
            args,
            graph: "test.js".into(),
            run_id: None,
        },
        options,
        cancel,
    )
    .await
}

/// The events of one kind, in order.
pub fn kinds(events: &[Event]) -> Vec<&EventKind> {
    events.iter().map(|e| &e.kind).collect()
}

/// The largest number of agents that were running at the same time.
pub fn max_in_flight(events: &[Event]) -> usize {
    let mut running = 0usize;
    let mut max = 0usize;
    for event in events {
        match event.kind {
            EventKind::AgentStarted { .. } => {
                running += 1;
                max = max.max(running);
            }
            EventKind::AgentFinished { .. } | EventKind::AgentFailed { .. } => {
                running = running.saturating_sub(1);
            }
            _ => {}
        }
    }
    max
}

/// The in-process engine: provider tests are about providers, and boa starts at once.
pub fn boa() -> Arc<dyn Engine> {
    EngineKind::Boa.build().expect("boa")
}

/// Options running agents on `provider`, with a collecting trace.
pub fn options_with(
    engine: Arc<dyn Engine>,
    provider: Arc<dyn runner::host::agents::AgentProvider>,
) -> (RunOptions, Arc<CollectingSink>) {
    let sink = Arc::new(CollectingSink::default());
    let mut options = RunOptions::new(engine);
    options.provider = provider;
    options.events = sink.clone();
    (options, sink)
}

/// An OpenAI-compatible entry called `name` at `base_url` with default model `model`, and quick
/// retries (the waits are not what these tests check).
pub fn openai_entry(
    name: &str,
    base_url: &str,
    model: &str,
) -> runner::host::provider_config::ProviderConfig {
    use runner::host::provider_config::{ProviderConfig, ProviderKind};
    let mut config = ProviderConfig::new(name, ProviderKind::OpenAi);
    config.base_url = base_url.to_owned();
    config.model = Some(model.to_owned());
    config.temperature = Some(0.0);
    config.retry.initial_backoff = std::time::Duration::from_millis(10);
    config.retry.max_backoff = std::time::Duration::from_millis(50);
    config
}

/// A provider set of `entries` (the first is the default).
pub fn provider_set(
    entries: Vec<runner::host::provider_config::ProviderConfig>,
) -> Arc<runner::host::providers::ProviderSet> {
    let mut set = runner::host::providers::ProviderSet::default();
    let first = entries.first().map(|e| e.name.clone());
    for entry in entries {
        set.add(entry).expect("valid entry");
    }
    if let Some(first) = first {
        set.set_default(&first).expect("default");
    }
    Arc::new(set)
}

/// A streamed OpenAI chat completion: `text`, then `stop`, then usage, then `[DONE]`.
pub fn openai_reply(text: &str, prompt_tokens: u64, completion_tokens: u64) -> server::Scripted {
    let chunks = [
        serde_json::json!({"id": "c1", "object": "chat.completion.chunk", "model": "canned",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}]}),
        serde_json::json!({"id": "c1", "object": "chat.completion.chunk", "model": "canned",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        serde_json::json!({"id": "c1", "object": "chat.completion.chunk", "model": "canned", "choices": [],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}),
    ];
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    server::Scripted::sse_text(body)
}

/// Cancels a token when the first event matching a predicate is emitted (and records all).
pub struct CancelOn {
    pub events: CollectingSink,
    pub cancel: CancellationToken,
    pub when: Box<dyn Fn(&EventKind) -> bool + Send + Sync>,
}

impl runner::host::events::EventSink for CancelOn {
    fn emit(&self, event: &Event) {
        runner::host::events::EventSink::emit(&self.events, event);
        if (self.when)(&event.kind) {
            self.cancel.cancel();
        }
    }
}

/// The agent turns of a trace.
pub fn turns(events: &[Event]) -> Vec<&EventKind> {
    events
        .iter()
        .map(|e| &e.kind)
        .filter(|k| matches!(k, EventKind::AgentTurn { .. }))
        .collect()
}

/// The retry events of a trace, as `(attempt, reason)`.
pub fn retries(events: &[Event]) -> Vec<(u32, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AgentRetry {
                attempt, reason, ..
            } => Some((*attempt, reason.clone())),
            _ => None,
        })
        .collect()
}
