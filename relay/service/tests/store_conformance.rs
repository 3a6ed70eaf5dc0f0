//! Every store keeps the promises of the conformance suite; the SQLite store also keeps its
//! data across a reopen.

use std::sync::Arc;

use relay_service::store::{SqliteStore, Store, conformance};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_file_store_passes_the_suite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let counter = std::sync::atomic::AtomicUsize::new(0);
    conformance::run_all(|| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let store = SqliteStore::open(&dir.path().join(format!("store-{n}.db"))).expect("open");
        Arc::new(store) as Arc<dyn Store>
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_memory_store_passes_the_suite() {
    conformance::run_all(|| {
        Arc::new(SqliteStore::open_in_memory().expect("open")) as Arc<dyn Store>
    })
    .await;
}

#[tokio::test]
async fn sqlite_store_keeps_data_across_reopen_and_migrates_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("relay.db");
    let now = relay_protocol::clock::Timestamp::from_unix_millis(1_000);
    let owner = {
        let store = SqliteStore::open(&path).expect("open");
        store.ensure_owner("alice", now).await.expect("owner")
    };
    let store = SqliteStore::open(&path).expect("reopen");
    assert_eq!(
        store.ensure_owner("alice", now).await.expect("owner"),
        owner
    );
}

/// A SQLite file holding one queued command, taken back `versions` schema versions by `undo`
/// (SQL), then opened by this build, which migrates it: the command from before, the migrated
/// store, and the folder the file is in (kept while the store is used).
async fn sqlite_taken_back(
    undo: &str,
    versions: usize,
) -> (
    relay_service::store::CommandRecord,
    SqliteStore,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("relay.db");
    let before = {
        let store = SqliteStore::open(&path).expect("open");
        conformance::queued_command(&store).await
    };
    let current = relay_service::store::sqlite::migrations().len();
    let connection = rusqlite::Connection::open(&path).expect("open the file");
    connection
        .execute_batch(&format!(
            "{undo} PRAGMA user_version = {};",
            current - versions
        ))
        .expect("take the schema back");
    drop(connection);
    let store = SqliteStore::open(&path).expect("open and migrate");
    let connection = rusqlite::Connection::open(&path).expect("open the file");
    let version: i64 = connection
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .expect("version");
    assert_eq!(usize::try_from(version).ok(), Some(current));
    (before, store, dir)
}

/// A file from the release before end causes (no `cancel_cause`, no `end_cause` on commands)
/// opens with this build: its runs read as they were, and causes are kept from then on.
#[tokio::test]
async fn sqlite_store_migrates_a_file_from_before_end_causes() {
    let undo = "ALTER TABLE commands DROP COLUMN cancel_cause;
                ALTER TABLE commands DROP COLUMN end_cause;
                ALTER TABLE commands DROP COLUMN resumed;
                ALTER TABLE commands DROP COLUMN resumed_at;";
    let (before, store, _dir) = sqlite_taken_back(undo, 2).await;
    conformance::a_command_from_before_end_causes_keeps_them_after(&store, &before).await;
}

/// A file from the release before resumes (no `resumed`, `resumed_at` on commands) opens with
/// this build: its runs read as never resumed, and resumes are kept from then on.
#[tokio::test]
async fn sqlite_store_migrates_a_file_from_before_resumes() {
    let undo = "ALTER TABLE commands DROP COLUMN resumed;
                ALTER TABLE commands DROP COLUMN resumed_at;";
    let (before, store, _dir) = sqlite_taken_back(undo, 1).await;
    conformance::a_command_from_before_resumes_keeps_them_after(&store, &before).await;
}

use relay_testkit::postgres_url;

/// A PostgreSQL schema of its own (named from `name`) holding one queued command, taken back
/// `versions` schema versions by `undo` (SQL, `{schema}` standing for the schema's name), then
/// opened by this build, which migrates it: the command from before, the migrated store, and a
/// client on the database (which drops the schema in [`drop_schema`]).
async fn postgres_taken_back(
    url: &str,
    name: &str,
    undo: &str,
    versions: usize,
) -> (
    relay_service::store::CommandRecord,
    relay_service::store::PostgresStore,
    tokio_postgres::Client,
    String,
) {
    let schema = format!("{name}_{}", uuid::Uuid::new_v4().simple());
    let connect = || relay_service::store::PostgresStore::connect_in_schema(url, Some(&schema));
    let before = {
        let store = connect().await.expect("connect");
        conformance::queued_command(&store).await
    };
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    let current = relay_service::store::PostgresStore::SCHEMA_VERSION;
    client
        .batch_execute(&format!(
            "{} UPDATE {schema}.relay_schema SET version = {};",
            undo.replace("{schema}", &schema),
            current - versions
        ))
        .await
        .expect("take the schema back");
    let store = connect().await.expect("connect and migrate");
    (before, store, client, schema)
}

async fn drop_schema(client: &tokio_postgres::Client, schema: &str) {
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .expect("drop schema");
}

