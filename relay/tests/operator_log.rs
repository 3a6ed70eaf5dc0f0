//! The log an operator reads, at `relay serve`'s default level: one line per request (100 MCP
//! calls make at most 110 lines, each naming its request), a WARN for each refusal (a failed
//! sign-in, the sign-in throttle, a rate-limited tool call, a 421, a 403), and no secret or
//! payload: no token, password, authorization code, tool argument or tool result.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::json;

use crate::cli::{plain, relay};
use crate::common::oauth::{self, Browser};
use crate::common::{self, Desktop};
use crate::served::{Served, call_tool};

const OWNER: &str = "ann";
const PASSWORD: &str = "correct horse battery staple";
const WRONG_PASSWORD: &str = "wrong horse battery staple";
/// Text a tool argument and a run's result carry, which no log line may show.
const ARGUMENT_MARKER: &str = "argument-marker-5b1e";
const RESULT_MARKER: &str = "result-marker-93c0";
/// MCP calls whose lines are counted, and the most lines they may make.
const CALLS: usize = 100;
const MAX_LINES: usize = 110;
/// Failed sign-ins the throttle lets through before it starts.
const FREE_FAILURES: usize = 6;

/// A project of `OWNER`, who has a password, with a desktop token and an agent token (both
/// scopes); (project, desktop token, agent token).
fn owner_project(db: &Path) -> (String, String, String) {
    let project = plain(&relay(db, &["project", "create", "Logs", "--owner", OWNER]));
    let mut child = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["admin", "--db"])
        .arg(db)
        .args(["owner", "set-password", OWNER, "--password-stdin"])
        .env_remove("RELAY_DB")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run relay");
    writeln!(child.stdin.take().expect("stdin"), "{PASSWORD}").expect("password");
    assert!(child.wait().expect("relay exits").success());
    let desktop = plain(&relay(
        db,
        &["token", "create", "--desktop", "--project", &project],
    ));
    let agent = plain(&relay(
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
    (project, desktop, agent)
}

/// A run queued with an argument and completed with a result, each holding its marker; its id.
async fn finished_run(served: &Served, project: &str, desktop_token: &str, agent: &str) -> String {
    let desktop = Desktop {
        http: common::http_client(),
        base: served.base.clone(),
        token: desktop_token.to_owned(),
    };
    desktop.sync(project, &[1]).await;
    let mcp = format!("{}/mcp", served.base);
    let arguments = json!({"note": ARGUMENT_MARKER});
    let run = common::run_args(1, "log-test-run", arguments);
    let (status, answer) = call_tool(
        &common::http_client(),
        &mcp,
        agent,
        "run_graph_session",
        run,
    )
    .await
    .expect("queued");
    assert_eq!(status, 200, "{answer}");
    let id = answer["result"]["structuredContent"]["command_id"]
        .as_str()
        .expect("command id")
        .to_owned();
    assert_eq!(desktop.started(&id, "exec-log").await.0, 200);
    let completion = json!({"execution_id": "exec-log", "status": "completed", "result": {"answer": RESULT_MARKER}});
    assert_eq!(desktop.complete(&id, &completion).await.0, 200);
    id
}

/// The lines `served` logged while `calls` MCP calls of `get_graph_run` (answered with the
/// result) and `list_graph_sessions` were made.
async fn lines_of_calls(
    served: &Served,
    (agent, project): (&str, &str),
    id: &str,
    calls: usize,
) -> Vec<String> {
    let before = served.log().len();
    let mcp = format!("{}/mcp", served.base);
    let http = common::http_client();
    for n in 0..calls {
        let (tool, arguments) = if n % 2 == 0 {
            ("get_graph_run", json!({"command_id": id}))
        } else {
            ("list_graph_sessions", json!({"project_id": project}))
        };
        let (status, answer) = call_tool(&http, &mcp, agent, tool, arguments)
            .await
            .expect("answered");
        assert_eq!(status, 200, "{answer}");
        assert_ne!(answer["result"]["isError"], true, "{answer}");
    }
    // The lines of the last call are written once it is answered; the access line is last.
    let expected = before + calls;
    for _ in 0..200 {
        if served.log().len() >= expected {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    served.log().split_off(before)
}

/// An OAuth connection made by `OWNER` (registration, sign-in, consent, code exchange): the
/// code and the tokens it got.
async fn connection(base: &str, project: &str) -> Vec<String> {
    let app = oauth::register(base, "Log test app").await;
    let browser = Browser::new();
    let pkce = oauth::pkce();
    let page = oauth::consent_page(&browser, &app, &pkce, "st-log", OWNER, PASSWORD).await;
    let scopes = ["osfoundry:read", "osfoundry:run"];
    let answer = oauth::decide(&browser, base, &page, project, &scopes, "allow").await;
    let code = answer.redirect_param("code").expect("a code");
    let (status, tokens) = app.exchange(&code, &pkce.verifier).await;
    assert_eq!(status, 200, "{tokens}");
    let mut secrets = vec![code];
    for key in ["access_token", "refresh_token"] {
        secrets.push(tokens[key].as_str().expect("a token").to_owned());
    }
    secrets
}

/// Refusals, one of each kind: wrong passwords until the throttle answers (the first
/// [`FREE_FAILURES`] are failed sign-ins, the next is throttled), a tool call past the token's
/// rate, a request for a host not served (421) and one from a foreign origin (403).
async fn refusals(served: &Served, agent: &str, project: &str) {
    let app = oauth::register(&served.base, "Wrong password app").await;
    let browser = Browser::new();
    let pkce = oauth::pkce();
    let page = browser
        .get(&app.authorize_url(&pkce.challenge, "st-wrong", &[]))
        .await;
    for attempt in 0..=FREE_FAILURES {
        let answer = oauth::sign_in(&browser, &served.base, &page, OWNER, WRONG_PASSWORD).await;
        let expected = if attempt < FREE_FAILURES { 401 } else { 429 };
        assert_eq!(answer.status, expected, "attempt {attempt}");
    }
    let mcp = format!("{}/mcp", served.base);
    let http = common::http_client();
    let limited = loop {
        let arguments = json!({"project_id": project});
        let (_, answer) = call_tool(&http, &mcp, agent, "list_graph_sessions", arguments)
            .await
            .expect("answered");
        if answer["result"]["isError"] == true {
            break answer;
        }
    };
    assert!(limited.to_string().contains("rate limit"), "{limited}");
    let misdirected = http
        .get(format!(
            "{}/.well-known/oauth-protected-resource",
            served.base
        ))
        .header("host", "relay.evil.example")
        .send()
        .await
        .expect("answered");
    assert_eq!(misdirected.status(), 421);
    let foreign = http
        .post(&mcp)
        .header("origin", "https://evil.example")
        .bearer_auth(agent)
        .body("{}")
        .send()
        .await
        .expect("answered");
    assert_eq!(foreign.status(), 403);
}

/// The WARN lines of `log` naming `refusal`.
fn warnings<'a>(log: &'a [String], refusal: &str) -> Vec<&'a String> {
    let mark = format!("refusal=\"{refusal}\"");
    log.iter()
        .filter(|l| l.contains(" WARN ") && l.contains(&mark))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_log_is_one_line_per_request_with_its_id_and_a_warn_per_refusal() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let (project, desktop_token, agent) = owner_project(&db);
    // A burst of exactly the calls below, refilled slowly: the next call is rate limited.
    let args = ["--rate-per-token", "1", "--rate-burst", "110"];
    let mut served = Served::start(db.to_str().expect("utf-8"), &args, &[]).await;
    let id = finished_run(&served, &project, &desktop_token, &agent).await;
    let lines = lines_of_calls(&served, (&agent, &project), &id, CALLS).await;
    assert!(
        (CALLS..=MAX_LINES).contains(&lines.len()),
        "{} lines for {CALLS} MCP calls:\n{}",
        lines.len(),
        lines.join("\n")
    );
    for line in &lines {
        assert!(line.contains("request_id="), "no request id: {line}");
    }
    let mut secrets = connection(&served.base, &project).await;
    refusals(&served, &agent, &project).await;
    // Each refusal's line is written before its answer leaves; the test's reader of the log
    // may still be behind, so the last refusal's line is waited for.
    served.wait_for_line("refusal=\"forbidden\"").await;
    let log = served.log();
    let text = log.join("\n");
    assert_eq!(
        warnings(&log, "sign_in_failed").len(),
        FREE_FAILURES,
        "{text}"
    );
    for refusal in [
        "sign_in_throttled",
        "rate_limited",
        "misdirected",
        "forbidden",
    ] {
        let found = warnings(&log, refusal);
        assert_eq!(found.len(), 1, "{refusal}: {found:#?}");
        assert!(found[0].contains("request_id="), "{}", found[0]);
    }
    secrets.extend([
        agent,
        desktop_token,
        PASSWORD.to_owned(),
        WRONG_PASSWORD.to_owned(),
        ARGUMENT_MARKER.to_owned(),
        RESULT_MARKER.to_owned(),
    ]);
    for secret in &secrets {
        assert!(
            !text.contains(secret.as_str()),
            "{secret:?} is logged:\n{text}"
        );
    }
}
