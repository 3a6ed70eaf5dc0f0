//! The service's own OAuth 2.1 authorization server over HTTP, in MCP's profile: metadata
//! (RFC 8414, RFC 9728), dynamic registration (RFC 7591), the owner's sign-in and consent
//! pages, PKCE-bound single-use codes, rotating refresh tokens, revocation (RFC 7009), and the
//! `WWW-Authenticate` challenges that point hosts at all of it. What it keeps and decides about
//! clients and grants is the domain's [`crate::oauth`].

pub mod authorize;
pub mod client_auth;
pub mod pages;
pub mod register;
pub mod signin;
pub mod token;

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use super::rate::RateLimiter;
use super::{AppState, MCP_PATH};
use crate::auth::{AuthError, Scope};
// The lifetimes the endpoints grant, by the domain's word.
use crate::oauth::clients::AUTH_METHODS;
use crate::oauth::{BROWSER_SESSION_IDLE, CODE_TTL, REFRESH_TOKEN_TTL};

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

/// The URL that opens the one-time sign-in link with `secret` (`relay admin owner
/// sign-in-link`), on the service at `base`.
pub fn sign_in_link_url(base: &str, secret: &str) -> String {
    format!(
        "{}{SIGN_IN_LINK_PATH}?link={secret}",
        base.trim_end_matches('/')
    )
}

/// What the authorization server's endpoints keep in memory: the sign-in throttle and the
/// per-address registration rate.
pub struct OAuthState {
    /// Failed sign-ins per account and client address, and per client address.
    pub throttle: signin::Throttle,
    /// Registrations per client address.
    pub registrations: RateLimiter,
}

impl Default for OAuthState {
    fn default() -> Self {
        OAuthState {
            throttle: signin::Throttle::default(),
            registrations: RateLimiter::new(Some(register::REGISTRATION_RATE)),
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
        .route(REGISTER_PATH, post(register::register))
        .route(TOKEN_PATH, post(token::token))
        .route(REVOKE_PATH, post(token::revoke))
        .with_state(app)
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
        "token_endpoint_auth_methods_supported": AUTH_METHODS,
        "revocation_endpoint_auth_methods_supported": AUTH_METHODS,
        "scopes_supported": Scope::ALL.map(Scope::as_str),
        "client_id_metadata_document_supported": true,
        "authorization_response_iss_parameter_supported": true,
    }))
}

/// 401 for a missing or bad token: the challenge points at the metadata and names the scopes a
/// client should ask for; for a token that was sent but does not work (unknown, expired,
/// revoked, another kind) it says `error="invalid_token"` (RFC 6750 §3), which tells a client
/// to refresh or authorize again rather than retry.
///
/// The answer comes before the request's body was read, so the connection cannot be used
/// again (the server closes it once the answer is out); `Connection: close` says so, or a
/// client that sends its next request on it at that moment (an SDK's OAuth discovery right
/// after the 401) meets a connection closed without an answer.
pub fn unauthorized(base: &str, error: &AuthError) -> Response {
    let mut challenge = String::from("Bearer ");
    if !matches!(error, AuthError::Missing) {
        challenge.push_str(&format!(
            "error=\"invalid_token\", error_description=\"{}\", ",
            quoted(&error.to_string())
        ));
    }
    let scopes = Scope::ALL.map(Scope::as_str).join(" ");
    challenge.push_str(&format!(
        "resource_metadata=\"{}\", scope=\"{scopes}\"",
        metadata_url(base)
    ));
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
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// `text` as the inside of a quoted-string: without `"` and `\`, and without what a header
/// value cannot hold.
fn quoted(text: &str) -> String {
    text.chars()
        .filter(|c| *c != '"' && *c != '\\' && !c.is_control())
        .collect()
}

/// The `insufficient_scope` challenge for calling `spec` without its scope.
pub fn insufficient_scope_challenge(base: &str, tool: &str, scope: Scope) -> String {
    format!(
        "Bearer error=\"insufficient_scope\", scope=\"{scope}\", resource_metadata=\"{}\", error_description=\"{tool} needs the {scope} scope\"",
        metadata_url(base),
    )
}
