//! One instance's store: its invocation, WASI with captured output, the memory cap, its share
//! of the fuel budget and the epoch check; and the sentence a trap becomes, naming the limit.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime::{AsContext, AsContextMut, Store, StoreContextMut, Trap, UpdateDeadline};
use wasmtime_wasi::WasiCtx;
use wasmtime_wasi::p2::pipe::{ClosedInputStream, MemoryOutputPipe};

use super::bindings::HostState;
use super::limits::{FuelShare, MAX_CAPTURED_OUTPUT_BYTES, MemoryCap, MemoryLimiter, WasmLimits};
use crate::host::Invocation;
use crate::host::engine::EngineError;

/// A store for one instance: its invocation, WASI, memory cap, fuel and epoch checks.
pub(super) fn new_store(
    engine: &wasmtime::Engine,
    limits: WasmLimits,
    invocation: Invocation,
) -> Result<Store<HostState>, EngineError> {
    let mut starting = super::probe::Starting::begin();
    let stdout = MemoryOutputPipe::new(MAX_CAPTURED_OUTPUT_BYTES);
    let stderr = MemoryOutputPipe::new(MAX_CAPTURED_OUTPUT_BYTES);
    let wasi = wasi_ctx(&invocation, stdout.clone(), stderr.clone());
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
        starting: None,
    };
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limiter);
    // The instance starts with what the run's other instances left of the budget.
    give_fuel(store.as_context_mut())
        .map_err(|e| EngineError::Engine(format!("cannot set fuel: {e}")))?;
    // Every tick the guest yields to the executor and checks whether its run was stopped
    // (cancelled from outside, or past its deadline); the fuel it burned goes into the run's
    // count, and it stops once the run's budget is used up.
    store.epoch_deadline_callback(|mut context| {
        if context.data().invocation.run().stopped().is_some() {
            return Ok(UpdateDeadline::Interrupt);
        }
        if context.data().fuel.is_some() {
            let left = context.as_context().get_fuel()?;
            if record_fuel(context.data_mut(), left) == Some(0) {
                return Err(Trap::OutOfFuel.into());
            }
        }
        Ok(UpdateDeadline::Yield(1))
    });
    store.set_epoch_deadline(1);
    if let Some(starting) = starting.as_mut() {
        starting.store_made();
    }
    store.data_mut().starting = starting;
    Ok(store)
}

/// Tags of the WASI random streams derived from a graph's own.
const WASI_SECURE_RANDOM: u64 = 0x7761_7369_7365_6375;
const WASI_INSECURE_RANDOM: u64 = 0x7761_7369_696e_7365;

/// The guest's WASI: closed stdin, captured output, and the clocks and random interfaces
/// answered by the run clock and the graph's random stream, never by the machine.
fn wasi_ctx(
    invocation: &Invocation,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
) -> WasiCtx {
    use rand::Rng as _;
    let clock = invocation.run().clock.clone();
    let mut insecure = invocation.wasi_random(WASI_INSECURE_RANDOM);
    let seed = (u128::from(insecure.next_u64()) << 64) | u128::from(insecure.next_u64());
    WasiCtx::builder()
        .stdin(ClosedInputStream)
        .stdout(stdout)
        .stderr(stderr)
        .wall_clock(RunWallClock(clock.clone()))
        .monotonic_clock(RunMonotonicClock(clock))
        .secure_random(invocation.wasi_random(WASI_SECURE_RANDOM))
        .insecure_random(insecure)
        .insecure_random_seed(seed)
        .build()
}

/// `wasi:clocks/wall-clock` on the run clock.
pub(super) struct RunWallClock(pub(super) Arc<crate::host::time::RunClock>);

impl wasmtime_wasi::HostWallClock for RunWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }

    fn now(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.0.now().wall_ms).unwrap_or(0))
    }
}

/// `wasi:clocks/monotonic-clock` on the run clock.
pub(super) struct RunMonotonicClock(pub(super) Arc<crate::host::time::RunClock>);

impl wasmtime_wasi::HostMonotonicClock for RunMonotonicClock {
    fn resolution(&self) -> u64 {
        1_000_000
    }

