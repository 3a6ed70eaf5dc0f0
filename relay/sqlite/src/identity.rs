//! Which program a database file belongs to. Each program's file carries its own SQLite
//! `application_id` (in the file's header, set when the file is made, or adopted by the first
//! open of a file made before the ids), so the service's store, the desktop's state and their
//! backups are never taken for one another: opening, `backup`, `check` and `restore` refuse the
//! other program's file and say what it is.

use rusqlite::Connection;

/// A program that keeps its data in a SQLite file through this crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Program {
    /// The `application_id` its files carry in their header.
    pub application_id: i32,
    /// What such a file is, in words.
    pub what: &'static str,
    /// The commands that back up, check and restore such a file.
    pub db_command: &'static str,
    /// Tables only this program's schema has: how a file made before the ids is recognised.
    pub tables: &'static [&'static str],
}

/// The relay service's store (`relay serve`). The id spells "GRSV".
pub const SERVICE: Program = Program {
    application_id: 0x4752_5356,
    what: "the relay service's database (relay serve)",
    db_command: "relay admin db",
    tables: &["owners", "tokens", "commands"],
};

/// A desktop relay's state (`relay desktop`). The id spells "GRDS".
pub const DESKTOP: Program = Program {
    application_id: 0x4752_4453,
    what: "a desktop relay's state (relay desktop)",
    db_command: "relay desktop db",
    tables: &["history", "outbox", "shares"],
};

/// Every program whose files this crate knows.
pub const PROGRAMS: [Program; 2] = [SERVICE, DESKTOP];

/// Whose file a database is, as its header (or, for a file made before the ids, its tables)
/// says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// One of [`PROGRAMS`]'; `adopt` when the file predates the ids (its header says 0) and
    /// is recognised by its tables: the first open that may write gives it the id.
    Of {
        /// The program.
        program: Program,
        /// The header has no id yet.
        adopt: bool,
    },
    /// An `application_id` no program of ours uses: another application's database.
    Unknown(i32),
    /// No id and no schema of ours: a SQLite file no program of ours made (or never
    /// migrated).
    Foreign,
}

impl Identity {
    /// The program, if the file is one of ours.
    pub fn program(self) -> Option<Program> {
        match self {
            Identity::Of { program, .. } => Some(program),
            Identity::Unknown(_) | Identity::Foreign => None,
        }
    }
}

/// Reads whose file `conn`'s database is.
pub fn identify(conn: &Connection) -> rusqlite::Result<Identity> {
    let id: i32 = conn.query_row("PRAGMA application_id", [], |row| row.get(0))?;
    if id != 0 {
        return Ok(PROGRAMS
            .into_iter()
            .find(|p| p.application_id == id)
            .map_or(Identity::Unknown(id), |program| Identity::Of {
                program,
                adopt: false,
            }));
    }
    let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if version == 0 {
        return Ok(Identity::Foreign);
    }
    let mut statement =
        conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")?;
    let tables = statement
        .query_map([], |row| row.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(PROGRAMS
        .into_iter()
        .find(|p| p.tables.iter().all(|t| tables.iter().any(|have| have == t)))
        .map_or(Identity::Foreign, |program| Identity::Of {
            program,
            adopt: true,
        }))
}

/// Writes `program`'s id into the header of `conn`'s database.
pub fn stamp(conn: &Connection, program: Program) -> rusqlite::Result<()> {
    conn.pragma_update(None, "application_id", program.application_id)
}

/// Why a file is not `expected`'s, in words: what it is and where its own commands are.
pub fn not_this_program(found: Identity, expected: Program) -> String {
    match found {
        Identity::Of { program, .. } => format!(
            "is {}, not {}: give the right file (this one's own commands are `{}`)",
            program.what, expected.what, program.db_command
        ),
        Identity::Unknown(id) => format!(
            "is another application's SQLite database (application_id {id:#010x}), not {}",
            expected.what
        ),
        Identity::Foreign => format!(
            "is a SQLite file without {}'s schema: give the right file",
            expected.what
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_known_by_its_header_or_else_by_its_tables() {
        let conn = Connection::open_in_memory().expect("db");
        assert_eq!(identify(&conn).expect("read"), Identity::Foreign);
        conn.execute_batch(
            "CREATE TABLE history (x); CREATE TABLE outbox (x); CREATE TABLE shares (x);
             PRAGMA user_version = 3;",
        )
        .expect("an old desktop schema");
        assert_eq!(
            identify(&conn).expect("read"),
            Identity::Of {
                program: DESKTOP,
                adopt: true
            }
        );
        stamp(&conn, SERVICE).expect("stamp");
        // The header wins over the tables.
        assert_eq!(identify(&conn).expect("read").program(), Some(SERVICE));
        conn.pragma_update(None, "application_id", 7)
            .expect("other");
        assert_eq!(identify(&conn).expect("read"), Identity::Unknown(7));
        let said = not_this_program(
            Identity::Of {
                program: DESKTOP,
                adopt: false,
            },
            SERVICE,
        );
        assert!(
            said.contains("desktop relay's state") && said.contains("relay desktop db"),
            "{said}"
        );
    }
}
