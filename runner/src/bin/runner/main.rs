//! `runner`: run and test graph scripts locally. The result goes to stdout, the live trace to
//! stderr. Exit codes: 0 completed, 1 failed, 3 cancelled, 2 usage error.
//!
//! The clap types live here, not in the library: `flags.rs` holds the ones the `relay` binary
//! shares.

mod flags;
mod replay;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use flags::{ENGINES, ProviderArgs};
use runner::engine::boa::BoaEngine;
use runner::engine::wasm::{
    ComponentCache, DEFAULT_MAX_COMPONENTS, MAX_COMPONENT_BYTES, WasmLimits,
};
use runner::engine::{Engine, EngineKind};
use runner::host::agents::AgentProvider;
use runner::host::approvals::{ApprovalPolicy, Policy, TerminalApprover};
use runner::host::events::{EventSink, NullSink};
use runner::host::graphs::{
    Catalog, CatalogError, DESCRIBE_TIMEOUT, DescribeError, Described, FolderCatalog, WASM_MAGIC,
    describe_within, located_reason,
};
use runner::host::journal::{FileJournal, JournalMode, Recorder};
use runner::host::mock::MockProvider;
use runner::host::time::ClockSetting;
use runner::host::tools::ToolRegistry;
use runner::input::{
    InputError, MAX_DATA_FILE_BYTES, MAX_SCRIPT_FILE_BYTES, read_at_most_by, read_text_at_most,
};
use runner::report::Listed;
use runner::run::{MAX_CONCURRENCY, RunOptions, RunRequest, RunStatus, run_graph};
use runner::testing::CaseDefaults;
use runner::trace::{TracePrinter, for_terminal, for_terminal_framed};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

const EXIT_FAILED: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_CANCELLED: u8 = 3;

#[derive(Parser)]
#[command(
    name = "runner",
    version,
    about = "Run and test graph scripts in a sandbox"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one graph and print its outcome as JSON.
    Run(RunArgs),
    /// Re-run a graph against the journal `runner run --record` wrote: every host call is
    /// answered from it, nothing runs live (no provider, no tool, no timer). Prints the outcome
    /// as `runner run` does; a call that differs from the journal stops the replay, named.
    Replay(replay::ReplayCommand),
    /// Parse a graph and validate its `meta`; prints the meta as JSON. Given a folder, checks
    /// every graph in it and prints a JSON array of `{file, meta}`; each graph that cannot load
    /// is named on stderr with its error, and the exit code is 1.
    Check {
        /// The graph file, or a folder of graphs.
        file: PathBuf,
        /// Folder of graphs for nested calls, checked too: two graphs with one slug are an
        /// error (default: the graph file's folder).
        #[arg(long)]
        graphs: Option<PathBuf>,
        /// Type-check the graph file (`.ts`, or `.js` by its JSDoc types) against graph.d.ts
        /// with the TypeScript compiler, the `tsc` on PATH; an error where there is none.
        #[arg(long)]
        types: bool,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Run every `*.test.json` in a folder.
    Test {
        /// The folder (default: `graphs`).
        #[arg(default_value = "graphs")]
        dir: PathBuf,
        #[command(flatten)]
        engine: EngineArgs,
        /// Print every run's trace too.
        #[arg(long)]
        verbose: bool,
        /// Agents of cases without `replies` use this provider (see `runner run --help`).
        #[command(flatten)]
        providers: ProviderArgs,
        #[command(flatten)]
        replay: ReplayArgs,
        /// Run the whole folder this many times. A case that fixes its seed and clock and
        /// answers its agents from its own replies must repeat its first round exactly: the
        /// same outcome, `total_tokens` and trace (each graph's, nested graph's and agent's
        /// events in order, at the same virtual times); the first difference fails it.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=MAX_REPEAT as i64))]
        repeat: u32,
        #[command(flatten)]
        reports: ReportArgs,
    },
    /// Create a folder NAME with a first graph (NAME.js, slug NAME), its test, the TypeScript
    /// declarations of `g` (graph.d.ts) and a jsconfig.json, so an editor completes `g.`;
    /// `runner test NAME` passes at once.
    Init {
        /// The folder to create; its last part is the graph's slug.
        name: PathBuf,
        /// Write the graph in TypeScript (NAME.ts, run with its types erased, no build step)
        /// with a tsconfig.json.
        #[arg(long)]
        ts: bool,
    },
    /// Compile a graph into a self-contained, pre-initialized wasm component.
    Build {
        /// The graph file.
        file: PathBuf,
        /// Where to write the component.
        #[arg(short = 'o', long = "output", value_name = "OUT.wasm")]
        output: PathBuf,
    },
}

