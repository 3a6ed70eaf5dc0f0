//! Bearer tokens: minting, hashing, checking, and the identities they carry.
//!
//! Tokens are 256 random bits shown once; the store keeps only their SHA-256. Every request
//! looks its token up again, so a revocation takes effect on the very next request.

use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::store::{OAuthTokenKind, Store, StoreError, TokenKind, TokenRecord};
use relay_protocol::clock::Clock;

/// Random bytes in a token's secret.
const TOKEN_SECRET_BYTES: usize = 32;
/// Longest text accepted as a token before hashing (a real one is far shorter).
const MAX_TOKEN_CHARS: usize = 256;

/// A permission an agent token can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// Read sessions, runs and linked chat tasks: `osfoundry:read`.
    Read,
    /// Start and cancel runs; claim, submit and upload for chat tasks: `osfoundry:run`.
    Run,
}

impl Scope {
    /// Every scope.
    pub const ALL: [Scope; 2] = [Scope::Read, Scope::Run];

    /// The OAuth scope string.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "osfoundry:read",
            Scope::Run => "osfoundry:run",
        }
    }

    /// Parses an OAuth scope string.
    pub fn parse(text: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|scope| scope.as_str() == text)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A connected agent, as its token says: one agent on one project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentIdentity {
    /// The token's id (for an OAuth access token, its grant's): what is revoked, rate-limited
    /// and watched while a request waits.
    pub token_id: String,
    /// The agent: the identity that owns the runs it starts and its idempotency keys. For an
    /// operator-minted token its own id; for a grant its connection's, which every grant of
    /// the same client, owner and project shares, so a new authorization keeps the runs.
    pub agent_id: String,
    /// The agent's display name.
    pub agent_name: String,
    /// The one project it may use.
    pub project_id: String,
    /// The project's owner.
    pub owner_id: String,
    /// What it may do.
    pub scopes: Vec<Scope>,
}

impl AgentIdentity {
    /// Whether the token carries `scope`.
    pub fn has_scope(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
    }
}

/// One owner's desktop relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesktopIdentity {
    /// The token's id.
    pub token_id: String,
    /// The owner whose projects it may sync.
    pub owner_id: String,
    /// The one project it was minted for, or `None` for an owner-wide token (minted with
    /// `relay admin token create --desktop --owner NAME`), which reaches all the owner's projects.
    pub project_id: Option<String>,
}

impl DesktopIdentity {
    /// Whether this desktop may sync `project` and its commands.
    pub fn reaches(&self, project: &crate::store::ProjectRecord) -> bool {
        project.owner_id == self.owner_id
            && self
                .project_id
                .as_ref()
                .is_none_or(|only| *only == project.id)
    }
}

/// The owner acting through their own API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerIdentity {
    /// The token's id.
    pub token_id: String,
    /// The owner.
    pub owner_id: String,
}

/// Who a valid, unrevoked token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// A connected agent.
    Agent(AgentIdentity),
    /// A desktop relay.
    Desktop(DesktopIdentity),
    /// An owner.
    Owner(OwnerIdentity),
}

