//! The conformance checks of owner sign-in and OAuth state: everything single-use is used
//! once, even by concurrent callers; a grant's revocation takes its tokens along; idle
//! sessions and expired links do not come back; the sweep removes only what lapsed.

use std::sync::Arc;

use serde_json::json;

use super::{T0, at};
use crate::store::auth::grant_token_hash;
use crate::store::{
    AuthCodeRecord, AuthSweep, BrowserSessionRecord, IssuedTokens, OAuthClientRecord,
    OAuthTokenKind, OAuthTokenRecord, ProjectRecord, RedeemOutcome, RotateOutcome,
    SignInLinkRecord, Store, TokenKind, TokenRecord,
};

/// Runs every auth check, each on a fresh store from `make`.
pub async fn run_all<F>(make: &F)
where
    F: Fn() -> Arc<dyn Store>,
{
    owner_passwords_are_set_replaced_and_cleared(make().as_ref()).await;
    browser_sessions_expire_when_idle_and_end_for_good(make().as_ref()).await;
    sign_in_links_work_once_before_they_expire(make().as_ref()).await;
    clients_round_trip_and_remember_their_first_use(make().as_ref()).await;
    codes_redeem_once_and_name_their_grant(make().as_ref()).await;
    expired_and_unknown_codes_store_nothing(make().as_ref()).await;
    concurrent_redeems_have_one_winner(make()).await;
    refresh_tokens_rotate_once(make().as_ref()).await;
    revoking_a_grant_takes_its_tokens(make().as_ref()).await;
    grants_of_one_identity_share_a_connection(make().as_ref()).await;
    concurrent_grants_of_one_identity_share_one_connection(make()).await;
    the_auth_sweep_removes_only_what_lapsed(make().as_ref()).await;
}

struct Owner {
    id: String,
    project_id: String,
}

async fn owner(store: &dyn Store, name: &str) -> Owner {
    let owner = store.ensure_owner(name, T0).await.expect("ensure owner");
    let project_id = uuid::Uuid::new_v4().to_string();
    store
        .insert_project(ProjectRecord {
            id: project_id.clone(),
            owner_id: owner.id.clone(),
            name: format!("{name}'s"),
            created_at: T0,
        })
        .await
        .expect("insert project");
    Owner {
        id: owner.id,
        project_id,
    }
}

/// Checks that owners' password hashes are set, replaced and cleared, and only for owners that
/// exist.
pub async fn owner_passwords_are_set_replaced_and_cleared(store: &dyn Store) {
    let ann = owner(store, "ann").await;
    let found = store.owner_by_name("ann").await.expect("owner by name");
    assert_eq!(found.map(|o| o.id), Some(ann.id.clone()));
    assert!(store.owner_by_name("nobody").await.expect("read").is_none());
    let by_id = store.owner(&ann.id).await.expect("owner by id");
    assert_eq!(by_id.map(|o| o.name), Some("ann".to_owned()));
    assert!(store.owner("no-such-owner").await.expect("read").is_none());
    assert!(
        !store
            .set_owner_password("no-such-owner", Some("h".into()))
            .await
            .expect("set")
    );
    assert_eq!(store.owner_password(&ann.id).await.expect("read"), None);
    assert!(
        store
            .set_owner_password(&ann.id, Some("h1".into()))
            .await
            .expect("set")
    );
    assert!(
        store
            .set_owner_password(&ann.id, Some("h2".into()))
            .await
            .expect("replace")
    );
    assert_eq!(
        store
            .owner_password(&ann.id)
            .await
            .expect("read")
            .as_deref(),
        Some("h2")
    );
    assert!(
        store
            .set_owner_password(&ann.id, None)
            .await
            .expect("clear")
    );
    assert_eq!(store.owner_password(&ann.id).await.expect("read"), None);
}

fn browser_session(owner_id: &str, hash: &str) -> BrowserSessionRecord {
    BrowserSessionRecord {
        id_hash: hash.to_owned(),
        owner_id: owner_id.to_owned(),
        csrf: format!("csrf-{hash}"),
        created_at: T0,
        last_seen_at: T0,
        ended_at: None,
    }
}

