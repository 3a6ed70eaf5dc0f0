//! The service learns that a run resumed (issue 46, docs/journal.md), with real `relay desktop`
//! processes SIGKILLed and started again: the resumed run stays one run, and the agent's
//! `get_graph_run` (through the MCP endpoint) and the owner API say how often it was resumed and
//! when. Resuming is the owner's per session: a session with resume off has its interrupted run
//! reported failed while another session's run is resumed.
//!
//! `kill` and the journal lookup are copied from `run_journal.rs` (two small functions).

use crate::common;
use crate::harness;

use std::time::Duration;

use common::chat::ChatService;
use harness::{RelayProcess, World, wait_until};
use serde_json::{Value, json};

/// Four agents in turn, each taking a moment, so a kill finds one in flight.
const FOUR_AGENTS: &str = r#"
export const meta = {name: "Four agents", slug: "resumed-four", version: "1.0.0"};
export default async function (args, g) {
  const texts = [];
  for (let i = 1; i <= 4; i++) {
    texts.push((await g.agent({label: "a" + i, prompt: "p" + i})).text);
  }
  return texts;
}
"#;

/// Two agents, the second one slow: the kill comes while it is asked.
fn two_agents(slug: &str) -> String {
    format!(
        r#"
export const meta = {{name: "Two agents {slug}", slug: "{slug}", version: "1.0.0"}};
export default async function (args, g) {{
  const first = await g.agent({{label: "a1", prompt: "hi"}});
  const second = await g.agent({{label: "a2", prompt: "again"}});
  return [first.text, second.text];
}}
"#
    )
}

fn replies() -> Value {
    let replies: Vec<Value> = (1..=4)
        .map(|i| json!({"label": format!("a{i}"), "text": format!("t{i}"), "tokens": i * 10, "latency_ms": 400}))
        .collect();
    json!({"replies": replies})
}

fn kill(relay: &mut RelayProcess) {
    let pid = i32::try_from(relay.child.id()).expect("pid");
    // SAFETY: sends a signal to our own child process, whose pid we hold.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "signal sent");
    relay.child.wait().expect("wait");
}

