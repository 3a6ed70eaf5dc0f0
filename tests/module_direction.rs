//! The shape of the code, checked on the source (ARCHITECTURE.md, "The service's floors" and
//! the invariants): a module graph read from every crate of the workspace (the `mod` tree, and
//! an arrow wherever a module names another one of its crate: `use crate::...`, `super::`,
//! paths through imported names; re-exports followed to the defining module; `#[cfg(test)]`
//! items left out, see `module_direction/graph.rs`).
//!
//! - **The service's floors run downward.** Edges (`http/`) over the domain (the crate root's
//!   other rooms) over the store (`store/`), with the domain's vocabulary (`model`) under the
//!   store, which keeps it: an arrow may go to its own floor or one below, never up. So the
//!   domain and the store never name `crate::http`, the store names nothing of the domain but
//!   `model`, and `model` nothing of the crate. The crate root only declares the floors and
//!   re-exports. No domain, store or vocabulary module names `AppState` (no domain function
//!   takes it) or `axum`.
//! - **No circle between rooms, in any crate.** Two modules that name each other, directly or
//!   around a loop, are one room in two files. An arrow counts between the two rooms it joins
//!   under their nearest common parent (`http::mcp::tools -> runs` joins `http` and `runs` at
//!   the root, and nothing inside `http`); an arrow between a module and its own parent or
//!   child joins nothing (they are one room).
//!
//! `cargo test -p graphrelay --test e2e module_direction -- --nocapture` prints the service's
//! house (floors, rooms, arrows, circles); `HOUSE_ROOT=/path/to/checkout` reads another
//! checkout, and `HOUSE_EDGES=mcp,console,...` names the edge rooms of a layout without
//! `http/` (how the drawing of the layout before the floors was made).

mod graph;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use graph::{Arrow, CrateGraph, ModPath, cycles, read_crate, show};

/// The checkout read: `HOUSE_ROOT`, or this workspace.
fn workspace() -> PathBuf {
    std::env::var_os("HOUSE_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// The workspace's members (from the root `Cargo.toml`), the root package, and the guest,
/// which the runner's build script builds outside the workspace.
fn package_dirs(root: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest
        .split_once("members = [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list)
        .expect("the workspace lists its members");
    let mut dirs: Vec<PathBuf> = members
        .split(',')
        .map(|entry| entry.trim().trim_matches('"'))
        .filter(|entry| !entry.is_empty())
        .map(|entry| root.join(entry))
        .collect();
    dirs.push(root.to_path_buf());
    dirs.push(root.join("runner/guest"));
    dirs
}

/// Every library and binary crate of the workspace, read.
fn crates(root: &Path) -> Vec<CrateGraph> {
    let mut out = Vec::new();
    for dir in package_dirs(root) {
        let name = dir
            .strip_prefix(root)
            .map(|p| p.display().to_string())
            .ok()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| ".".to_owned());
        for file in ["src/lib.rs", "src/main.rs"] {
            let path = dir.join(file);
            if path.is_file() {
                out.push(read_crate(&format!("{name} ({file})"), &path, root));
            }
        }
        let Ok(bins) = std::fs::read_dir(dir.join("src/bin")) else {
            continue;
        };
        let mut bins: Vec<PathBuf> = bins.filter_map(|e| e.ok().map(|e| e.path())).collect();
        bins.sort();
        for bin in bins {
            let main = if bin.is_dir() {
                bin.join("main.rs")
            } else {
                bin
            };
            if main.extension().is_some_and(|e| e == "rs") && main.is_file() {
                let label = main
                    .strip_prefix(&dir)
                    .unwrap_or(&main)
                    .display()
                    .to_string();
                out.push(read_crate(&format!("{name} ({label})"), &main, root));
            }
        }
    }
    assert!(
        out.len() >= 10,
        "every crate of the workspace is read, found {}",
        out.len()
    );
    out
}

fn service() -> CrateGraph {
    let root = workspace();
    read_crate(
        "relay-service",
        &root.join("relay/service/src/lib.rs"),
        &root,
    )
}

/// The service's floors, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Floor {
    /// `model`: the domain's vocabulary, which the store keeps.
    Vocabulary,
    /// `store/`.
    Store,
    /// The crate root's other rooms.
    Domain,
    /// `http/`.
    Edges,
    /// The crate root, `lib.rs`: above every floor, so that anything the floors import from
    /// it (an `AppState` defined there, say) runs up.
    Root,
}

impl Floor {
    fn name(self) -> &'static str {
        match self {
            Floor::Vocabulary => "vocabulary",
            Floor::Store => "store",
            Floor::Domain => "domain",
            Floor::Edges => "edges",
            Floor::Root => "crate root",
        }
    }
}

