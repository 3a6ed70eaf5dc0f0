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
    /// Run SQLite's integrity_check on FILE (a backup, or a stopped process's database); prints
    /// `ok`, or the damage and exits 1.
    Check {
        /// The file to check.
        file: PathBuf,
    },
    /// Replace the (stopped) database with FILE, after FILE passes integrity_check; the file
    /// replaced is kept beside it as DB.replaced.
    Restore {
        /// The checked copy to put in place.
        file: PathBuf,
    },
}

/// `db check FILE`.
pub(crate) fn check(file: &Path) -> Result<()> {
    match relay_sqlite::check_file(file)? {
        Check::Passed => {
            println!("ok");
            Ok(())
        }
        Check::Damaged(problems) => bail!(
            "{} is damaged (integrity_check: {problems}): do not restore it",
            file.display()
        ),
        Check::Unfinished(_) => bail!("the check of {} did not finish", file.display()),
    }
}

/// `db restore FILE` onto `target`.
pub(crate) fn restore(file: &Path, target: &Path) -> Result<()> {
    relay_sqlite::restore(file, target)?;
    println!("{}", target.display());
    Ok(())
}
