//! The expression that failed, where boa names only the code around it.
//!
//! boa 0.22 records a source position only inside its position guards (calls, `new`, plain
//! property reads, assignments, unary and update operators, `throw`, function bodies). A method
//! call's property read (`y.trim()`), an optional chain's `.name`, a spread, a `for…of` and a
//! destructuring run outside any guard of their own, so their errors carry the position of the
//! innermost guard around them: often the `{` of the enclosing function. On such an error the
//! graph's source is parsed again and walked for the operations of that error's kind whose code
//! boa attributes to that same guard; a single one is the place, several or none leave the
//! place as boa gave it, said to be approximate.

use std::ops::ControlFlow;

use boa_engine::ast::declaration::{Binding, Variable};
use boa_engine::ast::expression::access::{PropertyAccess, PropertyAccessField};
use boa_engine::ast::expression::literal::LiteralKind;
use boa_engine::ast::expression::operator::Assign;
use boa_engine::ast::expression::operator::assign::AssignTarget;
use boa_engine::ast::expression::operator::{Unary, Update};
use boa_engine::ast::expression::{Call, Optional, OptionalOperationKind, Spread};
use boa_engine::ast::function::{
    AsyncFunctionDeclaration, FormalParameterList, FunctionBody, FunctionDeclaration,
};
use boa_engine::ast::pattern::{ArrayPattern, ObjectPattern, Pattern};
use boa_engine::ast::scope::Scope;
use boa_engine::ast::statement::Throw;
use boa_engine::ast::statement::iteration::ForOfLoop;
use boa_engine::ast::visitor::{VisitWith, Visitor};
use boa_engine::ast::{Expression, Spanned};
use boa_engine::interner::Interner;
use boa_engine::parser::{Parser, Source};

use crate::location::Position;

/// The longest expression quoted in a message, in characters.
const MAX_QUOTED_CHARS: usize = 60;

/// What kind of operation an error comes from, read from boa's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A property read or write on `undefined` or `null`.
    Nullish,
    /// Iterating (spread, `for…of`, array destructuring) what is not iterable.
    NotIterable,
    /// Destructuring `undefined` or `null` into an object pattern.
    Destructure,
    /// Calling what is not a function (boa places the call right).
    NotCallable,
    /// Reading a name no declaration binds (`ReferenceError: totl is not defined`).
    NotDefined,
}

impl Kind {
    fn of(message: &str) -> Option<Self> {
        if message.contains("cannot convert 'null' or 'undefined' to object") {
            Some(Self::Nullish)
        } else if message.contains("is not iterable") {
            Some(Self::NotIterable)
        } else if message.contains("Cannot destructure '") {
            Some(Self::Destructure)
        } else if message.ends_with("not a callable function") {
            Some(Self::NotCallable)
        } else if undefined_name(message).is_some() {
            Some(Self::NotDefined)
        } else {
            None
        }
    }
}

/// One operation that may have raised an error of its kind.
#[derive(Debug, Clone)]
struct Candidate {
    kind: Kind,
    /// The position boa reports for an error here: its innermost guard's.
    reported: Option<Position>,
    /// Where the operation is written.
    at: Position,
    /// The property read or written (for [`Kind::Nullish`]).
    property: Option<String>,
    /// Whether the property is written rather than read.
    write: bool,
    /// Where the value the operation works on is written (start, end).
    value: Option<(Position, Position)>,
    /// Whether that value cannot be `undefined` or `null` (a literal, `g`, a string method's
    /// result…), so this operation cannot be the one that failed.
    never_nullish: bool,
    /// The variable the value is read from when it holds a promise not awaited
    /// (`const reply = g.agent(…)`).
    promise: Option<String>,
}

/// The error placed: where, and the message to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pinned {
    pub position: Position,
    pub message: String,
}

/// The name a `ReferenceError: NAME is not defined` names.
fn undefined_name(message: &str) -> Option<&str> {
    let name = message
        .strip_prefix("ReferenceError: ")?
        .strip_suffix(" is not defined")?;
    (!name.is_empty() && !name.contains(char::is_whitespace)).then_some(name)
}

