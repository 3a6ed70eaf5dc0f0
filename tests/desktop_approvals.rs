//! Approvals apply to remote runs: an `ask` tool creates a pending approval the owner answers;
//! no answer within the timeout is a denial.

use crate::harness;

use std::time::Duration;

use harness::{WRITES, World};
use relay_desktop::state::ApprovalStatus;
use relay_protocol::clock::Timestamp;
use runner::host::approvals::Policy;
use serde_json::json;

async fn wait_pending(world: &World) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(pending) = world.state.approvals(false).expect("approvals").first() {
            return pending.id.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no approval was requested"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn run_with_answer(
    answer: Option<ApprovalStatus>,
) -> (World, serde_json::Value, tempfile::TempDir) {
    let world = World::new(json!({})).await;
    let folder = tempfile::tempdir().expect("folder");
    world.state.set_folder(folder.path()).expect("folder");
    world
        .state
        .set_policy("fs.write", Policy::Ask)
        .expect("policy");
    let session = world.share(WRITES).await;
    let command = world
        .queue(&session, "key-approve", json!({"path": "out/note.md"}))
        .await;
    let mut config = harness::fast_config();
    config.approval_timeout = Duration::from_millis(if answer.is_some() { 10_000 } else { 300 });
    let relay = world.relay_with(
        runner::engine::EngineKind::Boa.build().expect("boa"),
        config,
    );
    let pass = tokio::spawn(async move { relay.pass(&Default::default()).await });
    let id = wait_pending(&world).await;
    let pending = world.state.approvals(false).expect("approvals");
    assert_eq!(pending[0].tool, "fs.write");
    assert!(pending[0].args.contains("out/note.md"));
    if let Some(answer) = answer {
        assert!(
            world
                .state
                .decide(&id, answer, Timestamp::from_unix_millis(3))
                .expect("decide")
        );
    }
    pass.await.expect("pass");
    let run = world.get(&command).await;
    (world, run, folder)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_ask_runs_the_tool() {
    let (_world, run, folder) = run_with_answer(Some(ApprovalStatus::Approved)).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        std::fs::read_to_string(folder.path().join("out/note.md")).expect("file"),
        "written remotely"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_ask_fails_the_call_and_writes_nothing() {
    let (world, run, folder) = run_with_answer(Some(ApprovalStatus::Denied)).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"].as_str().unwrap_or("").contains("denied"),
        "{run}"
    );
    assert!(!folder.path().join("out").exists());
    assert_eq!(
        world.state.history().expect("history")[0].end_cause,
        Some(relay_protocol::EndCause::ApprovalDenied),
        "the cause the completion carried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_answer_within_the_timeout_is_a_denial() {
    let (world, run, folder) = run_with_answer(None).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"]
            .as_str()
            .unwrap_or("")
            .contains("timeout counts as a denial"),
        "{run}"
    );
    assert!(!folder.path().join("out").exists());
    let all = world.state.approvals(true).expect("approvals");
    assert_eq!(all[0].status, ApprovalStatus::Expired);
    assert_eq!(
        world.state.history().expect("history")[0].end_cause,
        Some(relay_protocol::EndCause::ApprovalTimedOut),
        "the cause the completion carried"
    );
}
