//! The engines that run graph scripts. Each one only wires the guest to an [`Invocation`](crate::host::Invocation); the
//! capabilities and their limits live in `host/`.

pub mod boa;
pub mod wasm;

use std::sync::Arc;

pub use crate::host::engine::{Engine, EngineError};

/// Which engine to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// boa compiled to a wasm component under wasmtime: the sandbox for untrusted graphs.
    Wasm,
    /// boa in-process: fast to start, for trusted graphs (see docs/limits.md).
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
