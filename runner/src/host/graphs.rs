//! Nested graphs: a catalog of graphs by slug, and the nesting limit. A nested graph shares its
//! caller's budget, approvals and cancellation (it runs inside the same run).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use graph_js::{Failure, Meta};

use super::approvals::BoxFuture;
use super::engine::Engine;
use crate::input::read_script;

/// Graphs may nest this deep (the top graph is depth 0).
pub const MAX_DEPTH: usize = 8;
/// At most this many nested graphs may be running at once in one run.
pub const MAX_LIVE_GRAPHS: usize = 64;
/// Reading one file's `meta` while loading a folder may take at most this long.
pub const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(10);

/// A graph the catalog can hand out.
#[derive(Debug, Clone)]
pub struct GraphSource {
    /// Its validated metadata.
    pub meta: Meta,
    /// The module text.
    pub script: Arc<str>,
    /// The file errors of its own code name (`graphs/research.js`); `SLUG.js` when `None`.
    pub file: Option<Arc<str>>,
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
    let known = if known.is_empty() {
        "it has no graphs".to_owned()
    } else {
        format!("it has {}", known.join(", "))
    };
    Failure::not_found(format!(
        "there is no graph with slug {slug} in {place} ({known})"
    ))
}

/// Graphs by slug, loaded from the `*.js` files of one folder.
#[derive(Debug, Default, Clone)]
pub struct FolderCatalog {
    graphs: BTreeMap<String, GraphSource>,
    skipped: Vec<(PathBuf, String)>,
}

impl FolderCatalog {
    /// Reads every `*.js` file in `dir` (not recursively) and indexes it by its `meta.slug`.
    /// Files that do not describe themselves are skipped and listed in [`Self::skipped`].
    ///
    /// Describing a file evaluates its module top-level code, and the folder usually holds the
    /// very graph about to run, untrusted. So it is described by `engine` (in the sandbox when
    /// that is the wasm engine), each file for at most `timeout`: a top-level memory bomb or
    /// endless loop only gets that file skipped. Evaluating it in-process, whatever engine the
    /// run uses, would let one hostile file in the folder abort or hang `runner run`.
    ///
    /// Two files with one slug are an error naming both: which one a nested call would get
    /// must not depend on the order of a folder listing.
    pub async fn load(
        dir: &Path,
        engine: &dyn Engine,
        timeout: Duration,
    ) -> Result<Self, CatalogError> {
        let mut catalog = Self::default();
        let listing = std::fs::read_dir(dir).map_err(|reason| CatalogError::Folder {
            dir: dir.display().to_string(),
            reason,
        })?;
        let mut files: Vec<PathBuf> = listing
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "js") && p.is_file())
            .collect();
        files.sort();
        for path in files {
            let script: Arc<str> = match read_script(&path) {
                Ok(s) => s.into(),
                Err(e) => {
                    catalog.skipped.push((path, e.to_string()));
                    continue;
                }
            };
            let described =
                match tokio::time::timeout(timeout, engine.describe(script.clone())).await {
                    Ok(described) => described.map_err(|e| e.to_string()),
                    Err(_) => Err(format!(
                        "reading its meta took longer than {} s",
                        timeout.as_secs_f64()
                    )),
                };
            match described {
                Ok(meta) => match catalog.graphs.entry(meta.slug.clone()) {
                    std::collections::btree_map::Entry::Occupied(taken) => {
                        return Err(CatalogError::DuplicateSlug {
                            slug: taken.key().clone(),
                            first: taken.get().file.as_deref().unwrap_or_default().to_owned(),
                            second: path.display().to_string(),
                        });
                    }
                    std::collections::btree_map::Entry::Vacant(slot) => {
                        let file = Some(path.display().to_string().into());
                        slot.insert(GraphSource { meta, script, file });
                    }
                },
                Err(e) => catalog.skipped.push((path, e)),
            }
        }
        Ok(catalog)
    }

    /// Adds one graph.
    pub fn insert(&mut self, source: GraphSource) {
        self.graphs.insert(source.meta.slug.clone(), source);
    }

    /// Files that were not loaded, with the reason.
    pub fn skipped(&self) -> &[(PathBuf, String)] {
        &self.skipped
    }

    /// The slugs available.
    pub fn slugs(&self) -> impl Iterator<Item = &str> {
        self.graphs.keys().map(String::as_str)
    }

    /// The graph with `slug`, or `not_found` naming `place` and the slugs there are.
    fn find(&self, slug: &str, place: &str) -> Result<GraphSource, Failure> {
        self.graphs.get(slug).cloned().ok_or_else(|| {
            let known: Vec<&str> = self.slugs().collect();
            not_found(slug, place, &known)
        })
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
                    catalog.find(slug, &place).map_err(|failure| {
                        Failure::not_found(format!(
                            "{}; --graphs DIR names another folder",
                            failure.message
                        ))
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
    let mut path = chain.join(" → ");
    path.push_str(" → ");
    path.push_str(slug);
    let cycle = if chain.iter().any(|s| s == slug) {
        " (the graph calls itself: give the recursion a base case)"
    } else {
        ""
    };
    Err(Failure::failed(format!(
        "graph nesting limit of {MAX_DEPTH} reached{cycle}: {path}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
