//! One relay per state file: `relay desktop run` holds an exclusive lock on `<state>.lock`
//! (with its process id inside) for as long as it runs. A second relay on the same file would
//! report the first one's live run as failed and see its real result refused; it exits naming
//! the holder instead. The lock also tells the owner's commands whether a relay is live.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds it.
    #[error(
        "another relay ({holder}) already runs on the state file {state}: stop it first, or give this one its own state file with --state"
    )]
    Held {
        /// The state file.
        state: String,
        /// Who holds it, in words (its process id when it wrote one).
        holder: String,
    },
    /// The lock file could not be opened or written.
    #[error("cannot lock the state file through {path}: {source}")]
    Io {
        /// The lock file.
        path: String,
        /// What failed.
        source: std::io::Error,
    },
}

/// Tries before the lock counts as held: [`RelayLock::holder`] (the owner's commands, and the
/// desktop page every second) takes it for an instant to look, which must not make a relay that
/// starts at that instant give up.
const ACQUIRE_TRIES: u32 = 5;
/// The pause between those tries.
const ACQUIRE_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// The lock file beside `state`.
pub fn lock_path(state: &Path) -> PathBuf {
    let mut name = state.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// The held lock; dropping it releases it.
#[derive(Debug)]
pub struct RelayLock {
    _file: File,
}

fn open(path: &Path) -> Result<File, LockError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|source| LockError::Io {
            path: path.display().to_string(),
            source,
        })
}

fn holder_of(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    match text.trim().parse::<u32>() {
        Ok(pid) => format!("process {pid}"),
        Err(_) => "a process that has not written its id yet".to_owned(),
    }
}

impl RelayLock {
    /// Takes the lock of `state` for this process, or says who holds it.
    pub fn acquire(state: &Path) -> Result<RelayLock, LockError> {
        let path = lock_path(state);
        let mut file = open(&path)?;
        let mut tries = 0;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if tries + 1 < ACQUIRE_TRIES => {
                    tries += 1;
                    std::thread::sleep(ACQUIRE_PAUSE);
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(LockError::Held {
                        state: state.display().to_string(),
                        holder: holder_of(&mut file),
                    });
                }
                Err(TryLockError::Error(source)) => {
                    return Err(LockError::Io {
                        path: path.display().to_string(),
                        source,
                    });
                }
            }
        }
        let io = |source| LockError::Io {
            path: path.display().to_string(),
            source,
        };
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        write!(file, "{}", std::process::id()).map_err(io)?;
        file.flush().map_err(io)?;
        Ok(RelayLock { _file: file })
    }

    /// Who holds the lock of `state` now (`None`: no relay runs on it).
    pub fn holder(state: &Path) -> Result<Option<String>, LockError> {
        let path = lock_path(state);
        if !path.exists() {
            return Ok(None);
        }
        let mut file = open(&path)?;
        match file.try_lock() {
            Ok(()) => {
                let _ = file.unlock();
                Ok(None)
            }
            Err(TryLockError::WouldBlock) => Ok(Some(holder_of(&mut file))),
            Err(TryLockError::Error(source)) => Err(LockError::Io {
                path: path.display().to_string(),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_process_id_until_it_lets_go() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("desktop.db");
        assert!(RelayLock::holder(&state).expect("read").is_none());
        let first = RelayLock::acquire(&state).expect("first");
        let refused = RelayLock::acquire(&state).expect_err("second");
        let pid = std::process::id().to_string();
        assert!(
            refused.to_string().contains(&format!("process {pid}")),
            "{refused}"
        );
        assert!(refused.to_string().contains("--state"), "{refused}");
        assert_eq!(
            RelayLock::holder(&state).expect("read"),
            Some(format!("process {pid}"))
        );
        drop(first);
        assert!(RelayLock::holder(&state).expect("read").is_none());
        let _again = RelayLock::acquire(&state).expect("free again");
    }
}
