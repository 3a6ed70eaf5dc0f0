//! The URL record under web.js's `URL`: the `url` crate's parser and setters (`url::quirks`),
//! brought to the URL standard where the crate departs from it. whatwg-url, the standard's
//! reference implementation, is the oracle (`scripts/fuzz-web.js`).
//!
//! Most departures are the crate reading a character the standard leaves alone in that place:
//! a backslash in a URL whose scheme is not special (the crate takes it for a slash in places),
//! a segment that looks like a Windows drive letter outside the first segment of a file URL's
//! path (the crate keeps it from `..`), and the empty segments a file URL's path starts with
//! (the crate drops them, as an older standard did). Those are handed to the crate as
//! *stand-ins*, Unicode noncharacters it percent-encodes like any other character, and every
//! attribute read turns the encoded stand-in back into what it stands for. A URL whose own text
//! holds a stand-in or its encoding is parsed without them, as the crate parses it. The rest are
//! corrected before or after the crate: `///host` relative to a special base, credentials with
//! no host, an empty path or query or fragment set on purpose, the setters the crate refuses on
//! file URLs, the `/.` before a hostless path that starts with `//`, and two changes of the
//! standard after the crate's release (`^` in paths, `%20` before an opaque path's query).

use std::ops::Range;

use url::{Position, Url, quirks};

/// The stand-ins (see the module documentation), Unicode noncharacters the crate
/// percent-encodes wherever they land. A backslash in a URL that is not special:
const BACKSLASH_TEXT: &str = "\u{FDD0}";
/// The segment put first in a file URL's path, before the empty ones the crate would drop:
const EMPTY_FIRST: char = '\u{FDD1}';
/// The `:` and the `|` of a segment like a drive letter that `..` must remove:
const DRIVE_COLON: char = '\u{FDD2}';
const DRIVE_PIPE: char = '\u{FDD3}';
/// Each stand-in's encoding, and what it reads as (the first segment reads as nothing).
const ENCODED: [(&str, &str); 4] = [
    ("%EF%B7%90", "\\"),
    ("/%EF%B7%91", ""),
    ("%EF%B7%92", ":"),
    ("%EF%B7%93", "|"),
];

/// A parsed URL, as web.js's `URL` holds it.
pub(crate) struct Record {
    url: Url,
    /// Whether its text may hold stand-ins (see the module documentation).
    stand_ins: bool,
}

fn special(scheme: &str) -> bool {
    matches!(scheme, "ftp" | "file" | "http" | "https" | "ws" | "wss")
}

/// The input as the URL parser reads it: leading and trailing C0 controls and spaces, and every
/// tab and newline, removed.
fn cleaned(input: &str) -> String {
    input
        .trim_matches(|c: char| c <= ' ')
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect()
}

/// The scheme `input` starts with (lowercase), if it has one.
fn scheme_of(input: &str) -> Option<String> {
    let end = input.find(':')?;
    let scheme = &input[..end];
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then(|| scheme.to_ascii_lowercase())
}

/// Whether `text` holds a stand-in, or a stand-in's encoding, of its own.
fn collides(text: &str) -> bool {
    let upper = text.to_ascii_uppercase();
    ('\u{FDD0}'..='\u{FDD3}').any(|c| text.contains(c))
        || ENCODED
            .iter()
            .any(|(encoded, _)| upper.contains(encoded.trim_start_matches('/')))
}

