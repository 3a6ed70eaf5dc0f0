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

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use graph_js::{AgentRequest, Failure, FailureCode, Meta, MetaError};
use sha2::Digest;
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{AsContextMut, Config, Store, StoreContextMut, Trap, UpdateDeadline};
use wasmtime_wasi::p2::pipe::{ClosedInputStream, MemoryOutputPipe};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::host::engine::Engine;
use crate::host::Invocation;
use crate::host::approvals::BoxFuture;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "graph",
    imports: { default: async },
    exports: { default: async },
});

use graphrelay::graph::host as wit;

/// The guest component, built by `build.rs`.
pub const GUEST_WASM: &[u8] = include_bytes!(env!("GRAPH_GUEST_WASM"));
/// Its SHA-256, computed at build time.
pub const GUEST_SHA256: &str = env!("GRAPH_GUEST_SHA256");

/// Largest compiled graph (`runner build`) `runner run` reads: one is about 7 MB.
pub const MAX_COMPONENT_BYTES: u64 = 64 * 1024 * 1024;
/// How often the epoch advances: the granularity of deadlines and cancellation.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);
/// Default linear-memory cap.
pub const DEFAULT_MEMORY_BYTES: u64 = 256 * 1024 * 1024;
/// Default wasm stack cap (native stack used by wasm frames).
pub const DEFAULT_WASM_STACK_BYTES: usize = 16 * 1024 * 1024;
/// Guest stdout and stderr are each captured up to this many bytes.
pub const MAX_CAPTURED_OUTPUT_BYTES: usize = 64 * 1024;
/// `describe` of an untrusted script gets at most this long.
pub const DESCRIBE_DEADLINE: Duration = Duration::from_secs(10);
/// Tables (function references) may not grow past this many elements.
pub const MAX_TABLE_ELEMENTS: usize = 100_000;
/// All instances of one run together (the top graph and up to 64 nested graphs at once, each
/// under the per-instance cap) may hold at most this many times the per-instance memory cap.
/// Without it, a graph fanning out nested memory bombs holds 65 × the cap of host memory.
pub const RUN_MEMORY_FACTOR: u64 = 4;

/// Limits of the sandbox. Each has a safe default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WasmLimits {
    /// Linear-memory cap in bytes.
    pub memory_bytes: u64,
    /// Wasm stack cap in bytes.
    pub wasm_stack_bytes: usize,
    /// Deterministic instruction budget (wasmtime fuel) for a whole run, nested graphs
    /// included, if any.
    pub fuel: Option<u64>,
}

impl Default for WasmLimits {
    fn default() -> Self {
        Self {
            memory_bytes: DEFAULT_MEMORY_BYTES,
            wasm_stack_bytes: DEFAULT_WASM_STACK_BYTES,
            fuel: None,
        }
    }
}

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

/// Where compiled components are cached (`$GRAPHRELAY_CACHE_DIR`, else the user's cache dir).
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("GRAPHRELAY_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("graphrelay").join("wasm"))
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

/// How a component was obtained, for benchmarks and the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Already loaded in this process.
    Memory,
    /// Deserialized from the disk cache.
    Disk,
    /// Compiled now.
    Compiled,
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

    fn load_uncached_with(
        hash: &str,
        limits: WasmLimits,
        cache_dir: Option<&Path>,
        bytes: &mut dyn FnMut() -> Result<Vec<u8>, WasmError>,
    ) -> Result<(Self, Source), WasmError> {
        let engine = new_engine(limits)?;
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
    ) -> Result<R, String> {
        let mut store = self.new_store(invocation)?;
        let instance = match self.loaded.pre.instantiate_async(&mut store).await {
            Ok(instance) => instance,
            Err(e) => {
                // Counting cannot fail here: the store was given fuel when it was made.
                let _ = count_fuel(store.as_context_mut());
                return Err(describe_trap(&e, &store, self.limits));
            }
        };
        let outcome = call(&instance, &mut store).await;
        let _ = count_fuel(store.as_context_mut());
        store.data().flush_output();
        outcome.map_err(|e| describe_trap(&e, &store, self.limits))
    }

    fn new_store(&self, invocation: Invocation) -> Result<Store<HostState>, String> {
        new_store(&self.loaded.engine, self.limits, invocation)
    }
}

