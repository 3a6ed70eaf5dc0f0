//! OAuth clients and grants: client registration rules, client ID metadata documents,
//! connections and owners' passwords.

pub mod cimd;
pub mod clients;
pub mod connections;
pub mod password;

// The authorization server's endpoints and pages moved to `crate::http::oauth`; their paths
// from before the move (`crate::oauth::signin`) still resolve here until callers name them.
pub use crate::http::oauth::*;
