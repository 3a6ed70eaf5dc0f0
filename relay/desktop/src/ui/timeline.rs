//! A run's trace (the events the history keeps, [`crate::MAX_TRACE_EVENTS`] at most) drawn as a
//! timeline: one bar per agent, tool call and nested graph over the run's time, with the tokens
//! of each agent. Rendered here as SVG; the page needs no script to show it.

use std::collections::{HashMap, VecDeque};

use maud::{Markup, html};
use serde_json::Value;

/// Most bars drawn; a longer trace is cut (and says so).
pub const MAX_BARS: usize = 300;

/// What a bar stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// An agent, from its start to its reply (or failure).
    Agent,
    /// A tool call, from the turn (or approval request) that asked for it to its end.
    Tool,
    /// A nested graph.
    Graph,
}

/// One bar.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// What it stands for.
    pub lane: Lane,
    /// Its name (the agent's label, the tool, the graph's slug).
    pub label: String,
    /// Milliseconds since the run started.
    pub start_ms: u64,
    /// Its end (the run's end if the trace never says).
    pub end_ms: u64,
    /// An agent's tokens.
    pub tokens: Option<u64>,
    /// Set when it failed or was refused: why.
    pub failure: Option<String>,
    /// A tool call that waited for the owner's approval.
    pub asked_owner: bool,
    /// The owner's answer to it ("you approved", "you denied", "not answered"), when known.
    pub answer: Option<String>,
}

/// The bars of one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    /// In the order they started.
    pub bars: Vec<Bar>,
    /// The run's length.
    pub duration_ms: u64,
    /// Whether bars past [`MAX_BARS`] were left out.
    pub cut: bool,
}

#[derive(Default)]
struct Builder {
    timeline: Timeline,
    /// Open agents and graphs by (depth, handle, is-graph).
    open: HashMap<(u64, u64, bool), usize>,
    /// When each tool was asked for (and whether the owner was asked), oldest first, until
    /// its call ends.
    asked: HashMap<String, VecDeque<(u64, bool)>>,
}

impl Builder {
    fn push(&mut self, bar: Bar) -> Option<usize> {
        if self.timeline.bars.len() >= MAX_BARS {
            self.timeline.cut = true;
            return None;
        }
        self.timeline.bars.push(bar);
        Some(self.timeline.bars.len() - 1)
    }

    fn open(&mut self, key: (u64, u64, bool), lane: Lane, label: String, at: u64) {
        let bar = Bar {
            lane,
            label,
            start_ms: at,
            end_ms: u64::MAX,
            tokens: (lane == Lane::Agent).then_some(0),
            failure: None,
            asked_owner: false,
            answer: None,
        };
        if let Some(index) = self.push(bar) {
            self.open.insert(key, index);
        }
    }

    fn close(&mut self, key: (u64, u64, bool), at: u64) -> Option<&mut Bar> {
        let index = self.open.remove(&key)?;
        let bar = &mut self.timeline.bars[index];
        bar.end_ms = at;
        Some(bar)
    }

    fn tool_ended(&mut self, tool: &str, at: u64, failure: Option<String>) {
        let (start, asked_owner) = self
            .asked
            .get_mut(tool)
            .and_then(VecDeque::pop_front)
            .unwrap_or((at, false));
        self.push(Bar {
            lane: Lane::Tool,
            label: tool.to_owned(),
            start_ms: start,
            end_ms: at,
            tokens: None,
            failure,
            asked_owner,
            answer: None,
        });
    }

