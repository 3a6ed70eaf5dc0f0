//! The run journal in the desktop state (docs/journal.md): each execution's journal lines in
//! the `journal` table, appended by [`StateJournal`] before the answer they hold reaches the
//! graph (the outbox rule applied to every step), and deleted once the run's end is posted.
//! Its bounds are the runner's ([`runner::host::journal::MAX_JOURNAL_BYTES`] and
//! `MAX_JOURNAL_ENTRIES` per run, enforced by the `Recorder` in front of the sink).

use relay_sqlite::CachedStatements as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use runner::host::journal::JournalSink;
use rusqlite::params;

use super::{DesktopState, StateError};

impl DesktopState {
    /// Appends line `seq` (from 1) of `execution_id`'s journal.
    pub fn append_journal_line(
        &self,
        execution_id: &str,
        seq: u64,
        line: &str,
    ) -> Result<(), StateError> {
        self.with_sync(|conn| insert_line(conn, execution_id, seq, line))
    }

    /// The journal of `execution_id` as JSON lines (what `runner replay` reads), `None` when it
    /// has none.
    pub fn journal_text(&self, execution_id: &str) -> Result<Option<String>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn
                .prepare_cached("SELECT line FROM journal WHERE execution_id = ?1 ORDER BY seq")?;
            let mut text = String::new();
            for line in stmt.query_map(params![execution_id], |row| row.get::<_, String>(0))? {
                text.push_str(&line?);
                text.push('\n');
            }
            Ok((!text.is_empty()).then_some(text))
        })
    }

    /// The executions that have a journal in the state, with its lines and bytes.
    pub fn journals(&self) -> Result<Vec<(String, i64, i64)>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT execution_id, COUNT(*), SUM(LENGTH(CAST(line AS BLOB)) + 1) FROM journal
                 GROUP BY execution_id ORDER BY execution_id",
            )?;
            let rows = stmt.query_map([], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                ))
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }
}

/// Deletes the journal of `execution_id` (its run's end was posted, or it never ran).
pub(super) fn delete_journal(
    conn: &rusqlite::Connection,
    execution_id: &str,
) -> Result<(), StateError> {
    conn.execute_cached(
        "DELETE FROM journal WHERE execution_id = ?1",
        params![execution_id],
    )?;
    Ok(())
}

/// How long a journal line waits for the state file's lock before the journal stops (see
/// [`StateJournal::append`]).
pub const JOURNAL_BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(50);

/// The journal's own connection to the state file (never creating it).
fn journal_connection(path: &std::path::Path) -> Result<rusqlite::Connection, StateError> {
    let connection = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    connection.busy_timeout(JOURNAL_BUSY_TIMEOUT)?;
    relay_sqlite::cache_statements(&connection)?;
    Ok(connection)
}

/// Inserts line `seq` of `execution_id`'s journal.
fn insert_line(
    conn: &rusqlite::Connection,
    execution_id: &str,
    seq: u64,
    line: &str,
) -> Result<(), StateError> {
    let seq = i64::try_from(seq)
        .map_err(|_| StateError::Invalid("a journal line number out of range".into()))?;
    conn.execute_cached(
        "INSERT INTO journal (execution_id, seq, line) VALUES (?1, ?2, ?3)",
        params![execution_id, seq, line],
    )?;
    Ok(())
}

/// A run's journal written to the desktop state, one row per line. `append` returns once the
/// row is written, so the runner hands the graph its answer only after that.
pub struct StateJournal {
    state: DesktopState,
    /// A connection of the journal's own to the state file, whose writes wait at most
    /// [`JOURNAL_BUSY_TIMEOUT`] for the file's lock: `append` runs on the graph's thread, a
    /// runtime worker, which must not wait out the state's long busy timeout (or the state's
    /// own connection, held by a write that does). `None` for an in-memory state.
    own: Option<std::sync::Mutex<rusqlite::Connection>>,
    execution_id: String,
    written: AtomicU64,
    /// A line could not be written (a full disk, a state file locked by another process): the
    /// journal stops at the last line written and the run goes on without it.
    stopped: AtomicBool,
}

