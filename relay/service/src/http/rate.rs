//! A request rate per token: a token bucket for every token that authenticated (a request
//! without a valid token makes none, so the table cannot be filled by strangers).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How fast one token may make requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests a second, sustained.
    pub per_second: u32,
    /// Requests at once after a quiet spell.
    pub burst: u32,
}

/// Requests a second one token may make, sustained, by default.
pub const DEFAULT_RATE_PER_SECOND: u32 = 50;
/// Requests one token may make at once, by default.
pub const DEFAULT_RATE_BURST: u32 = 500;
/// Tokens whose buckets are kept; past it, full buckets (tokens quiet long enough to have
/// refilled) are dropped first.
pub const MAX_BUCKETS: usize = 100_000;

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit {
            per_second: DEFAULT_RATE_PER_SECOND,
            burst: DEFAULT_RATE_BURST,
        }
    }
}

/// A request refused because its token is past its rate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "rate limit reached: this token may make {} requests a second (bursts up to {}); retry in {retry_after_secs} s",
    limit.per_second,
    limit.burst
)]
pub struct RateLimited {
    /// The limit that refused it.
    pub limit: RateLimit,
    /// When to try again, in whole seconds (at least 1): the `Retry-After` of the answer.
    pub retry_after_secs: u64,
}

impl RateLimited {
    /// The refusal under `limit` with `wait` until the next request fits.
    pub fn new(limit: Option<RateLimit>, wait: Duration) -> Self {
        let after = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        RateLimited {
            limit: limit.unwrap_or_default(),
            retry_after_secs: after.max(1),
        }
    }
}

struct Bucket {
    tokens: f64,
    updated: Instant,
}

/// The buckets of all tokens.
pub struct RateLimiter {
    limit: Option<RateLimit>,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    /// Buckets under `limit` (`None`: no limit).
    pub fn new(limit: Option<RateLimit>) -> Self {
        RateLimiter {
            limit,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// The limit in force.
    pub fn limit(&self) -> Option<RateLimit> {
        self.limit
    }

    /// Takes one request from `token_id`'s bucket, or says how long until one is there.
    pub fn check(&self, token_id: &str) -> Result<(), Duration> {
        let Some(limit) = self.limit else {
            return Ok(());
        };
        let rate = f64::from(limit.per_second.max(1));
        let burst = f64::from(limit.burst.max(1));
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(token_id) {
            buckets.retain(|_, b| {
                b.tokens + now.duration_since(b.updated).as_secs_f64() * rate < burst
            });
        }
        let bucket = buckets.entry(token_id.to_owned()).or_insert(Bucket {
            tokens: burst,
            updated: now,
        });
        let refilled = now.duration_since(bucket.updated).as_secs_f64() * rate;
        bucket.tokens = (bucket.tokens + refilled).min(burst);
        bucket.updated = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_then_the_sustained_rate() {
        let limiter = RateLimiter::new(Some(RateLimit {
            per_second: 10,
            burst: 5,
        }));
        for _ in 0..5 {
            assert_eq!(limiter.check("a"), Ok(()));
        }
        let wait = limiter.check("a").expect_err("the burst is spent");
        assert!(wait <= Duration::from_millis(100), "{wait:?}");
        assert_eq!(
            limiter.check("b"),
            Ok(()),
            "another token has its own bucket"
        );
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(limiter.check("a"), Ok(()), "refilled at 10 a second");
        assert!(limiter.check("a").is_err());
        tokio::time::advance(Duration::from_secs(10)).await;
        for _ in 0..5 {
            assert_eq!(limiter.check("a"), Ok(()), "refilled up to the burst");
        }
        assert!(limiter.check("a").is_err(), "and no further");
    }

    #[test]
    fn no_limit_lets_everything_through() {
        let limiter = RateLimiter::new(None);
        for _ in 0..10_000 {
            assert_eq!(limiter.check("a"), Ok(()));
        }
    }
}
