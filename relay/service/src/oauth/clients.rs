//! OAuth clients: dynamic registration (RFC 7591), client ID metadata documents, redirect URI
//! rules, and client authentication at the token and revocation endpoints.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Map, Value, json};
use url::Url;

use super::signin::{self, Peer};
use super::{UNUSED_CLIENT_TTL, cimd};
use crate::AppState;
use crate::auth::{Scope, hash_token};
use crate::rate::RateLimit;
use crate::store::{OAuthClientRecord, StoreError};

/// The client authentication methods of the token and revocation endpoints.
pub const AUTH_METHODS: [&str; 3] = ["none", "client_secret_post", "client_secret_basic"];
/// Registrations one client address may make: a burst of 20, then one a second.
pub const REGISTRATION_RATE: RateLimit = RateLimit {
    per_second: 1,
    burst: 20,
};
/// Most redirect URIs a client may register.
pub const MAX_REDIRECT_URIS: usize = 10;
/// Longest redirect URI, in characters.
pub const MAX_REDIRECT_URI_CHARS: usize = 2000;
/// Largest registration request.
pub const MAX_REGISTRATION_BYTES: usize = 64 * 1024;
/// Longest client name kept (a longer one is cut).
pub const MAX_CLIENT_NAME_CHARS: usize = 200;
/// The name of a client that gave none.
pub const UNNAMED_CLIENT: &str = "MCP client";

/// The name a client gave (trimmed, at most [`MAX_CLIENT_NAME_CHARS`]), or [`UNNAMED_CLIENT`].
pub fn client_name(value: Option<&Value>) -> String {
    value
        .and_then(Value::as_str)
        .map(|name| {
            name.trim()
                .chars()
                .take(MAX_CLIENT_NAME_CHARS)
                .collect::<String>()
        })
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| UNNAMED_CLIENT.to_owned())
}

/// How a client proves who it is at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    /// A public client: `client_id` only (PKCE protects its codes).
    None,
    /// `client_secret` in the form body.
    SecretPost,
    /// `client_secret` in HTTP Basic.
    SecretBasic,
}

impl AuthMethod {
    fn parse(text: &str) -> Option<Self> {
        match text {
            "none" => Some(AuthMethod::None),
            "client_secret_post" => Some(AuthMethod::SecretPost),
            "client_secret_basic" => Some(AuthMethod::SecretBasic),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            AuthMethod::None => "none",
            AuthMethod::SecretPost => "client_secret_post",
            AuthMethod::SecretBasic => "client_secret_basic",
        }
    }
}

/// A client the authorization server knows: registered here, or described by its metadata
/// document.
#[derive(Debug, Clone, PartialEq)]
pub struct Client {
    /// Its `client_id`.
    pub id: String,
    /// Its display name.
    pub name: String,
    /// The redirect URIs it may use.
    pub redirect_uris: Vec<String>,
    /// SHA-256 of its secret, for a confidential client.
    pub secret_hash: Option<String>,
    /// Whether it registered here (else its id is a metadata document URL).
    pub registered: bool,
}

