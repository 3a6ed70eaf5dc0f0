//! A local HTTP server for provider tests: it answers from a script (canned replies in each
//! API's documented format, faults such as 429 or 503, a reply that stalls), forwards to a real
//! upstream (the local llama-server) when the script is used up, and records every request and
//! what the upstream reported (usage, finish reasons, whether the client went away early).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode};
use axum::response::Response;
use futures_util::Stream;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Scripted {
    /// A complete answer.
    Reply {
        status: u16,
        headers: Vec<(&'static str, String)>,
        content_type: &'static str,
        body: String,
    },
    /// Sends `first` (a 200 event stream) and then nothing, until the client goes away.
    Stall { first: String },
}

impl Scripted {
    /// A JSON answer.
    pub fn json(status: u16, body: Value) -> Self {
        Scripted::Reply {
            status,
            headers: Vec::new(),
            content_type: "application/json",
            body: body.to_string(),
        }
    }

    /// An event stream of `events` (each `(event name, data)`; no name: data only).
    pub fn sse(events: &[(Option<&str>, Value)]) -> Self {
        let mut body = String::new();
        for (name, data) in events {
            if let Some(name) = name {
                body.push_str(&format!("event: {name}\n"));
            }
            body.push_str(&format!("data: {data}\n\n"));
        }
        Scripted::Reply {
            status: 200,
            headers: Vec::new(),
            content_type: "text/event-stream",
            body,
        }
    }

    /// A raw event stream body.
    pub fn sse_text(body: impl Into<String>) -> Self {
        Scripted::Reply {
            status: 200,
            headers: Vec::new(),
            content_type: "text/event-stream",
            body: body.into(),
        }
    }

    /// A failure with an optional `Retry-After`.
    pub fn status(status: u16, retry_after: Option<&str>, body: Value) -> Self {
        Scripted::Reply {
            status,
            headers: retry_after
                .map(|v| vec![("retry-after", v.to_owned())])
                .unwrap_or_default(),
            content_type: "application/json",
            body: body.to_string(),
        }
    }
}

/// What the server saw of one request.
#[derive(Debug, Clone, Default)]
pub struct Record {
    /// Path and query.
    pub path: String,
    /// Request headers.
    pub headers: HeaderMap,
    /// The JSON body.
    pub body: Value,
    /// The status answered.
    pub status: u16,
    /// Whether it was forwarded to the upstream.
    pub forwarded: bool,
    /// The answer as it was sent (for forwarded streams: what got through).
    pub answer: String,
    /// The answer reached its end.
    pub completed: bool,
    /// The client went away before the end.
    pub dropped: bool,
}

impl Record {
    /// `(prompt, completion)` tokens the answer reported (OpenAI's `usage`).
    pub fn openai_usage(&self) -> Option<(u64, u64)> {
        let mut found = None;
        for value in answer_values(&self.answer) {
            if let Some(usage) = value.get("usage").filter(|u| u.is_object()) {
                found = Some((
                    usage["prompt_tokens"].as_u64().unwrap_or(0),
                    usage["completion_tokens"].as_u64().unwrap_or(0),
                ));
            }
        }
        found
    }

    /// Finish reasons the answer reported.
    pub fn finish_reasons(&self) -> Vec<String> {
        answer_values(&self.answer)
            .iter()
            .flat_map(|v| {
                v["choices"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|c| c["finish_reason"].as_str().map(str::to_owned))
            })
            .collect()
    }
}

/// Every JSON document in an answer: the data of each event, or the whole body.
fn answer_values(answer: &str) -> Vec<Value> {
    if let Ok(value) = serde_json::from_str::<Value>(answer) {
        return vec![value];
    }
    answer
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect()
}

struct Shared {
    script: Mutex<VecDeque<Scripted>>,
    /// Answered once the script is used up and there is no upstream.
    otherwise: Mutex<Option<Scripted>>,
    upstream: Option<String>,
    records: Mutex<Vec<Record>>,
    client: reqwest::Client,
}

/// A running test server; stops when dropped.
pub struct TestServer {
    /// `http://127.0.0.1:PORT`.
    pub origin: String,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl TestServer {
    /// A server answering from `script`, then forwarding to `upstream` (an origin, like
    /// `http://127.0.0.1:8088`), or failing with 500 when there is none.
    pub async fn start(script: Vec<Scripted>, upstream: Option<String>) -> Self {
        let shared = Arc::new(Shared {
            script: Mutex::new(script.into()),
            otherwise: Mutex::new(None),
            upstream,
            records: Mutex::new(Vec::new()),
            // llama-server closes a connection after a streamed reply: reusing it raced the
            // close and failed the next forward.
            client: graphrelay_net::build(
                graphrelay_net::client_builder()
                    .expect("client builder")
                    .pool_max_idle_per_host(0),
            )
            .expect("client"),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let origin = format!("http://{}", listener.local_addr().expect("addr"));
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopped.cancelled().await })
                .await;
        });
        Self {
            origin,
            shared,
            stop,
        }
    }

    /// The base URL for a provider (`origin/v1`).
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.origin)
    }

    /// Answers every request past the script with `answer`.
    pub fn otherwise(&self, answer: Scripted) {
        *self.shared.otherwise.lock().expect("lock") = Some(answer);
    }

    /// Every request so far.
    pub fn records(&self) -> Vec<Record> {
        self.shared.records.lock().expect("lock").clone()
    }

    /// Waits (bounded) until every recorded answer has completed or been dropped: a dropped
    /// connection reaches the server a little after the client let go.
    pub async fn settled(&self) -> Vec<Record> {
        for _ in 0..200 {
            let records = self.records();
            if records.iter().all(|r| r.completed || r.dropped) {
                return records;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        self.records()
    }
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request<Body>) -> Response {
    let path = request
        .uri()
        .path_and_query()
        .map_or_else(String::new, |p| p.to_string());
    let headers = request.headers().clone();
    let bytes = axum::body::to_bytes(request.into_body(), 16 * 1024 * 1024)
        .await
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let index = {
        let mut records = shared.records.lock().expect("lock");
        records.push(Record {
            path: path.clone(),
            headers: headers.clone(),
            body,
            ..Record::default()
        });
        records.len() - 1
    };
    let next = shared.script.lock().expect("lock").pop_front();
    let next = match next {
        Some(next) => Some(next),
        None if shared.upstream.is_some() => None,
        None => Some(
            shared
                .otherwise
                .lock()
                .expect("lock")
                .clone()
                .unwrap_or_else(|| {
                    Scripted::status(
                        500,
                        None,
                        serde_json::json!({"error": {"message": "the test script is used up"}}),
                    )
                }),
        ),
    };
    match next {
        Some(Scripted::Reply {
            status,
            headers: extra,
            content_type,
            body,
        }) => reply(&shared, index, status, extra, content_type, body),
        Some(Scripted::Stall { first }) => stall(&shared, index, first),
        None => forward(&shared, index, &path, &headers, bytes).await,
    }
}

/// Answers record `index` with a scripted reply.
fn reply(
    shared: &Arc<Shared>,
    index: usize,
    status: u16,
    extra: Vec<(&'static str, String)>,
    content_type: &'static str,
    body: String,
) -> Response {
    let mut response = Response::new(Body::from(body.clone()));
    *response.status_mut() = StatusCode::from_u16(status).expect("status");
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static(content_type));
    for (name, value) in extra {
        response
            .headers_mut()
            .insert(name, HeaderValue::from_str(&value).expect("header"));
    }
    let mut records = shared.records.lock().expect("lock");
    let record = &mut records[index];
    record.status = status;
    record.answer = body;
    record.completed = true;
    response
}

/// Answers record `index` with `first` and then nothing, for ever.
fn stall(shared: &Arc<Shared>, index: usize, first: String) -> Response {
    let stream = Tee {
        inner: Box::pin(futures_util::stream::unfold(
            Some(first),
            |first| async move {
                match first {
                    Some(text) => Some((Ok(Bytes::from(text)), None)),
                    None => std::future::pending().await,
                }
            },
        )),
        shared: shared.clone(),
        index,
        seen: Vec::new(),
        done: false,
    };
    {
        let mut records = shared.records.lock().expect("lock");
        records[index].status = 200;
    }
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    response
}

async fn forward(
    shared: &Arc<Shared>,
    index: usize,
    path: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let upstream = shared.upstream.clone().expect("upstream");
    let mut request = shared.client.post(format!("{upstream}{path}")).body(body);
    for name in [
        "content-type",
        "authorization",
        "x-api-key",
        "anthropic-version",
    ] {
        if let Some(value) = headers.get(name) {
            request = request.header(name, value.clone());
        }
    }
    let upstream_response = match request.send().await {
        Ok(r) => r,
        Err(e) => {
            let mut records = shared.records.lock().expect("lock");
            let answer = format!("upstream: {e:?}");
            records[index].status = 502;
            records[index].completed = true;
            records[index].answer = answer.clone();
            let mut response = Response::new(Body::from(answer));
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            return response;
        }
    };
    let status = upstream_response.status().as_u16();
    let content_type = upstream_response
        .headers()
        .get("content-type")
        .cloned()
        .unwrap_or(HeaderValue::from_static("application/json"));
    {
        let mut records = shared.records.lock().expect("lock");
        records[index].status = status;
        records[index].forwarded = true;
    }
    let stream = Tee {
        inner: Box::pin(upstream_response.bytes_stream()),
        shared: shared.clone(),
        index,
        seen: Vec::new(),
        done: false,
    };
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = StatusCode::from_u16(status).expect("status");
    response.headers_mut().insert("content-type", content_type);
    response
}

type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, reqwest::Error>> + Send>>;

/// Passes an answer through and records it; notices when the client goes away first (the
/// server then drops this stream before its end, which also drops the upstream request).
struct Tee {
    inner: ByteStream,
    shared: Arc<Shared>,
    index: usize,
    seen: Vec<u8>,
    done: bool,
}

impl Tee {
    fn finish(&mut self, completed: bool) {
        self.done = true;
        let mut records = self.shared.records.lock().expect("lock");
        let record = &mut records[self.index];
        record.answer = String::from_utf8_lossy(&self.seen).into_owned();
        record.completed = completed;
        record.dropped = !completed;
    }
}

impl Stream for Tee {
    type Item = Result<Bytes, reqwest::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.as_mut().poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(bytes))) => {
                let bytes = bytes.clone();
                self.seen.extend_from_slice(&bytes);
            }
            Poll::Ready(None) => self.finish(true),
            Poll::Ready(Some(Err(_))) => self.finish(false),
            Poll::Pending => {}
        }
        polled
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        if !self.done {
            self.finish(false);
        }
    }
}
