//! Opening a database file with its checks, naming storage faults, and copying a file in use.
//!
//! - A schema is created only where no file exists: the new database is built under a temporary
//!   name beside it and linked into place, so the path never shows a half-made file to another
//!   process; an existing file of 0 bytes is refused, never taken as new (that turned the loss of
//!   every row into "the bearer token is unknown").
//! - An existing file must pass `PRAGMA quick_check`, within a time limit ([`Check::Unfinished`]
//!   past it, which the caller logs), before anything reads or writes it.
//! - An existing file must be this program's ([`crate::identity`]): the other program's file, or
//!   another application's, is refused naming what it is.
//! - [`backup_into`] takes a consistent copy with `VACUUM INTO` while other connections write;
//!   [`check_file`] runs `integrity_check` and the decode pass ([`crate::rows`]) on a file;
//!   [`restore`] puts a checked copy of this program's file in place of a file no process has
//!   open.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags};

use crate::identity::{Identity, Program, identify, not_this_program, stamp};
use crate::rows::{JsonColumn, undecodable_rows};
use crate::{MigrateError, migrate, use_wal};

/// How long the open check may run by default before it is left unfinished. `quick_check`
/// reads every page: about a second per few hundred MB on an SSD (docs/limits.md).
pub const DEFAULT_CHECK_LIMIT: Duration = Duration::from_secs(60);

/// What kind of storage failure an error is: what the service tells agents and the HTTP APIs
/// answer, and what the log tells the operator to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The filesystem holding the database has no room left.
    DiskFull,
    /// The file (or its filesystem) cannot be written.
    ReadOnly,
    /// The file is gone or cannot be opened.
    Missing,
    /// The file is damaged.
    Corrupt,
    /// Another writer held the lock past the busy timeout.
    Busy,
}

impl Fault {
    /// The fault behind a SQLite error, if it is one of these.
    pub fn of(error: &rusqlite::Error) -> Option<Fault> {
        let rusqlite::Error::SqliteFailure(error, _) = error else {
            return None;
        };
        match error.code {
            ErrorCode::DiskFull => Some(Fault::DiskFull),
            // The file was moved or deleted under an open connection.
            ErrorCode::ReadOnly
                if error.extended_code == rusqlite::ffi::SQLITE_READONLY_DBMOVED =>
            {
                Some(Fault::Missing)
            }
            ErrorCode::ReadOnly => Some(Fault::ReadOnly),
            ErrorCode::CannotOpen | ErrorCode::NotFound => Some(Fault::Missing),
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => Some(Fault::Corrupt),
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => Some(Fault::Busy),
            _ => None,
        }
    }

    /// The stable name: `disk_full`, `read_only`, `missing`, `corrupt`, `busy`.
    pub fn as_str(self) -> &'static str {
        match self {
            Fault::DiskFull => "disk_full",
            Fault::ReadOnly => "read_only",
            Fault::Missing => "missing",
            Fault::Corrupt => "corrupt",
            Fault::Busy => "busy",
        }
    }

    /// What happened, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Fault::DiskFull => "the disk holding the database is full",
            Fault::ReadOnly => "the database file cannot be written (read-only)",
            Fault::Missing => "the database file is missing or cannot be opened",
            Fault::Corrupt => "the database is damaged",
            Fault::Busy => "the database is busy (another writer held its lock too long)",
        }
    }

    /// Whether the same call may succeed later without anyone repairing anything by hand: a
    /// busy lock clears, and a full disk is usually freed (the caller should wait, not give up).
    pub fn transient(self) -> bool {
        matches!(self, Fault::DiskFull | Fault::Busy)
    }

    /// What an operator should do about it.
    pub fn remedy(self) -> &'static str {
        match self {
            Fault::DiskFull => {
                "free space on the database's filesystem; writes succeed again once there is room"
            }
            Fault::ReadOnly => {
                "make the database file, its folder and its filesystem writable by this process's user"
            }
            Fault::Missing => {
                "the file was moved or deleted while in use: stop the process and restore it from a backup (`relay admin db restore`)"
            }
            Fault::Corrupt => {
                "stop the process, run `relay admin db check` on the file and restore a good backup with `relay admin db restore`"
            }
            Fault::Busy => {
                "another process held the write lock too long; this clears by itself, and if it persists look for a stuck `relay admin` command"
            }
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

/// How a `quick_check` or `integrity_check` went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// SQLite found nothing wrong.
    Passed,
    /// What SQLite found wrong (its first lines).
    Damaged(String),
    /// The check ran past its time limit and was stopped: it says nothing either way.
    Unfinished(Duration),
}

