//! `relay sim` and `relay bench`: the seeds' experiments on a virtual clock, and the service's
//! measurements.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use relay_sim::bench::{self, EmptyPollOptions};

#[derive(Debug, Args)]
pub(crate) struct SimArgs {
    /// One scenario (pickup, serial, polling, cancel, idempotency, offline, outbox,
    /// result-size, access) or all.
    #[arg(long, default_value = "all")]
    scenario: String,
    /// Runs per sampled scenario (pickup, cancel; polling and idempotency a tenth).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    runs: u64,
    /// Seed of the random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// poll: the seed's 20 s polling desktop; longpoll: the held sync and the waiting get.
    #[arg(long, value_parser = ["poll", "longpoll"], default_value = "poll")]
    mode: String,
    /// One JSON object per scenario per line.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum BenchCommand {
    /// Empty inbox reads over loopback HTTP: no sweep vs unguarded sweep vs guarded sweep.
    EmptyPolls(EmptyPollArgs),
    /// Many desktops long-polling one `relay serve` over loopback: its memory, and pickup
    /// latency under that load.
    LongPolls(LongPollArgs),
    /// What 2025-era MCP sessions cost `relay serve`: agent tokens open sessions, the report
    /// gives the service's memory before and after and the KiB per session the caps keep.
    Sessions(SessionArgs),
    /// Several `relay serve` replicas on one PostgreSQL database: claims a second with their
    /// double claims, pickup latency across replicas, held long polls and memory per replica;
    /// then one replica on SQLite with the same load, side by side.
    Replicas(ReplicaArgs),
    /// What one MCP tool call costs `relay serve` next to its static route (`GET /healthz`),
    /// measured side by side in one run: the stateless 2026-07-28 call, a 2025-era session's
    /// call, a look at a queued run (`get_graph_run`), and the first two again with the rate
    /// limiter on; calls/s, p50, p99 and the service's CPU time per call of each, and last
    /// `tool call: N.N× the static route` (of the stateless `list_graph_sessions`).
    #[command(
        after_help = "To see where the time goes, profile the service while the bench runs, \
e.g. `perf record -g -p $(pgrep -n -f 'relay serve') -- sleep 5` during the tool call phase, then \
`perf report`; `--phase-seconds 30` gives the profiler a longer phase."
    )]
    Mcp(McpArgs),
}

#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// Connections kept busy at once (one request in flight on each).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=1024))]
    concurrency: u64,
    /// Measured seconds of each phase.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=600))]
    phase_seconds: u64,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// The `relay` binary to measure as the service (default: this one), e.g. another build's,
    /// to compare two builds with the same client.
    #[arg(long, value_name = "PATH")]
    server: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ReplicaArgs {
    /// `relay serve` processes on the PostgreSQL database.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=16))]
    replicas: u64,
    /// A throwaway PostgreSQL database, postgres://user@host/db (the bench adds projects,
    /// tokens and tasks to it).
    #[arg(long, env = "RELAY_DATABASE_URL")]
    db: String,
    /// Chat tasks raced for.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    tasks: u64,
    /// Concurrent claims per task, spread over the replicas.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=64))]
    claims_per_task: u64,
    /// Desktops long-polling each replica.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..=6_000))]
    desktops_per_replica: u64,
    /// Runs queued, each through a replica other than its desktop's.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    runs: u64,
    /// Leave out the SQLite comparison.
    #[arg(long)]
    skip_sqlite: bool,
    /// Print each report as one JSON object a line.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SessionArgs {
    /// Agent tokens that open sessions.
    #[arg(long, default_value_t = 625, value_parser = clap::value_parser!(u64).range(1..=20_000))]
    tokens: u64,
    /// `initialize` calls per token.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    per_token: u64,
}

#[derive(Debug, Args)]
pub(crate) struct LongPollArgs {
    /// Desktops long-polling at once.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..=20_000))]
    desktops: u64,
    /// Runs queued while they wait.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    runs: u64,
    /// Print the report as one JSON object (memory in KiB, pickup latencies in ms).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct EmptyPollArgs {
    /// Measured polls per variant.
    #[arg(long, default_value_t = 2_000)]
    polls: usize,
    /// Finished tasks in the seeded history.
    #[arg(long, default_value_t = 10_000)]
    tasks: usize,
    /// Links the history is spread over.
    #[arg(long, default_value_t = 500)]
    links: usize,
    /// Pollers at once.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
}