/// `runner test`'s machine-readable reports.
#[derive(clap::Args)]
struct ReportArgs {
    /// Write a JUnit XML report to FILE: one testcase per test, a failure with the test's
    /// problems and the end of its run's trace.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Print one JSON object per test on stdout, one per line (file, name, round, passed,
    /// problems, duration_ms, outcome) instead of PASS/FAIL lines; the summary goes to stderr.
    #[arg(long)]
    json: bool,
}

/// Which engine, and the wasm sandbox's limits.
#[derive(clap::Args)]
struct EngineArgs {
    /// The engine: `wasm` (the sandbox) or `boa` (in-process, for quick local iteration).
    #[arg(long, value_parser = ENGINES, default_value_t = EngineKind::Wasm)]
    engine: EngineKind,
    /// Wasm only: a deterministic instruction budget (wasmtime fuel units) for the whole run,
    /// nested graphs included.
    #[arg(long, value_name = "UNITS", value_parser = parse_fuel)]
    fuel: Option<u64>,
    /// Wasm only: linear-memory cap in MiB.
    #[arg(long = "memory-mib", default_value_t = 256,
          value_parser = clap::value_parser!(u64).range(16..=4096))]
    memory_mib: u64,
    /// Wasm only: wasm stack cap in KiB.
    #[arg(long = "wasm-stack-kib", default_value_t = 16384,
          value_parser = clap::value_parser!(u64).range(256..=262144))]
    wasm_stack_kib: u64,
}

impl EngineArgs {
    fn limits(&self) -> WasmLimits {
        WasmLimits {
            memory_bytes: self.memory_mib * 1024 * 1024,
            wasm_stack_bytes: usize::try_from(self.wasm_stack_kib * 1024).unwrap_or(usize::MAX),
            fuel: self.fuel,
        }
    }

    /// The engine for a graph file: a compiled component always runs in the wasm engine. The
    /// wasm engine's components (the guest, a compiled graph, the built components of the
    /// graphs folder) are kept in one cache for the process.
    fn build(&self, component: Option<&[u8]>) -> anyhow::Result<Arc<dyn Engine>> {
        if self.engine == EngineKind::Boa && self.fuel.is_some() {
            bail!("--fuel applies to the wasm engine only");
        }
        let components = || ComponentCache::new(DEFAULT_MAX_COMPONENTS);
        if let Some(bytes) = component {
            if self.engine == EngineKind::Boa {
                bail!("a compiled component runs in the wasm engine; drop --engine boa");
            }
            let limits = self.limits();
            return Ok(Arc::new(slow_notice(
                "compiling the component",
                "seconds, cached afterwards",
                || components().component(bytes, limits),
            )?));
        }
        Ok(match self.engine {
            EngineKind::Wasm => {
                let limits = self.limits();
                Arc::new(slow_notice(
                    "preparing the sandbox",
                    "about 10 s on the first run on this machine, cached afterwards",
                    || components().generic(limits),
                )?)
            }
            EngineKind::Boa => Arc::new(BoaEngine::default()),
        })
    }
}

/// `--fuel`: a whole number of fuel units, at least 1.
fn parse_fuel(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("a budget of 0 units cannot run anything; give at least 1 (a trivial graph needs about 300,000)".to_owned()),
        Ok(units) => Ok(units),
        Err(e) => Err(format!("expected a whole number of fuel units: {e}")),
    }
}

/// Runs `work`; if it takes longer than a second, says `what (usually)` on stderr, then every
/// few seconds how long it has taken so far.
fn slow_notice<T>(what: &str, usually: &str, work: impl FnOnce() -> T) -> T {
    let notice = runner::progress::Notice::new("", what, usually, Duration::from_secs(1));
    runner::progress::with_progress(&notice, work)
}

/// A graph file: module text, or a compiled component.
enum GraphFile {
    Script(String),
    Component(Vec<u8>),
}

impl GraphFile {
    /// The script to run (empty for a component, which holds its own) and the engine for it.
    fn with_engine(self, engine: &EngineArgs) -> anyhow::Result<(Arc<str>, Arc<dyn Engine>)> {
        Ok(match self {
            GraphFile::Script(script) => (script.into(), engine.build(None)?),
            // The graph is built into the component: its script argument stays empty.
            GraphFile::Component(bytes) => ("".into(), engine.build(Some(&bytes))?),
        })
    }
}