/// Why a token was refused.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer` header.
    #[error("missing bearer token: send `Authorization: Bearer <token>`")]
    Missing,
    /// Unknown, malformed or revoked token.
    #[error(
        "the bearer token is unknown, expired or revoked: refresh it, connect again, or ask the operator for a new one"
    )]
    Invalid,
    /// A valid token of the wrong kind for this endpoint.
    #[error("wrong kind of token: this endpoint takes {expected} tokens, not {actual} tokens")]
    WrongKind {
        /// The kind presented.
        actual: &'static str,
        /// The kind needed.
        expected: &'static str,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A freshly minted token: the text to show once, and its hash to store.
#[derive(Debug, Clone)]
pub struct MintedToken {
    /// The token text; never stored.
    pub text: String,
    /// SHA-256 of the text, lowercase hex.
    pub hash: String,
}

/// Mints a random token of `kind`; the prefix says the kind so an operator can tell them apart.
pub fn mint_token(kind: TokenKind) -> Result<MintedToken, getrandom::Error> {
    let mut secret = [0u8; TOKEN_SECRET_BYTES];
    getrandom::fill(&mut secret)?;
    let text = format!("{}{}", token_prefix(kind), hex(&secret));
    let hash = hash_token(&text);
    Ok(MintedToken { text, hash })
}

/// SHA-256 of a token's text, lowercase hex: the only form the store keeps.
pub fn hash_token(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

/// The prefix every token of `kind` starts with, so an operator can tell them apart.
pub fn token_prefix(kind: TokenKind) -> &'static str {
    match kind {
        TokenKind::Desktop => "grd_",
        TokenKind::Agent => "gra_",
        TokenKind::Owner => "gro_",
    }
}

/// The kind of token `text` is, by its prefix; `None` for anything else (a token id, say).
pub fn token_kind(text: &str) -> Option<TokenKind> {
    [TokenKind::Desktop, TokenKind::Agent, TokenKind::Owner]
        .into_iter()
        .find(|&kind| text.starts_with(token_prefix(kind)))
}

/// Whether `text` looks like a token (rather than a token id).
pub fn looks_like_token(text: &str) -> bool {
    token_kind(text).is_some()
}

/// `bytes` random bytes as lowercase hex: sign-in links, CSRF tokens, OAuth codes.
pub fn random_hex(bytes: usize) -> Result<String, getrandom::Error> {
    let mut secret = vec![0u8; bytes];
    getrandom::fill(&mut secret)?;
    Ok(hex(&secret))
}

/// Lowercase hex of `bytes` (the relay's one encoder, shared with the desktop).
pub use relay_protocol::text::hex;

/// What checking tokens uses: the store, the clock, and when each token's use was last
/// written. Cheap to clone (every clone shares them).
#[derive(Clone)]
pub struct Tokens {
    /// Durable state.
    pub store: Arc<dyn Store>,
    /// The only source of time.
    pub clock: Arc<dyn Clock>,
    uses: Arc<TokenUses>,
}

impl Tokens {
    /// Token checks over `store` and `clock`.
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        Tokens {
            store,
            clock,
            uses: Arc::default(),
        }
    }
}

/// Checks a token against the store: it must exist and not be revoked.
pub async fn authenticate(tokens: &Tokens, token: Option<&str>) -> Result<Identity, AuthError> {
    let token = token.ok_or(AuthError::Missing)?;
    if relay_protocol::text::utf16_len(token) > MAX_TOKEN_CHARS {
        return Err(AuthError::Invalid);
    }
    let hash = hash_token(token);
    let record = match tokens.store.token_by_hash(&hash).await? {
        Some(record) => record,
        None => oauth_grant(tokens, &hash).await?,
    };
    if record.revoked_at.is_some() {
        return Err(AuthError::Invalid);
    }
    let now = tokens.clock.now();
    if tokens.uses.due(&record.id, now) {
        // "Last used" is a convenience for the owner: a failed write must not refuse the call.
        if let Err(error) = tokens.store.record_token_use(&record.id, now).await {
            tracing::warn!(%error, token = %record.id, "recording a token's use failed");
        }
    }
    identity_of(record)
}

/// A token's last use is written at most this often (per replica), so a busy token costs one
/// write a minute, not one per request.
pub const TOKEN_USE_WRITE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);
/// Tokens whose last write [`TokenUses`] remembers at most (past it, it starts over).
const MAX_TOKEN_USES_REMEMBERED: usize = 10_000;

/// When each token's use was last written, so [`authenticate`] writes at most once per
/// [`TOKEN_USE_WRITE_INTERVAL`].
#[derive(Debug, Default)]
pub struct TokenUses {
    written: std::sync::Mutex<std::collections::HashMap<String, crate::store::Timestamp>>,
}

impl TokenUses {
    /// Whether the use of `token_id` at `now` should be written; if so it counts as written.
    pub fn due(&self, token_id: &str, now: crate::store::Timestamp) -> bool {
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(last) = written.get(token_id)
            && now.saturating_duration_since(*last) < TOKEN_USE_WRITE_INTERVAL
        {
            return false;
        }
        if written.len() >= MAX_TOKEN_USES_REMEMBERED {
            written.clear();
        }
        written.insert(token_id.to_owned(), now);
        true
    }
}

/// The grant behind an OAuth access token, if the token is current: unexpired and unrevoked.
/// The grant's own revocation is checked by the caller like any token's.
async fn oauth_grant(tokens: &Tokens, hash: &str) -> Result<TokenRecord, AuthError> {
    let access = tokens
        .store
        .oauth_token(hash)
        .await?
        .filter(|t| {
            t.kind == OAuthTokenKind::Access
                && t.revoked_at.is_none()
                && t.expires_at > tokens.clock.now()
        })
        .ok_or(AuthError::Invalid)?;
    tokens
        .store
        .token(&access.grant_id)
        .await?
        .ok_or(AuthError::Invalid)
}

