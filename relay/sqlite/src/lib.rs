//! What the service's store and the desktop's state do alike with their SQLite files: open them
//! with their checks (a new file only where none exists, an empty, damaged or other program's
//! one refused: each program's file carries its own `application_id`, [`identity`]), switch
//! them to WAL, apply their schema migrations (also when several processes open a new file at
//! once), name what went wrong when storage fails ([`Fault`]) and copy them while in use.

use std::path::Path;
use std::time::Duration;

use relay_protocol::clock::Stopwatch;

use rusqlite::{Connection, ErrorCode, TransactionBehavior};

/// Permissions of a database file this crate creates: the owner's alone, whatever the umask.
/// SQLite gives the WAL and shared-memory files the database file's permissions.
pub const PRIVATE_FILE_MODE: u32 = 0o600;
/// Permissions of a folder this crate creates for a database.
pub const PRIVATE_DIR_MODE: u32 = 0o700;

mod cached;
mod checked;
pub mod identity;
pub mod rows;

pub use cached::{CachedStatements, STATEMENT_CACHE_CAPACITY, cache_statements};
pub use checked::{
    Check, CopyError, DEFAULT_CHECK_LIMIT, Expected, Fault, OpenError, OpenOptions, Opened,
    backup_into, check_file, integrity_check, open_checked, quick_check, restore, schema_version,
};
pub use identity::Program;

/// Opens (creating if needed) the database at `path`. A missing file is created first with
/// [`PRIVATE_FILE_MODE`], and missing folders above it with [`PRIVATE_DIR_MODE`], so that
/// results, artifacts and token hashes are never readable by other users of the machine, whatever
/// the umask. An existing file keeps the permissions its owner gave it.
pub fn open_private(path: &Path) -> rusqlite::Result<Connection> {
    create_private(path).map_err(|e| {
        rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
            Some(format!("cannot create {}: {e}", path.display())),
        )
    })?;
    Connection::open(path)
}

fn create_private(path: &Path) -> std::io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_private_dirs(parent)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, PRIVATE_FILE_MODE);
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

fn create_private_dirs(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, PRIVATE_DIR_MODE);
    builder.create(dir)
}

/// Switches `conn` to WAL and returns the journal mode SQLite reports afterwards.
///
/// While another process is switching a new file, SQLite answers "database is locked" at once
/// instead of waiting out the busy timeout, so this waits here, up to `patience`. Without it,
/// `relay serve` and `relay admin` (or `relay desktop run` and a control command) started
/// together on a fresh machine failed all but one.
pub fn use_wal(conn: &Connection, patience: Duration) -> rusqlite::Result<String> {
    let waiting = Stopwatch::start();
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0)) {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == ErrorCode::DatabaseBusy && waiting.elapsed() < patience =>
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode()
            & 0o777
    }

    #[test]
    fn a_new_database_and_its_folders_are_the_owners_alone_under_umask_022() {
        // SAFETY: umask only sets this process's file-creation mask.
        unsafe { libc::umask(0o022) };
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a/b/relay.db");
        let conn = open_private(&path).expect("open");
        assert_eq!(use_wal(&conn, Duration::from_secs(1)).expect("wal"), "wal");
        conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
            .expect("write");
        for file in ["relay.db", "relay.db-wal", "relay.db-shm"] {
            assert_eq!(mode(&dir.path().join("a/b").join(file)), 0o600, "{file}");
        }
        assert_eq!(mode(&dir.path().join("a")), 0o700);
        assert_eq!(mode(&dir.path().join("a/b")), 0o700);
        drop(conn);
        // An existing file keeps what its owner chose.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        drop(open_private(&path).expect("reopen"));
        assert_eq!(mode(&path), 0o640);
    }
}
