//! The tools (four for graph runs, five for linked chat tasks): names, descriptions, argument
//! schemas, annotations, scopes, and the checking of the arguments an agent sends.

use rmcp::model::{MetaObject, Tool, ToolAnnotations};
use serde_json::{Map, Value, json};

use crate::auth::Scope;
use crate::chat_tasks::view;
use crate::chat_tasks::{
    GOAL_PREVIEW_BYTES, INBOX_LIMIT, LINK_NOT_FOUND, MAX_ARTIFACT_BYTES, MAX_ARTIFACT_ID_CHARS,
    MAX_ARTIFACTS_PER_TASK, MAX_TASK_RESULT_CHARS, NOT_CLAIMABLE, STALE_CLAIM, TASK_CANCELLED,
    TASK_EXPIRED, TASK_NOT_FOUND,
};
use crate::runs::{IDEMPOTENCY_KEY_CHARS, MAX_GET_WAIT, RUN_NOT_FOUND};
use crate::sessions::LIST_LIMIT;

/// `list_graph_sessions`.
pub const LIST_GRAPH_SESSIONS: &str = "list_graph_sessions";
/// `run_graph_session`.
pub const RUN_GRAPH_SESSION: &str = "run_graph_session";
/// `get_graph_run`.
pub const GET_GRAPH_RUN: &str = "get_graph_run";
/// `cancel_graph_run`.
pub const CANCEL_GRAPH_RUN: &str = "cancel_graph_run";
/// `list_linked_chat_tasks`.
pub const LIST_LINKED_CHAT_TASKS: &str = "list_linked_chat_tasks";
/// `get_linked_chat_task`.
pub const GET_LINKED_CHAT_TASK: &str = "get_linked_chat_task";
/// `claim_linked_chat_task`.
pub const CLAIM_LINKED_CHAT_TASK: &str = "claim_linked_chat_task";
/// `submit_linked_chat_result`.
pub const SUBMIT_LINKED_CHAT_RESULT: &str = "submit_linked_chat_result";
/// `upload_linked_chat_artifact`.
pub const UPLOAD_LINKED_CHAT_ARTIFACT: &str = "upload_linked_chat_artifact";

/// One tool's contract.
#[derive(Debug, Clone, Copy)]
pub struct ToolSpec {
    /// Tool name.
    pub name: &'static str,
    /// The scope a token needs to call it.
    pub scope: Scope,
    /// Whether it only reads.
    pub read_only: bool,
    /// Whether a write may destroy or replace something (hosts ask before such calls).
    pub destructive: bool,
    /// Whether repeating the same call changes nothing more.
    pub idempotent: bool,
    /// Whether it may reach beyond the relay: a graph run calls models and tools on the
    /// owner's desktop.
    pub open_world: bool,
}

/// The tools, in listing order: the graph tools first, then the chat task tools.
pub const TOOLS: [ToolSpec; 9] = [
    ToolSpec {
        name: LIST_GRAPH_SESSIONS,
        scope: Scope::Read,
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
    },
    ToolSpec {
        name: RUN_GRAPH_SESSION,
        scope: Scope::Run,
        read_only: false,
        destructive: true,
        idempotent: false,
        open_world: true,
    },
    ToolSpec {
        name: GET_GRAPH_RUN,
        scope: Scope::Read,
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
    },
    ToolSpec {
        name: CANCEL_GRAPH_RUN,
        scope: Scope::Run,
        read_only: false,
        destructive: true,
        idempotent: true,
        open_world: false,
    },
    ToolSpec {
        name: LIST_LINKED_CHAT_TASKS,
        scope: Scope::Read,
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
    },
    ToolSpec {
        name: GET_LINKED_CHAT_TASK,
        scope: Scope::Read,
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
    },
    ToolSpec {
        name: CLAIM_LINKED_CHAT_TASK,
        scope: Scope::Run,
        read_only: false,
        destructive: false,
        idempotent: true,
        open_world: false,
    },
    ToolSpec {
        name: SUBMIT_LINKED_CHAT_RESULT,
        scope: Scope::Run,
        read_only: false,
        destructive: false,
        idempotent: true,
        open_world: false,
    },
    ToolSpec {
        name: UPLOAD_LINKED_CHAT_ARTIFACT,
        scope: Scope::Run,
        read_only: false,
        destructive: false,
        idempotent: true,
        open_world: false,
    },
];

/// The spec of tool `name`.
pub fn spec(name: &str) -> Option<&'static ToolSpec> {
    TOOLS.iter().find(|tool| tool.name == name)
}

