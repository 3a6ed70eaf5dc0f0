//! The conformance suite every [`Store`] must pass, written once for any implementation.
//!
//! A store test calls [`run_all`] with a function that makes a fresh, empty store; each check
//! panics with a message naming the broken promise.

use std::sync::Arc;

use serde_json::{Map, json};

use super::{CommandRecord, InsertOutcome, ProjectRecord, Store, TokenKind, TokenRecord};
use crate::clock::Timestamp;
use crate::protocol::{CommandId, GraphSessionId, RunStatus, SessionMeta};

const T0: Timestamp = Timestamp::from_unix_millis(1_794_130_200_000);

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_unix_millis(T0.unix_millis() + seconds * 1000)
}

fn gs(n: u32) -> GraphSessionId {
    format!("gs_{n:032x}")
        .parse()
        .expect("test session ids are well formed")
}

fn session(n: u32, name: &str) -> SessionMeta {
    SessionMeta {
        graph_session_id: gs(n),
        name: name.to_owned(),
        description: format!("session {n}"),
        slug: format!("slug-{n}"),
        version: "1.0.0".into(),
        status: "active".into(),
    }
}

struct Seed {
    project_id: String,
    agent_id: String,
    other_agent_id: String,
}

async fn seed(store: &dyn Store) -> Seed {
    let owner = store.ensure_owner("owner", T0).await.expect("ensure owner");
    let project_id = uuid::Uuid::new_v4().to_string();
    store
        .insert_project(ProjectRecord {
            id: project_id.clone(),
            owner_id: owner.id.clone(),
            name: "p".into(),
            created_at: T0,
        })
        .await
        .expect("insert project");
    let mut agents = Vec::new();
    for name in ["agent-a", "agent-b"] {
        let id = uuid::Uuid::new_v4().to_string();
        store
            .insert_token(TokenRecord {
                id: id.clone(),
                kind: TokenKind::Agent,
                token_hash: format!("hash-{id}"),
                owner_id: owner.id.clone(),
                project_id: Some(project_id.clone()),
                agent_name: Some(name.into()),
                scopes: vec!["osfoundry:read".into(), "osfoundry:run".into()],
                created_at: T0,
                revoked_at: None,
            })
            .await
            .expect("insert token");
        agents.push(id);
    }
    let other_agent_id = agents.pop().unwrap_or_default();
    let agent_id = agents.pop().unwrap_or_default();
    Seed {
        project_id,
        agent_id,
        other_agent_id,
    }
}

fn command(seed: &Seed, agent_id: &str, key: &str, created: Timestamp) -> CommandRecord {
    let mut arguments = Map::new();
    arguments.insert("ticket".into(), json!("T-1"));
    CommandRecord::queued(
        CommandId::new_random(),
        seed.project_id.clone(),
        agent_id.to_owned(),
        gs(1),
        "slug-1".into(),
        arguments,
        key.to_owned(),
        format!("hash-of-{key}"),
        created,
    )
}

async fn insert_new(store: &dyn Store, command: CommandRecord) -> CommandRecord {
    match store.insert_command(command).await.expect("insert command") {
        InsertOutcome::Created(created) => created,
        InsertOutcome::Existing(existing) => {
            panic!("expected a new command, got existing {}", existing.id)
        }
    }
}

/// Runs every check, each on a fresh store from `make`.
pub async fn run_all<F>(make: F)
where
    F: Fn() -> Arc<dyn Store>,
{
    owners_are_unique_by_name(make().as_ref()).await;
    projects_round_trip(make().as_ref()).await;
    tokens_round_trip_and_revoke_once(make().as_ref()).await;
    session_snapshot_is_replaced_whole(make().as_ref()).await;
    idempotency_key_is_unique_per_agent(make().as_ref()).await;
    concurrent_inserts_create_one_command(make()).await;
    updates_are_conditional_on_the_state_read(make().as_ref()).await;
    queued_commands_are_oldest_first_and_bounded(make().as_ref()).await;
    heartbeat_touches_only_running_commands(make().as_ref()).await;
    silent_runs_fail_by_cutoff(make().as_ref()).await;
}

