//! The direct path of `/mcp`: the plainest and most frequent request, a stateless 2026-07-28
//! `tools/call` of a read tool (`list_graph_sessions`, `get_graph_run`, ...) with a JSON
//! answer, served by the gate itself instead of rmcp's per-request service (a task spawned
//! per request, a channel, a second parse: a third of such a call's CPU).
//!
//! The answer is rmcp's, byte for byte: the message is parsed into rmcp's own types, checked
//! by rmcp's own rules for this case, answered by the same handler code
//! ([`GraphTools::call`]) and serialized from rmcp's types. Only a request that is plainly this
//! case takes the path: the standard headers in their usual form, no session, no progress
//! token, no tasks extension, a tool whose call only reads. Anything else, every request rmcp
//! would refuse included, goes to rmcp. The suite's `mcp_direct` tests send each request both
//! ways and compare the answers byte for byte.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use rmcp::ErrorData;
use rmcp::ServerHandler;
use rmcp::model::{
    CallToolResponse, ClientCapabilities, ClientJsonRpcMessage, ClientRequest, ErrorCode, GetMeta,
    JsonRpcRequest, ProtocolVersion, ServerJsonRpcMessage, ServerResult,
};
use rmcp::transport::common::http_header::{
    HEADER_MCP_METHOD, HEADER_MCP_NAME, HEADER_MCP_PROTOCOL_VERSION, HEADER_SESSION_ID,
};

use super::{CallSite, GraphTools};
use crate::auth::{AgentIdentity, Scope};

/// The target of rmcp's per-message log lines (which `relay serve` keeps at WARN unless
/// `--log-mcp-messages`).
const RMCP_SERVICE: &str = "rmcp::service";

/// The one protocol version the path serves.
const VERSION: ProtocolVersion = ProtocolVersion::V_2026_07_28;

/// Whether `headers` are those of a plain stateless current-protocol tool call: no session,
/// both media types accepted without parameters, a JSON body, one `Host`, the protocol
/// version, `Mcp-Method: tools/call`, one `Mcp-Name`, no `Mcp-Param-*`. (The name is checked
/// against the body in [`parse`].)
pub fn plain_headers(headers: &HeaderMap) -> bool {
    !headers.contains_key(HEADER_SESSION_ID)
        && accepts_both(headers)
        && sole(headers, header::CONTENT_TYPE.as_str())
            .is_some_and(|value| value.eq_ignore_ascii_case(b"application/json"))
        && sole(headers, header::HOST.as_str())
            .and_then(|host| std::str::from_utf8(host).ok())
            .is_some_and(|host| axum::http::uri::Authority::try_from(host).is_ok())
        && sole(headers, HEADER_MCP_PROTOCOL_VERSION) == Some(VERSION.as_str().as_bytes())
        && sole(headers, HEADER_MCP_METHOD) == Some(b"tools/call".as_slice())
        && sole(headers, HEADER_MCP_NAME).is_some()
        && !headers
            .keys()
            .any(|name| name.as_str().starts_with("mcp-param-"))
}

/// One `Accept` header listing `application/json` and `text/event-stream` (and nothing with
/// parameters or quotes, whose weights rmcp reads).
fn accepts_both(headers: &HeaderMap) -> bool {
    let Some(value) = sole(headers, header::ACCEPT.as_str()) else {
        return false;
    };
    let Ok(value) = std::str::from_utf8(value) else {
        return false;
    };
    if value.contains([';', '"']) {
        return false;
    }
    let (mut json, mut sse) = (false, false);
    for essence in value.split(',').map(str::trim) {
        json |= essence.eq_ignore_ascii_case("application/json");
        sse |= essence.eq_ignore_ascii_case("text/event-stream");
    }
    json && sse
}

/// The bytes of the only value of `name`, or `None` when it is absent or repeated.
fn sole<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a [u8]> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    values.next().is_none().then(|| first.as_bytes())
}

/// A parsed call the path serves.
pub struct DirectCall {
    request: JsonRpcRequest<ClientRequest>,
}