/// The tool's human-readable name, for hosts that label tool calls.
pub fn title(name: &str) -> &'static str {
    match name {
        LIST_GRAPH_SESSIONS => "List shared graph sessions",
        RUN_GRAPH_SESSION => "Run a graph session on the owner's desktop",
        GET_GRAPH_RUN => "Get a graph run's status and result",
        CANCEL_GRAPH_RUN => "Cancel a graph run",
        LIST_LINKED_CHAT_TASKS => "List this chat's assigned tasks",
        GET_LINKED_CHAT_TASK => "Get an assigned task",
        CLAIM_LINKED_CHAT_TASK => "Claim an assigned task",
        SUBMIT_LINKED_CHAT_RESULT => "Submit an assigned task's result",
        UPLOAD_LINKED_CHAT_ARTIFACT => "Attach a file to an assigned task",
        _ => "",
    }
}

fn description(name: &str) -> String {
    match name {
        LIST_GRAPH_SESSIONS => format!(
            "List the Graph sessions the owner's desktop shares with this connected project, as of the desktop's last sync. \
             The list is usually empty until the owner shares a session from the desktop. \
             Rejected: a project_id other than this connection's project, and a limit outside {}–{}.",
            LIST_LIMIT.start(),
            LIST_LIMIT.end()
        ),
        RUN_GRAPH_SESSION => format!(
            "Queue a Graph run on the owner's online desktop in a connected project. \
             Retrieve progress and result with get_graph_run. \
             The desktop can go offline, and local tool approvals still apply. \
             Returns a ticket (command_id, status \"queued\") at once, before the graph starts; check get_graph_run after about one desktop poll interval (20 s). \
             idempotency_key is required: after a lost response, retry with the same key to get the same run back instead of a second run. \
             arguments must fit the session's args_schema when list_graph_sessions shows one. \
             max_tokens (optional) lowers the run's token cap; the owner's cap for the session still applies, so asking for more than it runs at the owner's cap (get_graph_run shows token_cap). \
             Rejected: a graph_session_id not shared with this project (see list_graph_sessions), an idempotency_key outside {}–{} characters, \
             arguments that do not fit the session's args_schema (the message names the failing path), \
             arguments other than graph_session_id, arguments, idempotency_key and max_tokens, and a key already used with different arguments.",
            IDEMPOTENCY_KEY_CHARS.start(),
            IDEMPOTENCY_KEY_CHARS.end()
        ),
        GET_GRAPH_RUN => format!(
            "Get the status (queued, running, completed, failed, cancelled), timestamps and result of a Graph run started by this Connected agent with run_graph_session. \
             Runs usually take about a minute: look first about 20 s after queueing, then every 15 s or so (poll_after_seconds says when); \
             or pass wait_seconds (at most {max_wait}) and the call waits for the run to finish, answering as soon as it has. \
             A result too large to post shows result_truncated: true; the full result stays on the owner's desktop. \
             A run not started by this Connected agent, an unknown id and a malformed id all get \"{RUN_NOT_FOUND}\".",
            max_wait = MAX_GET_WAIT.as_secs()
        ),
        CANCEL_GRAPH_RUN => format!(
            "Cancel a Graph run started by this Connected agent. \
             A queued run is cancelled at once and never starts; a running run gets a cancel flag that the desktop reads within seconds, and it ends as cancelled. \
             A run that already finished is left unchanged (the answer says so), and a cancelled run cannot complete. \
             A run not started by this Connected agent, an unknown id and a malformed id all get \"{RUN_NOT_FOUND}\"."
        ),
        LIST_LINKED_CHAT_TASKS => format!(
            "List the tasks the owner assigned to this linked chat that are still open (queued or claimed), oldest first, at most {INBOX_LIMIT} (more: true when others wait). \
             Each shows task_id, status and the start of the goal (at most {GOAL_PREVIEW_BYTES} bytes; the whole goal comes with claim_linked_chat_task or get_linked_chat_task). \
             An empty list means nothing is waiting: tell the user and stop, do not poll in a loop. \
             To work on a task: claim_linked_chat_task, do the work, then submit_linked_chat_result with the claim_id. \
             Rejected: a chat_link_id that is not linked to this connection's project (\"{LINK_NOT_FOUND}\")."
        ),
        GET_LINKED_CHAT_TASK => format!(
            "Get one task of this linked chat in full: status (queued, claimed, completed, failed, cancelled, expired), the whole goal, expires_at (24 h after it was assigned), lease_until while claimed, and the result once submitted. \
             Rejected: a task of another chat link, an unknown id and a malformed id all get \"{TASK_NOT_FOUND}\"."
        ),
        CLAIM_LINKED_CHAT_TASK => format!(
            "Claim a queued task of this linked chat before working on it. Returns claim_id (pass it to submit_linked_chat_result and upload_linked_chat_artifact), lease_until and the whole goal. \
             Claiming a task this chat link already holds returns the same claim again (replayed: true), so a repeated call is safe. \
             The claim lapses at lease_until: submit before then, or the task goes back to the queue and a later claim gets a new claim_id. \
             Rejected: a task that is not this chat link's, or does not exist (\"{NOT_CLAIMABLE}\"), and a finished, cancelled or expired task (\"{NOT_CLAIMABLE}: task is ...\"). A rejected claim will not succeed on retry."
        ),
        SUBMIT_LINKED_CHAT_RESULT => format!(
            "Submit the outcome of a claimed task: status \"completed\" with the answer as result, or \"failed\" with the reason as result (at most {MAX_TASK_RESULT_CHARS} characters). \
             Sending the identical submit again (e.g. after a lost response) returns ok with replayed: true; the first result is kept. \
             Rejected, and not worth retrying: a stale claim_id (\"{STALE_CLAIM}\", or its lease lapsed), a cancelled task (\"{TASK_CANCELLED}\": a cancelled task cannot be completed), an expired task (\"{TASK_EXPIRED}\"), and a different status or result for a task already finished. \
             Tell the user what was rejected instead of resubmitting."
        ),
        UPLOAD_LINKED_CHAT_ARTIFACT => format!(
            "Attach a text file (a report, a patch, a table) to a claimed task before submitting it: content at most {MAX_ARTIFACT_BYTES} bytes, at most {MAX_ARTIFACTS_PER_TASK} artifacts per task. \
             Choose a stable artifact_id (1 to {MAX_ARTIFACT_ID_CHARS} characters of letters, digits, '.', '_', ':', '-') and reuse it when retrying: the same content again is a no-op (replayed: true). \
             Rejected: different content under an artifact_id already used, a stale claim_id (\"{STALE_CLAIM}\"), a cancelled (\"{TASK_CANCELLED}\") or expired task, and a task already finished."
        ),
        _ => String::new(),
    }
}

