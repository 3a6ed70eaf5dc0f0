//! What keeps the page current: whether a relay runs on this state file, the panel every page
//! opens with (that relay, the runs going on with their tokens so far and what they wait for,
//! the approvals waiting, the queue as of the last sync), and the one script, which re-reads
//! the page every [`REFRESH_MS`] and swaps in the regions marked `data-live` that changed. Forms
//! with text inputs sit outside those regions, so a half-typed input keeps its text; a region
//! holding the focused control is left alone until the focus moves.

use std::collections::HashMap;

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};

use super::secured;
use crate::lock::RelayLock;
use crate::state::{DesktopState, RunningRow, StateError};

/// How often the page re-reads itself, in milliseconds.
pub const REFRESH_MS: u64 = 1000;

/// The path of the script.
pub const SCRIPT_PATH: &str = "/live.js";

/// The script: no inline code, so the page's CSP can stay `script-src 'self'`.
const SCRIPT: &str = r#""use strict";
(function () {
  var me = document.currentScript;
  var period = Number(me && me.dataset.refresh) || 1000;
  function swap(fresh) {
    var regions = document.querySelectorAll("[data-live]");
    for (var i = 0; i < regions.length; i++) {
      var region = regions[i];
      var next = fresh.getElementById(region.id);
      if (!next || next.innerHTML === region.innerHTML) continue;
      if (region.contains(document.activeElement)) continue;
      region.innerHTML = next.innerHTML;
    }
  }
  function tick() {
    fetch(location.href, {credentials: "same-origin", cache: "no-store", redirect: "error"})
      .then(function (answer) { return answer.ok ? answer.text() : null; })
      .then(function (text) {
        if (text) swap(new DOMParser().parseFromString(text, "text/html"));
      })
      .catch(function () {})
      .then(function () { setTimeout(tick, period); });
  }
  setTimeout(tick, period);
})();
"#;

/// `GET /live.js`.
pub(crate) async fn script() -> Response {
    let mut response = SCRIPT.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/javascript; charset=utf-8"),
    );
    secured(response)
}

/// Whether a `relay desktop run` holds this state file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relay {
    /// One does: who (its process id, in words).
    Running(String),
    /// None does: nothing runs, and no answer to an approval would be acted on.
    Stopped,
    /// The state has no file (a test's in-memory state), or its lock could not be read: why.
    Unknown(Option<String>),
}

impl Relay {
    /// The relay on `state`'s file now.
    pub fn of(state: &DesktopState) -> Relay {
        let Some(path) = state.path() else {
            return Relay::Unknown(None);
        };
        match RelayLock::holder(path) {
            Ok(Some(holder)) => Relay::Running(holder),
            Ok(None) => Relay::Stopped,
            Err(e) => Relay::Unknown(Some(e.to_string())),
        }
    }

    /// Whether answers to approvals may be acted on (a relay runs, or nobody can tell).
    pub fn may_be_live(&self) -> bool {
        !matches!(self, Relay::Stopped)
    }
}

/// Project names as the service gave them (ids of projects it did not name stay ids).
#[derive(Debug, Clone, Default)]
pub struct Names(pub HashMap<String, String>);

impl Names {
    /// The names in `state`.
    pub fn of(state: &DesktopState) -> Result<Names, StateError> {
        Ok(Names(state.project_names()?))
    }

    /// The project's name, if the service gave one.
    pub fn name(&self, project: &str) -> Option<&str> {
        self.0
            .get(project)
            .map(String::as_str)
            .filter(|n| !n.is_empty())
    }

    /// The project by name (its id in the tooltip), or its id when no name is known.
    pub fn project(&self, project: &str) -> Markup {
        match self.name(project) {
            Some(name) => html! { span title=(project) { (name) } },
            None => html! { code { (project) } },
        }
    }
}

/// The agent that asked, by name (its id in the tooltip), or by id, or a dash.
pub fn agent(name: Option<&str>, id: Option<&str>) -> Markup {
    match (name.filter(|n| !n.is_empty()), id) {
        (Some(name), Some(id)) => html! { span title=(id) { (name) } },
        (Some(name), None) => html! { (name) },
        (None, Some(id)) => html! { code { (id) } },
        (None, None) => html! { span.muted { "—" } },
    }
}

