//! An artifact's media type: `type/subtype` with optional parameters, as RFC 9110 §8.3.1 writes
//! it (type and subtype in RFC 6838's restricted names; a parameter's value a token or a quoted
//! string). It is stored as given and later sent in a `Content-Type` header, so nothing else
//! passes: no control character, no text outside ASCII, no stray `;` or `=` (issue 44: the
//! parameters took control characters).

/// Why a media type is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MediaTypeError {
    /// No `/`, or a type or subtype with characters RFC 6838 does not allow.
    #[error("`type/subtype` must be letters, digits and ! # $ & - ^ _ . + (like text/markdown)")]
    Essence,
    /// A parameter that is not `name=value`.
    #[error(
        "each parameter must be name=value, the value a token or a quoted string without control characters (like charset=utf-8)"
    )]
    Parameter,
}

/// Whether `c` may appear in a type or subtype name (RFC 6838 §4.2).
fn restricted_name_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&c)
}

/// Whether `c` may appear in a token (RFC 9110 §5.6.2).
fn token_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

fn is_name(text: &str) -> bool {
    !text.is_empty() && text.len() <= 127 && text.bytes().all(restricted_name_char)
}

fn is_token(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(token_char)
}

/// Whether `text` is one quoted string: printable ASCII and spaces, `"` and `\` only escaped.
fn is_quoted_string(text: &str) -> bool {
    let Some(inner) = text
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    else {
        return false;
    };
    let mut bytes = inner.bytes();
    while let Some(b) = bytes.next() {
        let ok = match b {
            b'\\' => bytes
                .next()
                .is_some_and(|escaped| escaped == b' ' || escaped.is_ascii_graphic()),
            b'"' => false,
            b' ' => true,
            _ => b.is_ascii_graphic(),
        };
        if !ok {
            return false;
        }
    }
    true
}

/// Splits at the `;` that are not inside a quoted string.
fn split_parameters(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (index, b) in text.bytes().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            b';' if !quoted => {
                parts.push(&text[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// Checks a media type such as `text/markdown` or `text/plain; charset="utf-8"`.
pub fn check(text: &str) -> Result<(), MediaTypeError> {
    let mut parts = split_parameters(text).into_iter();
    let essence = parts.next().unwrap_or_default();
    let (kind, subtype) = essence
        .trim_end_matches([' ', '\t'])
        .split_once('/')
        .ok_or(MediaTypeError::Essence)?;
    if !is_name(kind) || !is_name(subtype) {
        return Err(MediaTypeError::Essence);
    }
    for parameter in parts {
        let (name, value) = parameter
            .trim_matches([' ', '\t'])
            .split_once('=')
            .ok_or(MediaTypeError::Parameter)?;
        if !is_token(name) || !(is_token(value) || is_quoted_string(value)) {
            return Err(MediaTypeError::Parameter);
        }
    }
    Ok(())
}

/// The `type/subtype` of a media type, lowercased (the names are case-insensitive), if it has
/// one.
pub fn essence(text: &str) -> Option<String> {
    let essence = text.split(';').next()?.trim().to_ascii_lowercase();
    let (kind, subtype) = essence.split_once('/')?;
    (is_name(kind) && is_name(subtype)).then_some(essence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_are_type_subtype_and_checked_parameters() {
        for good in [
            "text/markdown",
            "text/plain; charset=utf-8",
            "text/plain;charset=utf-8",
            "text/plain; charset=\"utf-8\"",
            "text/plain; format=flowed; charset=utf-8",
            "application/vnd.api+json",
            "text/plain; title=\"a \\\"quoted\\\" name; with a semicolon\"",
        ] {
            assert_eq!(check(good), Ok(()), "{good}");
        }
        for (bad, error) in [
            ("markdown", MediaTypeError::Essence),
            ("text/", MediaTypeError::Essence),
            ("/plain", MediaTypeError::Essence),
            ("text/plain/x", MediaTypeError::Essence),
            ("te xt/plain", MediaTypeError::Essence),
            ("text/pl\u{e4}in", MediaTypeError::Essence),
            (
                "text/plain; charset=utf-8\r\nSet-Cookie: a=b",
                MediaTypeError::Parameter,
            ),
            ("text/plain; charset=utf\u{1}8", MediaTypeError::Parameter),
            (
                "text/plain; charset=\"utf\u{7f}8\"",
                MediaTypeError::Parameter,
            ),
            ("text/plain; charset", MediaTypeError::Parameter),
            ("text/plain; =utf-8", MediaTypeError::Parameter),
            ("text/plain; charset=", MediaTypeError::Parameter),
            ("text/plain; charset=\"utf-8", MediaTypeError::Parameter),
            ("text/plain; a=b=c", MediaTypeError::Parameter),
            ("text/plain;", MediaTypeError::Parameter),
            ("text/plain; charset=\"\u{e9}\"", MediaTypeError::Parameter),
        ] {
            assert_eq!(check(bad), Err(error), "{bad:?}");
        }
    }

    #[test]
    fn the_essence_is_lowercased_without_parameters() {
        assert_eq!(
            essence("Text/JavaScript; charset=utf-8").as_deref(),
            Some("text/javascript")
        );
        assert_eq!(essence("nonsense"), None);
    }
}
