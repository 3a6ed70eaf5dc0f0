//! How long a sandbox takes to start, for the sandbox bench (`benches/sandbox.rs`
//! `start_to_first_call`): from the instance's creation (its store made, before wasmtime
//! instantiates the component) to the graph's first call of the host interface, with the two
//! steps before it. Off unless a bench switches it on; then each instance records one [`Start`],
//! the first time it calls the host.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::clock::Stopwatch;

static ON: AtomicBool = AtomicBool::new(false);
static STARTS: Mutex<Vec<Start>> = Mutex::new(Vec::new());

/// One instance's start, each figure from the moment its creation began.
#[derive(Debug, Clone, Copy)]
pub struct Start {
    /// Its store made (WASI, limits, fuel).
    pub store: Duration,
    /// wasmtime's instantiation done.
    pub instantiated: Duration,
    /// The graph's first host call.
    pub first_call: Duration,
}

/// Starts recording every instance's start (until [`stop`]).
pub fn start() {
    ON.store(true, Ordering::SeqCst);
}

/// Stops recording and returns the starts recorded since [`start`] or the last `stop`.
pub fn stop() -> Vec<Start> {
    ON.store(false, Ordering::SeqCst);
    std::mem::take(&mut *STARTS.lock().unwrap_or_else(|e| e.into_inner()))
}

/// One instance's start while it is under way.
pub(super) struct Starting {
    watch: Stopwatch,
    store: Duration,
    instantiated: Duration,
}

impl Starting {
    /// The moment an instance's creation begins, when recording.
    pub(super) fn begin() -> Option<Self> {
        ON.load(Ordering::Relaxed).then(|| Self {
            watch: Stopwatch::start(),
            store: Duration::ZERO,
            instantiated: Duration::ZERO,
        })
    }

    /// Its store is made.
    pub(super) fn store_made(&mut self) {
        self.store = self.watch.elapsed();
    }

    /// wasmtime has instantiated it.
    pub(super) fn instantiated(&mut self) {
        self.instantiated = self.watch.elapsed();
    }

    /// It made its first host call now.
    pub(super) fn first_call(self) {
        let start = Start {
            store: self.store,
            instantiated: self.instantiated,
            first_call: self.watch.elapsed(),
        };
        STARTS.lock().unwrap_or_else(|e| e.into_inner()).push(start);
    }
}