/// Waits until the journal of `command`'s execution holds the start of agent `label`.
async fn wait_for_agent(world: &World, command: &str, label: &str) {
    let started = format!(r#""what":"{label}""#);
    wait_until("the agent's start is journaled", || {
        world
            .state
            .history()
            .expect("history")
            .iter()
            .filter(|row| row.command_id == command)
            .filter_map(|row| world.state.journal_text(&row.execution_id).ok().flatten())
            .any(|text| text.contains(&started))
    })
    .await;
}

/// `get_graph_run` through the MCP endpoint: its structured result and its text.
async fn get_graph_run(world: &World, command: &str) -> (Value, String) {
    let result = common::call(
        &world.client,
        "get_graph_run",
        json!({"command_id": command}),
    )
    .await;
    (common::ok(&result), common::text(&result))
}

/// The run as the owner API shows it.
async fn owner_run(world: &World, command: &str) -> Value {
    let token = world.service.mint_owner_token(&world.project).await;
    let url = format!("{}/owner/v1/runs/{command}", world.service.base);
    let request = common::http_client().get(url).bearer_auth(token);
    let (status, body) = common::decode(request.send().await.expect("answered")).await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_graph_run_and_the_owner_api_show_each_resume_of_one_run() {
    let world = World::new(replies()).await;
    let session = world.share(FOUR_AGENTS).await;
    let command = world.queue(&session, "key-resumed-twice", json!({})).await;
    let mut relay = world.spawn_relay("resumed-0", &replies(), &[]);
    for (k, name) in [("a2", "resumed-1"), ("a4", "resumed-2")] {
        wait_for_agent(&world, &command, k).await;
        kill(&mut relay);
        relay = world.spawn_relay(name, &replies(), &[]);
        if k == "a2" {
            // Resumed once and still running: the agent sees it now.
            wait_until("the service knows of the first resume", || {
                world.state.history().expect("history")[0].resumed == 1
            })
            .await;
            let (run, said) = get_graph_run(&world, &command).await;
            let at = format!("{run}: {}", relay.log());
            assert_eq!(run["status"], "running", "{at}");
            assert_eq!(run["resumed"]["count"], 1, "{at}");
            assert!(run["resumed"]["last_at"].is_string(), "{at}");
            assert!(
                said.contains(
                    "The desktop restarted during this run and resumed it from its journal (1x"
                ),
                "{said}"
            );
        }
    }
    let run = world.wait_terminal(&command, Duration::from_secs(30)).await;
    let at = format!("{run}: {}", relay.log());
    assert_eq!(run["status"], "completed", "{at}");
    assert_eq!(run["result"], json!(["t1", "t2", "t3", "t4"]), "{at}");
    assert_eq!(run["resumed"]["count"], 2, "{at}");
    let last_at = run["resumed"]["last_at"].as_str().expect("a time");
    let started_at = run["started_at"].as_str().expect("started");
    assert!(last_at >= started_at, "{at}");
    let (_, said) = get_graph_run(&world, &command).await;
    assert!(said.contains("resumed it from its journal (2x"), "{said}");

    let viewed = owner_run(&world, &command).await;
    assert_eq!(viewed["resumed"], run["resumed"], "{viewed}");
    assert_eq!(viewed["status"], "completed", "{viewed}");
    let history = world.state.history().expect("history");
    assert_eq!(history.len(), 1, "one run, never two: {history:?}");
    assert_eq!(history[0].resumed, 2, "{history:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_with_resume_off_is_not_resumed_while_another_sessions_run_is() {
    let world = World::new(replies()).await;
    let off = world.share(&two_agents("resume-off")).await;
    let on = world.share(&two_agents("resume-on")).await;
    let set = harness::desktop_cli(
        &world.state_path(),
        &["session", "set-resume", off.as_str(), "off"],
    );
    assert!(set.status.success(), "{set:?}");
    let listed = harness::desktop_cli(&world.state_path(), &["session", "list"]);
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let line = |id: &str| {
        listed
            .lines()
            .find(|line| line.starts_with(id))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(line(off.as_str()).contains("no resume"), "{listed}");
    assert!(!line(on.as_str()).contains("no resume"), "{listed}");

    // The run of the session with resume off is interrupted first.
    let stopped = world.queue(&off, "key-resume-off", json!({})).await;
    let mut relay = world.spawn_relay("off-0", &replies(), &[]);
    wait_for_agent(&world, &stopped, "a2").await;
    kill(&mut relay);
    let resumed = world.queue(&on, "key-resume-on", json!({})).await;
    // The next start reports it failed, then runs the other session's run, which is killed too.
    let mut relay = world.spawn_relay("off-1", &replies(), &[]);
    wait_for_agent(&world, &resumed, "a2").await;
    kill(&mut relay);
    let relay = world.spawn_relay("off-2", &replies(), &[]);
    let run = world.wait_terminal(&resumed, Duration::from_secs(30)).await;
    let log = relay.log();
    assert_eq!(run["status"], "completed", "{run}: {log}");
    assert_eq!(run["resumed"]["count"], 1, "{run}: {log}");

    let (run, said) = get_graph_run(&world, &stopped).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"]
            .as_str()
            .is_some_and(|e| e.contains("the desktop relay stopped while this graph was running")),
        "{run}"
    );
    assert_eq!(run["resumed"], Value::Null, "{run}");
    assert!(!said.contains("resumed"), "{said}");
    assert_eq!(owner_run(&world, &stopped).await["resumed"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_add_no_resume_stores_the_session_with_resume_off() {
    let world = World::new(replies()).await;
    let file = world.state_dir.path().join("off.js");
    std::fs::write(&file, two_agents("added-off")).expect("graph file");
    let path = file.to_str().expect("a UTF-8 path");
    let added = harness::desktop_cli(
        &world.state_path(),
        &["session", "add", path, "--no-resume"],
    );
    assert!(added.status.success(), "{added:?}");
    let id = String::from_utf8_lossy(&added.stdout).trim().to_owned();
    let listed = harness::desktop_cli(&world.state_path(), &["session", "list", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert_eq!(listed[0]["id"], id.as_str(), "{listed}");
    assert_eq!(listed[0]["resume"], false, "{listed}");
    let on = harness::desktop_cli(&world.state_path(), &["session", "set-resume", &id, "on"]);
    assert!(on.status.success(), "{on:?}");
    let listed = harness::desktop_cli(&world.state_path(), &["session", "list", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert_eq!(listed[0]["resume"], true, "{listed}");
    let wrong = harness::desktop_cli(
        &world.state_path(),
        &["session", "set-resume", &id, "maybe"],
    );
    assert!(!wrong.status.success(), "{wrong:?}");
}
