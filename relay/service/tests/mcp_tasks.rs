//! MCP tasks (the `io.modelcontextprotocol/tasks` extension) with a raw JSON-RPC client over
//! Streamable HTTP: `run_graph_session` answers a flat `CreateTaskResult` whose task is the
//! run, `tasks/get` inlines the result once the desktop reported it, `tasks/cancel` is the
//! run's cancel, foreign ids are -32602, tasks outlive a restart, and a client that did not
//! declare the extension gets today's ticket and -32021.

use crate::common;

use std::sync::Arc;

use common::raw::RawClient;
use common::{Desktop, TestService, run_args};
use relay_protocol::clock::ManualClock;
use relay_service::ServiceConfig;
use serde_json::{Value, json};

struct Tasks {
    service: TestService,
    project: String,
    desktop: Desktop,
    token: String,
    client: RawClient,
}

async fn start() -> Tasks {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let token = service.full_agent(&project).await;
    let client = RawClient::new(&service.mcp_url(), &token, true);
    Tasks {
        service,
        project,
        desktop,
        token,
        client,
    }
}

fn call(key: &str, arguments: Value) -> Value {
    json!({"name": "run_graph_session", "arguments": run_args(1, key, arguments)})
}

fn task_id(created: &Value) -> String {
    created["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no taskId in {created}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_a_task_from_queue_to_inlined_result_and_outlives_a_restart() {
    let Tasks {
        service,
        project,
        desktop,
        token,
        client,
    } = start().await;
    let info = client.result("server/discover", json!({})).await;
    assert!(
        info["capabilities"]["extensions"][common::raw::TASKS].is_object(),
        "{info}"
    );
    assert!(info["capabilities"].get("tasks").is_none(), "{info}");

    let created = client
        .result("tools/call", call("task-run-key-1", json!({"topic": "x"})))
        .await;
    assert_eq!(created["resultType"], "task", "{created}");
    assert_eq!(created["status"], "working", "{created}");
    assert!(created.get("task").is_none(), "flat, not nested: {created}");
    assert!(created.get("ttl").is_none() && created.get("pollInterval").is_none());
    assert!(
        created["ttlMs"].as_u64().is_some_and(|ms| ms > 0),
        "{created}"
    );
    assert_eq!(created["pollIntervalMs"], 20_000, "{created}");
    let id = task_id(&created);

    // The task is the run: the desktop sees it under the same id.
    let commands = desktop.sync(&project, &[1]).await;
    assert_eq!(commands.len(), 1);
    assert_eq!(commands[0]["command_id"], json!(id));
    let working = client.result("tasks/get", json!({"taskId": id})).await;
    assert_eq!(working["status"], "working", "{working}");
    assert_eq!(working["resultType"], "complete");
    assert!(working.get("result").is_none(), "{working}");

    assert_eq!(desktop.started(&id, "exec-1").await.0, 200);
    let completion = json!({"execution_id": "exec-1", "status": "completed", "result": {"answer": 42}, "total_tokens": 9, "reported_cost": 0.1});
    assert_eq!(desktop.complete(&id, &completion).await.0, 200);
    let done = client.result("tasks/get", json!({"taskId": id})).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["taskId"], json!(id));
    assert!(done.get("pollIntervalMs").is_none(), "{done}");
    assert_inlined_result(&done);
    // A cancel of a finished task is the same ack and changes nothing.
    let ack = client.result("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(ack, json!({"resultType": "complete"}));

    let other = service.full_agent(&project).await;
    refuses_foreign_and_unknown_ids(
        &client,
        &RawClient::new(&service.mcp_url(), &other, true),
        &id,
    )
    .await;

    let (db, clock) = (service.db.clone(), service.clock.clone());
    let _dir = service.stop().await;
    let restarted = TestService::start_at(
        &db,
        Arc::<ManualClock>::clone(&clock),
        ServiceConfig::default(),
    )
    .await;
    let client = RawClient::new(&restarted.mcp_url(), &token, true);
    let after = client.result("tasks/get", json!({"taskId": id})).await;
    assert_eq!(after, done, "the task reads the same after a restart");
    restarted.stop().await;
}

/// Another agent of the same project gets -32602 for `id`, as `client` does for a made-up or
/// malformed id.
async fn refuses_foreign_and_unknown_ids(client: &RawClient, stranger: &RawClient, id: &str) {
    for method in ["tasks/get", "tasks/cancel"] {
        assert_eq!(
            stranger.error_code(method, json!({"taskId": id})).await,
            -32602
        );
        assert_eq!(
            client
                .error_code(
                    method,
                    json!({"taskId": "00000000-0000-4000-8000-000000000000"})
                )
                .await,
            -32602
        );
        assert_eq!(
            client
                .error_code(method, json!({"taskId": "not-an-id"}))
                .await,
            -32602
        );
    }
}

/// A completed task's inlined `get_graph_run` answer.
fn assert_inlined_result(done: &Value) {
    let result = &done["result"];
    assert_eq!(result["structuredContent"]["result"], json!({"answer": 42}));
    assert_eq!(result["structuredContent"]["status"], "completed");
    assert_ne!(result["isError"], true);
    // The text is the structured content's JSON, so a host that reads only text has the result.
    let text: Value = result["content"][0]["text"]
        .as_str()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_else(|| panic!("the text is JSON: {result}"));
    assert_eq!(text, result["structuredContent"], "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_cancel_ends_the_run_on_the_desktop() {
    let Tasks {
        service,
        project,
        desktop,
        client,
        ..
    } = start().await;
    let id = task_id(
        &client
            .result("tools/call", call("task-cancel-key", json!({})))
            .await,
    );
    desktop.sync(&project, &[1]).await;
    assert_eq!(desktop.started(&id, "exec-1").await.0, 200);
    assert_eq!(
        desktop.control(&id).await.1,
        json!({"cancel_requested": false})
    );

    let ack = client.result("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(ack, json!({"resultType": "complete"}));
    assert_eq!(
        desktop.control(&id).await.1,
        json!({"cancel_requested": true, "cancel_cause": "agent_cancelled"})
    );
    let cancelling = client.result("tasks/get", json!({"taskId": id})).await;
    assert_eq!(cancelling["status"], "working");
    assert!(
        cancelling["statusMessage"]
            .as_str()
            .is_some_and(|m| m.contains("cancel requested")),
        "{cancelling}"
    );
    // The desktop stops the graph and reports; the run, and so the task, is cancelled.
    let stopped =
        json!({"execution_id": "exec-1", "status": "cancelled", "error": "cancelled by the agent"});
    assert_eq!(desktop.complete(&id, &stopped).await.0, 200);
    let cancelled = client.result("tasks/get", json!({"taskId": id})).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert!(cancelled.get("result").is_none());
    assert_eq!(
        client.result("tasks/cancel", json!({"taskId": id})).await,
        json!({"resultType": "complete"})
    );

    // A queued task cancelled before the desktop saw it never reaches the desktop.
    let queued = task_id(
        &client
            .result("tools/call", call("task-cancel-queued", json!({})))
            .await,
    );
    client
        .result("tasks/cancel", json!({"taskId": queued}))
        .await;
    assert_eq!(
        client.result("tasks/get", json!({"taskId": queued})).await["status"],
        "cancelled"
    );
    assert!(desktop.sync(&project, &[1]).await.is_empty());
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_is_a_completed_task_with_is_error_and_bad_calls_queue_nothing() {
    let Tasks {
        service,
        project,
        desktop,
        client,
        ..
    } = start().await;
    let id = task_id(
        &client
            .result("tools/call", call("task-fail-key", json!({})))
            .await,
    );
    desktop.sync(&project, &[1]).await;
    desktop.started(&id, "exec-1").await;
    let failure =
        json!({"execution_id": "exec-1", "status": "failed", "error": "the model refused"});
    assert_eq!(desktop.complete(&id, &failure).await.0, 200);
    let failed = client.result("tasks/get", json!({"taskId": id})).await;
    assert_eq!(failed["status"], "completed", "{failed}");
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    assert_eq!(failed["result"]["structuredContent"]["status"], "failed");
    assert!(failed.get("error").is_none());

    // A call refused before anything is queued is the same tool error as without tasks.
    let unknown = json!({"name": "run_graph_session", "arguments": run_args(9, "task-bad-session", json!({}))});
    let refused = client.result("tools/call", unknown).await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(refused.get("taskId").is_none());
    let stray = json!({"name": "run_graph_session", "arguments": {"graph_session_id": common::gs(1), "idempotency_key": "task-stray-arg", "extra": 1}});
    let refused = client.result("tools/call", stray).await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(
        refused["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("unknown argument `extra`")),
        "{refused}"
    );
    assert!(desktop.sync(&project, &[1]).await.is_empty());
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_extension_a_call_returns_the_ticket_and_tasks_methods_are_32021() {
    let Tasks {
        service,
        token,
        client: with_tasks,
        ..
    } = start().await;
    let client = RawClient::new(&service.mcp_url(), &token, false);
    let answer = client
        .result("tools/call", call("no-tasks-run-key", json!({})))
        .await;
    assert_eq!(answer["resultType"], "complete", "{answer}");
    assert!(answer.get("taskId").is_none(), "{answer}");
    let ticket = &answer["structuredContent"];
    assert_eq!(ticket["status"], "queued", "{answer}");
    assert_eq!(ticket["poll_after_seconds"], 20);
    let id = ticket["command_id"]
        .as_str()
        .expect("command id")
        .to_owned();

    for method in ["tasks/get", "tasks/cancel"] {
        let answer = client.request(method, json!({"taskId": id})).await;
        assert_eq!(answer["error"]["code"], -32021, "{answer}");
        assert!(
            answer["error"]["data"]["requiredCapabilities"]["extensions"][common::raw::TASKS]
                .is_object(),
            "{answer}"
        );
    }
    // The run is a task all the same for a client that declares the extension.
    let read = with_tasks.result("tasks/get", json!({"taskId": id})).await;
    assert_eq!(read["status"], "working");
    service.stop().await;
}

/// `tasks/get` of `id` with `token` as its `_meta.progressToken`: the raw body (JSON, or SSE
/// carrying notifications before the answer).
async fn get_with_progress_token(client: &RawClient, id: &str, token: &str) -> String {
    let mut meta = client.meta();
    meta["progressToken"] = json!(token);
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get",
        "params": {"taskId": id, "_meta": meta}});
    client
        .http
        .post(&client.url)
        .bearer_auth(&client.token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tasks/get")
        .header("mcp-name", id)
        .body(body.to_string())
        .send()
        .await
        .expect("MCP answer")
        .text()
        .await
        .expect("MCP body")
}

/// The `notifications/progress` params in an SSE body.
fn progress_notifications(text: &str) -> Vec<Value> {
    common::raw::sse_messages(text)
        .into_iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_get_with_a_progress_token_tells_a_working_task_s_progress_first() {
    let Tasks {
        service,
        project,
        desktop,
        client,
        ..
    } = start().await;
    let id = task_id(
        &client
            .result("tools/call", call("task-progress-key", json!({})))
            .await,
    );
    desktop.sync(&project, &[1]).await;
    assert_eq!(desktop.started(&id, "exec-1").await.0, 200);

    // Running, nothing reported yet: one notification saying so, then the answer.
    let text = get_with_progress_token(&client, &id, "task-progress-0").await;
    let progress = progress_notifications(&text);
    assert_eq!(progress.len(), 1, "{text}");
    assert_eq!(progress[0]["progressToken"], "task-progress-0");
    assert_eq!(progress[0]["progress"], 0.0);
    assert!(
        progress[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no progress reported yet")),
        "{text}"
    );
    let answer = common::raw::answer_of(&text).expect("answer");
    assert_eq!(answer["result"]["status"], "working", "{text}");

    // The desktop reports: the next `tasks/get` tells the tokens used of the cap, the agents
    // and the last event before answering.
    let report = json!({"execution_id": "exec-1", "progress": {
        "tokens_used": 40, "token_cap": 100, "agents_started": 2,
        "agents_finished": 1, "tools_called": 3, "last_event": "agent-2"}});
    let path = format!("/external-assistants/graph-relays/commands/{id}/report");
    assert_eq!(desktop.post(&path, &report).await.0, 200);
    let text = get_with_progress_token(&client, &id, "task-progress-1").await;
    let progress = progress_notifications(&text);
    assert_eq!(progress.len(), 1, "{text}");
    assert_eq!(progress[0]["progressToken"], "task-progress-1");
    assert_eq!(
        progress[0]["progress"], 46.0,
        "40 tokens + 2 + 1 agents + 3 tools"
    );
    let message = progress[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("40 tokens used of 100")
            && message.contains("2 started, 1 finished")
            && message.contains("3 tool calls")
            && message.contains("last: agent-2"),
        "{message}"
    );
    let sse = common::raw::sse_messages(&text);
    let notified = sse
        .iter()
        .position(|m| m["method"] == "notifications/progress");
    let answered = sse
        .iter()
        .position(|m| m.get("id").is_some() && m.get("method").is_none());
    assert!(notified < answered, "the notification comes first: {text}");

    // A finished task answers at once, with no notification; so does a call without a token.
    let completion =
        json!({"execution_id": "exec-1", "status": "completed", "result": {"answer": 42}});
    assert_eq!(desktop.complete(&id, &completion).await.0, 200);
    let text = get_with_progress_token(&client, &id, "task-progress-2").await;
    assert!(progress_notifications(&text).is_empty(), "{text}");
    assert_eq!(
        common::raw::answer_of(&text).expect("answer")["result"]["status"],
        "completed"
    );
    service.stop().await;
}
