//! The vocabulary of linked chat tasks: ids, host kinds, statuses and the owner's labels.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use relay_protocol::InvalidInput;

/// Length of a hyphenated UUID, the only spelling of a task or link id.
const HYPHENATED_UUID_LEN: usize = 36;

/// A task id: a UUID in its hyphenated form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TaskId(uuid::Uuid);

impl TaskId {
    /// A fresh random id.
    pub fn new_random() -> Self {
        TaskId(uuid::Uuid::new_v4())
    }
}

impl FromStr for TaskId {
    type Err = InvalidInput;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        // Only the hyphenated form, so one task never has two spellings.
        match uuid::Uuid::try_parse(text) {
            Ok(uuid) if text.len() == HYPHENATED_UUID_LEN => Ok(TaskId(uuid)),
            _ => Err(InvalidInput(
                "task_id is not a UUID like 123e4567-e89b-12d3-a456-426614174000".into(),
            )),
        }
    }
}

impl TryFrom<String> for TaskId {
    type Error = InvalidInput;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<TaskId> for String {
    fn from(id: TaskId) -> String {
        id.to_string()
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.hyphenated(), f)
    }
}

/// Whether `text` is a hyphenated UUID (the form of chat link, claim and task ids).
pub fn is_hyphenated_uuid(text: &str) -> bool {
    text.len() == HYPHENATED_UUID_LEN && uuid::Uuid::try_parse(text).is_ok()
}

/// The kind of host a chat link points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostKind {
    /// A Claude conversation (request-driven: it runs only when a person opens it).
    Claude,
    /// A ChatGPT conversation (work chats may have an event subscription).
    Chatgpt,
    /// Any other MCP host.
    Other,
}

impl HostKind {
    /// Every host kind.
    pub const ALL: [HostKind; 3] = [HostKind::Claude, HostKind::Chatgpt, HostKind::Other];

    /// The kind as its wire word.
    pub fn as_str(self) -> &'static str {
        match self {
            HostKind::Claude => "claude",
            HostKind::Chatgpt => "chatgpt",
            HostKind::Other => "other",
        }
    }
}

impl FromStr for HostKind {
    type Err = InvalidInput;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        HostKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == text)
            .ok_or_else(|| {
                InvalidInput(format!(
                    "unknown host kind: use {}",
                    HostKind::ALL.map(HostKind::as_str).join(", ")
                ))
            })
    }
}

impl fmt::Display for HostKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The status of a linked chat task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    /// Waiting for the linked chat to claim it.
    Queued,
    /// Claimed by the linked chat; its claim id fences the submit.
    Claimed,
    /// The chat submitted a result.
    Completed,
    /// The chat reported that it could not do the task.
    Failed,
    /// The owner cancelled it.
    Cancelled,
    /// Nobody finished it within a day of its creation.
    Expired,
}

impl TaskStatus {
    /// All statuses, in lifecycle order.
    pub const ALL: [TaskStatus; 6] = [
        TaskStatus::Queued,
        TaskStatus::Claimed,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
        TaskStatus::Expired,
    ];

    /// The status as its wire word.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::Claimed => "claimed",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
            TaskStatus::Expired => "expired",
        }
    }

    /// Whether the task has ended; a terminal status never changes again.
    pub fn is_terminal(self) -> bool {
        !matches!(self, TaskStatus::Queued | TaskStatus::Claimed)
    }

    /// What the owner's task list shows for this status on a link to `host`.
    pub fn label(self, host: HostKind) -> &'static str {
        match (self, host) {
            (TaskStatus::Queued, HostKind::Claude) => "Waiting for Claude",
            (TaskStatus::Queued, _) => "Waiting for host chat",
            (TaskStatus::Claimed, _) => "Claimed by host chat",
            (TaskStatus::Completed, _) => "Completed",
            (TaskStatus::Failed, _) => "Failed",
            (TaskStatus::Cancelled, _) => "Cancelled",
            (TaskStatus::Expired, _) => "Expired",
        }
    }
}

impl FromStr for TaskStatus {
    type Err = InvalidInput;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        TaskStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == text)
            .ok_or_else(|| InvalidInput("unknown task status".into()))
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the chat says a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskOutcome {
    /// The work is done; `result` is the answer.
    Completed,
    /// The chat could not do it; `result` says why.
    Failed,
}

impl TaskOutcome {
    /// The outcome as its wire word.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskOutcome::Completed => "completed",
            TaskOutcome::Failed => "failed",
        }
    }
}

impl FromStr for TaskOutcome {
    type Err = InvalidInput;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "completed" => Ok(TaskOutcome::Completed),
            "failed" => Ok(TaskOutcome::Failed),
            _ => Err(InvalidInput(
                "status must be \"completed\" or \"failed\"".into(),
            )),
        }
    }
}

impl From<TaskOutcome> for TaskStatus {
    fn from(outcome: TaskOutcome) -> TaskStatus {
        match outcome {
            TaskOutcome::Completed => TaskStatus::Completed,
            TaskOutcome::Failed => TaskStatus::Failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_are_hyphenated_uuids() {
        let id = TaskId::new_random();
        assert_eq!(id.to_string().parse::<TaskId>().ok(), Some(id));
        assert!(id.0.simple().to_string().parse::<TaskId>().is_err());
        assert!("d97fd414-…".parse::<TaskId>().is_err());
        assert!(is_hyphenated_uuid(&id.to_string()));
        assert!(!is_hyphenated_uuid("3f6c0b1e-link"));
    }

    #[test]
    fn labels_name_claude_only_for_claude_links() {
        assert_eq!(
            TaskStatus::Queued.label(HostKind::Claude),
            "Waiting for Claude"
        );
        assert_eq!(
            TaskStatus::Queued.label(HostKind::Chatgpt),
            "Waiting for host chat"
        );
        assert_eq!(
            TaskStatus::Claimed.label(HostKind::Claude),
            "Claimed by host chat"
        );
        let labels: Vec<_> = TaskStatus::ALL
            .iter()
            .map(|s| s.label(HostKind::Other))
            .collect();
        assert_eq!(
            labels,
            [
                "Waiting for host chat",
                "Claimed by host chat",
                "Completed",
                "Failed",
                "Cancelled",
                "Expired"
            ]
        );
    }

    #[test]
    fn words_round_trip() {
        for status in TaskStatus::ALL {
            assert_eq!(status.as_str().parse::<TaskStatus>().ok(), Some(status));
        }
        for host in HostKind::ALL {
            assert_eq!(host.as_str().parse::<HostKind>().ok(), Some(host));
        }
        assert!("gemini".parse::<HostKind>().is_err());
        assert!("cancelled".parse::<TaskOutcome>().is_err());
    }
}
