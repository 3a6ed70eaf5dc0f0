//! The owner's control over what runs on this desktop (issue 43): `relay desktop cancel`, and
//! what `unshare`, `project disable` and `session remove` say they stopped. The relay is
//! another process: a cancel is a row in the state file it reads at its next sharing watch
//! (every `SHARING_WATCH_INTERVAL`), a withdrawal the sharing change it reads there; the
//! command then waits a little for the run's history row to end, and says what happened.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, bail};
use relay_desktop::lock::RelayLock;
use relay_desktop::state::{DesktopState, RunRef};
use relay_protocol::clock::{Clock, Stopwatch, SystemClock};
use runner::trace::for_terminal;

/// How long a command waits for the running relay to confirm a stop: one sharing watch
/// interval to see the request, a stopping engine, the record, and slack.
pub const STOP_CONFIRM_WAIT: Duration = Duration::from_secs(4);
/// How often the history is read while waiting.
const CONFIRM_POLL: Duration = Duration::from_millis(50);

/// Whether a `relay desktop run` holds this state file (an in-memory state has no relay).
fn relay_runs(state: &DesktopState) -> Result<bool> {
    Ok(match state.path() {
        Some(path) => RelayLock::holder(path)?.is_some(),
        None => false,
    })
}

fn no_relay(path: Option<&Path>) -> String {
    format!(
        "no `relay desktop run` is running on {}, so no run is going; its next start reports any run it left as failed",
        path.map_or_else(|| "this state".to_owned(), |p| p.display().to_string())
    )
}

fn named(run: &RunRef) -> String {
    format!(
        "run {} of {}",
        run.command_id,
        for_terminal(&run.session_name)
    )
}

/// `relay desktop cancel RUN|--current`: asks the running relay to cancel the run and waits for
/// it to end; the lines to print.
pub async fn cancel(state: &DesktopState, run: Option<&str>, current: bool) -> Result<Vec<String>> {
    let target = match (run, current) {
        (Some(run), false) => match state.find_run(run)? {
            Some(found) => found,
            None => bail!(
                "no run {}: give a command id or an execution id as `relay desktop history` shows them, or --current",
                for_terminal(run)
            ),
        },
        (None, true) => match state.running_runs()?.into_iter().next() {
            Some(found) => found,
            None => bail!("nothing is running on this desktop: no run to cancel"),
        },
        _ => bail!("give the run to cancel (its command or execution id) or --current"),
    };
    if target.status != "running" {
        bail!(
            "{} is not running: it ended {}; `relay desktop history` shows how",
            named(&target),
            target.status
        );
    }
    if !target.began {
        bail!(
            "{} is starting and has not begun yet: try again in a moment",
            named(&target)
        );
    }
    if !relay_runs(state)? {
        bail!("{}", no_relay(state.path()));
    }
    let command = target
        .command_id
        .parse()
        .map_err(|e: relay_protocol::InvalidInput| anyhow::anyhow!("{}", e.0))?;
    state.request_cancel(&command, SystemClock.now())?;
    Ok(confirm(state, vec![target]).await)
}

/// The runs a withdrawal is about to cover, read before it is made (a removed session's name
/// is gone after): none while no relay runs (a `running` row is then a stale one).
pub fn covered(
    state: &DesktopState,
    project: Option<&str>,
    session: Option<&relay_protocol::GraphSessionId>,
) -> Result<Vec<RunRef>> {
    if !relay_runs(state)? {
        return Ok(Vec::new());
    }
    Ok(state.running_covered(project, session)?)
}

/// Waits (at most [`STOP_CONFIRM_WAIT`]) for `runs` to end, and says of each what happened:
/// stopped, or asked and not confirmed yet.
pub async fn confirm(state: &DesktopState, runs: Vec<RunRef>) -> Vec<String> {
    let waited = Stopwatch::start();
    let mut lines = Vec::new();
    let mut pending = runs;
    while !pending.is_empty() && waited.elapsed() < STOP_CONFIRM_WAIT {
        tokio::time::sleep(CONFIRM_POLL).await;
        let mut still = Vec::new();
        for run in pending {
            match state.find_run(&run.execution_id) {
                Ok(Some(now)) if now.status != "running" => {
                    lines.push(format!("stopped {} ({})", named(&run), now.status));
                }
                _ => still.push(run),
            }
        }
        pending = still;
    }
    for run in pending {
        lines.push(format!(
            "asked the running relay to stop {}; it has not confirmed yet (`relay desktop history` shows how it ends)",
            named(&run)
        ));
    }
    lines
}
