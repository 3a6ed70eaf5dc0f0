//! OAuth clients and grants as the authorization server keeps them: the lifetimes of codes,
//! tokens, browser sessions and unused registrations, client registration and lookup (with
//! client ID metadata documents), connections (the grants) and owners' passwords. The
//! endpoints and pages that speak OAuth over HTTP are [`crate::http::oauth`].
//!
//! A grant is a connected agent on one project (see [`crate::store::auth`]); everything that is
//! per agent holds for it, and operator-minted agent tokens keep working beside it.

pub mod cimd;
pub mod clients;
pub mod connections;
pub mod metadata;
pub mod password;

use std::time::Duration;

use crate::store::{AuthSweep, AuthSweepCounts, Store, StoreError};
use relay_protocol::clock::Timestamp;

/// How long an access token works unless `relay serve --access-token-ttl` says otherwise.
pub const DEFAULT_ACCESS_TOKEN_TTL: Duration = Duration::from_secs(3600);
/// How long a refresh token works (it rotates on every use).
pub const REFRESH_TOKEN_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// How long an authorization code works.
pub const CODE_TTL: Duration = Duration::from_secs(60);
/// How long a signed-in browser stays signed in without a request.
pub const BROWSER_SESSION_IDLE: Duration = Duration::from_secs(12 * 3600);
/// How long a registration that was never used lives.
pub const UNUSED_CLIENT_TTL: Duration = Duration::from_secs(24 * 3600);

/// Whether two secrets are equal, in time independent of where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Removes lapsed browser sessions, links, unused registrations, expired codes and tokens as
/// of `now`.
pub async fn sweep(store: &dyn Store, now: Timestamp) -> Result<AuthSweepCounts, StoreError> {
    store
        .sweep_auth(AuthSweep {
            now,
            idle_before: now.saturating_sub(BROWSER_SESSION_IDLE),
            unused_clients_before: now.saturating_sub(UNUSED_CLIENT_TTL),
        })
        .await
}
