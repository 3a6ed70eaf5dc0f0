//! The owner's chat-task commands of `relay admin`: link, assign, list and cancel.

use std::path::Path;
use std::process::Output;

use crate::cli::{plain, relay};

use relay_service::chat_tasks::NO_EVENT_SUBSCRIPTION_HINT;
use serde_json::{Value, json};

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "relay failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("utf-8")
}

#[test]
fn the_cli_links_assigns_lists_and_cancels() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let project = plain(&relay(&db, &["project", "create", "Demo"]));
    let link = plain(&relay(
        &db,
        &[
            "chat-link",
            "create",
            "--project",
            &project,
            "--host",
            "claude",
        ],
    ));
    assert!(uuid::Uuid::parse_str(&link).is_ok(), "{link}");
    let task = assign(&db, &link, "Summarise the feedback", "key-1");
    assert!(uuid::Uuid::parse_str(&task).is_ok(), "{task}");
    assert_eq!(
        assign(&db, &link, "Summarise the feedback", "key-1"),
        task,
        "one key, one task"
    );
    let second = assign(&db, &link, "Plan the sprint", "key-2");
    assert_ne!(second, task);

    let list = stdout(&relay(&db, &["task", "list", "--link", &link]));
    let lines: Vec<_> = list.lines().collect();
    assert_eq!(lines.len(), 3, "{list}");
    assert!(lines[0].starts_with(&second) && lines[0].contains("Waiting for Claude"));
    assert!(lines[1].starts_with(&task) && lines[1].contains("Summarise the feedback"));
    assert_eq!(lines[2], NO_EVENT_SUBSCRIPTION_HINT);

    assert_eq!(plain(&relay(&db, &["task", "cancel", &task])), task);
    json_list_shows_each_task_with_its_label(&db, &link, &second, &task);
    a_link_with_an_event_subscription_lists_nothing(&db, &project);
    bad_task_commands_fail(&db, &project);
}

/// `relay admin task assign` of `goal` on `link` under `key`: the task's id.
fn assign(db: &Path, link: &str, goal: &str, key: &str) -> String {
    plain(&relay(
        db,
        &[
            "task",
            "assign",
            "--link",
            link,
            "--goal",
            goal,
            "--idempotency-key",
            key,
        ],
    ))
}

/// `task list --json` shows the link, the hint and each task with its status label, newest
/// first: `waiting`, then `cancelled`.
fn json_list_shows_each_task_with_its_label(db: &Path, link: &str, waiting: &str, cancelled: &str) {
    let json: Value = serde_json::from_str(&plain(&relay(
        db,
        &["task", "list", "--link", link, "--json"],
    )))
    .expect("JSON");
    assert_eq!(json["chat_link_id"], link);
    assert_eq!(json["hint"], NO_EVENT_SUBSCRIPTION_HINT);
    let labels: Vec<_> = json["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["task_id"].as_str().unwrap().to_owned(),
                t["status_label"].clone(),
            )
        })
        .collect();
    assert_eq!(
        labels,
        [
            (waiting.to_owned(), json!("Waiting for Claude")),
            (cancelled.to_owned(), json!("Cancelled"))
        ]
    );
}

/// A link created with `--event-subscription` says so, and with no tasks its list prints
/// nothing, not even the hint.
fn a_link_with_an_event_subscription_lists_nothing(db: &Path, project: &str) {
    let detail: Value = serde_json::from_str(&plain(&relay(
        db,
        &[
            "--json",
            "chat-link",
            "create",
            "--project",
            project,
            "--host",
            "chatgpt",
            "--event-subscription",
        ],
    )))
    .expect("JSON");
    assert_eq!(detail["event_subscription"], true);
    let quiet = stdout(&relay(
        db,
        &[
            "task",
            "list",
            "--link",
            detail["chat_link_id"].as_str().unwrap(),
        ],
    ));
    assert_eq!(
        quiet, "",
        "no tasks and an event subscription: nothing to show"
    );
}

/// An unknown link, an unknown host and a malformed task id fail, with nothing on stdout.
fn bad_task_commands_fail(db: &Path, project: &str) {
    let failure = relay(
        db,
        &[
            "task",
            "assign",
            "--link",
            "nope",
            "--goal",
            "x",
            "--idempotency-key",
            "k",
        ],
    );
    assert!(!failure.status.success() && failure.stdout.is_empty());
    assert!(String::from_utf8_lossy(&failure.stderr).contains("chat link not found"));
    let failure = relay(
        db,
        &[
            "chat-link",
            "create",
            "--project",
            project,
            "--host",
            "gemini",
        ],
    );
    assert!(!failure.status.success());
    let failure = relay(db, &["task", "cancel", "not-a-uuid"]);
    assert!(!failure.status.success() && failure.stdout.is_empty());
}
