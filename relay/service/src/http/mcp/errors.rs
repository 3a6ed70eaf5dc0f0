//! How MCP answers a refusal of the domain outside a tool call: one function per error type
//! and per kind of answer (a JSON-RPC error of the tasks methods, a resource that cannot be
//! read), each an exhaustive match, so a new variant gets a deliberate answer. A tool call's
//! refusals are `tools::ToolError`s, rendered by `tools::tool_error_result`; this file's tests
//! hold both to every variant.

use rmcp::ErrorData;

use crate::chat_tasks::TaskError;
use crate::runs::{self, RunError};

/// A refused tasks method (`tasks/get`, `tasks/cancel`, a task-augmented call), as its
/// JSON-RPC error: -32602 for what the request named or sent, -32600 for what the request may
/// not do now (a quota, a revoked token, a contended run: the message says when to retry),
/// -32603 for a store failure.
pub(super) fn run_rpc_error(error: RunError) -> ErrorData {
    match error {
        // Unknown, malformed and foreign ids alike, naming nothing about the run.
        RunError::NotFound => ErrorData::invalid_params(
            format!(
                "{}: no task with this id was created by this agent",
                runs::RUN_NOT_FOUND
            ),
            None,
        ),
        RunError::Invalid(_) | RunError::IdempotencyConflict => {
            ErrorData::invalid_params(error.to_string(), None)
        }
        RunError::Contended | RunError::Quota(_) | RunError::Revoked => {
            ErrorData::invalid_request(error.to_string(), None)
        }
        RunError::Store(error) => {
            error.log("tasks method failed");
            ErrorData::internal_error(error.agent_message(), None)
        }
    }
}

/// A run resource that could not be read: `None` when this agent may not read it (unknown,
/// another agent's, a malformed id: answered as a missing resource), else the failure.
pub(super) fn run_resource_error(error: RunError) -> Option<ErrorData> {
    match error {
        RunError::NotFound | RunError::Invalid(_) | RunError::Revoked => None,
        RunError::IdempotencyConflict | RunError::Quota(_) | RunError::Contended => {
            Some(ErrorData::internal_error(error.to_string(), None))
        }
        RunError::Store(error) => Some(store_failure(&error)),
    }
}

/// An inbox resource that could not be read: `None` when this agent may not read it, else the
/// failure.
pub(super) fn task_resource_error(error: TaskError) -> Option<ErrorData> {
    match error {
        TaskError::Invalid(_)
        | TaskError::LinkNotFound
        | TaskError::TaskNotFound
        | TaskError::ArtifactNotFound
        | TaskError::Refused(_)
        | TaskError::Conflict(_) => None,
        TaskError::Contended => Some(ErrorData::internal_error(error.to_string(), None)),
        TaskError::Store(error) => Some(store_failure(&error)),
    }
}

/// A store failure in a resources method: logged, and told as its cause.
pub(super) fn store_failure(error: &crate::store::StoreError) -> ErrorData {
    error.log("resources method failed");
    ErrorData::internal_error(error.agent_message(), None)
}

#[cfg(test)]
mod tests {
    //! One table per mapping function, one row per variant.

    use rmcp::model::{CallToolResult, ErrorCode};

    use super::{run_resource_error, run_rpc_error, task_resource_error};
    use crate::chat_tasks::TaskError;
    use crate::chat_tasks::machine::Refusal;
    use crate::http::mcp::tools::{ToolError, tool_error_result};
    use crate::runs::{QuotaError, RunError};
    use crate::store::{Damage, Fault, StoreError};

    fn disk_full() -> StoreError {
        StoreError::Fault {
            fault: Fault::DiskFull,
            detail: "full".into(),
            source: "full".into(),
        }
    }

    fn damaged() -> StoreError {
        Damage::of("arguments", "not an object")
            .in_row("commands", "c1")
            .into()
    }

