//! The sandbox's limits ([`WasmLimits`]) and what enforces them outside the guest's own code
//! (the wasmtime settings they become are in `engines.rs`): the memory and table limiter, and
//! each instance's share of the run's fuel budget.

use std::sync::Arc;
use std::time::Duration;

use crate::host::RunShared;

/// How often the epoch advances: the granularity of deadlines and cancellation.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);
/// Default linear-memory cap.
pub const DEFAULT_MEMORY_BYTES: u64 = 256 * 1024 * 1024;
/// Default wasm stack cap (native stack used by wasm frames).
pub const DEFAULT_WASM_STACK_BYTES: usize = 16 * 1024 * 1024;
/// Guest stdout and stderr are each captured up to this many bytes.
pub const MAX_CAPTURED_OUTPUT_BYTES: usize = 64 * 1024;
/// Tables (function references) may not grow past this many elements.
pub const MAX_TABLE_ELEMENTS: usize = 100_000;
/// Sandboxes (top and nested graphs of every run in the process, and meta reads) that may be
/// instantiated at once per engine: the pooling allocator's slots (`engines.rs` `pooling`).
/// One more is refused with a message naming this limit.
pub const POOL_SANDBOXES: u32 = 512;
/// Bytes of memory, table and stack a pooled slot keeps resident after its sandbox ends, reset
/// with `memset` rather than handed back to the kernel, so the next start takes no page faults
/// for them.
pub const POOL_KEEP_RESIDENT_BYTES: usize = 2 * 1024 * 1024;
/// Bytes of linear memory a pooled slot keeps resident where the kernel finds the pages a
/// sandbox wrote (`PAGEMAP_SCAN`, Linux 6.7 and later): only those are put back from the image,
/// so the slot keeps what a graph's start writes (boa's heap lies past the first 2 MiB), and a
/// compiled graph starts without a page fault. Elsewhere the first [`POOL_KEEP_RESIDENT_BYTES`]
/// are reset whole, written or not, so that smaller figure stays.
pub const POOL_KEEP_RESIDENT_SCANNED_BYTES: usize = 8 * 1024 * 1024;
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

/// Which memory cap was hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MemoryCap {
    /// This instance's own cap.
    Instance,
    /// The cap on all instances of the run together.
    Run,
}

/// An instance's draw on the run's fuel budget.
pub(super) struct FuelShare {
    /// The run's whole budget (`--fuel`).
    pub(super) budget: u64,
    /// The instance's fuel when it last counted (see `instance::count_fuel`).
    pub(super) seen: u64,
}

/// Caps linear memory (per instance, and summed over the run's instances) and tables, and
/// remembers which cap was hit.
pub(super) struct MemoryLimiter {
    pub(super) memory_bytes: u64,
    pub(super) run: Arc<RunShared>,
    /// What this instance holds of the run's sum; given back when the store is dropped.
    pub(super) held: u64,
    pub(super) hit: Option<MemoryCap>,
}

impl MemoryLimiter {
    pub(super) fn run_cap(&self) -> u64 {
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
