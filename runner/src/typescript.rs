//! TypeScript graphs (`graph.ts`) with no build step: the types are erased on the host before
//! the sandbox sees the code, by blanking them to spaces (swc's strip-only mode, the eraser
//! Node's own type stripping uses), so every line and column of the JavaScript the engine runs
//! is the `.ts` file's own and every error points at the `.ts` line.
//!
//! TypeScript that needs code generation (an `enum`, a `namespace` with values, a constructor
//! parameter property, `import x = require(…)`, `export =`, the `<T>expr` assertion) cannot be
//! erased: it is refused naming the construct and its line and column, as are decorators, which
//! neither engine runs.

use std::path::Path;
use std::sync::{Arc, Mutex};

use swc_common::errors::{DiagnosticBuilder, Emitter, HANDLER, Handler};
use swc_common::sync::Lrc;
use swc_common::{GLOBALS, Globals, SourceMap};
use swc_ts_fast_strip::{Mode, Options};

pub mod tsc;

/// Whether `path` names a TypeScript graph (`*.ts`; a `*.d.ts` holds declarations only and is
/// no graph).
pub fn is_typescript(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    path.extension().is_some_and(|x| x == "ts") && !name.ends_with(".d.ts")
}

/// Why a TypeScript graph could not be erased to JavaScript. Its text ends in ` at line L, col
/// C`, as a syntax error of the engines does, so a graphs folder names the file the same way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} at line {line}, col {column}")]
pub struct TypeScriptError {
    /// What is wrong, naming the construct.
    pub message: String,
    /// The line, from 1.
    pub line: u32,
    /// The column, from 1.
    pub column: u32,
}

impl TypeScriptError {
    /// `FILE:LINE:COL: message`, as a located error of the graph's code reads.
    pub fn located(&self, file: &Path) -> String {
        format!(
            "{}:{}:{}: {}",
            file.display(),
            self.line,
            self.column,
            self.message
        )
    }
}

/// What an erasure reported: each message and the byte offset (in the source) it points at.
type Reported = Arc<Mutex<Vec<(String, Option<usize>)>>>;

/// Collects swc's diagnostics instead of printing them.
struct Collect(Reported);

impl Emitter for Collect {
    fn emit(&mut self, diagnostic: &mut DiagnosticBuilder<'_>) {
        let offset = diagnostic
            .span
            .primary_span()
            .map(|span| span.lo.0 as usize);
        if let Ok(mut reported) = self.0.lock() {
            reported.push((diagnostic.message(), offset));
        }
    }
}

/// `source`, a TypeScript module, as JavaScript of the same lines and columns: every type
/// annotation, interface, type alias, generic argument, `as`/`satisfies` cast, `declare`,
/// overload and type-only import or export blanked to spaces. Strings, templates, regular
/// expressions and comments are never touched.
pub fn erase_types(source: &str) -> Result<String, TypeScriptError> {
    let reported: Reported = Arc::default();
    let handler = Handler::with_emitter(true, false, Box::new(Collect(reported.clone())));
    let map: Lrc<SourceMap> = Lrc::default();
    let options = Options {
        module: Some(true),
        mode: Mode::StripOnly,
        deprecated_ts_module_as_error: Some(true),
        parser: swc_ecma_parser::TsSyntax {
            // Neither engine runs decorators: one is a syntax error at its `@`.
            decorators: false,
            ..Default::default()
        },
        ..Default::default()
    };
    let erased = GLOBALS.set(&Globals::new(), || {
        HANDLER.set(&handler, || {
            swc_ts_fast_strip::operate(&map, &handler, source.to_owned(), options)
        })
    });
    // The source map's first file starts at byte position 1 (0 is the dummy position).
    let start = map
        .files()
        .first()
        .map_or(1, |file| file.start_pos.0 as usize);
    let first = reported
        .lock()
        .ok()
        .and_then(|reported| reported.first().cloned());
    match (erased, first) {
        (Ok(output), None) => Ok(output.code),
        (_, Some((message, offset))) => {
            let offset = offset.map_or(0, |o| o.saturating_sub(start));
            let message = if source.as_bytes().get(offset) == Some(&b'@') {
                DECORATOR.to_owned()
            } else {
                plain_message(&message)
            };
            Err(error_at(source, offset, message))
        }
        (Err(e), None) => Err(error_at(source, 0, e.message)),
    }
}

