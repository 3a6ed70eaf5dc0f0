//! Free space where the desktop keeps its state. Before starting a run the relay checks that
//! the disk holding the state file has at least a floor free (`relay desktop run
//! --min-free-space`, [`DEFAULT_MIN_FREE_SPACE`] by default): comfortably above the largest
//! result and trace a run records, so a run that starts can also be recorded when it ends.
//! Below it no run starts, and the service tells waiting agents `desktop: disk full`.

use std::path::Path;

use relay_protocol::{DISK_FULL, DesktopProblem};

/// The free-space floor by default: 64 MiB.
pub const DEFAULT_MIN_FREE_SPACE: u64 = 64 * 1024 * 1024;

/// Bytes an unprivileged writer may still use on the filesystem holding `path` (the state
/// file, or its folder when the file does not exist yet).
pub fn free_bytes(path: &Path) -> std::io::Result<u64> {
    let probe = if path.exists() {
        path
    } else {
        path.parent().unwrap_or(path)
    };
    let stats = rustix::fs::statvfs(probe).map_err(std::io::Error::from)?;
    Ok(stats.f_bavail.saturating_mul(stats.f_frsize))
}

/// `bytes` in words: `12.5 MiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// The problem a desktop reports when `free` bytes are left under `state`, below `floor`.
pub fn disk_full(state: &Path, free: u64, floor: u64) -> DesktopProblem {
    DesktopProblem {
        cause: DISK_FULL.to_owned(),
        detail: format!(
            "{} free on the disk of the desktop's state ({}), below its floor of {} (--min-free-space); no run starts until its owner frees space",
            human(free),
            state.display(),
            human(floor)
        ),
    }
}

/// Why a size (`--min-free-space`) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// No number first.
    #[error("`{0}` is not a size: write bytes or e.g. 64MiB, 1GiB")]
    NotANumber(String),
    /// A unit this parser does not know.
    #[error("`{0}` is not a size unit: use B, KiB, MiB or GiB (e.g. 64MiB)")]
    Unit(String),
    /// Negative, or past what 64 bits count.
    #[error("`{0}` is out of range: give at most 16 EiB")]
    OutOfRange(String),
}

/// Parses a size: bytes, or a number with `K`, `M`, `G` (powers of 1024, optionally `KiB`,
/// `MiB`, `GiB`, `KB`, `MB`, `GB`), e.g. `64MiB`.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| SizeError::NotANumber(text.to_owned()))?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => return Err(SizeError::Unit(other.to_owned())),
    };
    let bytes = number * scale as f64;
    if !(bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64) {
        return Err(SizeError::OutOfRange(text.to_owned()));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_units() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1.5 GiB"), Ok(3 << 29));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("0"), Ok(0));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("5 parsecs").is_err());
        assert_eq!(human(64 << 20), "64.0 MiB");
        assert_eq!(human(512), "512 B");
    }

    #[test]
    fn free_space_is_read_where_the_state_lives() {
        let dir = tempfile::tempdir().expect("tempdir");
        let free = free_bytes(&dir.path().join("not-yet.db")).expect("statvfs");
        assert!(free > 0);
    }
}