fn read_graph(path: &Path) -> anyhow::Result<GraphFile> {
    // A component may be as large as MAX_COMPONENT_BYTES, a script only MAX_SCRIPT_FILE_BYTES.
    let limit = |head: &[u8]| {
        if head == WASM_MAGIC {
            MAX_COMPONENT_BYTES
        } else {
            MAX_SCRIPT_FILE_BYTES
        }
    };
    let bytes = read_at_most_by(path, WASM_MAGIC.len(), limit)
        .with_context(|| format!("cannot read the graph {}", path.display()))?;
    if bytes.starts_with(WASM_MAGIC) {
        return Ok(GraphFile::Component(bytes));
    }
    // A `.wasm` name promises a component; running its bytes as JavaScript would only confuse.
    if path
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("wasm"))
    {
        bail!(
            "{} is not a WebAssembly component (it does not start with \\0asm); build one with `runner build GRAPH.js -o {}`",
            path.display(),
            path.display()
        );
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        anyhow::anyhow!(
            "{} is neither UTF-8 JavaScript nor a wasm component",
            path.display()
        )
    })?;
    // A TypeScript graph runs with its types erased, on its own lines and columns.
    match runner::input::script_of(path, text) {
        Ok(script) => Ok(GraphFile::Script(script)),
        Err(InputError::TypeScript(e)) => Err(anyhow::anyhow!("{}", e.located(path))),
        Err(e) => Err(anyhow::anyhow!(
            "cannot read the graph {}: {e}",
            path.display()
        )),
    }
}

/// Most rounds of `runner test --repeat`.
const MAX_REPEAT: u32 = 10_000;

/// The run's random source and clock, fixed for tests and replays.
#[derive(clap::Args, Clone, Copy)]
struct ReplayArgs {
    /// Seed of the run's random source (`Math.random`, `crypto`); the trace names the seed of
    /// every run, so `--seed` with it replays that run's randomness. A test case's own `seed`
    /// wins.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// The run clock: `real` (the machine's, to 1 ms) or `fixed:2026-01-01T00:00:00Z`, a
    /// virtual clock that starts there and moves only when the graph waits for a timer or an
    /// agent (a mock reply's `latency_ms`), so timers take no real time. A test case's own
    /// `clock` wins.
    #[arg(long, value_name = "real|fixed:TIME", default_value = "real")]
    clock: ClockSetting,
}

#[derive(clap::Args)]
struct RunArgs {
    /// The graph file.
    file: PathBuf,
    /// Arguments: a JSON object, or @FILE to read one.
    #[arg(long, default_value = "{}")]
    args: String,
    #[command(flatten)]
    engine: EngineArgs,
    /// Mock provider replies file (see docs/testing.md).
    #[arg(long, conflicts_with_all = ["provider", "providers"])]
    replies: Option<PathBuf>,
    #[command(flatten)]
    providers: ProviderArgs,
    /// Token cap for the whole run, nested graphs included: once the cap is reached no agent
    /// starts; agents already running finish, so a run can end above the cap.
    #[arg(long = "max-tokens")]
    max_tokens: Option<u64>,
    /// Tools that run without asking.
    #[arg(long = "allow", value_name = "TOOL")]
    allow: Vec<String>,
    /// Tools that ask on the terminal each time (denied when there is no terminal).
    #[arg(long = "ask", value_name = "TOOL")]
    ask: Vec<String>,
    /// Tools that are refused (also every tool not listed at all).
    #[arg(long = "deny", value_name = "TOOL")]
    deny: Vec<String>,
    /// The only folder the fs tools may use.
    #[arg(long)]
    folder: Option<PathBuf>,
    /// Folder of graphs for nested calls (default: the graph file's folder).
    #[arg(long)]
    graphs: Option<PathBuf>,
    /// Agents running at once.
    #[arg(long = "max-concurrency", default_value_t = 4,
          value_parser = clap::value_parser!(u16).range(1..=MAX_CONCURRENCY as i64))]
    max_concurrency: u16,
    /// Wall-clock deadline in seconds (real time, whatever the run clock).
    #[arg(long, default_value_t = 300.0)]
    timeout: f64,
    #[command(flatten)]
    replay: ReplayArgs,
    /// Record the run's journal to FILE (JSON lines, see docs/journal.md): `runner replay FILE`
    /// re-runs it offline.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
}

