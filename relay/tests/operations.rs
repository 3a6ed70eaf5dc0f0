//! What an operator relies on: `relay serve` stops on SIGTERM, answering its held long polls
//! before it goes, and its probes answer whatever Host the orchestrator sends.

use std::process::Command;
use std::time::Duration;

use relay_protocol::clock::Stopwatch;
use serde_json::json;

use crate::cli::{plain, relay, serve_with_base};
use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_held_long_polls_and_exits_within_ten_seconds() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let project = plain(&relay(&db, &["project", "create", "Demo"]));
    let token = plain(&relay(
        &db,
        &["token", "create", "--desktop", "--project", &project],
    ));
    let (mut child, base) = serve_with_base(&db, &[]).await;
    let desktop = common::Desktop {
        http: common::http_client(),
        base,
        token,
    };
    desktop.sync(&project, &[1]).await;
    let held = tokio::spawn(async move {
        let watch = Stopwatch::start();
        let answer = desktop
            .sync_raw(&json!({"project_id": project, "sessions": [common::session(1)], "wait_ms": 25_000}))
            .await;
        (answer, watch.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = child.0.id().to_string();
    let watch = Stopwatch::start();
    let sent = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("run kill");
    assert!(sent.success());
    let ((status, body), waited) = held.await.expect("held sync");
    assert_eq!(
        status, 200,
        "the held long poll is answered, not cut: {body}"
    );
    assert!(
        waited < Duration::from_secs(20),
        "answered at the stop, not at its 25 s deadline: {waited:?}"
    );
    let exit = loop {
        if let Some(exit) = child.0.try_wait().expect("wait") {
            break exit;
        }
        assert!(
            watch.elapsed() < Duration::from_secs(15),
            "still running 15 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        exit.success(),
        "a stop on SIGTERM is a clean exit: {exit:?}"
    );
    assert!(
        watch.elapsed() < Duration::from_secs(10),
        "exited {:?} after SIGTERM",
        watch.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answer_whatever_host_the_orchestrator_sends() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    plain(&relay(&db, &["project", "create", "Demo"]));
    let (_child, base) = serve_with_base(&db, &[]).await;
    for (path, status) in [("/healthz", "ok"), ("/readyz", "ready")] {
        let response = common::http_client()
            .get(format!("{base}{path}"))
            .header("host", "10.1.2.3:8787")
            .send()
            .await
            .expect("probe answered");
        let (code, body) = common::decode(response).await;
        assert_eq!(
            (code, body["status"].as_str()),
            (200, Some(status)),
            "{path}: {body}"
        );
    }
    let refused = common::http_client()
        .get(format!("{base}/.well-known/oauth-protected-resource"))
        .header("host", "10.1.2.3:8787")
        .send()
        .await
        .expect("answered");
    assert_eq!(refused.status(), 421, "other routes still check the Host");
}

/// `relay serve --metrics-listen` serves `/metrics` on that address only: a held long poll is
/// counted while it is held and not after; the public listener has no `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_held_long_polls_on_their_own_listener() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let project = plain(&relay(&db, &["project", "create", "Demo"]));
    let token = plain(&relay(
        &db,
        &["token", "create", "--desktop", "--project", &project],
    ));
    let metrics_port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe");
        probe.local_addr().expect("address").port()
    };
    let metrics_address = format!("127.0.0.1:{metrics_port}");
    let (_child, base) = serve_with_base(&db, &["--metrics-listen", &metrics_address]).await;
    let http = common::http_client();
    let metrics = format!("http://{metrics_address}/metrics");
    let held_syncs = relay_service::http::metrics::held_syncs;
    let read = || async {
        let answer = http.get(&metrics).send().await.expect("metrics answer");
        assert_eq!(answer.status(), 200);
        answer.text().await.expect("metrics text")
    };
    assert_eq!(held_syncs(&read().await), Some(0));
    let desktop = common::Desktop {
        http: http.clone(),
        base: base.clone(),
        token,
    };
    desktop.sync(&project, &[1]).await;
    let held = tokio::spawn(async move {
        desktop
            .sync_raw(
                &json!({"project_id": project, "sessions": [common::session(1)], "wait_ms": 3_000}),
            )
            .await
    });
    let watch = Stopwatch::start();
    loop {
        if held_syncs(&read().await) == Some(1) {
            break;
        }
        assert!(
            watch.elapsed() < Duration::from_secs(10),
            "the held sync is never counted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = read().await;
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let (name, value) = line.rsplit_once(' ').expect("name and value");
        // The relay's own series, and the standard process ones (`process_*`) beside them.
        assert!(
            name.starts_with("relay_") || name.starts_with("process_"),
            "{line}"
        );
        assert!(value.parse::<f64>().is_ok(), "{line}");
    }
    assert!(text.contains("# TYPE relay_held_requests gauge"), "{text}");
    let (status, _) = held.await.expect("held sync");
    assert_eq!(status, 200);
    assert_eq!(held_syncs(&read().await), Some(0), "no longer held");
    let public = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("answer");
    assert_eq!(public.status(), 404, "no /metrics on the public listener");
}

/// A free loopback address for a listener the test does not bind itself.
fn free_address() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe");
    probe.local_addr().expect("address").to_string()
}

/// One scrape of `/metrics`: every line is a comment, a sample or blank (a parser of its own
/// reads it; nothing is skipped as unreadable), and its samples.
pub(crate) async fn scrape(http: &reqwest::Client, url: &str) -> Vec<prometheus_parse::Sample> {
    let answer = http.get(url).send().await.expect("metrics answer");
    assert_eq!(answer.status(), 200);
    let content_type = answer.headers()[reqwest::header::CONTENT_TYPE].clone();
    assert!(
        content_type
            .to_str()
            .is_ok_and(|t| t.starts_with("text/plain; version=0.0.4")),
        "{content_type:?}"
    );
    let text = answer.text().await.expect("metrics text");
    for line in text.lines() {
        assert!(
            !matches!(
                prometheus_parse::LineInfo::parse(line),
                prometheus_parse::LineInfo::Ignored
            ),
            "not Prometheus text: {line}"
        );
    }
    let lines = text.lines().map(|line| Ok(line.to_owned()));
    prometheus_parse::Scrape::parse(lines)
        .expect("parses as Prometheus text")
        .samples
}

/// The value of the counter or gauge `name` whose labels include `labels` (0 when absent).
pub(crate) fn value(
    samples: &[prometheus_parse::Sample],
    name: &str,
    labels: &[(&str, &str)],
) -> f64 {
    samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => panic!("{name} is not a counter or gauge"),
        })
        .sum()
}