/// `message` (boa's, `TypeError: …`) raised at `reported` in `source` (None: in top-level code,
/// which boa gives no position), placed at the operation that raised it and said in the words
/// authors know; None when the message is of no kind this knows or the source does not parse.
pub(crate) fn pinpoint(source: &str, reported: Option<Position>, message: &str) -> Option<Pinned> {
    let kind = Kind::of(message)?;
    let found = operations(source)?;
    let name = undefined_name(message);
    // Getting the iterator of `undefined` fails as a property read does, and boa says
    // "Cannot destructure" of an array pattern too.
    let fits = |c: &Candidate| match kind {
        Kind::NotDefined => c.kind == kind && c.property.as_deref() == name,
        _ => c.kind == kind || (kind != Kind::NotIterable && c.kind == Kind::NotIterable),
    };
    let here: Vec<&Candidate> = found
        .candidates
        .iter()
        .filter(|c| fits(c) && c.reported == reported && !c.never_nullish)
        .collect();
    let reported = match (here.as_slice(), reported) {
        ([one], _) => {
            return Some(Pinned {
                position: one.at,
                message: worded(one, kind, message, source, &found.declared),
            });
        }
        (_, None) => return None,
        (_, Some(reported)) => reported,
    };
    match here.as_slice() {
        _ if kind == Kind::NotCallable => None,
        // In the order they run: the first that can fail is the likeliest.
        [first, rest @ ..] => Some(Pinned {
            position: first.at,
            message: format!(
                "{} (the place is approximate: one of {} operations here that could fail so)",
                worded(first, kind, message, source, &found.declared),
                rest.len() + 1
            ),
        }),
        [] if found.bodies.contains(&reported) => Some(Pinned {
            position: reported,
            message: format!(
                "{message} (the place is approximate: somewhere in the function that starts here)"
            ),
        }),
        [] => None,
    }
}

/// A string the graph threw (`throw "bad config"`), which carries no stack: placed at the one
/// `throw` of that very string literal, if there is one.
pub(crate) fn thrown_string(source: &str, text: &str) -> Option<Pinned> {
    let found = operations(source)?;
    let mut places = found.thrown.iter().filter(|(_, thrown)| thrown == text);
    let (position, _) = places.next()?;
    if places.next().is_some() {
        return None;
    }
    Some(Pinned {
        position: *position,
        message: format!(
            "{text} (a string was thrown: `throw new Error(\"…\")` gives an error its place and stack)"
        ),
    })
}

/// The message for `candidate`: the property and the value named.
fn worded(
    candidate: &Candidate,
    kind: Kind,
    message: &str,
    source: &str,
    declared: &std::collections::BTreeSet<String>,
) -> String {
    if kind == Kind::NotDefined {
        return not_defined(message, declared);
    }
    let value = candidate
        .value
        .and_then(|(start, end)| quoted(source, start, end));
    let value = value.as_deref();
    let of = value.map(|v| format!(" of {v}")).unwrap_or_default();
    let was = value.map(|v| format!("{v} ")).unwrap_or_default();
    let hint = candidate
        .promise
        .as_deref()
        .map(|name| format!(" ({name} is a Promise: did you forget `await`?)"))
        .unwrap_or_default();
    format!(
        "{}{hint}",
        said_plainly(candidate, kind, message, value, &of, &was)
    )
}

fn said_plainly(
    candidate: &Candidate,
    kind: Kind,
    message: &str,
    value: Option<&str>,
    of: &str,
    was: &str,
) -> String {
    // boa says "Cannot destructure" for an array pattern too.
    let said = if kind == Kind::Destructure {
        kind
    } else {
        candidate.kind
    };
    match said {
        Kind::Nullish => {
            let property = candidate.property.as_deref().unwrap_or("a property");
            let (verb, doing) = if candidate.write {
                ("set", "setting")
            } else {
                ("read", "reading")
            };
            format!(
                "TypeError: cannot {verb} properties of undefined or null ({doing} '{property}'{of})"
            )
        }
        Kind::NotIterable => match type_in(message) {
            _ if kind == Kind::Nullish => {
                format!("TypeError: {was}is not iterable (it is undefined or null)")
            }
            Some(t) => format!("TypeError: {was}is not iterable (it is {})", article(t)),
            None => format!("TypeError: {was}is not iterable"),
        },
        Kind::Destructure => {
            let kind = if message.contains("'null'") {
                "null"
            } else {
                "undefined"
            };
            match value {
                Some(v) => format!("TypeError: cannot destructure {v}: it is {kind}"),
                None => format!("TypeError: cannot destructure {kind}"),
            }
        }
        Kind::NotCallable => match value {
            Some(callee) => format!("TypeError: {callee} is not a function"),
            None => message.to_owned(),
        },
        Kind::NotDefined => message.to_owned(),
    }
}

