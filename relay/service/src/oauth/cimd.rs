//! Client ID metadata documents: a `client_id` that is an https URL names a JSON document the
//! client serves about itself. The service fetches it (5 s, at most 64 KiB, no redirects, no
//! proxy), refuses documents on loopback, private, link-local or otherwise special addresses
//! unless `--dev`, and caches it as long as its `Cache-Control` allows.
//!
//! Anyone may send `GET /oauth/authorize` with any URL, so a fetch is work a stranger makes the
//! service do to a third party (issue 44: 60 concurrent requests caused 62 fetches). So a
//! failure is remembered too ([`FAILURE_FRESHNESS`]), concurrent requests for one URL share one
//! fetch, and one client address may cause at most [`FETCHES_PER_ADDRESS`] fetches a
//! [`FETCH_WINDOW`].

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relay_protocol::clock::Timestamp;
use serde_json::Value;
use tokio::sync::watch;
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
/// How long a document that could not be fetched or used is answered from memory.
pub const FAILURE_FRESHNESS: Duration = Duration::from_secs(60);
/// Documents (and failures) kept at most.
const MAX_CACHED: usize = 1000;
/// Fetches one client address may cause per [`FETCH_WINDOW`] (answers from the cache and
/// requests that join a fetch under way do not count).
pub const FETCHES_PER_ADDRESS: u32 = 10;
/// The window [`FETCHES_PER_ADDRESS`] counts in.
pub const FETCH_WINDOW: Duration = Duration::from_secs(60);
/// Client addresses whose fetches are counted at most (past it, finished windows are dropped).
const MAX_COUNTED_ADDRESSES: usize = 10_000;

/// Whether `client_id` is a metadata document URL (https; plain http too with `--dev`).
pub fn is_document_url(client_id: &str, dev: bool) -> bool {
    client_id.starts_with("https://") || (dev && client_id.starts_with("http://"))
}

/// What a fetch of one URL came to: the client, or why there is none (shared by every request
/// that waited for it, hence the `Arc`).
type Outcome = Result<Client, Arc<DocumentError>>;

/// Fetched documents and failures by URL, the fetches under way, and each client address's
/// recent fetches.
#[derive(Debug, Default)]
pub struct DocumentCache {
    entries: Mutex<HashMap<String, (Outcome, Timestamp)>>,
    fetching: Mutex<HashMap<String, watch::Receiver<Option<Outcome>>>>,
    fetches: Mutex<HashMap<IpAddr, (Timestamp, u32)>>,
}

/// What a request for a document does: answer from the cache, wait for the fetch under way,
/// fetch it itself, or nothing (its address has caused too many fetches).
enum Joined {
    Cached(Outcome),
    Follow(watch::Receiver<Option<Outcome>>),
    Lead(
        watch::Sender<Option<Outcome>>,
        watch::Receiver<Option<Outcome>>,
    ),
    Refused(Duration),
}

impl DocumentCache {
    fn get(&self, url: &str, now: Timestamp) -> Option<Outcome> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(url)
            .filter(|(_, until)| *until > now)
            .map(|(outcome, _)| outcome.clone())
    }

    fn put(&self, url: &str, outcome: Outcome, until: Timestamp, now: Timestamp) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= MAX_CACHED {
            entries.retain(|_, (_, until)| *until > now);
            if entries.len() >= MAX_CACHED {
                entries.clear();
            }
        }
        entries.insert(url.to_owned(), (outcome, until));
    }

    /// The cached outcome for `url`, else the fetch under way that every concurrent request
    /// shares, else a new fetch if `requester` may cause one. Looked up under the lock that a
    /// finished fetch leaves under, after its outcome is cached, so no request starts a second
    /// fetch in between.
    fn join(&self, url: &str, now: Timestamp, requester: Option<IpAddr>) -> Joined {
        let mut fetching = self.fetching.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(outcome) = self.get(url, now) {
            return Joined::Cached(outcome);
        }
        if let Some(under_way) = fetching.get(url) {
            return Joined::Follow(under_way.clone());
        }
        if let Err(wait) = self.count_fetch(requester, now) {
            return Joined::Refused(wait);
        }
        let (sender, receiver) = watch::channel(None);
        fetching.insert(url.to_owned(), receiver.clone());
        Joined::Lead(sender, receiver)
    }

    /// The fetch of `url` whose channel `mine` is has ended (or was abandoned: its requester
    /// hung up, and its followers start again).
    fn leave(&self, url: &str, mine: &watch::Receiver<Option<Outcome>>) {
        let mut fetching = self.fetching.lock().unwrap_or_else(|p| p.into_inner());
        if fetching.get(url).is_some_and(|r| r.same_channel(mine)) {
            fetching.remove(url);
        }
    }

    /// Counts one fetch for `address` at `now`, or says how long until it may cause another.
    fn count_fetch(&self, address: Option<IpAddr>, now: Timestamp) -> Result<(), Duration> {
        let Some(address) = address else {
            return Ok(());
        };
        let mut fetches = self.fetches.lock().unwrap_or_else(|p| p.into_inner());
        if fetches.len() >= MAX_COUNTED_ADDRESSES {
            fetches.retain(|_, (start, _)| now.saturating_duration_since(*start) < FETCH_WINDOW);
        }
        let (start, count) = fetches.entry(address).or_insert((now, 0));
        if now.saturating_duration_since(*start) >= FETCH_WINDOW {
            (*start, *count) = (now, 0);
        }
        if *count >= FETCHES_PER_ADDRESS {
            return Err(FETCH_WINDOW.saturating_sub(now.saturating_duration_since(*start)));
        }
        *count += 1;
        Ok(())
    }
}

