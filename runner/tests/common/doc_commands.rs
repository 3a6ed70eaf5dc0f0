//! The command lines of the README and of `docs/`: every `relay …` and `runner …` line in a code
//! block (also as `cargo run -p relay -- …`, after a `$ ` prompt, behind `VAR=value`, in a pipe,
//! continued with `\`), and a check that the real binary parses each one. The check runs the
//! line's subcommand with its flags and `--help`: clap stops at `--help` and exits 0 only when
//! every flag before it is known and every value parses, so a renamed flag, a removed
//! subcommand or a value the parser refuses fails, naming the page and the line. Shared by the
//! runner's and the relay's test suites (`runner/tests/docs.rs`, `relay/tests/docs.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The programs whose command lines the docs show.
pub const PROGRAMS: [&str; 2] = ["relay", "runner"];

/// One command line of the docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocCommand {
    /// The page, relative to the workspace (`docs/desktop.md`).
    pub file: String,
    /// The line it starts on, from 1.
    pub line: usize,
    /// `relay` or `runner`.
    pub program: String,
    /// Its words after the program's name, with quotes removed as a shell would.
    pub args: Vec<String>,
}

/// The pages whose command lines are checked: README.md and every `docs/*.md`.
pub fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("the docs folder")
        .map(|entry| entry.expect("a docs entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// Every command line of `program` in the pages under `root`.
pub fn commands_of(root: &Path, program: &str) -> Vec<DocCommand> {
    pages(root)
        .iter()
        .flat_map(|page| {
            let text = std::fs::read_to_string(page).expect("a docs page");
            let name = page
                .strip_prefix(root)
                .unwrap_or(page)
                .display()
                .to_string();
            commands(&name, &text)
        })
        .filter(|command| command.program == program)
        .collect()
}

/// Every command line in the code blocks of `text`, the page `file`.
pub fn commands(file: &str, text: &str) -> Vec<DocCommand> {
    let mut found = Vec::new();
    for (line, logical) in code_lines(text) {
        for segment in segments(&logical) {
            if let Some((program, args)) = program_and_args(&segment) {
                found.push(DocCommand {
                    file: file.to_owned(),
                    line,
                    program,
                    args,
                });
            }
        }
    }
    found
}

/// The lines inside fenced code blocks, each with the number of its first line; a line ending
/// in `\` is joined with the next, as the shell does.
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    let mut pending: Option<(usize, String)> = None;
    for (index, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
            pending = None;
            continue;
        }
        if !fenced {
            continue;
        }
        let (start, mut joined) = pending.take().unwrap_or((index + 1, String::new()));
        match raw.strip_suffix('\\') {
            Some(head) => {
                joined.push_str(head);
                joined.push(' ');
                pending = Some((start, joined));
            }
            None => {
                joined.push_str(raw);
                out.push((start, joined));
            }
        }
    }
    out
}

/// A logical line's simple commands: its words as the shell splits and unquotes them, cut at
/// `|`, `&&`, `||`, `;` and `&`, without comments and redirections.
fn segments(line: &str) -> Vec<Vec<String>> {
    let mut split = Split::default();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => split.end_word(),
            '#' if split.word.is_none() => break,
            '\'' => split.quoted(&mut chars, '\''),
            '"' => split.quoted(&mut chars, '"'),
            '\\' => split.word().extend(chars.next()),
            '$' if chars.peek() == Some(&'(') => split.substitution(&mut chars),
            '|' | ';' | '&' | '(' | ')' => {
                split.end_word();
                if c == '&' && chars.peek() == Some(&'>') {
                    // `&>FILE`: both streams to a file.
                    chars.next();
                    split.redirect = true;
                    continue;
                }
                if chars.peek() == Some(&c) {
                    chars.next();
                }
                split.segments.push(Vec::new());
            }
            '>' | '<' => {
                // `2>` redirects stream 2: it is not a word `2`.
                if split
                    .word
                    .as_deref()
                    .is_some_and(|w| w.chars().all(|d| d.is_ascii_digit()))
                {
                    split.word = None;
                }
                split.end_word();
                while chars
                    .next_if(|&q| q == '>' || q == '<' || q == '&')
                    .is_some()
                {}
                split.redirect = true;
            }
            _ => split.word().push(c),
        }
    }
    split.end_word();
    split.segments.retain(|segment| !segment.is_empty());
    split.segments
}

