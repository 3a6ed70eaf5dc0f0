//! The conformance suite every [`Store`] must pass, written once for any implementation.
//!
//! A store test calls [`run_all`] with a function that makes a fresh, empty store; each check
//! panics with a message naming the broken promise.

mod auth;
mod errors;
mod tenants;

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{
    ArtifactInsertOutcome, ArtifactRecord, BrowserSessionRecord, ChatLinkRecord, ClaimAttempt,
    ClaimResult, CommandQuery, CommandRecord, InsertOutcome, PresenceSync, ProjectRecord,
    QueueLimit, QueueQuota, SessionSnapshot, SnapshotWrite, Store, SweepCounts, TaskInsertOutcome,
    TaskRecord, TokenKind, TokenRecord,
};
use crate::model::{HostKind, TaskId, TaskStatus};
use relay_protocol::clock::Timestamp;
use relay_protocol::{CommandId, EndCause, GraphSessionId, RunStatus, SessionMeta};

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
        args_schema: None,
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
                client_id: None,
                connection_id: None,
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

/// A quota no check reaches.
const NO_QUOTA: QueueQuota = QueueQuota {
    per_agent: u64::MAX,
    per_project: u64::MAX,
};

async fn insert_new(store: &dyn Store, command: CommandRecord) -> CommandRecord {
    match store
        .insert_command(command, NO_QUOTA)
        .await
        .expect("insert command")
    {
        InsertOutcome::Created(created) => created,
        InsertOutcome::Existing(existing) => {
            panic!("expected a new command, got existing {}", existing.id)
        }
        InsertOutcome::OverQuota(limit) => panic!("no quota applies, got {limit:?}"),
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
    unrevoked_tokens_are_read_at_once(make().as_ref()).await;
    projects_owners_and_tokens_are_listed_in_order(make().as_ref()).await;
    session_snapshot_is_replaced_whole(make().as_ref()).await;
    session_snapshots_only_move_forward(make().as_ref()).await;
    argument_schemas_and_token_caps_round_trip(make().as_ref()).await;
    cancel_and_end_causes_round_trip(make().as_ref()).await;
    resumes_round_trip(make().as_ref()).await;
    idempotency_key_is_unique_per_agent(make().as_ref()).await;
    concurrent_inserts_create_one_command(make()).await;
    queue_quota_counts_queued_commands_only(make().as_ref()).await;
    updates_are_conditional_on_the_state_read(make().as_ref()).await;
    updates_are_conditional_on_the_execution_read(make().as_ref()).await;
    damaged_commands_are_cancelled_only_by_their_owner_while_open(make().as_ref()).await;
    queued_commands_are_oldest_first_and_bounded(make().as_ref()).await;
    heartbeat_touches_only_running_commands(make().as_ref()).await;
    open_runs_and_tasks_are_counted_by_status(make().as_ref()).await;
    silent_runs_fail_by_cutoff(make().as_ref()).await;
    chat_links_round_trip(make().as_ref()).await;
    task_idempotency_key_is_unique_per_link(make().as_ref()).await;
    concurrent_assignments_create_one_task(make()).await;
    claim_is_one_conditional_write(make().as_ref()).await;
    concurrent_claims_have_one_winner(make()).await;
    claim_or_current_tells_losers_what_is_stored(make().as_ref()).await;
    concurrent_claims_or_current_have_one_winner(make()).await;
    task_updates_are_fenced_by_status_claim_and_lease(make().as_ref()).await;
    task_lists_are_ordered_and_bounded(make().as_ref()).await;
    sweep_moves_exactly_what_the_state_machine_says(make().as_ref()).await;
    artifacts_are_fenced_unique_and_bounded(make().as_ref()).await;
    project_commands_are_newest_first_and_paged(make().as_ref()).await;
    project_commands_are_filtered(make().as_ref()).await;
    chat_links_are_listed_per_project(make().as_ref()).await;
    browser_sessions_are_listed_and_ended_per_owner(make().as_ref()).await;
    token_uses_are_per_owner_and_never_move_back(make().as_ref()).await;
    presence_keeps_its_problem_until_a_sync_says_otherwise(make().as_ref()).await;
    run_reports_land_on_their_running_execution_only(make().as_ref()).await;
    tenants::projects_are_listed_per_owner(make().as_ref()).await;
    tenants::a_project_is_read_for_its_owner_only(make().as_ref()).await;
    errors::a_refused_write_keeps_the_database_error_as_its_source(make().as_ref()).await;
    errors::a_value_out_of_range_is_invalid_input(make().as_ref()).await;
    auth::run_all(&make).await;
}

/// The queue quota counts queued commands only, per agent and per project, in the same step
/// as the insert; a replay of an existing key is answered whatever the quota.
pub async fn queue_quota_counts_queued_commands_only(store: &dyn Store) {
    let seed = seed(store).await;
    let quota = QueueQuota {
        per_agent: 2,
        per_project: 3,
    };
    let insert =
        |agent: &str, key: &str| store.insert_command(command(&seed, agent, key, at(1)), quota);
    let first = match insert(&seed.agent_id, "quota-1").await.expect("insert") {
        InsertOutcome::Created(created) => created,
        other => panic!("room for the first: {other:?}"),
    };
    assert!(matches!(
        insert(&seed.agent_id, "quota-2").await.expect("insert"),
        InsertOutcome::Created(_)
    ));
    assert_eq!(
        insert(&seed.agent_id, "quota-3").await.expect("insert"),
        InsertOutcome::OverQuota(QueueLimit::Agent(2)),
        "the agent's third queued command is over its quota"
    );
    assert!(
        matches!(
            insert(&seed.agent_id, "quota-1").await.expect("insert"),
            InsertOutcome::Existing(existing) if existing.id == first.id
        ),
        "a replay is answered at the quota"
    );
    assert!(matches!(
        insert(&seed.other_agent_id, "quota-4")
            .await
            .expect("insert"),
        InsertOutcome::Created(_)
    ));
    assert_eq!(
        insert(&seed.other_agent_id, "quota-5")
            .await
            .expect("insert"),
        InsertOutcome::OverQuota(QueueLimit::Project(3)),
        "the project's fourth queued command is over its quota"
    );
    let mut started = first.clone();
    started.status = RunStatus::Running;
    assert!(
        store
            .update_command(&first, &started)
            .await
            .expect("update")
    );
    assert!(
        matches!(
            insert(&seed.agent_id, "quota-3").await.expect("insert"),
            InsertOutcome::Created(_)
        ),
        "a started command leaves the queue"
    );
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

/// Of many token ids, one read names those that exist unrevoked: not a revoked one, not an
/// unknown one, and every one of a list longer than a statement's parameter chunk or of a short
/// one.
pub async fn unrevoked_tokens_are_read_at_once(store: &dyn Store) {
    let seed = seed(store).await;
    let mut ids: Vec<String> = (0..1_200).map(|i| format!("tok_unknown_{i}")).collect();
    ids.push(seed.agent_id.clone());
    ids.push(seed.other_agent_id.clone());
    let mut valid = store.unrevoked_tokens(&ids).await.expect("read tokens");
    valid.sort();
    let mut expected = vec![seed.agent_id.clone(), seed.other_agent_id.clone()];
    expected.sort();
    assert_eq!(valid, expected);
    store
        .revoke_token(&seed.agent_id, at(1))
        .await
        .expect("revoke");
    let valid = store.unrevoked_tokens(&ids).await.expect("read tokens");
    assert_eq!(valid, std::slice::from_ref(&seed.other_agent_id));
    // A short list (a store may read it another way) says the same.
    let few = [
        seed.agent_id.clone(),
        "tok_unknown".to_owned(),
        seed.other_agent_id.clone(),
    ];
    let valid = store.unrevoked_tokens(&few).await.expect("read tokens");
    assert_eq!(valid, std::slice::from_ref(&seed.other_agent_id));
    assert!(store.unrevoked_tokens(&[]).await.expect("read").is_empty());
}

/// Projects list oldest first, owners by name, and an owner's tokens (revoked too) oldest first
/// without another owner's.
pub async fn projects_owners_and_tokens_are_listed_in_order(store: &dyn Store) {
    assert!(store.all_projects().await.expect("list").is_empty());
    assert!(store.owners().await.expect("list owners").is_empty());
    let zoe = store.ensure_owner("zoe", T0).await.expect("ensure owner");
    let ann = store
        .ensure_owner("ann", at(1))
        .await
        .expect("ensure owner");
    let mut made = Vec::new();
    for (name, owner, created) in [("late", &ann, at(9)), ("early", &zoe, at(2))] {
        let project = ProjectRecord {
            id: uuid::Uuid::new_v4().to_string(),
            owner_id: owner.id.clone(),
            name: name.into(),
            created_at: created,
        };
        store
            .insert_project(project.clone())
            .await
            .expect("insert project");
        made.push(project);
    }
    made.reverse();
    assert_eq!(store.all_projects().await.expect("list projects"), made);
    assert_eq!(
        store.owners().await.expect("list owners"),
        [ann.clone(), zoe.clone()]
    );
    let token = |owner: &str, kind, created| TokenRecord {
        id: uuid::Uuid::new_v4().to_string(),
        kind,
        token_hash: uuid::Uuid::new_v4().to_string(),
        owner_id: owner.to_owned(),
        project_id: None,
        agent_name: None,
        scopes: Vec::new(),
        client_id: None,
        connection_id: None,
        created_at: created,
        revoked_at: None,
    };
    let newer = token(&ann.id, TokenKind::Owner, at(7));
    let older = token(&ann.id, TokenKind::Desktop, at(3));
    let others = token(&zoe.id, TokenKind::Desktop, at(1));
    for t in [&newer, &older, &others] {
        store.insert_token(t.clone()).await.expect("insert token");
    }
    assert!(store.revoke_token(&older.id, at(8)).await.expect("revoke"));
    let listed = store.tokens_of_owner(&ann.id).await.expect("list tokens");
    let ids: Vec<&str> = listed.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        [older.id.as_str(), newer.id.as_str()],
        "oldest first, only ann's"
    );
    assert_eq!(
        listed[0].revoked_at,
        Some(at(8)),
        "a revoked token is listed as revoked"
    );
    assert!(
        store
            .tokens_of_owner("nobody")
            .await
            .expect("list tokens")
            .is_empty()
    );
}

/// A sync replaces the whole snapshot; listing is ordered by name and bounded.
pub async fn session_snapshot_is_replaced_whole(store: &dyn Store) {
    let seed = seed(store).await;
    let empty = store.sessions(&seed.project_id, 50).await.expect("list");
    assert!(empty.sessions.is_empty() && empty.last_sync_at.is_none());
    let three = vec![session(3, "c"), session(1, "a"), session(2, "b")];
    store
        .replace_sessions(&seed.project_id, three, None, at(1))
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
        .replace_sessions(&seed.project_id, vec![session(2, "b")], None, at(2))
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
        .replace_sessions(&seed.project_id, Vec::new(), None, at(3))
        .await
        .expect("replace");
    let listed = store.sessions(&seed.project_id, 50).await.expect("list");
    assert!(listed.sessions.is_empty());
    assert_eq!(listed.last_sync_at, Some(at(3)));
}

/// A snapshot carries the desktop's sharing version: an older one arriving late changes
/// nothing, the held version again moves only the sync time, a newer one replaces; a snapshot
/// without a version (an older desktop) is always taken, and any version follows it.
pub async fn session_snapshots_only_move_forward(store: &dyn Store) {
    let seed = seed(store).await;
    let project = seed.project_id.as_str();
    let names = |snapshot: &SessionSnapshot| -> Vec<String> {
        snapshot
            .sessions
            .iter()
            .map(|s| s.meta.name.clone())
            .collect()
    };
    let listed = async || store.sessions(project, 50).await.expect("list");
    let replace = async |sessions: Vec<SessionMeta>, version: Option<i64>, when: i64| {
        store
            .replace_sessions(project, sessions, version, at(when))
            .await
            .expect("replace")
    };
    let both = || vec![session(1, "a"), session(2, "b")];
    assert_eq!(replace(both(), Some(5), 1).await, SnapshotWrite::Replaced);
    assert_eq!(
        replace(vec![session(3, "c")], Some(4), 2).await,
        SnapshotWrite::Stale,
        "a snapshot older than the held one"
    );
    let held = listed().await;
    assert_eq!(names(&held), ["a", "b"], "the late one changed nothing");
    assert_eq!(held.last_sync_at, Some(at(1)));
    assert_eq!(replace(both(), Some(5), 3).await, SnapshotWrite::Unchanged);
    let held = listed().await;
    assert_eq!(names(&held), ["a", "b"]);
    assert_eq!(held.last_sync_at, Some(at(3)), "the sync time moves");
    assert_eq!(
        held.sessions[0].synced_at,
        at(1),
        "the sessions were not written again"
    );
    assert_eq!(
        replace(vec![session(1, "a")], Some(6), 4).await,
        SnapshotWrite::Replaced
    );
    assert_eq!(names(&listed().await), ["a"]);
    assert_eq!(
        replace(vec![session(2, "b")], None, 5).await,
        SnapshotWrite::Replaced,
        "no version: taken as before versions"
    );
    assert_eq!(names(&listed().await), ["b"]);
    assert_eq!(
        replace(vec![session(3, "c")], Some(1), 6).await,
        SnapshotWrite::Replaced,
        "after an unversioned snapshot any version is newer"
    );
    assert_eq!(names(&listed().await), ["c"]);
}

/// A session's argument schema comes back as it was synced (key order kept), a session
/// without one has none; a command keeps the cap its agent asked for from the insert on, and
/// the cap the desktop ran it with once an update writes it.
pub async fn argument_schemas_and_token_caps_round_trip(store: &dyn Store) {
    let seed = seed(store).await;
    let mut typed = session(1, "a");
    let schema = json!({
        "type": "object",
        "properties": {"topic": {"type": "string", "description": "日本語 😀"}, "depth": {"type": "integer"}},
        "required": ["topic"]
    });
    typed.args_schema = Some(schema.clone());
    store
        .replace_sessions(
            &seed.project_id,
            vec![typed.clone(), session(2, "b")],
            None,
            at(1),
        )
        .await
        .expect("replace");
    let read = store
        .session(&seed.project_id, &gs(1))
        .await
        .expect("read")
        .expect("the session");
    assert_eq!(read.meta, typed);
    let keys: Vec<_> = read
        .meta
        .args_schema
        .as_ref()
        .and_then(|s| s.as_object())
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    assert_eq!(keys, ["type", "properties", "required"], "key order kept");
    let listed = store.sessions(&seed.project_id, 50).await.expect("list");
    assert_eq!(listed.sessions[0].meta.args_schema, Some(schema));
    assert_eq!(listed.sessions[1].meta.args_schema, None);

    let mut asked = command(&seed, &seed.agent_id, "key-cap-1", at(2));
    asked.max_tokens = Some(250);
    let queued = insert_new(store, asked).await;
    assert_eq!((queued.max_tokens, queued.token_cap), (Some(250), None));
    let plain = insert_new(store, command(&seed, &seed.agent_id, "key-cap-2", at(2))).await;
    assert_eq!((plain.max_tokens, plain.token_cap), (None, None));
    let mut running = queued.clone();
    running.status = RunStatus::Running;
    running.execution_id = Some("exec-cap".into());
    running.token_cap = Some(200);
    assert!(
        store
            .update_command(&queued, &running)
            .await
            .expect("update")
    );
    let read = store
        .command(queued.id)
        .await
        .expect("read")
        .expect("the command");
    assert_eq!((read.max_tokens, read.token_cap), (Some(250), Some(200)));
    assert_eq!(read, running);
}

/// A new command has no cause; who asked to cancel it and why it ended are kept by an update
/// and read back as written, every cause word alike.
pub async fn cancel_and_end_causes_round_trip(store: &dyn Store) {
    let seed = seed(store).await;
    let queued = insert_new(store, command(&seed, &seed.agent_id, "key-cause-0", at(1))).await;
    assert_eq!((queued.cancel_cause, queued.end_cause), (None, None));
    let mut running = queued.clone();
    running.status = RunStatus::Running;
    running.execution_id = Some("exec-cause".into());
    assert!(
        store
            .update_command(&queued, &running)
            .await
            .expect("start")
    );
    let mut flagged = running.clone();
    flagged.cancel_requested = true;
    flagged.cancel_cause = Some(EndCause::OwnerCancelledConsole);
    assert!(
        store
            .update_command(&running, &flagged)
            .await
            .expect("flag")
    );
    let read = store
        .command(queued.id)
        .await
        .expect("read")
        .expect("the command");
    assert_eq!(read, flagged);
    let mut ended = flagged.clone();
    ended.status = RunStatus::Cancelled;
    ended.end_cause = Some(EndCause::OwnerCancelledConsole);
    ended.reported_cost = Some(0.0015);
    ended.total_tokens = Some(120);
    assert!(store.update_command(&flagged, &ended).await.expect("end"));
    let read = store
        .command(queued.id)
        .await
        .expect("read")
        .expect("the command");
    assert_eq!(read, ended);
    for (n, cause) in EndCause::ALL.into_iter().enumerate() {
        let fresh = insert_new(
            store,
            command(
                &seed,
                &seed.agent_id,
                &format!("key-cause-{}", n + 1),
                at(2),
            ),
        )
        .await;
        let mut cancelled = fresh.clone();
        cancelled.status = RunStatus::Cancelled;
        cancelled.end_cause = Some(cause);
        assert!(store.update_command(&fresh, &cancelled).await.expect("end"));
        let read = store
            .command(fresh.id)
            .await
            .expect("read")
            .expect("the command");
        assert_eq!(read.end_cause, Some(cause), "{cause}");
        assert_eq!(read.cancel_cause, None);
    }
}

/// A new command was never resumed; a resume's count and time are kept by an update (of the
/// running run, under its execution) and read back as written, and stay on the ended run.
pub async fn resumes_round_trip(store: &dyn Store) {
    let seed = seed(store).await;
    let queued = insert_new(store, command(&seed, &seed.agent_id, "key-resume", at(1))).await;
    assert_eq!((queued.resumed, queued.resumed_at), (0, None));
    let mut running = queued.clone();
    running.status = RunStatus::Running;
    running.execution_id = Some("exec-resume".into());
    running.started_at = Some(at(2));
    assert!(
        store
            .update_command(&queued, &running)
            .await
            .expect("start")
    );
    let mut resumed = running.clone();
    resumed.resumed = 2;
    resumed.resumed_at = Some(at(3));
    assert!(
        store
            .update_command(&running, &resumed)
            .await
            .expect("resume")
    );
    let read = store
        .command(queued.id)
        .await
        .expect("read")
        .expect("the command");
    assert_eq!(read, resumed);
    let mut ended = resumed.clone();
    ended.status = RunStatus::Completed;
    ended.finished_at = Some(at(4));
    assert!(store.update_command(&resumed, &ended).await.expect("end"));
    let read = store
        .command(queued.id)
        .await
        .expect("read")
        .expect("the command");
    assert_eq!((read.resumed, read.resumed_at), (2, Some(at(3))));
    assert_eq!(read, ended);
}

/// `before`, a command written before resumes were kept, read from the migrated `store`: it
/// was never resumed, and a resume is kept from now on.
pub async fn a_command_from_before_resumes_keeps_them_after(
    store: &dyn Store,
    before: &CommandRecord,
) {
    let read = store.command(before.id).await.expect("read").expect("kept");
    assert_eq!(&read, before, "the command reads as it was written");
    assert_eq!((read.resumed, read.resumed_at), (0, None));
    let mut running = read.clone();
    running.status = RunStatus::Running;
    running.execution_id = Some("exec-after".into());
    running.resumed = 1;
    running.resumed_at = Some(at(5));
    assert!(store.update_command(&read, &running).await.expect("resume"));
    let read = store.command(before.id).await.expect("read").expect("kept");
    assert_eq!(read, running);
}

/// A queued command in a fresh project of `store`: what a database from before a migration
/// holds, for the tests that take a schema back and open it with this build.
pub async fn queued_command(store: &dyn Store) -> CommandRecord {
    let seed = seed(store).await;
    insert_new(store, command(&seed, &seed.agent_id, "key-before", at(1))).await
}

/// `before`, a command written before causes were kept, read from the migrated `store`: it has
/// none, and a cancel's cause is kept from now on.
pub async fn a_command_from_before_end_causes_keeps_them_after(
    store: &dyn Store,
    before: &CommandRecord,
) {
    let read = store.command(before.id).await.expect("read").expect("kept");
    assert_eq!(&read, before, "the command reads as it was written");
    assert_eq!((read.cancel_cause, read.end_cause), (None, None));
    let mut cancelled = read.clone();
    cancelled.status = RunStatus::Cancelled;
    cancelled.cancel_requested = true;
    cancelled.cancel_cause = Some(EndCause::OwnerCancelledConsole);
    cancelled.end_cause = Some(EndCause::OwnerCancelledConsole);
    assert!(
        store
            .update_command(&read, &cancelled)
            .await
            .expect("cancel")
    );
    let read = store.command(before.id).await.expect("read").expect("kept");
    assert_eq!(read, cancelled);
}

/// One command per (agent, key); another agent's same key is its own command.
pub async fn idempotency_key_is_unique_per_agent(store: &dyn Store) {
    let seed = seed(store).await;
    let first = insert_new(store, command(&seed, &seed.agent_id, "key-0001", at(0))).await;
    assert_eq!(first.status, RunStatus::Queued);
    match store
        .insert_command(command(&seed, &seed.agent_id, "key-0001", at(1)), NO_QUOTA)
        .await
        .expect("insert")
    {
        InsertOutcome::Existing(existing) => assert_eq!(existing, first),
        InsertOutcome::Created(created) => panic!("a repeated key created {}", created.id),
        InsertOutcome::OverQuota(limit) => panic!("no quota applies, got {limit:?}"),
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
                store
                    .insert_command(command, NO_QUOTA)
                    .await
                    .expect("insert")
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
            InsertOutcome::OverQuota(limit) => panic!("no quota applies, got {limit:?}"),
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

/// A write decided from a read of one execution does not land on the same run started again
/// under another (released back to the queue in between).
pub async fn updates_are_conditional_on_the_execution_read(store: &dyn Store) {
    let seed = seed(store).await;
    let queued = insert_new(store, command(&seed, &seed.agent_id, "key-0004", at(0))).await;
    let started = |execution: &str, from: &CommandRecord| {
        let mut running = from.clone();
        running.status = RunStatus::Running;
        running.execution_id = Some(execution.into());
        running.started_at = Some(at(1));
        running.updated_at = at(1);
        running
    };
    let first = started("exec-1", &queued);
    assert!(store.update_command(&queued, &first).await.expect("update"));
    let mut released = first.clone();
    released.status = RunStatus::Queued;
    released.execution_id = None;
    released.started_at = None;
    assert!(
        store
            .update_command(&first, &released)
            .await
            .expect("update")
    );
    let second = started("exec-2", &released);
    assert!(
        store
            .update_command(&released, &second)
            .await
            .expect("update")
    );
    let mut late = first.clone();
    late.status = RunStatus::Completed;
    late.completion_hash = Some("h".into());
    assert!(
        !store.update_command(&first, &late).await.expect("update"),
        "a write decided for exec-1 must not land on the run exec-2 started"
    );
    assert_eq!(store.command(queued.id).await.expect("read"), Some(second));
}

/// A damaged run is ended without being read, only by the owner of its project and only while
/// it is open.
pub async fn damaged_commands_are_cancelled_only_by_their_owner_while_open(store: &dyn Store) {
    let seed = seed(store).await;
    let queued = insert_new(store, command(&seed, &seed.agent_id, "key-0005", at(0))).await;
    let stranger = store.ensure_owner("stranger", T0).await.expect("owner");
    let cancel = |owner: &str| {
        let owner = owner.to_owned();
        async move {
            store
                .cancel_damaged_command(queued.id, &owner, "damaged", at(2))
                .await
                .expect("cancel")
        }
    };
    assert!(!cancel(&stranger.id).await, "not another owner's run");
    assert_eq!(
        store
            .command(queued.id)
            .await
            .expect("read")
            .map(|c| c.status),
        Some(RunStatus::Queued)
    );
    let owner = store.ensure_owner("owner", T0).await.expect("owner");
    assert!(cancel(&owner.id).await, "the owner's queued run");
    let ended = store.command(queued.id).await.expect("read").expect("row");
    assert_eq!(ended.status, RunStatus::Cancelled);
    assert_eq!(ended.error.as_deref(), Some("damaged"));
    assert_eq!(
        (ended.cancel_cause, ended.end_cause),
        (
            Some(EndCause::OwnerCancelledConsole),
            Some(EndCause::OwnerCancelledConsole)
        ),
        "only its owner cancels a damaged run"
    );
    assert_eq!(ended.finished_at, Some(at(2)));
    assert!(!cancel(&owner.id).await, "an ended run stays as it is");
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
        .expect("read")
        .rows;
    let ids: Vec<_> = queued.iter().map(|c| c.id).collect();
    assert_eq!(ids, [first.id, third.id]);
    let bounded = store
        .queued_commands(&seed.project_id, 1)
        .await
        .expect("read")
        .rows;
    assert_eq!(bounded.len(), 1);
    assert!(
        store
            .queued_commands("other", 10)
            .await
            .expect("read")
            .rows
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

/// The open counts (`/metrics`) count queued and running runs, queued and claimed tasks, and
/// nothing finished; the desktops heard from since the time asked, and when the oldest queued
/// run was queued.
pub async fn open_runs_and_tasks_are_counted_by_status(store: &dyn Store) {
    use super::OpenCounts;
    assert_eq!(
        store.open_counts(at(0)).await.expect("count"),
        OpenCounts::default()
    );
    let runs = seed(store).await;
    let mut commands = Vec::new();
    for (key, queued_at) in [("key-open1", 40), ("key-open2", 30), ("key-open3", 50)] {
        commands.push(insert_new(store, command(&runs, &runs.agent_id, key, at(queued_at))).await);
    }
    // The second and third leave the queue: the oldest queued is the first, at 40 s.
    for (queued, status) in commands[1..]
        .iter()
        .zip([RunStatus::Running, RunStatus::Completed])
    {
        let mut next = queued.clone();
        next.status = status;
        assert!(store.update_command(queued, &next).await.expect("update"));
    }
    let other = seed(store).await;
    let seed = chat_seed(store).await;
    let first = new_task(store, task(&seed.link, "key-open-t1", at(0))).await;
    new_task(store, task(&seed.link, "key-open-t2", at(0))).await;
    store
        .claim_task(attempt(&first, &seed.link, "c-open", None))
        .await
        .expect("claim")
        .expect("claimed");
    for (project, seconds) in [(&runs.project_id, 100), (&other.project_id, 60)] {
        let synced = PresenceSync {
            problem: None,
            long_polls: false,
        };
        store
            .record_presence(project, at(seconds), Some(synced))
            .await
            .expect("presence");
    }
    let expected = OpenCounts {
        runs_queued: 1,
        runs_running: 1,
        tasks_queued: 1,
        tasks_claimed: 1,
        desktops_online: 1,
        oldest_queued_at: Some(at(40)),
    };
    assert_eq!(
        store.open_counts(at(90)).await.expect("count"),
        expected,
        "the completed run is not counted; the desktop last heard at 60 s is offline at 90 s"
    );
    assert_eq!(
        store
            .open_counts(at(60))
            .await
            .expect("count")
            .desktops_online,
        2,
        "heard from at the very time asked counts"
    );
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

const DAY: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

struct ChatSeed {
    link: String,
    other_link: String,
}

async fn chat_seed(store: &dyn Store) -> ChatSeed {
    let seed = seed(store).await;
    let mut links = Vec::new();
    for host in [HostKind::Claude, HostKind::Chatgpt] {
        let id = uuid::Uuid::new_v4().to_string();
        store
            .insert_chat_link(ChatLinkRecord {
                id: id.clone(),
                project_id: seed.project_id.clone(),
                host,
                event_subscription: false,
                created_at: T0,
            })
            .await
            .expect("insert link");
        links.push(id);
    }
    let other_link = links.pop().unwrap_or_default();
    let link = links.pop().unwrap_or_default();
    ChatSeed { link, other_link }
}

fn task(link: &str, key: &str, created: Timestamp) -> TaskRecord {
    TaskRecord::queued(
        link.to_owned(),
        format!("goal of {key}"),
        key.to_owned(),
        created,
        DAY,
    )
}

async fn new_task(store: &dyn Store, task: TaskRecord) -> TaskRecord {
    match store.insert_task(task).await.expect("insert task") {
        TaskInsertOutcome::Created(created) => created,
        TaskInsertOutcome::Existing(existing) => {
            panic!("expected a new task, got existing {}", existing.id)
        }
    }
}

fn attempt(task: &TaskRecord, link: &str, claim: &str, lease: Option<Timestamp>) -> ClaimAttempt {
    ClaimAttempt {
        task_id: task.id,
        chat_link_id: link.to_owned(),
        claim_id: claim.to_owned(),
        lease_until: lease,
        now: at(1),
    }
}

async fn read_task(store: &dyn Store, id: TaskId) -> TaskRecord {
    store
        .task(id)
        .await
        .expect("read task")
        .expect("task exists")
}

/// Links read back as written; the subscription flag can be switched; unknown ids are none.
pub async fn chat_links_round_trip(store: &dyn Store) {
    let seed = chat_seed(store).await;
    let link = store
        .chat_link(&seed.link)
        .await
        .expect("read link")
        .expect("link exists");
    assert_eq!(link.host, HostKind::Claude);
    assert!(!link.event_subscription);
    assert_eq!(link.created_at, T0);
    assert!(
        store
            .set_event_subscription(&seed.link, true)
            .await
            .expect("set")
    );
    let link = store
        .chat_link(&seed.link)
        .await
        .expect("read")
        .expect("exists");
    assert!(link.event_subscription);
    assert!(
        !store
            .set_event_subscription("nope", true)
            .await
            .expect("set")
    );
    assert!(store.chat_link("nope").await.expect("read").is_none());
}

/// One task per (link, key); another link's same key is its own task; tasks read back whole.
pub async fn task_idempotency_key_is_unique_per_link(store: &dyn Store) {
    let seed = chat_seed(store).await;
    let first = new_task(store, task(&seed.link, "key-1", at(0))).await;
    assert_eq!(first.status, TaskStatus::Queued);
    assert_eq!(first.expires_at, at(24 * 60 * 60));
    match store
        .insert_task(task(&seed.link, "key-1", at(5)))
        .await
        .expect("insert")
    {
        TaskInsertOutcome::Existing(existing) => assert_eq!(existing, first),
        TaskInsertOutcome::Created(created) => panic!("a repeated key created {}", created.id),
    }
    let other = new_task(store, task(&seed.other_link, "key-1", at(0))).await;
    assert_ne!(other.id, first.id);
    assert_eq!(read_task(store, first.id).await, first);
    assert!(
        store
            .task(TaskId::new_random())
            .await
            .expect("read")
            .is_none()
    );
}

/// Fifty concurrent assignments under one key create exactly one task.
pub async fn concurrent_assignments_create_one_task(store: Arc<dyn Store>) {
    const CONCURRENT_INSERTS: usize = 50;
    let seed = Arc::new(chat_seed(store.as_ref()).await);
    let inserts: Vec<_> = (0..CONCURRENT_INSERTS)
        .map(|_| {
            let (store, seed) = (store.clone(), seed.clone());
            tokio::spawn(async move {
                store
                    .insert_task(task(&seed.link, "double-click", at(0)))
                    .await
                    .expect("insert")
            })
        })
        .collect();
    let mut created = 0;
    let mut ids = std::collections::BTreeSet::new();
    for insert in inserts {
        match insert.await.expect("task") {
            TaskInsertOutcome::Created(task) => {
                created += 1;
                ids.insert(task.id);
            }
            TaskInsertOutcome::Existing(task) => {
                ids.insert(task.id);
            }
        }
    }
    assert_eq!(created, 1, "exactly one insert may create the task");
    assert_eq!(ids.len(), 1, "every caller must get the same task back");
}

/// A claim lands only on a queued, unexpired task of the claiming link, and only once; the
/// unconditional write (the naive claim's) lands whatever the status.
pub async fn claim_is_one_conditional_write(store: &dyn Store) {
    let seed = chat_seed(store).await;
    let queued = new_task(store, task(&seed.link, "key-c", at(0))).await;
    assert!(
        store
            .claim_task(attempt(&queued, &seed.other_link, "c-other", None))
            .await
            .expect("claim")
            .is_none(),
        "another link cannot claim"
    );
    let claimed = store
        .claim_task(attempt(&queued, &seed.link, "c-1", Some(at(31))))
        .await
        .expect("claim")
        .expect("the first claim lands");
    assert_eq!(claimed.status, TaskStatus::Claimed);
    assert_eq!(claimed.claim_id.as_deref(), Some("c-1"));
    assert_eq!(claimed.lease_until, Some(at(31)));
    assert_eq!(claimed.claimed_at, Some(at(1)));
    assert_eq!(claimed.updated_at, at(1));
    assert_eq!(read_task(store, queued.id).await, claimed);
    assert!(
        store
            .claim_task(attempt(&queued, &seed.link, "c-2", None))
            .await
            .expect("claim")
            .is_none(),
        "a claimed task cannot be claimed again"
    );
    let mut unknown = queued.clone();
    unknown.id = TaskId::new_random();
    assert!(
        store
            .claim_task(attempt(&unknown, &seed.link, "c-3", None))
            .await
            .expect("claim")
            .is_none()
    );
    let overdue = new_task(store, task(&seed.link, "key-old", at(-(24 * 60 * 60)))).await;
    assert!(
        store
            .claim_task(attempt(&overdue, &seed.link, "c-4", None))
            .await
            .expect("claim")
            .is_none(),
        "a task past expires_at cannot be claimed even before the sweep"
    );
    assert!(
        store
            .claim_task_unconditionally(attempt(&queued, &seed.link, "c-5", None))
            .await
            .expect("claim")
    );
    assert_eq!(
        read_task(store, queued.id).await.claim_id.as_deref(),
        Some("c-5"),
        "the unconditional write overwrites a live claim: the race the conditional claim prevents"
    );
}

/// Fifty concurrent claims of one task: exactly one lands.
pub async fn concurrent_claims_have_one_winner(store: Arc<dyn Store>) {
    const CONCURRENT_CLAIMS: usize = 50;
    let seed = chat_seed(store.as_ref()).await;
    let queued = new_task(store.as_ref(), task(&seed.link, "key-race", at(0))).await;
    let claims: Vec<_> = (0..CONCURRENT_CLAIMS)
        .map(|n| {
            let store = store.clone();
            let attempt = attempt(&queued, &seed.link, &format!("claim-{n}"), None);
            tokio::spawn(async move { store.claim_task(attempt).await.expect("claim") })
        })
        .collect();
    let mut winners = Vec::new();
    for claim in claims {
        if let Some(task) = claim.await.expect("task") {
            winners.push(task.claim_id);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one claim may land: {winners:?}");
    assert_eq!(
        read_task(store.as_ref(), queued.id).await.claim_id,
        winners[0]
    );
}

/// The claim that answers a loser with the stored task: the winner gets its claim, the
/// others (another link, a second claim, an overdue task) the row as it is and no write; an
/// unknown task gets nothing.
pub async fn claim_or_current_tells_losers_what_is_stored(store: &dyn Store) {
    let seed = chat_seed(store).await;
    let queued = new_task(store, task(&seed.link, "key-cc", at(0))).await;
    let other = store
        .claim_task_or_current(attempt(&queued, &seed.other_link, "c-other", None))
        .await
        .expect("claim");
    assert_eq!(other, ClaimResult::NotClaimed(Some(queued.clone())));
    let won = store
        .claim_task_or_current(attempt(&queued, &seed.link, "c-1", Some(at(31))))
        .await
        .expect("claim");
    let ClaimResult::Claimed(claimed) = won else {
        panic!("the first claim lands: {won:?}");
    };
    assert_eq!(claimed.claim_id.as_deref(), Some("c-1"));
    assert_eq!(claimed.lease_until, Some(at(31)));
    assert_eq!(read_task(store, queued.id).await, claimed);
    let again = store
        .claim_task_or_current(attempt(&queued, &seed.link, "c-2", None))
        .await
        .expect("claim");
    assert_eq!(
        again,
        ClaimResult::NotClaimed(Some(claimed.clone())),
        "a second claim sees the first one's claim and writes nothing"
    );
    let mut unknown = queued.clone();
    unknown.id = TaskId::new_random();
    let none = store
        .claim_task_or_current(attempt(&unknown, &seed.link, "c-3", None))
        .await
        .expect("claim");
    assert_eq!(none, ClaimResult::NotClaimed(None));
    let overdue = new_task(store, task(&seed.link, "key-cc-old", at(-(24 * 60 * 60)))).await;
    let late = store
        .claim_task_or_current(attempt(&overdue, &seed.link, "c-4", None))
        .await
        .expect("claim");
    assert_eq!(
        late,
        ClaimResult::NotClaimed(Some(overdue)),
        "a task past expires_at is not claimed even before the sweep"
    );
}

/// Fifty concurrent claims-or-reads of one task: exactly one lands, and every loser that is
/// told of a claim is told of the winner's.
pub async fn concurrent_claims_or_current_have_one_winner(store: Arc<dyn Store>) {
    const CONCURRENT_CLAIMS: usize = 50;
    let seed = chat_seed(store.as_ref()).await;
    let queued = new_task(store.as_ref(), task(&seed.link, "key-race-cc", at(0))).await;
    let claims: Vec<_> = (0..CONCURRENT_CLAIMS)
        .map(|n| {
            let store = store.clone();
            let attempt = attempt(&queued, &seed.link, &format!("claim-{n}"), None);
            tokio::spawn(async move { store.claim_task_or_current(attempt).await.expect("claim") })
        })
        .collect();
    let mut winners = Vec::new();
    let mut seen = Vec::new();
    for claim in claims {
        match claim.await.expect("task") {
            ClaimResult::Claimed(task) => winners.push(task.claim_id),
            ClaimResult::NotClaimed(Some(task)) => seen.push(task),
            ClaimResult::NotClaimed(None) => panic!("the task exists"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one claim may land: {winners:?}");
    let stored = read_task(store.as_ref(), queued.id).await;
    assert_eq!(stored.claim_id, winners[0]);
    for task in seen {
        // A loser's row is the winner's claim, or (read before it committed) still queued.
        assert!(
            task == stored || task == queued,
            "a loser saw a claim that did not win: {task:?}"
        );
    }
}

/// A task write decided from a stale status, claim or lease does not land.
pub async fn task_updates_are_fenced_by_status_claim_and_lease(store: &dyn Store) {
    let seed = chat_seed(store).await;
    let queued = new_task(store, task(&seed.link, "key-u", at(0))).await;
    let claimed = store
        .claim_task(attempt(&queued, &seed.link, "c-a", Some(at(30))))
        .await
        .expect("claim")
        .expect("claimed");
    let mut done = claimed.clone();
    done.status = TaskStatus::Completed;
    done.result = Some("日本語 😀 \"quoted\"".into());
    done.result_hash = Some("h".into());
    done.lease_until = None;
    done.finished_at = Some(at(9));
    done.updated_at = at(9);
    assert!(
        !store.update_task(&queued, &done).await.expect("update"),
        "a write decided on the queued row must not land on the claimed one"
    );
    let mut other_claim = claimed.clone();
    other_claim.claim_id = Some("c-b".into());
    assert!(
        !store
            .update_task(&other_claim, &done)
            .await
            .expect("update"),
        "a write fenced by another claim id must not land"
    );
    let mut other_lease = claimed.clone();
    other_lease.lease_until = Some(at(99));
    assert!(
        !store
            .update_task(&other_lease, &done)
            .await
            .expect("update"),
        "a write decided on another lease must not land"
    );
    assert!(store.update_task(&claimed, &done).await.expect("update"));
    assert_eq!(read_task(store, queued.id).await, done);
    assert!(
        !store.update_task(&claimed, &done).await.expect("update"),
        "the same write twice lands once"
    );
}

/// The inbox is the link's open tasks oldest first; the owner's list all its tasks newest
/// first; both bounded.
pub async fn task_lists_are_ordered_and_bounded(store: &dyn Store) {
    let seed = chat_seed(store).await;
    let third = new_task(store, task(&seed.link, "k3", at(3))).await;
    let first = new_task(store, task(&seed.link, "k1", at(1))).await;
    let second = new_task(store, task(&seed.link, "k2", at(2))).await;
    new_task(store, task(&seed.other_link, "k4", at(0))).await;
    let mut cancelled = second.clone();
    cancelled.status = TaskStatus::Cancelled;
    cancelled.finished_at = Some(at(4));
    assert!(
        store
            .update_task(&second, &cancelled)
            .await
            .expect("update")
    );
    store
        .claim_task(attempt(&third, &seed.link, "c", None))
        .await
        .expect("claim")
        .expect("claimed");
    let open: Vec<_> = store
        .open_tasks(&seed.link, 10)
        .await
        .expect("list")
        .iter()
        .map(|t| (t.id, t.status))
        .collect();
    assert_eq!(
        open,
        [
            (first.id, TaskStatus::Queued),
            (third.id, TaskStatus::Claimed)
        ]
    );
    assert_eq!(
        store.open_tasks(&seed.link, 1).await.expect("list").len(),
        1
    );
    let all: Vec<_> = store
        .link_tasks(&seed.link, 10)
        .await
        .expect("list")
        .iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(all, [third.id, second.id, first.id]);
    assert_eq!(
        store.link_tasks(&seed.link, 2).await.expect("list").len(),
        2
    );
    assert!(store.open_tasks("nope", 10).await.expect("list").is_empty());
}

/// The guard sees exactly what is due; the sweep moves exactly those tasks, each as
/// `transition` decides for `LeaseLapsed` or `Expire`, and nothing else.
pub async fn sweep_moves_exactly_what_the_state_machine_says(store: &dyn Store) {
    let seed = chat_seed(store).await;
    let now = at(100);
    assert!(
        !store.tasks_due(now).await.expect("guard"),
        "nothing stored, nothing due"
    );
    let tasks = sweep_tasks_not_yet_due(store, &seed).await;
    assert!(
        !store.tasks_due(now).await.expect("guard"),
        "nothing due yet"
    );
    let guarded = store
        .open_tasks_unless_due(&seed.link, 10, now)
        .await
        .expect("guarded read")
        .expect("nothing due: the open tasks");
    let open = store.open_tasks(&seed.link, 10).await.expect("read");
    assert_eq!(
        guarded, open,
        "with nothing due the guarded read is the plain read"
    );
    let due = sweep_tasks_due(store, &seed, &tasks.lapsed, now).await;
    let ids = [
        tasks.lapsed.id,
        tasks.live.id,
        tasks.unleased.id,
        due[0].id,
        due[1].id,
        tasks.fresh.id,
        tasks.done.id,
    ];
    let mut before = Vec::new();
    for id in ids {
        before.push(read_task(store, id).await);
    }
    let counts = store.sweep_tasks(now).await.expect("sweep");
    assert_eq!(
        counts,
        SweepCounts {
            requeued: 1,
            expired: 2
        }
    );
    assert_swept_as_the_state_machine_says(store, before, now).await;
}

/// The tasks of the sweep check before anything is due.
struct SweepTasks {
    lapsed: TaskRecord,
    live: TaskRecord,
    unleased: TaskRecord,
    fresh: TaskRecord,
    done: TaskRecord,
}

async fn sweep_tasks_not_yet_due(store: &dyn Store, seed: &ChatSeed) -> SweepTasks {
    let lapsed = new_task(store, task(&seed.link, "lapsed", at(0))).await;
    let live = new_task(store, task(&seed.link, "live", at(0))).await;
    let unleased = new_task(store, task(&seed.link, "unleased", at(0))).await;
    let fresh = new_task(store, task(&seed.link, "fresh", at(50))).await;
    let finished_old = new_task(store, task(&seed.link, "old-done", at(-(2 * 24 * 60 * 60)))).await;
    let mut done = finished_old.clone();
    done.status = TaskStatus::Completed;
    assert!(
        store
            .update_task(&finished_old, &done)
            .await
            .expect("update")
    );
    for (task, lease) in [(&live, Some(at(101))), (&unleased, None)] {
        store
            .claim_task(attempt(task, &seed.link, "c", lease))
            .await
            .expect("claim")
            .expect("claimed");
    }
    SweepTasks {
        lapsed,
        live,
        unleased,
        fresh,
        done,
    }
}

/// Makes a lease lapse at `now` (which the guarded read reports without writing), and adds a
/// queued and a claimed task a day old; returns those two.
async fn sweep_tasks_due(
    store: &dyn Store,
    seed: &ChatSeed,
    lapsed: &TaskRecord,
    now: Timestamp,
) -> [TaskRecord; 2] {
    store
        .claim_task(attempt(lapsed, &seed.link, "c", Some(at(100))))
        .await
        .expect("claim")
        .expect("claimed");
    assert!(
        store.tasks_due(now).await.expect("guard"),
        "a lease lapsing at now is due"
    );
    assert_eq!(
        store
            .open_tasks_unless_due(&seed.link, 10, now)
            .await
            .expect("guarded read"),
        None,
        "the guarded read reports the due lease instead of listing"
    );
    assert_eq!(
        read_task(store, lapsed.id).await.status,
        TaskStatus::Claimed,
        "and writes nothing"
    );
    let old_queued = new_task(store, task(&seed.link, "old-q", at(100 - 24 * 60 * 60))).await;
    let old_claimed = new_task(store, task(&seed.link, "old-c", at(99 - 24 * 60 * 60))).await;
    store
        .claim_task(ClaimAttempt {
            now: at(100 - 24 * 60 * 60),
            ..attempt(&old_claimed, &seed.link, "c", Some(at(1000)))
        })
        .await
        .expect("claim")
        .expect("claimed");
    [old_queued, old_claimed]
}

/// What the sweep makes of `task` at `now`: the chat task state machine's `Expire` and then
/// `LeaseLapsed` arms (`chat_tasks::machine`), stated here as the rules themselves so the
/// store's suite needs nothing above the store; `tests/store_conformance.rs` holds the machine
/// to them (`the_sweep_rules_of_the_suite_are_the_task_machines`).
pub fn swept(task: &TaskRecord, now: Timestamp) -> TaskRecord {
    let mut next = task.clone();
    let open = matches!(task.status, TaskStatus::Queued | TaskStatus::Claimed);
    if open && task.expires_at <= now {
        next.status = TaskStatus::Expired;
        next.lease_until = None;
        next.finished_at = Some(now);
        next.updated_at = now;
    } else if task.status == TaskStatus::Claimed && task.lease_until.is_some_and(|l| l <= now) {
        next.status = TaskStatus::Queued;
        next.claim_id = None;
        next.lease_until = None;
        next.claimed_at = None;
        next.updated_at = now;
    }
    next
}

async fn assert_swept_as_the_state_machine_says(
    store: &dyn Store,
    before: Vec<TaskRecord>,
    now: Timestamp,
) {
    for previous in before {
        let expected = swept(&previous, now);
        assert_eq!(
            read_task(store, previous.id).await,
            expected,
            "the sweep must move task `{}` as the state machine does",
            previous.idempotency_key
        );
    }
    assert!(
        !store.tasks_due(now).await.expect("guard"),
        "nothing due after the sweep"
    );
    assert_eq!(
        store.sweep_tasks(now).await.expect("sweep"),
        SweepCounts::default(),
        "a second sweep finds nothing"
    );
}

fn artifact(task: &TaskRecord, id: &str, claim: &str, content: &str) -> ArtifactRecord {
    ArtifactRecord {
        task_id: task.id,
        artifact_id: id.to_owned(),
        claim_id: claim.to_owned(),
        name: format!("{id}.md"),
        mime: "text/markdown".into(),
        content: content.to_owned(),
        size_bytes: content.len() as u64,
        sha256: format!("sha-of-{content}"),
        created_at: at(2),
    }
}

/// An artifact lands only under the task's live claim, once per id, and at most `max` per task.
pub async fn artifacts_are_fenced_unique_and_bounded(store: &dyn Store) {
    let seed = chat_seed(store).await;
    let queued = new_task(store, task(&seed.link, "key-a", at(0))).await;
    assert_eq!(
        insert(store, artifact(&queued, "a1", "c-1", "x"), 3).await,
        ArtifactInsertOutcome::Refused,
        "no artifact without a claim"
    );
    store
        .claim_task(attempt(&queued, &seed.link, "c-1", Some(at(60))))
        .await
        .expect("claim")
        .expect("claimed");
    assert_eq!(
        insert(store, artifact(&queued, "a1", "c-0", "x"), 3).await,
        ArtifactInsertOutcome::Refused,
        "no artifact under a stale claim id"
    );
    let first = artifact(&queued, "a1", "c-1", "日本語");
    assert_eq!(
        insert(store, first.clone(), 3).await,
        ArtifactInsertOutcome::Stored
    );
    assert_eq!(
        insert(store, artifact(&queued, "a1", "c-1", "other"), 3).await,
        ArtifactInsertOutcome::Existing(first.clone()),
        "a used id returns what it holds"
    );
    for id in ["a2", "a3"] {
        assert_eq!(
            insert(store, artifact(&queued, id, "c-1", id), 3).await,
            ArtifactInsertOutcome::Stored
        );
    }
    assert_eq!(
        insert(store, artifact(&queued, "a4", "c-1", "a4"), 3).await,
        ArtifactInsertOutcome::Refused,
        "at most `max` artifacts per task"
    );
    let mut expired_lease = artifact(&queued, "a5", "c-1", "late");
    expired_lease.created_at = at(60);
    assert_eq!(
        insert(store, expired_lease, 10).await,
        ArtifactInsertOutcome::Refused,
        "no artifact once the lease lapsed"
    );
    let stored = store.artifacts(queued.id).await.expect("list");
    let ids: Vec<_> = stored.iter().map(|a| a.artifact_id.as_str()).collect();
    assert_eq!(ids, ["a1", "a2", "a3"]);
    assert_eq!(stored[0], first);
}

async fn insert(store: &dyn Store, record: ArtifactRecord, max: usize) -> ArtifactInsertOutcome {
    store.insert_artifact(record, max).await.expect("insert")
}

fn query(seed: &Seed, limit: usize) -> CommandQuery {
    CommandQuery {
        project_id: seed.project_id.clone(),
        status: None,
        agent_id: None,
        before: None,
        limit,
    }
}

fn ids(list: &[CommandRecord]) -> Vec<CommandId> {
    list.iter().map(|c| c.id).collect()
}

/// Five commands, two per second, alternating between the seed's two agents.
async fn five_commands(store: &dyn Store, seed: &Seed) -> Vec<CommandRecord> {
    let mut made = Vec::new();
    for n in 0..5 {
        let agent = if n % 2 == 0 {
            &seed.agent_id
        } else {
            &seed.other_agent_id
        };
        let key = format!("key-{n}-xxxx");
        made.push(insert_new(store, command(seed, agent, &key, at(n / 2))).await);
    }
    made
}

/// A project's commands list newest first (ties by id descending), paged by the (created, id)
/// cursor without gaps or repeats, each page bounded by the limit.
pub async fn project_commands_are_newest_first_and_paged(store: &dyn Store) {
    let seed = seed(store).await;
    let mut expected = five_commands(store, &seed).await;
    expected.sort_by_key(|c| std::cmp::Reverse((c.created_at, c.id.to_string())));
    let all = store
        .project_commands(query(&seed, 10))
        .await
        .expect("list")
        .rows;
    assert_eq!(
        ids(&all),
        ids(&expected),
        "newest first, ties by id descending"
    );
    let mut paged = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .project_commands(CommandQuery {
                before,
                ..query(&seed, 2)
            })
            .await
            .expect("page")
            .rows;
        assert!(page.len() <= 2, "a page holds at most its limit");
        let Some(last) = page.last() else { break };
        before = Some((last.created_at, last.id));
        paged.extend(page);
    }
    assert_eq!(
        ids(&paged),
        ids(&expected),
        "pages follow each other without gaps or repeats"
    );
}

/// A project's commands filter by agent and by status, and another project lists none.
pub async fn project_commands_are_filtered(store: &dyn Store) {
    let seed = seed(store).await;
    let made = five_commands(store, &seed).await;
    let of_agent = store
        .project_commands(CommandQuery {
            agent_id: Some(seed.other_agent_id.clone()),
            ..query(&seed, 10)
        })
        .await
        .expect("by agent")
        .rows;
    assert_eq!(of_agent.len(), 2, "only the agent's commands");
    assert!(of_agent.iter().all(|c| c.agent_id == seed.other_agent_id));
    let mut running = made[0].clone();
    running.status = RunStatus::Running;
    assert!(
        store
            .update_command(&made[0], &running)
            .await
            .expect("update")
    );
    let by_status = store
        .project_commands(CommandQuery {
            status: Some(RunStatus::Running),
            ..query(&seed, 10)
        })
        .await
        .expect("by status")
        .rows;
    assert_eq!(
        ids(&by_status),
        vec![made[0].id],
        "only commands in the status"
    );
    let other = store
        .project_commands(CommandQuery {
            project_id: "no-such-project".into(),
            ..query(&seed, 10)
        })
        .await
        .expect("other project")
        .rows;
    assert!(other.is_empty(), "another project's list is empty");
}

/// Chat links list per project.
pub async fn chat_links_are_listed_per_project(store: &dyn Store) {
    let seed = chat_seed(store).await;
    let link = store
        .chat_link(&seed.link)
        .await
        .expect("link")
        .expect("exists");
    let links = store.chat_links(&link.project_id).await.expect("links");
    let mut expected = vec![seed.link.clone(), seed.other_link.clone()];
    expected.sort();
    let mut listed: Vec<String> = links.into_iter().map(|l| l.id).collect();
    listed.sort();
    assert_eq!(listed, expected, "both links of the project");
    assert!(
        store
            .chat_links("no-such-project")
            .await
            .expect("none")
            .is_empty()
    );
}

fn browser_session(owner_id: &str, id_hash: &str, created: Timestamp) -> BrowserSessionRecord {
    BrowserSessionRecord {
        id_hash: id_hash.to_owned(),
        owner_id: owner_id.to_owned(),
        csrf: format!("csrf-{id_hash}"),
        created_at: created,
        last_seen_at: created,
        ended_at: None,
    }
}

async fn session_hashes(store: &dyn Store, owner_id: &str, idle_before: Timestamp) -> Vec<String> {
    store
        .browser_sessions(owner_id, idle_before)
        .await
        .expect("sessions")
        .into_iter()
        .map(|s| s.id_hash)
        .collect()
}

/// Browser sessions list per owner (live ones only, newest first), and one ends alone, once.
pub async fn browser_sessions_are_listed_and_ended_per_owner(store: &dyn Store) {
    let owner = store.ensure_owner("owner", T0).await.expect("owner");
    let other = store.ensure_owner("other", T0).await.expect("other");
    for (id, hash, created) in [
        (&owner.id, "s1", at(1)),
        (&owner.id, "s2", at(2)),
        (&other.id, "s3", at(3)),
    ] {
        store
            .insert_browser_session(browser_session(id, hash, created))
            .await
            .expect("insert");
    }
    assert_eq!(
        session_hashes(store, &owner.id, T0).await,
        vec!["s2", "s1"],
        "newest first"
    );
    assert!(
        session_hashes(store, &owner.id, at(5)).await.is_empty(),
        "idle sessions are not live"
    );
    assert!(
        store.end_browser_session("s2", at(4)).await.expect("end"),
        "a live session ends"
    );
    assert!(
        !store.end_browser_session("s2", at(5)).await.expect("again"),
        "once"
    );
    assert_eq!(session_hashes(store, &owner.id, T0).await, vec!["s1"]);
    assert_eq!(
        session_hashes(store, &other.id, T0).await,
        vec!["s3"],
        "others' are apart"
    );
}

/// Token uses list per owner, and a use never moves the time back.
pub async fn token_uses_are_per_owner_and_never_move_back(store: &dyn Store) {
    let seed = seed(store).await;
    let owner = store.ensure_owner("owner", T0).await.expect("owner");
    let other = store.ensure_owner("other", T0).await.expect("other");
    assert!(
        store
            .token_uses(&owner.id)
            .await
            .expect("none yet")
            .is_empty()
    );
    store
        .record_token_use(&seed.agent_id, at(10))
        .await
        .expect("use");
    store
        .record_token_use(&seed.agent_id, at(5))
        .await
        .expect("older use");
    assert_eq!(
        store.token_uses(&owner.id).await.expect("uses"),
        vec![(seed.agent_id.clone(), at(10))],
        "never moves back"
    );
    assert!(
        store
            .token_uses(&other.id)
            .await
            .expect("other's")
            .is_empty(),
        "another owner's uses are apart"
    );
}

/// A desktop's presence never moves back in time; its problem and polling mode change only
/// when a sync says so (`Some`), and other requests (`None`) keep them.
pub async fn presence_keeps_its_problem_until_a_sync_says_otherwise(store: &dyn Store) {
    let seed = seed(store).await;
    let project = seed.project_id.as_str();
    assert_eq!(store.presence(project).await.expect("read"), None);
    let full = r#"{"cause":"disk_full","detail":"1 MiB free"}"#;
    let sync = |problem, long_polls| {
        Some(PresenceSync {
            problem,
            long_polls,
        })
    };
    store
        .record_presence(project, at(10), sync(Some(full), true))
        .await
        .expect("sync with a problem");
    store
        .record_presence(project, at(5), None)
        .await
        .expect("an older heartbeat");
    let read = store.presence(project).await.expect("read").expect("seen");
    assert_eq!(read.seen_at, at(10), "never moves back");
    assert_eq!(read.problem.as_deref(), Some(full), "kept by a heartbeat");
    assert!(read.long_polls, "the mode is kept by a heartbeat");
    store
        .record_presence(project, at(20), sync(None, false))
        .await
        .expect("a sync without a problem");
    let read = store.presence(project).await.expect("read").expect("seen");
    assert_eq!(
        (read.seen_at, read.problem, read.long_polls),
        (at(20), None, false)
    );
}

/// A report lands only on a running command under its own execution id, survives the
/// command's other updates, and the completion's arrival time is stored.
pub async fn run_reports_land_on_their_running_execution_only(store: &dyn Store) {
    let seed = seed(store).await;
    let queued = insert_new(store, command(&seed, &seed.agent_id, "key-0099", at(0))).await;
    let report = r#"{"execution_id":"e1","waiting_for":{"what":"owner approval of fs.write"}}"#;
    assert!(
        !store
            .record_run_report(queued.id, "e1", report, at(1))
            .await
            .expect("report on a queued run")
    );
    let mut running = queued.clone();
    running.status = RunStatus::Running;
    running.execution_id = Some("e1".into());
    running.last_seen_at = Some(at(1));
    assert!(
        store
            .update_command(&queued, &running)
            .await
            .expect("start")
    );
    assert!(
        !store
            .record_run_report(queued.id, "e2", report, at(2))
            .await
            .expect("another execution's report")
    );
    assert!(
        store
            .record_run_report(queued.id, "e1", report, at(3))
            .await
            .expect("report")
    );
    let read = store
        .command(queued.id)
        .await
        .expect("read")
        .expect("there");
    let expected: Value = serde_json::from_str(report).expect("json");
    assert_eq!(read.report, Some(expected));
    assert_eq!(read.last_seen_at, Some(at(3)));
    let mut cancelled = read.clone();
    cancelled.cancel_requested = true;
    assert!(
        store
            .update_command(&read, &cancelled)
            .await
            .expect("cancel")
    );
    let mut done = cancelled.clone();
    done.status = RunStatus::Completed;
    done.finished_at = Some(at(4));
    done.delivered_at = Some(at(9));
    assert!(store.update_command(&cancelled, &done).await.expect("done"));
    let read = store
        .command(queued.id)
        .await
        .expect("read")
        .expect("there");
    assert!(read.report.is_some(), "an update leaves the report alone");
    assert_eq!(
        (read.finished_at, read.delivered_at),
        (Some(at(4)), Some(at(9)))
    );
    assert!(
        !store
            .record_run_report(queued.id, "e1", report, at(10))
            .await
            .expect("report after the end")
    );
}