/// Where the path is in `input` (cleaned; its own scheme, if any, `own`; the URL's scheme
/// `scheme`; against `base`), and where the authority is when it has one; `None` for an opaque
/// path.
fn path_range(
    input: &str,
    own: Option<&str>,
    scheme: &str,
    base: Option<&Url>,
) -> Option<(Range<usize>, Option<Range<usize>>)> {
    let is_special = special(scheme);
    let sep = |c: char| c == '/' || (is_special && c == '\\');
    let start = own.map_or(0, |s| s.len() + 1);
    let rest = &input[start..];
    let slashes = rest.chars().take_while(|&c| sep(c)).count();
    let same_base = base.is_some_and(|b| b.scheme() == scheme);
    let authority = match (own.is_some(), scheme) {
        (_, "file") => slashes >= 2,
        (true, _) if is_special => !same_base || slashes >= 2,
        (false, _) if is_special => slashes >= 2,
        _ => rest.starts_with("//"),
    };
    if !authority && !is_special && own.is_some() && !rest.starts_with('/') {
        return None;
    }
    if !authority && own.is_none() && base.is_some_and(Url::cannot_be_a_base) {
        return None;
    }
    let mut host = None;
    let path_start = if authority {
        let skip = if is_special && scheme != "file" {
            slashes
        } else {
            2
        };
        let host_start = start + skip;
        let host_end = input[host_start..]
            .find(|c: char| c == '/' || c == '?' || c == '#' || (is_special && c == '\\'))
            .map_or(input.len(), |i| host_start + i);
        host = Some(host_start..host_end);
        host_end
    } else {
        start
    };
    let path_end = input[path_start..]
        .find(['?', '#'])
        .map_or(input.len(), |i| path_start + i);
    Some((path_start..path_end, host))
}

/// Whether `segment` is a `..` segment (`.` may be written `%2e`).
fn double_dot(segment: &str) -> bool {
    matches!(
        segment.to_ascii_lowercase().as_str(),
        ".." | ".%2e" | "%2e." | "%2e%2e"
    )
}

/// Whether `segment` is a Windows drive letter (`C:`, `c|`).
fn drive(segment: &[u8]) -> bool {
    segment.len() == 2 && segment[0].is_ascii_alphabetic() && matches!(segment[1], b':' | b'|')
}

/// A file URL's path, given whole (not relative to a base's), resolved as the standard's path
/// state does (`.` and `..`, a drive letter first is normalized and kept from `..`), behind a
/// stand-in first segment: the crate drops the empty segments a file URL's path starts with,
/// and keeps a drive letter in any place from `..`.
fn file_path(path: &str, first: Option<&str>) -> String {
    let sep = |c: char| c == '/' || c == '\\';
    let text = path.strip_prefix(sep).unwrap_or(path);
    let segments: Vec<&str> = text.split(sep).collect();
    let mut resolved: Vec<String> = first.into_iter().map(str::to_owned).collect();
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        if double_dot(segment) {
            let kept_drive =
                resolved.len() == 1 && drive(resolved[0].as_bytes()) && resolved[0].ends_with(':');
            if !kept_drive {
                resolved.pop();
            }
            if last {
                resolved.push(String::new());
            }
        } else if matches!(segment.to_ascii_lowercase().as_str(), "." | "%2e") {
            if last {
                resolved.push(String::new());
            }
        } else if resolved.is_empty() && drive(segment.as_bytes()) {
            resolved.push(format!("{}:", &segment[..1]));
        } else {
            resolved.push((*segment).to_owned());
        }
    }
    format!("/{EMPTY_FIRST}/{}", resolved.join("/"))
}

/// How a file URL's path text starts: whole, or after the drive letter its base carries over
/// (`/x` against `file:///C:/dir/f` is `file:///C:/x`), or relative to the base's path (left to
/// the crate).
enum FilePath {
    Whole(Option<String>),
    Relative,
}

/// Whether `text` starts with a Windows drive letter (`C:`, `c|`, then its end or a separator).
fn starts_with_drive(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() >= 2 && drive(&b[..2]) && (b.len() == 2 || matches!(b[2], b'/' | b'\\' | b'?' | b'#'))
}

