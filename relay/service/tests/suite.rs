//! The service's integration tests, as one test binary: each file beside this one is a module.
//! One binary instead of one per file saves a link per file (time, and disk).
//! `cargo test -p relay-service --test suite claim_race` runs one file's tests. The shared
//! clients and the service on a loopback port come from `relay-testkit`.

use relay_testkit as common;
use relay_testkit::chat as chat_support;

mod access_isolation;
mod artifacts;
mod cancellation;
mod chat_hosts;
mod claim_race;
mod client_metadata_fetches;
mod compact_results;
mod connections;
mod console;
mod console_browser;
mod desktop_api;
mod desktop_projects;
mod fences;
mod idempotency;
mod in_process;
mod lease_fencing;
mod link_isolation;
mod long_poll;
mod mcp_direct;
mod mcp_errors;
mod mcp_resources;
mod mcp_sessions;
mod mcp_tasks;
mod mcp_tools;
mod oauth_attacks;
mod oauth_flow;
mod owner_tasks;
mod postgres_replicas;
mod postgres_tls;
mod quotas;
mod request_origins;
mod restart;
mod resumed_runs;
mod revocation;
mod run_reports;
mod silent_desktop;
mod store_conformance;
mod store_damage;
mod submit_idempotency;
mod sweep_guard;
mod sync_bounds;
mod task_cancel;
mod task_expiry;
mod task_limits;
mod tenant_isolation;
mod tool_arguments;
mod tool_descriptions;
mod tool_registry;
