//! The task state machine: [`transition`] is the one function that decides how a task moves.
//!
//! `queued → claimed → completed | failed`, `queued | claimed → cancelled | expired`, and
//! `claimed → queued` when a lease lapses. Writes that carry a decision are conditional on the
//! status, claim id and lease the decision was made from (`Store::update_task`); the claim
//! itself is made by `Store::claim_task` in one statement whose `WHERE` is the
//! `Queued` arm of `claim` below, and the sweep's two statements are the set forms of the
//! `LeaseLapsed` and `Expire` arms.

use crate::model::{TaskOutcome, TaskStatus};
use crate::store::TaskRecord;
use relay_protocol::clock::Timestamp;

/// Something that happens to a task.
#[derive(Debug, Clone, Copy)]
pub enum TaskEvent<'a> {
    /// A chat link asks to claim the task.
    Claim {
        /// The link asking.
        chat_link_id: &'a str,
        /// The claim id a new claim gets.
        claim_id: &'a str,
        /// When a new claim lapses (`None`: leases are off).
        lease_until: Option<Timestamp>,
    },
    /// The claim holder reports the outcome.
    Submit {
        /// The claim id the chat holds.
        claim_id: &'a str,
        /// How it ended.
        outcome: TaskOutcome,
        /// The answer.
        result: &'a str,
        /// `sha256(status + result)`.
        result_hash: &'a str,
    },
    /// The owner cancels.
    Cancel,
    /// The sweep found the claim's lease lapsed.
    LeaseLapsed,
    /// The sweep found the task a day old.
    Expire,
}

/// Why an event is refused. Each says what happened so a chat does not retry in a loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A claim from a link other than the task's: the same answer as for no task at all.
    NotClaimable,
    /// A claim on a task of this link that can no longer be claimed.
    NotClaimableNow(TaskStatus),
    /// Another claim holds the task, or finished it: this claim id is stale.
    StaleClaim,
    /// The claim's lease lapsed; the task waits to be claimed again.
    LeaseLapsed,
    /// The owner cancelled the task.
    Cancelled,
    /// The task expired.
    Expired,
    /// The task already finished under this claim (an upload after the submit).
    Finished(TaskStatus),
    /// The task already finished with another outcome or result.
    DifferentResult,
}

/// What [`transition`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskDecision {
    /// Write this record over the current one (conditional on the current status, claim, lease).
    Write(Box<TaskRecord>),
    /// Nothing to write: an identical repeat of what is recorded (a claim or a submit).
    Replay,
    /// Nothing to write: the event does not apply (e.g. cancelling a finished task).
    Unchanged,
    /// The event is refused.
    Refuse(Refusal),
}

/// Whether `claim_id` is the live claim on `task` at `now`; the fence of submits and uploads.
pub fn fence(task: &TaskRecord, claim_id: &str, now: Timestamp) -> Result<(), Refusal> {
    match task.status {
        TaskStatus::Cancelled => Err(Refusal::Cancelled),
        TaskStatus::Expired => Err(Refusal::Expired),
        TaskStatus::Queued => Err(Refusal::LeaseLapsed),
        TaskStatus::Claimed | TaskStatus::Completed | TaskStatus::Failed
            if task.claim_id.as_deref() != Some(claim_id) =>
        {
            Err(Refusal::StaleClaim)
        }
        TaskStatus::Claimed if lease_lapsed(task, now) => Err(Refusal::LeaseLapsed),
        TaskStatus::Claimed => Ok(()),
        status @ (TaskStatus::Completed | TaskStatus::Failed) => Err(Refusal::Finished(status)),
    }
}

fn lease_lapsed(task: &TaskRecord, now: Timestamp) -> bool {
    task.lease_until.is_some_and(|until| until <= now)
}

/// Decides how `event` changes `current` at time `now`. The only place that moves a task: it
/// hands each kind of event to its own arm set below, all of which start from `current`.
pub fn transition(current: &TaskRecord, event: TaskEvent<'_>, now: Timestamp) -> TaskDecision {
    let mut next = current.clone();
    next.updated_at = now;
    match event {
        TaskEvent::Claim {
            chat_link_id,
            claim_id,
            lease_until,
        } => claim(current, next, chat_link_id, claim_id, lease_until, now),
        TaskEvent::Submit {
            claim_id,
            outcome,
            result,
            result_hash,
        } => submit(current, next, claim_id, outcome, result, result_hash, now),
        TaskEvent::Cancel | TaskEvent::LeaseLapsed | TaskEvent::Expire => {
            sweep_or_cancel(current, next, event, now)
        }
    }
}

