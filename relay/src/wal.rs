//! Switching a SQLite file to WAL, shared by the service's store and the desktop's state.

use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode};

/// Switches `conn` to WAL and returns the journal mode SQLite reports afterwards.
///
/// While another process is switching a new file, SQLite answers "database is locked" at once
/// instead of waiting out the busy timeout, so this waits here, up to `patience`. Without it,
/// `relay serve` and `relay admin` (or `relay desktop run` and a control command) started
/// together on a fresh machine failed all but one.
pub(crate) fn use_wal(conn: &Connection, patience: Duration) -> rusqlite::Result<String> {
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

/// Opens a new file from six threads at once, five times over, and returns every failure: how
/// the tests show that processes starting together on a fresh machine all succeed.
#[cfg(test)]
pub(crate) fn open_at_once_failures(
    name: &str,
    open: impl Fn(&std::path::Path) -> Result<(), String> + Sync,
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
                    failures.push(e);
                }
            }
        });
    }
    failures
}
