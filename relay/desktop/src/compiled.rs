//! Compiled graphs: every graph session shared with an enabled project is compiled into a
//! component of its own (what `runner build` makes: the sandbox snapshotted with the graph
//! parsed and its top-level code evaluated), so a remote run starts from that snapshot instead
//! of parsing and evaluating the script each time.
//!
//! Artifacts live in a folder beside the desktop state (`<state>.compiled/`), one file per
//! graph version, named by a SHA-256 over what decides its bytes ([`CompiledGraphs::key`]):
//! this crate's version, the sandbox guest's hash, the limits and the graph's code. A session
//! is compiled in the background (a blocking thread, one build at a time) when it is shared,
//! whenever its code changes (which the relay sees as a sharing change), and when the relay
//! starts (then mostly loaded from its file). A run never waits for a build: it starts from
//! the compiled graph of its exact code when that is ready, else on the generic engine, and
//! starts the build if none is under way; a changed graph's next run therefore runs its new
//! code, compiled as soon as the build is done (seconds). An artifact that cannot be loaded
//! (corrupt, truncated) is deleted and built again; one changed on disk is read again. A build
//! that fails (the graph's snapshot is too large, the folder cannot be written) is said once in
//! a WARN line, and that graph version runs on the generic engine. Artifacts no shared session
//! needs any more are removed.
//!
//! A run on a compiled graph names its engine `wasm-compiled` in the trace; nested graphs it
//! starts run on the generic engine as before. Since the top-level code ran when the graph was
//! compiled, it saw the clock and random source every top-level evaluation without a run sees
//! (the Unix epoch, a fixed sequence), as with `runner build`.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use graph_js::{Meta, MetaError};
use relay_protocol::text::hex;
use runner::engine::Engine;
use runner::engine::EngineError;
use runner::engine::wasm::{GUEST_SHA256, MAX_COMPONENT_BYTES, WasmEngine, WasmLimits};
use runner::host::Invocation;
use runner::host::approvals::BoxFuture;
use sha2::Digest;

/// Why a shared graph runs on the generic engine instead of its compiled graph. Each is said
/// once (a WARN line) and kept for [`CompiledGraphs::failure`]; that graph version is not
/// built again by this relay.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The artifacts' folder could not be made: free or fix the path beside the state file.
    #[error("cannot create the folder {}: {source}", dir.display())]
    Folder {
        /// The folder.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The build's own runtime could not start (the system refused a thread or a timer).
    #[error("cannot start the build: {0}")]
    Runtime(std::io::Error),
    /// `runner build` refused the graph (its top-level code failed, or the sandbox did).
    #[error("{0}")]
    Build(#[source] runner::engine::wasm::BuildError),
    /// The snapshot is above the components' size limit: its top-level code keeps too much
    /// in memory.
    #[error(
        "the compiled graph would be {} MiB, above the {} MiB a component may have (its top-level code keeps too much in memory)",
        bytes / (1024 * 1024),
        MAX_COMPONENT_BYTES / (1024 * 1024)
    )]
    TooLarge {
        /// Its size.
        bytes: u64,
    },
    /// The artifact could not be written (a full disk, permissions).
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The artifact.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a WebAssembly component (damaged, or not ours): it is deleted and built
    /// again.
    #[error("it is not a WebAssembly component")]
    NotAComponent,
    /// wasmtime could not load the component.
    #[error("{0}")]
    Load(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The build or load task ended before it finished (it panicked).
    #[error("the build stopped before it finished: {0}")]
    Stopped(String),
}

/// The name a run on a compiled graph gives its engine in the trace.
pub const COMPILED_ENGINE: &str = "wasm-compiled";

/// Changes when what goes into an artifact's name does.
const KEY_FORMAT: &str = "graphrelay compiled graph 1";

/// The artifacts' folder for the desktop state at `state`: `<state>.compiled`.
pub fn artifact_dir(state: &Path) -> PathBuf {
    let mut name = state.file_name().unwrap_or_default().to_os_string();
    name.push(".compiled");
    state.with_file_name(name)
}

/// A loaded artifact and what its file looked like when it was read.
struct Loaded {
    engine: WasmEngine,
    stamp: Option<Stamp>,
    /// When it was last used (a counter): the least recently used is dropped first.
    used: u64,
}

