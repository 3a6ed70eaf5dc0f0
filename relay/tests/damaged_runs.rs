//! Damage named as damage (issue 49): a queued run whose stored `arguments` are not a JSON
//! object does not block its project: the desktop's sync hands out the project's other runs and
//! names the damaged one; the agent's tools name it as damaged, not as something to retry; the
//! owner's console names it and cancels it; and `relay admin db check` finds it (its decode pass reads every
//! row), where SQLite's own integrity_check passes.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use common::oauth::{self, Browser};
use common::{Era, TestService, call, err, mcp_client, ok, run_args};
use relay_protocol::clock::ManualClock;
use relay_service::{ServiceConfig, admin};
use serde_json::json;

/// Overwrites the stored arguments of `command` with a JSON array, as a damaged page or a hand
/// edit might leave them.
fn damage_arguments(db: &Path, command: &str) {
    let raw = rusqlite::Connection::open(db).expect("open the database");
    let changed = raw
        .execute(
            "UPDATE commands SET arguments = '[1, 2]' WHERE id = ?1",
            [command],
        )
        .expect("damage the arguments");
    assert_eq!(changed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_run_is_named_everywhere_and_blocks_nothing_else() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("relay.db");
    let service = TestService::start_at(
        &db,
        Arc::new(ManualClock::new(common::START)),
        ServiceConfig::default(),
    )
    .await;
    let project = service.project("p", "ann").await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let client = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&project).await,
        Era::Current,
    )
    .await;
    let mut runs = Vec::new();
    for key in ["damage-1", "damage-2", "damage-3"] {
        let ticket = ok(&call(
            &client,
            "run_graph_session",
            run_args(1, key, json!({"k": key})),
        )
        .await);
        runs.push(ticket["command_id"].as_str().expect("id").to_owned());
    }
    let damaged = runs[1].clone();
    damage_arguments(&db, &damaged);

    sync_skips_it(&desktop, &project, &runs, &damaged).await;
    tools_name_it(&client, &damaged).await;
    console_names_and_cancels_it(&service, &desktop, &project, &damaged, &db).await;
    service.stop().await;
    db_check_finds_it(&db, &damaged);
}

/// The sync hands out the other two and names the damaged one.
async fn sync_skips_it(desktop: &common::Desktop, project: &str, runs: &[String], damaged: &str) {
    let (status, answer) = desktop
        .sync_raw(&json!({"project_id": project, "sessions": [common::session(1)]}))
        .await;
    assert_eq!(status, 200, "{answer}");
    let handed: Vec<&str> = answer["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .filter_map(|c| c["command_id"].as_str())
        .collect();
    assert_eq!(handed, [runs[0].as_str(), runs[2].as_str()], "{answer}");
    assert_eq!(answer["damaged"][0]["command_id"], damaged, "{answer}");
    let said = answer["damaged"][0]["error"].as_str().unwrap_or_default();
    assert!(
        said.contains("damaged")
            && said.contains("arguments")
            && said.contains("retrying does not help"),
        "{said}"
    );
    for other in [&runs[0], &runs[2]] {
        assert_eq!(
            desktop.started(other, &format!("exec-{other}")).await.0,
            200
        );
    }
}

/// The agent's tools: damage, named, and no invitation to retry.
async fn tools_name_it(client: &common::McpClient, damaged: &str) {
    let read = err(&call(client, "get_graph_run", json!({"command_id": damaged})).await);
    let again = err(&call(
        client,
        "run_graph_session",
        run_args(1, "damage-2", json!({"k": "damage-2"})),
    )
    .await);
    for message in [read, again] {
        assert!(
            message.contains("damaged")
                && message.contains(damaged)
                && message.contains("does not help"),
            "{message}"
        );
        assert!(!message.contains("try again"), "{message}");
    }
}

/// The owner's console names it, and the owner cancels it from there: it leaves the queue, and
/// the sync stops naming it.
async fn console_names_and_cancels_it(
    service: &TestService,
    desktop: &common::Desktop,
    project: &str,
    damaged: &str,
    db: &Path,
) {
    admin::set_owner_password(&service.app.admin(), "ann", "console password 1".into())
        .await
        .expect("password");
    let browser = Browser::new();
    let page = browser.get(&format!("{}/console", service.base)).await;
    oauth::sign_in(&browser, &service.base, &page, "ann", "console password 1").await;
    let list = browser
        .get(&format!("{}/console/projects/{project}/runs", service.base))
        .await;
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(
        list.body.contains("Damaged run") && list.body.contains(damaged),
        "{}",
        list.body
    );

    let csrf = list.input("csrf").expect("the page's csrf field");
    let cancelled = browser
        .post_form(
            &format!("{}/console/runs/{damaged}/cancel", service.base),
            &[("csrf", &csrf), ("back", "list"), ("project", project)],
        )
        .await;
    assert_eq!(cancelled.status, 303, "{}", cancelled.body);
    assert_eq!(
        cancelled.location.as_deref(),
        Some(&*format!("/console/projects/{project}/runs"))
    );
    let (status, answer) = desktop
        .sync_raw(&json!({"project_id": project, "sessions": [common::session(1)]}))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer.get("damaged").is_none(),
        "no longer queued: {answer}"
    );
    let raw = rusqlite::Connection::open(db).expect("open");
    let (status, error): (String, String) = raw
        .query_row(
            "SELECT status, error FROM commands WHERE id = ?1",
            [damaged],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("the row");
    assert_eq!(status, "cancelled");
    assert!(error.contains("damaged"), "{error}");
    drop(raw);
}

/// `db check` finds it; SQLite's own check does not.
fn db_check_finds_it(db: &Path, damaged: &str) {
    let conn = rusqlite::Connection::open(db).expect("open");
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .expect("integrity_check");
    assert_eq!(integrity, "ok");
    drop(conn);
    let checked = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["admin", "db", "check"])
        .arg(db)
        .output()
        .expect("relay admin db check");
    let text = String::from_utf8_lossy(&checked.stderr);
    assert_eq!(checked.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "commands row {damaged}: column arguments: not a JSON object"
        )),
        "{text}"
    );
}