fn main() -> ExitCode {
    // RUST_LOG, or its old name RUNNER_LOG (kept as an alias).
    let filter = log_filter(
        std::env::var("RUST_LOG").ok().as_deref(),
        std::env::var("RUNNER_LOG").ok().as_deref(),
    );
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&filter)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let code = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => match run(args).await {
                Ok(code) => code,
                Err(e) => usage_error(&e),
            },
            Command::Replay(args) => match replay::replay(args).await {
                Ok(code) => code,
                Err(e) => usage_error(&e),
            },
            Command::Check {
                file,
                graphs,
                types,
                engine,
            } => check_command(&file, graphs.as_deref(), types, &engine).await,
            Command::Test {
                dir,
                engine,
                verbose,
                providers,
                replay,
                repeat,
                reports,
            } => {
                let how = TestRun {
                    verbose,
                    replay,
                    repeat,
                    reports,
                };
                match test(&dir, &engine, &providers, how).await {
                    Ok(code) => code,
                    Err(e) => usage_error(&e),
                }
            }
            Command::Build { file, output } => build(&file, &output).await,
            Command::Init { name, ts } => init(&name, ts),
        }
    });
    // The outcome is printed: a tool still stuck in a blocking thread (a file on a hung network
    // share) must not keep the process from exiting.
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

/// The log filter, in `tracing`'s `EnvFilter` syntax: `RUST_LOG`, as everywhere else;
/// `RUNNER_LOG` (its old name) when `RUST_LOG` is unset or empty; else `warn`.
fn log_filter(rust_log: Option<&str>, runner_log: Option<&str>) -> String {
    [rust_log, runner_log]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|filter| !filter.is_empty())
        .unwrap_or("warn")
        .to_owned()
}

fn usage_error(error: &anyhow::Error) -> ExitCode {
    eprintln!("error: {}", runner::output::error_line(error.as_ref()));
    ExitCode::from(EXIT_USAGE)
}

fn parse_args(text: &str) -> anyhow::Result<Value> {
    let text = match text.strip_prefix('@') {
        Some(path) => read_text_at_most(Path::new(path), MAX_DATA_FILE_BYTES)
            .with_context(|| format!("cannot read the arguments file {path}"))?,
        None => text.to_owned(),
    };
    let value: Value =
        serde_json::from_str(&text).context("--args is not valid JSON; pass a JSON object")?;
    if !value.is_object() {
        bail!("--args must be a JSON object, like '{{\"ticket\": \"...\"}}'");
    }
    Ok(value)
}

/// `--args` against the graph's `meta.args`, before anything runs (exit 2 naming the failing
/// path). A graph whose meta cannot be read at all runs as before and the run says what is
/// wrong; a `meta.args` that is no valid schema stops here. Gives the graph's meta, or why it
/// has none, for the catalog to take instead of describing the graph again.
async fn check_run_args(
    engine: &Arc<dyn Engine>,
    script: &Arc<str>,
    args: &Value,
    timeout: Duration,
) -> anyhow::Result<Result<runner::Meta, DescribeError>> {
    let described = describe_within(engine.as_ref(), script.clone(), timeout).await;
    match &described {
        Ok(meta) => runner::args::check(meta, args, "args")
            .map_err(|reason| anyhow::anyhow!("--args: {reason}"))?,
        Err(DescribeError::Meta(error @ runner::MetaError::Args(_))) => bail!("{error}"),
        Err(_) => {}
    }
    Ok(described)
}

/// The approval policy the `--allow`, `--ask` and `--deny` flags give.
fn policy_of(allow: &[String], ask: &[String], deny: &[String]) -> ApprovalPolicy {
    let mut policy = ApprovalPolicy::default();
    for (tools, p) in [
        (allow, Policy::Allow),
        (ask, Policy::Ask),
        (deny, Policy::Deny),
    ] {
        for tool in tools {
            policy.set(tool.clone(), p);
        }
    }
    policy
}

/// The catalog of nested graphs: `--graphs`, else the graph's own folder, read before the run
/// as `runner check` reads it (every graph described by the run's own engine, each within the
/// run's deadline), so a folder with two graphs of one slug is refused with `check`'s message.
/// The graph being run, when the folder holds it, is not described again: `run` is its
/// description.
async fn graphs_catalog(
    args: &RunArgs,
    engine: &Arc<dyn Engine>,
    run: &Described,
) -> Result<Arc<dyn Catalog>, CatalogError> {
    let graphs_dir = match &args.graphs {
        Some(dir) => dir.clone(),
        None => folder_of(&args.file).to_path_buf(),
    };
    let describe_timeout = Duration::from_secs_f64(args.timeout).min(DESCRIBE_TIMEOUT);
    let catalog =
        FolderCatalog::load_knowing(&graphs_dir, engine.as_ref(), describe_timeout, Some(run))
            .await?;
    for (path, reason) in catalog.skipped() {
        tracing::debug!("not in the catalog: {}: {reason}", path.display());
    }
    Ok(Arc::new(catalog))
}

