//! `POST /oauth/register`: dynamic client registration (RFC 7591) over HTTP, rate limited per
//! client address; the rules and the keeping are [`crate::oauth::clients`].

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::signin::{self, Peer};
use crate::http::AppState;
use crate::http::rate::RateLimit;
use crate::oauth::clients::{MAX_REGISTRATION_BYTES, parse_registration, store_registration};

/// Registrations one client address may make: a burst of 20, then one a second.
pub const REGISTRATION_RATE: RateLimit = RateLimit {
    per_second: 1,
    burst: 20,
};

/// An RFC 7591 error response.
fn registration_error(code: &str, description: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"error": code, "error_description": description})),
    )
        .into_response()
}

/// `POST /oauth/register` (RFC 7591).
pub async fn register(
    State(app): State<Arc<AppState>>,
    Peer(peer): Peer,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let address = signin::client_ip(&app, &headers, peer);
    let key = format!(
        "register:{}",
        address.map(|a| a.to_string()).unwrap_or_default()
    );
    if let Err(wait) = app.oauth.registrations.check(&key) {
        let mut response = (
            StatusCode::TOO_MANY_REQUESTS,
            Json(json!({
                "error": "invalid_client_metadata",
                "error_description": "too many registrations from this address; wait and retry",
            })),
        )
            .into_response();
        let seconds = wait.as_secs().max(1).to_string();
        if let Ok(value) = HeaderValue::from_str(&seconds) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return response;
    }
    if body.len() > MAX_REGISTRATION_BYTES {
        return registration_error(
            "invalid_client_metadata",
            format!("the registration may have at most {MAX_REGISTRATION_BYTES} bytes"),
        );
    }
    let registration = match parse_registration(&body) {
        Ok(registration) => registration,
        Err(error) => return registration_error(error.code(), error.to_string()),
    };
    match store_registration(&app.clients, registration).await {
        Ok(answer) => (
            StatusCode::CREATED,
            [(header::CACHE_CONTROL, "no-store")],
            Json(answer),
        )
            .into_response(),
        Err(error) => {
            tracing::error!(%error, "storing a client registration failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"error": "temporarily_unavailable", "error_description": "the service cannot register clients right now; retry later"})),
            )
                .into_response()
        }
    }
}
