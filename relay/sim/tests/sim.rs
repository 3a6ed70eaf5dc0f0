//! `relay sim` with a small `--runs`: every scenario runs through the real code in both modes
//! and its invariants hold (the full-size figures are quoted in the issue notes).

use std::collections::BTreeMap;

use relay_sim::{SimOptions, run};
use serde_json::Value;

fn simulate(long_poll: bool) -> BTreeMap<String, Value> {
    let mut reports = BTreeMap::new();
    run(
        &SimOptions {
            scenario: "all".into(),
            runs: 40,
            seed: 7,
            long_poll,
        },
        |name, report, _| {
            reports.insert(name.to_owned(), report.json.clone());
        },
    )
    .expect("the simulation runs");
    assert_eq!(reports.len(), relay_sim::SCENARIOS.len());
    reports
}

fn f(value: &Value) -> f64 {
    value.as_f64().expect("a number")
}

#[test]
fn poll_mode_reproduces_the_seed_invariants() {
    let r = simulate(false);

    let pickup = &r["pickup"];
    assert_eq!(pickup["mode"], "poll");
    assert!(f(&pickup["max_s"]) <= 20.0, "{pickup}");
    assert!(
        (5.0..=15.0).contains(&f(&pickup["mean_s"])),
        "about half an interval: {pickup}"
    );

    let serial = &r["serial"];
    assert_eq!(serial["overlapping"], false, "{serial}");
    let finished: Vec<f64> = serial["finished_s"]
        .as_array()
        .expect("list")
        .iter()
        .map(f)
        .collect();
    assert!(finished.windows(2).all(|w| w[0] <= w[1]), "{serial}");

    let cancel = &r["cancel"];
    assert_eq!(f(&cancel["queued"]["max_s"]), 0.0, "{cancel}");
    assert!(
        f(&cancel["running"]["max_s"]) <= 3.5 + 1e-9,
        "one control poll plus the stop: {cancel}"
    );
    assert!(cancel["running"]["n"].as_u64() > Some(0));

    let idem = &r["idempotency"];
    assert!(idem["duplicates_without_key"].as_u64() > Some(0), "{idem}");
    assert_eq!(idem["duplicates_with_key"], 0, "{idem}");

    let offline = &r["offline"];
    assert_eq!(offline["all_queued_while_offline"], true);
    assert_eq!(offline["executed_while_offline"], 0);
    assert_eq!(offline["all_completed"], true);
    assert_eq!(offline["executed"], 5);

    let outbox = &r["outbox"]["variants"];
    assert_eq!(outbox[0]["outbox"], true);
    assert_eq!(outbox[0]["status"], "completed");
    assert!(
        f(&outbox[0]["delivered_after_start_s"]) <= 30.0 + 20.0 + 1.0,
        "one pass later: {outbox}"
    );
    assert_eq!(
        outbox[1]["status"], "running",
        "without the outbox the run is stuck: {outbox}"
    );

    let sizes = r["result-size"]["results"]
        .as_array()
        .expect("list")
        .clone();
    let truncated: Vec<bool> = sizes.iter().map(|s| s["truncated"] == true).collect();
    assert_eq!(truncated, [false, true, false, true]);
    assert_eq!(f(&sizes[2]["utf8_bytes"]), 3.0 * f(&sizes[2]["chars"]));

    assert_eq!(r["access"]["identical"], true);
    assert_eq!(
        r["access"]["another_agent"],
        "Graph run not found or access removed"
    );
}

#[test]
fn long_poll_mode_beats_the_seed() {
    let r = simulate(true);
    let pickup = &r["pickup"];
    assert_eq!(pickup["mode"], "longpoll");
    assert!(
        f(&pickup["p50_s"]) <= 0.05 && f(&pickup["p95_s"]) <= 0.25,
        "{pickup}"
    );
    let cancel = &r["cancel"];
    assert!(f(&cancel["running"]["p95_s"]) <= 0.25, "{cancel}");
    let waiting = r["polling"]["strategies"]
        .as_array()
        .expect("list")
        .iter()
        .find(|s| {
            s["strategy"]
                .as_str()
                .is_some_and(|n| n.contains("waiting"))
        })
        .cloned()
        .expect("the waiting strategy");
    assert!(f(&waiting["calls_p50"]) <= 2.0, "{waiting}");
    assert!(f(&waiting["notice"]["max_s"]) <= 1.0, "{waiting}");
    assert_eq!(r["idempotency"]["duplicates_with_key"], 0);
    assert_eq!(r["offline"]["all_completed"], true);
}

#[test]
fn an_unknown_scenario_is_refused() {
    let refused = run(
        &SimOptions {
            scenario: "nope".into(),
            runs: 1,
            seed: 1,
            long_poll: false,
        },
        |_, _, _| {},
    );
    assert!(refused.is_err());
}

/// `relay sim` at its default size queues 200 runs per variant in the idempotency scenario, with
/// the desktop offline: more than the service lets one agent keep queued (100). The simulator
/// measures duplicates, so the quota must not stop it ("quota reached" ended the whole run).
#[test]
fn the_idempotency_scenario_queues_past_the_services_queue_quota() {
    let mut report = None;
    run(
        &SimOptions {
            scenario: "idempotency".into(),
            runs: 1_010,
            seed: 3,
            long_poll: false,
        },
        |_, r, _| report = Some(r.json.clone()),
    )
    .expect("the idempotency scenario runs past 100 queued runs");
    let idem = report.expect("a report");
    assert_eq!(idem["n"], 101, "{idem}");
    assert_eq!(idem["duplicates_with_key"], 0, "{idem}");
    assert!(idem["duplicates_without_key"].as_u64() > Some(0), "{idem}");
}

/// One seed gives one outcome: three runs of the cancel scenario (where a cancel and a run's own
/// end can land at the same instant) report the same figures, to the millisecond. A random
/// pick between two ready branches in the runner once moved a run's end by the engine's stop.
#[test]
fn the_same_seed_gives_the_same_figures() {
    let cancel = || {
        let mut report = None;
        run(
            &SimOptions {
                scenario: "cancel".into(),
                runs: 300,
                seed: 1,
                long_poll: false,
            },
            |_, r, _| report = Some(r.json.clone()),
        )
        .expect("the simulation runs");
        report.expect("a report")
    };
    let first = cancel();
    for _ in 0..2 {
        assert_eq!(cancel(), first);
    }
}

/// `all` runs the scenarios side by side; each one's figures are those it gives alone.
#[test]
fn all_side_by_side_gives_each_scenarios_figures_alone() {
    let together = simulate(false);
    for name in relay_sim::SCENARIOS {
        let mut alone = None;
        run(
            &SimOptions {
                scenario: name.into(),
                runs: 40,
                seed: 7,
                long_poll: false,
            },
            |_, report, _| alone = Some(report.json.clone()),
        )
        .expect("the simulation runs");
        assert_eq!(alone.as_ref(), together.get(name), "{name}");
    }
}
