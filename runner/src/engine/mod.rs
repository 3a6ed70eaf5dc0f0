//! The engines that run graph scripts. Each one only wires the guest to an [`Invocation`](crate::host::Invocation); the
//! capabilities and their limits live in `host/`.

pub mod boa;
pub mod wasm;

use std::sync::Arc;

pub use crate::host::engine::{ComponentError, Engine, EngineError};

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
    /// Its name on the command line and in JSON: `wasm`, `boa`.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Wasm => "wasm",
            EngineKind::Boa => "boa",
        }
    }

    /// Builds the engine with default limits.
    pub fn build(self) -> Result<Arc<dyn Engine>, wasm::WasmError> {
        Ok(match self {
            EngineKind::Wasm => Arc::new(wasm::WasmEngine::new(wasm::WasmLimits::default())?),
            EngineKind::Boa => Arc::new(boa::BoaEngine::default()),
        })
    }
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