/// `path` (of a URL with `scheme`) with stand-ins for what the crate gets wrong: a file URL's
/// whole path is resolved here ([`file_path`]); elsewhere a segment like a drive letter gets
/// stand-ins for its `:` or `|`, so that `..` removes it.
fn stand_in_path(path: &str, scheme: &str, file: FilePath) -> String {
    let is_special = special(scheme);
    let sep = |c: char| c == '/' || (is_special && c == '\\');
    if scheme == "file"
        && let FilePath::Whole(first) = file
    {
        return file_path(path, first.as_deref());
    }
    let mut out = String::with_capacity(path.len() + 4);
    let mut rest = path;
    loop {
        let end = rest.find(sep).unwrap_or(rest.len());
        let segment = &rest.as_bytes()[..end];
        if drive(segment) {
            out.push(char::from(segment[0]));
            out.push(if segment[1] == b':' {
                DRIVE_COLON
            } else {
                DRIVE_PIPE
            });
        } else {
            out.push_str(&rest[..end]);
        }
        let Some(separator) = rest[end..].chars().next() else {
            return out;
        };
        out.push(separator);
        rest = &rest[end + separator.len_utf8()..];
    }
}

/// How the path `path` of a file URL (its own scheme `own`, a host before the path or not)
/// starts against `base`.
fn file_path_kind(path: &str, own: Option<&str>, host: bool, base: Option<&Url>) -> FilePath {
    let file_base = base.filter(|b| b.scheme() == "file" && own.is_none_or(|s| s == "file"));
    let Some(base) = file_base.filter(|_| !host) else {
        return FilePath::Whole(None);
    };
    let Some(rest) = path.strip_prefix(['/', '\\']) else {
        // A drive letter starts a new path; anything else goes on from the base's.
        return if starts_with_drive(path) {
            FilePath::Whole(None)
        } else {
            FilePath::Relative
        };
    };
    let base_path = base.path().replace(ENCODED[1].0, "");
    let first = base_path
        .split('/')
        .nth(1)
        .filter(|s| drive(s.as_bytes()) && s.ends_with(':'))
        .map(str::to_owned);
    FilePath::Whole(first.filter(|_| !starts_with_drive(rest)))
}

impl Record {
    /// `new URL(input, base)`: the record, or `None` when the input (or the base) is not a
    /// valid URL.
    pub(crate) fn parse(input: &str, base: Option<&str>) -> Option<Self> {
        let base = match base {
            None => None,
            Some(base) => Some(Self::parse(base, None)?),
        };
        let input = cleaned(input);
        let own = scheme_of(&input);
        let scheme = match (&own, &base) {
            (Some(scheme), _) => scheme.clone(),
            (None, Some(base)) => base.url.scheme().to_owned(),
            (None, None) => return None,
        };
        let base_url = base.as_ref().map(|b| &b.url);
        let stand_ins = !collides(&input) && base.as_ref().is_none_or(|b| b.stand_ins);
        let mut text = input.clone();
        if stand_ins {
            stand_in_input(&mut text, own.as_deref(), &scheme, base_url)?;
        }
        if special(&scheme) && own.is_none() && scheme != "file" {
            // Relative to a special base, every slash and backslash after the first two is
            // skipped (`///host` is `//host`); the crate takes the third for the path's.
            let slashes = text.chars().take_while(|c| matches!(c, '/' | '\\')).count();
            if slashes > 2 {
                text = format!("//{}", &text[slashes..]);
            }
        }
        let mut url = Url::options().base_url(base_url).parse(&text).ok()?;
        if stand_ins && !settle(&mut url) {
            return None;
        }
        follow_the_standard(&mut url);
        Some(Self { url, stand_ins })
    }

    /// `text` read from the URL, its stand-ins turned back into what they stand for.
    fn translated(&self, text: String) -> String {
        if !self.stand_ins {
            return text;
        }
        ENCODED
            .iter()
            .fold(text, |text, (from, to)| text.replace(from, to))
    }

