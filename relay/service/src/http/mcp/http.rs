//! The HTTP side of `/mcp`: the bearer-token gate in front of rmcp, the HTTP-level scope check,
//! and the copy of each tool's `_meta.securitySchemes` to the top level of `tools/list`.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::transport::common::http_header::HEADER_SESSION_ID;
use serde::Deserialize;
use serde_json::{Value, json};

use super::legacy_sessions::SessionId;
use super::listen;
use super::tools::{Registry, insufficient_scope_result};
use super::{GraphTools, Mcp, direct};
use crate::auth::{AgentIdentity, Scope};
use crate::http::AppState;
use crate::http::edge::Agent;
use crate::http::metrics::{ToolOutcome, UNKNOWN_TOOL};
use crate::http::oauth;
use crate::http::request_log::Refusal;

/// Largest MCP request body accepted.
pub const MAX_MCP_BODY_BYTES: usize = 1024 * 1024;
/// Largest `tools/list` answer rewritten; the four definitions are a few KiB.
const MAX_LISTING_BYTES: usize = 1024 * 1024;

/// Just enough of a JSON-RPC message to route it.
#[derive(Deserialize)]
struct Peek {
    id: Option<Value>,
    method: Option<String>,
    params: Option<PeekParams>,
}

#[derive(Deserialize)]
struct PeekParams {
    name: Option<String>,
}

/// Authenticates every `/mcp` request and puts the agent's identity in its extensions, where
/// rmcp hands it to the tools (inside `http::request::Parts`).
pub async fn gate(
    State(mcp): State<Mcp>,
    Agent(agent): Agent,
    request: Request,
    next: Next,
) -> Response {
    let app = &mcp.app;
    let base = oauth::base_url(app, request.headers());
    let (mut parts, body) = request.into_parts();
    let mut kind = Kind::Other;
    let body = if parts.method == Method::POST {
        let checks = Checks {
            app,
            tools: &mcp.tools,
            agent: &agent,
            base: &base,
        };
        let bytes = match read_message(&checks, body, &mut parts).await {
            Ok((bytes, found)) => {
                kind = found;
                bytes
            }
            Err(refusal) => return *refusal,
        };
        if matches!(kind, Kind::Call) && direct::plain_headers(&parts.headers) {
            let graph = GraphTools { mcp: mcp.clone() };
            if let Some(call) = direct::parse(&graph, &parts.headers, &bytes) {
                return direct::answer(&graph, &agent, &parts, call).await;
            }
        }
        Body::from(bytes)
    } else {
        if let Err(wait) = app.rate.check(&agent.token_id) {
            return rate_limited(app, wait, None);
        }
        body
    };
    let listen_tasks = match &kind {
        Kind::Listen(ids) => {
            let accepted = listen::readable_tasks(app, &agent, ids).await;
            parts.extensions.insert(accepted.clone());
            Some(accepted)
        }
        _ => None,
    };
    parts.extensions.insert(agent);
    let response = next.run(Request::from_parts(parts, body)).await;
    if response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
        // rmcp answers a message it cannot read as MCP (too deeply nested, not a JSON-RPC
        // request) with a plain-text 415; the transport rule is a 400 with a JSON-RPC error.
        return invalid_request(
            "the body is not a JSON-RPC message this server can read (too deeply nested, or not an MCP request): send one JSON-RPC request object",
        );
    }
    match (kind, listen_tasks) {
        (Kind::ListsTools, _) => hoist_security_schemes(response).await,
        (Kind::Listen(_), Some(accepted)) if response.status() == StatusCode::OK => {
            listen::acknowledge_task_ids(response, &accepted)
        }
        _ => response,
    }
}

/// What the gate does besides passing a message on.
enum Kind {
    /// Nothing more.
    Other,
    /// `tools/call` the gate did not refuse for its scope: the direct path may answer it.
    Call,
    /// `tools/list`: its answer gets the security schemes hoisted.
    ListsTools,
    /// `subscriptions/listen` naming these task ids (with the tasks extension declared).
    Listen(Vec<String>),
}

