//! Placeholder until the origin branch lands.
use std::net::{IpAddr, SocketAddr};
/// The client's address.
pub fn client_address(
    _config: &crate::ServiceConfig,
    _headers: &http::HeaderMap,
    peer: Option<SocketAddr>,
) -> Option<IpAddr> {
    peer.map(|p| p.ip())
}
