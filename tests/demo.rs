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
    // The first example graph with a test is the TypeScript one, graphs/agenda.ts: the demo
    // shares it with its types erased and runs it end to end.
    assert!(
        stderr.contains("self-check: agenda with the args of"),
        "{stderr}"
    );
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("MCP URL: http://127.0.0.1:"),
        "{stderr}"
    );
}

/// `relay demo --once --graphs DIR` with an author's folder: `(stdout, stderr, success)`, and
/// it must end within the 60 s `--once` promises.
fn demo_once(dir: &std::path::Path, extra: &[&str]) -> (String, String, bool) {
    let stopwatch = relay_protocol::clock::Stopwatch::start();
    let output = Command::new(relay_binary())
        .args(["demo", "--once", "--engine", "boa", "--graphs"])
        .arg(dir)
        .args(extra)
        .output()
        .expect("relay demo runs");
    let took = stopwatch.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        took < std::time::Duration::from_secs(60),
        "took {took:?}: {stderr}"
    );
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr,
        output.status.success(),
    )
}

const SUM: &str = "export const meta = {name: 'Sum', slug: 'sum', version: '1'};\nexport default async function (args, g) { const r = await g.agent({prompt: 'add', label: 'add'}); return {total: args.a + args.b, said: r.text}; }\n";

/// An author's folder with one graph and its `.test.json` (no `triage.js`, no
/// `replies/demo.json`): the self-check runs that graph with the case's args and replies.
#[test]
fn relay_demo_once_checks_an_authors_graph_with_its_test_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("sum.js"), SUM).expect("graph");
    let case = serde_json::json!({"name": "adds", "args": {"a": 2, "b": 3},
        "replies": {"replies": [{"label": "add", "text": "five"}]},
        "expect": {"status": "completed", "result": {"total": 5, "said": "five"}}});
    std::fs::write(dir.path().join("sum.test.json"), case.to_string()).expect("test");
    let (stdout, stderr, ok) = demo_once(dir.path(), &[]);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("self-check: sum with the args of"),
        "{stderr}"
    );
    assert!(
        stderr.contains(r#"self-check passed: {"total":5,"said":"five"}"#),
        "{stderr}"
    );
    for field in ["MCP URL: ", "Token:   ", "Project: "] {
        assert!(stdout.contains(field), "{field}: {stdout}");
    }
}

/// The self-check compares the result the case expects: a case whose expected result differs
/// from what the graph returns fails the demo, naming both.
#[test]
fn relay_demo_once_fails_when_the_result_differs_from_the_cases() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("sum.js"), SUM).expect("graph");
    let case = serde_json::json!({"name": "adds", "args": {"a": 2, "b": 3},
        "replies": {"replies": [{"label": "add", "text": "five"}]},
        "expect": {"status": "completed", "result": {"total": 6, "said": "five"}}});
    std::fs::write(dir.path().join("sum.test.json"), case.to_string()).expect("test");
    let (_, stderr, ok) = demo_once(dir.path(), &[]);
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains(r#"the run's result differs from what"#)
            && stderr.contains(r#"expected {"total":6,"said":"five"}"#)
            && stderr.contains(r#"got {"total":5,"said":"five"}"#),
        "{stderr}"
    );
    assert!(!stderr.contains("self-check passed"), "{stderr}");
}

/// A folder with no test file: one line says the self-check is skipped, the URL is printed and
/// `--once` exits 0; `--check` naming no shared graph is refused with the slugs there are.
#[test]
fn relay_demo_once_without_a_test_file_skips_the_self_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("sum.js"), SUM).expect("graph");
    let (stdout, stderr, ok) = demo_once(dir.path(), &[]);
    assert!(ok, "{stderr}");
    let skipped: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("has a .test.json, so there is no self-check"))
        .collect();
    assert_eq!(skipped.len(), 1, "{stderr}");
    assert!(!stderr.contains("self-check passed"), "{stderr}");
    assert!(stdout.contains("MCP URL: http://127.0.0.1:"), "{stdout}");
    let (_, stderr, ok) = demo_once(dir.path(), &["--check", "summ"]);
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("--check summ: no shared graph has that slug (they are sum)"),
        "{stderr}"
    );
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
    // The URL is printed at once; the desktop publishes its sessions on its first pass, so a
    // client may list none for a moment.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let listed = crate::common::call(
            &client,
            "list_graph_sessions",
            serde_json::json!({"project_id": project, "limit": 50}),
        )
        .await;
        let listed = crate::common::ok(&listed);
        let sessions = listed["sessions"].as_array().expect("sessions");
        if sessions.iter().any(|s| s["slug"] == "triage") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the demo shares the example graphs: {listed}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
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
