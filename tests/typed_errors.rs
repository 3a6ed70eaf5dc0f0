//! Two rules of the code, checked over the source as `dependency_direction.rs` checks the
//! dependency rule (issue 48, point 3):
//!
//! - **Typed errors.** No library says why it failed in a bare `String`: no `Result<_, String>`
//!   (any spelling: `std::result::Result<T, std::string::String>`, across line breaks, as a
//!   return type, a field, an alias or a type argument) and no `type Err = String` / `type Error
//!   = String` in the library code of any crate of the workspace (every module reachable from a
//!   library target's root, `#[cfg(test)]` items left out; binaries, tests and benches are not
//!   library code). The only ones allowed are where an error crosses the WIT boundary as text
//!   ([`WIT_BOUNDARY`]).
//! - **clap only in binaries.** No library module names `clap`, and no library target's resolved
//!   dependency graph holds it: a package whose binary needs clap declares it optional, behind a
//!   feature only that binary requires (cargo cannot give one target of a package a dependency
//!   of its own, rust-lang/cargo#1982), and no library enables that feature.
//!
//! The source is read as Rust tokens (`proc-macro2`'s lexer), so comments and strings never
//! count and macro bodies do.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};
use serde_json::Value;

/// Where an error crosses the WIT boundary as text (`wit/graph.wit`'s `result<_, string>`),
/// the one place a `Result<_, String>` belongs, with how many each file has.
const WIT_BOUNDARY: &[(&str, usize)] = &[
    // The guest's exports (`impl Guest for Component`): describe, run, initialize.
    ("runner/guest/src/lib.rs", 3),
    // The host's typed handle on the guest's `initialize` export (`runner build`'s snapshot).
    ("runner/src/engine/wasm/snapshot.rs", 1),
];

/// A workspace package as `cargo metadata` describes it.
struct Package {
    name: String,
    /// The library target's root file, if the package has a library.
    lib_root: Option<PathBuf>,
    /// Its features: name → what each enables.
    features: BTreeMap<String, Vec<String>>,
    /// The features its binaries require.
    bin_features: Vec<String>,
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn workspace_packages() -> Vec<Package> {
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--frozen", "--no-deps", "--format-version", "1"])
        .current_dir(workspace_root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("cargo metadata is JSON");
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    let mut packages = Vec::new();
    for package in metadata["packages"].as_array().expect("packages") {
        let targets = package["targets"].as_array().expect("targets");
        let has_kind = |target: &Value, kinds: &[&str]| {
            strings(&target["kind"])
                .iter()
                .any(|k| kinds.contains(&k.as_str()))
        };
        let lib_root = targets
            .iter()
            .find(|t| has_kind(t, &["lib", "rlib", "cdylib", "proc-macro"]))
            .map(|t| PathBuf::from(t["src_path"].as_str().expect("src_path")));
        let bin_features = targets
            .iter()
            .filter(|t| has_kind(t, &["bin"]))
            .flat_map(|t| strings(&t["required-features"]))
            .collect();
        let features = package["features"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, enables)| (name.clone(), strings(enables)))
            .collect();
        packages.push(Package {
            name: package["name"].as_str().expect("name").to_owned(),
            lib_root,
            features,
            bin_features,
        });
    }
    packages
}

/// Every library root: the workspace's, and the guest's (a package of its own outside the
/// workspace, built for wasm32-wasip2 by runner's build script).
fn library_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = workspace_packages()
        .into_iter()
        .filter_map(|p| p.lib_root)
        .collect();
    roots.push(workspace_root().join("runner/guest/src/lib.rs"));
    roots.sort();
    roots
}

