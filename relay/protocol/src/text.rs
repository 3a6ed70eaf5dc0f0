//! Text rules both sides of the relay apply alike.

/// The length of `text` in UTF-16 code units, as JavaScript's `text.length` counts it: the one
/// unit every character limit of the relay is measured in (a chat agent and a graph count this
/// way, so a limit they read in a tool's description holds for what they send).
pub fn utf16_len(text: &str) -> usize {
    text.chars().map(char::len_utf16).sum()
}

/// Lowercase hex of `bytes`: the names of hashed tokens and secrets on the service, of compiled
/// graphs on the desktop.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

/// `text`, a JSON text, with every lone UTF-16 surrogate escape (`\ud800`) replaced by
/// `\ufffd`, the replacement character.
///
/// JS strings may hold lone surrogates, for instance after `reply.text.slice(0, 100)` cut an emoji
/// in half. `JSON.stringify` writes them as escapes, but a Rust string (and so serde) cannot hold
/// them and used to refuse the whole result or argument with "unexpected end of hex escape".
/// Surrogate pairs and every other escape are kept; the length in bytes does not change. The
/// relay's `/mcp` endpoint applies this to requests from JS clients (graph-js has the same rule
/// for what graphs send; the two products share no crate, see ARCHITECTURE.md).
pub fn well_formed(text: String) -> String {
    if !may_hold_surrogate_escape(&text) {
        return text;
    }
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut at = 0;
    while let Some(found) = text.as_bytes()[at..].iter().position(|&b| b == b'\\') {
        let escape = at + found;
        match surrogate_escape(&text, escape) {
            Some(0xD800..=0xDBFF)
                if matches!(surrogate_escape(&text, escape + 6), Some(0xDC00..=0xDFFF)) =>
            {
                at = escape + 12;
            }
            Some(_) => {
                out.push_str(&text[copied..escape]);
                out.push_str("\\ufffd");
                at = escape + 6;
                copied = at;
            }
            // Any other escape: skip the backslash and the character it escapes (ASCII in JSON),
            // so that the second backslash of `\\` never starts an escape.
            None => at = escape + 2,
        }
        at = at.min(text.len());
    }
    out.push_str(&text[copied..]);
    out
}

/// Whether `text` may hold an escape [`well_formed`] replaces: a quick test, so that text without
/// one passes untouched (and uncopied).
pub fn may_hold_surrogate_escape(text: &str) -> bool {
    text.contains("\\ud") || text.contains("\\uD")
}

/// The code unit of the `\uXXXX` escape at byte `at` of `text`, if it is a surrogate.
fn surrogate_escape(text: &str, at: usize) -> Option<u16> {
    let hex = text.get(at..at + 6)?.strip_prefix("\\u")?;
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let unit = u16::from_str_radix(hex, 16).ok()?;
    (0xD800..=0xDFFF).contains(&unit).then_some(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_count_utf16_units() {
        assert_eq!(utf16_len(""), 0);
        assert_eq!(utf16_len("abc"), 3);
        assert_eq!(utf16_len("日本語"), 3);
        assert_eq!(utf16_len("😀"), 2);
        assert_eq!(utf16_len(&"😀".repeat(50_000)), 100_000);
    }

    #[test]
    fn lone_surrogate_escapes_become_the_replacement_character() {
        assert_eq!(well_formed(r#""a\ud83d""#.into()), r#""a\ufffd""#);
        assert_eq!(well_formed(r#""\udc00b""#.into()), r#""\ufffdb""#);
        assert_eq!(well_formed(r#""\ud83d\ude00""#.into()), r#""\ud83d\ude00""#);
        assert_eq!(well_formed(r#""\\ud83d""#.into()), r#""\\ud83d""#);
        assert_eq!(well_formed("plain".into()), "plain");
    }
}