    /// The origin: a blob URL's is its path's, read as a URL.
    fn origin(&self) -> String {
        let url = &self.url;
        if url.scheme() != "blob" || !self.stand_ins {
            return quirks::origin(url);
        }
        match Self::parse(&self.translated(url.path().to_owned()), None) {
            Some(inner) if matches!(inner.url.scheme(), "http" | "https") => {
                quirks::origin(&inner.url)
            }
            _ => "null".to_owned(),
        }
    }

    /// The attribute `index`, in web.js's order: href, protocol, username, password, host,
    /// hostname, port, pathname, search, hash; 10 is the origin, 11 the query without its `?`.
    pub(crate) fn part(&self, index: usize) -> Option<String> {
        let url = &self.url;
        let text = match index {
            0 => quirks::href(url).to_owned(),
            1 => quirks::protocol(url).to_owned(),
            2 => quirks::username(url).to_owned(),
            3 => quirks::password(url).to_owned(),
            4 => quirks::host(url).to_owned(),
            5 => quirks::hostname(url).to_owned(),
            6 => quirks::port(url).to_owned(),
            7 => quirks::pathname(url).to_owned(),
            8 => quirks::search(url).to_owned(),
            9 => quirks::hash(url).to_owned(),
            10 => self.origin(),
            11 => url.query().unwrap_or_default().to_owned(),
            _ => return None,
        };
        Some(self.translated(text))
    }

    /// Sets the attribute `index` (see [`Self::part`]; 11 sets the query itself) to `value` as
    /// the standard's setters do: a value they cannot use changes nothing. `Some(false)` only
    /// when the href setter's value is not a valid URL; `None` for no such attribute.
    pub(crate) fn set(&mut self, index: usize, value: &str) -> Option<bool> {
        if index == 0 {
            let parsed = Self::parse(value, None);
            let valid = parsed.is_some();
            if let Some(parsed) = parsed {
                *self = parsed;
            }
            return Some(valid);
        }
        if !(1..=11).contains(&index) || index == 10 {
            return None;
        }
        if self.stand_ins && collides(value) {
            // Its own text could not be told from a stand-in: the URL goes on as the crate
            // has it.
            if let Ok(url) = Url::parse(&self.translated(self.url.as_str().to_owned())) {
                self.url = url;
            }
            self.stand_ins = false;
        }
        if !self.set_corrected(index, value) {
            self.set_by_crate(index, value);
        }
        Some(true)
    }

    /// The setters the crate gets wrong, done here; false for the others.
    fn set_corrected(&mut self, index: usize, raw: &str) -> bool {
        let value = without_tabs(raw);
        if matches!(index, 4 | 5) && value.starts_with(':') {
            // No host before the port: the standard's host state fails, and the setter.
            return true;
        }
        let url = &self.url;
        if matches!(index, 4 | 5)
            && !special(url.scheme())
            && (value.is_empty() || value.starts_with(['/', '?', '#']))
            && (!url.username().is_empty() || url.password().is_some() || url.port().is_some())
        {
            // An empty host cannot go with credentials or a port.
            return true;
        }
        if self.set_on_file(index, &value) {
            return true;
        }
        let scheme = self.url.scheme().to_owned();
        if index == 7 && value.is_empty() && !special(&scheme) && self.url.has_authority() {
            // A URL with an authority, not special, may have an empty path; the crate
            // writes `/`.
            let text = format!(
                "{}{}",
                &self.url[..Position::BeforePath],
                &self.url[Position::AfterPath..]
            );
            if let Ok(url) = Url::parse(&text) {
                self.url = url;
            }
            return true;
        }
        if matches!(index, 8 | 9) && !raw.is_empty() {
            // The one `?` or `#` the value starts with goes before tabs and newlines do (the
            // crate removes them first), and a value of only those is an empty query or
            // fragment, not none.
            let lead = if index == 8 { '?' } else { '#' };
            let mut rest = without_tabs(raw.strip_prefix(lead).unwrap_or(raw));
            if self.stand_ins && !special(&scheme) {
                rest = rest.replace('\\', BACKSLASH_TEXT);
            }
            if index == 8 {
                self.url.set_query(Some(&rest));
            } else {
                self.url.set_fragment(Some(&rest));
            }
            follow_the_standard(&mut self.url);
            return true;
        }
        false
    }

