//! A small run of the long-poll load test (`relay bench long-polls`), so it cannot rot: many
//! desktops hold a sync open against one `relay serve` process and every queued run reaches its
//! desktop. The 2,000-desktop figures are quoted in the issue notes.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_run_reaches_its_waiting_desktop() {
    let report = relay_sim::loadtest::long_polls(relay_sim::loadtest::LongPollOptions {
        desktops: 30,
        runs: 10,
        server: env!("CARGO_BIN_EXE_relay").into(),
    })
    .await
    .expect("the load test runs");
    assert_eq!(report.desktops, 30);
    assert_eq!(report.held, 30, "every desktop's sync was held");
    assert_eq!(report.pickup.n, 10, "every run reached its desktop");
    assert!(report.rss_held_kib > 0);
}

/// `relay bench long-polls --json` prints one object with the memory per waiting desktop and
/// the pickup latencies, every run picked up.
#[test]
fn the_long_poll_bench_reports_json() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_relay"))
        .args([
            "bench",
            "long-polls",
            "--desktops",
            "20",
            "--runs",
            "5",
            "--json",
        ])
        .output()
        .expect("run relay bench");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("one JSON object on stdout");
    assert_eq!(report["desktops"], 20);
    assert_eq!(
        report["held"], 20,
        "every desktop's sync was held: {report}"
    );
    assert_eq!(
        report["pickup_ms"]["n"], 5,
        "every run was picked up: {report}"
    );
    assert!(
        report["kib_per_waiting_desktop"].as_f64().is_some(),
        "{report}"
    );
    assert!(
        report["pickup_ms"]["p95"]
            .as_f64()
            .is_some_and(|p95| p95 >= 0.0)
    );
    assert!(report["rss_held_kib"].as_u64().is_some_and(|kib| kib > 0));
    // The idle reading follows a warm-up, and the report says so: the memory before it and
    // the figure counted from there are given too.
    assert_eq!(report["warm_up_desktops"], 16, "{report}");
    assert!(
        report["rss_cold_kib"].as_u64().is_some_and(|kib| kib > 0),
        "{report}"
    );
    assert!(
        report["kib_per_waiting_desktop_from_cold"]
            .as_f64()
            .is_some(),
        "{report}"
    );
}

/// A small run of `relay bench sessions`: every `initialize` opens a session, the caps keep 16
/// per token, and the service's memory is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_benchmark_counts_what_the_caps_keep() {
    let report =
        relay_sim::session_bench::sessions(relay_sim::session_bench::SessionBenchOptions {
            tokens: 3,
            per_token: 20,
            server: env!("CARGO_BIN_EXE_relay").into(),
        })
        .await
        .expect("the benchmark runs");
    assert_eq!(report.tokens, 3);
    assert_eq!(report.opened, 60, "every initialize opened a session");
    assert_eq!(report.kept, 48, "16 per token");
    assert!(report.rss_after_kib > 0);
}
