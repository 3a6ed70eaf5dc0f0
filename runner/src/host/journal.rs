//! The run journal: every answer the host gives a graph, in the order it gives them, so that a
//! run can be replayed without starting anything live (see docs/journal.md).
//!
//! Recording: each answer is appended through a [`JournalSink`] *before* it reaches the graph
//! (write-ahead). The file sink ([`FileJournal`]) writes JSON lines; the desktop can back the
//! same trait with its state database. Replaying: a [`Replayer`] holds a read journal and
//! answers the top graph's calls from it, re-emitting the trace of the host's work as the graph
//! reaches it; a call that differs from the journal stops the replay, naming the call.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use graph_js::{Failure, FailureCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::events::{Event, EventKind, EventSink};

/// The journal format this runner writes and reads.
pub const JOURNAL_VERSION: u32 = 1;
/// Most bytes one run's journal may hold; a run that needs more fails (docs/limits.md).
pub const MAX_JOURNAL_BYTES: u64 = 64 * 1024 * 1024;
/// Most entries (lines) one run's journal may hold; a run that needs more fails.
pub const MAX_JOURNAL_ENTRIES: u64 = 1_000_000;

/// A run's journal: recorded as it runs, or replayed instead of running anything live.
#[derive(Clone)]
pub enum JournalMode {
    /// Every answer is appended before the graph gets it.
    Record(Arc<Recorder>),
    /// Every answer of the top graph comes from the journal.
    Replay(Arc<Replayer>),
    /// A run interrupted before its end, resumed: its top graph's calls are answered from the
    /// journal while it has them (the journal's cut), then the run continues live, appending
    /// to the same journal (its header is there already).
    Resume {
        /// Answers the journaled calls ([`Replayer::resuming`]).
        replayer: Arc<Replayer>,
        /// Appends what the run does once live.
        recorder: Arc<Recorder>,
    },
}

/// The first line of a journal: what ran, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// The format version ([`JOURNAL_VERSION`]).
    pub journal: u32,
    /// The runner version that wrote it.
    pub runner: String,
    /// The graph as the run named it (the path `runner run` was given).
    pub graph: String,
    /// SHA-256 of the script text, hex.
    pub script_sha256: String,
    /// The script text itself: a journal replays without the file.
    pub script: String,
    /// The run's arguments.
    pub args: Value,
    /// The seed of the run's random source.
    pub seed: u64,
    /// The run clock (`real` or `fixed:…`).
    pub clock: String,
    /// The engine that ran it (`boa` or `wasm`).
    pub engine: String,
    /// The run's token cap (what `token-cap` answered).
    pub token_cap: Option<u64>,
}

/// Which `start-*` call an entry answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Call {
    /// `g.agent`.
    Agent,
    /// `g.tool` (and the `fs` helpers).
    Tool,
    /// `g.graph`.
    Graph,
    /// `g.sleep` and timers.
    Sleep,
    /// `wait-any`: an `await` of started work.
    Wait,
    /// `clock-now`.
    Clock,
    /// `random-bytes`.
    Random,
    /// `tokens-used`.
    Tokens,
    /// `log`.
    Log,
}

