//! What `runner test --repeat` compares between the rounds of a case that fixes its seed and
//! clock: the outcome (status, result, error, location, `total_tokens`, cost) and the trace.
//!
//! The token cap's admission rule (ARCHITECTURE.md) promises, under a fixed seed and clock, the
//! same outcome, trace order and `total_tokens` on every run. The trace is compared as streams:
//! the run's own events, each graph's log, each nested graph's start and end, each agent's
//! events, and the budget's, each in order and each event with its virtual time. So events that
//! happened at different moments are compared in order, and so are the events of one stream at
//! one moment. What no rule fixes is the order, within one virtual millisecond, of events that
//! work running side by side reports: an agent handed a freed slot while its graph goes on, two
//! tool calls, two nested graphs (the documented exception). Those interleavings are not
//! compared; a graph's tool calls and the events of nested graphs running side by side are
//! compared as what happened at each moment, in any order.

use std::collections::BTreeMap;

use crate::host::events::{Event, EventKind};
use crate::run::RunOutcome;

/// One round of a case, as later rounds must repeat it.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundRecord {
    /// The outcome's fields, by name, as text.
    outcome: Vec<(&'static str, String)>,
    /// The trace's events by stream: (virtual time in ms, the event as JSON).
    streams: BTreeMap<Stream, Vec<(u64, String)>>,
}

/// A part of the trace whose order is the run's own.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Stream {
    /// `run_started`, `run_finished`.
    Run,
    /// `budget_exhausted` (said once per run, by whichever graph or agent hits the cap).
    Budget,
    /// A graph's log lines: the graph at this path of nested-graph handles (empty: the top).
    Log(Vec<u32>),
    /// The start and end of the nested graph `handle` of the graph at the path.
    Nested(Vec<u32>, u32),
    /// The agent `handle` of the graph at the path.
    Agent(Vec<u32>, u32),
    /// The tool calls of the graph at the path and of its agents (they carry no handle).
    Tools(Vec<u32>),
    /// Events at this depth while nested graphs run side by side there: which one an event
    /// belongs to is not in the trace.
    SideBySide(usize),
}

impl Stream {
    /// Whether its events at one moment may come in any order.
    fn unordered(&self) -> bool {
        matches!(self, Stream::Tools(_) | Stream::SideBySide(_))
    }

    fn describe(&self) -> String {
        let of = |path: &[u32]| {
            if path.is_empty() {
                String::new()
            } else {
                let handles: Vec<String> = path.iter().map(|h| format!("#{h}")).collect();
                format!(" of nested graph {}", handles.join(" > "))
            }
        };
        match self {
            Stream::Run => "the run's start and end".to_owned(),
            Stream::Budget => "the budget's events".to_owned(),
            Stream::Log(path) if path.is_empty() => "the graph's log".to_owned(),
            Stream::Log(path) => format!("the log{}", of(path)),
            Stream::Nested(path, handle) => format!("nested graph #{handle}{}", of(path)),
            Stream::Agent(path, handle) => format!("agent #{handle}{}", of(path)),
            Stream::Tools(path) => format!("the tool calls{}", of(path)),
            Stream::SideBySide(depth) => {
                format!("the events of nested graphs running side by side at depth {depth}")
            }
        }
    }
}

/// When each nested graph ran, by depth: (handle, first ms, last ms; `None` while the trace
/// does not say that it finished).
type Spans = BTreeMap<usize, Vec<(u32, u64, Option<u64>)>>;

/// The nested graphs of `events` and when they ran.
fn spans(events: &[Event]) -> Spans {
    let mut spans = Spans::new();
    for event in events {
        let running = spans.entry(event.depth + 1).or_default();
        match &event.kind {
            EventKind::GraphStarted { handle, .. } => {
                running.push((*handle, event.elapsed_ms, None));
            }
            EventKind::GraphFinished { handle, .. } => {
                // The earliest started one of this handle and depth still running.
                if let Some(span) = running
                    .iter_mut()
                    .find(|(h, _, last)| h == handle && last.is_none())
                {
                    span.2 = Some(event.elapsed_ms);
                }
            }
            _ => {}
        }
    }
    spans
}

/// The nested-graph handles from the top down to the graph that reported an event at `depth`
/// at `ms`, or `None` when at some depth more than one graph was running then.
fn path_at(spans: &Spans, depth: usize, ms: u64) -> Option<Vec<u32>> {
    (1..=depth)
        .map(|level| {
            let mut running = spans
                .get(&level)?
                .iter()
                .filter(|(_, first, last)| (*first..=last.unwrap_or(u64::MAX)).contains(&ms));
            match (running.next(), running.next()) {
                (Some((handle, _, _)), None) => Some(*handle),
                _ => None,
            }
        })
        .collect()
}