impl StateJournal {
    /// The journal of `execution_id`, written to `state` (the lines it already holds, if any, are
    /// kept: the new ones follow them).
    pub fn new(state: DesktopState, execution_id: &str) -> Result<Self, StateError> {
        let id = execution_id.to_owned();
        let written = state.with_sync(|conn| {
            let last: Option<i64> = conn.query_row_cached(
                "SELECT MAX(seq) FROM journal WHERE execution_id = ?1",
                params![id],
                |row| row.get(0),
            )?;
            Ok(last.and_then(|n| u64::try_from(n).ok()).unwrap_or(0))
        })?;
        let own = state.path().map(journal_connection).transpose()?;
        Ok(Self {
            state,
            own: own.map(std::sync::Mutex::new),
            execution_id: execution_id.to_owned(),
            written: AtomicU64::new(written),
            stopped: AtomicBool::new(false),
        })
    }
}

impl JournalSink for StateJournal {
    /// Appends one line. A line that cannot be written does not fail the run: the journal is
    /// a means to resume it, and a full disk or a locked state file must cost no result (the
    /// outbox keeps the run's end as before). The journal then stops where it is, a prefix of
    /// the run that is still true: a resume from it is a resume from a stop at that line, which
    /// starts again the work that followed (agents are asked again; a tool that is not
    /// idempotent is not run again and its call fails saying it may have happened).
    fn append(&self, line: &str) -> std::io::Result<()> {
        if self.stopped.load(Ordering::SeqCst) {
            return Ok(());
        }
        // The recorder calls `append` one line at a time (under its lock), so the numbers
        // follow the order of the lines.
        let seq = self.written.load(Ordering::SeqCst) + 1;
        let written = match &self.own {
            Some(own) => insert_line(
                &own.lock().unwrap_or_else(|p| p.into_inner()),
                &self.execution_id,
                seq,
                line,
            ),
            None => self
                .state
                .append_journal_line(&self.execution_id, seq, line),
        };
        match written {
            Ok(()) => self.written.store(seq, Ordering::SeqCst),
            Err(error) => {
                self.stopped.store(true, Ordering::SeqCst);
                tracing::warn!(
                    execution = %self.execution_id,
                    lines = seq - 1,
                    %error,
                    "the run's journal cannot be written; the run goes on, and could be resumed only from the lines written so far"
                );
            }
        }
        Ok(())
    }

    fn finish(&self) -> std::io::Result<()> {
        // Every row was committed as it was appended.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use relay_protocol::CommandId;
    use relay_protocol::clock::Timestamp;
    use runner::host::journal::{Entry, Recorder};

    use super::*;
    use crate::state::test_meta as meta;

    #[test]
    fn a_journal_is_kept_in_order_until_the_runs_end_is_posted() {
        let state = DesktopState::open_in_memory().expect("state");
        let now = Timestamp::from_unix_millis(1);
        let session = state
            .upsert_session(&meta("a"), "script", None, now)
            .expect("session");
        let command = CommandId::new_random();
        state
            .begin_execution("e1", &command, "p", &session, "a", now)
            .expect("begin");
        let sink = Arc::new(StateJournal::new(state.clone(), "e1").expect("sink"));
        let recorder = Recorder::new(sink);
        for tokens in [3, 5] {
            recorder
                .append(&Entry::Usage { tokens, cost: 0.0 })
                .expect("append");
        }
        let text = state.journal_text("e1").expect("read").expect("a journal");
        assert_eq!(
            text,
            "{\"k\":\"usage\",\"tokens\":3,\"cost\":0.0}\n{\"k\":\"usage\",\"tokens\":5,\"cost\":0.0}\n"
        );
        // A sink opened again (a resume) continues after the lines there.
        let again = StateJournal::new(state.clone(), "e1").expect("sink");
        again.append("{}").expect("append");
        assert_eq!(state.journals().expect("list")[0].1, 3);

        let completion = crate::bounding::completion(
            "e1",
            relay_protocol::CompletionStatus::Completed,
            None,
            8,
            0.0,
            None,
        );
        state
            .finish_execution(&command, None, None, &completion, now)
            .expect("finish");
        assert!(
            state.journal_text("e1").expect("read").is_some(),
            "kept until posted"
        );
        state.remove_from_outbox(&command).expect("posted");
        assert_eq!(state.journal_text("e1").expect("read"), None, "deleted");
    }
}
