//! What a desktop tells the service about itself and its runs, for the agent's
//! `get_graph_run`: whether the project's desktop is online (heard from within two poll
//! intervals), what keeps it from starting runs (its disk is full), and, for a running run,
//! what it waits for and how far it got (`POST commands/{id}/report`).
//!
//! Every desktop request marks its project's desktop as seen, but the store is written at most
//! every [`PRESENCE_WRITE_INTERVAL`] per project and replica (or at once when the desktop's
//! problem changes), so a waiting desktop is not a writer at every long poll. A held long poll
//! lasts at most 25 s and is re-issued at once, so a live desktop's record is never older than
//! [`OFFLINE_AFTER`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relay_protocol::clock::{Clock, Timestamp};
use relay_protocol::{
    DESKTOP_POLL_INTERVAL_SECS, DesktopProblem, RunProgress, RunReport, RunStatus, Waiting,
};
use serde::Serialize;

use crate::store::{CommandRecord, PresenceRecord, PresenceSync, Store};

/// A project's presence is written at most this often per replica while nothing changes.
pub const PRESENCE_WRITE_INTERVAL: Duration = Duration::from_secs(10);
/// A desktop not heard from for two poll intervals is offline.
pub const OFFLINE_AFTER: Duration = Duration::from_secs(2 * DESKTOP_POLL_INTERVAL_SECS);
/// Projects whose last write [`PresenceWrites`] remembers at most (past it, it starts over).
const MAX_REMEMBERED: usize = 10_000;
/// How long a long poll keeps its desktop counted as long-polling: a long-polling desktop's
/// timed passes (its outbox, the fallback) come between its long polls and must not flip the
/// mode agents are told about at each pass. Longer than a held poll (25 s) and a timed pass.
pub const LONG_POLL_MEMORY: Duration = Duration::from_secs(60);

/// What a sync says of its desktop beside that it was heard from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncState {
    /// What keeps it from starting runs (a [`DesktopProblem`] as JSON text), if anything.
    pub problem: Option<String>,
    /// Whether it long-polls (then it picks a queued run up at once).
    pub long_polls: bool,
}

/// When (and with which sync state) each project's presence was last written by this replica.
#[derive(Debug, Default)]
pub struct PresenceWrites {
    written: Mutex<HashMap<String, (Timestamp, SyncState)>>,
    long_polled: Mutex<HashMap<String, Timestamp>>,
}

impl PresenceWrites {
    /// Whether `project_id`'s desktop counts as long-polling after a sync at `now` that is a
    /// long poll (`long_poll`) or a timed pass: a timed pass within [`LONG_POLL_MEMORY`] of
    /// the last long poll this replica saw keeps the mode.
    pub fn long_polls(&self, project_id: &str, now: Timestamp, long_poll: bool) -> bool {
        let mut seen = self.long_polled.lock().unwrap_or_else(|p| p.into_inner());
        if long_poll {
            if seen.len() >= MAX_REMEMBERED && !seen.contains_key(project_id) {
                seen.clear();
            }
            seen.insert(project_id.to_owned(), now);
            return true;
        }
        seen.get(project_id)
            .is_some_and(|last| now.saturating_duration_since(*last) <= LONG_POLL_MEMORY)
    }

    /// Whether hearing from `project_id`'s desktop at `now` should be written: the last write
    /// is [`PRESENCE_WRITE_INTERVAL`] old, or `state` (when known: `Some`) differs from the
    /// one written. If so it counts as written.
    pub fn due(&self, project_id: &str, now: Timestamp, state: Option<&SyncState>) -> bool {
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((last, last_state)) = written.get_mut(project_id) {
            let changed = state.is_some_and(|state| state != last_state);
            if !changed && now.saturating_duration_since(*last) < PRESENCE_WRITE_INTERVAL {
                return false;
            }
            *last = now;
            if let Some(state) = state {
                last_state.clone_from(state);
            }
            return true;
        }
        if written.len() >= MAX_REMEMBERED {
            written.clear();
        }
        written.insert(
            project_id.to_owned(),
            (now, state.cloned().unwrap_or_default()),
        );
        true
    }
}

/// What noting a desktop's presence uses: the store, the clock, and when this replica last
/// wrote each project's presence. Cheap to clone (every clone shares them).
#[derive(Clone)]
pub struct Presence {
    /// Durable state.
    pub store: Arc<dyn Store>,
    /// The only source of time.
    pub clock: Arc<dyn Clock>,
    writes: Arc<PresenceWrites>,
}

impl Presence {
    /// Presence over `store` and `clock`.
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        Presence {
            store,
            clock,
            writes: Arc::default(),
        }
    }
}

/// Notes that `project_id`'s desktop was heard from now; a sync (`Some`) also says what keeps
/// it from starting runs and whether it long-polls, other requests (`None`) leave those as they
/// were. A failed write is logged, never the request's failure: presence is advice for the
/// agent.
pub async fn heard_from(
    presence: &Presence,
    project_id: &str,
    sync: Option<(Option<&DesktopProblem>, bool)>,
) {
    let now = presence.clock.now();
    let state = sync.map(|(problem, long_poll)| SyncState {
        problem: problem.and_then(|p| serde_json::to_string(p).ok()),
        long_polls: presence.writes.long_polls(project_id, now, long_poll),
    });
    if !presence.writes.due(project_id, now, state.as_ref()) {
        return;
    }
    let stored = state.as_ref().map(|state| PresenceSync {
        problem: state.problem.as_deref(),
        long_polls: state.long_polls,
    });
    if let Err(error) = presence
        .store
        .record_presence(project_id, now, stored)
        .await
    {
        tracing::warn!(%error, project_id, "recording that the desktop was heard from failed");
    }
}