/// Runs `PRAGMA quick_check` (every page's b-tree structure, not the indexes' contents),
/// stopping it after `limit`.
pub fn quick_check(conn: &Connection, limit: Duration) -> rusqlite::Result<Check> {
    run_check(conn, "quick_check", Some(limit))
}

/// Runs `PRAGMA integrity_check` (also every index against its table), to the end.
pub fn integrity_check(conn: &Connection) -> rusqlite::Result<Check> {
    run_check(conn, "integrity_check", None)
}

/// Lines of a failed check the message keeps.
const CHECK_LINES_KEPT: usize = 3;

fn run_check(conn: &Connection, pragma: &str, limit: Option<Duration>) -> rusqlite::Result<Check> {
    let (done, finished) = channel::<()>();
    let watchdog = limit.map(|limit| {
        let handle = conn.get_interrupt_handle();
        std::thread::spawn(move || match finished.recv_timeout(limit) {
            Err(RecvTimeoutError::Timeout) => {
                handle.interrupt();
                true
            }
            _ => false,
        })
    });
    let lines = check_lines(conn, pragma);
    drop(done);
    let stopped = watchdog.is_some_and(|watchdog| watchdog.join().unwrap_or(false));
    match lines {
        Ok(lines) if lines.len() == 1 && lines[0] == "ok" => Ok(Check::Passed),
        Ok(lines) => {
            let mut text = lines
                .iter()
                .take(CHECK_LINES_KEPT)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ");
            if lines.len() > CHECK_LINES_KEPT {
                text.push_str(&format!(" (and {} more)", lines.len() - CHECK_LINES_KEPT));
            }
            Ok(Check::Damaged(text))
        }
        Err(rusqlite::Error::SqliteFailure(e, _))
            if stopped && e.code == ErrorCode::OperationInterrupted =>
        {
            Ok(Check::Unfinished(limit.unwrap_or_default()))
        }
        Err(error) if Fault::of(&error) == Some(Fault::Corrupt) => {
            Ok(Check::Damaged(error.to_string()))
        }
        Err(error) => Err(error),
    }
}

fn check_lines(conn: &Connection, pragma: &str) -> rusqlite::Result<Vec<String>> {
    let mut statement = conn.prepare(&format!("PRAGMA {pragma}"))?;
    let lines = statement.query_map([], |row| row.get::<_, String>(0))?;
    lines.collect()
}

/// Why [`open_checked`] refused a file.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The file exists with 0 bytes: a database that lost everything, not a new one.
    #[error("{} exists but is empty: restore it ({restore}), or remove it to start fresh", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
        /// How to restore it.
        restore: &'static str,
    },
    /// `quick_check` found damage.
    #[error("{} is damaged (quick_check: {problems}): stop using it and restore a good backup ({restore})", path.display())]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What SQLite found.
        problems: String,
        /// How to restore it.
        restore: &'static str,
    },
    /// A SQLite file that was never given this program's schema.
    #[error("{} is a SQLite file without this program's schema: give the right file, or remove it to start fresh", path.display())]
    Foreign {
        /// The file.
        path: PathBuf,
    },
    /// The other program's file (or another application's database).
    #[error("{} {why}", path.display())]
    OtherProgram {
        /// The file.
        path: PathBuf,
        /// What it is, and where its own commands are.
        why: String,
    },
    /// The file was migrated by a newer build.
    #[error("{} has schema version {found}, newer than this build speaks ({known}); it was left unchanged: run a build that speaks version {found} (`relay --version` names the versions a build speaks)", path.display())]
    Newer {
        /// The file.
        path: PathBuf,
        /// Its `user_version`.
        found: usize,
        /// How many migrations this build has.
        known: usize,
    },
    /// The new file could not be made.
    #[error("cannot create {}: {error}", path.display())]
    Create {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// SQLite failed.
    #[error("{}: {error}", path.display())]
    Sqlite {
        /// The file.
        path: PathBuf,
        /// SQLite's error.
        error: rusqlite::Error,
    },
}