    fn event(&mut self, event: &Value) {
        let at = event["elapsed_ms"].as_u64().unwrap_or(0);
        let depth = event["depth"].as_u64().unwrap_or(0);
        let handle = event["handle"].as_u64().unwrap_or(0);
        let text = |key: &str| event[key].as_str().map(str::to_owned);
        self.timeline.duration_ms = self.timeline.duration_ms.max(at);
        match event["event"].as_str().unwrap_or_default() {
            "agent_started" => {
                let label = text("label").unwrap_or_else(|| format!("agent {handle}"));
                self.open((depth, handle, false), Lane::Agent, label, at);
            }
            "agent_turn" => self.turn(event, (depth, handle, false), at),
            "agent_finished" => {
                if let Some(bar) = self.close((depth, handle, false), at) {
                    bar.tokens = event["tokens"].as_u64().or(bar.tokens);
                }
            }
            "agent_failed" => {
                if let Some(bar) = self.close((depth, handle, false), at) {
                    bar.failure = text("error");
                }
            }
            "graph_started" => {
                let label = format!("graph {}", text("slug").unwrap_or_default());
                self.open((depth, handle, true), Lane::Graph, label, at);
            }
            "graph_finished" => {
                if let Some(bar) = self.close((depth, handle, true), at) {
                    bar.failure = text("error");
                }
            }
            "approval_requested" => {
                let tool = text("tool").unwrap_or_default();
                let asked = self.asked.entry(tool).or_default();
                match asked.front_mut() {
                    Some((_, owner)) => *owner = true,
                    None => asked.push_back((at, true)),
                }
            }
            "tool_called" => self.tool_ended(&text("tool").unwrap_or_default(), at, text("error")),
            "tool_denied" => {
                let reason = text("reason").unwrap_or_default();
                self.tool_ended(&text("tool").unwrap_or_default(), at, Some(reason));
            }
            _ => {}
        }
    }

    fn turn(&mut self, event: &Value, key: (u64, u64, bool), at: u64) {
        if let Some(&index) = self.open.get(&key)
            && let Some(tokens) = self.timeline.bars[index].tokens.as_mut()
        {
            *tokens += event["tokens"].as_u64().unwrap_or(0);
        }
        for call in event["tool_calls"].as_array().into_iter().flatten() {
            if let Some(name) = call["name"].as_str() {
                self.asked
                    .entry(name.to_owned())
                    .or_default()
                    .push_back((at, false));
            }
        }
    }
}

/// The timeline of a stored trace (a JSON array of events); anything else draws nothing.
pub fn from_trace(trace: &Value) -> Timeline {
    let mut builder = Builder::default();
    for event in trace.as_array().into_iter().flatten() {
        builder.event(event);
    }
    let mut timeline = builder.timeline;
    let end = timeline.duration_ms;
    for bar in &mut timeline.bars {
        if bar.end_ms == u64::MAX {
            bar.end_ms = end;
        }
    }
    timeline
}

/// `timeline` with the owner's answers written on the tool calls that asked: `answers` are
/// (tool, answer) oldest first, given to that tool's asking bars in order.
pub fn with_answers(mut timeline: Timeline, answers: &[(String, String)]) -> Timeline {
    let mut left: HashMap<&str, VecDeque<&str>> = HashMap::new();
    for (tool, answer) in answers {
        left.entry(tool.as_str())
            .or_default()
            .push_back(answer.as_str());
    }
    for bar in &mut timeline.bars {
        if bar.lane == Lane::Tool && bar.asked_owner {
            bar.answer = left
                .get_mut(bar.label.as_str())
                .and_then(VecDeque::pop_front)
                .map(str::to_owned);
        }
    }
    timeline
}

/// Time since the run started, as people read it: "350 ms", "4.2 s", "2 min 05 s".
pub fn elapsed(ms: u64) -> String {
    match ms {
        0 => "0 s".to_owned(),
        1..1_000 => format!("{ms} ms"),
        1_000..10_000 => format!("{:.1} s", ms as f64 / 1000.0),
        10_000..60_000 => format!("{} s", (ms + 500) / 1000),
        _ => {
            let secs = (ms + 500) / 1000;
            format!("{} min {:02} s", secs / 60, secs % 60)
        }
    }
}

/// Where things go in a drawing (SVG user units; it scales to the width it is given).
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    width: u64,
    /// Labels end here (right-aligned) when beside the bars; `None`: above each bar.
    label_right: Option<u64>,
    chart_left: u64,
    chart_right_margin: u64,
    row: u64,
    font_size: u64,
}

impl Layout {
    /// Labels beside the bars: for a wide screen.
    pub const WIDE: Layout = Layout {
        width: 960,
        label_right: Some(280),
        chart_left: 290,
        chart_right_margin: 20,
        row: 26,
        font_size: 13,
    };
    /// Labels above the bars: for a phone (drawn 400 wide, it keeps its text readable at 375 px).
    pub const NARROW: Layout = Layout {
        width: 400,
        label_right: None,
        chart_left: 8,
        chart_right_margin: 16,
        row: 38,
        font_size: 13,
    };

    fn chart_width(&self) -> u64 {
        self.width - self.chart_left - self.chart_right_margin
    }