/// What an agent sees of the desktop that runs its project's graphs.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct DesktopStatus {
    /// Heard from within the last two poll intervals (40 s).
    pub online: bool,
    /// When it was last heard from, unless never.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub last_seen_at: Option<Timestamp>,
    /// Why it starts no run now, like "disk full: 1 GiB free".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl DesktopStatus {
    /// The status at `now` from the stored presence.
    pub fn of(presence: Option<&PresenceRecord>, now: Timestamp) -> Self {
        let last_seen_at = presence.map(|p| p.seen_at);
        DesktopStatus {
            online: last_seen_at
                .is_some_and(|seen| now.saturating_duration_since(seen) <= OFFLINE_AFTER),
            last_seen_at,
            problem: presence
                .and_then(problem_of)
                .map(|p| format!("{}: {}", p.cause.replace('_', " "), p.detail)),
        }
    }
}

/// The problem stored with a presence, if any can be read.
pub fn problem_of(presence: &PresenceRecord) -> Option<DesktopProblem> {
    presence
        .problem
        .as_deref()
        .and_then(|text| serde_json::from_str(text).ok())
}

/// What the run waits for and how far it got, as its desktop last reported (running runs only).
pub fn reported(command: &CommandRecord) -> (Option<Waiting>, Option<RunProgress>) {
    if command.status != RunStatus::Running {
        return (None, None);
    }
    match command
        .report
        .clone()
        .and_then(|value| serde_json::from_value::<RunReport>(value).ok())
    {
        // A report of an execution that released the run is not this execution's.
        Some(report) if command.execution_id.as_deref() == Some(&report.execution_id) => {
            (report.waiting_for, report.progress)
        }
        _ => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presence_is_written_at_most_every_interval_unless_the_problem_changes() {
        let writes = PresenceWrites::default();
        let t0 = Timestamp::from_unix_millis(1_000_000);
        let later = |d: Duration| t0.saturating_add(d);
        let fine = SyncState::default();
        assert!(writes.due("p", t0, Some(&fine)), "the first contact");
        assert!(!writes.due("p", later(Duration::from_secs(1)), Some(&fine)));
        assert!(!writes.due("p", later(Duration::from_secs(2)), None));
        let full = SyncState {
            problem: Some("disk".to_owned()),
            long_polls: false,
        };
        assert!(
            writes.due("p", later(Duration::from_secs(3)), Some(&full)),
            "a new problem is written at once"
        );
        assert!(
            !writes.due("p", later(Duration::from_secs(4)), None),
            "a request that says nothing of the problem does not change it"
        );
        assert!(!writes.due("p", later(Duration::from_secs(5)), Some(&full)));
        assert!(writes.due("p", later(Duration::from_secs(6)), Some(&fine)));
        let polling = SyncState {
            problem: None,
            long_polls: true,
        };
        assert!(
            writes.due("p", later(Duration::from_secs(7)), Some(&polling)),
            "a change of polling mode is written at once"
        );
        assert!(writes.due("p", later(PRESENCE_WRITE_INTERVAL * 2), None));
        assert!(writes.due("q", later(Duration::from_secs(8)), None));
    }

    #[test]
    fn timed_passes_between_long_polls_keep_the_long_poll_mode() {
        let writes = PresenceWrites::default();
        let t0 = Timestamp::from_unix_millis(1_000_000);
        let later = |d: Duration| t0.saturating_add(d);
        assert!(!writes.long_polls("p", t0, false), "timed passes only");
        assert!(writes.long_polls("p", later(Duration::from_secs(1)), true));
        assert!(
            writes.long_polls("p", later(Duration::from_secs(21)), false),
            "a timed pass between long polls"
        );
        assert!(!writes.long_polls("q", later(Duration::from_secs(21)), false));
        assert!(
            !writes.long_polls("p", later(LONG_POLL_MEMORY + Duration::from_secs(2)), false),
            "a desktop that stopped long-polling"
        );
    }

    #[test]
    fn a_desktop_is_offline_after_two_poll_intervals_of_silence() {
        let seen = Timestamp::from_unix_millis(1_000_000);
        let presence = PresenceRecord {
            project_id: "p".into(),
            seen_at: seen,
            problem: Some(r#"{"cause":"disk_full","detail":"1 MiB free"}"#.into()),
            long_polls: false,
        };
        let status = DesktopStatus::of(Some(&presence), seen.saturating_add(OFFLINE_AFTER));
        assert!(status.online);
        assert_eq!(status.problem.as_deref(), Some("disk full: 1 MiB free"));
        let later = seen.saturating_add(OFFLINE_AFTER + Duration::from_millis(1));
        assert!(!DesktopStatus::of(Some(&presence), later).online);
        let never = DesktopStatus::of(None, seen);
        assert!(!never.online && never.last_seen_at.is_none() && never.problem.is_none());
    }
}