/// A store for one instance: its invocation, WASI, memory cap, fuel and epoch checks.
fn new_store(
    engine: &wasmtime::Engine,
    limits: WasmLimits,
    invocation: Invocation,
) -> Result<Store<HostState>, String> {
    let stdout = MemoryOutputPipe::new(MAX_CAPTURED_OUTPUT_BYTES);
    let stderr = MemoryOutputPipe::new(MAX_CAPTURED_OUTPUT_BYTES);
    let wasi = WasiCtx::builder()
        .stdin(ClosedInputStream)
        .stdout(stdout.clone())
        .stderr(stderr.clone())
        .build();
    let run = invocation.run().clone();
    let state = HostState {
        invocation,
        wasi,
        table: ResourceTable::new(),
        limiter: MemoryLimiter {
            memory_bytes: limits.memory_bytes,
            run,
            held: 0,
            hit: None,
        },
        stdout,
        stderr,
        fuel: limits.fuel.map(|budget| FuelShare { budget, seen: 0 }),
    };
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limiter);
    // The instance starts with what the run's other instances left of the budget.
    give_fuel(store.as_context_mut()).map_err(|e| format!("cannot set fuel: {e}"))?;
    // Every tick the guest yields to the executor and checks whether its run was stopped
    // (cancelled from outside, or past its deadline); the fuel it burned goes into the run's
    // count, and it stops once the run's budget is used up.
    store.epoch_deadline_callback(|mut context| {
        if context.data().invocation.run().stopped().is_some() {
            return Ok(UpdateDeadline::Interrupt);
        }
        if count_fuel(context.as_context_mut())? == Some(0) {
            return Err(Trap::OutOfFuel.into());
        }
        Ok(UpdateDeadline::Yield(1))
    });
    store.set_epoch_deadline(1);
    Ok(store)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn new_engine(limits: WasmLimits) -> Result<wasmtime::Engine, WasmError> {
    let mut config = Config::new();
    config
        .epoch_interruption(true)
        // boa calls through function tables all the time; tables filled at instantiation save
        // the lazy-init check on every indirect call: loops run about 5 % faster for about
        // 0.1 ms more per start (`cargo bench -p runner --bench sandbox`).
        .table_lazy_init(false)
        .consume_fuel(limits.fuel.is_some())
        .max_wasm_stack(limits.wasm_stack_bytes)
        // The fiber that runs wasm must hold the whole wasm stack plus host frames.
        .async_stack_size(limits.wasm_stack_bytes + 2 * 1024 * 1024);
    let engine = wasmtime::Engine::new(&config).map_err(setup)?;
    // Without the ticker no deadline, cancel or shared fuel budget would ever take effect.
    start_epoch_ticker(&engine)
        .map_err(|e| WasmError::Setup(format!("cannot start the epoch ticker thread: {e}")))?;
    Ok(engine)
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until the engine is dropped.
fn start_epoch_ticker(engine: &wasmtime::Engine) -> std::io::Result<()> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("wasm-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .map(drop)
}

/// Adds the WASI interfaces the guest may use: io, clocks, random and cli. Filesystem and
/// sockets are deliberately absent.
fn link_wasi(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    use wasmtime_wasi::cli::{WasiCli, WasiCliView};
    use wasmtime_wasi::p2::bindings::{cli, random};
    use wasmtime_wasi::random::WasiRandom;
    // io, both clocks, random, stdin, stdout and stderr.
    wasmtime_wasi::p2::add_to_linker_proxy_interfaces_async(linker)?;
    let l = linker;
    random::insecure::add_to_linker::<HostState, WasiRandom>(l, |s| s.wasi.random())?;
    random::insecure_seed::add_to_linker::<HostState, WasiRandom>(l, |s| s.wasi.random())?;
    cli::exit::add_to_linker::<HostState, WasiCli>(l, <HostState as WasiCliView>::cli)?;
    cli::environment::add_to_linker::<HostState, WasiCli>(l, <HostState as WasiCliView>::cli)?;
    cli::terminal_input::add_to_linker::<HostState, WasiCli>(l, <HostState as WasiCliView>::cli)?;
    cli::terminal_output::add_to_linker::<HostState, WasiCli>(l, <HostState as WasiCliView>::cli)?;
    cli::terminal_stdin::add_to_linker::<HostState, WasiCli>(l, <HostState as WasiCliView>::cli)?;
    cli::terminal_stdout::add_to_linker::<HostState, WasiCli>(l, <HostState as WasiCliView>::cli)?;
    cli::terminal_stderr::add_to_linker::<HostState, WasiCli>(l, <HostState as WasiCliView>::cli)?;
    Ok(())
}

/// Which memory cap was hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MemoryCap {
    /// This instance's own cap.
    Instance,
    /// The cap on all instances of the run together.
    Run,
}

