//! Runs one graph script in a sandbox behind the host interface of `wit/graph.wit`, with a
//! hard token cap, per-tool approvals, folder-confined tools, nested graphs and a typed trace.
//!
//! - [`run::run_graph`] is the one entry point (the CLI and the desktop relay both use it).
//! - [`host`] holds the capabilities, one module each; [`engine`] wires them to an interpreter.
//! - [`testing`] runs `*.test.json` cases; [`trace`] prints events for people; [`input`] reads
//!   the files a person names, with a size bound; [`scaffold`] writes `runner init`'s graph;
//!   [`report`] writes `runner test --json` and `--junit`; [`progress`] says how far slow work is.
//!
//! The library's types are plain: clap lives in the binaries (`src/bin/runner/`; its
//! `flags.rs` is shared with the `relay` binary), behind the `cli` feature the binary requires.

pub mod args;
pub mod clock;
pub mod engine;
pub mod host;
pub mod input;
pub mod location;
pub mod output;
pub mod progress;
pub mod report;
pub mod run;
pub mod scaffold;
pub mod testing;
pub mod trace;
pub mod typescript;

pub use graph_js::{Failure, FailureCode, Limits, Meta, MetaError};
pub use run::{RunOptions, RunOutcome, RunRequest, RunStatus, run_graph};
