//! PostgreSQL stops for 5 s under a running `relay serve` mid-run: every request is answered
//! 503 (retry later), never 500 and never held, `/readyz` says not ready, and once the database
//! is back the completion the desktop kept in its outbox lands, once. The test stops and starts
//! a cluster of its own (`scripts/pg.sh` with `PG_DIR`), never the one other tests share.

use std::path::PathBuf;
use std::time::Duration;

use relay_protocol::clock::Stopwatch;
use serde_json::json;

use crate::cli::serve_with_base;
use crate::common::{self, Desktop, Era, call, ok};
use crate::replicas::admin_on;

/// How long the database is down.
const OUTAGE: Duration = Duration::from_secs(5);
/// How long any answer may take while it is down (a hang fails the test instead).
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// A PostgreSQL cluster of this test's own under `target/`, removed when dropped.
struct OwnCluster {
    dir: PathBuf,
}

impl OwnCluster {
    fn pg_sh(&self, action: &str) -> String {
        common::pg_sh(action, &self.dir, None)
    }

    /// Starts a new cluster; its URL.
    fn start() -> (OwnCluster, String) {
        let dir = common::workspace_root()
            .join("target")
            .join(format!("pg-outage-{}", uuid::Uuid::new_v4().simple()));
        let cluster = OwnCluster { dir };
        let url = cluster.pg_sh("start");
        (cluster, url)
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        self.pg_sh("stop");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `future`'s answer, failing the test if it takes longer than [`ANSWER_WITHIN`].
async fn promptly<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(ANSWER_WITHIN, future)
        .await
        .unwrap_or_else(|_| {
            panic!("{what}: no answer within {ANSWER_WITHIN:?} while the database is down")
        })
}

/// Waits until `/readyz` answers 200 again (at most 30 s after the database returned).
async fn wait_until_ready(http: &reqwest::Client, base: &str) {
    let back = Stopwatch::start();
    loop {
        let ready = http
            .get(format!("{base}/readyz"))
            .send()
            .await
            .expect("readyz");
        if ready.status() == 200 {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(30),
            "not ready 30 s after the database returned"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A desktop sync while the database is down: 503 with `Retry-After`, answered promptly.
async fn sync_is_refused_for_now(http: &reqwest::Client, base: &str, token: &str, project: &str) {
    let sync = promptly(
        "sync",
        http.post(format!("{base}{}/sync", relay_protocol::DESKTOP_API_PREFIX))
            .bearer_auth(token)
            .json(&json!({"project_id": project, "sessions": [common::session(1)]}))
            .send(),
    )
    .await
    .expect("sync answered");
    assert_eq!(sync.status(), 503);
    assert!(
        sync.headers().contains_key("retry-after"),
        "{:?}",
        sync.headers()
    );
    let body: serde_json::Value = sync.json().await.expect("the error shape");
    assert_eq!(
        body["cause"],
        relay_protocol::cause::UNAVAILABLE,
        "a database that does not answer is named so: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_answers_503_and_the_outbox_completion_lands_once() {
    // The shared cluster's presence says PostgreSQL is installed here (and CI requires it).
    if common::postgres_url().is_none() {
        return;
    }
    let (cluster, url) = OwnCluster::start();
    let admin = admin_on(&url).await;
    let (_child, base) = serve_with_base(std::path::Path::new(&url), &[]).await;
    let http = common::http_client();
    let desktop = Desktop {
        http: http.clone(),
        base: base.clone(),
        token: admin.desktop_token.clone(),
    };
    desktop.sync(&admin.project, &[1]).await;
    let agent = common::mcp_client(&format!("{base}/mcp"), &admin.agent_token, Era::Current).await;
    let queued = ok(&call(
        &agent,
        "run_graph_session",
        common::run_args(1, "outage-1", json!({})),
    )
    .await);
    let id = queued["command_id"].as_str().expect("id").to_owned();
    assert_eq!(desktop.started(&id, "exec-outage").await.0, 200);
    // The admin's connections are not needed again; they would only reconnect.
    let project = admin.project.clone();
    let (desktop_token, agent_token) = (admin.desktop_token.clone(), admin.agent_token.clone());
    drop(admin);

    cluster.pg_sh("stop");
    let down = Stopwatch::start();
    let completion =
        json!({"execution_id": "exec-outage", "status": "completed", "result": {"answer": 42}});
    let ready = promptly("/readyz", http.get(format!("{base}/readyz")).send())
        .await
        .expect("readyz answered");
    assert_eq!(ready.status(), 503, "not ready while the database is down");
    let (status, body) = promptly("complete", desktop.complete(&id, &completion)).await;
    assert_eq!(
        status, 503,
        "the completion is refused for now, not failed: {body}"
    );
    sync_is_refused_for_now(&http, &base, &desktop_token, &project).await;
    let mcp = promptly("mcp", common::oauth::mcp_status(&base, &agent_token)).await;
    assert_eq!(mcp, 503, "an agent's request too");
    assert!(
        down.elapsed() < OUTAGE,
        "every check ran while the database was down"
    );

    tokio::time::sleep(OUTAGE.saturating_sub(down.elapsed())).await;
    cluster.pg_sh("start");
    wait_until_ready(&http, &base).await;
    // The desktop's outbox sends the completion again until it is acknowledged: it lands once.
    let (status, body) = desktop.complete(&id, &completion).await;
    assert_eq!(
        (status, &body),
        (200, &json!({"ok": true, "replayed": false}))
    );
    let (status, body) = desktop.complete(&id, &completion).await;
    assert_eq!(
        (status, &body),
        (200, &json!({"ok": true, "replayed": true}))
    );
    let run = ok(&call(&agent, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["result"], json!({"answer": 42}), "{run}");
    agent.cancel().await.ok();
}
