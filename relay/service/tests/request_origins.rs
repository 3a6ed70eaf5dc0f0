//! Where requests may come from (SPEC §6): on every route, a foreign `Origin` gets 403 and a
//! Host the relay does not serve gets 421, over real HTTP on the loopback listener; the
//! forwarded headers count only behind a trusted proxy.

use crate::chat_support::ChatService;
use crate::common;

use common::{TestService, decode};
use relay_service::ServiceConfig;
use relay_service::http::origin::client_address;
use reqwest::Method;
use serde_json::{Value, json};

const EVIL: &str = "http://evil.example";

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"origins","version":"1"}}}"#;

/// One request of each kind the service answers, with a token that lets it through.
struct Routes {
    service: TestService,
    agent: String,
    owner: String,
    desktop: String,
    project: String,
    link: String,
}

impl Routes {
    async fn start(config: ServiceConfig) -> Routes {
        let service = TestService::start_with_config(config).await;
        let project = service.project("p", "alice").await;
        let link = service.link_chat(&project, "claude").await;
        Routes {
            agent: service.full_agent(&project).await,
            owner: service.mint_owner_token(&project).await,
            desktop: service.desktop(&project).await.token,
            service,
            project,
            link,
        }
    }

    /// `route` (mcp, owner, desktop, metadata) with `headers`; the status and JSON body.
    async fn send(&self, route: &str, headers: &[(&str, &str)]) -> (u16, Value) {
        let base = &self.service.base;
        let http = common::http_client();
        let request = match route {
            "mcp" => http
                .post(self.service.mcp_url())
                .bearer_auth(&self.agent)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .body(INITIALIZE),
            "owner" => http
                .get(format!("{base}/owner/v1/chat-links/{}/tasks", self.link))
                .bearer_auth(&self.owner),
            "desktop" => http
                .post(format!("{base}/external-assistants/graph-relays/sync"))
                .bearer_auth(&self.desktop)
                .json(&json!({"project_id": self.project, "sessions": []})),
            "metadata" => http.request(
                Method::GET,
                format!("{base}/.well-known/oauth-protected-resource/mcp"),
            ),
            other => panic!("no route {other}"),
        };
        let request = headers.iter().fold(request, |request, (name, value)| {
            request.header(*name, *value)
        });
        decode(request.send().await.expect("request")).await
    }

    fn port(&self) -> u16 {
        self.service
            .base
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse().ok())
            .expect("port")
    }
}

const ROUTES: [&str; 4] = ["mcp", "owner", "desktop", "metadata"];