/// Node's and the browser's globals a graph does not have, and what to use instead.
const ABSENT_GLOBALS: &[(&[&str], &str)] = &[
    (
        &["require", "module", "exports"],
        "a graph cannot import modules: it is one script; call another graph with \
         `g.graph(\"slug\", args)` and keep shared helpers in the graph's own file",
    ),
    (
        &["fetch", "XMLHttpRequest", "WebSocket"],
        "a graph has no network access of its own: an agent or a tool reaches the outside \
         (`g.agent`, `g.tool`)",
    ),
    (
        &[
            "process",
            "Buffer",
            "__dirname",
            "__filename",
            "global",
            "window",
            "document",
        ],
        "a graph runs in a sandbox without Node's or a browser's globals: its input is `args`, \
         files are `g.tool(\"fs.read\", …)`, the time is `Date.now()`",
    ),
];

/// `ReferenceError: NAME is not defined` and what to write instead: a global a graph has not,
/// or the nearest name the graph declares.
pub(crate) fn not_defined(message: &str, declared: &std::collections::BTreeSet<String>) -> String {
    let Some(name) = undefined_name(message) else {
        return message.to_owned();
    };
    if let Some((_, instead)) = ABSENT_GLOBALS
        .iter()
        .find(|(names, _)| names.contains(&name))
    {
        return format!("{message} ({instead})");
    }
    let nearest = declared
        .iter()
        .filter(|d| d.as_str() != name)
        .map(|d| (crate::edit_distance(name, d), d))
        .filter(|(distance, d)| {
            *distance <= 2 && *distance < d.chars().count().min(name.chars().count())
        })
        .min_by_key(|(distance, _)| *distance);
    match nearest {
        Some((_, d)) => format!("{message}; did you mean {d}?"),
        None => message.to_owned(),
    }
}

/// boa's "value with type `undefined` is not iterable": the type.
fn type_in(message: &str) -> Option<&str> {
    message.split('`').nth(1)
}

fn article(type_name: &str) -> String {
    match type_name {
        "undefined" | "null" => type_name.to_owned(),
        t if t.starts_with(['a', 'e', 'i', 'o', 'u']) => format!("an {t}"),
        t => format!("a {t}"),
    }
}

/// The source text from `start` to `end` when it is one short line (of a TypeScript graph, as
/// its author wrote it).
fn quoted(source: &str, start: Position, end: Position) -> Option<String> {
    if start.line != end.line {
        return None;
    }
    let written = crate::location::written_line(source, start.line);
    let line = match written.as_deref() {
        Some(line) => line,
        None => source
            .lines()
            .nth(usize::try_from(start.line).ok()?.checked_sub(1)?)?,
    };
    let byte = |column: u32| {
        let column = usize::try_from(column).ok()?.checked_sub(1)?;
        match line.char_indices().nth(column) {
            Some((at, _)) => Some(at),
            None => (column == line.chars().count()).then_some(line.len()),
        }
    };
    let text = line.get(byte(start.column)?..byte(end.column)?)?;
    let text = text.trim();
    (!text.is_empty() && text.chars().count() <= MAX_QUOTED_CHARS).then(|| text.to_owned())
}

/// Every operation of a kind [`Kind`] names, and where function bodies start.
struct Found {
    candidates: Vec<Candidate>,
    bodies: Vec<Position>,
    /// Every name the graph declares (variables, parameters, functions).
    declared: std::collections::BTreeSet<String>,
    /// Each `throw "text"` of a string literal: where the string is, and the text.
    thrown: Vec<(Position, String)>,
}

fn operations(source: &str) -> Option<Found> {
    let mut interner = Interner::default();
    let module = Parser::new(Source::from_bytes(source))
        .parse_module(&Scope::new_global(), &mut interner)
        .ok()?;
    let mut names = Names::default();
    let _ = module.visit_with(&mut NameFinder {
        interner: &interner,
        names: &mut names,
        in_parameters: 0,
    });
    let mut finder = Finder {
        interner: &interner,
        names: &names,
        regions: vec![None],
        found: Found {
            candidates: Vec::new(),
            bodies: Vec::new(),
            declared: names.declared.clone(),
            thrown: Vec::new(),
        },
    };
    let _ = module.visit_with(&mut finder);
    Some(finder.found)
}

