//! Chat task helpers on top of `common`: a service with chat links, assignment, and the chat
//! tools' arguments. Kept apart from `common` (and as an extension trait) so the two can
//! change independently.

use relay_service::ServiceConfig;
use relay_service::admin::{self, TokenSpec};
use relay_service::chat_tasks::owner::{self, Acting, AssignRequest};
use relay_service::store::TaskRecord;
use serde_json::{Value, json};

use crate::{Era, McpClient, TestService, call, mcp_client, ok};

/// A service with project `p` (owner `alice`), two Claude chat links on it, and an agent
/// client with both scopes: the usual start of a chat task test.
pub struct Chat {
    pub service: TestService,
    pub project: String,
    /// The link tasks are assigned to.
    pub link: String,
    /// Another link of the same project.
    pub other_link: String,
    pub token: String,
    pub client: McpClient,
}

/// See [`Chat`].
pub async fn chat_setup(config: ServiceConfig) -> Chat {
    let service = TestService::start_with_config(config).await;
    let project = service.project("p", "alice").await;
    let link = service.link_chat(&project, "claude").await;
    let other_link = service.link_chat(&project, "claude").await;
    let token = service.full_agent(&project).await;
    let client = mcp_client(&service.mcp_url(), &token, Era::Current).await;
    Chat {
        service,
        project,
        link,
        other_link,
        token,
        client,
    }
}

/// Chat task actions on a [`TestService`], through the domain functions.
// Only the tests call these, on their own runtime: no caller needs a `Send` bound spelled out.
#[allow(async_fn_in_trait)]
pub trait ChatService {
    /// A chat link on `project` to a `host` chat, without event subscription.
    async fn link_chat(&self, project: &str, host: &str) -> String;
    /// Assigns `goal` to `link` under `key` as the operator; returns the task id.
    async fn assign_goal(&self, link: &str, goal: &str, key: &str) -> String;
    /// An owner token for the owner of `project`.
    async fn mint_owner_token(&self, project: &str) -> String;
    /// The task as stored (bypassing every access check).
    async fn stored_task(&self, task_id: &str) -> TaskRecord;
}

impl ChatService for TestService {
    async fn link_chat(&self, project: &str, host: &str) -> String {
        owner::create_link(&self.app.tasks, Acting::Operator, project, host, false)
            .await
            .expect("create chat link")
            .chat_link_id
    }

    async fn assign_goal(&self, link: &str, goal: &str, key: &str) -> String {
        let request = AssignRequest {
            chat_link_id: link,
            goal,
            idempotency_key: key,
        };
        owner::assign_task(&self.app.tasks, Acting::Operator, request)
            .await
            .expect("assign task")
            .task
            .task_id
            .to_string()
    }

    async fn mint_owner_token(&self, project: &str) -> String {
        admin::create_token(&self.app.admin(), project, TokenSpec::Owner)
            .await
            .expect("create owner token")
            .token
    }

    async fn stored_task(&self, task_id: &str) -> TaskRecord {
        self.app
            .store
            .task(task_id.parse().expect("task id"))
            .await
            .expect("read task")
            .expect("task exists")
    }
}

/// `claim_linked_chat_task` / `get_linked_chat_task` arguments.
pub fn claim_args(link: &str, task: &str) -> Value {
    json!({"chat_link_id": link, "task_id": task})
}

/// `submit_linked_chat_result` arguments.
pub fn submit_args(link: &str, task: &str, claim: &str, status: &str, result: &str) -> Value {
    json!({"chat_link_id": link, "task_id": task, "claim_id": claim, "status": status, "result": result})
}

/// Claims `task` on `link`, expecting success; returns the claim answer.
pub async fn claim(client: &McpClient, link: &str, task: &str) -> Value {
    ok(&call(client, "claim_linked_chat_task", claim_args(link, task)).await)
}

/// The claim id of a claim answer.
pub fn claim_id(answer: &Value) -> String {
    answer["claim_id"].as_str().expect("claim id").to_owned()
}
