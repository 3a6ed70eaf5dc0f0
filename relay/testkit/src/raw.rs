//! A raw JSON-RPC client for `/mcp` over Streamable HTTP, speaking the current (2026-07-28)
//! protocol with per-request `_meta`: what a tasks client does where no SDK has one yet.

use serde_json::{Map, Value, json};

/// The tasks extension's id.
pub const TASKS: &str = "io.modelcontextprotocol/tasks";

/// One client identity: a token and the capabilities every request declares.
pub struct RawClient {
    pub http: reqwest::Client,
    pub url: String,
    pub token: String,
    /// Declare the tasks extension in `_meta.clientCapabilities`.
    pub tasks: bool,
}

impl RawClient {
    pub fn new(url: &str, token: &str, tasks: bool) -> RawClient {
        RawClient {
            http: crate::http_client(),
            url: url.to_owned(),
            token: token.to_owned(),
            tasks,
        }
    }

    /// The `_meta` a current-protocol request carries.
    pub fn meta(&self) -> Value {
        let capabilities = if self.tasks {
            json!({"extensions": {TASKS: {}}})
        } else {
            json!({})
        };
        json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "raw-test-client", "version": "1.0.0"},
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        })
    }

    /// The POST of one request, not yet sent.
    pub fn post(&self, method: &str, params: Value) -> reqwest::RequestBuilder {
        let mut params = match params {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        params.insert("_meta".into(), self.meta());
        let name = params
            .get("name")
            .or_else(|| params.get("uri"))
            .or_else(|| params.get("taskId"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let mut request = self
            .http
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method);
        if let Some(name) = name {
            request = request.header("mcp-name", name);
        }
        request.body(body.to_string())
    }

    /// Sends one request and returns its JSON-RPC answer (`result` or `error`), from a JSON or
    /// an SSE body.
    pub async fn request(&self, method: &str, params: Value) -> Value {
        let response = self.post(method, params).send().await.expect("MCP answer");
        let status = response.status().as_u16();
        let text = response.text().await.expect("MCP body");
        answer_of(&text).unwrap_or_else(|| panic!("status {status}: no JSON-RPC answer in {text}"))
    }

    /// The `result` of a request that must succeed.
    pub async fn result(&self, method: &str, params: Value) -> Value {
        let answer = self.request(method, params).await;
        assert!(answer.get("error").is_none(), "{method} failed: {answer}");
        answer["result"].clone()
    }

    /// The error code of a request that must fail.
    pub async fn error_code(&self, method: &str, params: Value) -> i64 {
        let answer = self.request(method, params).await;
        answer["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("{method} was expected to fail: {answer}"))
    }
}

/// The message with an `id` in a JSON body or among an SSE body's `data:` lines.
pub fn answer_of(text: &str) -> Option<Value> {
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        return Some(value);
    }
    sse_messages(text)
        .into_iter()
        .find(|message| message.get("id").is_some() && message.get("method").is_none())
}

/// Every JSON message among an SSE body's `data:` lines.
pub fn sse_messages(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str(data.trim()).ok())
        .collect()
}

/// An open `subscriptions/listen` stream: its SSE messages, one at a time.
pub struct Listen {
    response: reqwest::Response,
    buffer: String,
}

impl RawClient {
    /// Opens a `subscriptions/listen` stream for `uris` and waits for its acknowledgment.
    pub async fn listen(&self, uris: &[&str]) -> Listen {
        self.listen_to(json!({"resourceSubscriptions": uris})).await
    }

    /// Opens a `subscriptions/listen` stream for the filter `notifications` (like
    /// `{"taskIds": [id]}`) and waits for its acknowledgment.
    pub async fn listen_to(&self, notifications: Value) -> Listen {
        self.listen_acknowledged(notifications).await.0
    }

    /// [`Self::listen_to`], with the acknowledgment.
    pub async fn listen_acknowledged(&self, notifications: Value) -> (Listen, Value) {
        let params = json!({"notifications": notifications});
        let response = self
            .post("subscriptions/listen", params)
            .send()
            .await
            .expect("listen answer");
        assert_eq!(response.status().as_u16(), 200, "listen refused");
        let mut listen = Listen {
            response,
            buffer: String::new(),
        };
        let ack = listen
            .next(std::time::Duration::from_secs(10))
            .await
            .expect("listen acknowledged");
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{ack}"
        );
        (listen, ack)
    }
}

impl Listen {
    /// The next message on the stream, or `None` when `within` passes first or it ends.
    pub async fn next(&mut self, within: std::time::Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                if let Some(message) = sse_messages(&event).into_iter().next() {
                    return Some(message);
                }
                continue;
            }
            match tokio::time::timeout_at(deadline, self.response.chunk()).await {
                Ok(Ok(Some(chunk))) => self
                    .buffer
                    .push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n")),
                _ => return None,
            }
        }
    }
}
