//! A reverse proxy as small as a test needs: it accepts connections, adds
//! `X-Forwarded-For: <the client's address>` to the head of the first request on each, and
//! passes bytes both ways to the backend. What nginx or Caddy in front of `relay serve` tell it
//! about their clients, without either installed. One request per connection is rewritten
//! (later ones on a kept-alive connection pass unchanged), so its clients open a connection
//! per request.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The longest request head it rewrites.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Starts a proxy on `listen` (a loopback address, port 0 for any) in front of `backend`;
/// returns the address it listens on.
pub async fn forwarding_proxy(listen: SocketAddr, backend: SocketAddr) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .expect("bind the proxy");
    let address = listener.local_addr().expect("proxy address");
    tokio::spawn(async move {
        while let Ok((inbound, client)) = listener.accept().await {
            tokio::spawn(forward(inbound, client, backend));
        }
    });
    address
}

/// One client connection: its first request's head with the header added, then everything as
/// it comes. A backend that closes the connection (one past its cap, say) closes the client's.
async fn forward(mut inbound: tokio::net::TcpStream, client: SocketAddr, backend: SocketAddr) {
    let Some(head) = read_head(&mut inbound).await else {
        return;
    };
    let Ok(mut outbound) = tokio::net::TcpStream::connect(backend).await else {
        return;
    };
    let head = with_forwarded_for(&head, client);
    if outbound.write_all(&head).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
}

/// Reads until the end of the first request's head (and whatever came with it).
async fn read_head(inbound: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut buffer = [0_u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > MAX_HEAD_BYTES {
            return None;
        }
        let read = inbound.read(&mut buffer).await.ok()?;
        if read == 0 {
            return None;
        }
        head.extend_from_slice(&buffer[..read]);
    }
    Some(head)
}

/// `head` with `X-Forwarded-For: <client's IP>` after its request line.
fn with_forwarded_for(head: &[u8], client: SocketAddr) -> Vec<u8> {
    let line_end = head
        .windows(2)
        .position(|w| w == b"\r\n")
        .map_or(head.len(), |end| end + 2);
    let mut out = Vec::with_capacity(head.len() + 64);
    out.extend_from_slice(&head[..line_end]);
    out.extend_from_slice(format!("X-Forwarded-For: {}\r\n", client.ip()).as_bytes());
    out.extend_from_slice(&head[line_end..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_goes_after_the_request_line() {
        let head = b"POST /mcp HTTP/1.1\r\nHost: a\r\n\r\n{}";
        let client = SocketAddr::from(([127, 1, 0, 7], 5000));
        assert_eq!(
            with_forwarded_for(head, client),
            b"POST /mcp HTTP/1.1\r\nX-Forwarded-For: 127.1.0.7\r\nHost: a\r\n\r\n{}"
        );
    }
}
