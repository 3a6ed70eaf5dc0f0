//! The run clock and the run random source: the only time and randomness a graph can learn,
//! owned by the host and handed to both engines (boa through `graph_js::Host::clock_now` and
//! `random_bytes`, the wasm guest through the same functions in `wit/graph.wit`, and the WASI
//! clocks and random interfaces the guest's standard library links are answered from here
//! too). The sandbox's timers (`start-sleep`, `setTimeout`), mock agents' `latency_ms` and the
//! trace's timestamps run on the same clock.
//!
//! A real clock reads the machine (through [`crate::clock`], the runner's one place that may)
//! rounded down to whole milliseconds. A virtual clock (`--clock fixed:2026-01-01T00:00:00Z`)
//! starts at the given time and moves only when every activity of the run waits on it: each
//! graph's code, each host operation it started, is an activity, *busy* until it waits for a
//! timer, another operation or an agent slot. When none is busy the clock jumps to the earliest
//! timer and wakes it, handing it the busy token, so the order of events is decided by virtual
//! time alone and a graph waiting 60 s finishes at once. Every wake-up hands a busy token along
//! (a timer's firing, an operation's outcome reaching its graph, a freed agent slot), so the
//! count never passes through zero while something is about to run. Timers due at the same
//! time fire in the order of their activities' *paths* (the handles from the top graph down to
//! the operation), never in the order the machine happened to start them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use graph_js::ClockReading;
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::sync::oneshot;

use crate::clock::{Stopwatch, wall_now};

/// What the run clock is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClockSetting {
    /// The machine's clocks, rounded down to 1 ms.
    #[default]
    Real,
    /// A virtual clock starting at this many milliseconds after the Unix epoch.
    Fixed(i64),
}

/// Why a text is not a [`ClockSetting`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClockSettingError {
    /// Neither `real` nor `fixed:…`.
    #[error(
        "the clock must be `real` or `fixed:` and a UTC time such as fixed:2026-01-01T00:00:00Z, got {0:?}"
    )]
    Unknown(String),
    /// `fixed:` and a time that is not a UTC time in the one accepted form.
    #[error("{0:?} is not a UTC time like 2026-01-01T00:00:00Z (YYYY-MM-DDTHH:MM:SS[.sss]Z)")]
    NotUtc(String),
}

impl ClockSetting {
    /// `real`, or `fixed:` and a UTC time (`fixed:2026-01-01T00:00:00Z`, fractions of a second
    /// allowed).
    pub fn parse(text: &str) -> Result<Self, ClockSettingError> {
        if text == "real" {
            return Ok(Self::Real);
        }
        let Some(time) = text.strip_prefix("fixed:") else {
            return Err(ClockSettingError::Unknown(text.to_owned()));
        };
        parse_utc_ms(time)
            .map(Self::Fixed)
            .ok_or_else(|| ClockSettingError::NotUtc(time.to_owned()))
    }
}

impl std::fmt::Display for ClockSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Real => f.write_str("real"),
            Self::Fixed(ms) => write!(f, "fixed:{}", format_utc_ms(*ms)),
        }
    }
}

impl std::str::FromStr for ClockSetting {
    type Err = ClockSettingError;
    fn from_str(text: &str) -> Result<Self, ClockSettingError> {
        Self::parse(text)
    }
}

/// Milliseconds since the epoch of `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, years 1970 to 9999.
fn parse_utc_ms(text: &str) -> Option<i64> {
    let text = text.strip_suffix('Z').or_else(|| text.strip_suffix('z'))?;
    let (date, time) = text.split_once(['T', 't'])?;
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let number = |s: &str, len: usize| -> Option<i64> {
        (s.len() == len && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
    };
    let mut d = date.split('-');
    let (year, month, day) = (
        number(d.next()?, 4)?,
        number(d.next()?, 2)?,
        number(d.next()?, 2)?,
    );
    let mut t = clock.split(':');
    let (hour, minute, second) = (
        number(t.next()?, 2)?,
        number(t.next()?, 2)?,
        number(t.next()?, 2)?,
    );
    if d.next().is_some() || t.next().is_some() || fraction.len() > 9 {
        return None;
    }
    if !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let millis = format!("{fraction:0<3}")[..3].parse::<i64>().ok()?;
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let valid = year >= 1970
        && (1..=12).contains(&month)
        && day >= 1
        && day <= month_days[usize::try_from(month - 1).ok()?]
        && hour < 24
        && minute < 60
        && second < 60;
    valid.then(|| {
        let days = days_from_civil(year, month, day);
        ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis
    })
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `ms` since the epoch as `YYYY-MM-DDTHH:MM:SS[.sss]Z`.
fn format_utc_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    // The inverse of days_from_civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    let fraction = if milli == 0 {
        String::new()
    } else {
        format!(".{milli:03}")
    };
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}{fraction}Z")
}

