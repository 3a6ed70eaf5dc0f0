//! The four graph tools: list the shared sessions, queue a run, read it (waiting if asked),
//! cancel it. Each decodes its arguments, calls one function of [`crate::runs`] or
//! [`crate::sessions`], and answers the value with a short text for the model.

use std::time::Duration;

use rmcp::model::CallToolResult;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::inputs::ArgumentError;
use super::tools::{Answer, Hints, McpTool, ToolContext, ToolError};
use crate::auth::Scope;
use crate::runs::{
    self, CancelOutcome, IDEMPOTENCY_KEY_CHARS, MAX_GET_WAIT, RUN_NOT_FOUND, RunRequest, RunView,
    Ticket,
};
use crate::sessions::{self, LIST_LIMIT, SessionList};

/// `list_graph_sessions`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListGraphSessionsInput {
    /// This connection's project; left out, the connection's own (the only one it may list).
    pub project_id: Option<String>,
    /// How many sessions to list (20 when left out).
    #[schemars(range(min = *LIST_LIMIT.start(), max = *LIST_LIMIT.end()))]
    pub limit: Option<i64>,
}

/// `list_graph_sessions`.
pub struct ListGraphSessions;

impl McpTool for ListGraphSessions {
    type Input = ListGraphSessionsInput;
    type Output = SessionList;
    const NAME: &'static str = "list_graph_sessions";
    const TITLE: &'static str = "List shared graph sessions";
    const SCOPE: Scope = Scope::Read;
    const HINTS: Hints = Hints::READ;

    fn description() -> String {
        format!(
            "List the Graph sessions the owner's desktop shares with this connection's project, as of the desktop's last sync, each with the graph_session_id and args_schema run_graph_session takes. \
             Call it with no arguments: project_id defaults to the connection's project (the server's instructions name it). \
             The list is empty until the owner shares a graph from the desktop. \
             Rejected: a project_id other than this connection's project, and a limit outside {}–{}.",
            LIST_LIMIT.start(),
            LIST_LIMIT.end()
        )
    }

    async fn call(
        cx: ToolContext<'_>,
        input: Self::Input,
    ) -> Result<Answer<SessionList>, ToolError> {
        let store = cx.app.store.as_ref();
        let project_id = input.project_id.as_deref().unwrap_or(&cx.agent.project_id);
        let list = sessions::list_sessions(store, cx.agent, project_id, input.limit).await?;
        let hint = match (list.sessions.is_empty(), list.last_sync_at) {
            (false, _) => "Start one with run_graph_session: its graph_session_id, arguments that fit its args_schema, and a new idempotency_key.".to_owned(),
            (true, Some(at)) => format!(
                "No graph is shared with this project yet (the desktop last synced at {at}): the owner shares graphs from the desktop."
            ),
            (true, None) => "The owner's desktop has not synced this project yet: ask the owner to start relay desktop and share a graph.".to_owned(),
        };
        Ok(Answer::with_hint(list, Some(hint)))
    }
}

/// `run_graph_session`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunGraphSessionInput {
    /// A session listed by list_graph_sessions.
    pub graph_session_id: String,
    /// The graph's arguments; they must fit the session's args_schema when it has one.
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// One key per intended run; retry with the same key after a lost response.
    #[schemars(length(min = *IDEMPOTENCY_KEY_CHARS.start(), max = *IDEMPOTENCY_KEY_CHARS.end()))]
    pub idempotency_key: String,
    /// A token cap for this run, below the owner's (which always applies).
    #[schemars(range(min = 1))]
    pub max_tokens: Option<i64>,
}

impl From<RunGraphSessionInput> for RunRequest {
    fn from(input: RunGraphSessionInput) -> Self {
        RunRequest {
            graph_session_id: input.graph_session_id,
            idempotency_key: input.idempotency_key,
            arguments: input.arguments,
            max_tokens: input.max_tokens,
        }
    }
}

/// `run_graph_session`. A client that declared the tasks extension gets the run as a task
/// instead (`super::tasks`).
pub struct RunGraphSession;