    /// Every variant of [`RunError`] (the store's twice: a fault, and damage).
    fn run_errors() -> Vec<(&'static str, RunError)> {
        vec![
            ("not found", RunError::NotFound),
            ("invalid", RunError::Invalid("limit must be 1 to 50".into())),
            ("idempotency conflict", RunError::IdempotencyConflict),
            ("contended", RunError::Contended),
            ("quota", RunError::Quota(QuotaError::AgentQueue(100, 20))),
            ("revoked", RunError::Revoked),
            ("store fault", RunError::Store(disk_full())),
            ("store damage", RunError::Store(damaged())),
        ]
    }

    /// Every variant of [`TaskError`] (the store's twice).
    fn task_errors() -> Vec<(&'static str, TaskError)> {
        vec![
            ("invalid", TaskError::Invalid("bad".into())),
            ("link not found", TaskError::LinkNotFound),
            ("task not found", TaskError::TaskNotFound),
            ("artifact not found", TaskError::ArtifactNotFound),
            ("refused", TaskError::Refused(Refusal::Cancelled)),
            ("conflict", TaskError::Conflict("artifact id reused".into())),
            ("contended", TaskError::Contended),
            ("store fault", TaskError::Store(disk_full())),
            ("store damage", TaskError::Store(damaged())),
        ]
    }

    fn text(result: &CallToolResult) -> String {
        assert_eq!(result.is_error, Some(true), "a tool error: {result:?}");
        let json = serde_json::to_value(&result.content).expect("content");
        json[0]["text"].as_str().expect("text content").to_owned()
    }

    /// What the model reads for each: the domain's own sentence, or for a store failure its
    /// cause and whether retrying helps (never a bare "database error").
    fn expected_text(name: &str) -> Vec<&'static str> {
        match name {
            "store fault" => vec!["disk is full", "disk_full", "Retrying helps"],
            "store damage" => vec!["commands row c1", "corrupt", "Retrying does not help"],
            _ => vec![],
        }
    }

    #[test]
    fn run_tool_error_over_every_variant() {
        for (name, error) in run_errors() {
            let message = error.to_string();
            let told = text(&tool_error_result(ToolError::from(error), "get_graph_run"));
            let words = expected_text(name);
            if words.is_empty() {
                assert_eq!(told, message, "{name}: the domain's sentence");
            }
            for word in words {
                assert!(told.contains(word), "{name}: {told}");
            }
        }
    }

    #[test]
    fn task_tool_error_over_every_variant() {
        for (name, error) in task_errors() {
            let message = error.to_string();
            let told = text(&tool_error_result(
                ToolError::from(error),
                "claim_linked_chat_task",
            ));
            let words = expected_text(name);
            if words.is_empty() {
                assert_eq!(told, message, "{name}: the domain's sentence");
            }
            for word in words {
                assert!(told.contains(word), "{name}: {told}");
            }
        }
    }

    #[test]
    fn run_rpc_error_over_every_variant() {
        for (name, error) in run_errors() {
            let expected = match name {
                "not found" | "invalid" | "idempotency conflict" => ErrorCode::INVALID_PARAMS,
                "contended" | "quota" | "revoked" => ErrorCode::INVALID_REQUEST,
                _ => ErrorCode::INTERNAL_ERROR,
            };
            let answer = run_rpc_error(error);
            assert_eq!(answer.code, expected, "{name}: {answer:?}");
        }
    }

    #[test]
    fn resource_errors_over_every_variant() {
        for (name, error) in run_errors() {
            let unreadable = matches!(name, "not found" | "invalid" | "revoked");
            assert_eq!(
                run_resource_error(error).is_none(),
                unreadable,
                "run, {name}: unreadable is answered as a missing resource, a failure as itself"
            );
        }
        for (name, error) in task_errors() {
            let failure = matches!(name, "contended" | "store fault" | "store damage");
            assert_eq!(
                task_resource_error(error).is_some(),
                failure,
                "inbox, {name}"
            );
        }
    }
}
