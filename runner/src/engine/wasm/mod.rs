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
//! guest's hash and the engine's compatibility hash, checked with a checksum) and in memory, in
//! a [`ComponentCache`] its caller owns; all components compiled for one configuration share
//! one wasmtime engine, and one thread ticks every engine's epoch.
//!
//! One job per file: `limits` holds the sandbox's limits; `engines` the wasmtime engines (one
//! per configuration) and their epoch ticker; `bindings` the guest component and its glue to
//! the host interface; `instance` one instance's store (limits applied, traps described);
//! `cache` the compiled-component disk cache; `components` the in-memory cache; `snapshot`
//! pre-initialization with wizer (the generic guest's snapshot and `runner build`); `probe` the
//! start figures the sandbox bench reads. This file loads components and implements
//! [`Engine`].

mod bindings;
mod cache;
mod components;
mod engines;
mod instance;
mod limits;
#[doc(hidden)]
pub mod probe;
mod snapshot;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use graph_js::{FailureCode, Meta, MetaError};
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{AsContextMut, Store};

use crate::host::Invocation;
use crate::host::approvals::BoxFuture;
use crate::host::engine::{ComponentError, Engine, EngineError};
use bindings::{Graph, GraphPre, HostState, link_wasi};
use cache::compile_cached;
use instance::{count_fuel, describe_invocation, describe_trap};

pub use bindings::{GUEST_SHA256, GUEST_WASM};
pub use cache::{CACHE_MAX_AGE, Source, default_cache_dir};
pub use components::{ComponentCache, DEFAULT_MAX_COMPONENTS};
pub use engines::{POOL_VARIABLE, pooling};
pub use limits::{
    DEFAULT_MEMORY_BYTES, DEFAULT_WASM_STACK_BYTES, EPOCH_TICK, MAX_CAPTURED_OUTPUT_BYTES,
    MAX_TABLE_ELEMENTS, POOL_KEEP_RESIDENT_BYTES, POOL_KEEP_RESIDENT_SCANNED_BYTES, POOL_SANDBOXES,
    RUN_MEMORY_FACTOR, WasmLimits,
};
pub use snapshot::{BUILD_DEADLINE, BuildError, build_component};

pub use crate::host::graphs::MAX_COMPONENT_BYTES;
/// `describe` of an untrusted script gets at most this long.
pub const DESCRIBE_DEADLINE: Duration = Duration::from_secs(10);

/// Why the sandbox could not be set up.
#[derive(Debug, Clone, thiserror::Error)]
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

impl Loaded {
    /// The component compiled (or loaded from the disk cache in `cache_dir`) and linked in
    /// `engine`, and where it came from.
    fn compile(
        engine: wasmtime::Engine,
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
        Ok((Self { engine, pre }, source))
    }
}

/// The wasm engine: one compiled component (the generic guest, or a compiled graph), from the
/// [`ComponentCache`] that made it.
#[derive(Clone)]
pub struct WasmEngine {
    loaded: Arc<Loaded>,
    limits: WasmLimits,
    /// Where the built components it is asked for ([`Engine::for_component`]) come from.
    cache: ComponentCache,
}

impl WasmEngine {
    /// The pre-initialized generic guest with `limits` (see [`ComponentCache::generic`]), from
    /// a cache of its own over the disk cache. Callers that make several engines share one
    /// [`ComponentCache`] instead.
    pub fn new(limits: WasmLimits) -> Result<Self, WasmError> {
        ComponentCache::new(DEFAULT_MAX_COMPONENTS).generic(limits)
    }

    fn of(loaded: Arc<Loaded>, limits: WasmLimits, cache: ComponentCache) -> Self {
        Self {
            loaded,
            limits,
            cache,
        }
    }

    /// `bytes` compiled by an engine of its own whose wasmtime settings `configure` changes
    /// after the production ones, in no cache. Only for benchmarks that compare engine settings
    /// side by side (`BENCH_VARIANTS` in `benches/sandbox.rs`); runs never use it.
    #[doc(hidden)]
    pub fn load_configured(
        bytes: &[u8],
        limits: WasmLimits,
        configure: &dyn Fn(&mut wasmtime::Config),
    ) -> Result<Self, WasmError> {
        let engine = engines::configured(limits, configure)?;
        let (loaded, _) =
            Loaded::compile(engine, "bench-configured", None, &mut || Ok(bytes.to_vec()))?;
        let cache = ComponentCache::with_disk_cache(1, None);
        Ok(Self::of(Arc::new(loaded), limits, cache))
    }

    /// The generic guest's pre-initialized snapshot, built now (seconds). Only for benchmarks
    /// that load it under other engine settings ([`Self::load_configured`]).
    #[doc(hidden)]
    pub fn generic_snapshot() -> Result<Vec<u8>, WasmError> {
        snapshot::build_blank()
    }

    /// [`Self::generic_snapshot`] of another build of the guest component (`guest`), for
    /// benchmarks that compare guest build settings.
    #[doc(hidden)]
    pub fn generic_snapshot_of(guest: &'static [u8]) -> Result<Vec<u8>, WasmError> {
        snapshot::build_blank_of(guest)
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
            Ok(instance) => {
                if let Some(starting) = store.data_mut().starting.as_mut() {
                    starting.instantiated();
                }
                instance
            }
            Err(e) if format!("{e:#}").contains("maximum concurrent limit") => {
                return Err(EngineError::Sandbox(format!(
                    "too many sandboxes at once: this process runs at most {POOL_SANDBOXES} \
                     graphs (top and nested) at the same time; wait for some to finish, or set \
                     {POOL_VARIABLE}=0 to start each without the pool ({e})"
                )));
            }
            Err(e) => {
                // Counting cannot fail here: the store was given fuel when it was made.
                let _ = count_fuel(store.as_context_mut());
                return Err(EngineError::Sandbox(describe_trap(&e, &store, self.limits)));
            }
        };
        let outcome = call(&instance, &mut store).await;
        let _ = count_fuel(store.as_context_mut());
        store.data_mut().flush_output();
        outcome.map_err(|e| EngineError::Sandbox(describe_trap(&e, &store, self.limits)))
    }

    fn new_store(&self, invocation: Invocation) -> Result<Store<HostState>, EngineError> {
        instance::new_store(&self.loaded.engine, self.limits, invocation)
    }
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

    fn for_component(&self, bytes: &[u8]) -> Result<Arc<dyn Engine>, ComponentError> {
        self.cache
            .component(bytes, self.limits)
            .map(|engine| Arc::new(engine) as Arc<dyn Engine>)
            .map_err(|e| ComponentError::Load(Box::new(e)))
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
