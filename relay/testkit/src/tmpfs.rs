//! A small filesystem of a test's own, to fill up: a tmpfs mounted for the test (root only)
//! and unmounted by a guard even when the test fails. Where mounting is refused the guard is
//! `None`, and the test says so on stderr.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of a given size mounted at a fresh folder, unmounted (lazily, so an open file
/// cannot keep it) when dropped, also when the test panics.
pub struct Tmpfs {
    /// The mount point.
    pub dir: PathBuf,
    _parent: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (e.g. `8m`); `None` (with a line on stderr) where mounting is
    /// refused.
    pub fn mount(size: &str) -> Option<Tmpfs> {
        let parent = tempfile::tempdir().expect("tempdir");
        let dir = parent.path().join("small");
        std::fs::create_dir(&dir).expect("mount point");
        let mounted = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(&dir)
            .output();
        match mounted {
            Ok(output) if output.status.success() => {
                eprintln!("using a tmpfs of {size} at {}", dir.display());
                Some(Tmpfs {
                    dir,
                    _parent: parent,
                })
            }
            other => {
                eprintln!("cannot mount a tmpfs here (needs root): {other:?}");
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Fills the filesystem holding `dir` with one file; returns it (remove it to free the space).
pub fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let filler = dir.join("filler");
    let mut file = std::fs::File::create(&filler).expect("filler");
    let chunk = vec![7u8; 64 * 1024];
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    // The last bytes a partial write leaves.
    while file.write(&[7u8; 512]).is_ok_and(|n| n > 0) {}
    while file.write(&[7u8]).is_ok_and(|n| n > 0) {}
    let _ = file.sync_all();
    filler
}
