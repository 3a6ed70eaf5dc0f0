//! Capabilities: a script reaches nothing outside the WIT world: no module loading, no
//! `process`, `Deno`, `fetch` or `WebAssembly`, no extra globals, no way around them via `eval`.
//!
//! Each test runs one hostile script of `hostile::CASES` in the sandbox (in-process and through
//! `runner run --engine wasm`) and in boa in a child process; see `hostile/mod.rs`.

use crate::hostile;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require() {
    hostile::check("require").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_import() {
    hostile::check("dynamic-import").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_import() {
    hostile::check("static-import").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process() {
    hostile::check("process").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deno() {
    hostile::check("deno").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch() {
    hostile::check("fetch").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webassembly() {
    hostile::check("webassembly").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn globals() {
    hostile::check("globals").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_escape() {
    hostile::check("eval-escape").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomics_wait() {
    hostile::check("atomics-wait").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn date_and_random() {
    hostile::check("date-and-random").await;
}