/// An opened, checked and migrated file.
pub struct Opened {
    /// The connection (busy timeout set, WAL on).
    pub connection: Connection,
    /// How the open check went ([`Check::Passed`] for a file made now).
    pub check: Check,
}

/// How [`open_checked`] treats the file.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    /// The busy timeout of the connection (and the patience of the WAL switch).
    pub busy_timeout: Duration,
    /// How long `quick_check` may run.
    pub check_limit: Duration,
    /// What the refusals tell the reader to restore with, like "`relay admin db restore FILE`".
    pub restore: &'static str,
    /// Whose file it must be: a new file gets its id, an existing one must carry it (or, made
    /// before the ids, have its tables; it then gets the id).
    pub program: Program,
}

static NEW_FILES: AtomicU64 = AtomicU64::new(0);

/// Opens the database at `path` for this program: a missing file is created with `migrations`
/// (with [`crate::PRIVATE_FILE_MODE`]); an existing one must be non-empty, pass `quick_check`
/// (within `options.check_limit`), and be `options.program`'s, then gets its missing
/// migrations.
pub fn open_checked(
    path: &Path,
    migrations: &[&str],
    options: &OpenOptions,
) -> Result<Opened, OpenError> {
    let sqlite = |error| OpenError::Sqlite {
        path: path.to_owned(),
        error,
    };
    if !path.exists() {
        create_new(path, migrations, options)?;
    }
    if std::fs::metadata(path).is_ok_and(|meta| meta.len() == 0) {
        return Err(OpenError::Empty {
            path: path.to_owned(),
            restore: options.restore,
        });
    }
    let mut connection = Connection::open_with_flags(
        path,
        OpenFlags::default().difference(OpenFlags::SQLITE_OPEN_CREATE),
    )
    .map_err(sqlite)?;
    connection
        .busy_timeout(options.busy_timeout)
        .map_err(sqlite)?;
    let check = quick_check(&connection, options.check_limit).map_err(sqlite)?;
    if let Check::Damaged(problems) = check {
        return Err(OpenError::Damaged {
            path: path.to_owned(),
            problems,
            restore: options.restore,
        });
    }
    // Refused before anything is written: another program's file, a file from a newer build
    // (or no build of ours) is left exactly as it was, not even switched to WAL.
    let adopt = match identify(&connection).map_err(sqlite)? {
        Identity::Of { program, adopt } if program == options.program => adopt,
        Identity::Foreign => {
            return Err(OpenError::Foreign {
                path: path.to_owned(),
            });
        }
        other => {
            return Err(OpenError::OtherProgram {
                path: path.to_owned(),
                why: not_this_program(other, options.program),
            });
        }
    };
    let version: i64 = connection
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(sqlite)?;
    let found = usize::try_from(version).unwrap_or(usize::MAX);
    if found > migrations.len() {
        return Err(OpenError::Newer {
            path: path.to_owned(),
            found,
            known: migrations.len(),
        });
    }
    use_wal(&connection, options.busy_timeout).map_err(sqlite)?;
    migrate(&mut connection, migrations).map_err(|e| match e {
        MigrateError::Newer { found, known } => OpenError::Newer {
            path: path.to_owned(),
            found,
            known,
        },
        MigrateError::Sqlite(error) => sqlite(error),
    })?;
    if adopt {
        // A file made before the ids: it is recognised by its tables, and carries the id from
        // now on.
        stamp(&connection, options.program).map_err(sqlite)?;
    }
    Ok(Opened { connection, check })
}

