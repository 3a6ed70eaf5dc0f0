//! What the binaries write: files replaced whole (`fs.write` and `runner build -o` replace
//! their target atomically), and errors as one line for the terminal.

use std::io::Write;
use std::path::Path;

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

/// An error and its causes as one line, `error: cause: cause`, for the terminal.
///
/// A cause that only repeats what is already said is left out: one whose text the line already
/// holds (an error that writes its source into its own message and also returns it as its
/// source), and one whose text merely decorates the error it is the source of (SQLite's
/// `Error code 26: file is not a database` under `file is not a database`).
pub fn error_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut wrapper = line.clone();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) && !text.contains(&wrapper) {
            line.push_str(": ");
            line.push_str(&text);
        }
        wrapper = text;
        source = cause.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::error_line;

    /// An error with a message and an optional source, to build chains.
    #[derive(Debug)]
    struct Link(&'static str, Option<Box<Link>>);

    impl std::fmt::Display for Link {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Link {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    fn chain(texts: &[&'static str]) -> Link {
        texts
            .iter()
            .rev()
            .fold(None, |source, text| Some(Link(text, source.map(Box::new))))
            .expect("at least one text")
    }

    #[test]
    fn every_cause_that_says_something_new_is_on_the_line() {
        let error = chain(&["cannot read the arguments file a.json", "permission denied"]);
        assert_eq!(
            error_line(&error),
            "cannot read the arguments file a.json: permission denied"
        );
        assert_eq!(error_line(&chain(&["alone"])), "alone");
    }

    #[test]
    fn a_cause_that_repeats_or_decorates_what_was_said_is_left_out() {
        // The shape `relay desktop` met with a state file that is not a database.
        let error = chain(&[
            "cannot use the desktop state state.db",
            "desktop state: file is not a database",
            "file is not a database",
            "Error code 26: file is not a database",
        ]);
        assert_eq!(
            error_line(&error),
            "cannot use the desktop state state.db: desktop state: file is not a database"
        );
        // A repeat further down does not hide a new cause below it.
        let error = chain(&["a: b", "b", "c"]);
        assert_eq!(error_line(&error), "a: b: c");
    }
}
