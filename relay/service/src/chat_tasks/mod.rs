//! Linked chat tasks: the owner assigns a goal to a chat conversation linked to a project; the
//! chat claims it and submits a result through MCP tools (SPEC §4, issue 6).
//!
//! The worker is a conversation that runs only while a person has it open: double clicks, a
//! model calling a tool twice in one turn, closed tabs and lost responses are the normal case.
//! So a claim is one conditional write and a repeat from the same link gets the same claim
//! back; a lease returns an abandoned claim to the queue; the claim id fences late submits; a
//! submit is idempotent by `sha256(status + result)`; and expiry is swept lazily behind a
//! read-only guard ([`sweep`]).
//!
//! - [`crate::model`]: ids, host kinds, statuses and the owner's labels.
//! - [`machine`]: the state machine ([`machine::transition`]).
//! - [`agent`]: what the linked chat does (list, get, claim, submit, upload).
//! - [`owner`]: what the owner does (links, assign, list, cancel).
//! - [`view`]: the compact answers.
//! - [`media_type`]: an artifact's media type, checked.

pub mod agent;
pub mod machine;
pub mod media_type;
pub mod owner;
pub mod sweep;
pub mod view;

use relay_protocol::text::utf16_len;
use std::ops::RangeInclusive;
use std::time::Duration;

use std::sync::Arc;

use self::machine::Refusal;
use self::sweep::{SweepMode, SweepStats};
use crate::model::TaskStatus;
use crate::store::notify::{Notifier, Topic};
use crate::store::{Store, StoreError};
use relay_protocol::clock::Clock;

/// What the chat task operations use: durable state, the clock, wake-ups for inbox watchers,
/// the tunables and the sweep's counts. Cheap to clone (every clone shares them).
#[derive(Clone)]
pub struct Tasks {
    /// Durable state.
    pub store: Arc<dyn Store>,
    /// The only source of time.
    pub clock: Arc<dyn Clock>,
    /// Wakes whoever watches an inbox.
    pub notifier: Arc<dyn Notifier>,
    /// The tunables.
    pub config: TaskConfig,
    /// What the lazy sweep did (guard checks, write transactions).
    pub sweeps: Arc<SweepStats>,
}

/// The chat task tunables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskConfig {
    /// How long a claim holds before the task returns to the queue; zero disables leases (a
    /// claim then holds until the task finishes, is cancelled or expires).
    pub lease: Duration,
    /// How reads sweep lapsed leases and expired tasks; anything but the default is for the
    /// empty-poll benchmark.
    pub sweep: SweepMode,
    /// Claim by read-then-write instead of one conditional write, so the race test can show
    /// it catches the double claims that causes. Exists only with the `naive-claim` feature,
    /// which only the service's own tests enable.
    #[cfg(feature = "naive-claim")]
    pub naive_claim: bool,
}

impl Default for TaskConfig {
    fn default() -> Self {
        TaskConfig {
            lease: DEFAULT_TASK_LEASE,
            sweep: SweepMode::default(),
            #[cfg(feature = "naive-claim")]
            naive_claim: false,
        }
    }
}

/// A task not finished this long after its creation expires.
pub const TASK_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// How long a claim holds by default before the task returns to the queue.
pub const DEFAULT_TASK_LEASE: Duration = Duration::from_secs(30 * 60);
/// Most open tasks one inbox read lists; `more: true` says there are others.
pub const INBOX_LIMIT: usize = 20;
/// Most tasks the owner's list shows (newest first).
pub const OWNER_LIST_LIMIT: usize = 100;
/// The owner's panel refreshes its list this often.
pub const OWNER_REFRESH_SECS: u64 = 15;
/// Longest goal, in characters.
pub const MAX_GOAL_CHARS: usize = 4_000;
/// Bytes of JSON string an inbox line may spend on the goal: keeps a waiting task under the
/// seed's ~210 bytes of context (the full goal comes with the claim).
pub const GOAL_PREVIEW_BYTES: usize = 120;
/// Allowed length of the owner's idempotency key, in characters (the panel sends a UUID).
pub const TASK_KEY_CHARS: RangeInclusive<usize> = 1..=128;
/// Longest result a chat may submit, in characters.
pub const MAX_TASK_RESULT_CHARS: usize = 100_000;
/// Largest artifact content, in bytes of UTF-8.
pub const MAX_ARTIFACT_BYTES: usize = 256 * 1024;
/// Most artifacts one task may carry.
pub const MAX_ARTIFACTS_PER_TASK: usize = 20;
/// Longest `artifact_id`, in characters.
pub const MAX_ARTIFACT_ID_CHARS: usize = 128;
/// Longest artifact name, in characters.
pub const MAX_ARTIFACT_NAME_CHARS: usize = 200;
/// Longest media type, in characters.
pub const MAX_MIME_CHARS: usize = 100;
/// Longest id (link, task, claim) looked up; real ones are 36 characters.
pub const MAX_ID_CHARS: usize = 64;
/// The pause the naive claim makes between its read and its write: a network hop or an ORM
/// between two statements, which makes the race it loses reliable (the seed's 2 ms).
#[cfg(feature = "naive-claim")]
pub const NAIVE_CLAIM_GAP: Duration = Duration::from_millis(2);
/// How many times an operation re-decides after losing a write race before giving up.
const MAX_TRANSITION_ATTEMPTS: usize = 8;