/// The `Claim` arms.
fn claim(
    current: &TaskRecord,
    mut next: TaskRecord,
    chat_link_id: &str,
    claim_id: &str,
    lease_until: Option<Timestamp>,
    now: Timestamp,
) -> TaskDecision {
    let mut claimed = || {
        next.status = TaskStatus::Claimed;
        next.claim_id = Some(claim_id.to_owned());
        next.lease_until = lease_until;
        next.claimed_at = Some(now);
        TaskDecision::Write(Box::new(next.clone()))
    };
    match current.status {
        _ if chat_link_id != current.chat_link_id => TaskDecision::Refuse(Refusal::NotClaimable),
        TaskStatus::Queued | TaskStatus::Claimed if current.expires_at <= now => {
            TaskDecision::Refuse(Refusal::NotClaimableNow(TaskStatus::Expired))
        }
        TaskStatus::Queued => claimed(),
        // The same link asking again (a double click, a repeated tool call) gets its claim
        // back, unless the lease lapsed: then it is a fresh claim.
        TaskStatus::Claimed if lease_lapsed(current, now) => claimed(),
        TaskStatus::Claimed => TaskDecision::Replay,
        status => TaskDecision::Refuse(Refusal::NotClaimableNow(status)),
    }
}

/// The `Submit` arms: an identical repeat is a replay, anything else passes the fence first.
fn submit(
    current: &TaskRecord,
    mut next: TaskRecord,
    claim_id: &str,
    outcome: TaskOutcome,
    result: &str,
    result_hash: &str,
    now: Timestamp,
) -> TaskDecision {
    let finished = matches!(current.status, TaskStatus::Completed | TaskStatus::Failed);
    if finished
        && current.claim_id.as_deref() == Some(claim_id)
        && current.result_hash.as_deref() == Some(result_hash)
    {
        return TaskDecision::Replay;
    }
    match fence(current, claim_id, now) {
        // The identical repeat was replayed above, so this one differs.
        Err(Refusal::Finished(_)) => TaskDecision::Refuse(Refusal::DifferentResult),
        Err(refusal) => TaskDecision::Refuse(refusal),
        Ok(()) => {
            next.status = TaskStatus::from(outcome);
            next.result = Some(result.to_owned());
            next.result_hash = Some(result_hash.to_owned());
            next.lease_until = None;
            next.finished_at = Some(now);
            TaskDecision::Write(Box::new(next))
        }
    }
}

