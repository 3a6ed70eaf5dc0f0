//! MCP progress notifications for a waiting `get_graph_run` whose request carried a
//! `progressToken`: each newer view of the run that moved (tokens, agents, tools, its wait) is
//! sent as `notifications/progress` on the request's own stream. The views come from the
//! run's notify topic (`service::notify`), so a report that reached another replica wakes it
//! too. `tasks/get` of a task still working, with a `progressToken`, gets one notification of
//! where the run stands before its answer.

use std::sync::Mutex;

use futures_util::future::BoxFuture;
use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::Peer;

use crate::runs::RunView;

/// Sends the progress of one waiting request.
pub struct ProgressSender {
    token: ProgressToken,
    peer: Peer<RoleServer>,
    /// The last step sent: progress only ever grows.
    last: Mutex<u64>,
}

impl ProgressSender {
    pub fn new(token: ProgressToken, peer: Peer<RoleServer>) -> Self {
        ProgressSender {
            token,
            peer,
            last: Mutex::new(0),
        }
    }

    /// The notification for `view`, if it moved since the last one.
    fn next(&self, view: &RunView) -> Option<ProgressNotificationParam> {
        view.progress.as_ref()?;
        let (step, param) = self.param(view);
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if step <= *last {
            return None;
        }
        *last = step;
        Some(param)
    }

    /// The notification for `view` as it stands, and its step (tokens used plus agents
    /// started and finished plus tool calls). A run the desktop has not reported on yet is at
    /// step 0 and says so.
    fn param(&self, view: &RunView) -> (u64, ProgressNotificationParam) {
        let Some(progress) = view.progress.as_ref() else {
            let mut message = format!("{}: no progress reported yet", view.status.as_str());
            if let Some(waiting) = &view.waiting_for {
                message.push_str(&format!("; waiting for {waiting}"));
            }
            let mut param = ProgressNotificationParam::new(self.token.clone(), 0.0);
            param.message = Some(message);
            return (0, param);
        };
        let step = progress
            .tokens_used
            .saturating_add(progress.agents_started)
            .saturating_add(progress.agents_finished)
            .saturating_add(progress.tools_called);
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
        (step, param)
    }

    /// Sends the progress of `view` as it stands, moved or not (`tasks/get` of a task that
    /// is still working: one notification before the answer).
    pub fn send_now(&self, view: &RunView) -> BoxFuture<'static, ()> {
        let (step, param) = self.param(view);
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        *last = (*last).max(step);
        drop(last);
        Self::deliver(self.peer.clone(), Some(param))
    }

    /// Sends the progress of `view` if it moved; a client that went away is no error.
    pub fn send(&self, view: &RunView) -> BoxFuture<'static, ()> {
        Self::deliver(self.peer.clone(), self.next(view))
    }

    fn deliver(
        peer: Peer<RoleServer>,
        next: Option<ProgressNotificationParam>,
    ) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            if let Some(param) = next
                && let Err(error) = peer.notify_progress(param).await
            {
                tracing::debug!(%error, "a progress notification was not sent");
            }
        })
    }
}
