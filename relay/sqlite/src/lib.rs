//! What the service's store and the desktop's state do alike with their SQLite files: switch
//! them to WAL and apply their schema migrations, also when several processes open a new file at
//! once.

use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode, TransactionBehavior};

/// Switches `conn` to WAL and returns the journal mode SQLite reports afterwards.
///
/// While another process is switching a new file, SQLite answers "database is locked" at once
/// instead of waiting out the busy timeout, so this waits here, up to `patience`. Without it,
/// `relay serve` and `relay admin` (or `relay desktop run` and a control command) started
/// together on a fresh machine failed all but one.
pub fn use_wal(conn: &Connection, patience: Duration) -> rusqlite::Result<String> {
    let deadline = Instant::now() + patience;
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0)) {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == ErrorCode::DatabaseBusy && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// Why [`migrate`] failed.
#[derive(Debug)]
pub enum MigrateError {
    /// The file was migrated by a newer build: schema version `found`, this build knows `known`.
    Newer {
        /// The file's `user_version`.
        found: usize,
        /// How many migrations this build has.
        known: usize,
    },
    /// SQLite failed.
    Sqlite(rusqlite::Error),
}

impl From<rusqlite::Error> for MigrateError {
    fn from(error: rusqlite::Error) -> Self {
        MigrateError::Sqlite(error)
    }
}

/// Applies the `migrations` a file has not had yet; `PRAGMA user_version` counts those applied.
///
/// Under an immediate transaction: of several processes opening a new file at once (`relay serve`
/// and `relay admin`, or `relay desktop run` and a control command), one migrates and the others
/// wait for it, then find nothing to do. A file from a newer build is refused, not used with a
/// schema this build does not know.
pub fn migrate(conn: &mut Connection, migrations: &[&str]) -> Result<(), MigrateError> {
    let transaction = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let applied: i64 = transaction.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    let applied = usize::try_from(applied).unwrap_or(usize::MAX);
    if applied > migrations.len() {
        return Err(MigrateError::Newer {
            found: applied,
            known: migrations.len(),
        });
    }
    for (index, migration) in migrations.iter().enumerate().skip(applied) {
        transaction.execute_batch(migration)?;
        transaction.pragma_update(
            None,
            "user_version",
            i64::try_from(index + 1).unwrap_or(i64::MAX),
        )?;
    }
    Ok(transaction.commit()?)
}

/// Opens a new file from six threads at once, five times over, and returns every failure: how
/// the tests show that processes starting together on a fresh machine all succeed.
/// Only with the `test-support` feature, which the stores' tests enable.
#[cfg(feature = "test-support")]
pub fn open_at_once_failures<E: std::fmt::Display + Send>(
    name: &str,
    open: impl Fn(&std::path::Path) -> Result<(), E> + Sync,
) -> Vec<String> {
    let mut failures = Vec::new();
    for _ in 0..5 {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(name);
        let barrier = std::sync::Barrier::new(6);
        std::thread::scope(|scope| {
            let openers: Vec<_> = (0..6)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        open(&path)
                    })
                })
                .collect();
            for opener in openers {
                if let Err(e) = opener.join().expect("no panic") {
                    failures.push(e.to_string());
                }
            }
        });
    }
    failures
}
