//! TLS to PostgreSQL as the URL's `sslmode` and `sslrootcert` ask. The test makes a CA and a
//! server certificate for `localhost` (the `openssl` command, which Debian's PostgreSQL
//! package brings along), starts a cluster of its own that takes TCP connections over TLS only
//! (`scripts/pg.sh` with `PG_TLS_DIR`), and tries every mode against it, the ones that must
//! fail included. Runs where the other PostgreSQL tests run (`GRAPHRELAY_PG_URL`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use relay_service::store::PostgresStore;
use relay_service::store::notify::{Notifier, Topic};
use relay_service::store::postgres::notify::PgNotifier;
use relay_service::store::postgres::tls;

use crate::common::{pg_sh, postgres_url, workspace_root};

/// What the certificates are made with: a CA, and a server certificate for `localhost` only
/// (so `127.0.0.1` is a wrong name for it).
const OPENSSL_CONFIG: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
subjectAltName = DNS:localhost
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
authorityKeyIdentifier = keyid
";

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (Debian's postgresql package depends on it)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A self-signed CA named `subject`, `{name}.crt` and `{name}.key` in `dir`.
fn make_ca(dir: &Path, name: &str, subject: &str) {
    let (cert, key) = (format!("{name}.crt"), format!("{name}.key"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-config",
            "openssl.cnf",
            "-extensions",
            "ca",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &cert,
            "-days",
            "2",
            "-subj",
            subject,
        ],
    );
}

/// `server.crt` and `server.key` in `dir`, for `localhost`, signed by the CA `ca`.
fn make_server_cert(dir: &Path, ca: &str) {
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-config",
            "openssl.cnf",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "openssl.cnf",
            "-extensions",
            "server",
        ],
    );
}

/// A TLS-only cluster of this test's own, stopped and removed when dropped; `certs` holds
/// `ca.crt` (the server's CA) and `other-ca.crt` (a CA that signed nothing of it).
struct TlsCluster {
    dir: PathBuf,
    certs: PathBuf,
    port: String,
}

impl TlsCluster {
    fn pg_sh(&self, action: &str) -> String {
        pg_sh(action, &self.dir, Some(&self.certs))
    }

    fn start() -> TlsCluster {
        let dir = workspace_root()
            .join("target")
            .join(format!("pg-tls-{}", uuid::Uuid::new_v4().simple()));
        let certs = dir.join("certs");
        std::fs::create_dir_all(&certs).expect("certificate directory");
        std::fs::write(certs.join("openssl.cnf"), OPENSSL_CONFIG).expect("openssl.cnf");
        make_ca(&certs, "ca", "/CN=graphrelay test CA");
        make_ca(&certs, "other-ca", "/CN=another test CA");
        make_server_cert(&certs, "ca");
        let mut cluster = TlsCluster {
            dir,
            certs,
            port: String::new(),
        };
        let url = cluster.pg_sh("start");
        cluster.port = url
            .rsplit_once(':')
            .and_then(|(_, rest)| rest.split_once('/'))
            .map(|(port, _)| port.to_owned())
            .expect("pg.sh's URL has a port");
        cluster
    }

    /// The cluster's URL on `host` with `query` appended.
    fn url(&self, host: &str, query: &str) -> String {
        format!("postgres://postgres@{host}:{}/postgres?{query}", self.port)
    }

    fn cert(&self, name: &str) -> String {
        self.certs.join(name).display().to_string()
    }
}

impl Drop for TlsCluster {
    fn drop(&mut self) {
        self.pg_sh("stop");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether a connection made as `url` says runs over TLS, by the server's own account.
async fn server_sees_tls(url: &str) -> bool {
    let target = tls::parse_url(url).expect("a URL");
    let (client, connection) = target.config.connect(target.tls).await.expect("connect");
    tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .expect("pg_stat_ssl");
    row.get::<_, bool>(0)
}

/// Connecting as `url` fails; the error's text.
async fn refused(url: &str) -> String {
    match PostgresStore::connect(url).await {
        Ok(_) => panic!("{url} connected"),
        Err(error) => error.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_modes_connect_and_refuse_as_libpq_does() {
    if postgres_url().is_none() {
        return;
    }
    graphrelay_net::install_crypto_provider();
    let cluster = TlsCluster::start();
    let ca = cluster.cert("ca.crt");

    // verify-full with the CA that signed the certificate, on the name it was issued for.
    let full = cluster.url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    PostgresStore::connect(&full)
        .await
        .expect("verify-full with the right CA connects and migrates");
    assert!(server_sees_tls(&full).await, "the connection is TLS");

    // require encrypts without checking the certificate; verify-ca checks the chain only, so
    // an address the certificate does not name passes it.
    for url in [
        cluster.url("127.0.0.1", "sslmode=require"),
        cluster.url("127.0.0.1", &format!("sslmode=verify-ca&sslrootcert={ca}")),
        cluster.url("127.0.0.1", "sslmode=prefer"),
    ] {
        PostgresStore::connect(&url).await.expect(&url);
        assert!(server_sees_tls(&url).await, "{url} runs over TLS");
    }

    // A CA that did not sign the server's certificate: refused, saying which roots were tried.
    let other = cluster.cert("other-ca.crt");
    let error = refused(&cluster.url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={other}"),
    ))
    .await;
    assert!(
        error.contains("UnknownIssuer") && error.contains(&format!("sslrootcert={other}")),
        "{error}"
    );
    let error = refused(&cluster.url(
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={other}"),
    ))
    .await;
    assert!(error.contains("UnknownIssuer"), "{error}");
    // require with a root file checks the chain, as libpq's does.
    let error =
        refused(&cluster.url("127.0.0.1", &format!("sslmode=require&sslrootcert={other}"))).await;
    assert!(error.contains("UnknownIssuer"), "{error}");

    // verify-full on a name the certificate is not for.
    let error = refused(&cluster.url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    ))
    .await;
    assert!(
        error.contains("not valid for name \"127.0.0.1\"") && error.contains("sslmode=verify-full"),
        "{error}"
    );

    // The server takes TCP over TLS only: a plain connection is refused, and the error says
    // which setting to change.
    let error = refused(&cluster.url("127.0.0.1", "sslmode=disable")).await;
    assert!(
        error.contains("no encryption") && error.contains("sslmode=verify-full"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_ups_cross_replicas_over_verified_tls() {
    if postgres_url().is_none() {
        return;
    }
    graphrelay_net::install_crypto_provider();
    let cluster = TlsCluster::start();
    let url = cluster.url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", cluster.cert("ca.crt")),
    );
    let a: Arc<PgNotifier> = PgNotifier::start(&url, "tls_test")
        .await
        .expect("listen on A");
    let b: Arc<PgNotifier> = PgNotifier::start(&url, "tls_test")
        .await
        .expect("listen on B");
    let topic = Topic::Project("p1".to_owned());
    let mut waiter = a.subscribe(&topic);
    // The listener's LISTEN is in place when start returns; a notify from B reaches A.
    b.notify(&topic);
    tokio::time::timeout(Duration::from_secs(10), waiter.changed())
        .await
        .expect("B's wake-up reaches A's waiter over TLS");

    // A wrong CA stops the notifier from starting, as it stops the store.
    let wrong = cluster.url(
        "localhost",
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            cluster.cert("other-ca.crt")
        ),
    );
    match PgNotifier::start(&wrong, "tls_test").await {
        Ok(_) => panic!("a notifier with the wrong CA started"),
        Err(error) => assert!(error.to_string().contains("UnknownIssuer"), "{error}"),
    }
}
