//! Operator actions behind `relay admin`: projects and tokens, made and listed.

use std::sync::Arc;

use serde::Serialize;

use crate::auth::{Scope, hash_token, looks_like_token, mint_token, random_hex};
use crate::oauth::password;
use crate::store::{
    OwnerRecord, ProjectRecord, SignInLinkRecord, Store, StoreError, TokenKind, TokenRecord,
};
use relay_protocol::clock::{Clock, Timestamp};

/// What the operator's actions use: the store and the clock.
#[derive(Clone)]
pub struct Admin {
    /// Durable state.
    pub store: Arc<dyn Store>,
    /// The only source of time.
    pub clock: Arc<dyn Clock>,
}

/// The owner a project belongs to when the operator names none (a single-owner install).
pub const DEFAULT_OWNER: &str = "default";
/// Longest project, owner or agent name, in characters.
pub const MAX_NAME_CHARS: usize = 200;

/// Why an operator action failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// Bad input; says what to do.
    #[error("{0}")]
    Invalid(String),
    /// The system gave no randomness for a secret.
    #[error("the system has no randomness for a secret: {0}")]
    Randomness(#[from] getrandom::Error),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A project as `relay admin` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProjectInfo {
    /// Its id.
    pub project_id: String,
    /// Its name.
    pub name: String,
    /// Its owner's id.
    pub owner_id: String,
    /// Its owner's name.
    pub owner: String,
    /// When it was created.
    pub created_at: Timestamp,
}

/// What kind of token to mint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSpec {
    /// For the desktop of the project's owner, reaching that project only.
    Desktop,
    /// For the owner's own API.
    Owner,
    /// For one connected agent on the project.
    Agent {
        /// Display name.
        name: String,
        /// Scope strings, e.g. `osfoundry:read`.
        scopes: Vec<String>,
    },
}

/// A minted token: the text is shown here once and never again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreatedToken {
    /// The id to revoke it by.
    pub token_id: String,
    /// The token text.
    pub token: String,
    /// `desktop`, `agent` or `owner`.
    pub kind: &'static str,
    /// The project it was minted for (none: a desktop token for all of the owner's projects).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// The owner it acts for.
    pub owner_id: String,
    /// The agent's name (agent tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_name: Option<String>,
    /// Granted scopes (agent tokens).
    pub scopes: Vec<String>,
}

/// A token as `relay admin token list` shows it: everything but its secret, which the service
/// never kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenInfo {
    /// The id to revoke it by.
    pub token_id: String,
    /// `desktop`, `agent` or `owner`.
    pub kind: &'static str,
    /// The owner it acts for.
    pub owner_id: String,
    /// The project (agent tokens; desktop and owner tokens cover all the owner's projects).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// The agent's name (agent tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_name: Option<String>,
    /// Granted scopes (agent tokens).
    pub scopes: Vec<String>,
    /// When it was minted.
    pub created_at: Timestamp,
    /// When it was revoked; none while it works.
    pub revoked_at: Option<Timestamp>,
}

/// A revoked token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RevokedToken {
    /// Its id.
    pub token_id: String,
    /// False when it had been revoked before.
    pub newly_revoked: bool,
}

fn check_name(what: &str, name: &str) -> Result<(), AdminError> {
    let chars = relay_protocol::text::utf16_len(name);
    if name.trim().is_empty() || chars > MAX_NAME_CHARS {
        return Err(AdminError::Invalid(format!(
            "{what} must be 1 to {MAX_NAME_CHARS} characters and not blank"
        )));
    }
    Ok(())
}

/// Creates project `name` for the owner named `owner` (created if new).
pub async fn create_project(
    admin: &Admin,
    name: &str,
    owner: Option<&str>,
) -> Result<ProjectInfo, AdminError> {
    let owner = owner.unwrap_or(DEFAULT_OWNER);
    check_name("the project name", name)?;
    check_name("the owner name", owner)?;
    let now = admin.clock.now();
    let owner = admin.store.ensure_owner(owner, now).await?;
    let project = ProjectRecord {
        id: uuid::Uuid::new_v4().to_string(),
        owner_id: owner.id.clone(),
        name: name.to_owned(),
        created_at: now,
    };
    admin.store.insert_project(project.clone()).await?;
    Ok(ProjectInfo {
        project_id: project.id,
        name: project.name,
        owner_id: owner.id,
        owner: owner.name,
        created_at: now,
    })
}

