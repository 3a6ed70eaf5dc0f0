//! The sandbox: boa compiled to a WebAssembly component (`runner/guest`) under wasmtime.
//!
//! What it contains, each surfacing as `failed` with an error that names the limit: a
//! wall-clock deadline and outside cancellation (epoch interruption, checked every
//! [`EPOCH_TICK`]), an optional deterministic instruction budget (fuel), a linear-memory cap
//! and a wasm stack cap. The component imports only `wasi:io`, `wasi:clocks`, `wasi:random`,
//! `wasi:cli` (empty environment, no arguments, empty stdin, bounded stdout/stderr captured into
//! the trace) and the graph's `host` interface; no filesystem or sockets are linked at all.
//!
//! Compiling the guest takes seconds, so compiled artifacts are cached on disk (keyed by the
//! guest's hash and the engine's compatibility hash, checked with a checksum) and in memory.
//!
//! One job per file: `limits` holds the sandbox's limits and the wasmtime settings
//! they become; `bindings` the guest component and its glue to the host interface; `instance`
//! one instance's store (limits applied, traps described); `cache` the compiled-component disk
//! cache; `snapshot` pre-initialization with wizer (the generic guest's snapshot and `runner
//! build`). This file loads components and implements [`Engine`].

mod bindings;
mod cache;
mod instance;
mod limits;
mod snapshot;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use graph_js::{FailureCode, Meta, MetaError};
use sha2::Digest;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{AsContextMut, Store};

use crate::host::Invocation;
use crate::host::approvals::BoxFuture;
use crate::host::engine::{Engine, EngineError};
use bindings::{Graph, GraphPre, HostState, link_wasi};
use cache::compile_cached;
use instance::{count_fuel, describe_invocation, describe_trap};
use limits::{new_engine, new_engine_configured};
use snapshot::{blank_key, build_blank};

pub use bindings::{GUEST_SHA256, GUEST_WASM};
pub use cache::{CACHE_MAX_AGE, Source, default_cache_dir};
pub use limits::{
    DEFAULT_MEMORY_BYTES, DEFAULT_WASM_STACK_BYTES, EPOCH_TICK, MAX_CAPTURED_OUTPUT_BYTES,
    MAX_TABLE_ELEMENTS, RUN_MEMORY_FACTOR, WasmLimits,
};
pub use snapshot::{BUILD_DEADLINE, BuildError, build_component};

pub use crate::host::graphs::MAX_COMPONENT_BYTES;
/// `describe` of an untrusted script gets at most this long.
pub const DESCRIBE_DEADLINE: Duration = Duration::from_secs(10);

/// Why the sandbox could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum WasmError {
    /// wasmtime refused the configuration or the component.
    #[error("cannot set up the wasm sandbox: {0}")]
    Setup(String),
}

fn setup(e: impl std::fmt::Display) -> WasmError {
    WasmError::Setup(format!("{e:#}"))
}

/// A compiled component ready to instantiate, with the engine it belongs to.
struct Loaded {
    engine: wasmtime::Engine,
    pre: GraphPre<HostState>,
}

/// What splits the in-memory component cache: the component's hash, whether fuel is on, and
/// the wasm stack size.
type LoadKey = (String, bool, usize);

/// The wasm engine: one compiled component (the generic guest, or a compiled graph).
#[derive(Clone)]
pub struct WasmEngine {
    loaded: Arc<Loaded>,
    limits: WasmLimits,
}

impl WasmEngine {
    /// The generic guest with `limits`, pre-initialized (see [`Self::generic_uncached`]) and
    /// cached in memory and on disk.
    pub fn new(limits: WasmLimits) -> Result<Self, WasmError> {
        let cache_dir = default_cache_dir();
        let blank = blank_key();
        let loaded = Self::load_with(&blank, limits, cache_dir.as_deref(), &mut build_blank);
        match loaded {
            Ok((engine, _)) => Ok(engine),
            Err(e) => {
                tracing::warn!(
                    "cannot pre-initialize the generic guest ({e}); runs start without the snapshot"
                );
                Self::load(GUEST_WASM, GUEST_SHA256, limits, cache_dir.as_deref()).map(|(e, _)| e)
            }
        }
    }

    /// The generic guest pre-initialized with wizer: boa's intrinsics created and the prelude
    /// evaluated in the snapshot, so a run only parses and evaluates its own script. Never from
    /// or into this process's memory; from the cache in `cache_dir` or built now (a snapshot
    /// and two compilations: seconds). For measuring start-up.
    pub fn generic_uncached(
        limits: WasmLimits,
        cache_dir: Option<&Path>,
    ) -> Result<(Self, Source), WasmError> {
        Self::load_uncached_with(&blank_key(), limits, cache_dir, &mut build_blank)
    }

