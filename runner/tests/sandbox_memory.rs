//! Memory: bombs end `failed` at the sandbox's linear-memory cap, and the host survives.
//!
//! Each test runs one hostile script of `hostile::CASES` in the sandbox (in-process and through
//! `runner run --engine wasm`) and in boa in a child process; see `hostile/mod.rs`.

mod hostile;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn string_doubling() {
    hostile::check("string-doubling").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn array_growth() {
    hostile::check("array-growth").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_arrays() {
    hostile::check("typed-arrays").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_repeat() {
    hostile::check("huge-repeat").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_typed_array() {
    hostile::check("huge-typed-array").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_level_memory_bomb() {
    hostile::check("top-level-memory-bomb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_cap_flag() {
    hostile::check("memory-cap-flag").await;
}