impl Call {
    /// The name a script author knows the call by.
    pub fn name(self) -> &'static str {
        match self {
            Call::Agent => "g.agent",
            Call::Tool => "g.tool",
            Call::Graph => "g.graph",
            Call::Sleep => "g.sleep",
            Call::Wait => "await",
            Call::Clock => "clock reading",
            Call::Random => "random bytes",
            Call::Tokens => "g.tokensUsed",
            Call::Log => "log",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A failure as the journal holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failed {
    /// `err.code`.
    pub code: FailureCode,
    /// `err.message`.
    pub message: String,
}

impl From<&Failure> for Failed {
    fn from(failure: &Failure) -> Self {
        Self {
            code: failure.code,
            message: failure.message.clone(),
        }
    }
}

impl From<Failed> for Failure {
    fn from(failed: Failed) -> Self {
        Failure::new(failed.code, failed.message)
    }
}

/// One line of a journal after the header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "k", rename_all = "snake_case", deny_unknown_fields)]
pub enum Entry {
    /// A `start-*` call and its answer: a handle, or a failure.
    Start {
        /// The graph's call path (handles from the top graph down; `[]` is the top graph).
        path: Vec<u32>,
        /// The call's number in its graph, from 1 (every journaled call counts).
        seq: u32,
        /// Which start.
        call: Call,
        /// A short description: the agent's label, the tool's name, the slug, the ms.
        what: String,
        /// SHA-256 (first 16 hex digits) of the call's inputs.
        digest: String,
        /// The handle given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        handle: Option<u32>,
        /// Or why not.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<Failed>,
        /// A sleep's start on the run clock (ms since the run started): a resume continues a
        /// sleep in flight for the time it had left.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        t: Option<u64>,
    },
    /// A `wait-any` and the pair it answered.
    Wait {
        /// The graph's call path.
        path: Vec<u32>,
        /// The call's number in its graph.
        seq: u32,
        /// The handles waited on.
        handles: Vec<u32>,
        /// The handle that finished.
        handle: u32,
        /// Its result (JSON text).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ok: Option<String>,
        /// Or its failure.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<Failed>,
    },
    /// A `clock-now` reading.
    Clock {
        /// The graph's call path.
        path: Vec<u32>,
        /// The call's number in its graph.
        seq: u32,
        /// Milliseconds since the epoch.
        wall_ms: i64,
        /// Milliseconds since the run started.
        monotonic_ms: u64,
    },
    /// A `random-bytes` call: its bytes are the graph's stream of the seed, so only the count.
    Random {
        /// The graph's call path.
        path: Vec<u32>,
        /// The call's number in its graph.
        seq: u32,
        /// Bytes handed out.
        n: u32,
    },
    /// A `tokens-used` answer.
    Tokens {
        /// The graph's call path.
        path: Vec<u32>,
        /// The call's number in its graph.
        seq: u32,
        /// The answer.
        used: u64,
    },
    /// A `log` call (its line is the trace event after it).
    Log {
        /// The graph's call path.
        path: Vec<u32>,
        /// The call's number in its graph.
        seq: u32,
        /// Milliseconds since the run started.
        t: u64,
    },
    /// Tokens an agent turn spent (metered whether or not the graph awaits the agent).
    Usage {
        /// Tokens.
        tokens: u64,
        /// Reported cost.
        cost: f64,
    },
    /// The owner's answer to an `ask` (a tool whose policy is `ask`), journaled as it is
    /// given: a resume answers the same call (tool and arguments) from it, not asking again.
    Approval {
        /// The tool.
        tool: String,
        /// SHA-256 (first 16 hex digits) of the tool's name and arguments.
        digest: String,
        /// Whether the owner approved it.
        approved: bool,
        /// A denial's reason (a timeout's too).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A trace event, as the run emitted it.
    Event {
        /// The event.
        e: Event,
    },
    /// The run's end.
    End {
        /// `completed`, `failed` or `cancelled`.
        status: String,
        /// The result.
        result: Option<Value>,
        /// The error.
        error: Option<String>,
        /// Tokens metered.
        total_tokens: u64,
        /// Milliseconds since the run started.
        t: u64,
    },
}

impl Entry {
    /// The top graph's calls (the ones a replay answers), with their kind.
    fn top_call(&self) -> Option<Call> {
        match self {
            Entry::Start { path, call, .. } if path.is_empty() => Some(*call),
            Entry::Wait { path, .. } if path.is_empty() => Some(Call::Wait),
            Entry::Clock { path, .. } if path.is_empty() => Some(Call::Clock),
            Entry::Random { path, .. } if path.is_empty() => Some(Call::Random),
            Entry::Tokens { path, .. } if path.is_empty() => Some(Call::Tokens),
            Entry::Log { path, .. } if path.is_empty() => Some(Call::Log),
            _ => None,
        }
    }

    /// This call of the graph at call path `prefix` or below, its path relative to that graph;
    /// None for another graph's call and for what is no call (events, usage, answers).
    fn rerooted(&self, prefix: &[u32]) -> Option<Entry> {
        let path = match self {
            Entry::Start { path, .. }
            | Entry::Wait { path, .. }
            | Entry::Clock { path, .. }
            | Entry::Random { path, .. }
            | Entry::Tokens { path, .. }
            | Entry::Log { path, .. } => path,
            _ => return None,
        };
        let rest = path.strip_prefix(prefix)?.to_vec();
        let mut entry = self.clone();
        match &mut entry {
            Entry::Start { path, .. }
            | Entry::Wait { path, .. }
            | Entry::Clock { path, .. }
            | Entry::Random { path, .. }
            | Entry::Tokens { path, .. }
            | Entry::Log { path, .. } => *path = rest,
            _ => return None,
        }
        Some(entry)
    }

    /// How the journal describes the call it answers, for a divergence.
    fn describe(&self) -> String {
        match self {
            Entry::Start { call, what, .. } => format!("{} ({what})", call.name()),
            Entry::Wait { handles, .. } => format!("an await of handles {handles:?}"),
            Entry::Random { n, .. } => format!("{} bytes of randomness", n),
            Entry::End { .. } => "the graph to return".to_owned(),
            other => other
                .top_call()
                .map_or_else(|| "nothing".to_owned(), |c| c.name().to_owned()),
        }
    }
}

/// The first 16 hex digits of SHA-256 of `parts`, each followed by a NUL.
pub fn digest(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    let hex = hex(&hasher.finalize());
    hex[..16].to_owned()
}

/// SHA-256 of `text`, hex.
pub fn sha256_hex(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A replay met a call other than the journal's (the code changed): the first such call, what
/// it was and what the journal expected, in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Divergence(pub String);

/// Where a recorded journal's lines go. Each line is one JSON value without its newline;
/// `append` returns once the line is written (to the OS for a file, to the database for the
/// desktop): the host gives the answer only after that.
pub trait JournalSink: Send + Sync {
    /// Appends one line.
    fn append(&self, line: &str) -> std::io::Result<()>;
    /// The run ended: makes what was appended durable.
    fn finish(&self) -> std::io::Result<()>;
}

/// A journal written to a file, one JSON line per entry.
#[derive(Debug)]
pub struct FileJournal {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

impl FileJournal {
    /// Creates (or truncates) `path`.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        Ok(Self {
            path: path.to_owned(),
            file: Mutex::new(std::fs::File::create(path)?),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl JournalSink for FileJournal {
    fn append(&self, line: &str) -> std::io::Result<()> {
        let mut file = lock(&self.file);
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        file.write_all(&bytes)
    }

    fn finish(&self) -> std::io::Result<()> {
        lock(&self.file).sync_all()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why a journal could not be recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The run needs more than [`MAX_JOURNAL_BYTES`] or [`MAX_JOURNAL_ENTRIES`].
    #[error(
        "the run's journal reached its limit of {MAX_JOURNAL_BYTES} bytes or {MAX_JOURNAL_ENTRIES} entries (docs/limits.md): the run is stopped, as it could not be replayed"
    )]
    Full,
    /// The sink refused a line.
    #[error("cannot write the run's journal: {0}")]
    Write(String),
    /// An entry could not be encoded.
    #[error("cannot encode a journal entry: {0}")]
    Encode(String),
    /// The journal was closed before the run's end ([`Recorder::close`]): the run stops where
    /// it is, to be resumed from what was written.
    #[error(
        "the run's journal was closed before the run's end: the run stops here and resumes from its journal"
    )]
    Closed,
}

#[derive(Default)]
struct RecordState {
    bytes: u64,
    entries: u64,
    error: Option<RecordError>,
    /// The run's end is written.
    ended: bool,
}

/// Appends a run's entries to its sink, in order, within the limits. After the first error
/// it appends nothing more and keeps returning that error.
pub struct Recorder {
    sink: Arc<dyn JournalSink>,
    state: Mutex<RecordState>,
}

impl Recorder {
    /// A recorder writing to `sink`.
    pub fn new(sink: Arc<dyn JournalSink>) -> Arc<Self> {
        Arc::new(Self {
            sink,
            state: Mutex::new(RecordState::default()),
        })
    }

    /// Writes the header line.
    pub fn header(&self, header: &Header) -> Result<(), RecordError> {
        let line = serde_json::to_string(header).map_err(|e| RecordError::Encode(e.to_string()))?;
        self.line(&line)
    }

    /// Appends `entry`.
    pub fn append(&self, entry: &Entry) -> Result<(), RecordError> {
        let line = serde_json::to_string(entry).map_err(|e| RecordError::Encode(e.to_string()))?;
        self.line(&line)?;
        if matches!(entry, Entry::End { .. }) {
            lock(&self.state).ended = true;
        }
        Ok(())
    }

    /// Closes the journal where it is, before the run's end (a relay that stops and resumes
    /// the run at its next start): every later append fails with [`RecordError::Closed`], so
    /// the run stops at its next host call and nothing it does after this is half-journaled.
    /// False when there is nothing to resume: the run's end is written already, or the
    /// journal had failed before.
    pub fn close(&self) -> bool {
        let mut state = lock(&self.state);
        if state.ended || state.error.is_some() {
            return false;
        }
        state.error = Some(RecordError::Closed);
        true
    }

    fn line(&self, line: &str) -> Result<(), RecordError> {
        let mut state = lock(&self.state);
        if let Some(error) = &state.error {
            return Err(error.clone());
        }
        let bytes = state.bytes.saturating_add(line.len() as u64 + 1);
        let result = if bytes > MAX_JOURNAL_BYTES || state.entries >= MAX_JOURNAL_ENTRIES {
            Err(RecordError::Full)
        } else {
            self.sink
                .append(line)
                .map_err(|e| RecordError::Write(e.to_string()))
        };
        match result {
            Ok(()) => {
                state.bytes = bytes;
                state.entries += 1;
                Ok(())
            }
            Err(error) => {
                state.error = Some(error.clone());
                Err(error)
            }
        }
    }

    /// The first error, if recording failed.
    pub fn error(&self) -> Option<RecordError> {
        lock(&self.state).error.clone()
    }

    /// Bytes and entries written so far.
    pub fn written(&self) -> (u64, u64) {
        let state = lock(&self.state);
        (state.bytes, state.entries)
    }

    /// Makes the journal durable (the run ended).
    pub fn finish(&self) -> Result<(), RecordError> {
        self.sink
            .finish()
            .map_err(|e| RecordError::Write(e.to_string()))
    }
}

/// Records the run's trace events into its journal.
pub struct RecordEvents(pub Arc<Recorder>);

impl EventSink for RecordEvents {
    fn emit(&self, event: &Event) {
        // An error is remembered by the recorder; the run stops at its next host call.
        let _ = self.0.append(&Entry::Event { e: event.clone() });
    }
}

/// Records a resumed run's trace events into its journal once the run is live (the replayed
/// ones are in it already).
pub struct RecordLiveEvents(pub Arc<Recorder>, pub Arc<Replayer>);

impl EventSink for RecordLiveEvents {
    fn emit(&self, event: &Event) {
        if self.1.is_live() {
            // An error is remembered by the recorder; the run stops at its next host call.
            let _ = self.0.append(&Entry::Event { e: event.clone() });
        }
    }
}

/// Why a journal file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be read.
    #[error("cannot read the journal {path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        reason: std::io::Error,
    },
    /// The file is empty.
    #[error("{path} is empty: it is not a run journal")]
    Empty {
        /// The file.
        path: String,
    },
    /// The first line is no journal header.
    #[error(
        "{path} line 1 is not a run journal header ({reason}); record one with `runner run --record FILE`"
    )]
    Header {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// Written by a newer runner.
    #[error(
        "{path} is a journal of version {found}, newer than this runner reads ({JOURNAL_VERSION}); replay it with a newer runner"
    )]
    Version {
        /// The file.
        path: String,
        /// Its version.
        found: u32,
    },
    /// A line that is no entry.
    #[error("{path} line {line} is not a journal entry (the file is corrupt): {reason}")]
    Entry {
        /// The file.
        path: String,
        /// The line number, from 1.
        line: usize,
        /// Why.
        reason: String,
    },
    /// The journal stops before its run's end.
    #[error(
        "{path} ends at line {lines} before its run did (no end entry): the journal was cut short, the run it records cannot be replayed to its end"
    )]
    Truncated {
        /// The file.
        path: String,
        /// Lines read.
        lines: usize,
    },
    /// The script recorded does not match its hash.
    #[error("{path}: the recorded script does not match its script_sha256 (the file was edited)")]
    ScriptHash {
        /// The file.
        path: String,
    },
}

