//! Resume under faults (issue 46's acceptance), with real `relay desktop` processes: a 12-agent
//! graph that writes a file, queued by an MCP client, whose desktop is stopped at 20 points of
//! its runs (agent starts, the moments after an agent's answer, the write) and started again
//! each time. Every run completes once with the uninterrupted result, the file is written, the
//! run's `total_tokens` is the uninterrupted run's plus at most the tokens of the agents in
//! flight at each stop, the agent's view and the desktop's history hold one run. Three ways to
//! stop: SIGKILL, SIGTERM (the run is kept for the next start), and SIGKILL with the service
//! stopped and started again on its database before the desktop comes back.
//!
//! The stop points come from a seeded generator: the seed is printed, and
//! `GRAPHRELAY_FAULT_SEED=N` plays the same points again.

use crate::harness;

use std::time::Duration;

use harness::{RelayProcess, World, wait_until};
use serde_json::{Value, json};

/// Twelve agents in turn, then their answers written to a file.
const TWELVE_THEN_WRITE: &str = r#"
export const meta = {name: "Twelve then write", slug: "twelve", version: "1.0.0"};
export default async function (args, g) {
  const texts = [];
  for (let i = 1; i <= 12; i++) {
    texts.push((await g.agent({label: "a" + i, prompt: "p" + i})).text);
  }
  await g.tool("fs.write", {path: "twelve.txt", text: texts.join(",")});
  return texts;
}
"#;

const AGENTS: u64 = 12;
/// Runs per way of stopping, and stops per run: 20 stops in all.
const RUNS: usize = 4;
const STOPS_PER_RUN: usize = 5;

/// Agent `i` answers `t{i}` with `10 * i` tokens, after a short delay.
fn tokens_of(agent: u64) -> u64 {
    agent * 10
}

fn replies() -> Value {
    let replies: Vec<Value> = (1..=AGENTS)
        .map(|i| json!({"label": format!("a{i}"), "text": format!("t{i}"), "tokens": tokens_of(i), "latency_ms": 120}))
        .collect();
    json!({"replies": replies})
}

/// What the uninterrupted run spends.
fn uninterrupted_tokens() -> u64 {
    (1..=AGENTS).map(tokens_of).sum()
}

fn expected_texts() -> Vec<String> {
    (1..=AGENTS).map(|i| format!("t{i}")).collect()
}

/// A stop point: the journal line that must be in the state before the stop.
#[derive(Debug, Clone, Copy)]
enum Point {
    /// Agent `i` started.
    Start(u64),
    /// Agent `i`'s answer reached the graph.
    Answered(u64),
    /// The file's write started.
    Write,
}

impl Point {
    /// The points of a run in their order.
    fn all() -> Vec<Point> {
        let mut points: Vec<Point> = (1..=AGENTS)
            .flat_map(|i| [Point::Start(i), Point::Answered(i)])
            .collect();
        points.push(Point::Write);
        points
    }

