//! The `relay` binary: admin commands print one plain value (or JSON with `--json`) and fail
//! with a non-zero exit and a helpful message; `relay serve` serves MCP on its listener.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{Era, mcp_client};
use serde_json::Value;

/// `relay admin --db DB ARGS…`.
pub(crate) fn relay(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_relay"))
        .arg("admin")
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("RELAY_DB")
        .output()
        .expect("run relay")
}

/// `relay desktop --state STATE ARGS…`.
fn desktop(state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_relay"))
        .arg("desktop")
        .arg("--state")
        .arg(state)
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run relay")
}

/// `relay desktop --state STATE run --token TOKEN` against a service nobody answers at, with
/// stderr piped and the log at its default level; it runs until it fails or is killed.
fn desktop_run(state: &Path, token: &str) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_relay"))
        .arg("desktop")
        .arg("--state")
        .arg(state)
        .args(["run", "--service", "http://127.0.0.1:9", "--token", token])
        .env_remove("RELAY_DESKTOP_TOKEN")
        .env_remove("RUST_LOG")
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run relay")
}

/// The one plain value a successful command printed.
pub(crate) fn plain(output: &Output) -> String {
    assert!(
        output.status.success(),
        "relay failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout.clone()).expect("utf-8");
    let lines: Vec<_> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one plain value on stdout: {stdout:?}");
    lines[0].to_owned()
}

fn failure(output: &Output) -> String {
    assert!(!output.status.success(), "expected a failure");
    assert!(output.stdout.is_empty(), "nothing on stdout on failure");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn admin_commands_print_one_value_and_fail_clearly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let project = plain(&relay(&db, &["project", "create", "Demo"]));
    assert!(uuid::Uuid::parse_str(&project).is_ok(), "{project}");
    let desktop = plain(&relay(
        &db,
        &["token", "create", "--desktop", "--project", &project],
    ));
    assert!(desktop.starts_with("grd_"), "{desktop}");
    let agent = plain(&relay(
        &db,
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
    assert!(agent.starts_with("gra_"), "{agent}");
    assert_ne!(agent, desktop);

    json_answers_and_revocation_by_id_or_text(&db, &project, &desktop);
    bad_admin_commands_fail_clearly(&db, &project);
}

/// `--json` answers with the created token's details, and a token is revoked by its id or its
/// text; a project takes an owner.
fn json_answers_and_revocation_by_id_or_text(db: &Path, project: &str, desktop: &str) {
    let json = plain(&relay(
        db,
        &[
            "--json",
            "token",
            "create",
            "--agent",
            "reader",
            "--project",
            project,
            "--scope",
            "osfoundry:read",
        ],
    ));
    let detail: Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(detail["kind"], "agent");
    assert_eq!(detail["scopes"], serde_json::json!(["osfoundry:read"]));
    let token_id = detail["token_id"].as_str().unwrap().to_owned();
    assert_eq!(plain(&relay(db, &["token", "revoke", &token_id])), token_id);
    // The token text works as the id too.
    let revoked = plain(&relay(db, &["token", "revoke", desktop, "--json"]));
    assert_eq!(
        serde_json::from_str::<Value>(&revoked).unwrap()["newly_revoked"],
        true
    );
    let owned = plain(&relay(
        db,
        &["--json", "project", "create", "Other", "--owner", "bob"],
    ));
    assert_eq!(
        serde_json::from_str::<Value>(&owned).unwrap()["owner"],
        "bob"
    );
}

/// An unknown project or scope, an agent token without a scope, a token of no kind or of two,
/// an unknown token and a blank project name all fail, most with a message saying what is wrong.
fn bad_admin_commands_fail_clearly(db: &Path, project: &str) {
    let message = failure(&relay(
        db,
        &["token", "create", "--desktop", "--project", "nope"],
    ));
    assert!(message.contains("no project with id `nope`"), "{message}");
    let message = failure(&relay(
        db,
        &["token", "create", "--agent", "x", "--project", project],
    ));
    assert!(message.contains("at least one --scope"), "{message}");
    let message = failure(&relay(
        db,
        &[
            "token",
            "create",
            "--agent",
            "x",
            "--project",
            project,
            "--scope",
            "osfoundry:admin",
        ],
    ));
    assert!(
        message.contains("unknown scope `osfoundry:admin`"),
        "{message}"
    );
    failure(&relay(
        db,
        &[
            "token",
            "create",
            "--desktop",
            "--agent",
            "x",
            "--project",
            project,
        ],
    ));
    failure(&relay(db, &["token", "create", "--project", project]));
    let message = failure(&relay(db, &["token", "revoke", "no-such-token"]));
    assert!(message.contains("no token with id"), "{message}");
    failure(&relay(db, &["project", "create", " "]));
}

#[test]
fn admin_lists_projects_and_the_tokens_that_reach_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let (first, second) = projects_are_listed_with_names_escaped(&db);

    // A desktop token and an agent token reach `first`; bob's desktop token and an agent on
    // bob's project do not.
    let desktop = created_token_id(
        &db,
        &[
            "--json",
            "token",
            "create",
            "--desktop",
            "--project",
            &first,
        ],
    );
    let agent = created_token_id(
        &db,
        &[
            "--json",
            "token",
            "create",
            "--agent",
            "claude",
            "--project",
            &first,
            "--scope",
            "osfoundry:run",
        ],
    );
    let bobs = created_token_id(
        &db,
        &[
            "--json",
            "token",
            "create",
            "--desktop",
            "--project",
            &second,
        ],
    );
    let bobs_agent = created_token_id(
        &db,
        &[
            "--json",
            "token",
            "create",
            "--agent",
            "gpt",
            "--project",
            &second,
            "--scope",
            "osfoundry:read",
        ],
    );
    plain(&relay(&db, &["token", "revoke", &desktop]));
    token_list_shows_the_tokens_that_reach_a_project(
        &db,
        &first,
        [&desktop, &agent],
        [&bobs, &bobs_agent],
    );
    json_token_list_shows_no_secret(&db, &second, [&bobs, &bobs_agent]);
    // A listed id revokes the token.
    assert_eq!(plain(&relay(&db, &["token", "revoke", &agent])), agent);
    let message = failure(&relay(&db, &["token", "list", "--project", "nope"]));
    assert!(message.contains("relay admin project list"), "{message}");
}

/// With no project yet `project list` prints nothing and a hint on stderr; then it lists each
/// project with its owner, the name shown escaped (as it is in `--json`). Returns the ids of
/// the two projects it creates: the default owner's, then bob's.
fn projects_are_listed_with_names_escaped(db: &Path) -> (String, String) {
    // None yet: nothing on stdout, a hint on stderr.
    let empty = relay(db, &["project", "list"]);
    assert!(
        empty.status.success() && empty.stdout.is_empty(),
        "{empty:?}"
    );
    assert!(String::from_utf8_lossy(&empty.stderr).contains("project create NAME"));
    let first = plain(&relay(db, &["project", "create", "Tickets\u{1b}[2J"]));
    let second = plain(&relay(
        db,
        &["project", "create", "Other", "--owner", "bob"],
    ));
    let listed = String::from_utf8(relay(db, &["project", "list"]).stdout).expect("utf-8");
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}");
    assert!(lines[0].starts_with(&first) && lines[0].ends_with("(owner default)"));
    assert!(
        !lines[0].contains('\u{1b}'),
        "names are shown escaped: {listed:?}"
    );
    assert!(lines[1].starts_with(&second) && lines[1].contains("  Other  (owner bob)"));
    let json: Value =
        serde_json::from_str(&plain(&relay(db, &["--json", "project", "list"]))).expect("JSON");
    assert_eq!(json[0]["name"], "Tickets\u{1b}[2J");
    assert_eq!(json[1]["owner"], "bob");
    (first, second)
}

/// `token list` shows the project's tokens, revoked or active, and no token of another project.
fn token_list_shows_the_tokens_that_reach_a_project(
    db: &Path,
    project: &str,
    [desktop, agent]: [&str; 2],
    [bobs, bobs_agent]: [&str; 2],
) {
    let listed = relay(db, &["token", "list", "--project", project]);
    let listed = String::from_utf8(listed.stdout).expect("utf-8");
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}");
    assert!(
        lines[0].starts_with(desktop) && lines[0].contains("  revoked "),
        "{listed}"
    );
    assert!(lines[1].starts_with(agent), "{listed}");
    assert!(
        lines[1].contains("  active  claude (osfoundry:run)"),
        "{listed}"
    );
    assert!(
        !listed.contains(bobs) && !listed.contains(bobs_agent),
        "{listed}"
    );
}

