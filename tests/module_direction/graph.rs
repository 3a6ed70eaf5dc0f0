//! A small reader of a crate's module graph from its source, with no dependency: the module
//! tree (`mod` declarations and folders), and an arrow from a module to every module of the
//! same crate that it names (`use` declarations, and `crate::`, `super::`, `self::` paths or
//! paths through an imported name anywhere in its code). Re-exports are followed to the module
//! that defines the name, so an arrow never stops at a `pub use` on the way. Items under
//! `#[cfg(test)]` are left out: they are tests, not the shape of the code.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

/// A module's path from its crate root: `[]` is the root, `["http", "mcp"]` is `http::mcp`.
pub type ModPath = Vec<String>;

/// How a module path reads in messages: `http::mcp`, or `(root)`.
pub fn show(path: &[String]) -> String {
    if path.is_empty() {
        "(root)".to_owned()
    } else {
        path.join("::")
    }
}

/// One arrow: `from` names something defined in `to`, at `file:line`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Arrow {
    /// The module whose code names it.
    pub from: ModPath,
    /// The module that defines what is named.
    pub to: ModPath,
    /// Where, relative to the workspace.
    pub file: String,
    /// The line.
    pub line: usize,
    /// The path as written.
    pub written: String,
}

impl fmt::Display for Arrow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {} -> {} ({})",
            self.file,
            self.line,
            show(&self.from),
            show(&self.to),
            self.written
        )
    }
}

/// One module as read: its file, what it defines and imports, the paths its code writes.
#[derive(Debug, Default)]
pub struct Module {
    /// The file it is in (relative to the workspace).
    pub file: String,
    /// Its child modules.
    pub children: BTreeSet<String>,
    /// Names it defines (functions, types, constants, traits, macros).
    pub items: BTreeSet<String>,
    /// Names its `use` declarations bring in at module level: name → path as written.
    imports: BTreeMap<String, Vec<String>>,
    /// Its glob imports (`use x::*`), as written.
    globs: Vec<Vec<String>>,
    /// Every path its code writes, with its line.
    paths: Vec<(Vec<String>, usize)>,
    /// Every identifier its code uses outside comments and strings, with its line.
    pub words: Vec<(String, usize)>,
}

/// A crate's modules and arrows.
#[derive(Debug)]
pub struct CrateGraph {
    /// The crate's name (the package, plus `/bin-name` for a binary).
    pub name: String,
    /// Every module, by path.
    pub modules: BTreeMap<ModPath, Module>,
    /// Every arrow between two different modules, once per place it is written.
    pub arrows: Vec<Arrow>,
}

/// Reads the crate whose root file is `root_file` (its `lib.rs`, `main.rs` or a `bin/` file);
/// paths in messages are relative to `workspace`.
pub fn read_crate(name: &str, root_file: &Path, workspace: &Path) -> CrateGraph {
    let mut modules = BTreeMap::new();
    let dir = root_file
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    read_file_module(Vec::new(), root_file, dir, workspace, &mut modules);
    let mut graph = CrateGraph {
        name: name.to_owned(),
        modules,
        arrows: Vec::new(),
    };
    graph.arrows = graph.resolve_arrows();
    graph
}

fn read_file_module(
    path: ModPath,
    file: &Path,
    child_dir: PathBuf,
    workspace: &Path,
    modules: &mut BTreeMap<ModPath, Module>,
) {
    let Ok(text) = fs::read_to_string(file) else {
        return;
    };
    let tokens = tokenize(&text);
    let relative = file
        .strip_prefix(workspace)
        .unwrap_or(file)
        .display()
        .to_string();
    let mut reader = Reader {
        tokens: &tokens,
        pos: 0,
        file: relative,
        workspace: workspace.to_path_buf(),
        modules,
    };
    reader.module_body(path, child_dir, false);
}