/// A fresh seed for a run's random source, from the operating system's.
pub fn fresh_seed() -> u64 {
    // A machine without a random source cannot run a graph safely either; fall back to a seed
    // that still differs per run rather than refuse.
    getrandom::u64().unwrap_or_else(|_| {
        u64::try_from(
            wall_now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
                % u128::from(u64::MAX),
        )
        .unwrap_or(0)
    })
}

/// A CSPRNG (ChaCha12) for one random stream: `key` is the run's seed, or a key derived from it
/// for a nested graph or a WASI interface (see [`derive_key`]).
pub fn stream(key: u64) -> StdRng {
    StdRng::seed_from_u64(key)
}

/// The key of a stream derived from `parent` for `what` (a nested graph's handle, a tag): each
/// graph draws from its own stream, so graphs running side by side cannot change each other's
/// numbers, whatever order the machine runs them in.
pub fn derive_key(parent: u64, what: u64) -> u64 {
    graph_js::splitmix64(parent ^ graph_js::splitmix64(what))
}

/// The run clock (see the module documentation).
pub struct RunClock {
    source: Source,
    state: Mutex<Virtual>,
    /// Where a real clock's run time starts (a resumed run's continues from its journal).
    from_ms: u64,
}

enum Source {
    Real(Stopwatch),
    Virtual { start_ms: i64 },
}

#[derive(Default)]
struct Virtual {
    elapsed_ms: u64,
    /// Activities of the run not waiting on the clock.
    busy: usize,
    /// Pending timers by (deadline, the sleeper's path, start order): each wakes with a busy
    /// token.
    timers: BTreeMap<(u64, Path, u64), oneshot::Sender<Busy>>,
    next_timer: u64,
    /// The top graph returned: the clock stays where it is and no timer fires again.
    ended: bool,
}

impl RunClock {
    /// A run clock started now.
    pub fn new(setting: ClockSetting) -> Arc<Self> {
        let source = match setting {
            ClockSetting::Real => Source::Real(Stopwatch::start()),
            ClockSetting::Fixed(start_ms) => Source::Virtual { start_ms },
        };
        Arc::new(Self {
            source,
            state: Mutex::new(Virtual::default()),
            from_ms: 0,
        })
    }

    /// A run clock that continues from `from_ms` after the run started (a resumed run, from
    /// its journal's last reading), not from 0.
    pub fn continuing(setting: ClockSetting, from_ms: u64) -> Arc<Self> {
        let source = match setting {
            ClockSetting::Real => Source::Real(Stopwatch::start()),
            ClockSetting::Fixed(start_ms) => Source::Virtual { start_ms },
        };
        Arc::new(Self {
            source,
            state: Mutex::new(Virtual {
                elapsed_ms: from_ms,
                ..Virtual::default()
            }),
            from_ms,
        })
    }

    /// What it is.
    pub fn setting(&self) -> ClockSetting {
        match self.source {
            Source::Real(_) => ClockSetting::Real,
            Source::Virtual { start_ms } => ClockSetting::Fixed(start_ms),
        }
    }

    fn state(&self) -> MutexGuard<'_, Virtual> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The time now, in whole milliseconds.
    pub fn now(&self) -> ClockReading {
        match &self.source {
            Source::Real(started) => {
                let wall = wall_now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis();
                ClockReading {
                    wall_ms: i64::try_from(wall).unwrap_or(i64::MAX),
                    monotonic_ms: u64::try_from(started.elapsed().as_millis())
                        .unwrap_or(u64::MAX)
                        .saturating_add(self.from_ms),
                }
            }
            Source::Virtual { start_ms } => {
                let elapsed = self.state().elapsed_ms;
                ClockReading {
                    wall_ms: start_ms.saturating_add_unsigned(elapsed),
                    monotonic_ms: elapsed,
                }
            }
        }
    }

