//! The desktop API: syncs are all-or-nothing and bounded, ids are checked before any state is
//! read, `started` and `complete` are idempotent, and a different completion is a conflict.

use crate::common;

use common::{Desktop, Era, Setup, TestService, call, gs, mcp_client, ok, queue, session, setup};
use relay_protocol::{MAX_ERROR_CHARS, MAX_RESULT_CHARS, MAX_SYNC_SESSIONS, json_utf16_len};
use relay_service::http::desktop_api::MAX_DESKTOP_BODY_BYTES;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_accepts_100_sessions_and_rejects_101_or_a_bad_id_whole() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let desktop = service.desktop(&project).await;
    let agent = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&project).await,
        Era::Current,
    )
    .await;

    let at_limit: Vec<Value> = (0..MAX_SYNC_SESSIONS as u32).map(session).collect();
    let (status, body) = desktop
        .sync_raw(&json!({"project_id": project, "sessions": at_limit}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["commands"], json!([]));
    let listed = ok(&call(
        &agent,
        "list_graph_sessions",
        json!({"project_id": project, "limit": 50}),
    )
    .await);
    assert_eq!(session_count(&listed), 50);

    bad_syncs_are_refused_whole(&desktop, &project).await;
    let listed = ok(&call(
        &agent,
        "list_graph_sessions",
        json!({"project_id": project, "limit": 50}),
    )
    .await);
    assert_eq!(
        session_count(&listed),
        50,
        "rejected syncs left the snapshot as it was"
    );

    assert_eq!(desktop.sync(&project, &[]).await.len(), 0);
    let listed = ok(&call(
        &agent,
        "list_graph_sessions",
        json!({"project_id": project}),
    )
    .await);
    assert_eq!(
        session_count(&listed),
        0,
        "an empty sync unshares everything"
    );
    assert_eq!(desktop.sync_raw(&json!({"sessions": []})).await.0, 400);
    assert_eq!(desktop.sync_raw(&json!("not an object")).await.0, 400);
    service.stop().await;
}

/// Past the session limit, with a malformed or repeated id or an overlong name, a sync is
/// refused as a whole (400).
async fn bad_syncs_are_refused_whole(desktop: &Desktop, project: &str) {
    let past_limit: Vec<Value> = (0..=MAX_SYNC_SESSIONS as u32).map(session).collect();
    let (status, body) = desktop
        .sync_raw(&json!({"project_id": project, "sessions": past_limit}))
        .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("at most 100 sessions"),
        "{body}"
    );

    for bad in [
        "gs_0123",
        "gs_0123456789ABCDEF0123456789ABCDEF",
        "session-1",
    ] {
        let mut sessions = vec![session(1), session(2)];
        sessions[1]["graph_session_id"] = json!(bad);
        let (status, body) = desktop
            .sync_raw(&json!({"project_id": project, "sessions": sessions}))
            .await;
        assert_eq!(status, 400, "{bad}");
        assert!(body["error"].as_str().unwrap().contains("gs_"), "{body}");
    }
    let duplicated = json!({"project_id": project, "sessions": [session(1), session(1)]});
    assert_eq!(desktop.sync_raw(&duplicated).await.0, 400);
    let mut long_name = session(1);
    long_name["name"] = json!("n".repeat(201));
    assert_eq!(
        desktop
            .sync_raw(&json!({"project_id": project, "sessions": [long_name]}))
            .await
            .0,
        400
    );
}

