//! The service's own OAuth 2.1 authorization server, in MCP's profile: metadata (RFC 8414,
//! RFC 9728), dynamic registration (RFC 7591) and client ID metadata documents, the owner's
//! sign-in and consent pages, PKCE-bound single-use codes, rotating refresh tokens, revocation
//! (RFC 7009), and the `WWW-Authenticate` challenges that point hosts at all of it.
//!
//! A grant is a connected agent on one project (see [`crate::store::auth`]); everything that is
//! per agent holds for it, and operator-minted agent tokens keep working beside it.

pub mod authorize;
pub mod pages;
pub mod signin;
pub mod token;

// The domain's OAuth rooms, by their paths from before the move (`super::clients`).
pub use crate::oauth::{cimd, clients, connections, password};

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use super::AppState;
use super::MCP_PATH;
use super::auth::{AuthError, Scope};

/// The RFC 9728 well-known path; the resource's path (`/mcp`) may follow it.
pub const PROTECTED_RESOURCE_PATH: &str = "/.well-known/oauth-protected-resource";
/// The RFC 8414 well-known path of the authorization server's metadata.
pub const AUTHORIZATION_SERVER_PATH: &str = "/.well-known/oauth-authorization-server";
/// Where the owner's browser is sent to sign in and consent.
pub const AUTHORIZE_PATH: &str = "/oauth/authorize";
/// Where codes and refresh tokens are exchanged.
pub const TOKEN_PATH: &str = "/oauth/token";
/// Dynamic client registration.
pub const REGISTER_PATH: &str = "/oauth/register";
/// Token revocation.
pub const REVOKE_PATH: &str = "/oauth/revoke";
/// The sign-in form posts here.
pub const SIGN_IN_PATH: &str = "/oauth/sign-in";
/// A one-time sign-in link opens here.
pub const SIGN_IN_LINK_PATH: &str = "/oauth/sign-in/link";

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

/// What the authorization server keeps in memory: the sign-in throttle, the cache of client ID
/// metadata documents, and the per-address registration rate.
pub struct OAuthState {
    /// Failed sign-ins per account and per client address.
    pub throttle: signin::Throttle,
    /// Fetched client ID metadata documents.
    pub documents: cimd::DocumentCache,
    /// Registrations per client address.
    pub registrations: crate::rate::RateLimiter,
}

impl Default for OAuthState {
    fn default() -> Self {
        OAuthState {
            throttle: signin::Throttle::default(),
            documents: cimd::DocumentCache::default(),
            registrations: crate::rate::RateLimiter::new(Some(clients::REGISTRATION_RATE)),
        }
    }
}

/// The authorization server's routes and the metadata documents.
pub fn routes(app: Arc<AppState>) -> Router {
    Router::new()
        .route(PROTECTED_RESOURCE_PATH, get(protected_resource_metadata))
        .route(
            &format!("{PROTECTED_RESOURCE_PATH}{MCP_PATH}"),
            get(protected_resource_metadata),
        )
        .route(
            AUTHORIZATION_SERVER_PATH,
            get(authorization_server_metadata),
        )
        .route(
            AUTHORIZE_PATH,
            get(authorize::authorize_page).post(authorize::consent),
        )
        .route(SIGN_IN_PATH, post(signin::sign_in))
        .route(
            SIGN_IN_LINK_PATH,
            get(signin::link_page).post(signin::use_link),
        )
        .route(REGISTER_PATH, post(clients::register))
        .route(TOKEN_PATH, post(token::token))
        .route(REVOKE_PATH, post(token::revoke))
        .with_state(app)
}

/// Removes lapsed browser sessions, links, unused registrations, expired codes and tokens.
pub async fn sweep(
    app: &AppState,
) -> Result<crate::store::AuthSweepCounts, crate::store::StoreError> {
    let now = app.clock.now();
    app.store
        .sweep_auth(crate::store::AuthSweep {
            now,
            idle_before: now.saturating_sub(BROWSER_SESSION_IDLE),
            unused_clients_before: now.saturating_sub(UNUSED_CLIENT_TTL),
        })
        .await
}

/// The MCP resource this server issues tokens for: `<public-url>/mcp`.
pub fn resource_url(base: &str) -> String {
    format!("{base}{MCP_PATH}")
}

/// The service's public base URL: the configured one, else `http://` plus the request's Host.
pub fn base_url(app: &AppState, headers: &HeaderMap) -> String {
    if let Some(url) = &app.config.public_url {
        return url.trim_end_matches('/').to_owned();
    }
    // The Host is echoed into a quoted header parameter, so only authority characters pass.
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|host| {
            !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
        })
        .unwrap_or("localhost");
    format!("http://{host}")
}

/// Where the metadata of the `/mcp` resource is served.
pub fn metadata_url(base: &str) -> String {
    format!("{base}{PROTECTED_RESOURCE_PATH}{MCP_PATH}")
}

/// `GET /.well-known/oauth-protected-resource[/mcp]`.
pub async fn protected_resource_metadata(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Json<Value> {
    let base = base_url(&app, &headers);
    Json(json!({
        "resource": resource_url(&base),
        "resource_name": "graphrelay",
        "authorization_servers": [base],
        "scopes_supported": Scope::ALL.map(Scope::as_str),
        "bearer_methods_supported": ["header"],
    }))
}

/// `GET /.well-known/oauth-authorization-server` (RFC 8414): the issuer is the public URL.
pub async fn authorization_server_metadata(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Json<Value> {
    let base = base_url(&app, &headers);
    Json(json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}{AUTHORIZE_PATH}"),
        "token_endpoint": format!("{base}{TOKEN_PATH}"),
        "registration_endpoint": format!("{base}{REGISTER_PATH}"),
        "revocation_endpoint": format!("{base}{REVOKE_PATH}"),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": clients::AUTH_METHODS,
        "revocation_endpoint_auth_methods_supported": clients::AUTH_METHODS,
        "scopes_supported": Scope::ALL.map(Scope::as_str),
        "client_id_metadata_document_supported": true,
        "authorization_response_iss_parameter_supported": true,
    }))
}

/// 401 for a missing or bad token, pointing at the metadata.
pub fn unauthorized(base: &str, error: &AuthError) -> Response {
    let challenge = format!("Bearer resource_metadata=\"{}\"", metadata_url(base));
    let mut response = (
        StatusCode::UNAUTHORIZED,
        Json(json!({
            "error": "invalid_token",
            "error_description": error.to_string(),
        })),
    )
        .into_response();
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// The `insufficient_scope` challenge for calling `spec` without its scope.
pub fn insufficient_scope_challenge(base: &str, tool: &str, scope: Scope) -> String {
    format!(
        "Bearer error=\"insufficient_scope\", scope=\"{scope}\", resource_metadata=\"{}\", error_description=\"{tool} needs the {scope} scope\"",
        metadata_url(base),
    )
}
