//! Exact identity (issue 32): a session is one graph file. Adding another file whose slug is
//! taken is refused, naming both files; with `--replace` the code moves into the session, the
//! owner is told which projects it stays shared with, and the agent sees the new version after
//! the next sync.

use crate::common;
use crate::harness;

use std::path::Path;
use std::process::{Command, Output};

use harness::World;
use serde_json::json;

const TRIAGE: &str = r#"
export const meta = {name: "Triage", slug: "triage", version: "1.0.0"};
export default async function () { return "triaged"; }
"#;

const SCRATCH: &str = r#"
export const meta = {name: "My private scratch", slug: "triage", version: "9.9.9"};
export default async function () { return "scratch"; }
"#;

fn desktop(state: &Path, args: &[&str]) -> Output {
    Command::new(harness::relay_binary())
        .args(["desktop", "--state"])
        .arg(state)
        .args(args)
        .output()
        .expect("relay desktop runs")
}

async fn listed_versions(world: &World) -> Vec<String> {
    let list = common::ok(
        &common::call(
            &world.client,
            "list_graph_sessions",
            json!({"project_id": world.project}),
        )
        .await,
    );
    list["sessions"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter_map(|s| s["version"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_file_with_a_taken_slug_is_refused_unless_replace() {
    let world = World::new(json!({})).await;
    let dir = world.state_dir.path();
    let state = dir.join("desktop.db");
    std::fs::create_dir_all(dir.join("graphs")).expect("dir");
    std::fs::create_dir_all(dir.join("other")).expect("dir");
    let triage = dir.join("graphs/triage.js");
    let mine = dir.join("other/mine.js");
    std::fs::write(&triage, TRIAGE).expect("file");
    std::fs::write(&mine, SCRATCH).expect("file");

    let added = desktop(&state, &["session", "add", triage.to_str().expect("path")]);
    assert!(added.status.success(), "{added:?}");
    let id = String::from_utf8_lossy(&added.stdout).trim().to_owned();
    world
        .state
        .set_project_enabled(
            &world.project,
            true,
            relay_protocol::clock::Timestamp::EPOCH,
        )
        .expect("enable");
    let shared = desktop(
        &state,
        &["share", "--project", &world.project, "--session", &id],
    );
    assert!(shared.status.success(), "{shared:?}");
    world.relay().pass(&Default::default()).await;
    assert_eq!(listed_versions(&world).await, vec!["1.0.0".to_owned()]);

    let refused = desktop(&state, &["session", "add", mine.to_str().expect("path")]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        message.contains("graphs/triage.js")
            && message.contains("other/mine.js")
            && message.contains("--replace"),
        "{message}"
    );
    // Unchanged: the shared session still runs the first file's code.
    let sessions = world.state.sessions().expect("sessions");
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].version, "1.0.0");

    // Adding the same file again is no conflict.
    let again = desktop(&state, &["session", "add", triage.to_str().expect("path")]);
    assert!(again.status.success(), "{again:?}");

    let replaced = desktop(
        &state,
        &["session", "add", mine.to_str().expect("path"), "--replace"],
    );
    assert!(replaced.status.success(), "{replaced:?}");
    assert_eq!(
        String::from_utf8_lossy(&replaced.stdout).trim(),
        id,
        "same session"
    );
    let told = String::from_utf8_lossy(&replaced.stderr);
    assert!(
        told.contains(&format!("stays shared with {}", world.project)) && told.contains("9.9.9"),
        "{told}"
    );
    world.relay().pass(&Default::default()).await;
    assert_eq!(listed_versions(&world).await, vec!["9.9.9".to_owned()]);
}
