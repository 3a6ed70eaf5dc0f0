//! Both engines are implementations of one contract: every example graph's test cases end the
//! same way in the sandbox and in-process, case by case (status, result, error, tokens). The
//! cases run with one seed and a fixed clock (those that set neither), so even a graph that reads
//! the time or draws random numbers must give the same result in both.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use runner::RunStatus;
use runner::engine::EngineKind;
use runner::host::approvals::Policy;
use runner::host::events::NullSink;
use runner::host::time::ClockSetting;
use runner::host::tools::ToolRegistry;
use runner::testing::{CaseDefaults, CaseReport, run_dir_with};

async fn reports(kind: EngineKind, dir: &Path) -> Vec<CaseReport> {
    let engine = kind.build().expect("the engine starts");
    let defaults = CaseDefaults {
        seed: Some(1),
        clock: ClockSetting::parse("fixed:2026-01-01T00:00:00Z").expect("a clock"),
    };
    run_dir_with(dir, engine, Arc::new(NullSink), None, defaults, |_| {})
        .await
        .expect("the graphs folder is readable")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_case_ends_identically_in_both_engines() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../graphs");
    let wasm = reports(EngineKind::Wasm, &dir).await;
    let boa = reports(EngineKind::Boa, &dir).await;
    assert_eq!(wasm.len(), boa.len());
    // Four example graphs with several cases each: fewer would mean the folder went missing.
    assert!(wasm.len() >= 8, "only {} cases", wasm.len());
    let mut compared = 0;
    for (w, b) in wasm.iter().zip(&boa) {
        assert_eq!(w.name, b.name);
        assert!(w.passed(), "wasm: {}: {:?}", w.name, w.problems);
        assert!(b.passed(), "boa: {}: {:?}", b.name, b.problems);
        let (w_out, b_out) = (
            w.outcome.as_ref().expect("ran in wasm"),
            b.outcome.as_ref().expect("ran in boa"),
        );
        assert_eq!(w_out.status, b_out.status, "{}", w.name);
        assert_eq!(w_out.result, b_out.result, "{}", w.name);
        assert_eq!(w_out.error, b_out.error, "{}", w.name);
        assert_eq!(w_out.total_tokens, b_out.total_tokens, "{}", w.name);
        assert_eq!(w_out.reported_cost, b_out.reported_cost, "{}", w.name);
        compared += 1;
    }
    assert_eq!(compared, wasm.len());
}

/// Half an emoji (`"😀".slice(0, 1)`, a lone UTF-16 surrogate) is what cutting a model's reply
/// to length can leave. JSON cannot carry it to the host, so both engines turn it into U+FFFD in
/// the result, in tool arguments (the file written) and in prompts, instead of failing the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_an_emoji_reaches_the_host_as_a_replacement_character_in_both_engines() {
    let script = r#"
    export default async function (args, g) {
      const reply = (await g.agent({prompt: "greet " + "😀".slice(0, 1)})).text;
      const cut = reply.slice(0, 3);
      await g.tool("fs.write", {path: "cut.txt", text: cut});
      return {cut, whole: reply};
    }"#;
    for engine in common::engines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut options, _, mock) = common::options(
            engine,
            serde_json::json!({"default": {"text": "hi😀 there", "tokens": 5}}),
        );
        options.tools = ToolRegistry::standard(Some(dir.path().to_path_buf())).expect("tools");
        options.policy.set("fs.write", Policy::Allow);
        let outcome = common::run(script, serde_json::json!({}), &options).await;
        assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
        assert_eq!(
            outcome.result,
            Some(serde_json::json!({"cut": "hi\u{FFFD}", "whole": "hi😀 there"}))
        );
        let written = std::fs::read_to_string(dir.path().join("cut.txt")).expect("the tool wrote");
        assert_eq!(written, "hi\u{FFFD}");
        assert_eq!(mock.calls(), vec!["greet \u{FFFD}".to_owned()]);
    }
}

/// JSON leaving a graph may nest 100 levels deep, so that every hop after it (the completion, the
/// service, MCP's JSON-RPC answer) stays within common parsers' 128; deeper is refused with that
/// said, not as "not valid JSON" (which serde_json's own bound used to produce past 127).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_nested_past_the_limit_is_refused_as_too_deep_in_both_engines() {
    let script = r#"
    export default async function (args, g) {
      const nest = (n) => { let v = 1; for (let i = 0; i < n; i++) v = [v]; return v; };
      if (args.tool) {
        try { await g.tool("fs.read", {path: "x", deep: nest(args.n)}); }
        catch (e) { return e.message; }
      }
      return nest(args.n);
    }"#;
    for engine in common::engines() {
        let (options, _, _) = common::options(engine, serde_json::json!({}));
        let at_limit = common::run(script, serde_json::json!({"n": 100}), &options).await;
        assert_eq!(at_limit.status, RunStatus::Completed, "{at_limit:?}");
        let too_deep = "the result is nested more than 100 levels of arrays and objects deep, the most JSON leaving a graph may have; flatten it";
        for n in [101, 128, 5000] {
            let past = common::run(script, serde_json::json!({"n": n}), &options).await;
            assert_eq!(past.error.as_deref(), Some(too_deep), "{n}");
        }
        let tool = common::run(
            script,
            serde_json::json!({"n": 500, "tool": true}),
            &options,
        )
        .await;
        let said = tool.result.expect("the graph caught it");
        assert!(
            said.as_str().is_some_and(
                |m| m.starts_with("fs.read: the arguments are nested more than 100 levels")
            ),
            "{said}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_arrow_default_export_runs_in_both_engines() {
    // boa's parser alone refuses this form; both engines must run it, meta included.
    let script = "export const meta = {name: 'Arrow', slug: 'arrow', version: '1'};\n\
                  export default async (args, g) => {\n\
                    const r = await g.agent({prompt: args.q});\n\
                    return r.text;\n\
                  };";
    for engine in common::engines() {
        let name = engine.name();
        let meta = engine.describe(script.into()).await.expect("meta");
        assert_eq!(meta.slug, "arrow", "{name}");
        let (options, _, _) =
            common::options(engine, serde_json::json!({"default": {"text": "fine"}}));
        let outcome = common::run(script, serde_json::json!({"q": "how?"}), &options).await;
        assert_eq!(outcome.status, RunStatus::Completed, "{name}: {outcome:?}");
        assert_eq!(outcome.result, Some(serde_json::json!("fine")), "{name}");
    }
}
