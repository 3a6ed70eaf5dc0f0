//! JS code cannot get around approvals or the budget: not by replacing prelude functions, not by
//! patching built-ins the prelude uses, not by forging arguments, and not by calling the host
//! bindings directly (they are enforced on the host, behind the same checks).

use crate::common;

use std::sync::Arc;

use graph_js::{AgentRequest, FailureCode};
use runner::RunStatus;
use runner::engine::EngineKind;
use runner::host::approvals::{ApprovalPolicy, Approvals, NobodyToAsk, Policy};
use runner::host::events::{Events, NullSink};
use runner::host::graphs::EmptyCatalog;
use runner::host::mock::MockProvider;
use runner::host::tools::ToolRegistry;
use runner::host::{Invocation, RunParts, RunShared};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn folder_options(
    engine: Arc<dyn runner::engine::Engine>,
    replies: serde_json::Value,
) -> (runner::RunOptions, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut options, _, _) = common::options(engine, replies);
    options.tools = ToolRegistry::standard(Some(dir.path().to_path_buf())).expect("tools");
    (options, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_and_patching_does_not_skip_approvals() {
    for engine in common::engines() {
        let (options, dir) = folder_options(engine, json!({}));
        let script = r#"
        export default async function (args, g) {
          const attempts = [];
          try { g.tool = async () => ({bytes: 1}); attempts.push("replaced"); } catch (e) { attempts.push("frozen"); }
          Map.prototype.get = function () { return [() => {}, () => {}]; };
          Map.prototype.set = function () { return this; };
          JSON.parse = () => ({bytes: 999});
          Promise.reject = (e) => Promise.resolve({bytes: 999});
          Object.prototype.startTool = () => 1;
          try { await g.tool("fs.write", {path: "pwned.txt", text: "x"}); attempts.push("written"); }
          catch (e) { attempts.push(e.code); }
          return attempts;
        }"#;
        let outcome = common::run(script, json!({}), &options).await;
        let written = dir.path().join("pwned.txt").exists();
        assert!(!written, "the tool never ran: {outcome:?}");
        assert_eq!(
            outcome.result,
            Some(json!(["frozen", "denied"])),
            "{outcome:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_agent_arguments_are_clipped_or_refused_by_the_host() {
    for engine in common::engines() {
        let (mut options, _, _) =
            common::options(engine, json!({"default": {"text": "z".repeat(10000)}}));
        options.token_cap = Some(50);
        let script = r#"
        export default async function (args, g) {
          const out = {};
          out.huge = (await g.agent({prompt: "p", maxTokens: 1e12})).tokens;
          for (const [name, opts] of Object.entries({
            negative: {prompt: "p", maxTokens: -5},
            fraction: {prompt: "p", maxTokens: 1.5},
            turns: {prompt: "p", maxTurns: 1000},
            tools: {prompt: "p", tools: ["shell.exec"]},
            empty: {prompt: ""},
          })) {
            try { await g.agent(opts); out[name] = "accepted"; } catch (e) { out[name] = e.code; }
          }
          try { await g.agent({prompt: "after the cap"}); out.after = "accepted"; } catch (e) { out.after = e.code; }
          return out;
        }"#;
        let outcome = common::run(script, json!({}), &options).await;
        assert_eq!(
            outcome.result,
            Some(
                json!({"huge": 51, "negative": "invalid", "fraction": "invalid", "turns": "invalid",
                        "tools": "not_found", "empty": "invalid", "after": "budget_exhausted"})
            )
        );
        assert_eq!(outcome.total_tokens, 51);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_tool_calls_pass_the_same_approvals() {
    for engine in common::engines() {
        let replies = json!({"replies": [
            {"turn": 1, "text": "", "tool_calls": [{"name": "fs.write", "arguments": {"path": "by-model.txt", "text": "x"}}]},
            {"turn": 2, "text": "done"}
        ]});
        let (options, dir) = folder_options(engine, replies);
        let script = r#"export default async function (a, g) { return (await g.agent({prompt: "p", tools: ["fs.write"]})).text; }"#;
        let outcome = common::run(script, json!({}), &options).await;
        assert_eq!(
            outcome.result,
            Some(json!("done")),
            "the denial went back to the model"
        );
        assert!(!dir.path().join("by-model.txt").exists());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_bindings_are_not_reachable_from_js() {
    for engine in common::engines() {
        let (options, _) = folder_options(engine, json!({}));
        let script = r#"
        export default async function (args, g) {
          const names = Object.getOwnPropertyNames(globalThis);
          const leaks = names.filter((n) => /host|start|native|settle/i.test(n));
          let caller;
          try { caller = typeof g.agent.caller; } catch (e) { caller = "throws"; }
          return {leaks, caller, source: String(g.tool).includes("native") ? "native" : "js"};
        }"#;
        let outcome = common::run(script, json!({}), &options).await;
        assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
        let result = outcome.result.expect("result");
        assert_eq!(result["leaks"], json!([]));
        assert_eq!(result["caller"], "throws");
    }
}

/// A run with a 10-token cap, `fs.write` allowed in `dir`, and a mock that costs 20 tokens.
fn forged_run(dir: &tempfile::TempDir) -> Arc<RunShared> {
    let mut policy = ApprovalPolicy::default();
    policy.set("fs.write", Policy::Allow);
    RunShared::new(RunParts {
        run_id: "r".into(),
        token_cap: Some(10),
        approvals: Approvals::new(
            policy,
            Arc::new(NobodyToAsk),
            std::time::Duration::from_secs(1),
        ),
        provider: Arc::new(
            MockProvider::from_json(json!({"default": {"text": "x", "tokens": 20}})).expect("mock"),
        ),
        tools: ToolRegistry::standard(Some(dir.path().to_path_buf())).expect("tools"),
        catalog: Arc::new(EmptyCatalog),
        events: Events::new(Arc::new(NullSink)),
        engine: EngineKind::Boa.build().expect("boa"),
        limits: Default::default(),
        max_concurrency: 4,
        cancel: CancellationToken::new(),
        clock: runner::host::time::RunClock::new(Default::default()),
        seed: 0,
    })
}

/// Tool calls that escape the folder, are not JSON objects, or name a tool without a policy.
async fn forged_tool_calls_are_checked(invocation: &mut Invocation) {
    let escape = invocation
        .start_tool("fs.write", r#"{"path": "../escape.txt", "text": "x"}"#)
        .expect("started");
    let (_, outcome) = invocation.wait_any(&[escape]).await;
    assert_eq!(outcome.unwrap_err().code, FailureCode::Denied);
    for forged in ["not json", "[1, 2]", "\"path\""] {
        assert_eq!(
            invocation.start_tool("fs.write", forged).unwrap_err().code,
            FailureCode::Invalid,
            "{forged}"
        );
    }
    let unlisted = invocation
        .start_tool("fs.read", r#"{"path": "x"}"#)
        .expect("started");
    let (_, outcome) = invocation.wait_any(&[unlisted]).await;
    assert_eq!(
        outcome.unwrap_err().code,
        FailureCode::Denied,
        "a tool without a policy is denied"
    );
}

/// The host interface itself, called directly with forged arguments (what a guest that skipped
/// the prelude entirely could do).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_host_calls_with_forged_arguments_are_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = forged_run(&dir);
    let mut invocation = Invocation::new(
        run.clone(),
        vec!["top".into()],
        tokio::runtime::Handle::current(),
    );

    let request = |max_tokens| AgentRequest {
        prompt: "p".into(),
        system: None,
        model: None,
        max_tokens,
        label: None,
        tools: vec![],
        max_turns: None,
    };
    let first = invocation
        .start_agent(request(Some(u32::MAX)))
        .expect("admitted under the cap");
    let (handle, outcome) = invocation.wait_any(&[first]).await;
    assert_eq!(handle, first);
    assert!(outcome.is_ok());
    assert_eq!(
        run.budget.used(),
        11,
        "output clipped to the 10 tokens left: 1 in + 10 out"
    );
    let refused = invocation.start_agent(request(None)).unwrap_err();
    assert_eq!(refused.code, FailureCode::BudgetExhausted);

    forged_tool_calls_are_checked(&mut invocation).await;

    // Handles this graph never started, or already collected, are refused.
    let (h, outcome) = invocation.wait_any(&[9999]).await;
    assert_eq!((h, outcome.unwrap_err().code), (9999, FailureCode::Invalid));
    let (_, outcome) = invocation.wait_any(&[first]).await;
    assert_eq!(outcome.unwrap_err().code, FailureCode::Invalid);
    let (_, outcome) = invocation.wait_any(&[]).await;
    assert_eq!(outcome.unwrap_err().code, FailureCode::Invalid);
    assert_eq!(
        invocation.start_sleep(u32::MAX).unwrap_err().code,
        FailureCode::Invalid
    );
    assert!(
        !dir.path()
            .parent()
            .expect("parent")
            .join("escape.txt")
            .exists()
    );
}