/// `token list --json` lists the project's tokens in order, with no secret and no hash.
fn json_token_list_shows_no_secret(db: &Path, project: &str, [bobs, bobs_agent]: [&str; 2]) {
    let json: Value = serde_json::from_str(&plain(&relay(
        db,
        &["--json", "token", "list", "--project", project],
    )))
    .expect("JSON");
    let ids: Vec<&str> = json
        .as_array()
        .expect("an array")
        .iter()
        .map(|t| t["token_id"].as_str().expect("token_id"))
        .collect();
    assert_eq!(ids, [bobs, bobs_agent]);
    assert!(json[0]["revoked_at"].is_null() && json[1]["agent_name"] == "gpt");
    // No secret and no hash is shown.
    assert!(!json.to_string().contains("hash") && !json.to_string().contains("grd_"));
}

/// The id of the token that `relay admin --json token create …` (given in full as `args`)
/// creates.
fn created_token_id(db: &Path, args: &[&str]) -> String {
    let created: Value = serde_json::from_str(&plain(&relay(db, args))).expect("JSON");
    created["token_id"].as_str().expect("token_id").to_owned()
}

/// Kills the child it holds when dropped, so a failing test leaves no server behind.
pub(crate) struct Child(pub(crate) std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_mcp_on_its_listener() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let project = plain(&relay(&db, &["project", "create", "Demo"]));
    let token = plain(&relay(
        &db,
        &[
            "token",
            "create",
            "--agent",
            "claude",
            "--project",
            &project,
            "--scope",
            "osfoundry:read",
        ],
    ));
    let mut child = Child(
        Command::new(env!("CARGO_BIN_EXE_relay"))
            .args(["serve", "--listen", "127.0.0.1:0", "--db"])
            .arg(&db)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start relay serve"),
    );
    let stderr = child.0.stderr.take().expect("stderr");
    // The log pipe is closed once the URL shows up: the server must keep serving without it.
    let url = tokio::task::spawn_blocking(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .find_map(|line| {
                let start = line.find("http://")?;
                let end = line[start..].find("/mcp")? + start + 4;
                Some(line[start..end].to_owned())
            })
    })
    .await
    .expect("read log")
    .expect("relay serve logs its MCP URL");
    let client = mcp_client(&url, &token, Era::Current).await;
    // No chat link on the project: the four graph tools.
    assert_eq!(client.list_all_tools().await.expect("list").len(), 4);
    client.cancel().await.expect("close");
    drop(child);
}