    fn now(&self) -> u64 {
        self.0.now().monotonic_ms.saturating_mul(1_000_000)
    }
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
pub(super) fn count_fuel(
    mut store: StoreContextMut<'_, HostState>,
) -> wasmtime::Result<Option<u64>> {
    if store.data().fuel.is_none() {
        return Ok(None);
    }
    // Inside the epoch callback this may lag behind by what the running function has not
    // written back yet; that part is counted at the next count. It never rises while wasm
    // runs, so `seen` only falls.
    let left = store.get_fuel()?;
    Ok(record_fuel(store.data_mut(), left))
}

/// The bookkeeping half of [`count_fuel`], for callers that read the instance's fuel
/// themselves (the epoch callback sees the store only through a hook state): moves what was
/// burned since the last count, given that `left` remains, into the run's count and returns
/// what the run has left of its budget, or `None` when the run has no `--fuel`.
fn record_fuel(state: &mut HostState, left: u64) -> Option<u64> {
    use std::sync::atomic::Ordering;
    let share = state.fuel.as_mut()?;
    let budget = share.budget;
    let used = share.seen.saturating_sub(left);
    share.seen = left;
    let spent = state
        .invocation
        .run()
        .sandbox_fuel_spent
        .fetch_add(used, Ordering::SeqCst)
        .saturating_add(used);
    Some(budget.saturating_sub(spent))
}

/// Gives a new store, before any of its wasm runs, what the run has left of its fuel budget.
pub(super) fn give_fuel(mut store: StoreContextMut<'_, HostState>) -> wasmtime::Result<()> {
    if let Some(left) = count_fuel(store.as_context_mut())? {
        store.set_fuel(left)?;
        if let Some(share) = &mut store.data_mut().fuel {
            share.seen = left;
        }
    }
    Ok(())
}

/// Turns a trap into a sentence that names the limit.
pub(super) fn describe_trap(
    error: &wasmtime::Error,
    store: &Store<HostState>,
    limits: WasmLimits,
) -> String {
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

/// An invocation with nothing behind it: `describe` never starts host work, and reads a
/// virtual clock at the epoch.
pub(super) fn describe_invocation() -> Invocation {
    quiet_invocation(
        crate::host::time::RunClock::new(crate::host::time::ClockSetting::Fixed(0)),
        0,
    )
}

/// An invocation of a run with no budget, tools or provider, on `clock` with `seed`.
fn quiet_invocation(clock: Arc<crate::host::time::RunClock>, seed: u64) -> Invocation {
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
        events: Events::on_clock(Arc::new(NullSink), clock.clone()),
        engine: Arc::new(crate::engine::boa::BoaEngine::default()),
        limits: Default::default(),
        max_concurrency: 1,
        cancel: Default::default(),
        clock,
        seed,
    });
    Invocation::new(
        run,
        vec!["describe".into()],
        tokio::runtime::Handle::current(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::time::{ClockSetting, RunClock};
    use wasmtime_wasi::clocks::WasiClocksCtxView;
    use wasmtime_wasi::p2::bindings::clocks::{monotonic_clock, wall_clock};
    use wasmtime_wasi::p2::bindings::random::{insecure, insecure_seed, random};

    /// What the guest's WASI clocks and random interfaces answer in a run on `clock` with
    /// `seed`: wall seconds, monotonic nanoseconds, secure and insecure bytes, insecure seed.
    fn wasi_readings(clock: ClockSetting, seed: u64) -> (u64, u64, Vec<u8>, Vec<u8>, (u64, u64)) {
        let invocation = quiet_invocation(RunClock::new(clock), seed);
        let mut ctx = wasi_ctx(
            &invocation,
            MemoryOutputPipe::new(1),
            MemoryOutputPipe::new(1),
        );
        let mut table = ResourceTable::new();
        let mut view = WasiClocksCtxView {
            ctx: ctx.clocks(),
            table: &mut table,
        };
        let wall = wall_clock::Host::now(&mut view).expect("wall clock");
        assert_eq!(
            wall_clock::Host::resolution(&mut view)
                .expect("resolution")
                .nanoseconds,
            1_000_000
        );
        let mono = monotonic_clock::Host::now(&mut view).expect("monotonic clock");
        assert_eq!(
            monotonic_clock::Host::resolution(&mut view).expect("resolution"),
            1_000_000
        );
        let secure = random::Host::get_random_bytes(ctx.random(), 16).expect("random");
        let weak = insecure::Host::get_insecure_random_bytes(ctx.random(), 16).expect("insecure");
        let pair = insecure_seed::Host::insecure_seed(ctx.random()).expect("seed");
        (wall.seconds, mono, secure, weak, pair)
    }

    #[tokio::test]
    async fn random_bytes_hands_out_at_most_its_limit_per_call() {
        use crate::host::MAX_RANDOM_BYTES;
        let mut invocation = quiet_invocation(RunClock::new(ClockSetting::Real), 3);
        let mut at_limit = vec![0u8; MAX_RANDOM_BYTES];
        invocation.random_bytes(&mut at_limit);
        assert!(at_limit[MAX_RANDOM_BYTES - 8..].iter().any(|&b| b != 0));
        let mut past = vec![0u8; MAX_RANDOM_BYTES + 8];
        invocation.random_bytes(&mut past);
        assert!(past[..MAX_RANDOM_BYTES].iter().any(|&b| b != 0));
        assert_eq!(
            past[MAX_RANDOM_BYTES..],
            [0; 8],
            "past the limit stays unfilled"
        );
    }

    #[tokio::test]
    async fn the_guests_wasi_clocks_and_random_answer_from_the_run() {
        let start = ClockSetting::parse("fixed:2026-01-01T00:00:00Z").expect("clock");
        let a = wasi_readings(start, 5);
        assert_eq!(
            (a.0, a.1),
            (1_767_225_600, 0),
            "the virtual clock, not the machine's"
        );
        assert_eq!(a, wasi_readings(start, 5), "the seed fixes every stream");
        let b = wasi_readings(start, 6);
        assert!(
            a.2 != b.2 && a.3 != b.3 && a.4 != b.4,
            "another seed, the same bytes"
        );
        assert_ne!(a.2, a.3, "secure and insecure streams are distinct");
    }
}