/// Most compiled graphs kept loaded at once: each holds its compiled code (about 20 MB). One
/// dropped is loaded again from its file (and wasmtime's cache) when a run needs it.
pub const MAX_LOADED: usize = 16;

/// Length and modification time of an artifact file: a file changed on disk is read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

fn stamp(path: &Path) -> Option<Stamp> {
    std::fs::metadata(path).ok().map(|m| Stamp {
        len: m.len(),
        modified: m.modified().ok(),
    })
}

/// The compiled graphs of one desktop: artifacts on disk, loaded ones in memory.
pub struct CompiledGraphs {
    dir: PathBuf,
    limits: WasmLimits,
    generic: Arc<dyn Engine>,
    /// Loaded artifacts by key.
    loaded: Mutex<HashMap<String, Loaded>>,
    /// Graph versions whose build failed in this process, with why: they run on the generic
    /// engine without trying again (the WARN line was said once).
    failed: Mutex<HashMap<String, Arc<CompileError>>>,
    /// Keys being loaded or built now: one task per key.
    building: Mutex<HashSet<String>>,
    /// Most loaded at once ([`MAX_LOADED`] unless set).
    max_loaded: usize,
    /// Counts uses, for `Loaded::used`.
    uses: std::sync::atomic::AtomicU64,
    /// One build or load at a time on the whole desktop: a build takes seconds of CPU, a load
    /// holds another compiled graph's code in memory.
    builds: tokio::sync::Semaphore,
}

impl std::fmt::Debug for CompiledGraphs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledGraphs")
            .field("dir", &self.dir)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A build's temporary file left behind by a relay stopped while it wrote (`.graphrelay-*.tmp`,
/// see `runner::output::replace_file`), older than an hour: no build takes that long.
fn is_leftover(name: &str, entry: &std::fs::DirEntry) -> bool {
    let hour_ago = runner::clock::wall_now().checked_sub(std::time::Duration::from_secs(3600));
    name.starts_with(".graphrelay-")
        && name.ends_with(".tmp")
        && entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|modified| hour_ago.is_some_and(|cutoff| modified < cutoff))
}

