//! Summary figures of a sample, as the seeds report them.

use serde::Serialize;

/// Count, mean, median, 95th percentile and maximum of a sample (seconds or calls).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// Sample size.
    pub n: usize,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 95th percentile (nearest rank).
    pub p95: f64,
    /// Maximum.
    pub max: f64,
}

impl Summary {
    /// Summarizes `values` (an empty sample is all zeros).
    pub fn of(values: &[f64]) -> Summary {
        if values.is_empty() {
            return Summary {
                n: 0,
                mean: 0.0,
                p50: 0.0,
                p95: 0.0,
                max: 0.0,
            };
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let rank = |q: f64| {
            let index = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
            sorted[index]
        };
        Summary {
            n: sorted.len(),
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
            p50: rank(0.5),
            p95: rank(0.95),
            max: sorted[sorted.len() - 1],
        }
    }

    /// The figures as `{"n", "mean_s", "p50_s", "p95_s", "max_s"}`, rounded to milliseconds.
    pub fn seconds_json(&self) -> serde_json::Value {
        let r = |x: f64| (x * 1000.0).round() / 1000.0;
        serde_json::json!({"n": self.n, "mean_s": r(self.mean), "p50_s": r(self.p50), "p95_s": r(self.p95), "max_s": r(self.max)})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::of(&values);
        assert_eq!((s.p50, s.p95, s.max, s.n), (50.0, 95.0, 100.0, 100));
        assert!((s.mean - 50.5).abs() < 1e-9);
        assert_eq!(Summary::of(&[]).n, 0);
    }
}