/// Which child file `mod name;` in a module whose children live in `dir` stands for.
fn child_file(dir: &Path, name: &str) -> Option<PathBuf> {
    let flat = dir.join(format!("{name}.rs"));
    let nested = dir.join(name).join("mod.rs");
    [flat, nested].into_iter().find(|p| p.is_file())
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    PathSep,
    Punct(char),
    Literal,
}

struct Token {
    tok: Tok,
    line: usize,
}

/// Identifiers, `::` and punctuation of `text`, without comments, strings, characters,
/// lifetimes or numbers (which become `Literal`).
fn tokenize(text: &str) -> Vec<Token> {
    let mut lexer = Lexer {
        chars: text.chars().collect(),
        i: 0,
        line: 1,
        out: Vec::new(),
    };
    while lexer.i < lexer.chars.len() {
        lexer.step();
    }
    lexer.out
}

struct Lexer {
    chars: Vec<char>,
    i: usize,
    line: usize,
    out: Vec<Token>,
}

impl Lexer {
    fn at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.i + offset).copied()
    }

    /// Moves to `end`, counting the lines passed, and pushes `tok` (if any).
    fn jump(&mut self, end: usize, tok: Option<Tok>) {
        let end = end.min(self.chars.len());
        self.line += self.chars[self.i..end]
            .iter()
            .filter(|c| **c == '\n')
            .count();
        self.i = end;
        if let Some(tok) = tok {
            self.out.push(Token {
                tok,
                line: self.line,
            });
        }
    }

    fn step(&mut self) {
        let c = self.chars[self.i];
        let end = match c {
            '/' if self.at(1) == Some('/') => {
                let rest = self.chars[self.i..].iter().position(|c| *c == '\n');
                return self.jump(rest.map_or(self.chars.len(), |n| self.i + n), None);
            }
            '/' if self.at(1) == Some('*') => {
                let end = skip_block_comment(&self.chars, self.i);
                return self.jump(end, None);
            }
            '"' => skip_string(&self.chars, self.i + 1),
            '\'' => skip_quote(&self.chars, self.i),
            c if c.is_ascii_digit() => self.number_end(),
            c if c.is_alphabetic() || c == '_' => return self.word(),
            ':' if self.at(1) == Some(':') => return self.jump(self.i + 2, Some(Tok::PathSep)),
            c if c.is_whitespace() => return self.jump(self.i + 1, None),
            c => return self.jump(self.i + 1, Some(Tok::Punct(c))),
        };
        self.jump(end, Some(Tok::Literal));
    }

    fn number_end(&self) -> usize {
        let mut j = self.i + 1;
        while let Some(&c) = self.chars.get(j) {
            let fraction = c == '.' && self.chars.get(j + 1).is_some_and(char::is_ascii_digit);
            if !(c.is_ascii_alphanumeric() || c == '_' || fraction) {
                break;
            }
            j += 1;
        }
        j
    }

    fn ident_end(&self, from: usize) -> usize {
        let mut j = from;
        while self
            .chars
            .get(j)
            .is_some_and(|c| c.is_alphanumeric() || *c == '_')
        {
            j += 1;
        }
        j
    }

    /// An identifier, or a string, byte or raw literal that starts like one.
    fn word(&mut self) {
        let end = self.ident_end(self.i);
        let word: String = self.chars[self.i..end].iter().collect();
        let next = self.chars.get(end).copied();
        let quote_after_hashes = self.chars[end..].iter().find(|c| **c != '#') == Some(&'"');
        let literal_end = match (word.as_str(), next) {
            ("r" | "br" | "cr", Some('"')) => Some(skip_raw_string(&self.chars, end)),
            ("r" | "br" | "cr", Some('#')) if quote_after_hashes => {
                Some(skip_raw_string(&self.chars, end))
            }
            ("b" | "c", Some('"')) => Some(skip_string(&self.chars, end + 1)),
            ("b", Some('\'')) => Some(skip_quote(&self.chars, end)),
            _ => None,
        };
        if let Some(literal_end) = literal_end {
            return self.jump(literal_end, Some(Tok::Literal));
        }
        if word == "r" && next == Some('#') {
            // A raw identifier: `r#type`.
            let raw_end = self.ident_end(end + 1);
            let raw: String = self.chars[end + 1..raw_end].iter().collect();
            return self.jump(raw_end, Some(Tok::Ident(raw)));
        }
        self.jump(end, Some(Tok::Ident(word)));
    }
}

