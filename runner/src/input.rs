//! Reading the files a person names on the command line (graphs, components, arguments, replies,
//! providers and test files) with a size bound, so that naming the wrong file (a huge log,
//! `/dev/zero`, an endless pipe) ends in an error instead of filling the memory.

use std::io::Read;
use std::path::Path;

/// Largest arguments, replies or test file.
pub const MAX_DATA_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file could not be opened or read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The file holds more than the limit.
    #[error("it is larger than {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
    /// The file is not UTF-8 text.
    #[error("it is not UTF-8 text")]
    NotText,
    /// A TypeScript graph whose types cannot be erased.
    #[error(transparent)]
    TypeScript(#[from] crate::typescript::TypeScriptError),
}

/// The whole file, if it holds at most `limit` bytes. Reads at most `limit + 1` bytes, whatever
/// the file is.
pub fn read_at_most(path: &Path, limit: u64) -> Result<Vec<u8>, InputError> {
    read_at_most_by(path, 0, |_| limit)
}

/// The whole file, if it holds at most `limit(head)` bytes, where `head` is its first `peek`
/// bytes (fewer if the file is shorter): for files whose kind, and so their limit, shows in how
/// they start.
pub fn read_at_most_by(
    path: &Path,
    peek: usize,
    limit: impl FnOnce(&[u8]) -> u64,
) -> Result<Vec<u8>, InputError> {
    let mut file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    (&mut file).take(peek as u64).read_to_end(&mut bytes)?;
    let limit = limit(&bytes);
    file.take(limit.saturating_add(1).saturating_sub(bytes.len() as u64))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(InputError::TooLarge { limit });
    }
    Ok(bytes)
}

/// Largest graph script file: the interpreter's own script limit.
pub const MAX_SCRIPT_FILE_BYTES: u64 = graph_js::MAX_SCRIPT_BYTES as u64;

/// A graph script, if it is UTF-8 text of at most [`MAX_SCRIPT_FILE_BYTES`]: a TypeScript
/// graph (`*.ts`) with its types erased, on the same lines and columns.
pub fn read_script(path: &Path) -> Result<String, InputError> {
    script_of(path, read_text_at_most(path, MAX_SCRIPT_FILE_BYTES)?)
}

/// `text`, read from `path`, as the JavaScript the engines run: a TypeScript graph's types
/// erased, other files unchanged.
pub fn script_of(path: &Path, text: String) -> Result<String, InputError> {
    if crate::typescript::is_typescript(path) {
        let erased = crate::typescript::erase_types(&text)?;
        Ok(crate::typescript::with_written_lines(&text, erased))
    } else {
        Ok(text)
    }
}

/// Like [`read_at_most`], for UTF-8 text.
pub fn read_text_at_most(path: &Path, limit: u64) -> Result<String, InputError> {
    String::from_utf8(read_at_most(path, limit)?).map_err(|_| InputError::NotText)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_at_the_limit_is_read_and_one_past_it_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, "abcd").expect("file");
        assert_eq!(read_text_at_most(&path, 4).expect("at the limit"), "abcd");
        assert!(matches!(
            read_at_most(&path, 3),
            Err(InputError::TooLarge { limit: 3 })
        ));
        std::fs::write(&path, [0xff, 0xfe]).expect("file");
        assert!(matches!(
            read_text_at_most(&path, 4),
            Err(InputError::NotText)
        ));
        let missing = read_at_most(&dir.path().join("missing"), 4);
        assert!(matches!(missing, Err(InputError::Io(_))));
    }

    #[test]
    fn the_limit_can_depend_on_how_the_file_starts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let by_kind = |head: &[u8]| if head == b"big:" { 10 } else { 6 };
        std::fs::write(&path, "big:123456").expect("file");
        assert_eq!(
            read_at_most_by(&path, 4, by_kind).expect("10 bytes").len(),
            10
        );
        std::fs::write(&path, "small:").expect("file");
        assert_eq!(
            read_at_most_by(&path, 4, by_kind).expect("6 bytes"),
            b"small:"
        );
        std::fs::write(&path, "small:7").expect("file");
        assert!(matches!(
            read_at_most_by(&path, 4, by_kind),
            Err(InputError::TooLarge { limit: 6 })
        ));
        std::fs::write(&path, "ab").expect("file");
        assert_eq!(read_at_most_by(&path, 4, by_kind).expect("short"), b"ab");
    }

    #[cfg(unix)]
    #[test]
    fn an_endless_file_ends_at_the_limit() {
        let read = read_at_most(Path::new("/dev/zero"), 1024 * 1024);
        assert!(matches!(read, Err(InputError::TooLarge { .. })));
    }
}