/// Every project with its owner, oldest first.
pub async fn list_projects(admin: &Admin) -> Result<Vec<ProjectInfo>, AdminError> {
    let owners = admin.store.owners().await?;
    let projects = admin.store.all_projects().await?;
    Ok(projects
        .into_iter()
        .map(|project| {
            let owner = owners
                .iter()
                .find(|o| o.id == project.owner_id)
                .map_or_else(|| project.owner_id.clone(), |o| o.name.clone());
            ProjectInfo {
                project_id: project.id,
                name: project.name,
                owner_id: project.owner_id,
                owner,
                created_at: project.created_at,
            }
        })
        .collect())
}

/// The tokens that reach `project_id`, revoked ones too, oldest first: its agents' and
/// desktops' tokens, and its owner's owner-wide desktop tokens and owner tokens (which cover all
/// of the owner's projects).
pub async fn list_tokens(admin: &Admin, project_id: &str) -> Result<Vec<TokenInfo>, AdminError> {
    let project = known_project(admin, project_id).await?;
    let tokens = admin.store.tokens_of_owner(&project.owner_id).await?;
    Ok(tokens
        .into_iter()
        // Grants are listed by `connection list`; this lists what an operator minted.
        .filter(|t| t.client_id.is_none())
        .filter(|t| {
            t.kind == TokenKind::Owner
                || t.project_id
                    .as_deref()
                    .is_none_or(|only| only == project_id)
        })
        .map(|t| TokenInfo {
            token_id: t.id,
            kind: t.kind.as_str(),
            owner_id: t.owner_id,
            project_id: t.project_id,
            agent_name: t.agent_name,
            scopes: t.scopes,
            created_at: t.created_at,
            revoked_at: t.revoked_at,
        })
        .collect())
}

/// The project with this id, or an error that says how to make one.
async fn known_project(admin: &Admin, project_id: &str) -> Result<ProjectRecord, AdminError> {
    admin.store.project(project_id).await?.ok_or_else(|| {
        AdminError::Invalid(format!(
            "no project with id `{project_id}`: `relay admin project list` shows them, `relay admin project create NAME` makes one"
        ))
    })
}

/// Mints a token for `project_id` (a desktop or owner token covers the project's owner).
pub async fn create_token(
    admin: &Admin,
    project_id: &str,
    spec: TokenSpec,
) -> Result<CreatedToken, AdminError> {
    let project = known_project(admin, project_id).await?;
    let (kind, agent_name, scopes) = match spec {
        TokenSpec::Desktop => (TokenKind::Desktop, None, Vec::new()),
        TokenSpec::Owner => (TokenKind::Owner, None, Vec::new()),
        TokenSpec::Agent { name, scopes } => {
            check_name("the agent name", &name)?;
            let mut parsed = Vec::new();
            for scope in &scopes {
                let scope = Scope::parse(scope).ok_or_else(|| {
                    AdminError::Invalid(format!(
                        "unknown scope `{scope}`: use {} or {}",
                        Scope::Read,
                        Scope::Run
                    ))
                })?;
                if !parsed.contains(&scope) {
                    parsed.push(scope);
                }
            }
            if parsed.is_empty() {
                return Err(AdminError::Invalid(format!(
                    "an agent token needs at least one --scope ({} and/or {})",
                    Scope::Read,
                    Scope::Run
                )));
            }
            parsed.sort();
            let scopes = parsed.iter().map(|s| s.as_str().to_owned()).collect();
            (TokenKind::Agent, Some(name), scopes)
        }
    };
    let minted = mint_token(kind)
        .map_err(|e| AdminError::Invalid(format!("the system has no randomness: {e}")))?;
    let record = TokenRecord {
        id: uuid::Uuid::new_v4().to_string(),
        kind,
        token_hash: minted.hash,
        owner_id: project.owner_id.clone(),
        // An owner token is the owner's; agent and desktop tokens reach their project only.
        project_id: (kind != TokenKind::Owner).then(|| project.id.clone()),
        agent_name: agent_name.clone(),
        scopes: scopes.clone(),
        client_id: None,
        connection_id: None,
        created_at: admin.clock.now(),
        revoked_at: None,
    };
    admin.store.insert_token(record.clone()).await?;
    Ok(CreatedToken {
        token_id: record.id,
        token: minted.text,
        kind: kind.as_str(),
        project_id: Some(project.id),
        owner_id: project.owner_id,
        agent_name,
        scopes,
    })
}