/// How many observations the histogram `name` with `labels` has.
fn observations(samples: &[prometheus_parse::Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            prometheus_parse::Value::Histogram(buckets) => buckets
                .iter()
                .find(|b| b.less_than.is_infinite())
                .map_or(0.0, |b| b.count),
            _ => panic!("{name} is not a histogram"),
        })
        .sum()
}

/// A project with a desktop token and an agent token (run and read) in the database `db`.
pub(crate) fn demo_project(db: &std::path::Path) -> (String, String, String) {
    let project = plain(&relay(db, &["project", "create", "Demo"]));
    let desktop_token = plain(&relay(
        db,
        &["token", "create", "--desktop", "--project", &project],
    ));
    let agent_token = plain(&relay(
        db,
        &[
            "token",
            "create",
            "--agent",
            "claude",
            "--project",
            &project,
            "--scope",
            "osfoundry:read",
            "--scope",
            "osfoundry:run",
        ],
    ));
    (project, desktop_token, agent_token)
}

/// The metrics after one probe of `/healthz`, one unknown path and one queued run: the probe
/// counted once (scrapes are another listener's) and timed, the 404 as `unmatched`, the run
/// in the queue's depth.
fn assert_probe_and_queue_counted(
    before: &[prometheus_parse::Sample],
    after_queue: &[prometheus_parse::Sample],
) {
    let health = [("route", "/healthz"), ("method", "GET"), ("status", "200")];
    assert_eq!(
        value(after_queue, "relay_runs", &[("status", "queued")]),
        1.0
    );
    assert_eq!(value(after_queue, "relay_store_up", &[]), 1.0);
    assert_eq!(
        value(after_queue, "relay_http_requests_total", &health)
            - value(before, "relay_http_requests_total", &health),
        1.0,
        "the probe just made is counted once (scrapes are not counted: another listener)"
    );
    assert_eq!(
        observations(
            after_queue,
            "relay_http_request_duration_seconds",
            &health[..2]
        ),
        value(after_queue, "relay_http_requests_total", &health),
        "each answer of the route is timed"
    );
    assert!(
        value(
            after_queue,
            "relay_http_requests_total",
            &[("route", "unmatched"), ("status", "404")]
        ) >= 1.0
    );
}