    /// A busy token: while it lives, a virtual clock stands still.
    pub fn busy(self: &Arc<Self>) -> Busy {
        if matches!(self.source, Source::Real(_)) {
            return Busy(None);
        }
        self.state().busy += 1;
        Busy(Some(self.clone()))
    }

    /// The run is over (its top graph returned, or it stopped): the clock stays where it is and
    /// the timers still pending never fire. Firing them as the run's work is torn down moved
    /// the end of the run to the last timer's deadline and let an abandoned agent finish (or
    /// not, as the machine's threads happened to go), so the same run ended differently.
    pub fn end(&self) {
        let mut state = self.state();
        state.ended = true;
        // Their sleepers are being aborted: they wait for good (see `sleep`).
        state.timers.clear();
    }

    /// Whether the run is over ([`RunClock::end`]).
    pub fn ended(&self) -> bool {
        self.state().ended
    }

    /// Drops the timers of every activity below `path` (a nested graph that returned: the work
    /// it left running is aborted), so that none of them moves the clock.
    pub fn drop_timers_under(&self, path: &Path) {
        self.state().timers.retain(|(_, sleeper, _), _| {
            !(sleeper.len() > path.len() && sleeper.starts_with(path))
        });
    }

    /// One busy token less; at none, the earliest timer fires and takes one.
    fn release(self: &Arc<Self>) {
        loop {
            let mut state = self.state();
            state.busy -= 1;
            if state.busy > 0 || state.ended {
                return;
            }
            let Some(((deadline, _, _), wake)) = state.timers.pop_first() else {
                return;
            };
            state.elapsed_ms = state.elapsed_ms.max(deadline);
            state.busy += 1;
            drop(state);
            match wake.send(Busy(Some(self.clone()))) {
                Ok(()) => return,
                // The sleeper is gone (its run stopped): take its token back and go on.
                Err(mut token) => token.0 = None,
            }
        }
    }

    /// Waits `duration` on this clock as the activity at `path`, giving up `busy` meanwhile;
    /// the token it returns is the caller's again.
    pub async fn sleep(self: &Arc<Self>, duration: Duration, path: &Path, busy: Busy) -> Busy {
        if matches!(self.source, Source::Real(_)) {
            if !duration.is_zero() {
                tokio::time::sleep(duration).await;
            }
            return busy;
        }
        let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        let woken = {
            let mut state = self.state();
            // The run is over: the sleeper's work is being aborted (see `end`).
            if state.ended {
                None
            } else {
                let (tx, rx) = oneshot::channel();
                let key = (
                    state.elapsed_ms.saturating_add(ms),
                    path.clone(),
                    state.next_timer,
                );
                state.next_timer += 1;
                state.timers.insert(key, tx);
                Some(rx)
            }
        };
        drop(busy);
        let Some(woken) = woken else {
            return std::future::pending().await;
        };
        match woken.await {
            Ok(busy) => busy,
            // Dropped unsent by `end` or `drop_timers_under`: the sleeper's work is being
            // aborted, and must not go on (an agent would meter tokens after its run ended).
            Err(_) => std::future::pending().await,
        }
    }
}

/// Where an activity is in its run: the handles from the top graph down to it (empty for the
/// top graph's own code). Decides the order of what a virtual clock wakes at the same time.
pub type Path = Arc<[u32]>;

/// The path of the operation `handle` started by the activity at `parent`.
pub fn child_path(parent: &Path, handle: u32) -> Path {
    parent.iter().copied().chain([handle]).collect()
}

/// One busy activity of a run on a virtual clock (nothing on a real one); see [`RunClock`].
#[must_use]
pub struct Busy(Option<Arc<RunClock>>);

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(clock) = self.0.take() {
            clock.release();
        }
    }
}

