//! Three `relay serve` replicas on one PostgreSQL database, over real HTTP, behave as one
//! service: a run queued through one replica's MCP wakes a desktop long-polling another; a
//! cancel sent to a third reaches it; claims and idempotency keys have one winner whichever
//! replicas the racing requests reach; an OAuth token issued by one works on the others and,
//! revoked on one, fails on all; a 2025-era MCP session is refused by a replica that did not
//! open it, with an answer naming sticky routing; a replica killed under a desktop's held poll
//! costs the desktop one reconnect through the load balancer, and no run. Needs
//! `GRAPHRELAY_PG_URL` (scripts/pg.sh).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use relay_protocol::clock::{Stopwatch, SystemClock};
use relay_service::admin::{self, TokenSpec};
use relay_service::chat_tasks::owner::{self, Acting, AssignRequest};
use relay_service::store::PostgresStore;
use relay_service::{AppState, ServiceConfig};
use serde_json::{Value, json};

use crate::cli::{Child, serve_with_base};
use crate::common::{self, Desktop, Era, McpClient, call, ok};
use crate::postgres_cli::fresh_database;

/// Tasks raced for, and claims per task.
const TASKS: usize = 200;
const CLAIMS_PER_TASK: usize = 8;
/// Concurrent `run_graph_session` calls with one key.
const SAME_KEY_CALLS: usize = 50;

/// The replicas: each its own process, port and metrics listener, on one database.
pub(crate) struct Replicas {
    pub(crate) bases: Vec<String>,
    pub(crate) metrics: Vec<String>,
    pub(crate) children: Vec<Child>,
}

pub(crate) async fn start_replicas(db: &str, count: usize) -> Replicas {
    let (mut bases, mut metrics, mut children) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..count {
        let metrics_address = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe");
            probe.local_addr().expect("address").to_string()
        };
        // No per-token rate limit: the races below are many calls of one token, on purpose.
        let (child, base) = serve_with_base(
            Path::new(db),
            &[
                "--rate-per-token",
                "0",
                "--metrics-listen",
                &metrics_address,
            ],
        )
        .await;
        bases.push(base);
        metrics.push(format!("http://{metrics_address}/metrics"));
        children.push(child);
    }
    Replicas {
        bases,
        metrics,
        children,
    }
}

/// The operator's side, in-process on the same database: the project, tokens, links, tasks.
pub(crate) struct Admin {
    pub(crate) app: Arc<AppState>,
    pub(crate) project: String,
    pub(crate) desktop_token: String,
    pub(crate) agent_token: String,
}

