//! The service's edges: every HTTP route (MCP, the console, the owner API, the desktop API, the
//! OAuth endpoints and pages, the probes and metrics) and the plumbing they share (listener,
//! origin checks, rate limits, request log, metrics).

pub mod answers;
pub mod console;
pub mod desktop_api;
pub mod edge;
pub mod listener;
pub mod mcp;
pub mod metrics;
pub mod oauth;
pub mod ops;
pub mod origin;
pub mod owner_api;
pub mod rate;
pub mod request_log;

// The edges' paths from before the move (`super::AppState`, `super::runs`), until they name
// the floors they use.
#[allow(unused_imports)]
use crate::*;
