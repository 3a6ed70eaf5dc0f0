//! `relay admin` and `relay serve` on a PostgreSQL database (`--db postgres://…`): the same
//! commands as on SQLite, and two `relay serve` replicas on one database answering the same
//! tokens. Needs the throwaway server of `scripts/pg.sh` (`GRAPHRELAY_PG_URL`); without it the
//! tests say so and pass, unless `GRAPHRELAY_REQUIRE_PG=1`.

use std::path::Path;

use crate::cli::{plain, relay, serve_with_base};
use crate::common;

/// A fresh database on the server at `url`: its URL, and a guard that drops it.
pub(crate) async fn fresh_database(url: &str) -> (String, Dropper) {
    let name = format!("cli_{}", uuid::Uuid::new_v4().simple());
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to PostgreSQL");
    tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create database");
    let base = url.rsplit_once('/').map_or(url, |(base, _)| base);
    (format!("{base}/{name}"), Dropper { client, name })
}

pub(crate) struct Dropper {
    client: tokio_postgres::Client,
    name: String,
}

impl Dropper {
    pub(crate) async fn drop_database(self) {
        self.client
            .batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .await
            .expect("drop database");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_and_two_replicas_share_one_postgres_database() {
    let Some(url) = common::postgres_url() else {
        return;
    };
    let (db, dropper) = fresh_database(&url).await;
    let db_path = Path::new(&db);
    let project = plain(&relay(
        db_path,
        &["project", "create", "Demo", "--owner", "ann"],
    ));
    let listed = plain(&relay(db_path, &["project", "list"]));
    assert!(
        listed.contains(&project) && listed.contains("ann"),
        "{listed}"
    );
    let token = plain(&relay(
        db_path,
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
    let (first, a) = serve_with_base(Path::new(&db), &[]).await;
    let (second, b) = serve_with_base(Path::new(&db), &[]).await;
    assert_ne!(a, b);
    for base in [&a, &b] {
        assert_eq!(
            common::oauth::mcp_status(base, &token).await,
            200,
            "{base} knows the token minted by relay admin"
        );
    }
    let token_id = {
        let output = relay(db_path, &["--json", "token", "list", "--project", &project]);
        let listed: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("token list JSON");
        listed[0]["token_id"].as_str().expect("token id").to_owned()
    };
    plain(&relay(db_path, &["token", "revoke", &token_id]));
    for base in [&a, &b] {
        assert_eq!(
            common::oauth::mcp_status(base, &token).await,
            401,
            "{base}: revoked in the database is revoked on every replica"
        );
    }
    drop((first, second));
    dropper.drop_database().await;
}

#[test]
fn a_postgres_url_that_does_not_answer_fails_clearly() {
    let output = relay(
        Path::new("postgres://nobody@127.0.0.1:9/none"),
        &["project", "list"],
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("PostgreSQL"), "{stderr}");
}