impl McpTool for RunGraphSession {
    type Input = RunGraphSessionInput;
    type Output = Ticket;
    const NAME: &'static str = "run_graph_session";
    const TITLE: &'static str = "Run a graph session on the owner's desktop";
    const SCOPE: Scope = Scope::Run;
    const HINTS: Hints = Hints {
        read_only: false,
        destructive: true,
        idempotent: false,
        open_world: true,
    };

    fn description() -> String {
        format!(
            "Queue a Graph run on the owner's online desktop in a connected project. \
             Retrieve progress and result with get_graph_run. \
             The desktop can go offline, and local tool approvals still apply. \
             Returns a ticket (command_id) at once: then call get_graph_run with wait_seconds {max_wait}, which waits for the result instead of you. \
             After a lost response, retry with the same idempotency_key to get the same run back, not a second run. \
             max_tokens lowers the run's token cap below the owner's (get_graph_run shows token_cap). \
             Rejected: a graph_session_id not shared with this project, an idempotency_key outside {}–{} characters, \
             arguments that do not fit the session's args_schema (the message names the failing path), \
             other arguments, and a key already used with different arguments.",
            IDEMPOTENCY_KEY_CHARS.start(),
            IDEMPOTENCY_KEY_CHARS.end(),
            max_wait = MAX_GET_WAIT.as_secs(),
        )
    }

    async fn call(cx: ToolContext<'_>, input: Self::Input) -> Result<Answer<Ticket>, ToolError> {
        let ticket = runs::queue_run(&cx.app.runs, cx.agent, input.into()).await?;
        let wait = MAX_GET_WAIT.as_secs();
        let hint = if ticket.replayed {
            format!(
                "This idempotency_key already queued this run, so no second run was started: call get_graph_run with its command_id and wait_seconds {wait} to follow it."
            )
        } else {
            format!(
                "Call get_graph_run with this command_id and wait_seconds {wait}: it waits for the result instead of you."
            )
        };
        Ok(Answer::with_hint(ticket, Some(hint)))
    }
}

/// `get_graph_run`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetGraphRunInput {
    /// The run's command_id from run_graph_session.
    pub command_id: String,
    /// Wait up to this many seconds for the run to finish (0 when left out).
    #[schemars(range(min = 0, max = MAX_GET_WAIT.as_secs()))]
    pub wait_seconds: Option<i64>,
}

/// `get_graph_run`.
pub struct GetGraphRun;

impl McpTool for GetGraphRun {
    type Input = GetGraphRunInput;
    type Output = RunView;
    const NAME: &'static str = "get_graph_run";
    const TITLE: &'static str = "Get a graph run's status and result";
    const SCOPE: Scope = Scope::Read;
    const HINTS: Hints = Hints::READ;

    fn description() -> String {
        format!(
            "Get the status, timestamps and result of a Graph run this connection started. \
             Pass wait_seconds (at most {max_wait}) and the call waits for the run to finish, answering as soon as it has: use that instead of waiting yourself, and call again while the run is not finished. \
             A result too large to post shows result_truncated: true; the full result stays on the owner's desktop. \
             A run not started by this connection, an unknown id and a malformed id all get \"{RUN_NOT_FOUND}\".",
            max_wait = MAX_GET_WAIT.as_secs()
        )
    }

    async fn call(cx: ToolContext<'_>, input: Self::Input) -> Result<Answer<RunView>, ToolError> {
        let wait = wait_seconds(input.wait_seconds)?;
        let progress = cx.progress;
        let on_change = |view: &RunView| -> futures_util::future::BoxFuture<'static, ()> {
            match progress {
                Some(sender) => sender.send(view),
                None => Box::pin(async {}),
            }
        };
        let view = runs::get_run_watching(
            &cx.app.runs,
            cx.agent,
            &input.command_id,
            wait,
            Some(&on_change),
        )
        .await?;
        let hint = run_hint(&view);
        Ok(Answer::with_hint(view, hint))
    }
}