/// The run's tools, with the policy flags checked against them before the sandbox is
/// prepared: a typo fails in no time.
fn checked_tools(args: &RunArgs) -> anyhow::Result<ToolRegistry> {
    let tools = ToolRegistry::standard(args.folder.clone())
        .map_err(|e| anyhow::anyhow!("--folder: {}", e.message))?;
    for (flag, names) in [
        ("--allow", &args.allow),
        ("--ask", &args.ask),
        ("--deny", &args.deny),
    ] {
        tools
            .check_known(names.iter().map(String::as_str))
            .map_err(|reason| anyhow::anyhow!("{flag}: {reason}"))?;
    }
    Ok(tools)
}

async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let tools = checked_tools(&args)?;
    let (script, engine) = read_graph(&args.file)?.with_engine(&args.engine)?;
    let graph_args = parse_args(&args.args)?;
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        bail!("--timeout must be a positive number of seconds");
    }
    let describe_timeout = Duration::from_secs_f64(args.timeout).min(DESCRIBE_TIMEOUT);
    let described = Described {
        path: args.file.clone(),
        script: script.clone(),
        meta: check_run_args(&engine, &script, &graph_args, describe_timeout).await?,
    };
    let mut options = RunOptions::new(engine);
    if let Some(path) = &args.replies {
        options.provider = Arc::new(MockProvider::from_file(path)?);
    } else if let Some(provider) = args.providers.build()? {
        options.provider = provider;
    }
    options.tools = tools;
    options.policy = policy_of(&args.allow, &args.ask, &args.deny);
    options.approver = TerminalApprover::for_stdin();
    options.catalog = match graphs_catalog(&args, &options.engine, &described).await {
        Ok(catalog) => catalog,
        Err(e) => {
            // The words and the exit code of `runner check` for the same folder.
            eprintln!("error: {}", for_terminal(&e.to_string()));
            return Ok(ExitCode::from(EXIT_FAILED));
        }
    };
    options.token_cap = args.max_tokens;
    options.max_concurrency = usize::from(args.max_concurrency);
    options.timeout = Duration::from_secs_f64(args.timeout);
    options.events = Arc::new(TracePrinter::stderr());
    options.seed = args.replay.seed;
    options.clock = args.replay.clock;
    if let Some(path) = &args.record {
        let file = FileJournal::create(path)
            .with_context(|| format!("--record: cannot create {}", path.display()))?;
        options.journal = Some(JournalMode::Record(Recorder::new(Arc::new(file))));
    }

    let cancel = CancellationToken::new();
    let interrupted = interrupt_listener()?;
    let on_interrupt = cancel.clone();
    tokio::spawn(async move {
        interrupted.await;
        eprintln!("interrupted: cancelling the run");
        on_interrupt.cancel();
    });
    // The path as the author typed it: errors of the graph's own code name it.
    let graph = args.file.display().to_string();
    let outcome = run_graph(
        RunRequest {
            script,
            args: graph_args,
            graph,
            run_id: None,
        },
        &options,
        cancel,
    )
    .await;
    print_outcome(&outcome)
}

/// Prints `outcome` as `runner run` does, and the exit code for it.
fn print_outcome(outcome: &runner::run::RunOutcome) -> anyhow::Result<ExitCode> {
    let printed = Printed {
        status: outcome.status,
        result: &outcome.result,
        error: &outcome.error,
        location: &outcome.location,
        total_tokens: outcome.total_tokens,
        reported_cost: outcome.reported_cost,
    };
    println!("{}", serde_json::to_string(&printed)?);
    Ok(match outcome.status {
        RunStatus::Completed => ExitCode::SUCCESS,
        RunStatus::Failed => ExitCode::from(EXIT_FAILED),
        RunStatus::Cancelled => ExitCode::from(EXIT_CANCELLED),
    })
}

