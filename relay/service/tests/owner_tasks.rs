//! The owner's side: link a chat, assign with an idempotency key (a double click makes one
//! task), watch the list with its labels and hint, cancel. Over the owner HTTP API with an
//! owner token, and through `relay admin`.

use crate::chat_support;
use crate::common;

use chat_support::{ChatService, chat_setup, claim, claim_id, submit_args};
use common::{TestService, call, decode, ok};
use relay_service::ServiceConfig;
use relay_service::chat_tasks::{NO_EVENT_SUBSCRIPTION_HINT, TASK_KEY_CONFLICT};
use serde_json::{Value, json};

struct Owner {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Owner {
    /// `path` of the owner API (under `/owner/v1`).
    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        self.send_to(method, &format!("/owner/v1{path}"), body)
            .await
    }

    /// `path` of the service, with the owner's token.
    async fn send_to(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        decode(request.send().await.expect("owner request")).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, path, None).await
    }
}

async fn owner(service: &TestService, project: &str) -> Owner {
    Owner {
        http: common::http_client(),
        base: service.base.clone(),
        token: service.mint_owner_token(project).await,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_click_assigns_one_task() {
    const CLICKS: usize = 10;
    let chat = chat_setup(ServiceConfig::default()).await;
    let owner = std::sync::Arc::new(owner(&chat.service, &chat.project).await);
    let path = format!("/chat-links/{}/tasks", chat.link);
    let body = json!({"goal": "Collect the open pricing questions", "idempotency_key": "3b241101-e2bb-4255-8caf-4136c566a962"});
    let clicks: Vec<_> = (0..CLICKS)
        .map(|_| {
            let (owner, path, body) = (owner.clone(), path.clone(), body.clone());
            tokio::spawn(async move { owner.post(&path, body).await })
        })
        .collect();
    let mut ids = std::collections::BTreeSet::new();
    let mut created = 0;
    for click in clicks {
        let (status, answer) = click.await.expect("click");
        assert_eq!(status, 200, "{answer}");
        ids.insert(answer["task_id"].as_str().expect("task id").to_owned());
        if answer["replayed"] == false {
            created += 1;
        }
        assert_eq!(answer["status_label"], "Waiting for Claude");
    }
    assert_eq!(ids.len(), 1, "every click got the same task");
    assert_eq!(created, 1);
    let (_, list) = owner.get(&path).await;
    assert_eq!(list["tasks"].as_array().map(Vec::len), Some(1));
    let (status, conflict) = owner
        .post(&path, json!({"goal": "Another goal", "idempotency_key": "3b241101-e2bb-4255-8caf-4136c566a962"}))
        .await;
    assert_eq!(status, 409);
    assert_eq!(conflict["error"], TASK_KEY_CONFLICT);
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_follows_a_task_from_assignment_to_result() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let owner = owner(&chat.service, &chat.project).await;
    let (status, link) = owner
        .post(
            "/chat-links",
            json!({"project_id": chat.project, "host": "claude"}),
        )
        .await;
    assert_eq!(status, 200, "{link}");
    assert_eq!(link["host"], "claude");
    assert_eq!(link["event_subscription"], false);
    let link_id = link["chat_link_id"].as_str().unwrap().to_owned();
    let tasks = format!("/chat-links/{link_id}/tasks");
    let (_, assigned) = owner
        .post(
            &tasks,
            json!({"goal": "Draft the release notes", "idempotency_key": "k-1"}),
        )
        .await;
    let task = assigned["task_id"].as_str().unwrap().to_owned();
    assert_eq!(assigned["status"], "queued");
    assert_eq!(assigned["expires_at"], "2026-11-09T09:30:00.000Z");

    let label = |list: &Value| list["tasks"][0]["status_label"].clone();
    let (status, list) = owner.get(&tasks).await;
    assert_eq!(status, 200);
    assert_eq!(label(&list), "Waiting for Claude");
    assert_eq!(list["hint"], NO_EVENT_SUBSCRIPTION_HINT);
    assert_eq!(list["refresh_after_seconds"], 15);

    let claim_id = claim_id(&claim(&chat.client, &link_id, &task).await);
    assert_eq!(label(&owner.get(&tasks).await.1), "Claimed by host chat");
    let upload = json!({"chat_link_id": link_id, "task_id": task, "claim_id": claim_id,
        "artifact_id": "notes-v1", "name": "notes.md", "mime": "text/markdown", "content": "# Notes"});
    ok(&call(&chat.client, "upload_linked_chat_artifact", upload).await);
    ok(&call(
        &chat.client,
        "submit_linked_chat_result",
        submit_args(&link_id, &task, &claim_id, "completed", "Notes attached."),
    )
    .await);
    let (_, list) = owner.get(&tasks).await;
    assert_eq!(label(&list), "Completed");
    assert_eq!(list["tasks"][0]["result"], "Notes attached.");
    let (status, detail) = owner.get(&format!("/tasks/{task}")).await;
    assert_eq!(status, 200);
    assert_eq!(detail["artifacts"][0]["artifact_id"], "notes-v1");
    assert_eq!(detail["artifacts"][0]["size_bytes"], 7);
    assert_eq!(
        detail["artifacts"][0]["sha256"],
        relay_service::runs::sha256_hex("# Notes")
    );
    let (status, artifact) = owner
        .get(&format!("/tasks/{task}/artifacts/notes-v1"))
        .await;
    assert_eq!(status, 200);
    assert_eq!(artifact["content"], "# Notes");
    assert_eq!(
        owner.get(&format!("/tasks/{task}/artifacts/nope")).await.0,
        404
    );
    let (_, cancelled) = owner
        .post(&format!("/tasks/{task}/cancel"), json!({}))
        .await;
    assert_eq!(cancelled["already_finished"], true);
    assert_eq!(cancelled["status_label"], "Completed");
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hint_shows_only_without_an_event_subscription() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let owner = owner(&chat.service, &chat.project).await;
    let (_, link) = owner
        .post(
            "/chat-links",
            json!({"project_id": chat.project, "host": "chatgpt", "event_subscription": true}),
        )
        .await;
    let link_id = link["chat_link_id"].as_str().unwrap().to_owned();
    let tasks = format!("/chat-links/{link_id}/tasks");
    owner
        .post(
            &tasks,
            json!({"goal": "Check the inbox", "idempotency_key": "k-2"}),
        )
        .await;
    let (_, list) = owner.get(&tasks).await;
    assert_eq!(list["hint"], Value::Null);
    assert_eq!(list["tasks"][0]["status_label"], "Waiting for host chat");
    let (status, _) = owner
        .send(
            reqwest::Method::PUT,
            &format!("/chat-links/{link_id}/event-subscription"),
            Some(json!({"active": false})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        owner.get(&tasks).await.1["hint"],
        NO_EVENT_SUBSCRIPTION_HINT
    );
    let (_, cancelled) = owner
        .post(
            &format!(
                "/tasks/{}/cancel",
                list["tasks"][0]["task_id"].as_str().unwrap()
            ),
            json!({}),
        )
        .await;
    assert_eq!(cancelled["cancelled"], true);
    assert_eq!(
        owner.get(&tasks).await.1["tasks"][0]["status_label"],
        "Cancelled"
    );
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_reaches_only_their_own_links_and_tasks() {
    let chat = chat_setup(ServiceConfig::default()).await;
    let service = &chat.service;
    let task = service
        .assign_goal(&chat.link, "Private work", "private-1")
        .await;
    let bob_project = service.project("b", "bob").await;
    let bob = owner(service, &bob_project).await;
    assert_eq!(
        bob.get(&format!("/chat-links/{}/tasks", chat.link)).await.0,
        404
    );
    assert_eq!(bob.get(&format!("/tasks/{task}")).await.0, 404);
    assert_eq!(
        bob.post(&format!("/tasks/{task}/cancel"), json!({}))
            .await
            .0,
        404
    );
    let (status, _) = bob
        .post(
            &format!("/chat-links/{}/tasks", chat.link),
            json!({"goal": "x", "idempotency_key": "k"}),
        )
        .await;
    assert_eq!(status, 404);
    let (status, body) = bob
        .post(
            "/chat-links",
            json!({"project_id": chat.project, "host": "claude"}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    // Agent and desktop tokens are not owner tokens.
    let agent = Owner {
        token: chat.token.clone(),
        ..owner(service, &chat.project).await
    };
    assert_eq!(
        agent
            .get(&format!("/chat-links/{}/tasks", chat.link))
            .await
            .0,
        401
    );
    let (status, body) = owner(service, &chat.project)
        .await
        .post(
            "/chat-links",
            json!({"project_id": chat.project, "host": "gemini"}),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("claude, chatgpt, other")
    );
    assert_eq!(service.stored_task(&task).await.goal, "Private work");
    chat.service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_request_bodies_are_bounded() {
    use relay_service::http::owner_api::MAX_OWNER_BODY_BYTES;
    let chat = chat_setup(ServiceConfig::default()).await;
    let owner = owner(&chat.service, &chat.project).await;
    let path = format!("/chat-links/{}/tasks", chat.link);
    let body_of = |len: usize| {
        let shell = json!({"goal": "", "idempotency_key": "k"}).to_string();
        json!({"goal": "g".repeat(len - shell.len()), "idempotency_key": "k"})
    };
    let at_limit = body_of(MAX_OWNER_BODY_BYTES);
    assert_eq!(at_limit.to_string().len(), MAX_OWNER_BODY_BYTES);
    let (status, answer) = owner.post(&path, at_limit).await;
    assert_eq!(status, 400, "read, then refused for its goal: {answer}");
    assert!(answer["error"].as_str().unwrap().contains("goal"));
    let (status, answer) = owner.post(&path, body_of(MAX_OWNER_BODY_BYTES + 1)).await;
    assert_eq!(status, 413, "not even read");
    assert!(
        answer["error"].as_str().unwrap_or("").contains("too large"),
        "the owner API's JSON error object: {answer}"
    );
    chat.service.stop().await;
}

/// The owner API lives under `/owner/v1` alone: every unversioned path of earlier releases
/// answers 404 and changes nothing, while the same request under `/owner/v1` is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unversioned_owner_paths_answer_404() {
    use reqwest::Method;
    let chat = chat_setup(ServiceConfig::default()).await;
    let owner = owner(&chat.service, &chat.project).await;
    let task = chat
        .service
        .assign_goal(&chat.link, "Stays queued", "old-paths-1")
        .await;
    let link = &chat.link;
    let assign = json!({"goal": "A second task", "idempotency_key": "old-paths-2"});
    let requests = [
        (
            Method::POST,
            "/chat-links".to_owned(),
            Some(json!({"project_id": chat.project, "host": "claude"})),
        ),
        (
            Method::PUT,
            format!("/chat-links/{link}/event-subscription"),
            Some(json!({"active": true})),
        ),
        (Method::GET, format!("/chat-links/{link}/tasks"), None),
        (
            Method::POST,
            format!("/chat-links/{link}/tasks"),
            Some(assign),
        ),
        (Method::GET, format!("/tasks/{task}"), None),
        (Method::GET, format!("/tasks/{task}/artifacts/none"), None),
        (
            Method::POST,
            format!("/tasks/{task}/cancel"),
            Some(json!({})),
        ),
    ];
    for (method, path, body) in &requests {
        let (status, answer) = owner
            .send_to(method.clone(), &format!("/owner{path}"), body.clone())
            .await;
        assert_eq!(status, 404, "{method} /owner{path} is gone: {answer}");
        assert_eq!(
            answer, "",
            "no route, not the API's own refusal: {method} /owner{path}"
        );
    }
    let stored = chat.service.stored_task(&task).await;
    assert_eq!(
        stored.status.as_str(),
        "queued",
        "the old cancel changed nothing"
    );
    let (_, list) = owner.get(&format!("/chat-links/{link}/tasks")).await;
    assert_eq!(
        list["tasks"].as_array().map(Vec::len),
        Some(1),
        "the old assign made no task: {list}"
    );
    for (method, path, body) in requests {
        let (status, answer) = owner.send(method.clone(), &path, body).await;
        if path.contains("/artifacts/") {
            assert_eq!(status, 404, "{answer}");
            assert_eq!(answer["error"], "artifact not found on this task");
        } else {
            assert_eq!(status, 200, "{method} /owner/v1{path}: {answer}");
        }
    }
    chat.service.stop().await;
}