/// Moves the fuel an instance burned since it last counted into its run's count and returns
/// what the run has left of its budget, or `None` when the run has no `--fuel`. Fails only if
/// the engine does not meter fuel.
///
/// An instance's own fuel is set once, when its store is made (see [`new_store`]): to what the
/// run has left then. It is never changed while wasm runs: code compiled by wasmtime keeps its
/// fuel count in a register across the epoch check and writes it back at its next call, so a
/// `set_fuel` from the epoch callback is silently undone. Instead the callback stops the
/// instance once the run's count reaches the budget. With one graph this changes nothing (it
/// burns exactly its budget); with nested graphs, which draw on the same budget, an instance
/// learns of its siblings' use at its next epoch tick, so the run can overshoot by at most one
/// [`EPOCH_TICK`] of work per running instance.
fn count_fuel(mut store: StoreContextMut<'_, HostState>) -> wasmtime::Result<Option<u64>> {
    use std::sync::atomic::Ordering;
    let Some((budget, seen)) = store.data().fuel.as_ref().map(|s| (s.budget, s.seen)) else {
        return Ok(None);
    };
    // Inside the epoch callback this may lag behind by what the running function has not
    // written back yet; that part is counted at the next count. It never rises while wasm
    // runs, so `seen` only falls.
    let left = store.get_fuel()?;
    let used = seen.saturating_sub(left);
    if let Some(share) = &mut store.data_mut().fuel {
        share.seen = left;
    }
    let spent = store
        .data()
        .invocation
        .run()
        .sandbox_fuel_spent
        .fetch_add(used, Ordering::SeqCst)
        .saturating_add(used);
    Ok(Some(budget.saturating_sub(spent)))
}

/// Gives a new store, before any of its wasm runs, what the run has left of its fuel budget.
fn give_fuel(mut store: StoreContextMut<'_, HostState>) -> wasmtime::Result<()> {
    if let Some(left) = count_fuel(store.as_context_mut())? {
        store.set_fuel(left)?;
        if let Some(share) = &mut store.data_mut().fuel {
            share.seen = left;
        }
    }
    Ok(())
}

/// An instance's draw on the run's fuel budget.
struct FuelShare {
    /// The run's whole budget (`--fuel`).
    budget: u64,
    /// The instance's fuel when it last counted (see [`count_fuel`]).
    seen: u64,
}

/// Caps linear memory (per instance, and summed over the run's instances) and tables, and
/// remembers which cap was hit.
struct MemoryLimiter {
    memory_bytes: u64,
    run: Arc<crate::host::RunShared>,
    /// What this instance holds of the run's sum; given back when the store is dropped.
    held: u64,
    hit: Option<MemoryCap>,
}

impl MemoryLimiter {
    fn run_cap(&self) -> u64 {
        self.memory_bytes.saturating_mul(RUN_MEMORY_FACTOR)
    }
}

