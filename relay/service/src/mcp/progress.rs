//! MCP progress notifications for a waiting `get_graph_run` whose request carried a
//! `progressToken`: each newer view of the run that moved (tokens, agents, tools, its wait) is
//! sent as `notifications/progress` on the request's own stream. The views come from the
//! run's notify topic (`service::notify`), so a report that reached another replica wakes it
//! too.

use std::sync::Mutex;

use futures_util::future::BoxFuture;
use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::Peer;

use crate::runs::RunView;

/// Sends the progress of one waiting request.
pub(super) struct ProgressSender {
    token: ProgressToken,
    peer: Peer<RoleServer>,
    /// The last step sent: progress only ever grows.
    last: Mutex<u64>,
}

impl ProgressSender {
    pub(super) fn new(token: ProgressToken, peer: Peer<RoleServer>) -> Self {
        ProgressSender {
            token,
            peer,
            last: Mutex::new(0),
        }
    }

    /// The notification for `view`, if it moved since the last one.
    fn next(&self, view: &RunView) -> Option<ProgressNotificationParam> {
        let progress = view.progress.as_ref()?;
        let step = progress
            .tokens_used
            .saturating_add(progress.agents_started)
            .saturating_add(progress.agents_finished)
            .saturating_add(progress.tools_called);
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if step <= *last {
            return None;
        }
        *last = step;
        let mut message = format!(
            "{} tokens used{}; agents: {} started, {} finished; {} tool calls",
            progress.tokens_used,
            progress
                .token_cap
                .map_or_else(String::new, |cap| format!(" of {cap}")),
            progress.agents_started,
            progress.agents_finished,
            progress.tools_called
        );
        if let Some(label) = &progress.last_event {
            message.push_str(&format!("; last: {label}"));
        }
        if let Some(waiting) = &view.waiting_for {
            message.push_str(&format!("; waiting for {waiting}"));
        }
        let mut param = ProgressNotificationParam::new(self.token.clone(), step as f64);
        param.message = Some(message);
        Some(param)
    }

    /// Sends the progress of `view` if it moved; a client that went away is no error.
    pub(super) fn send(&self, view: &RunView) -> BoxFuture<'static, ()> {
        let next = self.next(view);
        let peer = self.peer.clone();
        Box::pin(async move {
            if let Some(param) = next
                && let Err(error) = peer.notify_progress(param).await
            {
                tracing::debug!(%error, "a progress notification was not sent");
            }
        })
    }
}