    fn x_of(&self, ms: u64, duration: u64) -> u64 {
        self.chart_left + ms.min(duration) * self.chart_width() / duration.max(1)
    }
}

const AXIS: u64 = 30;

fn colour(bar: &Bar) -> &'static str {
    match (bar.failure.is_some(), bar.lane) {
        (true, _) => "#b3261e",
        (false, Lane::Agent) => "#2f5d8a",
        (false, Lane::Tool) => "#a0660b",
        (false, Lane::Graph) => "#3d7a3d",
    }
}

fn caption(bar: &Bar) -> String {
    let kind = match bar.lane {
        Lane::Agent => "agent",
        Lane::Tool => "tool",
        Lane::Graph => "",
    };
    let mut text = format!("{kind} {}", bar.label).trim().to_owned();
    if let Some(tokens) = bar.tokens {
        text.push_str(&format!(" · {tokens} tokens"));
    }
    if bar.asked_owner {
        text.push_str(" · asked you");
        if let Some(answer) = &bar.answer {
            text.push_str(": ");
            text.push_str(answer);
        }
    }
    if bar.failure.is_some() {
        text.push_str(" · failed");
    }
    text.chars().take(56).collect()
}

fn anchor(quarter: u64) -> &'static str {
    match quarter {
        0 => "start",
        4 => "end",
        _ => "middle",
    }
}

/// The timeline as an SVG image, laid out wide.
pub fn svg(timeline: &Timeline) -> Markup {
    svg_in(timeline, Layout::WIDE)
}

/// The timeline as an SVG image in `layout`.
pub fn svg_in(timeline: &Timeline, layout: Layout) -> Markup {
    let duration = timeline.duration_ms.max(1);
    let rows = u64::try_from(timeline.bars.len())
        .unwrap_or(u64::MAX)
        .max(1);
    let row = layout.row;
    let height = AXIS + rows * row + 10;
    html! {
        svg xmlns="http://www.w3.org/2000/svg" viewBox=(format!("0 0 {} {height}", layout.width))
            role="img" aria-label="Timeline of the run: agents and tools as bars over time"
            font-family="system-ui, sans-serif" font-size=(layout.font_size) {
            @for quarter in 0..=4u64 {
                @let x = layout.x_of(duration * quarter / 4, duration);
                line x1=(x) x2=(x) y1=(AXIS - 6) y2=(height - 10) stroke="#d0d0d0" {}
                text x=(x) y=(AXIS - 12) text-anchor=(anchor(quarter)) fill="#555" {
                    (elapsed(duration * quarter / 4))
                }
            }
            @for (n, bar) in timeline.bars.iter().enumerate() {
                @let y = AXIS + u64::try_from(n).unwrap_or(0) * row;
                @let x = layout.x_of(bar.start_ms, duration);
                @let width = layout.x_of(bar.end_ms, duration).saturating_sub(x).max(3);
                @match layout.label_right {
                    Some(right) => {
                        text x=(right) y=(y + 17) text-anchor="end" fill="#1b1b1b" { (caption(bar)) }
                        (bar_rect(bar, x, y + 4, width, row - 8))
                    }
                    None => {
                        text x=(layout.chart_left) y=(y + 13) fill="#1b1b1b" { (caption(bar)) }
                        (bar_rect(bar, x, y + 18, width, row - 24))
                    }
                }
            }
        }
    }
}