/// Checks that a touched session moves its last use, that an idle one is not found, and that
/// ending an owner's sessions ends all of them and only theirs.
pub async fn browser_sessions_expire_when_idle_and_end_for_good(store: &dyn Store) {
    let ann = owner(store, "ann").await;
    let bea = owner(store, "bea").await;
    for (owner, hash) in [(&ann, "s1"), (&ann, "s2"), (&bea, "s3")] {
        store
            .insert_browser_session(browser_session(&owner.id, hash))
            .await
            .expect("insert session");
    }
    let touched = store
        .touch_browser_session("s1", at(-1), at(100))
        .await
        .expect("touch")
        .expect("live");
    assert_eq!(
        (touched.last_seen_at, touched.csrf.as_str()),
        (at(100), "csrf-s1")
    );
    assert!(
        store
            .touch_browser_session("s2", at(1), at(100))
            .await
            .expect("touch")
            .is_none(),
        "last seen before the idle cut-off: gone"
    );
    assert!(
        store
            .touch_browser_session("nope", at(-1), at(1))
            .await
            .expect("touch")
            .is_none()
    );
    assert_eq!(
        store
            .end_browser_sessions(&ann.id, at(200))
            .await
            .expect("end"),
        2
    );
    assert_eq!(
        store
            .end_browser_sessions(&ann.id, at(201))
            .await
            .expect("end"),
        0
    );
    assert!(
        store
            .touch_browser_session("s1", at(-1), at(300))
            .await
            .expect("touch")
            .is_none()
    );
    assert!(
        store
            .touch_browser_session("s3", at(-1), at(300))
            .await
            .expect("touch")
            .is_some(),
        "another owner's session lives on"
    );
}

/// Checks that a sign-in link is used once, and never after it expired.
pub async fn sign_in_links_work_once_before_they_expire(store: &dyn Store) {
    let ann = owner(store, "ann").await;
    for hash in ["l1", "l2"] {
        store
            .insert_sign_in_link(SignInLinkRecord {
                token_hash: hash.into(),
                owner_id: ann.id.clone(),
                created_at: T0,
                expires_at: at(60),
                used_at: None,
            })
            .await
            .expect("insert link");
    }
    let used = store
        .use_sign_in_link("l1", at(1))
        .await
        .expect("use")
        .expect("fresh");
    assert_eq!(
        (used.owner_id.as_str(), used.used_at),
        (ann.id.as_str(), Some(at(1)))
    );
    assert!(
        store
            .use_sign_in_link("l1", at(2))
            .await
            .expect("use")
            .is_none(),
        "once"
    );
    assert!(
        store
            .use_sign_in_link("l2", at(60))
            .await
            .expect("use")
            .is_none(),
        "expired"
    );
    assert!(
        store
            .use_sign_in_link("nope", at(1))
            .await
            .expect("use")
            .is_none()
    );
}

/// Checks that a registered client reads back whole and keeps the time of its first use.
pub async fn clients_round_trip_and_remember_their_first_use(store: &dyn Store) {
    let client = OAuthClientRecord {
        id: "grc_1".into(),
        secret_hash: Some("secret-hash".into()),
        metadata: json!({"client_name": "App", "redirect_uris": ["https://a.example/cb"]}),
        created_at: T0,
        used_at: None,
    };
    store
        .insert_oauth_client(client.clone())
        .await
        .expect("insert client");
    assert_eq!(
        store.oauth_client("grc_1").await.expect("read"),
        Some(client.clone())
    );
    assert!(store.oauth_client("grc_2").await.expect("read").is_none());
    store
        .mark_oauth_client_used("grc_1", at(5))
        .await
        .expect("mark");
    store
        .mark_oauth_client_used("grc_1", at(9))
        .await
        .expect("mark again");
    let read = store
        .oauth_client("grc_1")
        .await
        .expect("read")
        .expect("client");
    assert_eq!(read.used_at, Some(at(5)), "the first use is kept");
}