/// A thread of work in a run (a graph's code, one operation it started, and for a nested graph
/// both: the operation *is* that graph) and its busy token, which it gives up while it waits.
#[derive(Clone)]
pub struct Activity(Arc<ActivityInner>);

struct ActivityInner {
    clock: Arc<RunClock>,
    path: Path,
    busy: Mutex<Option<Busy>>,
}

impl Activity {
    /// A new activity at `path`, busy from now on.
    pub fn new(clock: &Arc<RunClock>, path: Path) -> Self {
        Self(Arc::new(ActivityInner {
            clock: clock.clone(),
            path,
            busy: Mutex::new(Some(clock.busy())),
        }))
    }

    /// Where it is in its run.
    pub fn path(&self) -> &Path {
        &self.0.path
    }

    fn slot(&self) -> MutexGuard<'_, Option<Busy>> {
        self.0
            .busy
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Gives up the busy token (before waiting): dropping what this returns may let the clock
    /// move.
    pub fn take(&self) -> Busy {
        self.slot().take().unwrap_or(Busy(None))
    }

    /// Busy again, with a token handed over by whatever woke it (or one of its own, if the
    /// waker had none to hand: an operation that ended as its run stopped).
    pub fn resume(&self, busy: Busy) {
        let busy = if busy.0.is_none() {
            self.0.clock.busy()
        } else {
            busy
        };
        let previous = self.slot().replace(busy);
        drop(previous);
    }

    /// Busy again, with a token of its own (after a wake-up that hands none, a cancel).
    pub fn resume_fresh(&self) {
        self.resume(self.0.clock.busy());
    }

    /// Waits `duration` on the run clock.
    pub async fn sleep(&self, duration: Duration) {
        let busy = self.take();
        let busy = self.0.clock.sleep(duration, &self.0.path, busy).await;
        self.resume(busy);
    }
}

tokio::task_local! {
    /// The activity a host operation's task runs as.
    static ACTIVITY: Activity;
}

/// Runs `work` as `activity`, so that [`sleep`] inside it waits on the run clock.
pub async fn scoped<F: std::future::Future>(activity: Activity, work: F) -> F::Output {
    ACTIVITY.scope(activity, work).await
}

/// The activity the calling host operation runs as (a fresh, idle-less one outside any).
pub fn current() -> Activity {
    ACTIVITY
        .try_with(Activity::clone)
        .unwrap_or_else(|_| Activity::new(&RunClock::new(ClockSetting::Real), Path::from([])))
}

/// Waits `duration` on the clock of the run whose operation calls it (a mock agent's latency),
/// or on tokio's timer outside any run.
pub async fn sleep(duration: Duration) {
    match ACTIVITY.try_with(Activity::clone) {
        Ok(activity) => activity.sleep(duration).await,
        Err(_) => tokio::time::sleep(duration).await,
    }
}

/// A run's agent slots (`max_concurrency`): an agent reserves its place when the graph starts
/// it (so the order is the graph's, not the machine's), and a freed slot goes straight to the
/// waiter with the smallest path, together with a busy token, so a virtual clock cannot move
/// between one agent's end and the next one's start.
pub struct Slots {
    clock: Arc<RunClock>,
    state: Mutex<SlotState>,
}

struct SlotState {
    free: usize,
    waiters: BTreeMap<(Path, u64), oneshot::Sender<(SlotPermit, Busy)>>,
    next_waiter: u64,
}

/// One agent slot, given back when dropped.
pub struct SlotPermit(Option<Arc<Slots>>);

/// A place reserved among the slots: a slot already, or a turn in the queue.
pub enum SlotTicket {
    /// A slot was free.
    Granted(SlotPermit),
    /// Waiting for one.
    Queued(oneshot::Receiver<(SlotPermit, Busy)>),
}

