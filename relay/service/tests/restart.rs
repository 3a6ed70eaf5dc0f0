//! Restarting the service loses no queued or finished run: a new process on the same database
//! file serves the same runs to the same tokens.

use crate::common;

use std::sync::Arc;

use common::{Era, TestService, call, mcp_client, ok, run_args};
use relay_protocol::clock::ManualClock;
use relay_service::ServiceConfig;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_and_finished_runs_survive_a_restart() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let token = service.full_agent(&project).await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let client = mcp_client(&service.mcp_url(), &token, Era::Sessions2025).await;
    let finished = ok(&call(
        &client,
        "run_graph_session",
        run_args(1, "finished-before", json!({"n": 1})),
    )
    .await);
    let queued = ok(&call(
        &client,
        "run_graph_session",
        run_args(1, "queued-before", json!({"n": 2})),
    )
    .await);
    let finished_id = finished["command_id"].as_str().unwrap().to_owned();
    let queued_id = queued["command_id"].as_str().unwrap().to_owned();
    desktop.started(&finished_id, "exec-1").await;
    let completion = json!({"execution_id": "exec-1", "status": "completed", "result": {"kept": true}, "total_tokens": 5, "reported_cost": 0.1});
    assert_eq!(desktop.complete(&finished_id, &completion).await.0, 200);
    let before = ok(&call(&client, "get_graph_run", json!({"command_id": finished_id})).await);
    client.cancel().await.expect("close");

    let db = service.db.clone();
    let clock = service.clock.clone();
    let dir = service.stop().await;
    let restarted = TestService::start_at(
        &db,
        Arc::<ManualClock>::clone(&clock),
        ServiceConfig::default(),
    )
    .await;
    let desktop = common::Desktop {
        base: restarted.base.clone(),
        ..desktop
    };

    let client = mcp_client(&restarted.mcp_url(), &token, Era::Current).await;
    let after = ok(&call(&client, "get_graph_run", json!({"command_id": finished_id})).await);
    assert_eq!(
        after, before,
        "a finished run reads the same after a restart"
    );
    let still_queued = ok(&call(&client, "get_graph_run", json!({"command_id": queued_id})).await);
    assert_eq!(still_queued["status"], "queued");
    let commands = desktop.sync(&project, &[1]).await;
    assert_eq!(commands.len(), 1);
    assert_eq!(commands[0]["command_id"], json!(queued_id));
    assert_eq!(commands[0]["arguments"], json!({"n": 2}));
    // Idempotency keys survive too, and completions replay.
    let replay = ok(&call(
        &client,
        "run_graph_session",
        run_args(1, "queued-before", json!({"n": 2})),
    )
    .await);
    assert_eq!(replay["command_id"], json!(queued_id));
    assert_eq!(
        desktop.complete(&finished_id, &completion).await.1["replayed"],
        true
    );
    restarted.stop().await;
    drop(dir);
}

/// Takes the database at `db` back to the schema before connections (issue 42): no
/// `connection_id` on tokens and no long-poll mode on presence (nor the later end causes), as
/// the release before left it.
fn as_before_connections(db: &std::path::Path) {
    as_before_end_causes(db);
    let connection = rusqlite::Connection::open(db).expect("open the database");
    let version: i64 = connection
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .expect("schema version");
    assert_eq!(
        usize::try_from(version).ok(),
        Some(relay_service::store::sqlite::migrations().len() - 2)
    );
    connection
        .execute_batch(&format!(
            "DROP INDEX tokens_by_connection; DROP INDEX grants_by_identity;
             ALTER TABLE tokens DROP COLUMN connection_id;
             ALTER TABLE desktop_presence DROP COLUMN long_polls;
             PRAGMA user_version = {};",
            version - 2
        ))
        .expect("take the schema back");
}

/// Takes the database at `db` back to the schema before end causes (issue 43): no
/// `cancel_cause` and no `end_cause` on commands, as the release before left it.
fn as_before_end_causes(db: &std::path::Path) {
    as_before_resumes(db);
    let connection = rusqlite::Connection::open(db).expect("open the database");
    let version: i64 = connection
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .expect("schema version");
    assert_eq!(
        usize::try_from(version).ok(),
        Some(relay_service::store::sqlite::migrations().len() - 1)
    );
    connection
        .execute_batch(&format!(
            "ALTER TABLE commands DROP COLUMN cancel_cause;
             ALTER TABLE commands DROP COLUMN end_cause;
             PRAGMA user_version = {};",
            version - 1
        ))
        .expect("take the schema back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraded_database_keeps_each_grants_runs_readable_by_its_connection() {
    let (service, project) = crate::oauth_flow::service().await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let app = common::oauth::register(&service.base, "Claude").await;
    let browser = common::oauth::Browser::new();
    let granted =
        common::oauth::connect(&browser, &app, "ann", crate::oauth_flow::PASSWORD, &project).await;
    let client = mcp_client(&service.mcp_url(), &granted.access, Era::Current).await;
    let ticket = ok(&call(
        &client,
        "run_graph_session",
        run_args(1, "before-upgrade", json!({})),
    )
    .await);
    let id = ticket["command_id"]
        .as_str()
        .expect("command id")
        .to_owned();
    client.cancel().await.ok();

    let db = service.db.clone();
    let clock = service.clock.clone();
    let _dir = service.stop().await;
    as_before_connections(&db);
    let upgraded = TestService::start_at(&db, clock, ServiceConfig::default()).await;
    // The grant from before is its own connection: its token reads its run and replays its key,
    // and a new grant of the same client, owner and project joins that connection.
    let client = mcp_client(&upgraded.mcp_url(), &granted.access, Era::Current).await;
    let run = ok(&call(&client, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["status"], "queued", "{run}");
    client.cancel().await.ok();
    let app = common::oauth::App {
        base: upgraded.base.clone(),
        ..app
    };
    let again = common::oauth::connect(
        &common::oauth::Browser::new(),
        &app,
        "ann",
        crate::oauth_flow::PASSWORD,
        &project,
    )
    .await;
    let client = mcp_client(&upgraded.mcp_url(), &again.access, Era::Current).await;
    let replay = ok(&call(
        &client,
        "run_graph_session",
        run_args(1, "before-upgrade", json!({})),
    )
    .await);
    assert_eq!(replay["command_id"], id.as_str(), "{replay}");
    assert_eq!(replay["replayed"], true, "{replay}");
    client.cancel().await.ok();
    upgraded.stop().await;
}

/// Takes the database at `db` back to the schema before resumes (issue 46): no `resumed` and
/// no `resumed_at` on commands.
fn as_before_resumes(db: &std::path::Path) {
    let connection = rusqlite::Connection::open(db).expect("open the database");
    let version: i64 = connection
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .expect("schema version");
    assert_eq!(
        usize::try_from(version).ok(),
        Some(relay_service::store::sqlite::migrations().len())
    );
    connection
        .execute_batch(&format!(
            "ALTER TABLE commands DROP COLUMN resumed;
             ALTER TABLE commands DROP COLUMN resumed_at;
             PRAGMA user_version = {};",
            version - 1
        ))
        .expect("take the schema back");
}