/// The edge rooms of a layout without `http/` (`HOUSE_EDGES`), for drawing it.
fn named_edges() -> &'static [String] {
    static EDGES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    EDGES.get_or_init(|| {
        std::env::var("HOUSE_EDGES")
            .map(|list| list.split(',').map(|s| s.trim().to_owned()).collect())
            .unwrap_or_default()
    })
}

/// The floor of a module of the service.
fn floor(path: &[String]) -> Floor {
    let Some(first) = path.first() else {
        return Floor::Root;
    };
    match first.as_str() {
        "http" => Floor::Edges,
        "store" => Floor::Store,
        "model" => Floor::Vocabulary,
        other if named_edges().iter().any(|e| e == other) => Floor::Edges,
        _ => Floor::Domain,
    }
}

/// A room of the service: a child of `http` on the edge floor, else a child of the root.
fn room(path: &[String]) -> String {
    match path {
        [] => "(root)".to_owned(),
        [first, second, ..] if first == "http" => format!("http::{second}"),
        [first, ..] => first.clone(),
    }
}

/// Arrows that run from a floor to a higher one.
fn upward(service: &CrateGraph) -> Vec<&Arrow> {
    service
        .arrows
        .iter()
        .filter(|arrow| floor(&arrow.to) > floor(&arrow.from))
        .collect()
}

/// Each crate's circles between rooms: `(rooms, the arrows that make them)`.
fn room_circles(graph: &CrateGraph) -> Vec<(Vec<ModPath>, Vec<&Arrow>)> {
    let joined = |arrow: &Arrow| -> Option<(ModPath, ModPath)> {
        let common = arrow
            .from
            .iter()
            .zip(&arrow.to)
            .take_while(|(a, b)| a == b)
            .count();
        (common < arrow.from.len() && common < arrow.to.len())
            .then(|| (arrow.from[..=common].to_vec(), arrow.to[..=common].to_vec()))
    };
    let nodes: BTreeSet<ModPath> = graph.modules.keys().cloned().collect();
    let edges: BTreeSet<(ModPath, ModPath)> = graph.arrows.iter().filter_map(joined).collect();
    cycles(&nodes, &edges)
        .into_iter()
        .map(|rooms| {
            let evidence = graph
                .arrows
                .iter()
                .filter(|arrow| {
                    joined(arrow).is_some_and(|(a, b)| rooms.contains(&a) && rooms.contains(&b))
                })
                .collect();
            (rooms, evidence)
        })
        .collect()
}

