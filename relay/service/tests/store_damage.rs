//! A stored row that cannot be decoded is damage naming the row (table and key), on both
//! stores: never a "database error" a caller would retry, and never a bare conversion error; a
//! list of the project's queue or runs names it among the damaged and reads the others.

use std::sync::Arc;

use relay_protocol::clock::Timestamp;
use relay_protocol::{CommandId, GraphSessionId};
use relay_service::store::{
    CommandQuery, CommandRecord, Fault, InsertOutcome, ProjectRecord, QueueQuota, SqliteStore,
    Store, StoreError, TokenKind, TokenRecord,
};
use relay_testkit::postgres_url;

const NOW: Timestamp = Timestamp::from_unix_millis(1_794_130_200_000);

/// Queues one command in a fresh owner's project; returns the command and its project.
async fn queued(store: &dyn Store) -> (CommandRecord, String) {
    let owner = store.ensure_owner("owner", NOW).await.expect("owner");
    let project_id = uuid::Uuid::new_v4().to_string();
    store
        .insert_project(ProjectRecord {
            id: project_id.clone(),
            owner_id: owner.id.clone(),
            name: "p".into(),
            created_at: NOW,
        })
        .await
        .expect("project");
    let agent_id = uuid::Uuid::new_v4().to_string();
    store
        .insert_token(TokenRecord {
            id: agent_id.clone(),
            kind: TokenKind::Agent,
            token_hash: format!("hash-{agent_id}"),
            owner_id: owner.id,
            project_id: Some(project_id.clone()),
            agent_name: Some("agent".into()),
            scopes: vec!["osfoundry:run".into()],
            client_id: None,
            connection_id: None,
            created_at: NOW,
            revoked_at: None,
        })
        .await
        .expect("token");
    let session: GraphSessionId = format!("gs_{:032x}", 1).parse().expect("session id");
    let command = CommandRecord::queued(
        CommandId::new_random(),
        project_id.clone(),
        agent_id,
        session,
        "slug".into(),
        serde_json::Map::new(),
        "key-00001".into(),
        "hash".into(),
        NOW,
    );
    let quota = QueueQuota {
        per_agent: 10,
        per_project: 10,
    };
    match store.insert_command(command, quota).await.expect("insert") {
        InsertOutcome::Created(command) => (command, project_id),
        other => panic!("a fresh command is created: {other:?}"),
    }
}

/// A second, healthy queued command beside `command`, in its project.
async fn another(store: &dyn Store, command: &CommandRecord) -> CommandId {
    let healthy = CommandRecord::queued(
        CommandId::new_random(),
        command.project_id.clone(),
        command.agent_id.clone(),
        command.graph_session_id.clone(),
        "slug".into(),
        serde_json::Map::new(),
        "key-00002".into(),
        "hash-2".into(),
        NOW,
    );
    let quota = QueueQuota {
        per_agent: 10,
        per_project: 10,
    };
    match store.insert_command(healthy, quota).await.expect("insert") {
        InsertOutcome::Created(command) => command.id,
        other => panic!("a fresh command is created: {other:?}"),
    }
}

/// Reading the damaged command fails as damage naming `commands` row `id`, part `what`; lists
/// of the project's queue and runs name it among the damaged and read `healthy` around it.
async fn assert_damaged(
    store: &dyn Store,
    id: CommandId,
    project_id: &str,
    what: &str,
    healthy: CommandId,
) {
    let by_id = store.command(id).await.expect_err("the row is damaged");
    let queued = store
        .queued_commands(project_id, 10)
        .await
        .expect("the queue is read around the damaged row");
    let listed = store
        .project_commands(CommandQuery {
            project_id: project_id.to_owned(),
            status: None,
            agent_id: None,
            before: None,
            limit: 10,
        })
        .await
        .expect("the runs are listed around the damaged row");
    for rows in [queued, listed] {
        let ids: Vec<CommandId> = rows.rows.iter().map(|c| c.id).collect();
        assert_eq!(ids, [healthy], "the healthy command is read");
        let [damage] = rows.damaged.as_slice() else {
            panic!("the damaged row is named once: {:?}", rows.damaged);
        };
        assert_eq!(
            (damage.table, damage.id.as_str()),
            ("commands", &*id.to_string())
        );
        assert!(damage.what.contains(what), "names {what}: {damage}");
    }
    {
        let error = by_id;
        let damage = error
            .damage()
            .unwrap_or_else(|| panic!("damage, not another error: {error:?}"));
        assert_eq!(damage.table, "commands", "{error}");
        assert_eq!(damage.id, id.to_string(), "{error}");
        assert!(damage.what.contains(what), "names {what}: {error}");
        assert_eq!(error.fault(), Some(Fault::Corrupt), "{error}");
        assert!(
            matches!(error, StoreError::Corrupt(_)),
            "not a database error a client would retry: {error:?}"
        );
        let message = error.to_string();
        assert!(
            message.starts_with("stored data is unreadable: commands row ")
                && message.contains(&id.to_string()),
            "the message names the row: {message}"
        );
    }
}

#[tokio::test]
async fn sqlite_undecodable_arguments_are_damage_naming_the_row() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("relay.db");
    let store = SqliteStore::open(&path).expect("open");
    let (command, project_id) = queued(&store).await;
    let healthy = another(&store, &command).await;
    let raw = rusqlite::Connection::open(&path).expect("open raw");
    raw.execute(
        "UPDATE commands SET arguments = '[1, 2]' WHERE id = ?1",
        [command.id.to_string()],
    )
    .expect("damage the arguments");
    assert_damaged(&store, command.id, &project_id, "arguments", healthy).await;
    // A column holding another type than the store wrote is damage too.
    raw.execute(
        "UPDATE commands SET arguments = '{}', created_at = 'yesterday' WHERE id = ?1",
        [command.id.to_string()],
    )
    .expect("damage the creation time");
    assert_damaged(&store, command.id, &project_id, "column 17", healthy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_undecodable_arguments_are_damage_naming_the_row() {
    let Some(url) = postgres_url() else {
        return;
    };
    let schema = format!("damage_{}", uuid::Uuid::new_v4().simple());
    let store = Arc::new(
        relay_service::store::PostgresStore::connect_in_schema(&url, Some(&schema))
            .await
            .expect("connect"),
    );
    let (command, project_id) = queued(store.as_ref()).await;
    let healthy = another(store.as_ref(), &command).await;
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
        .execute(
            &format!("UPDATE {schema}.commands SET arguments = 'not json' WHERE id = $1"),
            &[&command.id.to_string()],
        )
        .await
        .expect("damage the arguments");
    assert_damaged(
        store.as_ref(),
        command.id,
        &project_id,
        "arguments",
        healthy,
    )
    .await;
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .expect("drop schema");
}
