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
    /// Print the database's schema version, and say whether this build uses it as it is,
    /// migrates it, or refuses it (exit 1); nothing is changed.
    Version,
}

/// What `db version` found: the database's schema version against this build's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Versions {
    /// The database's (`None`: it has none yet).
    pub(crate) found: Option<usize>,
    /// The one this build migrates to.
    pub(crate) speaks: usize,
}

impl Versions {
    fn state(self) -> &'static str {
        match self.found {
            None | Some(0) => "empty",
            Some(found) if found == self.speaks => "current",
            Some(found) if found < self.speaks => "older",
            Some(_) => "newer",
        }
    }

    /// Prints them (`json`: one object) and says on stderr what this build would do; a
    /// database this build refuses is an error.
    pub(crate) fn report(self, json: bool) -> Result<()> {
        let state = self.state();
        if json {
            let object = serde_json::json!({
                "schema_version": self.found,
                "build_schema_version": self.speaks,
                "state": state,
            });
            println!("{object}");
        } else {
            match self.found {
                Some(found) => println!("{found}"),
                None => println!("none"),
            }
        }
        let speaks = self.speaks;
        let note = match state {
            "empty" => {
                format!("no schema yet: this build creates version {speaks} when it first opens it")
            }
            "current" => {
                format!("this build speaks version {speaks}: it uses the database as it is")
            }
            "older" => format!(
                "this build speaks version {speaks}: it migrates the database when it next opens it (back it up first; an older build then refuses it)"
            ),
            _ => bail!(
                "the database has schema version {}, newer than this build speaks ({speaks}): this build refuses it and changes nothing; run a build that speaks it (`relay --version`)",
                self.found.unwrap_or_default()
            ),
        };
        eprintln!("{note}");
        Ok(())
    }
}

/// `db version` of the SQLite file at `path`, against `speaks`.
pub(crate) fn sqlite_version(path: &Path, speaks: usize, json: bool) -> Result<()> {
    if !path.is_file() {
        bail!("there is no database at {}", path.display());
    }
    let found = relay_sqlite::schema_version(path)?;
    Versions {
        found: Some(found),
        speaks,
    }
    .report(json)
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