/// Why a client could not be looked up.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Unknown, expired, or its metadata document is unusable.
    #[error("{0}")]
    Unknown(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a redirect URI is refused (the RFC 7591 error text).
pub fn check_redirect_uri(uri: &str) -> Result<Url, String> {
    if uri.chars().count() > MAX_REDIRECT_URI_CHARS {
        return Err(format!(
            "a redirect URI may have at most {MAX_REDIRECT_URI_CHARS} characters"
        ));
    }
    let url = Url::parse(uri).map_err(|e| format!("`{uri}` is not an absolute URL: {e}"))?;
    if uri.contains('#') {
        return Err(format!("`{uri}` has a fragment; redirect URIs may not"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "`{uri}` carries credentials; redirect URIs may not"
        ));
    }
    match url.scheme() {
        "https" if url.host().is_some() => Ok(url),
        "http" if is_loopback_host(&url) => Ok(url),
        "http" => Err(format!(
            "`{uri}` is plain http on a host that is not loopback: use https, or http on 127.0.0.1, [::1] or localhost"
        )),
        other => Err(format!(
            "`{uri}` has scheme `{other}`: redirect URIs must be https, or http on a loopback host"
        )),
    }
}

/// Whether the URL's host is 127.0.0.1, [::1] or localhost.
fn is_loopback_host(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// Whether `requested` is the registered URI, allowing any port on a loopback http one
/// (RFC 8252 §7.3).
pub fn redirect_matches(registered: &str, requested: &str) -> bool {
    if registered == requested {
        return true;
    }
    let (Ok(a), Ok(b)) = (Url::parse(registered), Url::parse(requested)) else {
        return false;
    };
    a.scheme() == "http"
        && b.scheme() == "http"
        && is_loopback_host(&a)
        && a.host() == b.host()
        && a.path() == b.path()
        && a.query() == b.query()
        && b.fragment().is_none()
        && b.username().is_empty()
        && b.password().is_none()
}

/// The client `client_id` names, if it is known and usable.
pub async fn client(app: &AppState, client_id: &str) -> Result<Client, ClientError> {
    if cimd::is_document_url(client_id, app.config.dev) {
        return cimd::client(app, client_id).await;
    }
    let record = app
        .store
        .oauth_client(client_id)
        .await?
        .filter(|record| {
            record.used_at.is_some()
                || record.created_at > app.clock.now().saturating_sub(UNUSED_CLIENT_TTL)
        })
        .ok_or_else(|| {
            ClientError::Unknown(format!(
                "no client is registered as `{client_id}` (an unused registration expires after a day): register again"
            ))
        })?;
    Ok(client_from_record(&record))
}

fn client_from_record(record: &OAuthClientRecord) -> Client {
    let field = |name: &str| record.metadata.get(name);
    Client {
        id: record.id.clone(),
        name: field("client_name")
            .and_then(Value::as_str)
            .unwrap_or(UNNAMED_CLIENT)
            .to_owned(),
        redirect_uris: field("redirect_uris")
            .and_then(Value::as_array)
            .map(|uris| {
                uris.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        secret_hash: record.secret_hash.clone(),
        registered: true,
    }
}

/// The client credentials a token or revocation request presented.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Presented {
    /// `client_id` from the body or HTTP Basic.
    pub client_id: Option<String>,
    /// `client_secret` from the body or HTTP Basic.
    pub client_secret: Option<String>,
}

/// Reads the client's credentials from HTTP Basic or the form.
pub fn presented(headers: &HeaderMap, form: &Map<String, Value>) -> Result<Presented, String> {
    let field = |name: &str| form.get(name).and_then(Value::as_str).map(str::to_owned);
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
        .map(|(_, value)| value.trim().to_owned());
    let Some(basic) = basic else {
        return Ok(Presented {
            client_id: field("client_id"),
            client_secret: field("client_secret"),
        });
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(basic.as_bytes())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or("the Basic credentials are not base64 of `id:secret`")?;
    let (id, secret) = decoded
        .split_once(':')
        .ok_or("the Basic credentials are not `id:secret`")?;
    let decode = |text: &str| {
        percent_decode(text)
            .ok_or_else(|| "the Basic credentials are badly form-encoded".to_owned())
    };
    let id = decode(id)?;
    if field("client_id").is_some_and(|body| body != id) {
        return Err("client_id differs between the body and HTTP Basic".into());
    }
    Ok(Presented {
        client_id: Some(id),
        client_secret: Some(decode(secret)?),
    })
}

/// `application/x-www-form-urlencoded` decoding of one value (RFC 6749 §2.3.1).
fn percent_decode(text: &str) -> Option<String> {
    url::form_urlencoded::parse(format!("v={text}").as_bytes())
        .next()
        .map(|(_, value)| value.into_owned())
}

/// Authenticates the client of a token or revocation request.
pub async fn authenticate(app: &AppState, presented: &Presented) -> Result<Client, String> {
    let id = presented
        .client_id
        .as_deref()
        .ok_or("client_id is missing (in the body, or HTTP Basic for a confidential client)")?;
    let client = client(app, id).await.map_err(|e| e.to_string())?;
    match (&client.secret_hash, &presented.client_secret) {
        (None, _) => Ok(client),
        (Some(expected), Some(secret)) if signin::same_secret(expected, &hash_token(secret)) => {
            Ok(client)
        }
        (Some(_), Some(_)) => Err("the client secret is wrong".into()),
        (Some(_), None) => Err("this client is confidential: send its client_secret".into()),
    }
}

/// An RFC 7591 error response.
fn registration_error(code: &str, description: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"error": code, "error_description": description})),
    )
        .into_response()
}

