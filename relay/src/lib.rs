//! The graph relay: the service that queues chat agents' graph runs for owners' desktops.
//!
//! - [`protocol`]: wire types of the desktop API, shared by service and desktop.
//! - [`clock`]: the injected source of time.
//! - [`service`]: the axum app (MCP tools, auth, runs, chat tasks, desktop and owner APIs, store).
//! - [`bench`]: `relay bench`, the empty-poll benchmark of the chat tasks' sweep.

#![warn(missing_docs)]

pub mod bench;
pub mod clock;
pub mod protocol;
pub mod service;