/// The JSON Schema of tool `name`'s arguments, derived from its input type
/// ([`super::inputs`]).
pub fn input_schema(name: &str) -> Value {
    Value::Object(super::inputs::input_schema(name).as_ref().clone())
}

/// `[{"type": "oauth2", "scopes": [scope]}]`: how a host learns which scope a tool needs.
pub fn security_schemes(scope: Scope) -> Value {
    json!([{"type": "oauth2", "scopes": [scope.as_str()]}])
}

/// The rmcp definition of a tool; `securitySchemes` rides in `_meta` and is copied to the
/// top level of `tools/list` on the way out (rmcp's `Tool` has no field for it).
pub fn definition(spec: &ToolSpec) -> Tool {
    // Every hint is stated on every tool, so no host falls back to the spec's defaults
    // (which assume a destructive, open-world tool).
    let annotations = ToolAnnotations::new()
        .read_only(spec.read_only)
        .destructive(spec.destructive)
        .idempotent(spec.idempotent)
        .open_world(spec.open_world);
    let mut meta = Map::new();
    meta.insert("securitySchemes".into(), security_schemes(spec.scope));
    let tool = Tool::new(
        spec.name,
        description(spec.name),
        super::inputs::input_schema(spec.name),
    )
    .with_title(title(spec.name))
    .with_annotations(annotations)
    .with_meta(MetaObject(meta));
    with_output_schema(tool)
}

/// The tool with the `outputSchema` derived from the type its successful answer serializes.
fn with_output_schema(tool: Tool) -> Tool {
    match tool.name.as_ref() {
        LIST_GRAPH_SESSIONS => tool.with_output_schema::<crate::sessions::SessionList>(),
        RUN_GRAPH_SESSION => tool.with_output_schema::<crate::runs::Ticket>(),
        GET_GRAPH_RUN => tool.with_output_schema::<crate::runs::RunView>(),
        CANCEL_GRAPH_RUN => tool.with_output_schema::<crate::runs::CancelOutcome>(),
        LIST_LINKED_CHAT_TASKS => tool.with_output_schema::<view::Inbox>(),
        GET_LINKED_CHAT_TASK => tool.with_output_schema::<view::TaskView>(),
        CLAIM_LINKED_CHAT_TASK => tool.with_output_schema::<view::ClaimView>(),
        SUBMIT_LINKED_CHAT_RESULT => tool.with_output_schema::<view::SubmitAck>(),
        UPLOAD_LINKED_CHAT_ARTIFACT => tool.with_output_schema::<view::UploadAck>(),
        _ => tool,
    }
}

/// All definitions, in listing order.
pub fn definitions() -> Vec<Tool> {
    TOOLS.iter().map(definition).collect()
}

/// Why a call's arguments do not fit the tool's contract, in words for the agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ArgumentError(pub String);