/// The schema version of the existing file at `path` (`PRAGMA user_version`; 0 for a SQLite
/// file without one), read without changing the file.
pub fn schema_version(path: &Path) -> Result<usize, OpenError> {
    let sqlite = |error| OpenError::Sqlite {
        path: path.to_owned(),
        error,
    };
    let connection = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sqlite)?;
    let version: i64 = connection
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(sqlite)?;
    Ok(usize::try_from(version).unwrap_or(usize::MAX))
}

/// Builds a new database under a temporary name beside `path` and links it into place, unless
/// another process got there first (then its file is used).
fn create_new(path: &Path, migrations: &[&str], options: &OpenOptions) -> Result<(), OpenError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "db".to_owned());
    let temp = path.with_file_name(format!(
        ".{name}.new-{}-{}",
        std::process::id(),
        NEW_FILES.fetch_add(1, Ordering::Relaxed)
    ));
    let built = build(&temp, migrations, options);
    let linked = built.and_then(|()| match std::fs::hard_link(&temp, path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(OpenError::Create {
            path: path.to_owned(),
            error,
        }),
    });
    for leftover in [temp.clone(), wal_of(&temp), shm_of(&temp)] {
        let _ = std::fs::remove_file(leftover);
    }
    linked
}

fn build(temp: &Path, migrations: &[&str], options: &OpenOptions) -> Result<(), OpenError> {
    let sqlite = |error| OpenError::Sqlite {
        path: temp.to_owned(),
        error,
    };
    let mut connection = crate::open_private(temp).map_err(sqlite)?;
    connection
        .busy_timeout(options.busy_timeout)
        .map_err(sqlite)?;
    use_wal(&connection, options.busy_timeout).map_err(sqlite)?;
    stamp(&connection, options.program).map_err(sqlite)?;
    migrate(&mut connection, migrations).map_err(|e| match e {
        MigrateError::Newer { found, known } => OpenError::Newer {
            path: temp.to_owned(),
            found,
            known,
        },
        MigrateError::Sqlite(error) => sqlite(error),
    })?;
    // Closing the only connection checkpoints the WAL into the file and removes it.
    connection.close().map_err(|(_, error)| sqlite(error))
}

fn wal_of(path: &Path) -> PathBuf {
    suffixed(path, "-wal")
}

fn shm_of(path: &Path) -> PathBuf {
    suffixed(path, "-shm")
}

fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut text = path.as_os_str().to_owned();
    text.push(suffix);
    PathBuf::from(text)
}

/// Why a backup or a restore failed.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The backup's target exists already.
    #[error("{} already exists: give a new file name (a backup never overwrites)", .0.display())]
    TargetExists(PathBuf),
    /// The copy to restore fails its check.
    #[error("{} fails integrity_check ({problems}): it is not restored; choose another backup", .0.display(), problems = .1)]
    Damaged(PathBuf, String),
    /// The copy to restore is not this program's database.
    #[error("{} has no schema of this program: it is not restored", .0.display())]
    Foreign(PathBuf),
    /// The file is the other program's (or another application's): what it is.
    #[error("{} {}", .0.display(), .1)]
    OtherProgram(PathBuf, String),
    /// The file exists with 0 bytes: no database at all, whatever SQLite makes of it.
    #[error("{} is empty (0 bytes): it is no database; a database that lost everything is restored from a backup", .0.display())]
    Empty(PathBuf),
    /// The database to replace is open in another process.
    #[error("{} is in use by another process: stop it (relay serve, relay desktop run) first, then restore", .0.display())]
    InUse(PathBuf),
    /// A file operation failed.
    #[error("{}: {error}", .0.display(), error = .1)]
    Io(PathBuf, std::io::Error),
    /// SQLite failed.
    #[error("{}: {error}", .0.display(), error = .1)]
    Sqlite(PathBuf, rusqlite::Error),
}

