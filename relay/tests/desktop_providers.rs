//! `relay desktop run` takes the same agent-provider flags and providers file as `runner run`
//! (`runner/tests/provider_*.rs` test the providers themselves): a queued run's agents go to the
//! provider the file names, with the key from the environment variable it names; a bad file or
//! flag stops it before it contacts the service.

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use serde_json::{Value, json};

fn desktop_run(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_relay"))
        .arg("desktop")
        .arg("--state")
        .arg(dir.join("desktop.db"))
        .args(["run", "--service", "http://127.0.0.1:9", "--token", "grd_x"])
        .args(args)
        .env_remove("RELAY_SERVICE_URL")
        .env_remove("RELAY_DESKTOP_TOKEN")
        .output()
        .expect("run relay")
}

#[test]
fn the_desktop_relay_reads_the_providers_file_and_flags() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("providers.toml");
    std::fs::write(
        &file,
        "[providers.local]\nkind = \"openai\"\napi_key = \"sk-do-not-print-me\"\n",
    )
    .expect("file");
    let output = desktop_run(dir.path(), &["--providers", file.to_str().expect("utf-8")]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("never read from files"), "{stderr}");
    assert!(!stderr.contains("sk-do-not-print-me"), "{stderr}");

    let output = desktop_run(dir.path(), &["--provider", "anthropic"]);
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--model"),
        "a provider needs a model"
    );

    let output = desktop_run(
        dir.path(),
        &[
            "--provider",
            "openai",
            "--model",
            "m",
            "--replies",
            "r.json",
        ],
    );
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot be used with"));
}

/// Kills the child it holds when dropped, so a failing test leaves no relay behind.
pub(crate) struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the stand-in provider received: the request body and its `authorization` header.
type Received = Arc<Mutex<Vec<(Value, String)>>>;

/// A stand-in for an OpenAI-compatible server: every chat completion streams "hi from the
/// provider" with 11 prompt and 4 completion tokens.
async fn scripted_provider() -> (String, Received) {
    scripted_provider_using(11, 4).await
}

/// [`scripted_provider`] reporting `prompt` and `completion` tokens for every completion.
async fn scripted_provider_using(prompt: u64, completion: u64) -> (String, Received) {
    let received: Received = Arc::default();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post({
            let received = received.clone();
            move |headers: HeaderMap, axum::Json(body): axum::Json<Value>| async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                received.lock().expect("lock").push((body, auth));
                let chunks = [
                    json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi from the provider"}, "finish_reason": null}]}),
                    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
                    json!({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}}),
                ];
                let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
                body.push_str("data: [DONE]\n\n");
                ([("content-type", "text/event-stream")], body)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}/v1", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, received)
}

pub(crate) fn desktop(state: &std::path::Path, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_relay"))
        .arg("desktop")
        .arg("--state")
        .arg(state)
        .args(args)
        .output()
        .expect("relay desktop");
    assert!(output.status.success(), "{args:?}: {output:?}");
    String::from_utf8(output.stdout)
        .expect("utf-8")
        .trim()
        .to_owned()
}

/// A service with the project Acme (owned by alice), its desktop's token, and an MCP client of
/// an agent with every scope on it.
async fn acme() -> (common::TestService, String, String, common::McpClient) {
    let service = common::TestService::start().await;
    let project = service.project("Acme", "alice").await;
    let desktop_token = service.desktop(&project).await.token;
    let agent = common::mcp_client(
        &service.mcp_url(),
        &service.full_agent(&project).await,
        common::Era::Current,
    )
    .await;
    (service, project, desktop_token, agent)
}

