//! Connections: the grants made through the authorization server, as `relay admin connection`
//! and the owner API list and revoke them. Revoking one ends it on its next request (and ends
//! what it holds: waits and long polls check their token).

use serde::Serialize;

use crate::store::{OwnerRecord, Store, StoreError, TokenRecord};
use relay_protocol::clock::Timestamp;

/// One connection as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Connection {
    /// The grant's id (`connection revoke` takes it).
    pub id: String,
    /// The OAuth client.
    pub client_id: String,
    /// The client's name, which the connected agent is named after.
    pub client_name: String,
    /// The one project it reaches.
    pub project_id: String,
    /// The owner who consented.
    pub owner: String,
    /// What it may do.
    pub scopes: Vec<String>,
    /// When the owner consented (RFC 3339).
    pub created_at: String,
    /// When it was revoked (RFC 3339), if it was.
    pub revoked_at: Option<String>,
}

fn connection(token: TokenRecord, owner: &OwnerRecord) -> Option<Connection> {
    Some(Connection {
        client_id: token.client_id?,
        project_id: token.project_id?,
        client_name: token.agent_name.unwrap_or_default(),
        owner: owner.name.clone(),
        scopes: token.scopes,
        created_at: token.created_at.to_rfc3339(),
        revoked_at: token.revoked_at.map(|t| t.to_rfc3339()),
        id: token.id,
    })
}

/// The connections of `owner_id` (every owner's with `None`), of `project` only if given,
/// oldest first.
pub async fn list(
    store: &dyn Store,
    owner_id: Option<&str>,
    project: Option<&str>,
) -> Result<Vec<Connection>, StoreError> {
    // An owner's request reads that owner's tokens only; every owner's is the operator's list.
    let owners = match owner_id {
        Some(id) => store.owner(id).await?.into_iter().collect(),
        None => store.owners().await?,
    };
    let mut connections = Vec::new();
    for owner in owners {
        for token in store.tokens_of_owner(&owner.id).await? {
            if let Some(found) = connection(token, &owner)
                && project.is_none_or(|p| p == found.project_id)
            {
                connections.push(found);
            }
        }
    }
    Ok(connections)
}

/// What revoking a connection did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoked {
    /// It was live and is revoked now.
    Now,
    /// It was revoked before.
    Already,
    /// No such connection (or another owner's: the same answer).
    NotFound,
}

/// Revokes the connection `id` at `now`, if it is `owner_id`'s (any owner's with `None`).
pub async fn revoke(
    store: &dyn Store,
    owner_id: Option<&str>,
    id: &str,
    now: Timestamp,
) -> Result<Revoked, StoreError> {
    let Some(token) = store.token(id).await? else {
        return Ok(Revoked::NotFound);
    };
    if token.client_id.is_none() || owner_id.is_some_and(|only| only != token.owner_id) {
        return Ok(Revoked::NotFound);
    }
    Ok(if store.revoke_token(id, now).await? {
        Revoked::Now
    } else {
        Revoked::Already
    })
}
