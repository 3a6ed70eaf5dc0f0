//! Connections are bounded: 500 half-sent requests from one address cannot keep a client on
//! another address from being answered, and a half-sent request is closed by the service once
//! its header timeout passes.

use crate::common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use common::TestService;
use relay_service::ServiceConfig;
use relay_service::http::listener::ConnectionLimits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HALF_OPEN: usize = 500;
const HEADER_TIMEOUT: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_connections_neither_starve_others_nor_stay() {
    let service = TestService::start_with_config(ServiceConfig {
        connections: ConnectionLimits {
            header_read_timeout: HEADER_TIMEOUT,
            max_per_address: 100,
            ..ConnectionLimits::default()
        },
        ..ServiceConfig::default()
    })
    .await;
    let project = service.project("p", "alice").await;
    let token = service.full_agent(&project).await;
    let address: SocketAddr = service
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("the service's address");
    let mut half_open = Vec::new();
    for _ in 0..HALF_OPEN {
        // Connections past the per-address cap are closed at once; a refused connect is fine.
        if let Ok(mut stream) = TcpStream::connect(address).await {
            let _ = stream
                .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
                .await;
            half_open.push(stream);
        }
    }

    let client = graphrelay_net::build(
        graphrelay_net::client_builder()
            .expect("client builder")
            .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))),
    )
    .expect("client");
    let started = tokio::time::Instant::now();
    let answer = client
        .post(service.mcp_url())
        .bearer_auth(&token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-11-25")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("a valid call from another address is answered");
    let took = started.elapsed();
    assert_eq!(answer.status(), 200);
    println!("a valid call beside {HALF_OPEN} half-open connections took {took:?}");

    // The first half-sent request is closed by the service after its header timeout.
    let mut first = half_open.swap_remove(0);
    let mut buffer = [0u8; 256];
    let closed = tokio::time::timeout(HEADER_TIMEOUT * 10, first.read(&mut buffer))
        .await
        .expect("the service closes a half-sent request");
    assert!(
        matches!(closed, Ok(0) | Err(_)) || String::from_utf8_lossy(&buffer).contains("408"),
        "closed (or answered 408) rather than kept: {closed:?}"
    );
}
