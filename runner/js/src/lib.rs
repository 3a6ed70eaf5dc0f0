//! The graph script driver: one boa context per graph call, the shared JS prelude, and the
//! event loop that turns the host's `start-*` / `wait-any` functions (see `wit/graph.wit`)
//! into promises.
//!
//! This crate is compiled twice: natively for the in-process engine and for `wasm32-wasip2`
//! inside the guest component. Both engines therefore run literally the same driver, which is
//! what makes their results identical. It does no I/O of its own; everything outside the
//! interpreter goes through [`Host`].

mod error;
mod executor;
mod failure;
mod location;
mod meta;
mod pinpoint;
mod web;
mod web_url;

use std::cell::RefCell;

use error::cut_chars;
use std::path::Path;
use std::rc::Rc;

use boa_engine::builtins::promise::PromiseState;
use boa_engine::module::IdleModuleLoader;
use boa_engine::object::ObjectInitializer;
use boa_engine::object::builtins::JsUint8Array;
use boa_engine::property::Attribute;
use boa_engine::{
    Context, JsError, JsNativeError, JsObject, JsResult, JsString, JsValue, Module, NativeFunction,
    Source, js_string,
};

pub use error::ScriptError;
pub use failure::{Failure, FailureCode};
pub use location::{Leading, Position, WRITTEN_LINES_MARKER, leading_location};
pub use meta::{Meta, MetaError, is_valid_slug};

/// The JS prelude that builds the `g` object; shared by both engines.
pub const PRELUDE: &str = include_str!("prelude.js");

/// The web platform functions graphs written for browsers or Node expect (`structuredClone`,
/// `TextEncoder`, `atob`, ...), in plain JS, shared by both engines. Compiling it takes a few
/// milliseconds, so the prelude compiles it when a graph first touches one of its globals
/// ([`Interpreter::load_web`] does it ahead of time).
pub const WEB: &str = include_str!("web.js");

/// Results larger than this (JSON text, bytes) are refused instead of crossing the boundary.
pub const MAX_RESULT_BYTES: usize = 10 * 1024 * 1024;
/// Error messages leaving the driver are cut to this many characters.
pub const MAX_ERROR_CHARS: usize = 16 * 1024;
/// Log lines are cut to this many characters before they reach the host.
pub const MAX_LOG_LINE_CHARS: usize = 4000;
/// Scripts larger than this are refused before parsing.
pub const MAX_SCRIPT_BYTES: usize = 1024 * 1024;

/// One agent call as the script asked for it (the host validates and clips it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentRequest {
    /// The user prompt.
    pub prompt: String,
    /// Optional system prompt.
    #[serde(default)]
    pub system: Option<String>,
    /// Optional model name.
    #[serde(default)]
    pub model: Option<String>,
    /// Upper bound on generated tokens (larger numbers saturate: the budget clips them anyway).
    #[serde(default, deserialize_with = "saturating_u32")]
    pub max_tokens: Option<u32>,
    /// Label for the trace and mock replies.
    #[serde(default)]
    pub label: Option<String>,
    /// Tools offered to the model.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Upper bound on model turns in a tool loop.
    #[serde(default)]
    pub max_turns: Option<u32>,
}

fn saturating_u32<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let value: Option<u64> = serde::Deserialize::deserialize(d)?;
    Ok(value.map(|v| u32::try_from(v).unwrap_or(u32::MAX)))
}

/// The capabilities a graph can reach: the `host` interface of `wit/graph.wit`, one method per
/// function, with the same contract.
pub trait Host {
    /// `start-agent`.
    fn start_agent(&mut self, request: AgentRequest) -> Result<u32, Failure>;
    /// `start-tool`; `args` is JSON text of an object.
    fn start_tool(&mut self, name: &str, args: &str) -> Result<u32, Failure>;
    /// `start-graph`; `args` is JSON text of an object.
    fn start_graph(&mut self, slug: &str, args: &str) -> Result<u32, Failure>;
    /// `start-sleep`.
    fn start_sleep(&mut self, ms: u32) -> Result<u32, Failure>;
    /// `wait-any`: blocks until one of `handles` finishes.
    fn wait_any(&mut self, handles: &[u32]) -> (u32, Result<String, Failure>);
    /// `tokens-used`.
    fn tokens_used(&mut self) -> u64;
    /// `token-cap`.
    fn token_cap(&mut self) -> Option<u64>;
    /// `log`.
    fn log(&mut self, message: &str);
    /// `clock-now`: the run clock, the only time a graph sees (`Date`, `performance.now`).
    fn clock_now(&mut self) -> ClockReading;
    /// `random-bytes`: fills `out` from the run's random source (`Math.random`, `crypto`).
    fn random_bytes(&mut self, out: &mut [u8]);
    /// Checked between promise jobs: `Some(reason)` stops the script at once (uncatchable).
    /// The in-process engine uses it for cancellation and the wall-clock deadline; the wasm
    /// engine stops the guest from outside instead and keeps the default.
    fn interrupted(&mut self) -> Option<String> {
        None
    }
}

/// One reading of the run clock, in whole milliseconds: the wall clock (since the Unix epoch)
/// and the monotonic clock (since the run started, never decreasing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClockReading {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    pub wall_ms: i64,
    /// Milliseconds since the run started.
    pub monotonic_ms: u64,
}

/// Interpreter limits. Each one ends a run with an error that names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Loop iterations allowed in one function call (boa counts per call frame).
    pub loop_iterations: u64,
    /// Nested calls allowed (JS frames plus host re-entries such as getters).
    pub recursion: usize,
    /// Values on the interpreter's operand stack.
    pub stack_values: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            loop_iterations: 10_000_000,
            recursion: 1_000,
            stack_values: 1_000_000,
        }
    }
}

/// Starts every warning the driver writes to the trace (work still running when a graph
/// returned, a rejection nothing handled); `graph.js:LINE:COL: ` follows when it has a place,
/// and the host names the real file there.
pub const WARNING_PREFIX: &str = "warning: ";
/// Warnings written for one graph call at most; the rest are counted in one more line.
pub const MAX_WARNINGS: usize = 20;
/// Rejected promises with no handler remembered at once (the first ones; later ones are not).
const MAX_TRACKED_REJECTIONS: usize = 100;

