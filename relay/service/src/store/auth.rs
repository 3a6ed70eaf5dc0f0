//! What the OAuth authorization server and the owner's sign-in keep: owners' password hashes,
//! browser sessions, one-time sign-in links, registered clients, authorization codes, and the
//! access and refresh tokens of a grant.
//!
//! A **grant** (a connection) is a [`TokenRecord`](super::TokenRecord) of kind agent with a
//! `client_id`: it is the connected agent's identity, so runs, quotas and revocation work for it
//! exactly as for an operator-minted agent token. Its `token_hash` is never the hash of any
//! text ([`grant_token_hash`]); the bearer tokens of the grant are [`OAuthTokenRecord`]s.

use relay_protocol::clock::Timestamp;
use serde_json::Value;

/// The `token_hash` of a grant's row: not 64 hex digits, so no bearer token ever matches it.
pub fn grant_token_hash(grant_id: &str) -> String {
    format!("grant:{grant_id}")
}

/// An owner's signed-in browser: a server-side row behind an HttpOnly cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowserSessionRecord {
    /// SHA-256 of the cookie's secret, lowercase hex.
    pub id_hash: String,
    /// Who signed in.
    pub owner_id: String,
    /// The CSRF token every form of this session carries.
    pub csrf: String,
    /// When the owner signed in.
    pub created_at: Timestamp,
    /// The last request the session made (idle expiry counts from here).
    pub last_seen_at: Timestamp,
    /// When it was signed out, if it was.
    pub ended_at: Option<Timestamp>,
}

/// A one-time URL that signs an owner in (`relay admin owner sign-in-link`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignInLinkRecord {
    /// SHA-256 of the link's secret.
    pub token_hash: String,
    /// Who it signs in.
    pub owner_id: String,
    /// When it was made.
    pub created_at: Timestamp,
    /// When it stops working.
    pub expires_at: Timestamp,
    /// When it was used (it works once).
    pub used_at: Option<Timestamp>,
}

/// A client registered through `POST /oauth/register` (RFC 7591).
#[derive(Debug, Clone, PartialEq)]
pub struct OAuthClientRecord {
    /// The `client_id` handed out.
    pub id: String,
    /// SHA-256 of the client secret (confidential clients only).
    pub secret_hash: Option<String>,
    /// The registered metadata as answered to the client (redirect URIs, name, auth method…).
    pub metadata: Value,
    /// When it registered.
    pub created_at: Timestamp,
    /// When an authorization for it was first granted; a registration never used within a day
    /// expires.
    pub used_at: Option<Timestamp>,
}

/// An authorization code: single use, short-lived, bound to everything it was issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthCodeRecord {
    /// SHA-256 of the code.
    pub code_hash: String,
    /// The client it was issued to.
    pub client_id: String,
    /// The client's name when consented (the connection is named after it).
    pub client_name: String,
    /// The exact redirect URI of the authorization request.
    pub redirect_uri: String,
    /// The PKCE S256 challenge.
    pub code_challenge: String,
    /// The RFC 8707 resource the client asked for, if it did.
    pub resource: Option<String>,
    /// The owner who consented.
    pub owner_id: String,
    /// The project the owner chose.
    pub project_id: String,
    /// The consented scopes.
    pub scopes: Vec<String>,
    /// When it was issued.
    pub created_at: Timestamp,
    /// When it stops working.
    pub expires_at: Timestamp,
    /// When it was exchanged.
    pub used_at: Option<Timestamp>,
    /// The grant its exchange made (revoked if the code is presented again).
    pub grant_id: Option<String>,
}

/// Whether an OAuth token is an access or a refresh token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OAuthTokenKind {
    /// Presented as a bearer token.
    Access,
    /// Exchanged for a new access token; rotates on every use.
    Refresh,
}

impl OAuthTokenKind {
    /// The kind as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            OAuthTokenKind::Access => "access",
            OAuthTokenKind::Refresh => "refresh",
        }
    }

    /// Parses a stored kind.
    pub fn parse(text: &str) -> Option<Self> {
        [OAuthTokenKind::Access, OAuthTokenKind::Refresh]
            .into_iter()
            .find(|kind| kind.as_str() == text)
    }
}

/// An access or refresh token of a grant, stored hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthTokenRecord {
    /// SHA-256 of the token text.
    pub token_hash: String,
    /// Access or refresh.
    pub kind: OAuthTokenKind,
    /// The grant it speaks for (a token row's id).
    pub grant_id: String,
    /// When it was issued.
    pub created_at: Timestamp,
    /// When it stops working.
    pub expires_at: Timestamp,
    /// When a refresh token was exchanged (rotated); presenting it again revokes the grant.
    pub used_at: Option<Timestamp>,
    /// When it was revoked, if it was.
    pub revoked_at: Option<Timestamp>,
}

/// What a successful code exchange or refresh stores at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedTokens {
    /// The new access token.
    pub access: OAuthTokenRecord,
    /// The new refresh token.
    pub refresh: OAuthTokenRecord,
}

/// What redeeming an authorization code did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedeemOutcome {
    /// The code was unused and unexpired: the grant and its tokens were stored.
    Issued,
    /// The code was used before; the grant its first use made (to revoke) is named.
    AlreadyUsed {
        /// The grant of the first exchange.
        grant_id: Option<String>,
    },
    /// No such code, or it expired.
    Invalid,
}

/// What exchanging a refresh token did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RotateOutcome {
    /// The token was current: it is now used, and the new tokens were stored.
    Rotated,
    /// The token was already rotated: presented again, its grant must be revoked.
    Reused {
        /// The grant to revoke.
        grant_id: String,
    },
    /// No such token, or it expired or was revoked, or its grant was revoked.
    Invalid,
}

/// What a sweep of lapsed sign-in and OAuth state removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AuthSweepCounts {
    /// Expired or ended browser sessions, used or expired sign-in links.
    pub sessions: usize,
    /// Registrations never used within their day.
    pub clients: usize,
    /// Expired codes and tokens.
    pub tokens: usize,
}

/// The cut-offs of one sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthSweep {
    /// Now.
    pub now: Timestamp,
    /// Browser sessions last seen before this are idle-expired.
    pub idle_before: Timestamp,
    /// Registrations made before this and never used expire.
    pub unused_clients_before: Timestamp,
}