impl Drop for MemoryLimiter {
    fn drop(&mut self) {
        self.run
            .sandbox_memory
            .fetch_sub(self.held, std::sync::atomic::Ordering::SeqCst);
    }
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        use std::sync::atomic::Ordering;
        if desired as u64 > self.memory_bytes {
            self.hit = Some(MemoryCap::Instance);
            return Err(wasmtime::format_err!("memory limit reached"));
        }
        let growth = desired.saturating_sub(current) as u64;
        let before = self.run.sandbox_memory.fetch_add(growth, Ordering::SeqCst);
        if before.saturating_add(growth) > self.run_cap() {
            self.run.sandbox_memory.fetch_sub(growth, Ordering::SeqCst);
            self.hit = Some(MemoryCap::Run);
            return Err(wasmtime::format_err!("run memory limit reached"));
        }
        self.held += growth;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// One instance's state: the graph's invocation, WASI, limits and captured output.
struct HostState {
    invocation: Invocation,
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: MemoryLimiter,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
    /// This instance's draw on the run's fuel, when `--fuel` is set.
    fuel: Option<FuelShare>,
}

impl HostState {
    /// Moves captured guest output into the trace.
    fn flush_output(&self) {
        for (stream, pipe) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let bytes = pipe.contents();
            if bytes.is_empty() {
                continue;
            }
            let text = String::from_utf8_lossy(&bytes);
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                self.invocation.log(&format!("guest {stream}: {line}"));
            }
        }
    }

    fn captured_stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.contents())
            .trim()
            .to_owned()
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

fn to_wit(failure: Failure) -> wit::Failure {
    match failure.code {
        FailureCode::BudgetExhausted => wit::Failure::BudgetExhausted(failure.message),
        FailureCode::Denied => wit::Failure::Denied(failure.message),
        FailureCode::Cancelled => wit::Failure::Cancelled(failure.message),
        FailureCode::NotFound => wit::Failure::NotFound(failure.message),
        FailureCode::Invalid => wit::Failure::Invalid(failure.message),
        FailureCode::Failed => wit::Failure::Failed(failure.message),
    }
}

impl wit::Host for HostState {
    async fn start_agent(&mut self, request: wit::AgentRequest) -> Result<u32, wit::Failure> {
        self.invocation
            .start_agent(AgentRequest {
                prompt: request.prompt,
                system: request.system,
                model: request.model,
                max_tokens: request.max_tokens,
                label: request.label,
                tools: request.tools,
                max_turns: request.max_turns,
            })
            .map_err(to_wit)
    }

    async fn start_tool(&mut self, name: String, args: String) -> Result<u32, wit::Failure> {
        self.invocation.start_tool(&name, &args).map_err(to_wit)
    }

    async fn start_graph(&mut self, slug: String, args: String) -> Result<u32, wit::Failure> {
        self.invocation.start_graph(&slug, &args).map_err(to_wit)
    }

    async fn start_sleep(&mut self, ms: u32) -> Result<u32, wit::Failure> {
        self.invocation.start_sleep(ms).map_err(to_wit)
    }

    async fn wait_any(&mut self, handles: Vec<u32>) -> (u32, Result<String, wit::Failure>) {
        let (handle, outcome) = self.invocation.wait_any(&handles).await;
        (handle, outcome.map_err(to_wit))
    }

    async fn tokens_used(&mut self) -> u64 {
        self.invocation.tokens_used()
    }

    async fn token_cap(&mut self) -> Option<u64> {
        self.invocation.token_cap()
    }

    async fn log(&mut self, message: String) {
        self.invocation.log(&message);
    }
}