/// `relay serve --listen 127.0.0.1:0 --db DB ARGS…` with its log on a pipe.
pub(crate) fn serve(db: &Path, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(db)
        .args(args)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start relay serve")
}

/// The base URL a started `relay serve` logs (its MCP URL without `/mcp`).
pub(crate) async fn logged_base(child: &mut Child) -> String {
    let stderr = child.0.stderr.take().expect("stderr");
    tokio::task::spawn_blocking(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .find_map(|line| {
                let start = line.find("http://")?;
                let end = line[start..].find("/mcp")? + start;
                Some(line[start..end].to_owned())
            })
    })
    .await
    .expect("read log")
    .expect("relay serve logs its MCP URL")
}

/// `relay serve` on `db` with `args`, and its base URL.
pub(crate) async fn serve_with_base(db: &Path, args: &[&str]) -> (Child, String) {
    let mut child = Child(serve(db, args));
    let base = logged_base(&mut child).await;
    (child, base)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_a_bad_allowed_origin_and_serves_its_bound_address_by_default() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    for bad in ["not-a-url", "https://console.example.com/app"] {
        let refused = serve(&db, &["--allowed-origin", bad])
            .wait_with_output()
            .expect("relay exits");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{bad} is refused");
        assert!(
            stderr.contains("--allowed-origin") && stderr.contains("http(s)://host[:port]"),
            "{stderr}"
        );
    }
    let mut child = Child(serve(
        &db,
        &["--allowed-origin", "https://console.example.com"],
    ));
    let base = logged_base(&mut child).await;
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    let port = base
        .rsplit_once(':')
        .map(|(_, port)| port.to_owned())
        .expect("port");
    let metadata_of = |origin: &'static str| {
        common::http_client()
            .get(format!("{base}/.well-known/oauth-protected-resource/mcp"))
            .header("origin", origin)
            .header("host", format!("localhost:{port}"))
            .send()
    };
    let (status, metadata) = common::decode(
        metadata_of("https://console.example.com")
            .await
            .expect("metadata"),
    )
    .await;
    assert_eq!(status, 200, "{metadata}");
    // The bound address, not the request's Host (localhost), is the public URL.
    assert_eq!(metadata["resource"], format!("{base}/mcp"));
    let (status, _) =
        common::decode(metadata_of("http://evil.example").await.expect("metadata")).await;
    assert_eq!(status, 403);
}

