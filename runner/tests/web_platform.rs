//! `structuredClone`, `TextEncoder`, `TextDecoder`, `atob`, `btoa`, `queueMicrotask`, `crypto`,
//! `performance.now`, `DOMException`, `URL`, `URLSearchParams` and the whole `console` for scripts
//! written for browsers or Node: the same results in both engines, in compiled graphs, and
//! compiled into the sandbox's snapshot rather than per run.

use crate::common;

use std::sync::Arc;

use runner::RunStatus;
use runner::engine::Engine;
use runner::engine::wasm::{WasmEngine, WasmLimits};
use serde_json::json;

const USES_THEM: &str = r#"
export const meta = {name: "Web", slug: "web", version: "1"};
export default async function (args, g) {
  const order = [];
  queueMicrotask(() => order.push("microtask"));
  order.push("sync");
  await null;
  const state = {when: new Date(0), seen: new Map([["a", new Set([1, 2])]]), bytes: new Uint8Array([1, 2])};
  state.self = state;
  const copy = structuredClone(state);
  const text = "Grüße 😀";
  const bytes = new TextEncoder().encode(text);
  console.time("clone");
  console.group("copying");
  console.count();
  console.groupEnd();
  console.timeEnd("clone");
  const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(crypto.randomUUID());
  let refused;
  try { structuredClone({run() {}}); } catch (e) { refused = [e instanceof DOMException, e.name, e.message]; }
  return {
    order,
    clone: [copy !== state, copy.self === copy, copy.when.getTime(), [...copy.seen.get("a")], [...copy.bytes]],
    utf8: [bytes.length, new TextDecoder().decode(bytes) === text],
    base64: [btoa("graph"), atob("Z3JhcGg=")],
    uuid,
    refused,
    url: [new URL("../x?a=b c#top", "https://h.com/p/q").href, new URLSearchParams({k: "v w", n: 1}).toString()],
  };
}
"#;

