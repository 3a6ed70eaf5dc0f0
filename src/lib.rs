//! The workspace's root package. It has no code of its own: it ties `runner` and `relay`
//! together for cross-crate tests. The end-to-end tests of service, desktop, runner and MCP
//! client live in `relay/tests/` (see ARCHITECTURE.md, "Code map").