fn listed(arrows: &[&Arrow]) -> String {
    arrows
        .iter()
        .map(|arrow| format!("  {arrow}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_service_floors_run_downward() {
    let service = service();
    assert!(
        service.modules.contains_key(&vec!["http".to_owned()]) || !named_edges().is_empty(),
        "the service's edges live under relay/service/src/http/"
    );
    let up = upward(&service);
    assert!(
        up.is_empty(),
        "{} arrows run up a floor (edges > domain > store > vocabulary):\n{}",
        up.len(),
        listed(&up)
    );
    let root = &service.modules[&Vec::new()];
    assert!(
        root.items.is_empty(),
        "relay/service/src/lib.rs only declares the floors and re-exports; it defines {:?}",
        root.items
    );
}

#[test]
fn no_domain_function_takes_app_state() {
    let service = service();
    let mut found = Vec::new();
    for (path, module) in &service.modules {
        if matches!(floor(path), Floor::Edges | Floor::Root) {
            continue;
        }
        for (word, line) in &module.words {
            if word == "AppState" || word == "axum" {
                found.push(format!("{}:{line}: {word} in {}", module.file, show(path)));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the domain and the store take small contexts, never AppState, and know no axum:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_circle_between_rooms_in_any_crate() {
    let mut found = String::new();
    for graph in crates(&workspace()) {
        for (rooms, arrows) in room_circles(&graph) {
            let names: Vec<String> = rooms.iter().map(|r| show(r)).collect();
            let _ = writeln!(
                found,
                "{}: {} name each other:\n{}",
                graph.name,
                names.join(" <-> "),
                listed(&arrows)
            );
        }
    }
    assert!(found.is_empty(), "circles between rooms:\n{found}");
}

/// The service's house as text: each floor's rooms, each room's arrows (to rooms of its floor
/// or below; `^` marks one running up), and the circles.
fn drawing(service: &CrateGraph) -> String {
    let mut rooms: BTreeMap<Floor, BTreeSet<String>> = BTreeMap::new();
    let mut arrows: BTreeMap<String, BTreeMap<String, (usize, bool)>> = BTreeMap::new();
    for path in service.modules.keys() {
        rooms.entry(floor(path)).or_default().insert(room(path));
    }
    for arrow in &service.arrows {
        let (from, to) = (room(&arrow.from), room(&arrow.to));
        if from != to {
            let entry = arrows.entry(from).or_default().entry(to).or_default();
            entry.0 += 1;
            entry.1 |= floor(&arrow.to) > floor(&arrow.from);
        }
    }
    let mut text = String::from("relay-service, top floor first\n");
    for (floor, names) in rooms.iter().rev() {
        let _ = writeln!(text, "\n[{}]", floor.name());
        for name in names {
            let out: Vec<String> = arrows
                .get(name)
                .map(|to| {
                    to.iter()
                        .map(|(room, (n, up))| {
                            format!("{}{room} ({n})", if *up { "^" } else { "" })
                        })
                        .collect()
                })
                .unwrap_or_default();
            let _ = writeln!(text, "  {name:<22} -> {}", out.join(", "));
        }
    }
    let up = upward(service);
    let _ = writeln!(text, "\narrows running up a floor: {}", up.len());
    let circles = room_circles(service);
    let _ = writeln!(text, "circles between rooms: {}", circles.len());
    for (rooms, evidence) in &circles {
        let names: Vec<String> = rooms.iter().map(|r| show(r)).collect();
        let _ = writeln!(
            text,
            "  {} ({} arrows)",
            names.join(" <-> "),
            evidence.len()
        );
    }
    text
}

#[test]
fn the_house_is_drawn() {
    let text = drawing(&service());
    println!("{text}");
    for floor in ["[edges]", "[domain]", "[store]"] {
        assert!(text.contains(floor), "the drawing shows {floor}:\n{text}");
    }
}

/// The reader on a small crate: strings, characters and lifetimes hide nothing, a re-export
/// is followed to its module, `#[cfg(test)]` items count for nothing, and a circle through a
/// re-export is found.
#[test]
fn the_reader_follows_paths_and_skips_what_is_not_code() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("a")).expect("dirs");
    let files = [
        ("lib.rs", "mod a;\nmod b;\npub use a::Thing;\n"),
        (
            "a/mod.rs",
            "mod inner;\npub struct Thing;\nfn f<'x>(s: &'x str) -> char {\n    let _ = r#\"crate::b::Hidden\"#;\n    let _ = \"crate::b::Hidden\";\n    '\"'\n}\n#[cfg(test)]\nmod tests {\n    use crate::b::Other;\n}\n",
        ),
        ("a/inner.rs", "use super::super::b::{self, Other as O};\n"),
        (
            "b.rs",
            "pub struct Other;\nfn g() -> crate::Thing { crate::Thing }\n",
        ),
    ];
    for (name, text) in files {
        std::fs::write(src.join(name), text).expect("write");
    }
    let graph = read_crate("t", &src.join("lib.rs"), dir.path());
    let arrows: BTreeSet<(String, String)> = graph
        .arrows
        .iter()
        .map(|a| (show(&a.from), show(&a.to)))
        .collect();
    let expected: BTreeSet<(String, String)> = [("(root)", "a"), ("a::inner", "b"), ("b", "a")]
        .into_iter()
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect();
    assert_eq!(arrows, expected);
    let circles = room_circles(&graph);
    assert_eq!(
        circles.len(),
        1,
        "a <-> b through a::inner and the re-export"
    );
    assert_eq!(
        circles[0].0,
        vec![vec!["a".to_owned()], vec!["b".to_owned()]]
    );
}
