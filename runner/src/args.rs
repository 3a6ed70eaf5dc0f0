//! A graph's argument schema (`meta.args`) in the runner: every describe checks the schema
//! itself, and `runner run --args` and `runner test` check the arguments against it before the
//! graph starts. The checking is `graph-args`, the same the relay service uses.

use graph_args::ArgsSchema;
use graph_js::{Meta, MetaError};
use serde_json::Value;

/// `meta`, once its `args` (if any) is known to be a usable JSON Schema.
pub fn checked(meta: Meta) -> Result<Meta, MetaError> {
    if let Some(schema) = &meta.args {
        ArgsSchema::compile(schema).map_err(|e| MetaError::Args(e.to_string()))?;
    }
    Ok(meta)
}

/// Why a graph's arguments were refused before it ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    /// `meta.args` is not a usable JSON Schema (the graph has to fix its meta).
    #[error(transparent)]
    Schema(#[from] graph_args::SchemaError),
    /// The arguments do not fit the schema: the first failing path and why.
    #[error("the arguments do not fit the graph's meta.args schema: {0}; nothing was run")]
    Mismatch(#[source] graph_args::Mismatch),
}

/// Checks `args` against `meta.args` (nothing to check without one). The message names the
/// failing path under `root` (`args` for `--args`, the case's `args` for a test).
pub fn check(meta: &Meta, args: &Value, root: &str) -> Result<(), ArgsError> {
    let Some(schema) = &meta.args else {
        return Ok(());
    };
    let schema = ArgsSchema::compile(schema)?;
    schema.validate(args, root).map_err(ArgsError::Mismatch)
}
