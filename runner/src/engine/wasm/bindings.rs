//! The guest component and its glue: the bindings wasmtime generates from `wit/graph.wit`, one
//! instance's state ([`HostState`]), the host interface implemented over an [`Invocation`], and
//! the WASI interfaces the guest may use. No logic: every call goes to the invocation.

use graph_js::{AgentRequest, Failure, FailureCode};
use wasmtime::component::{Linker, ResourceTable};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::limits::{FuelShare, MemoryLimiter};
use crate::host::Invocation;

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

/// Adds the WASI interfaces the guest may use: io, clocks, random and cli. Filesystem and
/// sockets are deliberately absent; the clocks and random interfaces answer from the run clock
/// and the graph's random stream (`instance.rs` `wasi_ctx`), stdin is closed, stdout and stderr
/// are captured, and the environment and arguments are empty.
pub(super) fn link_wasi(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
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

/// One instance's state: the graph's invocation, WASI, limits and captured output.
pub(super) struct HostState {
    pub(super) invocation: Invocation,
    pub(super) wasi: WasiCtx,
    pub(super) table: ResourceTable,
    pub(super) limiter: MemoryLimiter,
    pub(super) stdout: MemoryOutputPipe,
    pub(super) stderr: MemoryOutputPipe,
    /// This instance's draw on the run's fuel, when `--fuel` is set.
    pub(super) fuel: Option<FuelShare>,
    /// When this instance's creation began, while the start probe records and until the
    /// graph's first host call (`probe`).
    pub(super) starting: Option<super::probe::Starting>,
}

impl HostState {
    /// The run's invocation, for a call of the host interface; the first ends the instance's
    /// start for the probe.
    fn invocation(&mut self) -> &mut Invocation {
        if let Some(starting) = self.starting.take() {
            starting.first_call();
        }
        &mut self.invocation
    }

    /// Moves captured guest output into the trace.
    pub(super) fn flush_output(&mut self) {
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

    pub(super) fn captured_stderr(&self) -> String {
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
        self.invocation()
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
        self.invocation().start_tool(&name, &args).map_err(to_wit)
    }

    async fn start_graph(&mut self, slug: String, args: String) -> Result<u32, wit::Failure> {
        self.invocation().start_graph(&slug, &args).map_err(to_wit)
    }

    async fn start_sleep(&mut self, ms: u32) -> Result<u32, wit::Failure> {
        self.invocation().start_sleep(ms).map_err(to_wit)
    }

    async fn wait_any(&mut self, handles: Vec<u32>) -> (u32, Result<String, wit::Failure>) {
        let (handle, outcome) = self.invocation().wait_any(&handles).await;
        (handle, outcome.map_err(to_wit))
    }

    async fn tokens_used(&mut self) -> u64 {
        self.invocation().tokens_used()
    }

    async fn token_cap(&mut self) -> Option<u64> {
        self.invocation().token_cap()
    }

    async fn log(&mut self, message: String) {
        self.invocation().log(&message);
    }

    async fn clock_now(&mut self) -> wit::ClockReading {
        let reading = self.invocation().clock_now();
        wit::ClockReading {
            wall_ms: reading.wall_ms,
            monotonic_ms: reading.monotonic_ms,
        }
    }

    async fn random_bytes(&mut self, len: u32) -> Vec<u8> {
        let len = usize::try_from(len).map_or(crate::host::MAX_RANDOM_BYTES, |n| {
            n.min(crate::host::MAX_RANDOM_BYTES)
        });
        let mut bytes = vec![0; len];
        self.invocation().random_bytes(&mut bytes);
        bytes
    }
}