/// Mints a desktop token that reaches every project of the owner named `owner` (one desktop
/// serving all of them), today's and later ones.
pub async fn create_owner_desktop_token(
    admin: &Admin,
    owner: &str,
) -> Result<CreatedToken, AdminError> {
    let owner = owner_named(admin, owner).await?;
    let minted = mint_token(TokenKind::Desktop)
        .map_err(|e| AdminError::Invalid(format!("the system has no randomness: {e}")))?;
    let record = TokenRecord {
        id: uuid::Uuid::new_v4().to_string(),
        kind: TokenKind::Desktop,
        token_hash: minted.hash,
        owner_id: owner.id.clone(),
        project_id: None,
        agent_name: None,
        scopes: Vec::new(),
        client_id: None,
        connection_id: None,
        created_at: admin.clock.now(),
        revoked_at: None,
    };
    admin.store.insert_token(record.clone()).await?;
    Ok(CreatedToken {
        token_id: record.id,
        token: minted.text,
        kind: TokenKind::Desktop.as_str(),
        project_id: None,
        owner_id: owner.id,
        agent_name: None,
        scopes: Vec::new(),
    })
}

/// Revokes a token given its id or its text; it stops working on the next request.
pub async fn revoke_token(admin: &Admin, id_or_token: &str) -> Result<RevokedToken, AdminError> {
    let record = if looks_like_token(id_or_token) {
        admin.store.token_by_hash(&hash_token(id_or_token)).await?
    } else {
        admin.store.token(id_or_token).await?
    };
    let record = record.ok_or_else(|| {
        AdminError::Invalid(format!(
            "no token with id `{id_or_token}`: pass a token_id that `relay admin token list --project ID` shows, or the token itself"
        ))
    })?;
    let newly_revoked = admin
        .store
        .revoke_token(&record.id, admin.clock.now())
        .await?;
    Ok(RevokedToken {
        token_id: record.id,
        newly_revoked,
    })
}

/// The owner named `name`, or an error that says how owners come to exist.
pub async fn owner_named(admin: &Admin, name: &str) -> Result<OwnerRecord, AdminError> {
    admin.store.owner_by_name(name).await?.ok_or_else(|| {
        AdminError::Invalid(format!(
            "no owner named `{name}`: `relay admin project list` shows each project's owner, `relay admin project create NAME --owner OWNER` makes one"
        ))
    })
}

/// What setting a password did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswordSet {
    /// The owner.
    pub owner: OwnerRecord,
    /// The browser sessions it signed out.
    pub sessions_ended: usize,
}

/// Sets the owner's sign-in password (argon2id; at least 12 characters) and signs every browser
/// of the owner out: a password is changed because the old one may be known, and a session
/// someone started with it must not outlive it.
pub async fn set_owner_password(
    admin: &Admin,
    name: &str,
    new_password: String,
) -> Result<PasswordSet, AdminError> {
    let owner = owner_named(admin, name).await?;
    let hash = password::hash(new_password)
        .await
        .map_err(|e| AdminError::Invalid(e.to_string()))?;
    admin
        .store
        .set_owner_password(&owner.id, Some(hash))
        .await?;
    // After the new password is stored, so a session begun with the old one in between ends.
    let sessions_ended = admin
        .store
        .end_browser_sessions(&owner.id, admin.clock.now())
        .await?;
    Ok(PasswordSet {
        owner,
        sessions_ended,
    })
}

/// A one-time sign-in link, as `relay admin owner sign-in-link` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SignInLink {
    /// Who it signs in.
    pub owner: String,
    /// The URL to open (once) in the owner's browser.
    pub url: String,
    /// When it stops working.
    pub expires_at: Timestamp,
}

/// Makes a one-time link that signs the owner `name` in within `ttl`; `url_of` makes the URL
/// that opens it from its secret (the service's sign-in link page).
pub async fn sign_in_link(
    admin: &Admin,
    name: &str,
    ttl: std::time::Duration,
    url_of: impl FnOnce(&str) -> String,
) -> Result<SignInLink, AdminError> {
    let owner = owner_named(admin, name).await?;
    let secret = format!("grl_{}", random_hex(32)?);
    let now = admin.clock.now();
    let expires_at = now.saturating_add(ttl);
    admin
        .store
        .insert_sign_in_link(SignInLinkRecord {
            token_hash: hash_token(&secret),
            owner_id: owner.id,
            created_at: now,
            expires_at,
            used_at: None,
        })
        .await?;
    Ok(SignInLink {
        owner: owner.name,
        url: url_of(&secret),
        expires_at,
    })
}

/// Signs the owner `name` out of every browser; how many sessions ended.
pub async fn sign_out_all(admin: &Admin, name: &str) -> Result<usize, AdminError> {
    let owner = owner_named(admin, name).await?;
    Ok(admin
        .store
        .end_browser_sessions(&owner.id, admin.clock.now())
        .await?)
}
