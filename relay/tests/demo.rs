//! `relay demo --once`, the newcomer's first command, passes its self-check.

use std::process::Command;

#[test]
fn relay_demo_once_passes_its_self_check() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace");
    let output = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["demo", "--once"])
        .current_dir(root)
        .output()
        .expect("relay demo runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("self-check passed"), "{stderr}");
    assert!(stderr.contains("get_graph_run → completed"), "{stderr}");
    assert!(stderr.contains("notes/urgent-DEMO-1.md"), "{stderr}");
}

#[test]
fn relay_demo_without_graphs_says_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["demo", "--once"])
        .current_dir(dir.path())
        .output()
        .expect("relay demo runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--graphs DIR"), "{stderr}");
}
