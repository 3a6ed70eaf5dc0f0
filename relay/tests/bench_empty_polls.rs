//! `relay bench empty-polls` keeps working: the three variants run side by side on tiny
//! numbers, each poll really reads an empty inbox, and the counters show which variant takes
//! the write lock. (The figures themselves come from a release run; see docs/development.md.)

use std::process::Command;

use relay_service::chat_tasks::sweep::SweepMode;
use relay_sim::bench::{EmptyPollOptions, empty_polls};

const TINY: EmptyPollOptions = EmptyPollOptions {
    polls: 20,
    tasks: 200,
    links: 10,
    concurrency: 2,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_runs_three_variants_side_by_side() {
    let report = empty_polls(TINY).await.expect("bench runs");
    let modes: Vec<_> = report.variants.iter().map(|v| v.mode).collect();
    assert_eq!(modes, SweepMode::ALL);
    for variant in &report.variants {
        assert_eq!(variant.http.count, TINY.polls, "{:?}", variant.mode);
        assert_eq!(variant.in_process.count, TINY.polls, "{:?}", variant.mode);
        assert!(variant.http.p50_us > 0.0 && variant.http.p95_us >= variant.http.p50_us);
        assert_eq!(variant.inbox_text_bytes, r#"{"tasks":[]}"#.len());
        let polls = TINY.polls as u64;
        let (checks, writes) = match variant.mode {
            SweepMode::Off => (0, 0),
            SweepMode::Unguarded => (0, polls),
            SweepMode::Guarded => (polls, 0),
        };
        assert_eq!(
            (variant.guard_checks, variant.write_transactions),
            (checks, writes),
            "{:?}",
            variant.mode
        );
    }
    assert!(
        report.noise.median > 0.0,
        "a second no-sweep service measures the noise"
    );
    let text = report.to_string();
    for name in [
        "no sweep",
        "unguarded sweep",
        "guarded sweep",
        "×p50",
        "over HTTP",
        "in-process",
    ] {
        assert!(text.contains(name), "{text}");
    }
}

#[tokio::test]
async fn out_of_range_options_are_refused() {
    for options in [
        EmptyPollOptions { polls: 0, ..TINY },
        EmptyPollOptions { links: 0, ..TINY },
        EmptyPollOptions {
            concurrency: 0,
            ..TINY
        },
        EmptyPollOptions {
            concurrency: relay_sim::bench::MAX_BENCH_CONCURRENCY + 1,
            ..TINY
        },
    ] {
        assert!(empty_polls(options).await.is_err(), "{options:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_most_pollers_at_once_still_run() {
    let options = EmptyPollOptions {
        polls: 4,
        tasks: 10,
        links: 2,
        concurrency: relay_sim::bench::MAX_BENCH_CONCURRENCY,
    };
    let report = empty_polls(options).await.expect("bench runs");
    assert!(report.variants.iter().all(|v| v.http.count == 4));
}

#[test]
fn the_cli_prints_the_report() {
    let output = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args([
            "bench",
            "empty-polls",
            "--polls",
            "5",
            "--tasks",
            "30",
            "--links",
            "3",
        ])
        .output()
        .expect("run relay bench");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.starts_with("empty polls: 5 per variant"), "{stdout}");
    assert!(stdout.contains("guarded sweep"), "{stdout}");
}
