//! The owner's consent can be seen from the desktop (issue 32): `project enable` checks the id
//! against the service's projects for the desktop token (offline: against the list fetched
//! last), `shares` names each project as the service knows it (offline too), `history` says
//! when, with what and for which agent each run ran, `approvals list` the graph, project, agent
//! and time left, and `queue` the runs waiting on the service.

use crate::harness;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use harness::{ECHO, World};
use runner::host::approvals::Policy;
use serde_json::{Value, json};

/// Asks one agent, then writes a file through an `ask` tool.
const AGENT_THEN_WRITE: &str = r#"
export const meta = {name: "Agent then write", slug: "agent-write", version: "1.0.0"};
export default async function (args, g) {
  const r = await g.agent({label: "first", prompt: "hi"});
  return g.tool("fs.write", {path: "out.txt", text: r.text});
}
"#;

/// `relay desktop --state STATE ARGS`, with no service or token from the environment.
fn desktop(state: &Path, args: &[&str]) -> Output {
    Command::new(harness::relay_binary())
        .args(["desktop", "--state"])
        .arg(state)
        .args(args)
        .env_remove("RELAY_SERVICE_URL")
        .env_remove("RELAY_DESKTOP_TOKEN")
        .output()
        .expect("relay desktop runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json_of(output: &Output) -> Value {
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).expect("JSON on stdout")
}

/// A service address nothing listens on (connections are refused at once).
const NOBODY: &str = "http://127.0.0.1:1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn project_enable_checks_the_id_with_the_service_and_offline_with_the_list_fetched_last() {
    let world = World::new(json!({})).await;
    let state = world.state_dir.path().join("desktop.db");
    let base = world.service.base.clone();
    let token = world.desktop_token.clone();
    let project = world.project.clone();

    unknown_ids_and_forged_tokens_are_refused(&state, &base, &token, &project);
    assert!(
        world.state.projects().expect("projects").is_empty(),
        "nothing was enabled by the refusals"
    );

    let known = desktop(
        &state,
        &[
            "project",
            "enable",
            &project,
            "--service",
            &base,
            "--token",
            &token,
        ],
    );
    assert!(known.status.success(), "{known:?}");
    assert_eq!(stdout(&known), format!("{project}\n"));
    assert!(
        stderr(&known).contains(&format!("project {project} (p) is served")),
        "{known:?}"
    );
    assert_eq!(
        stdout(&desktop(&state, &["project", "list"])),
        format!("{project}  enabled  p\n")
    );

    // Shares name the project as the service knows it, and keep doing so with it gone.
    let session = world
        .state
        .upsert_session(
            &graph_js::describe(ECHO, &Default::default()).expect("meta"),
            ECHO,
            None,
            relay_protocol::clock::Timestamp::from_unix_millis(1),
        )
        .expect("session");
    let shared = desktop(
        &state,
        &[
            "share",
            "--project",
            &project,
            "--session",
            session.as_str(),
        ],
    );
    assert!(shared.status.success(), "{shared:?}");
    world.service.stop().await;
    let listed = stdout(&desktop(&state, &["shares"]));
    assert!(
        listed.starts_with(&format!("{project} (p)  {session}  echo  1.0.0  since ")),
        "{listed}"
    );
    let listed = json_of(&desktop(&state, &["shares", "--json"]));
    assert_eq!(listed[0]["project_name"], "p", "{listed}");

    offline_the_list_fetched_last_decides(&state, &token, &project);
    unchecked_without_a_list(world.state_dir.path());
}

/// The service's answer decides: an id it does not know, or a token it refuses, is refused.
fn unknown_ids_and_forged_tokens_are_refused(state: &Path, base: &str, token: &str, project: &str) {
    let unknown = desktop(
        state,
        &[
            "project",
            "enable",
            "bogus",
            "--service",
            base,
            "--token",
            token,
        ],
    );
    assert_eq!(unknown.status.code(), Some(1), "{unknown:?}");
    let message = stderr(&unknown);
    assert!(
        message.contains("knows no project bogus for this desktop token")
            && message.contains(&format!("the token serves {project} (p)")),
        "{message}"
    );
    let forged = desktop(
        state,
        &[
            "project",
            "enable",
            project,
            "--service",
            base,
            "--token",
            "grd_forged",
        ],
    );
    assert_eq!(forged.status.code(), Some(1), "{forged:?}");
    assert!(
        stderr(&forged).contains("refused this desktop token"),
        "{forged:?}"
    );
}