/// The message of a refusal: a JSON-RPC error on /mcp, `{"error"}` elsewhere.
fn refusal_message(route: &str, body: &Value) -> String {
    let message = if route == "mcp" {
        assert_eq!(body["error"]["code"], -32600, "{body}");
        &body["error"]["message"]
    } else {
        &body["error"]
    };
    message.as_str().expect("a message").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_or_null_origin_is_refused_on_every_route() {
    let routes = Routes::start(ServiceConfig::default()).await;
    for route in ROUTES {
        let (status, body) = routes.send(route, &[]).await;
        assert_eq!(status, 200, "{route} without an Origin: {body}");
        let own = routes.service.base.clone();
        let (status, body) = routes.send(route, &[("origin", &own)]).await;
        assert_eq!(status, 200, "{route} from its own origin: {body}");

        let (status, body) = routes.send(route, &[("origin", EVIL)]).await;
        assert_eq!(status, 403, "{route} from {EVIL}: {body}");
        let message = refusal_message(route, &body);
        assert!(message.contains(EVIL), "{message}");
        assert!(message.contains("--allowed-origin"), "{message}");

        let (status, body) = routes.send(route, &[("origin", "null")]).await;
        assert_eq!(status, 403, "{route} from Origin: null: {body}");
        let (status, _) = routes
            .send(route, &[("origin", "https://evil.example:443")])
            .await;
        assert_eq!(status, 403, "{route} from https://evil.example");
        // A relay on loopback takes pages of loopback servers (local software), as MCP
        // clients on loopback expect; DNS rebinding needs a name that is not loopback.
        let local_page = format!("http://localhost:{}", routes.port() ^ 1);
        let (status, body) = routes.send(route, &[("origin", &local_page)]).await;
        assert_eq!(status, 200, "{route} from {local_page}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_origin_passes_and_only_it() {
    let routes = Routes::start(ServiceConfig {
        public_url: Some("https://relay.example.com".into()),
        allowed_origins: vec!["https://console.example.com".into()],
        listen_loopback: true,
        ..ServiceConfig::default()
    })
    .await;
    for route in ROUTES {
        for origin in [
            "https://console.example.com",
            "HTTPS://Console.Example.COM:443",
            "https://relay.example.com",
        ] {
            let (status, body) = routes.send(route, &[("origin", origin)]).await;
            assert_eq!(status, 200, "{route} from {origin}: {body}");
        }
        // The public URL is not on loopback: a loopback page is as foreign as any.
        let loopback = routes.service.base.clone();
        for origin in [
            "http://console.example.com",
            "https://console.example.com:8443",
            loopback.as_str(),
            EVIL,
        ] {
            let (status, body) = routes.send(route, &[("origin", origin)]).await;
            assert_eq!(status, 403, "{route} from {origin}: {body}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_not_served_is_misdirected() {
    let routes = Routes::start(ServiceConfig::default()).await;
    let port = routes.port();
    for route in ROUTES {
        for host in [
            format!("localhost:{port}"),
            format!("LOCALHOST:{port}"),
            format!("127.0.0.1:{port}"),
            format!("[::1]:{port}"),
            // A loopback name on another port (a TLS proxy on loopback in front): no page can
            // make a browser send one for a name it rebinds.
            format!("localhost:{}", port ^ 1),
            "localhost".to_owned(),
        ] {
            let (status, body) = routes.send(route, &[("host", &host)]).await;
            assert_eq!(status, 200, "{route} for {host}: {body}");
        }
        for host in [
            "evil.example".to_owned(),
            format!("evil.example:{port}"),
            format!("127.0.0.1.evil.example:{port}"),
            "not a host".to_owned(),
        ] {
            let (status, body) = routes.send(route, &[("host", &host)]).await;
            assert_eq!(status, 421, "{route} for {host}: {body}");
            let message = refusal_message(route, &body);
            assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_headers_count_only_behind_a_trusted_proxy() {
    let public = || ServiceConfig {
        public_url: Some("https://relay.example.com".into()),
        ..ServiceConfig::default()
    };
    let forwarded = [
        ("x-forwarded-host", "relay.example.com"),
        ("x-forwarded-proto", "https"),
    ];
    let untrusted = Routes::start(public()).await;
    for route in ROUTES {
        let (status, body) = untrusted
            .send(route, &[("x-forwarded-host", "evil.example")])
            .await;
        assert_eq!(status, 200, "{route}: X-Forwarded-Host is ignored: {body}");
        let (status, body) = untrusted
            .send(
                route,
                &[("host", "evil.example"), forwarded[0], forwarded[1]],
            )
            .await;
        assert_eq!(
            status, 421,
            "{route}: Host counts, not X-Forwarded-Host: {body}"
        );
        // A proxy that passes the public Host on serves its scheme's default port.
        let (status, body) = untrusted
            .send(route, &[("host", "relay.example.com")])
            .await;
        assert_eq!(status, 200, "{route} for the public host: {body}");
    }

    let trusted = Routes::start(ServiceConfig {
        trust_proxy: true,
        ..public()
    })
    .await;
    for route in ROUTES {
        let (status, body) = trusted.send(route, &forwarded).await;
        assert_eq!(status, 200, "{route} forwarded for the public host: {body}");
        let (status, body) = trusted
            .send(
                route,
                &[("x-forwarded-host", "evil.example, relay.example.com")],
            )
            .await;
        assert_eq!(
            status, 421,
            "{route}: the first X-Forwarded-Host counts: {body}"
        );
        let (status, body) = trusted
            .send(
                route,
                &[
                    forwarded[0],
                    ("x-forwarded-proto", "http"),
                    ("host", "evil.example"),
                ],
            )
            .await;
        assert_eq!(status, 421, "{route}: plain http is another port: {body}");
    }
    let (status, metadata) = trusted.send("metadata", &forwarded).await;
    assert_eq!(status, 200);
    assert_eq!(metadata["resource"], "https://relay.example.com/mcp");
}

#[test]
fn the_client_address_is_the_proxys_last_entry_only_when_trusted() {
    let peer: std::net::SocketAddr = "10.0.0.9:5555".parse().unwrap();
    let mut headers = http::HeaderMap::new();
    headers.append("x-forwarded-for", "6.6.6.6, 7.7.7.7".parse().unwrap());
    headers.append(
        "x-forwarded-for",
        "203.0.113.7, not-an-address".parse().unwrap(),
    );
    let untrusted = ServiceConfig::default();
    let trusted = ServiceConfig {
        trust_proxy: true,
        ..ServiceConfig::default()
    };
    assert_eq!(
        client_address(&untrusted, &headers, Some(peer)),
        Some(peer.ip())
    );
    assert_eq!(client_address(&untrusted, &headers, None), None);
    // The spoofed left-most entries never count: the right-most valid one is the proxy's.
    assert_eq!(
        client_address(&trusted, &headers, Some(peer)),
        Some("203.0.113.7".parse().unwrap())
    );
    let mut v6 = http::HeaderMap::new();
    v6.insert(
        "x-forwarded-for",
        "1.1.1.1, [2001:db8::1]:443".parse().unwrap(),
    );
    assert_eq!(
        client_address(&trusted, &v6, Some(peer)),
        Some("2001:db8::1".parse().unwrap())
    );
    let mut garbage = http::HeaderMap::new();
    garbage.insert("x-forwarded-for", "unknown, ".parse().unwrap());
    assert_eq!(
        client_address(&trusted, &garbage, Some(peer)),
        Some(peer.ip())
    );
    assert_eq!(
        client_address(&trusted, &http::HeaderMap::new(), Some(peer)),
        Some(peer.ip())
    );
}
