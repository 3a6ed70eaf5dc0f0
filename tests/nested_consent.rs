//! Nested graphs under the same consent (issue 32): in a remotely started run, `g.graph(slug)`
//! reaches only the sessions shared with the run's project; an unshared one fails `denied`,
//! naming the slug and how to share it.

use crate::harness;

use std::time::Duration;

use harness::World;
use relay_protocol::clock::Timestamp;
use serde_json::json;

const REPORT: &str = r#"
export const meta = {name: "Weekly report", slug: "weekly-report", version: "1.0.0"};
export default async function (args, g) {
  const inner = await g.graph("fanout", {n: 2});
  return {outer: "report", inner};
}
"#;

const FANOUT: &str = r#"
export const meta = {name: "Fanout", slug: "fanout", version: "1.0.0"};
export default async function (args) { return "fanned " + args.n; }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_graph_cannot_run_an_unshared_one_until_it_is_shared() {
    let world = World::new(json!({"default": {"text": "x"}})).await;
    let report = world.share(REPORT).await;
    // The callee is on the desktop, but not shared with the project.
    let meta = graph_js::describe(FANOUT, &Default::default()).expect("meta");
    let now = Timestamp::from_unix_millis(1);
    let fanout = world
        .state
        .upsert_session(&meta, FANOUT, None, now)
        .expect("added");

    let first = world.queue(&report, "key-nested-1", json!({})).await;
    world.relay().pass(&Default::default()).await;
    let run = world.wait_terminal(&first, Duration::from_secs(30)).await;
    assert_eq!(run["status"], "failed", "{run}");
    let error = run["error"].as_str().unwrap_or_default();
    assert!(error.contains("denied"), "{error}");
    assert!(error.contains("`fanout`"), "{error}");
    assert!(
        error.contains(&format!(
            "relay desktop share --project {} --session {fanout}",
            world.project
        )),
        "{error}"
    );

    world
        .state
        .share(&world.project, &fanout, now)
        .expect("share the callee");
    let second = world.queue(&report, "key-nested-2", json!({})).await;
    world.relay().pass(&Default::default()).await;
    let run = world.wait_terminal(&second, Duration::from_secs(30)).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["result"]["inner"], "fanned 2", "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graph_shared_with_another_project_only_is_denied_too() {
    let world = World::new(json!({"default": {"text": "x"}})).await;
    let report = world.share(REPORT).await;
    let meta = graph_js::describe(FANOUT, &Default::default()).expect("meta");
    let now = Timestamp::from_unix_millis(1);
    let fanout = world
        .state
        .upsert_session(&meta, FANOUT, None, now)
        .expect("added");
    world
        .state
        .share("another-project", &fanout, now)
        .expect("shared elsewhere");
    let command = world.queue(&report, "key-nested-3", json!({})).await;
    world.relay().pass(&Default::default()).await;
    let run = world.wait_terminal(&command, Duration::from_secs(30)).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"]
            .as_str()
            .is_some_and(|e| e.contains("denied") && e.contains("fanout")),
        "{run}"
    );
}
