//! Text for a terminal, shared by the `runner` and `relay` binaries: text someone else chose,
//! made safe to print, and an error with its causes as one line. It depends on no crate, so
//! the service-only build of `relay` (no runner, boa or wasmtime) prints as the full one does.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` made safe to print on a terminal: control characters (escape sequences, carriage
/// returns, newlines, bells, C1 codes) and bidirectional overrides are shown as escapes such as
/// `\u{1b}` or `\n` instead of acting on the terminal.
///
/// Graph scripts choose their log lines, error messages and meta names. Printed raw, those could
/// clear the screen, overwrite earlier trace lines, or redraw a pending approval question to show
/// other arguments than the ones being approved.
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(acts_on_terminal) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if acts_on_terminal(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// [`for_terminal`], except that a code frame (the `\n  12 | source\n     |    ^` the driver
/// writes under a located error) prints on real lines, each starting with `indent`.
///
/// Only the frame's own two line breaks are kept: the frame is recognised by its shape (a
/// numbered source line and a caret line, the line number also named as `:LINE:` before it)
/// and rendered apart from the message, and every other newline of the text stays escaped. Its
/// lines are escaped too and start with `indent` (at least the frame's own two spaces), so even a
/// message shaped like a frame cannot pose as a new trace or report line.
pub fn for_terminal_framed(text: &str, indent: &str) -> String {
    let Some((head, frame, tail)) = split_frame(text) else {
        return for_terminal(text).into_owned();
    };
    let mut out = for_terminal(head).into_owned();
    for line in frame.split('\n') {
        out.push('\n');
        out.push_str(indent);
        out.push_str(&for_terminal(line));
    }
    out.push_str(&for_terminal(tail));
    out
}

/// `text` split around its last code frame: the text before it, the frame's two lines (without
/// the newline before them), and what follows the caret.
fn split_frame(text: &str) -> Option<(&str, &str, &str)> {
    text.match_indices('\n').rev().find_map(|(at, _)| {
        let frame = &text[at + 1..];
        let (source, rest) = frame.split_once('\n')?;
        let number = source.strip_prefix("  ")?.split(" | ").next()?;
        if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if !text[..at].contains(&format!(":{number}:")) {
            return None;
        }
        let gutter = format!("  {} | ", " ".repeat(number.len()));
        let pad = rest.strip_prefix(&gutter)?;
        let caret = pad.find(|c: char| c != ' ' && c != '\t')?;
        if !pad[caret..].starts_with('^') {
            return None;
        }
        let end = at + 1 + source.len() + 1 + gutter.len() + caret + 1;
        Some((&text[..at], &text[at + 1..end], &text[end..]))
    })
}

/// Control characters other than tab, and the Unicode bidirectional formatting characters.
fn acts_on_terminal(c: char) -> bool {
    (c.is_control() && c != '\t')
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
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
    use super::*;

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

    #[test]
    fn text_that_would_act_on_the_terminal_is_shown_escaped() {
        assert!(matches!(
            for_terminal("plain, ünïcode 😀\tand a tab"),
            Cow::Borrowed(_)
        ));
        assert_eq!(
            for_terminal("a\u{1b}[2Jb\rc\nd\u{7}\u{8}\u{7f}\u{9b}e\u{202e}f"),
            "a\\u{1b}[2Jb\\rc\\nd\\u{7}\\u{8}\\u{7f}\\u{9b}e\\u{202e}f"
        );
    }

    #[test]
    fn a_code_frame_prints_on_real_lines_and_nothing_else_does() {
        let text =
            "g.js:3:9: Error: a\u{1b}[2J\nb\n  3 |   throw x;\u{7}\n    |         ^ (0 tokens)";
        assert_eq!(
            for_terminal_framed(text, ">>"),
            "g.js:3:9: Error: a\\u{1b}[2J\\nb\n>>  3 |   throw x;\\u{7}\n>>    |         ^ (0 tokens)"
        );
        // No location naming the frame's line, or no caret line: nothing is kept.
        for text in [
            "Error: a\n  3 | x\n    | ^",
            "g.js:3:9: a\n  3 | x\n[ 1s] y",
        ] {
            assert_eq!(for_terminal_framed(text, ">>"), for_terminal(text));
        }
        assert_eq!(for_terminal_framed("plain", ">>"), "plain");
    }
}