fn position(at: boa_engine::ast::Position) -> Position {
    Position {
        line: at.line_number(),
        column: at.column_number(),
    }
}

/// Where `expression` starts: boa's span of a call starts at its `(`, of a property read at
/// its property.
fn start_of(expression: &Expression) -> boa_engine::ast::Position {
    match expression {
        Expression::Call(call) => start_of(call.function()),
        Expression::PropertyAccess(PropertyAccess::Simple(access)) => start_of(access.target()),
        Expression::PropertyAccess(PropertyAccess::Private(access)) => start_of(access.target()),
        Expression::Optional(optional) => start_of(optional.target()),
        other => other.span().start(),
    }
}

/// Globals and methods whose value is never `undefined` or `null`.
const NEVER_NULLISH_NAMES: &[&str] = &[
    "g",
    "Object",
    "Array",
    "String",
    "Number",
    "Boolean",
    "JSON",
    "Math",
    "Promise",
    "Date",
    "console",
    "crypto",
    "Symbol",
    "Reflect",
    "Map",
    "Set",
    "BigInt",
    "Intl",
    "globalThis",
];
const NEVER_NULLISH_METHODS: &[&str] = &[
    "trim",
    "trimStart",
    "trimEnd",
    "split",
    "toUpperCase",
    "toLowerCase",
    "join",
    "slice",
    "map",
    "filter",
    "concat",
    "replace",
    "replaceAll",
    "padStart",
    "padEnd",
    "repeat",
    "toString",
    "toFixed",
    "keys",
    "values",
    "entries",
    "flat",
    "flatMap",
    "sort",
    "reverse",
    "substring",
    "normalize",
    "stringify",
    "from",
    "of",
    "assign",
    "freeze",
    "now",
];

/// Calls that return a promise.
const PROMISE_CALLS: &[&str] = &["g.agent", "g.tool", "g.graph", "g.sleep", "fetch"];

/// Names every declaration of which gives a value that is never `undefined` or `null`
/// (`const parts = text.split(",")`); a name also bound otherwise is not among them.
#[derive(Default)]
struct Names {
    never_nullish: std::collections::HashSet<String>,
    otherwise: std::collections::HashSet<String>,
    /// Names of async functions.
    async_functions: std::collections::HashSet<String>,
    /// Variables set to a call not awaited, and what they called (`g.agent`, `load`).
    unawaited: std::collections::HashMap<String, String>,
    /// Variables also set to something else.
    rebound: std::collections::HashSet<String>,
    /// Every name declared: variables, parameters, functions.
    declared: std::collections::BTreeSet<String>,
}

impl Names {
    /// The variable `value` is read from, when it holds a promise nothing awaited.
    fn promise_in(&self, value: &Expression, interner: &Interner) -> Option<String> {
        let root = match value {
            Expression::Identifier(ident) => ident,
            Expression::PropertyAccess(PropertyAccess::Simple(access)) => {
                return self.promise_in(access.target(), interner);
            }
            _ => return None,
        };
        let name = interner.resolve_expect(root.sym()).to_string();
        let called = self.unawaited.get(&name)?;
        let is_promise =
            PROMISE_CALLS.contains(&called.as_str()) || self.async_functions.contains(called);
        (is_promise && !self.rebound.contains(&name)).then_some(name)
    }

    fn never_nullish(&self, name: &str) -> bool {
        NEVER_NULLISH_NAMES.contains(&name)
            || (self.never_nullish.contains(name) && !self.otherwise.contains(name))
    }
}

/// Whether `expression`'s value can never be `undefined` or `null`.
fn never_nullish(expression: &Expression, names: &Names, interner: &Interner) -> bool {
    match expression {
        Expression::Literal(literal) => {
            !matches!(literal.kind(), LiteralKind::Null | LiteralKind::Undefined)
        }
        Expression::This(_)
        | Expression::RegExpLiteral(_)
        | Expression::ArrayLiteral(_)
        | Expression::ObjectLiteral(_)
        | Expression::TemplateLiteral(_)
        | Expression::New(_)
        | Expression::FunctionExpression(_)
        | Expression::ArrowFunction(_)
        | Expression::AsyncArrowFunction(_)
        | Expression::ClassExpression(_) => true,
        Expression::Identifier(ident) => {
            names.never_nullish(&interner.resolve_expect(ident.sym()).to_string())
        }
        Expression::Parenthesized(inner) => never_nullish(inner.expression(), names, interner),
        Expression::Call(call) => match call.function() {
            Expression::PropertyAccess(PropertyAccess::Simple(access)) => match access.field() {
                PropertyAccessField::Const(ident) => NEVER_NULLISH_METHODS
                    .contains(&interner.resolve_expect(ident.sym()).to_string().as_str()),
                PropertyAccessField::Expr(_) => false,
            },
            _ => false,
        },
        _ => false,
    }
}

