//! Where a graph's own code failed: the `FILE:LINE:COL: ` the driver writes before the error
//! of a graph's own code (as `graph.js`, the only name it knows), named after the real file
//! here, and read back as the outcome's `location`.

use graph_js::{MAX_ERROR_CHARS, SCRIPT_NAME, leading_location};
use serde::{Deserialize, Serialize};

/// A place in a graph file: the `location` field of an outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// The graph's file, as the run named it (`graphs/research.js`).
    pub file: String,
    /// The line, from 1.
    pub line: u32,
    /// The column, from 1.
    pub column: u32,
}

/// `text` with a leading `graph.js:L:C: ` naming `file` instead; other texts unchanged. The
/// text stays within [`MAX_ERROR_CHARS`] (and an ellipsis), as the driver bounds it.
pub fn name_file(text: &str, file: &str) -> String {
    match leading_location(text) {
        Some(leading) if leading.file == SCRIPT_NAME => bounded(&format!(
            "{file}:{}:{}: {}",
            leading.position.line,
            leading.position.column,
            &text[leading.rest..]
        )),
        _ => text.to_owned(),
    }
}

/// `text` cut to [`MAX_ERROR_CHARS`] characters and an ellipsis when it is longer.
fn bounded(text: &str) -> String {
    match text.char_indices().nth(MAX_ERROR_CHARS) {
        // Already cut, by the driver, to exactly the bound and its ellipsis.
        Some((end, _)) if &text[end..] == "…" => text.to_owned(),
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// `text` with its location first: `CODE: FILE:L:C: rest` (a failure code before a nested
/// graph's location) becomes `FILE:L:C: CODE: rest`, so a cut text keeps it.
pub fn location_first(text: &str) -> String {
    if leading_location(text).is_some() {
        return text.to_owned();
    }
    let Some((code, rest)) = text.split_once(": ") else {
        return text.to_owned();
    };
    if code.contains(char::is_whitespace) {
        return text.to_owned();
    }
    match leading_location(rest) {
        Some(leading) => format!(
            "{}: {code}: {}",
            &rest[..leading.rest - 2],
            &rest[leading.rest..]
        ),
        None => text.to_owned(),
    }
}

/// The location an error text starts with (after [`location_first`]).
pub fn of(text: &str) -> Option<Location> {
    let leading = leading_location(text)?;
    Some(Location {
        file: leading.file.to_owned(),
        line: leading.position.line,
        column: leading.position.column,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_named_and_the_location_moved_first() {
        let text = "graph.js:3:9: Error: boom\n  3 |   throw new Error(\"boom\");";
        let named = name_file(text, "graphs/research.js");
        assert!(
            named.starts_with("graphs/research.js:3:9: Error: boom\n"),
            "{named}"
        );
        assert_eq!(name_file("Error: boom", "x.js"), "Error: boom");
        let nested = "failed: graphs/research.js:3:9: graph research failed: Error: boom";
        assert_eq!(
            location_first(nested),
            "graphs/research.js:3:9: failed: graph research failed: Error: boom"
        );
        assert_eq!(
            of(&location_first(nested)),
            Some(Location {
                file: "graphs/research.js".into(),
                line: 3,
                column: 9
            })
        );
        assert_eq!(location_first("failed: no location"), "failed: no location");
        assert_eq!(of("denied: tool x"), None);
    }
}
