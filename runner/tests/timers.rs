//! `setTimeout` and `clearTimeout` for scripts written for other JavaScript hosts, on the host's
//! timer, the same in both engines.

use crate::common;

use runner::RunStatus;
use runner::host::events::EventKind;
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
        let logs: Vec<String> = sink
            .events()
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::Log { message } => Some(message.clone()),
                _ => None,
            })
            .collect();
        assert!(
            logs.contains(&"setTimeout: the callback failed: Error: boom".to_owned())
                && logs.contains(&"setTimeout: the callback failed: Error: async boom".to_owned()),
            "{name}: {logs:?}"
        );
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
                          () => setTimeout(() => {}, Infinity)]) {
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
        ]),
    )
    .await;
}
