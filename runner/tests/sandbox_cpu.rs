//! CPU: endless loops, runaway built-ins and endless promise chains end `failed` at a limit
//! (boa's loop limit, the epoch deadline, fuel), and the host survives.
//!
//! Each test runs one hostile script of `hostile::CASES` in the sandbox (in-process and through
//! `runner run --engine wasm`) and in boa in a child process; see `hostile/mod.rs`.

use crate::hostile;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_plain() {
    hostile::check("loop-plain").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_in_getter() {
    hostile::check("loop-in-getter").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_in_promise_job() {
    hostile::check("loop-in-promise-job").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_promise_chain() {
    hostile::check("endless-promise-chain").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_await_loop() {
    hostile::check("endless-await-loop").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_short_loops() {
    hostile::check("many-short-loops").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catastrophic_regex() {
    hostile::check("catastrophic-regex").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runaway_sort() {
    hostile::check("runaway-sort").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_level_spin() {
    hostile::check("top-level-spin").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuel() {
    hostile::check("fuel").await;
}