    /// A component (`runner build` output) with `limits`.
    pub fn for_component(bytes: &[u8], limits: WasmLimits) -> Result<Self, WasmError> {
        let hash = hex(&sha2::Sha256::digest(bytes));
        Self::load(bytes, &hash, limits, default_cache_dir().as_deref()).map(|(e, _)| e)
    }

    /// Like [`Self::for_component`], but outside this process's map of loaded components
    /// (compiled, or read from the disk cache): for callers that keep their own engines and
    /// free them (the desktop relay's compiled graphs).
    pub fn for_component_uncached(bytes: &[u8], limits: WasmLimits) -> Result<Self, WasmError> {
        let hash = hex(&sha2::Sha256::digest(bytes));
        Self::load_uncached(bytes, &hash, limits, default_cache_dir().as_deref()).map(|(e, _)| e)
    }

    /// Loads `bytes` (whose SHA-256 is `hash`), from memory, the cache in `cache_dir`, or by
    /// compiling, and says which.
    pub fn load(
        bytes: &[u8],
        hash: &str,
        limits: WasmLimits,
        cache_dir: Option<&Path>,
    ) -> Result<(Self, Source), WasmError> {
        Self::load_with(hash, limits, cache_dir, &mut || Ok(bytes.to_vec()))
    }

    /// Like [`Self::load`], with the component's bytes produced only when they must be compiled.
    fn load_with(
        hash: &str,
        limits: WasmLimits,
        cache_dir: Option<&Path>,
        bytes: &mut dyn FnMut() -> Result<Vec<u8>, WasmError>,
    ) -> Result<(Self, Source), WasmError> {
        static LOADED: OnceLock<Mutex<HashMap<LoadKey, Arc<Loaded>>>> = OnceLock::new();
        // One load at a time: threads asking for the same component at once wait for the first
        // instead of each compiling it (seconds of CPU each).
        static LOADING: Mutex<()> = Mutex::new(());
        // Fuel changes the compiled code and the stack size is an engine setting; the memory cap
        // is applied per store, so it does not split the cache.
        let key = (
            hash.to_owned(),
            limits.fuel.is_some(),
            limits.wasm_stack_bytes,
        );
        let loaded_map = LOADED.get_or_init(Default::default);
        let found = |map: &Mutex<HashMap<LoadKey, Arc<Loaded>>>| {
            lock(map).get(&key).map(|loaded| Self {
                loaded: loaded.clone(),
                limits,
            })
        };
        if let Some(engine) = found(loaded_map) {
            return Ok((engine, Source::Memory));
        }
        let _loading = lock(&LOADING);
        if let Some(engine) = found(loaded_map) {
            return Ok((engine, Source::Memory));
        }
        let (engine, source) = Self::load_uncached_with(hash, limits, cache_dir, bytes)?;
        lock(loaded_map).insert(key, engine.loaded.clone());
        Ok((engine, source))
    }

    /// Like [`Self::load`], but never from or into this process's memory: the component comes
    /// from the cache in `cache_dir` or is compiled. For measuring start-up, and for callers
    /// that keep their own engines.
    pub fn load_uncached(
        bytes: &[u8],
        hash: &str,
        limits: WasmLimits,
        cache_dir: Option<&Path>,
    ) -> Result<(Self, Source), WasmError> {
        Self::load_uncached_with(hash, limits, cache_dir, &mut || Ok(bytes.to_vec()))
    }

    /// Like [`Self::load_uncached`] with no cache, compiled by an engine whose wasmtime settings
    /// `configure` changes after the production ones. Only for benchmarks that compare engine
    /// settings side by side (`BENCH_VARIANTS` in `benches/sandbox.rs`); runs never use it.
    #[doc(hidden)]
    pub fn load_uncached_configured(
        bytes: &[u8],
        limits: WasmLimits,
        configure: &dyn Fn(&mut wasmtime::Config),
    ) -> Result<Self, WasmError> {
        let engine = new_engine_configured(limits, configure)?;
        Self::loaded(engine, limits, "bench-configured", None, &mut || {
            Ok(bytes.to_vec())
        })
        .map(|(engine, _)| engine)
    }

