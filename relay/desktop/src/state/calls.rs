//! The desktop state for async code. rusqlite is synchronous and a call may wait up to
//! [`BUSY_TIMEOUT`](super) for another process's write lock (the CLI, the page, a backup), so
//! no runtime worker makes one: every call is a closure sent to the one thread that serves the
//! open state file, and its answer comes back over a oneshot (the shape of `tokio-rusqlite`'s
//! `Connection::call`). The thread runs calls in the order they were sent and ends when the
//! last handle is dropped. Its queue has no bound of its own and needs none: every caller
//! awaits its call before making the next, except the two that cannot wait (a sync answer's
//! note of the queue, and a dropped approval's expiry), one per answer or approval.
//!
//! An in-memory state (tests, the simulator) does no I/O and no other process can lock it: its
//! calls run right where they are made. That is also what tokio's paused time needs, since a
//! call answered by another thread would let the paused clock jump ahead while it waits.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;

use super::{DesktopState, StateError};

/// One call, run on the state's thread.
type Job = Box<dyn FnOnce(&DesktopState) + Send>;

/// A handle to the desktop state that async code can await. Cloning shares the thread.
#[derive(Clone)]
pub struct AsyncState {
    state: DesktopState,
    /// Where calls go; `None`: they run where they are made (an in-memory state).
    jobs: Option<mpsc::Sender<Job>>,
}

impl std::fmt::Debug for AsyncState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncState")
            .field("path", &self.state.path())
            .field("thread", &self.jobs.is_some())
            .finish()
    }
}

impl AsyncState {
    /// `state` behind its own thread (an in-memory state: calls run where they are made).
    pub fn new(state: DesktopState) -> Self {
        let jobs = state.path().and_then(|_| spawn(state.clone()));
        AsyncState { state, jobs }
    }

    /// Runs `work` on the state's thread and waits for its answer without blocking the
    /// runtime. The call runs to its end even if the caller stops waiting.
    pub async fn call<T, F>(&self, work: F) -> Result<T, StateError>
    where
        T: Send + 'static,
        F: FnOnce(&DesktopState) -> Result<T, StateError> + Send + 'static,
    {
        let Some(jobs) = &self.jobs else {
            return work(&self.state);
        };
        let (answer, answered) = tokio::sync::oneshot::channel();
        jobs.send(Box::new(move |state| {
            // The caller may have stopped waiting: the work is done all the same.
            let _ = answer.send(work(state));
        }))
        .map_err(|_| StateError::Task("the desktop state's thread has stopped".into()))?;
        answered.await.map_err(|_| {
            StateError::Task("a call on the desktop state's thread panicked; see the log".into())
        })?
    }

    /// Sends `work` to the state's thread without waiting for it (a drop guard's last word).
    pub fn send(&self, work: impl FnOnce(&DesktopState) + Send + 'static) {
        match &self.jobs {
            Some(jobs) => {
                if jobs.send(Box::new(work)).is_err() {
                    tracing::error!("the desktop state's thread has stopped: a write is lost");
                }
            }
            None => work(&self.state),
        }
    }

    /// The state's blocking API, for code that may block (the CLI, tests).
    pub fn blocking(&self) -> &DesktopState {
        &self.state
    }
}

/// The thread that serves `state`'s calls; `None` (calls then run where they are made, and
/// an error says why) if the system refuses a thread.
fn spawn(state: DesktopState) -> Option<mpsc::Sender<Job>> {
    let (jobs, calls) = mpsc::channel::<Job>();
    let spawned = std::thread::Builder::new()
        .name("desktop-state".into())
        .spawn(move || {
            for job in calls {
                // One call's panic (a bug) must not end the thread every later call needs: its
                // caller is told, and the thread goes on.
                if std::panic::catch_unwind(AssertUnwindSafe(|| job(&state))).is_err() {
                    tracing::error!("a call on the desktop state's thread panicked");
                }
            }
        });
    match spawned {
        Ok(_) => Some(jobs),
        Err(e) => {
            tracing::error!(
                "cannot start the desktop state's thread ({e}); its calls run on the runtime, which may stall while another process holds the state's write lock"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn calls_on_a_file_state_run_on_its_own_thread_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state =
            AsyncState::new(DesktopState::open(&dir.path().join("desktop.db")).expect("open"));
        let here = std::thread::current().id();
        let mut threads = Vec::new();
        for n in 0..3 {
            let thread = state
                .call(move |s| {
                    s.set_policy(&format!("tool.{n}"), runner::host::approvals::Policy::Ask)?;
                    Ok(std::thread::current().id())
                })
                .await
                .expect("call");
            threads.push(thread);
        }
        assert!(threads.iter().all(|t| *t == threads[0] && *t != here));
        let folder = dir.path().canonicalize().expect("canonical");
        let sent = folder.clone();
        state.send(move |s| {
            let _ = s.set_folder(&sent);
        });
        // Calls run in the order sent: the read sees the write sent before it.
        let read = state.call(|s| s.folder()).await.expect("read");
        assert_eq!(read, Some(folder));
    }

    #[tokio::test]
    async fn a_panicking_call_is_an_error_and_the_thread_goes_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state =
            AsyncState::new(DesktopState::open(&dir.path().join("desktop.db")).expect("open"));
        let panicked = state
            .call(|_| -> Result<(), StateError> { panic!("a bug") })
            .await;
        assert!(matches!(panicked, Err(StateError::Task(_))), "{panicked:?}");
        assert!(state.call(|s| s.sessions()).await.is_ok());
    }

    #[tokio::test]
    async fn an_in_memory_state_answers_where_it_is_called() {
        let state = AsyncState::new(DesktopState::open_in_memory().expect("open"));
        let here = std::thread::current().id();
        let thread = state
            .call(|_| Ok(std::thread::current().id()))
            .await
            .expect("call");
        assert_eq!(thread, here);
    }
}
