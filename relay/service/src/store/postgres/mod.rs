//! The PostgreSQL store: tokio-postgres over a deadpool pool, for several service replicas on
//! one database.
//!
//! Every promise of the [`Store`](super::Store) trait holds under READ COMMITTED across connections and
//! replicas: single-use and state-moving writes are one conditional `UPDATE` (a concurrent
//! writer waits on the row lock and then re-checks the condition, so exactly one wins); inserts
//! under a unique key use `ON CONFLICT DO NOTHING` and read the winner back; the steps that
//! count before they write (the queue quota, an artifact's limit, a session snapshot) first
//! lock the one row they are about (`FOR UPDATE`), which serialises exactly the writers that
//! could race. Migrations run in one transaction under an advisory lock, so replicas that start
//! together do not race either.

mod auth;
mod chat;
mod console;
mod core;
pub mod notify;
mod presence;
pub mod tls;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};

use super::StoreError;

/// Connections one replica keeps to the database at most.
pub const MAX_CONNECTIONS: usize = 16;
/// The advisory lock key migrations run under ("graphrelay" in ASCII, folded to 63 bits).
const MIGRATION_LOCK: i64 = 0x6772_6170_6872_656c;

/// Schema migrations, applied in order in one transaction; `relay_schema` records the version.
/// Never edit a released entry: append a new one.
const MIGRATIONS: &[&str] = &[
    core::MIGRATION,
    chat::MIGRATION,
    auth::MIGRATION,
    console::MIGRATION,
    presence::MIGRATION,
    core::ARGS_AND_CAPS_MIGRATION,
    core::SHARING_VERSION_MIGRATION,
    auth::CONNECTIONS_MIGRATION,
    presence::LONG_POLLS_MIGRATION,
    core::END_CAUSE_MIGRATION,
    core::RESUMED_MIGRATION,
];

/// The schema migrations, in order: for tests that build a database as an older release left
/// it and open it with this one.
#[cfg(feature = "conformance")]
pub fn migrations() -> &'static [&'static str] {
    MIGRATIONS
}

/// A [`Store`](super::Store) over one PostgreSQL database.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    /// How long calls held (and waited for) a pooled connection.
    latency: std::sync::Arc<super::histogram::SharedHistogram>,
}

/// A pooled connection that records, when it goes back, how long the call waited for it and
/// held it: every store call takes one connection, so that is the call's latency.
pub(super) struct Timed {
    object: deadpool_postgres::Object,
    watch: relay_protocol::clock::Stopwatch,
    latency: std::sync::Arc<super::histogram::SharedHistogram>,
}

impl std::ops::Deref for Timed {
    type Target = deadpool_postgres::Object;

    fn deref(&self) -> &Self::Target {
        &self.object
    }
}

impl std::ops::DerefMut for Timed {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.object
    }
}

impl Drop for Timed {
    fn drop(&mut self) {
        self.latency.observe(self.watch.elapsed());
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").finish_non_exhaustive()
    }
}

/// A database error as a [`StoreError`], with PostgreSQL's own code and message.
fn backend(error: tokio_postgres::Error) -> StoreError {
    match error.as_db_error() {
        Some(db) => {
            let code = db.code().code();
            let detail = format!(
                "PostgreSQL {code}: {}{}",
                db.message(),
                tls_hint(code, db.message())
            );
            match fault_of_sqlstate(db.code().code()) {
                Some(fault) => StoreError::Fault {
                    fault,
                    detail,
                    source: Box::new(error),
                },
                None => StoreError::Postgres {
                    detail,
                    source: error,
                },
            }
        }
        None => StoreError::Postgres {
            detail: format!("PostgreSQL: {}", with_causes(&error)),
            source: error,
        },
    }
}

/// `sql` prepared on `client`, from the connection's statement cache after its first use
/// there: a query then costs one round trip to the server, not two (parse and describe, then
/// bind and execute). Only for SQL whose text is one of a fixed set (no values spliced in), so
/// the cache stays as small as the store's list of statements.
async fn prepared(
    client: &deadpool_postgres::Object,
    sql: &str,
) -> Result<tokio_postgres::Statement, StoreError> {
    client.prepare_cached(sql).await.map_err(backend)
}

/// `error` and its causes, "a: b: c": tokio-postgres says only "error performing TLS handshake"
/// or "error connecting to server" and keeps the why as the source.
fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

/// A hint for the errors whose fix is in the URL's TLS settings.
fn tls_hint(code: &str, message: &str) -> &'static str {
    if code == "28000" && message.contains("no encryption") {
        " (the server accepts this connection only over TLS: set sslmode=verify-full, or require, in the database URL instead of disable)"
    } else {
        ""
    }
}

/// The named cause behind a PostgreSQL error code, where there is one.
fn fault_of_sqlstate(code: &str) -> Option<super::Fault> {
    use super::Fault;
    match code {
        // disk_full, and insufficient_resources in general (out of disk for temp files too).
        "53100" | "53000" => Some(Fault::DiskFull),
        // read_only_sql_transaction: a hot standby, or default_transaction_read_only.
        "25006" => Some(Fault::ReadOnly),
        // data_corrupted, index_corrupted.
        "XX001" | "XX002" => Some(Fault::Corrupt),
        // lock_not_available, too_many_connections.
        "55P03" | "53300" => Some(Fault::Busy),
        _ => None,
    }
}

