//! The disk cache of compiled components: keyed by the component's hash and the engine's
//! compatibility hash, checked with a checksum, written whole (beside, then renamed), and
//! pruned of entries unused for [`CACHE_MAX_AGE`].

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::Digest;
use wasmtime::component::Component;

use super::{WasmError, setup};

/// Where compiled components are cached (`$GRAPHRELAY_CACHE_DIR`, else the user's cache dir).
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("GRAPHRELAY_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("graphrelay").join("wasm"))
}

/// How a component was obtained, for benchmarks and the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Already loaded in this process.
    Memory,
    /// Deserialized from the disk cache.
    Disk,
    /// Compiled now.
    Compiled,
}

/// Magic and version of a serialized component, then its bytes, then a SHA-256 of those bytes.
const CACHE_MAGIC: &[u8; 8] = b"GRCWASM1";

fn cache_path(engine: &wasmtime::Engine, hash: &str, dir: &Path) -> PathBuf {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let settings = hasher.finish();
    dir.join(format!("{hash}-{settings:016x}.cwasm"))
}

/// A cached artifact, if there is a valid one: a truncated, corrupt or foreign file is a miss.
fn read_cache(engine: &wasmtime::Engine, path: &Path) -> Option<Component> {
    let bytes = std::fs::read(path).ok()?;
    let body = bytes.strip_prefix(CACHE_MAGIC.as_slice())?;
    let (payload, checksum) = body.split_at_checked(body.len().checked_sub(32)?)?;
    if sha2::Sha256::digest(payload).as_slice() != checksum {
        return None;
    }
    // SAFETY: the bytes were produced by `Component::serialize` of this same wasmtime build
    // (the file name carries the engine's compatibility hash) and are verified by checksum.
    let component = unsafe { Component::deserialize(engine, payload) }.ok()?;
    // Used now: pruning keeps it (see `prune_cache`).
    let _ = std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|file| file.set_modified(crate::clock::wall_now()));
    Some(component)
}

/// Cached artifacts not used for this long are removed when a new one is written (every guest
/// or wasmtime upgrade, and every compiled graph, leaves one of 10–20 MB behind).
pub const CACHE_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);

/// Whether `name` is a cache entry this module wrote (`<hash>-<16 hex>.cwasm`), or one of its
/// temporary files (`.tmp…`, left behind by a crash mid-write).
fn is_cache_file(name: &str) -> bool {
    if name.starts_with(".tmp") {
        return true;
    }
    name.strip_suffix(".cwasm")
        .and_then(|stem| stem.rsplit_once('-'))
        .is_some_and(|(hash, settings)| {
            !hash.is_empty()
                && settings.len() == 16
                && settings.bytes().all(|b| b.is_ascii_hexdigit())
        })
}

/// Removes the cache entries in `dir` (and stray temporary files) last used before
/// `now - CACHE_MAX_AGE`. Files this module did not write are left alone; errors are ignored
/// (another process may be pruning too).
fn prune_cache(dir: &Path, now: std::time::SystemTime) {
    let Some(cutoff) = now.checked_sub(CACHE_MAX_AGE) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_cache_file(name) {
            continue;
        }
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|modified| modified < cutoff);
        if stale && entry.file_type().is_ok_and(|t| t.is_file()) {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => tracing::info!("removed the unused cached component {name}"),
                Err(e) => tracing::debug!("cannot remove {name} from the cache: {e}"),
            }
        }
    }
}

fn write_cache(path: &Path, serialized: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    use std::io::Write;
    tmp.write_all(CACHE_MAGIC)?;
    tmp.write_all(serialized)?;
    tmp.write_all(&sha2::Sha256::digest(serialized))?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

pub(super) fn compile_cached(
    engine: &wasmtime::Engine,
    hash: &str,
    cache_dir: Option<&Path>,
    bytes: &mut dyn FnMut() -> Result<Vec<u8>, WasmError>,
) -> Result<(Component, Source), WasmError> {
    let path = cache_dir.map(|dir| cache_path(engine, hash, dir));
    if let Some(component) = path.as_deref().and_then(|p| read_cache(engine, p)) {
        return Ok((component, Source::Disk));
    }
    let bytes = bytes()?;
    tracing::info!("compiling the wasm component (a few seconds, cached afterwards)");
    let component = Component::new(engine, &bytes).map_err(setup)?;
    if let Some(path) = &path {
        match component.serialize() {
            Ok(serialized) => {
                if let Some(dir) = path.parent() {
                    prune_cache(dir, crate::clock::wall_now());
                }
                if let Err(e) = write_cache(path, &serialized) {
                    tracing::warn!(
                        "cannot write the compiled component to {}: {e}",
                        path.display()
                    );
                }
            }
            Err(e) => tracing::warn!("cannot serialize the compiled component: {e}"),
        }
    }
    Ok((component, Source::Compiled))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aged(path: &Path, age: Duration) {
        std::fs::write(path, b"x").expect("write");
        let when = crate::clock::wall_now() - age;
        std::fs::File::options()
            .write(true)
            .open(path)
            .and_then(|f| f.set_modified(when))
            .expect("set mtime");
    }

    #[test]
    fn pruning_removes_only_old_entries_this_cache_wrote() {
        let dir = tempfile::tempdir().expect("tempdir");
        let day = Duration::from_secs(24 * 3600);
        let old = format!("{}-0123456789abcdef.cwasm", "a".repeat(64));
        let old_blank = format!("{}-blank1-0123456789abcdef.cwasm", "b".repeat(64));
        let recent = format!("{}-0123456789abcdef.cwasm", "c".repeat(64));
        for (name, age) in [
            (old.as_str(), 40 * day),
            (old_blank.as_str(), 31 * day),
            (".tmpA1b2C3", 40 * day),
            (recent.as_str(), 29 * day),
            ("notes.cwasm", 400 * day),
            ("readme.txt", 400 * day),
            ("x-0123456789abcdeg.cwasm", 400 * day),
        ] {
            aged(&dir.path().join(name), age);
        }
        prune_cache(dir.path(), crate::clock::wall_now());
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .expect("read")
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        left.sort();
        let mut expected = vec![
            recent,
            "notes.cwasm".to_owned(),
            "readme.txt".to_owned(),
            "x-0123456789abcdeg.cwasm".to_owned(),
        ];
        expected.sort();
        assert_eq!(left, expected);
    }

    #[test]
    fn a_missing_cache_dir_is_no_error() {
        prune_cache(
            Path::new("/nonexistent/graphrelay-cache"),
            crate::clock::wall_now(),
        );
    }
}