/// Runs the simulation and prints one report per scenario.
pub(crate) fn sim(args: SimArgs) -> Result<()> {
    let options = relay_sim::SimOptions {
        scenario: args.scenario,
        runs: usize::try_from(args.runs).unwrap_or(usize::MAX),
        seed: args.seed,
        long_poll: args.mode == "longpoll",
    };
    let started = relay_protocol::clock::Stopwatch::start();
    let json = args.json;
    // The simulation runs its own paused-time runtimes, off this one.
    std::thread::scope(|scope| -> Result<()> {
        scope
            .spawn(|| {
                relay_sim::run(&options, |name, report, seconds| {
                    if json {
                        println!("{}", report.json);
                    } else {
                        for line in &report.lines {
                            println!("{line}");
                        }
                    }
                    eprintln!("sim: {name} done in {seconds:.1} s of wall time");
                })
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the simulation thread panicked"))??;
        Ok(())
    })?;
    eprintln!(
        "sim: finished in {:.1} s of wall time",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Runs one `relay bench` measurement and prints its report.
pub(crate) async fn bench(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Sessions(args) => {
            let report =
                relay_sim::session_bench::sessions(relay_sim::session_bench::SessionBenchOptions {
                    tokens: usize::try_from(args.tokens).unwrap_or(usize::MAX),
                    per_token: usize::try_from(args.per_token).unwrap_or(usize::MAX),
                    server: std::env::current_exe().context("cannot find the relay binary")?,
                })
                .await?;
            print!("{report}");
            Ok(())
        }
        BenchCommand::LongPolls(args) => {
            let report = relay_sim::loadtest::long_polls(relay_sim::loadtest::LongPollOptions {
                desktops: usize::try_from(args.desktops).unwrap_or(usize::MAX),
                runs: usize::try_from(args.runs).unwrap_or(usize::MAX),
                server: std::env::current_exe().context("cannot find the relay binary")?,
            })
            .await?;
            if args.json {
                println!("{}", report.to_json());
            } else {
                print!("{report}");
            }
            Ok(())
        }
        BenchCommand::Replicas(args) => bench_replicas(args).await,
        BenchCommand::Mcp(args) => bench_mcp(args).await,
        BenchCommand::EmptyPolls(args) => {
            let options = EmptyPollOptions {
                polls: args.polls,
                tasks: args.tasks,
                links: args.links,
                concurrency: args.concurrency,
            };
            let report = bench::empty_polls(options)
                .await
                .context("the benchmark failed")?;
            print!("{report}");
            Ok(())
        }
    }
}

/// `relay bench mcp`: the tool call and the static route side by side.
async fn bench_mcp(args: McpArgs) -> Result<()> {
    let options = relay_sim::mcp_bench::McpBenchOptions {
        concurrency: usize::try_from(args.concurrency).unwrap_or(usize::MAX),
        phase: std::time::Duration::from_secs(args.phase_seconds),
        warm_up: std::time::Duration::from_secs(1),
        server: match args.server {
            Some(path) => path,
            None => std::env::current_exe().context("cannot find the relay binary")?,
        },
    };
    let report = relay_sim::mcp_bench::mcp(options).await?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{report}");
    }
    Ok(())
}

/// `relay bench replicas`: PostgreSQL with its replicas, then SQLite with one.
async fn bench_replicas(args: ReplicaArgs) -> Result<()> {
    use relay_sim::replica_bench::{ReplicaOptions, replicas};
    let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    let options = ReplicaOptions {
        replicas: count(args.replicas),
        postgres: Some(args.db.clone()),
        tasks: count(args.tasks),
        claims_per_task: count(args.claims_per_task),
        desktops_per_replica: count(args.desktops_per_replica),
        runs: count(args.runs),
        server: std::env::current_exe().context("cannot find the relay binary")?,
    };
    let mut reports = vec![replicas(options.clone()).await?];
    if !args.skip_sqlite {
        let sqlite = ReplicaOptions {
            replicas: 1,
            postgres: None,
            ..options
        };
        reports.push(replicas(sqlite).await?);
    }
    for report in &reports {
        if args.json {
            println!("{}", report.to_json());
        } else {
            print!("{report}");
        }
    }
    if let [postgres, sqlite] = reports.as_slice()
        && !args.json
    {
        println!(
            "postgres/sqlite: claims/s x{:.2}, pickup p95 x{:.2}",
            postgres.claims_per_second() / sqlite.claims_per_second().max(1e-9),
            postgres.pickup.p95 / sqlite.pickup.p95.max(1e-9)
        );
    }
    let doubles: usize = reports.iter().map(|r| r.double_claims).sum();
    anyhow::ensure!(doubles == 0, "{doubles} tasks were claimed twice");
    Ok(())
}
