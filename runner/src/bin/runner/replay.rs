//! `runner replay`: a recorded run again, answered from its journal.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use runner::engine::EngineKind;
use runner::host::journal::{Journal, JournalMode, Replayer};
use runner::host::time::ClockSetting;
use runner::run::{RunOptions, RunRequest, run_graph};
use runner::trace::TracePrinter;
use tokio_util::sync::CancellationToken;

use super::{ENGINES, EngineArgs, print_outcome, read_graph};

/// `runner replay FILE [--script PATH] [--engine E]`.
#[derive(clap::Args)]
pub(super) struct ReplayCommand {
    /// The journal (`runner run --record FILE`).
    file: PathBuf,
    /// Replay this graph file instead of the script the journal holds (an edited graph: the
    /// first call that differs from the journal stops the replay).
    #[arg(long, value_name = "PATH")]
    script: Option<PathBuf>,
    /// The engine (default: the one that recorded the run).
    #[arg(long, value_parser = ENGINES)]
    engine: Option<EngineKind>,
}

/// Replays the journal `command` names and prints the outcome as `runner run` does.
pub(super) async fn replay(command: ReplayCommand) -> anyhow::Result<ExitCode> {
    let journal = Journal::read(&command.file)?;
    let header = &journal.header;
    let kind = match command.engine {
        Some(kind) => kind,
        None => serde_json::from_value(serde_json::Value::String(header.engine.clone()))
            .with_context(|| format!("the journal's engine {:?} is unknown", header.engine))?,
    };
    let engine = EngineArgs {
        engine: kind,
        fuel: None,
        memory_mib: 256,
        wasm_stack_kib: 16384,
    };
    let (script, engine, graph) = match &command.script {
        Some(path) => {
            let (script, engine) = read_graph(path)?.with_engine(&engine)?;
            (script, engine, path.display().to_string())
        }
        None if header.script.is_empty() => anyhow::bail!(
            "{} records a run of a built component, which it does not hold: give the component with --script FILE.wasm",
            command.file.display()
        ),
        None => (
            header.script.as_str().into(),
            engine.build(None)?,
            header.graph.clone(),
        ),
    };
    let mut options = RunOptions::new(engine);
    options.seed = Some(header.seed);
    options.clock = ClockSetting::parse(&header.clock)
        .with_context(|| format!("the journal's clock {:?}", header.clock))?;
    options.token_cap = header.token_cap;
    options.events = Arc::new(TracePrinter::stderr());
    options.journal = Some(JournalMode::Replay(Replayer::new(&journal)));
    let outcome = run_graph(
        RunRequest {
            script,
            args: header.args.clone(),
            graph,
            run_id: None,
        },
        &options,
        CancellationToken::new(),
    )
    .await;
    print_outcome(&outcome)
}