/// A journal read back.
#[derive(Debug, Clone)]
pub struct Journal {
    /// Its header.
    pub header: Header,
    /// Its entries, in order (the last one is [`Entry::End`]).
    pub entries: Vec<Entry>,
}

impl Journal {
    /// Reads and checks the journal at `path` (at most [`MAX_JOURNAL_BYTES`] plus a margin).
    pub fn read(path: &Path) -> Result<Self, ReadError> {
        let name = path.display().to_string();
        let text =
            crate::input::read_at_most(path, MAX_JOURNAL_BYTES + 1024 * 1024).map_err(|e| {
                ReadError::Io {
                    path: name.clone(),
                    reason: std::io::Error::other(e.to_string()),
                }
            })?;
        let text = String::from_utf8(text).map_err(|e| ReadError::Entry {
            path: name.clone(),
            line: 0,
            reason: e.to_string(),
        })?;
        Self::parse(&text, &name)
    }

    /// Parses journal text; `name` names it in errors.
    pub fn parse(text: &str, name: &str) -> Result<Self, ReadError> {
        Self::parse_lines(text, name, false)
    }

    /// Parses the journal of a run that was interrupted (a journal without its end entry);
    /// `name` names it in errors.
    pub fn parse_unfinished(text: &str, name: &str) -> Result<Self, ReadError> {
        Self::parse_lines(text, name, true)
    }