/// The state of [`segments`]: the simple commands so far, the word being read, and whether
/// the next word is a redirection's target (dropped).
struct Split {
    segments: Vec<Vec<String>>,
    word: Option<String>,
    redirect: bool,
}

impl Default for Split {
    fn default() -> Self {
        Split {
            segments: vec![Vec::new()],
            word: None,
            redirect: false,
        }
    }
}

impl Split {
    fn word(&mut self) -> &mut String {
        self.word.get_or_insert_with(String::new)
    }

    fn end_word(&mut self) {
        if let Some(done) = self.word.take() {
            if self.redirect {
                self.redirect = false;
            } else if let Some(last) = self.segments.last_mut() {
                last.push(done);
            }
        }
    }

    /// A quoted stretch up to `quote`; in double quotes a backslash escapes the next character.
    fn quoted(&mut self, chars: &mut std::iter::Peekable<std::str::Chars<'_>>, quote: char) {
        let word = self.word();
        while let Some(q) = chars.next() {
            match q {
                _ if q == quote => break,
                '\\' if quote == '"' => word.extend(chars.next()),
                _ => word.push(q),
            }
        }
    }

    /// `$(...)`: a command substitution stays one word, as its text.
    fn substitution(&mut self, chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
        let word = self.word();
        word.push('$');
        let mut depth = 0usize;
        for q in chars.by_ref() {
            word.push(q);
            match q {
                '(' => depth += 1,
                ')' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
        }
    }
}

/// The program a simple command runs, if it is one of [`PROGRAMS`], and its arguments: `relay …`,
/// `path/to/relay …`, `cargo run [-q] [--release] -p relay -- …`, after a `$` prompt,
/// `VAR=value` assignments and `env`.
fn program_and_args(segment: &[String]) -> Option<(String, Vec<String>)> {
    let mut words = segment.iter().map(String::as_str).peekable();
    while let Some(&first) = words.peek() {
        let assignment = first.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        });
        if first == "$" || first == "env" || assignment {
            words.next();
        } else {
            break;
        }
    }
    let first = words.next()?;
    let rest: Vec<String> = words.map(str::to_owned).collect();
    let name = first.rsplit('/').next().unwrap_or(first);
    if PROGRAMS.contains(&name) {
        return Some((name.to_owned(), rest));
    }
    if first != "cargo" || rest.first().map(String::as_str) != Some("run") {
        return None;
    }
    let end = rest.iter().position(|w| w == "--").unwrap_or(rest.len());
    let package = rest[..end]
        .windows(2)
        .find(|pair| ["-p", "--package", "--bin"].contains(&pair[0].as_str()))
        .map(|pair| pair[1].clone())?;
    PROGRAMS
        .contains(&package.as_str())
        .then(|| (package, rest.get(end + 1..).unwrap_or_default().to_vec()))
}

/// Runs `binary` with each command's arguments and `--help`; the commands it does not parse,
/// each as `file:line: the command` and what the binary said.
pub fn unparsed(binary: &Path, root: &Path, commands: &[DocCommand]) -> Vec<String> {
    let mut failures = Vec::new();
    for command in commands {
        let mut args = command.args.clone();
        let at = args.iter().position(|w| w == "--").unwrap_or(args.len());
        args.insert(at, "--help".to_owned());
        // No RELAY_* or other variable of the test's environment may stand in for a flag.
        let output = Command::new(binary)
            .args(&args)
            .current_dir(root)
            .env_clear()
            .output()
            .expect("the binary runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        if output.status.success() && stdout.contains("Usage:") {
            continue;
        }
        let said: Vec<String> = String::from_utf8_lossy(&output.stderr)
            .lines()
            .filter(|line| !line.trim().is_empty())
            .take(3)
            .map(str::to_owned)
            .collect();
        failures.push(format!(
            "{}:{}: `{} {}` does not parse: {}",
            command.file,
            command.line,
            command.program,
            command.args.join(" "),
            said.join(" / ")
        ));
    }
    failures
}
