//! Connections: the chat apps an owner connected through the authorization server, as `relay
//! admin connection` and the owner API list and revoke them. A connection is one client acting
//! for one owner on one project: every grant that client is given again (after losing its
//! tokens, or to add a scope) joins it, so its runs and idempotency keys stay its own.
//! Revoking a connection ends every grant it holds on their next request (and ends what they
//! hold: waits and long polls check their token).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::store::{OwnerRecord, Store, StoreError, TokenRecord};
use relay_protocol::clock::Timestamp;

/// One connection as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Connection {
    /// The connection's id (`connection revoke` takes it): its first grant's.
    pub id: String,
    /// The OAuth client.
    pub client_id: String,
    /// The client's name, which the connected agent is named after (as of its latest grant).
    pub client_name: String,
    /// The one project it reaches.
    pub project_id: String,
    /// The owner who consented.
    pub owner: String,
    /// What it may do: the scopes of its live grants (of all of them, once revoked).
    pub scopes: Vec<String>,
    /// How many grants (authorizations the owner allowed) it holds that are not revoked.
    pub grants: usize,
    /// When the owner first consented (RFC 3339).
    pub created_at: String,
    /// When its last grant was revoked (RFC 3339), once none is live.
    pub revoked_at: Option<String>,
    /// The ids of its grants, oldest first (each grant's use is recorded under its own id).
    #[serde(skip)]
    pub grant_ids: Vec<String>,
}

/// The grants of one connection, oldest first, while they are gathered.
struct Gathered {
    owner: String,
    grants: Vec<TokenRecord>,
}

impl Gathered {
    fn connection(self, id: String) -> Option<Connection> {
        let first = self.grants.first()?;
        let latest = self.grants.last()?;
        let live: Vec<&TokenRecord> = self
            .grants
            .iter()
            .filter(|g| g.revoked_at.is_none())
            .collect();
        let counted: Vec<&TokenRecord> = if live.is_empty() {
            self.grants.iter().collect()
        } else {
            live.clone()
        };
        let mut scopes: Vec<String> = counted.iter().flat_map(|g| g.scopes.clone()).collect();
        scopes.sort();
        scopes.dedup();
        let revoked_at: Option<Timestamp> = if live.is_empty() {
            self.grants.iter().filter_map(|g| g.revoked_at).max()
        } else {
            None
        };
        Some(Connection {
            client_id: first.client_id.clone()?,
            project_id: first.project_id.clone()?,
            client_name: latest.agent_name.clone().unwrap_or_default(),
            owner: self.owner,
            scopes,
            grants: live.len(),
            created_at: first.created_at.to_rfc3339(),
            revoked_at: revoked_at.map(|t| t.to_rfc3339()),
            grant_ids: self.grants.iter().map(|g| g.id.clone()).collect(),
            id,
        })
    }
}

/// The connection a grant belongs to (a grant stored before connections is its own).
fn connection_of(token: &TokenRecord) -> Option<String> {
    token.client_id.as_ref()?;
    Some(
        token
            .connection_id
            .clone()
            .unwrap_or_else(|| token.id.clone()),
    )
}

/// The connections of `owner_id` (every owner's with `None`), of `project` only if given,
/// oldest first.
pub async fn list(
    store: &dyn Store,
    owner_id: Option<&str>,
    project: Option<&str>,
) -> Result<Vec<Connection>, StoreError> {
    // An owner's request reads that owner's tokens only; every owner's is the operator's list.
    let owners: Vec<OwnerRecord> = match owner_id {
        Some(id) => store.owner(id).await?.into_iter().collect(),
        None => store.owners().await?,
    };
    let mut connections = Vec::new();
    for owner in owners {
        // Tokens come oldest first, so each connection's first grant opens its entry.
        let mut order = Vec::new();
        let mut gathered: BTreeMap<String, Gathered> = BTreeMap::new();
        for token in store.tokens_of_owner(&owner.id).await? {
            let Some(id) = connection_of(&token) else {
                continue;
            };
            if project.is_some_and(|p| token.project_id.as_deref() != Some(p)) {
                continue;
            }
            let entry = gathered.entry(id.clone()).or_insert_with(|| {
                order.push(id);
                Gathered {
                    owner: owner.name.clone(),
                    grants: Vec::new(),
                }
            });
            entry.grants.push(token);
        }
        connections.extend(
            order
                .into_iter()
                .filter_map(|id| gathered.remove(&id).and_then(|g| g.connection(id))),
        );
    }
    Ok(connections)
}

/// What revoking a connection did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoked {
    /// It was live and is revoked now: every grant it held.
    Now,
    /// It was revoked before.
    Already,
    /// No such connection (or another owner's: the same answer).
    NotFound,
}

/// Revokes the connection `id` (a grant's id names its connection too) at `now`, if it is
/// `owner_id`'s (any owner's with `None`): every grant it holds, with their tokens.
pub async fn revoke(
    store: &dyn Store,
    owner_id: Option<&str>,
    id: &str,
    now: Timestamp,
) -> Result<Revoked, StoreError> {
    let Some(token) = store.token(id).await? else {
        return Ok(Revoked::NotFound);
    };
    let Some(connection) = connection_of(&token) else {
        return Ok(Revoked::NotFound);
    };
    if owner_id.is_some_and(|only| only != token.owner_id) {
        return Ok(Revoked::NotFound);
    }
    Ok(if store.revoke_connection(&connection, now).await? > 0 {
        Revoked::Now
    } else {
        Revoked::Already
    })
}