/// The path boa reports in errors; scripts have no real path inside the sandbox. An error the
/// graph's own code raised starts with `graph.js:LINE:COL: `; the host names the real file.
pub const SCRIPT_NAME: &str = "graph.js";

/// Host and driver state reachable from the native functions through the context.
struct Shared {
    host: RefCell<Box<dyn Host + 'static>>,
    /// Handles started and not yet settled, in start order.
    pending: RefCell<Vec<u32>>,
    /// Whether module top-level code is running: the host answers the clock and random
    /// source, but refuses to start work.
    top_level: std::cell::Cell<bool>,
    /// The graph's module text, for the code frame of its errors.
    source: RefCell<Rc<str>>,
    /// The text boa compiled, when [`parse_module`] had to mend the source (see
    /// [`default_async_arrow`]): what [`pinpoint`] parses again.
    compiled: RefCell<Option<Rc<str>>>,
    /// Promises rejected with no handler and given none since, oldest first.
    rejections: RefCell<Vec<JsObject>>,
}

#[derive(Clone)]
struct SharedSlot(Rc<Shared>);

/// What the prelude hands back to the driver.
struct Prelude {
    g: JsValue,
    settle: JsObject,
    result_text: JsObject,
    stack_of: JsObject,
    describe: JsObject,
    load_web: JsObject,
    unsettled: JsObject,
}

/// Runs `script`'s default export with `args` (JSON text of an object) and returns its result
/// as JSON text. Errors are readable sentences: an uncaught rejection (with its `code`), a
/// limit by name, a syntax error with line and column.
pub fn run(
    script: &str,
    args: &str,
    host: Box<dyn Host + 'static>,
    limits: &Limits,
) -> Result<String, ScriptError> {
    Interpreter::new(limits)?
        .prepare_hosted(script, host)?
        .run_hosted(args)
}

/// Evaluates `script` without calling its default export and returns its validated `meta`.
pub fn describe(script: &str, limits: &Limits) -> Result<Meta, MetaError> {
    Prepared::new(script, limits)
        .map_err(|e| MetaError::Script(e.to_string()))?
        .meta()
}

/// An interpreter with the prelude evaluated and no graph yet: the expensive part of starting
/// (creating boa's intrinsics, evaluating the prelude). The wasm guest keeps one in the
/// pre-initialized memory of the generic component, so a run only parses its script.
pub struct Interpreter {
    context: Context,
    prelude: Prelude,
    shared: Rc<Shared>,
}

impl Interpreter {
    /// A fresh interpreter with `limits`.
    pub fn new(limits: &Limits) -> Result<Self, ScriptError> {
        let shared = Rc::new(Shared {
            host: RefCell::new(Box::new(TopLevelHost::default())),
            pending: RefCell::new(Vec::new()),
            top_level: std::cell::Cell::new(false),
            source: RefCell::new(Rc::from("")),
            compiled: RefCell::new(None),
            rejections: RefCell::new(Vec::new()),
        });
        let (context, prelude) =
            new_context(&shared, limits).map_err(|e| ScriptError::Setup(e.to_string()))?;
        Ok(Self {
            context,
            prelude,
            shared,
        })
    }

    /// Compiles the web platform functions ([`WEB`]) now rather than when a graph first uses
    /// one, for an interpreter kept in a pre-initialized snapshot.
    pub fn load_web(&mut self) -> Result<(), ScriptError> {
        self.prelude
            .load_web
            .call(&JsValue::undefined(), &[], &mut self.context)
            .map(|_| ())
            .map_err(|e| ScriptError::Setup(e.to_string()))
    }

    /// Parses and evaluates `script` in this interpreter. Module top-level code runs here with
    /// no host: it may compute and log (logs are dropped), but host work cannot start before
    /// the default export is called.
    pub fn prepare(self, script: &str) -> Result<Prepared, ScriptError> {
        self.prepare_top_level(script)
    }

    /// [`Interpreter::prepare`] with `host` already in place, so that top-level code reads the
    /// run's clock and random source (it still cannot start host work). Run it with
    /// [`Prepared::run_hosted`].
    pub fn prepare_hosted(
        self,
        script: &str,
        host: Box<dyn Host + 'static>,
    ) -> Result<Prepared, ScriptError> {
        *self.shared.host.borrow_mut() = host;
        self.prepare_top_level(script)
    }

    fn prepare_top_level(self, script: &str) -> Result<Prepared, ScriptError> {
        self.shared.top_level.set(true);
        let prepared = self.evaluate(script);
        if let Ok(prepared) = &prepared {
            prepared.shared.top_level.set(false);
        }
        prepared
    }

    fn evaluate(self, script: &str) -> Result<Prepared, ScriptError> {
        let Self {
            mut context,
            prelude,
            shared,
        } = self;
        let (module, mended) = parse_module(script, &mut context)?;
        *shared.source.borrow_mut() = Rc::from(script);
        *shared.compiled.borrow_mut() = mended.map(Rc::from);
        let evaluated = module.load_link_evaluate(&mut context);
        drive(&evaluated, &shared, &mut context, &prelude)
            .map_err(|e| match e {
                ScriptError::Thrown(text) => match import_refused(&text, script) {
                    Some(refused) => ScriptError::Syntax(refused),
                    None => ScriptError::Thrown(text),
                },
                other => other,
            })
            .map_err(ScriptError::bounded)?;
        Ok(Prepared {
            context,
            module,
            prelude,
            shared,
        })
    }
}

/// A graph parsed, linked and evaluated (its top-level code has run, without a host), ready to
/// have its default export called once. The wasm guest keeps one in its pre-initialized memory
/// snapshot, so a compiled graph starts without parsing.
pub struct Prepared {
    context: Context,
    module: Module,
    prelude: Prelude,
    shared: Rc<Shared>,
}

impl Prepared {
    /// Parses and evaluates `script` in a fresh interpreter (see [`Interpreter::prepare`]).
    pub fn new(script: &str, limits: &Limits) -> Result<Self, ScriptError> {
        Interpreter::new(limits)?.prepare(script)
    }

    /// The module's validated `meta` export.
    pub fn meta(&mut self) -> Result<Meta, MetaError> {
        module_meta(&self.module, &mut self.context)
    }

