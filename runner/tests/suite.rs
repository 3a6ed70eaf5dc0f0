//! All of the runner's integration tests, as one test binary: each file beside this one is a
//! module. One binary instead of one per file saves a link of wasmtime, boa and tokio per file
//! (time, and about 80 MB of disk each). `cargo test -p runner --test suite sandbox_cpu` runs
//! one file's tests.

mod common;
mod hostile;

mod arg_schemas;
mod author;
mod author_nested;
mod author_strict;
mod author_tools;
mod author_ts_table;
mod author_typescript;
mod budget;
mod cancel;
mod catalog;
mod cli;
mod concurrency;
mod docs;
mod journal;
mod limits;
mod nesting;
mod parity;
mod provider_anthropic;
mod provider_cancel;
mod provider_choice;
mod provider_https;
mod provider_retries;
mod provider_secrets;
mod real_model;
mod resume;
mod sandbox_cache;
mod sandbox_cancel;
mod sandbox_capabilities;
mod sandbox_cpu;
mod sandbox_memory;
mod sandbox_output;
mod sandbox_recursion;
mod sandbox_snapshot;
mod sandbox_table;
mod sandbox_tampering;
mod sandbox_time;
mod tamper;
mod timers;
mod trial;
mod web_platform;
