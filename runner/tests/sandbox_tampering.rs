//! Tampering: replacing the prelude's functions, patching built-ins or rebuilding the prelude
//! from source does not skip an approval or the budget, which the host enforces.
//!
//! Each test runs one hostile script of `hostile::CASES` in the sandbox (in-process and through
//! `runner run --engine wasm`) and in boa in a child process; see `hostile/mod.rs`.

use crate::hostile;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tamper_approvals() {
    hostile::check("tamper-approvals").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tamper_budget() {
    hostile::check("tamper-budget").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tamper_rebuild_prelude() {
    hostile::check("tamper-rebuild-prelude").await;
}