#[test]
fn serve_takes_a_task_lease_of_at_most_a_day() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let serve = |lease: &str| {
        Command::new(env!("CARGO_BIN_EXE_relay"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--task-lease-seconds",
                lease,
                "--db",
            ])
            .arg(&db)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start relay serve")
    };
    let refused = serve("86401").wait_with_output().expect("relay exits");
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--task-lease-seconds"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    for lease in ["86400", "0"] {
        let mut child = Child(serve(lease));
        let stderr = child.0.stderr.take().expect("stderr");
        let serving = BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.contains("serving MCP at"));
        assert!(serving, "a lease of {lease} s is accepted");
    }
}

/// `relay desktop policy set` takes only the relay's own tools, naming a typo's nearest one as
/// `runner run --allow` does: a typo would leave the real tool at its default (deny) while the
/// owner believes it set something.
#[test]
fn desktop_policy_refuses_a_tool_the_relay_does_not_have() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("desktop.db");
    let desktop = |args: &[&str]| desktop(&state, args);
    let typo = failure(&desktop(&["policy", "set", "fs.wrte", "allow"]));
    assert!(
        typo.contains("there is no tool called fs.wrte; did you mean fs.write?")
            && typo.contains("The known tools are fs.list, fs.read, fs.write"),
        "{typo}"
    );
    // Nothing was set.
    let listed = desktop(&["policy", "list"]);
    assert!(listed.stdout.is_empty(), "{listed:?}");
    assert_eq!(
        plain(&desktop(&["policy", "set", "fs.write", "ask"])),
        "fs.write ask"
    );
    assert_eq!(plain(&desktop(&["policy", "list"])), "fs.write ask");
}

#[test]
fn desktop_sessions_show_a_hostile_name_escaped_and_refuse_an_endless_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("desktop.db");
    let desktop = |args: &[&str]| desktop(&state, args);
    // A name that would clear the owner's screen and write over the line before it.
    let graph = dir.path().join("evil.js");
    std::fs::write(
        &graph,
        "export const meta = {name: 'Evil\\u001b[2J\\u001b[1A\\rTrusted', slug: 'evil', version: '1'};\n\
         export default async function () { return 1; }",
    )
    .expect("graph");
    let id = plain(&desktop(&["session", "add", graph.to_str().expect("path")]));
    let listed = plain(&desktop(&["session", "list"]));
    assert!(
        !listed.contains('\u{1b}') && !listed.contains('\r'),
        "{listed:?}"
    );
    assert!(
        listed.ends_with("Evil\\u{1b}[2J\\u{1b}[1A\\rTrusted") && listed.starts_with(&id),
        "{listed:?}"
    );
    // The JSON form keeps the name as it is (JSON escapes it itself).
    let json: Value =
        serde_json::from_str(&plain(&desktop(&["session", "list", "--json"]))).expect("JSON");
    assert_eq!(json[0]["name"], "Evil\u{1b}[2J\u{1b}[1A\rTrusted");
    // The wrong file is refused after at most the script limit is read.
    let endless = failure(&desktop(&["session", "add", "/dev/zero"]));
    assert!(endless.contains("larger than 1048576 bytes"), "{endless}");
}