/// Whether `text` names a PostgreSQL database (`postgres://` or `postgresql://`).
pub fn is_postgres_url(text: &str) -> bool {
    text.starts_with("postgres://") || text.starts_with("postgresql://")
}

impl PostgresStore {
    /// The schema version this build migrates a PostgreSQL database to.
    pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

    /// Connects to the database at `url` (a libpq URL) and migrates it.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_in_schema(url, None).await
    }

    /// Like [`PostgresStore::connect`], with every table in `schema` (created if missing): for
    /// tests that want a fresh, empty store per check on one server.
    pub async fn connect_in_schema(url: &str, schema: Option<&str>) -> Result<Self, StoreError> {
        let tls::Target { mut config, tls } = tls::parse_url(url)?;
        if let Some(schema) = schema {
            if !schema
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return Err(StoreError::Setup {
                    message: format!(
                        "bad schema name `{schema}`: use only ASCII letters, digits and `_`"
                    ),
                    source: None,
                });
            }
            config.options(format!("-c search_path={schema}"));
        }
        let pool = build_pool(config, tls, MAX_CONNECTIONS)?;
        let store = PostgresStore {
            pool,
            latency: std::sync::Arc::new(super::histogram::SharedHistogram::new(
                &super::STORE_LATENCY_BUCKETS,
            )),
        };
        store.migrate(schema).await?;
        Ok(store)
    }

    /// The schema version of the database at `url` (`None`: it has no relay schema yet), read
    /// without migrating or otherwise changing it.
    pub async fn schema_version(url: &str) -> Result<Option<usize>, StoreError> {
        let tls::Target { config, tls } = tls::parse_url(url)?;
        let pool = build_pool(config, tls, 1)?;
        let client = pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(error) => backend(error),
            other => StoreError::Pool(other),
        })?;
        match client
            .query_opt("SELECT version FROM relay_schema", &[])
            .await
        {
            Ok(row) => {
                let version = match row {
                    Some(row) => row.try_get::<_, i32>(0).map_err(backend)?,
                    None => 0,
                };
                Ok(Some(usize::try_from(version).unwrap_or(0)))
            }
            Err(error)
                if error.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) =>
            {
                Ok(None)
            }
            Err(error) => Err(backend(error)),
        }
    }

    /// A pooled connection, timed until it goes back.
    async fn client(&self) -> Result<Timed, StoreError> {
        let watch = relay_protocol::clock::Stopwatch::start();
        let object = self.pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(error) => backend(error),
            other => StoreError::Pool(other),
        })?;
        Ok(Timed {
            object,
            watch,
            latency: self.latency.clone(),
        })
    }

    /// How the pool is used now and how long calls took.
    pub(super) fn pool_stats(&self) -> super::StoreStats {
        let status = self.pool.status();
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        super::StoreStats {
            latency: self.latency.snapshot(),
            pool_max: count(status.max_size),
            pool_open: count(status.size),
            pool_in_use: count(status.size.saturating_sub(status.available)),
            pool_waiting: count(status.waiting),
        }
    }

    async fn migrate(&self, schema: Option<&str>) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(backend)?;
        transaction
            .execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(backend)?;
        if let Some(schema) = schema {
            // Under the lock: two replicas creating one schema at once would collide.
            transaction
                .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                .await
                .map_err(backend)?;
        }
        transaction
            .batch_execute("CREATE TABLE IF NOT EXISTS relay_schema (version INTEGER NOT NULL)")
            .await
            .map_err(backend)?;
        let row = transaction
            .query_opt("SELECT version FROM relay_schema", &[])
            .await
            .map_err(backend)?;
        let applied = match row {
            Some(row) => row.try_get::<_, i32>(0).map_err(backend)?,
            None => {
                transaction
                    .execute("INSERT INTO relay_schema (version) VALUES (0)", &[])
                    .await
                    .map_err(backend)?;
                0
            }
        };
        let applied = usize::try_from(applied).unwrap_or(usize::MAX);
        if applied > MIGRATIONS.len() {
            return Err(StoreError::Unusable(
                format!(
                    "the database has schema version {applied}, newer than this build speaks ({}); it was left unchanged: run a build that speaks version {applied} (`relay --version` names the versions a build speaks)",
                    MIGRATIONS.len()
                )
                .into(),
            ));
        }
        for migration in &MIGRATIONS[applied..] {
            transaction
                .batch_execute(migration)
                .await
                .map_err(backend)?;
        }
        let version = i32::try_from(MIGRATIONS.len()).unwrap_or(i32::MAX);
        transaction
            .execute("UPDATE relay_schema SET version = $1", &[&version])
            .await
            .map_err(backend)?;
        transaction.commit().await.map_err(backend)
    }
}

/// A pool of at most `size` connections to `config`'s database.
fn build_pool(
    config: tokio_postgres::Config,
    tls: tls::MakeRustls,
    size: usize,
) -> Result<Pool, StoreError> {
    let manager = Manager::from_config(
        config,
        tls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .build()
        .map_err(StoreError::PoolBuild)
}

/// `url` without its password, for messages and logs.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_recognised_and_passwords_redacted() {
        assert!(is_postgres_url("postgres://u@h/db"));
        assert!(is_postgres_url("postgresql://u@h/db"));
        assert!(!is_postgres_url("relay.db"));
        assert_eq!(
            redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
    }
}