/// What the gate checks a message against: the service (the token's rate), the tools (each
/// one's scope), the agent, and the base URL its challenges name.
struct Checks<'a> {
    app: &'a AppState,
    tools: &'a Registry,
    agent: &'a AgentIdentity,
    base: &'a str,
}

/// Reads a POST's JSON-RPC message within the body limit and checks what the gate checks
/// before rmcp sees it: one message (no batch), JSON, the token's rate, the tool's scope.
/// Returns the message to pass on and what more the gate does with it, or the refusal to
/// answer.
async fn read_message(
    checks: &Checks<'_>,
    body: Body,
    parts: &mut axum::http::request::Parts,
) -> Result<(Bytes, Kind), Box<Response>> {
    let Checks {
        app,
        tools,
        agent,
        base,
    } = *checks;
    let Ok(bytes) = axum::body::to_bytes(body, MAX_MCP_BODY_BYTES).await else {
        return Err(Box::new(too_large()));
    };
    let bytes = mended(bytes);
    let peek = serde_json::from_slice::<Peek>(&bytes);
    if peek.is_err()
        && let Err(error) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes)
    {
        return Err(Box::new(parse_error(&error)));
    }
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(Box::new(invalid_request(
            "JSON-RPC batches are not accepted (MCP removed them in 2025-06-18): send one message per request",
        )));
    }
    if let Err(wait) = app.rate.check(&agent.token_id) {
        let id = peek.as_ref().ok().and_then(|p| p.id.clone());
        let called = peek
            .as_ref()
            .ok()
            .filter(|p| p.method.as_deref() == Some("tools/call"))
            .map(|p| tool_label(tools, p.params.as_ref().and_then(|p| p.name.as_deref())));
        if let Some(tool) = called {
            app.metrics.tools.record(tool, ToolOutcome::RateLimited);
        }
        return Err(Box::new(rate_limited(app, wait, called.map(|_| id))));
    }
    let mut kind = Kind::Other;
    if let Ok(peek) = peek {
        match peek.method.as_deref() {
            Some("initialize") => {
                parts.extensions.insert(OpensSession);
            }
            Some("tools/list") => kind = Kind::ListsTools,
            Some("subscriptions/listen") => {
                let params = serde_json::from_slice::<Value>(&bytes)
                    .ok()
                    .and_then(|message| message.get("params").cloned());
                if let Some(ids) = params.as_ref().and_then(listen::requested_task_ids) {
                    kind = Kind::Listen(ids);
                }
            }
            Some("tools/call") => {
                let name = peek.params.and_then(|p| p.name).unwrap_or_default();
                if let Some(scope) = tools.scope(&name)
                    && !agent.has_scope(scope)
                {
                    app.metrics.tools.record(&name, ToolOutcome::Refused);
                    return Err(Box::new(insufficient_scope(base, &name, scope, peek.id)));
                }
                kind = Kind::Call;
            }
            _ => {}
        }
    }
    Ok((bytes, kind))
}

/// 413 with a JSON-RPC error for a body past [`MAX_MCP_BODY_BYTES`].
fn too_large() -> Response {
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32600, "message": format!("MCP requests are limited to {MAX_MCP_BODY_BYTES} bytes")},
    });
    (StatusCode::PAYLOAD_TOO_LARGE, axum::Json(body)).into_response()
}

/// `name` as the metrics' tool label: a tool of the registry, else [`UNKNOWN_TOOL`].
fn tool_label<'a>(tools: &'a Registry, name: Option<&str>) -> &'a str {
    name.and_then(|name| tools.names().into_iter().find(|known| *known == name))
        .unwrap_or(UNKNOWN_TOOL)
}

