//! The five linked chat task tools: decode the arguments, call one function of
//! [`chat_tasks::agent`], encode. Their answers are compact JSON, and the text copy is that
//! same JSON: every read lands in the conversation's context.

use rmcp::model::CallToolResult;
use serde::Serialize;
use serde_json::{Map, Value};

use super::inputs::{self, decode};
use super::tools::{
    CLAIM_LINKED_CHAT_TASK, GET_LINKED_CHAT_TASK, LIST_LINKED_CHAT_TASKS,
    SUBMIT_LINKED_CHAT_RESULT, ToolSpec, UPLOAD_LINKED_CHAT_ARTIFACT,
};
use crate::auth::AgentIdentity;
use crate::chat_tasks::TaskError;
use crate::chat_tasks::agent::{self, SubmitRequest, UploadRequest};
use crate::http::AppState;

/// Whether `name` is one of the chat task tools.
pub(super) fn is_chat_tool(name: &str) -> bool {
    [
        LIST_LINKED_CHAT_TASKS,
        GET_LINKED_CHAT_TASK,
        CLAIM_LINKED_CHAT_TASK,
        SUBMIT_LINKED_CHAT_RESULT,
        UPLOAD_LINKED_CHAT_ARTIFACT,
    ]
    .contains(&name)
}

/// Runs chat task tool `spec` for `agent`.
pub(super) async fn dispatch(
    app: &AppState,
    spec: &'static ToolSpec,
    agent: &AgentIdentity,
    arguments: &Map<String, Value>,
) -> CallToolResult {
    match call(app, spec, agent, arguments).await {
        Ok(value) => CallToolResult::structured(value),
        Err(error) => super::errors::task_tool_error(error, spec.name),
    }
}

fn encode(value: &impl Serialize) -> Result<Value, TaskError> {
    serde_json::to_value(value).map_err(|source| {
        TaskError::Store(crate::store::StoreError::Encode {
            what: "the answer",
            source,
        })
    })
}

async fn call(
    app: &AppState,
    spec: &'static ToolSpec,
    agent: &AgentIdentity,
    arguments: &Map<String, Value>,
) -> Result<Value, TaskError> {
    let invalid = |e: super::tools::ArgumentError| TaskError::Invalid(e.0);
    match spec.name {
        LIST_LINKED_CHAT_TASKS => {
            let input: inputs::ListLinkedChatTasks =
                decode(spec.name, arguments).map_err(invalid)?;
            encode(&agent::list_tasks(&app.tasks, agent, &input.chat_link_id).await?)
        }
        GET_LINKED_CHAT_TASK => {
            let input: inputs::LinkedChatTask = decode(spec.name, arguments).map_err(invalid)?;
            encode(&agent::get_task(&app.tasks, agent, &input.chat_link_id, &input.task_id).await?)
        }
        CLAIM_LINKED_CHAT_TASK => {
            let input: inputs::LinkedChatTask = decode(spec.name, arguments).map_err(invalid)?;
            encode(
                &agent::claim_task(&app.tasks, agent, &input.chat_link_id, &input.task_id).await?,
            )
        }
        SUBMIT_LINKED_CHAT_RESULT => {
            let input: inputs::SubmitLinkedChatResult =
                decode(spec.name, arguments).map_err(invalid)?;
            let request = SubmitRequest {
                chat_link_id: &input.chat_link_id,
                task_id: &input.task_id,
                claim_id: &input.claim_id,
                status: &input.status,
                result: &input.result,
            };
            encode(&agent::submit_result(&app.tasks, agent, request).await?)
        }
        UPLOAD_LINKED_CHAT_ARTIFACT => {
            let input: inputs::UploadLinkedChatArtifact =
                decode(spec.name, arguments).map_err(invalid)?;
            let request = UploadRequest {
                chat_link_id: &input.chat_link_id,
                task_id: &input.task_id,
                claim_id: &input.claim_id,
                artifact_id: &input.artifact_id,
                name: &input.name,
                mime: &input.mime,
                content: &input.content,
            };
            encode(&agent::upload_artifact(&app.tasks, agent, request).await?)
        }
        other => Err(TaskError::Invalid(format!("unknown tool `{other}`"))),
    }
}