pub(crate) async fn admin_on(db: &str) -> Admin {
    let store = PostgresStore::connect(db).await.expect("connect");
    let app = AppState::new(
        Arc::new(store),
        Arc::new(SystemClock),
        ServiceConfig::default(),
    );
    let project = admin::create_project(&app.admin(), "Notes", Some("ann"))
        .await
        .expect("project")
        .project_id;
    let desktop_token = admin::create_token(&app.admin(), &project, TokenSpec::Desktop)
        .await
        .expect("desktop token")
        .token;
    let agent = TokenSpec::Agent {
        name: "claude".into(),
        scopes: vec!["osfoundry:read".into(), "osfoundry:run".into()],
    };
    let agent_token = admin::create_token(&app.admin(), &project, agent)
        .await
        .expect("agent token")
        .token;
    Admin {
        app,
        project,
        desktop_token,
        agent_token,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_on_one_database_behave_as_one_service() {
    let Some(url) = common::postgres_url() else {
        return;
    };
    let (db, dropper) = fresh_database(&url).await;
    let admin = admin_on(&db).await;
    let replicas = start_replicas(&db, 3).await;
    let agents = agents_on(&replicas, &admin.agent_token).await;
    let desktop_a = Desktop {
        http: common::http_client(),
        base: replicas.bases[0].clone(),
        token: admin.desktop_token.clone(),
    };
    desktop_a.sync(&admin.project, &[1]).await;

    let id = pickup_across_replicas(&desktop_a, &admin.project, &agents[1]).await;
    cancel_across_replicas(&desktop_a, &admin.project, &agents[2], &id).await;
    one_key_one_command(&agents).await;
    no_double_claims(&admin, &agents).await;
    let lag = scrape_lag_count(&replicas.metrics[0]).await;
    assert!(
        lag >= 1.0,
        "replica A measured the wake-ups that crossed to it: {lag}"
    );
    oauth_across_replicas(&admin, &replicas.bases).await;
    sessions_are_refused_by_other_replicas(&admin.agent_token, &replicas.bases).await;
    for agent in agents {
        agent.cancel().await.ok();
    }
    drop(replicas);
    dropper.drop_database().await;
}

async fn agents_on(replicas: &Replicas, token: &str) -> Vec<McpClient> {
    let mut agents = Vec::new();
    for base in &replicas.bases {
        agents.push(common::mcp_client(&format!("{base}/mcp"), token, Era::Current).await);
    }
    agents
}

/// A desktop long-polling replica A picks up a run queued through replica B's MCP endpoint, at
/// once (the NOTIFY), not at its poll's 20 s deadline. Returns the run's id.
async fn pickup_across_replicas(desktop: &Desktop, project: &str, agent_b: &McpClient) -> String {
    let poll = json!({
        "project_id": project,
        "sessions": [common::session(1)],
        "wait_ms": 20_000,
    });
    let held = desktop.sync_raw(&poll);
    let queue = async {
        // Queued while the poll is held (the poll subscribes before it reads, so a run queued
        // a moment early is found by its read instead: either way it is picked up).
        tokio::time::sleep(Duration::from_millis(300)).await;
        ok(&call(
            agent_b,
            "run_graph_session",
            common::run_args(1, "pickup-1", json!({})),
        )
        .await)
    };
    let watch = Stopwatch::start();
    let ((status, body), queued) = tokio::join!(held, queue);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["commands"][0]["command_id"], queued["command_id"],
        "{body}"
    );
    assert!(
        watch.elapsed() < Duration::from_secs(15),
        "woken through PostgreSQL, not by the deadline: {:?}",
        watch.elapsed()
    );
    queued["command_id"]
        .as_str()
        .expect("command id")
        .to_owned()
}

/// The desktop on A runs the command and long-polls with it as running; a cancel sent to
/// replica C ends that poll with the cancel request.
async fn cancel_across_replicas(desktop: &Desktop, project: &str, agent_c: &McpClient, id: &str) {
    assert_eq!(desktop.started(id, "exec-replicas").await.0, 200);
    let poll = json!({
        "project_id": project,
        "sessions": [],
        "sessions_unchanged": true,
        "wait_ms": 20_000,
        "running": [id],
    });
    let held = desktop.sync_raw(&poll);
    let cancel = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        ok(&call(agent_c, "cancel_graph_run", json!({"command_id": id})).await)
    };
    let watch = Stopwatch::start();
    let ((status, body), _) = tokio::join!(held, cancel);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["cancel_requested"], json!([id]), "{body}");
    assert!(
        watch.elapsed() < Duration::from_secs(15),
        "{:?}",
        watch.elapsed()
    );
}

