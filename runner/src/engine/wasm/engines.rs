//! The wasmtime engines: one per configuration, shared by every component compiled for it, and
//! one epoch ticker thread for all of them.
//!
//! A `wasmtime::Engine` is meant to be shared: it holds the compiler settings and the
//! registries of loaded code and types. What splits ours is what changes compiled code or the
//! engine's own settings ([`EngineSettings`]: fuel metering and the wasm stack size; the memory
//! cap is applied per store). Engines are held weakly here, so an engine is freed with the last
//! component compiled for it, whichever component cache held that; the ticker then stops
//! ticking it, and its thread ends when no engine is left (the next engine starts it again).

use std::sync::{Mutex, MutexGuard};

use wasmtime::{Config, Engine, EngineWeak, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::limits::{
    EPOCH_TICK, MAX_TABLE_ELEMENTS, POOL_KEEP_RESIDENT_BYTES, POOL_KEEP_RESIDENT_SCANNED_BYTES,
    POOL_SANDBOXES, WasmLimits,
};
use super::{WasmError, setup};

/// The engine settings a component is compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct EngineSettings {
    /// Fuel metering changes the compiled code.
    fuel: bool,
    /// The wasm stack cap is an engine setting (and sizes the stacks wasm runs on).
    wasm_stack_bytes: usize,
    /// Instances from the pooling allocator (see [`pooling`]) rather than fresh mappings.
    pooled: bool,
}

impl EngineSettings {
    /// The settings `limits` need.
    pub(super) fn of(limits: WasmLimits) -> Self {
        Self {
            fuel: limits.fuel.is_some(),
            wasm_stack_bytes: limits.wasm_stack_bytes,
            pooled: pooling_wanted(),
        }
    }
}

/// The variable that turns the pooling allocator off (`0`): instances then map fresh memory,
/// tables and stacks each time, which is slower to start but reserves no address space ahead.
pub const POOL_VARIABLE: &str = "GRAPHRELAY_WASM_POOL";

/// Whether new engines pool their instances: yes unless [`POOL_VARIABLE`] is `0`.
fn pooling_wanted() -> bool {
    std::env::var(POOL_VARIABLE).map_or(true, |value| value.trim() != "0")
}

/// The pooling allocator's slots: [`POOL_SANDBOXES`] sandboxes at once (each a component of a
/// few core instances, one linear memory of up to 4 GiB and two tables), their memories,
/// tables and stacks reserved once per engine and reused, a slot keeping the pages a graph
/// touched ([`memory_keep_resident`]) so the next start does not fault them in again. The
/// caps a run meets (memory, tables) stay the store limiter's; the pool only has room for them.
#[doc(hidden)]
pub fn pooling() -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(POOL_SANDBOXES)
        .total_core_instances(POOL_SANDBOXES * CORE_INSTANCES_PER_SANDBOX)
        .total_memories(POOL_SANDBOXES * MEMORIES_PER_SANDBOX)
        .total_tables(POOL_SANDBOXES * TABLES_PER_SANDBOX)
        .total_stacks(POOL_SANDBOXES)
        .max_core_instances_per_component(CORE_INSTANCES_PER_SANDBOX)
        .max_memories_per_component(MEMORIES_PER_SANDBOX)
        .max_tables_per_component(TABLES_PER_SANDBOX)
        .max_memories_per_module(1)
        .max_tables_per_module(TABLES_PER_SANDBOX)
        .max_memory_size(4 << 30)
        .table_elements(MAX_TABLE_ELEMENTS)
        .linear_memory_keep_resident(memory_keep_resident())
        .table_keep_resident(POOL_KEEP_RESIDENT_BYTES)
        .async_stack_keep_resident(POOL_KEEP_RESIDENT_BYTES)
        // The pages a sandbox wrote are found with the kernel's PAGEMAP_SCAN (Linux 6.7 and
        // later; elsewhere wasmtime resets the slot as before) and put back from the image in
        // place, so they stay mapped and the next start writes them without a fault.
        .pagemap_scan(wasmtime::Enabled::Auto);
    pool
}

