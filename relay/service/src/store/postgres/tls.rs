//! TLS to PostgreSQL: rustls on the ring provider (never aws-lc-rs, see graphrelay-net), with
//! libpq's `sslmode` and `sslrootcert` read from the `postgres://` URL.
//!
//! | `sslmode`     | TLS                            | the server's certificate                   |
//! |---------------|--------------------------------|--------------------------------------------|
//! | `disable`     | never                          | -                                          |
//! | `prefer`      | if the server offers it        | not checked (libpq's default, and ours)    |
//! | `require`     | always                         | not checked, unless a root file is there*  |
//! | `verify-ca`   | always                         | signed by a root of `sslrootcert`          |
//! | `verify-full` | always                         | that, and issued for the URL's host        |
//!
//! `sslrootcert` is a PEM file of trusted roots, or `system` for the machine's roots (with
//! `verify-full` only, as libpq has it). Without it the verifying modes use libpq's default
//! file, `~/.postgresql/root.crt`, and refuse to start when there is none. (*) As libpq does,
//! `require` with a root file (named, or the default one when it exists) checks the chain as
//! `verify-ca` does.
//!
//! tokio-postgres parses the rest of the URL; it knows neither `verify-*` nor `sslrootcert`,
//! so [`parse_url`] takes those two out of the query first.

use std::fmt;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::Socket;
use tokio_postgres::config::SslMode as PgSslMode;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

use super::redact;
use crate::store::StoreError;

/// libpq's `sslmode`, all five that matter (libpq's `allow` is refused: it means "plain text
/// first", which no deployment wants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(text: &str) -> Result<Self, StoreError> {
        Ok(match text {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(StoreError::setup(format!(
                    "sslmode `{other}` is not one of disable, prefer, require, verify-ca, verify-full"
                )));
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// A database URL as tokio-postgres takes it, and the TLS it asks for.
pub struct Target {
    pub config: tokio_postgres::Config,
    pub tls: MakeRustls,
}

/// Reads `url`: the `sslmode` and `sslrootcert` of its query become the TLS settings, the rest
/// goes to tokio-postgres. Fails with a message naming the URL (password hidden) when either
/// part is wrong, or when a root file cannot be read.
pub fn parse_url(url: &str) -> Result<Target, StoreError> {
    let (rest, mode, root) = split_tls_params(url)?;
    let mut config = tokio_postgres::Config::from_str(&rest).map_err(|e| {
        StoreError::setup_from(format!("`{}` is not a PostgreSQL URL: {e}", redact(url)), e)
    })?;
    let mode = mode.unwrap_or(SslMode::Prefer);
    config.ssl_mode(match mode {
        SslMode::Disable => PgSslMode::Disable,
        SslMode::Prefer => PgSslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => PgSslMode::Require,
    });
    let tls = MakeRustls::new(mode, root)?;
    Ok(Target { config, tls })
}

/// `url` without `sslmode` and `sslrootcert` in its query, and their (percent-decoded) values.
fn split_tls_params(url: &str) -> Result<(String, Option<SslMode>, Option<String>), StoreError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None, None));
    };
    let mut kept = Vec::new();
    let mut mode = None;
    let mut root = None;
    for piece in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = url::form_urlencoded::parse(piece.as_bytes())
            .next()
            .unwrap_or_default();
        match key.as_ref() {
            "sslmode" => mode = Some(SslMode::parse(&value)?),
            "sslrootcert" => root = Some(value.into_owned()),
            _ => kept.push(piece),
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, mode, root))
}

/// Where the trusted roots come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Roots {
    /// None: the certificate is not checked.
    Unchecked,
    /// A PEM file.
    File(PathBuf),
    /// The machine's roots (`sslrootcert=system`).
    System,
}

impl fmt::Display for Roots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Roots::Unchecked => f.write_str("no sslrootcert"),
            Roots::File(path) => write!(f, "sslrootcert={}", path.display()),
            Roots::System => f.write_str("sslrootcert=system"),
        }
    }
}

/// libpq's default root file, `~/.postgresql/root.crt`.
fn default_root_file() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    Some(PathBuf::from(home).join(".postgresql").join("root.crt"))
}

/// The roots `mode` checks against, given the URL's `sslrootcert`.
fn roots_for(mode: SslMode, named: Option<String>) -> Result<Roots, StoreError> {
    let default = default_root_file();
    match (mode, named) {
        (SslMode::Disable | SslMode::Prefer, _) => Ok(Roots::Unchecked),
        (SslMode::VerifyFull, Some(name)) if name == "system" => Ok(Roots::System),
        (_, Some(name)) if name == "system" => Err(StoreError::setup(format!(
            "sslrootcert=system needs sslmode=verify-full (not {}), as libpq has it",
            mode.name()
        ))),
        (_, Some(name)) => Ok(Roots::File(PathBuf::from(name))),
        (SslMode::Require, None) => Ok(match default {
            Some(file) if file.is_file() => Roots::File(file),
            _ => Roots::Unchecked,
        }),
        (SslMode::VerifyCa | SslMode::VerifyFull, None) => match default {
            Some(file) if file.is_file() => Ok(Roots::File(file)),
            _ => Err(StoreError::setup(format!(
                "sslmode={} needs trusted roots: add sslrootcert=FILE (a PEM file) or sslrootcert=system to the URL (there is no ~/.postgresql/root.crt)",
                mode.name()
            ))),
        },
    }
}

