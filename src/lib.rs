//! The workspace's root package. It has no code of its own: it holds the tests that cross the
//! crates in `tests/` (an MCP client → the service → the desktop relay → the runner's sandbox →
//! the result; `relay demo`; the dependency rule). See ARCHITECTURE.md, "Code map".