    /// The header and the entries of `text`, checked as a whole journal or, when `unfinished`,
    /// as one cut short.
    fn parse_lines(text: &str, name: &str, unfinished: bool) -> Result<Self, ReadError> {
        let mut lines = text.lines();
        let first = lines.next().ok_or_else(|| ReadError::Empty {
            path: name.to_owned(),
        })?;
        let header = parse_header(first, name)?;
        let mut entries = Vec::new();
        for (index, line) in lines.enumerate() {
            let entry = serde_json::from_str::<Entry>(line).map_err(|e| ReadError::Entry {
                path: name.to_owned(),
                line: index + 2,
                reason: e.to_string(),
            })?;
            entries.push(entry);
        }
        Self::checked(header, entries, name, unfinished)
    }

    fn checked(
        header: Header,
        entries: Vec<Entry>,
        name: &str,
        unfinished: bool,
    ) -> Result<Self, ReadError> {
        if !unfinished && !matches!(entries.last(), Some(Entry::End { .. })) {
            return Err(ReadError::Truncated {
                path: name.to_owned(),
                lines: entries.len() + 1,
            });
        }
        if sha256_hex(&header.script) != header.script_sha256 {
            return Err(ReadError::ScriptHash {
                path: name.to_owned(),
            });
        }
        Ok(Self { header, entries })
    }
}