/// Turns a trap into a sentence that names the limit.
fn describe_trap(error: &wasmtime::Error, store: &Store<HostState>, limits: WasmLimits) -> String {
    let state = store.data();
    if let Some(stopped) = state.invocation.run().stopped() {
        return stopped.to_string();
    }
    match state.limiter.hit {
        Some(MemoryCap::Instance) => {
            return format!(
                "memory limit exceeded: the graph tried to use more than {} MiB of memory",
                limits.memory_bytes / (1024 * 1024)
            );
        }
        Some(MemoryCap::Run) => {
            return format!(
                "memory limit exceeded: the run's graphs together tried to use more than {} MiB of memory",
                state.limiter.run_cap() / (1024 * 1024)
            );
        }
        None => {}
    }
    let aborted = || {
        let stderr = state.captured_stderr();
        if stderr.is_empty() {
            "the interpreter aborted".to_owned()
        } else {
            format!("the interpreter aborted: {stderr}")
        }
    };
    match error.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => format!(
            "instruction budget exhausted: the run used all {} units of fuel (--fuel; nested graphs draw on the same budget)",
            limits.fuel.unwrap_or(0)
        ),
        Some(Trap::StackOverflow) => format!(
            "wasm stack limit exceeded: the graph needed more than {} KiB of stack (too deep a recursion or nesting)",
            limits.wasm_stack_bytes / 1024
        ),
        Some(Trap::Interrupt) => "interrupted".to_owned(),
        // A single allocation past what wasm32 can address (`"x".repeat(2 ** 28)` asks for
        // gigabytes at once) panics before the memory cap is ever consulted; it is the same
        // limit as far as the graph is concerned.
        Some(Trap::UnreachableCodeReached) if allocation_refused(&state.captured_stderr()) => {
            format!(
                "memory limit exceeded: the graph asked for a single allocation larger than the sandbox can hold (the cap is {} MiB)",
                limits.memory_bytes / (1024 * 1024)
            )
        }
        Some(Trap::UnreachableCodeReached) => aborted(),
        Some(Trap::MemoryOutOfBounds) => {
            "the interpreter ran out of stack (too deep a recursion or nesting)".to_owned()
        }
        Some(other) => format!("the sandbox trapped: {other}"),
        None => format!("the sandbox failed: {error:#}"),
    }
}

/// Whether the guest's last words are Rust's report of an allocation it could not make.
fn allocation_refused(stderr: &str) -> bool {
    stderr.contains("capacity overflow") || stderr.contains("memory allocation of")
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
    ) -> BoxFuture<'static, Result<String, String>> {
        let engine = self.clone();
        Box::pin(async move {
            engine
                .call(invocation, async |graph, store| {
                    graph.call_run(store, &script, &args).await
                })
                .await?
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
                    Err(format!("reading the graph's meta took longer than {} s", DESCRIBE_DEADLINE.as_secs()))
                }
            };
            let json = described
                .map_err(MetaError::Script)?
                .map_err(MetaError::Script)?;
            let value: serde_json::Value =
                serde_json::from_str(&json).map_err(|e| MetaError::Invalid(e.to_string()))?;
            Meta::from_json(value)
        })
    }
}

/// An invocation with nothing behind it: `describe` never starts host work.
fn describe_invocation() -> Invocation {
    use crate::host::approvals::{ApprovalPolicy, Approvals, NobodyToAsk};
    use crate::host::events::{Events, NullSink};
    use crate::host::{RunParts, RunShared};
    let run = RunShared::new(RunParts {
        run_id: "describe".into(),
        token_cap: Some(0),
        approvals: Approvals::new(
            ApprovalPolicy::default(),
            Arc::new(NobodyToAsk),
            Duration::ZERO,
        ),
        provider: Arc::new(crate::host::agents::NoProvider),
        tools: Default::default(),
        catalog: Arc::new(crate::host::graphs::EmptyCatalog),
        events: Events::new(Arc::new(NullSink)),
        engine: Arc::new(super::boa::BoaEngine::default()),
        limits: Default::default(),
        max_concurrency: 1,
        cancel: Default::default(),
    });
    Invocation::new(
        run,
        vec!["describe".into()],
        tokio::runtime::Handle::current(),
    )
}

/// Magic and version of a serialized component, then its bytes, then a SHA-256 of those bytes.
const CACHE_MAGIC: &[u8; 8] = b"GRCWASM1";

fn cache_path(engine: &wasmtime::Engine, hash: &str, dir: &Path) -> PathBuf {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let settings = hasher.finish();
    dir.join(format!("{hash}-{settings:016x}.cwasm"))
}

/// A cached artifact, if there is a valid one: a truncated, corrupt or foreign file is a miss.
fn read_cache(engine: &wasmtime::Engine, path: &Path) -> Option<Component> {
    let bytes = std::fs::read(path).ok()?;
    let body = bytes.strip_prefix(CACHE_MAGIC.as_slice())?;
    let (payload, checksum) = body.split_at_checked(body.len().checked_sub(32)?)?;
    if sha2::Sha256::digest(payload).as_slice() != checksum {
        return None;
    }
    // SAFETY: the bytes were produced by `Component::serialize` of this same wasmtime build
    // (the file name carries the engine's compatibility hash) and are verified by checksum.
    let component = unsafe { Component::deserialize(engine, payload) }.ok()?;
    // Used now: pruning keeps it (see `prune_cache`).
    let _ = std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|file| file.set_modified(std::time::SystemTime::now()));
    Some(component)
}

