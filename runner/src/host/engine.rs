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
