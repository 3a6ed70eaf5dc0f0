//! `/oauth/token` (authorization code with PKCE, refresh with rotation) and `/oauth/revoke`
//! (RFC 7009). Errors are RFC 6749 §5.2 JSON.
//!
//! Replays are treated as theft: a code presented a second time revokes the grant its first
//! exchange made, and a refresh token presented after it rotated revokes its whole grant.

use std::net::IpAddr;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::authorize::same_resource;
use super::client_auth::presented;
use super::signin::{Peer, client_ip, random_hex};
use super::{REFRESH_TOKEN_TTL, base_url, resource_url};
use crate::auth::{Scope, hash_token};
use crate::http::AppState;
use crate::http::answers;
use crate::oauth::clients::{self, ClientAuthError, ClientError};
use crate::oauth::metadata::Client;
use crate::store::auth::grant_token_hash;
use crate::store::{
    AuthCodeRecord, IssuedTokens, OAuthTokenKind, OAuthTokenRecord, RedeemOutcome, RotateOutcome,
    StoreError, TokenKind, TokenRecord,
};

/// Largest token or revocation request body.
const MAX_FORM_BYTES: usize = 16 * 1024;
/// The prefix of access tokens (operator-minted agent tokens start `gra_`).
pub const ACCESS_TOKEN_PREFIX: &str = "grt_";
/// The prefix of refresh tokens.
pub const REFRESH_TOKEN_PREFIX: &str = "grr_";

/// An RFC 6749 §5.2 error.
struct TokenError {
    status: StatusCode,
    code: &'static str,
    description: String,
    /// `Retry-After` seconds, for a failure that passes.
    retry_after: Option<u64>,
}

impl TokenError {
    fn new(code: &'static str, description: impl Into<String>) -> Self {
        TokenError {
            status: if code == "invalid_client" {
                StatusCode::UNAUTHORIZED
            } else {
                StatusCode::BAD_REQUEST
            },
            code,
            description: description.into(),
            retry_after: None,
        }
    }

    fn grant(description: impl Into<String>) -> Self {
        TokenError::new("invalid_grant", description)
    }
}

impl From<StoreError> for TokenError {
    /// The store's answer ([`answers::store_answer`]) in RFC 6749's words:
    /// `temporarily_unavailable` (503, with `Retry-After`) when it passes, `invalid_request`
    /// for a value that cannot be stored, `server_error` (500) when retrying does not help.
    fn from(error: StoreError) -> Self {
        let answer = answers::store_answer(&error, "the token endpoint failed");
        let code = match answer.status {
            StatusCode::BAD_REQUEST => "invalid_request",
            StatusCode::SERVICE_UNAVAILABLE => "temporarily_unavailable",
            _ => "server_error",
        };
        let description = if answer.retry_after.is_some() {
            "the service cannot issue tokens right now; retry after Retry-After seconds".to_owned()
        } else {
            answer.message
        };
        TokenError {
            status: answer.status,
            code,
            description,
            retry_after: answer.retry_after,
        }
    }
}

impl IntoResponse for TokenError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            Json(json!({"error": self.code, "error_description": self.description})),
        )
            .into_response();
        let headers = response.headers_mut();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"graphrelay\""),
            );
        }
        response
    }
}

/// A form body as a map of single values; a repeated parameter is an error (RFC 6749 §3.2).
fn form(body: &[u8]) -> Result<Map<String, Value>, TokenError> {
    if body.len() > MAX_FORM_BYTES {
        return Err(TokenError::new(
            "invalid_request",
            format!("the request body may have at most {MAX_FORM_BYTES} bytes"),
        ));
    }
    let mut map = Map::new();
    for (key, value) in url::form_urlencoded::parse(body) {
        if map
            .insert(key.to_string(), Value::from(value.into_owned()))
            .is_some()
        {
            return Err(TokenError::new(
                "invalid_request",
                format!("the parameter `{key}` appears more than once"),
            ));
        }
    }
    Ok(map)
}

fn field<'a>(form: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    form.get(name)
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty())
}