/// Cached artifacts not used for this long are removed when a new one is written (every guest
/// or wasmtime upgrade, and every compiled graph, leaves one of 10–20 MB behind).
pub const CACHE_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);

/// Whether `name` is a cache entry this module wrote (`<hash>-<16 hex>.cwasm`), or one of its
/// temporary files (`.tmp…`, left behind by a crash mid-write).
fn is_cache_file(name: &str) -> bool {
    if name.starts_with(".tmp") {
        return true;
    }
    name.strip_suffix(".cwasm")
        .and_then(|stem| stem.rsplit_once('-'))
        .is_some_and(|(hash, settings)| {
            !hash.is_empty()
                && settings.len() == 16
                && settings.bytes().all(|b| b.is_ascii_hexdigit())
        })
}

/// Removes the cache entries in `dir` (and stray temporary files) last used before
/// `now - CACHE_MAX_AGE`. Files this module did not write are left alone; errors are ignored
/// (another process may be pruning too).
fn prune_cache(dir: &Path, now: std::time::SystemTime) {
    let Some(cutoff) = now.checked_sub(CACHE_MAX_AGE) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_cache_file(name) {
            continue;
        }
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|modified| modified < cutoff);
        if stale && entry.file_type().is_ok_and(|t| t.is_file()) {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => tracing::info!("removed the unused cached component {name}"),
                Err(e) => tracing::debug!("cannot remove {name} from the cache: {e}"),
            }
        }
    }
}

fn write_cache(path: &Path, serialized: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    use std::io::Write;
    tmp.write_all(CACHE_MAGIC)?;
    tmp.write_all(serialized)?;
    tmp.write_all(&sha2::Sha256::digest(serialized))?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

fn compile_cached(
    engine: &wasmtime::Engine,
    hash: &str,
    cache_dir: Option<&Path>,
    bytes: &mut dyn FnMut() -> Result<Vec<u8>, WasmError>,
) -> Result<(Component, Source), WasmError> {
    let path = cache_dir.map(|dir| cache_path(engine, hash, dir));
    if let Some(component) = path.as_deref().and_then(|p| read_cache(engine, p)) {
        return Ok((component, Source::Disk));
    }
    let bytes = bytes()?;
    tracing::info!("compiling the wasm component (a few seconds, cached afterwards)");
    let component = Component::new(engine, &bytes).map_err(setup)?;
    if let Some(path) = &path {
        match component.serialize() {
            Ok(serialized) => {
                if let Some(dir) = path.parent() {
                    prune_cache(dir, std::time::SystemTime::now());
                }
                if let Err(e) = write_cache(path, &serialized) {
                    tracing::warn!(
                        "cannot write the compiled component to {}: {e}",
                        path.display()
                    );
                }
            }
            Err(e) => tracing::warn!("cannot serialize the compiled component: {e}"),
        }
    }
    Ok((component, Source::Compiled))
}

/// Names the pre-initialized generic guest in the caches; the suffix changes when what the
/// snapshot holds does.
fn blank_key() -> String {
    format!("{GUEST_SHA256}-blank1")
}

/// The generic guest pre-initialized with an interpreter and no graph (`initialize("")`).
/// Built on a thread of its own with its own runtime, so it works from inside a runtime and
/// from none. The snapshot does not depend on the limits runs get, so it is always taken with
/// the defaults: a small `--fuel` or memory cap limits the graph, not the set-up before it.
fn build_blank() -> Result<Vec<u8>, WasmError> {
    let limits = WasmLimits::default();
    tracing::info!("pre-initializing the generic guest (seconds, once per machine)");
    let built = std::thread::Builder::new()
        .name("wasm-pre-init".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .map_err(setup)?;
            runtime
                .block_on(pre_initialize("", limits))
                .map_err(|e| WasmError::Setup(e.to_string()))
        })
        .map_err(setup)?
        .join();
    built.unwrap_or_else(|_| Err(WasmError::Setup("pre-initialization panicked".into())))
}