/// Offline, the list fetched last decides, and says so.
fn offline_the_list_fetched_last_decides(state: &Path, token: &str, project: &str) {
    let offline_unknown = desktop(
        state,
        &[
            "project",
            "enable",
            "bogus",
            "--service",
            NOBODY,
            "--token",
            token,
        ],
    );
    assert_eq!(
        offline_unknown.status.code(),
        Some(1),
        "{offline_unknown:?}"
    );
    let message = stderr(&offline_unknown);
    assert!(
        message.contains("cannot be reached") && message.contains("has no project bogus"),
        "{message}"
    );
    let offline_known = desktop(state, &["project", "enable", project]);
    assert!(offline_known.status.success(), "{offline_known:?}");
    assert!(
        stderr(&offline_known).contains("checked against the service's project list of"),
        "{offline_known:?}"
    );
}

/// A desktop that never reached the service enables with a warning that it did not check.
fn unchecked_without_a_list(dir: &Path) {
    let fresh = dir.join("fresh.db");
    let unchecked = desktop(&fresh, &["project", "enable", "anything"]);
    assert!(unchecked.status.success(), "{unchecked:?}");
    assert!(
        stderr(&unchecked).contains("warning: project anything is enabled unchecked"),
        "{unchecked:?}"
    );
    let half = desktop(&fresh, &["project", "enable", "x", "--service", NOBODY]);
    assert_eq!(half.status.code(), Some(1), "{half:?}");
    assert!(stderr(&half).contains("both are needed"), "{half:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_says_when_with_what_and_for_which_agent_each_run_ran() {
    let world = World::new(json!({"replies": [
        {"label": "echo", "text": "hello", "tokens": 42, "cost": 0.25}
    ]}))
    .await;
    let session = world.share(ECHO).await;
    let command = world
        .queue(&session, "key-history", json!({"text": "hi there"}))
        .await;
    world.relay().pass(&Default::default()).await;
    let run = world.wait_terminal(&command, Duration::from_secs(30)).await;
    assert_eq!(run["status"], "completed", "{run}");

    let state = world.state_dir.path().join("desktop.db");
    let history = json_of(&desktop(&state, &["history", "--json"]));
    let row = &history[0];
    assert_eq!(row["command_id"], command.as_str(), "{history}");
    // Queued by the service's clock (the test service's is fixed), run by the desktop's.
    let queued_at = run["created_at"]
        .as_str()
        .and_then(relay_protocol::clock::Timestamp::parse_rfc3339)
        .expect("created_at");
    // Times are RFC 3339, as the text prints them.
    let time = |key: &str| {
        row[key]
            .as_str()
            .and_then(relay_protocol::clock::Timestamp::parse_rfc3339)
            .unwrap_or_else(|| panic!("{key} is RFC 3339: {row}"))
    };
    assert_eq!(time("queued_at"), queued_at, "{row}");
    assert!(time("started_at") <= time("finished_at"), "{row}");
    assert_eq!(row["project_name"], "p", "the project is named: {row}");
    assert_eq!(row["arguments"], json!({"text": "hi there"}));
    assert_eq!(row["agent_name"], "claude");
    assert!(
        row["agent_id"].as_str().is_some_and(|id| !id.is_empty()),
        "{row}"
    );
    assert_eq!(row["total_tokens"], 42);
    assert_eq!(row["reported_cost"], 0.25);

    let text = stdout(&desktop(&state, &["history"]));
    let line = text.lines().next().expect("a line");
    for part in [
        "queued 20",
        "started 20",
        "finished 20",
        "42 tokens",
        "cost $0.25",
        &format!("project p ({})", world.project),
        "agent claude (",
        r#"args {"text":"hi there"}"#,
        "echo  completed",
    ] {
        assert!(line.contains(part), "{part}: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_list_names_the_graph_project_agent_and_time_left() {
    let world =
        World::new(json!({"replies": [{"label": "first", "text": "x", "tokens": 1}]})).await;
    world.shared_folder(Policy::Ask);
    let session = world.share(AGENT_THEN_WRITE).await;
    let command = world.queue(&session, "key-approval", json!({})).await;
    let config = relay_desktop::DesktopConfig {
        approval_timeout: Duration::from_secs(600),
        ..harness::fast_config()
    };
    let relay = world.relay_with(
        runner::engine::EngineKind::Boa.build().expect("boa"),
        config,
    );
    let (shutdown, task) = harness::start(&relay);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while world.state.approvals(false).expect("approvals").is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "never asked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let state = world.state_dir.path().join("desktop.db");
    let listed = json_of(&desktop(&state, &["approvals", "list", "--json"]));
    let approval = &listed[0];
    assert_eq!(approval["slug"], "agent-write", "{listed}");
    assert_eq!(approval["project_id"], world.project.as_str());
    assert_eq!(approval["agent_name"], "claude");
    let at = |key: &str| {
        approval[key]
            .as_str()
            .and_then(relay_protocol::clock::Timestamp::parse_rfc3339)
            .unwrap_or_else(|| panic!("{key} is RFC 3339: {approval}"))
            .unix_millis()
    };
    assert_eq!(at("expires_at"), at("created_at") + 600_000);
    assert_eq!(approval["project_name"], "p", "{approval}");
    let text = stdout(&desktop(&state, &["approvals", "list"]));
    let line = text.lines().next().expect("a line");
    for part in [
        "pending  fs.write  graph agent-write",
        &format!("project p ({})", world.project),
        "agent claude (",
    ] {
        assert!(line.contains(part), "{part}: {line}");
    }
    assert!(
        line.contains("  9m ") || line.contains("  10m 00s left"),
        "about ten minutes left: {line}"
    );

    let id = approval["id"].as_str().expect("id");
    world
        .state
        .decide(
            id,
            relay_desktop::state::ApprovalStatus::Denied,
            relay_protocol::clock::Timestamp::from_unix_millis(1),
        )
        .expect("denied");
    world.wait_terminal(&command, Duration::from_secs(30)).await;
    shutdown.cancel();
    task.await.expect("relay stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_queued_for_the_desktop_are_seen_with_agent_and_arguments() {
    // Every agent call waits ten minutes: the first run holds the relay, the others wait.
    let world = World::new(json!({"replies": [
        {"label": "echo", "text": "slow", "latency_ms": 600000}
    ]}))
    .await;
    let session = world.share(ECHO).await;
    let mut commands = Vec::new();
    for n in 1..=3 {
        commands.push(
            world
                .queue(&session, &format!("key-queue-{n}"), json!({"n": n}))
                .await,
        );
    }
    let relay = world.relay();
    let (shutdown, task) = harness::start(&relay);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while world.get(&commands[0]).await["status"] != "running" {
        assert!(tokio::time::Instant::now() < deadline, "never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let state = world.state_dir.path().join("desktop.db");
    let queued = json_of(&desktop(&state, &["queue", "--json"]));
    // The test service's clock stands still, so the three were queued at the same instant:
    // the listing's order among them is not what this test checks.
    let mut ids: Vec<&str> = queued
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|q| q["command_id"].as_str())
        .collect();
    ids.sort_unstable();
    let mut waiting = vec![commands[1].as_str(), commands[2].as_str()];
    waiting.sort_unstable();
    assert_eq!(ids, waiting, "the running one left the queue: {queued}");
    let second = queued
        .as_array()
        .and_then(|q| q.iter().find(|q| q["command_id"] == commands[1].as_str()))
        .expect("the second run is listed");
    assert_eq!(second["arguments"], json!({"n": 2}));
    assert_eq!(second["agent_name"], "claude");
    assert_eq!(second["project_id"], world.project.as_str());
    assert_eq!(second["slug"], "echo");
    let text = stdout(&desktop(&state, &["queue"]));
    let line = text
        .lines()
        .find(|l| l.starts_with(&commands[1]))
        .expect("a line for the second run");
    assert!(
        line.starts_with(&format!(
            "{}  p ({})  echo  agent claude (",
            commands[1], world.project
        )) && line.contains(r#"args {"n":2}"#)
            && line.contains("(as of the sync at 20"),
        "{line}"
    );

    shutdown.cancel();
    task.await.expect("relay stopped");
}