    /// Calls the default export with `args` (JSON text of an object) against `host`.
    pub fn run(mut self, args: &str, host: Box<dyn Host + 'static>) -> Result<String, ScriptError> {
        *self.shared.host.borrow_mut() = host;
        self.run_default(args).map_err(ScriptError::bounded)
    }

    /// Calls the default export with `args` against the host given to
    /// [`Interpreter::prepare_hosted`].
    pub fn run_hosted(mut self, args: &str) -> Result<String, ScriptError> {
        self.run_default(args).map_err(ScriptError::bounded)
    }

    fn run_default(&mut self, args: &str) -> Result<String, ScriptError> {
        let Self {
            context,
            module,
            prelude,
            shared,
        } = self;
        // Every run checks the graph as `runner check` does (meta, default export): the module
        // is evaluated already, so this costs a property read or two.
        module_meta(module, context).map_err(|e| match e {
            MetaError::NoDefaultExport => ScriptError::NoDefaultExport,
            other => ScriptError::Meta(other),
        })?;
        let entry = module
            .namespace(context)
            .get(js_string!("default"), context)
            .map_err(|e| describe_error(e, prelude, context))?;
        let Some(entry) = entry.as_callable() else {
            return Err(ScriptError::NoDefaultExport);
        };
        let parsed_args = JsValue::from_json(
            &serde_json::from_str::<serde_json::Value>(args)
                .map_err(|e| ScriptError::ArgsNotJson(e.to_string()))?,
            context,
        )
        .map_err(|e| ScriptError::Args(e.to_string()))?;
        let returned = entry
            .call(
                &JsValue::undefined(),
                &[parsed_args, prelude.g.clone()],
                context,
            )
            .map_err(|e| describe_error(e, prelude, context));
        let value = match returned {
            Ok(returned) => match returned.as_promise() {
                Some(promise) => drive(&promise, shared, context, prelude),
                None => Ok(returned),
            },
            Err(e) => Err(e),
        };
        // The graph threw: what it left running or pending is named too (a limit or the
        // host's interruption stops the interpreter, which then runs nothing more).
        if let Err(ScriptError::Thrown(_)) = &value {
            warn_unsettled_at_failure(shared, prelude, context);
        }
        let value = value?;
        warn_leftovers(shared, prelude, context);
        let text = prelude
            .result_text
            .call(&JsValue::undefined(), &[value], context)
            .map_err(|e| result_not_json(e, prelude, context))?;
        if text.is_undefined() {
            return Ok("null".to_owned());
        }
        let Some(text) = text.as_string() else {
            return Err(ScriptError::ResultNotText);
        };
        // Measure before converting: the copy itself is what a huge result would cost.
        if text.len() > MAX_RESULT_BYTES {
            return Err(ScriptError::ResultTooManyChars(text.len()));
        }
        let text = well_formed(text.to_std_string_escaped());
        if text.len() > MAX_RESULT_BYTES {
            return Err(ScriptError::ResultTooManyBytes(text.len()));
        }
        Ok(text)
    }
}

/// The validated `meta` export of an evaluated module, once it is known to have a callable
/// default export: a graph is its meta and its default export, and `runner check`, a folder of
/// graphs, the desktop and every run refuse one without either.
fn module_meta(module: &Module, context: &mut Context) -> Result<Meta, MetaError> {
    let value = module
        .namespace(context)
        .get(js_string!("meta"), context)
        .map_err(|e| MetaError::Script(e.to_string()))?;
    if value.is_undefined() {
        return Err(MetaError::Missing);
    }
    let json = value
        .to_json(context)
        .map_err(|e| MetaError::Invalid(format!("meta is not plain data: {e}")))?;
    let meta = Meta::from_json(json.unwrap_or(serde_json::Value::Null))?;
    let entry = module
        .namespace(context)
        .get(js_string!("default"), context)
        .map_err(|e| MetaError::Script(e.to_string()))?;
    if !entry.is_callable() {
        return Err(MetaError::NoDefaultExport);
    }
    Ok(meta)
}

/// The module, and the mended text boa parsed instead of `script` if it had to.
fn parse_module(
    script: &str,
    context: &mut Context,
) -> Result<(Module, Option<String>), ScriptError> {
    if script.len() > MAX_SCRIPT_BYTES {
        return Err(ScriptError::TooLarge(script.len()));
    }
    let source = Source::from_bytes(script).with_path(Path::new(SCRIPT_NAME));
    let raw = match Module::parse(source, None, context) {
        Ok(module) => return Ok((module, None)),
        Err(e) => e.to_string(),
    };
    if let Some(mended) = default_async_arrow(script, &raw) {
        let source = Source::from_bytes(&mended).with_path(Path::new(SCRIPT_NAME));
        if let Ok(module) = Module::parse(source, None, context) {
            return Ok((module, Some(mended)));
        }
    }
    Err(ScriptError::Syntax(syntax_error(&raw, script)))
}

/// The name [`default_async_arrow`] gives the default export it moves.
const MOVED_DEFAULT: &str = "__graphrelay_default_export__";

/// boa 0.22 does not parse `export default async (args, g) => {...}` (nor `async x => ...`): it
/// takes `async` after `export default` for the start of `async function`, and fails with
/// "expected token 'function' ... in async function declaration at line L, col C". For that
/// failure only, this gives the script with the last `export default async` before that
/// position turned into `const NAME =` and `export default NAME;` appended: the same module in
/// a form boa parses. The caller parses it and keeps the original error if that fails too, so
/// nothing that was valid changes and nothing invalid is let through.
fn default_async_arrow(script: &str, raw: &str) -> Option<String> {
    if !raw.contains("expected token 'function'") || !raw.contains("in async function declaration")
    {
        return None;
    }
    let number_after = |label: &str| -> Option<usize> {
        raw.split(label)
            .nth(1)?
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    let (line, column) = (number_after(" at line ")?, number_after(", col ")?);
    // The script up to the token boa stumbled on. The column is counted in characters here; if
    // boa counts in larger units this only reaches further right on that line.
    let line_start = match line.checked_sub(2) {
        None => 0,
        Some(newlines) => script.match_indices('\n').nth(newlines)?.0 + 1,
    };
    let line_text = script[line_start..].split('\n').next().unwrap_or_default();
    let within = line_text
        .char_indices()
        .nth(column.saturating_sub(1))
        .map_or(line_text.len(), |(at, _)| at);
    let head = &script[..line_start + within];
    let (export, async_at) = head
        .rmatch_indices("export")
        .find_map(|(at, _)| default_then_async(head, at).map(|async_at| (at, async_at)))?;
    Some(format!(
        "{}const {MOVED_DEFAULT} = {}\nexport default {MOVED_DEFAULT};\n",
        &script[..export],
        &script[async_at..]
    ))
}

/// Where `async` starts when `export default async` (with any white space between, and `async`
/// a whole word) begins at byte `at` of `text`.
fn default_then_async(text: &str, at: usize) -> Option<usize> {
    let after_export = text.get(at + "export".len()..)?;
    let rest = after_export.trim_start();
    if rest.len() == after_export.len() {
        return None;
    }
    let after_default = rest.strip_prefix("default")?;
    let rest = after_default.trim_start();
    if rest.len() == after_default.len() || !rest.starts_with("async") {
        return None;
    }
    let follows = rest["async".len()..].chars().next();
    if follows.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
        return None;
    }
    Some(text.len() - rest.len())
}

