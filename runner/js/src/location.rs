//! Where in a graph's own code an error was raised: the innermost frame of the graph's module
//! in boa's `stack` text, written before the message as `graph.js:LINE:COL: ` and followed by
//! a code frame (the source line, a caret under the column). The host names the real file in
//! place of [`SCRIPT_NAME`].

use crate::SCRIPT_NAME;

/// A position in a graph's module: 1-based line and column (in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The line, from 1.
    pub line: u32,
    /// The column, from 1.
    pub column: u32,
}

/// A location at the start of an error text, `FILE:LINE:COL: `, and where the rest begins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leading<'a> {
    /// The file as written.
    pub file: &'a str,
    /// Line and column.
    pub position: Position,
    /// The byte offset of the text after `FILE:LINE:COL: `.
    pub rest: usize,
}

/// The location `text` starts with, if it starts with `FILE:LINE:COL: ` (FILE without spaces).
pub fn leading_location(text: &str) -> Option<Leading<'_>> {
    let head = text.split(": ").next()?;
    if head.len() == text.len() || head.contains(char::is_whitespace) {
        return None;
    }
    let mut parts = head.rsplitn(3, ':');
    let column = parts.next()?.parse().ok()?;
    let line = parts.next()?.parse().ok()?;
    let file = parts.next().filter(|f| !f.is_empty())?;
    Some(Leading {
        file,
        position: Position { line, column },
        rest: head.len() + 2,
    })
}

/// The innermost frame of the graph's module in a `stack` text (`    at f (graph.js:2:37)`,
/// innermost first); frames of the prelude name no file.
pub(crate) fn innermost(stack: &str) -> Option<Position> {
    let marker = format!("({SCRIPT_NAME}:");
    stack.lines().find_map(|line| {
        let at = line.find(&marker)? + marker.len();
        let inside = line[at..].split(')').next()?;
        let (line_number, column) = inside.split_once(':')?;
        Some(Position {
            line: line_number.parse().ok()?,
            column: column.parse().ok()?,
        })
    })
}

/// `graph.js:L:C: MESSAGE` and the code frame under it, naming the callee where boa's
/// message does not (`not a callable function`).
pub(crate) fn located(position: Position, message: &str, source: &str) -> String {
    let line_text = usize::try_from(position.line)
        .ok()
        .and_then(|n| source.lines().nth(n.checked_sub(1)?));
    // A TypeScript graph's line as its author wrote it, where erasing its types blanked some.
    let written = written_line(source, position.line);
    let message = match line_text {
        Some(text) if message.ends_with("not a callable function") => {
            match callee_at(text, position.column) {
                Some(callee) => message.replace(
                    "not a callable function",
                    &format!("{callee} is not a function"),
                ),
                None => message.to_owned(),
            }
        }
        _ => message.to_owned(),
    };
    let mut out = format!(
        "{SCRIPT_NAME}:{}:{}: {message}",
        position.line, position.column
    );
    if let Some(text) = written.as_deref().or(line_text) {
        out.push_str(&code_frame(position, text));
    }
    out
}

/// What the last line of a TypeScript graph's erased text starts with: the lines erasing its
/// types changed, as the author wrote them, so a code frame shows the `.ts` line (a source map
/// for the frames; lines and columns are the same in both texts).
pub const WRITTEN_LINES_MARKER: &str = "//# graphrelay-written-lines ";

/// Line `line` as the author wrote it, if the text ends with the [`WRITTEN_LINES_MARKER`]
/// line and that line differs from the erased one.
pub(crate) fn written_line(source: &str, line: u32) -> Option<String> {
    let last = source.trim_end_matches(['\n', '\r']).rsplit('\n').next()?;
    let json = last.strip_prefix(WRITTEN_LINES_MARKER)?;
    let lines: Vec<(u32, String)> = serde_json::from_str(json).ok()?;
    lines
        .into_iter()
        .find_map(|(number, text)| (number == line).then_some(text))
}

/// The longest frame line shown, in characters.
const MAX_FRAME_CHARS: usize = 160;

/// `\n  12 | source\n     |     ^`.
fn code_frame(position: Position, text: &str) -> String {
    let number = position.line.to_string();
    let gutter = " ".repeat(number.len());
    let column = usize::try_from(position.column.max(1)).unwrap_or(1) - 1;
    // Long lines are shown from a little before the column.
    let skip = column.saturating_sub(MAX_FRAME_CHARS / 2);
    let shown: String = text.chars().skip(skip).take(MAX_FRAME_CHARS).collect();
    // Tabs stay tabs under the caret, so it lines up in a terminal.
    let pad: String = text
        .chars()
        .skip(skip)
        .take(column - skip)
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    format!("\n  {number} | {}\n  {gutter} | {pad}^", shown.trim_end())
}

/// The callee of the call at `column` of `line`: the member chain (`helpers.pick`, `g.agnet`)
/// that ends right before the first `(` at or after the column.
fn callee_at(line: &str, column: u32) -> Option<String> {
    let chars: Vec<char> = line.chars().collect();
    let from = usize::try_from(column)
        .ok()?
        .checked_sub(1)?
        .min(chars.len());
    let open = from + chars[from..].iter().position(|c| *c == '(')?;
    let mut start = open;
    while start > 0 {
        let c = chars[start - 1];
        if c.is_alphanumeric() || c == '_' || c == '$' || c == '.' {
            start -= 1;
        } else {
            break;
        }
    }
    let callee: String = chars[start..open].iter().collect();
    let callee = callee.trim_matches('.');
    (!callee.is_empty()).then(|| callee.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_innermost_frame_of_the_graph_is_found_past_the_prelude() {
        let stack = "    at failure (<anonymous>)\n    at pick (graph.js:2:37)\n    at default (graph.js:9:3)\n";
        assert_eq!(
            innermost(stack),
            Some(Position {
                line: 2,
                column: 37
            })
        );
        assert_eq!(innermost("    at f (native)\n"), None);
    }

    #[test]
    fn a_location_is_read_back_from_the_start_of_a_text() {
        let text = "graphs/research.js:12:7: TypeError: x";
        let leading = leading_location(text).expect("a location");
        assert_eq!(leading.file, "graphs/research.js");
        assert_eq!(
            leading.position,
            Position {
                line: 12,
                column: 7
            }
        );
        assert_eq!(&text[leading.rest..], "TypeError: x");
        assert_eq!(leading_location("TypeError: x"), None);
        assert_eq!(leading_location("failed: graph x failed"), None);
        assert_eq!(leading_location("a b:1:2: x"), None);
    }

    #[test]
    fn a_typescript_line_is_shown_as_written() {
        let source = format!(
            "const a        = 1;\n  return a.b.c;\n{WRITTEN_LINES_MARKER}[[1,\"const a: number = 1;\"]]\n"
        );
        let at = |line| Position { line, column: 7 };
        assert!(located(at(1), "x", &source).contains("1 | const a: number = 1;\n"));
        assert!(located(at(2), "x", &source).contains("2 |   return a.b.c;\n"));
        assert_eq!(written_line("const a = 1;\n//# other [[1,\"x\"]]", 1), None);
    }

    #[test]
    fn the_frame_puts_a_caret_under_the_column_and_names_the_callee() {
        let source = "const a = 1;\n  return helpers.pick(a);\n";
        let text = located(
            Position {
                line: 2,
                column: 10,
            },
            "TypeError: not a callable function",
            source,
        );
        assert_eq!(
            text,
            "graph.js:2:10: TypeError: helpers.pick is not a function\n  2 |   return helpers.pick(a);\n    |          ^"
        );
    }
}