/// Whether an address is one a public document may not live on: not globally reachable
/// unicast (the special-purpose ranges of RFC 6890's registries), or one that tunnels to an
/// IPv4 address this refuses.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => is_internal_v6(v6),
    }
}

fn is_internal_v4(v4: Ipv4Addr) -> bool {
    let [a, b, c, _] = v4.octets();
    v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_documentation()
        // 0.0.0.0/8 "this network"; 100.64.0.0/10 shared address space (carrier-grade NAT).
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        // 192.0.0.0/24 IETF protocol assignments; 192.88.99.0/24 the 6to4 relay anycast.
        || (a, b, c) == (192, 0, 0)
        || (a, b, c) == (192, 88, 99)
        // 198.18.0.0/15 benchmarking.
        || (a == 198 && (b & 0xfe) == 18)
        // 224.0.0.0/4 multicast and 240.0.0.0/4 reserved, the broadcast address included.
        || a >= 224
}

fn is_internal_v6(v6: Ipv6Addr) -> bool {
    let segments = v6.segments();
    let first = segments[0];
    if let Some(v4) = v6.to_ipv4_mapped() {
        return is_internal_v4(v4);
    }
    // 64:ff9b::/96, NAT64's well-known prefix: where DNS64 gives IPv4-only hosts an IPv6
    // address, a public document is reached through it, so only the IPv4 address it carries
    // decides.
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [_, _, _, _, _, _, high, low] = segments;
        return is_internal_v4(Ipv4Addr::from((u32::from(high) << 16) | u32::from(low)));
    }
    v6.is_loopback()
        || v6.is_unspecified()
        || v6.is_multicast()
        // ::/96, IPv4-compatible addresses (deprecated, and they tunnel to any IPv4 address).
        || segments[..6] == [0; 6]
        // 64:ff9b:1::/48 local-use NAT64.
        || segments[..3] == [0x64, 0xff9b, 1]
        // 100::/64 discard-only.
        || segments[..4] == [0x100, 0, 0, 0]
        // 2001::/23 IETF protocol assignments (Teredo's 2001::/32 among them) and
        // 2001:db8::/32 documentation.
        || (first == 0x2001 && segments[1] < 0x200)
        || (first == 0x2001 && segments[1] == 0xdb8)
        // 2002::/16 6to4, which tunnels to the IPv4 address it carries.
        || first == 0x2002
        // fc00::/7 unique local, fe80::/10 link-local, fec0::/10 site-local (deprecated).
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        || (first & 0xffc0) == 0xfec0
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
    /// The requesting address has caused [`FETCHES_PER_ADDRESS`] fetches this window.
    #[error(
        "is not fetched now: this address asked for {FETCHES_PER_ADDRESS} client metadata documents within {} s; retry in {retry_after_secs} s",
        FETCH_WINDOW.as_secs()
    )]
    TooManyFetches {
        /// When the address may cause a fetch again, in whole seconds.
        retry_after_secs: u64,
    },
}

/// The client the document at `url` describes, from `documents` or fetched at `now` (and kept
/// there as long as it may be, a failure for [`FAILURE_FRESHNESS`]); `dev` lets it live on
/// internal addresses; `requester` is the client address that asks, whose fetches count.
pub async fn client(
    documents: &DocumentCache,
    now: Timestamp,
    dev: bool,
    url: &str,
    requester: Option<IpAddr>,
) -> Result<Client, Arc<DocumentError>> {
    loop {
        match documents.join(url, now, requester) {
            Joined::Cached(outcome) => return outcome,
            Joined::Refused(wait) => {
                return Err(Arc::new(DocumentError::TooManyFetches {
                    retry_after_secs: wait.as_secs().max(1),
                }));
            }
            Joined::Follow(mut under_way) => {
                // An error here is a leader that hung up before its fetch ended: start again.
                if let Ok(outcome) = under_way.wait_for(Option::is_some).await
                    && let Some(outcome) = outcome.clone()
                {
                    return outcome;
                }
            }
            Joined::Lead(sender, receiver) => {
                let _leaving = Leading {
                    documents,
                    url,
                    receiver,
                };
                let (outcome, freshness) = match fetch(url, dev).await {
                    Ok((client, freshness)) => (Ok(client), freshness),
                    Err(error) => (Err(Arc::new(error)), FAILURE_FRESHNESS),
                };
                if !freshness.is_zero() {
                    documents.put(url, outcome.clone(), now.saturating_add(freshness), now);
                }
                sender.send_replace(Some(outcome.clone()));
                return outcome;
            }
        }
    }
}

/// A fetch under way: it leaves the table of fetches when it ends, however it ends (after its
/// outcome is cached), so a request whose client hung up does not strand its followers.
struct Leading<'a> {
    documents: &'a DocumentCache,
    url: &'a str,
    receiver: watch::Receiver<Option<Outcome>>,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.documents.leave(self.url, &self.receiver);
    }
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
            // The second red team's ranges (issue 44) and their neighbours.
            "64:ff9b::7f00:1",
            "64:ff9b::a00:1",
            "64:ff9b:1::1",
            "::7f00:1",
            "::8.8.8.8",
            "2002:7f00:1::1",
            "2002:808:808::1",
            "198.18.0.1",
            "198.19.255.255",
            "240.0.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "192.0.0.8",
            "192.88.99.1",
            "2001:db8::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "100::1",
            "fec0::1",
        ] {
            assert!(is_internal(internal.parse().expect("ip")), "{internal}");
        }
        for public in [
            "93.184.216.34",
            "2606:4700::1111",
            "8.8.8.8",
            "64:ff9b::808:808",
            "198.20.0.1",
            "198.17.255.255",
            "223.255.255.255",
            "2001:4860:4860::8888",
        ] {
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