fn parse_header(line: &str, name: &str) -> Result<Header, ReadError> {
    let value: Value = serde_json::from_str(line).map_err(|e| ReadError::Header {
        path: name.to_owned(),
        reason: e.to_string(),
    })?;
    let version = value.get("journal").and_then(Value::as_u64);
    match version {
        Some(v) if v > u64::from(JOURNAL_VERSION) => Err(ReadError::Version {
            path: name.to_owned(),
            found: u32::try_from(v).unwrap_or(u32::MAX),
        }),
        _ => serde_json::from_value(value).map_err(|e| ReadError::Header {
            path: name.to_owned(),
            reason: e.to_string(),
        }),
    }
}

#[derive(Default)]
struct Cursor {
    /// The next entry to look at.
    next: usize,
    /// The top graph's calls answered so far, by kind.
    counts: [u32; 9],
}

/// Answers the top graph's calls from a journal.
pub struct Replayer {
    entries: Vec<Entry>,
    cursor: Mutex<Cursor>,
    /// What the trace's timestamps read: the time of the entry last replayed.
    stamp: Arc<AtomicU64>,
    divergence: std::sync::OnceLock<String>,
    /// A resume: the run continues live where the journal runs out.
    resuming: bool,
    /// Set once the journal ran out in a resume: every call from then on is live.
    live: std::sync::atomic::AtomicBool,
    /// The owner's journaled answers (digest, approved, reason) a resume has not used yet.
    approvals: Mutex<Vec<(String, bool, Option<String>)>>,
}

/// What replaying one entry asks of the run: re-emit an event, meter tokens.
pub trait ReplayTarget {
    /// Re-emits a recorded trace event.
    fn emit(&self, event: &Event);
    /// Meters recorded tokens.
    fn usage(&self, tokens: u64, cost: f64);
}

