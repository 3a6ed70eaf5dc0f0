//! boa in-process. Each graph call gets its own interpreter on its own thread (boa contexts are
//! not `Send`), blocking on the tokio runtime only inside `wait_any`.
//!
//! What this engine can and cannot contain is stated in docs/limits.md: loops and recursion
//! hit boa's runtime limits, endless promise chains are interrupted between jobs, cancellation
//! and the deadline are seen at every host call and between jobs. A runaway built-in (a huge
//! `String.prototype.repeat`, a catastrophic regex) cannot be interrupted, and memory cannot
//! be capped: a memory bomb aborts the whole process. Untrusted graphs belong in the wasm engine.

use std::sync::Arc;

use graph_js::{AgentRequest, Failure, Limits, Meta, MetaError};

use crate::host::Invocation;
use crate::host::approvals::BoxFuture;
use crate::host::engine::{Engine, EngineError};

/// Native stack of each interpreter thread. boa re-enters its interpreter natively for getters,
/// callbacks and the parser, so a generous stack turns deep recursion into a limit error
/// instead of a crash.
pub const INTERPRETER_STACK_BYTES: usize = 256 * 1024 * 1024;

/// The in-process engine.
#[derive(Debug, Default, Clone)]
pub struct BoaEngine {
    limits: Option<Limits>,
}

impl BoaEngine {
    /// An engine with explicit interpreter limits (otherwise the run's limits apply).
    pub fn with_limits(limits: Limits) -> Self {
        Self {
            limits: Some(limits),
        }
    }
}

/// Runs `work` on a fresh interpreter thread and hands back its result.
fn on_interpreter_thread<T: Send + 'static>(
    what: &'static str,
    work: impl FnOnce() -> T + Send + 'static,
) -> BoxFuture<'static, Result<T, EngineError>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name(format!("boa-{what}"))
        .stack_size(INTERPRETER_STACK_BYTES)
        .spawn(move || {
            let _ = tx.send(work());
        });
    Box::pin(async move {
        if let Err(e) = spawned {
            return Err(EngineError::Engine(format!(
                "cannot start an interpreter thread: {e}"
            )));
        }
        rx.await
            .map_err(|_| EngineError::Engine("the interpreter stopped unexpectedly".to_owned()))
    })
}

impl Engine for BoaEngine {
    fn name(&self) -> &'static str {
        "boa"
    }

    fn run(
        &self,
        script: Arc<str>,
        args: String,
        invocation: Invocation,
    ) -> BoxFuture<'static, Result<String, EngineError>> {
        let limits = self.limits.unwrap_or(invocation.run().limits);
        let runtime = tokio::runtime::Handle::current();
        let work = on_interpreter_thread("run", move || {
            let host = BoaHost {
                invocation,
                runtime,
            };
            graph_js::run(&script, &args, Box::new(host), &limits)
        });
        Box::pin(async move { work.await?.map_err(|e| EngineError::Graph(e.to_string())) })
    }

    fn describe(&self, script: Arc<str>) -> BoxFuture<'static, Result<Meta, MetaError>> {
        let limits = self.limits.unwrap_or_default();
        let work = on_interpreter_thread("describe", move || graph_js::describe(&script, &limits));
        Box::pin(async move {
            work.await
                .map_err(|e| MetaError::Script(e.to_string()))?
                .and_then(crate::args::checked)
        })
    }
}

/// The `host` interface for an interpreter thread.
struct BoaHost {
    invocation: Invocation,
    runtime: tokio::runtime::Handle,
}

impl graph_js::Host for BoaHost {
    fn start_agent(&mut self, request: AgentRequest) -> Result<u32, Failure> {
        self.invocation.start_agent(request)
    }

    fn start_tool(&mut self, name: &str, args: &str) -> Result<u32, Failure> {
        self.invocation.start_tool(name, args)
    }

    fn start_graph(&mut self, slug: &str, args: &str) -> Result<u32, Failure> {
        self.invocation.start_graph(slug, args)
    }

    fn start_sleep(&mut self, ms: u32) -> Result<u32, Failure> {
        self.invocation.start_sleep(ms)
    }

    fn wait_any(&mut self, handles: &[u32]) -> (u32, Result<String, Failure>) {
        self.runtime.block_on(self.invocation.wait_any(handles))
    }

    fn tokens_used(&mut self) -> u64 {
        self.invocation.tokens_used()
    }

    fn token_cap(&mut self) -> Option<u64> {
        self.invocation.token_cap()
    }

    fn log(&mut self, message: &str) {
        self.invocation.log(message);
    }

    fn clock_now(&mut self) -> graph_js::ClockReading {
        self.invocation.clock_now()
    }

    fn random_bytes(&mut self, out: &mut [u8]) {
        self.invocation.random_bytes(out);
    }

    fn interrupted(&mut self) -> Option<String> {
        self.invocation.run().stopped().map(|f| f.to_string())
    }
}