const KEY: &str = "sk-desktop-provider-test-7c1d9e";
/// How long the desktop relay may take to upload the shared session.
const SYNC_DEADLINE: Duration = Duration::from_secs(60);
/// How long the queued run may take to finish.
const RUN_DEADLINE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_run_uses_the_provider_the_providers_file_names() {
    let (service, project, desktop_token, agent) = acme().await;
    let (provider_url, received) = scripted_provider().await;

    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("desktop.db");
    let providers = dir.path().join("providers.toml");
    let session =
        share_a_graph_that_asks_a_model(dir.path(), &state, &providers, &project, &provider_url);

    // Everything the relay prints, even at trace level, to look for the key in.
    let log_path = dir.path().join("relay.log");
    let relay = start_desktop_relay(&state, &providers, &service.base, &desktop_token, &log_path);

    // The relay's first pass uploads the shared session.
    wait_until_synced(&agent, &project, &session).await;
    let queued = common::call(
        &agent,
        "run_graph_session",
        json!({"graph_session_id": session, "arguments": {"question": "hello?"},
               "idempotency_key": "desktop-provider-1"}),
    )
    .await;
    let command = common::ok(&queued)["command_id"]
        .as_str()
        .expect("command id")
        .to_owned();
    let run = wait_until_finished(&agent, &command).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        run["result"],
        json!({"text": "hi from the provider", "tokens": 15, "model": "m"})
    );
    assert_eq!(run["total_tokens"], 15);

    let received = received.lock().expect("lock").clone();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].0["model"], "m");
    assert_eq!(received[0].0["messages"][0]["content"], "hello?");
    assert_eq!(received[0].1, format!("Bearer {KEY}"));

    drop(relay);
    let printed = std::fs::read_to_string(&log_path).expect("log");
    assert!(!printed.is_empty(), "the relay logged");
    assert!(!printed.contains(KEY), "the key was printed: {printed}");
    let history = desktop(&state, &["history", "--json"]);
    assert!(history.contains("hi from the provider"), "{history}");
    assert!(!history.contains(KEY));
    agent.cancel().await.expect("close");
    service.stop().await;
}

/// Writes a graph that asks a `local:` model and a providers file whose `local` provider is the
/// stand-in at `provider_url` (its key in `GRAPHRELAY_DESKTOP_TEST_KEY`), then adds the graph
/// to the desktop state and shares it with `project`. Returns the session's id.
pub(crate) fn share_a_graph_that_asks_a_model(
    dir: &Path,
    state: &Path,
    providers: &Path,
    project: &str,
    provider_url: &str,
) -> String {
    const ASK: &str = r#"export const meta = {name: "Ask", slug: "ask", version: "1.0.0", description: "asks a model"};
export default async function (args, g) {
  const r = await g.agent({prompt: args.question, model: "local:m"});
  return {text: r.text, tokens: r.tokens, model: r.model};
}"#;
    share_graph(dir, state, providers, project, provider_url, ASK)
}

/// [`share_a_graph_that_asks_a_model`] with the graph `script`.
fn share_graph(
    dir: &Path,
    state: &Path,
    providers: &Path,
    project: &str,
    provider_url: &str,
    script: &str,
) -> String {
    let graph = dir.join("ask.js");
    std::fs::write(&graph, script).expect("graph");
    std::fs::write(
        providers,
        format!(
            "default = \"local\"\n[providers.local]\nkind = \"openai\"\nbase_url = \"{provider_url}\"\n\
             model = \"m\"\napi_key_env = \"GRAPHRELAY_DESKTOP_TEST_KEY\"\n"
        ),
    )
    .expect("providers file");
    let session = desktop(state, &["session", "add", graph.to_str().expect("utf-8")]);
    desktop(state, &["project", "enable", project]);
    desktop(
        state,
        &["share", "--project", project, "--session", &session],
    );
    session
}

/// Starts `relay desktop run` against the service with the providers file and the key in the
/// environment, everything it prints (at trace level) going to `log_path`.
fn start_desktop_relay(
    state: &Path,
    providers: &Path,
    service: &str,
    token: &str,
    log_path: &Path,
) -> Child {
    start_desktop_relay_with(state, providers, service, token, log_path, &[])
}

/// [`start_desktop_relay`] with `extra` flags.
fn start_desktop_relay_with(
    state: &Path,
    providers: &Path,
    service: &str,
    token: &str,
    log_path: &Path,
    extra: &[&str],
) -> Child {
    let mut flags = vec!["--poll-interval", "0.2"];
    flags.extend_from_slice(extra);
    spawn_desktop_relay(state, providers, [service, token], log_path, &flags)
}

/// `relay desktop run` as [`start_desktop_relay`] starts it, with `flags` instead of its quick
/// timed passes.
pub(crate) fn spawn_desktop_relay(
    state: &Path,
    providers: &Path,
    [service, token]: [&str; 2],
    log_path: &Path,
    flags: &[&str],
) -> Child {
    let log = std::fs::File::create(log_path).expect("log");
    Child(
        Command::new(env!("CARGO_BIN_EXE_relay"))
            .arg("desktop")
            .arg("--state")
            .arg(state)
            .args(["run", "--service", service, "--token", token])
            .args(flags)
            .arg("--providers")
            .arg(providers)
            .env("GRAPHRELAY_DESKTOP_TEST_KEY", KEY)
            .env("RUST_LOG", "trace")
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("relay desktop run"),
    )
}

