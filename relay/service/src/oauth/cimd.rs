//! Client ID metadata documents: a `client_id` that is an https URL names a JSON document the
//! client serves about itself. The service fetches it (5 s, at most 64 KiB, no redirects, no
//! proxy), refuses documents on loopback, private or link-local addresses unless `--dev`, and
//! caches it as long as its `Cache-Control` allows.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use relay_protocol::clock::Timestamp;
use serde_json::Value;
use url::Url;

use super::metadata::{Client, RedirectUriError, check_redirect_uri, client_name};

/// How long a fetch may take, connection included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest document read.
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;
/// How long a document without caching headers is kept.
const DEFAULT_FRESHNESS: Duration = Duration::from_secs(300);
/// The longest a document is kept, whatever it says.
const MAX_FRESHNESS: Duration = Duration::from_secs(24 * 3600);
/// Documents kept at most.
const MAX_CACHED: usize = 1000;

/// Whether `client_id` is a metadata document URL (https; plain http too with `--dev`).
pub fn is_document_url(client_id: &str, dev: bool) -> bool {
    client_id.starts_with("https://") || (dev && client_id.starts_with("http://"))
}

/// Fetched documents, by URL.
#[derive(Debug, Default)]
pub struct DocumentCache {
    entries: Mutex<HashMap<String, (Client, Timestamp)>>,
}

impl DocumentCache {
    fn get(&self, url: &str, now: Timestamp) -> Option<Client> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(url)
            .filter(|(_, until)| *until > now)
            .map(|(client, _)| client.clone())
    }

    fn put(&self, url: &str, client: Client, until: Timestamp, now: Timestamp) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= MAX_CACHED {
            entries.retain(|_, (_, until)| *until > now);
            if entries.len() >= MAX_CACHED {
                entries.clear();
            }
        }
        entries.insert(url.to_owned(), (client, until));
    }
}

/// Whether an address is one a public document may not live on.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || (a == 100 && (64..128).contains(&b))
                || a == 0
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
        }
    }
}

/// Why a client ID metadata document cannot be used; each text follows the document's URL
/// in the refusal ("the client metadata document URL: ...").
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    /// The client id is not a URL.
    #[error("is not a URL: {0}")]
    NotUrl(#[from] url::ParseError),
    /// The URL has a fragment or credentials.
    #[error("may have no fragment and no credentials")]
    FragmentOrCredentials,
    /// The URL has no host.
    #[error("has no host")]
    NoHost,
    /// The URL has no port and its scheme none by default.
    #[error("has no port")]
    NoPort,
    /// The host name does not resolve.
    #[error("host {host} cannot be resolved: {source}")]
    Unresolved {
        /// The host.
        host: String,
        /// The resolver's error.
        source: std::io::Error,
    },
    /// The host name resolves to nothing.
    #[error("host {0} has no address")]
    NoAddress(String),
    /// The host resolves to an internal address and the service is not in `--dev` mode.
    #[error(
        "host {host} resolves to {address}, a loopback, private or link-local address, which is refused (relay serve --dev allows it)"
    )]
    Internal {
        /// The host.
        host: String,
        /// The internal address it resolves to.
        address: IpAddr,
    },
    /// No HTTP client could be built (the TLS roots are unusable).
    #[error("cannot be fetched: {0}")]
    Client(#[from] graphrelay_net::NetError),
    /// The request failed (connection refused, timeout, TLS).
    #[error("cannot be fetched: {0}")]
    Fetch(reqwest::Error),
    /// The server answered something other than success.
    #[error("answered HTTP {0}")]
    Status(reqwest::StatusCode),
    /// The body broke off.
    #[error("could not be read: {0}")]
    Read(reqwest::Error),
    /// The body is larger than [`MAX_DOCUMENT_BYTES`].
    #[error("is larger than {MAX_DOCUMENT_BYTES} bytes")]
    TooLarge,
    /// The body is not JSON.
    #[error("is not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    /// The document's `client_id` is not its own URL.
    #[error("names a different client_id than its own URL")]
    OtherClientId,
    /// The document lists no redirect URIs.
    #[error("lists no redirect_uris")]
    NoRedirectUris,
    /// A redirect URI breaks the rules.
    #[error("{0}")]
    RedirectUri(#[from] RedirectUriError),
    /// The document asks to authenticate with a secret.
    #[error(
        "asks for token_endpoint_auth_method `{0}`; a document client authenticates with `none` (PKCE)"
    )]
    AuthMethod(String),
}

/// The client the document at `url` describes, from `documents` or fetched at `now` (and kept
/// there as long as it may be); `dev` lets it live on internal addresses.
pub async fn client(
    documents: &DocumentCache,
    now: Timestamp,
    dev: bool,
    url: &str,
) -> Result<Client, DocumentError> {
    if let Some(client) = documents.get(url, now) {
        return Ok(client);
    }
    let (client, freshness) = fetch(url, dev).await?;
    if !freshness.is_zero() {
        documents.put(url, client.clone(), now.saturating_add(freshness), now);
    }
    Ok(client)
}

