//! OAuth clients: registration (RFC 7591) as the service checks and keeps it, client ID
//! metadata documents, redirect URI rules, and client authentication at the token and
//! revocation endpoints.

use std::net::IpAddr;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::cimd::{self, DocumentCache, DocumentError};
use super::metadata::{
    Client, MAX_REDIRECT_URI_CHARS, UNNAMED_CLIENT, check_redirect_uri, client_name,
};
use super::{UNUSED_CLIENT_TTL, same_secret};
use crate::auth::{Scope, hash_token, random_hex};
use crate::store::{OAuthClientRecord, Store, StoreError};
use relay_protocol::clock::Clock;

/// The client authentication methods of the token and revocation endpoints.
pub const AUTH_METHODS: [&str; 3] = ["none", "client_secret_post", "client_secret_basic"];
/// Most redirect URIs a client may register.
pub const MAX_REDIRECT_URIS: usize = 10;
/// Largest registration request.
pub const MAX_REGISTRATION_BYTES: usize = 64 * 1024;

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

/// What looking clients up uses: the store, the clock, whether documents may live on
/// internal addresses (`--dev`), and the cache of fetched documents. Cheap to clone (every
/// clone shares the cache).
#[derive(Clone)]
pub struct Clients {
    /// Durable state.
    pub store: Arc<dyn Store>,
    /// The only source of time.
    pub clock: Arc<dyn Clock>,
    /// Development mode: client ID metadata documents may live on loopback or private
    /// addresses, and on plain http.
    pub dev: bool,
    documents: Arc<DocumentCache>,
}

impl Clients {
    /// Client lookups over `store` and `clock`, with an empty document cache.
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, dev: bool) -> Self {
        Clients {
            store,
            clock,
            dev,
            documents: Arc::default(),
        }
    }
}