/// The base64url (no padding) SHA-256 of a PKCE verifier: its S256 challenge.
pub fn s256(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// Whether `verifier` is a well-formed PKCE verifier (RFC 7636 §4.1) whose S256 is `challenge`.
fn verifier_matches(verifier: &str, challenge: &str) -> bool {
    (43..=128).contains(&verifier.len())
        && verifier
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
        && crate::oauth::same_secret(&s256(verifier), challenge)
}

async fn authenticated_client(
    app: &AppState,
    headers: &HeaderMap,
    form: &Map<String, Value>,
    requester: Option<IpAddr>,
) -> Result<Client, TokenError> {
    let presented =
        presented(headers, form).map_err(|e| TokenError::new("invalid_client", e.to_string()))?;
    clients::authenticate(&app.clients, &presented, requester)
        .await
        .map_err(|error| match error {
            // The store failing is not the client's fault: answered as unavailable.
            ClientAuthError::Client(ClientError::Store(error)) => TokenError::from(error),
            other => TokenError::new("invalid_client", other.to_string()),
        })
}

/// `POST /oauth/token`.
pub async fn token(
    State(app): State<Arc<AppState>>,
    Peer(peer): Peer,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let requester = client_ip(&app, &headers, peer);
    match exchange(&app, &headers, &body, requester).await {
        Ok(answer) => (
            StatusCode::OK,
            [
                (header::CACHE_CONTROL, "no-store"),
                (header::PRAGMA, "no-cache"),
            ],
            Json(answer),
        )
            .into_response(),
        Err(error) => error.into_response(),
    }
}

async fn exchange(
    app: &AppState,
    headers: &HeaderMap,
    body: &[u8],
    requester: Option<IpAddr>,
) -> Result<Value, TokenError> {
    let form = form(body)?;
    let grant_type = field(&form, "grant_type")
        .ok_or_else(|| TokenError::new("invalid_request", "grant_type is missing"))?;
    if !matches!(grant_type, "authorization_code" | "refresh_token") {
        return Err(TokenError::new(
            "unsupported_grant_type",
            format!(
                "grant_type `{grant_type}` is not supported: authorization_code and refresh_token are"
            ),
        ));
    }
    let client = authenticated_client(app, headers, &form, requester).await?;
    if grant_type == "authorization_code" {
        redeem_code(app, headers, &client, &form).await
    } else {
        refresh(app, &client, &form).await
    }
}

/// Fresh access and refresh tokens for `grant_id`: their texts and records.
fn mint(app: &AppState, grant_id: &str) -> Result<(String, String, IssuedTokens), StoreError> {
    let now = app.clock.now();
    let access = format!("{ACCESS_TOKEN_PREFIX}{}", random_hex(32)?);
    let refresh = format!("{REFRESH_TOKEN_PREFIX}{}", random_hex(32)?);
    let record = |text: &str, kind, ttl| OAuthTokenRecord {
        token_hash: hash_token(text),
        kind,
        grant_id: grant_id.to_owned(),
        created_at: now,
        expires_at: now.saturating_add(ttl),
        used_at: None,
        revoked_at: None,
    };
    let tokens = IssuedTokens {
        access: record(&access, OAuthTokenKind::Access, app.config.access_token_ttl),
        refresh: record(&refresh, OAuthTokenKind::Refresh, REFRESH_TOKEN_TTL),
    };
    Ok((access, refresh, tokens))
}

fn answer(app: &AppState, access: String, refresh: String, scopes: &[String]) -> Value {
    json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": app.config.access_token_ttl.as_secs().max(1),
        "refresh_token": refresh,
        "scope": scopes.join(" "),
    })
}

