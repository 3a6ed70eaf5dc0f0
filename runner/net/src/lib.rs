//! The one way graphrelay builds an HTTP client: reqwest, with TLS from rustls on the ring crypto
//! provider (aws-lc-rs's C build is slow here) and the system's root certificates.
//!
//! reqwest's `rustls-no-provider` feature unifies into every reqwest client of the process,
//! rmcp's included: a client built without a TLS config of its own then asks rustls for the
//! process-wide crypto provider and panics when there is none. Every constructor here installs
//! ring as that provider first, once, and hands reqwest a finished TLS config, so no client built
//! through this crate can panic, and one built elsewhere after it cannot either. `clippy.toml`
//! forbids building a client any other way.
//!
//! Proxies come from the environment (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`),
//! reqwest's default. Its `system-proxy` feature is not needed for that: it only adds the
//! macOS and Windows system settings, and on Linux the environment is the system's setting.
//!
//! A crate of its own, depending on no graphrelay crate, so the runner (the agent providers),
//! the desktop relay, the service, the simulator and the tests all reach it without reaching
//! each other.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

/// Redirect hops an MCP client follows (same origin, 307 and 308 only).
pub const MAX_MCP_REDIRECTS: usize = 10;

/// Why no client could be built.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NetError {
    /// rustls refused the TLS settings.
    #[error("cannot set up TLS: {0}")]
    Tls(String),
    /// reqwest refused the client's settings.
    #[error("cannot build the HTTP client: {0}")]
    Build(String),
}

/// Makes ring the process-wide rustls crypto provider, once. Another provider installed before
/// is left in place: either serves, and the clients built here carry their own config anyway.
pub fn install_crypto_provider() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        // An error only says a provider is already installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The TLS settings of every client: rustls on ring, the system's roots (which `SSL_CERT_FILE`
/// or `SSL_CERT_DIR` replace). Loading the roots reads many files, so it happens once per
/// process.
pub fn tls_config() -> Result<Arc<rustls::ClientConfig>, NetError> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, NetError>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            for error in &found.errors {
                tracing::warn!("while loading the system's TLS roots: {error}");
            }
            let (added, ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                tracing::warn!(
                    ignored,
                    "no TLS root certificates found: https connections will fail"
                );
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| NetError::Tls(e.to_string()))?
                .with_root_certificates(roots)
                .with_no_client_auth();
            Ok(Arc::new(config))
        })
        .clone()
}

/// A reqwest client builder with the TLS settings of [`tls_config`] and ring installed as the
/// process's provider; everything else is reqwest's default until the caller changes it.
pub fn client_builder() -> Result<reqwest::ClientBuilder, NetError> {
    install_crypto_provider();
    let tls = (*tls_config()?).clone();
    // The one place a reqwest client builder is made: it gets its TLS config right here.
    #[allow(clippy::disallowed_methods)]
    let builder = reqwest::Client::builder();
    Ok(builder.tls_backend_preconfigured(tls))
}

/// A client with reqwest's defaults and the TLS settings of [`tls_config`].
pub fn client() -> Result<reqwest::Client, NetError> {
    build(client_builder()?)
}

/// Builds `builder`, with reqwest's refusal as a [`NetError`].
pub fn build(builder: reqwest::ClientBuilder) -> Result<reqwest::Client, NetError> {
    builder.build().map_err(|e| NetError::Build(e.to_string()))
}

/// The client for an rmcp Streamable HTTP transport, as rmcp's own default is: no idle
/// connections kept (reusing one whose previous answer was not read to the end stalls ~40 ms on
/// Linux's delayed ACK), and only same-origin 307 and 308 redirects followed (they keep the
/// method and the JSON-RPC body; another origin must not get the session id and the token).
pub fn mcp_client() -> Result<reqwest::Client, NetError> {
    let policy = reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|from| from.origin() == attempt.url().origin());
        let keeps_body = matches!(attempt.status().as_u16(), 307 | 308);
        if same_origin && keeps_body && attempt.previous().len() <= MAX_MCP_REDIRECTS {
            attempt.follow()
        } else {
            attempt.stop()
        }
    });
    build(client_builder()?.pool_max_idle_per_host(0).redirect(policy))
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A connector layer that bounds opening a connection (TCP, a proxy's tunnel, and for https
/// the TLS handshake) and says so in its error: "no connection within N s (TCP connect and TLS
/// handshake)". A server that accepts TCP and never answers a TLS hello would otherwise hold a
/// request until its caller's own timeout. Use it instead of reqwest's `connect_timeout`, whose
/// error says only "operation timed out".
#[derive(Debug, Clone, Copy)]
pub struct ConnectTimeout(pub Duration);

impl<S> tower::Layer<S> for ConnectTimeout {
    type Service = Bounded<S>;

    fn layer(&self, inner: S) -> Bounded<S> {
        Bounded {
            inner,
            timeout: self.0,
        }
    }
}

/// A connector whose connections are bounded by a [`ConnectTimeout`].
#[derive(Debug, Clone)]
pub struct Bounded<S> {
    inner: S,
    timeout: Duration,
}

impl<S, R> tower::Service<R> for Bounded<S>
where
    S: tower::Service<R, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let connecting = self.inner.call(request);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, connecting).await {
                Ok(connected) => connected,
                Err(_) => Err(format!(
                    "no connection within {} s (TCP connect and TLS handshake)",
                    timeout.as_secs_f64()
                )
                .into()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_constructor_builds_without_a_panic() {
        client().expect("client");
        mcp_client().expect("mcp client");
        build(
            client_builder()
                .expect("builder")
                .connector_layer(ConnectTimeout(Duration::from_secs(1))),
        )
        .expect("bounded client");
        assert!(
            rustls::crypto::CryptoProvider::get_default().is_some(),
            "ring is the process's provider"
        );
        // Now that a provider is installed, a client built elsewhere does not panic either.
        #[allow(clippy::disallowed_methods)]
        let _ = reqwest::Client::new();
    }
}