/// A PostgreSQL schema from the release before resumes migrates when a replica of this build
/// starts on it: its runs read as never resumed, and resumes are kept from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_migrates_a_schema_from_before_resumes() {
    let Some(url) = postgres_url() else {
        return;
    };
    let undo = "ALTER TABLE {schema}.commands DROP COLUMN resumed;
                ALTER TABLE {schema}.commands DROP COLUMN resumed_at;";
    let (before, store, client, schema) =
        postgres_taken_back(&url, "before_resumes", undo, 1).await;
    conformance::a_command_from_before_resumes_keeps_them_after(&store, &before).await;
    drop_schema(&client, &schema).await;
}

/// A PostgreSQL schema from the release before end causes migrates when a replica of this
/// build starts on it: its runs read as they were, and causes are kept from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_migrates_a_schema_from_before_end_causes() {
    let Some(url) = postgres_url() else {
        return;
    };
    let undo = "ALTER TABLE {schema}.commands DROP COLUMN cancel_cause;
                ALTER TABLE {schema}.commands DROP COLUMN end_cause;
                ALTER TABLE {schema}.commands DROP COLUMN resumed;
                ALTER TABLE {schema}.commands DROP COLUMN resumed_at;";
    let (before, store, client, schema) = postgres_taken_back(&url, "before_causes", undo, 2).await;
    conformance::a_command_from_before_end_causes_keeps_them_after(&store, &before).await;
    let row = client
        .query_one(&format!("SELECT version FROM {schema}.relay_schema"), &[])
        .await
        .expect("schema version");
    let current = relay_service::store::PostgresStore::SCHEMA_VERSION;
    assert_eq!(usize::try_from(row.get::<_, i32>(0)).ok(), Some(current));
    drop_schema(&client, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_store_passes_the_suite() {
    let Some(url) = postgres_url() else {
        return;
    };
    let schemas = std::sync::Mutex::new(Vec::new());
    conformance::run_all(|| {
        let schema = format!("conformance_{}", uuid::Uuid::new_v4().simple());
        schemas.lock().expect("schemas").push(schema.clone());
        let store = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(
                relay_service::store::PostgresStore::connect_in_schema(&url, Some(&schema)),
            )
        })
        .expect("connect to PostgreSQL");
        Arc::new(store) as Arc<dyn Store>
    })
    .await;
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    for schema in schemas.into_inner().expect("schemas") {
        client
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .expect("drop schema");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_migrations_run_once_when_replicas_start_together() {
    let Some(url) = postgres_url() else {
        return;
    };
    let schema = format!("migrate_{}", uuid::Uuid::new_v4().simple());
    let starts =
        (0..4).map(|_| relay_service::store::PostgresStore::connect_in_schema(&url, Some(&schema)));
    for store in futures_util::future::join_all(starts).await {
        store.expect("every replica starts on the migrated schema");
    }
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    let row = client
        .query_one(&format!("SELECT version FROM {schema}.relay_schema"), &[])
        .await
        .expect("schema version");
    assert_eq!(
        usize::try_from(row.get::<_, i32>(0)).ok(),
        Some(relay_service::store::PostgresStore::SCHEMA_VERSION),
        "every migration applied"
    );
    let rows = client
        .query_one(&format!("SELECT count(*) FROM {schema}.relay_schema"), &[])
        .await
        .expect("count");
    assert_eq!(rows.get::<_, i64>(0), 1, "one version row");
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .expect("drop schema");
}

/// The suite states the chat task sweep's moves without the domain (the store's floor names
/// nothing above it); here the task state machine is held to them, so the two cannot drift.
#[test]
fn the_sweep_rules_of_the_suite_are_the_task_machines() {
    use relay_service::chat_tasks::machine::{TaskDecision, TaskEvent, transition};
    use relay_service::model::TaskStatus;
    use relay_service::store::TaskRecord;

    let t0 = relay_protocol::clock::Timestamp::from_unix_millis(1_794_130_200_000);
    let at = |seconds: u64| t0.saturating_add(std::time::Duration::from_secs(seconds));
    let day = std::time::Duration::from_secs(24 * 60 * 60);
    let by_machine = |task: &TaskRecord, now| {
        [TaskEvent::Expire, TaskEvent::LeaseLapsed]
            .into_iter()
            .fold(task.clone(), |task, event| {
                match transition(&task, event, now) {
                    TaskDecision::Write(next) => *next,
                    _ => task,
                }
            })
    };
    let task = |status: TaskStatus, lease: Option<u64>| {
        let mut task = TaskRecord::queued("link".into(), "goal".into(), "k".into(), t0, day);
        task.status = status;
        if status != TaskStatus::Queued {
            task.claim_id = Some("claim".into());
            task.claimed_at = Some(t0);
        }
        if status == TaskStatus::Claimed {
            task.lease_until = lease.map(at);
        }
        task
    };
    let mut tasks: Vec<TaskRecord> = TaskStatus::ALL
        .into_iter()
        .map(|status| task(status, Some(60)))
        .collect();
    tasks.push(task(TaskStatus::Claimed, None));
    tasks.push(task(TaskStatus::Claimed, Some(2 * 24 * 60 * 60)));
    for task in &tasks {
        for now in [at(0), at(1), at(60), at(61), t0.saturating_add(day)] {
            assert_eq!(
                conformance::swept(task, now),
                by_machine(task, now),
                "{} (lease {:?}) at {now}",
                task.status,
                task.lease_until
            );
        }
    }
}
