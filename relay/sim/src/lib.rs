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

/// Runs the chosen scenarios, each on a paused-time runtime of its own; `on_report` gets
/// each in the order of [`SCENARIOS`], as soon as it and those before it have finished.
///
/// The scenarios share nothing (each has its world, its runtime and its own stream of the
/// seed), so `all` runs them side by side, one thread per core up to two, in that order: the
/// figures are the same as one after another, and the wall time is about the longest thread's
/// share (pickup, the largest, on one; the rest on the other).
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
    let workers = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, MAX_THREADS)
        .min(names.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let done = done.clone();
            let (names, next, failed) = (&names, &next, &failed);
            scope.spawn(move || {
                use std::sync::atomic::Ordering;
                while !failed.load(Ordering::SeqCst) {
                    let index = next.fetch_add(1, Ordering::SeqCst);
                    let Some(name) = names.get(index) else { break };
                    let outcome = run_one(options, name);
                    if outcome.is_err() {
                        failed.store(true, Ordering::SeqCst);
                    }
                    if done.send((index, outcome)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(done);
        report_in_order(&names, finished, &mut on_report)
    })
}

/// One scenario's report and its wall time in seconds, or why it failed.
type Outcome = Result<(Report, f64), SimError>;

/// The most threads `all` runs scenarios on: two take the wall time to the longest scenario's
/// share; more would only split the small ones.
const MAX_THREADS: usize = 2;

/// Hands the outcomes arriving on `finished` to `on_report` in the order of `names`; the first
/// failure in that order is the answer.
fn report_in_order(
    names: &[&str],
    finished: std::sync::mpsc::Receiver<(usize, Outcome)>,
    on_report: &mut impl FnMut(&str, &Report, f64),
) -> Result<(), SimError> {
    let mut waiting: Vec<Option<Outcome>> = names.iter().map(|_| None).collect();
    let mut reported = 0;
    for (index, outcome) in finished {
        if let Some(slot) = waiting.get_mut(index) {
            *slot = Some(outcome);
        }
        while let Some(Some(outcome)) = waiting.get_mut(reported).map(Option::take) {
            let (report, seconds) = outcome?;
            on_report(names[reported], &report, seconds);
            reported += 1;
        }
    }
    match waiting.into_iter().skip(reported).flatten().next() {
        Some(Err(error)) => Err(error),
        _ if reported < names.len() => Err(SimError::Runtime(
            "a simulation thread ended without finishing its scenario".into(),
        )),
        _ => Ok(()),
    }
}

/// Runs scenario `name` on a fresh paused runtime: its report and its wall time in seconds.
fn run_one(options: &SimOptions, name: &str) -> Outcome {
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
                "idempotency" => scenarios::idempotency(world, (runs / 10).max(10), &mut rng).await,
                "offline" => scenarios::offline(world, &mut rng).await,
                "outbox" => scenarios::outbox(world, &mut rng).await,
                "result-size" => scenarios::result_size(world, &mut rng).await,
                _ => scenarios::access(world, &mut rng).await,
            }
        })
        .map_err(|e| SimError::Scenario(name.to_owned(), e))?;
    Ok((report, started.elapsed().as_secs_f64()))
}

/// FNV-1a of a name, so each scenario draws its own stream from the one seed.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(name: &str) -> Outcome {
        Ok((
            Report {
                json: serde_json::json!({"scenario": name}),
                lines: vec![name.to_owned()],
            },
            0.0,
        ))
    }

    /// Sends `outcomes` (index, outcome) in the order given and collects what is reported.
    fn reported(
        names: &[&str],
        outcomes: Vec<(usize, Outcome)>,
    ) -> (Vec<String>, Result<(), SimError>) {
        let (send, receive) = std::sync::mpsc::channel();
        for outcome in outcomes {
            send.send(outcome).expect("the receiver is here");
        }
        drop(send);
        let mut seen = Vec::new();
        let result = report_in_order(names, receive, &mut |name, _, _| seen.push(name.to_owned()));
        (seen, result)
    }

    #[test]
    fn reports_arrive_in_the_scenarios_order_whatever_order_they_finish_in() {
        let names = ["a", "b", "c"];
        let (seen, result) = reported(
            &names,
            vec![(2, report("c")), (0, report("a")), (1, report("b"))],
        );
        assert!(result.is_ok());
        assert_eq!(seen, ["a", "b", "c"]);
    }

    #[test]
    fn the_first_failure_in_order_is_the_answer_and_nothing_after_it_is_reported() {
        let names = ["a", "b", "c"];
        let failed = || Err(SimError::Scenario("b".into(), "it broke".into()));
        let (seen, result) = reported(
            &names,
            vec![(2, report("c")), (1, failed()), (0, report("a"))],
        );
        assert_eq!(seen, ["a"]);
        assert!(
            matches!(&result, Err(SimError::Scenario(name, _)) if name == "b"),
            "{result:?}"
        );
        // A failure that arrives while an earlier scenario still runs waits for it.
        let (seen, result) = reported(&names, vec![(1, failed()), (0, report("a"))]);
        assert_eq!(seen, ["a"]);
        assert!(result.is_err());
    }

    #[test]
    fn a_scenario_that_never_reports_is_an_error() {
        let (seen, result) = reported(&["a", "b"], vec![(0, report("a"))]);
        assert_eq!(seen, ["a"]);
        assert!(matches!(result, Err(SimError::Runtime(_))), "{result:?}");
    }
}
