//! Nested graphs: a catalog of graphs by slug, and the nesting limit. A nested graph shares its
//! caller's budget, approvals and cancellation (it runs inside the same run).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use graph_js::{Failure, Meta, MetaError};

use super::approvals::BoxFuture;
use super::engine::{ComponentError, Engine};
use crate::input::{InputError, read_at_most, read_script};
use crate::typescript::is_typescript;

/// The first bytes of every WebAssembly binary.
pub const WASM_MAGIC: &[u8] = b"\0asm";
/// Largest built component (`runner build` output) `runner run` or a graphs folder reads: one
/// is about 7 MB.
pub const MAX_COMPONENT_BYTES: u64 = 64 * 1024 * 1024;

/// Graphs may nest this deep (the top graph is depth 0).
pub const MAX_DEPTH: usize = 8;
/// At most this many nested graphs may be running at once in one run.
pub const MAX_LIVE_GRAPHS: usize = 64;
/// Reading one file's `meta` while loading a folder may take at most this long.
pub const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(10);

/// A graph the catalog can hand out.
#[derive(Clone)]
pub struct GraphSource {
    /// Its validated metadata.
    pub meta: Meta,
    /// The module text (empty for a built component, which holds its own graph).
    pub script: Arc<str>,
    /// The file errors of its own code name (`graphs/research.js`); `SLUG.js` when `None`.
    pub file: Option<Arc<str>>,
    /// The engine it runs on: a built component's own; `None` runs it on the run's engine.
    pub engine: Option<Arc<dyn Engine>>,
}

impl std::fmt::Debug for GraphSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphSource")
            .field("meta", &self.meta)
            .field("script_len", &self.script.len())
            .field("file", &self.file)
            .field("engine", &self.engine.as_ref().map(|e| e.name()))
            .finish()
    }
}

/// Where nested graphs come from: a folder for the CLI, the shared sessions on the desktop.
pub trait Catalog: Send + Sync {
    /// The graph with `slug`, or why there is none (`not_found`, or a catalog that could not
    /// be read). A catalog may read its graphs on the first lookup.
    fn lookup<'a>(&'a self, slug: &'a str) -> BoxFuture<'a, Result<GraphSource, Failure>>;
}

/// A catalog with no graphs.
#[derive(Debug, Default)]
pub struct EmptyCatalog;

impl Catalog for EmptyCatalog {
    fn lookup<'a>(&'a self, slug: &'a str) -> BoxFuture<'a, Result<GraphSource, Failure>> {
        Box::pin(std::future::ready(Err(not_found(slug, "the catalog", &[]))))
    }
}

fn not_found(slug: &str, place: &str, known: &[&str]) -> Failure {
    // A slug two edits away is a typo worth naming; a farther one is a guess.
    let near = super::tools::nearest(slug, known)
        .filter(|near| super::tools::edit_distance(slug, near) <= 2)
        .map_or_else(String::new, |near| format!("; did you mean {near}?"));
    let known = if known.is_empty() {
        "it has no graphs".to_owned()
    } else {
        format!("it has {}", known.join(", "))
    };
    Failure::not_found(format!(
        "there is no graph with slug {slug} in {place}{near} ({known})"
    ))
}

/// Why the file named for `slug` (`child.js` for `child`) could not load, as a failure naming
/// the file and, for an error at a place (a syntax error), starting with its `FILE:LINE:COL`
/// and ending with its code frame.
fn cannot_load(slug: &str, path: &Path, reason: &GraphFileError) -> Failure {
    let file = path.display();
    let located = located_reason(path, reason);
    let (first, frame) = match located.split_once('\n') {
        Some((first, frame)) => (first, format!("\n{frame}")),
        None => (located.as_str(), String::new()),
    };
    Failure::failed(format!(
        "{first}; graph {slug} cannot load: fix {file}, `runner check {file}` shows the error{frame}"
    ))
}

