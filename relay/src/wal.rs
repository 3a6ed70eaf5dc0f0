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