/// boa reports syntax errors as "... at line L, col C (native)", and an unexpected end of
/// input without a position: always `graph.js:L:C: syntax error: …` (the end of the script
/// when boa names no place) and the code frame, with a hint for TypeScript.
fn syntax_error(raw: &str, script: &str) -> String {
    let raw = raw.strip_prefix("SyntaxError: ").unwrap_or(raw);
    let raw = raw.strip_suffix(" (native)").unwrap_or(raw);
    let (what, position) = match raw.rsplit_once(" at line ").and_then(|(what, at)| {
        let (line, column) = at.split_once(", col ")?;
        Some((
            what,
            Position {
                line: line.parse().ok()?,
                column: column.parse().ok()?,
            },
        ))
    }) {
        Some(found) => found,
        None => {
            let lines = script.lines().count().max(1);
            let last = script.lines().last().unwrap_or_default().chars().count();
            let column = u32::try_from(last).unwrap_or(u32::MAX).saturating_add(1);
            let line = u32::try_from(lines).unwrap_or(u32::MAX);
            (raw, Position { line, column })
        }
    };
    let hint = if looks_like_typescript(what, script, position) {
        " (this looks like TypeScript: a graph in TypeScript is a `.ts` file)"
    } else if what == "abrupt end" {
        ": the file ends inside an unclosed `{`, `(`, `[`, string or comment (one of them is \
         not closed above this line)"
    } else {
        ""
    };
    location::located(position, &format!("syntax error: {what}{hint}"), script)
}

/// Whether the syntax error `what` at `position` is TypeScript's syntax: a TypeScript keyword
/// boa refuses, or a type annotation on the line.
fn looks_like_typescript(what: &str, script: &str, position: Position) -> bool {
    const KEYWORDS: &[&str] = &[
        "'interface'",
        "'type'",
        "'enum'",
        "'implements'",
        "'declare'",
        "'namespace'",
        "'readonly'",
        "'private'",
        "'public'",
    ];
    const ANNOTATIONS: &[&str] = &[
        ": string",
        ": number",
        ": boolean",
        ": any",
        ": unknown",
        ": void",
        ": Promise<",
        ": Record<",
        "[]):",
        "> = ",
        " as const",
    ];
    let line = usize::try_from(position.line)
        .ok()
        .and_then(|n| script.lines().nth(n.checked_sub(1)?))
        .unwrap_or_default();
    KEYWORDS.iter().any(|k| what.contains(k)) || ANNOTATIONS.iter().any(|a| line.contains(a))
}

/// What boa says when a module imports another ("module resolution is disabled"), said at the
/// first `import` of `script`: a graph is one script.
fn import_refused(text: &str, script: &str) -> Option<String> {
    if !text.contains("module resolution is disabled") {
        return None;
    }
    let (index, line) = script.lines().enumerate().find(|(_, line)| {
        let rest = line.trim_start();
        rest.strip_prefix("import")
            .is_some_and(|after| after.starts_with([' ', '{', '*', '"', '\'']))
    })?;
    let column = line.chars().count() - line.trim_start().chars().count() + 1;
    let position = Position {
        line: u32::try_from(index + 1).ok()?,
        column: u32::try_from(column).ok()?,
    };
    Some(location::located(
        position,
        "a graph cannot import modules: it is one script; call another graph with \
         `g.graph(\"slug\", args)` and keep shared helpers in the graph's own file",
        script,
    ))
}

/// The natives the prelude builds `g` and the web platform on: the host interface's functions,
/// bounded logging and random bytes (web.js's own natives are [`web::natives`]).
fn natives(context: &mut Context) -> JsObject {
    ObjectInitializer::new(context)
        .function(
            NativeFunction::from_fn_ptr(native_start_agent),
            js_string!("startAgent"),
            1,
        )
        .function(
            NativeFunction::from_fn_ptr(native_start_tool),
            js_string!("startTool"),
            2,
        )
        .function(
            NativeFunction::from_fn_ptr(native_start_graph),
            js_string!("startGraph"),
            2,
        )
        .function(
            NativeFunction::from_fn_ptr(native_start_sleep),
            js_string!("startSleep"),
            1,
        )
        .function(
            NativeFunction::from_fn_ptr(native_tokens_used),
            js_string!("tokensUsed"),
            0,
        )
        .function(
            NativeFunction::from_fn_ptr(native_token_cap),
            js_string!("tokenCap"),
            0,
        )
        .function(
            NativeFunction::from_fn_ptr(native_log),
            js_string!("log"),
            1,
        )
        .function(
            NativeFunction::from_fn_ptr(native_load_web),
            js_string!("loadWeb"),
            1,
        )
        .function(
            NativeFunction::from_fn_ptr(native_random_bytes),
            js_string!("randomBytes"),
            1,
        )
        .function(
            NativeFunction::from_fn_ptr(native_monotonic_now),
            js_string!("monotonicNow"),
            0,
        )
        .function(
            NativeFunction::from_fn_ptr(native_locate),
            js_string!("locate"),
            2,
        )
        .build()
}