/// Writes a consistent copy of `conn`'s database to the new file `target` (`VACUUM INTO`: one
/// read transaction, so writers keep going and the copy holds every commit made before it
/// began). The copy gets [`crate::PRIVATE_FILE_MODE`].
pub fn backup_into(conn: &Connection, target: &Path) -> Result<(), CopyError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, crate::PRIVATE_FILE_MODE);
    match options.open(target) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(CopyError::TargetExists(target.to_owned()));
        }
        Err(e) => return Err(CopyError::Io(target.to_owned(), e)),
    }
    let text = target.to_string_lossy().into_owned();
    conn.execute("VACUUM INTO ?1", [text]).map_err(|e| {
        let _ = std::fs::remove_file(target);
        CopyError::Sqlite(target.to_owned(), e)
    })?;
    Ok(())
}

/// What a checked file must be: whose, and which of its columns hold JSON.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// Whose file it must be.
    pub program: Program,
    /// The columns its program reads as JSON (the decode pass parses them).
    pub json: &'a [JsonColumn],
}

/// Checks the file at `path`, opened read-only (a copy, or a stopped process's file): an empty
/// file and the other program's file are refused; then `integrity_check` (a file that is not a
/// database at all counts as damaged) and the decode pass, which reads every row as the program
/// would.
pub fn check_file(path: &Path, expected: &Expected<'_>) -> Result<Check, CopyError> {
    let conn = open_copy(path)?;
    let sqlite = |e| CopyError::Sqlite(path.to_owned(), e);
    match integrity_check(&conn).map_err(sqlite)? {
        Check::Passed => {}
        other => return Ok(other),
    }
    must_be(&conn, path, expected.program)?;
    let undecodable = undecodable_rows(&conn, expected.json).map_err(sqlite)?;
    if undecodable.is_empty() {
        Ok(Check::Passed)
    } else {
        Ok(Check::Damaged(format!(
            "{} undecodable value{}: {undecodable}",
            undecodable.total,
            if undecodable.total == 1 { "" } else { "s" }
        )))
    }
}

/// Opens the existing, non-empty file at `path` read-only.
fn open_copy(path: &Path) -> Result<Connection, CopyError> {
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() => {
            return Err(CopyError::Io(
                path.to_owned(),
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file"),
            ));
        }
        Ok(meta) if meta.len() == 0 => return Err(CopyError::Empty(path.to_owned())),
        Ok(_) => {}
        Err(e) => return Err(CopyError::Io(path.to_owned(), e)),
    }
    Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| CopyError::Sqlite(path.to_owned(), e))
}

/// Refuses `conn`'s database unless it is `program`'s.
fn must_be(conn: &Connection, path: &Path, program: Program) -> Result<(), CopyError> {
    match identify(conn).map_err(|e| CopyError::Sqlite(path.to_owned(), e))? {
        Identity::Of { program: found, .. } if found == program => Ok(()),
        Identity::Foreign => Err(CopyError::Foreign(path.to_owned())),
        other => Err(CopyError::OtherProgram(
            path.to_owned(),
            not_this_program(other, program),
        )),
    }
}

/// Replaces `program`'s database at `target` with the copy at `backup`, after the copy proves
/// to be `program`'s and passes `integrity_check`, and no other process has `target` open. A
/// `target` that is another program's file is left alone. The replaced file is kept beside it
/// as `TARGET.replaced`; its WAL is checkpointed and removed, so no stale log is replayed onto
/// the restored file.
pub fn restore(backup: &Path, target: &Path, program: Program) -> Result<(), CopyError> {
    let source = open_copy(backup)?;
    match integrity_check(&source).map_err(|e| CopyError::Sqlite(backup.to_owned(), e))? {
        Check::Passed => {}
        Check::Damaged(problems) => return Err(CopyError::Damaged(backup.to_owned(), problems)),
        // `integrity_check` runs without a limit; were it ever stopped, nothing is known.
        Check::Unfinished(_) => {
            return Err(CopyError::Damaged(
                backup.to_owned(),
                "the check did not finish".to_owned(),
            ));
        }
    }
    must_be(&source, backup, program)?;
    if target.exists() {
        refuse_other_programs(target, program)?;
        take_out_of_use(target)?;
        let kept = suffixed(target, ".replaced");
        std::fs::rename(target, &kept).map_err(|e| CopyError::Io(kept, e))?;
    }
    let staged = suffixed(target, ".restoring");
    let _ = std::fs::remove_file(&staged);
    backup_into(&source, &staged)?;
    std::fs::rename(&staged, target).map_err(|e| CopyError::Io(target.to_owned(), e))
}

