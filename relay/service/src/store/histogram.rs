//! Fixed-bucket histograms of how long things took, as `/metrics` renders them: the
//! notifier's wake-up lag is measured here, on the store's floor, and the edges' request
//! latencies use the same type.

use std::sync::Mutex;
use std::time::Duration;

/// A histogram with fixed buckets.
#[derive(Debug, Clone)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations at or under each bound (not cumulative; rendering adds them up).
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending).
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one observation.
    pub fn observe(&mut self, value: Duration) {
        let seconds = value.as_secs_f64();
        if let Some(bucket) = self.bounds.iter().position(|bound| seconds <= *bound) {
            self.counts[bucket] += 1;
        }
        self.sum += seconds;
        self.count += 1;
    }

    /// How many observations it has.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The buckets' upper bounds, in seconds, ascending.
    pub fn bounds(&self) -> &'static [f64] {
        self.bounds
    }

    /// Observations at or under each bound (not cumulative).
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// The observations' sum, in seconds.
    pub fn sum(&self) -> f64 {
        self.sum
    }
}

/// A histogram shared between tasks.
#[derive(Debug)]
pub struct SharedHistogram(Mutex<Histogram>);

impl SharedHistogram {
    /// An empty histogram over `bounds`.
    pub fn new(bounds: &'static [f64]) -> Self {
        SharedHistogram(Mutex::new(Histogram::new(bounds)))
    }

    /// Records one observation.
    pub fn observe(&self, value: Duration) {
        self.lock().observe(value);
    }

    /// A copy of it now.
    pub fn snapshot(&self) -> Histogram {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Histogram> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