fn skip_block_comment(chars: &[char], mut i: usize) -> usize {
    let mut depth = 0;
    while i < chars.len() {
        if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    i
}

/// Past the closing quote of a string whose text starts at `i`.
fn skip_string(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// Past a raw string whose `#`s or quote start at `i`.
fn skip_raw_string(chars: &[char], mut i: usize) -> usize {
    let mut hashes = 0;
    while chars.get(i) == Some(&'#') {
        hashes += 1;
        i += 1;
    }
    i += 1;
    while i < chars.len() {
        if chars[i] == '"'
            && chars[i + 1..]
                .iter()
                .take(hashes)
                .filter(|c| **c == '#')
                .count()
                == hashes
        {
            return i + 1 + hashes;
        }
        i += 1;
    }
    i
}

/// Past a character literal or a lifetime starting with the quote at `i`.
fn skip_quote(chars: &[char], i: usize) -> usize {
    if chars.get(i + 1) == Some(&'\\') {
        let mut j = i + 2;
        while j < chars.len() && chars[j] != '\'' {
            j += 1;
        }
        return j + 1;
    }
    if chars.get(i + 2) == Some(&'\'') {
        return i + 3;
    }
    // A lifetime or a label: the quote and its name.
    let mut j = i + 1;
    while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
        j += 1;
    }
    j
}

const ITEM_KEYWORDS: [&str; 8] = [
    "fn", "struct", "enum", "const", "static", "type", "trait", "union",
];

struct Reader<'a> {
    tokens: &'a [Token],
    pos: usize,
    file: String,
    workspace: PathBuf,
    modules: &'a mut BTreeMap<ModPath, Module>,
}