/// What a registration request asks for, checked.
struct Registration {
    redirect_uris: Vec<String>,
    name: String,
    method: AuthMethod,
    grant_types: Vec<String>,
    scope: Option<String>,
    extra: Map<String, Value>,
}

fn strings(value: Option<&Value>, field: &str) -> Result<Option<Vec<String>>, String> {
    let Some(value) = value else {
        return Ok(None);
    };
    let array = value
        .as_array()
        .ok_or_else(|| format!("{field} must be an array of strings"))?;
    array
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{field} must be an array of strings"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// An RFC 7591 error: its code and description.
type Invalid = (&'static str, String);

fn invalid(text: String) -> Invalid {
    ("invalid_client_metadata", text)
}

fn parse_registration(body: &[u8]) -> Result<Registration, Invalid> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| invalid(format!("the registration is not JSON: {e}")))?;
    let Value::Object(metadata) = value else {
        return Err(invalid("the registration must be a JSON object".into()));
    };
    let redirect_uris = registered_redirect_uris(&metadata)?;
    let method = match metadata.get("token_endpoint_auth_method") {
        None => AuthMethod::SecretBasic,
        Some(value) => value.as_str().and_then(AuthMethod::parse).ok_or_else(|| {
            invalid(format!(
                "token_endpoint_auth_method must be one of {}",
                AUTH_METHODS.join(", ")
            ))
        })?,
    };
    let grant_types = registered_grant_types(&metadata)?;
    let scope = metadata
        .get("scope")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(bad) = scope
        .iter()
        .flat_map(|s| s.split_whitespace())
        .find(|s| Scope::parse(s).is_none())
    {
        return Err(invalid(format!(
            "scope `{bad}` is not offered: osfoundry:read and osfoundry:run are"
        )));
    }
    let name = client_name(metadata.get("client_name"));
    let extra = ["client_uri", "logo_uri", "software_id", "software_version"]
        .into_iter()
        .filter_map(|key| {
            let value = metadata.get(key)?.as_str()?;
            (value.chars().count() <= MAX_REDIRECT_URI_CHARS)
                .then(|| (key.to_owned(), Value::from(value)))
        })
        .collect();
    Ok(Registration {
        redirect_uris,
        name,
        method,
        grant_types,
        scope,
        extra,
    })
}

fn registered_redirect_uris(metadata: &Map<String, Value>) -> Result<Vec<String>, Invalid> {
    let uris = strings(metadata.get("redirect_uris"), "redirect_uris")
        .map_err(invalid)?
        .unwrap_or_default();
    if uris.is_empty() || uris.len() > MAX_REDIRECT_URIS {
        return Err((
            "invalid_redirect_uri",
            format!("redirect_uris must list 1 to {MAX_REDIRECT_URIS} URIs"),
        ));
    }
    for uri in &uris {
        check_redirect_uri(uri).map_err(|e| ("invalid_redirect_uri", e))?;
    }
    Ok(uris)
}

