//! Proxies in front of the service (`relay serve --trusted-proxy CIDR`, `--trust-proxy`): which
//! peers' `X-Forwarded-*` headers count, and who the client of a request is.
//!
//! A connection from a trusted proxy carries many clients: the listener does not cap it per
//! address ([`crate::http::listener`]); each request's client is the address the proxy
//! appended to `X-Forwarded-For`, and the per-client limits (the connections a client holds
//! through the proxy, the sign-in throttle, the registration rate) count that address.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use ipnet::IpNet;

/// An address range a proxy's connections come from, like `10.0.0.0/8`, `::1/128` or one
/// address (`127.0.0.1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr(IpNet);

/// Why a text is not an address range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an address range: write it like 10.0.0.0/8, 192.168.1.5, fd00::/8 or ::1")]
pub struct CidrError(String);

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(text: &str) -> Result<Cidr, CidrError> {
        let text = text.trim();
        if let Ok(net) = text.parse::<IpNet>() {
            return Ok(Cidr(net.trunc()));
        }
        text.parse::<IpAddr>()
            .map(|address| Cidr(IpNet::from(address)))
            .map_err(|_| CidrError(text.to_owned()))
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl Cidr {
    /// Whether `address` is in the range (an IPv4 address written as IPv6, `::ffff:a.b.c.d`,
    /// counts as the IPv4 address).
    pub fn contains(&self, address: IpAddr) -> bool {
        self.0.contains(&address.to_canonical())
    }
}

/// Which peers may speak for their clients.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    /// Every peer (`--trust-proxy`: the service is reachable only through its proxy).
    pub any: bool,
    /// Peers in these ranges (`--trusted-proxy`).
    pub ranges: Vec<Cidr>,
}

impl TrustedProxies {
    /// Whether the connection from `peer` is a trusted proxy's. A request without a peer (an
    /// in-process call) is trusted only under `any`.
    pub fn trusts(&self, peer: Option<IpAddr>) -> bool {
        self.any || peer.is_some_and(|peer| self.ranges.iter().any(|range| range.contains(peer)))
    }

    /// Whether connections from `peer` are exempt from the per-address cap: only those of a
    /// named range (with `any` alone, every client could claim to be the proxy).
    pub fn uncapped(&self, peer: IpAddr) -> bool {
        self.ranges.iter().any(|range| range.contains(peer))
    }

    /// The request's client: with a trusted `peer`, the right-most valid address in
    /// `X-Forwarded-For` (the one the proxy appended; entries left of it are whatever the
    /// client wrote), else the peer.
    pub fn client(&self, headers: &http::HeaderMap, peer: Option<SocketAddr>) -> Option<IpAddr> {
        let peer_ip = peer.map(|peer| peer.ip());
        if self.trusts(peer_ip)
            && let Some(forwarded) = forwarded_for(headers)
        {
            return Some(forwarded);
        }
        peer_ip
    }
}

/// The header a proxy appends its client's address to.
pub const X_FORWARDED_FOR: &str = "x-forwarded-for";

/// The right-most valid address of `X-Forwarded-For`.
fn forwarded_for(headers: &http::HeaderMap) -> Option<IpAddr> {
    headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(forwarded_ip)
        .next_back()
}

/// One `X-Forwarded-For` entry as an address: `1.2.3.4`, `2001:db8::1`, or either with a port.
fn forwarded_ip(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| entry.parse::<SocketAddr>().ok().map(|a| a.ip()))
        .or_else(|| {
            entry
                .strip_prefix('[')
                .and_then(|e| e.strip_suffix(']'))
                .and_then(|e| e.parse().ok())
        })
        .map(|address: IpAddr| address.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("address")
    }

    #[test]
    fn ranges_parse_with_or_without_a_prefix() {
        let range: Cidr = "10.1.2.3/8".parse().expect("range");
        assert_eq!(range.to_string(), "10.0.0.0/8");
        assert!(range.contains(ip("10.200.0.1")));
        assert!(
            range.contains(ip("::ffff:10.0.0.9")),
            "IPv4 written as IPv6"
        );
        assert!(!range.contains(ip("11.0.0.1")));
        let one: Cidr = "127.0.0.1".parse().expect("one address");
        assert!(one.contains(ip("127.0.0.1")) && !one.contains(ip("127.0.0.2")));
        let six: Cidr = "fd00::/8".parse().expect("v6");
        assert!(six.contains(ip("fd12::1")) && !six.contains(ip("10.0.0.1")));
        for bad in ["", "10.0.0.0/33", "proxy.internal", "10.0.0.0/", "1.2.3"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_a_trusted_peer_speaks_for_its_client() {
        let proxies = TrustedProxies {
            any: false,
            ranges: vec!["10.0.0.0/8".parse().expect("range")],
        };
        let mut headers = http::HeaderMap::new();
        headers.insert(
            X_FORWARDED_FOR,
            http::HeaderValue::from_static("6.6.6.6, 203.0.113.7"),
        );
        let proxy = Some(SocketAddr::from(([10, 0, 0, 2], 40_000)));
        let stranger = Some(SocketAddr::from(([198, 51, 100, 1], 40_000)));
        assert_eq!(proxies.client(&headers, proxy), Some(ip("203.0.113.7")));
        assert_eq!(proxies.client(&headers, stranger), Some(ip("198.51.100.1")));
        assert_eq!(proxies.client(&headers, None), None);
        assert!(proxies.uncapped(ip("10.0.0.2")) && !proxies.uncapped(ip("198.51.100.1")));
        let any = TrustedProxies {
            any: true,
            ranges: Vec::new(),
        };
        assert_eq!(any.client(&headers, stranger), Some(ip("203.0.113.7")));
        assert!(
            !any.uncapped(ip("198.51.100.1")),
            "--trust-proxy lifts no cap"
        );
        let without = proxies.client(&http::HeaderMap::new(), proxy);
        assert_eq!(without, Some(ip("10.0.0.2")), "no header: the peer");
    }
}
