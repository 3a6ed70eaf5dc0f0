//! Output: log lines, log line length, results, errors and started operations are bounded.
//!
//! Each test runs one hostile script of `hostile::CASES` in the sandbox (in-process and through
//! `runner run --engine wasm`) and in boa in a child process; see `hostile/mod.rs`.

use crate::hostile;

use graph_js::{MAX_ERROR_CHARS, MAX_LOG_LINE_CHARS};
use hostile::child::ChildEnd;
use runner::host::events::{EventKind, MAX_LOG_LINES};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_50mb() {
    hostile::check("result-50mb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_11mb() {
    hostile::check("result-11mb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_deep() {
    hostile::check("result-deep").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_cyclic() {
    hostile::check("result-cyclic").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handle_flood() {
    hostile::check("handle-flood").await;
}

/// Lines of a `runner run` trace that are the graph's log lines.
fn trace_log_lines(stderr: &str) -> usize {
    stderr.lines().filter(|l| l.contains("] log: ")).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_flood() {
    let checked = hostile::check("log-flood").await;
    let logs = checked
        .wasm
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Log { .. }))
        .count();
    let dropped: Vec<_> = checked
        .wasm
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::LogsDropped { .. }))
        .collect();
    assert_eq!(logs, MAX_LOG_LINES);
    assert_eq!(dropped.len(), 1, "one notice that lines were dropped");
    for child in [&checked.wasm_cli, &checked.boa] {
        assert_eq!(trace_log_lines(&child.stderr), MAX_LOG_LINES);
        assert_eq!(
            child
                .stderr
                .matches(&format!("log limit of {MAX_LOG_LINES} lines reached"))
                .count(),
            1
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_line_9mb() {
    let checked = hostile::check("log-line-9mb").await;
    let line = checked
        .wasm
        .events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Log { message } => Some(message.clone()),
            _ => None,
        })
        .expect("the line was logged");
    // The host cuts every line to the limit, whatever the guest sent.
    assert_eq!(line.chars().count(), MAX_LOG_LINE_CHARS);
}

fn assert_error_is_cut(checked: hostile::Checked) {
    let error = checked.wasm.outcome.error.expect("an error");
    assert_eq!(
        error.chars().count(),
        MAX_ERROR_CHARS + 1,
        "cut, with an ellipsis"
    );
    assert!(error.ends_with('…'));
    for child in [&checked.wasm_cli, &checked.boa] {
        let ChildEnd::Outcome {
            error: Some(error), ..
        } = &child.end
        else {
            panic!("{}", child.end.describe());
        };
        assert_eq!(error.chars().count(), MAX_ERROR_CHARS + 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thrown_huge_error() {
    assert_error_is_cut(hostile::check("thrown-huge-error").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thrown_huge_object() {
    assert_error_is_cut(hostile::check("thrown-huge-object").await);
}