/// Why `path` could not load, as `FILE:LINE:COL: what` and its code frame for an error at a
/// place (a syntax error), else `FILE: why`.
pub fn located_reason(path: &Path, reason: &GraphFileError) -> String {
    let reason = reason.to_string();
    let file = path.display().to_string();
    match graph_js::leading_location(&reason) {
        Some(leading) if leading.file == graph_js::SCRIPT_NAME => {
            crate::location::name_file(&reason, &file)
        }
        _ => format!("{file}: {reason}"),
    }
}

/// Graphs by slug, loaded from the `*.js` and `*.ts` files of one folder.
#[derive(Debug, Default, Clone)]
pub struct FolderCatalog {
    graphs: BTreeMap<String, GraphSource>,
    skipped: Vec<(PathBuf, Arc<GraphFileError>)>,
}

impl FolderCatalog {
    /// Reads every graph in `dir` (not recursively): the `*.js` and `*.ts` files (TypeScript with
    /// its types erased; a `.js` and a `.ts` of one stem are refused), and the `*.wasm` built
    /// components (`runner build` output, run on an engine of their own made by `engine`),
    /// each indexed by its `meta.slug`. Files that do not describe themselves are skipped and
    /// listed in [`Self::skipped`].
    ///
    /// Describing a file evaluates its module top-level code, and the folder usually holds the
    /// very graph about to run, untrusted. So it is described by `engine` (in the sandbox when
    /// that is the wasm engine), each file for at most `timeout`: a top-level memory bomb or
    /// endless loop only gets that file skipped. Evaluating it in-process, whatever engine the
    /// run uses, would let one hostile file in the folder abort or hang `runner run`.
    ///
    /// Two files with one slug are an error naming both: which one a nested call would get
    /// must not depend on the order of a folder listing. The one exception is a graph and its
    /// build beside it (`research.js` and `research.wasm`, one slug): they are one graph, and
    /// the source runs, since a build left beside an edited source would run stale code.
    pub async fn load(
        dir: &Path,
        engine: &dyn Engine,
        timeout: Duration,
    ) -> Result<Self, CatalogError> {
        Self::load_knowing(dir, engine, timeout, None).await
    }

    /// [`Self::load`], taking `known`'s description for its file when the folder holds it
    /// (the same file, still the same text) instead of evaluating it again.
    pub async fn load_knowing(
        dir: &Path,
        engine: &dyn Engine,
        timeout: Duration,
        known: Option<&Described>,
    ) -> Result<Self, CatalogError> {
        let mut catalog = Self::default();
        for path in graph_files(dir)? {
            let read = match known.and_then(|known| known.reuse(&path)) {
                Some(read) => read,
                None => read_graph_file(&path, engine, timeout).await,
            };
            match read {
                Ok(source) => catalog.add_loaded(source, &path)?,
                Err(e) => catalog.skipped.push((path, Arc::new(e))),
            }
        }
        Ok(catalog)
    }

