//! Recursion: deep JS recursion, parser nesting and deep JSON end `failed` at the interpreter's
//! recursion limit or the sandbox's stack caps, and the host survives.
//!
//! Each test runs one hostile script of `hostile::CASES` in the sandbox (in-process and through
//! `runner run --engine wasm`) and in boa in a child process; see `hostile/mod.rs`.

use crate::hostile;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_recursion() {
    hostile::check("js-recursion").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_recursion() {
    hostile::check("proxy-recursion").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parser_nesting() {
    hostile::check("parser-nesting").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_parse_deep() {
    hostile::check("json-parse-deep").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_stringify_deep() {
    hostile::check("json-stringify-deep").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn to_string_deep() {
    hostile::check("to-string-deep").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm_stack_flag() {
    hostile::check("wasm-stack-flag").await;
}