impl Reader<'_> {
    fn tok(&self, at: usize) -> Option<&Tok> {
        self.tokens.get(at).map(|t| &t.tok)
    }

    fn ident(&self, at: usize) -> Option<&str> {
        match self.tok(at) {
            Some(Tok::Ident(word)) => Some(word),
            _ => None,
        }
    }

    fn is_punct(&self, at: usize, c: char) -> bool {
        self.tok(at) == Some(&Tok::Punct(c))
    }

    fn line(&self) -> usize {
        self.tokens.get(self.pos).map_or(0, |t| t.line)
    }

    /// Reads a module's body up to its closing brace (`inline`) or the end of the file.
    fn module_body(&mut self, path: ModPath, child_dir: PathBuf, inline: bool) {
        self.modules.entry(path.clone()).or_default().file = self.file.clone();
        let mut depth = 0usize;
        while self.pos < self.tokens.len() {
            if self.is_punct(self.pos, '#') && self.cfg_test_attribute() {
                self.skip_item();
                continue;
            }
            match self.tok(self.pos).cloned() {
                Some(Tok::Punct('{' | '(' | '[')) => depth += 1,
                Some(Tok::Punct('}' | ')' | ']')) => {
                    if depth == 0 && inline {
                        self.pos += 1;
                        return;
                    }
                    depth = depth.saturating_sub(1);
                }
                Some(Tok::Ident(word)) if self.word(&word, &path, &child_dir, depth) => continue,
                _ => {}
            }
            self.pos += 1;
        }
    }

    /// Handles the identifier at `pos`; true when it moved `pos` itself.
    fn word(&mut self, word: &str, path: &ModPath, child_dir: &Path, depth: usize) -> bool {
        let line = self.line();
        let module = self.modules.entry(path.clone()).or_default();
        module.words.push((word.to_owned(), line));
        let previous_is_sep = self.pos > 0 && self.tok(self.pos - 1) == Some(&Tok::PathSep);
        match word {
            "mod" if depth == 0 => self.module_declaration(path, child_dir),
            "use" => {
                self.use_declaration(path, depth == 0);
                true
            }
            "macro_rules" if depth == 0 && self.is_punct(self.pos + 1, '!') => {
                if let Some(name) = self.ident(self.pos + 2) {
                    let name = name.to_owned();
                    self.modules
                        .entry(path.clone())
                        .or_default()
                        .items
                        .insert(name);
                }
                false
            }
            _ if depth == 0 && ITEM_KEYWORDS.contains(&word) => {
                if let Some(name) = self.ident(self.pos + 1) {
                    let name = name.to_owned();
                    self.modules
                        .entry(path.clone())
                        .or_default()
                        .items
                        .insert(name);
                }
                false
            }
            _ if !previous_is_sep && self.tok(self.pos + 1) == Some(&Tok::PathSep) => {
                let written = self.path_at(self.pos);
                self.modules
                    .entry(path.clone())
                    .or_default()
                    .paths
                    .push((written, line));
                false
            }
            _ => false,
        }
    }

    /// The path written from `at`: identifiers joined by `::`.
    fn path_at(&self, mut at: usize) -> Vec<String> {
        let mut segments = Vec::new();
        while let Some(word) = self.ident(at) {
            segments.push(word.to_owned());
            if self.tok(at + 1) != Some(&Tok::PathSep) {
                break;
            }
            at += 2;
        }
        segments
    }

    /// `mod name;` (a child file) or `mod name { ... }` (an inline child); true when it read
    /// the inline body.
    fn module_declaration(&mut self, path: &ModPath, child_dir: &Path) -> bool {
        let Some(name) = self.ident(self.pos + 1).map(str::to_owned) else {
            return false;
        };
        let mut child = path.clone();
        child.push(name.clone());
        self.modules
            .entry(path.clone())
            .or_default()
            .children
            .insert(name.clone());
        if self.is_punct(self.pos + 2, ';') {
            if let Some(file) = child_file(child_dir, &name) {
                let dir = if file.ends_with("mod.rs") {
                    file.parent().map(Path::to_path_buf).unwrap_or_default()
                } else {
                    child_dir.join(&name)
                };
                let workspace = self.workspace.clone();
                read_file_module(child, &file, dir, &workspace, self.modules);
            }
            self.pos += 3;
            return true;
        }
        if self.is_punct(self.pos + 2, '{') {
            self.pos += 3;
            self.module_body(child, child_dir.join(&name), true);
            return true;
        }
        false
    }

    /// Whether the attribute at `pos` is `#[cfg(test)]`; moves past it either way.
    fn cfg_test_attribute(&mut self) -> bool {
        let mut at = self.pos + 1;
        if self.is_punct(at, '!') {
            at += 1;
        }
        if !self.is_punct(at, '[') {
            return false;
        }
        let body = at + 1;
        let test = self.ident(body) == Some("cfg")
            && self.is_punct(body + 1, '(')
            && self.ident(body + 2) == Some("test")
            && self.is_punct(body + 3, ')')
            && self.is_punct(body + 4, ']');
        let mut depth = 0;
        let mut end = at;
        while end < self.tokens.len() {
            match self.tok(end) {
                Some(Tok::Punct('[')) => depth += 1,
                Some(Tok::Punct(']')) => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            end += 1;
        }
        self.pos = end + 1;
        test
    }

    /// Skips the item (or statement) at `pos`, with its own attributes: up to its `;`, or its
    /// closing brace when it has a body.
    fn skip_item(&mut self) {
        while self.is_punct(self.pos, '#') {
            self.cfg_test_attribute();
        }
        let ends_at_semicolon = (self.pos..self.pos + 4).any(|at| {
            matches!(
                self.ident(at),
                Some("use" | "const" | "static" | "type" | "let")
            )
        }) && !(self.pos..self.pos + 4)
            .any(|at| self.ident(at) == Some("fn"));
        let mut depth = 0usize;
        while self.pos < self.tokens.len() {
            match self.tok(self.pos) {
                Some(Tok::Punct('{' | '(' | '[')) => depth += 1,
                Some(Tok::Punct('}' | ')' | ']')) => {
                    if depth == 0 {
                        // The end of the enclosing block: the item ended without a `;`.
                        return;
                    }
                    depth -= 1;
                    if depth == 0 && !ends_at_semicolon && self.is_punct(self.pos, '}') {
                        self.pos += 1;
                        return;
                    }
                }
                Some(Tok::Punct(';')) if depth == 0 => {
                    self.pos += 1;
                    return;
                }
                _ => {}
            }
            self.pos += 1;
        }
    }

    /// A `use` declaration at `pos`: every path it imports becomes a written path; at module
    /// level its names are the module's imports.
    fn use_declaration(&mut self, path: &ModPath, module_level: bool) {
        let line = self.line();
        self.pos += 1;
        if self.tok(self.pos) == Some(&Tok::PathSep) {
            self.pos += 1;
        }
        let mut imported = Vec::new();
        self.use_tree(Vec::new(), &mut imported);
        while self.pos < self.tokens.len() && !self.is_punct(self.pos, ';') {
            self.pos += 1;
        }
        self.pos += 1;
        let module = self.modules.entry(path.clone()).or_default();
        for (full, name) in imported {
            module.paths.push((full.clone(), line));
            match name {
                Some(name) if module_level || !module.imports.contains_key(&name) => {
                    module.imports.insert(name, full);
                }
                Some(_) => {}
                None => module.globs.push(full),
            }
        }
    }

    /// One use tree with `prefix` before it: pushes each full path and the name it brings in
    /// (`None` for a glob).
    fn use_tree(&mut self, mut prefix: Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
        loop {
            if self.is_punct(self.pos, '*') {
                self.pos += 1;
                out.push((prefix, None));
                return;
            }
            if self.is_punct(self.pos, '{') {
                self.pos += 1;
                while !self.is_punct(self.pos, '}') && self.pos < self.tokens.len() {
                    self.use_tree(prefix.clone(), out);
                    if self.is_punct(self.pos, ',') {
                        self.pos += 1;
                    }
                }
                self.pos += 1;
                return;
            }
            let Some(word) = self.ident(self.pos).map(str::to_owned) else {
                return;
            };
            self.pos += 1;
            if self.tok(self.pos) == Some(&Tok::PathSep) {
                prefix.push(word);
                self.pos += 1;
                continue;
            }
            let mut name = word.clone();
            if word != "self" {
                prefix.push(word);
            } else if let Some(last) = prefix.last() {
                name = last.clone();
            }
            if self.ident(self.pos) == Some("as") {
                if let Some(alias) = self.ident(self.pos + 1) {
                    name = alias.to_owned();
                }
                self.pos += 2;
            }
            out.push((prefix, (name != "_").then_some(name)));
            return;
        }
    }
}

