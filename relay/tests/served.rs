//! `relay serve` as an operator runs it, for the tests of operating it: a child process at its
//! default log level whose every log line is kept, signals sent to it, its `/metrics` read, and
//! MCP calls made from a client address of the test's choosing (any of `127.0.0.0/8`).

use std::net::{IpAddr, SocketAddr};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relay_protocol::clock::Stopwatch;
use serde_json::{Value, json};

use crate::cli::Child;

/// How long a test waits for something a served process is sure to do (start, count, exit),
/// on a machine busy with other builds.
pub(crate) const PATIENCE: Duration = Duration::from_secs(90);

/// A running `relay serve` and its log.
pub(crate) struct Served {
    pub(crate) child: Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
    /// Its listener's address.
    pub(crate) address: SocketAddr,
    /// `http://ADDR/metrics` of its metrics listener.
    pub(crate) metrics: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Served {
    /// `relay serve --db DB --listen 127.0.0.1:0 --metrics-listen … ARGS` with `RUST_LOG`
    /// unset (the default filter) and `env` set; returns once it says where it serves.
    pub(crate) async fn start(db: &str, args: &[&str], env: &[(&str, &str)]) -> Served {
        use std::io::BufRead as _;
        let metrics_address = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe");
            probe.local_addr().expect("address").to_string()
        };
        let mut command = Command::new(env!("CARGO_BIN_EXE_relay"));
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--db", db])
            .args(["--metrics-listen", &metrics_address])
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("RELAY_DB")
            .env_remove("RELAY_DATABASE_URL")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = Child(command.spawn().expect("start relay serve"));
        let stderr = child.0.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                kept.lock().expect("log").push(line);
            }
        });
        let mut served = Served {
            child,
            base: String::new(),
            address: SocketAddr::from(([127, 0, 0, 1], 0)),
            metrics: format!("http://{metrics_address}/metrics"),
            log,
        };
        let line = served.wait_for_line("serving MCP at http://").await;
        let start = line.find("http://").expect("a URL");
        let end = line[start..].find("/mcp").expect("/mcp") + start;
        served.base = line[start..end].to_owned();
        served.address = served.base["http://".len()..]
            .parse()
            .expect("a socket address");
        served
    }

    /// Every line logged so far.
    pub(crate) fn log(&self) -> Vec<String> {
        self.log.lock().expect("log").clone()
    }

    /// The first line containing `needle`, waiting for it.
    pub(crate) async fn wait_for_line(&mut self, needle: &str) -> String {
        let watch = Stopwatch::start();
        loop {
            if let Some(line) = self.log().into_iter().find(|l| l.contains(needle)) {
                return line;
            }
            if let Some(exit) = self.child.0.try_wait().expect("wait") {
                panic!(
                    "relay serve exited ({exit}) before logging {needle:?}:\n{}",
                    self.log().join("\n")
                );
            }
            assert!(
                watch.elapsed() < PATIENCE,
                "no line with {needle:?}:\n{}",
                self.log().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends `signal` (`TERM`, `HUP`, …) to the process.
    pub(crate) fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.0.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{signal}");
    }

    /// Waits for the process to exit; its status.
    pub(crate) async fn exited(&mut self) -> std::process::ExitStatus {
        let watch = Stopwatch::start();
        loop {
            if let Some(exit) = self.child.0.try_wait().expect("wait") {
                return exit;
            }
            assert!(watch.elapsed() < PATIENCE, "still running");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// One gauge or counter of its `/metrics` (0 when absent), summed over series with `labels`.
    pub(crate) async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let samples = crate::operations::scrape(&crate::common::http_client(), &self.metrics).await;
        crate::operations::value(&samples, name, labels)
    }

    /// Waits until `ready` holds of its `/metrics` samples.
    pub(crate) async fn wait_for_metrics(
        &self,
        what: &str,
        ready: impl Fn(&[prometheus_parse::Sample]) -> bool,
    ) {
        let http = crate::common::http_client();
        let watch = Stopwatch::start();
        loop {
            let samples = crate::operations::scrape(&http, &self.metrics).await;
            if ready(&samples) {
                return;
            }
            assert!(watch.elapsed() < PATIENCE, "never {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// An HTTP client whose connections come from `source` (any loopback address) and are never
/// reused, as many separate clients behind one proxy look.
pub(crate) fn client_from(source: IpAddr) -> reqwest::Client {
    let builder = graphrelay_net::client_builder()
        .expect("client builder")
        .local_address(source)
        .pool_max_idle_per_host(0);
    graphrelay_net::build(builder).expect("client")
}

/// `tools/call` of `tool` with `arguments` at `mcp_url` (current protocol), answered: the HTTP
/// status and the JSON-RPC answer (`null` when the body holds none), or the error that cut it.
pub(crate) async fn call_tool(
    http: &reqwest::Client,
    mcp_url: &str,
    token: &str,
    tool: &str,
    arguments: Value,
) -> Result<(u16, Value), reqwest::Error> {
    let client = crate::common::raw::RawClient {
        http: http.clone(),
        url: mcp_url.to_owned(),
        token: token.to_owned(),
        tasks: false,
    };
    let response = client
        .post("tools/call", json!({"name": tool, "arguments": arguments}))
        .send()
        .await?;
    let status = response.status().as_u16();
    let text = response.text().await?;
    Ok((
        status,
        crate::common::raw::answer_of(&text).unwrap_or(Value::Null),
    ))
}

/// `get_graph_run` of `id`, waiting up to 45 s.
pub(crate) async fn wait_for_run(
    http: &reqwest::Client,
    mcp_url: &str,
    token: &str,
    id: &str,
) -> Result<(u16, Value), reqwest::Error> {
    call_tool(
        http,
        mcp_url,
        token,
        "get_graph_run",
        json!({"command_id": id, "wait_seconds": 45}),
    )
    .await
}

/// The run's view in a `get_graph_run` answer (its `structuredContent`), if it is one.
pub(crate) fn run_view(answer: &Value) -> Option<&Value> {
    let result = answer.get("result")?;
    (result["isError"] != true).then_some(&result["structuredContent"])
}