/// Listens for Ctrl-C from now on: the handler is installed before the run starts, so an
/// interrupt that arrives early still cancels the run instead of killing the process.
fn interrupt_listener() -> anyhow::Result<impl std::future::Future<Output = ()> + Send> {
    #[cfg(unix)]
    {
        let mut signal = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .context("cannot listen for Ctrl-C")?;
        Ok(async move {
            signal.recv().await;
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

/// The one JSON object `runner run` prints, in this field order.
#[derive(serde::Serialize)]
struct Printed<'a> {
    status: RunStatus,
    result: &'a Option<Value>,
    error: &'a Option<String>,
    /// Where the graph's own code failed: `{file, line, column}`, or null.
    location: &'a Option<runner::location::Location>,
    total_tokens: u64,
    reported_cost: f64,
}

async fn check(file: &Path, graphs: Option<&Path>, engine: &EngineArgs) -> ExitCode {
    let (script, engine) = match read_graph(file).and_then(|graph| graph.with_engine(engine)) {
        Ok(loaded) => loaded,
        Err(e) => return usage_error(&e),
    };
    let meta = match engine.describe(script.clone()).await {
        Ok(meta) => meta,
        Err(e) => {
            let said = runner::location::name_file(&e.to_string(), &file.display().to_string());
            match runner::location::of(&said) {
                // A syntax error names its own place in the file.
                Some(_) => eprintln!("{}", for_terminal_framed(&said, "")),
                None => eprintln!("{}: {}", file.display(), for_terminal_framed(&said, "")),
            }
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let folder = graphs.unwrap_or_else(|| folder_of(file));
    let catalog = match FolderCatalog::load(folder, engine.as_ref(), DESCRIBE_TIMEOUT).await {
        Ok(catalog) => catalog,
        Err(e) => {
            eprintln!("error: {}", for_terminal(&e.to_string()));
            return ExitCode::from(EXIT_FAILED);
        }
    };
    if let Some(failure) = broken_callee(&script, &catalog) {
        eprintln!(
            "{}: {}",
            file.display(),
            for_terminal_framed(&failure.message, "")
        );
        return ExitCode::from(EXIT_FAILED);
    }
    match serde_json::to_string(&meta) {
        Ok(json) => println!("{json}"),
        Err(e) => eprintln!("error: {e}"),
    }
    ExitCode::SUCCESS
}

/// `runner check DIR`: every graph of the folder as a nested call would find it: each file
/// that cannot load named with its own error, each graph calling a broken one named too, and
/// the metas of the others as a JSON array of `{file, meta}`.
async fn check_folder(dir: &Path, graphs: Option<&Path>, engine: &EngineArgs) -> ExitCode {
    if graphs.is_some_and(|graphs| graphs != dir) {
        eprintln!(
            "error: `runner check {}` checks that folder's graphs; --graphs names the folder for one graph file",
            dir.display()
        );
        return ExitCode::from(EXIT_USAGE);
    }
    let engine = match engine.build(None) {
        Ok(engine) => engine,
        Err(e) => return usage_error(&e),
    };
    let catalog = match FolderCatalog::load(dir, engine.as_ref(), DESCRIBE_TIMEOUT).await {
        Ok(catalog) => catalog,
        Err(e) => {
            eprintln!("error: {}", for_terminal(&e.to_string()));
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let mut broken = 0;
    for (path, reason) in catalog.skipped() {
        eprintln!("{}", for_terminal_framed(&located_reason(path, reason), ""));
        broken += 1;
    }
    let mut checked = Vec::new();
    for graph in catalog.graphs() {
        let file = graph.file.as_deref().unwrap_or(&graph.meta.slug).to_owned();
        if let Some(failure) = broken_callee(&graph.script, &catalog) {
            eprintln!("{file}: {}", for_terminal_framed(&failure.message, ""));
            broken += 1;
            continue;
        }
        checked.push(serde_json::json!({"file": file, "meta": graph.meta}));
    }
    match serde_json::to_string(&checked) {
        Ok(json) => println!("{json}"),
        Err(e) => eprintln!("error: {e}"),
    }
    eprintln!(
        "{}: {} checked, {broken} with errors",
        dir.display(),
        match checked.len() + broken {
            1 => "1 graph".to_owned(),
            count => format!("{count} graphs"),
        }
    );
    if broken == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILED)
    }
}

/// A graph of the folder that `script` names as a quoted slug (`g.graph("child")`) and that
/// could not load, as the failure a run calling it would meet. Slugs are found in the text, not
/// by running it: a slug built at run time is not checked.
fn broken_callee(script: &str, catalog: &FolderCatalog) -> Option<graph_js::Failure> {
    catalog.skipped().iter().find_map(|(path, _)| {
        let slug = path.file_stem()?.to_str()?;
        let named = ['"', '\'', '`']
            .iter()
            .any(|q| script.contains(&format!("{q}{slug}{q}")));
        if named {
            catalog.load_failure(slug)
        } else {
            None
        }
    })
}

async fn build(file: &Path, output: &Path) -> ExitCode {
    let script = match read_graph(file) {
        Ok(GraphFile::Script(script)) => script,
        Ok(GraphFile::Component(_)) => {
            eprintln!("error: {} is already a compiled component", file.display());
            return ExitCode::from(EXIT_USAGE);
        }
        Err(e) => return usage_error(&e),
    };
    if let Err(e) = check_build_output(file, output) {
        return usage_error(&e);
    }
    eprintln!(
        "building {} (compiling the sandbox takes a few seconds)",
        file.display()
    );
    match runner::engine::wasm::build_component(&script, WasmLimits::default()).await {
        Ok(bytes) => match runner::output::replace_file(output, &bytes) {
            Ok(()) => {
                eprintln!("wrote {} ({} bytes)", output.display(), bytes.len());
                println!("{}", output.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: cannot write {}: {e}", output.display());
                ExitCode::from(EXIT_FAILED)
            }
        },
        Err(e) => {
            eprintln!("{}: {e}", file.display());
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// The folder a file path names its file in (`.` for a bare file name).
fn folder_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Refuses, before seconds of building, an output that cannot or must not be written: a
/// folder, a file in a folder that does not exist, or the graph's own source.
fn check_build_output(file: &Path, output: &Path) -> anyhow::Result<()> {
    let stem = file.file_stem().unwrap_or_default().to_string_lossy();
    if output.is_dir() {
        bail!(
            "{} is a folder; give the component's file name, e.g. -o {}",
            output.display(),
            output.join(format!("{stem}.wasm")).display()
        );
    }
    let parent = folder_of(output);
    if !parent.is_dir() {
        bail!(
            "cannot write {}: the folder {} does not exist; create it first",
            output.display(),
            parent.display()
        );
    }
    if let (Ok(source), Ok(target)) = (file.canonicalize(), output.canonicalize())
        && source == target
    {
        bail!(
            "{} is the graph's own source; write the component elsewhere, e.g. -o {stem}.wasm",
            output.display()
        );
    }
    Ok(())
}

/// How `runner test` runs and reports.
struct TestRun {
    verbose: bool,
    replay: ReplayArgs,
    repeat: u32,
    reports: ReportArgs,
}

async fn test(
    dir: &Path,
    engine: &EngineArgs,
    providers: &ProviderArgs,
    how: TestRun,
) -> anyhow::Result<ExitCode> {
    let TestRun {
        verbose,
        replay,
        repeat,
        reports,
    } = how;
    let provider: Option<Arc<dyn AgentProvider>> = providers.build()?;
    let tests = runner::testing::find_tests(dir)?;
    if tests.is_empty() {
        bail!("no *.test.json files in {}", dir.display());
    }
    if let Some(junit) = &reports.junit {
        // Refused before any test runs, as `runner build` refuses its output.
        if junit.is_dir() || !folder_of(junit).is_dir() {
            bail!(
                "--junit {}: give a file in a folder that exists",
                junit.display()
            );
        }
    }
    let events: Arc<dyn EventSink> = if verbose {
        Arc::new(TracePrinter::stderr())
    } else {
        Arc::new(NullSink)
    };
    let engine = engine.build(None)?;
    eprintln!(
        "running {} test file{} in {} on engine {}{}",
        tests.len(),
        if tests.len() == 1 { "" } else { "s" },
        dir.display(),
        engine.name(),
        if repeat > 1 {
            format!(", {repeat} times")
        } else {
            String::new()
        }
    );
    let defaults = CaseDefaults {
        seed: replay.seed,
        clock: replay.clock,
    };
    let mut rounds = Rounds {
        json: reports.json,
        ..Rounds::default()
    };
    for round in 1..=repeat {
        let reports = runner::testing::run_dir_with(
            dir,
            engine.clone(),
            events.clone(),
            provider.clone(),
            defaults,
            |report| rounds.report(round, report),
        )
        .await?;
        rounds.compare(round, &reports);
    }
    rounds.finish(repeat, reports.junit.as_deref())
}

/// The cases of `runner test` over its rounds: each case's first outcome, to compare the later
/// ones with, the counts, and the tests the reports list.
#[derive(Default)]
struct Rounds {
    first: Vec<(String, Option<runner::testing::RoundRecord>)>,
    /// Cases of a round that no later round is compared with (left to chance: a real clock,
    /// a fresh seed or a live model); they must only pass.
    unrecorded: usize,
    passed: usize,
    failed: usize,
    /// `--json`: one object per test on stdout instead of PASS/FAIL lines.
    json: bool,
    /// Every case of the first round and every failure of the later ones.
    listed: Vec<Listed>,
}

impl Rounds {
    /// Prints a case: every failure, and the passes of the first round only.
    fn report(&mut self, round: u32, report: &runner::testing::CaseReport) {
        if report.passed() {
            self.passed += 1;
        } else {
            self.failed += 1;
        }
        if round == 1 || !report.passed() {
            self.list(Listed {
                report: report.clone(),
                round,
            });
        }
    }

    /// Lists a test and prints it.
    fn list(&mut self, listed: Listed) {
        if self.json {
            println!("{}", runner::report::json_line(&listed));
        } else {
            let verdict = if listed.report.passed() {
                "PASS"
            } else {
                "FAIL"
            };
            println!("{verdict} {}", for_terminal(&listed.name()));
            for problem in &listed.report.problems {
                println!("     {}", for_terminal_framed(problem, "     "));
            }
        }
        self.listed.push(listed);
    }

    /// After a round: a case that must repeat itself (a fixed seed and clock, replies of its
    /// own; see `runner::testing::RoundRecord`) and differs from its first round in its
    /// outcome or its trace fails, naming the first difference.
    fn compare(&mut self, round: u32, reports: &[runner::testing::CaseReport]) {
        let key = |r: &runner::testing::CaseReport| format!("{}: {}", r.file.display(), r.name);
        if round == 1 {
            self.first = reports.iter().map(|r| (key(r), r.record.clone())).collect();
            self.unrecorded = reports.iter().filter(|r| r.record.is_none()).count();
            return;
        }
        let mut differing = Vec::new();
        for (report, (first_key, first)) in reports.iter().zip(&self.first) {
            let (Some(first), Some(record)) = (first, &report.record) else {
                continue;
            };
            if !report.passed() || key(report) != *first_key {
                continue;
            }
            if let Some(difference) = first.first_difference(record, round) {
                let mut report = report.clone();
                report.problems.push(format!(
                    "round {round} differs from round 1 under a fixed seed and clock: {difference}"
                ));
                differing.push(Listed { report, round });
            }
        }
        for listed in differing {
            self.passed -= 1;
            self.failed += 1;
            self.list(listed);
        }
    }

    /// Prints the summary, writes the JUnit report if asked, and gives the exit code.
    fn finish(&self, repeat: u32, junit: Option<&Path>) -> anyhow::Result<ExitCode> {
        let (passed, failed) = (self.passed, self.failed);
        let summary = if repeat > 1 {
            if self.unrecorded > 0 {
                let n = self.unrecorded;
                eprintln!(
                    "only checked, not compared with round 1: {n} case{} leaving the clock, the seed or the model to chance (a real clock, no seed, no replies of their own)",
                    if n == 1 { "" } else { "s" }
                );
            }
            format!("{passed} passed, {failed} failed over {repeat} rounds")
        } else {
            format!("{passed} passed, {failed} failed")
        };
        if self.json {
            eprintln!("{summary}");
        } else {
            println!("{summary}");
        }
        if let Some(path) = junit {
            runner::output::replace_file(path, runner::report::junit(&self.listed).as_bytes())
                .with_context(|| format!("cannot write the JUnit report {}", path.display()))?;
            eprintln!("wrote the JUnit report {}", path.display());
        }
        Ok(if failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(EXIT_FAILED)
        })
    }
}

/// `runner check FILE|DIR [--types]`.
async fn check_command(
    file: &Path,
    graphs: Option<&Path>,
    types: bool,
    engine: &EngineArgs,
) -> ExitCode {
    if !file.is_dir() {
        return match check(file, graphs, engine).await {
            code if code == ExitCode::SUCCESS && types => check_types(file),
            code => code,
        };
    }
    if types {
        return usage_error(&anyhow::anyhow!(
            "--types checks one graph file; {} is a folder",
            file.display()
        ));
    }
    check_folder(file, graphs, engine).await
}

/// `runner check --types FILE`, after the graph passed the ordinary check: `tsc`'s errors on
/// stderr, each at its `FILE:LINE:COL`.
fn check_types(file: &Path) -> ExitCode {
    match runner::typescript::tsc::type_check(file) {
        Ok(checked) if checked.passed => {
            eprintln!("{}: no type errors", file.display());
            ExitCode::SUCCESS
        }
        Ok(checked) => {
            eprintln!("{}", checked.messages);
            eprintln!("{}: type errors (tsc)", file.display());
            ExitCode::from(EXIT_FAILED)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// `runner init NAME`: the files written on stdout, one per line.
fn init(name: &Path, typescript: bool) -> ExitCode {
    let language = if typescript {
        runner::scaffold::Language::TypeScript
    } else {
        runner::scaffold::Language::JavaScript
    };
    match runner::scaffold::init_in(name, language) {
        Ok(files) => {
            for file in &files {
                println!("{}", file.display());
            }
            eprintln!(
                "created {}: run `runner test {}`",
                name.display(),
                name.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_wins_and_runner_log_is_its_alias() {
        assert_eq!(log_filter(Some("debug"), Some("trace")), "debug");
        assert_eq!(log_filter(None, Some("trace")), "trace");
        assert_eq!(log_filter(Some(" "), Some("trace")), "trace");
        assert_eq!(log_filter(None, None), "warn");
    }
}