fn code(owner: &Owner, hash: &str, expires_at: relay_protocol::clock::Timestamp) -> AuthCodeRecord {
    AuthCodeRecord {
        code_hash: hash.into(),
        client_id: "grc_1".into(),
        client_name: "App".into(),
        redirect_uri: "https://a.example/cb".into(),
        code_challenge: "challenge".into(),
        resource: Some("https://relay.example/mcp".into()),
        owner_id: owner.id.clone(),
        project_id: owner.project_id.clone(),
        scopes: vec!["osfoundry:read".into(), "osfoundry:run".into()],
        created_at: T0,
        expires_at,
        used_at: None,
        grant_id: None,
    }
}

fn grant(owner: &Owner) -> TokenRecord {
    let id = uuid::Uuid::new_v4().to_string();
    TokenRecord {
        token_hash: grant_token_hash(&id),
        id,
        kind: TokenKind::Agent,
        owner_id: owner.id.clone(),
        project_id: Some(owner.project_id.clone()),
        agent_name: Some("App".into()),
        scopes: vec!["osfoundry:read".into(), "osfoundry:run".into()],
        client_id: Some("grc_1".into()),
        connection_id: None,
        created_at: at(1),
        revoked_at: None,
    }
}

fn tokens(grant_id: &str, tag: &str) -> IssuedTokens {
    let token = |kind, suffix: &str| OAuthTokenRecord {
        token_hash: format!("{tag}-{suffix}"),
        kind,
        grant_id: grant_id.to_owned(),
        created_at: at(1),
        expires_at: at(3600),
        used_at: None,
        revoked_at: None,
    };
    IssuedTokens {
        access: token(OAuthTokenKind::Access, "access"),
        refresh: token(OAuthTokenKind::Refresh, "refresh"),
    }
}

/// Checks that a code is exchanged once, that its second use names the grant of the first, and
/// that an expired or unknown code stores nothing.
pub async fn codes_redeem_once_and_name_their_grant(store: &dyn Store) {
    let ann = owner(store, "ann").await;
    store
        .insert_auth_code(code(&ann, "c1", at(60)))
        .await
        .expect("insert code");
    assert_eq!(
        store.auth_code("c1").await.expect("read"),
        Some(code(&ann, "c1", at(60)))
    );
    let first = grant(&ann);
    let outcome = store
        .redeem_auth_code("c1", at(1), first.clone(), tokens(&first.id, "t1"))
        .await
        .expect("redeem");
    assert_eq!(outcome, RedeemOutcome::Issued);
    let stored = TokenRecord {
        connection_id: Some(first.id.clone()),
        ..first.clone()
    };
    assert_eq!(store.token(&first.id).await.expect("read"), Some(stored));
    let access = store
        .oauth_token("t1-access")
        .await
        .expect("read")
        .expect("access");
    assert_eq!(
        (access.kind, access.grant_id.as_str()),
        (OAuthTokenKind::Access, first.id.as_str())
    );
    let redeemed = store.auth_code("c1").await.expect("read").expect("code");
    assert_eq!(
        (redeemed.used_at, redeemed.grant_id.as_deref()),
        (Some(at(1)), Some(first.id.as_str()))
    );

    let second = grant(&ann);
    let again = store
        .redeem_auth_code("c1", at(2), second.clone(), tokens(&second.id, "t2"))
        .await
        .expect("redeem again");
    assert_eq!(
        again,
        RedeemOutcome::AlreadyUsed {
            grant_id: Some(first.id.clone())
        }
    );
    assert!(
        store.token(&second.id).await.expect("read").is_none(),
        "nothing stored"
    );
    assert!(
        store
            .oauth_token("t2-access")
            .await
            .expect("read")
            .is_none()
    );
}

