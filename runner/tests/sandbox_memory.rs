//! Memory: bombs end `failed` at the sandbox's linear-memory cap, and the host survives.
//!
//! Each test runs one hostile script of `hostile::CASES` in the sandbox (in-process and through
//! `runner run --engine wasm`) and in boa in a child process; see `hostile/mod.rs`.

use crate::hostile;

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

/// A nested graph that holds about 200 MiB (under the per-instance cap) for a while: long
/// enough that all eight of them hold it at once (each takes well under a second to fill).
const HOARD: &str = r#"
export const meta = {name: "Hoard", slug: "hoard", version: "1"};
export default async function (args, g) {
  const s = "x".repeat(1 << 20);
  const held = [];
  for (let i = 0; i < 200; i++) held.push(s + i);
  await g.sleep(8000);
  return held.length;
}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_memory_bombs_share_one_run_wide_cap() {
    use std::sync::Arc;

    use runner::engine::wasm::{DEFAULT_MEMORY_BYTES, RUN_MEMORY_FACTOR};
    use runner::host::graphs::{FolderCatalog, GraphSource};
    use runner::run::{RunOptions, RunRequest, run_graph};

    // Eight nested graphs of ~200 MiB each would hold 1.6 GiB of host memory; the run may hold
    // four times the per-instance cap (1 GiB) in all, so some of them must fail at that cap.
    let engine = hostile::wasm_engine(hostile::case("string-doubling"));
    let mut catalog = FolderCatalog::default();
    catalog.insert(GraphSource {
        meta: graph_js::Meta::from_json(
            serde_json::json!({"name": "Hoard", "slug": "hoard", "version": "1"}),
        )
        .expect("meta"),
        script: crate::common::with_meta(HOARD).into(),
        file: None,
        engine: None,
    });
    let mut options = RunOptions::new(engine.clone());
    options.catalog = Arc::new(catalog);
    options.timeout = std::time::Duration::from_secs(60);
    let script = r#"export default async function (a, g) {
      const settled = await Promise.allSettled(Array.from({ length: 8 }, () => g.graph("hoard", {})));
      return settled.map((s) => s.status === "fulfilled" ? "held" : s.reason.message);
    }"#;
    let outcome = run_graph(
        RunRequest {
            script: crate::common::with_meta(script).into(),
            args: serde_json::json!({}),
            graph: "fanout.js".into(),
            run_id: None,
        },
        &options,
        tokio_util::sync::CancellationToken::new(),
    )
    .await;
    let results: Vec<String> =
        serde_json::from_value(outcome.result.clone().expect("completed")).expect("strings");
    let held = results.iter().filter(|r| *r == "held").count();
    let refused = results
        .iter()
        .filter(|r| r.contains("the run's graphs together tried to use more than"))
        .count();
    let cap_mib = DEFAULT_MEMORY_BYTES * RUN_MEMORY_FACTOR / (1024 * 1024);
    assert!(refused >= 1, "8 × 200 MiB > {cap_mib} MiB: {results:?}");
    assert_eq!(held + refused, 8, "{results:?}");
    hostile::assert_survives(engine).await;
}
