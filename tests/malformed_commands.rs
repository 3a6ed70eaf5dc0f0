//! Command ids that are not UUIDs are refused before anything is written.

use std::sync::Arc;
use std::sync::Mutex;

use relay_desktop::api::{BoxFuture, DesktopApi, Transport, TransportError};
use relay_desktop::state::DesktopState;
use relay_desktop::{DesktopConfig, Relay, Runtime};
use relay_protocol::clock::{SystemClock, Timestamp};
use runner::engine::EngineKind;
use runner::host::events::NullSink;
use runner::host::mock::MockProvider;
use serde_json::json;

/// A service that hands out malformed commands and records every other request.
struct Hostile {
    session: String,
    requests: Mutex<Vec<String>>,
}

impl Transport for Hostile {
    fn send(
        &self,
        request: http::Request<Vec<u8>>,
    ) -> BoxFuture<'_, Result<http::Response<Vec<u8>>, TransportError>> {
        Box::pin(async move {
            let path = request.uri().path().to_owned();
            self.requests.lock().expect("lock").push(path.clone());
            let body = if path.ends_with("/sync") {
                json!({"project_id": "p", "commands": [
                    {"command_id": "not-a-uuid", "graph_session_id": self.session, "slug": "echo", "arguments": {}, "created_at": "2026-11-08T09:30:00.000Z"},
                    {"command_id": "123E4567E89B12D3A456426614174000", "graph_session_id": self.session, "slug": "echo", "arguments": {}, "created_at": "2026-11-08T09:30:00.000Z"},
                    {"command_id": 42, "graph_session_id": self.session, "slug": "echo", "arguments": {}, "created_at": "2026-11-08T09:30:00.000Z"},
                    {"command_id": "../../etc/passwd", "graph_session_id": self.session, "slug": "echo", "arguments": {}, "created_at": "2026-11-08T09:30:00.000Z"},
                    {"command_id": "123e4567-e89b-12d3-a456-426614174000", "graph_session_id": "gs_bad", "slug": "echo", "arguments": {}, "created_at": "2026-11-08T09:30:00.000Z"}
                ]})
            } else {
                json!({"ok": true, "replayed": false, "cancel_requested": false})
            };
            Ok(http::Response::new(body.to_string().into_bytes()))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_command_ids_are_refused_before_anything_is_written() {
    let state = DesktopState::open_in_memory().expect("state");
    let script = r#"export const meta = {name: "Echo", slug: "echo", version: "1"};
        export default async function (a, g) { return (await g.agent("p")).text; }"#;
    let meta = graph_js::describe(script, &Default::default()).expect("meta");
    let now = Timestamp::from_unix_millis(1);
    let session = state
        .upsert_session(&meta, script, None, now)
        .expect("session");
    state.share("p", &session, now).expect("share");
    state.set_project_enabled("p", true, now).expect("enable");
    let hostile = Arc::new(Hostile {
        session: session.to_string(),
        requests: Mutex::new(Vec::new()),
    });
    let mock = Arc::new(MockProvider::from_json(json!({"default": {"text": "x"}})).expect("mock"));
    let relay = Relay::new(
        state.clone(),
        DesktopApi::new(hostile.clone(), "token"),
        Arc::new(SystemClock),
        Runtime {
            engine: EngineKind::Boa.build().expect("boa"),
            provider: mock.clone(),
            events: Arc::new(NullSink),
        },
        DesktopConfig::default(),
    );
    relay.pass(&Default::default()).await;
    assert!(
        state.history().expect("history").is_empty(),
        "nothing was written"
    );
    assert!(state.outbox().expect("outbox").is_empty());
    assert!(mock.calls().is_empty());
    // The relay also reads the service's project list at its first pass (a GET that names no
    // command); of the calls about commands, there is only the sync.
    let requests: Vec<String> = hostile
        .requests
        .lock()
        .expect("lock")
        .iter()
        .filter(|path| !path.ends_with("/projects"))
        .cloned()
        .collect();
    assert_eq!(requests.len(), 1, "only the sync: {requests:?}");
}