fn new_context(shared: &Rc<Shared>, limits: &Limits) -> JsResult<(Context, Prelude)> {
    let executor = Rc::new(executor::Executor::new(shared.clone()));
    let mut context = Context::builder()
        .job_executor(executor)
        .module_loader(Rc::new(IdleModuleLoader))
        .clock(Rc::new(HostClock(shared.clone())))
        .host_hooks(Rc::new(RunHooks(shared.clone())))
        .build()?;
    install_math_random(&mut context)?;
    let runtime = context.runtime_limits_mut();
    runtime.set_loop_iteration_limit(limits.loop_iterations);
    runtime.set_recursion_limit(limits.recursion);
    runtime.set_stack_size_limit(limits.stack_values);
    context.insert_data(SharedSlot(shared.clone()));

    let natives = natives(&mut context);
    let factory = context.eval(Source::from_bytes(PRELUDE))?;
    let factory = factory
        .as_callable()
        .ok_or_else(|| JsError::from_rust(PreludeBroken("the prelude is not a function")))?;
    let made = factory.call(&JsValue::undefined(), &[natives.into()], &mut context)?;
    let made = made
        .as_object()
        .ok_or_else(|| JsError::from_rust(PreludeBroken("the prelude returned no object")))?;
    let prelude = prelude_of(&made, &mut context)?;
    Ok((context, prelude))
}

/// The driver's handles on what the prelude returned (`made`).
fn prelude_of(made: &JsObject, context: &mut Context) -> JsResult<Prelude> {
    let mut field = |name: JsString| -> JsResult<JsValue> { made.get(name, context) };
    let g = field(js_string!("g"))?;
    let settle = field(js_string!("settle"))?;
    let result_text = field(js_string!("resultText"))?;
    let stack_of = field(js_string!("stackOf"))?;
    let describe = field(js_string!("describe"))?;
    let load_web = field(js_string!("loadWeb"))?;
    let unsettled = field(js_string!("unsettled"))?;
    let function = |value: JsValue, what: &'static str| {
        value
            .as_callable()
            .ok_or_else(|| JsError::from_rust(PreludeBroken(what)))
    };
    let prelude = Prelude {
        g,
        settle: function(settle, "settle is not a function")?,
        result_text: function(result_text, "resultText is not a function")?,
        stack_of: function(stack_of, "stackOf is not a function")?,
        describe: function(describe, "describe is not a function")?,
        load_web: function(load_web, "loadWeb is not a function")?,
        unsettled: function(unsettled, "unsettled is not a function")?,
    };
    Ok(prelude)
}

#[derive(Debug)]
struct PreludeBroken(&'static str);

impl std::fmt::Display for PreludeBroken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "internal error in the graph prelude: {}", self.0)
    }
}

impl std::error::Error for PreludeBroken {}

/// Runs jobs and host work until `promise` settles.
fn drive(
    promise: &boa_engine::object::builtins::JsPromise,
    shared: &Rc<Shared>,
    context: &mut Context,
    prelude: &Prelude,
) -> Result<JsValue, ScriptError> {
    let uncatchable = |e: JsError| ScriptError::Uncatchable(describe_uncatchable(&e));
    loop {
        context.run_jobs().map_err(uncatchable)?;
        match promise.state() {
            PromiseState::Fulfilled(value) => return Ok(value),
            PromiseState::Rejected(reason) => {
                return Err(ScriptError::Thrown(describe_value(
                    reason, prelude, context,
                )));
            }
            PromiseState::Pending => {}
        }
        let pending = shared.pending.borrow().clone();
        if pending.is_empty() {
            return Err(ScriptError::Stalled);
        }
        let (handle, outcome) = shared.host.borrow_mut().wait_any(&pending);
        shared.pending.borrow_mut().retain(|h| *h != handle);
        let (ok, payload) = match outcome {
            Ok(json) => (true, JsValue::from(JsString::from(json.as_str()))),
            Err(failure) => (false, failure_object(&failure, context)),
        };
        prelude
            .settle
            .call(
                &JsValue::undefined(),
                &[JsValue::from(handle), JsValue::from(ok), payload],
                context,
            )
            .map_err(uncatchable)?;
    }
}

/// What a thrown `error` means for the graph: a limit it cannot catch, or what it threw.
fn describe_error(error: JsError, prelude: &Prelude, context: &mut Context) -> ScriptError {
    if error.as_engine().is_some() {
        return ScriptError::Uncatchable(describe_uncatchable(&error));
    }
    match error.into_opaque(context) {
        Ok(value) => ScriptError::Thrown(describe_value(value, prelude, context)),
        Err(e) => ScriptError::Thrown(e.to_string()),
    }
}

/// What the conversion of the result to JSON threw: the path of the value (a plain message
/// from the prelude), or what JSON.stringify or a `toJSON` threw.
fn result_not_json(error: JsError, prelude: &Prelude, context: &mut Context) -> ScriptError {
    match describe_error(error, prelude, context) {
        ScriptError::Thrown(text) => ScriptError::ResultNotJson(text),
        other => other,
    }
}

/// What the graph threw, as the prelude describes it; an error raised in the graph's own code
/// starts with its location and has a code frame.
fn describe_value(value: JsValue, prelude: &Prelude, context: &mut Context) -> String {
    let text = describe_plain(&value, prelude, context);
    let stack = prelude
        .stack_of
        .call(&JsValue::undefined(), std::slice::from_ref(&value), context)
        .ok()
        .and_then(|v| v.as_string().map(|s| s.to_std_string_escaped()));
    match placed(&text, stack.as_deref(), context) {
        Some((position, message, source)) => cut_chars(
            &location::located(position, &message, &source),
            MAX_ERROR_CHARS,
        ),
        None => pinpoint::not_defined(&text, &std::collections::BTreeSet::new()),
    }
}

/// Where in the graph's code the error described as `text`, with `stack`, was raised (the
/// expression that failed, see [`pinpoint`]), the message to show and the graph's source.
fn placed(
    text: &str,
    stack: Option<&str>,
    context: &Context,
) -> Option<(Position, String, Rc<str>)> {
    // Top-level code has no position: only an error there that names what failed is placed.
    let position = stack.and_then(location::innermost);
    let (source, compiled) = shared_of(context)
        .map(|shared| {
            let source = shared.source.borrow().clone();
            let compiled = shared.compiled.borrow().clone();
            (source.clone(), compiled.unwrap_or(source))
        })
        .unwrap_or_else(|_| (Rc::from(""), Rc::from("")));
    Some(
        match (pinpoint::pinpoint(&compiled, position, text), position) {
            (Some(pinned), _) => (pinned.position, pinned.message, source),
            (None, Some(position)) => (position, text.to_owned(), source),
            (None, None) => {
                let pinned = pinpoint::thrown_string(&compiled, text)?;
                (pinned.position, pinned.message, source)
            }
        },
    )
}