/// A request past its token's rate: a tool call gets an in-band tool error (what a model reads),
/// anything else 429; both say when to retry, and the HTTP answer carries `Retry-After`.
fn rate_limited(
    app: &AppState,
    wait: std::time::Duration,
    call: Option<Option<Value>>,
) -> Response {
    let error = crate::http::rate::RateLimited::new(app.rate.limit(), wait);
    let retry_after = error.retry_after_secs.to_string();
    let mut response = match call {
        Some(id) => {
            let mut result = CallToolResult::error(vec![ContentBlock::text(error.to_string())]);
            result.result_type = None;
            let body = json!({"jsonrpc": "2.0", "id": id.unwrap_or(Value::Null), "result": result});
            Refusal::RATE_LIMITED.mark((StatusCode::OK, axum::Json(body)).into_response())
        }
        None => (StatusCode::TOO_MANY_REQUESTS, error.to_string()).into_response(),
    };
    if let Ok(value) = HeaderValue::from_str(&retry_after) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// Marks a POST whose JSON-RPC method is `initialize`: a 2025-era client opening a session.
#[derive(Clone, Copy)]
struct OpensSession;

/// The service's 2025-era sessions around rmcp's stateless serving (see [`super::legacy_sessions`]):
/// a successful `initialize` opens one and answers its id; a request naming a session must
/// come from the token that opened it (404 otherwise, as for a missing or ended session); a
/// `DELETE` ends one with 204 (404 for none). rmcp never sees the session header.
pub async fn legacy_sessions(
    State(app): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    // The gate put the agent here; without one nothing gets this far.
    let Some(token_id) = request
        .extensions()
        .get::<AgentIdentity>()
        .map(|agent| agent.token_id.clone())
    else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    let named = request
        .headers()
        .get(HEADER_SESSION_ID)
        .map(|value| value.to_str().ok().and_then(SessionId::parse));
    let sessions = &app.mcp_sessions;
    match named {
        Some(Some(id)) if request.method() == Method::DELETE => {
            if sessions.close(id, &token_id) {
                StatusCode::NO_CONTENT.into_response()
            } else {
                no_such_session()
            }
        }
        Some(Some(id)) if sessions.touch(id, &token_id) => {
            request.headers_mut().remove(HEADER_SESSION_ID);
            next.run(request).await
        }
        Some(_) => no_such_session(),
        None if request.method() == Method::DELETE => (
            StatusCode::BAD_REQUEST,
            "Bad Request: DELETE ends an MCP session; send its Mcp-Session-Id header",
        )
            .into_response(),
        None => {
            let opens = request.extensions().get::<OpensSession>().is_some();
            let mut response = next.run(request).await;
            if opens && response.status() == StatusCode::OK {
                match sessions
                    .open(&token_id)
                    .map(|id| HeaderValue::from_str(&id.to_header()))
                {
                    Ok(Ok(value)) => {
                        response.headers_mut().insert(HEADER_SESSION_ID, value);
                    }
                    Ok(Err(error)) => tracing::error!(%error, "a session id is not a header value"),
                    Err(error) => tracing::error!(%error, "cannot open an MCP session"),
                }
            }
            response
        }
    }
}

/// The answer for a session that does not exist for this token. Sessions live in the replica
/// that opened them, so behind a load balancer without sticky routing another replica answers
/// this too; the 404 makes a 2025-era client initialize again, and the text says why.
fn no_such_session() -> Response {
    (StatusCode::NOT_FOUND, NO_SUCH_SESSION).into_response()
}

/// [`no_such_session`]'s text.
pub const NO_SUCH_SESSION: &str = "Not Found: no such MCP session (it was never opened, has ended, belongs to another token, or was opened on another replica of this service). Initialize again to open a new one. 2025-era sessions (Mcp-Session-Id) live in the replica that opened them: behind a load balancer, route each client address to one replica (sticky routing, like nginx's ip_hash; a hash of the Mcp-Session-Id header does not work, as initialize has none), or use the stateless 2026 protocol, which any replica serves.";

/// `body` with every lone UTF-16 surrogate escape replaced by `\ufffd`. A JS client's
/// `JSON.stringify` writes a string holding half an emoji (a cut model reply, say) as
/// `"\ud83d"`, which serde, and so rmcp, refuses; JSON leaving a graph is mended the same way.
fn mended(body: axum::body::Bytes) -> axum::body::Bytes {
    match std::str::from_utf8(&body) {
        // Most bodies have no such escape: they pass without a copy.
        Ok(text) if relay_protocol::text::may_hold_surrogate_escape(text) => {
            axum::body::Bytes::from(relay_protocol::text::well_formed(text.to_owned()))
        }
        _ => body,
    }
}

/// 400 with JSON-RPC's parse error (-32700) for a body that is not JSON at all; rmcp would
/// answer such a body with 415 and a bare text.
fn parse_error(error: &serde_json::Error) -> Response {
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": -32700,
            "message": format!("parse error: the request body is not JSON ({error}); send one JSON-RPC message"),
        },
    });
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