#[test]
fn desktop_folder_must_be_a_folder() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("desktop.db");
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "x").expect("file");
    let refused = failure(&desktop(&state, &["folder", file.to_str().expect("path")]));
    assert!(refused.contains("is not a folder"), "{refused}");
    // Nothing was stored: the folder is still unset.
    let unset = failure(&desktop(&state, &["folder"]));
    assert!(unset.contains("no folder is set"), "{unset}");
    let folder = dir.path().join("shared");
    std::fs::create_dir(&folder).expect("folder");
    let set = plain(&desktop(
        &state,
        &["folder", folder.to_str().expect("path")],
    ));
    assert_eq!(
        std::path::Path::new(&set),
        folder.canonicalize().expect("canonical")
    );
}

#[test]
fn a_failure_is_one_line_that_says_each_cause_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("desktop.db");
    std::fs::write(&state, "a shopping list, not a database ".repeat(40)).expect("file");
    let refused = failure(&desktop(&state, &["session", "list"]));
    assert_eq!(refused.lines().count(), 1, "{refused}");
    assert!(
        refused.starts_with("error: cannot use the desktop state"),
        "{refused}"
    );
    assert_eq!(
        refused.matches("file is not a database").count(),
        1,
        "{refused}"
    );
    // The file is left as it was.
    let kept = std::fs::read_to_string(&state).expect("still there");
    assert!(kept.starts_with("a shopping list"), "{kept}");
}

#[test]
fn empty_desktop_lists_say_what_to_do_on_stderr_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("desktop.db");
    for (args, says) in [
        (&["session", "list"][..], "relay desktop session add FILE"),
        (&["project", "list"], "relay desktop project enable ID"),
        (&["approvals", "list"], "no approvals waiting"),
        (&["approvals", "list", "--all"], "no approvals yet"),
        (&["history"], "no executions yet"),
        (
            &["policy", "list"],
            "denied, as no policy is set: fs.list, fs.read, fs.write",
        ),
    ] {
        let output = desktop(&state, args);
        assert!(output.status.success(), "{args:?}: {output:?}");
        assert!(
            output.stdout.is_empty(),
            "{args:?}: stdout keeps only the list"
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // `--json` prints the empty list and nothing else.
    let json = desktop(&state, &["session", "list", "--json"]);
    assert_eq!(String::from_utf8_lossy(&json.stdout).trim(), "[]");
    assert!(json.stderr.is_empty(), "{json:?}");
    // Once a tool has a policy, the note names only the others.
    plain(&desktop(&state, &["policy", "set", "fs.read", "allow"]));
    let listed = desktop(&state, &["policy", "list"]);
    assert_eq!(String::from_utf8_lossy(&listed.stdout), "fs.read allow\n");
    let stderr = String::from_utf8_lossy(&listed.stderr);
    assert!(
        stderr.contains("no policy is set: fs.list, fs.write;"),
        "{stderr}"
    );
}

#[test]
fn desktop_run_refuses_a_token_that_could_only_fail() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("desktop.db");
    for (token, says) in [
        ("", "--token is empty"),
        ("grd_abc\n", "line break"),
        ("grd_ abc", "space"),
        ("gra_0123", "an agent's token"),
        ("gro_0123", "an owner's token"),
    ] {
        // On a token it accepts, `run` would run until stopped: kill it at a deadline.
        let mut child = desktop_run(&state, token);
        let waiting = relay_protocol::clock::Stopwatch::start();
        while child.try_wait().expect("wait").is_none() {
            if waiting.elapsed() > std::time::Duration::from_secs(20) {
                let _ = child.kill();
                panic!("{token:?} was accepted: relay desktop run kept running");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let output = child.wait_with_output().expect("output");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{token:?}: {stderr}");
        assert!(stderr.contains(says), "{token:?}: {stderr}");
        assert!(
            stderr.contains("relay admin token create --desktop"),
            "{stderr}"
        );
    }
}

#[test]
fn desktop_run_without_an_enabled_project_says_so() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = desktop_run(&dir.path().join("desktop.db"), "grd_0123");
    let stderr = child.stderr.take().expect("stderr");
    // Reads until the warning (or the end, if relay exits); the relay is killed either way.
    let reader = std::thread::spawn(move || {
        let mut seen = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("no project is enabled") {
                break;
            }
        }
        seen
    });
    let waiting = relay_protocol::clock::Stopwatch::start();
    while !reader.is_finished() && waiting.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let seen = reader.join().expect("reader");
    assert!(
        seen.contains("no project is enabled") && seen.contains("relay desktop project enable ID"),
        "{seen}"
    );
}

fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A desktop token reaches the project it was minted for; `--owner NAME` mints one for every
/// project of that owner; the flags say so, and a wrong mix fails with what to pass.
#[test]
fn desktop_tokens_reach_a_project_or_an_owners_projects() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    let created = relay(&db, &["project", "create", "First", "--owner", "alice"]);
    assert!(created.status.success(), "{created:?}");
    let project = String::from_utf8_lossy(&created.stdout).trim().to_owned();
    let json = |args: &[&str]| -> Value {
        let output = relay(&db, &[&["--json"], args].concat());
        assert!(output.status.success(), "{args:?}: {}", stderr_of(&output));
        serde_json::from_slice(&output.stdout).expect("JSON")
    };
    let scoped = json(&["token", "create", "--desktop", "--project", &project]);
    assert_eq!(scoped["project_id"], project.as_str());
    let wide = json(&["token", "create", "--desktop", "--owner", "alice"]);
    assert!(wide.get("project_id").is_none(), "{wide}");
    assert!(
        wide["token"].as_str().unwrap_or("").starts_with("grd_"),
        "{wide}"
    );
    let owner = json(&["token", "create", "--owner", "--project", &project]);
    assert_eq!(owner["kind"], "owner");
    for (args, needle) in [
        (vec!["token", "create", "--desktop"], "--project ID"),
        (
            vec!["token", "create", "--desktop", "--owner"],
            "--owner NAME",
        ),
        (
            vec![
                "token",
                "create",
                "--desktop",
                "--owner",
                "alice",
                "--project",
                &project,
            ],
            "not both",
        ),
        (
            vec!["token", "create", "--desktop", "--owner", "bob"],
            "no owner named `bob`",
        ),
        (
            vec!["token", "create", "--owner", "alice"],
            "goes with --desktop",
        ),
    ] {
        let output = relay(&db, &args);
        assert!(!output.status.success(), "{args:?} should fail");
        assert!(
            stderr_of(&output).contains(needle),
            "{args:?}: {}",
            stderr_of(&output)
        );
    }
    let help = relay(&db, &["token", "create", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--desktop --owner NAME"), "{help}");
}

/// `relay desktop ARGS…` with HOME set to `home` and the state named only by `vars`.
fn desktop_at_home(home: &Path, vars: &[(&str, &Path)], args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_relay"));
    command
        .arg("desktop")
        .args(args)
        .env("HOME", home)
        .env_remove("XDG_DATA_HOME")
        .env_remove("RELAY_DESKTOP_STATE")
        .env_remove("RELAY_DESKTOP_DB")
        .env("RUST_BACKTRACE", "0");
    for (name, value) in vars {
        command.env(name, value);
    }
    command.output().expect("run relay")
}

/// `RELAY_DESKTOP_STATE`, `RELAY_DESKTOP_DB` and `--db` each name a file of their own.
#[cfg(target_os = "linux")]
fn overrides_name_files_of_their_own(home: &std::path::Path) {
    // Each override names a file of its own.
    let by_env = home.join("env.db");
    let by_alias = home.join("alias.db");
    let by_flag = home.join("flag.db");
    for (vars, args, file) in [
        (
            vec![("RELAY_DESKTOP_STATE", by_env.as_path())],
            vec![],
            &by_env,
        ),
        (
            vec![("RELAY_DESKTOP_DB", by_alias.as_path())],
            vec![],
            &by_alias,
        ),
        (
            vec![("RELAY_DESKTOP_DB", by_alias.as_path())],
            vec!["--db", by_flag.to_str().expect("utf-8")],
            &by_flag,
        ),
    ] {
        let mut all = args.clone();
        all.extend(["policy", "set", "fs.write", "deny"]);
        let out = desktop_at_home(home, &vars, &all);
        assert!(out.status.success(), "{out:?}");
        let listed = desktop_at_home(
            home,
            &[],
            &["--state", file.to_str().expect("utf-8"), "policy", "list"],
        );
        assert_eq!(
            String::from_utf8_lossy(&listed.stdout),
            "fs.write deny\n",
            "{file:?}"
        );
    }
}

/// Without `--state`, the desktop keeps its state in the per-user data directory (made for the
/// owner only), and says where when it runs; `--db`, `RELAY_DESKTOP_STATE` and
/// `RELAY_DESKTOP_DB` name another file. No test here touches the real home.
#[cfg(target_os = "linux")]
#[test]
fn desktop_state_defaults_to_the_per_user_data_directory() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().expect("temp dir");
    let set = desktop_at_home(home.path(), &[], &["policy", "set", "fs.read", "allow"]);
    assert!(set.status.success(), "{set:?}");
    let data = home.path().join(".local/share/graphrelay");
    assert!(data.join("desktop.db").is_file(), "{set:?}");
    let mode = std::fs::metadata(&data)
        .expect("folder")
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o700,
        "only the owner reads the desktop's state"
    );
    let listed = desktop_at_home(home.path(), &[], &["policy", "list"]);
    assert_eq!(String::from_utf8_lossy(&listed.stdout), "fs.read allow\n");
    // XDG_DATA_HOME moves it, as the XDG base directory spec says.
    let xdg = home.path().join("xdg");
    let moved = desktop_at_home(
        home.path(),
        &[("XDG_DATA_HOME", &xdg)],
        &["policy", "set", "fs.list", "allow"],
    );
    assert!(moved.status.success(), "{moved:?}");
    assert!(xdg.join("graphrelay/desktop.db").is_file());
    overrides_name_files_of_their_own(home.path());
    // The default file is untouched by the overrides.
    let listed = desktop_at_home(home.path(), &[], &["policy", "list"]);
    assert_eq!(String::from_utf8_lossy(&listed.stdout), "fs.read allow\n");
    // `run` names the state file in its first log line.
    let mut relay = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["desktop", "run", "--service", "http://127.0.0.1:9"])
        .args(["--token", "grd_0123456789abcdef0123456789abcdef"])
        .env("HOME", home.path())
        .env_remove("XDG_DATA_HOME")
        .env_remove("RELAY_DESKTOP_STATE")
        .env_remove("RELAY_DESKTOP_DB")
        .env_remove("RELAY_DESKTOP_TOKEN")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run relay");
    let stderr = relay.stderr.take().expect("stderr");
    let running = BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .find(|line| line.contains("desktop relay running"));
    let _ = relay.kill();
    let _ = relay.wait();
    let line = running.expect("the relay says it runs");
    let state = data.join("desktop.db");
    assert!(line.contains(&state.display().to_string()), "{line}");
}

