//! The `relay` command line's tests, as one test binary: each file beside this one is a module.
//! `cargo test -p relay --test suite cli` runs one file's tests.

use relay_testkit as common;

mod bench_empty_polls;
mod bench_mcp;
mod bench_replicas;
mod cli;
mod config_sources;
mod damaged_runs;
mod desktop_failover;
mod desktop_page;
mod desktop_providers;
/// The docs' command lines, found as the runner's tests find them.
#[allow(dead_code)]
#[path = "../../runner/tests/common/doc_commands.rs"]
mod doc_commands;
mod docs;
mod drain;
/// The real local model (`scripts/local-llm.sh`), as the runner's tests find it.
#[allow(dead_code)]
#[path = "../../runner/tests/common/llm.rs"]
mod llm;
mod long_poll_load;
mod node_clients;
mod oauth_clients;
mod operations;
mod operator_log;
mod owner_cli;
mod postgres_cli;
mod postgres_outage;
mod proxy_limits;
mod replicas;
mod served;
mod storage_faults;
mod upgrades;
