//! `relay admin db …` and `relay desktop db …`: consistent copies of a SQLite file in use, their
//! check, and putting one back in place of a stopped process's file.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use clap::Subcommand;
use relay_sqlite::Check;

/// What `db` does.
#[derive(Debug, Subcommand)]
pub(crate) enum DbCommand {
    /// Write a consistent copy of the database to FILE (a new file) while the process using
    /// it runs and serves; prints FILE.
    Backup {
        /// The new file.
        file: PathBuf,
    },
    /// Check FILE (a backup, or a stopped process's database): it must be this program's
    /// database, pass SQLite's integrity_check, and every row must decode (text is UTF-8,
    /// JSON columns parse); prints `ok`, or the damage and exits 1.
    Check {
        /// The file to check.
        file: PathBuf,
    },
    /// Replace the (stopped) database with FILE, after FILE proves to be this program's
    /// database and passes integrity_check; the file replaced is kept beside it as
    /// DB.replaced.
    Restore {
        /// The checked copy to put in place.
        file: PathBuf,
    },
}

/// `db check FILE`, for `expected`'s files.
pub(crate) fn check(file: &Path, expected: &relay_sqlite::Expected<'_>) -> Result<()> {
    match relay_sqlite::check_file(file, expected)? {
        Check::Passed => {
            println!("ok");
            Ok(())
        }
        Check::Damaged(problems) => bail!(
            "{} is damaged ({problems}): do not restore it; restore an earlier backup that `{} check` passes",
            file.display(),
            expected.program.db_command
        ),
        Check::Unfinished(_) => bail!("the check of {} did not finish", file.display()),
    }
}

/// `db restore FILE` onto `target`, `program`'s file.
pub(crate) fn restore(file: &Path, target: &Path, program: relay_sqlite::Program) -> Result<()> {
    relay_sqlite::restore(file, target, program)?;
    println!("{}", target.display());
    Ok(())
}
