//! The runner's one place that reads the operating system's clocks (clippy.toml forbids
//! `Instant::now` and `SystemTime::now` elsewhere): a [`Stopwatch`] for elapsed time (the
//! trace's timestamps, timings in tests and benchmarks) and [`wall_now`] for the wall clock
//! (file times of the compiled-component cache, HTTP dates in `Retry-After`). Deadlines and
//! sleeps use tokio's timers, which tests may pause.

use std::time::{Duration, Instant, SystemTime};

/// How long something took, on the monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct Stopwatch(Instant);

impl Stopwatch {
    /// A stopwatch started now.
    #[allow(clippy::disallowed_methods)] // the runner's one read of the monotonic clock
    pub fn start() -> Self {
        Stopwatch(Instant::now())
    }

    /// The time since the start.
    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

/// The wall clock's time now.
#[allow(clippy::disallowed_methods)] // the runner's one read of the wall clock
pub fn wall_now() -> SystemTime {
    SystemTime::now()
}