/// How much of its linear memory a pooled slot keeps resident: more where the kernel tells
/// which pages were written ([`POOL_KEEP_RESIDENT_SCANNED_BYTES`]), else
/// [`POOL_KEEP_RESIDENT_BYTES`].
fn memory_keep_resident() -> usize {
    if PoolingAllocationConfig::is_pagemap_scan_available() {
        POOL_KEEP_RESIDENT_SCANNED_BYTES
    } else {
        POOL_KEEP_RESIDENT_BYTES
    }
}

/// Core instances in one guest component (the graph's module, the WASI adapter and the
/// shims between them), with room to spare.
const CORE_INSTANCES_PER_SANDBOX: u32 = 8;
/// Linear memories in one guest component (the graph's module's; the adapter shares it).
const MEMORIES_PER_SANDBOX: u32 = 1;
/// Tables in one guest component (the graph's module's and the shim's for indirect calls).
const TABLES_PER_SANDBOX: u32 = 2;

/// The live engines, by their settings.
static ENGINES: Mutex<Vec<(EngineSettings, EngineWeak)>> = Mutex::new(Vec::new());

/// The engine for `limits`: the live one of its settings, or a new one (ticked from now on).
pub(super) fn engine_for(limits: WasmLimits) -> Result<Engine, WasmError> {
    let settings = EngineSettings::of(limits);
    let mut engines = lock(&ENGINES);
    engines.retain(|(_, weak)| weak.upgrade().is_some());
    let live = engines
        .iter()
        .filter(|(of, _)| *of == settings)
        .find_map(|(_, weak)| weak.upgrade());
    if let Some(engine) = live {
        return Ok(engine);
    }
    let engine = configured(limits, &|_| {})?;
    engines.push((settings, engine.weak()));
    Ok(engine)
}

/// A new engine for `limits`, with `configure` changing the production settings last, ticked
/// from now on. Only [`engine_for`] makes the engines runs use; benchmarks that compare engine
/// settings side by side make their own (see `super::WasmEngine::load_configured`).
pub(super) fn configured(
    limits: WasmLimits,
    configure: &dyn Fn(&mut Config),
) -> Result<Engine, WasmError> {
    let mut config = Config::new();
    config
        .epoch_interruption(true)
        // Function tables are filled as they are used (wasmtime's default): filling boa's
        // tables at instantiation made loops about 5 % faster but cost about 0.1 ms per start,
        // half of a compiled graph's start (`cargo bench -p runner --bench sandbox --
        // start_to_first_call`).
        .table_lazy_init(true)
        .consume_fuel(limits.fuel.is_some())
        .max_wasm_stack(limits.wasm_stack_bytes)
        // The fiber that runs wasm must hold the whole wasm stack plus host frames.
        .async_stack_size(limits.wasm_stack_bytes + 2 * 1024 * 1024);
    let pooled = EngineSettings::of(limits).pooled;
    if pooled {
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling()));
    }
    configure(&mut config);
    let engine = match Engine::new(&config) {
        Ok(engine) => engine,
        // The pool reserves its address space up front; where that is refused (a `ulimit -v`,
        // strict overcommit) the sandbox still runs, each instance mapping its own.
        Err(error) if pooled => {
            tracing::warn!(%error, "the wasm instance pool could not be reserved; sandboxes start without it (set {POOL_VARIABLE}=0 to skip trying)");
            config.allocation_strategy(InstanceAllocationStrategy::OnDemand);
            Engine::new(&config).map_err(setup)?
        }
        Err(error) => return Err(setup(error)),
    };
    // Without the ticker no deadline, cancel or shared fuel budget would ever take effect.
    tick(&engine)?;
    Ok(engine)
}

/// The engines the ticker advances, and whether its thread runs.
struct Ticker {
    engines: Vec<EngineWeak>,
    running: bool,
}