/// `ensure_owner` creates an owner once and returns it again by name.
pub async fn owners_are_unique_by_name(store: &dyn Store) {
    let first = store.ensure_owner("alice", T0).await.expect("ensure owner");
    let again = store
        .ensure_owner("alice", at(5))
        .await
        .expect("ensure owner");
    let other = store.ensure_owner("bob", T0).await.expect("ensure owner");
    assert_eq!(first, again, "the same name must give the same owner");
    assert_ne!(
        first.id, other.id,
        "different names must give different owners"
    );
}

/// Projects read back as written; unknown ids read as none.
pub async fn projects_round_trip(store: &dyn Store) {
    let seed = seed(store).await;
    let project = store
        .project(&seed.project_id)
        .await
        .expect("read project")
        .expect("project exists");
    assert_eq!(project.id, seed.project_id);
    assert_eq!(project.created_at, T0);
    assert!(store.project("nope").await.expect("read project").is_none());
}

/// Tokens are found by hash and id; revoking succeeds once.
pub async fn tokens_round_trip_and_revoke_once(store: &dyn Store) {
    let seed = seed(store).await;
    let by_hash = store
        .token_by_hash(&format!("hash-{}", seed.agent_id))
        .await
        .expect("read token")
        .expect("token exists");
    assert_eq!(by_hash.id, seed.agent_id);
    assert_eq!(by_hash.kind, TokenKind::Agent);
    assert_eq!(by_hash.scopes, ["osfoundry:read", "osfoundry:run"]);
    assert_eq!(
        by_hash.project_id.as_deref(),
        Some(seed.project_id.as_str())
    );
    assert!(by_hash.revoked_at.is_none());
    assert!(
        store
            .revoke_token(&seed.agent_id, at(1))
            .await
            .expect("revoke")
    );
    assert!(
        !store
            .revoke_token(&seed.agent_id, at(2))
            .await
            .expect("revoke"),
        "a second revoke must report it was already revoked"
    );
    let revoked = store
        .token(&seed.agent_id)
        .await
        .expect("read token")
        .expect("token exists");
    assert_eq!(revoked.revoked_at, Some(at(1)));
    assert!(
        store
            .token_by_hash("unknown")
            .await
            .expect("read")
            .is_none()
    );
}

/// A sync replaces the whole snapshot; listing is ordered by name and bounded.
pub async fn session_snapshot_is_replaced_whole(store: &dyn Store) {
    let seed = seed(store).await;
    let empty = store.sessions(&seed.project_id, 50).await.expect("list");
    assert!(empty.sessions.is_empty() && empty.last_sync_at.is_none());
    let three = vec![session(3, "c"), session(1, "a"), session(2, "b")];
    store
        .replace_sessions(&seed.project_id, three, at(1))
        .await
        .expect("replace");
    let listed = store.sessions(&seed.project_id, 2).await.expect("list");
    let names: Vec<_> = listed
        .sessions
        .iter()
        .map(|s| s.meta.name.as_str())
        .collect();
    assert_eq!(names, ["a", "b"], "ordered by name, at most the limit");
    assert_eq!(listed.last_sync_at, Some(at(1)));
    assert_eq!(listed.sessions[0].meta, session(1, "a"));
    store
        .replace_sessions(&seed.project_id, vec![session(2, "b")], at(2))
        .await
        .expect("replace");
    let listed = store.sessions(&seed.project_id, 50).await.expect("list");
    assert_eq!(
        listed.sessions.len(),
        1,
        "sessions left out of a sync are gone"
    );
    assert_eq!(listed.last_sync_at, Some(at(2)));
    assert!(
        store
            .session(&seed.project_id, &gs(1))
            .await
            .expect("read")
            .is_none()
    );
    assert!(
        store
            .session(&seed.project_id, &gs(2))
            .await
            .expect("read")
            .is_some()
    );
    store
        .replace_sessions(&seed.project_id, Vec::new(), at(3))
        .await
        .expect("replace");
    let listed = store.sessions(&seed.project_id, 50).await.expect("list");
    assert!(listed.sessions.is_empty());
    assert_eq!(listed.last_sync_at, Some(at(3)));
}