async fn fetch(url: &str, dev: bool) -> Result<(Client, Duration), DocumentError> {
    let parsed = Url::parse(url)?;
    if parsed.fragment().is_some() || !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(DocumentError::FragmentOrCredentials);
    }
    let host = parsed.host_str().ok_or(DocumentError::NoHost)?.to_owned();
    let port = parsed
        .port_or_known_default()
        .ok_or(DocumentError::NoPort)?;
    let address = resolve(&host, port, dev).await?;
    let builder = graphrelay_net::client_builder()?
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(FETCH_TIMEOUT)
        .resolve(host.trim_start_matches('[').trim_end_matches(']'), address);
    let http = graphrelay_net::build(builder)?;
    let mut response = http
        .get(parsed.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(DocumentError::Fetch)?;
    if !response.status().is_success() {
        return Err(DocumentError::Status(response.status()));
    }
    let freshness = freshness(response.headers().get(reqwest::header::CACHE_CONTROL));
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(DocumentError::Read)? {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(DocumentError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok((document_client(url, &body)?, freshness))
}

/// The one address the fetch connects to: resolved once and pinned, so a second lookup cannot
/// point the connection somewhere internal.
async fn resolve(host: &str, port: u16, dev: bool) -> Result<SocketAddr, DocumentError> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((bare, port))
        .await
        .map_err(|source| DocumentError::Unresolved {
            host: host.to_owned(),
            source,
        })?
        .collect();
    let first = addresses
        .first()
        .copied()
        .ok_or_else(|| DocumentError::NoAddress(host.to_owned()))?;
    if !dev && let Some(internal) = addresses.iter().find(|a| is_internal(a.ip())) {
        return Err(DocumentError::Internal {
            host: host.to_owned(),
            address: internal.ip(),
        });
    }
    Ok(first)
}

/// How long `Cache-Control` lets the document be kept.
fn freshness(header: Option<&reqwest::header::HeaderValue>) -> Duration {
    let Some(value) = header.and_then(|v| v.to_str().ok()) else {
        return DEFAULT_FRESHNESS;
    };
    let mut max_age = None;
    for directive in value.split(',').map(str::trim) {
        let lower = directive.to_ascii_lowercase();
        if lower == "no-store" || lower == "no-cache" || lower == "private" {
            return Duration::ZERO;
        }
        if let Some(seconds) = lower.strip_prefix("max-age=") {
            max_age = seconds.trim_matches('"').parse::<u64>().ok();
        }
    }
    max_age.map_or(DEFAULT_FRESHNESS, |s| {
        Duration::from_secs(s).min(MAX_FRESHNESS)
    })
}

/// The client a fetched document describes; its `client_id` must be its own URL.
fn document_client(url: &str, body: &[u8]) -> Result<Client, DocumentError> {
    let document: Value = serde_json::from_slice(body)?;
    if document.get("client_id").and_then(Value::as_str) != Some(url) {
        return Err(DocumentError::OtherClientId);
    }
    let uris: Vec<String> = document
        .get("redirect_uris")
        .and_then(Value::as_array)
        .map(|uris| {
            uris.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if uris.is_empty() {
        return Err(DocumentError::NoRedirectUris);
    }
    for uri in &uris {
        check_redirect_uri(uri)?;
    }
    match document
        .get("token_endpoint_auth_method")
        .and_then(Value::as_str)
    {
        None | Some("none") => {}
        Some(other) => return Err(DocumentError::AuthMethod(other.to_owned())),
    }
    let name = client_name(document.get("client_name"));
    Ok(Client {
        id: url.to_owned(),
        name,
        redirect_uris: uris,
        secret_hash: None,
        registered: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_recognised() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::",
        ] {
            assert!(is_internal(internal.parse().expect("ip")), "{internal}");
        }
        for public in ["93.184.216.34", "2606:4700::1111", "8.8.8.8"] {
            assert!(!is_internal(public.parse().expect("ip")), "{public}");
        }
    }

    #[test]
    fn cache_control_sets_the_freshness() {
        let header = |v: &'static str| reqwest::header::HeaderValue::from_static(v);
        assert_eq!(freshness(None), DEFAULT_FRESHNESS);
        assert_eq!(
            freshness(Some(&header("max-age=60"))),
            Duration::from_secs(60)
        );
        assert_eq!(
            freshness(Some(&header("public, max-age=999999"))),
            MAX_FRESHNESS
        );
        assert_eq!(freshness(Some(&header("no-store"))), Duration::ZERO);
    }

    #[test]
    fn a_document_must_name_itself_and_list_good_redirects() {
        let url = "https://app.example/client.json";
        let good = br#"{"client_id":"https://app.example/client.json","client_name":"App","redirect_uris":["https://app.example/cb"]}"#;
        let client = document_client(url, good).expect("valid");
        assert_eq!(client.name, "App");
        assert!(!client.registered);
        let other = br#"{"client_id":"https://evil.example/c.json","redirect_uris":["https://app.example/cb"]}"#;
        assert!(document_client(url, other).is_err());
        let bad_uri = br#"{"client_id":"https://app.example/client.json","redirect_uris":["http://evil.example/cb"]}"#;
        assert!(document_client(url, bad_uri).is_err());
        let secret = br#"{"client_id":"https://app.example/client.json","redirect_uris":["https://app.example/cb"],"token_endpoint_auth_method":"client_secret_basic"}"#;
        assert!(document_client(url, secret).is_err());
    }
}
