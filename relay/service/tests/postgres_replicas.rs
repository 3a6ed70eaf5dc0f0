//! Replicas on one PostgreSQL database behave as one service: a desktop long-polling one
//! replica is woken by a run queued through another, and one idempotency key makes one run
//! whichever replicas its retries reach. Needs `GRAPHRELAY_PG_URL` (see store_conformance).

use std::sync::Arc;
use std::time::Duration;

use relay_protocol::clock::{Stopwatch, SystemClock};
use relay_service::admin::{self, TokenSpec};
use relay_service::store::PostgresStore;
use relay_service::store::postgres::notify::PgNotifier;
use relay_service::{AppState, ServiceConfig};
use serde_json::json;

use crate::common::postgres_url;
use crate::common::{self, Desktop, Era, call, ok, try_mcp_client};

/// One replica: a service on its own loopback port over the shared schema.
struct Replica {
    base: String,
    app: Arc<AppState>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn replica(url: &str, schema: &str, channel: &str) -> Replica {
    graphrelay_net::install_crypto_provider();
    let store = PostgresStore::connect_in_schema(url, Some(schema))
        .await
        .expect("connect");
    let notifier = PgNotifier::start(url, channel).await.expect("listen");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    let app = AppState::with_notifier(
        Arc::new(store),
        Arc::new(SystemClock),
        ServiceConfig {
            public_url: Some(base.clone()),
            listen_loopback: true,
            ..ServiceConfig::default()
        },
        notifier,
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(relay_service::serve(listener, app.clone(), async move {
        let _ = stopped.await;
    }));
    Replica {
        base,
        app,
        _stop: stop,
    }
}

async fn drop_schema(url: &str, schema: &str) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .expect("drop schema");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_queued_on_one_replica_wakes_a_desktop_polling_another() {
    let Some(url) = postgres_url() else {
        return;
    };
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let (schema, channel) = (format!("replicas_{tag}"), format!("wake_{tag}"));
    let a = replica(&url, &schema, &channel).await;
    let b = replica(&url, &schema, &channel).await;
    let (project, desktop_token, agent_token) = tokens(&a.app, &b.app).await;
    let desktop = Desktop {
        http: common::http_client(),
        base: b.base.clone(),
        token: desktop_token,
    };
    desktop.sync(&project, &[1]).await;

    let held = {
        let project = project.clone();
        tokio::spawn(async move {
            let watch = Stopwatch::start();
            let (status, body) = desktop
                .sync_raw(&json!({
                    "project_id": project,
                    "sessions": [common::session(1)],
                    "wait_ms": 20_000,
                }))
                .await;
            (status, body, watch.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let agent = try_mcp_client(&format!("{}/mcp", a.base), &agent_token, Era::Current)
        .await
        .expect("MCP on replica A");
    let queued = ok(&call(
        &agent,
        "run_graph_session",
        common::run_args(1, "key-replicas-1", json!({})),
    )
    .await);
    let (status, body, waited) = held.await.expect("held sync");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["commands"][0]["command_id"], queued["command_id"],
        "{body}"
    );
    assert!(
        waited < Duration::from_secs(15),
        "woken by the other replica's NOTIFY, not by the 20 s deadline: {waited:?}"
    );

    let client_b = try_mcp_client(&format!("{}/mcp", b.base), &agent_token, Era::Current)
        .await
        .expect("MCP on replica B");
    one_key_makes_one_run_across_replicas(&agent, &client_b).await;
    agent.cancel().await.ok();
    client_b.cancel().await.ok();
    drop((a, b));
    drop_schema(&url, &schema).await;
}

/// One key, retried on both replicas at once: one run.
async fn one_key_makes_one_run_across_replicas(a: &common::McpClient, b: &common::McpClient) {
    let clients = [a, b];
    let calls = (0..16).map(|n| {
        call(
            clients[n % 2],
            "run_graph_session",
            common::run_args(1, "key-replicas-2", json!({})),
        )
    });
    let ids: std::collections::BTreeSet<String> = futures_util::future::join_all(calls)
        .await
        .iter()
        .map(|result| ok(result)["command_id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
}

/// A project, a desktop token minted on one replica and an agent token minted on the other.
async fn tokens(a: &AppState, b: &AppState) -> (String, String, String) {
    let project = admin::create_project(&a.admin(), "Notes", Some("ann"))
        .await
        .expect("project")
        .project_id;
    let desktop_token = admin::create_token(&a.admin(), &project, TokenSpec::Desktop)
        .await
        .expect("desktop token")
        .token;
    let agent = TokenSpec::Agent {
        name: "claude".into(),
        scopes: vec!["osfoundry:read".into(), "osfoundry:run".into()],
    };
    let agent_token = admin::create_token(&b.admin(), &project, agent)
        .await
        .expect("agent token")
        .token;
    (project, desktop_token, agent_token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_inbox_watched_on_one_replica_hears_a_task_assigned_through_another() {
    use relay_service::chat_tasks::owner::{self, Acting, AssignRequest};
    let Some(url) = postgres_url() else {
        return;
    };
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let (schema, channel) = (format!("replicas_{tag}"), format!("wake_{tag}"));
    let a = replica(&url, &schema, &channel).await;
    let b = replica(&url, &schema, &channel).await;
    let (project, _, agent_token) = tokens(&a.app, &b.app).await;
    let link = owner::create_link(&a.app.tasks, Acting::Operator, &project, "claude", false)
        .await
        .expect("link")
        .chat_link_id;
    let uri = format!("relay://chat-links/{link}/tasks");
    let client = common::raw::RawClient::new(&format!("{}/mcp", a.base), &agent_token, false);
    let mut stream = client.listen(&[&uri]).await;

    let request = AssignRequest {
        chat_link_id: &link,
        goal: "Reply to the landlord",
        idempotency_key: "assign-across-replicas",
    };
    let assigned = Stopwatch::start();
    owner::assign_task(&b.app.tasks, Acting::Operator, request)
        .await
        .expect("assign");
    let update = stream
        .next(Duration::from_secs(1))
        .await
        .expect("an update within 1 s, through PostgreSQL's NOTIFY");
    assert!(assigned.elapsed() < Duration::from_secs(1));
    assert_eq!(
        update["method"], "notifications/resources/updated",
        "{update}"
    );
    assert_eq!(update["params"]["uri"], json!(uri));
    drop(stream);
    drop_schema(&url, &schema).await;
}
