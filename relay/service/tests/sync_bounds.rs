//! A sync answer is bounded in bytes: with many large queued runs each answer stays within
//! 1 MiB of JSON, and every run still reaches the desktop over the following passes.

use crate::common;

use std::collections::BTreeSet;

use common::{Era, Setup, call, ok, run_args, setup};
use relay_protocol::{MAX_SYNC_ANSWER_BYTES, MAX_SYNC_COMMANDS};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_queues_arrive_over_several_bounded_answers() {
    let Setup {
        service: _service,
        project,
        desktop,
        client: agent,
    } = setup(Era::Current).await;
    const RUNS: usize = 40;
    let mut queued = BTreeSet::new();
    for n in 0..RUNS {
        let big = json!({"text": "x".repeat(60_000), "n": n});
        let ticket = ok(&call(
            &agent,
            "run_graph_session",
            run_args(1, &format!("bounded-key-{n:03}"), big),
        )
        .await);
        queued.insert(ticket["command_id"].as_str().expect("id").to_owned());
    }
    let mut delivered = BTreeSet::new();
    let mut answers = 0;
    while delivered.len() < RUNS {
        answers += 1;
        assert!(answers <= RUNS, "every run arrives within {RUNS} answers");
        let (status, answer) = desktop
            .sync_raw(&json!({"project_id": project, "sessions": [common::session(1)]}))
            .await;
        assert_eq!(status, 200, "{answer}");
        let commands = answer["commands"].as_array().expect("commands");
        let bytes: usize = commands
            .iter()
            .map(|c| serde_json::to_vec(c).expect("json").len() + 1)
            .sum();
        assert!(
            bytes <= MAX_SYNC_ANSWER_BYTES,
            "an answer of {bytes} bytes of commands"
        );
        assert!(!commands.is_empty() && commands.len() < MAX_SYNC_COMMANDS);
        for command in commands {
            let id = command["command_id"].as_str().expect("id").to_owned();
            assert_eq!(desktop.started(&id, "e").await.0, 200);
            delivered.insert(id);
        }
    }
    assert!(answers > 1, "40 runs of 60 KB do not fit one answer");
    assert_eq!(delivered, queued);
}
