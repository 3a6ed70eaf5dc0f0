//! The interface an engine implements: the host side names it, so the capabilities (nested
//! graphs, the run) can hold an engine without knowing any; the engines in `crate::engine`
//! implement it.

use std::sync::Arc;

use graph_js::{Meta, MetaError};

use super::Invocation;
use super::approvals::BoxFuture;

/// Runs graph scripts against the host interface.
pub trait Engine: Send + Sync {
    /// Short name for traces (`boa`, `wasm`).
    fn name(&self) -> &'static str;

    /// Runs `script`'s default export with `args` (JSON text of an object) and returns its
    /// result as JSON text, or why it failed.
    fn run(
        &self,
        script: Arc<str>,
        args: String,
        invocation: Invocation,
    ) -> BoxFuture<'static, Result<String, EngineError>>;

    /// Reads and validates `script`'s `meta` without running the graph.
    fn describe(&self, script: Arc<str>) -> BoxFuture<'static, Result<Meta, MetaError>>;

    /// An engine for the built component `bytes` (`runner build` output, which holds its own
    /// graph: run and describe it with an empty script), with this engine's limits. An engine
    /// that cannot run components says why.
    fn for_component(&self, bytes: &[u8]) -> Result<Arc<dyn Engine>, ComponentError> {
        let _ = bytes;
        Err(ComponentError::Unsupported {
            engine: self.name(),
        })
    }
}

/// Why an engine gave no engine for a built component.
#[derive(Debug, thiserror::Error)]
pub enum ComponentError {
    /// This engine runs no components (boa in-process).
    #[error("a built component runs in the wasm engine, not in {engine}; run with --engine wasm")]
    Unsupported {
        /// The engine asked.
        engine: &'static str,
    },
    /// The component could not be compiled or loaded (the engine's own error says why).
    #[error(transparent)]
    Load(Box<dyn std::error::Error + Send + Sync>),
}

/// Why an engine's run of a graph failed. The text is the sentence the run's outcome reports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The graph failed in its own code: it did not parse, threw or rejected, or returned what
    /// cannot leave it (the interpreter's sentence).
    #[error("{0}")]
    Graph(String),
    /// The sandbox stopped the graph: one of its limits (memory, fuel, stack), the run's stop
    /// (deadline, cancel), or a trap.
    #[error("{0}")]
    Sandbox(String),
    /// The engine could not run the graph at all (an interpreter thread, a store).
    #[error("{0}")]
    Engine(String),
}