    fn reached(self, journal: &str) -> bool {
        match self {
            Point::Start(i) => journal.contains(&format!(r#""what":"a{i}""#)),
            Point::Answered(i) => journal.lines().any(|line| {
                line.starts_with(r#"{"k":"wait""#) && line.contains(&format!(r#"\"t{i}\""#))
            }),
            Point::Write => journal.contains(r#""what":"fs.write""#),
        }
    }
}

/// splitmix64: a small seeded generator, so the stop points can be played again.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `count` of the run's points, in order, at least two apart (so each stop finds the run
    /// past the one before: a resumed run does not journal its replayed part again).
    fn points(&mut self, count: usize) -> Vec<Point> {
        let all = Point::all();
        loop {
            let mut picked: Vec<usize> = Vec::new();
            while picked.len() < count {
                let at = usize::try_from(self.next() % all.len() as u64).expect("fits");
                if !picked.contains(&at) {
                    picked.push(at);
                }
            }
            picked.sort_unstable();
            if picked.windows(2).all(|w| w[1] - w[0] >= 2) {
                return picked.into_iter().map(|at| all[at]).collect();
            }
        }
    }
}

fn seed() -> u64 {
    let seed = std::env::var("GRAPHRELAY_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            runner::clock::wall_now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(46, |d| d.as_secs())
        });
    eprintln!("resume under faults: GRAPHRELAY_FAULT_SEED={seed}");
    seed
}

/// How the desktop is stopped at each point.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stop {
    Kill,
    Term,
    /// SIGKILL, then the service stopped and started again on its database.
    KillAndRestartService,
}

/// The journal of the run in the state (one run per world).
fn journal(world: &World) -> Option<String> {
    let history = world.state.history().ok()?;
    let execution = &history.first()?.execution_id;
    world.state.journal_text(execution).ok().flatten()
}

/// Whether the run's end is in the history.
fn ended(world: &World) -> bool {
    world
        .state
        .history()
        .is_ok_and(|h| h.first().is_some_and(|row| row.status != "running"))
}

/// The tokens of the agents in flight in `journal` (started, their answer not journaled).
fn in_flight_tokens(journal: &str) -> u64 {
    (1..=AGENTS)
        .filter(|&i| Point::Start(i).reached(journal) && !Point::Answered(i).reached(journal))
        .map(tokens_of)
        .sum()
}

fn stop(relay: &mut RelayProcess, how: Stop) {
    let signal = if how == Stop::Term {
        libc::SIGTERM
    } else {
        libc::SIGKILL
    };
    let pid = i32::try_from(relay.child.id()).expect("pid");
    // SAFETY: sends a signal to our own child process, whose pid we hold.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "signal sent");
    let status = relay.child.wait().expect("wait");
    if how == Stop::Term {
        assert!(status.success(), "{status:?}: {}", relay.log());
    }
}

/// The world's MCP client, connected again with `agent_token` (one that outlives a restart of
/// the service: the run is the agent's that queued it).
async fn connect(world: &mut World, agent_token: &str) {
    world.client = crate::common::mcp_client(
        &world.service.mcp_url(),
        agent_token,
        crate::common::Era::Current,
    )
    .await;
}

/// Stops the world's service and starts it again on the same database (and clock); the agent's
/// MCP client connects to it again. Returns the database's folder, to keep while the world is.
async fn restart_service(world: &mut World, agent_token: &str) -> Option<tempfile::TempDir> {
    let db = world.service.db.clone();
    let clock = world.service.clock.clone();
    let stand_in = relay_testkit::TestService::start().await;
    let old = std::mem::replace(&mut world.service, stand_in);
    let kept_dir = old.stop().await;
    let restarted =
        relay_testkit::TestService::start_at(&db, clock, relay_service::ServiceConfig::default())
            .await;
    let stand_in = std::mem::replace(&mut world.service, restarted);
    stand_in.stop().await;
    connect(world, agent_token).await;
    kept_dir
}

/// A world with the graph shared, its writes allowed in `folder`, and run `run` queued by an
/// agent whose token outlives the service's restarts: (world, folder, agent token, command).
async fn queued(run: usize) -> (World, std::path::PathBuf, String, String) {
    let mut world = World::new(replies()).await;
    let folder = world.shared_folder(runner::host::approvals::Policy::Allow);
    let session = world.share(TWELVE_THEN_WRITE).await;
    let agent_token = world.service.full_agent(&world.project).await;
    connect(&mut world, &agent_token).await;
    let command = world
        .queue(&session, &format!("key-faults-{run}"), json!({}))
        .await;
    (world, folder, agent_token, command)
}

/// One run of the graph through its `points`, stopped `how` at each; checks its end.
async fn run_stopped_at(points: &[Point], how: Stop, run: usize) {
    let (mut world, folder, agent_token, command) = queued(run).await;
    let mut relay = world.spawn_relay(&format!("run{run}-0"), &replies(), &[]);
    let mut bound = uninterrupted_tokens();
    let mut kept_dirs = Vec::new();
    let mut interrupted: u32 = 0;
    for (n, point) in points.iter().enumerate() {
        // Near its end, the run may finish (and its journal go) between two reads.
        wait_until(&format!("{point:?} is journaled"), || {
            journal(&world).is_some_and(|text| point.reached(&text)) || ended(&world)
        })
        .await;
        stop(&mut relay, how);
        bound += journal(&world).as_deref().map_or(0, in_flight_tokens);
        // Stopped mid-run (or, near its end, just after it ended).
        let status = world.get(&command).await["status"].clone();
        assert!(
            status == "running" || status == "completed",
            "stopped at {point:?}: {status}: {}",
            relay.log()
        );
        if !ended(&world) {
            interrupted += 1;
        }
        if how == Stop::KillAndRestartService {
            kept_dirs.extend(restart_service(&mut world, &agent_token).await);
        }
        relay = world.spawn_relay(&format!("run{run}-{}", n + 1), &replies(), &[]);
    }
    let run_view = world.wait_terminal(&command, Duration::from_secs(60)).await;
    let at = format!(
        "{how:?}, run {run} stopped at {points:?}: {run_view}: {}",
        relay.log()
    );
    assert_eq!(run_view["status"], "completed", "{at}");
    assert_eq!(run_view["result"], json!(expected_texts()), "{at}");
    let tokens = run_view["total_tokens"].as_u64().expect("tokens");
    assert!(
        (uninterrupted_tokens()..=bound).contains(&tokens),
        "{tokens} tokens, at most {bound}: {at}"
    );
    assert_eq!(
        std::fs::read_to_string(folder.join("twelve.txt")).expect("written"),
        expected_texts().join(","),
        "{at}"
    );
    wait_until("the run's end is recorded", || {
        world
            .state
            .history()
            .is_ok_and(|h| h.first().is_some_and(|row| row.status == "completed"))
    })
    .await;
    let history = world.state.history().expect("history");
    assert_eq!(history.len(), 1, "one run in the history: {at}");
    assert_eq!(history[0].total_tokens, tokens, "{at}");
    // Each stop mid-run was resumed, none started afresh.
    assert_eq!(
        history[0].resumed, interrupted,
        "resumed {}x, stopped mid-run {interrupted}x: {at}",
        history[0].resumed
    );
}

async fn stopped_twenty_times(how: Stop) {
    let mut rng = Rng(seed());
    let started = relay_protocol::clock::Stopwatch::start();
    for run in 0..RUNS {
        let points = rng.points(STOPS_PER_RUN);
        run_stopped_at(&points, how, run).await;
    }
    eprintln!(
        "resume under faults: {how:?}, {} stops in {:.1} s",
        RUNS * STOPS_PER_RUN,
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_twenty_times_completes_once_paying_only_for_work_in_flight() {
    stopped_twenty_times(Stop::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stopped_by_sigterm_twenty_times_completes_once() {
    stopped_twenty_times(Stop::Term).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_twenty_times_with_the_service_restarted_completes_once() {
    stopped_twenty_times(Stop::KillAndRestartService).await;
}