    /// The setters the crate refuses on file URLs, as the standard has them: an empty host (a
    /// value that starts with `/`, `\`, `?` or `#`), and a special URL becoming a file URL
    /// (its host and path kept as they are). False for any other.
    fn set_on_file(&mut self, index: usize, value: &str) -> bool {
        let url = &self.url;
        let empty_host = matches!(index, 4 | 5)
            && url.scheme() == "file"
            && (value.is_empty() || value.starts_with(['/', '\\', '?', '#']));
        let to_file = index == 1
            && special(url.scheme())
            && url.scheme() != "file"
            && self.stand_ins
            && scheme_of(&format!("{value}:")).as_deref() == Some("file")
            && url.username().is_empty()
            && url.password().is_none()
            && url.port().is_none();
        let changed = if empty_host {
            let path = self.translated(url[Position::BeforePath..].to_owned());
            Self::parse(&format!("file://{path}"), None)
        } else if to_file {
            // A stand-in segment first keeps the crate from reading the path again.
            let host = url.host_str().unwrap_or_default().to_owned();
            let text = format!("file://h/{EMPTY_FIRST}{}", &url[Position::BeforePath..]);
            Url::parse(&text).ok().and_then(|mut file| {
                file.set_host(Some(&host)).ok()?;
                Some(Self {
                    url: file,
                    stand_ins: true,
                })
            })
        } else {
            return false;
        };
        if let Some(changed) = changed {
            *self = changed;
        }
        true
    }

    /// A setter of `url::quirks`, with stand-ins in `value` where the URL takes them.
    fn set_by_crate(&mut self, index: usize, value: &str) {
        // Every setter but the userinfo's parses its value, which drops tabs and newlines.
        let mut value = if matches!(index, 2 | 3) {
            value.to_owned()
        } else {
            without_tabs(value)
        };
        let scheme = self.url.scheme().to_owned();
        if self.stand_ins {
            if !special(&scheme) {
                value = value.replace('\\', BACKSLASH_TEXT);
            }
            if index == 7 && !self.url.cannot_be_a_base() {
                if special(&scheme) && !value.starts_with(['/', '\\']) {
                    value.insert(0, '/');
                }
                value = stand_in_path(&value, &scheme, FilePath::Whole(None));
            }
        }
        let before = self.url.clone();
        let url = &mut self.url;
        // The setters ignore a value they cannot use, as the standard says.
        match index {
            1 => quirks::set_protocol(url, &value).unwrap_or(()),
            2 => quirks::set_username(url, &value).unwrap_or(()),
            3 => quirks::set_password(url, &value).unwrap_or(()),
            4 => quirks::set_host(url, &value).unwrap_or(()),
            5 => quirks::set_hostname(url, &value).unwrap_or(()),
            6 => quirks::set_port(url, &value).unwrap_or(()),
            7 => quirks::set_pathname(url, &value),
            8 => quirks::set_search(url, &value),
            9 => quirks::set_hash(url, &value),
            _ => url.set_query((!value.is_empty()).then_some(value.as_str())),
        }
        if self.stand_ins && !settle(url) {
            *url = before;
        }
        follow_the_standard(url);
    }
}

/// `text` without tabs and newlines, as the URL parser reads it.
fn without_tabs(text: &str) -> String {
    text.chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect()
}

