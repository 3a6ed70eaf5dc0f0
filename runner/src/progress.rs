//! Progress lines for work a person waits for, such as preparing the sandbox the first time on a
//! machine (about 10 s): plain lines on stderr, so they read the same in a terminal and in a log.

use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::Duration;

/// How often a line says how long the work has taken so far, by default.
pub const EVERY: Duration = Duration::from_secs(5);

/// What [`with_progress`] says, and when.
#[derive(Debug, Clone)]
pub struct Notice {
    /// Put before every line (`demo: `), or empty.
    pub prefix: &'static str,
    /// What is being done (`preparing the sandbox`).
    pub what: String,
    /// How long it usually takes (`about 10 s the first time on this machine, cached
    /// afterwards`).
    pub usually: String,
    /// Nothing is said if the work ends before this; zero says the first line at once.
    pub quiet_for: Duration,
    /// How often a line says how long it has taken so far ([`EVERY`]).
    pub every: Duration,
}

impl Notice {
    /// A notice of `what` (which `usually` takes so long), said after `quiet_for`, then every
    /// [`EVERY`].
    pub fn new(prefix: &'static str, what: &str, usually: &str, quiet_for: Duration) -> Self {
        Self {
            prefix,
            what: what.to_owned(),
            usually: usually.to_owned(),
            quiet_for,
            every: EVERY,
        }
    }
}

/// Runs `work`, saying its progress on stderr (see [`with_progress_to`]).
pub fn with_progress<T>(notice: &Notice, work: impl FnOnce() -> T) -> T {
    with_progress_to(notice, |line| eprintln!("{line}"), work)
}

/// Runs `work`. Once it has taken [`Notice::quiet_for`], says `what (usually)` through `say`;
/// then every [`Notice::every`] `what: N s so far`, and at the end `what: done in N s`. Quick
/// work says nothing (unless `quiet_for` is zero).
pub fn with_progress_to<T>(
    notice: &Notice,
    say: impl Fn(String) + Send + 'static,
    work: impl FnOnce() -> T,
) -> T {
    let (done, finished) = channel::<()>();
    let notice = notice.clone();
    let say = move |line: String| say(format!("{}{line}", notice.prefix));
    let first = format!("{} ({})", notice.what, notice.usually);
    let at_once = notice.quiet_for.is_zero();
    if at_once {
        say(first.clone());
    }
    let stopwatch = crate::clock::Stopwatch::start();
    let reporter = std::thread::spawn(move || {
        if !at_once {
            if finished.recv_timeout(notice.quiet_for) != Err(RecvTimeoutError::Timeout) {
                return;
            }
            say(first);
        }
        while finished.recv_timeout(notice.every) == Err(RecvTimeoutError::Timeout) {
            let so_far = stopwatch.elapsed().as_secs();
            say(format!("{}: {so_far} s so far", notice.what));
        }
        let took = stopwatch.elapsed().as_secs_f64();
        say(format!("{}: done in {took:.1} s", notice.what));
    });
    let result = work();
    drop(done);
    let _ = reporter.join();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn slow_work_says_what_it_does_how_long_so_far_and_when_it_is_done() {
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let (seen, wait) = channel::<()>();
        let notice = Notice {
            every: Duration::from_millis(10),
            ..Notice::new("demo: ", "preparing", "about 10 s", Duration::ZERO)
        };
        let kept = lines.clone();
        let say = move |line: String| {
            let so_far = line.contains("so far");
            kept.lock().expect("lines").push(line);
            if so_far {
                let _ = seen.send(());
            }
        };
        // The work ends only once a progress line was said: no timing is assumed.
        let value = with_progress_to(&notice, say, || {
            wait.recv_timeout(Duration::from_secs(60)).expect("a line");
            7
        });
        assert_eq!(value, 7);
        let lines = lines.lock().expect("lines").clone();
        assert_eq!(lines[0], "demo: preparing (about 10 s)");
        assert!(lines[1].starts_with("demo: preparing: ") && lines[1].ends_with(" s so far"));
        let last = lines.last().expect("lines");
        assert!(last.starts_with("demo: preparing: done in "), "{lines:?}");
    }

    #[test]
    fn quick_work_says_nothing() {
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let kept = lines.clone();
        let notice = Notice::new("", "compiling", "seconds", Duration::from_secs(600));
        with_progress_to(&notice, move |l| kept.lock().expect("lines").push(l), || ());
        assert!(lines.lock().expect("lines").is_empty());
    }
}
