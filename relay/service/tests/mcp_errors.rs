//! `/mcp` refuses what is not one readable JSON-RPC message with a 400 and a JSON-RPC error
//! body: a parse error (-32700), a batch and a body nested too deeply (-32600).

use crate::common;

use common::TestService;
use serde_json::Value;

async fn post(service: &TestService, token: &str, body: String) -> (u16, Value) {
    let response = common::http_client()
        .post(service.mcp_url())
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-11-25")
        .body(body)
        .send()
        .await
        .expect("answer");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    let json = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("status {status}: not a JSON body ({e}): {text}"));
    (status, json)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_messages_are_400_with_a_json_rpc_error() {
    let service = TestService::start().await;
    let project = service.project("p", "alice").await;
    let token = service.full_agent(&project).await;
    let one = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let cases = [
        ("not JSON".to_owned(), -32700),
        (format!("[{one},{one}]"), -32600),
        (format!("  [{one}]"), -32600),
        (
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"list_graph_sessions","arguments":{{"project_id":"p","x":{}1{}}}}}}}"#,
                "[".repeat(200),
                "]".repeat(200)
            ),
            -32600,
        ),
        (
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}1{}}}"#,
                "[".repeat(5_000),
                "]".repeat(5_000)
            ),
            -32600,
        ),
    ];
    for (body, code) in cases {
        let (status, answer) = post(&service, &token, body.clone()).await;
        assert_eq!(status, 400, "{}: {answer}", &body[..body.len().min(60)]);
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        assert_eq!(
            answer["error"]["code"],
            code,
            "{}: {answer}",
            &body[..body.len().min(60)]
        );
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
}
