//! `relay sim`: the seeds' experiments replayed through the real code on a virtual clock.
//!
//! Each scenario builds a world (see [`world`]): the real service's router called in-process
//! over in-memory SQLite, the real desktop relay loop, and a scripted chat client speaking MCP,
//! all on tokio's paused time so hours of simulated runs take seconds. Graph run times are
//! lognormal (median 60 s, minimum 5 s) via a graph engine stand-in ([`engine`]). Faults are a
//! transport layer. In long-poll mode the desktop holds a `sync` open and clients use the
//! waiting `get_graph_run`.

pub mod bench;
pub mod engine;
pub mod loadtest;
pub mod mcp_bench;
pub mod replica_bench;
pub mod rng;
pub mod scenarios;
pub mod session_bench;
pub mod stats;
pub mod world;

use self::rng::Rng;
use self::scenarios::Report;
use self::world::WorldOptions;

/// The scenarios, in the order `all` runs them.
pub const SCENARIOS: [&str; 9] = [
    "pickup",
    "serial",
    "polling",
    "cancel",
    "idempotency",
    "offline",
    "outbox",
    "result-size",
    "access",
];

/// What to simulate.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// One scenario, or `all`.
    pub scenario: String,
    /// Runs for the sampled scenarios (pickup and cancel; polling and idempotency use a tenth,
    /// at least 10 each).
    pub runs: usize,
    /// The seed.
    pub seed: u64,
    /// Long-poll mode.
    pub long_poll: bool,
}

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Unknown scenario name.
    #[error("unknown scenario `{0}`: use one of {list} or all", list = SCENARIOS.join(", "))]
    UnknownScenario(String),
    /// The runtime could not start.
    #[error("cannot start the simulation runtime: {0}")]
    Runtime(String),
    /// A scenario failed.
    #[error("scenario {0} failed: {1}")]
    Scenario(String, ScenarioError),
}

/// Why one scenario failed, in words.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ScenarioError(pub String);

impl From<String> for ScenarioError {
    fn from(message: String) -> Self {
        ScenarioError(message)
    }
}

impl From<&str> for ScenarioError {
    fn from(message: &str) -> Self {
        ScenarioError(message.to_owned())
    }
}

/// Runs the chosen scenarios on a paused-time runtime; `on_report` gets each as it finishes.
pub fn run(
    options: &SimOptions,
    mut on_report: impl FnMut(&str, &Report, f64),
) -> Result<(), SimError> {
    let names: Vec<&str> = if options.scenario == "all" {
        SCENARIOS.to_vec()
    } else if let Some(name) = SCENARIOS.iter().find(|s| **s == options.scenario) {
        vec![*name]
    } else {
        return Err(SimError::UnknownScenario(options.scenario.clone()));
    };
    for name in names {
        // A fresh paused runtime per scenario: virtual time starts over and nothing leaks.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .map_err(|e| SimError::Runtime(e.to_string()))?;
        let started = relay_protocol::clock::Stopwatch::start();
        let mut rng = Rng::new(options.seed ^ fnv(name));
        let world = WorldOptions {
            long_poll: options.long_poll,
            outbox: true,
        };
        let runs = options.runs.max(1);
        let report = runtime
            .block_on(async {
                match name {
                    "pickup" => scenarios::pickup(world, runs, &mut rng).await,
                    "serial" => scenarios::serial(world, &mut rng).await,
                    "polling" => scenarios::polling(world, (runs / 10).max(10), &mut rng).await,
                    "cancel" => scenarios::cancel(world, runs, &mut rng).await,
                    "idempotency" => {
                        scenarios::idempotency(world, (runs / 10).max(10), &mut rng).await
                    }
                    "offline" => scenarios::offline(world, &mut rng).await,
                    "outbox" => scenarios::outbox(world, &mut rng).await,
                    "result-size" => scenarios::result_size(world, &mut rng).await,
                    _ => scenarios::access(world, &mut rng).await,
                }
            })
            .map_err(|e| SimError::Scenario(name.to_owned(), e))?;
        on_report(name, &report, started.elapsed().as_secs_f64());
    }
    Ok(())
}

/// FNV-1a of a name, so each scenario draws its own stream from the one seed.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
