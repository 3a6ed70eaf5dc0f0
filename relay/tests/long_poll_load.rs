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