/// How many sessions a `list_graph_sessions` answer holds.
fn session_count(listed: &Value) -> usize {
    listed["sessions"].as_array().map(Vec::len).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_uuid_ids_get_400_before_any_state_is_read() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let desktop = service.desktop(&project).await;
    let id = uuid::Uuid::new_v4();
    for bad in [
        "not-a-uuid",
        "123",
        &id.simple().to_string(),
        &format!("{{{id}}}"),
    ] {
        assert_eq!(desktop.started(bad, "e").await.0, 400, "{bad}");
        assert_eq!(desktop.control(bad).await.0, 400, "{bad}");
        let (status, body) = desktop
            .complete(bad, &json!({"execution_id": "e", "status": "failed"}))
            .await;
        assert_eq!(status, 400, "{bad}");
        assert!(body["error"].as_str().unwrap().contains("UUID"));
    }
    // Even without a token, a malformed id is refused before the token is looked up.
    let response = common::http_client()
        .get(format!(
            "{}/external-assistants/graph-relays/commands/nope/control",
            service.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let response = common::http_client()
        .get(format!(
            "{}/external-assistants/graph-relays/commands/{id}/control",
            service.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    // An agent's token is refused on the desktop API, with a message naming both kinds.
    let response = common::http_client()
        .post(format!(
            "{}/external-assistants/graph-relays/sync",
            service.base
        ))
        .bearer_auth(service.full_agent(&project).await)
        .json(&json!({"project_id": project, "sessions": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    let body: Value = response.json().await.expect("json");
    assert_eq!(
        body["error"],
        "wrong kind of token: this endpoint takes desktop tokens, not agent tokens"
    );
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_is_idempotent_and_a_different_one_conflicts() {
    let Setup {
        service,
        project,
        desktop,
        client,
    } = setup(Era::Current).await;
    let id = queue(&client, "completion-key").await;
    let commands = desktop.sync(&project, &[1]).await;
    assert_eq!(commands[0]["graph_session_id"], json!(gs(1)));
    assert_eq!(commands[0]["created_at"], "2026-11-08T09:30:00.000Z");

    let (status, body) = desktop.started(&id, "exec-1").await;
    assert_eq!(
        (status, body),
        (
            200,
            json!({"ok": true, "replayed": false, "cancel_requested": false})
        )
    );
    let (status, body) = desktop.started(&id, "exec-1").await;
    assert_eq!(
        (status, body),
        (
            200,
            json!({"ok": true, "replayed": true, "cancel_requested": false})
        )
    );
    assert_eq!(desktop.started(&id, "exec-2").await.0, 409);
    assert!(
        desktop.sync(&project, &[1]).await.is_empty(),
        "a started command is no longer queued"
    );

    let completion = json!({"execution_id": "exec-1", "status": "completed", "result": {"summary": "ok"}, "total_tokens": 120, "reported_cost": 0.03});
    let (status, body) = desktop.complete(&id, &completion).await;
    assert_eq!(
        (status, body),
        (200, json!({"ok": true, "replayed": false}))
    );
    // The response was lost; the outbox posts it again.
    let (status, body) = desktop.complete(&id, &completion).await;
    assert_eq!((status, body), (200, json!({"ok": true, "replayed": true})));
    let mut different = completion.clone();
    different["result"] = json!({"summary": "changed"});
    let (status, body) = desktop.complete(&id, &different).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["status"], "completed");
    let failed = json!({"execution_id": "exec-1", "status": "failed", "error": "boom"});
    assert_eq!(desktop.complete(&id, &failed).await.0, 409);
    assert_eq!(
        desktop.started(&id, "exec-1").await.0,
        409,
        "a finished command cannot start"
    );

    let (_, control) = desktop.control(&id).await;
    assert_eq!(control, json!({"cancel_requested": false}));
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_limits_are_enforced_at_the_edge() {
    let Setup {
        service,
        project,
        desktop,
        client: agent,
    } = setup(Era::Current).await;
    let mut ids = Vec::new();
    for key in ["limit-key-1", "limit-key-2", "limit-key-3"] {
        let id = queue(&agent, key).await;
        assert_eq!(desktop.started(&id, "e").await.0, 200);
        ids.push(id);
    }

    // A completion whose JSON is exactly 100,000 UTF-16 units fits; one unit more does not.
    let shape = |text: String| json!({"execution_id": "e", "status": "completed", "result": text, "total_tokens": 1, "reported_cost": 0.0});
    let overhead = json_utf16_len(&shape(String::new()));
    let fits = shape("日".repeat(MAX_RESULT_CHARS - overhead));
    assert_eq!(json_utf16_len(&fits), MAX_RESULT_CHARS);
    let too_big = shape("日".repeat(MAX_RESULT_CHARS - overhead + 1));
    let (status, body) = desktop.complete(&ids[0], &too_big).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("result_truncated"));
    assert_eq!(desktop.complete(&ids[0], &fits).await.0, 200);
    let run = ok(&call(&agent, "get_graph_run", json!({"command_id": ids[0]})).await);
    assert_eq!(
        run["result"].as_str().unwrap().chars().count(),
        MAX_RESULT_CHARS - overhead
    );

    let truncated = json!({"execution_id": "e", "status": "completed", "result_truncated": true, "total_tokens": 9});
    assert_eq!(desktop.complete(&ids[1], &truncated).await.0, 200);
    let run = ok(&call(&agent, "get_graph_run", json!({"command_id": ids[1]})).await);
    assert_eq!(run["result_truncated"], true);
    assert_eq!(run["result"], Value::Null);

    let error = |n: usize| json!({"execution_id": "e", "status": "failed", "error": "é".repeat(n)});
    assert_eq!(
        desktop
            .complete(&ids[2], &error(MAX_ERROR_CHARS + 1))
            .await
            .0,
        400
    );
    let both =
        json!({"execution_id": "e", "status": "completed", "result": 1, "result_truncated": true});
    assert_eq!(desktop.complete(&ids[2], &both).await.0, 400);
    assert_eq!(
        desktop
            .complete(&ids[2], &json!({"execution_id": "", "status": "failed"}))
            .await
            .0,
        400
    );
    assert_eq!(
        desktop
            .complete(&ids[2], &json!({"execution_id": "e", "status": "exploded"}))
            .await
            .0,
        400
    );
    assert_eq!(
        desktop.complete(&ids[2], &error(MAX_ERROR_CHARS)).await.0,
        200
    );

    // Bodies past the limit are refused before they are parsed.
    let huge = json!({"project_id": project, "sessions": [], "padding": "x".repeat(MAX_DESKTOP_BODY_BYTES)});
    let (status, answer) = desktop.sync_raw(&huge).await;
    assert_eq!(status, 413);
    assert!(
        answer["error"].as_str().unwrap_or("").contains("too large"),
        "the desktop API's JSON error object: {answer}"
    );
    service.stop().await;
}

/// Every refusal of the desktop API names its cause in the body (429 and 503, which also say
/// when to come back in `Retry-After`: the next test and `relay/tests/postgres_outage.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_names_its_cause_and_when_to_come_back() {
    use relay_protocol::cause;
    let Setup {
        service,
        project,
        desktop,
        client,
    } = setup(Era::Current).await;
    let id = queue(&client, "cause-key").await;
    desktop.sync(&project, &[1]).await;
    assert_eq!(desktop.started(&id, "exec-1").await.0, 200);
    let other = service.project("q", "bob").await;
    let stranger = Desktop {
        token: "grd_not-a-token".into(),
        ..service.desktop(&project).await
    };
    let unknown = uuid::Uuid::new_v4().to_string();
    let huge = json!({"execution_id": "x".repeat(MAX_DESKTOP_BODY_BYTES)});
    let answers = [
        (
            400,
            cause::BAD_REQUEST,
            desktop.started("not-a-uuid", "e").await,
        ),
        (401, cause::UNAUTHORIZED, stranger.started(&id, "e").await),
        (
            403,
            cause::FORBIDDEN,
            desktop
                .sync_raw(&json!({"project_id": other, "sessions": []}))
                .await,
        ),
        (404, cause::NOT_FOUND, desktop.started(&unknown, "e").await),
        (409, cause::CONFLICT, desktop.started(&id, "exec-2").await),
        (413, cause::TOO_LARGE, desktop.complete(&id, &huge).await),
    ];
    for (status, expected, (got, body)) in answers {
        assert_eq!(
            (got, body["cause"].as_str()),
            (status, Some(expected)),
            "{body}"
        );
    }
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desktop_past_its_rate_is_told_when_to_come_back() {
    let config = relay_service::ServiceConfig {
        rate_limit: Some(relay_service::http::rate::RateLimit {
            per_second: 1,
            burst: 1,
        }),
        ..relay_service::ServiceConfig::default()
    };
    let service = TestService::start_with_config(config).await;
    let project = service.project("p", "alice").await;
    let desktop = service.desktop(&project).await;
    let sync = || {
        common::http_client()
            .post(format!(
                "{}{}/sync",
                service.base,
                relay_protocol::DESKTOP_API_PREFIX
            ))
            .bearer_auth(&desktop.token)
            .json(&json!({"project_id": project, "sessions": []}))
            .send()
    };
    assert_eq!(sync().await.expect("answered").status(), 200);
    // The bucket refills one request a second; of a few requests sent back to back, one is
    // refused however slow the machine.
    let mut limited = None;
    for _ in 0..20 {
        let answer = sync().await.expect("answered");
        if answer.status() != 200 {
            limited = Some(answer);
            break;
        }
    }
    let limited = limited.expect("a request past the rate is refused");
    assert_eq!(limited.status(), 429);
    let wait = limited.headers()["retry-after"].to_str().expect("seconds");
    assert!(wait.parse::<u64>().is_ok_and(|s| s >= 1), "{wait}");
    let body: Value = limited.json().await.expect("json");
    assert_eq!(body["cause"], relay_protocol::cause::RATE_LIMITED, "{body}");
    service.stop().await;
}