/// `erased`, the JavaScript of the TypeScript `written`, with a last line holding the lines
/// erasing changed as written ([`graph_js::WRITTEN_LINES_MARKER`]), so an error's code frame
/// shows the `.ts` line. Appended after every line, it moves no line or column; a graph that
/// would pass the script limit with it goes without it (its frames show the erased line).
pub fn with_written_lines(written: &str, erased: String) -> String {
    let changed: Vec<(usize, &str)> = written
        .lines()
        .zip(erased.lines())
        .enumerate()
        .filter(|(_, (was, now))| was != now)
        .map(|(index, (was, _))| (index + 1, was))
        .collect();
    if changed.is_empty() {
        return erased;
    }
    let Ok(json) = serde_json::to_string(&changed) else {
        return erased;
    };
    // JSON leaves U+2028 and U+2029 as they are; JavaScript ends a comment at either.
    let json = json
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029");
    let newline = if erased.ends_with('\n') { "" } else { "\n" };
    let with = format!(
        "{erased}{newline}{}{json}\n",
        graph_js::WRITTEN_LINES_MARKER
    );
    if with.len() > graph_js::MAX_SCRIPT_BYTES {
        return erased;
    }
    with
}

/// A decorator (`@name` before a class or member) is JavaScript of a later edition, but neither
/// engine parses it.
const DECORATOR: &str = "a decorator (`@name`) is not supported: the engines do not run \
                         decorators; call the function on the class or method instead";

/// swc's message as a graph author reads it: what the construct is and what to write instead.
fn plain_message(message: &str) -> String {
    const CODE_GENERATION: &str = "needs code generation, and TypeScript graphs only have their \
                                   types erased";
    let construct = if message.contains("enum") {
        Some((
            "a TypeScript `enum`",
            "use an object: `const Color = { Red: \"red\" } as const`",
        ))
    } else if message.contains("namespace declaration") || message.contains("`module` keyword") {
        Some((
            "a TypeScript `namespace` (or `module`) with values",
            "use an object or plain functions",
        ))
    } else if message.contains("parameter property") {
        Some((
            "a constructor parameter property (`constructor(private x: T)`)",
            "declare the field and assign it in the constructor",
        ))
    } else if message.contains("import equals") {
        Some((
            "`import x = require(…)`",
            "graphs import nothing: `g` and the globals are all there is",
        ))
    } else if message.contains("export assignment") {
        Some((
            "`export = …`",
            "export the graph with `export default` and its `meta` with `export const meta`",
        ))
    } else if message.contains("angle-bracket") {
        Some(("the `<T>expr` type assertion", "write `expr as T`"))
    } else {
        None
    };
    match construct {
        Some((what, instead)) => format!("{what} {CODE_GENERATION}: {instead}"),
        None => format!("TypeScript syntax error: {message}"),
    }
}

/// An error at byte `offset` of `source`: its line and column counted from 1, the column in
/// characters as the engines count them.
fn error_at(source: &str, offset: usize, message: String) -> TypeScriptError {
    let offset = offset.min(source.len());
    let before = source.get(..offset).unwrap_or(source);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = before.matches('\n').count() + 1;
    let column = before[line_start..].encode_utf16().count() + 1;
    TypeScriptError {
        message,
        line: u32::try_from(line).unwrap_or(u32::MAX),
        column: u32::try_from(column).unwrap_or(u32::MAX),
    }
}

#[cfg(test)]
mod tests;