/// A state file with one of everything a list shows, in a project the service named "Blog
/// posts": a session shared with it, a queued run, a finished run, a running one waiting for an
/// approval. Returns the project id.
fn state_with_one_of_everything(state: &Path) -> String {
    use relay_desktop::state::DesktopState;
    use relay_protocol::clock::Timestamp;
    let project = "3f6c2d0e-1a2b-4c3d-8e9f-0a1b2c3d4e5f".to_owned();
    let graph = common::workspace_root().join("graphs/triage.js");
    let added = desktop(
        state,
        &["session", "add", graph.to_str().expect("utf-8 path")],
    );
    let session = plain(&added);
    plain(&desktop(state, &["project", "enable", &project]));
    plain(&desktop(
        state,
        &["share", "--project", &project, "--session", &session],
    ));
    let desktop_state = DesktopState::open(state).expect("state");
    let now = Timestamp::from_unix_millis(1_700_000_000_000);
    let named = relay_protocol::ServedProject {
        project_id: project.clone(),
        name: "Blog posts".into(),
    };
    desktop_state
        .set_service_projects(&[named], now)
        .expect("names");
    let session_id: relay_protocol::GraphSessionId = session.parse().expect("session id");
    let queued = relay_protocol::QueuedCommand {
        command_id: relay_protocol::CommandId::new_random(),
        graph_session_id: session_id.clone(),
        slug: "triage".into(),
        arguments: serde_json::Map::new(),
        created_at: now,
        agent_id: Some("tok_1".into()),
        agent_name: Some("claude".into()),
        max_tokens: None,
    };
    desktop_state
        .note_queue(&project, &[queued], now)
        .expect("queue");
    for execution in ["e-done", "e-running"] {
        let command = relay_protocol::CommandId::new_random();
        desktop_state
            .begin_execution(execution, &command, &project, &session_id, "triage", now)
            .expect("begin");
        if execution == "e-done" {
            let completion = relay_desktop::bounding::completion(
                execution,
                relay_protocol::CompletionStatus::Completed,
                Some(serde_json::json!({"ok": true})),
                42,
                0.002_400_000_000_000_000_2,
                None,
            );
            desktop_state
                .finish_execution(&command, None, None, &completion, now)
                .expect("finish");
        }
    }
    desktop_state
        .ask("a1", "e-running", "fs.write", "{}", now)
        .expect("ask");
    project
}