/// `locate(text, stack)`: where the error described as `text` with `stack` was raised, as
/// `["graph.js:L:C: ", message]`, or undefined; for the log line of a failed callback.
fn native_locate(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let text = string_arg(args, 0, context)?;
    let stack = match args.get(1) {
        Some(v) if v.is_string() => Some(string_arg(args, 1, context)?),
        _ => None,
    };
    let Some((position, message, _)) = placed(&text, stack.as_deref(), context) else {
        return Ok(JsValue::undefined());
    };
    let place = format!("{SCRIPT_NAME}:{}:{}: ", position.line, position.column);
    let pair = boa_engine::object::builtins::JsArray::from_iter(
        [
            JsValue::from(JsString::from(place.as_str())),
            JsValue::from(JsString::from(message.as_str())),
        ],
        context,
    );
    Ok(pair.into())
}

fn describe_plain(value: &JsValue, prelude: &Prelude, context: &mut Context) -> String {
    let text = prelude
        .describe
        .call(&JsValue::undefined(), std::slice::from_ref(value), context)
        .ok()
        .and_then(|v| v.as_string().map(|s| s.to_std_string_escaped()));
    match text {
        Some(text) => cut_chars(&text, MAX_ERROR_CHARS),
        None => cut_chars(&value.display().to_string(), MAX_ERROR_CHARS),
    }
}

/// Errors JS cannot catch: runtime limits and interruptions. Named after the limit.
fn describe_uncatchable(error: &JsError) -> String {
    use boa_engine::error::{EngineError, RuntimeLimitError};
    match error.as_engine() {
        Some(EngineError::RuntimeLimit(RuntimeLimitError::LoopIteration)) => {
            "loop iteration limit exceeded: a single function call ran too many loop iterations"
                .to_owned()
        }
        Some(EngineError::RuntimeLimit(RuntimeLimitError::Recursion)) => {
            "recursion limit exceeded: too many nested calls".to_owned()
        }
        Some(EngineError::RuntimeLimit(RuntimeLimitError::StackSize)) => {
            "stack size limit exceeded: the interpreter's value stack is full".to_owned()
        }
        // Some built-ins (`await`, promise resolution) wrap whatever stopped them in an internal
        // error ("cannot fail per spec"); when that was a limit, name the limit.
        Some(EngineError::Panic(panic)) => match limit_behind(panic) {
            Some(inner) => describe_uncatchable(inner),
            None => panic.message().to_owned(),
        },
        _ => cut_chars(&error.to_string(), MAX_ERROR_CHARS),
    }
}

/// The engine error (a runtime limit, or another wrapped one) an internal error was caused by.
fn limit_behind(panic: &boa_engine::error::PanicError) -> Option<&JsError> {
    let source = std::error::Error::source(panic)?;
    // thiserror hands out the `Option<Box<JsError>>` field as the box itself.
    let inner: &JsError = source.downcast_ref::<Box<JsError>>()?;
    inner.as_engine().is_some().then_some(inner)
}

fn failure_object(failure: &Failure, context: &mut Context) -> JsValue {
    ObjectInitializer::new(context)
        .property(
            js_string!("code"),
            JsString::from(failure.code.as_str()),
            Attribute::all(),
        )
        .property(
            js_string!("message"),
            JsString::from(failure.message.as_str()),
            Attribute::all(),
        )
        .build()
        .into()
}

fn shared_of(context: &Context) -> JsResult<Rc<Shared>> {
    context
        .get_data::<SharedSlot>()
        .map(|slot| slot.0.clone())
        .ok_or_else(|| JsError::from_rust(PreludeBroken("host state missing")))
}

fn string_arg(args: &[JsValue], index: usize, context: &mut Context) -> JsResult<String> {
    let value = args.get(index).cloned().unwrap_or_default();
    Ok(value.to_string(context)?.to_std_string_escaped())
}

/// A JSON text the prelude wrote with `JSON.stringify`, as [`string_arg`] reads it, made
/// [`well_formed`].
fn json_arg(args: &[JsValue], index: usize, context: &mut Context) -> JsResult<String> {
    string_arg(args, index, context).map(well_formed)
}

/// `text`, a JSON text, with every lone UTF-16 surrogate escape (`\ud800`) replaced by
/// `\ufffd`, the replacement character.
///
/// JS strings may hold lone surrogates, for instance after `reply.text.slice(0, 100)` cut an emoji
/// in half. `JSON.stringify` writes them as escapes, but a Rust string (and so serde) cannot hold
/// them and used to refuse the whole result or argument with "unexpected end of hex escape".
/// Surrogate pairs and every other escape are kept; the length in bytes does not change. The
/// relay's `/mcp` endpoint applies the same to requests from JS clients.
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

/// Records a started handle, or turns a refusal into `{code, message}` for the prelude.
fn started(result: Result<u32, Failure>, shared: &Shared, context: &mut Context) -> JsValue {
    match result {
        Ok(handle) => {
            shared.pending.borrow_mut().push(handle);
            JsValue::from(handle)
        }
        Err(failure) => failure_object(&failure, context),
    }
}

/// The host, when work may start: never while module top-level code runs.
fn working_host(shared: &Shared) -> Result<std::cell::RefMut<'_, Box<dyn Host>>, Failure> {
    if shared.top_level.get() {
        return Err(not_at_top_level());
    }
    Ok(shared.host.borrow_mut())
}

fn native_start_agent(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let shared = shared_of(context)?;
    let text = json_arg(args, 0, context)?;
    let result = match serde_json::from_str::<AgentRequest>(&text) {
        Ok(request) => working_host(&shared).and_then(|mut h| h.start_agent(request)),
        Err(e) => Err(Failure::invalid(format!("malformed agent request: {e}"))),
    };
    Ok(started(result, &shared, context))
}

fn native_start_tool(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let shared = shared_of(context)?;
    let name = string_arg(args, 0, context)?;
    let json = json_arg(args, 1, context)?;
    let result = working_host(&shared).and_then(|mut h| h.start_tool(&name, &json));
    Ok(started(result, &shared, context))
}