/// Checks that an expired or unknown code stores nothing.
pub async fn expired_and_unknown_codes_store_nothing(store: &dyn Store) {
    let ann = owner(store, "ann").await;
    store
        .insert_auth_code(code(&ann, "c2", at(60)))
        .await
        .expect("insert code");
    let late = grant(&ann);
    let expired = store
        .redeem_auth_code("c2", at(60), late.clone(), tokens(&late.id, "t3"))
        .await
        .expect("redeem expired");
    assert_eq!(expired, RedeemOutcome::Invalid);
    assert!(store.token(&late.id).await.expect("read").is_none());
    let unknown = store
        .redeem_auth_code("nope", at(1), late.clone(), tokens(&late.id, "t4"))
        .await
        .expect("redeem unknown");
    assert_eq!(unknown, RedeemOutcome::Invalid);
}

/// Checks that of eight concurrent exchanges of one code, exactly one makes a grant.
pub async fn concurrent_redeems_have_one_winner(store: Arc<dyn Store>) {
    let ann = owner(store.as_ref(), "ann").await;
    store
        .insert_auth_code(code(&ann, "c", at(60)))
        .await
        .expect("insert code");
    let attempts = (0..8).map(|n| {
        let store = store.clone();
        let grant = grant(&ann);
        async move {
            store
                .redeem_auth_code(
                    "c",
                    at(1),
                    grant.clone(),
                    tokens(&grant.id, &format!("t{n}")),
                )
                .await
                .expect("redeem")
        }
    });
    let outcomes = futures_util::future::join_all(attempts).await;
    let issued = outcomes
        .iter()
        .filter(|o| **o == RedeemOutcome::Issued)
        .count();
    assert_eq!(issued, 1, "{outcomes:?}");
}

/// A grant made by redeeming a fresh code, with tokens tagged `tag`.
async fn redeemed(store: &dyn Store, owner: &Owner, tag: &str) -> TokenRecord {
    let code_hash = format!("code-{tag}");
    store
        .insert_auth_code(code(owner, &code_hash, at(60)))
        .await
        .expect("insert code");
    let grant = grant(owner);
    let outcome = store
        .redeem_auth_code(&code_hash, at(1), grant.clone(), tokens(&grant.id, tag))
        .await
        .expect("redeem");
    assert_eq!(outcome, RedeemOutcome::Issued);
    grant
}

/// Checks that a refresh token rotates once and that presenting it again names its grant.
pub async fn refresh_tokens_rotate_once(store: &dyn Store) {
    let ann = owner(store, "ann").await;
    let grant = redeemed(store, &ann, "t1").await;
    let rotated = store
        .rotate_refresh_token("t1-refresh", at(2), tokens(&grant.id, "t2"))
        .await
        .expect("rotate");
    assert_eq!(rotated, RotateOutcome::Rotated);
    let old = store
        .oauth_token("t1-refresh")
        .await
        .expect("read")
        .expect("old");
    assert_eq!(old.used_at, Some(at(2)));
    let replay = store
        .rotate_refresh_token("t1-refresh", at(3), tokens(&grant.id, "t3"))
        .await
        .expect("replay");
    assert_eq!(
        replay,
        RotateOutcome::Reused {
            grant_id: grant.id.clone()
        }
    );
    assert!(
        store
            .oauth_token("t3-access")
            .await
            .expect("read")
            .is_none(),
        "nothing stored"
    );
    let access_as_refresh = store
        .rotate_refresh_token("t2-access", at(3), tokens(&grant.id, "t4"))
        .await
        .expect("rotate an access token");
    assert_eq!(access_as_refresh, RotateOutcome::Invalid);
}