/// The library modules reachable from `root` through `mod` declarations (those under
/// `#[cfg(test)]` left out), each file with its tokens outside `#[cfg(test)]` items.
fn library_files(root: &Path) -> Vec<(PathBuf, Vec<TokenTree>)> {
    let mut files = Vec::new();
    let mut pending = vec![(root.to_path_buf(), children_dir(root))];
    while let Some((file, dir)) = pending.pop() {
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let tokens = TokenStream::from_str(&text)
            .unwrap_or_else(|e| panic!("{} does not lex: {e}", file.display()));
        let mut kept = Vec::new();
        walk(tokens, &dir, &mut kept, &mut pending);
        files.push((file, kept));
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files
}

/// Where the files of `file`'s `mod x;` declarations are: beside it for `lib.rs`, `main.rs`
/// and `mod.rs`, else in the folder of its name.
fn children_dir(file: &Path) -> PathBuf {
    let dir = file.parent().expect("a file has a folder").to_path_buf();
    match file.file_stem().and_then(|s| s.to_str()) {
        Some("lib" | "main" | "mod") => dir,
        Some(stem) => dir.join(stem),
        None => dir,
    }
}

/// Whether an attribute's tokens (inside `#[...]`) are `cfg(test)`.
fn is_cfg_test(attribute: &TokenStream) -> bool {
    let tokens: Vec<TokenTree> = attribute.clone().into_iter().collect();
    match tokens.as_slice() {
        [TokenTree::Ident(cfg), TokenTree::Group(args)] if cfg == "cfg" => {
            let inner: Vec<String> = args.stream().into_iter().map(|t| t.to_string()).collect();
            inner == ["test"]
        }
        _ => false,
    }
}

/// Keeps `tokens` (in `kept`) but for the items under `#[cfg(test)]`, queues the files of the
/// `mod x;` declarations it keeps, and walks inline modules and every group inside.
fn walk(
    tokens: TokenStream,
    dir: &Path,
    kept: &mut Vec<TokenTree>,
    pending: &mut Vec<(PathBuf, PathBuf)>,
) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    let mut test_only = false;
    let mut path_attribute: Option<String> = None;
    while i < tokens.len() {
        // An outer attribute: `#` then `[...]`.
        if let (TokenTree::Punct(hash), Some(TokenTree::Group(attr))) =
            (&tokens[i], tokens.get(i + 1))
            && hash.as_char() == '#'
            && attr.delimiter() == Delimiter::Bracket
        {
            test_only |= is_cfg_test(&attr.stream());
            path_attribute = path_attribute.or_else(|| module_path_attribute(&attr.stream()));
            i += 2;
            continue;
        }
        if test_only {
            i = item_end(&tokens, i);
            test_only = false;
            path_attribute = None;
            continue;
        }
        if let TokenTree::Ident(ident) = &tokens[i]
            && ident == "mod"
            && let Some(TokenTree::Ident(name)) = tokens.get(i + 1)
        {
            let name = name.to_string();
            match tokens.get(i + 2) {
                Some(TokenTree::Punct(semi)) if semi.as_char() == ';' => {
                    let file = match path_attribute.take() {
                        Some(path) => dir.join(path),
                        None => module_file(dir, &name),
                    };
                    let children = children_dir(&file);
                    pending.push((file, children));
                    i += 3;
                    continue;
                }
                Some(TokenTree::Group(body)) if body.delimiter() == Delimiter::Brace => {
                    kept.extend(tokens[i..i + 2].iter().cloned());
                    let mut inner = Vec::new();
                    walk(body.stream(), &dir.join(&name), &mut inner, pending);
                    kept.push(TokenTree::Group(proc_macro2::Group::new(
                        Delimiter::Brace,
                        inner.into_iter().collect(),
                    )));
                    i += 3;
                    path_attribute = None;
                    continue;
                }
                _ => {}
            }
        }
        match &tokens[i] {
            TokenTree::Group(group) => {
                let mut inner = Vec::new();
                walk(group.stream(), dir, &mut inner, pending);
                let mut kept_group =
                    proc_macro2::Group::new(group.delimiter(), inner.into_iter().collect());
                kept_group.set_span(group.span());
                kept.push(TokenTree::Group(kept_group));
            }
            other => kept.push(other.clone()),
        }
        if matches!(&tokens[i], TokenTree::Punct(p) if p.as_char() == ';')
            || matches!(&tokens[i], TokenTree::Group(g) if g.delimiter() == Delimiter::Brace)
        {
            path_attribute = None;
        }
        i += 1;
    }
}

/// `#[path = "x.rs"]`'s file name.
fn module_path_attribute(attribute: &TokenStream) -> Option<String> {
    let tokens: Vec<TokenTree> = attribute.clone().into_iter().collect();
    match tokens.as_slice() {
        [
            TokenTree::Ident(path),
            TokenTree::Punct(eq),
            TokenTree::Literal(file),
        ] if path == "path" && eq.as_char() == '=' => {
            Some(file.to_string().trim_matches('"').to_owned())
        }
        _ => None,
    }
}

/// The file of module `name` declared in a file whose children live in `dir`.
fn module_file(dir: &Path, name: &str) -> PathBuf {
    let flat = dir.join(format!("{name}.rs"));
    if flat.is_file() {
        flat
    } else {
        dir.join(name).join("mod.rs")
    }
}

