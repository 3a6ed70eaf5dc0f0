//! A run its desktop resumed from its journal after a restart (issue 46): the desktop says so
//! with `started` again under the run's execution id, and the run stays one run whose views
//! (`get_graph_run`, the owner API, the console) show how often and when. Only the execution the
//! run is running under may resume it: a forged execution id, another desktop, a queued run and
//! an ended run are refused and change nothing.

use crate::chat_support::ChatService;
use crate::common;

use std::time::Duration;

use common::{Era, Setup, call, ok, queue, setup, text};
use relay_protocol::clock::Clock;
use serde_json::{Value, json};

const PREFIX: &str = "/external-assistants/graph-relays";

async fn get(client: &common::McpClient, id: &str) -> (Value, String) {
    let result = call(client, "get_graph_run", json!({"command_id": id})).await;
    (ok(&result), text(&result))
}

async fn owner_run(service: &common::TestService, token: &str, id: &str) -> Value {
    let url = format!("{}/owner/v1/runs/{id}", service.base);
    let request = common::http_client().get(url).bearer_auth(token);
    let (status, body) = common::decode(request.send().await.expect("answered")).await;
    assert_eq!(status, 200, "{body}");
    body
}

fn resumed(execution_id: &str, count: u32, at: &Value) -> Value {
    json!({"execution_id": execution_id, "resumed": {"count": count, "at": at}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_is_one_run_whose_views_say_how_often_and_when() {
    let Setup {
        service,
        project,
        desktop,
        client,
    } = setup(Era::Current).await;
    let id = queue(&client, "resumed-run-key").await;
    desktop.sync(&project, &[1]).await;
    assert_eq!(desktop.started(&id, "exec-1").await.0, 200);
    let (run, said) = get(&client, &id).await;
    assert_eq!(run["resumed"], Value::Null, "{run}");
    assert!(!said.contains("resumed"), "{said}");

    service.clock.advance(Duration::from_secs(30));
    let first = json!(service.clock.now());
    let path = format!("{PREFIX}/commands/{id}/started");
    let (status, body) = desktop.post(&path, &resumed("exec-1", 1, &first)).await;
    assert_eq!((status, &body["replayed"]), (200, &json!(false)), "{body}");
    let (run, said) = get(&client, &id).await;
    assert_eq!(run["status"], "running", "{run}");
    assert_eq!(
        run["resumed"],
        json!({"count": 1, "last_at": first}),
        "{run}"
    );
    assert!(
        said.contains(
            "The desktop restarted during this run and resumed it from its journal (1x, last at"
        ),
        "{said}"
    );
    // Its answer lost, the same resume asked again: nothing changes.
    let (status, body) = desktop.post(&path, &resumed("exec-1", 1, &first)).await;
    assert_eq!((status, &body["replayed"]), (200, &json!(true)), "{body}");

    service.clock.advance(Duration::from_secs(30));
    let second = json!(service.clock.now());
    assert_eq!(
        desktop.post(&path, &resumed("exec-1", 2, &second)).await.0,
        200
    );
    let completion = json!({"execution_id": "exec-1", "status": "completed", "result": {"ok": 1}, "total_tokens": 7});
    assert_eq!(desktop.complete(&id, &completion).await.0, 200);
    let (run, said) = get(&client, &id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        run["resumed"],
        json!({"count": 2, "last_at": second}),
        "{run}"
    );
    assert!(said.contains("(2x, last at"), "{said}");

    the_owner_sees_it_resumed_twice(&service, &project, &id, &second).await;
}

/// The owner API (the run and its project's list: one run) and the console (the list's status
/// note, the run's page) show run `id` resumed twice, last at `last_at`.
async fn the_owner_sees_it_resumed_twice(
    service: &common::TestService,
    project: &str,
    id: &str,
    last_at: &Value,
) {
    let owner = service.mint_owner_token(project).await;
    let viewed = owner_run(service, &owner, id).await;
    assert_eq!(
        viewed["resumed"],
        json!({"count": 2, "last_at": last_at}),
        "{viewed}"
    );
    let (status, listed) = {
        let url = format!("{}/owner/v1/projects/{project}/runs", service.base);
        let request = common::http_client().get(url).bearer_auth(&owner);
        common::decode(request.send().await.expect("answered")).await
    };
    assert_eq!(status, 200, "{listed}");
    let runs = listed["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "one run, never two: {listed}");
    assert_eq!(runs[0]["resumed"]["count"], 2, "{listed}");

    // The owner's console: the list's status note and the run's page.
    let alice = crate::console::Owner::sign_in(service, "alice").await;
    let list = alice
        .get(service, &format!("/console/projects/{project}/runs"))
        .await;
    assert!(
        list.body.contains("resumed 2x after a desktop restart"),
        "{}",
        list.body
    );
    let detail = alice.get(service, &format!("/console/runs/{id}")).await;
    assert!(
        detail.body.contains(
            "the desktop restarted during this run and resumed it from its journal (2x, last"
        ),
        "{}",
        detail.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_execution_a_run_is_running_under_resumes_it() {
    let Setup {
        service,
        project,
        desktop,
        client,
    } = setup(Era::Current).await;
    let now = json!(service.clock.now());
    let queued = queue(&client, "resume-queued-key").await;
    let running = queue(&client, "resume-running-key").await;
    let ended = queue(&client, "resume-ended-key").await;
    desktop.sync(&project, &[1]).await;
    let path = |id: &str| format!("{PREFIX}/commands/{id}/started");

    // A run not started (queued) cannot be resumed, and stays queued.
    let (status, body) = desktop
        .post(&path(&queued), &resumed("exec-q", 1, &now))
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(get(&client, &queued).await.0["status"], "queued");

    assert_eq!(desktop.started(&running, "exec-r").await.0, 200);
    // A forged execution id.
    let (status, body) = desktop
        .post(&path(&running), &resumed("exec-forged", 1, &now))
        .await;
    assert_eq!(status, 409, "{body}");
    // Another owner's desktop does not even see the run.
    let other_project = service.project("q", "bob").await;
    let stranger = service.desktop(&other_project).await;
    let (status, body) = stranger
        .post(&path(&running), &resumed("exec-r", 1, &now))
        .await;
    assert_eq!(status, 404, "{body}");
    // Nor does the desktop of another project of the same owner.
    let sibling_project = service.project("p2", "alice").await;
    let sibling = service.desktop(&sibling_project).await;
    let (status, body) = sibling
        .post(&path(&running), &resumed("exec-r", 1, &now))
        .await;
    assert_eq!(status, 404, "{body}");
    // A resume count of 0 is no resume.
    let (status, body) = desktop
        .post(&path(&running), &resumed("exec-r", 0, &now))
        .await;
    assert_eq!(status, 400, "{body}");
    let (run, _) = get(&client, &running).await;
    assert_eq!(run["resumed"], Value::Null, "{run}");
    assert_eq!(run["status"], "running", "{run}");

    // An ended run is not resumed, not even by its own execution.
    assert_eq!(desktop.started(&ended, "exec-e").await.0, 200);
    let failed = json!({"execution_id": "exec-e", "status": "failed", "error": "boom"});
    assert_eq!(desktop.complete(&ended, &failed).await.0, 200);
    let (status, body) = desktop
        .post(&path(&ended), &resumed("exec-e", 1, &now))
        .await;
    assert_eq!(status, 409, "{body}");
    let (run, _) = get(&client, &ended).await;
    assert_eq!(
        (&run["status"], &run["resumed"]),
        (&json!("failed"), &Value::Null),
        "{run}"
    );
}