fn identity_of(record: TokenRecord) -> Result<Identity, AuthError> {
    let corrupt = |what: &str| {
        AuthError::Store(
            crate::store::Damage::of(what, "an agent token must have one")
                .in_row("tokens", &record.id)
                .into(),
        )
    };
    Ok(match record.kind {
        TokenKind::Agent => Identity::Agent(AgentIdentity {
            agent_id: record
                .connection_id
                .clone()
                .unwrap_or_else(|| record.id.clone()),
            project_id: record
                .project_id
                .clone()
                .ok_or_else(|| corrupt("project_id"))?,
            agent_name: record.agent_name.clone().unwrap_or_default(),
            scopes: record
                .scopes
                .iter()
                .filter_map(|s| Scope::parse(s))
                .collect(),
            owner_id: record.owner_id,
            token_id: record.id,
        }),
        TokenKind::Desktop => Identity::Desktop(DesktopIdentity {
            token_id: record.id,
            owner_id: record.owner_id,
            project_id: record.project_id,
        }),
        TokenKind::Owner => Identity::Owner(OwnerIdentity {
            token_id: record.id,
            owner_id: record.owner_id,
        }),
    })
}

/// Whether the token `token_id` still exists unrevoked.
pub async fn still_valid(store: &dyn Store, token_id: &str) -> Result<bool, StoreError> {
    Ok(store
        .token(token_id)
        .await?
        .is_some_and(|record| record.revoked_at.is_none()))
}

impl Identity {
    /// The id of the token behind this identity.
    pub fn token_id(&self) -> &str {
        match self {
            Identity::Agent(agent) => &agent.token_id,
            Identity::Desktop(desktop) => &desktop.token_id,
            Identity::Owner(owner) => &owner.token_id,
        }
    }

    fn kind_name(&self) -> &'static str {
        match self {
            Identity::Agent(_) => "agent",
            Identity::Desktop(_) => "desktop",
            Identity::Owner(_) => "owner",
        }
    }

    /// The agent identity, or a wrong-kind error.
    pub fn into_agent(self) -> Result<AgentIdentity, AuthError> {
        match self {
            Identity::Agent(agent) => Ok(agent),
            other => Err(AuthError::WrongKind {
                actual: other.kind_name(),
                expected: "agent",
            }),
        }
    }

    /// The owner identity, or a wrong-kind error.
    pub fn into_owner(self) -> Result<OwnerIdentity, AuthError> {
        match self {
            Identity::Owner(owner) => Ok(owner),
            other => Err(AuthError::WrongKind {
                actual: other.kind_name(),
                expected: "owner",
            }),
        }
    }

    /// The desktop identity, or a wrong-kind error.
    pub fn into_desktop(self) -> Result<DesktopIdentity, AuthError> {
        match self {
            Identity::Desktop(desktop) => Ok(desktop),
            other => Err(AuthError::WrongKind {
                actual: other.kind_name(),
                expected: "desktop",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_prefixed_and_hashed() {
        let a = mint_token(TokenKind::Agent).unwrap();
        let b = mint_token(TokenKind::Agent).unwrap();
        assert_ne!(a.text, b.text);
        assert!(a.text.starts_with("gra_") && a.text.len() == 4 + 2 * TOKEN_SECRET_BYTES);
        assert_eq!(a.hash, hash_token(&a.text));
        assert_eq!(a.hash.len(), 64);
        assert!(!a.hash.contains(&a.text[4..]));
    }

    #[test]
    fn a_tokens_use_is_written_at_most_once_per_interval() {
        let uses = TokenUses::default();
        let t0 = crate::store::Timestamp::from_unix_millis(1_000_000);
        let just_before =
            t0.saturating_add(TOKEN_USE_WRITE_INTERVAL - std::time::Duration::from_millis(1));
        assert!(uses.due("a", t0), "the first use is written");
        assert!(!uses.due("a", t0), "a second use at once is not");
        assert!(
            !uses.due("a", just_before),
            "nor one just inside the interval"
        );
        assert!(uses.due("b", t0), "other tokens are apart");
        assert!(
            uses.due("a", t0.saturating_add(TOKEN_USE_WRITE_INTERVAL)),
            "at the interval it is"
        );
        for n in 0..MAX_TOKEN_USES_REMEMBERED {
            uses.due(&format!("t{n}"), t0);
        }
        let remembered = uses.written.lock().map(|w| w.len()).unwrap_or(usize::MAX);
        assert!(
            remembered <= MAX_TOKEN_USES_REMEMBERED,
            "bounded: {remembered}"
        );
    }
}