/// `body` as a call the direct path serves, or `None` (then rmcp serves it): a JSON-RPC
/// `tools/call` request as rmcp parses it, of a read tool of `graph` named by `Mcp-Name`
/// as it stands, whose `_meta` declares this protocol version with well-formed required keys,
/// no progress token and no tasks extension.
pub fn parse(graph: &GraphTools, headers: &HeaderMap, body: &[u8]) -> Option<DirectCall> {
    let ClientJsonRpcMessage::Request(request) =
        serde_json::from_slice::<ClientJsonRpcMessage>(body).ok()?
    else {
        return None;
    };
    let ClientRequest::CallToolRequest(call) = &request.request else {
        return None;
    };
    let name = call.params.name.as_ref();
    // `Mcp-Name` as sent must be the name itself, not its Base64 form rmcp would decode.
    if sole(headers, HEADER_MCP_NAME) != Some(name.as_bytes()) || name.starts_with("=?") {
        return None;
    }
    // Only a call that reads: it may stop wherever the client hangs up.
    if graph.mcp.tools.scope(name) != Some(Scope::Read) {
        return None;
    }
    // rmcp keeps a request's `_meta` among its extensions.
    let meta = request.request.get_meta();
    let plain = meta.protocol_version() == Some(VERSION)
        && meta.missing_required_keys(&VERSION).is_empty()
        && meta.get_progress_token().is_none()
        && meta
            .client_capabilities()
            .is_some_and(|capabilities| !capabilities.supports_tasks())
        && graph.supported_protocol_versions().contains(&VERSION);
    plain.then_some(DirectCall { request })
}

/// The answer to `call` from `agent`, as rmcp's stateless JSON answer would be.
pub async fn answer(
    graph: &GraphTools,
    agent: &AgentIdentity,
    parts: &axum::http::request::Parts,
    call: DirectCall,
) -> Response {
    let JsonRpcRequest { id, request, .. } = call.request;
    // The lines rmcp writes for every request, under its target, so `--log-mcp-messages`
    // shows these calls too.
    tracing::debug!(target: RMCP_SERVICE, %id, ?request, "received request");
    let ClientRequest::CallToolRequest(request) = request else {
        // `parse` keeps only tool calls.
        return internal_error("the direct path was given a request that is not a tool call");
    };
    let site = CallSite {
        agent,
        parts: Some(parts),
        declared_tasks: false,
        progress: None,
        gone: None,
    };
    let params = request.params;
    let app = &graph.mcp.app;
    // As rmcp: an answer cut short by the service's stop is a 500 (see `super::routes`).
    let result = tokio::select! {
        result = graph.call(&params.name, params.arguments.as_ref(), site) => result,
        () = app.drained.cancelled() => return internal_error(
            "empty response: no response message received from handler"
        ),
    };
    app.metrics.tools.count_direct();
    let message = match result.and_then(guard_task) {
        Ok(response) => {
            let mut result = ServerResult::from(response);
            result.fill_missing_cache_hints();
            tracing::debug!(target: RMCP_SERVICE, %id, ?result, "response message");
            ServerJsonRpcMessage::response(result, id)
        }
        Err(mut error) => {
            if error.code == ErrorCode::RESOURCE_NOT_FOUND {
                error.code = ErrorCode::INVALID_PARAMS;
            }
            tracing::warn!(target: RMCP_SERVICE, %id, ?error, "response error");
            ServerJsonRpcMessage::error(error, Some(id))
        }
    };
    let status = match &message {
        ServerJsonRpcMessage::Error(error) => match error.error.code {
            ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
            | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
            | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
            ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
            _ => StatusCode::OK,
        },
        _ => StatusCode::OK,
    };
    match serde_json::to_vec(&message) {
        Ok(body) => {
            let mut response = Response::new(Body::from(body));
            *response.status_mut() = status;
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(error) => internal_error(&format!("serialize json response: {error}")),
    }
}

/// rmcp's guard: a task is answered only to a client that declared the tasks extension.
fn guard_task(response: CallToolResponse) -> Result<CallToolResponse, ErrorData> {
    if matches!(response, CallToolResponse::Task(_)) {
        return Err(ErrorData::missing_required_client_capability(
            ClientCapabilities::builder().enable_tasks().build(),
        ));
    }
    Ok(response)
}

/// rmcp's plain-text 500.
fn internal_error(what: &str) -> Response {
    tracing::error!("Internal server error when {what}");
    let mut response = Response::new(Body::from(Bytes::from(format!(
        "Encounter an error when {what}"
    ))));
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    response
}
