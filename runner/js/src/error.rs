//! Why a graph could not be prepared or run: [`ScriptError`], whose text is the sentence a
//! run's outcome reports (an uncaught rejection with its `code`, a limit by name, a syntax
//! error with line and column).

use crate::meta::NO_DEFAULT_EXPORT;
use crate::{MAX_ERROR_CHARS, MAX_RESULT_BYTES, MAX_SCRIPT_BYTES};

/// The start of [`ScriptError::ArgsNotJson`]'s text.
const ARGS_NOT_JSON: &str = "the arguments are not valid JSON: ";
/// The start of [`ScriptError::ResultNotJson`]'s text.
const RESULT_NOT_JSON: &str = "the result cannot be turned into JSON: ";

/// Why a graph could not be prepared or run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// The interpreter could not be set up (the prelude or the web platform did not evaluate).
    #[error("{0}")]
    Setup(String),
    /// The script is over [`MAX_SCRIPT_BYTES`] (its size in bytes).
    #[error(
        "script size limit exceeded: the script is {0} bytes, the limit is {MAX_SCRIPT_BYTES} bytes"
    )]
    TooLarge(usize),
    /// The script does not parse; the sentence names a line.
    #[error("{0}")]
    Syntax(String),
    /// An uncaught exception or rejection, as the prelude describes it (with its `code`).
    #[error("{0}")]
    Thrown(String),
    /// What JS cannot catch: a runtime limit by name, or the host's interruption.
    #[error("{0}")]
    Uncatchable(String),
    /// The graph awaits a promise that nothing will settle.
    #[error("the graph is waiting for a promise that nothing will ever settle")]
    Stalled,
    /// The module has no callable default export.
    #[error("{NO_DEFAULT_EXPORT}")]
    NoDefaultExport,
    /// The graph's `meta` export is missing or invalid (the sentence `runner check` prints).
    #[error("{0}")]
    Meta(crate::MetaError),
    /// The arguments are not JSON text (serde_json's reason).
    #[error("{ARGS_NOT_JSON}{0}")]
    ArgsNotJson(String),
    /// The arguments could not become a JS value (boa's reason).
    #[error("{0}")]
    Args(String),
    /// The result's conversion to JSON threw (what it threw).
    #[error("{RESULT_NOT_JSON}{0}")]
    ResultNotJson(String),
    /// The result's conversion to JSON gave no text.
    #[error("the result cannot be turned into JSON")]
    ResultNotText,
    /// The result is over [`MAX_RESULT_BYTES`], measured in characters before conversion.
    #[error(
        "result limit exceeded: the result is {0} characters of JSON, the limit is {MAX_RESULT_BYTES} bytes"
    )]
    ResultTooManyChars(usize),
    /// The result is over [`MAX_RESULT_BYTES`], measured in bytes after conversion.
    #[error(
        "result limit exceeded: the result is {0} bytes of JSON, the limit is {MAX_RESULT_BYTES} bytes"
    )]
    ResultTooManyBytes(usize),
}

impl ScriptError {
    /// The same error with its text cut to at most [`MAX_ERROR_CHARS`] characters (and an
    /// ellipsis), the bound on every error leaving a graph's run.
    pub(crate) fn bounded(self) -> Self {
        let cut = |text: String, before: &str| {
            cut_chars(
                &text,
                MAX_ERROR_CHARS.saturating_sub(before.chars().count()),
            )
        };
        match self {
            Self::Setup(text) => Self::Setup(cut(text, "")),
            Self::Syntax(text) => Self::Syntax(cut(text, "")),
            Self::Thrown(text) => Self::Thrown(cut(text, "")),
            Self::Uncatchable(text) => Self::Uncatchable(cut(text, "")),
            Self::Args(text) => Self::Args(cut(text, "")),
            Self::ArgsNotJson(text) => Self::ArgsNotJson(cut(text, ARGS_NOT_JSON)),
            Self::ResultNotJson(text) => Self::ResultNotJson(cut(text, RESULT_NOT_JSON)),
            other => other,
        }
    }
}

/// Cuts `text` to at most `max` characters, on a character boundary.
pub(crate) fn cut_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}