#[test]
fn every_desktop_list_takes_json_naming_projects_by_name_and_id_with_rfc3339_times() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("desktop.db");
    let project = state_with_one_of_everything(&state);
    let lists: [&[&str]; 8] = [
        &["session", "list"],
        &["project", "list"],
        &["shares"],
        &["queue"],
        &["approvals", "list"],
        &["approvals", "list", "--all"],
        &["history"],
        &["policy", "list"],
    ];
    for list in lists {
        let mut args = list.to_vec();
        args.push("--json");
        let output = desktop(&state, &args);
        assert!(output.status.success(), "{args:?}: {output:?}");
        let rows: Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{args:?} printed no JSON ({e}): {output:?}"));
        let rows = rows
            .as_array()
            .unwrap_or_else(|| panic!("{args:?}: an array"));
        assert!(!rows.is_empty(), "{args:?}: {rows:?}");
        let text = serde_json::to_string(rows).expect("text");
        if list[0] != "policy" {
            assert!(
                text.contains(&format!("\"project_id\":\"{project}\""))
                    && text.contains("\"project_name\":\"Blog posts\""),
                "{args:?} names the project by id and name: {text}"
            );
        }
        for row in rows {
            for (key, value) in row.as_object().expect("an object") {
                if key.ends_with("_at") || key == "since" {
                    assert!(
                        value.is_null()
                            || value.as_str().is_some_and(|t| {
                                relay_protocol::clock::Timestamp::parse_rfc3339(t).is_some()
                            }),
                        "{args:?}: {key} is not RFC 3339: {value}"
                    );
                }
            }
        }
    }
    // The text names the project too, with the id a command takes.
    for list in [
        &["queue"][..],
        &["approvals", "list"],
        &["history"],
        &["session", "list"],
    ] {
        let text = String::from_utf8_lossy(&desktop(&state, list).stdout).into_owned();
        assert!(
            text.contains(&format!("Blog posts ({project})")),
            "{list:?}: {text}"
        );
    }
    let history = String::from_utf8_lossy(&desktop(&state, &["history"]).stdout).into_owned();
    assert!(
        history.contains("cost $0.0024") && history.contains("cost unknown"),
        "money, and unknown while running: {history}"
    );
}