/// Why a client could not be looked up.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No registration has this id, or it expired unused.
    #[error(
        "no client is registered as `{client_id}` (an unused registration expires after a day): register again"
    )]
    Unregistered {
        /// The id asked for.
        client_id: String,
    },
    /// The client's metadata document could not be used.
    #[error("the client metadata document {url}: {source}")]
    Document {
        /// The document's URL (the client's id).
        url: String,
        /// What was wrong with it (shared by the requests that waited for one fetch).
        source: Arc<DocumentError>,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The client `client_id` names, if it is known and usable; `requester` is the client address
/// asking (a metadata document's fetches are limited per address).
pub async fn client(
    clients: &Clients,
    client_id: &str,
    requester: Option<IpAddr>,
) -> Result<Client, ClientError> {
    if cimd::is_document_url(client_id, clients.dev) {
        let now = clients.clock.now();
        return cimd::client(&clients.documents, now, clients.dev, client_id, requester)
            .await
            .map_err(|source| ClientError::Document {
                url: client_id.to_owned(),
                source,
            });
    }
    let record = clients
        .store
        .oauth_client(client_id)
        .await?
        .filter(|record| {
            record.used_at.is_some()
                || record.created_at > clients.clock.now().saturating_sub(UNUSED_CLIENT_TTL)
        })
        .ok_or_else(|| ClientError::Unregistered {
            client_id: client_id.to_owned(),
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

/// Why a client's authentication at the token or revocation endpoint failed (the RFC 6749
/// `invalid_client` description).
#[derive(Debug, thiserror::Error)]
pub enum ClientAuthError {
    /// No `client_id` in the body or HTTP Basic.
    #[error("client_id is missing (in the body, or HTTP Basic for a confidential client)")]
    MissingId,
    /// The client is unknown or unusable.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A confidential client sent the wrong secret.
    #[error("the client secret is wrong")]
    WrongSecret,
    /// A confidential client sent no secret.
    #[error("this client is confidential: send its client_secret")]
    MissingSecret,
}

/// Authenticates the client of a token or revocation request from the client address
/// `requester`.
pub async fn authenticate(
    clients: &Clients,
    presented: &Presented,
    requester: Option<IpAddr>,
) -> Result<Client, ClientAuthError> {
    let id = presented
        .client_id
        .as_deref()
        .ok_or(ClientAuthError::MissingId)?;
    let client = client(clients, id, requester).await?;
    match (&client.secret_hash, &presented.client_secret) {
        (None, _) => Ok(client),
        (Some(expected), Some(secret)) if same_secret(expected, &hash_token(secret)) => Ok(client),
        (Some(_), Some(_)) => Err(ClientAuthError::WrongSecret),
        (Some(_), None) => Err(ClientAuthError::MissingSecret),
    }
}

/// Why a registration is refused: the RFC 7591 error code and description.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    /// The metadata is malformed or asks for what is not offered (`invalid_client_metadata`).
    #[error("{0}")]
    Metadata(String),
    /// The redirect URIs are missing, too many, or one breaks the rules
    /// (`invalid_redirect_uri`).
    #[error("{0}")]
    RedirectUri(String),
}

impl RegistrationError {
    /// The RFC 7591 `error` code.
    pub fn code(&self) -> &'static str {
        match self {
            RegistrationError::Metadata(_) => "invalid_client_metadata",
            RegistrationError::RedirectUri(_) => "invalid_redirect_uri",
        }
    }
}

/// What a registration request asks for, checked.
pub struct Registration {
    redirect_uris: Vec<String>,
    name: String,
    method: AuthMethod,
    grant_types: Vec<String>,
    scope: Option<String>,
    extra: Map<String, Value>,
}

fn strings(value: Option<&Value>, field: &str) -> Result<Option<Vec<String>>, RegistrationError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let not_strings = || invalid(format!("{field} must be an array of strings"));
    let array = value.as_array().ok_or_else(not_strings)?;
    array
        .iter()
        .map(|v| v.as_str().map(str::to_owned).ok_or_else(not_strings))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn invalid(text: String) -> RegistrationError {
    RegistrationError::Metadata(text)
}

/// The registration `body` asks for, if it keeps the rules.
pub fn parse_registration(body: &[u8]) -> Result<Registration, RegistrationError> {
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

fn registered_redirect_uris(
    metadata: &Map<String, Value>,
) -> Result<Vec<String>, RegistrationError> {
    let uris = strings(metadata.get("redirect_uris"), "redirect_uris")?.unwrap_or_default();
    if uris.is_empty() || uris.len() > MAX_REDIRECT_URIS {
        return Err(RegistrationError::RedirectUri(format!(
            "redirect_uris must list 1 to {MAX_REDIRECT_URIS} URIs"
        )));
    }
    for uri in &uris {
        check_redirect_uri(uri).map_err(|e| RegistrationError::RedirectUri(e.to_string()))?;
    }
    Ok(uris)
}

fn registered_grant_types(metadata: &Map<String, Value>) -> Result<Vec<String>, RegistrationError> {
    let grant_types = strings(metadata.get("grant_types"), "grant_types")?
        .unwrap_or_else(|| vec!["authorization_code".into(), "refresh_token".into()]);
    if let Some(bad) = grant_types
        .iter()
        .find(|g| !matches!(g.as_str(), "authorization_code" | "refresh_token"))
    {
        return Err(invalid(format!(
            "grant type `{bad}` is not supported: authorization_code and refresh_token are"
        )));
    }
    let response_types = strings(metadata.get("response_types"), "response_types")?;
    if response_types.is_some_and(|types| types.iter().any(|t| t != "code")) {
        return Err(invalid("only the `code` response type is supported".into()));
    }
    Ok(grant_types)
}

/// Why a checked registration could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// The system gave no randomness for the client's id or secret.
    #[error("the system has no randomness for a client id: {0}")]
    Randomness(#[from] getrandom::Error),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Keeps a checked registration: mints the client's id (and secret, for a confidential
/// client) and answers the RFC 7591 registration response.
pub async fn store_registration(
    clients: &Clients,
    registration: Registration,
) -> Result<Value, RegisterError> {
    let id = format!("grc_{}", random_hex(16)?);
    let secret = match registration.method {
        AuthMethod::None => None,
        _ => Some(format!("grcs_{}", random_hex(32)?)),
    };
    let now = clients.clock.now();
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
    clients
        .store
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
