//! All of the relay's integration tests but `desktop_https.rs`, as one test binary: each file
//! beside this one is a module. One binary instead of one per file saves a link of the whole
//! service, desktop and sandbox per file (time, and about 100 MB of disk each).
//! `cargo test -p relay --test suite claim_race` runs one file's tests. `desktop_https.rs`
//! stays a binary of its own: it sets `SSL_CERT_FILE` for its process.

mod chat_support;
mod common;
mod harness;

mod access_isolation;
mod artifacts;
mod bench_empty_polls;
mod cancellation;
mod claim_race;
mod cli;
mod compact_results;
mod consent;
mod demo;
mod desktop_api;
mod desktop_approvals;
mod desktop_cancel;
mod desktop_folder;
mod desktop_pickup;
mod desktop_providers;
mod idempotency;
mod in_process;
mod lease_fencing;
mod link_isolation;
mod long_poll;
mod long_poll_load;
mod malformed_commands;
mod mcp_tools;
mod outbox;
mod owner_tasks;
mod pass_skipping;
mod restart;
mod result_bounding;
mod silent_desktop;
mod sim;
mod store_conformance;
mod submit_idempotency;
mod sweep_guard;
mod task_cancel;
mod task_expiry;
mod task_limits;
mod tool_arguments;