static TICKER: Mutex<Ticker> = Mutex::new(Ticker {
    engines: Vec::new(),
    running: false,
});

/// Advances `engine`'s epoch every [`EPOCH_TICK`] until it is dropped, on the one ticker
/// thread (started now if none runs).
fn tick(engine: &Engine) -> Result<(), WasmError> {
    let mut ticker = lock(&TICKER);
    ticker.engines.push(engine.weak());
    if ticker.running {
        return Ok(());
    }
    std::thread::Builder::new()
        .name("wasm-epoch".into())
        .spawn(run_ticker)
        .map_err(|e| WasmError::Setup(format!("cannot start the epoch ticker thread: {e}")))?;
    ticker.running = true;
    Ok(())
}

/// The ticker thread: every live engine's epoch advances once per tick; the thread ends when
/// every engine is gone.
fn run_ticker() {
    loop {
        {
            let mut ticker = lock(&TICKER);
            ticker.engines.retain(|weak| match weak.upgrade() {
                Some(engine) => {
                    engine.increment_epoch();
                    true
                }
                None => false,
            });
            if ticker.engines.is_empty() {
                ticker.running = false;
                return;
            }
        }
        std::thread::sleep(EPOCH_TICK);
    }
}

/// How many engines the ticker advances now, and whether its thread runs (for tests).
#[cfg(test)]
pub(super) fn ticked() -> (usize, bool) {
    let mut ticker = lock(&TICKER);
    ticker.engines.retain(|weak| weak.upgrade().is_some());
    (ticker.engines.len(), ticker.running)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Limits whose settings no other test in this process uses, so the engine is this test's.
    fn own_limits(stack_kib: usize) -> WasmLimits {
        WasmLimits {
            wasm_stack_bytes: stack_kib * 1024,
            ..WasmLimits::default()
        }
    }

    #[test]
    fn one_engine_per_configuration_while_it_lives() {
        let limits = own_limits(1_001);
        let first = engine_for(limits).expect("an engine");
        let again = engine_for(limits).expect("an engine");
        assert!(
            Engine::same(&first, &again),
            "one engine for one configuration"
        );
        // The memory cap is per store: it does not split engines.
        let more_memory = WasmLimits {
            memory_bytes: limits.memory_bytes * 2,
            ..limits
        };
        assert!(Engine::same(
            &first,
            &engine_for(more_memory).expect("an engine")
        ));
        let fuel = WasmLimits {
            fuel: Some(1_000),
            ..limits
        };
        assert!(!Engine::same(&first, &engine_for(fuel).expect("an engine")));
        assert!(!Engine::same(
            &first,
            &engine_for(own_limits(1_002)).expect("an engine")
        ));
        // Dropped with its last user: the next one is new.
        let weak = first.weak();
        drop((first, again));
        assert!(
            weak.upgrade().is_none(),
            "the registry holds engines weakly"
        );
    }

    #[test]
    fn one_ticker_thread_ticks_every_live_engine() {
        let a = engine_for(own_limits(1_003)).expect("an engine");
        let b = engine_for(own_limits(1_004)).expect("an engine");
        let (count, running) = ticked();
        assert!(running, "the ticker runs while engines live");
        assert!(count >= 2, "{count} engines ticked");
        let ticker_threads = || {
            std::fs::read_dir("/proc/self/task")
                .map(|tasks| {
                    tasks
                        .flatten()
                        .filter(|task| {
                            std::fs::read_to_string(task.path().join("comm"))
                                .is_ok_and(|name| name.trim() == "wasm-epoch")
                        })
                        .count()
                })
                .unwrap_or(1)
        };
        // A ticker that found no engine left may still be on its way out for a moment.
        let threads = (0..100)
            .map(|_| {
                std::thread::sleep(EPOCH_TICK);
                ticker_threads()
            })
            .find(|&n| n == 1);
        assert_eq!(threads, Some(1), "one ticker thread for {count} engines");
        drop((a, b));
    }
}