/// `load` or `g.agent`: the name a call calls.
fn callee_name(callee: &Expression, interner: &Interner) -> Option<String> {
    match callee {
        Expression::Identifier(ident) => Some(interner.resolve_expect(ident.sym()).to_string()),
        Expression::PropertyAccess(PropertyAccess::Simple(access)) => {
            let PropertyAccessField::Const(field) = access.field() else {
                return None;
            };
            let target = callee_name(access.target(), interner)?;
            Some(format!("{target}.{}", interner.resolve_expect(field.sym())))
        }
        _ => None,
    }
}

/// Collects [`Names`].
struct NameFinder<'a> {
    interner: &'a Interner,
    names: &'a mut Names,
    in_parameters: u32,
}

impl<'ast> Visitor<'ast> for NameFinder<'_> {
    type BreakTy = ();

    fn visit_formal_parameter_list(&mut self, list: &'ast FormalParameterList) -> ControlFlow<()> {
        self.in_parameters += 1;
        let flow = list.visit_with(self);
        self.in_parameters -= 1;
        flow
    }

    fn visit_variable(&mut self, variable: &'ast Variable) -> ControlFlow<()> {
        if let Binding::Identifier(ident) = variable.binding() {
            let name = self.interner.resolve_expect(ident.sym()).to_string();
            self.names.declared.insert(name.clone());
            let sure = self.in_parameters == 0
                && variable
                    .init()
                    .is_some_and(|init| never_nullish(init, &Names::default(), self.interner));
            let called = match variable.init() {
                Some(Expression::Call(call)) if self.in_parameters == 0 => {
                    callee_name(call.function(), self.interner)
                }
                _ => None,
            };
            match called {
                Some(called) => {
                    self.names.unawaited.insert(name.clone(), called);
                }
                None => {
                    self.names.rebound.insert(name.clone());
                }
            }
            if let Some(
                Expression::AsyncArrowFunction(_) | Expression::AsyncFunctionExpression(_),
            ) = variable.init()
            {
                self.names.async_functions.insert(name.clone());
            }
            if sure {
                self.names.never_nullish.insert(name);
            } else {
                self.names.otherwise.insert(name);
            }
        }
        variable.visit_with(self)
    }

    fn visit_async_function_declaration(
        &mut self,
        function: &'ast AsyncFunctionDeclaration,
    ) -> ControlFlow<()> {
        let name = self
            .interner
            .resolve_expect(function.name().sym())
            .to_string();
        self.names.declared.insert(name.clone());
        self.names.async_functions.insert(name);
        function.visit_with(self)
    }

    fn visit_function_declaration(
        &mut self,
        function: &'ast FunctionDeclaration,
    ) -> ControlFlow<()> {
        let name = self.interner.resolve_expect(function.name().sym());
        self.names.declared.insert(name.to_string());
        function.visit_with(self)
    }

    fn visit_assign(&mut self, assign: &'ast Assign) -> ControlFlow<()> {
        if let AssignTarget::Identifier(ident) = assign.lhs() {
            let name = self.interner.resolve_expect(ident.sym()).to_string();
            self.names.otherwise.insert(name.clone());
            self.names.rebound.insert(name);
        }
        assign.visit_with(self)
    }
}

/// Walks a module keeping the position boa would report for code at each point (the start of
/// the innermost guard), and records, in the order they run, the operations that may raise an
/// error of a [`Kind`].
struct Finder<'a> {
    interner: &'a Interner,
    names: &'a Names,
    regions: Vec<Option<Position>>,
    found: Found,
}