/// The certificates of a PEM file, as a root store.
fn load_roots(roots: &Roots) -> Result<Option<RootCertStore>, StoreError> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::Unchecked => return Ok(None),
        Roots::File(path) => {
            let shown = path.display();
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| {
                    StoreError::setup_from(format!("cannot read sslrootcert {shown}: {e}"), e)
                })?;
            let (added, _) = store.add_parsable_certificates(certs);
            if added == 0 {
                return Err(StoreError::setup(format!(
                    "sslrootcert {shown} holds no usable certificate"
                )));
            }
        }
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(StoreError::setup(
                    "sslrootcert=system: this machine has no usable root certificates".to_owned(),
                ));
            }
        }
    }
    Ok(Some(store))
}

/// Makes the TLS connector of each connection: one rustls config for the whole pool.
#[derive(Clone)]
pub struct MakeRustls {
    config: Arc<rustls::ClientConfig>,
    /// What a refused handshake's error says about the settings.
    settings: Arc<str>,
}

impl fmt::Debug for MakeRustls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MakeRustls")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl MakeRustls {
    fn new(mode: SslMode, named_root: Option<String>) -> Result<Self, StoreError> {
        let roots = roots_for(mode, named_root)?;
        let settings: Arc<str> = format!("sslmode={}, {roots}", mode.name()).into();
        let store = load_roots(&roots)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let algorithms = provider.signature_verification_algorithms;
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| StoreError::setup_from(format!("cannot set up TLS: {e}"), e))?;
        let mut config = match (mode, store) {
            (SslMode::VerifyFull, Some(store)) => {
                builder.with_root_certificates(store).with_no_client_auth()
            }
            (_, store) => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly {
                    roots: store.map(Arc::new),
                    algorithms,
                }))
                .with_no_client_auth(),
        };
        // PostgreSQL 17 checks the protocol a client names; older servers ignore it.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(MakeRustls {
            config: Arc::new(config),
            settings,
        })
    }
}

/// Checks the chain up to a trusted root but not the name (`verify-ca`), or nothing but the
/// handshake's signatures when there are no roots (`require`, `prefer`).
#[derive(Debug)]
struct ChainOnly {
    roots: Option<Arc<RootCertStore>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

impl MakeTlsConnect<Socket> for MakeRustls {
    type Stream = RustlsStream;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, host: &str) -> io::Result<RustlsConnect> {
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{host}` cannot be checked against a certificate: {e}"),
            )
        })?;
        Ok(RustlsConnect {
            connector: tokio_rustls::TlsConnector::from(self.config.clone()),
            name,
            host: host.to_owned(),
            settings: self.settings.clone(),
        })
    }
}

/// The TLS handshake of one connection.
pub struct RustlsConnect {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
    host: String,
    settings: Arc<str>,
}

impl TlsConnect<Socket> for RustlsConnect {
    type Stream = RustlsStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream>> + Send>>;

    fn connect(self, socket: Socket) -> Self::Future {
        Box::pin(async move {
            match self.connector.connect(self.name, socket).await {
                Ok(stream) => Ok(RustlsStream(Box::new(stream))),
                // The settings go in the message: "UnknownIssuer" alone does not say which
                // roots were tried.
                Err(error) => Err(io::Error::new(
                    error.kind(),
                    format!("TLS with {} failed ({}): {error}", self.host, self.settings),
                )),
            }
        })
    }
}

/// A TLS connection to the server.
pub struct RustlsStream(Box<tokio_rustls::client::TlsStream<Socket>>);

impl TlsStream for RustlsStream {
    /// None offered: SCRAM then runs without `-PLUS` (channel binding), as over plain TCP; the
    /// certificate check of `verify-full` is what stops a man in the middle.
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for RustlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RustlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tls_parameters_leave_the_url_and_the_rest_stays() {
        let (rest, mode, root) = split_tls_params(
            "postgres://u@h:5/db?application_name=r&sslmode=verify-full&sslrootcert=%2Ftmp%2Fca%20x.pem",
        )
        .expect("parsed");
        assert_eq!(rest, "postgres://u@h:5/db?application_name=r");
        assert_eq!(mode, Some(SslMode::VerifyFull));
        assert_eq!(root.as_deref(), Some("/tmp/ca x.pem"));
        let (rest, mode, root) = split_tls_params("postgres://u@h/db").expect("parsed");
        assert_eq!(
            (rest.as_str(), mode, root),
            ("postgres://u@h/db", None, None)
        );
        let (rest, _, _) = split_tls_params("postgres://u@h/db?sslmode=require").expect("parsed");
        assert_eq!(rest, "postgres://u@h/db");
    }

    #[test]
    fn unknown_modes_and_missing_roots_are_refused_with_the_reason() {
        let error = parse_url("postgres://u@h/db?sslmode=allow")
            .err()
            .expect("allow is refused")
            .to_string();
        assert!(error.contains("sslmode `allow`"), "{error}");
        let error = parse_url("postgres://u@h/db?sslmode=verify-ca&sslrootcert=system")
            .err()
            .expect("system roots need verify-full")
            .to_string();
        assert!(error.contains("needs sslmode=verify-full"), "{error}");
        let error =
            parse_url("postgres://u@h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem")
                .err()
                .expect("a missing root file")
                .to_string();
        assert!(
            error.contains("cannot read sslrootcert /nonexistent/ca.pem"),
            "{error}"
        );
    }

    #[test]
    fn modes_map_onto_what_tokio_postgres_negotiates() {
        for (query, expected) in [
            ("", PgSslMode::Prefer),
            ("?sslmode=disable", PgSslMode::Disable),
            ("?sslmode=prefer", PgSslMode::Prefer),
            ("?sslmode=require", PgSslMode::Require),
        ] {
            let target = parse_url(&format!("postgres://u@h/db{query}")).expect("parsed");
            assert_eq!(target.config.get_ssl_mode(), expected, "{query}");
        }
    }
}
