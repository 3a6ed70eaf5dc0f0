//! OAuth protected-resource metadata (RFC 9728) and the `WWW-Authenticate` challenges that
//! point hosts at it.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::AppState;
use super::MCP_PATH;
use super::auth::{AuthError, Scope};

/// The RFC 9728 well-known path; the resource's path (`/mcp`) may follow it.
pub const PROTECTED_RESOURCE_PATH: &str = "/.well-known/oauth-protected-resource";

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
        "resource": format!("{base}{MCP_PATH}"),
        "resource_name": "graphrelay",
        "scopes_supported": Scope::ALL.map(Scope::as_str),
        "bearer_methods_supported": ["header"],
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
