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

use super::clients::{Client, ClientError, check_redirect_uri, client_name};
use crate::AppState;

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

/// The client the document at `url` describes, from the cache or fetched now.
pub async fn client(app: &AppState, url: &str) -> Result<Client, ClientError> {
    let now = app.clock.now();
    if let Some(client) = app.oauth.documents.get(url, now) {
        return Ok(client);
    }
    let (client, freshness) = fetch(url, app.config.dev)
        .await
        .map_err(|e| ClientError::Unknown(format!("the client metadata document {url}: {e}")))?;
    if !freshness.is_zero() {
        app.oauth
            .documents
            .put(url, client.clone(), now.saturating_add(freshness), now);
    }
    Ok(client)
}

async fn fetch(url: &str, dev: bool) -> Result<(Client, Duration), String> {
    let parsed = Url::parse(url).map_err(|e| format!("is not a URL: {e}"))?;
    if parsed.fragment().is_some() || !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("may have no fragment and no credentials".into());
    }
    let host = parsed.host_str().ok_or("has no host")?.to_owned();
    let port = parsed.port_or_known_default().ok_or("has no port")?;
    let address = resolve(&host, port, dev).await?;
    let builder = graphrelay_net::client_builder()
        .map_err(|e| e.to_string())?
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(FETCH_TIMEOUT)
        .resolve(host.trim_start_matches('[').trim_end_matches(']'), address);
    let http = graphrelay_net::build(builder).map_err(|e| e.to_string())?;
    let mut response = http
        .get(parsed.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| format!("cannot be fetched: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("answered HTTP {}", response.status()));
    }
    let freshness = freshness(response.headers().get(reqwest::header::CACHE_CONTROL));
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("could not be read: {e}"))?
    {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(format!("is larger than {MAX_DOCUMENT_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((document_client(url, &body)?, freshness))
}

/// The one address the fetch connects to: resolved once and pinned, so a second lookup cannot
/// point the connection somewhere internal.
async fn resolve(host: &str, port: u16, dev: bool) -> Result<SocketAddr, String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((bare, port))
        .await
        .map_err(|e| format!("host {host} cannot be resolved: {e}"))?
        .collect();
    let first = addresses
        .first()
        .copied()
        .ok_or_else(|| format!("host {host} has no address"))?;
    if !dev && let Some(internal) = addresses.iter().find(|a| is_internal(a.ip())) {
        return Err(format!(
            "host {host} resolves to {}, a loopback, private or link-local address, which is refused (relay serve --dev allows it)",
            internal.ip()
        ));
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
fn document_client(url: &str, body: &[u8]) -> Result<Client, String> {
    let document: Value = serde_json::from_slice(body).map_err(|e| format!("is not JSON: {e}"))?;
    if document.get("client_id").and_then(Value::as_str) != Some(url) {
        return Err("names a different client_id than its own URL".into());
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
        return Err("lists no redirect_uris".into());
    }
    for uri in &uris {
        check_redirect_uri(uri)?;
    }
    match document
        .get("token_endpoint_auth_method")
        .and_then(Value::as_str)
    {
        None | Some("none") => {}
        Some(other) => {
            return Err(format!(
                "asks for token_endpoint_auth_method `{other}`; a document client authenticates with `none` (PKCE)"
            ));
        }
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
