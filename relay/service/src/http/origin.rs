//! Where requests may come from (SPEC §6): every route of [`crate::router`] refuses a request
//! whose `Origin` is not the relay's own (its public URL's origin) or an operator-allowed one
//! (403), and a `Host` the relay does not serve (421), so a web page cannot drive a relay on
//! loopback by DNS rebinding.
//!
//! - The relay's own origin is its public URL's `scheme://host[:port]` (default ports dropped,
//!   host compared case-insensitively). A relay whose public URL is on loopback (or that has
//!   none, as in-process) also takes any `http` loopback origin: pages of other local servers
//!   are local software, and it is what MCP clients on loopback send.
//! - The hosts served are the public URL's host and port and, on a loopback listener, the
//!   loopback names on any port (a TLS proxy on loopback may front it; a rebinding page can
//!   only make a browser send its own, non-loopback name). A request without any Host passes (HTTP/1.0,
//!   in-process calls); it cannot have come from a browser.
//! - `X-Forwarded-*` count only from a trusted proxy ([`crate::http::proxy`]: any peer with
//!   [`ServiceConfig::trust_proxy`], a peer in [`ServiceConfig::trusted_proxies`]): then
//!   `X-Forwarded-Host` stands for Host, `X-Forwarded-Proto` for the scheme and
//!   `X-Forwarded-For` (its right-most address, the one the proxy appended) for the client
//!   ([`client_address`]).

use std::fmt;
use std::future::Ready;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::future::Either;
use relay_protocol::ErrorBody;
use serde_json::json;
use tower::{Layer, Service};

use crate::http::listener::LocalAddr;
use crate::http::proxy::TrustedProxies;
use crate::http::{MCP_PATH, ServiceConfig};

/// The longest header value repeated in a refusal; longer ones are cut.
pub const MAX_ECHOED_CHARS: usize = 200;
/// The loopback names a loopback listener answers to (on any port).
pub const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];
/// The longest host name taken (RFC 1035's 253, plus the brackets of an IPv6 literal).
const MAX_HOST_CHARS: usize = 255;

const X_FORWARDED_HOST: &str = "x-forwarded-host";
const X_FORWARDED_PROTO: &str = "x-forwarded-proto";

/// Why a text is not an origin (`--allowed-origin`) or an authority.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OriginError(String);

/// A host and its port as a Host header gives them: a lowercase name, an IPv4 address or a
/// bracketed IPv6 address, and the port if one was written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

impl Authority {
    fn parse(text: &str) -> Result<Authority, OriginError> {
        let bad = |why: &str| OriginError(format!("{why}: {}", echoed(text)));
        let (host, port) = if text.starts_with('[') {
            let end = text
                .find(']')
                .ok_or_else(|| bad("an unclosed [ in the host"))?;
            let (host, rest) = text.split_at(end + 1);
            let inner = &host[1..host.len() - 1];
            if inner.is_empty()
                || !inner
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() || b":.".contains(&b))
            {
                return Err(bad("not an IPv6 address in brackets"));
            }
            let port = match rest {
                "" => None,
                _ => Some(
                    rest.strip_prefix(':')
                        .ok_or_else(|| bad("text after the host"))?,
                ),
            };
            (host, port)
        } else {
            match text.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (text, None),
            }
        };
        if host.is_empty()
            || host.len() > MAX_HOST_CHARS
            || !(host.starts_with('[')
                || host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)))
        {
            return Err(bad("not a host name or address"));
        }
        let port = match port {
            None => None,
            Some(port)
                if !port.is_empty()
                    && port.len() <= 5
                    && port.bytes().all(|b| b.is_ascii_digit()) =>
            {
                Some(
                    port.parse::<u16>()
                        .map_err(|_| bad("the port is past 65535"))?,
                )
            }
            Some(_) => return Err(bad("the port is not a number")),
        };
        Ok(Authority {
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    fn is_loopback(&self) -> bool {
        LOOPBACK_NAMES.contains(&self.host.as_str())
    }
}

/// An origin, normalised: `http` or `https`, a lowercase host, the port (explicit or the
/// scheme's default). Its [`Display`](fmt::Display) leaves a default port out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    secure: bool,
    host: String,
    port: u16,
}