impl Replayer {
    /// A replayer of `journal`'s entries.
    pub fn new(journal: &Journal) -> Arc<Self> {
        // The run's start is stamped as it was recorded.
        let started = journal.entries.iter().find_map(|entry| match entry {
            Entry::Event { e } if matches!(e.kind, EventKind::RunStarted { .. }) => {
                Some(e.elapsed_ms)
            }
            _ => None,
        });
        Arc::new(Self {
            entries: journal.entries.clone(),
            cursor: Mutex::new(Cursor::default()),
            stamp: Arc::new(AtomicU64::new(started.unwrap_or(0))),
            divergence: std::sync::OnceLock::new(),
            resuming: false,
            live: std::sync::atomic::AtomicBool::new(false),
            approvals: Mutex::new(Vec::new()),
        })
    }

    /// A replayer of an interrupted run's journal that lets the run continue live where the
    /// journal runs out (see [`Replayer::runs_out`]).
    pub fn resuming(journal: &Journal) -> Arc<Self> {
        let mut entries = journal.entries.clone();
        // A journal cut by a stop holds no end; one ended by a stop that was not the graph's
        // own (a relay stop) is resumed from before that end.
        if let Some(end) = entries.iter().position(|e| matches!(e, Entry::End { .. })) {
            entries.truncate(end);
        }
        Arc::new(Self {
            entries,
            cursor: Mutex::new(Cursor::default()),
            stamp: Arc::new(AtomicU64::new(0)),
            divergence: std::sync::OnceLock::new(),
            resuming: true,
            live: std::sync::atomic::AtomicBool::new(false),
            approvals: Mutex::new(journaled_approvals(&journal.entries)),
        })
    }

    /// In a resume, a replayer of the calls of the nested graph at call path `prefix` (in flight
    /// where this journal ran out), as if it were the top graph: its answers re-rooted, nothing
    /// else (its tokens and trace were replayed with this journal's). None when the journal
    /// holds no call of it.
    pub fn nested(&self, prefix: &[u32]) -> Option<Arc<Self>> {
        let entries: Vec<Entry> = self
            .entries
            .iter()
            .filter_map(|entry| entry.rerooted(prefix))
            .collect();
        if entries.is_empty() {
            return None;
        }
        Some(Arc::new(Self {
            entries,
            cursor: Mutex::new(Cursor::default()),
            stamp: Arc::new(AtomicU64::new(0)),
            divergence: std::sync::OnceLock::new(),
            resuming: true,
            live: std::sync::atomic::AtomicBool::new(false),
            approvals: Mutex::new(Vec::new()),
        }))
    }

    /// The owner's journaled answer to an `ask` of the call `digest`, if a resume has one
    /// left: `Ok` approved, `Err` denied with its reason. Each answer answers one call; with
    /// `take` false it is only looked at.
    pub fn approval(
        &self,
        digest: &str,
        take: bool,
    ) -> Option<Result<(), super::approvals::NotApproved>> {
        let mut approvals = lock(&self.approvals);
        let at = approvals.iter().position(|(d, _, _)| d == digest)?;
        let (_, approved, reason) = if take {
            approvals.remove(at)
        } else {
            approvals[at].clone()
        };
        Some(if approved {
            Ok(())
        } else {
            Err(super::approvals::NotApproved::Denied(
                reason.unwrap_or_else(|| "the owner denied it".to_owned()),
            ))
        })
    }