/// Checks that revoking a grant revokes every token of it and stops rotation.
pub async fn revoking_a_grant_takes_its_tokens(store: &dyn Store) {
    let ann = owner(store, "ann").await;
    let grant = redeemed(store, &ann, "t1").await;
    let rotated = store
        .rotate_refresh_token("t1-refresh", at(2), tokens(&grant.id, "t2"))
        .await
        .expect("rotate");
    assert_eq!(rotated, RotateOutcome::Rotated);
    assert!(
        store
            .revoke_oauth_token("t2-access", at(4))
            .await
            .expect("revoke one")
    );
    assert!(
        !store
            .revoke_oauth_token("t2-access", at(5))
            .await
            .expect("again")
    );
    assert!(
        store
            .revoke_token(&grant.id, at(6))
            .await
            .expect("revoke grant")
    );
    for hash in ["t1-access", "t1-refresh", "t2-refresh"] {
        let token = store.oauth_token(hash).await.expect("read").expect("token");
        assert_eq!(token.revoked_at, Some(at(6)), "{hash} goes with its grant");
    }
    let after = store
        .rotate_refresh_token("t2-refresh", at(7), tokens(&grant.id, "t5"))
        .await
        .expect("rotate after revocation");
    assert_eq!(after, RotateOutcome::Invalid);
    assert!(
        store
            .oauth_token("t5-access")
            .await
            .expect("read")
            .is_none()
    );
}

/// The connection of the grant stored under `id`.
async fn connection_of(store: &dyn Store, id: &str) -> Option<String> {
    store
        .token(id)
        .await
        .expect("read grant")
        .and_then(|grant| grant.connection_id)
}

/// A grant redeemed from a fresh code for `client` on `owner`'s project, at `when`.
async fn redeemed_for(store: &dyn Store, owner: &Owner, client: &str, tag: &str) -> TokenRecord {
    let code_hash = format!("code-{tag}");
    let mut issued = code(owner, &code_hash, at(60));
    issued.client_id = client.to_owned();
    store.insert_auth_code(issued).await.expect("insert code");
    let mut grant = grant(owner);
    grant.client_id = Some(client.to_owned());
    let outcome = store
        .redeem_auth_code(&code_hash, at(1), grant.clone(), tokens(&grant.id, tag))
        .await
        .expect("redeem");
    assert_eq!(outcome, RedeemOutcome::Issued);
    grant
}

/// Checks that the grants of one client for one owner and project share the first one's
/// connection while it lives, that another client or project starts its own, and that
/// revoking a connection revokes every grant of it with their tokens, once.
pub async fn grants_of_one_identity_share_a_connection(store: &dyn Store) {
    let ann = owner(store, "ann").await;
    let first = redeemed_for(store, &ann, "grc_a", "a1").await;
    let again = redeemed_for(store, &ann, "grc_a", "a2").await;
    let other_client = redeemed_for(store, &ann, "grc_b", "b1").await;
    let elsewhere = owner(store, "ann-elsewhere").await;
    let other_project = redeemed_for(store, &elsewhere, "grc_a", "e1").await;
    assert_eq!(
        connection_of(store, &first.id).await,
        Some(first.id.clone())
    );
    assert_eq!(
        connection_of(store, &again.id).await,
        Some(first.id.clone()),
        "authorizing again joins the connection"
    );
    for alone in [&other_client, &other_project] {
        assert_eq!(
            connection_of(store, &alone.id).await,
            Some(alone.id.clone())
        );
    }
    assert_eq!(
        store
            .revoke_connection(&first.id, at(9))
            .await
            .expect("revoke"),
        2,
        "both grants of the connection"
    );
    for hash in ["a1-access", "a1-refresh", "a2-access", "a2-refresh"] {
        let token = store.oauth_token(hash).await.expect("read").expect("token");
        assert_eq!(
            token.revoked_at,
            Some(at(9)),
            "{hash} goes with its connection"
        );
    }
    let kept = store
        .oauth_token("b1-access")
        .await
        .expect("read")
        .expect("token");
    assert_eq!(kept.revoked_at, None, "another connection is kept");
    assert_eq!(
        store
            .revoke_connection(&first.id, at(10))
            .await
            .expect("again"),
        0
    );
    let after = redeemed_for(store, &ann, "grc_a", "a3").await;
    assert_eq!(
        connection_of(store, &after.id).await,
        Some(after.id.clone()),
        "after its revocation the identity starts a new connection"
    );
}

