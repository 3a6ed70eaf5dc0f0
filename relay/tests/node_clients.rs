//! The chat hosts' own clients against `relay serve`: the official TypeScript SDK, through its
//! OAuth client, connects, lists the tools (it caches their output schemas and checks every
//! result against them), finds its project's sessions without naming the project, runs a graph
//! on a real `relay desktop run`, waits with `wait_seconds`, reads the result from the text,
//! gets each refusal as an error result with the server's text (never an exception), and
//! cancels a run; the Inspector CLI lists the tools with `--strict` and no warning and shows an
//! error's text.
//!
//! The clients come from `.ci/run`: `GRAPHRELAY_NODE_MCP` names the install of
//! `tests/node/package-lock.json` (`scripts/node-mcp.sh`). Without it these tests say so and
//! pass, unless `GRAPHRELAY_REQUIRE_NODE_MCP=1`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::cli::{plain, relay};
use crate::desktop_providers::{Child, desktop, spawn_desktop_relay};
use crate::oauth_clients::{OWNER, PASSWORD, Serve, client_or_skip, owner_with_project};

/// How long the TypeScript client may take in all.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(180);
/// The refusals the TypeScript client provokes, each a case the tools' descriptions list.
const REFUSALS: [(&str, &str); 8] = [
    ("bad_arguments", "do not fit graph session"),
    ("unknown_argument", "unknown argument `project`"),
    (
        "unknown_session",
        "graph session id `no-such-session` is malformed",
    ),
    ("unknown_run", "Graph run not found or access removed"),
    ("malformed_id", "Graph run not found or access removed"),
    ("wrong_project", "this connection is for project"),
    ("unknown_chat_link", "chat link not found"),
    (
        "cancel_unknown_run",
        "Graph run not found or access removed",
    ),
];

/// A graph whose result is the word it was given; it asks no model.
const ECHO: &str = r#"export const meta = {name: "Echo", slug: "echo", version: "1.0.0", description: "answers its word",
  args: {type: "object", properties: {word: {type: "string"}}, required: ["word"], additionalProperties: false}};
export default async function (args, g) {
  return {echo: args.word};
}"#;

fn node_mcp_or_skip() -> Option<PathBuf> {
    client_or_skip(
        std::env::var_os("GRAPHRELAY_NODE_MCP").map(PathBuf::from),
        "GRAPHRELAY_REQUIRE_NODE_MCP",
        "GRAPHRELAY_NODE_MCP (the pinned TypeScript SDK and Inspector, from scripts/node-mcp.sh)",
    )
}

/// Debian's node (the SDK runs on node 20 and later); the install's node 22 where none is.
fn node(install: &Path) -> PathBuf {
    let found = Command::new("node").arg("--version").output();
    if found.is_ok_and(|output| output.status.success()) {
        PathBuf::from("node")
    } else {
        install.join("node_modules/.bin/node")
    }
}

/// The echo graph added to the desktop state at `dir` and shared with `project`.
fn share_echo(dir: &Path, state: &Path, project: &str) {
    let graph = dir.join("echo.js");
    std::fs::write(&graph, ECHO).expect("graph");
    let session = desktop(state, &["session", "add", graph.to_str().expect("utf-8")]);
    desktop(state, &["project", "enable", project]);
    desktop(
        state,
        &["share", "--project", project, "--session", &session],
    );
}

/// A project with a desktop that long-polls, another owner's project, a chat link on the first,
/// and `relay serve`: (serve, desktop, project, other project, chat link).
async fn served_project(dir: &Path) -> (Serve, Child, [String; 3]) {
    let db = dir.join("relay.db");
    let project = owner_with_project(&db);
    let other = plain(&relay(
        &db,
        &["project", "create", "Other", "--owner", "bob"],
    ));
    let link = plain(&relay(
        &db,
        &[
            "chat-link",
            "create",
            "--project",
            &project,
            "--host",
            "other",
        ],
    ));
    let token = plain(&relay(
        &db,
        &["token", "create", "--desktop", "--project", &project],
    ));
    let state = dir.join("desktop.db");
    share_echo(dir, &state, &project);
    // The graph asks no model; the desktop wants a providers file all the same.
    let providers = dir.join("providers.toml");
    std::fs::write(
        &providers,
        "default = \"local\"\n[providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
    )
    .expect("providers file");
    let serve = Serve::start(&db, &[]).await;
    let desktop = spawn_desktop_relay(
        &state,
        &providers,
        [&serve.base, &token],
        &dir.join("desktop.log"),
        &["--long-poll", "--poll-interval", "1"],
    );
    (serve, desktop, [project, other, link])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_connects_runs_waits_and_reads_every_refusal_as_text() {
    let Some(install) = node_mcp_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let (serve, desktop, [project, other, link]) = served_project(dir.path()).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/node/mcp_ts_client.mjs");
    let mut client = Command::new(node(&install))
        .arg(&script)
        .arg("--sdk")
        .arg(&install)
        .args([
            "--base",
            &serve.base,
            "--owner",
            OWNER,
            "--password",
            PASSWORD,
        ])
        .args(["--project", &project, "--other-project", &other])
        .args(["--chat-link", &link])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the TypeScript client");
    let stdin = client.stdin.take().expect("stdin");
    let stdout = client.stdout.take().expect("stdout");
    // The client asks for the desktop to stop before it queues the run it cancels.
    let lines = tokio::task::spawn_blocking(move || {
        let (mut desktop, mut stdin) = (Some(desktop), stdin);
        let mut last = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("\"stop-desktop\"") {
                drop(desktop.take());
                writeln!(stdin, "stopped").expect("tell the client");
            } else {
                last = line;
            }
        }
        last
    });
    let last = tokio::time::timeout(CLIENT_TIMEOUT, lines)
        .await
        .expect("the TypeScript client finishes within its timeout")
        .expect("read its output");
    let output = client.wait_with_output().expect("the client exits");
    assert!(
        output.status.success(),
        "the TypeScript client failed:\n{}\n--- relay serve's log:\n{}",
        String::from_utf8_lossy(&output.stderr),
        serve.log()
    );
    let report: Value = serde_json::from_str(&last).expect("one JSON line");
    assert_typescript_report(&report, &project);
    drop(serve);
}

