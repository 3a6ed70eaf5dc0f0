//! End-to-end tests across the crates: an MCP client → the service → the desktop relay → the
//! runner's sandbox → the result, and `relay demo`. One test binary; each file beside this one
//! is a module (`desktop_https.rs` is a binary of its own: it sets `SSL_CERT_FILE` for its
//! process). `cargo test -p graphrelay --test e2e consent` runs one file's tests.

use relay_testkit as common;

mod harness;

mod argument_schemas;
mod clean_stops;
mod compiled_graphs;
mod consent;
mod consent_seen;
mod demo;
mod dependency_direction;
mod desktop_approvals;
mod desktop_cancel;
mod desktop_folder;
mod desktop_page;
mod desktop_pickup;
mod desktop_tells;
mod disk_full;
mod killed_starts;
mod locked_state;
mod lost_answers;
mod malformed_commands;
mod module_direction;
mod nested_consent;
mod outbox;
mod owner_control;
mod pass_skipping;
mod private_files;
mod result_bounding;
mod resume_under_faults;
mod run_journal;
mod run_resumed_service;
mod session_identity;
mod token_caps;
mod typed_errors;
mod typescript_sessions;
mod withdrawal;
