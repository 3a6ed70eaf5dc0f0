//! The one source of time for the relay.
//!
//! Logic never reads the system clock directly: the service takes an `Arc<dyn Clock>`, so tests
//! can move time by hand and the simulator can run the real code on tokio's paused time.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time: milliseconds since the Unix epoch, UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// A timestamp from milliseconds since the Unix epoch.
    pub const fn from_unix_millis(millis: i64) -> Self {
        Timestamp(millis)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn unix_millis(self) -> i64 {
        self.0
    }

    /// This time plus `duration`, saturating at the end of representable time.
    pub fn saturating_add(self, duration: Duration) -> Self {
        Timestamp(self.0.saturating_add(duration_millis(duration)))
    }

    /// This time minus `duration`, saturating at the start of representable time.
    pub fn saturating_sub(self, duration: Duration) -> Self {
        Timestamp(self.0.saturating_sub(duration_millis(duration)))
    }

    /// How long after `earlier` this is; zero if it is not after it.
    pub fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }

    /// RFC 3339 text in UTC with millisecond precision, e.g. `2026-11-08T09:30:00.000Z`.
    pub fn to_rfc3339(self) -> String {
        let days = self.0.div_euclid(MILLIS_PER_DAY);
        let millis_of_day = self.0.rem_euclid(MILLIS_PER_DAY);
        let (year, month, day) = civil_from_days(days);
        let seconds_of_day = millis_of_day / 1000;
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            seconds_of_day / 3600,
            seconds_of_day / 60 % 60,
            seconds_of_day % 60,
            millis_of_day % 1000
        )
    }

    /// Parses the text [`Timestamp::to_rfc3339`] writes (UTC, `Z`, optional fraction up to ms).
    pub fn parse_rfc3339(text: &str) -> Option<Self> {
        let bytes = text.as_bytes();
        if bytes.len() < 20 || !text.is_ascii() || !text.ends_with('Z') {
            return None;
        }
        let number = |range: std::ops::Range<usize>| -> Option<i64> {
            let part = text.get(range)?;
            if !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            part.parse().ok()
        };
        let separators = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')];
        if separators.iter().any(|&(at, sep)| bytes[at] != sep) {
            return None;
        }
        let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
        let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
        if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
            return None;
        }
        if second > 59 {
            return None;
        }
        let rest = &text[19..text.len() - 1];
        let millis = match rest.strip_prefix('.') {
            None if rest.is_empty() => 0,
            Some(fraction) if (1..=3).contains(&fraction.len()) => {
                let value = number(20..20 + fraction.len())?;
                value * 10_i64.pow(3 - fraction.len() as u32)
            }
            _ => return None,
        };
        let days = days_from_civil(year, month, day);
        Some(Timestamp(
            days * MILLIS_PER_DAY + ((hour * 60 + minute) * 60 + second) * 1000 + millis,
        ))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_rfc3339())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Timestamp::parse_rfc3339(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "`{text}` is not an RFC 3339 UTC time like 2026-11-08T09:30:00.000Z"
            ))
        })
    }
}

const MILLIS_PER_DAY: i64 = 86_400_000;

fn duration_millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

// Howard Hinnant's algorithms: proleptic Gregorian calendar <-> days since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Where the relay reads the current time.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The operating system's wall clock, for production.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        // The one read of the wall clock in the relay (clippy.toml forbids it elsewhere).
        #[allow(clippy::disallowed_methods)]
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Timestamp(duration_millis(since_epoch))
    }
}

/// How long something took here, on the operating system's monotonic clock: benchmark timings
/// and patience loops (waiting out another process's lock). Never the relay's time, which comes
/// from a [`Clock`]; not driven by tokio's paused time either.
#[derive(Clone, Copy, Debug)]
pub struct Stopwatch(std::time::Instant);

impl Stopwatch {
    /// A stopwatch started now.
    // The one read of the monotonic clock in the relay (clippy.toml forbids it elsewhere).
    #[allow(clippy::disallowed_methods)]
    pub fn start() -> Self {
        Stopwatch(std::time::Instant::now())
    }

    /// The time since the start.
    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

/// A clock that follows `tokio::time::Instant`, so tokio's paused time (`start_paused`,
/// `tokio::time::advance`) drives it: the simulator's virtual clock.
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    origin: Timestamp,
    origin_instant: tokio::time::Instant,
}

impl TokioClock {
    /// A clock that reads `origin` now and advances with tokio's time from here on.
    pub fn starting_at(origin: Timestamp) -> Self {
        TokioClock {
            origin,
            origin_instant: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        self.origin.saturating_add(self.origin_instant.elapsed())
    }
}

/// A clock that moves only when told to, for tests.
#[derive(Debug)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            now: AtomicI64::new(start.0),
        }
    }

    /// Moves the clock forward by `duration`.
    pub fn advance(&self, duration: Duration) {
        self.now
            .fetch_add(duration_millis(duration), Ordering::SeqCst);
    }

    /// Sets the clock to `to`.
    pub fn set(&self, to: Timestamp) {
        self.now.store(to.0, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.now.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_rfc3339() {
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400_123, "2000-02-29T00:00:00.123Z"),
            (1_794_130_200_000, "2026-11-08T09:30:00.000Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
        ];
        for (millis, text) in cases {
            assert_eq!(Timestamp(millis).to_rfc3339(), text);
            assert_eq!(Timestamp::parse_rfc3339(text), Some(Timestamp(millis)));
        }
        assert_eq!(
            Timestamp::parse_rfc3339("2026-11-08T09:30:00Z"),
            Some(Timestamp(1_794_130_200_000))
        );
        for bad in [
            "",
            "2026-11-08 09:30:00Z",
            "2026-13-08T09:30:00Z",
            "2026-11-08T09:30:00",
        ] {
            assert_eq!(Timestamp::parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(Timestamp(1_000));
        assert_eq!(clock.now(), Timestamp(1_000));
        clock.advance(Duration::from_secs(2));
        assert_eq!(clock.now(), Timestamp(3_000));
        clock.set(Timestamp(5));
        assert_eq!(clock.now(), Timestamp(5));
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_time() {
        let clock = TokioClock::starting_at(Timestamp(10_000));
        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(clock.now(), Timestamp(30_000));
    }
}