impl Origin {
    /// `text` as an origin: `http(s)://host[:port]`, at most a trailing `/`, nothing else
    /// (no path, query, fragment or user). `null` and every other text are refused.
    pub fn parse(text: &str) -> Result<Origin, OriginError> {
        let (scheme, rest) = text.split_once("://").ok_or_else(|| {
            OriginError(format!(
                "{} is not an origin: write it as http(s)://host[:port], like https://app.example.com",
                echoed(text)
            ))
        })?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if let Some(c) = rest.chars().find(|c| "/?#@".contains(*c)) {
            return Err(OriginError(format!(
                "{} is not an origin: it may not have a path, query, fragment or user ({c:?}); give only http(s)://host[:port]",
                echoed(text)
            )));
        }
        Origin::from_parts(scheme, rest)
    }

    /// The origin of an absolute http(s) URL such as a public URL (its path is dropped).
    pub fn of_url(url: &str) -> Result<Origin, OriginError> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| OriginError(format!("{} is not an absolute URL", echoed(url))))?;
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..end];
        if authority.contains('@') {
            return Err(OriginError("the URL may not carry a user".into()));
        }
        Origin::from_parts(scheme, authority)
    }

    fn from_parts(scheme: &str, authority: &str) -> Result<Origin, OriginError> {
        let secure = match scheme.to_ascii_lowercase().as_str() {
            "http" => false,
            "https" => true,
            other => {
                return Err(OriginError(format!(
                    "the scheme must be http or https, not {}",
                    echoed(other)
                )));
            }
        };
        let authority = Authority::parse(authority)?;
        Ok(Origin {
            secure,
            port: authority.port.unwrap_or(default_port(secure)),
            host: authority.host,
        })
    }

    /// A plain-http origin on a loopback name.
    pub fn is_loopback(&self) -> bool {
        !self.secure && LOOPBACK_NAMES.contains(&self.host.as_str())
    }

    /// Whether `authority` (a Host) names this origin's host and port; a Host without a port
    /// means the default port of `secure`'s scheme.
    fn serves(&self, authority: &Authority, secure: bool) -> bool {
        authority.host == self.host && authority.port.unwrap_or(default_port(secure)) == self.port
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.secure { "https" } else { "http" };
        write!(f, "{scheme}://{}", self.host)?;
        if self.port != default_port(self.secure) {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

fn default_port(secure: bool) -> u16 {
    if secure { 443 } else { 80 }
}

/// `--allowed-origin`: `text` as a normalised origin (see [`Origin::parse`]).
pub fn normalise_origin(text: &str) -> Result<String, OriginError> {
    Origin::parse(text).map(|origin| origin.to_string())
}

/// `text` cut to [`MAX_ECHOED_CHARS`], for a message.
fn echoed(text: &str) -> String {
    match text.char_indices().nth(MAX_ECHOED_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// The first value of a comma-separated header, trimmed.
fn first_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let value = headers.get(name)?.to_str().ok()?;
    let first = value.split(',').next()?.trim();
    (!first.is_empty()).then_some(first)
}

/// The client's address: the connection's peer, or from a trusted proxy the right-most valid
/// address in `X-Forwarded-For` (the one the proxy appended; entries left of it are whatever
/// the client wrote), falling back to the peer.
pub fn client_address(
    config: &ServiceConfig,
    headers: &HeaderMap,
    peer: Option<SocketAddr>,
) -> Option<IpAddr> {
    config.proxies().client(headers, peer)
}

/// What the checks allow, worked out once from the configuration.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The public URL's origin; `None` without a (usable) public URL.
    public: Option<Origin>,
    /// The operator's `--allowed-origin`s.
    allowed: Vec<Origin>,
    proxies: TrustedProxies,
    listen_loopback: bool,
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 403: the `Origin` is neither the relay's nor allowed.
    Origin(String),
    /// 421: the Host is not one the relay serves.
    Host(String),
}

impl Policy {
    /// The policy of `config`. An `allowed_origins` entry that is not an origin is dropped
    /// with a warning (`relay serve` refuses it before this).
    pub fn new(config: &ServiceConfig) -> Policy {
        let public = config.public_url.as_deref().and_then(|url| {
            Origin::of_url(url)
                .inspect_err(
                    |error| tracing::warn!(%error, url, "the public URL has no usable origin"),
                )
                .ok()
        });
        let allowed = config
            .allowed_origins
            .iter()
            .filter_map(|text| {
                Origin::parse(text)
                    .inspect_err(|error| tracing::warn!(%error, "an allowed origin is ignored"))
                    .ok()
            })
            .collect();
        Policy {
            public,
            allowed,
            proxies: config.proxies(),
            listen_loopback: config.listen_loopback,
        }
    }

    /// Whether the request is secure as far as the relay can tell: `X-Forwarded-Proto` behind
    /// a trusted proxy (`forwarded`), else the public URL's scheme (a proxy in front that
    /// passes Host on without a port speaks that scheme to the client).
    fn secure(&self, headers: &HeaderMap, forwarded: bool) -> bool {
        let forwarded = forwarded
            .then(|| first_value(headers, X_FORWARDED_PROTO))
            .flatten();
        match forwarded {
            Some(proto) => proto.eq_ignore_ascii_case("https"),
            None => self.public.as_ref().is_some_and(|public| public.secure),
        }
    }

    /// Whether an origin on loopback is the relay's own: with no public URL, or one on loopback.
    fn loopback_is_own(&self) -> bool {
        self.public.as_ref().is_none_or(Origin::is_loopback)
    }

    /// Checks a request's `Origin` and Host; `local` is the listener's address and `peer` the
    /// connection's when the request came over one.
    pub fn check(
        &self,
        headers: &HeaderMap,
        uri_authority: Option<&str>,
        local: Option<SocketAddr>,
        peer: Option<SocketAddr>,
    ) -> Result<(), Refusal> {
        self.check_origin(headers)?;
        let forwarded = self.proxies.trusts(peer.map(|peer| peer.ip()));
        self.check_host(headers, uri_authority, local, forwarded)
    }

    fn check_origin(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let Some(value) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let text = String::from_utf8_lossy(value.as_bytes());
        if let Ok(origin) = Origin::parse(&text)
            && (self.public.as_ref() == Some(&origin)
                || self.allowed.contains(&origin)
                || (origin.is_loopback() && self.loopback_is_own()))
        {
            return Ok(());
        }
        let own = match &self.public {
            Some(public) => format!("this relay's origin is {public}"),
            None => "this relay takes only loopback origins".to_owned(),
        };
        Err(Refusal::Origin(format!(
            "requests from the origin {} are not allowed ({own}); to let a web page on another origin call this relay, start it with --allowed-origin ORIGIN",
            echoed(&text)
        )))
    }

    fn check_host(
        &self,
        headers: &HeaderMap,
        uri_authority: Option<&str>,
        local: Option<SocketAddr>,
        trusted: bool,
    ) -> Result<(), Refusal> {
        let forwarded = trusted
            .then(|| first_value(headers, X_FORWARDED_HOST))
            .flatten();
        let host = forwarded.or_else(|| {
            headers
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .or(uri_authority)
        });
        let Some(host) = host else {
            return Ok(());
        };
        if let Ok(authority) = Authority::parse(host)
            && self.serves(&authority, self.secure(headers, trusted), local)
        {
            return Ok(());
        }
        let served = match &self.public {
            Some(public) => format!(
                "this relay serves {} (its public URL's host)",
                public
                    .to_string()
                    .split_once("://")
                    .map_or("", |(_, host)| host)
            ),
            None => "this relay serves only loopback names".to_owned(),
        };
        Err(Refusal::Host(format!(
            "the host {} is not served here: {served}; if clients reach it under another name, set --public-url to that address",
            echoed(host)
        )))
    }

    fn serves(&self, authority: &Authority, secure: bool, local: Option<SocketAddr>) -> bool {
        if self
            .public
            .as_ref()
            .is_some_and(|public| public.serves(authority, secure))
        {
            return true;
        }
        if !authority.is_loopback() {
            return false;
        }
        if self.public.is_none() {
            return true;
        }
        // Any port: a loopback name reaches this machine whichever port it names (a TLS proxy
        // on loopback in front, say), and no web page can make a browser send one for a name
        // it rebinds; that needs its own, non-loopback name.
        let _ = local;
        self.listen_loopback
    }
}

impl Refusal {
    /// The answer: 403 or 421, as a JSON-RPC error on `/mcp` and in the APIs' error shape
    /// (`{"error": …}`) elsewhere.
    pub fn into_response(self, path: &str) -> Response {
        let (status, cause, message) = match self {
            Refusal::Origin(message) => (
                StatusCode::FORBIDDEN,
                relay_protocol::cause::FORBIDDEN,
                message,
            ),
            Refusal::Host(message) => (
                StatusCode::MISDIRECTED_REQUEST,
                relay_protocol::cause::BAD_REQUEST,
                message,
            ),
        };
        if path == MCP_PATH || path.starts_with(&format!("{MCP_PATH}/")) {
            let body = json!({
                "jsonrpc": "2.0",
                "id": null,
                "error": {"code": -32600, "message": message},
            });
            (status, axum::Json(body)).into_response()
        } else {
            let body = ErrorBody {
                error: message,
                status: None,
                cause: Some(cause.to_owned()),
            };
            (status, axum::Json(body)).into_response()
        }
    }
}

/// The checks as a tower layer: [`crate::http::request_log::layer`] puts it innermost in the same
/// `Router::layer` call as the request ids and counts, so a request it lets through keeps no
/// box of its own for as long as it is held (a `middleware::from_fn` boxed the request's
/// future and a clone of the inner service once more, about 1.5 KiB per held long poll).
#[derive(Clone)]
pub struct CheckOrigin {
    policy: Arc<Policy>,
}

impl CheckOrigin {
    /// The checks of `config`.
    pub fn new(config: &ServiceConfig) -> CheckOrigin {
        CheckOrigin {
            policy: Arc::new(Policy::new(config)),
        }
    }
}

impl<S> Layer<S> for CheckOrigin {
    type Service = OriginChecked<S>;

    fn layer(&self, inner: S) -> OriginChecked<S> {
        OriginChecked {
            inner,
            policy: self.policy.clone(),
        }
    }
}

/// A service behind the checks: a refused request is answered here and never reaches it.
#[derive(Clone)]
pub struct OriginChecked<S> {
    inner: S,
    policy: Arc<Policy>,
}

impl<S> Service<Request> for OriginChecked<S>
where
    S: Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Either<Ready<Result<Response, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let local = request.extensions().get::<LocalAddr>().map(|local| local.0);
        let peer = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(peer)| *peer);
        let authority = request.uri().authority().map(|a| a.as_str());
        match self.policy.check(request.headers(), authority, local, peer) {
            Ok(()) => Either::Right(self.inner.call(request)),
            Err(refusal) => {
                tracing::debug!(?refusal, "request refused by the origin and host checks");
                Either::Left(std::future::ready(Ok(
                    refusal.into_response(request.uri().path())
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_normalised_and_anything_else_refused() {
        for (text, normal) in [
            ("http://localhost:8787", "http://localhost:8787"),
            ("HTTPS://App.Example.COM:443/", "https://app.example.com"),
            ("http://127.0.0.1:80", "http://127.0.0.1"),
            ("http://[::1]:9", "http://[::1]:9"),
        ] {
            assert_eq!(normalise_origin(text).as_deref(), Ok(normal), "{text}");
        }
        for bad in [
            "null",
            "not-a-url",
            "ftp://a.example",
            "http://a.example/path",
            "http://a.example?x",
            "http://user@a.example",
            "http://",
            "http://a.example:99999",
            "http://a.example:x",
            "http://[zz]",
            "http://a b.example",
        ] {
            assert!(normalise_origin(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Origin::of_url("https://relay.example.com/base").map(|o| o.to_string()),
            Ok("https://relay.example.com".to_owned())
        );
    }

    #[test]
    fn an_echoed_value_is_cut() {
        let long = "x".repeat(MAX_ECHOED_CHARS + 50);
        assert_eq!(echoed(&long).chars().count(), MAX_ECHOED_CHARS + 1);
        assert_eq!(echoed("short"), "short");
    }
}