/// The metrics after a run's start (200) and another execution's start (409): one claim won,
/// one conflict, the run counted as running, the route labelled by its template.
fn assert_one_start_won_and_one_refused(after: &[prometheus_parse::Sample], id: &str) {
    let claims = |outcome| {
        value(
            after,
            "relay_claims_total",
            &[("kind", "run_start"), ("outcome", outcome)],
        )
    };
    assert_eq!((claims("won"), claims("conflict")), (1.0, 1.0));
    assert_eq!(value(after, "relay_runs", &[("status", "queued")]), 0.0);
    assert_eq!(value(after, "relay_runs", &[("status", "running")]), 1.0);
    let started = [
        (
            "route",
            "/external-assistants/graph-relays/commands/:id/started",
        ),
        ("method", "POST"),
    ];
    assert_eq!(
        value(
            after,
            "relay_http_requests_total",
            &[started[0], started[1], ("status", "200")]
        ),
        1.0
    );
    assert_eq!(
        value(
            after,
            "relay_http_requests_total",
            &[started[0], started[1], ("status", "409")]
        ),
        1.0
    );
    assert!(
        after
            .iter()
            .all(|s| s.labels.get("route").is_none_or(|r| !r.contains(id))),
        "route labels are templates, never raw paths"
    );
}

/// `/metrics` parses as Prometheus text and counts what was just done: a probe by its route,
/// a desktop request by its route template (the command id in the path is no label), an
/// unknown path as `unmatched`, a queued run in the queue's depth, a run's start as a claim
/// won and a second start as a conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_as_prometheus_text_and_count_requests_runs_and_claims() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let (project, desktop_token, agent_token) = demo_project(&db);
    let metrics_address = free_address();
    let (_child, base) = serve_with_base(&db, &["--metrics-listen", &metrics_address]).await;
    let http = common::http_client();
    let url = format!("http://{metrics_address}/metrics");
    let before = scrape(&http, &url).await;
    let health_answer = http
        .get(format!("{base}/healthz"))
        .send()
        .await
        .expect("probe");
    assert_eq!(health_answer.status(), 200);
    let unknown = http
        .get(format!("{base}/no/such/page"))
        .send()
        .await
        .expect("answer");
    assert_eq!(unknown.status(), 404);

    let desktop = common::Desktop {
        http: http.clone(),
        base: base.clone(),
        token: desktop_token,
    };
    desktop.sync(&project, &[1]).await;
    let agent =
        common::mcp_client(&format!("{base}/mcp"), &agent_token, common::Era::Current).await;
    let queued = common::ok(
        &common::call(
            &agent,
            "run_graph_session",
            common::run_args(1, "metrics-key-1", json!({})),
        )
        .await,
    );
    let id = queued["command_id"]
        .as_str()
        .expect("command id")
        .to_owned();
    let after_queue = scrape(&http, &url).await;
    assert_probe_and_queue_counted(&before, &after_queue);

    assert_eq!(desktop.started(&id, "exec-1").await.0, 200);
    assert_eq!(
        desktop.started(&id, "exec-2").await.0,
        409,
        "another execution's start"
    );
    let after = scrape(&http, &url).await;
    assert_one_start_won_and_one_refused(&after, &id);
    agent.cancel().await.ok();
}

/// `relay serve --log-format json` on `db` with `RUST_LOG=info,tower_http=debug`, and its
/// stderr's lines as they come.
fn serve_logging_json(
    db: &std::path::Path,
) -> (
    crate::cli::Child,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    use std::io::BufRead as _;
    let mut child = crate::cli::Child(
        Command::new(env!("CARGO_BIN_EXE_relay"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--log-format",
                "json",
                "--db",
            ])
            .arg(db)
            // Answers are logged at DEBUG by tower_http: they show only because RUST_LOG says.
            .env("RUST_LOG", "info,tower_http=debug")
            .env_remove("RELAY_DB")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start relay serve"),
    );
    let stderr = child.0.stderr.take().expect("stderr");
    let (lines_in, lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if lines_in.send(line).is_err() {
                break;
            }
        }
    });
    (child, lines)
}