/// 400 with a JSON-RPC "invalid request" error (-32600).
fn invalid_request(message: &str) -> Response {
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32600, "message": message},
    });
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

/// 403 with the `insufficient_scope` challenge; the body is the JSON-RPC answer a host reading
/// in-band sees: an `isError` result with `_meta["mcp/www_authenticate"]`.
fn insufficient_scope(base: &str, name: &str, scope: Scope, id: Option<Value>) -> Response {
    let mut result = insufficient_scope_result(name, scope, base);
    result.result_type = None;
    let body = json!({
        "jsonrpc": "2.0",
        "id": id.unwrap_or(Value::Null),
        "result": result,
    });
    let mut response = (StatusCode::FORBIDDEN, axum::Json(body)).into_response();
    if let Ok(challenge) =
        HeaderValue::from_str(&oauth::insufficient_scope_challenge(base, name, scope))
    {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, challenge);
    }
    response
}

/// Copies `_meta.securitySchemes` of each listed tool to its top level. rmcp's `Tool` has no
/// such field and its tower service only takes a `ServerHandler` (whose `list_tools` answers
/// the closed `ListToolsResult`), so the answer is amended here, on the wire. It is always JSON:
/// the service is configured with `with_json_response`, and rmcp answers a request whose first
/// message is its response (as `tools/list`'s is) as JSON; anything else passes unchanged.
async fn hoist_security_schemes(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let json = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("application/json"));
    if !json {
        return Response::from_parts(parts, body);
    }
    let Ok(bytes) = axum::body::to_bytes(body, MAX_LISTING_BYTES).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let bytes = rewrite_json(&bytes).map(Bytes::from).unwrap_or(bytes);
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(bytes))
}

/// The message with schemes hoisted, or `None` when it needs no change.
fn rewrite_json(text: &[u8]) -> Option<Vec<u8>> {
    let mut message: Value = serde_json::from_slice(text).ok()?;
    let tools = message.pointer_mut("/result/tools")?.as_array_mut()?;
    let mut changed = false;
    for tool in tools.iter_mut().filter_map(Value::as_object_mut) {
        if let Some(schemes) = tool
            .get("_meta")
            .and_then(|meta| meta.get("securitySchemes"))
            .cloned()
        {
            tool.insert("securitySchemes".into(), schemes);
            changed = true;
        }
    }
    changed.then(|| serde_json::to_vec(&message).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hoists_schemes_in_a_listing() {
        let message = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [
            {"name": "a", "_meta": {"securitySchemes": [{"type": "oauth2", "scopes": ["x"]}]}},
            {"name": "b"}
        ]}});
        let rewritten: Value =
            serde_json::from_slice(&rewrite_json(message.to_string().as_bytes()).unwrap()).unwrap();
        assert_eq!(
            rewritten["result"]["tools"][0]["securitySchemes"],
            json!([{"type": "oauth2", "scopes": ["x"]}])
        );
        assert!(
            rewritten["result"]["tools"][1]
                .get("securitySchemes")
                .is_none()
        );
        assert!(rewrite_json(b"{\"result\":{}}").is_none());
    }
}
