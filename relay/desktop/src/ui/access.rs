//! Who may use the desktop page: the one browser that opened the link `relay desktop ui`
//! printed, on the loopback address it was served at.
//!
//! - The link's token works once: redeeming it sets the session cookie (HttpOnly,
//!   SameSite=Strict) and spends the token, so a link copied from a terminal or a shell history
//!   is worthless afterwards.
//! - Every other request needs that cookie. The cookie's name carries the port: cookies are
//!   shared by every port of a host, and two pages on one machine must not take each other's.
//! - A request whose `Host` is not the address served, or whose `Origin` (when present) is not
//!   the page's own, is refused: a web page that rebinds its own name to 127.0.0.1 makes the
//!   browser send that name, never ours.
//! - State-changing requests are POSTs whose form carries the session's CSRF token.

use std::net::SocketAddr;

use axum::http::{HeaderMap, header};

/// Random bytes in the link's token, the session cookie and the CSRF token (hex-encoded).
pub const SECRET_BYTES: usize = 32;

/// The one browser session and the link that creates it.
#[derive(Debug)]
pub struct Access {
    /// The link's token, until it is used.
    token: Option<String>,
    /// The session its use created.
    session: Option<BrowserSession>,
}

/// The session of the browser that opened the link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowserSession {
    /// The cookie's value.
    pub cookie: String,
    /// The token every form posts.
    pub csrf: String,
}

/// Why a secret could not be made.
#[derive(Debug, thiserror::Error)]
#[error("the system has no randomness: {0}")]
pub struct NoRandomness(String);

/// `SECRET_BYTES` random bytes as lowercase hex.
pub fn secret() -> Result<String, NoRandomness> {
    let mut bytes = [0u8; SECRET_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| NoRandomness(e.to_string()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether two secrets are equal, in time independent of where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Access {
    /// Access through the link with `token`, not used yet.
    pub fn new(token: String) -> Self {
        Self {
            token: Some(token),
            session: None,
        }
    }

    /// Spends the link's token: the new session when `presented` is it and it was not used.
    pub fn redeem(&mut self, presented: &str) -> Result<Option<BrowserSession>, NoRandomness> {
        let matches = self
            .token
            .as_deref()
            .is_some_and(|token| same_secret(token, presented));
        if !matches {
            return Ok(None);
        }
        let session = BrowserSession {
            cookie: secret()?,
            csrf: secret()?,
        };
        self.token = None;
        self.session = Some(session.clone());
        Ok(Some(session))
    }

    /// The session whose cookie is `cookie`.
    pub fn session(&self, cookie: &str) -> Option<&BrowserSession> {
        self.session
            .as_ref()
            .filter(|session| same_secret(&session.cookie, cookie))
    }
}

/// Where the page is served: the exact `Host` it answers to and its origin.
#[derive(Debug, Clone)]
pub struct Served {
    /// `127.0.0.1:PORT` or `[::1]:PORT`.
    pub authority: String,
    /// `http://` + the authority.
    pub origin: String,
    /// The session cookie's name (it carries the port).
    pub cookie_name: String,
}

impl Served {
    /// The page served at `address`.
    pub fn at(address: SocketAddr) -> Self {
        let authority = address.to_string();
        Self {
            origin: format!("http://{authority}"),
            cookie_name: format!("relay_desktop_{}", address.port()),
            authority,
        }
    }

    /// Whether the request names the address served as its `Host`.
    pub fn host_ok(&self, headers: &HeaderMap) -> bool {
        headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|host| host.eq_ignore_ascii_case(&self.authority))
    }

    /// Whether the request's `Origin`, if it has one, is the page's own.
    pub fn origin_ok(&self, headers: &HeaderMap) -> bool {
        let mut origins = headers.get_all(header::ORIGIN).iter();
        match (origins.next(), origins.next()) {
            (None, _) => true,
            (Some(origin), None) => origin
                .to_str()
                .is_ok_and(|origin| origin.eq_ignore_ascii_case(&self.origin)),
            (Some(_), Some(_)) => false,
        }
    }

    /// The session cookie's value in the request, if it sent one.
    pub fn cookie<'h>(&self, headers: &'h HeaderMap) -> Option<&'h str> {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| *name == self.cookie_name)
            .map(|(_, value)| value)
    }

    /// The `Set-Cookie` value that gives the browser its session.
    pub fn set_cookie(&self, session: &BrowserSession) -> String {
        format!(
            "{}={}; Path=/; HttpOnly; SameSite=Strict",
            self.cookie_name, session.cookie
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(name.clone(), HeaderValue::from_str(value).expect("value"));
        }
        map
    }

    #[test]
    fn the_token_works_once_and_only_itself() {
        let mut access = Access::new("a".repeat(64));
        assert!(access.redeem(&"b".repeat(64)).expect("random").is_none());
        assert!(access.redeem("a").expect("random").is_none());
        let session = access
            .redeem(&"a".repeat(64))
            .expect("random")
            .expect("redeemed");
        assert_eq!(session.cookie.len(), SECRET_BYTES * 2);
        assert_ne!(session.cookie, session.csrf);
        assert!(access.redeem(&"a".repeat(64)).expect("random").is_none());
        assert_eq!(access.session(&session.cookie), Some(&session));
        assert!(access.session(&session.csrf).is_none());
    }

    #[test]
    fn host_and_origin_must_be_the_served_address() {
        let served = Served::at("127.0.0.1:4567".parse().expect("address"));
        assert!(served.host_ok(&headers(&[(header::HOST, "127.0.0.1:4567")])));
        for host in [
            "localhost:4567",
            "127.0.0.1:4568",
            "evil.example:4567",
            "127.0.0.1",
        ] {
            assert!(!served.host_ok(&headers(&[(header::HOST, host)])), "{host}");
        }
        assert!(!served.host_ok(&HeaderMap::new()));
        assert!(served.origin_ok(&HeaderMap::new()));
        assert!(served.origin_ok(&headers(&[(header::ORIGIN, "http://127.0.0.1:4567")])));
        for origin in ["null", "http://evil.example:4567", "https://127.0.0.1:4567"] {
            assert!(
                !served.origin_ok(&headers(&[(header::ORIGIN, origin)])),
                "{origin}"
            );
        }
    }

    #[test]
    fn the_cookie_is_found_by_its_port_specific_name() {
        let served = Served::at("127.0.0.1:4567".parse().expect("address"));
        let sent = headers(&[(
            header::COOKIE,
            "relay_desktop_4568=other; relay_desktop_4567=mine",
        )]);
        assert_eq!(served.cookie(&sent), Some("mine"));
        let cookie = served.set_cookie(&BrowserSession {
            cookie: "c".into(),
            csrf: "x".into(),
        });
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    }
}