/// Refuses a `target` that is known to be another program's file. A damaged or empty one (the
/// usual reason to restore) is not known to be anything, and may be replaced.
fn refuse_other_programs(target: &Path, program: Program) -> Result<(), CopyError> {
    let Ok(conn) = Connection::open_with_flags(target, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return Ok(());
    };
    match identify(&conn) {
        Ok(found @ (Identity::Of { .. } | Identity::Unknown(_)))
            if found.program() != Some(program) =>
        {
            Err(CopyError::OtherProgram(
                target.to_owned(),
                format!(
                    "{}; nothing is restored over it",
                    not_this_program(found, program)
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// Leaves `target` in rollback-journal mode with no WAL beside it: switching out of WAL needs
/// every other connection closed, which is how a running process is detected.
fn take_out_of_use(target: &Path) -> Result<(), CopyError> {
    let conn = Connection::open_with_flags(
        target,
        OpenFlags::default().difference(OpenFlags::SQLITE_OPEN_CREATE),
    )
    .map_err(|e| CopyError::Sqlite(target.to_owned(), e))?;
    match conn.query_row("PRAGMA journal_mode = DELETE", [], |row| {
        row.get::<_, String>(0)
    }) {
        Ok(_) => {}
        Err(e) if Fault::of(&e) == Some(Fault::Busy) => {
            return Err(CopyError::InUse(target.to_owned()));
        }
        // A damaged file (the usual reason to restore) may not switch; it is replaced anyway.
        Err(e) if Fault::of(&e) == Some(Fault::Corrupt) => {}
        Err(e) => return Err(CopyError::Sqlite(target.to_owned(), e)),
    }
    drop(conn);
    for leftover in [wal_of(target), shm_of(target)] {
        match std::fs::remove_file(&leftover) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(CopyError::Io(leftover, e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> OpenOptions {
        OpenOptions {
            busy_timeout: Duration::from_secs(1),
            check_limit: Duration::from_secs(10),
            restore: "a backup",
            program: crate::identity::SERVICE,
        }
    }

    fn journal_mode(path: &Path) -> String {
        Connection::open(path)
            .and_then(|c| c.query_row("PRAGMA journal_mode", [], |row| row.get(0)))
            .expect("journal mode")
    }

    #[test]
    fn a_file_from_a_newer_build_is_refused_and_left_unchanged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("newer.db");
        {
            let connection = Connection::open(&path).expect("create");
            connection
                .execute_batch("CREATE TABLE t (x); PRAGMA user_version = 3;")
                .expect("schema");
            crate::identity::stamp(&connection, crate::identity::SERVICE).expect("stamp");
        }
        let before = std::fs::read(&path).expect("bytes");
        let refused = open_checked(&path, &["CREATE TABLE a (x);"], &options());
        assert!(
            matches!(
                refused,
                Err(OpenError::Newer {
                    found: 3,
                    known: 1,
                    ..
                })
            ),
            "{:?}",
            refused.err().map(|e| e.to_string())
        );
        assert_eq!(
            std::fs::read(&path).expect("bytes"),
            before,
            "not a byte changed"
        );
        assert_eq!(journal_mode(&path), "delete", "not switched to WAL");
        assert_eq!(schema_version(&path).expect("version"), 3);
    }

    #[test]
    fn an_older_file_is_migrated_and_its_version_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("older.db");
        let one = ["CREATE TABLE a (x);"];
        drop(open_checked(&path, &one, &options()).expect("created"));
        assert_eq!(schema_version(&path).expect("version"), 1);
        let two = ["CREATE TABLE a (x);", "CREATE TABLE b (x);"];
        drop(open_checked(&path, &two, &options()).expect("migrated"));
        assert_eq!(schema_version(&path).expect("version"), 2);
        assert_eq!(journal_mode(&path), "wal");
    }
}
