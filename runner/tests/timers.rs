//! `setTimeout`, `setInterval` and their clears for scripts written for other JavaScript hosts,
//! on the host's timer, the same in both engines.

use crate::common;

use runner::RunStatus;
use runner::host::events::{CollectingSink, EventKind};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_fire_in_order_with_their_arguments_unless_cleared() {
    let script = r#"
    export default async function (args, g) {
      const order = [];
      const passed = await new Promise((resolve) => setTimeout(resolve, 5, "handed over"));
      await new Promise((resolve) => {
        setTimeout(() => { order.push("late"); resolve(); }, 40);
        setTimeout(() => order.push("early"), 1);
        const cleared = setTimeout(() => order.push("cleared"), 1);
        clearTimeout(cleared);
        clearTimeout(12345);
        clearTimeout("not an id");
      });
      // Any delay a browser accepts: none, negative, a fraction, text.
      await new Promise((resolve) => setTimeout(resolve));
      await new Promise((resolve) => setTimeout(resolve, -5));
      await new Promise((resolve) => setTimeout(resolve, 1.7));
      await new Promise((resolve) => setTimeout(resolve, "2"));
      const ids = [setTimeout(() => {}, 1), setTimeout(() => {}, 1)];
      return {passed, order, distinct: ids[0] !== ids[1] && ids.every((id) => id > 0)};
    }"#;
    common::completes_with(
        script,
        json!({"passed": "handed over", "order": ["early", "late"], "distinct": true}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_callback_is_logged_and_the_run_goes_on() {
    let script = r#"
    export default async function (args, g) {
      setTimeout(() => { throw new Error("boom"); }, 1);
      setTimeout(async () => { throw new Error("async boom"); }, 1);
      setTimeout(() => { const v = args.none; g.log(v.trim()); }, 1);
      // Still pending when the graph returns: it never fires.
      setTimeout(() => g.log("after the end"), 60);
      await new Promise((resolve) => setTimeout(resolve, 20));
      return "went on";
    }"#;
    for engine in common::engines() {
        let name = engine.name();
        let (options, sink, _) = common::options(engine, json!({}));
        let outcome = common::run(script, json!({}), &options).await;
        assert_eq!(outcome.status, RunStatus::Completed, "{name}: {outcome:?}");
        assert_eq!(outcome.result, Some(json!("went on")), "{name}");
        // Give a wrongly surviving timer the time to fire.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let logs = log_lines(&sink);
        // Each a warning at the place in the callback that failed (issue 45).
        let at = |line: usize, text: &str| {
            let source = script.lines().nth(line - 1).unwrap_or_default();
            let column = source.find(text).map_or(0, |i| i + 1);
            format!("warning: test.js:{line}:{column}: setTimeout: the callback failed: ")
        };
        for said in [
            format!("{}Error: boom", at(3, "new Error(\"boom")),
            format!("{}Error: async boom", at(4, "new Error(\"async")),
            format!(
                "{}TypeError: cannot read properties of undefined or null (reading 'trim' of v)",
                at(5, "trim")
            ),
        ] {
            assert!(logs.contains(&said), "{name}: {said}: {logs:?}");
        }
        assert!(
            !logs.iter().any(|l| l.contains("after the end")),
            "{name}: {logs:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_the_host_cannot_keep_is_refused_clearly() {
    let script = r#"
    export default async function (args, g) {
      const refusals = [];
      for (const make of [() => setTimeout("code()", 1), () => setTimeout(() => {}, 600001),
                          () => setTimeout(() => {}, Infinity), () => setInterval("code()", 1),
                          () => setInterval(() => {}, 600001)]) {
        try { make(); refusals.push("accepted"); }
        catch (e) { refusals.push((e.code ?? e.name) + ": " + e.message); }
      }
      return refusals;
    }"#;
    common::completes_with(
        script,
        json!([
            "TypeError: setTimeout: the callback must be a function (a string is not run)",
            "invalid: setTimeout: the delay must be at most 600000 ms, got 600001",
            "invalid: setTimeout: the delay must be at most 600000 ms, got Infinity",
            "TypeError: setInterval: the callback must be a function (a string is not run)",
            "invalid: setInterval: the delay must be at most 600000 ms, got 600001",
        ]),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intervals_repeat_until_cleared_and_share_ids_with_timeouts() {
    let script = r#"
    export default async function (args, g) {
      const ticks = [];
      // Cleared from inside its own callback, after the third tick.
      await new Promise((resolve) => {
        const id = setInterval((a, b) => {
          ticks.push(a + b);
          if (ticks.length === 3) { clearInterval(id); setTimeout(resolve, 30); }
        }, 2, "x", "y");
      });
      // A zero delay still lets the rest of the graph run between ticks.
      let zero = 0;
      const fast = setInterval(() => zero++, 0);
      while (zero < 3) await g.sleep(1);
      // clearTimeout clears an interval and clearInterval a timeout, as in browsers.
      clearTimeout(fast);
      const frozen = zero;
      let late = 0;
      const timeout = setTimeout(() => late++, 1);
      clearInterval(timeout);
      clearInterval(12345);
      clearInterval(undefined);
      await g.sleep(20);
      const ids = [setInterval(() => {}, 5), setTimeout(() => {}, 5)];
      ids.forEach(clearInterval);
      return {ticks, stopped: zero === frozen, late,
              distinct: ids[0] !== ids[1] && ids.every((id) => id > 0)};
    }"#;
    common::completes_with(
        script,
        json!({"ticks": ["xy", "xy", "xy"], "stopped": true, "late": 0, "distinct": true}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interval_outlives_a_failing_callback_and_ends_with_the_run() {
    let script = r#"
    export default async function (args, g) {
      let calls = 0;
      setInterval(() => {
        calls++;
        if (calls === 1) throw new Error("tick boom");
        if (calls === 2) return Promise.reject(new Error("async tick boom"));
        g.log("tick " + calls);
      }, 3);
      while (calls < 4) await g.sleep(2);
      // Never cleared: it stops when the graph returns.
      return "went on";
    }"#;
    for engine in common::engines() {
        let name = engine.name();
        let (options, sink, _) = common::options(engine, json!({}));
        let outcome = common::run(script, json!({}), &options).await;
        assert_eq!(outcome.status, RunStatus::Completed, "{name}: {outcome:?}");
        assert_eq!(outcome.result, Some(json!("went on")), "{name}");
        let at_end = log_lines(&sink);
        // Give a wrongly surviving interval the time to tick again.
        tokio::time::sleep(std::time::Duration::from_millis(60)).await;
        let logs = log_lines(&sink);
        assert_eq!(
            logs, at_end,
            "{name}: an interval ticked after the run ended"
        );
        let warned = |text: &str| {
            logs.iter()
                .any(|l| l.starts_with("warning: test.js:") && l.ends_with(text))
        };
        assert!(
            warned("setInterval: the callback failed: Error: tick boom")
                && warned("setInterval: the callback failed: Error: async tick boom")
                && logs.iter().any(|l| l == "tick 3"),
            "{name}: {logs:?}"
        );
    }
}

/// The run's log lines, in order.
fn log_lines(sink: &CollectingSink) -> Vec<String> {
    sink.events()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Log { message } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

/// A timer still pending when the graph returns or throws is named in the trace, at the place
/// that set it (issue 45); a cleared one, or one that fired, is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_pending_at_the_end_is_a_warning_at_the_line_that_set_it() {
    let script = r#"
    export default async function (args, g) {
      const cleared = setTimeout(() => g.log("never"), 50);
      clearTimeout(cleared);
      setTimeout(() => g.log("fired"), 1);
      setTimeout(() => g.log("too late"), 5000);
      await new Promise((resolve) => setTimeout(resolve, 10));
      if (args.fail) throw new Error("stopped");
      return "done";
    }"#;
    let pending =
        "warning: test.js:6:17: setTimeout of 5000 ms set here was still pending when the graph";
    for engine in common::engines() {
        let name = engine.name();
        for (args, ended) in [(json!({}), "returned"), (json!({"fail": true}), "failed")] {
            let (options, sink, _) = common::options(engine.clone(), json!({}));
            let outcome = common::run(script, args, &options).await;
            let logs = log_lines(&sink);
            let warnings: Vec<&String> =
                logs.iter().filter(|l| l.starts_with("warning: ")).collect();
            assert_eq!(warnings.len(), 1, "{name} {ended}: {outcome:?} {logs:?}");
            assert!(
                warnings[0].starts_with(&format!("{pending} {ended}: it was dropped")),
                "{name} {ended}: {logs:?}"
            );
        }
    }
}