fn check_code(
    code: &AuthCodeRecord,
    client: &Client,
    form: &Map<String, Value>,
    ours: &str,
    now: relay_protocol::clock::Timestamp,
) -> Result<(), TokenError> {
    if code.expires_at <= now {
        return Err(TokenError::grant(
            "the authorization code expired: authorize again",
        ));
    }
    if code.client_id != client.id {
        return Err(TokenError::grant(
            "the authorization code was issued to another client",
        ));
    }
    if field(form, "redirect_uri").is_some_and(|uri| uri != code.redirect_uri) {
        return Err(TokenError::grant(
            "redirect_uri differs from the one of the authorization request",
        ));
    }
    let Some(verifier) = field(form, "code_verifier") else {
        return Err(TokenError::grant(
            "code_verifier is missing (PKCE is required)",
        ));
    };
    if !verifier_matches(verifier, &code.code_challenge) {
        return Err(TokenError::grant(
            "code_verifier does not match the code_challenge (S256)",
        ));
    }
    if let Some(resource) = field(form, "resource")
        && !same_resource(resource, ours)
    {
        return Err(TokenError::new(
            "invalid_target",
            format!("this server issues tokens for {ours} only"),
        ));
    }
    Ok(())
}

async fn redeem_code(
    app: &AppState,
    headers: &HeaderMap,
    client: &Client,
    form: &Map<String, Value>,
) -> Result<Value, TokenError> {
    let text =
        field(form, "code").ok_or_else(|| TokenError::new("invalid_request", "code is missing"))?;
    let code_hash = hash_token(text);
    let code = app
        .store
        .auth_code(&code_hash)
        .await?
        .ok_or_else(|| TokenError::grant("the authorization code is unknown"))?;
    let now = app.clock.now();
    if code.used_at.is_some() {
        revoke_replayed_code(app, code.grant_id.as_deref()).await?;
        return Err(TokenError::grant(
            "the authorization code was used already; the tokens issued for it are revoked",
        ));
    }
    check_code(
        &code,
        client,
        form,
        &resource_url(&base_url(app, headers)),
        now,
    )?;
    let grant_id = uuid::Uuid::new_v4().to_string();
    let grant = TokenRecord {
        id: grant_id.clone(),
        kind: TokenKind::Agent,
        token_hash: grant_token_hash(&grant_id),
        owner_id: code.owner_id.clone(),
        project_id: Some(code.project_id.clone()),
        agent_name: Some(code.client_name.clone()),
        scopes: code.scopes.clone(),
        client_id: Some(client.id.clone()),
        connection_id: None,
        created_at: now,
        revoked_at: None,
    };
    let (access, refresh, tokens) = mint(app, &grant_id)?;
    match app
        .store
        .redeem_auth_code(&code_hash, now, grant, tokens)
        .await?
    {
        RedeemOutcome::Issued => Ok(answer(app, access, refresh, &code.scopes)),
        RedeemOutcome::AlreadyUsed { grant_id } => {
            revoke_replayed_code(app, grant_id.as_deref()).await?;
            Err(TokenError::grant(
                "the authorization code was used already; the tokens issued for it are revoked",
            ))
        }
        RedeemOutcome::Invalid => Err(TokenError::grant("the authorization code expired")),
    }
}

async fn revoke_replayed_code(app: &AppState, grant_id: Option<&str>) -> Result<(), StoreError> {
    if let Some(grant_id) = grant_id {
        tracing::warn!(
            grant_id,
            "an authorization code was presented twice; revoking its grant"
        );
        app.store.revoke_token(grant_id, app.clock.now()).await?;
    }
    Ok(())
}

