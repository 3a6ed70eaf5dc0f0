//! What an OAuth client is, as registrations and client ID metadata documents describe it:
//! its name and the rules its redirect URIs keep.

use serde_json::Value;
use url::Url;

/// Longest redirect URI, in characters.
pub const MAX_REDIRECT_URI_CHARS: usize = 2000;
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

/// Why a redirect URI is refused; the text is RFC 7591's error description.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedirectUriError {
    /// Longer than [`MAX_REDIRECT_URI_CHARS`].
    #[error("a redirect URI may have at most {MAX_REDIRECT_URI_CHARS} characters")]
    TooLong,
    /// Not an absolute URL.
    #[error("`{uri}` is not an absolute URL: {source}")]
    NotAbsolute {
        /// The URI given.
        uri: String,
        /// Why it does not parse.
        source: url::ParseError,
    },
    /// It has a `#fragment`.
    #[error("`{0}` has a fragment; redirect URIs may not")]
    Fragment(String),
    /// It has a user name or password.
    #[error("`{0}` carries credentials; redirect URIs may not")]
    Credentials(String),
    /// Plain http on a host that is not loopback.
    #[error(
        "`{0}` is plain http on a host that is not loopback: use https, or http on 127.0.0.1, [::1] or localhost"
    )]
    PlainHttp(String),
    /// Neither https nor loopback http.
    #[error(
        "`{uri}` has scheme `{scheme}`: redirect URIs must be https, or http on a loopback host"
    )]
    Scheme {
        /// The URI given.
        uri: String,
        /// Its scheme.
        scheme: String,
    },
}

/// The redirect URI as a URL, if the rules allow it: https, or http on a loopback host; no
/// fragment, no credentials.
pub fn check_redirect_uri(uri: &str) -> Result<Url, RedirectUriError> {
    if uri.chars().count() > MAX_REDIRECT_URI_CHARS {
        return Err(RedirectUriError::TooLong);
    }
    let url = Url::parse(uri).map_err(|source| RedirectUriError::NotAbsolute {
        uri: uri.to_owned(),
        source,
    })?;
    if uri.contains('#') {
        return Err(RedirectUriError::Fragment(uri.to_owned()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(RedirectUriError::Credentials(uri.to_owned()));
    }
    match url.scheme() {
        "https" if url.host().is_some() => Ok(url),
        "http" if is_loopback_host(&url) => Ok(url),
        "http" => Err(RedirectUriError::PlainHttp(uri.to_owned())),
        other => Err(RedirectUriError::Scheme {
            uri: uri.to_owned(),
            scheme: other.to_owned(),
        }),
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
}