/// `get_graph_run`'s optional `wait_seconds`: 0 to [`MAX_GET_WAIT`].
fn wait_seconds(seconds: Option<i64>) -> Result<Duration, ArgumentError> {
    let max = MAX_GET_WAIT.as_secs();
    match seconds {
        None => Ok(Duration::ZERO),
        Some(seconds) => u64::try_from(seconds)
            .ok()
            .filter(|s| *s <= max)
            .map(Duration::from_secs)
            .ok_or_else(|| ArgumentError(format!("wait_seconds must be from 0 to {max}"))),
    }
}

/// The tool result a finished task inlines for `view`: `get_graph_run`'s answer, except that a
/// failed run is an error result (the tool ran and reported an error; SEP-2663 keeps a failed
/// task for protocol errors).
pub fn run_result(view: &RunView) -> CallToolResult {
    let answer = Answer::with_hint(view.clone(), run_hint(view));
    if view.status == relay_protocol::RunStatus::Failed {
        super::tools::encode(answer.failed())
    } else {
        super::tools::encode(answer)
    }
}

/// What to do next with the run in `view`, in one sentence, where the JSON alone leaves it
/// open: how to keep waiting for a run not finished, where a result too large to post is.
fn run_hint(view: &RunView) -> Option<String> {
    // The owner's cap below the one asked for is said in words too: the model asked for more.
    let capped = match (view.token_cap, view.max_tokens) {
        (Some(cap), Some(asked)) if cap < asked => Some(format!(
            "It runs with the owner's token cap of {cap}, below the {asked} asked for."
        )),
        _ => None,
    };
    // A resume is said in words: the agent sees one run that took a restart, not two.
    let resumed = view.resumed.map(|resumed| {
        format!(
            "The desktop restarted during this run and resumed it from its journal ({}x, last at {}).",
            resumed.count, resumed.last_at
        )
    });
    let sentences: Vec<String> = [next_step(view), capped, resumed]
        .into_iter()
        .flatten()
        .collect();
    (!sentences.is_empty()).then(|| sentences.join(" "))
}

/// What to do next about the run, if anything.
fn next_step(view: &RunView) -> Option<String> {
    let wait = MAX_GET_WAIT.as_secs();
    if view.status.is_terminal() {
        return view.result_truncated.then(|| {
            "The result was too large to post: the full result is on the owner's desktop."
                .to_owned()
        });
    }
    Some(if !view.desktop.online {
        format!(
            "The owner's desktop is offline, so the run waits until it is back: tell the user, and call get_graph_run with wait_seconds {wait} later."
        )
    } else if let Some(waiting) = &view.waiting_for {
        format!(
            "It waits for {waiting}: call get_graph_run again with wait_seconds {wait} to keep waiting."
        )
    } else {
        format!("Not finished yet: call get_graph_run again with wait_seconds {wait}.")
    })
}

/// `cancel_graph_run`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelGraphRunInput {
    /// The run's command_id from run_graph_session.
    pub command_id: String,
}

/// `cancel_graph_run`.
pub struct CancelGraphRun;

impl McpTool for CancelGraphRun {
    type Input = CancelGraphRunInput;
    type Output = CancelOutcome;
    const NAME: &'static str = "cancel_graph_run";
    const TITLE: &'static str = "Cancel a graph run";
    const SCOPE: Scope = Scope::Run;
    const HINTS: Hints = Hints {
        read_only: false,
        destructive: true,
        idempotent: true,
        open_world: false,
    };

    fn description() -> String {
        format!(
            "Cancel a Graph run started by this connection. \
             A queued run is cancelled at once and never starts; a running run gets a cancel flag that the desktop reads within seconds, and it ends as cancelled. \
             A run that already finished is left unchanged (the answer says so), and a cancelled run cannot complete. \
             A run not started by this connection, an unknown id and a malformed id all get \"{RUN_NOT_FOUND}\"."
        )
    }

    async fn call(
        cx: ToolContext<'_>,
        input: Self::Input,
    ) -> Result<Answer<CancelOutcome>, ToolError> {
        let outcome = runs::cancel_run(&cx.app.runs, cx.agent, &input.command_id).await?;
        Ok(Answer::json(outcome))
    }
}