async fn refresh(
    app: &AppState,
    client: &Client,
    form: &Map<String, Value>,
) -> Result<Value, TokenError> {
    let text = field(form, "refresh_token")
        .ok_or_else(|| TokenError::new("invalid_request", "refresh_token is missing"))?;
    let token_hash = hash_token(text);
    let record = app
        .store
        .oauth_token(&token_hash)
        .await?
        .filter(|record| record.kind == OAuthTokenKind::Refresh)
        .ok_or_else(|| TokenError::grant("the refresh token is unknown"))?;
    let grant = app
        .store
        .token(&record.grant_id)
        .await?
        .ok_or_else(|| TokenError::grant("the refresh token's grant is gone"))?;
    if grant.client_id.as_deref() != Some(client.id.as_str()) {
        return Err(TokenError::grant(
            "the refresh token was issued to another client",
        ));
    }
    if let Some(scope) = field(form, "scope")
        && let Some(extra) = scope
            .split_whitespace()
            .find(|s| Scope::parse(s).is_none() || !grant.scopes.iter().any(|g| g == s))
    {
        return Err(TokenError::new(
            "invalid_scope",
            format!("`{extra}` was not granted; a refresh cannot widen the grant"),
        ));
    }
    let (access, refresh, tokens) = mint(app, &grant.id)?;
    match app
        .store
        .rotate_refresh_token(&token_hash, app.clock.now(), tokens)
        .await?
    {
        RotateOutcome::Rotated => Ok(answer(app, access, refresh, &grant.scopes)),
        RotateOutcome::Reused { grant_id } => {
            tracing::warn!(
                grant_id,
                "a rotated refresh token was presented again; revoking its grant"
            );
            app.store.revoke_token(&grant_id, app.clock.now()).await?;
            Err(TokenError::grant(
                "the refresh token was used already; the whole grant is revoked: authorize again",
            ))
        }
        RotateOutcome::Invalid => Err(TokenError::grant(
            "the refresh token expired or was revoked: authorize again",
        )),
    }
}

/// `POST /oauth/revoke` (RFC 7009): 200 whether or not the token was known.
pub async fn revoke(
    State(app): State<Arc<AppState>>,
    Peer(peer): Peer,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let requester = client_ip(&app, &headers, peer);
    match revoke_token(&app, &headers, &body, requester).await {
        Ok(()) => (
            StatusCode::OK,
            [(header::CACHE_CONTROL, "no-store")],
            Json(json!({})),
        )
            .into_response(),
        Err(error) => error.into_response(),
    }
}

async fn revoke_token(
    app: &AppState,
    headers: &HeaderMap,
    body: &[u8],
    requester: Option<IpAddr>,
) -> Result<(), TokenError> {
    let form = form(body)?;
    let client = authenticated_client(app, headers, &form, requester).await?;
    let text = field(&form, "token")
        .ok_or_else(|| TokenError::new("invalid_request", "token is missing"))?;
    let Some(record) = app.store.oauth_token(&hash_token(text)).await? else {
        return Ok(());
    };
    let grant = app.store.token(&record.grant_id).await?;
    if grant.and_then(|g| g.client_id).as_deref() != Some(client.id.as_str()) {
        // Another client's token: answered like an unknown one (RFC 7009 §2.2).
        return Ok(());
    }
    let now = app.clock.now();
    match record.kind {
        OAuthTokenKind::Refresh => {
            app.store.revoke_token(&record.grant_id, now).await?;
        }
        OAuthTokenKind::Access => {
            app.store
                .revoke_oauth_token(&record.token_hash, now)
                .await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s256_is_base64url_of_sha256() {
        // Python: base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b'=').
        assert_eq!(
            s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r7wW1gFWFOEjXk"),
            "bwWFMyPfdG9qreDhH2lmftFx_dFeLDalzcT1gb_j68g"
        );
        assert!(verifier_matches(
            "dBjftJeZ4CVP-mB92K27uhbUJU1p1r7wW1gFWFOEjXk",
            "bwWFMyPfdG9qreDhH2lmftFx_dFeLDalzcT1gb_j68g"
        ));
        assert!(
            !verifier_matches("short", &s256("short")),
            "too short to be a verifier"
        );
        assert!(!verifier_matches(
            "dBjftJeZ4CVP-mB92K27uhbUJU1p1r7wW1gFWFOEjXK",
            "bwWFMyPfdG9qreDhH2lmftFx_dFeLDalzcT1gb_j68g"
        ));
    }

    #[test]
    fn a_repeated_parameter_is_refused() {
        assert!(form(b"code=a&code=b").is_err());
        let map = form(b"grant_type=refresh_token&refresh_token=x%2By")
            .ok()
            .expect("form");
        assert_eq!(field(&map, "refresh_token"), Some("x+y"));
    }
}