/// The one answer to a claim on a task that is not this link's, whatever the reason.
pub const NOT_CLAIMABLE: &str = "not claimable";
/// A submit or upload whose claim id another claim replaced.
pub const STALE_CLAIM: &str = "rejected: stale claim, task was re-claimed";
/// A submit or upload whose claim's lease lapsed.
pub const LEASE_LAPSED: &str = "rejected: stale claim, the lease lapsed and the task went back to the queue; claim it again for a new claim_id";
/// A submit or upload on a cancelled task.
pub const TASK_CANCELLED: &str = "rejected: task is cancelled";
/// A submit or upload on an expired task.
pub const TASK_EXPIRED: &str = "rejected: task expired";
/// A different submit on a finished task.
pub const DIFFERENT_RESULT: &str =
    "rejected: task already finished with a different result; the first result stands";
/// The one answer for a task the link may not see, whatever the reason.
pub const TASK_NOT_FOUND: &str = "task not found on this chat link";
/// The one answer for a link the caller may not use, whatever the reason.
pub const LINK_NOT_FOUND: &str = "chat link not found for this connection";
/// An artifact id that already holds other content.
pub const ARTIFACT_CONFLICT: &str = "rejected: artifact_id already holds different content; upload the new content under a new artifact_id";
/// An owner's idempotency key used before with another goal.
pub const TASK_KEY_CONFLICT: &str = "idempotency key already used with a different goal";
/// Shown to the owner when the host is not told about new tasks.
pub const NO_EVENT_SUBSCRIPTION_HINT: &str = "Open the host conversation to start each task.";

impl Refusal {
    /// What the chat reads.
    pub fn message(self) -> String {
        match self {
            Refusal::NotClaimable => NOT_CLAIMABLE.to_owned(),
            Refusal::NotClaimableNow(status) => format!("{NOT_CLAIMABLE}: task is {status}"),
            Refusal::StaleClaim => STALE_CLAIM.to_owned(),
            Refusal::LeaseLapsed => LEASE_LAPSED.to_owned(),
            Refusal::Cancelled => TASK_CANCELLED.to_owned(),
            Refusal::Expired => TASK_EXPIRED.to_owned(),
            Refusal::Finished(status) => format!("rejected: task already {status}"),
            Refusal::DifferentResult => DIFFERENT_RESULT.to_owned(),
        }
    }
}

/// Why a task operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The arguments were wrong; nothing changed.
    #[error("{0}")]
    Invalid(String),
    /// [`LINK_NOT_FOUND`].
    #[error("{LINK_NOT_FOUND}")]
    LinkNotFound,
    /// [`TASK_NOT_FOUND`].
    #[error("{TASK_NOT_FOUND}")]
    TaskNotFound,
    /// The task has no artifact with this id.
    #[error("artifact not found on this task")]
    ArtifactNotFound,
    /// The task's state refuses the operation.
    #[error("{}", .0.message())]
    Refused(Refusal),
    /// The request contradicts what is stored (an idempotency key or artifact id reused).
    #[error("{0}")]
    Conflict(String),
    /// Concurrent writers kept winning; retrying later will work.
    #[error("the task is changing too quickly; try again")]
    Contended,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<Refusal> for TaskError {
    fn from(refusal: Refusal) -> Self {
        TaskError::Refused(refusal)
    }
}

/// Wakes whoever watches the link's inbox (`relay://chat-links/{id}/tasks` subscribers).
fn inbox_changed(tasks: &Tasks, chat_link_id: &str) {
    tasks
        .notifier
        .notify(&Topic::ChatLink(chat_link_id.to_owned()));
}

/// `sha256(status + result)`: what makes a repeated submit recognisable. Plain concatenation
/// is unambiguous because neither status word is a prefix of the other.
pub fn result_hash(status: TaskStatus, result: &str) -> String {
    super::runs::sha256_hex(&format!("{status}{result}"))
}

fn check_id(what: &str, text: &str) -> Result<(), TaskError> {
    if text.is_empty() || utf16_len(text) > MAX_ID_CHARS {
        return Err(TaskError::Invalid(format!(
            "{what} must be 1 to {MAX_ID_CHARS} characters"
        )));
    }
    Ok(())
}

fn check_chars(
    what: &str,
    text: &str,
    range: RangeInclusive<usize>,
    hint: &str,
) -> Result<(), TaskError> {
    let chars = utf16_len(text);
    if range.contains(&chars) && !text.trim().is_empty() {
        Ok(())
    } else {
        Err(TaskError::Invalid(format!(
            "{what} is {chars} characters long; it must be {} to {} characters and not blank{hint}",
            range.start(),
            range.end()
        )))
    }
}