/// 50 concurrent `run_graph_session` calls with one idempotency key, spread over the three
/// replicas: one command.
async fn one_key_one_command(agents: &[McpClient]) {
    let calls = (0..SAME_KEY_CALLS).map(|n| {
        call(
            &agents[n % agents.len()],
            "run_graph_session",
            common::run_args(1, "one-key-50", json!({})),
        )
    });
    let ids: BTreeSet<String> = futures_util::future::join_all(calls)
        .await
        .iter()
        .map(|answer| ok(answer)["command_id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
}

/// 200 tasks, each claimed by 8 concurrent calls spread over the replicas: each task has one
/// claim (one answer not `replayed`, every answer the same claim id), none two.
async fn no_double_claims(admin: &Admin, agents: &[McpClient]) {
    let link = owner::create_link(
        &admin.app.tasks,
        Acting::Operator,
        &admin.project,
        "claude",
        false,
    )
    .await
    .expect("link")
    .chat_link_id;
    let mut tasks = Vec::new();
    for n in 0..TASKS {
        let key = format!("race-{n}");
        let request = AssignRequest {
            chat_link_id: &link,
            goal: "Reply to the landlord",
            idempotency_key: &key,
        };
        let assigned = owner::assign_task(&admin.app.tasks, Acting::Operator, request)
            .await
            .expect("assign");
        tasks.push(assigned.task.task_id.to_string());
    }
    let mut claims: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (n, task) in tasks.iter().enumerate() {
        let racing = (0..CLAIMS_PER_TASK).map(|k| {
            call(
                &agents[(n + k) % agents.len()],
                "claim_linked_chat_task",
                json!({"chat_link_id": link, "task_id": task}),
            )
        });
        let answers = futures_util::future::join_all(racing).await;
        claims.insert(task.clone(), answers.iter().map(ok).collect());
    }
    let mut doubles = 0;
    for (task, answers) in &claims {
        let fresh = answers.iter().filter(|a| a["replayed"] == false).count();
        let ids: BTreeSet<&str> = answers
            .iter()
            .filter_map(|a| a["claim_id"].as_str())
            .collect();
        if fresh != 1 || ids.len() != 1 {
            doubles += 1;
            eprintln!("task {task}: {fresh} fresh claims, claim ids {ids:?}");
        }
    }
    assert_eq!(doubles, 0, "double claims over {TASKS} tasks");
}

/// `relay_notify_lag_seconds_count` of one replica.
async fn scrape_lag_count(metrics: &str) -> f64 {
    let text = common::http_client()
        .get(metrics)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .find_map(|line| line.strip_prefix("relay_notify_lag_seconds_count "))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0.0)
}

/// An OAuth grant made on replica A: its access token works on B and C; revoked on C, it
/// fails on A.
async fn oauth_across_replicas(admin: &Admin, bases: &[String]) {
    use common::oauth::{Browser, connect, mcp_status, register};
    let password = "correct horse battery staple";
    admin::set_owner_password(&admin.app.admin(), "ann", password.into())
        .await
        .expect("password");
    let app = register(&bases[0], "Replica test app").await;
    let tokens = connect(&Browser::new(), &app, "ann", password, &admin.project).await;
    for base in bases {
        assert_eq!(mcp_status(base, &tokens.access).await, 200, "{base}");
    }
    let revoked = common::http_client()
        .post(format!("{}/oauth/revoke", bases[2]))
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(common::oauth::form_body(&[
            ("token", &tokens.refresh),
            ("client_id", &app.client_id),
        ]))
        .send()
        .await
        .expect("revoke answered");
    assert_eq!(revoked.status(), 200);
    for base in bases {
        assert_eq!(
            mcp_status(base, &tokens.access).await,
            401,
            "{base}: a grant revoked on C is revoked everywhere"
        );
    }
}

/// A 2025-era session opened on A works on A; B does not know it and says so, naming sticky
/// routing (sessions are not shared between replicas).
async fn sessions_are_refused_by_other_replicas(token: &str, bases: &[String]) {
    let http = common::http_client();
    let post = |base: &str, session: Option<&str>, body: Value| {
        let mut request = http
            .post(format!("{base}/mcp"))
            .bearer_auth(token)
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .header("mcp-protocol-version", "2025-06-18")
            .json(&body);
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request.send()
    };
    let opened = post(
        &bases[0],
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}),
    )
    .await
    .expect("initialize");
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .expect("ascii")
        .to_owned();
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let same = post(&bases[0], Some(&session), list.clone())
        .await
        .expect("list");
    assert_eq!(same.status(), 200, "the replica that opened it serves it");
    let other = post(&bases[1], Some(&session), list).await.expect("list");
    assert_eq!(other.status(), 404);
    let text = other.text().await.expect("text");
    assert!(
        text.contains("sticky routing") && text.contains("Initialize again"),
        "{text}"
    );
}

