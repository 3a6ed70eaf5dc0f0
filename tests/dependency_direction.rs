//! The dependency rule of ARCHITECTURE.md, checked on the resolved graph: protocol ← service,
//! protocol ← desktop, runner ← desktop; the service never depends on the runner, graph-js, boa
//! or wasmtime (nor on tokio's test-util); the runner never on a relay crate; nothing but the
//! binary on the simulator; graphrelay-net, which every HTTP client goes through, on no crate of
//! ours, and TLS nowhere on aws-lc-rs; graphrelay-text on nothing; and the service-only `relay`
//! binary on no sandbox.

use std::collections::BTreeMap;
use std::process::Command;

/// Each package's normal (not dev, not build) dependencies as `cargo tree` resolves them for
/// that package alone: name → enabled features.
fn normal_dependencies(package: &str) -> BTreeMap<String, String> {
    normal_dependencies_with(package, &[])
}

/// [`normal_dependencies`] of `package` built with the cargo feature flags `features`.
fn normal_dependencies_with(package: &str, features: &[&str]) -> BTreeMap<String, String> {
    let output = Command::new(env!("CARGO"))
        .args(["tree", "--frozen", "-e", "normal", "--prefix", "none"])
        .args(["-f", "{p}|{f}", "-p", package])
        .args(features)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        output.status.success(),
        "cargo tree -p {package} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let (package, features) = line.split_once('|')?;
            let name = package.split_whitespace().next()?;
            Some((name.to_owned(), features.to_owned()))
        })
        .collect()
}

fn assert_lacks(package: &str, deps: &BTreeMap<String, String>, forbidden: &[&str]) {
    for name in forbidden {
        assert!(
            !deps.contains_key(*name),
            "{package} must not depend on {name} (ARCHITECTURE.md, the dependency rule)"
        );
    }
}

fn assert_has(package: &str, deps: &BTreeMap<String, String>, required: &[&str]) {
    for name in required {
        assert!(
            deps.contains_key(*name),
            "{package} should depend on {name}"
        );
    }
}

#[test]
fn the_service_never_reaches_the_runner_the_sandbox_or_test_tools() {
    let deps = normal_dependencies("relay-service");
    assert_has("relay-service", &deps, &["relay-protocol"]);
    assert_lacks(
        "relay-service",
        &deps,
        &[
            "runner",
            "graph-js",
            "boa_engine",
            "wasmtime",
            "relay-desktop",
            "relay-sim",
            "relay-testkit",
            "relay",
        ],
    );
    let tokio = deps.get("tokio").expect("the service runs on tokio");
    assert!(
        !tokio.split(',').any(|f| f == "test-util"),
        "relay-service's tokio has test-util: {tokio}"
    );
}

/// The service-only binary (`relay` without its default features, the container image's)
/// holds no sandbox: the service never runs a graph, so it carries no runner, boa or wasmtime.
#[test]
fn the_service_only_relay_binary_carries_no_sandbox() {
    let service_only = normal_dependencies_with("relay", &["--no-default-features"]);
    assert_has(
        "relay --no-default-features",
        &service_only,
        &["relay-service", "relay-sqlite", "graphrelay-text"],
    );
    assert_lacks(
        "relay --no-default-features",
        &service_only,
        &[
            "runner",
            "graph-js",
            "boa_engine",
            "wasmtime",
            "wasmtime-wasi",
            "cranelift-codegen",
            "relay-desktop",
            "relay-sim",
            "relay-testkit",
        ],
    );
    // Not vacuous: the full binary has them.
    let full = normal_dependencies("relay");
    assert_has(
        "relay",
        &full,
        &["runner", "boa_engine", "wasmtime", "relay-desktop"],
    );
}

#[test]
fn the_desktop_uses_the_protocol_and_the_runner_but_not_the_service() {
    let deps = normal_dependencies("relay-desktop");
    assert_has("relay-desktop", &deps, &["relay-protocol", "runner"]);
    assert_lacks(
        "relay-desktop",
        &deps,
        &["relay-service", "relay-sim", "relay-testkit", "relay"],
    );
}

#[test]
fn the_protocol_does_no_io_and_the_runner_knows_no_relay() {
    let protocol = normal_dependencies("relay-protocol");
    assert_lacks(
        "relay-protocol",
        &protocol,
        &[
            "axum",
            "hyper",
            "reqwest",
            "rusqlite",
            "runner",
            "relay-service",
        ],
    );
    for package in ["runner", "graph-js"] {
        let deps = normal_dependencies(package);
        assert_lacks(
            package,
            &deps,
            &[
                "relay",
                "relay-protocol",
                "relay-service",
                "relay-desktop",
                "relay-sim",
                "relay-sqlite",
            ],
        );
    }
}

#[test]
fn the_net_crate_stands_alone_and_tls_stays_on_ring() {
    let net = normal_dependencies("graphrelay-net");
    assert_has("graphrelay-net", &net, &["reqwest", "rustls"]);
    assert_lacks(
        "graphrelay-net",
        &net,
        &[
            "runner",
            "graph-js",
            "relay-protocol",
            "relay-sqlite",
            "relay-service",
            "relay-desktop",
            "relay-sim",
            "relay-testkit",
            "relay",
        ],
    );
    let runner = normal_dependencies("runner");
    assert_has("runner", &runner, &["graphrelay-net", "graphrelay-text"]);
    let text = normal_dependencies("graphrelay-text");
    assert_eq!(
        text.keys().collect::<Vec<_>>(),
        ["graphrelay-text"],
        "graphrelay-text depends on nothing"
    );
    for package in ["graphrelay-net", "runner", "relay-desktop", "relay"] {
        let deps = normal_dependencies(package);
        assert_lacks(package, &deps, &["aws-lc-rs", "aws-lc-sys"]);
    }
}
