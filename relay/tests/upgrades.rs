//! Upgrades: `relay --version` names the schema versions the build speaks; `relay admin db
//! version` and `relay desktop db version` read a database's without changing it; a database
//! from a newer build is refused and left exactly as it was (SQLite: not even switched to WAL;
//! PostgreSQL: its version row kept), with a message that says so and not that the server may
//! be down.

use std::path::Path;
use std::process::{Command, Output};

use relay_desktop::state::DesktopState;
use relay_service::store::{PostgresStore, SqliteStore};

use crate::cli::{plain, relay};
use crate::common;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(args)
        .env_remove("RELAY_DB")
        .env_remove("RELAY_DATABASE_URL")
        .output()
        .expect("run relay")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_version_names_the_schema_versions_this_build_speaks() {
    let output = run(&["--version"]);
    let version = text(&output.stdout);
    let expected = format!(
        "service database {} on SQLite, {} on PostgreSQL; desktop state {}",
        SqliteStore::SCHEMA_VERSION,
        PostgresStore::SCHEMA_VERSION,
        DesktopState::SCHEMA_VERSION
    );
    assert!(version.contains(&expected), "{version}");
}

#[test]
fn db_version_reads_a_database_and_says_what_this_build_does_with_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("relay.db");
    plain(&relay(&db, &["project", "create", "Demo"]));
    let current = relay(&db, &["db", "version"]);
    assert_eq!(plain(&current), SqliteStore::SCHEMA_VERSION.to_string());
    assert!(text(&current.stderr).contains("uses the database as it is"));
    let json: serde_json::Value =
        serde_json::from_str(&plain(&relay(&db, &["--json", "db", "version"]))).expect("json");
    assert_eq!(json["state"], "current", "{json}");
    assert_eq!(json["build_schema_version"], SqliteStore::SCHEMA_VERSION);

    let state = dir.path().join("desktop.db");
    let state_arg = state.to_str().expect("utf-8");
    assert!(
        run(&["desktop", "--state", state_arg, "shares"])
            .status
            .success()
    );
    let desktop = run(&["desktop", "--state", state_arg, "db", "version"]);
    assert_eq!(plain(&desktop), DesktopState::SCHEMA_VERSION.to_string());
}

/// The service's SQLite file as a build `version` would leave it (the service's id in its
/// header, a table this build does not know), in the default (rollback) journal mode, as an
/// older file would be before this build ever opened it.
fn newer_file(path: &Path, version: usize) {
    let connection = relay_sqlite::open_private(path).expect("create");
    connection
        .execute_batch(&format!(
            "CREATE TABLE later (x); PRAGMA user_version = {version};"
        ))
        .expect("schema");
    relay_sqlite::identity::stamp(&connection, relay_sqlite::identity::SERVICE).expect("stamp");
}

#[test]
fn a_sqlite_database_from_a_newer_build_is_refused_and_left_unchanged() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("newer.db");
    let newer = SqliteStore::SCHEMA_VERSION + 1;
    newer_file(&db, newer);
    let before = std::fs::read(&db).expect("bytes");
    let version = relay(&db, &["db", "version"]);
    assert!(!version.status.success(), "a database this build refuses");
    assert_eq!(text(&version.stdout).trim(), newer.to_string());
    assert!(text(&version.stderr).contains("newer than this build speaks"));
    for args in [
        vec!["serve", "--listen", "127.0.0.1:0", "--db"],
        vec!["admin", "project", "list", "--db"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_relay"))
            .args(&args)
            .arg(&db)
            .env_remove("RELAY_DB")
            .output()
            .expect("run relay");
        let stderr = text(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "schema version {newer}, newer than this build speaks"
            )) && stderr.contains("left unchanged"),
            "{stderr}"
        );
    }
    assert_eq!(
        std::fs::read(&db).expect("bytes"),
        before,
        "not a byte changed"
    );
    let wal = dir.path().join("newer.db-wal");
    assert!(!wal.exists(), "never switched to WAL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_is_read_without_change_and_refused_when_newer() {
    let Some(url) = common::postgres_url() else {
        return;
    };
    let (db, dropper) = crate::postgres_cli::fresh_database(&url).await;
    let fresh = run(&["admin", "--db", &db, "db", "version"]);
    assert_eq!(plain(&fresh), "none");
    assert!(text(&fresh.stderr).contains("no schema yet"));
    assert!(
        run(&["admin", "--db", &db, "project", "list"])
            .status
            .success()
    );
    let current = run(&["admin", "--db", &db, "db", "version"]);
    assert_eq!(plain(&current), PostgresStore::SCHEMA_VERSION.to_string());

    let (client, connection) = tokio_postgres::connect(&db, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    let newer = i32::try_from(PostgresStore::SCHEMA_VERSION + 1).expect("small");
    client
        .execute("UPDATE relay_schema SET version = $1", &[&newer])
        .await
        .expect("mark newer");
    let refused = run(&["admin", "--db", &db, "project", "list"]);
    let stderr = text(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("newer than this build speaks") && stderr.contains("left unchanged"),
        "{stderr}"
    );
    assert!(!stderr.contains("is it running"), "{stderr}");
    let row = client
        .query_one("SELECT version FROM relay_schema", &[])
        .await
        .expect("version");
    assert_eq!(row.get::<_, i32>(0), newer, "the version row is kept");
    let version = run(&["admin", "--db", &db, "db", "version"]);
    assert!(!version.status.success());
    assert_eq!(text(&version.stdout).trim(), newer.to_string());
    drop(client);
    dropper.drop_database().await;
}