impl Slots {
    /// `count` slots (at least one).
    pub fn new(clock: &Arc<RunClock>, count: usize) -> Arc<Self> {
        Arc::new(Self {
            clock: clock.clone(),
            state: Mutex::new(SlotState {
                free: count.max(1),
                waiters: BTreeMap::new(),
                next_waiter: 0,
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, SlotState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Reserves a place for the agent at `path`: a free slot, or a turn.
    pub fn reserve(self: &Arc<Self>, path: &Path) -> SlotTicket {
        let mut state = self.state();
        if state.free > 0 {
            state.free -= 1;
            return SlotTicket::Granted(SlotPermit(Some(self.clone())));
        }
        let (tx, rx) = oneshot::channel();
        let key = (path.clone(), state.next_waiter);
        state.next_waiter += 1;
        state.waiters.insert(key, tx);
        SlotTicket::Queued(rx)
    }

    /// A slot came free: to the first waiter still waiting, else back to the pool.
    fn hand_on(self: &Arc<Self>) {
        loop {
            let waiter = {
                let mut state = self.state();
                let Some((_, waiter)) = state.waiters.pop_first() else {
                    state.free += 1;
                    return;
                };
                waiter
            };
            let handed = (SlotPermit(Some(self.clone())), self.clock.busy());
            match waiter.send(handed) {
                Ok(()) => return,
                Err((mut permit, busy)) => {
                    permit.0 = None;
                    drop(busy);
                }
            }
        }
    }
}

impl SlotTicket {
    /// The slot, `activity` waiting idle until it is handed one.
    pub async fn wait(self, activity: &Activity) -> SlotPermit {
        let queued = match self {
            SlotTicket::Granted(permit) => return permit,
            SlotTicket::Queued(queued) => queued,
        };
        drop(activity.take());
        match queued.await {
            Ok((permit, busy)) => {
                activity.resume(busy);
                permit
            }
            // Unreachable while the slots live; a slot-less permit is harmless.
            Err(_) => {
                activity.resume_fresh();
                SlotPermit(None)
            }
        }
    }
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        if let Some(slots) = self.0.take() {
            slots.hand_on();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_settings_parse_and_print() {
        let fixed = ClockSetting::parse("fixed:2026-01-01T00:00:00Z").expect("parses");
        assert_eq!(fixed, ClockSetting::Fixed(1_767_225_600_000));
        assert_eq!(fixed.to_string(), "fixed:2026-01-01T00:00:00Z");
        let odd = ClockSetting::parse("fixed:2024-02-29T23:59:59.5Z").expect("parses");
        assert_eq!(odd.to_string(), "fixed:2024-02-29T23:59:59.500Z");
        assert_eq!(ClockSetting::parse("real"), Ok(ClockSetting::Real));
        for bad in [
            "fixed:2025-02-29T00:00:00Z",
            "fixed:2026-01-01T00:00:00",
            "fixed:2026-1-01T00:00:00Z",
            "fixed:1969-12-31T23:59:59Z",
            "now",
        ] {
            assert!(ClockSetting::parse(bad).is_err(), "{bad} was accepted");
        }
    }

    #[tokio::test]
    async fn a_virtual_clock_fires_timers_in_deadline_order_once_nothing_is_busy() {
        let clock = RunClock::new(ClockSetting::Fixed(0));
        let a = Activity::new(&clock, Path::from([1]));
        let b = Activity::new(&clock, Path::from([2]));
        let (la, lb) = (a.clone(), b.clone());
        let first = tokio::spawn(async move {
            la.sleep(Duration::from_secs(60)).await;
            la.0.clock.now().monotonic_ms
        });
        let second = tokio::spawn(async move {
            lb.sleep(Duration::from_millis(10)).await;
            lb.0.clock.now().monotonic_ms
        });
        // A third activity, still busy, holds the clock.
        let holder = Activity::new(&clock, Path::from([]));
        tokio::task::yield_now().await;
        assert_eq!(clock.now().monotonic_ms, 0);
        drop(holder.take());
        assert_eq!(second.await.expect("joins"), 10);
        drop(b.take());
        assert_eq!(first.await.expect("joins"), 60_000);
        assert_eq!(clock.now().wall_ms, 60_000);
    }

    #[test]
    fn streams_are_fixed_by_their_key() {
        use rand::Rng as _;
        let draw = |key| stream(key).next_u64();
        assert_eq!(draw(1), draw(1));
        assert_ne!(draw(1), draw(2));
        assert_ne!(derive_key(1, 1), derive_key(1, 2));
    }
}