    fn load_uncached_with(
        hash: &str,
        limits: WasmLimits,
        cache_dir: Option<&Path>,
        bytes: &mut dyn FnMut() -> Result<Vec<u8>, WasmError>,
    ) -> Result<(Self, Source), WasmError> {
        Self::loaded(new_engine(limits)?, limits, hash, cache_dir, bytes)
    }

    /// The component compiled (or loaded from `cache_dir`) and linked in `engine`.
    fn loaded(
        engine: wasmtime::Engine,
        limits: WasmLimits,
        hash: &str,
        cache_dir: Option<&Path>,
        bytes: &mut dyn FnMut() -> Result<Vec<u8>, WasmError>,
    ) -> Result<(Self, Source), WasmError> {
        let (component, source) = compile_cached(&engine, hash, cache_dir, bytes)?;
        let mut linker = Linker::<HostState>::new(&engine);
        link_wasi(&mut linker).map_err(setup)?;
        Graph::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)
            .map_err(setup)?;
        let pre =
            GraphPre::new(linker.instantiate_pre(&component).map_err(setup)?).map_err(setup)?;
        let loaded = Arc::new(Loaded { engine, pre });
        Ok((Self { loaded, limits }, source))
    }

    /// The wasmtime engine (for `runner build`).
    pub fn wasmtime(&self) -> &wasmtime::Engine {
        &self.loaded.engine
    }

    /// The limits runs get.
    pub fn limits(&self) -> WasmLimits {
        self.limits
    }

    async fn call<R>(
        &self,
        invocation: Invocation,
        call: impl AsyncFnOnce(&Graph, &mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<R, EngineError> {
        let mut store = self.new_store(invocation)?;
        let instance = match self.loaded.pre.instantiate_async(&mut store).await {
            Ok(instance) => instance,
            Err(e) => {
                // Counting cannot fail here: the store was given fuel when it was made.
                let _ = count_fuel(store.as_context_mut());
                return Err(EngineError::Sandbox(describe_trap(&e, &store, self.limits)));
            }
        };
        let outcome = call(&instance, &mut store).await;
        let _ = count_fuel(store.as_context_mut());
        store.data().flush_output();
        outcome.map_err(|e| EngineError::Sandbox(describe_trap(&e, &store, self.limits)))
    }

    fn new_store(&self, invocation: Invocation) -> Result<Store<HostState>, EngineError> {
        instance::new_store(&self.loaded.engine, self.limits, invocation)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Engine for WasmEngine {
    fn name(&self) -> &'static str {
        "wasm"
    }

    fn run(
        &self,
        script: Arc<str>,
        args: String,
        invocation: Invocation,
    ) -> BoxFuture<'static, Result<String, EngineError>> {
        let engine = self.clone();
        Box::pin(async move {
            engine
                .call(invocation, async |graph, store| {
                    graph.call_run(store, &script, &args).await
                })
                .await?
                .map_err(EngineError::Graph)
        })
    }

    fn describe(&self, script: Arc<str>) -> BoxFuture<'static, Result<Meta, MetaError>> {
        let engine = self.clone();
        Box::pin(async move {
            let invocation = describe_invocation();
            let run = invocation.run().clone();
            let call = engine.call(invocation, async |graph, store| {
                graph.call_describe(store, &script).await
            });
            let described = tokio::select! {
                described = call => described,
                () = tokio::time::sleep(DESCRIBE_DEADLINE) => {
                    run.stop(FailureCode::Failed, "describe took too long");
                    Err(EngineError::Sandbox(format!("reading the graph's meta took longer than {} s", DESCRIBE_DEADLINE.as_secs())))
                }
            };
            let json = described
                .map_err(|e| MetaError::Script(e.to_string()))?
                .map_err(guest_meta_error)?;
            let value: serde_json::Value =
                serde_json::from_str(&json).map_err(|e| MetaError::Invalid(e.to_string()))?;
            Meta::from_json(value).and_then(crate::args::checked)
        })
    }

    fn for_component(&self, bytes: &[u8]) -> Result<Arc<dyn Engine>, String> {
        Self::for_component(bytes, self.limits)
            .map(|engine| Arc::new(engine) as Arc<dyn Engine>)
            .map_err(|e| e.to_string())
    }
}

/// The guest reports a meta error as text; one about `meta.args` keeps its kind, so
/// `runner run` refuses it as it does in the boa engine.
fn guest_meta_error(message: String) -> MetaError {
    match message.strip_prefix("invalid meta: meta.args") {
        Some(rest) => MetaError::Args(format!("meta.args{rest}")),
        None => MetaError::Script(message),
    }
}