/// Checks that grants of one identity redeemed at the same moment all join one connection.
pub async fn concurrent_grants_of_one_identity_share_one_connection(store: Arc<dyn Store>) {
    let ann = owner(store.as_ref(), "ann").await;
    let mut grants = Vec::new();
    for n in 0..8 {
        let code_hash = format!("code-c{n}");
        store
            .insert_auth_code(code(&ann, &code_hash, at(60)))
            .await
            .expect("insert code");
        grants.push((code_hash, grant(&ann), n));
    }
    let redeems = grants.iter().map(|(code_hash, grant, n)| {
        let store = store.clone();
        let (code_hash, grant) = (code_hash.clone(), grant.clone());
        let tag = format!("c{n}");
        tokio::spawn(async move {
            store
                .redeem_auth_code(&code_hash, at(1), grant.clone(), tokens(&grant.id, &tag))
                .await
        })
    });
    for outcome in futures_util::future::join_all(redeems).await {
        let outcome = outcome.expect("task").expect("redeem");
        assert_eq!(outcome, RedeemOutcome::Issued);
    }
    let mut connections = Vec::new();
    for (_, grant, _) in &grants {
        connections.push(connection_of(store.as_ref(), &grant.id).await);
    }
    connections.dedup();
    assert_eq!(connections.len(), 1, "one connection: {connections:?}");
}

/// Two sessions (one idle), three clients (one old and unused), a grant whose access token
/// expired.
async fn sweep_fixture(store: &dyn Store) {
    let ann = owner(store, "ann").await;
    for (hash, last_seen) in [("idle", T0), ("live", at(500))] {
        let mut session = browser_session(&ann.id, hash);
        session.last_seen_at = last_seen;
        store
            .insert_browser_session(session)
            .await
            .expect("insert session");
    }
    for (id, used_at, created) in [
        ("old-unused", None, T0),
        ("old-used", Some(at(1)), T0),
        ("new", None, at(400)),
    ] {
        store
            .insert_oauth_client(OAuthClientRecord {
                id: id.into(),
                secret_hash: None,
                metadata: json!({}),
                created_at: created,
                used_at,
            })
            .await
            .expect("insert client");
    }
    store
        .insert_auth_code(code(&ann, "c", at(60)))
        .await
        .expect("insert code");
    let grant = grant(&ann);
    let mut issued = tokens(&grant.id, "t");
    issued.access.expires_at = at(100);
    store
        .redeem_auth_code("c", at(1), grant, issued)
        .await
        .expect("redeem");
}

/// Checks that the sweep removes ended and idle sessions, spent and expired links, unused old
/// registrations and expired tokens, and keeps everything else.
pub async fn the_auth_sweep_removes_only_what_lapsed(store: &dyn Store) {
    sweep_fixture(store).await;
    let counts = store
        .sweep_auth(AuthSweep {
            now: at(200),
            idle_before: at(100),
            unused_clients_before: at(300),
        })
        .await
        .expect("sweep");
    assert_eq!(
        (counts.sessions, counts.clients, counts.tokens),
        (1, 1, 1),
        "{counts:?}"
    );
    assert!(
        store
            .touch_browser_session("live", at(100), at(201))
            .await
            .expect("touch")
            .is_some()
    );
    assert!(
        store
            .oauth_client("old-unused")
            .await
            .expect("read")
            .is_none()
    );
    assert!(
        store
            .oauth_client("old-used")
            .await
            .expect("read")
            .is_some()
    );
    assert!(store.oauth_client("new").await.expect("read").is_some());
    assert!(
        store.oauth_token("t-access").await.expect("read").is_none(),
        "expired"
    );
    assert!(
        store
            .oauth_token("t-refresh")
            .await
            .expect("read")
            .is_some(),
        "still current"
    );
    assert!(
        store.auth_code("c").await.expect("read").is_some(),
        "a used code stays for replay detection"
    );
}