    /// Adds a graph read from `path`, refusing a second graph of its slug (unless one of the
    /// two is the other's build).
    fn add_loaded(&mut self, source: GraphSource, path: &Path) -> Result<(), CatalogError> {
        match self.graphs.entry(source.meta.slug.clone()) {
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(source);
                Ok(())
            }
            std::collections::btree_map::Entry::Occupied(mut taken) => {
                let first = taken.get().file.as_deref().unwrap_or_default().to_owned();
                let Some(source_wins) = build_pair(Path::new(&first), path) else {
                    return Err(CatalogError::DuplicateSlug {
                        slug: taken.key().clone(),
                        first,
                        second: path.display().to_string(),
                    });
                };
                if source_wins {
                    taken.insert(source);
                }
                Ok(())
            }
        }
    }

    /// Adds one graph.
    pub fn insert(&mut self, source: GraphSource) {
        self.graphs.insert(source.meta.slug.clone(), source);
    }

    /// Files that were not loaded, with the reason.
    pub fn skipped(&self) -> &[(PathBuf, Arc<GraphFileError>)] {
        &self.skipped
    }

    /// The graphs loaded, by slug.
    pub fn graphs(&self) -> impl Iterator<Item = &GraphSource> {
        self.graphs.values()
    }

    /// The slugs available.
    pub fn slugs(&self) -> impl Iterator<Item = &str> {
        self.graphs.keys().map(String::as_str)
    }

    /// The graph with `slug`, or `not_found` naming `place` and the slugs there are.
    /// A file named for the slug that could not load is named with its own error: its slug
    /// is unknown, but the file is most likely the graph meant.
    fn find(&self, slug: &str, place: &str) -> Result<GraphSource, Failure> {
        if let Some(found) = self.graphs.get(slug) {
            return Ok(found.clone());
        }
        if let Some((path, reason)) = self.skipped_for(slug) {
            return Err(cannot_load(slug, path, reason));
        }
        let known: Vec<&str> = self.slugs().collect();
        Err(not_found(slug, place, &known))
    }

    /// Why the file named for `slug` could not load, as a nested call of `slug` is told.
    pub fn load_failure(&self, slug: &str) -> Option<Failure> {
        self.skipped_for(slug)
            .map(|(path, reason)| cannot_load(slug, path, reason))
    }

    /// The file named for `slug` (`SLUG.js`, `SLUG.ts` or `SLUG.wasm`) that could not load.
    fn skipped_for(&self, slug: &str) -> Option<&(PathBuf, Arc<GraphFileError>)> {
        self.skipped
            .iter()
            .find(|(path, _)| path.file_stem().is_some_and(|stem| stem == slug))
    }
}

/// The graph files of `dir` (`*.js`, `*.ts` but not `*.d.ts`, and `*.wasm`), sorted. A stem
/// with both a `.js` and a `.ts` file is refused.
fn graph_files(dir: &Path) -> Result<Vec<PathBuf>, CatalogError> {
    let listing = std::fs::read_dir(dir).map_err(|reason| CatalogError::Folder {
        dir: dir.display().to_string(),
        reason,
    })?;
    let mut files: Vec<PathBuf> = listing
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            (p.extension().is_some_and(|x| x == "js" || x == "wasm") || is_typescript(p))
                && p.is_file()
        })
        .collect();
    files.sort();
    if let Some(ts) = files
        .iter()
        .find(|p| is_typescript(p) && files.contains(&p.with_extension("js")))
    {
        return Err(CatalogError::TwoSources {
            js: ts.with_extension("js").display().to_string(),
            ts: ts.display().to_string(),
        });
    }
    Ok(files)
}

/// Whether `first` and `second` are a graph's source and its build (one stem, `.js` and
/// `.wasm`): `Some(true)` when `second` is the source (it replaces `first`), `Some(false)` when
/// `first` is; `None` when they are two graphs.
fn build_pair(first: &Path, second: &Path) -> Option<bool> {
    let ext = |p: &Path| p.extension().and_then(|x| x.to_str()).map(str::to_owned);
    if first.with_extension("") != second.with_extension("") {
        return None;
    }
    match (ext(first)?.as_str(), ext(second)?.as_str()) {
        ("wasm", "js" | "ts") => Some(true),
        ("js" | "ts", "wasm") => Some(false),
        _ => None,
    }
}

