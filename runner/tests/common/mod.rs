//! Helpers shared by the runner's integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use runner::engine::{Engine, EngineKind};
use runner::host::events::{CollectingSink, Event, EventKind};
use runner::host::mock::MockProvider;
use runner::run::{RunOptions, RunOutcome, RunRequest, run_graph};
use tokio_util::sync::CancellationToken;

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

/// Runs `script` with `args`.
pub async fn run(script: &str, args: serde_json::Value, options: &RunOptions) -> RunOutcome {
    run_with_cancel(script, args, options, CancellationToken::new()).await
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
            script: script.into(),
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