    /// The last reading of the run clock the journal holds (ms since the run started): a
    /// resumed run's clock continues from it.
    pub fn last_ms(&self) -> u64 {
        self.entries
            .iter()
            .filter_map(|entry| match entry {
                Entry::Clock { monotonic_ms, .. } => Some(*monotonic_ms),
                Entry::Log { t, .. } => Some(*t),
                Entry::Start { t, .. } => *t,
                Entry::Event { e } => Some(e.elapsed_ms),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// Whether a resumed run has gone live (its journal ran out).
    pub fn is_live(&self) -> bool {
        self.live.load(Ordering::SeqCst)
    }

    /// In a resume, whether the top graph's next call is past the journal: then what the
    /// journal recorded after its last call is replayed (events, tokens) and the run is live
    /// from here on. Always false in a plain replay.
    pub fn runs_out(&self, target: &dyn ReplayTarget) -> bool {
        if !self.resuming || self.divergence().is_some() {
            return false;
        }
        if self.is_live() {
            return true;
        }
        let mut cursor = lock(&self.cursor);
        if self.next_call(cursor.next) < self.entries.len() {
            return false;
        }
        self.replay_until_call(&mut cursor, target);
        self.live.store(true, Ordering::SeqCst);
        true
    }

    /// The trace's time during the replay.
    pub fn stamp(&self) -> Arc<AtomicU64> {
        self.stamp.clone()
    }

    /// The first divergence, once there was one.
    pub fn divergence(&self) -> Option<&str> {
        self.divergence.get().map(String::as_str)
    }

    /// Answers the top graph's call of kind `call` (its `n`th of that kind is named in a
    /// divergence): the journal's entry for it, after replaying everything recorded before it.
    /// `check` says whether the entry answers this very call (`None`) or how it differs.
    /// Calls that only position the trace (`log`, `random bytes`) are answered `Ok(None)` when
    /// the journal has none there.
    pub fn answer(
        &self,
        target: &dyn ReplayTarget,
        call: Call,
        this: &str,
        check: impl FnOnce(&Entry) -> Option<String>,
    ) -> Result<Option<Entry>, Divergence> {
        if let Some(divergence) = self.divergence() {
            return Err(Divergence(divergence.to_owned()));
        }
        let mut cursor = lock(&self.cursor);
        let at = self.next_call(cursor.next);
        cursor.counts[call.index()] += 1;
        let n = cursor.counts[call.index()];
        let named = format!("{} #{n}{this}", call.name());
        let Some(entry) = self.entries.get(at) else {
            return Err(self.diverge(format!("{named} was made after the journal's last call")));
        };
        if entry.top_call() != Some(call) {
            if matches!(call, Call::Log | Call::Random) {
                cursor.counts[call.index()] -= 1;
                return Ok(None);
            }
            let expected = entry.describe();
            return Err(self.diverge(format!(
                "{named} was made where the journal expected {expected}"
            )));
        }
        if let Some(differs) = check(entry) {
            return Err(self.diverge(format!("{named} {differs}")));
        }
        // The call is the journal's: what was recorded before it happens now.
        self.replay_until_call(&mut cursor, target);
        cursor.next += 1;
        if let Entry::Log { t, .. } = entry {
            // The line is stamped as its recorded event was.
            let logged = match self.entries.get(cursor.next) {
                Some(Entry::Event { e }) if matches!(e.kind, EventKind::Log { .. }) => e.elapsed_ms,
                _ => *t,
            };
            self.stamp.store(logged, Ordering::SeqCst);
        }
        Ok(Some(entry.clone()))
    }

    /// The index of the top graph's next call (or the end) from `from` on.
    fn next_call(&self, from: usize) -> usize {
        self.entries[from.min(self.entries.len())..]
            .iter()
            .position(|e| e.top_call().is_some() || matches!(e, Entry::End { .. }))
            .map_or(self.entries.len(), |i| from + i)
    }

    /// The top graph returned: replays what the journal recorded after its last call, or names
    /// the call the journal still expected.
    pub fn finish(&self, target: &dyn ReplayTarget) -> Result<(), Divergence> {
        if let Some(divergence) = self.divergence() {
            return Err(Divergence(divergence.to_owned()));
        }
        if self.runs_out(target) {
            return Ok(());
        }
        let mut cursor = lock(&self.cursor);
        self.replay_until_call(&mut cursor, target);
        match self.entries.get(cursor.next) {
            Some(Entry::End { .. }) => Ok(()),
            Some(entry) => {
                let expected = entry.describe();
                Err(self.diverge(format!(
                    "the graph returned where the journal expected {expected}"
                )))
            }
            None => Err(self.diverge("the journal has no end".to_owned())),
        }
    }

    fn diverge(&self, what: String) -> Divergence {
        let message = format!("the replay diverged from the journal: {what}");
        let _ = self.divergence.set(message.clone());
        Divergence(message)
    }

    /// Replays the entries before the top graph's next call (or the end): events re-emitted,
    /// tokens metered, nested graphs' calls passed over.
    fn replay_until_call(&self, cursor: &mut Cursor, target: &dyn ReplayTarget) {
        while let Some(entry) = self.entries.get(cursor.next) {
            if entry.top_call().is_some() || matches!(entry, Entry::End { .. }) {
                return;
            }
            match entry {
                Entry::Event { e } if replayed_event(e) => {
                    self.stamp.store(e.elapsed_ms, Ordering::SeqCst);
                    target.emit(e);
                }
                // The replay's own end is stamped as the recorded one.
                Entry::Event { e } if matches!(e.kind, EventKind::RunFinished { .. }) => {
                    self.stamp.store(e.elapsed_ms, Ordering::SeqCst);
                }
                Entry::Usage { tokens, cost } => target.usage(*tokens, *cost),
                Entry::Clock { monotonic_ms, .. } => {
                    self.stamp.store(*monotonic_ms, Ordering::SeqCst);
                }
                _ => {}
            }
            cursor.next += 1;
        }
    }
}

/// The owner's answers in `entries`, in order.
fn journaled_approvals(entries: &[Entry]) -> Vec<(String, bool, Option<String>)> {
    entries
        .iter()
        .filter_map(|entry| match entry {
            Entry::Approval {
                digest,
                approved,
                reason,
                ..
            } => Some((digest.clone(), *approved, reason.clone())),
            _ => None,
        })
        .collect()
}

/// Whether a recorded event is re-emitted by a replay: not the run's start and end (the
/// replay emits its own) nor the top graph's log lines (the replayed graph logs them again).
fn replayed_event(event: &Event) -> bool {
    !matches!(
        (&event.kind, event.depth),
        (
            EventKind::RunStarted { .. } | EventKind::RunFinished { .. },
            _
        ) | (EventKind::Log { .. } | EventKind::LogsDropped { .. }, 0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            journal: JOURNAL_VERSION,
            runner: "0".into(),
            graph: "g.js".into(),
            script_sha256: sha256_hex("x"),
            script: "x".into(),
            args: serde_json::json!({}),
            seed: 1,
            clock: "real".into(),
            engine: "boa".into(),
            token_cap: None,
        }
    }

    #[test]
    fn entries_round_trip_and_a_cut_journal_is_named() {
        let end = Entry::End {
            status: "completed".into(),
            result: Some(serde_json::json!(1)),
            error: None,
            total_tokens: 3,
            t: 0,
        };
        let start = Entry::Start {
            path: vec![],
            seq: 1,
            call: Call::Agent,
            what: "a".into(),
            digest: digest(&["p"]),
            handle: Some(1),
            error: None,
            t: None,
        };
        let lines = [
            serde_json::to_string(&header()).expect("header"),
            serde_json::to_string(&start).expect("start"),
            serde_json::to_string(&end).expect("end"),
        ];
        let journal = Journal::parse(&lines.join("\n"), "j").expect("reads");
        assert_eq!(journal.entries, vec![start, end]);
        let cut = Journal::parse(&lines[..2].join("\n"), "j").expect_err("cut");
        assert!(cut.to_string().contains("cut short"), "{cut}");
    }

    #[test]
    fn a_full_journal_stops_recording() {
        struct Nowhere;
        impl JournalSink for Nowhere {
            fn append(&self, _: &str) -> std::io::Result<()> {
                Ok(())
            }
            fn finish(&self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let recorder = Recorder::new(Arc::new(Nowhere));
        let big = "x".repeat(usize::try_from(MAX_JOURNAL_BYTES).expect("fits"));
        let entry = Entry::Log {
            path: vec![],
            seq: 1,
            t: 0,
        };
        assert!(recorder.append(&entry).is_ok());
        assert_eq!(recorder.line(&big), Err(RecordError::Full));
        assert_eq!(recorder.append(&entry), Err(RecordError::Full));
    }

    #[test]
    fn a_closed_journal_takes_nothing_more_and_an_ended_one_is_not_closed() {
        struct Counting(std::sync::atomic::AtomicUsize);
        impl JournalSink for Counting {
            fn append(&self, _: &str) -> std::io::Result<()> {
                self.0.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
            fn finish(&self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Arc::new(Counting(std::sync::atomic::AtomicUsize::new(0)));
        let recorder = Recorder::new(sink.clone());
        let entry = Entry::Tokens {
            path: vec![],
            seq: 1,
            used: 0,
        };
        assert!(recorder.append(&entry).is_ok());
        assert!(recorder.close(), "a running journal closes");
        assert_eq!(recorder.append(&entry), Err(RecordError::Closed));
        assert_eq!(sink.0.load(Ordering::SeqCst), 1, "nothing after the close");
        assert!(!recorder.close(), "closed once");
        let ended = Recorder::new(sink);
        let end = Entry::End {
            status: "completed".into(),
            result: None,
            error: None,
            total_tokens: 0,
            t: 0,
        };
        assert!(ended.append(&end).is_ok());
        assert!(!ended.close(), "an ended run has nothing to resume");
    }
}