/// Why a file of a graphs folder is not in its catalog.
#[derive(Debug, thiserror::Error)]
pub enum GraphFileError {
    /// The file could not be read (gone, too large, not text).
    #[error(transparent)]
    Read(#[from] InputError),
    /// A `.wasm` file that is no WebAssembly component.
    #[error(
        "it is not a WebAssembly component (it does not start with \\0asm); build one with `runner build GRAPH.js -o {path}`"
    )]
    NotAComponent {
        /// The file.
        path: String,
    },
    /// The run's engine gave no engine for the component.
    #[error(transparent)]
    Component(#[from] ComponentError),
    /// Its `meta` could not be read.
    #[error(transparent)]
    Describe(#[from] DescribeError),
}

/// One graph file read and described (a `.wasm` file on an engine of its own), or why not.
async fn read_graph_file(
    path: &Path,
    engine: &dyn Engine,
    timeout: Duration,
) -> Result<GraphSource, GraphFileError> {
    let (script, own_engine): (Arc<str>, Option<Arc<dyn Engine>>) =
        if path.extension().is_some_and(|x| x == "wasm") {
            let bytes = read_at_most(path, MAX_COMPONENT_BYTES)?;
            if !bytes.starts_with(WASM_MAGIC) {
                return Err(GraphFileError::NotAComponent {
                    path: path.display().to_string(),
                });
            }
            // The component holds its graph: it runs and describes with an empty script.
            ("".into(), Some(engine.for_component(&bytes)?))
        } else {
            (read_script(path)?.into(), None)
        };
    let describer = own_engine.as_deref().unwrap_or(engine);
    let meta = describe_within(describer, script.clone(), timeout).await?;
    Ok(GraphSource {
        meta,
        script,
        file: Some(path.display().to_string().into()),
        engine: own_engine,
    })
}

/// Why a graph's `meta` could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescribeError {
    /// The graph has no valid `meta` (or does not parse, or fails at top level).
    #[error(transparent)]
    Meta(#[from] MetaError),
    /// Reading it took longer than it may: its top-level code runs too long.
    #[error("reading its meta took longer than {} s", .0.as_secs_f64())]
    TimedOut(Duration),
}

/// `engine`'s reading of `script`'s meta, or why it has none, within `timeout`.
pub async fn describe_within(
    engine: &dyn Engine,
    script: Arc<str>,
    timeout: Duration,
) -> Result<Meta, DescribeError> {
    tokio::time::timeout(timeout, engine.describe(script))
        .await
        .map_err(|_| DescribeError::TimedOut(timeout))?
        .map_err(DescribeError::Meta)
}

/// A graph file already read and described (the one `runner run` runs): loading its folder
/// takes this description instead of evaluating the file a second time.
#[derive(Debug, Clone)]
pub struct Described {
    /// The file.
    pub path: PathBuf,
    /// Its text as described (empty for a built component, which this does not cover).
    pub script: Arc<str>,
    /// Its meta, or why it has none.
    pub meta: Result<Meta, DescribeError>,
}

impl Described {
    /// The graph a folder load reads from `path`, when it is this one: a script at the same
    /// file that still reads the same.
    fn reuse(&self, path: &Path) -> Option<Result<GraphSource, GraphFileError>> {
        let script = (path.extension().is_some_and(|x| x == "js") || is_typescript(path))
            && !self.script.is_empty();
        let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        if !script || !same(&self.path, path) || read_script(path).ok()? != *self.script {
            return None;
        }
        let meta = self.meta.clone().map_err(GraphFileError::Describe);
        Some(meta.map(|meta| GraphSource {
            meta,
            script: self.script.clone(),
            file: Some(path.display().to_string().into()),
            engine: None,
        }))
    }
}

impl Catalog for FolderCatalog {
    fn lookup<'a>(&'a self, slug: &'a str) -> BoxFuture<'a, Result<GraphSource, Failure>> {
        Box::pin(std::future::ready(self.find(slug, "the catalog")))
    }
}

/// The graphs of a folder, read on the first nested call: a run that calls no other graph
/// never evaluates the folder's files, so a slow or hostile file beside the graph costs it
/// nothing. A run that does call one pays [`FolderCatalog::load`] once.
pub struct LazyFolderCatalog {
    dir: PathBuf,
    engine: Arc<dyn Engine>,
    timeout: Duration,
    loaded: tokio::sync::OnceCell<Result<FolderCatalog, CatalogError>>,
}

/// Why a catalog could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The graphs folder could not be listed.
    #[error("cannot read the graphs folder {dir}: {reason}")]
    Folder {
        /// The folder.
        dir: String,
        /// Why not.
        reason: std::io::Error,
    },
    /// Two graphs of the folder have the same slug.
    #[error("{first} and {second} both have the slug {slug}; give one of them another `meta.slug`")]
    DuplicateSlug {
        /// The slug.
        slug: String,
        /// The file read first.
        first: String,
        /// The other file.
        second: String,
    },
    /// One graph in two sources, `SLUG.js` and `SLUG.ts`: which one a nested call of `SLUG`
    /// runs must not be a guess.
    #[error(
        "{js} and {ts} are two sources of one graph; keep one of them (`g.graph` finds either)"
    )]
    TwoSources {
        /// The JavaScript file.
        js: String,
        /// The TypeScript file.
        ts: String,
    },
}

