//! A small run of `relay bench replicas`, so it cannot rot: two replicas on a fresh PostgreSQL
//! database and one on SQLite race claims (none double), pick up runs queued through another
//! replica, and hold each desktop's sync. The full-size figures are in the issue notes.

use crate::common;
use crate::postgres_cli::fresh_database;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replica_bench_reports_claims_pickups_and_held_polls_for_both_stores() {
    let Some(url) = common::postgres_url() else {
        return;
    };
    let (db, dropper) = fresh_database(&url).await;
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_relay"))
        .args([
            "bench",
            "replicas",
            "--replicas",
            "2",
            "--db",
            &db,
            "--tasks",
            "20",
            "--claims-per-task",
            "4",
            "--desktops-per-replica",
            "5",
            "--runs",
            "6",
            "--json",
        ])
        .env_remove("RELAY_DATABASE_URL")
        .output()
        .await
        .expect("run relay bench");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let reports: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object a line"))
        .collect();
    assert_eq!(reports.len(), 2, "postgres, then sqlite: {reports:?}");
    for (report, store, replicas) in [(&reports[0], "postgres", 2), (&reports[1], "sqlite", 1)] {
        assert_eq!(report["store"], store, "{report}");
        assert_eq!(report["replicas"], replicas, "{report}");
        assert_eq!(report["claims"], 80, "{report}");
        assert_eq!(report["double_claims"], 0, "{report}");
        assert_eq!(
            report["pickup_ms"]["n"], 6,
            "every run was picked up: {report}"
        );
        let held = report["held"].as_array().expect("per replica");
        assert_eq!(held.len(), replicas);
        for replica in held {
            assert_eq!(replica["held"], 5, "{report}");
            assert!(replica["rss_held_kib"].as_u64() > Some(0), "{report}");
        }
    }
    dropper.drop_database().await;
}