fn bar_rect(bar: &Bar, x: u64, y: u64, width: u64, height: u64) -> Markup {
    html! {
        rect x=(x) y=(y) width=(width) height=(height) rx="3" fill=(colour(bar)) {
            title {
                (caption(bar)) ": " (elapsed(bar.start_ms)) " – " (elapsed(bar.end_ms))
                @if let Some(failure) = &bar.failure { " (" (failure) ")" }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn trace() -> Value {
        json!([
            {"elapsed_ms": 0, "depth": 0, "event": "run_started", "run_id": "r", "graph": "g", "engine": "boa"},
            {"elapsed_ms": 5, "depth": 0, "event": "agent_started", "handle": 1, "label": "writer", "max_tokens": null},
            {"elapsed_ms": 40, "depth": 0, "event": "agent_turn", "handle": 1, "turn": 1, "tokens": 30,
             "input_tokens": 20, "output_tokens": 10, "model": "m", "finish_reason": "tool_calls",
             "tool_calls": [{"name": "fs.write", "arguments": {}}]},
            {"elapsed_ms": 45, "depth": 0, "event": "approval_requested", "tool": "fs.write"},
            {"elapsed_ms": 70, "depth": 0, "event": "tool_called", "tool": "fs.write", "error": null},
            {"elapsed_ms": 90, "depth": 0, "event": "agent_finished", "handle": 1, "label": "writer", "tokens": 42, "cost": 0.0},
            {"elapsed_ms": 95, "depth": 0, "event": "tool_denied", "tool": "fs.read", "reason": "denied by policy"},
            {"elapsed_ms": 100, "depth": 0, "event": "run_finished", "status": "completed", "total_tokens": 42, "reported_cost": 0.0, "error": null}
        ])
    }

    #[test]
    fn agents_and_tools_become_bars_over_the_run() {
        let timeline = from_trace(&trace());
        assert_eq!(timeline.duration_ms, 100);
        assert_eq!(timeline.bars.len(), 3, "{timeline:?}");
        let agent = &timeline.bars[0];
        assert_eq!((agent.lane, agent.label.as_str()), (Lane::Agent, "writer"));
        assert_eq!(
            (agent.start_ms, agent.end_ms, agent.tokens),
            (5, 90, Some(42))
        );
        let tool = &timeline.bars[1];
        assert_eq!(
            (tool.lane, tool.start_ms, tool.end_ms),
            (Lane::Tool, 40, 70)
        );
        assert!(tool.failure.is_none() && tool.asked_owner);
        assert!(!timeline.bars[2].asked_owner);
        let denied = &timeline.bars[2];
        assert_eq!(denied.failure.as_deref(), Some("denied by policy"));
        let drawn = svg(&timeline).into_string();
        assert!(drawn.starts_with("<svg"), "{drawn}");
        assert_eq!(drawn.matches("<rect").count(), 3);
        assert!(drawn.contains("agent writer · 42 tokens"), "{drawn}");
        assert!(drawn.contains(">100 ms<"), "{drawn}");
        let answered = with_answers(
            timeline.clone(),
            &[("fs.write".into(), "you approved".into())],
        );
        assert_eq!(answered.bars[1].answer.as_deref(), Some("you approved"));
        assert!(
            answered.bars[2].answer.is_none(),
            "a bar that did not ask gets no answer"
        );
        assert!(
            svg(&answered)
                .into_string()
                .contains("tool fs.write · asked you: you approved"),
            "the owner's answer is shown"
        );
        let narrow = svg_in(&timeline, Layout::NARROW).into_string();
        assert!(narrow.contains("viewBox=\"0 0 400 "), "{narrow}");
        assert_eq!(narrow.matches("<rect").count(), 3);
    }

    #[test]
    fn the_axis_reads_in_seconds_and_minutes() {
        assert_eq!(elapsed(0), "0 s");
        assert_eq!(elapsed(350), "350 ms");
        assert_eq!(elapsed(4_230), "4.2 s");
        assert_eq!(elapsed(15_400), "15 s");
        assert_eq!(elapsed(125_000), "2 min 05 s");
        let long = Timeline {
            bars: Vec::new(),
            duration_ms: 240_000,
            cut: false,
        };
        let drawn = svg(&long).into_string();
        assert!(
            drawn.contains(">1 min 00 s<") && drawn.contains(">4 min 00 s<"),
            "{drawn}"
        );
        assert!(!drawn.contains("000 ms"), "{drawn}");
    }

    #[test]
    fn an_unfinished_agent_lasts_to_the_end_and_bars_are_capped() {
        let mut events = vec![
            json!({"elapsed_ms": 1, "depth": 0, "event": "agent_started", "handle": 9, "label": null}),
        ];
        for i in 0..(MAX_BARS as u64 + 5) {
            events.push(json!({"elapsed_ms": 10 + i, "depth": 0, "event": "tool_called", "tool": "fs.read", "error": null}));
        }
        let timeline = from_trace(&Value::Array(events));
        assert_eq!(timeline.bars.len(), MAX_BARS);
        assert!(timeline.cut);
        assert_eq!(timeline.bars[0].label, "agent 9");
        assert_eq!(timeline.bars[0].end_ms, timeline.duration_ms);
        assert_eq!(from_trace(&json!("not a trace")), Timeline::default());
    }
}