impl Finder<'_> {
    fn region(&self) -> Option<Position> {
        self.regions.last().copied().flatten()
    }

    fn guarded(
        &mut self,
        at: Option<Position>,
        walk: impl FnOnce(&mut Self) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        self.regions.push(at);
        let flow = walk(self);
        self.regions.pop();
        flow
    }

    fn field_name(&self, field: &PropertyAccessField) -> String {
        match field {
            PropertyAccessField::Const(ident) => {
                self.interner.resolve_expect(ident.sym()).to_string()
            }
            PropertyAccessField::Expr(_) => "[…]".to_owned(),
        }
    }

    /// A property read (or write) of `field` on `target`, reported at `reported`.
    fn access(
        &mut self,
        reported: Option<Position>,
        target: &Expression,
        field: &PropertyAccessField,
        write: bool,
    ) {
        let value = (position(start_of(target)), position(target.span().end()));
        self.found.candidates.push(Candidate {
            kind: Kind::Nullish,
            reported,
            at: position(field.span().start()),
            property: Some(self.field_name(field)),
            write,
            value: Some(value),
            never_nullish: never_nullish(target, self.names, self.interner),
            promise: self.names.promise_in(target, self.interner),
        });
    }

    /// The target and the computed key of a property access, in the region around it.
    fn access_parts(
        &mut self,
        target: &Expression,
        field: &PropertyAccessField,
    ) -> ControlFlow<()> {
        self.visit_expression(target)?;
        if let PropertyAccessField::Expr(key) = field {
            self.visit_expression(key)?;
        }
        ControlFlow::Continue(())
    }

    /// An iteration or destructuring at `at` of `value`.
    fn other(&mut self, kind: Kind, at: boa_engine::ast::Position, value: Option<&Expression>) {
        let at = position(at);
        if self
            .found
            .candidates
            .iter()
            .any(|c| c.kind == kind && c.at == at)
        {
            return;
        }
        self.found.candidates.push(Candidate {
            kind,
            reported: self.region(),
            at,
            property: None,
            write: false,
            value: value.map(|v| (position(start_of(v)), position(v.span().end()))),
            never_nullish: value.is_some_and(|v| never_nullish(v, self.names, self.interner)),
            promise: value.and_then(|v| self.names.promise_in(v, self.interner)),
        });
    }
}