/// The index after the item starting at `start`: past its first `;` or `{...}` at this level.
fn item_end(tokens: &[TokenTree], start: usize) -> usize {
    let mut i = start;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Punct(p) if p.as_char() == ';' => return i + 1,
            TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// The lines of every `Result<_, String>` and `type Err = String` in `tokens` (groups included).
fn string_errors(tokens: &[TokenTree], found: &mut Vec<usize>) {
    for (i, token) in tokens.iter().enumerate() {
        match token {
            TokenTree::Group(group) => {
                let inner: Vec<TokenTree> = group.stream().into_iter().collect();
                string_errors(&inner, found);
            }
            TokenTree::Ident(ident) if ident == "Result" => {
                if let Some(arguments) = angle_arguments(&tokens[i + 1..])
                    && arguments.len() == 2
                    && names_string(&arguments[1])
                {
                    found.push(ident.span().start().line);
                }
            }
            TokenTree::Ident(ident) if ident == "type" => {
                if let [TokenTree::Ident(name), TokenTree::Punct(eq), rest @ ..] = &tokens[i + 1..]
                    && (name == "Err" || name == "Error")
                    && eq.as_char() == '='
                {
                    let end = rest
                        .iter()
                        .position(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ';'))
                        .unwrap_or(rest.len());
                    if names_string(&rest[..end]) {
                        found.push(ident.span().start().line);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The top-level arguments of the `<...>` that `tokens` starts with, if it does.
fn angle_arguments(tokens: &[TokenTree]) -> Option<Vec<Vec<TokenTree>>> {
    let mut iter = tokens.iter();
    // `Result::<..>` is the same type.
    let mut first = iter.next()?;
    if let TokenTree::Punct(colon) = first
        && colon.as_char() == ':'
    {
        iter.next()?;
        first = iter.next()?;
    }
    if !matches!(first, TokenTree::Punct(p) if p.as_char() == '<') {
        return None;
    }
    let mut depth = 1usize;
    let mut arguments = vec![Vec::new()];
    let mut previous_joint_minus = false;
    for token in iter {
        if let TokenTree::Punct(p) = token {
            let arrow = previous_joint_minus && p.as_char() == '>';
            previous_joint_minus = p.as_char() == '-' && p.spacing() == Spacing::Joint;
            match p.as_char() {
                '<' => depth += 1,
                '>' if !arrow => {
                    depth -= 1;
                    if depth == 0 {
                        // A trailing comma leaves no argument after it.
                        if arguments.last().is_some_and(Vec::is_empty) {
                            arguments.pop();
                        }
                        return Some(arguments);
                    }
                }
                ',' if depth == 1 => {
                    arguments.push(Vec::new());
                    continue;
                }
                _ => {}
            }
        } else {
            previous_joint_minus = false;
        }
        arguments.last_mut()?.push(token.clone());
    }
    None
}

/// Whether a type's tokens name `String` (`String`, `std::string::String`, `::std::string::String`).
fn names_string(tokens: &[TokenTree]) -> bool {
    let words: Vec<String> = tokens
        .iter()
        .filter(|t| !matches!(t, TokenTree::Punct(p) if p.as_char() == ':'))
        .map(ToString::to_string)
        .collect();
    matches!(
        words
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice(),
        ["String"] | ["std" | "alloc", "string", "String"]
    )
}

/// `path:line` of every `Result<_, String>` in library code, by file relative to the workspace.
fn string_errors_by_file() -> BTreeMap<String, Vec<usize>> {
    let root = workspace_root();
    let mut by_file = BTreeMap::new();
    for library in library_roots() {
        for (file, tokens) in library_files(&library) {
            let mut lines = Vec::new();
            string_errors(&tokens, &mut lines);
            if !lines.is_empty() {
                let relative = file.strip_prefix(&root).unwrap_or(&file);
                by_file.insert(relative.display().to_string(), lines);
            }
        }
    }
    by_file
}

#[test]
fn no_library_says_why_it_failed_in_a_bare_string() {
    let found = string_errors_by_file();
    let allowed: BTreeMap<&str, usize> = WIT_BOUNDARY.iter().copied().collect();
    let mut problems = Vec::new();
    for (file, lines) in &found {
        let expected = allowed.get(file.as_str()).copied().unwrap_or(0);
        if lines.len() != expected {
            let at: Vec<String> = lines.iter().map(|l| format!("{file}:{l}")).collect();
            problems.push(format!(
                "{file}: {} `Result<_, String>` (or `type Err = String`), {expected} allowed: {}",
                lines.len(),
                at.join(", ")
            ));
        }
    }
    for (file, expected) in &allowed {
        if !found.contains_key(*file) {
            problems.push(format!(
                "{file}: none left, {expected} allowed: take it off the allow-list"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "library code says why it failed in a bare String; give the library an error enum \
         (thiserror) that says what failed and what to do:\n{}",
        problems.join("\n")
    );
}

/// The scanner sees through line breaks, paths, comments, strings and test modules.
#[test]
fn the_scanner_finds_every_spelling_and_only_those() {
    let source = r#"
        fn a() -> Result<(), String> {}
        fn b() -> std::result::Result<
            Vec<u8>,
            std::string::String,
        > {}
        struct C { meta: Result<Meta, String> }
        impl FromStr for D { type Err = String; }
        fn e() -> Result<HashMap<String, String>, Error> {}
        fn f() -> anyhow::Result<String> {}
        fn g() -> Result<Box<dyn Fn() -> u8>, String> {}
        // fn h() -> Result<(), String>
        const I: &str = "Result<(), String>";
        #[cfg(test)]
        mod tests { fn j() -> Result<(), String> {} }
        #[cfg(test)]
        fn k() -> Result<(), String> {}
        m!(Result<u8, String>);
    "#;
    let tokens = TokenStream::from_str(source).expect("lexes");
    let (mut kept, mut pending) = (Vec::new(), Vec::new());
    walk(tokens, Path::new("."), &mut kept, &mut pending);
    let mut lines = Vec::new();
    string_errors(&kept, &mut lines);
    assert_eq!(lines, [2, 3, 7, 8, 11, 18]);
}

/// Whether a feature's entry enables clap.
fn enables_clap(entry: &str) -> bool {
    entry == "clap"
        || entry == "dep:clap"
        || entry.starts_with("clap/")
        || entry.starts_with("clap?/")
}

/// The features of `package` that a build of its library gets by default: its default set
/// without the features only its binaries require.
fn library_features(package: &Package) -> Vec<String> {
    package
        .features
        .get("default")
        .into_iter()
        .flatten()
        .filter(|f| !package.bin_features.contains(f))
        .cloned()
        .collect()
}

/// `package`'s normal dependencies as `cargo tree` resolves them with only `features` on.
fn resolved_dependencies(package: &str, features: &[String]) -> Vec<String> {
    let output = Command::new(env!("CARGO"))
        .args([
            "tree", "--frozen", "-e", "normal", "--prefix", "none", "-f", "{p}",
        ])
        .args(["-p", package, "--no-default-features", "--features"])
        .arg(features.join(","))
        .current_dir(workspace_root())
        .output()
        .expect("cargo tree runs");
    assert!(
        output.status.success(),
        "cargo tree -p {package} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[test]
fn clap_is_only_in_binaries() {
    let mut problems = Vec::new();
    let root = workspace_root();
    for library in library_roots() {
        for (file, tokens) in library_files(&library) {
            let mut names = Vec::new();
            mentions(&tokens, "clap", &mut names);
            names.dedup();
            for line in names {
                let relative = file.strip_prefix(&root).unwrap_or(&file);
                problems.push(format!(
                    "{}:{line} names clap in library code: move the clap types to the binary",
                    relative.display()
                ));
            }
        }
    }
    for package in workspace_packages() {
        if package.lib_root.is_none() {
            continue;
        }
        for (feature, enables) in &package.features {
            if enables.iter().any(|e| enables_clap(e)) && !package.bin_features.contains(feature) {
                problems.push(format!(
                    "{}: the feature {feature} enables clap but no binary of the package requires it",
                    package.name
                ));
            }
        }
        let dependencies = resolved_dependencies(&package.name, &library_features(&package));
        if dependencies.iter().any(|d| d == "clap") {
            problems.push(format!(
                "{}'s library depends on clap (`cargo tree -e normal -p {} -i clap` says through what)",
                package.name, package.name
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "clap belongs to binaries only:\n{}",
        problems.join("\n")
    );
}

/// The lines where the identifier `name` appears in `tokens` (groups included).
fn mentions(tokens: &[TokenTree], name: &str, found: &mut Vec<usize>) {
    for token in tokens {
        match token {
            TokenTree::Group(group) => {
                let inner: Vec<TokenTree> = group.stream().into_iter().collect();
                mentions(&inner, name, found);
            }
            TokenTree::Ident(ident) if ident == name => found.push(ident.span().start().line),
            _ => {}
        }
    }
}
