//! The graph relay: the service that queues chat agents' graph runs for owners' desktops, and
//! the desktop relay that picks them up over outbound HTTP and runs them in the sandbox.
//!
//! - [`protocol`]: wire types of the desktop API, shared by service and desktop.
//! - [`clock`]: the injected source of time.
//! - [`service`]: the axum app (MCP tools, auth, runs, chat tasks, desktop and owner APIs, store).
//! - [`desktop`]: the relay loop (poller, outbox, consent re-check, executor, bounding).
//! - [`demo`]: the whole product on one machine, with a self-check through MCP.
//! - [`sim`]: the seeds' experiments through the real code on virtual time.
//! - [`bench`](mod@bench): `relay bench`, the empty-poll benchmark of the chat tasks' sweep.
//! - [`loadtest`]: `relay bench long-polls`, thousands of waiting desktops on one service.

#![warn(missing_docs)]

pub mod bench;
pub mod clock;
pub mod demo;
pub mod desktop;
pub mod loadtest;
pub mod protocol;
pub mod service;
pub mod sim;
mod sqlite_file;