/// What the TypeScript host saw, every answer read from its text content.
fn assert_typescript_report(report: &Value, project: &str) {
    assert_eq!(report["authorizations"], 1, "{report}");
    assert_eq!(
        report["granted_scope"], "osfoundry:read osfoundry:run",
        "{report}"
    );
    assert_eq!(report["consent_points_to_console"], true, "{report}");
    let instructions = report["instructions"].as_str().expect("instructions");
    assert!(instructions.contains(project), "{instructions}");
    assert!(instructions.contains("wait_seconds"), "{instructions}");
    // The project has a chat link, so the chat-task tools are listed too.
    assert_eq!(
        report["tools"].as_array().map(Vec::len),
        Some(9),
        "{report}"
    );
    assert_eq!(report["tools_with_output_schema"], 9, "{report}");
    assert_eq!(report["listed"]["project_id"], project, "{report}");
    assert_eq!(report["ticket"]["status"], "queued", "{report}");
    assert_eq!(report["finished"]["status"], "completed", "{report}");
    assert_eq!(report["finished"]["result"], json!({"echo": "hello"}));
    let text: Value = serde_json::from_str(report["finished_text"].as_str().expect("text"))
        .expect("the finished run's text is its JSON");
    assert_eq!(text["result"], json!({"echo": "hello"}), "{report}");
    for (case, message) in REFUSALS {
        let refusal = &report["refusals"][case];
        assert!(refusal.get("exception").is_none(), "{case}: {refusal}");
        assert_eq!(refusal["isError"], true, "{case}: {refusal}");
        assert!(refusal["structured"].is_null(), "{case}: {refusal}");
        let text = refusal["text"].as_str().unwrap_or_default();
        assert!(text.contains(message), "{case}: {text}");
    }
    assert_eq!(report["cancelled"]["status"], "cancelled", "{report}");
    assert_eq!(report["after_cancel"]["status"], "cancelled", "{report}");
    assert_eq!(report["linked_tasks"], json!({"tasks": []}), "{report}");
}

/// The Inspector CLI (node 22, from the install) on `base` with `token`, its catalog under
/// `home`; its exit code, stdout and stderr.
fn inspector(
    [install, home]: [&Path; 2],
    base: &str,
    token: &str,
    args: &[&str],
) -> (i32, String, String) {
    let bin = install.join("node_modules/.bin");
    let output = Command::new(bin.join("node"))
        .arg(bin.join("mcp-inspector"))
        .args(["--cli", &format!("{base}/mcp"), "--transport", "http"])
        .args(["--header", &format!("Authorization: Bearer {token}")])
        .args(args)
        .env("HOME", home)
        .output()
        .expect("run the Inspector CLI");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspector_lists_the_tools_strictly_without_warnings_and_shows_an_error_text() {
    let Some(install) = node_mcp_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let (serve, desktop, [project, _, _]) = served_project(dir.path()).await;
    drop(desktop);
    let token = plain(&relay(
        &dir.path().join("relay.db"),
        &[
            "token",
            "create",
            "--agent",
            "inspector",
            "--project",
            &project,
            "--scope",
            "osfoundry:read",
            "--scope",
            "osfoundry:run",
        ],
    ));
    let (code, out, err) = inspector(
        [&install, dir.path()],
        &serve.base,
        &token,
        &["--method", "tools/list", "--strict"],
    );
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(
        !err.contains("Warning") && !err.contains("warning"),
        "portability warnings: {err}"
    );
    let listed: Value = serde_json::from_str(&out).expect("tools/list as JSON");
    assert_eq!(listed["tools"].as_array().map(Vec::len), Some(9), "{out}");
    let (_, out, err) = inspector(
        [&install, dir.path()],
        &serve.base,
        &token,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "get_graph_run",
            "--tool-arg",
            "command_id=00000000-0000-4000-8000-000000000000",
        ],
    );
    let shown: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}\n{err}"));
    assert_eq!(shown["isError"], true, "{shown}");
    assert_eq!(
        shown["content"][0]["text"], "Graph run not found or access removed",
        "{shown}"
    );
    drop(serve);
}