/// Most imports followed in one resolution (a re-export chain), against loops.
const MAX_HOPS: usize = 16;

impl CrateGraph {
    fn resolve_arrows(&self) -> Vec<Arrow> {
        let mut arrows = BTreeSet::new();
        for (from, module) in &self.modules {
            for (written, line) in &module.paths {
                let Some(to) = self.resolve(from, written, 0) else {
                    continue;
                };
                if &to != from {
                    arrows.insert(Arrow {
                        from: from.clone(),
                        to,
                        file: module.file.clone(),
                        line: *line,
                        written: written.join("::"),
                    });
                }
            }
        }
        arrows.into_iter().collect()
    }

    /// The module that defines what `written` names from module `at`, if it is in this crate.
    pub fn resolve(&self, at: &ModPath, written: &[String], hops: usize) -> Option<ModPath> {
        if hops > MAX_HOPS {
            return None;
        }
        let (first, rest) = written.split_first()?;
        let module = self.modules.get(at)?;
        let mut current = match first.as_str() {
            "crate" => Vec::new(),
            "self" => at.clone(),
            "super" => at[..at.len().saturating_sub(1)].to_vec(),
            name if module.children.contains(name) => {
                let mut child = at.clone();
                child.push(name.to_owned());
                child
            }
            name => {
                let imported = module.imports.get(name)?;
                if imported.first().map(String::as_str) == Some(name) && imported.len() == 1 {
                    return None;
                }
                let target = self.resolve(at, imported, hops + 1)?;
                return self.walk(target, rest, hops + 1);
            }
        };
        let mut rest = rest;
        while rest.first().map(String::as_str) == Some("super") {
            current.pop();
            rest = &rest[1..];
        }
        self.walk(current, rest, hops)
    }

