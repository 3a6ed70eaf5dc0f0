//! The engines that run graph scripts. Each one only wires the guest to an [`Invocation`]; the
//! capabilities and their limits live in `host/`.

pub mod boa;
pub mod wasm;

use std::sync::Arc;

use graph_js::{Meta, MetaError};

use crate::host::Invocation;
use crate::host::approvals::BoxFuture;

/// Runs graph scripts against the host interface.
pub trait Engine: Send + Sync {
    /// Short name for traces (`boa`, `wasm`).
    fn name(&self) -> &'static str;

    /// Runs `script`'s default export with `args` (JSON text of an object) and returns its
    /// result as JSON text, or an error sentence.
    fn run(
        &self,
        script: Arc<str>,
        args: String,
        invocation: Invocation,
    ) -> BoxFuture<'static, Result<String, String>>;

    /// Reads and validates `script`'s `meta` without running the graph.
    fn describe(&self, script: Arc<str>) -> BoxFuture<'static, Result<Meta, MetaError>>;
}

/// Which engine to use.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// boa compiled to a wasm component under wasmtime: the sandbox for untrusted graphs.
    Wasm,
    /// boa in-process: fast to start, for trusted graphs (see ARCHITECTURE.md).
    Boa,
}

impl EngineKind {
    /// Builds the engine with default limits.
    pub fn build(self) -> Result<Arc<dyn Engine>, wasm::WasmError> {
        Ok(match self {
            EngineKind::Wasm => Arc::new(wasm::WasmEngine::new(wasm::WasmLimits::default())?),
            EngineKind::Boa => Arc::new(boa::BoaEngine::default()),
        })
    }
}
