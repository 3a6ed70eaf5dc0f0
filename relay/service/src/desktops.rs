//! The owner's desktops as the console and the owner API show them: each desktop token, when
//! it was last used and whether it looks online. A desktop polls about every
//! [`DESKTOP_POLL_INTERVAL_SECS`]; its last use is written at most once per
//! [`TOKEN_USE_WRITE_INTERVAL`], so "online" allows for both.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;

use crate::auth::TOKEN_USE_WRITE_INTERVAL;
use crate::store::{Store, StoreError, TokenKind};
use relay_protocol::DESKTOP_POLL_INTERVAL_SECS;
use relay_protocol::clock::Timestamp;

/// A desktop last seen this long ago or less counts as online.
pub const ONLINE_WITHIN: Duration =
    Duration::from_secs(TOKEN_USE_WRITE_INTERVAL.as_secs() + 3 * DESKTOP_POLL_INTERVAL_SECS);

/// One desktop token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DesktopView {
    /// The token's id.
    pub id: String,
    /// The one project it syncs; `null` for an owner-wide token.
    pub project_id: Option<String>,
    /// When it was minted.
    pub created_at: Timestamp,
    /// When it was revoked, if it was.
    pub revoked_at: Option<Timestamp>,
    /// When it last made a request (within a minute).
    pub last_seen_at: Option<Timestamp>,
    /// Seen within [`ONLINE_WITHIN`] and not revoked.
    pub online: bool,
}

/// When each of the owner's tokens was last used.
pub async fn last_uses(
    store: &dyn Store,
    owner_id: &str,
) -> Result<HashMap<String, Timestamp>, StoreError> {
    Ok(store.token_uses(owner_id).await?.into_iter().collect())
}

/// The owner's desktop tokens, oldest first, as they look at `now`.
pub async fn list(
    store: &dyn Store,
    owner_id: &str,
    now: Timestamp,
) -> Result<Vec<DesktopView>, StoreError> {
    let uses = last_uses(store, owner_id).await?;
    Ok(store
        .tokens_of_owner(owner_id)
        .await?
        .into_iter()
        .filter(|token| token.kind == TokenKind::Desktop)
        .map(|token| {
            let last_seen_at = uses.get(&token.id).copied();
            DesktopView {
                online: token.revoked_at.is_none()
                    && last_seen_at
                        .is_some_and(|seen| now.saturating_duration_since(seen) <= ONLINE_WITHIN),
                id: token.id,
                project_id: token.project_id,
                created_at: token.created_at,
                revoked_at: token.revoked_at,
                last_seen_at,
            }
        })
        .collect())
}
