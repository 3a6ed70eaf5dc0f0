//! `https` base URLs are spoken over TLS (rustls with the ring provider, the system's roots,
//! through graphrelay-net), with no set-up by the caller and no panic. Hosted APIs are not
//! reachable here, so the check is that a TLS client hello goes to a plain-HTTP server, which
//! cannot answer it: the provider fails to connect (retried, then given up) and the server never
//! sees an HTTP request.

use crate::common;

use common::server::TestServer;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_url_gets_a_tls_handshake() {
    let server = TestServer::start(vec![common::openai_reply("plain", 1, 1)], None).await;
    let https = server.base_url().replacen("http://", "https://", 1);
    let mut entry = common::openai_entry("tls", &https, "m");
    entry.retry.max_retries = 1;
    let (options, sink) = common::options_with(common::boa(), common::provider_set(vec![entry]));
    let script = r#"export default async function (a, g) {
        try { await g.agent("p"); return "answered"; } catch (e) { return [e.code, e.message]; }
    }"#;
    let outcome = common::run(script, json!({}), &options).await;
    let result = outcome.result.expect("result");
    assert_eq!(result[0], "failed", "{result}");
    let message = result[1].as_str().expect("message");
    assert!(message.contains("cannot reach the provider"), "{message}");
    assert!(message.contains("gave up after 1 retries"), "{message}");
    assert_eq!(common::retries(&sink.events()).len(), 1);
    assert!(
        server.records().is_empty(),
        "the server got a TLS hello, never an HTTP request"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_the_tls_hello_hits_the_connect_timeout() {
    // Accepts TCP connections and holds them without a word, as a plain-HTTP server that waits
    // for a request line does when it gets a TLS hello.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let held = tokio::spawn(async move {
        let mut connections = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            connections.push(socket);
        }
    });
    let mut entry = common::openai_entry("tls", &format!("https://127.0.0.1:{port}/v1"), "m");
    entry.retry.max_retries = 1;
    entry.connect_timeout = std::time::Duration::from_millis(300);
    let (options, sink) = common::options_with(common::boa(), common::provider_set(vec![entry]));
    let script = r#"export default async function (a, g) {
        try { await g.agent("p"); return "answered"; } catch (e) { return [e.code, e.message]; }
    }"#;
    let outcome = common::run(script, json!({}), &options).await;
    let result = outcome.result.expect("result");
    assert_eq!(result[0], "failed", "{result}");
    assert!(
        result[1]
            .as_str()
            .is_some_and(|m| m.contains("no connection within 0.3 s")),
        "{result}"
    );
    assert_eq!(common::retries(&sink.events()).len(), 1, "retried once");
    held.abort();
}
