//! Runs `runner run` in a child process with a deadline the test enforces by killing it, and
//! says how the child ended. The in-process boa engine cannot contain every script (a memory
//! bomb aborts the whole process), so that engine is only ever observed from outside.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

/// The boa child runs under this address-space limit (`ulimit -v`), so a memory bomb fails in
/// a second instead of eating the machine the tests share; without it the same bomb grows until
/// the first failed allocation of the host (4 GiB here) and aborts just the same.
pub const BOA_CHILD_ADDRESS_SPACE_KIB: u64 = 1536 * 1024;

/// How a child `runner run` ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ChildEnd {
    /// It printed its outcome: `status` and `error` as in the JSON on stdout.
    Outcome {
        /// `completed`, `failed` or `cancelled`.
        status: String,
        /// The error, when not completed.
        error: Option<String>,
        /// The result, when completed.
        result: serde_json::Value,
    },
    /// It died without an outcome (a signal or an abort), with the tail of its stderr.
    Aborted {
        /// What ended it: `signal N` or `exit N`.
        how: String,
        /// The last bytes of its stderr (the allocator's or the runtime's last words).
        stderr_tail: String,
    },
    /// It was still running at the test's deadline and was killed.
    Killed,
}

impl ChildEnd {
    /// The outcome's error, or what ended the child.
    pub fn describe(&self) -> String {
        match self {
            ChildEnd::Outcome { status, error, .. } => {
                format!("{status}: {}", error.as_deref().unwrap_or(""))
            }
            ChildEnd::Aborted { how, stderr_tail } => format!("aborted ({how}): {stderr_tail}"),
            ChildEnd::Killed => "killed at the test's deadline".to_owned(),
        }
    }
}

/// What a finished child printed, and how long it took.
#[derive(Debug)]
pub struct ChildRun {
    /// How it ended.
    pub end: ChildEnd,
    /// Everything it wrote to stderr (the trace), bounded.
    pub stderr: String,
    /// From spawn to exit (or to the kill).
    pub elapsed: Duration,
}

/// The most of a child's stderr kept: enough for a trace of a flood of log lines.
const MAX_KEPT_STDERR_BYTES: u64 = 4 * 1024 * 1024;

fn drain(mut from: impl Read + Send + 'static, limit: u64) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let _ = (&mut from).take(limit).read_to_end(&mut kept);
        // Keep reading past the limit so the child never blocks on a full pipe.
        let _ = std::io::copy(&mut from, &mut std::io::sink());
        kept
    })
}

/// How a child ended: killed, with the outcome it printed last, or aborted (its exit and the
/// tail of its stderr).
fn child_end(
    killed: bool,
    stdout: &[u8],
    stderr: &str,
    status: &std::process::ExitStatus,
) -> ChildEnd {
    if killed {
        ChildEnd::Killed
    } else if let Some(outcome) = String::from_utf8_lossy(stdout)
        .lines()
        .last()
        .and_then(|line| serde_json::from_str::<serde_json::Value>(line).ok())
    {
        ChildEnd::Outcome {
            status: outcome["status"].as_str().unwrap_or("?").to_owned(),
            error: outcome["error"].as_str().map(str::to_owned),
            result: outcome["result"].clone(),
        }
    } else {
        let how = match (status.code(), signal_of(status)) {
            (_, Some(signal)) => format!("signal {signal}"),
            (Some(code), None) => format!("exit {code}"),
            (None, None) => "unknown".to_owned(),
        };
        let tail_start = stderr.char_indices().rev().nth(300).map_or(0, |(i, _)| i);
        ChildEnd::Aborted {
            how,
            stderr_tail: stderr[tail_start..].trim().to_owned(),
        }
    }
}

/// Runs `runner run SCRIPT_FILE ARGS...` and waits at most `kill_after`.
/// `address_space_kib` wraps the child in `ulimit -v`.
pub fn run_child(
    script_file: &Path,
    args: &[String],
    address_space_kib: Option<u64>,
    kill_after: Duration,
) -> ChildRun {
    let runner = env!("CARGO_BIN_EXE_runner");
    let mut command = match address_space_kib {
        Some(kib) => {
            let mut sh = Command::new("sh");
            sh.arg("-c")
                .arg(format!("ulimit -v {kib} && exec \"$0\" \"$@\""))
                .arg(runner);
            sh
        }
        None => Command::new(runner),
    };
    command
        .arg("run")
        .arg(script_file)
        .args(args)
        // No terminal: `ask` is a denial, and the trace is plain.
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("RUNNER_LOG", "warn")
        // The last words of an abort, not a backtrace.
        .env("RUST_BACKTRACE", "0");
    let started = runner::clock::Stopwatch::start();
    let mut child: Child = command.spawn().expect("the runner binary starts");
    let stdout = drain(child.stdout.take().expect("stdout"), 256 * 1024 * 1024);
    let stderr = drain(child.stderr.take().expect("stderr"), MAX_KEPT_STDERR_BYTES);
    let mut killed = false;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waits") {
            break status;
        }
        if started.elapsed() >= kill_after {
            let _ = child.kill();
            killed = true;
            break child.wait().expect("waits after kill");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = started.elapsed();
    let stdout = stdout.join().expect("stdout reader");
    let stderr = String::from_utf8_lossy(&stderr.join().expect("stderr reader")).into_owned();
    let end = child_end(killed, &stdout, &stderr, &status);
    ChildRun {
        end,
        stderr,
        elapsed,
    }
}

#[cfg(unix)]
fn signal_of(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(not(unix))]
fn signal_of(_: &std::process::ExitStatus) -> Option<i32> {
    None
}