fn native_start_graph(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let shared = shared_of(context)?;
    let slug = string_arg(args, 0, context)?;
    let json = json_arg(args, 1, context)?;
    let result = working_host(&shared).and_then(|mut h| h.start_graph(&slug, &json));
    Ok(started(result, &shared, context))
}

fn native_start_sleep(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let shared = shared_of(context)?;
    let ms = args
        .first()
        .cloned()
        .unwrap_or_default()
        .to_number(context)?;
    let result = if ms.is_finite() && ms >= 0.0 && ms <= f64::from(u32::MAX) {
        // Truncation is intended: the prelude only passes integers.
        working_host(&shared).and_then(|mut h| h.start_sleep(ms as u32))
    } else {
        Err(Failure::invalid("sleep: ms must be a non-negative integer"))
    };
    Ok(started(result, &shared, context))
}

fn native_tokens_used(_: &JsValue, _: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let shared = shared_of(context)?;
    let used = shared.host.borrow_mut().tokens_used();
    // JS numbers are exact up to 2^53, far beyond any token count.
    Ok(JsValue::from(used as f64))
}

fn native_token_cap(_: &JsValue, _: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let shared = shared_of(context)?;
    let cap = shared.host.borrow_mut().token_cap();
    Ok(cap.map_or(JsValue::null(), |c| JsValue::from(c as f64)))
}

fn native_log(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let shared = shared_of(context)?;
    let text = args
        .first()
        .cloned()
        .unwrap_or_default()
        .to_string(context)?;
    // Only the part that is kept is converted, so a huge line costs no more than a long one:
    // MAX_LOG_LINE_CHARS + 1 characters fit in twice as many UTF-16 units.
    let keep = 2 * (MAX_LOG_LINE_CHARS + 1);
    let head = if text.len() > keep {
        text.slice(0, keep)
    } else {
        text
    };
    let line = cut_chars(&head.to_std_string_escaped(), MAX_LOG_LINE_CHARS);
    shared.host.borrow_mut().log(&line);
    Ok(JsValue::undefined())
}

/// Compiles [`WEB`] and runs it with the prelude's object (`args[0]`) and [`web::natives`];
/// the prelude calls it once.
fn native_load_web(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let install = context.eval(Source::from_bytes(WEB))?;
    let install = install
        .as_callable()
        .ok_or_else(|| JsError::from_rust(PreludeBroken("web.js is not a function")))?;
    let natives = web::natives(context);
    install.call(
        &JsValue::undefined(),
        &[args.first().cloned().unwrap_or_default(), natives.into()],
        context,
    )
}

/// The most `randomBytes` hands out at once (as `crypto.getRandomValues` allows).
const MAX_RANDOM_BYTES: u64 = 65536;

/// A Uint8Array of `args[0]` bytes from the run's random source (the host's `random-bytes`):
/// what `crypto.getRandomValues` and `crypto.randomUUID` use.
fn native_random_bytes(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let count = args
        .first()
        .cloned()
        .unwrap_or_default()
        .to_index(context)?;
    if count > MAX_RANDOM_BYTES {
        return Err(JsNativeError::range()
            .with_message(format!("at most {MAX_RANDOM_BYTES} random bytes at a time"))
            .into());
    }
    // Cannot truncate: at most MAX_RANDOM_BYTES.
    let mut bytes = vec![0u8; count as usize];
    shared_of(context)?
        .host
        .borrow_mut()
        .random_bytes(&mut bytes);
    Ok(JsUint8Array::from_iter(bytes, context)?.into())
}

/// `Math.random`: 53 bits of the run's random source, in [0, 1).
fn native_math_random(_: &JsValue, _: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let mut bytes = [0u8; 8];
    shared_of(context)?
        .host
        .borrow_mut()
        .random_bytes(&mut bytes);
    let bits = u64::from_le_bytes(bytes) >> 11;
    // Exact: 53 bits fit an f64's mantissa.
    Ok(JsValue::from(bits as f64 / (1u64 << 53) as f64))
}

/// `performance.now()`'s source: the run's monotonic clock, in whole milliseconds.
fn native_monotonic_now(_: &JsValue, _: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let reading = shared_of(context)?.host.borrow_mut().clock_now();
    // Exact: milliseconds of a run stay far below 2^53.
    Ok(JsValue::from(reading.monotonic_ms as f64))
}

/// boa's clock (`Date.now()`, `new Date()`), answered by the run clock through the host.
struct HostClock(Rc<Shared>);

impl boa_engine::context::Clock for HostClock {
    fn now(&self) -> boa_engine::context::time::JsInstant {
        let ms = self.0.host.borrow_mut().clock_now().monotonic_ms;
        // Cannot truncate: the remainder is below 1,000,000,000.
        boa_engine::context::time::JsInstant::new(ms / 1000, ((ms % 1000) * 1_000_000) as u32)
    }

    fn system_time_millis(&self) -> i64 {
        self.0.host.borrow_mut().clock_now().wall_ms
    }
}

/// boa's host hooks: local time fixed to UTC (the machine's time zone is not the graph's to
/// read, and both engines then agree on `getHours()`), and rejections nothing handles
/// remembered, to be warned about when the graph returns.
struct RunHooks(Rc<Shared>);

impl boa_engine::context::HostHooks for RunHooks {
    fn local_timezone_offset_seconds(&self, _: i64) -> i32 {
        0
    }

    fn promise_rejection_tracker(
        &self,
        promise: &JsObject<boa_engine::builtins::promise::Promise>,
        operation: boa_engine::builtins::promise::OperationType,
        _: &mut Context,
    ) {
        use boa_engine::builtins::promise::OperationType;
        let promise = promise.clone().upcast();
        let mut rejections = self.0.rejections.borrow_mut();
        match operation {
            OperationType::Reject if rejections.len() < MAX_TRACKED_REJECTIONS => {
                rejections.push(promise);
            }
            OperationType::Reject => {}
            OperationType::Handle => rejections.retain(|p| !JsObject::equals(p, &promise)),
        }
    }
}