/// `runner build` may take this long to evaluate a graph's top-level code.
pub const BUILD_DEADLINE: Duration = Duration::from_secs(30);

/// Why a graph could not be compiled into its own component.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The sandbox could not be set up.
    #[error(transparent)]
    Setup(#[from] WasmError),
    /// The graph did not parse, failed at top level, or has no valid `meta`.
    #[error("{0}")]
    Graph(String),
    /// Pre-initialization (wizer) failed.
    #[error("cannot snapshot the initialized graph: {0}")]
    Snapshot(String),
}

/// Compiles `script` into a self-contained component: the guest, pre-initialized with wizer
/// after parsing, linking and evaluating the graph (its top-level code runs now, in the sandbox,
/// with the same limits and a [`BUILD_DEADLINE`]). The result exports the `graph` world (and
/// the unused `initialize`); its `run` and `describe` take an empty script for the graph built in.
pub async fn build_component(script: &str, limits: WasmLimits) -> Result<Vec<u8>, BuildError> {
    if script.trim().is_empty() {
        return Err(BuildError::Graph(
            "the graph is empty: a graph exports `meta` and a default function".into(),
        ));
    }
    pre_initialize(script, limits).await
}

/// The guest snapshotted after `initialize(script)`; an empty script leaves an interpreter with
/// the prelude evaluated and no graph.
async fn pre_initialize(script: &str, limits: WasmLimits) -> Result<Vec<u8>, BuildError> {
    use wasmtime_wizer::Wizer;
    let mut wizer = Wizer::new();
    // Keeping the export is required: wizer removes it from the core module, but the
    // component's lift of it would then dangle. The host never calls it after the build.
    wizer.init_func("initialize").keep_init_func(true);
    let (context, instrumented) = wizer
        .instrument_component(GUEST_WASM)
        .map_err(|e| BuildError::Snapshot(format!("{e:#}")))?;
    let engine = new_engine(limits)?;
    let component = Component::new(&engine, &instrumented).map_err(setup)?;
    let mut linker = Linker::<HostState>::new(&engine);
    link_wasi(&mut linker).map_err(setup)?;
    Graph::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)
        .map_err(setup)?;
    let invocation = describe_invocation();
    let run = invocation.run().clone();
    let mut store = new_store(&engine, limits, invocation).map_err(BuildError::Graph)?;
    let instance = linker
        .instantiate_async(&mut store, &component)
        .await
        .map_err(|e| BuildError::Graph(describe_trap(&e, &store, limits)))?;
    let initialize = instance
        .get_typed_func::<(&str,), (Result<(), String>,)>(&mut store, "initialize")
        .map_err(setup)?;
    let initialized = tokio::select! {
        called = initialize.call_async(&mut store, (script,)) => called,
        () = tokio::time::sleep(BUILD_DEADLINE) => {
            run.stop(FailureCode::Failed, format!("evaluating the graph took longer than {} s", BUILD_DEADLINE.as_secs()));
            return Err(BuildError::Graph(format!("evaluating the graph took longer than {} s", BUILD_DEADLINE.as_secs())));
        }
    };
    match initialized {
        Ok((Ok(()),)) => {}
        Ok((Err(message),)) => return Err(BuildError::Graph(message)),
        Err(trap) => return Err(BuildError::Graph(describe_trap(&trap, &store, limits))),
    }
    let mut state = SnapshotState {
        store: &mut store,
        instance,
        error: None,
    };
    let snapshot = wizer
        .snapshot_component(&context, &mut state)
        .await
        .map_err(|e| BuildError::Snapshot(format!("{e:#}")))?;
    if let Some(error) = state.error {
        return Err(BuildError::Snapshot(error));
    }
    Ok(snapshot)
}

/// Lets wizer read the initialized instance's memories and globals through the accessor
/// functions its instrumentation exported.
struct SnapshotState<'a> {
    store: &'a mut Store<HostState>,
    instance: wasmtime::component::Instance,
    error: Option<String>,
}

