//! The lines `relay desktop history`, `approvals list` and `queue` print: one row each, with
//! the graph, the project by name, the requesting agent and the times the owner asks about.
//! Text from graphs, agents and the service goes through `for_terminal`, so it cannot drive the
//! terminal.
//!
//! One convention for every list's `--json`: an array of objects, each project named by
//! `project_id` and `project_name` (the service's name as last fetched, `null` when unknown),
//! and every time RFC 3339, as the text prints it.

use std::collections::HashMap;
use std::time::Duration;

use relay_desktop::state::{ApprovalRow, ApprovalStatus, DesktopState, HistoryRow, QueuedRow};
use relay_desktop::ui::live::run_cost;
use relay_protocol::clock::Timestamp;
use runner::trace::for_terminal;
use serde_json::Value;

/// The keys of times (ms since the epoch in the state) that `--json` prints as RFC 3339.
const TIME_KEYS: [&str; 9] = [
    "queued_at",
    "started_at",
    "finished_at",
    "created_at",
    "expires_at",
    "synced_at",
    "decided_at",
    "fetched_at",
    "since",
];

/// The service's project names, as last fetched into the state file.
#[derive(Debug, Default)]
pub struct ProjectNames(HashMap<String, String>);

impl ProjectNames {
    /// The names in `state`.
    pub fn of(state: &DesktopState) -> Result<Self, relay_desktop::state::StateError> {
        Ok(Self(state.project_names()?))
    }

    /// The project's name, if the service gave one.
    pub fn name(&self, project: &str) -> Option<&str> {
        self.0
            .get(project)
            .map(String::as_str)
            .filter(|n| !n.is_empty())
    }

    /// "NAME (ID)", or the id alone when no name is known (the id is what commands take).
    pub fn label(&self, project: &str) -> String {
        match self.name(project) {
            Some(name) => format!("{} ({project})", for_terminal(name)),
            None => project.to_owned(),
        }
    }
}

/// `rows` as `--json` prints them: times as RFC 3339, each `project_id` beside its
/// `project_name`.
pub fn listing_json<T: serde::Serialize>(
    rows: &[T],
    names: &ProjectNames,
) -> serde_json::Result<Value> {
    let mut value = serde_json::to_value(rows)?;
    for row in value.as_array_mut().into_iter().flatten() {
        json_row(row, names);
    }
    Ok(value)
}

fn json_row(row: &mut Value, names: &ProjectNames) {
    let Some(object) = row.as_object_mut() else {
        return;
    };
    for key in TIME_KEYS {
        if let Some(ms) = object.get(key).and_then(Value::as_i64) {
            let text = Timestamp::from_unix_millis(ms).to_rfc3339();
            object.insert(key.to_owned(), Value::String(text));
        }
    }
    let project = object
        .get("project_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(project) = project {
        let name = names
            .name(&project)
            .map_or(Value::Null, |n| Value::String(n.to_owned()));
        object.entry("project_name").or_insert(name);
    }
}

/// Arguments are shown cut to this many characters (`--json` has them whole).
pub const MAX_SHOWN_ARGUMENTS_CHARS: usize = 120;
/// A result or error is shown cut to this many characters (`--json` has them whole).
pub const MAX_SHOWN_DETAIL_CHARS: usize = 120;

/// `ms` since the epoch as RFC 3339, or `-` when unknown.
fn at(ms: Option<i64>) -> String {
    ms.map_or_else(
        || "-".to_owned(),
        |ms| Timestamp::from_unix_millis(ms).to_rfc3339(),
    )
}

/// `text` cut to `max` characters (an ellipsis marks the cut), safe for the terminal.
fn cut(text: &str, max: usize) -> String {
    let shown: String = if text.chars().count() > max {
        let head: String = text.chars().take(max).collect();
        format!("{head}…")
    } else {
        text.to_owned()
    };
    for_terminal(&shown).into_owned()
}

/// "agent NAME (ID)", or "agent -" when the service did not say (rows from older relays).
fn agent(name: Option<&str>, id: Option<&str>) -> String {
    match (name.filter(|n| !n.is_empty()), id) {
        (Some(name), Some(id)) => format!("agent {} ({id})", for_terminal(name)),
        (Some(name), None) => format!("agent {}", for_terminal(name)),
        (None, Some(id)) => format!("agent {id}"),
        (None, None) => "agent -".to_owned(),
    }
}

/// One execution: ids, graph, status, project, times, tokens and cost, agent, arguments,
/// outcome.
pub fn history_line(h: &HistoryRow, names: &ProjectNames) -> String {
    let detail = match (&h.error, &h.result) {
        (Some(e), _) => e.clone(),
        (None, Some(r)) => r.to_string(),
        (None, None) => String::new(),
    };
    let arguments = h
        .arguments
        .as_ref()
        .map_or_else(|| "-".to_owned(), ToString::to_string);
    let cause = h
        .end_cause
        .map_or_else(String::new, |cause| format!("  cause {cause}"));
    let cause = match h.resumed {
        0 => cause,
        n => format!(
            "{cause}  resumed {n}x after a stop (last {})",
            at(h.resumed_at)
        ),
    };
    let refused = h
        .refused_by_service
        .as_deref()
        .map_or_else(String::new, |m| {
            format!("  refused by the service: {}", for_terminal(m))
        });
    format!(
        "{}  {}  {}  {}{cause}  project {}  queued {}  started {}  finished {}  {} tokens  cost {}  {}  args {}{}  {}{refused}",
        h.execution_id,
        h.command_id,
        h.slug,
        h.status,
        names.label(&h.project_id),
        at(h.queued_at),
        at(Some(h.started_at)),
        at(h.finished_at),
        h.total_tokens,
        run_cost(&h.status, h.reported_cost),
        agent(h.agent_name.as_deref(), h.agent_id.as_deref()),
        cut(&arguments, MAX_SHOWN_ARGUMENTS_CHARS),
        if h.result_truncated {
            "  (posted truncated)"
        } else {
            ""
        },
        cut(&detail, MAX_SHOWN_DETAIL_CHARS)
    )
}

