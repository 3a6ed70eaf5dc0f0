//! What the binaries write: files replaced whole (`fs.write` and `runner build -o` replace
//! their target atomically), and errors as one line for the terminal.

use std::io::Write;
use std::path::Path;

/// An error and its causes as one line (in `graphrelay-text`, which the service-only `relay`
/// shares).
pub use graphrelay_text::error_line;

/// Gives `target` the content `bytes` by writing a new file beside it and renaming that over
/// it. At every moment the target holds either its old or its new content: a write that fails
/// (a full disk), is cut short (the process killed) or runs at the same time as another write
/// or a read never leaves a mix or a truncated file. A hard link to the target from elsewhere
/// keeps the old content instead of being written through, and an existing file keeps its
/// permissions (a new one is created like any new file, under the umask). A process killed
/// mid-write may leave its `.graphrelay-*.tmp` file behind.
pub fn replace_file(target: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = match target.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let permissions = std::fs::metadata(target).ok().map(|m| m.permissions());
    if permissions.is_some() {
        // Renaming needs only the folder's write permission; a file its owner made read-only
        // (or that belongs to someone else) stays refused, as writing it in place would be.
        std::fs::OpenOptions::new().write(true).open(target)?;
    }
    let (temp, mut file) = loop {
        let temp = dir.join(format!(
            ".graphrelay-{}-{}.tmp",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        // `create_new` never opens an existing file or follows a link at that name.
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
        {
            Ok(file) => break (temp, file),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    };
    let written = file
        .write_all(bytes)
        .and_then(|()| match permissions {
            Some(permissions) => file.set_permissions(permissions),
            None => Ok(()),
        })
        .and_then(|()| file.sync_all())
        .and_then(|()| {
            drop(file);
            std::fs::rename(&temp, target)
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written?;
    // Make the rename itself durable; a folder that cannot be opened or synced (some
    // filesystems) still holds the new file.
    if let Ok(folder) = std::fs::File::open(dir) {
        let _ = folder.sync_all();
    }
    Ok(())
}
