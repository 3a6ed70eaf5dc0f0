//! Reads cost context, not milliseconds: every inbox read lands in the conversation. An empty
//! inbox is at most 87 bytes of tool-result text and each waiting task adds at most 210 (the
//! seed's figures), whatever the goal's length, script or punctuation.

use crate::chat_support;
use crate::common;

use std::time::Duration;

use chat_support::{ChatService, chat_setup, claim};
use common::{McpClient, call, text};
use relay_service::ServiceConfig;
use relay_service::chat_tasks::{GOAL_PREVIEW_BYTES, INBOX_LIMIT};
use serde_json::{Value, json};

/// The seed's empty inbox.
const MAX_EMPTY_INBOX_BYTES: usize = 87;
/// The seed's cost of one more waiting task.
const MAX_BYTES_PER_TASK: usize = 210;

/// Goals chosen to make a preview as long as possible in JSON bytes.
fn worst_goals() -> Vec<String> {
    vec![
        "Summarise the customer feedback from last week and list the three most common complaints with one example each".repeat(5),
        "価格設定のコピーを承認するのは誰ですか？ 未解決の質問をすべて挙げてください。".repeat(10),
        "\"Quote\" \\ every \"word\" \\ ".repeat(20),
        "\u{1}\u{2}\u{3} control ".repeat(30),
        "😀🚀".repeat(100),
        "x".repeat(4_000),
    ]
}

async fn inbox_text(client: &McpClient, link: &str) -> String {
    let result = call(
        client,
        "list_linked_chat_tasks",
        json!({"chat_link_id": link}),
    )
    .await;
    // The JSON comes first; a hint, where there is one, is a second block.
    let text = text(&result).lines().next().unwrap_or_default().to_owned();
    let structured = result.structured_content.clone().expect("structured");
    assert_eq!(
        serde_json::from_str::<Value>(&text).expect("the text is the JSON"),
        structured,
        "the text copy is the structured answer itself, not a second description"
    );
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_inbox_and_each_waiting_task_stay_within_the_seeds_bytes() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let empty = inbox_text(&chat.client, &chat.link).await;
    assert_eq!(empty, r#"{"tasks":[]}"#);
    assert!(
        empty.len() <= MAX_EMPTY_INBOX_BYTES,
        "{} bytes",
        empty.len()
    );

    let goals = worst_goals();
    let mut previous = empty.len();
    let mut largest_step = 0;
    for n in 0..INBOX_LIMIT {
        let goal = &goals[n % goals.len()];
        // One millisecond apart, so "oldest first" is the order of assignment.
        chat.service.clock.advance(Duration::from_millis(1));
        chat.service
            .assign_goal(&chat.link, goal, &format!("bytes-{n}"))
            .await;
        let inbox = inbox_text(&chat.client, &chat.link).await;
        let step = inbox.len() - previous;
        assert!(
            step <= MAX_BYTES_PER_TASK,
            "task {n} added {step} bytes: {inbox}"
        );
        largest_step = largest_step.max(step);
        previous = inbox.len();
    }
    let per_task = (previous - empty.len()) as f64 / INBOX_LIMIT as f64;
    println!(
        "empty inbox: {} bytes; {INBOX_LIMIT} waiting tasks with worst-case goals: {previous} bytes, {per_task:.1} bytes per task on average, {largest_step} at most (goal preview ≤ {GOAL_PREVIEW_BYTES} bytes)",
        empty.len()
    );

    // A claimed task stays in the inbox (so a chat that lost its claim answer sees it) and
    // costs one byte more for its longer status word.
    let first: Value =
        serde_json::from_str(&inbox_text(&chat.client, &chat.link).await).expect("JSON");
    let task = first["tasks"][0]["task_id"]
        .as_str()
        .expect("task id")
        .to_owned();
    claim(&chat.client, &chat.link, &task).await;
    let claimed = inbox_text(&chat.client, &chat.link).await;
    assert_eq!(claimed.len(), previous + 1);

    // Past the limit the inbox says there is more instead of growing.
    chat.service.clock.advance(Duration::from_millis(1));
    chat.service
        .assign_goal(&chat.link, "one more", "bytes-more")
        .await;
    let full = inbox_text(&chat.client, &chat.link).await;
    let full_value: Value = serde_json::from_str(&full).expect("JSON");
    assert_eq!(
        full_value["tasks"].as_array().map(Vec::len),
        Some(INBOX_LIMIT)
    );
    assert_eq!(full_value["more"], true);
    assert_eq!(full.len(), claimed.len() + r#","more":true"#.len());
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_goal_comes_with_the_claim_and_the_read() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let goal = "日本語 ".repeat(600);
    let task = chat
        .service
        .assign_goal(&chat.link, &goal, "whole-goal")
        .await;
    let inbox: Value =
        serde_json::from_str(&inbox_text(&chat.client, &chat.link).await).expect("JSON");
    let preview = inbox["tasks"][0]["goal"].as_str().expect("goal");
    assert!(preview.ends_with('…'), "{preview}");
    assert!(preview.len() <= GOAL_PREVIEW_BYTES);
    let claimed = claim(&chat.client, &chat.link, &task).await;
    assert_eq!(claimed["goal"], goal.as_str());
    let read = common::ok(
        &call(
            &chat.client,
            "get_linked_chat_task",
            json!({"chat_link_id": chat.link, "task_id": task}),
        )
        .await,
    );
    assert_eq!(read["goal"], goal.as_str());
    chat.service.stop().await;
}
