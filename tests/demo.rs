//! `relay demo --once`, the newcomer's first command, passes its self-check.

use std::process::Command;

use crate::harness::relay_binary;

#[test]
fn relay_demo_once_passes_its_self_check() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(relay_binary())
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
    let output = Command::new(relay_binary())
        .args(["demo", "--once"])
        .current_dir(dir.path())
        .output()
        .expect("relay demo runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--graphs DIR"), "{stderr}");
}

/// `relay demo` keeps serving after its self-check and prints, on stdout, what an MCP client
/// needs: the URL, the bearer token and the project to list. Ctrl-C stops it cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_demo_serves_any_mcp_client_with_what_it_prints() {
    use std::io::BufRead;
    use std::process::Stdio;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut child = Command::new(relay_binary())
        .arg("demo")
        .current_dir(root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("relay demo starts");
    let stdout = child.stdout.take().expect("stdout");
    let printed = tokio::task::spawn_blocking(move || {
        let mut fields = std::collections::HashMap::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.expect("stdout line");
            if let Some((key, value)) = line.split_once(':') {
                fields.insert(key.trim().to_owned(), value.trim().to_owned());
            }
            if fields.len() == 3 {
                break;
            }
        }
        fields
    })
    .await
    .expect("stdout read");
    let (Some(url), Some(token), Some(project)) = (
        printed.get("MCP URL"),
        printed.get("Token"),
        printed.get("Project"),
    ) else {
        let _ = child.kill();
        panic!("relay demo printed {printed:?}");
    };
    let client = crate::common::mcp_client(url, token, crate::common::Era::Current).await;
    let listed = crate::common::call(
        &client,
        "list_graph_sessions",
        serde_json::json!({"project_id": project, "limit": 50}),
    )
    .await;
    let listed = crate::common::ok(&listed);
    let sessions = listed["sessions"].as_array().expect("sessions");
    assert!(
        sessions.iter().any(|s| s["slug"] == "triage"),
        "the demo shares the example graphs: {listed}"
    );
    drop(client);
    let interrupted = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(interrupted.success());
    let output = child.wait_with_output().expect("relay demo ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("demo: stopping"), "{stderr}");
}