/// Puts stand-ins into `text` (a cleaned input whose own scheme is `own`, of a URL with
/// `scheme`, against `base`); `None` when the standard fails it where the crate would not
/// (credentials and no host).
fn stand_in_input(
    text: &mut String,
    own: Option<&str>,
    scheme: &str,
    base: Option<&Url>,
) -> Option<()> {
    if !special(scheme) {
        *text = text.replace('\\', BACKSLASH_TEXT);
    }
    let Some((range, authority)) = path_range(text, own, scheme, base) else {
        return Some(());
    };
    if let Some(authority) = &authority
        && let Some((_, host)) = text[authority.clone()].rsplit_once('@')
        && (host.is_empty() || host.starts_with(':'))
    {
        return None;
    }
    match authority {
        Some(host) if scheme == "file" && drive(text[host.clone()].as_bytes()) => {
            // `file://C:/x`: the drive letter quirk makes the "host" the path's start.
            let range = host.start..range.end;
            let path = stand_in_path(&text[range.clone()], scheme, FilePath::Whole(None));
            text.replace_range(range, &format!("/{path}"));
        }
        authority => {
            let file = file_path_kind(&text[range.clone()], own, authority.is_some(), base);
            let path = stand_in_path(&text[range.clone()], scheme, file);
            text.replace_range(range, &path);
        }
    }
    Some(())
}

/// After the crate parsed or set a URL with stand-ins: a host holding a backslash is no host
/// (a forbidden host code point), and in the userinfo a backslash is `%5C`.
fn settle(url: &mut Url) -> bool {
    let backslash = ENCODED[0].0;
    if url.host_str().is_some_and(|h| h.contains(backslash)) {
        return false;
    }
    if url.username().contains(backslash) {
        let fixed = url.username().replace(backslash, "%5C");
        let _ = url.set_username(&fixed);
    }
    if let Some(password) = url.password().filter(|p| p.contains(backslash)) {
        let fixed = password.replace(backslash, "%5C");
        let _ = url.set_password(Some(&fixed));
    }
    true
}

/// Brings `url` to what the standard writes where the crate writes otherwise, after every parse
/// and setter: `/.` before a hostless path that starts with `//` (or it would read as a host),
/// and not before one that no longer does; `^` in a hierarchical path percent-encoded, and in
/// an opaque path a space right before the query or fragment written `%20` (two changes of the
/// standard after the crate's release).
fn follow_the_standard(url: &mut Url) {
    if !url.cannot_be_a_base()
        && &url[Position::AfterScheme..Position::BeforePath] == ":"
        && url.path().starts_with("//")
    {
        // A path whose first segment is empty, without a host: the href writes `/.` before it,
        // or it would read as a host (the crate's pathname setter does not).
        let text = format!("{}:/.{}", url.scheme(), &url[Position::BeforePath..]);
        if let Ok(fixed) = Url::parse(&text) {
            *url = fixed;
        }
    }
    if url.has_authority() && !url[Position::AfterPort..Position::BeforePath].is_empty() {
        // The `/.` of a hostless path that has a host now.
        let text = format!(
            "{}{}",
            &url[..Position::AfterPort],
            &url[Position::BeforePath..]
        );
        if let Ok(fixed) = Url::parse(&text) {
            *url = fixed;
        }
    }
    if &url[Position::AfterScheme..Position::BeforePath] == ":/." && !url.path().starts_with("//") {
        // The `/.` a setter left before a path that no longer needs it.
        let text = format!("{}:{}", url.scheme(), &url[Position::BeforePath..]);
        if let Ok(fixed) = Url::parse(&text) {
            *url = fixed;
        }
    }
    if !url.cannot_be_a_base() {
        if url.path().contains('^') {
            let path = url.path().replace('^', "%5E");
            url.set_path(&path);
        }
        return;
    }
    let path = url.path();
    if let Some(kept) = path.strip_suffix(' ')
        && (url.query().is_some() || url.fragment().is_some())
    {
        let rest = &url[Position::AfterPath..];
        let text = format!("{}:{kept}%20{rest}", url.scheme());
        if let Ok(fixed) = Url::parse(&text) {
            *url = fixed;
        }
    }
}
