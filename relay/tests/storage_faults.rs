//! Storage faults (issue 33): damaged and empty database files are refused at start by
//! `relay serve` and `relay desktop run`; `relay admin db backup` copies a serving database
//! with every run acknowledged before it began, and the copy restores to a working service; a
//! full disk under the service is a named, retryable error, `/readyz` says `degraded`, and
//! nothing acknowledged is lost; each program's `db` tools refuse the other program's file and
//! an empty one, and `db check` finds rows SQLite's own checks pass but the program cannot read
//! (issue 49).
//!
//! The full-disk test makes its own small filesystem: a tmpfs mounted for the test (root only)
//! and unmounted by a guard even when the test fails. Where mounting is refused (not root) it
//! says so on stderr and checks nothing.

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::tmpfs::{Tmpfs, fill};
use common::{Era, TestService, call, err, mcp_client, ok, run_args};
use relay_protocol::clock::{ManualClock, Stopwatch};
use relay_service::ServiceConfig;
use relay_service::store::QueueQuota;
use serde_json::{Value, json};

/// SQLite's page size for the files these programs make.
const PAGE: u64 = 4096;

/// Runs `relay ARGS…` to its end, killed (and the test failed) if it is still running after
/// `limit`: a process that accepted a damaged file would serve forever.
fn run_to_end(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(args)
        .env_remove("RELAY_DB")
        .env_remove("RELAY_DATABASE_URL")
        .env_remove("RELAY_DESKTOP_TOKEN")
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run relay");
    let running = Stopwatch::start();
    while child.try_wait().expect("wait").is_none() {
        if running.elapsed() > limit {
            let _ = child.kill();
            let output = child.wait_with_output().expect("output");
            panic!(
                "relay {args:?} still ran after {limit:?}: it used the file; stderr: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

/// `relay admin --db DB ARGS…`, to its end.
fn admin(db: &Path, args: &[&str]) -> Output {
    let mut all = vec!["admin", "--db", db.to_str().expect("utf-8 path")];
    all.extend_from_slice(args);
    run_to_end(&all, Duration::from_secs(120))
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The three damages: bytes flipped at the head of every b-tree page after the first, pages
/// 2-5 zeroed, and the file truncated to 0 bytes.
#[derive(Debug, Clone, Copy)]
enum Damage {
    FlippedBytes,
    ZeroedPages,
    Empty,
}

const DAMAGES: [Damage; 3] = [Damage::FlippedBytes, Damage::ZeroedPages, Damage::Empty];

fn damage(path: &Path, damage: Damage) {
    let mut bytes = std::fs::read(path).expect("read the database");
    let pages = bytes.len() as u64 / PAGE;
    assert!(pages >= 6, "{} has only {pages} pages", path.display());
    match damage {
        Damage::FlippedBytes => {
            // 100 bytes in all: the first 10 of pages 2 to 11 (or as many as there are).
            for page in 1..pages.min(11) {
                let start = usize::try_from(page * PAGE).expect("small");
                for byte in &mut bytes[start..start + 10] {
                    *byte ^= 0xA5;
                }
            }
        }
        Damage::ZeroedPages => {
            let start = usize::try_from(PAGE).expect("small");
            bytes[start..start * 5].fill(0);
        }
        Damage::Empty => bytes.clear(),
    }
    std::fs::write(path, bytes).expect("write the damage");
}

fn expect_refusal(output: &Output, path: &Path, damage: Damage, restore: &str) {
    let text = stderr(output);
    assert_eq!(output.status.code(), Some(1), "{damage:?}: {text}");
    assert!(
        text.contains(&path.display().to_string()),
        "{damage:?}: {text}"
    );
    let what = match damage {
        Damage::Empty => "exists but is empty: restore it",
        _ => "is damaged (quick_check:",
    };
    assert!(text.contains(what), "{damage:?}: {text}");
    assert!(text.contains(restore), "{damage:?}: {text}");
    if let Damage::Empty = damage {
        assert!(text.contains("remove it to start fresh"), "{text}");
    }
}

#[test]
fn serve_refuses_a_database_with_flipped_bytes_zeroed_pages_or_no_bytes() {
    for kind in DAMAGES {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("relay.db");
        let db_text = db.to_str().expect("utf-8 path");
        for n in 0..20 {
            let made = run_to_end(
                &[
                    "admin",
                    "--db",
                    db_text,
                    "project",
                    "create",
                    &format!("p{n}"),
                ],
                Duration::from_secs(60),
            );
            assert!(made.status.success(), "{}", stderr(&made));
        }
        damage(&db, kind);
        let served = run_to_end(
            &["serve", "--db", db_text, "--listen", "127.0.0.1:0"],
            Duration::from_secs(60),
        );
        expect_refusal(&served, &db, kind, "relay admin db restore");
        // The file is left as it was found: no fresh schema over an empty file.
        let after = std::fs::metadata(&db).expect("still there").len();
        if let Damage::Empty = kind {
            assert_eq!(after, 0);
        }
    }
}

#[test]
fn desktop_run_refuses_a_state_file_with_flipped_bytes_zeroed_pages_or_no_bytes() {
    for kind in DAMAGES {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("desktop.db");
        let state_text = state.to_str().expect("utf-8 path");
        for n in 0..30 {
            let project = format!("project-{n}");
            let made = run_to_end(
                &[
                    "desktop", "--state", state_text, "project", "enable", &project,
                ],
                Duration::from_secs(60),
            );
            assert!(made.status.success(), "{}", stderr(&made));
        }
        damage(&state, kind);
        let ran = run_to_end(
            &[
                "desktop",
                "--state",
                state_text,
                "run",
                "--service",
                "http://127.0.0.1:9",
                "--token",
                "grd_0123456789abcdef0123456789abcdef",
            ],
            Duration::from_secs(60),
        );
        expect_refusal(&ran, &state, kind, "relay desktop db restore");
    }
}

/// A service configuration whose queue holds every run these tests queue.
fn roomy() -> ServiceConfig {
    ServiceConfig {
        queue_quota: QueueQuota {
            per_agent: 100_000,
            per_project: 100_000,
        },
        rate_limit: None,
        ..ServiceConfig::default()
    }
}

/// Writers queueing runs until told to stop, and the ids of those acknowledged so far.
struct Writers {
    stop: Arc<AtomicBool>,
    acknowledged: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Writers {
    fn start(url: &str, agent: &str, count: usize) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let acknowledged = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..count)
            .map(|writer| {
                let (url, agent) = (url.to_owned(), agent.to_owned());
                let (stop, acknowledged) = (stop.clone(), acknowledged.clone());
                tokio::spawn(async move {
                    let client = mcp_client(&url, &agent, Era::Current).await;
                    let mut n = 0;
                    while !stop.load(Ordering::SeqCst) {
                        let key = format!("writer-{writer}-{n}");
                        let answer =
                            call(&client, "run_graph_session", run_args(1, &key, json!({}))).await;
                        let id = ok(&answer)["command_id"].as_str().expect("id").to_owned();
                        acknowledged.lock().expect("list").push(id);
                        n += 1;
                    }
                })
            })
            .collect();
        Writers {
            stop,
            acknowledged,
            tasks,
        }
    }

    fn so_far(&self) -> Vec<String> {
        self.acknowledged.lock().expect("list").clone()
    }

    async fn finish(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        let count = Arc::clone(&self.acknowledged);
        for task in self.tasks {
            task.await.expect("writer");
        }
        count.lock().expect("list").len()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_under_queued_runs_holds_every_run_acknowledged_before_it_and_restores() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("relay.db");
    let service =
        TestService::start_at(&db, Arc::new(ManualClock::new(common::START)), roomy()).await;
    let project = service.project("p", "alice").await;
    service.desktop(&project).await.sync(&project, &[1]).await;
    let agent = service.full_agent(&project).await;
    // Four writers queue runs the whole time the backup runs.
    let writers = Writers::start(&service.mcp_url(), &agent, 4);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = writers.so_far();
    assert!(!before.is_empty(), "no run was queued before the backup");
    let backup = dir.path().join("backup.db");
    let (db_path, backup_text) = (db.clone(), backup.to_str().expect("utf-8").to_owned());
    let output =
        tokio::task::spawn_blocking(move || admin(&db_path, &["db", "backup", &backup_text]))
            .await
            .expect("backup task");
    assert!(output.status.success(), "backup: {}", stderr(&output));
    let all = writers.finish().await;
    let checked = run_to_end(
        &["admin", "db", "check", backup.to_str().expect("utf-8")],
        Duration::from_secs(60),
    );
    assert!(checked.status.success(), "check: {}", stderr(&checked));
    assert_eq!(String::from_utf8_lossy(&checked.stdout).trim(), "ok");
    service.stop().await;
    // Restore the copy over the stopped service's file, and serve it.
    let restored = admin(&db, &["db", "restore", backup.to_str().expect("utf-8")]);
    assert!(restored.status.success(), "restore: {}", stderr(&restored));
    assert!(
        dir.path().join("relay.db.replaced").is_file(),
        "the replaced file is kept"
    );
    let service =
        TestService::start_at(&db, Arc::new(ManualClock::new(common::START)), roomy()).await;
    let client = mcp_client(&service.mcp_url(), &agent, Era::Current).await;
    for id in &before {
        let run = ok(&call(&client, "get_graph_run", json!({"command_id": id})).await);
        assert_eq!(run["status"], "queued", "{id}: {run}");
    }
    // The restored service takes new runs.
    let answer = call(
        &client,
        "run_graph_session",
        run_args(1, "after-restore", json!({})),
    )
    .await;
    assert!(ok(&answer)["command_id"].is_string());
    eprintln!(
        "{} runs acknowledged before the backup, {all} in all while it ran",
        before.len()
    );
    service.stop().await;
}

#[test]
fn restore_refuses_a_damaged_copy_and_a_database_in_use() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("relay.db");
    for n in 0..20 {
        let made = admin(&db, &["project", "create", &format!("p{n}")]);
        assert!(made.status.success(), "{}", stderr(&made));
    }
    let copy = dir.path().join("copy.db");
    let copy_text = copy.to_str().expect("utf-8");
    let backup = admin(&db, &["db", "backup", copy_text]);
    assert!(backup.status.success(), "{}", stderr(&backup));
    // A backup never overwrites.
    let again = admin(&db, &["db", "backup", copy_text]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("already exists"),
        "{}",
        stderr(&again)
    );
    // A database another process holds open is not replaced.
    let holder = serving(&db);
    let busy = admin(&db, &["db", "restore", copy_text]);
    drop(holder);
    assert_eq!(busy.status.code(), Some(1), "{}", stderr(&busy));
    assert!(
        stderr(&busy).contains("in use by another process"),
        "{}",
        stderr(&busy)
    );
    // A damaged copy fails its check and is not restored.
    damage(&copy, Damage::ZeroedPages);
    let checked = run_to_end(
        &["admin", "db", "check", copy_text],
        Duration::from_secs(60),
    );
    assert_eq!(checked.status.code(), Some(1));
    assert!(
        stderr(&checked).contains("is damaged"),
        "{}",
        stderr(&checked)
    );
    let refused = admin(&db, &["db", "restore", copy_text]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("fails integrity_check"),
        "{}",
        stderr(&refused)
    );
    let listed = admin(&db, &["project", "list"]);
    assert_eq!(String::from_utf8_lossy(&listed.stdout).lines().count(), 20);
}

/// `relay desktop --state STATE ARGS…`, to its end.
fn desktop(state: &Path, args: &[&str]) -> Output {
    let mut all = vec!["desktop", "--state", state.to_str().expect("utf-8 path")];
    all.extend_from_slice(args);
    run_to_end(&all, Duration::from_secs(120))
}

/// Expects `output` to be a refusal (exit 1) whose message says all of `parts`.
fn refused_saying(output: &Output, parts: &[&str]) {
    let text = stderr(output);
    assert_eq!(output.status.code(), Some(1), "{parts:?}: {text}");
    for part in parts {
        assert!(text.contains(part), "{part:?} in: {text}");
    }
}

#[test]
fn each_programs_db_tools_refuse_the_other_programs_file_and_an_empty_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, state) = (dir.path().join("relay.db"), dir.path().join("desktop.db"));
    let made = admin(&db, &["project", "create", "p"]);
    assert!(made.status.success(), "{}", stderr(&made));
    let made = desktop(&state, &["session", "list"]);
    assert!(made.status.success(), "{}", stderr(&made));
    let (db_text, state_text) = (db.to_str().expect("utf-8"), state.to_str().expect("utf-8"));
    let service_file = ["the relay service's database", "relay admin db"];
    let desktop_file = ["a desktop relay's state", "relay desktop db"];

    // Each program's own file passes its own check.
    for own in [
        admin(&db, &["db", "check", db_text]),
        desktop(&state, &["db", "check", state_text]),
    ] {
        assert!(own.status.success(), "{}", stderr(&own));
        assert_eq!(String::from_utf8_lossy(&own.stdout).trim(), "ok");
    }
    // The other's file: refused by check, restore, backup and opening, saying what it is.
    refused_saying(&desktop(&state, &["db", "check", db_text]), &service_file);
    refused_saying(&admin(&db, &["db", "check", state_text]), &desktop_file);
    refused_saying(&desktop(&state, &["db", "restore", db_text]), &service_file);
    refused_saying(&admin(&db, &["db", "restore", state_text]), &desktop_file);
    refused_saying(
        &admin(&state, &["db", "backup", "/nonexistent/x.db"]),
        &desktop_file,
    );
    refused_saying(&desktop(&db, &["session", "list"]), &service_file);
    refused_saying(&admin(&state, &["project", "list"]), &desktop_file);
    // A backup restored over the other program's file is refused too, and that file stays.
    let backup = dir.path().join("desktop-backup.db");
    let copied = desktop(&state, &["db", "backup", backup.to_str().expect("utf-8")]);
    assert!(copied.status.success(), "{}", stderr(&copied));
    refused_saying(
        &desktop(&db, &["db", "restore", backup.to_str().expect("utf-8")]),
        &service_file,
    );
    let listed = admin(&db, &["project", "list"]);
    assert!(
        listed.status.success(),
        "the service's file is untouched: {}",
        stderr(&listed)
    );
    // An empty file fails both checks, as it fails to open.
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").expect("empty file");
    let empty_text = empty.to_str().expect("utf-8");
    refused_saying(
        &admin(&db, &["db", "check", empty_text]),
        &["is empty (0 bytes)"],
    );
    refused_saying(
        &desktop(&state, &["db", "check", empty_text]),
        &["is empty (0 bytes)"],
    );
}

#[test]
fn db_check_finds_rows_that_sqlite_passes_but_the_desktop_cannot_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("desktop.db");
    let made = desktop(&state, &["session", "list"]);
    assert!(made.status.success(), "{}", stderr(&made));
    let raw = rusqlite::Connection::open(&state).expect("open");
    raw.execute_batch(
        "INSERT INTO history (execution_id, command_id, channel, project_id, session_id, slug,
            status, started_at, arguments, result)
         VALUES ('e-1', 'c-1', 'ch', 'p', 's', 'g', 'completed', 1, CAST(X'7B2261223AFF7D' AS TEXT), '{\"ok\":1}');",
    )
    .expect("a row with bytes that are not UTF-8");
    drop(raw);
    let checked = desktop(&state, &["db", "check", state.to_str().expect("utf-8")]);
    refused_saying(
        &checked,
        &[
            "is damaged",
            "history row e-1: column arguments: not valid UTF-8",
        ],
    );
}