impl LazyFolderCatalog {
    /// A catalog of `dir`, described by `engine`, each file for at most `timeout`.
    pub fn new(dir: PathBuf, engine: Arc<dyn Engine>, timeout: Duration) -> Self {
        Self {
            dir,
            engine,
            timeout,
            loaded: tokio::sync::OnceCell::new(),
        }
    }

    async fn load(&self) -> Result<FolderCatalog, CatalogError> {
        let catalog = FolderCatalog::load(&self.dir, self.engine.as_ref(), self.timeout).await?;
        for (path, reason) in catalog.skipped() {
            tracing::debug!("not in the catalog: {}: {reason}", path.display());
        }
        Ok(catalog)
    }
}

impl Catalog for LazyFolderCatalog {
    fn lookup<'a>(&'a self, slug: &'a str) -> BoxFuture<'a, Result<GraphSource, Failure>> {
        Box::pin(async move {
            match self.loaded.get_or_init(|| self.load()).await {
                Ok(catalog) => {
                    let place = format!("the graphs folder {}", self.dir.display());
                    catalog
                        .find(slug, &place)
                        .map_err(|failure| match failure.code {
                            graph_js::FailureCode::NotFound => Failure::not_found(format!(
                                "{}; --graphs DIR names another folder",
                                failure.message
                            )),
                            _ => failure,
                        })
                }
                Err(e) => Err(Failure::failed(e.to_string())),
            }
        })
    }
}

/// Refuses a nested call that would go deeper than [`MAX_DEPTH`], naming the chain of slugs.
pub fn check_depth(chain: &[String], slug: &str) -> Result<(), Failure> {
    if chain.len() < MAX_DEPTH + 1 {
        return Ok(());
    }
    let path = chain_text(chain.iter().map(String::as_str).chain([slug]));
    let cycle = if chain.iter().any(|s| s == slug) {
        " (the graph calls itself: give the recursion a base case)"
    } else {
        ""
    };
    Err(Failure::failed(format!(
        "{NESTING_LIMIT} {MAX_DEPTH} reached{cycle}: {path}"
    )))
}

/// `a → b → b → b` as `a → b ×3`: a recursion's chain, short.
fn chain_text<'a>(slugs: impl Iterator<Item = &'a str>) -> String {
    let mut runs: Vec<(&str, usize)> = Vec::new();
    for slug in slugs {
        match runs.last_mut() {
            Some((last, count)) if *last == slug => *count += 1,
            _ => runs.push((slug, 1)),
        }
    }
    let named: Vec<String> = runs
        .into_iter()
        .map(|(slug, count)| match count {
            1 => slug.to_owned(),
            n => format!("{slug} ×{n}"),
        })
        .collect();
    named.join(" → ")
}

