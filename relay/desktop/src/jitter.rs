//! Reconnect jitter: a wait spread evenly over its second half, so desktops that lost the
//! service together (a restart, a network blip) come back spread out instead of in one burst.

use std::time::Duration;

/// A small random source for jitter: splitmix64 from a seed (the system's randomness unless a
/// seed is given, as the simulator does so its runs repeat).
#[derive(Debug, Clone)]
pub struct Jitter {
    state: u64,
}

impl Jitter {
    /// A source seeded with `seed`, or from the system's randomness.
    pub fn new(seed: Option<u64>) -> Self {
        let state = seed.unwrap_or_else(|| {
            let mut bytes = [0u8; 8];
            // Without system randomness the jitter is merely predictable, never wrong.
            getrandom::fill(&mut bytes)
                .map_or(0x9e37_79b9_7f4a_7c15, |()| u64::from_le_bytes(bytes))
        });
        Jitter { state }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `wait` spread over `[wait / 2, wait]`, in whole milliseconds.
    pub fn spread(&mut self, wait: Duration) -> Duration {
        let half = u64::try_from(wait.as_millis() / 2).unwrap_or(u64::MAX / 2);
        let extra = if half == 0 {
            0
        } else {
            self.next() % (half + 1)
        };
        Duration::from_millis(half + extra)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_wait_stays_within_its_second_half_and_varies() {
        let mut jitter = Jitter::new(None);
        let wait = Duration::from_secs(8);
        let spread: Vec<Duration> = (0..200).map(|_| jitter.spread(wait)).collect();
        assert!(
            spread.iter().all(|d| *d >= wait / 2 && *d <= wait),
            "{spread:?}"
        );
        let distinct: std::collections::BTreeSet<_> = spread.iter().collect();
        assert!(distinct.len() > 100, "{} distinct waits", distinct.len());
        assert_eq!(jitter.spread(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn a_seeded_source_repeats() {
        let wait = Duration::from_secs(20);
        let a: Vec<_> = {
            let mut j = Jitter::new(Some(7));
            (0..10).map(|_| j.spread(wait)).collect()
        };
        let b: Vec<_> = {
            let mut j = Jitter::new(Some(7));
            (0..10).map(|_| j.spread(wait)).collect()
        };
        assert_eq!(a, b);
    }
}