/// The owner's `Cancel` and the sweep's `LeaseLapsed` and `Expire` arms.
fn sweep_or_cancel(
    current: &TaskRecord,
    mut next: TaskRecord,
    event: TaskEvent<'_>,
    now: Timestamp,
) -> TaskDecision {
    match (current.status, event) {
        (TaskStatus::Queued | TaskStatus::Claimed, TaskEvent::Cancel) => {
            next.status = TaskStatus::Cancelled;
            next.lease_until = None;
            next.finished_at = Some(now);
            TaskDecision::Write(Box::new(next))
        }
        (TaskStatus::Claimed, TaskEvent::LeaseLapsed) if lease_lapsed(current, now) => {
            next.status = TaskStatus::Queued;
            next.claim_id = None;
            next.lease_until = None;
            next.claimed_at = None;
            TaskDecision::Write(Box::new(next))
        }
        (TaskStatus::Queued | TaskStatus::Claimed, TaskEvent::Expire)
            if current.expires_at <= now =>
        {
            next.status = TaskStatus::Expired;
            next.lease_until = None;
            next.finished_at = Some(now);
            TaskDecision::Write(Box::new(next))
        }
        _ => TaskDecision::Unchanged,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const T0: Timestamp = Timestamp::from_unix_millis(1_794_130_200_000);
    const DAY: Duration = Duration::from_secs(24 * 60 * 60);

    fn at(seconds: u64) -> Timestamp {
        T0.saturating_add(Duration::from_secs(seconds))
    }

    fn task(status: TaskStatus) -> TaskRecord {
        let mut task = TaskRecord::queued("link-a".into(), "goal".into(), "k".into(), T0, DAY);
        task.status = status;
        if status != TaskStatus::Queued {
            task.claim_id = Some("claim-1".into());
        }
        if status == TaskStatus::Claimed {
            task.lease_until = Some(at(60));
        }
        if status.is_terminal() {
            task.result_hash = Some("hash-1".into());
        }
        task
    }

    fn claim<'a>(link: &'a str) -> TaskEvent<'a> {
        TaskEvent::Claim {
            chat_link_id: link,
            claim_id: "claim-2",
            lease_until: Some(at(120)),
        }
    }

    fn submit<'a>(claim_id: &'a str, hash: &'a str) -> TaskEvent<'a> {
        TaskEvent::Submit {
            claim_id,
            outcome: TaskOutcome::Completed,
            result: "done",
            result_hash: hash,
        }
    }

    fn written(decision: TaskDecision) -> TaskRecord {
        match decision {
            TaskDecision::Write(next) => *next,
            other => panic!("expected a write, got {other:?}"),
        }
    }

    #[test]
    fn the_own_link_claims_a_queued_task_and_gets_a_live_claim_back() {
        let claimed = written(transition(
            &task(TaskStatus::Queued),
            claim("link-a"),
            at(1),
        ));
        assert_eq!(claimed.status, TaskStatus::Claimed);
        assert_eq!(claimed.claim_id.as_deref(), Some("claim-2"));
        assert_eq!(claimed.lease_until, Some(at(120)));
        assert_eq!(claimed.claimed_at, Some(at(1)));
        let live = task(TaskStatus::Claimed);
        assert_eq!(
            transition(&live, claim("link-a"), at(59)),
            TaskDecision::Replay
        );
        let lapsed = written(transition(&live, claim("link-a"), at(60)));
        assert_eq!(lapsed.claim_id.as_deref(), Some("claim-2"));
    }

    /// The store's conformance suite states the sweep's moves without this machine (the store
    /// floor imports nothing of the domain but its vocabulary); here the machine is held to it.
    #[cfg(feature = "conformance")]
    #[test]
    fn the_sweep_rules_of_the_store_suite_are_the_machines() {
        let by_machine = |task: &TaskRecord, now| {
            [TaskEvent::Expire, TaskEvent::LeaseLapsed]
                .into_iter()
                .fold(task.clone(), |task, event| {
                    match transition(&task, event, now) {
                        TaskDecision::Write(next) => *next,
                        _ => task,
                    }
                })
        };
        let expired_claim = {
            let mut task = task(TaskStatus::Claimed);
            task.lease_until = Some(T0.saturating_add(DAY * 2));
            task
        };
        let unleased = {
            let mut task = task(TaskStatus::Claimed);
            task.lease_until = None;
            task
        };
        let mut tasks: Vec<TaskRecord> = TaskStatus::ALL.into_iter().map(task).collect();
        tasks.extend([expired_claim, unleased]);
        for task in tasks.iter_mut().filter(|t| t.status != TaskStatus::Queued) {
            task.claimed_at = Some(T0);
        }
        for task in &tasks {
            for now in [at(1), at(60), at(61), T0.saturating_add(DAY), at(0)] {
                assert_eq!(
                    crate::store::conformance::swept(task, now),
                    by_machine(task, now),
                    "{} at {now}",
                    task.status
                );
            }
        }
    }

    #[test]
    fn another_link_learns_nothing() {
        for status in TaskStatus::ALL {
            assert_eq!(
                transition(&task(status), claim("link-b"), at(1)),
                TaskDecision::Refuse(Refusal::NotClaimable),
                "{status}"
            );
        }
    }

    #[test]
    fn finished_and_overdue_tasks_are_not_claimable() {
        for status in [
            TaskStatus::Completed,
            TaskStatus::Failed,
            TaskStatus::Cancelled,
            TaskStatus::Expired,
        ] {
            assert_eq!(
                transition(&task(status), claim("link-a"), at(1)),
                TaskDecision::Refuse(Refusal::NotClaimableNow(status))
            );
        }
        let overdue = at(24 * 60 * 60);
        assert_eq!(
            transition(&task(TaskStatus::Queued), claim("link-a"), overdue),
            TaskDecision::Refuse(Refusal::NotClaimableNow(TaskStatus::Expired))
        );
    }

    #[test]
    fn the_claim_id_fences_the_submit() {
        let live = task(TaskStatus::Claimed);
        let done = written(transition(&live, submit("claim-1", "h"), at(2)));
        assert_eq!(done.status, TaskStatus::Completed);
        assert_eq!(done.result.as_deref(), Some("done"));
        assert_eq!(done.result_hash.as_deref(), Some("h"));
        assert_eq!(done.finished_at, Some(at(2)));
        assert_eq!(done.lease_until, None);
        assert_eq!(
            transition(&live, submit("claim-0", "h"), at(2)),
            TaskDecision::Refuse(Refusal::StaleClaim)
        );
        assert_eq!(
            transition(&live, submit("claim-1", "h"), at(60)),
            TaskDecision::Refuse(Refusal::LeaseLapsed),
            "a lapsed lease refuses even before the sweep requeued the task"
        );
        assert_eq!(
            transition(&task(TaskStatus::Queued), submit("claim-1", "h"), at(2)),
            TaskDecision::Refuse(Refusal::LeaseLapsed)
        );
    }

    #[test]
    fn a_finished_task_replays_its_own_submit_and_refuses_others() {
        let done = task(TaskStatus::Completed);
        assert_eq!(
            transition(&done, submit("claim-1", "hash-1"), at(3)),
            TaskDecision::Replay
        );
        assert_eq!(
            transition(&done, submit("claim-1", "hash-2"), at(3)),
            TaskDecision::Refuse(Refusal::DifferentResult)
        );
        assert_eq!(
            transition(&done, submit("claim-9", "hash-1"), at(3)),
            TaskDecision::Refuse(Refusal::StaleClaim)
        );
    }

    #[test]
    fn cancelled_and_expired_tasks_cannot_be_completed() {
        assert_eq!(
            transition(&task(TaskStatus::Cancelled), submit("claim-1", "h"), at(1)),
            TaskDecision::Refuse(Refusal::Cancelled)
        );
        assert_eq!(
            transition(&task(TaskStatus::Expired), submit("claim-1", "h"), at(1)),
            TaskDecision::Refuse(Refusal::Expired)
        );
    }

    #[test]
    fn cancel_ends_open_tasks_and_leaves_finished_ones() {
        for status in [TaskStatus::Queued, TaskStatus::Claimed] {
            let cancelled = written(transition(&task(status), TaskEvent::Cancel, at(4)));
            assert_eq!(cancelled.status, TaskStatus::Cancelled);
            assert_eq!(cancelled.finished_at, Some(at(4)));
            assert_eq!(cancelled.lease_until, None);
        }
        for status in [
            TaskStatus::Completed,
            TaskStatus::Failed,
            TaskStatus::Cancelled,
            TaskStatus::Expired,
        ] {
            assert_eq!(
                transition(&task(status), TaskEvent::Cancel, at(4)),
                TaskDecision::Unchanged
            );
        }
    }

    #[test]
    fn lapsed_leases_requeue_and_day_old_tasks_expire() {
        let live = task(TaskStatus::Claimed);
        assert_eq!(
            transition(&live, TaskEvent::LeaseLapsed, at(59)),
            TaskDecision::Unchanged
        );
        let requeued = written(transition(&live, TaskEvent::LeaseLapsed, at(60)));
        assert_eq!(requeued.status, TaskStatus::Queued);
        assert_eq!((requeued.claim_id, requeued.lease_until), (None, None));
        let mut unleased = live.clone();
        unleased.lease_until = None;
        assert_eq!(
            transition(&unleased, TaskEvent::LeaseLapsed, at(10_000)),
            TaskDecision::Unchanged,
            "a claim without a lease never lapses"
        );
        let day = 24 * 60 * 60;
        assert_eq!(
            transition(&task(TaskStatus::Queued), TaskEvent::Expire, at(day - 1)),
            TaskDecision::Unchanged
        );
        for status in [TaskStatus::Queued, TaskStatus::Claimed] {
            let expired = written(transition(&task(status), TaskEvent::Expire, at(day)));
            assert_eq!(expired.status, TaskStatus::Expired);
            assert_eq!(expired.finished_at, Some(at(day)));
        }
        assert_eq!(
            transition(&task(TaskStatus::Completed), TaskEvent::Expire, at(day)),
            TaskDecision::Unchanged
        );
    }
}
