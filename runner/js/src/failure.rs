//! The `failure` variant of `wit/graph.wit`, as a Rust value.

use std::fmt;

/// Which case of the WIT `failure` variant; also the `err.code` a script sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCode {
    /// The token cap is reached.
    BudgetExhausted,
    /// Refused by policy, by the owner, or by folder confinement.
    Denied,
    /// The run was cancelled.
    Cancelled,
    /// No such tool, graph or handle.
    NotFound,
    /// Arguments that can never succeed.
    Invalid,
    /// The operation ran and failed.
    Failed,
}

impl FailureCode {
    /// The snake_case name scripts see as `err.code`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureCode::BudgetExhausted => "budget_exhausted",
            FailureCode::Denied => "denied",
            FailureCode::Cancelled => "cancelled",
            FailureCode::NotFound => "not_found",
            FailureCode::Invalid => "invalid",
            FailureCode::Failed => "failed",
        }
    }
}

/// Why a host operation did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Failure {
    /// Which kind of failure.
    pub code: FailureCode,
    /// A sentence saying what was wrong and what to do.
    pub message: String,
}

impl Failure {
    /// A failure of `code` with `message`.
    pub fn new(code: FailureCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
    /// `budget_exhausted`.
    pub fn budget_exhausted(message: impl Into<String>) -> Self {
        Self::new(FailureCode::BudgetExhausted, message)
    }
    /// `denied`.
    pub fn denied(message: impl Into<String>) -> Self {
        Self::new(FailureCode::Denied, message)
    }
    /// `cancelled`.
    pub fn cancelled(message: impl Into<String>) -> Self {
        Self::new(FailureCode::Cancelled, message)
    }
    /// `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(FailureCode::NotFound, message)
    }
    /// `invalid`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(FailureCode::Invalid, message)
    }
    /// `failed`.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(FailureCode::Failed, message)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for Failure {}
