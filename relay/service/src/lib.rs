//! The relay service: MCP tools for chat agents, the durable run queue, linked chat tasks,
//! auth, the desktop API and the owner API, as one axum app over an injected store and clock.
//!
//! Three floors, each only using the ones below it (`tests/module_direction.rs` checks it):
//! - [`http`]: every edge and the plumbing they share, with [`AppState`];
//! - the domain: [`runs`], [`sessions`], [`presence`], [`desktops`], [`chat_tasks`],
//!   [`oauth`], [`auth`], [`held`], [`admin`], plain functions over small contexts (store,
//!   clock, notifier, the tunables they read), no axum; its vocabulary [`model`] sits under
//!   the store, which keeps it;
//! - [`store`]: the trait, its records, SQLite, PostgreSQL, the notifier, the conformance
//!   suite.

pub mod http;

pub mod admin;
pub mod auth;
pub mod chat_tasks;
pub mod desktops;
pub mod held;
pub mod model;
pub mod oauth;
pub mod presence;
pub mod runs;
pub mod sessions;

pub mod store;

// The service as the binary, the simulator and the tests start it.
pub use http::{AppState, ServiceConfig, router, serve};