    /// From module `current`, follows `rest` through child modules and imports.
    fn walk(&self, mut current: ModPath, rest: &[String], hops: usize) -> Option<ModPath> {
        for (index, segment) in rest.iter().enumerate() {
            let module = self.modules.get(&current)?;
            if module.children.contains(segment) {
                current.push(segment.clone());
                continue;
            }
            if module.items.contains(segment) {
                return Some(current);
            }
            if let Some(imported) = module.imports.get(segment) {
                let target = self.resolve(&current, imported, hops + 1)?;
                return self.walk(target, &rest[index + 1..], hops + 1);
            }
            for glob in &module.globs {
                let Some(source) = self.resolve(&current, glob, hops + 1) else {
                    continue;
                };
                if let Some(found) = self.walk(source, &rest[index..], hops + 1)
                    && found != current
                {
                    return Some(found);
                }
            }
            return Some(current);
        }
        Some(current)
    }
}

/// The cycles among `nodes` under `edges`: every strongly connected component of more than
/// one node (Tarjan's algorithm), each sorted.
pub fn cycles(
    nodes: &BTreeSet<ModPath>,
    edges: &BTreeSet<(ModPath, ModPath)>,
) -> Vec<Vec<ModPath>> {
    let index_of: BTreeMap<&ModPath, usize> =
        nodes.iter().enumerate().map(|(i, n)| (n, i)).collect();
    let names: Vec<&ModPath> = nodes.iter().collect();
    let mut next = vec![Vec::new(); names.len()];
    for (a, b) in edges {
        if let (Some(&a), Some(&b)) = (index_of.get(a), index_of.get(b)) {
            next[a].push(b);
        }
    }
    let mut tarjan = Tarjan {
        next: &next,
        index: vec![None; names.len()],
        low: vec![0; names.len()],
        on_stack: vec![false; names.len()],
        stack: Vec::new(),
        counter: 0,
        components: Vec::new(),
    };
    for node in 0..names.len() {
        if tarjan.index[node].is_none() {
            tarjan.visit(node);
        }
    }
    let mut out: Vec<Vec<ModPath>> = tarjan
        .components
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            let mut c: Vec<ModPath> = c.into_iter().map(|i| names[i].clone()).collect();
            c.sort();
            c
        })
        .collect();
    out.sort();
    out
}

struct Tarjan<'a> {
    next: &'a [Vec<usize>],
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    counter: usize,
    components: Vec<Vec<usize>>,
}

impl Tarjan<'_> {
    fn visit(&mut self, node: usize) {
        self.index[node] = Some(self.counter);
        self.low[node] = self.counter;
        self.counter += 1;
        self.stack.push(node);
        self.on_stack[node] = true;
        for &next in self.next[node].clone().iter() {
            match self.index[next] {
                None => {
                    self.visit(next);
                    self.low[node] = self.low[node].min(self.low[next]);
                }
                Some(index) if self.on_stack[next] => {
                    self.low[node] = self.low[node].min(index);
                }
                Some(_) => {}
            }
        }
        if Some(self.low[node]) == self.index[node] {
            let mut component = Vec::new();
            while let Some(top) = self.stack.pop() {
                self.on_stack[top] = false;
                component.push(top);
                if top == node {
                    break;
                }
            }
            self.components.push(component);
        }
    }
}