/// Another process's hold on `db`: a `relay serve` that has started serving it.
fn serving(db: &Path) -> ServeChild {
    let child = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(db)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("relay serve");
    let mut child = ServeChild(child);
    // Serving once it logs its address.
    let stderr = child.0.stderr.take().expect("stderr");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let started = lines.any(|line| line.is_ok_and(|l| l.contains("serving MCP")));
    assert!(started, "relay serve did not start");
    child
}

struct ServeChild(std::process::Child);

impl Drop for ServeChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The probes on a full disk: not ready for what writes (a balancer sends nothing), reads
/// still answered, the file named, alive all the same.
async fn probes_say_degraded(desktop: &common::Desktop, db: &Path) {
    let (status, ready) = probe(desktop, "/readyz").await;
    assert_eq!(status, 503, "{ready}");
    assert_eq!(
        (
            &ready["status"],
            &ready["cause"],
            &ready["reads"],
            &ready["writes"]
        ),
        (
            &json!("degraded"),
            &json!("disk_full"),
            &json!(true),
            &json!(false)
        ),
        "{ready}"
    );
    assert!(
        ready["error"]
            .as_str()
            .is_some_and(|e| e.contains(&db.display().to_string())),
        "{ready}"
    );
    assert_eq!(probe(desktop, "/healthz").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_the_service_is_named_retryable_and_loses_nothing() {
    let Some(small) = Tmpfs::mount("8m") else {
        eprintln!("SKIPPED: the full-disk checks did not run");
        return;
    };
    let db = small.dir.join("relay.db");
    let service =
        TestService::start_at(&db, Arc::new(ManualClock::new(common::START)), roomy()).await;
    let project = service.project("p", "alice").await;
    let desktop = service.desktop(&project).await;
    desktop.sync(&project, &[1]).await;
    let client = mcp_client(
        &service.mcp_url(),
        &service.full_agent(&project).await,
        Era::Current,
    )
    .await;
    let mut acknowledged = Vec::new();
    for n in 0..10 {
        let answer = call(
            &client,
            "run_graph_session",
            run_args(1, &format!("before-{n}"), json!({})),
        )
        .await;
        acknowledged.push(ok(&answer)["command_id"].as_str().expect("id").to_owned());
    }
    let filler = fill(&small.dir);
    let big = json!({"padding": "y".repeat(32 * 1024)});
    let refused = first_refused_run(&client, &big, &mut acknowledged).await;
    let (key, message) = refused.expect("no write failed on a full disk");
    assert!(
        message.contains("disk is full")
            && message.contains("disk_full")
            && message.contains("Retrying helps"),
        "{message}"
    );
    assert!(
        !message.contains("could not reach its database"),
        "{message}"
    );
    // The desktop API: 503 with Retry-After and the cause in the body.
    let (status, retry_after, body) = desktop_sync(&desktop, &project, &[1, 2]).await;
    assert_eq!(status, 503, "{body}");
    assert!(retry_after.is_some_and(|s| s > 0), "{retry_after:?}");
    assert_eq!(body["cause"], "disk_full", "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("disk holding the database is full")),
        "{body}"
    );
    probes_say_degraded(&desktop, &db).await;
    // Space returns: the same calls succeed, and nothing acknowledged before is lost.
    std::fs::remove_file(&filler).expect("free the space");
    let (status, ready) = probe(&desktop, "/readyz").await;
    assert_eq!(
        (status, &ready["status"]),
        (200, &json!("ready")),
        "{ready}"
    );
    let answer = call(&client, "run_graph_session", run_args(1, &key, big.clone())).await;
    acknowledged.push(ok(&answer)["command_id"].as_str().expect("id").to_owned());
    let (status, _, body) = desktop_sync(&desktop, &project, &[1, 2]).await;
    assert_eq!(status, 200, "{body}");
    for id in &acknowledged {
        let run = ok(&call(&client, "get_graph_run", json!({"command_id": id})).await);
        assert_eq!(run["status"], "queued", "{id}: {run}");
    }
    service.stop().await;
}

/// Queues runs with `arguments` until one is refused: until SQLite's log must grow, a write may
/// still fit on a full disk. Returns its key and the tool error; the accepted ids go to
/// `acknowledged`.
async fn first_refused_run(
    client: &common::McpClient,
    arguments: &Value,
    acknowledged: &mut Vec<String>,
) -> Option<(String, String)> {
    for n in 0..2000 {
        let key = format!("full-disk-{n}");
        let answer = call(
            client,
            "run_graph_session",
            run_args(1, &key, arguments.clone()),
        )
        .await;
        if answer.is_error == Some(true) {
            return Some((key, err(&answer)));
        }
        acknowledged.push(ok(&answer)["command_id"].as_str().expect("id").to_owned());
    }
    None
}

/// `GET PATH` of the service (a probe): (status, body).
async fn probe(desktop: &common::Desktop, path: &str) -> (u16, Value) {
    let response = desktop
        .http
        .get(format!("{}{path}", desktop.base))
        .send()
        .await
        .expect("probe");
    common::decode(response).await
}

/// A desktop sync: (status, Retry-After seconds, body).
async fn desktop_sync(
    desktop: &common::Desktop,
    project: &str,
    sessions: &[u32],
) -> (u16, Option<u64>, Value) {
    let sessions: Vec<Value> = sessions.iter().map(|&n| common::session(n)).collect();
    let response = desktop
        .http
        .post(format!(
            "{}/external-assistants/graph-relays/sync",
            desktop.base
        ))
        .bearer_auth(&desktop.token)
        .json(&json!({"project_id": project, "sessions": sessions}))
        .send()
        .await
        .expect("sync");
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let (status, body) = common::decode(response).await;
    (status, retry_after, body)
}
