//! A claim is one conditional write: 200 tasks, each claimed by eight chats released together
//! by a barrier over real HTTP, have exactly 200 winners, and every loser on the task's own
//! link gets the winner's claim back. The naive read-then-write claim (a test-only switch)
//! loses the same race, so this test is known to catch double claims.

use crate::chat_support;
use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use chat_support::{Chat, ChatService, chat_setup, claim_args};
use common::{Era, McpClient, mcp_client};
use relay_service::ServiceConfig;
use relay_service::chat_tasks::NOT_CLAIMABLE;
use rmcp::model::CallToolRequestParams;
use serde_json::Value;
use tokio::sync::Barrier;

const TASKS: usize = 200;
/// Concurrent claims per task: six chats on the task's link, two on another link.
const CLAIMERS: usize = 8;
const OTHER_LINK_CLAIMERS: usize = 2;

/// What one race over all tasks produced.
#[derive(Debug, Default)]
struct RaceOutcome {
    /// Claims answered `replayed: false`: each one believed it won its task.
    winners: usize,
    /// Tasks that more than one claim believed it had won.
    double_claimed_tasks: usize,
    /// Same-link losers whose claim id differs from the claim stored on the task.
    losers_without_the_winners_claim: usize,
    /// Answers to the other link's claims.
    other_link_answers: BTreeMap<String, usize>,
}

async fn claim_once(client: &McpClient, link: &str, task: &str) -> Value {
    let Value::Object(arguments) = claim_args(link, task) else {
        unreachable!("claim arguments are an object");
    };
    let result = client
        .peer()
        .call_tool(CallToolRequestParams::new("claim_linked_chat_task").with_arguments(arguments))
        .await
        .expect("claim answered");
    if result.is_error == Some(true) {
        let text = common::text(&result);
        serde_json::json!({"error": text})
    } else {
        result.structured_content.expect("structured claim")
    }
}

async fn race(naive: bool) -> RaceOutcome {
    // 1,600 claims from one token in a few seconds: the race is the subject here, not the
    // token's request rate.
    let config = ServiceConfig {
        naive_claim: naive,
        rate_limit: None,
        ..ServiceConfig::default()
    };
    let Chat {
        service,
        link,
        other_link,
        token,
        client,
        ..
    } = chat_setup(config).await;
    let mut clients = vec![client];
    for _ in 1..CLAIMERS {
        clients.push(mcp_client(&service.mcp_url(), &token, Era::Current).await);
    }
    let clients = Arc::new(clients);
    let mut outcome = RaceOutcome::default();
    for n in 0..TASKS {
        let task = service
            .assign_goal(&link, &format!("Race task {n}"), &format!("race-{n}"))
            .await;
        let barrier = Arc::new(Barrier::new(CLAIMERS));
        let claims: Vec<_> = (0..CLAIMERS)
            .map(|c| {
                let (clients, barrier, task) = (clients.clone(), barrier.clone(), task.clone());
                let link = if c < CLAIMERS - OTHER_LINK_CLAIMERS {
                    link.clone()
                } else {
                    other_link.clone()
                };
                tokio::spawn(async move {
                    barrier.wait().await;
                    let answer = claim_once(&clients[c], &link, &task).await;
                    (c < CLAIMERS - OTHER_LINK_CLAIMERS, answer)
                })
            })
            .collect();
        let mut answers = Vec::new();
        for claim in claims {
            answers.push(claim.await.expect("claimer"));
        }
        let stored = service.stored_task(&task).await.claim_id.expect("claimed");
        let mut task_winners = 0;
        for (own_link, answer) in answers {
            if !own_link {
                let error = answer["error"].as_str().unwrap_or("(a claim)").to_owned();
                *outcome.other_link_answers.entry(error).or_default() += 1;
                continue;
            }
            if answer["replayed"] == false {
                task_winners += 1;
            } else if answer["claim_id"].as_str() != Some(stored.as_str()) {
                outcome.losers_without_the_winners_claim += 1;
            }
        }
        outcome.winners += task_winners;
        if task_winners > 1 {
            outcome.double_claimed_tasks += 1;
        }
    }
    service.stop().await;
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_conditional_claim_has_exactly_one_winner_per_task() {
    let outcome = race(false).await;
    assert_eq!(outcome.winners, TASKS, "{outcome:?}");
    assert_eq!(outcome.double_claimed_tasks, 0, "{outcome:?}");
    assert_eq!(
        outcome.losers_without_the_winners_claim, 0,
        "every loser on the task's link gets the winner's claim back: {outcome:?}"
    );
    assert_eq!(
        outcome.other_link_answers,
        BTreeMap::from([(NOT_CLAIMABLE.to_owned(), TASKS * OTHER_LINK_CLAIMERS)]),
        "another link only ever hears `{NOT_CLAIMABLE}`"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_naive_read_then_write_claim_lets_two_claims_win() {
    let outcome = race(true).await;
    assert!(
        outcome.double_claimed_tasks > 0,
        "the naive claim should lose the race at least once in {TASKS} tasks: {outcome:?}"
    );
    assert!(outcome.winners > TASKS, "{outcome:?}");
    println!(
        "naive claim: {} of {TASKS} tasks claimed twice or more, {} winners",
        outcome.double_claimed_tasks, outcome.winners
    );
}