/// Whole seconds left until `expires_at`, as "4m 05s left", or "expired" once past it.
fn time_left(expires_at: i64, now: Timestamp) -> String {
    let left = Timestamp::from_unix_millis(expires_at).saturating_duration_since(now);
    if left.is_zero() {
        return "no time left".to_owned();
    }
    let secs = left.as_secs() + u64::from(left.subsec_millis() > 0);
    let left = Duration::from_secs(secs);
    match (
        left.as_secs() / 3600,
        left.as_secs() / 60 % 60,
        left.as_secs() % 60,
    ) {
        (0, 0, s) => format!("{s}s left"),
        (0, m, s) => format!("{m}m {s:02}s left"),
        (h, m, _) => format!("{h}h {m:02}m left"),
    }
}

/// One approval: id, status, tool, the run's graph, project and agent, the time left (while
/// pending), the run and the tool's arguments.
pub fn approval_line(a: &ApprovalRow, now: Timestamp, names: &ProjectNames) -> String {
    let left = match (a.status, a.expires_at) {
        (ApprovalStatus::Pending, Some(expires_at)) => time_left(expires_at, now),
        (ApprovalStatus::Pending, None) => "no deadline recorded".to_owned(),
        (_, _) => "-".to_owned(),
    };
    format!(
        "{}  {}  {}  graph {}  project {}  {}  {left}  {}  {}",
        a.id,
        a.status,
        for_terminal(&a.tool),
        a.slug.as_deref().unwrap_or("-"),
        a.project_id
            .as_deref()
            .map_or_else(|| "-".to_owned(), |p| names.label(p)),
        agent(a.agent_name.as_deref(), a.agent_id.as_deref()),
        a.execution_id,
        cut(&a.args, MAX_SHOWN_ARGUMENTS_CHARS)
    )
}

/// One queued run: command, project, graph, agent, when queued, arguments, and as of which sync.
pub fn queue_line(q: &QueuedRow, names: &ProjectNames) -> String {
    format!(
        "{}  {}  {}  {}  queued {}  args {}  (as of the sync at {})",
        q.command_id,
        names.label(&q.project_id),
        q.slug,
        agent(q.agent_name.as_deref(), q.agent_id.as_deref()),
        at(Some(q.queued_at)),
        cut(&q.arguments.to_string(), MAX_SHOWN_ARGUMENTS_CHARS),
        at(Some(q.synced_at))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_rounds_up_and_says_when_none_is_left() {
        let now = Timestamp::from_unix_millis(1_000_000);
        let after = |ms: i64| now.unix_millis() + ms;
        assert_eq!(time_left(after(1), now), "1s left");
        assert_eq!(time_left(after(59_000), now), "59s left");
        assert_eq!(time_left(after(245_000), now), "4m 05s left");
        assert_eq!(time_left(after(3_600_000 + 120_000), now), "1h 02m left");
        assert_eq!(time_left(after(0), now), "no time left");
        assert_eq!(time_left(after(-5_000), now), "no time left");
    }

    #[test]
    fn json_times_are_rfc3339_and_projects_carry_their_names() {
        let names = ProjectNames(HashMap::from([("p1".to_owned(), "Blog".to_owned())]));
        let rows = vec![
            serde_json::json!({"project_id": "p1", "started_at": 0, "finished_at": null}),
            serde_json::json!({"project_id": "p2", "since": 1_000}),
        ];
        let listed = listing_json(&rows, &names).expect("json");
        assert_eq!(listed[0]["started_at"], "1970-01-01T00:00:00.000Z");
        assert_eq!(listed[0]["finished_at"], Value::Null);
        assert_eq!(listed[0]["project_name"], "Blog");
        assert_eq!(listed[1]["project_name"], Value::Null);
        assert!(
            listed[1]["since"]
                .as_str()
                .is_some_and(|t| t.starts_with("1970-01-01T00:00:01"))
        );
        assert_eq!(names.label("p1"), "Blog (p1)");
        assert_eq!(names.label("p2"), "p2");
    }

    #[test]
    fn shown_text_is_cut_and_cannot_drive_the_terminal() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "abc…");
        assert!(!cut("\u{1b}[31mred", 20).contains('\u{1b}'));
        assert_eq!(
            agent(Some("\u{1b}]0;x"), Some("t1")),
            format!("agent {} (t1)", for_terminal("\u{1b}]0;x"))
        );
        assert_eq!(agent(Some(""), None), "agent -");
    }
}