impl<'ast> Visitor<'ast> for Finder<'_> {
    type BreakTy = ();

    fn visit_expression(&mut self, expression: &'ast Expression) -> ControlFlow<()> {
        if let Expression::Identifier(ident) = expression {
            self.found.candidates.push(Candidate {
                kind: Kind::NotDefined,
                reported: self.region(),
                at: position(ident.span().start()),
                property: Some(self.interner.resolve_expect(ident.sym()).to_string()),
                write: false,
                value: None,
                never_nullish: false,
                promise: None,
            });
        }
        expression.visit_with(self)
    }

    fn visit_function_body(&mut self, body: &'ast FunctionBody) -> ControlFlow<()> {
        let at = position(body.span().start());
        self.found.bodies.push(at);
        self.guarded(Some(at), |me| body.visit_with(me))
    }

    fn visit_formal_parameter_list(&mut self, list: &'ast FormalParameterList) -> ControlFlow<()> {
        self.guarded(None, |me| list.visit_with(me))
    }

    fn visit_call(&mut self, call: &'ast Call) -> ControlFlow<()> {
        // The callee is compiled before the call's guard; a method's read has none of its own.
        match call.function() {
            Expression::PropertyAccess(PropertyAccess::Simple(access)) => {
                self.access_parts(access.target(), access.field())?;
                self.access(self.region(), access.target(), access.field(), false);
            }
            callee => self.visit_expression(callee)?,
        }
        let at = position(call.span().start());
        let callee = call.function();
        let promise = match callee {
            Expression::PropertyAccess(PropertyAccess::Simple(access)) => {
                self.names.promise_in(access.target(), self.interner)
            }
            _ => None,
        };
        self.found.candidates.push(Candidate {
            kind: Kind::NotCallable,
            reported: Some(at),
            at,
            property: None,
            write: false,
            value: Some((position(start_of(callee)), position(callee.span().end()))),
            never_nullish: false,
            promise,
        });
        self.guarded(Some(at), |me| {
            for arg in call.args() {
                me.visit_expression(arg)?;
            }
            ControlFlow::Continue(())
        })
    }

    fn visit_property_access(&mut self, access: &'ast PropertyAccess) -> ControlFlow<()> {
        let PropertyAccess::Simple(simple) = access else {
            return access.visit_with(self);
        };
        let at = Some(position(simple.field().span().start()));
        self.guarded(at, |me| {
            me.access_parts(simple.target(), simple.field())?;
            me.access(at, simple.target(), simple.field(), false);
            ControlFlow::Continue(())
        })
    }

    fn visit_assign(&mut self, assign: &'ast Assign) -> ControlFlow<()> {
        let at = Some(position(assign.span().start()));
        self.guarded(at, |me| match assign.lhs() {
            AssignTarget::Access(PropertyAccess::Simple(access)) => {
                me.access_parts(access.target(), access.field())?;
                me.visit_expression(assign.rhs())?;
                me.access(at, access.target(), access.field(), true);
                ControlFlow::Continue(())
            }
            lhs => {
                me.visit_expression(assign.rhs())?;
                me.visit_assign_target(lhs)
            }
        })
    }

    fn visit_unary(&mut self, unary: &'ast Unary) -> ControlFlow<()> {
        let at = Some(position(unary.span().start()));
        self.guarded(at, |me| unary.visit_with(me))
    }

    fn visit_update(&mut self, update: &'ast Update) -> ControlFlow<()> {
        let at = Some(position(update.span().start()));
        self.guarded(at, |me| update.visit_with(me))
    }

    fn visit_throw(&mut self, throw: &'ast Throw) -> ControlFlow<()> {
        if let Expression::Literal(literal) = throw.target()
            && let LiteralKind::String(sym) = literal.kind()
        {
            let text = self.interner.resolve_expect(*sym).to_string();
            let at = position(throw.target().span().start());
            self.found.thrown.push((at, text));
        }
        let at = Some(position(throw.target().span().start()));
        self.guarded(at, |me| throw.visit_with(me))
    }

    fn visit_optional(&mut self, optional: &'ast Optional) -> ControlFlow<()> {
        self.visit_expression(optional.target())?;
        let start = position(start_of(optional.target()));
        for operation in optional.chain() {
            match operation.kind() {
                OptionalOperationKind::SimplePropertyAccess { field } => {
                    if let PropertyAccessField::Expr(key) = field {
                        self.visit_expression(key)?;
                    }
                    if !operation.shorted() {
                        self.found.candidates.push(Candidate {
                            kind: Kind::Nullish,
                            reported: self.region(),
                            at: position(field.span().start()),
                            property: Some(self.field_name(field)),
                            write: false,
                            value: Some((start, position(operation.span().start()))),
                            never_nullish: false,
                            promise: None,
                        });
                    }
                }
                OptionalOperationKind::PrivatePropertyAccess { .. } => {}
                OptionalOperationKind::Call { args } => {
                    for arg in args.iter() {
                        self.visit_expression(arg)?;
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn visit_spread(&mut self, spread: &'ast Spread) -> ControlFlow<()> {
        spread.visit_with(self)?;
        let target = spread.target();
        self.other(Kind::NotIterable, start_of(target), Some(target));
        ControlFlow::Continue(())
    }

    fn visit_for_of_loop(&mut self, for_of: &'ast ForOfLoop) -> ControlFlow<()> {
        let iterable = for_of.iterable();
        self.visit_expression(iterable)?;
        self.other(Kind::NotIterable, start_of(iterable), Some(iterable));
        self.visit_iterable_loop_initializer(for_of.initializer())?;
        self.visit_statement(for_of.body())
    }

    fn visit_variable(&mut self, variable: &'ast Variable) -> ControlFlow<()> {
        let Some(init) = variable.init() else {
            return variable.visit_with(self);
        };
        self.visit_expression(init)?;
        match variable.binding() {
            Binding::Pattern(pattern) => {
                let kind = match pattern {
                    Pattern::Object(_) => Kind::Destructure,
                    Pattern::Array(_) => Kind::NotIterable,
                };
                self.other(kind, pattern.span().start(), Some(init));
                self.visit_pattern(pattern)
            }
            Binding::Identifier(_) => ControlFlow::Continue(()),
        }
    }

    fn visit_object_pattern(&mut self, pattern: &'ast ObjectPattern) -> ControlFlow<()> {
        self.other(Kind::Destructure, pattern.span().start(), None);
        pattern.visit_with(self)
    }

    fn visit_array_pattern(&mut self, pattern: &'ast ArrayPattern) -> ControlFlow<()> {
        self.other(Kind::NotIterable, pattern.span().start(), None);
        pattern.visit_with(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(source: &str, reported: Position, message: &str) -> Option<Pinned> {
        pinpoint(source, Some(reported), message)
    }

    fn at(line: u32, column: u32) -> Position {
        Position { line, column }
    }

    const BOA_NULLISH: &str = "TypeError: cannot convert 'null' or 'undefined' to object";

    #[test]
    fn a_method_read_is_placed_at_its_property_and_named() {
        let source = "function f(t) {\n  const a = 1;\n  return t.trim();\n}\n";
        let pinned = pin(source, at(1, 15), BOA_NULLISH).expect("placed");
        assert_eq!(pinned.position, at(3, 12));
        assert_eq!(
            pinned.message,
            "TypeError: cannot read properties of undefined or null (reading 'trim' of t)"
        );
    }

    #[test]
    fn reads_of_values_that_cannot_be_nullish_are_not_candidates() {
        // `parts` holds a split's result and `g` is the graph's: only `t.split` can fail.
        let source =
            "function f(t, g) {\n  const parts = t.split(\" \");\n  g.log(parts.join(\"-\"));\n}\n";
        let pinned = pin(source, at(1, 18), BOA_NULLISH).expect("placed");
        assert_eq!(pinned.position, at(2, 19));
        assert!(
            !pinned.message.contains("approximate"),
            "{}",
            pinned.message
        );
    }

    #[test]
    fn several_candidates_or_none_are_said_to_be_approximate() {
        let source = "function f(a, b) {\n  a.x();\n  b.y();\n}\n";
        let pinned = pin(source, at(1, 18), BOA_NULLISH).expect("placed");
        assert_eq!(pinned.position, at(2, 5));
        assert!(
            pinned.message.contains("approximate: one of 2"),
            "{}",
            pinned.message
        );
        let source = "function f(a) {\n  return Object.keys(a);\n}\n";
        let pinned = pin(source, at(1, 15), BOA_NULLISH).expect("placed");
        assert_eq!(pinned.position, at(1, 15));
        assert!(
            pinned.message.contains("somewhere in the function"),
            "{}",
            pinned.message
        );
        assert_eq!(pin(source, at(1, 15), "Error: boom"), None);
        assert_eq!(pin("function (", at(1, 1), BOA_NULLISH), None);
    }

    #[test]
    fn a_promise_not_awaited_is_pointed_out() {
        let source = "async function load() { return 1; }\nasync function f(g) {\n  const r = load();\n  return r.toFixed(2);\n}\n";
        let pinned = pin(source, at(4, 19), "TypeError: not a callable function").expect("placed");
        assert_eq!(
            pinned.message,
            "TypeError: r.toFixed is not a function (r is a Promise: did you forget `await`?)"
        );
    }

    #[test]
    fn a_name_not_defined_is_placed_at_its_read_and_the_nearest_name_offered() {
        let source =
            "export default async function (args) {\n  const total = 3;\n  return totl + 1;\n}\n";
        let pinned = pin(source, at(1, 38), "ReferenceError: totl is not defined").expect("placed");
        assert_eq!(pinned.position, at(3, 10));
        assert_eq!(
            pinned.message,
            "ReferenceError: totl is not defined; did you mean total?"
        );
        // Top-level code has no position: a unique read there is the place.
        let source =
            "const fs = require(\"fs\");\nexport default async function () { return fs; }\n";
        let pinned =
            pinpoint(source, None, "ReferenceError: require is not defined").expect("placed");
        assert_eq!(pinned.position, at(1, 12));
        assert!(
            pinned.message.contains("a graph cannot import modules"),
            "{}",
            pinned.message
        );
        // A name read twice in one region is not guessed at without a position.
        let twice = "const a = nope;\nconst b = nope;\nexport default async function () {}\n";
        assert_eq!(
            pinpoint(twice, None, "ReferenceError: nope is not defined"),
            None
        );
        // Far from every declared name: no suggestion.
        assert_eq!(
            not_defined(
                "ReferenceError: zzz is not defined",
                &["total".to_owned()].into()
            ),
            "ReferenceError: zzz is not defined"
        );
    }

    #[test]
    fn a_thrown_string_is_placed_at_its_one_throw() {
        let source = "export default async function () {\n  if (1) throw \"bad config\";\n  throw \"other\";\n}\n";
        let pinned = thrown_string(source, "bad config").expect("placed");
        assert_eq!(pinned.position, at(2, 16));
        assert!(
            pinned
                .message
                .starts_with("bad config (a string was thrown"),
            "{}",
            pinned.message
        );
        assert_eq!(thrown_string(source, "never thrown"), None);
        let twice = "export default async function () {\n  throw \"x\";\n  throw \"x\";\n}\n";
        assert_eq!(thrown_string(twice, "x"), None, "two places: no guess");
    }
}