/// GET /healthz with `id` as its `x-request-id` (none: no header); the id the answer echoes.
async fn ask_health(http: &reqwest::Client, base: &str, id: Option<&str>) -> String {
    let mut request = http.get(format!("{base}/healthz"));
    if let Some(id) = id {
        request = request.header("x-request-id", id);
    }
    let answer = request.send().await.expect("answer");
    assert_eq!(answer.status(), 200);
    answer.headers()["x-request-id"]
        .to_str()
        .expect("ascii")
        .to_owned()
}

/// `relay serve --log-format json` with `RUST_LOG`: every line is a JSON object; each request
/// gets an `x-request-id` (the caller's when usable, else a fresh one), echoed in the answer
/// and carried by every line the request logs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_ids_are_echoed_and_on_every_json_log_line_of_their_request() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    plain(&relay(&db, &["project", "create", "Demo"]));
    let (_child, mut lines) = serve_logging_json(&db);
    let mut log: Vec<serde_json::Value> = Vec::new();
    let mut next_line = async || {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.recv())
            .await
            .expect("a log line within 20 s")
            .expect("relay serve is still logging");
        let parsed: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        parsed
    };
    let base = loop {
        let line = next_line().await;
        let message = line["message"].as_str().unwrap_or("").to_owned();
        log.push(line);
        if let Some(start) = message.find("http://") {
            break message[start..message.len() - "/mcp".len()].to_owned();
        }
    };
    let http = common::http_client();
    assert_eq!(
        ask_health(&http, &base, Some("probe-42")).await,
        "probe-42",
        "the caller's id is echoed"
    );
    let fresh = ask_health(&http, &base, None).await;
    assert!(
        uuid::Uuid::parse_str(&fresh).is_ok(),
        "a fresh id is a UUID: {fresh}"
    );
    let long = "x".repeat(200);
    let replaced = ask_health(&http, &base, Some(&long)).await;
    assert!(
        replaced != long && uuid::Uuid::parse_str(&replaced).is_ok(),
        "{replaced}"
    );
    for id in ["probe-42", fresh.as_str(), replaced.as_str()] {
        let answered = loop {
            let answered = |line: &&serde_json::Value| {
                line["span"]["request_id"] == id
                    && line["target"] == "tower_http::trace::on_response"
            };
            if let Some(found) = log.iter().find(answered) {
                break found.clone();
            }
            log.push(next_line().await);
        };
        assert_eq!(answered["span"]["route"], "/healthz", "{answered}");
        assert_eq!(answered["span"]["method"], "GET", "{answered}");
        assert_eq!(answered["status"], 200, "{answered}");
    }
    for line in &log {
        if line["span"]["name"] == "request" {
            assert!(line["span"]["request_id"].is_string(), "{line}");
        }
    }
}

/// One tool call of each outcome through `served`: a run queued (`ok`), an unknown run read
/// (`tool_error`), a run asked for by `reader`, which may only read (`refused`), and calls of
/// `agent` until one is past its rate (`rate_limited`, answered 200 with an in-band error).
async fn one_call_of_each_outcome(
    served: &crate::served::Served,
    project: &str,
    agent: &str,
    reader: &str,
) {
    let http = common::http_client();
    let mcp = format!("{}/mcp", served.base);
    let call = async |token: &str, tool: &str, arguments: serde_json::Value| {
        crate::served::call_tool(&http, &mcp, token, tool, arguments)
            .await
            .expect("answered")
    };
    let run = common::run_args(1, "metrics-outcomes", json!({}));
    let queued = call(agent, "run_graph_session", run).await;
    assert_eq!(queued.1["result"]["isError"], false, "{}", queued.1);
    let unknown = json!({"command_id": uuid::Uuid::new_v4().to_string()});
    let missing = call(agent, "get_graph_run", unknown).await;
    assert_eq!(missing.1["result"]["isError"], true, "{}", missing.1);
    let run = common::run_args(1, "metrics-refused", json!({}));
    let refused = call(reader, "run_graph_session", run).await;
    assert_eq!(refused.0, 403, "{}", refused.1);
    let limited = loop {
        let answer = call(agent, "list_graph_sessions", json!({"project_id": project})).await;
        if answer.1["result"]["isError"] == true {
            break answer;
        }
    };
    assert_eq!(
        limited.0, 200,
        "the rate-limited call is an in-band tool error"
    );
}

