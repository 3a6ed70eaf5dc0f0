//! A short run of `relay bench mcp`, so it cannot rot: every phase gets answers and none of them
//! is an error (a refused or failing tool call would make the ratio meaningless), and the report
//! ends with the ratio line. The figures themselves are quoted in the issue notes, measured on a
//! release build.

/// `relay bench mcp --json`: six phases, each with calls and no errors, and a ratio.
#[test]
fn the_mcp_bench_measures_every_phase_without_errors() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_relay"))
        .args([
            "bench",
            "mcp",
            "--concurrency",
            "4",
            "--phase-seconds",
            "1",
            "--json",
        ])
        .output()
        .expect("run relay bench mcp");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("one JSON object on stdout");
    assert_eq!(report["concurrency"], 4, "{report}");
    let phases = report["phases"].as_array().expect("phases");
    let names: Vec<&str> = phases.iter().filter_map(|p| p["name"].as_str()).collect();
    for wanted in [
        "static route",
        "stateless 2026-07-28",
        "2025-era session",
        "(get_graph_run",
        "static route, rate limiter on",
        "stateless, rate limiter on",
    ] {
        assert!(
            names.iter().any(|name| name.contains(wanted)),
            "no phase {wanted}: {report}"
        );
    }
    for phase in phases {
        assert!(phase["calls"].as_u64().is_some_and(|c| c > 0), "{phase}");
        assert_eq!(phase["errors"], 0, "{phase}");
        assert!(
            phase["p99_ms"].as_f64() >= phase["p50_ms"].as_f64(),
            "{phase}"
        );
    }
    assert!(
        report["ratio_to_static"].as_f64().is_some_and(|r| r > 0.0),
        "{report}"
    );
}

/// The text report's last line is the ratio, and its help says how to profile.
#[test]
fn the_mcp_bench_ends_with_the_ratio_and_its_help_names_a_profiler() {
    let relay = env!("CARGO_BIN_EXE_relay");
    let output = std::process::Command::new(relay)
        .args(["bench", "mcp", "--concurrency", "2", "--phase-seconds", "1"])
        .output()
        .expect("run relay bench mcp");
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("tool call: ") && last.ends_with("× the static route"),
        "{text}"
    );
    let help = std::process::Command::new(relay)
        .args(["bench", "mcp", "--help"])
        .output()
        .expect("relay bench mcp --help");
    assert!(String::from_utf8_lossy(&help.stdout).contains("perf record"));
}