/// The start of [`check_depth`]'s refusal.
pub const NESTING_LIMIT: &str = "graph nesting limit of";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_and_its_build_are_one_graph_and_the_source_wins() {
        let pair = |a: &str, b: &str| build_pair(Path::new(a), Path::new(b));
        assert_eq!(pair("g/research.wasm", "g/research.js"), Some(true));
        assert_eq!(pair("g/research.js", "g/research.wasm"), Some(false));
        assert_eq!(pair("g/research.js", "g/other.wasm"), None, "two stems");
        assert_eq!(pair("g/a.js", "g/a.js"), None);
        assert_eq!(pair("g/a.wasm", "h/a.js"), None, "two folders");
    }

    #[test]
    fn depth_is_checked_against_the_chain() {
        let chain: Vec<String> = (0..=MAX_DEPTH).map(|i| format!("g{i}")).collect();
        assert!(
            check_depth(&chain[..MAX_DEPTH], "x").is_ok(),
            "depth 8 is allowed"
        );
        let err = check_depth(&chain, "x").unwrap_err();
        assert!(err.message.contains("nesting limit of 8"), "{err}");
        let selfish = vec!["loop".to_owned(); MAX_DEPTH + 1];
        let err = check_depth(&selfish, "loop").unwrap_err();
        assert!(err.message.contains("calls itself"), "{err}");
        assert!(err.message.ends_with(": loop ×10"), "{err}");
        let mixed = ["top", "a", "b", "b"].map(str::to_owned);
        assert_eq!(
            chain_text(mixed.iter().map(String::as_str).chain(["b"])),
            "top → a → b ×3"
        );
    }

    /// The real engine, counting the graphs it describes.
    #[derive(Default)]
    struct Counting(
        crate::engine::boa::BoaEngine,
        std::sync::atomic::AtomicUsize,
    );

    impl Engine for Counting {
        fn name(&self) -> &'static str {
            "boa"
        }
        fn run(
            &self,
            script: Arc<str>,
            args: String,
            invocation: super::super::Invocation,
        ) -> BoxFuture<'static, Result<String, super::super::engine::EngineError>> {
            self.0.run(script, args, invocation)
        }
        fn describe(&self, script: Arc<str>) -> BoxFuture<'static, Result<Meta, MetaError>> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.0.describe(script)
        }
    }

    /// `runner run` has described the graph it runs: loading the graph's folder takes that
    /// description instead of evaluating the file again, as long as the file still reads the
    /// same; the other files are described as before.
    #[tokio::test]
    async fn a_folder_load_takes_the_description_of_the_graph_being_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let graph = |slug: &str| {
            format!(
                "export const meta = {{name: '{slug}', slug: '{slug}', version: '1'}};\nexport default async function () {{ return 1; }}"
            )
        };
        let (run, other) = (dir.path().join("run.js"), dir.path().join("other.js"));
        std::fs::write(&run, graph("run")).expect("run.js");
        std::fs::write(&other, graph("other")).expect("other.js");
        let engine = Counting::default();
        let script: Arc<str> = graph("run").into();
        let meta = engine.describe(script.clone()).await.expect("meta");
        let described = |meta: Result<Meta, DescribeError>| Described {
            path: dir.path().join(".").join("run.js"),
            script: script.clone(),
            meta,
        };
        let count = || engine.1.load(std::sync::atomic::Ordering::SeqCst);
        let (folder, counting) = (dir.path(), &engine);
        let load = move |known: Described| async move {
            FolderCatalog::load_knowing(folder, counting, DESCRIBE_TIMEOUT, Some(&known))
                .await
                .expect("loads")
        };
        let catalog = load(described(Ok(meta.clone()))).await;
        assert_eq!(catalog.slugs().collect::<Vec<_>>(), ["other", "run"]);
        assert_eq!(count(), 2, "run.js was described once, other.js once");
        // Why the graph has no meta is the folder's reason to skip it.
        let catalog = load(described(Err(MetaError::Missing.into()))).await;
        assert_eq!(catalog.slugs().collect::<Vec<_>>(), ["other"]);
        assert_eq!(
            catalog.skipped()[0].1.to_string(),
            MetaError::Missing.to_string()
        );
        assert_eq!(count(), 3);
        // A file that changed since is described again.
        std::fs::write(&run, graph("renamed")).expect("run.js");
        let catalog = load(described(Ok(meta))).await;
        assert_eq!(catalog.slugs().collect::<Vec<_>>(), ["other", "renamed"]);
        assert_eq!(count(), 5);
    }
}