fn expected() -> serde_json::Value {
    json!({
        "order": ["sync", "microtask"],
        "clone": [true, true, 0, [1, 2], [1, 2]],
        "utf8": [12, true],
        "base64": ["Z3JhcGg=", "graph"],
        "uuid": true,
        "refused": [true, "DataCloneError", "structuredClone: the function run at value.run cannot be cloned"],
        "url": ["https://h.com/x?a=b%20c#top", "k=v+w&n=1"],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn they_give_the_same_results_in_both_engines() {
    common::completes_with(USES_THEM, expected()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compiled_graph_has_them() {
    let engine = common::compiled(USES_THEM).await;
    let (options, _, _) = common::options(engine, json!({}));
    let outcome = common::run("", json!({}), &options).await;
    assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
    assert_eq!(outcome.result, Some(expected()));
}

/// They are compiled into the sandbox's snapshot, not per run: a budget of five million units of
/// fuel runs a graph that uses them (about 1.5 million); compiling them costs about 50 million
/// (measured with `runner run --fuel` on a graph that evaluates web.js).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_does_not_compile_them_per_run() {
    let limits = WasmLimits {
        fuel: Some(5_000_000),
        ..WasmLimits::default()
    };
    let engine = Arc::new(WasmEngine::new(limits).expect("the sandbox starts"));
    let (options, _, _) = common::options(engine, json!({}));
    let outcome = common::run(
        "export default function () { return [atob(btoa('ok')), structuredClone([1]), new TextEncoder().encode('é').length, new URL('https://h.com/a').host]; }",
        json!({}),
        &options,
    )
    .await;
    assert_eq!(
        outcome.result,
        Some(json!(["ok", [1], 2, "h.com"])),
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncaught_clone_error_fails_the_run_by_name() {
    for engine in common::engines() {
        let name = engine.name();
        let (options, _, _) = common::options(engine, json!({}));
        let outcome = common::run(
            "export default function () { return structuredClone({steps: [() => 1]}); }",
            json!({}),
            &options,
        )
        .await;
        assert_eq!(outcome.status, RunStatus::Failed, "{name}: {outcome:?}");
        // The error names the graph's line, where structuredClone was called.
        assert_eq!(
            outcome.error.as_deref().and_then(|e| e.lines().next()),
            Some(
                "test.js:1:52: DataCloneError: structuredClone: the function at value.steps[0] cannot be cloned"
            ),
            "{name}"
        );
    }
}

/// Random values and the clock come from the run, not from the snapshot: every run of the
/// sandbox, and of a compiled graph, gets a different UUID (a fresh seed), and its `performance`
/// clock counts whole milliseconds from its own run's start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uuids_and_the_performance_clock_are_not_frozen_into_a_snapshot() {
    const UUID: &str = r#"
export const meta = {name: "Ids", slug: "ids", version: "1"};
export default function () {
  const clock = performance.now();
  const origin = Math.abs(performance.timeOrigin - Date.now()) < 60000;
  return {id: crypto.randomUUID(), clock, origin};
}
"#;
    let compiled = common::compiled(UUID).await;
    let generic: Arc<dyn Engine> =
        Arc::new(WasmEngine::new(WasmLimits::default()).expect("the sandbox starts"));
    for (engine, script) in [(generic, UUID), (compiled, "")] {
        let (options, _, _) = common::options(engine, json!({}));
        let mut seen = Vec::new();
        for _ in 0..3 {
            let outcome = common::run(script, json!({}), &options).await;
            assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
            let result = outcome.result.expect("a result");
            // Generous: the machine is shared; a frozen clock would be off by far more.
            assert!(
                result["clock"].as_u64().is_some_and(|ms| ms < 60_000),
                "{result}"
            );
            assert_eq!(result["origin"], json!(true), "{result}");
            seen.push(result["id"].clone());
        }
        assert!(
            seen[0] != seen[1] && seen[1] != seen[2] && seen[0] != seen[2],
            "the same UUID twice: {seen:?}"
        );
    }
}

/// Where the url crate departs from the URL standard, `URL` follows the standard (whatwg-url,
/// its reference implementation, gave every expected value): one case or more of each class
/// `scripts/fuzz-web.js` found, in both engines.
const URL_CORNERS: &str = r#"
export const meta = {name: "URL corners", slug: "url-corners", version: "1"};
export default async function () {
  const href = (i, b) => { try { return (b === undefined ? new URL(i) : new URL(i, b)).href; } catch (e) { return e.name; } };
  const set = (i, attr, v) => { const u = new URL(i); u[attr] = v; return u.href; };
  const again = new URL("sc:/a");
  again.pathname = "//x";
  again.pathname = "y";
  return {
    backslash_not_special: [href("/\\x\\y", "sc://host/p/q"), href("sc://u\\@h/a\\b?c\\#d\\"), href("sc://a\\b/"), href("sc:\\\\x"), set("sc://h/p", "username", "a\\b"), set("sc://h/p", "pathname", "a\\..\\b")],
    drive_letter_not_file: [href("http://h/c|/.."), href("javascript:///C:/../a"), href("sc://h/a/C:/../b"), href("x/C:/..", "http://h/a/b")],
    slashes_relative_to_special: [href("///h.com/p", "http://x/"), href("\\\\\\h.com/p", "https://x/")],
    file: [href("file://h//x"), href("file:///a/..//x"), href("/x", "file:///C:/dir/f"), href("file://C:/x"), href("file:/a/c|/.."), href("file://h/./\\x")],
    credentials_without_host: [href("sc://:@/x"), href("sc://u@:80/x")],
    setters: [set("sc://h/p", "pathname", ""), set("sc:/p", "search", "\t"), set("http://h/", "hash", "\n#a"), set("sc://h/p", "host", ":80"), set("file://h/p", "host", ""), set("https://h/C:/p", "protocol", "file"), set("sc:/a", "pathname", "//x"), again.href],
    blob_origin: [new URL("blob:http://h\\x").origin],
  };
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_follows_the_standard_where_the_url_crate_does_not() {
    let expected = json!({
        "backslash_not_special": ["sc://host/\\x\\y", "sc://u%5C@h/a\\b?c\\#d\\", "TypeError", "sc:\\\\x", "sc://a%5Cb@h/p", "sc://h/a\\..\\b"],
        "drive_letter_not_file": ["http://h/", "javascript:///a", "sc://h/a/b", "http://h/a/x/"],
        "slashes_relative_to_special": ["http://h.com/p", "https://h.com/p"],
        "file": ["file://h//x", "file:////x", "file:///C:/x", "file:///C:/x", "file:///a/", "file://h//x"],
        "credentials_without_host": ["TypeError", "TypeError"],
        "setters": ["sc://h", "sc:/p?", "http://h/##a", "sc://h/p", "file:///p", "file://h/C:/p", "sc:/.//x", "sc:/y"],
        "blob_origin": ["http://h"],
    });
    common::completes_with(URL_CORNERS, expected).await;
}