/// The panel every page opens with.
pub fn panel(state: &DesktopState, names: &Names) -> Result<Markup, StateError> {
    let relay = Relay::of(state);
    let running = state.running()?;
    let pending = state.approvals(false)?;
    let queued = state.queued()?.len();
    Ok(html! {
        div #now data-live aria-live="polite" {
            @match &relay {
                Relay::Running(holder) => p.banner.up {
                    "A relay is running on this state file (" (holder) "): it picks up queued runs and acts on your answers."
                },
                Relay::Stopped => p.banner.down {
                    "No relay is running on this state file: nothing is picked up or run, and approvals are not live. "
                    code { "relay desktop run" } " starts one."
                },
                Relay::Unknown(Some(why)) => p.banner.down { "Cannot tell whether a relay runs on this state file: " (why) },
                Relay::Unknown(None) => {},
            }
            @for run in &running { (running_line(run, names, &relay)) }
            @if !pending.is_empty() {
                p {
                    a href="/approvals" { (count(pending.len(), "tool call", "tool calls")) }
                    @if relay.may_be_live() { " waiting for your approval: " } @else { " asked for approval (not live): " }
                    @for (n, approval) in pending.iter().enumerate() {
                        @if n > 0 { ", " }
                        code { (approval.tool) }
                        @if let Some(slug) = &approval.slug { " in " code { (slug) } }
                    }
                }
            }
            @if queued > 0 {
                p { a href="/runs#queued" { (count(queued, "run", "runs")) " queued" } " for this desktop as of the last sync." }
            }
        }
    })
}

fn running_line(run: &RunningRow, names: &Names, relay: &Relay) -> Markup {
    html! {
        p.running {
            @if relay.may_be_live() { "Running: " } @else { "Interrupted (the relay stopped; its next start reports it failed): " }
            a href=(format!("/runs/{}", run.execution_id)) { code { (run.slug) } }
            " for " (names.project(&run.project_id))
            " · requested by " (agent(run.agent_name.as_deref(), run.agent_id.as_deref()))
            " · " (run.total_tokens) " tokens so far"
            @if let Some(tool) = &run.waiting_for {
                @if relay.may_be_live() { " · waiting for " } @else { " · was waiting for " }
                a href="/approvals" { "your approval of " code { (tool) } }
            }
        }
    }
}

/// "1 run", "3 runs".
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A cost as money: four significant digits, trailing zeros dropped ("$0.0024", "$12.35",
/// "$0"); a cost that is not a finite amount is "unknown".
pub fn money(cost: f64) -> String {
    if !cost.is_finite() || cost < 0.0 {
        return "unknown".to_owned();
    }
    if cost == 0.0 {
        return "$0".to_owned();
    }
    let magnitude = cost.log10().floor();
    // Four significant digits: three past the leading one.
    let decimals = (3.0 - magnitude).clamp(0.0, 12.0);
    let shown = format!("{cost:.*}", decimals as usize);
    let shown = if shown.contains('.') {
        shown.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        shown
    };
    format!("${shown}")
}

/// A run's cost as the owner should read it: "unknown" while it runs.
pub fn run_cost(status: &str, cost: f64) -> String {
    if status == "running" {
        "unknown".to_owned()
    } else {
        money(cost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_print_as_money_with_four_significant_digits() {
        assert_eq!(money(0.002_400_000_000_000_000_2), "$0.0024");
        assert_eq!(money(0.0015), "$0.0015");
        assert_eq!(money(12.345_67), "$12.35");
        assert_eq!(money(1234.56), "$1235");
        assert_eq!(money(0.000_123_456), "$0.0001235");
        assert_eq!(money(0.0), "$0");
        assert_eq!(money(f64::NAN), "unknown");
        assert_eq!(run_cost("running", 0.0), "unknown");
        assert_eq!(run_cost("completed", 0.5), "$0.5");
    }

    #[test]
    fn unnamed_projects_stay_ids_and_named_ones_keep_the_id_at_hand() {
        let names = Names(HashMap::from([("p1".to_owned(), "Blog".to_owned())]));
        assert_eq!(
            names.project("p1").into_string(),
            "<span title=\"p1\">Blog</span>"
        );
        assert_eq!(names.project("p2").into_string(), "<code>p2</code>");
    }
}