/// Whether `name` is an artifact's file name (`<64 hex>.wasm`).
fn is_artifact(name: &str) -> bool {
    name.strip_suffix(".wasm")
        .is_some_and(|stem| stem.len() == 64 && stem.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A compiled graph under way: its key leaves the set of builds under way when this is dropped.
struct Building {
    graphs: Arc<CompiledGraphs>,
    key: String,
}

impl Drop for Building {
    fn drop(&mut self) {
        lock(&self.graphs.building).remove(&self.key);
    }
}
impl CompiledGraphs {
    /// Compiled graphs kept in `dir`, built and run with `limits`; `generic` runs everything
    /// else (nested graphs, graphs whose build failed).
    pub fn new(dir: PathBuf, limits: WasmLimits, generic: Arc<dyn Engine>) -> Self {
        Self {
            dir,
            limits,
            generic,
            loaded: Mutex::default(),
            failed: Mutex::default(),
            building: Mutex::default(),
            max_loaded: MAX_LOADED,
            uses: Default::default(),
            builds: tokio::sync::Semaphore::new(1),
        }
    }

    /// The same, keeping at most `max_loaded` (at least 1) loaded at once.
    pub fn with_max_loaded(mut self, max_loaded: usize) -> Self {
        self.max_loaded = max_loaded.max(1);
        self
    }

    /// The artifacts' folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The name of `script`'s artifact: a SHA-256 over the key format, this crate's version,
    /// the guest's hash, the limits and the code.
    pub fn key(&self, script: &str) -> String {
        let mut hasher = sha2::Sha256::new();
        let limits = format!(
            "{}/{}/{:?}",
            self.limits.memory_bytes, self.limits.wasm_stack_bytes, self.limits.fuel
        );
        for part in [
            KEY_FORMAT,
            env!("CARGO_PKG_VERSION"),
            GUEST_SHA256,
            &limits,
            script,
        ] {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        hex(&hasher.finalize())
    }

    /// Where `script`'s artifact is (or will be).
    pub fn artifact(&self, script: &str) -> PathBuf {
        self.dir.join(format!("{}.wasm", self.key(script)))
    }

    /// The engine a run of `script` starts on now: its compiled graph when that is ready,
    /// else the generic engine (and the compiled graph is made ready in the background).
    pub fn engine_for(self: &Arc<Self>, script: &Arc<str>) -> Arc<dyn Engine> {
        let key = self.key(script);
        match self.ready_engine(&key) {
            Some(compiled) => Arc::new(CompiledEngine {
                compiled,
                script: script.clone(),
                generic: self.generic.clone(),
            }),
            None => {
                self.start(key, script.to_string());
                self.generic.clone()
            }
        }
    }

    /// Whether a run of `script` would start from its compiled graph now.
    pub fn ready(&self, script: &str) -> bool {
        self.ready_engine(&self.key(script)).is_some()
    }

    /// Why `script` could not be compiled, if its build failed.
    pub fn failure(&self, script: &str) -> Option<String> {
        lock(&self.failed)
            .get(&self.key(script))
            .map(|why| why.to_string())
    }

    /// The loaded compiled graph under `key`, while its file is unchanged.
    fn ready_engine(&self, key: &str) -> Option<WasmEngine> {
        let mut loaded = lock(&self.loaded);
        let found = loaded.get_mut(key)?;
        let fresh =
            found.stamp.is_none() || found.stamp == stamp(&self.dir.join(format!("{key}.wasm")));
        found.used = self.uses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        fresh.then(|| found.engine.clone())
    }

    /// Makes `script`'s compiled graph (under its `key`) ready in the background, unless that
    /// is under way or its build failed.
    fn start(self: &Arc<Self>, key: String, script: String) {
        if lock(&self.failed).contains_key(&key) || !lock(&self.building).insert(key.clone()) {
            return;
        }
        // Whatever ends the build (its end, a panic, the runtime shutting down), the key is no
        // longer under way, so a later run can start it again.
        let building = Building {
            graphs: self.clone(),
            key,
        };
        tokio::spawn(async move {
            let _ = building.graphs.ensure(&building.key, &script).await;
            drop(building);
        });
    }

    /// Makes the compiled graphs of `scripts` ready in the background (builds the missing
    /// ones, and loads existing ones while fewer than the most loaded at once are), and
    /// removes the artifacts no script among them needs.
    pub fn prepare(self: &Arc<Self>, scripts: Vec<String>) {
        let keyed: Vec<(String, String)> = scripts.into_iter().map(|s| (self.key(&s), s)).collect();
        let keep: HashSet<String> = keyed.iter().map(|(key, _)| key.clone()).collect();
        self.prune(&keep);
        for (key, script) in keyed {
            let room = lock(&self.loaded).len() < self.max_loaded;
            let built = || self.dir.join(format!("{key}.wasm")).is_file();
            if self.ready_engine(&key).is_none() && (room || !built()) {
                self.start(key, script);
            }
        }
    }

    /// Removes the artifacts (and drops the loaded ones) whose key is not in `keep`.
    fn prune(&self, keep: &HashSet<String>) {
        lock(&self.loaded).retain(|key, _| keep.contains(key));
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let needed = name.strip_suffix(".wasm").is_some_and(|k| keep.contains(k));
            if is_leftover(name, &entry) || (is_artifact(name) && !needed) {
                match std::fs::remove_file(entry.path()) {
                    Ok(()) => tracing::debug!(
                        artifact = name,
                        "removed a compiled graph no shared session needs"
                    ),
                    Err(e) => tracing::debug!(
                        artifact = name,
                        "cannot remove an unneeded compiled graph: {e}"
                    ),
                }
            }
        }
    }

    /// The loaded compiled graph of `script` (under its `key`): from memory while its file is
    /// unchanged, else read from its file, else built. `Err` says why it runs on the generic
    /// engine.
    async fn ensure(&self, key: &str, script: &str) -> Result<WasmEngine, Arc<CompileError>> {
        let path = self.dir.join(format!("{key}.wasm"));
        if let Some(engine) = self.ready_engine(key) {
            return Ok(engine);
        }
        if let Some(why) = lock(&self.failed).get(key) {
            return Err(why.clone());
        }
        let _build = self
            .builds
            .acquire()
            .await
            .map_err(|e| Arc::new(CompileError::Stopped(e.to_string())))?;
        if let Some(engine) = self.load_existing(&path).await {
            self.remember(key, &engine, &path);
            return Ok(engine);
        }
        let started = relay_protocol::clock::Stopwatch::start();
        match self.build(script, &path).await {
            Ok(engine) => {
                tracing::info!(artifact = %path.display(), seconds = started.elapsed().as_secs_f64(), "compiled a shared graph");
                self.remember(key, &engine, &path);
                Ok(engine)
            }
            Err(why) => {
                tracing::warn!(
                    artifact = %path.display(),
                    "cannot compile a shared graph, its runs start on the generic engine: {why}"
                );
                let why = Arc::new(why);
                lock(&self.failed).insert(key.to_owned(), why.clone());
                Err(why)
            }
        }
    }

    /// Keeps `engine` loaded as `key`'s, dropping the least recently used beyond the most
    /// loaded at once.
    fn remember(&self, key: &str, engine: &WasmEngine, path: &Path) {
        let used = self.uses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let entry = Loaded {
            engine: engine.clone(),
            stamp: stamp(path),
            used,
        };
        let mut loaded = lock(&self.loaded);
        loaded.insert(key.to_owned(), entry);
        while loaded.len() > self.max_loaded {
            let oldest = loaded
                .iter()
                .filter(|(k, _)| k.as_str() != key)
                .min_by_key(|(_, l)| l.used)
                .map(|(k, _)| k.clone());
            let Some(oldest) = oldest else { break };
            tracing::debug!(
                artifact = oldest,
                "dropping the least recently used compiled graph from memory"
            );
            loaded.remove(&oldest);
        }
    }

    /// The artifact at `path` loaded, if there is one; one that cannot be loaded is deleted
    /// (and then built again).
    async fn load_existing(&self, path: &Path) -> Option<WasmEngine> {
        let limits = self.limits;
        let file = path.to_path_buf();
        let loaded = tokio::task::spawn_blocking(move || {
            // Not there, or not readable: there is nothing to load, and a build replaces it.
            let bytes = std::fs::read(&file).ok()?;
            Some(load(&bytes, limits))
        })
        .await
        .unwrap_or_else(|e| Some(Err(CompileError::Stopped(e.to_string()))))?;
        match loaded {
            Ok(engine) => Some(engine),
            Err(why) => {
                tracing::warn!(artifact = %path.display(), "a compiled graph cannot be loaded, building it again: {why}");
                if let Err(e) = std::fs::remove_file(path)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!(artifact = %path.display(), "cannot remove the unloadable compiled graph: {e}");
                }
                None
            }
        }
    }

    /// Compiles `script` into the artifact at `path` and loads it, on a blocking thread.
    async fn build(&self, script: &str, path: &Path) -> Result<WasmEngine, CompileError> {
        create_private_dir(&self.dir).map_err(|source| CompileError::Folder {
            dir: self.dir.clone(),
            source,
        })?;
        let limits = self.limits;
        let script = script.to_owned();
        let path = path.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .map_err(CompileError::Runtime)?;
            let bytes = runtime
                .block_on(runner::engine::wasm::build_component(&script, limits))
                .map_err(CompileError::Build)?;
            if bytes.len() as u64 > MAX_COMPONENT_BYTES {
                return Err(CompileError::TooLarge {
                    bytes: bytes.len() as u64,
                });
            }
            runner::output::replace_file(&path, &bytes)
                .map_err(|source| CompileError::Write { path, source })?;
            load(&bytes, limits)
        })
        .await
        .unwrap_or_else(|e| Err(CompileError::Stopped(e.to_string())))
    }
}