/// Waits (up to `SYNC_DEADLINE`) until the agent sees `session` as the project's first session.
pub(crate) async fn wait_until_synced(agent: &common::McpClient, project: &str, session: &str) {
    let deadline = tokio::time::Instant::now() + SYNC_DEADLINE;
    loop {
        let listed = common::ok(
            &common::call(agent, "list_graph_sessions", json!({"project_id": project})).await,
        );
        if listed["sessions"][0]["graph_session_id"] == session {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never synced: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (up to `RUN_DEADLINE`) until the run has finished, and returns it.
pub(crate) async fn wait_until_finished(agent: &common::McpClient, command: &str) -> Value {
    let deadline = tokio::time::Instant::now() + RUN_DEADLINE;
    loop {
        let run =
            common::ok(&common::call(agent, "get_graph_run", json!({"command_id": command})).await);
        if matches!(
            run["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        ) {
            break run;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never finished: {run}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_run_that_loops_on_agents_stops_at_the_default_token_cap() {
    const LOOP: &str = r#"export const meta = {name: "Loop", slug: "loop", version: "1.0.0", description: "asks forever"};
export default async function (args, g) {
  for (;;) { await g.agent({prompt: "once more", model: "local:m"}); }
}"#;
    let (service, project, desktop_token, agent) = acme().await;
    // 60,000 tokens an answer: the default cap of 200,000 is reached on the fourth.
    let (provider_url, received) = scripted_provider_using(50_000, 10_000).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("desktop.db");
    let providers = dir.path().join("providers.toml");
    let session = share_graph(
        dir.path(),
        &state,
        &providers,
        &project,
        &provider_url,
        LOOP,
    );
    // No --default-max-tokens: the default applies.
    let log_path = dir.path().join("relay.log");
    let relay = start_desktop_relay(&state, &providers, &service.base, &desktop_token, &log_path);
    wait_until_synced(&agent, &project, &session).await;
    let queued = common::call(
        &agent,
        "run_graph_session",
        json!({"graph_session_id": session, "idempotency_key": "loop-until-cap"}),
    )
    .await;
    let command = common::ok(&queued)["command_id"]
        .as_str()
        .expect("command id")
        .to_owned();
    let run = wait_until_finished(&agent, &command).await;
    assert_eq!(run["status"], "failed", "{run}");
    let error = run["error"].as_str().unwrap_or_default();
    assert!(error.contains("budget_exhausted"), "{run}");
    let calls = received.lock().expect("lock").len();
    assert_eq!(
        calls, 4,
        "the loop stopped once 200,000 tokens were used: {run}"
    );
    assert_eq!(run["total_tokens"], 240_000, "{run}");
    drop(relay);
    agent.cancel().await.expect("close");
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_graph_run_shows_a_real_model_runs_tokens_growing() {
    let Some(llm) = crate::llm::local_llm().await else {
        return;
    };
    let (service, project, desktop_token, agent) = acme().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("desktop.db");
    let providers = dir.path().join("providers.toml");
    let session = share_with_local_model(dir.path(), &state, &providers, &project, &llm);
    let log_path = dir.path().join("relay.log");
    let relay = start_desktop_relay(&state, &providers, &service.base, &desktop_token, &log_path);
    wait_until_synced(&agent, &project, &session).await;
    let queued = common::call(
        &agent,
        "run_graph_session",
        json!({"graph_session_id": session, "idempotency_key": "progress-real-model"}),
    )
    .await;
    let command = common::ok(&queued)["command_id"]
        .as_str()
        .expect("command id")
        .to_owned();
    let seen = tokens_seen_growing(&agent, &command).await;
    eprintln!("tokens_used seen growing while running: {seen:?}");
    common::call(&agent, "cancel_graph_run", json!({"command_id": command})).await;
    let run = wait_until_finished(&agent, &command).await;
    assert_eq!(run["status"], "cancelled", "{run}");
    drop(relay);
    agent.cancel().await.expect("close");
    service.stop().await;
}

/// Shares `AGENTS` with `project` through a providers file whose `local` provider is the
/// local model server, by the model name it answers to. Returns the session's id.
fn share_with_local_model(
    dir: &Path,
    state: &Path,
    providers: &Path,
    project: &str,
    llm: &crate::llm::LocalLlm,
) -> String {
    const AGENTS: &str = r#"export const meta = {name: "Agents", slug: "agents", version: "1.0.0", description: "asks a model again and again"};
export default async function (args, g) {
  for (let i = 0; i < 60; i++) {
    await g.agent({label: "turn-" + i, prompt: "Say hello in five words.", model: "local:smollm2", maxTokens: 24});
  }
  return "done";
}"#;
    let session = share_graph(dir, state, providers, project, &llm.base_url, AGENTS);
    std::fs::write(
        providers,
        format!(
            "default = \"local\"\n[providers.local]\nkind = \"openai\"\nbase_url = \"{}\"\n\
             model = \"{}\"\napi_key_env = \"GRAPHRELAY_DESKTOP_TEST_KEY\"\n",
            llm.base_url,
            crate::llm::MODEL
        ),
    )
    .expect("providers file");
    session
}

/// Reads `command` as the agent does until its `progress.tokens_used` has been seen growing
/// twice while it runs (at most 180 s); returns the values seen.
async fn tokens_seen_growing(agent: &common::McpClient, command: &str) -> Vec<u64> {
    let mut seen: Vec<u64> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    while seen.len() < 2 {
        let run =
            common::ok(&common::call(agent, "get_graph_run", json!({"command_id": command})).await);
        assert_ne!(run["status"], "failed", "{run}");
        if run["status"] == "running"
            && let Some(tokens) = run["progress"]["tokens_used"].as_u64()
            && tokens > seen.last().copied().unwrap_or(0)
        {
            assert_eq!(run["progress"]["token_cap"], 200_000, "{run}");
            assert!(
                run["progress"]["last_event"]
                    .as_str()
                    .is_some_and(|l| l.starts_with("turn-")),
                "{run}"
            );
            seen.push(tokens);
        }
        assert!(
            run["status"] != "completed" && tokio::time::Instant::now() < deadline,
            "the run ended (or time ran out) before its tokens were seen growing: {seen:?} {run}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    seen
}

/// Queues a run of `session` asking "compiled?" and waits for it to finish.
async fn run_to_the_end(agent: &common::McpClient, session: &str, key: &str) -> Value {
    let queued = common::call(
        agent,
        "run_graph_session",
        json!({"graph_session_id": session, "arguments": {"question": "compiled?"},
               "idempotency_key": key}),
    )
    .await;
    let command = common::ok(&queued)["command_id"]
        .as_str()
        .expect("command id")
        .to_owned();
    wait_until_finished(agent, &command).await
}

/// Waits (up to three minutes: a build takes seconds of CPU, more on a busy machine) until the
/// file at `log_path` contains `text`.
async fn wait_for_log(log_path: &Path, text: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    loop {
        let printed = std::fs::read_to_string(log_path).unwrap_or_default();
        if printed.contains(text) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never logged `{text}`: {printed}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_desktop_run_compiles_shared_graphs_unless_told_not_to() {
    let (service, project, desktop_token, agent) = acme().await;
    let (provider_url, _received) = scripted_provider().await;
    for (compiled, extra) in [(true, &[][..]), (false, &["--no-compiled-graphs"][..])] {
        let dir = tempfile::tempdir().expect("temp dir");
        let state = dir.path().join("desktop.db");
        let providers = dir.path().join("providers.toml");
        let session = share_a_graph_that_asks_a_model(
            dir.path(),
            &state,
            &providers,
            &project,
            &provider_url,
        );
        let log_path = dir.path().join("relay.log");
        let relay = start_desktop_relay_with(
            &state,
            &providers,
            &service.base,
            &desktop_token,
            &log_path,
            extra,
        );
        wait_until_synced(&agent, &project, &session).await;
        if compiled {
            // Shared is enough: the relay compiles the graph beside its state.
            wait_for_log(&log_path, "compiled a shared graph").await;
        }
        let run = run_to_the_end(&agent, &session, &format!("compile-{compiled}")).await;
        assert_eq!(run["status"], "completed", "{run}");
        assert_eq!(run["result"]["text"], "hi from the provider");
        drop(relay);
        let printed = std::fs::read_to_string(&log_path).expect("log");
        let artifacts: Vec<_> = std::fs::read_dir(dir.path().join("desktop.db.compiled"))
            .map(|entries| entries.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        if compiled {
            assert!(printed.contains("(engine wasm-compiled,"), "{printed}");
            assert_eq!(artifacts.len(), 1, "{artifacts:?}");
        } else {
            assert!(printed.contains("(engine wasm,"), "{printed}");
            assert!(artifacts.is_empty(), "{artifacts:?}");
        }
    }
    agent.cancel().await.expect("close");
    service.stop().await;
}