impl SnapshotState<'_> {
    async fn call<R>(&mut self, instance: &str, func: &str) -> Option<R>
    where
        R: wasmtime::component::ComponentType + wasmtime::component::Lift + Send + Sync + 'static,
    {
        let found = self
            .instance
            .get_export_index(&mut *self.store, None, instance)
            .and_then(|parent| {
                self.instance
                    .get_export_index(&mut *self.store, Some(&parent), func)
            });
        let Some(index) = found else {
            self.error.get_or_insert_with(|| {
                format!("the instrumented component lacks {instance}#{func}")
            });
            return None;
        };
        let typed = match self
            .instance
            .get_typed_func::<(), (R,)>(&mut *self.store, index)
        {
            Ok(typed) => typed,
            Err(e) => {
                self.error
                    .get_or_insert_with(|| format!("{instance}#{func}: {e:#}"));
                return None;
            }
        };
        match typed.call_async(&mut *self.store, ()).await {
            Ok((value,)) => Some(value),
            Err(e) => {
                self.error
                    .get_or_insert_with(|| format!("{instance}#{func}: {e:#}"));
                None
            }
        }
    }
}

impl wasmtime_wizer::ComponentInstanceState for SnapshotState<'_> {
    async fn call_func_ret_list_u8(
        &mut self,
        instance: &str,
        func: &str,
        contents: impl FnOnce(&[u8]) + Send,
    ) {
        match self
            .call::<wasmtime::component::WasmList<u8>>(instance, func)
            .await
        {
            Some(list) => contents(list.as_le_slice(&*self.store)),
            None => contents(&[]),
        }
    }

    async fn call_func_ret_s32(&mut self, instance: &str, func: &str) -> i32 {
        self.call::<i32>(instance, func).await.unwrap_or_default()
    }

    async fn call_func_ret_s64(&mut self, instance: &str, func: &str) -> i64 {
        self.call::<i64>(instance, func).await.unwrap_or_default()
    }

    async fn call_func_ret_f32(&mut self, instance: &str, func: &str) -> u32 {
        self.call::<f32>(instance, func)
            .await
            .map(f32::to_bits)
            .unwrap_or_default()
    }

    async fn call_func_ret_f64(&mut self, instance: &str, func: &str) -> u64 {
        self.call::<f64>(instance, func)
            .await
            .map(f64::to_bits)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aged(path: &Path, age: Duration) {
        std::fs::write(path, b"x").expect("write");
        let when = std::time::SystemTime::now() - age;
        std::fs::File::options()
            .write(true)
            .open(path)
            .and_then(|f| f.set_modified(when))
            .expect("set mtime");
    }

    #[test]
    fn pruning_removes_only_old_entries_this_cache_wrote() {
        let dir = tempfile::tempdir().expect("tempdir");
        let day = Duration::from_secs(24 * 3600);
        let old = format!("{}-0123456789abcdef.cwasm", "a".repeat(64));
        let old_blank = format!("{}-blank1-0123456789abcdef.cwasm", "b".repeat(64));
        let recent = format!("{}-0123456789abcdef.cwasm", "c".repeat(64));
        for (name, age) in [
            (old.as_str(), 40 * day),
            (old_blank.as_str(), 31 * day),
            (".tmpA1b2C3", 40 * day),
            (recent.as_str(), 29 * day),
            ("notes.cwasm", 400 * day),
            ("readme.txt", 400 * day),
            ("x-0123456789abcdeg.cwasm", 400 * day),
        ] {
            aged(&dir.path().join(name), age);
        }
        prune_cache(dir.path(), std::time::SystemTime::now());
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .expect("read")
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        left.sort();
        let mut expected = vec![
            recent,
            "notes.cwasm".to_owned(),
            "readme.txt".to_owned(),
            "x-0123456789abcdeg.cwasm".to_owned(),
        ];
        expected.sort();
        assert_eq!(left, expected);
    }

    #[test]
    fn a_missing_cache_dir_is_no_error() {
        prune_cache(
            Path::new("/nonexistent/graphrelay-cache"),
            std::time::SystemTime::now(),
        );
    }
}