/// One command per (agent, key); another agent's same key is its own command.
pub async fn idempotency_key_is_unique_per_agent(store: &dyn Store) {
    let seed = seed(store).await;
    let first = insert_new(store, command(&seed, &seed.agent_id, "key-0001", at(0))).await;
    assert_eq!(first.status, RunStatus::Queued);
    match store
        .insert_command(command(&seed, &seed.agent_id, "key-0001", at(1)))
        .await
        .expect("insert")
    {
        InsertOutcome::Existing(existing) => assert_eq!(existing, first),
        InsertOutcome::Created(created) => panic!("a repeated key created {}", created.id),
    }
    let other = insert_new(
        store,
        command(&seed, &seed.other_agent_id, "key-0001", at(2)),
    )
    .await;
    assert_ne!(other.id, first.id);
    let by_key = store
        .command_by_key(&seed.agent_id, "key-0001")
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(by_key, first);
    assert!(
        store
            .command_by_key(&seed.agent_id, "other-key")
            .await
            .expect("read")
            .is_none()
    );
    assert_eq!(store.command(first.id).await.expect("read"), Some(first));
    assert!(
        store
            .command(CommandId::new_random())
            .await
            .expect("read")
            .is_none()
    );
}

/// Fifty concurrent inserts under one key create exactly one command.
pub async fn concurrent_inserts_create_one_command(store: Arc<dyn Store>) {
    const CONCURRENT_INSERTS: usize = 50;
    let seed = Arc::new(seed(store.as_ref()).await);
    let tasks: Vec<_> = (0..CONCURRENT_INSERTS)
        .map(|_| {
            let (store, seed) = (store.clone(), seed.clone());
            tokio::spawn(async move {
                let command = command(&seed, &seed.agent_id, "same-key-1", at(0));
                store.insert_command(command).await.expect("insert")
            })
        })
        .collect();
    let mut created = 0;
    let mut ids = std::collections::BTreeSet::new();
    for task in tasks {
        match task.await.expect("task") {
            InsertOutcome::Created(command) => {
                created += 1;
                ids.insert(command.id);
            }
            InsertOutcome::Existing(command) => {
                ids.insert(command.id);
            }
        }
    }
    assert_eq!(created, 1, "exactly one insert may create the command");
    assert_eq!(ids.len(), 1, "every caller must get the same command back");
}

/// A write decided from a stale read does not land; a current one does, and reads back.
pub async fn updates_are_conditional_on_the_state_read(store: &dyn Store) {
    let seed = seed(store).await;
    let queued = insert_new(store, command(&seed, &seed.agent_id, "key-0002", at(0))).await;
    let mut running = queued.clone();
    running.status = RunStatus::Running;
    running.execution_id = Some("exec-1".into());
    running.started_at = Some(at(1));
    running.last_seen_at = Some(at(1));
    running.updated_at = at(1);
    assert!(
        store
            .update_command(&queued, &running)
            .await
            .expect("update")
    );
    assert!(
        !store
            .update_command(&queued, &running)
            .await
            .expect("update"),
        "a second write from the same `queued` read must not land"
    );
    let mut flagged = running.clone();
    flagged.cancel_requested = true;
    assert!(
        store
            .update_command(&running, &flagged)
            .await
            .expect("update")
    );
    let mut completed = running.clone();
    completed.status = RunStatus::Completed;
    assert!(
        !store
            .update_command(&running, &completed)
            .await
            .expect("update"),
        "a write that did not see the cancel flag must not land"
    );
    let mut done = flagged.clone();
    done.status = RunStatus::Cancelled;
    done.result = Some(json!({"text": "日本語 😀", "n": [1, 2.5, null]}));
    done.result_truncated = true;
    done.total_tokens = Some(1234);
    done.reported_cost = Some(0.25);
    done.error = Some("stopped".into());
    done.completion_hash = Some("abc".into());
    done.finished_at = Some(at(9));
    done.updated_at = at(9);
    assert!(store.update_command(&flagged, &done).await.expect("update"));
    assert_eq!(store.command(queued.id).await.expect("read"), Some(done));
}