/// A load balancer in front of the replicas, as an operator has one: each new connection goes
/// to the first replica that accepts it (so everything reaches A until A is gone).
pub(crate) async fn failover_proxy(backends: Vec<String>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let backends: Vec<String> = backends
        .iter()
        .map(|base| base.trim_start_matches("http://").to_owned())
        .collect();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let backends = backends.clone();
            tokio::spawn(async move {
                for backend in &backends {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(backend).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        return;
                    }
                }
            });
        }
    });
    format!("http://{address}")
}

/// A long poll of `project` (20 s, naming `id` as running) through the desktop's base, held
/// in a task of its own: its answer read whole, or the error that cut it.
fn hold_poll(
    desktop: &Desktop,
    project: &str,
    id: &str,
) -> tokio::task::JoinHandle<Result<(), reqwest::Error>> {
    let (http, base, token) = (
        desktop.http.clone(),
        desktop.base.clone(),
        desktop.token.clone(),
    );
    let body = json!({"project_id": project, "sessions": [], "sessions_unchanged": true, "wait_ms": 20_000, "running": [id]});
    tokio::spawn(async move {
        let path = relay_protocol::DESKTOP_API_PREFIX;
        let sent = http
            .post(format!("{base}{path}/sync"))
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await;
        match sent {
            Ok(answer) => answer.text().await.map(|_| ()),
            Err(error) => Err(error),
        }
    })
}

/// A desktop behind the load balancer holds its long poll on replica A, runs a command; A is
/// killed (SIGKILL) mid-run. The held poll fails at once, the desktop's next poll reaches B,
/// and its completion lands on B, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_replica_costs_its_desktops_one_reconnect_and_no_run() {
    let Some(url) = common::postgres_url() else {
        return;
    };
    let (db, dropper) = fresh_database(&url).await;
    let admin = admin_on(&db).await;
    let mut replicas = start_replicas(&db, 2).await;
    let balancer = failover_proxy(replicas.bases.clone()).await;
    let agent_b = common::mcp_client(
        &format!("{}/mcp", replicas.bases[1]),
        &admin.agent_token,
        Era::Current,
    )
    .await;
    let desktop = Desktop {
        http: common::http_client(),
        base: balancer.clone(),
        token: admin.desktop_token.clone(),
    };
    desktop.sync(&admin.project, &[1]).await;
    let id = pickup_across_replicas(&desktop, &admin.project, &agent_b).await;
    assert_eq!(desktop.started(&id, "exec-kill").await.0, 200);

    let held_on_a = hold_poll(&desktop, &admin.project, &id);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let watch = Stopwatch::start();
    replicas.children[0].0.kill().expect("SIGKILL replica A");
    // Gone for good, its listener too (a load balancer's health check would see the same).
    replicas.children[0].0.wait().expect("replica A exits");
    let cut = held_on_a.await.expect("the held poll's task");
    assert!(
        cut.is_err(),
        "the poll held by the killed replica is cut, not answered"
    );
    assert!(
        watch.elapsed() < Duration::from_secs(10),
        "{:?}",
        watch.elapsed()
    );

    // The desktop reconnects (a new connection: the old one died with A); the balancer sends
    // it to B, which knows the run.
    let desktop = Desktop {
        http: common::http_client(),
        ..desktop
    };
    let (status, body) = desktop
        .sync_raw(&json!({"project_id": admin.project, "sessions": [], "sessions_unchanged": true, "running": [id]}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["cancel_requested"], json!(null), "{body}");
    let completion = json!({"execution_id": "exec-kill", "status": "completed", "result": {"after": "failover"}});
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
    let run = ok(&call(&agent_b, "get_graph_run", json!({"command_id": id})).await);
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["result"], json!({"after": "failover"}), "{run}");
    agent_b.cancel().await.ok();
    drop(replicas);
    dropper.drop_database().await;
}