/// An artifact's bytes loaded as an engine (compiled by wasmtime, or from its disk cache),
/// outside the process-wide component map: an artifact no session needs any more is freed.
fn load(bytes: &[u8], limits: WasmLimits) -> Result<WasmEngine, CompileError> {
    if !bytes.starts_with(runner::host::graphs::WASM_MAGIC) {
        return Err(CompileError::NotAComponent);
    }
    WasmEngine::for_component_uncached(bytes, limits).map_err(|e| CompileError::Load(e.into()))
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// A compiled graph as the run's engine: its own script runs from the snapshot; any other
/// script (a nested graph) runs on the generic engine.
struct CompiledEngine {
    compiled: WasmEngine,
    script: Arc<str>,
    generic: Arc<dyn Engine>,
}

impl Engine for CompiledEngine {
    fn name(&self) -> &'static str {
        COMPILED_ENGINE
    }

    fn run(
        &self,
        script: Arc<str>,
        args: String,
        invocation: Invocation,
    ) -> BoxFuture<'static, Result<String, EngineError>> {
        if script == self.script {
            // The graph is built into the component: its script argument stays empty.
            self.compiled.run("".into(), args, invocation)
        } else {
            self.generic.run(script, args, invocation)
        }
    }

    fn describe(&self, script: Arc<str>) -> BoxFuture<'static, Result<Meta, MetaError>> {
        if script == self.script {
            self.compiled.describe("".into())
        } else {
            self.generic.describe(script)
        }
    }

    fn for_component(&self, bytes: &[u8]) -> Result<Arc<dyn Engine>, String> {
        self.generic.for_component(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_artifacts_sit_beside_the_state_and_are_named_by_code_and_limits() {
        assert_eq!(
            artifact_dir(Path::new("/home/a/.local/share/graphrelay/desktop.db")),
            Path::new("/home/a/.local/share/graphrelay/desktop.db.compiled")
        );
        let generic: Arc<dyn Engine> = Arc::new(runner::engine::boa::BoaEngine::default());
        let graphs = CompiledGraphs::new("/x".into(), WasmLimits::default(), generic.clone());
        let key = graphs.key("export default () => 1");
        assert!(is_artifact(&format!("{key}.wasm")), "{key}");
        assert_eq!(key, graphs.key("export default () => 1"));
        assert_ne!(key, graphs.key("export default () => 2"));
        let tighter = WasmLimits {
            memory_bytes: 64 * 1024 * 1024,
            ..WasmLimits::default()
        };
        let other = CompiledGraphs::new("/x".into(), tighter, generic);
        assert_ne!(key, other.key("export default () => 1"));
        assert!(!is_artifact("notes.wasm"));
        assert!(!is_artifact(&format!("{key}.wasm.tmp")));
    }

    /// A build that never finishes (its task dropped with the runtime, as at shutdown, or
    /// after a panic) does not leave its graph marked as under way for good: the next run
    /// starts it again.
    #[test]
    fn a_build_that_ends_without_finishing_can_be_started_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let generic: Arc<dyn Engine> = Arc::new(runner::engine::boa::BoaEngine::default());
        let graphs = Arc::new(CompiledGraphs::new(
            dir.path().into(),
            WasmLimits::default(),
            generic,
        ));
        let script = "export const meta = {name: \"A\", slug: \"a\", version: \"1\"};\nexport default async () => 1;";
        let key = graphs.key(script);
        for _ in 0..2 {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                // Hold the one build slot, so the build waits for it and is still under way
                // when its runtime goes.
                let _slot = graphs.builds.acquire().await.expect("slot");
                graphs.start(key.clone(), script.to_owned());
                tokio::task::yield_now().await;
                assert!(lock(&graphs.building).contains(&key));
            });
            drop(runtime);
            assert!(
                lock(&graphs.building).is_empty(),
                "the dropped build still counts as under way"
            );
        }
        assert!(!dir.path().join(format!("{key}.wasm")).exists());
    }

    #[test]
    fn pruning_removes_unneeded_artifacts_and_old_leftovers_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let generic: Arc<dyn Engine> = Arc::new(runner::engine::boa::BoaEngine::default());
        let graphs = CompiledGraphs::new(dir.path().into(), WasmLimits::default(), generic);
        let (kept, gone) = (graphs.key("kept"), graphs.key("gone"));
        let write = |name: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, b"x").expect("write");
            path
        };
        write(&format!("{kept}.wasm"));
        write(&format!("{gone}.wasm"));
        write("notes.wasm");
        write(".graphrelay-1-0.tmp");
        let old = write(".graphrelay-1-1.tmp");
        let two_hours_ago = runner::clock::wall_now() - std::time::Duration::from_secs(7200);
        std::fs::File::options()
            .write(true)
            .open(&old)
            .and_then(|file| file.set_modified(two_hours_ago))
            .expect("age the leftover");
        graphs.prune(&HashSet::from([kept.clone()]));
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .expect("dir")
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        left.sort();
        let mut expected = vec![
            ".graphrelay-1-0.tmp".to_owned(),
            format!("{kept}.wasm"),
            "notes.wasm".to_owned(),
        ];
        expected.sort();
        assert_eq!(left, expected);
    }
}
