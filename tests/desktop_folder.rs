//! The fs tools' folder on the desktop: without one, or with one deleted after the owner chose
//! it, a tool call fails saying so and how the owner sets one.

use crate::harness;

use harness::{WRITES, World};
use runner::host::approvals::Policy;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_folder_is_named_as_the_reason_a_tool_fails() {
    let world = World::new(json!({})).await;
    let parent = tempfile::tempdir().expect("tempdir");
    let folder = parent.path().join("notes");
    std::fs::create_dir(&folder).expect("folder");
    world.state.set_folder(&folder).expect("folder");
    std::fs::remove_dir(&folder).expect("deleted");
    let error = failed_write(&world, "key-deleted-folder").await;
    assert!(
        error.contains("notes cannot be used")
            && error.contains("relay desktop folder DIR")
            && !error.contains("no folder is configured"),
        "{error}"
    );
    assert!(!folder.exists(), "nothing was created in its place");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_folder_a_tool_call_says_how_the_owner_sets_one() {
    let world = World::new(json!({})).await;
    assert_eq!(
        failed_write(&world, "key-no-folder").await,
        "invalid: no folder is set for the fs tools on this desktop; its owner sets one with `relay desktop folder DIR`"
    );
}

/// Runs the writing graph once with `fs.write` allowed; it must fail. Returns its error.
async fn failed_write(world: &World, key: &str) -> String {
    world
        .state
        .set_policy("fs.write", Policy::Allow)
        .expect("policy");
    let session = world.share(WRITES).await;
    let command = world.queue(&session, key, json!({"path": "a.md"})).await;
    world.relay().pass(&Default::default()).await;
    let run = world.get(&command).await;
    assert_eq!(run["status"], "failed", "{run}");
    run["error"].as_str().unwrap_or_default().to_owned()
}