/// Only queued commands are handed out, oldest first, at most `limit`.
pub async fn queued_commands_are_oldest_first_and_bounded(store: &dyn Store) {
    let seed = seed(store).await;
    let third = insert_new(store, command(&seed, &seed.agent_id, "key-0003", at(3))).await;
    let first = insert_new(store, command(&seed, &seed.agent_id, "key-0001", at(1))).await;
    let second = insert_new(store, command(&seed, &seed.agent_id, "key-0002", at(2))).await;
    let mut cancelled = second.clone();
    cancelled.status = RunStatus::Cancelled;
    assert!(
        store
            .update_command(&second, &cancelled)
            .await
            .expect("update")
    );
    let queued = store
        .queued_commands(&seed.project_id, 10)
        .await
        .expect("read");
    let ids: Vec<_> = queued.iter().map(|c| c.id).collect();
    assert_eq!(ids, [first.id, third.id]);
    let bounded = store
        .queued_commands(&seed.project_id, 1)
        .await
        .expect("read");
    assert_eq!(bounded.len(), 1);
    assert!(
        store
            .queued_commands("other", 10)
            .await
            .expect("read")
            .is_empty()
    );
}

/// A heartbeat moves `last_seen_at` of a running command and nothing else.
pub async fn heartbeat_touches_only_running_commands(store: &dyn Store) {
    let seed = seed(store).await;
    let queued = insert_new(store, command(&seed, &seed.agent_id, "key-0004", at(0))).await;
    assert!(!store.touch_running(queued.id, at(1)).await.expect("touch"));
    let mut running = queued.clone();
    running.status = RunStatus::Running;
    running.last_seen_at = Some(at(1));
    assert!(
        store
            .update_command(&queued, &running)
            .await
            .expect("update")
    );
    assert!(store.touch_running(queued.id, at(7)).await.expect("touch"));
    let read = store
        .command(queued.id)
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(read.last_seen_at, Some(at(7)));
    assert_eq!(read.status, RunStatus::Running);
}

/// Running commands last seen before the cutoff fail; others stay as they are.
pub async fn silent_runs_fail_by_cutoff(store: &dyn Store) {
    let seed = seed(store).await;
    let mut ids = Vec::new();
    for (key, seen) in [("key-old1", 10), ("key-new1", 100)] {
        let queued = insert_new(store, command(&seed, &seed.agent_id, key, at(0))).await;
        let mut running = queued.clone();
        running.status = RunStatus::Running;
        running.last_seen_at = Some(at(seen));
        assert!(
            store
                .update_command(&queued, &running)
                .await
                .expect("update")
        );
        ids.push(queued.id);
    }
    let still_queued = insert_new(store, command(&seed, &seed.agent_id, "key-queu", at(0))).await;
    let failed = store
        .fail_silent_runs(at(50), at(200), "silent")
        .await
        .expect("sweep");
    assert_eq!(failed, [ids[0]]);
    let old = store.command(ids[0]).await.expect("read").expect("exists");
    assert_eq!(old.status, RunStatus::Failed);
    assert_eq!(old.error.as_deref(), Some("silent"));
    assert_eq!(old.finished_at, Some(at(200)));
    let recent = store.command(ids[1]).await.expect("read").expect("exists");
    assert_eq!(recent.status, RunStatus::Running);
    let queued = store
        .command(still_queued.id)
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(queued.status, RunStatus::Queued);
    assert!(
        store
            .fail_silent_runs(at(50), at(300), "silent")
            .await
            .expect("sweep")
            .is_empty(),
        "a failed run is not failed twice"
    );
}
