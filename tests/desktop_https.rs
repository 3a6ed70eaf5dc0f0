//! The desktop relay reaches its service over HTTPS (rustls with ring, the system's roots, which
//! `SSL_CERT_FILE` replaces), as a deployed service is reached. The service here sits behind a
//! TLS-terminating proxy whose certificate (`tests/tls/`, self-signed for localhost and
//! 127.0.0.1, valid to 2126, made with docs/deploy.md's `openssl req -x509` command: a leaf, as
//! rustls wants) this test process trusts through `SSL_CERT_FILE`.

use relay_testkit as common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Era, Setup, queue, session, setup};
use relay_desktop::api::{ApiError, DesktopApi, HttpTransport};
use relay_protocol::{SessionMeta, SyncRequest};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

fn tls_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tls"))
}

/// Accepts TLS on a loopback port and forwards the plain bytes to `backend`; counts finished
/// handshakes.
async fn tls_proxy(backend: String) -> (u16, Arc<AtomicUsize>) {
    let certs = CertificateDer::pem_file_iter(tls_dir().join("cert.pem"))
        .expect("cert.pem")
        .collect::<Result<Vec<_>, _>>()
        .expect("a certificate");
    let key = PrivateKeyDer::from_pem_file(tls_dir().join("key.pem")).expect("key.pem");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    let handshakes = Arc::new(AtomicUsize::new(0));
    let counted = handshakes.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let backend = backend.clone();
            let counted = counted.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(socket).await else {
                    return;
                };
                counted.fetch_add(1, Ordering::SeqCst);
                if let Ok(mut plain) = tokio::net::TcpStream::connect(&backend).await {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                }
            });
        }
    });
    (port, handshakes)
}

fn snapshot(project: &str) -> SyncRequest {
    SyncRequest {
        project_id: project.to_owned(),
        sessions: vec![serde_json::from_value::<SessionMeta>(session(1)).expect("session")],
        wait_ms: None,
        running: Vec::new(),
        known: Vec::new(),
        sessions_unchanged: false,
        problem: None,
        sharing_version: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_desktop_syncs_and_picks_up_work_over_https() {
    // SAFETY: set before any TLS client of this process loads its roots, and this file's only
    // test; nothing else reads the environment concurrently.
    unsafe { std::env::set_var("SSL_CERT_FILE", tls_dir().join("cert.pem")) };
    let Setup {
        service,
        project,
        desktop,
        client,
    } = setup(Era::Current).await;
    let backend = service.base.trim_start_matches("http://").to_owned();
    let (port, handshakes) = tls_proxy(backend).await;
    let id = queue(&client, "https-run").await;

    for host in ["localhost", "127.0.0.1"] {
        let transport = HttpTransport::new(&format!("https://{host}:{port}")).expect("transport");
        let api = DesktopApi::new(Arc::new(transport), &desktop.token);
        let answer = api
            .sync(&snapshot(&project))
            .await
            .expect("sync over https");
        assert_eq!(answer.commands.len(), 1, "{host}");
        assert_eq!(answer.commands[0].command_id, id, "{host}");
    }
    assert!(
        handshakes.load(Ordering::SeqCst) >= 2,
        "both went through TLS"
    );

    // Plain HTTP to the TLS port gets no answer the desktop could take for the service's.
    let plain = HttpTransport::new(&format!("http://127.0.0.1:{port}")).expect("transport");
    let refused = DesktopApi::new(Arc::new(plain), &desktop.token)
        .sync(&snapshot(&project))
        .await
        .expect_err("plain HTTP to a TLS port");
    assert!(
        matches!(refused, ApiError::Unreachable(_) | ApiError::Status { .. }),
        "{refused:?}"
    );

    // TLS to a plain-HTTP port fails to connect, and says so.
    let tls_to_plain =
        HttpTransport::new(&service.base.replacen("http://", "https://", 1)).expect("transport");
    let failed = DesktopApi::new(Arc::new(tls_to_plain), &desktop.token)
        .sync(&snapshot(&project))
        .await
        .expect_err("TLS to a plain port");
    assert!(matches!(failed, ApiError::Unreachable(_)), "{failed:?}");
    service.stop().await;
}

#[test]
fn a_service_url_that_is_not_http_is_refused_up_front() {
    for bad in ["ftp://relay.example.com", "relay.example.com", "https://"] {
        assert!(HttpTransport::new(bad).is_err(), "{bad}");
    }
}