/// Writes to the trace, when a graph returned, a warning for each agent, tool or nested graph
/// it started and left running (at the place that started it: the host cancels it now), each
/// timer still pending (at the place that set it: it never fires) and each rejection nothing
/// handled (at the place of its error).
fn warn_leftovers(shared: &Shared, prelude: &Prelude, context: &mut Context) {
    let mut warnings = unsettled_warnings(prelude, context, "returned");
    let rejected: Vec<JsObject> = std::mem::take(&mut *shared.rejections.borrow_mut());
    for promise in rejected {
        let Ok(promise) = boa_engine::object::builtins::JsPromise::from_object(promise) else {
            continue;
        };
        if let PromiseState::Rejected(reason) = promise.state() {
            let text = describe_value(reason, prelude, context);
            let first = text.lines().next().unwrap_or_default();
            warnings.push(match leading_location(first) {
                Some(at) if at.file == SCRIPT_NAME => format!(
                    "{}nothing handled this rejection: {}",
                    &first[..at.rest],
                    &first[at.rest..]
                ),
                _ => format!("nothing handled a rejection: {first}"),
            });
        }
    }
    log_warnings(shared, &warnings);
}

/// [`warn_leftovers`]' warnings of work left running or pending, when the graph threw.
fn warn_unsettled_at_failure(shared: &Shared, prelude: &Prelude, context: &mut Context) {
    let warnings = unsettled_warnings(prelude, context, "failed");
    log_warnings(shared, &warnings);
}

/// `warnings` in the trace, at most [`MAX_WARNINGS`] of them and a line saying how many more.
fn log_warnings(shared: &Shared, warnings: &[String]) {
    let mut host = shared.host.borrow_mut();
    for warning in warnings.iter().take(MAX_WARNINGS) {
        host.log(&cut_chars(
            &format!("{WARNING_PREFIX}{warning}"),
            MAX_LOG_LINE_CHARS,
        ));
    }
    if warnings.len() > MAX_WARNINGS {
        host.log(&format!(
            "{WARNING_PREFIX}{} more warnings like these",
            warnings.len() - MAX_WARNINGS
        ));
    }
}

/// One warning per agent, tool, nested graph or timer the prelude started and never settled,
/// when the graph `ended` ("returned", "failed").
fn unsettled_warnings(prelude: &Prelude, context: &mut Context, ended: &str) -> Vec<String> {
    let Ok(list) = prelude.unsettled.call(&JsValue::undefined(), &[], context) else {
        return Vec::new();
    };
    let Some(list) = list.as_object() else {
        return Vec::new();
    };
    let count = list
        .get(js_string!("length"), context)
        .ok()
        .and_then(|n| n.as_number())
        .unwrap_or(0.0);
    let mut warnings = Vec::new();
    // Cannot truncate: an array's length fits in u32.
    for index in 0..count as u32 {
        let Ok(entry) = list.get(index, context) else {
            continue;
        };
        let Some(entry) = entry.as_object() else {
            continue;
        };
        let mut text_at = |i: u32| {
            entry
                .get(i, context)
                .ok()
                .and_then(|v| v.as_string().map(|s| s.to_std_string_escaped()))
        };
        let what = text_at(0).unwrap_or_else(|| "some work".to_owned());
        let place = text_at(1)
            .as_deref()
            .and_then(location::innermost)
            .map(|at| format!("{SCRIPT_NAME}:{}:{}: ", at.line, at.column))
            .unwrap_or_default();
        warnings.push(if text_at(2).as_deref() == Some("timer") {
            format!(
                "{place}{what} set here was still pending when the graph {ended}: it was \
                 dropped (clear it, or await what it does before returning)"
            )
        } else {
            format!(
                "{place}{what} started here was still running when the graph {ended}: it was \
                 cancelled (await it before returning)"
            )
        });
    }
    warnings
}

/// Replaces boa's `Math.random` (the thread's own generator) with [`native_math_random`].
fn install_math_random(context: &mut Context) -> JsResult<()> {
    let random = boa_engine::object::FunctionObjectBuilder::new(
        context.realm(),
        NativeFunction::from_fn_ptr(native_math_random),
    )
    .name(js_string!("random"))
    .length(0)
    .build();
    let math = context.intrinsics().objects().math();
    math.define_property_or_throw(
        js_string!("random"),
        boa_engine::property::PropertyDescriptor::builder()
            .value(random)
            .writable(true)
            .enumerable(false)
            .configurable(true),
        context,
    )?;
    Ok(())
}

/// The host of an interpreter without a run (`describe`, a snapshot, `runner build`): it may
/// compute, nothing reaches the outside. Its clock stands at the Unix epoch and its random
/// bytes are a fixed sequence, so a graph's `meta` cannot depend on the machine.
#[derive(Default)]
struct TopLevelHost {
    random_state: u64,
}

impl Host for TopLevelHost {
    fn clock_now(&mut self) -> ClockReading {
        ClockReading::default()
    }
    fn random_bytes(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            self.random_state = splitmix64(self.random_state);
            chunk.copy_from_slice(&self.random_state.to_le_bytes()[..chunk.len()]);
        }
    }
    fn start_agent(&mut self, _: AgentRequest) -> Result<u32, Failure> {
        Err(not_at_top_level())
    }
    fn start_tool(&mut self, _: &str, _: &str) -> Result<u32, Failure> {
        Err(not_at_top_level())
    }
    fn start_graph(&mut self, _: &str, _: &str) -> Result<u32, Failure> {
        Err(not_at_top_level())
    }
    fn start_sleep(&mut self, _: u32) -> Result<u32, Failure> {
        Err(not_at_top_level())
    }
    fn wait_any(&mut self, handles: &[u32]) -> (u32, Result<String, Failure>) {
        (
            handles.first().copied().unwrap_or(0),
            Err(not_at_top_level()),
        )
    }
    fn tokens_used(&mut self) -> u64 {
        0
    }
    fn token_cap(&mut self) -> Option<u64> {
        None
    }
    fn log(&mut self, _: &str) {}
}

/// Levenshtein distance over chars: insertions, deletions and substitutions cost 1 (the
/// "did you mean" of tools, slugs and names).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

/// One step of splitmix64: a fixed, well-mixed sequence (not a source of secrets).
pub fn splitmix64(state: u64) -> u64 {
    let mut z = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn not_at_top_level() -> Failure {
    Failure::invalid("host work cannot start at module top level; do it inside the default export")
}

#[cfg(test)]
mod tests;
