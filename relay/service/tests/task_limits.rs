//! Every limit on chat tasks holds at its bound and refuses one past it: goal length, the
//! owner's key length, result length, id length, and the owner's list size.

use crate::chat_support;
use crate::common;

use chat_support::{ChatService, chat_setup, claim, claim_id, submit_args};
use common::{call, err, ok};
use relay_service::ServiceConfig;
use relay_service::chat_tasks::owner::{self, Acting, AssignRequest};
use relay_service::chat_tasks::{
    MAX_GOAL_CHARS, MAX_ID_CHARS, MAX_TASK_RESULT_CHARS, OWNER_LIST_LIMIT, TASK_KEY_CHARS,
    TaskError,
};
use serde_json::json;

async fn assign(
    app: &relay_service::AppState,
    link: &str,
    goal: &str,
    key: &str,
) -> Result<String, TaskError> {
    let request = AssignRequest {
        chat_link_id: link,
        goal,
        idempotency_key: key,
    };
    owner::assign_task(&app.tasks, Acting::Operator, request)
        .await
        .map(|assigned| assigned.task.task_id.to_string())
}

fn invalid(outcome: Result<String, TaskError>, what: &str) {
    match outcome {
        Err(TaskError::Invalid(message)) => assert!(message.contains(what), "{message}"),
        other => panic!("expected an invalid-input refusal about {what}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goals_and_keys_are_bounded() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let app = &chat.service.app;
    let link = &chat.link;
    let goal = "ü".repeat(MAX_GOAL_CHARS);
    assign(app, link, &goal, "goal-at-limit")
        .await
        .expect("a goal at the limit");
    invalid(
        assign(app, link, &format!("{goal}ü"), "goal-past-limit").await,
        "goal",
    );
    invalid(assign(app, link, "  \n ", "blank-goal").await, "goal");
    let key = "k".repeat(*TASK_KEY_CHARS.end());
    assign(app, link, "Longest key", &key)
        .await
        .expect("a key at the limit");
    invalid(
        assign(app, link, "Too long a key", &format!("{key}k")).await,
        "idempotency_key",
    );
    invalid(assign(app, link, "No key", "").await, "idempotency_key");
    assign(app, link, "Shortest key", "k")
        .await
        .expect("a one-character key");
    let long_id = "x".repeat(MAX_ID_CHARS + 1);
    invalid(assign(app, &long_id, "x", "k").await, "chat_link_id");
    assert!(matches!(
        assign(app, &"x".repeat(MAX_ID_CHARS), "x", "k").await,
        Err(TaskError::LinkNotFound)
    ));
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_bounded() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let task = chat
        .service
        .assign_goal(&chat.link, "Write a lot", "result-limit")
        .await;
    let claim_id = claim_id(&claim(&chat.client, &chat.link, &task).await);
    let result = "日".repeat(MAX_TASK_RESULT_CHARS);
    let too_long = call(
        &chat.client,
        "submit_linked_chat_result",
        submit_args(
            &chat.link,
            &task,
            &claim_id,
            "completed",
            &format!("{result}日"),
        ),
    )
    .await;
    assert!(err(&too_long).contains("upload_linked_chat_artifact"));
    let at_limit = ok(&call(
        &chat.client,
        "submit_linked_chat_result",
        submit_args(&chat.link, &task, &claim_id, "completed", &result),
    )
    .await);
    assert_eq!(at_limit, json!({"ok": true, "replayed": false}));
    assert_eq!(
        chat.service
            .stored_task(&task)
            .await
            .result
            .map(|r| r.chars().count()),
        Some(MAX_TASK_RESULT_CHARS)
    );
    let long_link = call(
        &chat.client,
        "list_linked_chat_tasks",
        json!({"chat_link_id": "x".repeat(MAX_ID_CHARS + 1)}),
    )
    .await;
    assert!(err(&long_link).contains("chat_link_id"));
    chat.service.stop().await;
}

/// The limit counts UTF-16 units, as the tool's description and a JS client do: an emoji is
/// two, so half as many fit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_bounded_in_utf16_units() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let task = chat
        .service
        .assign_goal(&chat.link, "Write emoji", "emoji-limit")
        .await;
    let claim_id = claim_id(&claim(&chat.client, &chat.link, &task).await);
    let submit = |result: String| {
        call(
            &chat.client,
            "submit_linked_chat_result",
            submit_args(&chat.link, &task, &claim_id, "completed", &result),
        )
    };
    let too_long = submit("😀".repeat(MAX_TASK_RESULT_CHARS)).await;
    assert!(
        err(&too_long).contains(&format!("{} characters", 2 * MAX_TASK_RESULT_CHARS)),
        "{:?}",
        too_long.content
    );
    let fits = ok(&submit("😀".repeat(MAX_TASK_RESULT_CHARS / 2)).await);
    assert_eq!(fits, json!({"ok": true, "replayed": false}));
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owners_list_shows_the_newest_tasks_up_to_its_limit() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let app = &chat.service.app;
    let mut newest = String::new();
    for n in 0..=OWNER_LIST_LIMIT {
        chat.service
            .clock
            .advance(std::time::Duration::from_millis(1));
        newest = assign(app, &chat.link, &format!("Task {n}"), &format!("list-{n}"))
            .await
            .expect("assign");
        if n == OWNER_LIST_LIMIT - 1 {
            let list = owner::list_tasks(&app.tasks, Acting::Operator, &chat.link)
                .await
                .expect("list");
            assert_eq!(
                list.tasks.len(),
                OWNER_LIST_LIMIT,
                "all of them at the limit"
            );
        }
    }
    let list = owner::list_tasks(&app.tasks, Acting::Operator, &chat.link)
        .await
        .expect("list");
    assert_eq!(
        list.tasks.len(),
        OWNER_LIST_LIMIT,
        "no more than the limit past it"
    );
    assert_eq!(list.tasks[0].task_id.to_string(), newest, "newest first");
    assert_eq!(
        list.tasks[OWNER_LIST_LIMIT - 1].goal,
        "Task 1",
        "the oldest drops off"
    );
    chat.service.stop().await;
}
