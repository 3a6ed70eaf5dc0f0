//! Withdrawals: a project disabled on this desktop is owed to the service as an empty snapshot
//! at the sharing version of the disable, sent before anything else of that project (every
//! pass and every consent pass start here, and no snapshot of the project goes out meanwhile),
//! so the service cancels its queued runs even if the project is enabled again before it
//! heard. A withdrawal older than the snapshot the service holds is ignored there: a newer
//! snapshot already said what is shared.

use relay_protocol::{DesktopProblem, SyncRequest};

use crate::Relay;

impl Relay {
    /// Sends each owed withdrawal and notes those the service took. One it refuses for good
    /// is dropped with a warning; one that found no answer stays owed for the next pass.
    pub(crate) async fn deliver_withdrawals(&self, problem: Option<&DesktopProblem>) {
        let owed = match self.state.call(|state| state.pending_withdrawals()).await {
            Ok(owed) => owed,
            Err(e) => {
                tracing::error!(
                    "cannot read the owed withdrawals (the next pass tries again): {e}"
                );
                return;
            }
        };
        for (project, version) in owed {
            let request = SyncRequest {
                project_id: project.clone(),
                sessions: Vec::new(),
                wait_ms: None,
                running: Vec::new(),
                known: Vec::new(),
                sessions_unchanged: false,
                problem: problem.cloned(),
                sharing_version: u64::try_from(version).ok(),
            };
            let delivered = match self.api.sync(&request).await {
                Ok(_) => {
                    tracing::info!(
                        project,
                        "the service knows the project is disabled: its sessions are withdrawn"
                    );
                    true
                }
                Err(e) if !e.is_retryable() => {
                    tracing::warn!(
                        project,
                        "the service refused the withdrawal for good, not sending it again: {e}"
                    );
                    true
                }
                Err(e) => {
                    tracing::warn!(
                        project,
                        "cannot tell the service the project is disabled yet, retrying at the next pass: {e}"
                    );
                    false
                }
            };
            if !delivered {
                continue;
            }
            let noted = project.clone();
            let note = self
                .state
                .call(move |state| state.withdrawal_delivered(&noted, version))
                .await;
            if let Err(e) = note {
                tracing::error!(project, "cannot note the withdrawal as delivered: {e}");
            }
        }
    }
}