fn stream_of(kind: &EventKind, path: Option<Vec<u32>>, depth: usize) -> Stream {
    use EventKind as K;
    match (kind, path) {
        (K::RunStarted { .. } | K::RunFinished { .. }, _) => Stream::Run,
        (K::BudgetExhausted { .. }, _) => Stream::Budget,
        (_, None) => Stream::SideBySide(depth),
        (K::GraphStarted { handle, .. } | K::GraphFinished { handle, .. }, Some(path)) => {
            Stream::Nested(path, *handle)
        }
        (
            K::AgentStarted { handle, .. }
            | K::AgentTurn { handle, .. }
            | K::AgentProgress { handle, .. }
            | K::AgentRetry { handle, .. }
            | K::AgentFinished { handle, .. }
            | K::AgentFailed { handle, .. },
            Some(path),
        ) => Stream::Agent(path, *handle),
        (K::ApprovalRequested { .. } | K::ToolCalled { .. } | K::ToolDenied { .. }, Some(path)) => {
            Stream::Tools(path)
        }
        (K::Log { .. } | K::LogsDropped { .. }, Some(path)) => Stream::Log(path),
    }
}

/// An event as compared: its JSON without what differs by design (the run's id).
fn event_text(kind: &EventKind) -> String {
    let mut kind = kind.clone();
    if let EventKind::RunStarted { run_id, .. } = &mut kind {
        run_id.clear();
    }
    serde_json::to_string(&kind).unwrap_or_else(|e| format!("<unprintable event: {e}>"))
}

/// One difference between two rounds: where, and what each had there.
struct Difference {
    /// The earliest virtual time involved (trace differences are reported earliest first).
    at_ms: u64,
    what: String,
    first: String,
    later: String,
}

impl RoundRecord {
    /// The record of a run that ended with `outcome` and traced `events`.
    pub fn new(outcome: &RunOutcome, events: &[Event]) -> Self {
        let json = |value: &Option<serde_json::Value>| {
            value
                .as_ref()
                .map_or_else(|| "none".to_owned(), serde_json::Value::to_string)
        };
        let outcome = vec![
            ("status", outcome.status.as_str().to_owned()),
            ("result", json(&outcome.result)),
            ("error", format!("{:?}", outcome.error)),
            ("location", format!("{:?}", outcome.location)),
            ("total_tokens", outcome.total_tokens.to_string()),
            ("reported_cost", outcome.reported_cost.to_string()),
        ];
        let spans = spans(events);
        let mut streams: BTreeMap<Stream, Vec<(u64, String)>> = BTreeMap::new();
        for event in events {
            let path = path_at(&spans, event.depth, event.elapsed_ms);
            streams
                .entry(stream_of(&event.kind, path, event.depth))
                .or_default()
                .push((event.elapsed_ms, event_text(&event.kind)));
        }
        for (stream, events) in &mut streams {
            if stream.unordered() {
                events.sort();
            }
        }
        Self { outcome, streams }
    }

    /// The first thing `later` (round `round`) does differently from this record (round 1), in
    /// words, or `None` when it repeats it: the outcome's first differing field, else the
    /// trace's earliest differing event.
    pub fn first_difference(&self, later: &Self, round: u32) -> Option<String> {
        let difference = self
            .outcome_difference(later)
            .or_else(|| self.trace_difference(later))?;
        Some(format!(
            "{}: round 1 had {}, round {round} had {}",
            difference.what, difference.first, difference.later
        ))
    }

    fn outcome_difference(&self, later: &Self) -> Option<Difference> {
        self.outcome
            .iter()
            .zip(&later.outcome)
            .find(|(a, b)| a != b)
            .map(|((name, first), (_, later))| Difference {
                at_ms: 0,
                what: (*name).to_owned(),
                first: first.clone(),
                later: later.clone(),
            })
    }

    fn trace_difference(&self, later: &Self) -> Option<Difference> {
        let none = Vec::new();
        let mut keys: Vec<&Stream> = self.streams.keys().chain(later.streams.keys()).collect();
        keys.sort();
        keys.dedup();
        keys.into_iter()
            .filter_map(|stream| {
                let a = self.streams.get(stream).unwrap_or(&none);
                let b = later.streams.get(stream).unwrap_or(&none);
                first_mismatch(stream, a, b)
            })
            .min_by_key(|d| d.at_ms)
    }
}

/// Where the events `a` and `b` of `stream` first differ.
fn first_mismatch(stream: &Stream, a: &[(u64, String)], b: &[(u64, String)]) -> Option<Difference> {
    let at = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))?;
    let show = |event: Option<&(u64, String)>| {
        event.map_or_else(
            || "nothing more".to_owned(),
            |(ms, text)| format!("{text} at {ms} ms"),
        )
    };
    let at_ms = [a.get(at), b.get(at)]
        .into_iter()
        .flatten()
        .map(|(ms, _)| *ms)
        .min()
        .unwrap_or(0);
    Some(Difference {
        at_ms,
        what: format!("the trace, {} (event {})", stream.describe(), at + 1),
        first: show(a.get(at)),
        later: show(b.get(at)),
    })
}