/// The families an alert is written on are there: the process, the build, the store and its
/// pool, the front's connections, the desktops online, the queue's oldest run, the MCP
/// sessions and streams; the request latency buckets go past the longest wait.
fn assert_alert_series(samples: &[prometheus_parse::Sample]) {
    assert_eq!(value(samples, "relay_desktops_online", &[]), 1.0);
    assert_eq!(value(samples, "relay_build_info", &[]), 1.0);
    assert!(observations(samples, "relay_store_call_duration_seconds", &[]) > 0.0);
    let pool_max = value(samples, "relay_store_pool_connections", &[("state", "max")]);
    assert!(pool_max >= 1.0, "{pool_max}");
    assert!(value(samples, "process_resident_memory_bytes", &[]) > 0.0);
    assert!(value(samples, "process_open_fds", &[]) > 0.0);
    for family in [
        "relay_oldest_queued_run_age_seconds",
        "relay_store_pool_waiting",
        "relay_connections_open",
        "relay_connections_refused_total",
        "relay_mcp_sessions",
        "relay_mcp_event_streams",
        "process_cpu_seconds_total",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        assert!(samples.iter().any(|s| s.metric == family), "no {family}");
    }
    let buckets = samples
        .iter()
        .find_map(|s| match &s.value {
            prometheus_parse::Value::Histogram(buckets)
                if s.metric == "relay_http_request_duration_seconds" =>
            {
                Some(buckets.iter().map(|b| b.less_than).collect::<Vec<f64>>())
            }
            _ => None,
        })
        .expect("a request latency histogram");
    let longest_wait = relay_service::runs::MAX_GET_WAIT.as_secs_f64();
    assert!(
        buckets.iter().any(|b| b.is_finite() && *b > longest_wait),
        "{buckets:?}"
    );
}

/// What an alert is written on: each tool call counted by tool and outcome (a rate-limited
/// call as `rate_limited`, though its HTTP answer is a 200; a missing scope as `refused`; a
/// domain refusal as `tool_error`), and the series [`assert_alert_series`] names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_tool_outcomes_and_have_the_series_alerts_need() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let (project, desktop_token, agent_token) = demo_project(&db);
    let reader = plain(&relay(
        &db,
        &[
            "token",
            "create",
            "--agent",
            "reader",
            "--project",
            &project,
            "--scope",
            "osfoundry:read",
        ],
    ));
    let args = ["--rate-per-token", "1", "--rate-burst", "4"];
    let served = crate::served::Served::start(db.to_str().expect("utf-8"), &args, &[]).await;
    let desktop = common::Desktop {
        http: common::http_client(),
        base: served.base.clone(),
        token: desktop_token,
    };
    desktop.sync(&project, &[1]).await;
    one_call_of_each_outcome(&served, &project, &agent_token, &reader).await;
    let samples = scrape(&common::http_client(), &served.metrics).await;
    let tool = |name: &str, result: &str| {
        value(
            &samples,
            "relay_mcp_tool_calls_total",
            &[("tool", name), ("result", result)],
        )
    };
    assert_eq!(tool("run_graph_session", "ok"), 1.0);
    assert_eq!(tool("get_graph_run", "tool_error"), 1.0);
    assert_eq!(tool("run_graph_session", "refused"), 1.0);
    assert_eq!(tool("list_graph_sessions", "rate_limited"), 1.0);
    assert_alert_series(&samples);
}

/// `relay serve`'s log lines up to the one that names its MCP URL.
async fn start_lines(db: &std::path::Path, args: &[&str]) -> Vec<String> {
    use std::io::BufRead as _;
    let mut child = crate::cli::Child(crate::cli::serve(db, args));
    let stderr = child.0.stderr.take().expect("stderr");
    tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let last = line.contains("serving MCP at");
            lines.push(line);
            if last {
                break;
            }
        }
        lines
    })
    .await
    .expect("read log")
}

/// The second red team (issue 44): development mode, which lets anyone who can open the
/// authorization page make the service fetch internal addresses, says so when it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_mode_warns_when_the_service_starts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let warned = |lines: &[String]| {
        lines
            .iter()
            .filter(|l| l.contains("WARN") && l.contains("--dev"))
            .count()
    };
    let dev = start_lines(&db, &["--dev"]).await;
    assert_eq!(warned(&dev), 1, "{dev:#?}");
    assert!(dev.last().is_some_and(|l| l.contains("serving MCP at")));
    let plain = start_lines(&db, &[]).await;
    assert_eq!(warned(&plain), 0, "{plain:#?}");
}