fn registered_grant_types(metadata: &Map<String, Value>) -> Result<Vec<String>, Invalid> {
    let grant_types = strings(metadata.get("grant_types"), "grant_types")
        .map_err(invalid)?
        .unwrap_or_else(|| vec!["authorization_code".into(), "refresh_token".into()]);
    if let Some(bad) = grant_types
        .iter()
        .find(|g| !matches!(g.as_str(), "authorization_code" | "refresh_token"))
    {
        return Err(invalid(format!(
            "grant type `{bad}` is not supported: authorization_code and refresh_token are"
        )));
    }
    let response_types =
        strings(metadata.get("response_types"), "response_types").map_err(invalid)?;
    if response_types.is_some_and(|types| types.iter().any(|t| t != "code")) {
        return Err(invalid("only the `code` response type is supported".into()));
    }
    Ok(grant_types)
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
        Err((code, description)) => return registration_error(code, description),
    };
    match store_registration(&app, registration).await {
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

async fn store_registration(
    app: &AppState,
    registration: Registration,
) -> Result<Value, StoreError> {
    let id = format!("grc_{}", signin::random_hex(16)?);
    let secret = match registration.method {
        AuthMethod::None => None,
        _ => Some(format!("grcs_{}", signin::random_hex(32)?)),
    };
    let now = app.clock.now();
    let mut metadata = registration.extra;
    metadata.insert("client_id".into(), Value::from(id.clone()));
    metadata.insert(
        "client_id_issued_at".into(),
        Value::from(now.unix_millis() / 1000),
    );
    metadata.insert("client_name".into(), Value::from(registration.name));
    metadata.insert("redirect_uris".into(), json!(registration.redirect_uris));
    metadata.insert("grant_types".into(), json!(registration.grant_types));
    metadata.insert("response_types".into(), json!(["code"]));
    metadata.insert(
        "token_endpoint_auth_method".into(),
        Value::from(registration.method.as_str()),
    );
    if let Some(scope) = registration.scope {
        metadata.insert("scope".into(), Value::from(scope));
    }
    app.store
        .insert_oauth_client(OAuthClientRecord {
            id,
            secret_hash: secret.as_deref().map(hash_token),
            metadata: Value::Object(metadata.clone()),
            created_at: now,
            used_at: None,
        })
        .await?;
    if let Some(secret) = secret {
        metadata.insert("client_secret".into(), Value::from(secret));
        metadata.insert("client_secret_expires_at".into(), Value::from(0));
    }
    Ok(Value::Object(metadata))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_uris_must_be_https_or_loopback_http() {
        for good in [
            "https://claude.ai/api/mcp/auth_callback",
            "http://127.0.0.1:33418/callback",
            "http://[::1]/cb",
            "http://localhost:8080/cb?x=1",
        ] {
            assert!(check_redirect_uri(good).is_ok(), "{good}");
        }
        for bad in [
            "http://example.com/cb",
            "https://claude.ai/cb#frag",
            "javascript:alert(1)",
            "/relative",
            "https://user:pw@example.com/cb",
            "http://127.0.0.1.evil.example/cb",
        ] {
            assert!(check_redirect_uri(bad).is_err(), "{bad}");
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_REDIRECT_URI_CHARS));
        assert!(check_redirect_uri(&long).is_err());
    }

    #[test]
    fn loopback_redirects_match_on_any_port_others_exactly() {
        assert!(redirect_matches(
            "http://127.0.0.1/cb",
            "http://127.0.0.1:5555/cb"
        ));
        assert!(redirect_matches(
            "http://127.0.0.1:1/cb",
            "http://127.0.0.1:2/cb"
        ));
        assert!(!redirect_matches(
            "http://127.0.0.1/cb",
            "http://127.0.0.1:5555/other"
        ));
        assert!(!redirect_matches(
            "http://127.0.0.1/cb",
            "http://localhost:5555/cb"
        ));
        assert!(!redirect_matches(
            "https://a.example/cb",
            "https://a.example:444/cb"
        ));
        assert!(!redirect_matches(
            "https://a.example/cb",
            "https://a.example/cb/"
        ));
        assert!(redirect_matches(
            "https://a.example/cb",
            "https://a.example/cb"
        ));
    }

    #[test]
    fn basic_credentials_are_decoded_and_must_agree_with_the_body() {
        let mut headers = HeaderMap::new();
        let encoded = base64::engine::general_purpose::STANDARD.encode("grc_1:s%3Acret");
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {encoded}")).expect("header"),
        );
        let got = presented(&headers, &Map::new()).expect("decoded");
        assert_eq!(got.client_id.as_deref(), Some("grc_1"));
        assert_eq!(got.client_secret.as_deref(), Some("s:cret"));
        let mut form = Map::new();
        form.insert("client_id".into(), Value::from("grc_2"));
        assert!(presented(&headers, &form).is_err());
    }
}
