//! Quotas: one agent may keep at most 100 runs waiting in the queue (the 101st is refused with
//! a tool error naming the limit, while other agents still queue), and a token past its request
//! rate is told when to retry: in-band on a tool call, 429 with `Retry-After` elsewhere.

use crate::common;

use common::{Era, Setup, call, err, mcp_client, ok, run_args, setup, setup_with};
use relay_protocol::DESKTOP_API_PREFIX;
use relay_service::ServiceConfig;
use relay_service::http::rate::RateLimit;
use relay_service::runs::DEFAULT_QUEUED_PER_AGENT;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_101st_queued_run_of_one_agent_is_refused_and_others_still_queue() {
    let Setup {
        service,
        project,
        client: agent,
        ..
    } = setup(Era::Current).await;
    for n in 0..DEFAULT_QUEUED_PER_AGENT {
        ok(&call(
            &agent,
            "run_graph_session",
            run_args(1, &format!("quota-key-{n:04}"), json!({})),
        )
        .await);
    }
    let refused = err(&call(
        &agent,
        "run_graph_session",
        run_args(1, "quota-key-over", json!({})),
    )
    .await);
    assert!(refused.contains("quota reached"), "{refused}");
    assert!(
        refused.contains(&format!("{DEFAULT_QUEUED_PER_AGENT} runs queued")),
        "{refused}"
    );
    // A retry of a run already queued is still answered.
    let replay = ok(&call(
        &agent,
        "run_graph_session",
        run_args(1, "quota-key-0000", json!({})),
    )
    .await);
    assert_eq!(replay["replayed"], true);
    let other = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&project).await,
        Era::Current,
    )
    .await;
    let queued = ok(&call(
        &other,
        "run_graph_session",
        run_args(1, "other-agent-key", json!({})),
    )
    .await);
    assert_eq!(queued["status"], "queued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_past_its_rate_is_told_when_to_retry() {
    let config = ServiceConfig {
        rate_limit: Some(RateLimit {
            per_second: 1,
            burst: 3,
        }),
        ..ServiceConfig::default()
    };
    let Setup {
        service,
        project,
        desktop,
        ..
    } = setup_with(Era::Current, config).await;
    let (token, _) = service.agent(&project, &["osfoundry:read"]).await;
    let agent = mcp_client(&service.mcp_url(), &token, Era::Current).await;
    let list = || {
        call(
            &agent,
            "list_graph_sessions",
            json!({"project_id": project}),
        )
    };
    let mut refused = None;
    for _ in 0..5 {
        let answer = list().await;
        if answer.is_error == Some(true) {
            refused = Some(common::text(&answer));
            break;
        }
    }
    let refused = refused.expect("the burst of 3 runs out within 5 calls");
    assert!(refused.contains("rate limit reached"), "{refused}");
    assert!(refused.contains("retry in"), "{refused}");

    // The desktop API answers 429 with Retry-After for a token past its rate.
    let mut limited = None;
    for _ in 0..5 {
        let response = desktop
            .http
            .post(format!("{}{DESKTOP_API_PREFIX}/sync", service.base))
            .bearer_auth(&desktop.token)
            .json(&json!({"project_id": project, "sessions": []}))
            .send()
            .await
            .expect("sync");
        if response.status() == 429 {
            limited = Some(response);
            break;
        }
    }
    let limited = limited.expect("the desktop's burst runs out too");
    let retry_after: u64 = limited
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in seconds");
    assert!((1..=2).contains(&retry_after), "{retry_after}");
    let body: serde_json::Value = limited.json().await.expect("a JSON error");
    assert!(
        body["error"].as_str().unwrap_or("").contains("rate limit"),
        "{body}"
    );
}
