//! `runner test`: runs every `*.test.json` beside the graphs and compares outcomes. The format
//! is documented for authors in docs/testing.md (a test checks that every
//! field of these structs is there).
//!
//! A test file holds one case, or `{"graph": "x.js", "cases": [...]}`. A case:
//!
//! ```json
//! {"name": "urgent ticket", "graph": "triage.js", "args": {"ticket": "..."},
//!  "replies": {"replies": [...], "default": {...}},   // or "replies_file": "replies.json"
//!  "allow": ["fs.read"], "ask": ["fs.write"], "approve": ["fs.write"], "deny": [],
//!  "max_tokens": 1000, "max_concurrency": 4, "timeout_secs": 30,
//!  "seed": 7, "clock": "fixed:2026-01-01T00:00:00Z",
//!  "files": {"notes/in.md": "seed content"},
//!  "expect": {"status": "completed", "result": {...}, "result_contains": "...",
//!             "error_contains": "...", "total_tokens": 240,
//!             "files": {"notes/out.md": "expected content"}, "absent": ["x.md"]}}
//! ```
//!
//! The graph defaults to the test file's name without `.test.json`, plus `.js` (or `.ts` when
//! only that one is there). `ask` tools are answered by the test: approved when listed in
//! `approve`, denied otherwise. Each case gets a fresh temporary folder for the fs tools.
//! `seed` fixes the run's random source and `clock` (`real` or `fixed:` a UTC time) its clock;
//! a case without them takes the `runner test` flags (`--seed`, `--clock`), else a fresh seed
//! and the real clock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::args::ArgsError;
use crate::host::agents::AgentProvider;
use crate::host::approvals::{
    ApprovalPolicy, ApprovalRequest, Approver, BoxFuture, Decision, Policy,
};
use crate::host::engine::Engine;
use crate::host::events::{CollectingSink, EventSink, FanOut};
use crate::host::graphs::{Catalog, DESCRIBE_TIMEOUT, FolderCatalog};
use crate::host::mock::{MockError, MockProvider};
use crate::host::time::{ClockSetting, ClockSettingError};
use crate::host::tools::{Folder, ToolRegistry, UnknownTool};
use crate::input::{InputError, MAX_DATA_FILE_BYTES, read_script, read_text_at_most};
use crate::run::{RunOptions, RunOutcome, RunRequest, RunStatus, run_graph};
use graph_js::{Failure, FailureCode};

mod rounds;
pub use rounds::RoundRecord;

/// Suffix of test files.
pub const TEST_SUFFIX: &str = ".test.json";

/// A test file with several cases: `{"graph"?, "cases": [...]}`. (A file without `cases` is
/// one case.)
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ManyCases {
    #[serde(default)]
    graph: Option<String>,
    cases: Vec<Value>,
}

/// The default graph and the cases of a test file's text, or what is wrong with it, naming the
/// case (`case 2 ("name")`) when one case is.
fn parse_test_file(text: &str) -> Result<(Option<String>, Vec<TestCase>), TestFileError> {
    let value: Value = serde_json::from_str(text).map_err(TestFileError::Json)?;
    let Value::Object(fields) = &value else {
        return Err(TestFileError::NotAnObject);
    };
    if !fields.contains_key("cases") {
        let case = serde_json::from_value::<TestCase>(value).map_err(TestFileError::Json)?;
        case.expect
            .validate()
            .map_err(|reason| TestFileError::Expect {
                number: 1,
                name: String::new(),
                reason,
            })?;
        return Ok((None, vec![case]));
    }
    let many = serde_json::from_value::<ManyCases>(value).map_err(TestFileError::Json)?;
    if many.cases.is_empty() {
        // It would pass while testing nothing.
        return Err(TestFileError::NoCases);
    }
    let cases = many
        .cases
        .into_iter()
        .enumerate()
        .map(|(i, case)| {
            let name = case
                .get("name")
                .and_then(Value::as_str)
                .map(|n| format!(" ({n:?})"))
                .unwrap_or_default();
            let case =
                serde_json::from_value::<TestCase>(case).map_err(|reason| TestFileError::Case {
                    number: i + 1,
                    name: name.clone(),
                    reason,
                })?;
            case.expect
                .validate()
                .map_err(|reason| TestFileError::Expect {
                    number: i + 1,
                    name,
                    reason,
                })?;
            Ok(case)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((many.graph, cases))
}

/// What is wrong with the text of a test file.
#[derive(Debug, thiserror::Error)]
pub enum TestFileError {
    /// A case's `expect` asks for what cannot be: fix what the reason names.
    #[error("case {number}{name}: expect: {reason}")]
    Expect {
        /// The case's number, from 1.
        number: usize,
        /// ` ("its name")`, or empty.
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// Not JSON, or a case that does not fit the format.
    #[error("{0}")]
    Json(#[source] serde_json::Error),
    /// JSON, but not an object.
    #[error("expected a JSON object: one case, or {{\"graph\": ..., \"cases\": [...]}}")]
    NotAnObject,
    /// A `cases` list with nothing in it.
    #[error("`cases` is empty; give at least one case")]
    NoCases,
    /// One case of a `cases` list does not fit the format.
    #[error("case {number}{name}: {reason}")]
    Case {
        /// The case's position, from 1.
        number: usize,
        /// ` ("its name")`, when it has one.
        name: String,
        /// What does not fit.
        #[source]
        reason: serde_json::Error,
    },
}

/// Why a case could not be run (its report then names only this).
#[derive(Debug, thiserror::Error)]
enum CaseError {
    /// The graph file could not be read.
    #[error("cannot read the graph {path}: {reason}")]
    Graph {
        /// The graph file.
        path: String,
        /// Why not.
        reason: InputError,
    },
    /// A TypeScript graph whose types cannot be erased: `FILE:LINE:COL: what`.
    #[error("{0}")]
    TypeScript(String),
    /// No temporary folder for the case.
    #[error("cannot create a temporary folder: {0}")]
    TempDir(std::io::Error),
    /// The temporary folder could not be opened under the fs tools' rules.
    #[error("{}", .0.message)]
    Folder(Failure),
    /// A file to seed is outside the folder, or could not be written.
    #[error("cannot seed {path}: {reason}")]
    Seed {
        /// The file, as the case names it.
        path: String,
        /// Why not.
        reason: String,
    },
    /// The case's replies are not a valid replies file.
    #[error("{0}")]
    Replies(MockError),
    /// The fs tools could not be set up.
    #[error("{0}")]
    Tools(Failure),
    /// The graph's meta or default export is missing or invalid.
    #[error("{path}: {reason}")]
    Meta {
        /// The graph file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The case's `args` do not fit the graph's `meta.args` schema.
    #[error("{0}")]
    Args(#[source] ArgsError),
    /// The case expects its `args` to be refused, and they fit.
    #[error(
        "args_refused: the case expects the graph's meta.args to refuse its args, but they fit (the graph did not run)"
    )]
    ArgsFit,
    /// The case's `clock` is not a clock.
    #[error("clock: {0}")]
    Clock(#[source] ClockSettingError),
    /// The case's `journal` cannot be read.
    #[error("journal: {0}")]
    Journal(#[source] crate::host::journal::ReadError),
    /// The case gives both a `journal` and what the journal fixes.
    #[error(
        "journal: the journal fixes the run's args, replies, seed, clock and token cap; drop `{0}` from the case"
    )]
    JournalAnd(&'static str),
    /// `allow`, `ask`, `approve` or `deny` names a tool that does not exist.
    #[error("{list}: {reason}")]
    Policy {
        /// The list that names it.
        list: &'static str,
        /// Which tool, and the known ones.
        #[source]
        reason: UnknownTool,
    },
}

/// Why the cases of a test file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadTestFileError {
    /// The file could not be read (missing, too large, not text).
    #[error("cannot read the test file {path}: {reason}")]
    Read {
        /// The test file.
        path: String,
        /// Why not.
        #[source]
        reason: InputError,
    },
    /// The file is not a test file: fix what the reason names.
    #[error("the test file {path} is not valid: {reason}")]
    Invalid {
        /// The test file.
        path: String,
        /// What is wrong with its text.
        #[source]
        reason: TestFileError,
    },
}

/// What a case without its own `seed` or `clock` runs with (the `runner test` flags).
#[derive(Debug, Clone, Copy, Default)]
pub struct CaseDefaults {
    /// The seed of the random source; a fresh one per run when `None`.
    pub seed: Option<u64>,
    /// The run clock.
    pub clock: ClockSetting,
}

/// What every case of a folder shares.
struct Suite<'a> {
    engine: &'a Arc<dyn Engine>,
    catalog: &'a Arc<dyn Catalog>,
    events: &'a Arc<dyn EventSink>,
    provider: Option<&'a Arc<dyn AgentProvider>>,
    defaults: CaseDefaults,
}

/// One test case.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestCase {
    /// Name shown in the report.
    #[serde(default)]
    pub name: Option<String>,
    /// The graph file, relative to the test file.
    #[serde(default)]
    pub graph: Option<String>,
    /// Arguments.
    #[serde(default = "empty_object")]
    pub args: Value,
    /// Inline mock replies.
    #[serde(default)]
    pub replies: Option<Value>,
    /// Mock replies file, relative to the test file.
    #[serde(default)]
    pub replies_file: Option<String>,
    /// A run's journal (`runner run --record`), relative to the test file: the case replays
    /// the graph against it (its args, seed, clock and token cap) instead of running it.
    #[serde(default)]
    pub journal: Option<String>,
    /// Tools allowed.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Tools that ask.
    #[serde(default)]
    pub ask: Vec<String>,
    /// Asked tools the test approves.
    #[serde(default)]
    pub approve: Vec<String>,
    /// Tools denied.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Token cap.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Agents at once.
    #[serde(default)]
    pub max_concurrency: Option<usize>,
    /// Deadline in seconds.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Seed of the run's random source.
    #[serde(default)]
    pub seed: Option<u64>,
    /// The run clock: `real`, or `fixed:2026-01-01T00:00:00Z` for a virtual one.
    #[serde(default)]
    pub clock: Option<String>,
    /// Files placed in the folder before the run.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// What must hold afterwards.
    pub expect: Expect,
}

impl Expect {
    /// A run's status, or a refusal of the arguments with nothing else expected.
    fn validate(&self) -> Result<(), &'static str> {
        match (&self.status, &self.args_refused) {
            (None, None) => Err(
                "give `status` (what the run ends as) or `args_refused` (a substring of the refusal of the case's args)",
            ),
            (Some(_), Some(_)) => {
                Err("`args_refused` means the graph never runs: give it without `status`")
            }
            (None, Some(_))
                if self.result.is_some()
                    || self.result_contains.is_some()
                    || self.error_contains.is_some()
                    || self.total_tokens.is_some()
                    || !self.files.is_empty()
                    || !self.absent.is_empty() =>
            {
                Err("`args_refused` means the graph never runs: expect nothing else of it")
            }
            _ => Ok(()),
        }
    }
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// What a case expects.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The status the run ends with; required unless `args_refused` is given.
    #[serde(default)]
    pub status: Option<RunStatus>,
    /// The case's `args` must be refused by the graph's `meta.args` (a substring of the
    /// refusal; `""` for any): the graph does not run, and nothing else may be expected.
    #[serde(default)]
    pub args_refused: Option<String>,
    /// The exact result.
    #[serde(default)]
    pub result: Option<Value>,
    /// A substring of the result's JSON text.
    #[serde(default)]
    pub result_contains: Option<String>,
    /// A substring of the error.
    #[serde(default)]
    pub error_contains: Option<String>,
    /// The exact token total.
    #[serde(default)]
    pub total_tokens: Option<u64>,
    /// Files that must exist afterwards, with their content.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Files that must not exist afterwards.
    #[serde(default)]
    pub absent: Vec<String>,
}

/// The outcome of one case.
#[derive(Debug, Clone)]
pub struct CaseReport {
    /// The test file.
    pub file: PathBuf,
    /// The case's name.
    pub name: String,
    /// What did not match (empty: passed).
    pub problems: Vec<String>,
    /// The run's outcome, if it ran.
    pub outcome: Option<RunOutcome>,
    /// The case's own `seed`, if it has one.
    pub seed: Option<u64>,
    /// The case's own `clock`, if it has a valid one.
    pub clock: Option<ClockSetting>,
    /// How long the case took (reading, running and checking it).
    pub duration: Duration,
    /// The last lines of its run's trace (at most [`TRACE_TAIL_LINES`]), as `--verbose` prints
    /// them: what `runner test --junit` shows under a failure.
    pub trace: Vec<String>,
    /// What `runner test --repeat` compares between rounds (see [`RoundRecord`]): kept when
    /// the case fixes its seed and clock (itself or through the flags) and its agents answer
    /// from its own replies (or there is no provider at all), so that every round must repeat
    /// the first. `None` for a case left to chance (a real clock, a fresh seed, a live model).
    pub record: Option<RoundRecord>,
}

/// Most trace lines a [`CaseReport`] keeps: the end of the run, where a failure shows.
pub const TRACE_TAIL_LINES: usize = 40;

/// Keeps the last [`TRACE_TAIL_LINES`] lines of a run's trace.
#[derive(Default)]
struct TraceTail(std::sync::Mutex<std::collections::VecDeque<String>>);

impl EventSink for TraceTail {
    fn emit(&self, event: &crate::host::events::Event) {
        let Some(line) = crate::trace::line(event) else {
            return;
        };
        let mut lines = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if lines.len() == TRACE_TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }
}

impl TraceTail {
    fn lines(&self) -> Vec<String> {
        let lines = self.0.lock().unwrap_or_else(|p| p.into_inner());
        lines.iter().cloned().collect()
    }
}

impl CaseReport {
    /// Whether every expectation held.
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Why a test folder could not be run at all.
#[derive(Debug, thiserror::Error)]
pub enum TestError {
    /// The folder could not be read.
    #[error("cannot read the test folder {path}: {reason}")]
    Folder {
        /// The folder.
        path: String,
        /// The I/O error (in the message; not a separate cause, so it is said once).
        reason: std::io::Error,
    },
    /// The folder's graphs could not be read, or two of them share a slug.
    #[error("{0}")]
    Catalog(crate::host::graphs::CatalogError),
}

/// Answers `ask` from the case's `approve` list.
struct CaseApprover(Vec<String>);

impl Approver for CaseApprover {
    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Decision> {
        let approved = self.0.contains(&request.tool);
        Box::pin(async move {
            if approved {
                Decision::Approved
            } else {
                Decision::Denied(format!("the test denied tool {}", request.tool))
            }
        })
    }
}

/// Finds the `*.test.json` files of `dir`, sorted.
pub fn find_tests(dir: &Path) -> Result<Vec<PathBuf>, TestError> {
    let entries = std::fs::read_dir(dir).map_err(|reason| TestError::Folder {
        path: dir.display().to_string(),
        reason,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(TEST_SUFFIX))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Runs every test of `dir` on `engine`, reporting each case to `on_case` as it finishes.
/// Cases without `replies` run their agents on `provider` (none: agents fail).
pub async fn run_dir(
    dir: &Path,
    engine: Arc<dyn Engine>,
    events: Arc<dyn EventSink>,
    provider: Option<Arc<dyn AgentProvider>>,
    on_case: impl FnMut(&CaseReport),
) -> Result<Vec<CaseReport>, TestError> {
    run_dir_with(
        dir,
        engine,
        events,
        provider,
        CaseDefaults::default(),
        on_case,
    )
    .await
}

/// [`run_dir`], with `defaults` for the cases that set no `seed` or `clock`.
pub async fn run_dir_with(
    dir: &Path,
    engine: Arc<dyn Engine>,
    events: Arc<dyn EventSink>,
    provider: Option<Arc<dyn AgentProvider>>,
    defaults: CaseDefaults,
    mut on_case: impl FnMut(&CaseReport),
) -> Result<Vec<CaseReport>, TestError> {
    let catalog: Arc<dyn Catalog> = Arc::new(
        FolderCatalog::load(dir, engine.as_ref(), DESCRIBE_TIMEOUT)
            .await
            .map_err(TestError::Catalog)?,
    );
    let suite = Suite {
        engine: &engine,
        catalog: &catalog,
        events: &events,
        provider: provider.as_ref(),
        defaults,
    };
    let mut reports = Vec::new();
    for file in find_tests(dir)? {
        for report in run_file(&file, &suite).await {
            on_case(&report);
            reports.push(report);
        }
    }
    Ok(reports)
}

/// One case of a test file, with the graph file it runs.
#[derive(Debug, Clone)]
pub struct FileCase {
    /// The graph file (the test file's folder joined with the case's graph).
    pub graph: PathBuf,
    /// The case.
    pub case: TestCase,
}

/// The cases of the test file `file`, each with its graph, or why the file cannot be read.
pub fn read_test_file(file: &Path) -> Result<Vec<FileCase>, ReadTestFileError> {
    let path = || file.display().to_string();
    let text =
        read_text_at_most(file, MAX_DATA_FILE_BYTES).map_err(|reason| ReadTestFileError::Read {
            path: path(),
            reason,
        })?;
    let (default_graph, cases) =
        parse_test_file(&text).map_err(|reason| ReadTestFileError::Invalid {
            path: path(),
            reason,
        })?;
    let base = file.parent().unwrap_or(Path::new("."));
    let stem = file_stem(file);
    Ok(cases
        .into_iter()
        .map(|case| {
            let graph = case
                .graph
                .clone()
                .or_else(|| default_graph.clone())
                .unwrap_or_else(|| default_graph_file(base, &stem));
            FileCase {
                graph: base.join(graph),
                case,
            }
        })
        .collect())
}

/// A case's own mock replies (inline, or its `replies_file` relative to `base`), if it has any.
pub fn case_replies(case: &TestCase, base: &Path) -> Result<Option<MockProvider>, MockError> {
    match (&case.replies, &case.replies_file) {
        (Some(replies), _) => MockProvider::from_json(replies.clone()).map(Some),
        (None, Some(file)) => MockProvider::from_file(&base.join(file)).map(Some),
        (None, None) => Ok(None),
    }
}

/// The graph a test file `STEM.test.json` tests when it names none: `STEM.js`, or `STEM.ts`
/// when only that one is there.
fn default_graph_file(base: &Path, stem: &str) -> String {
    let script = format!("{stem}.js");
    let typescript = format!("{stem}.ts");
    if !base.join(&script).exists() && base.join(&typescript).exists() {
        typescript
    } else {
        script
    }
}

fn file_stem(file: &Path) -> String {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("test");
    name.strip_suffix(TEST_SUFFIX).unwrap_or(name).to_owned()
}

async fn run_file(file: &Path, suite: &Suite<'_>) -> Vec<CaseReport> {
    let stem = file_stem(file);
    let broken = |problem: String| {
        vec![CaseReport {
            file: file.to_path_buf(),
            name: stem.clone(),
            problems: vec![problem],
            outcome: None,
            seed: None,
            clock: None,
            duration: Duration::ZERO,
            trace: Vec::new(),
            record: None,
        }]
    };
    let text = match read_text_at_most(file, MAX_DATA_FILE_BYTES) {
        Ok(t) => t,
        Err(e) => return broken(format!("cannot read the test file: {e}")),
    };
    let (default_graph, cases) = match parse_test_file(&text) {
        Ok(parsed) => parsed,
        Err(e) => return broken(format!("the test file is not valid: {e}")),
    };
    let base = file.parent().unwrap_or(Path::new("."));
    let mut reports = Vec::with_capacity(cases.len());
    for (i, case) in cases.into_iter().enumerate() {
        let name = case
            .name
            .clone()
            .unwrap_or_else(|| format!("{stem} #{}", i + 1));
        let graph = case
            .graph
            .clone()
            .or_else(|| default_graph.clone())
            .unwrap_or_else(|| default_graph_file(base, &stem));
        let mut report = run_one(&case, &base.join(&graph), base, suite).await;
        report.file = file.to_path_buf();
        report.name = name;
        reports.push(report);
    }
    reports
}

/// Runs one case of a test file in `base` on `graph` and checks it (the report's file and name
/// are left for the caller to fill in).
async fn run_one(case: &TestCase, graph: &Path, base: &Path, suite: &Suite<'_>) -> CaseReport {
    let stopwatch = crate::clock::Stopwatch::start();
    let tail = Arc::new(TraceTail::default());
    let collected = repeatable(case, suite).then(|| Arc::new(CollectingSink::default()));
    let mut sinks: Vec<Arc<dyn EventSink>> = vec![suite.events.clone(), tail.clone()];
    if let Some(collected) = &collected {
        sinks.push(collected.clone());
    }
    let ran = run_case(case, graph, base, suite, Arc::new(FanOut(sinks))).await;
    let (problems, outcome) = match (ran, &case.expect.args_refused) {
        (Ok((outcome, folder)), _) => (
            check(&case.expect, &outcome, &folder.confined),
            Some(outcome),
        ),
        (Err(CaseError::Args(refusal)), Some(expected)) => {
            let said = refusal.to_string();
            let problems = if said.contains(expected.as_str()) {
                Vec::new()
            } else {
                vec![format!(
                    "args_refused: expected the refusal to contain {expected:?}, got: {said}"
                )]
            };
            (problems, None)
        }
        (Err(problem), _) => (vec![problem.to_string()], None),
    };
    let record = outcome
        .as_ref()
        .zip(collected)
        .map(|(outcome, events)| RoundRecord::new(outcome, &events.events()));
    CaseReport {
        file: PathBuf::new(),
        name: String::new(),
        problems,
        outcome,
        seed: case.seed,
        clock: case
            .clock
            .as_deref()
            .and_then(|c| ClockSetting::parse(c).ok()),
        duration: stopwatch.elapsed(),
        trace: tail.lines(),
        record,
    }
}

/// Whether every run of `case` must be the same: its seed and clock are fixed (by the case or
/// the flags) and its agents answer from its own replies, or fail for want of a provider.
fn repeatable(case: &TestCase, suite: &Suite<'_>) -> bool {
    if case.journal.is_some() {
        return true;
    }
    let seed = case.seed.or(suite.defaults.seed).is_some();
    let clock = match &case.clock {
        Some(text) => ClockSetting::parse(text).ok(),
        None => Some(suite.defaults.clock),
    };
    let replies = case.replies.is_some() || case.replies_file.is_some();
    seed && matches!(clock, Some(ClockSetting::Fixed(_))) && (replies || suite.provider.is_none())
}

/// A case's temporary folder, kept until its files are checked, and the same folder under the
/// fs tools' rules.
struct CaseFolder {
    confined: Folder,
    _dir: tempfile::TempDir,
}

/// The case's graph as the sandbox runs it (a `.ts` file with its types erased).
fn case_script(graph: &Path) -> Result<String, CaseError> {
    read_script(graph).map_err(|reason| match reason {
        InputError::TypeScript(e) => CaseError::TypeScript(e.located(graph)),
        reason => CaseError::Graph {
            path: graph.display().to_string(),
            reason,
        },
    })
}

async fn run_case(
    case: &TestCase,
    graph: &Path,
    base: &Path,
    suite: &Suite<'_>,
    events: Arc<dyn EventSink>,
) -> Result<(RunOutcome, CaseFolder), CaseError> {
    let script = case_script(graph)?;
    // The graph is checked as `runner check` and `runner run` check it (meta, default export).
    let script: Arc<str> = script.into();
    let meta = suite
        .engine
        .describe(script.clone())
        .await
        .map_err(|reason| CaseError::Meta {
            path: graph.display().to_string(),
            reason: reason.to_string(),
        })?;
    let (journal, args) = case_journal(case, base)?;
    // The case's arguments fit the graph's `meta.args`, as `runner run --args` requires.
    crate::args::check(&meta, &args, "args").map_err(CaseError::Args)?;
    if case.expect.args_refused.is_some() {
        return Err(CaseError::ArgsFit);
    }
    let (folder, confined) = seeded_folder(case)?;
    let provider: Option<Arc<dyn AgentProvider>> =
        match case_replies(case, base).map_err(CaseError::Replies)? {
            Some(mock) => Some(Arc::new(mock)),
            None => suite.provider.cloned(),
        };
    let mut options = RunOptions::new(suite.engine.clone());
    options.seed = case.seed.or(suite.defaults.seed);
    options.clock = match &case.clock {
        Some(text) => ClockSetting::parse(text).map_err(CaseError::Clock)?,
        None => suite.defaults.clock,
    };
    if let Some(provider) = provider {
        options.provider = provider;
    }
    options.tools =
        ToolRegistry::standard(Some(folder.path().to_path_buf())).map_err(CaseError::Tools)?;
    options.policy = case_policy(case, &options.tools)?;
    options.approver = Arc::new(CaseApprover(case.approve.clone()));
    options.catalog = suite.catalog.clone();
    options.token_cap = case.max_tokens;
    if let Some(n) = case.max_concurrency {
        options.max_concurrency = n;
    }
    if let Some(secs) = case.timeout_secs {
        options.timeout = Duration::from_secs(secs);
    }
    options.events = events;
    journal.map(|j| replay_from(&mut options, &j)).transpose()?;
    // The graph's path, as its errors name it.
    let graph_name = graph.display().to_string();
    let outcome = run_graph(
        RunRequest {
            script,
            args,
            graph: graph_name,
            run_id: None,
        },
        &options,
        CancellationToken::new(),
    )
    .await;
    Ok((
        outcome,
        CaseFolder {
            confined,
            _dir: folder,
        },
    ))
}

/// The case's journal, read, when it has one (and nothing the journal fixes), and the run's
/// arguments: the journal's, else the case's.
fn case_journal(
    case: &TestCase,
    base: &Path,
) -> Result<(Option<crate::host::journal::Journal>, Value), CaseError> {
    let Some(file) = &case.journal else {
        return Ok((None, case.args.clone()));
    };
    let fixed = [
        ("args", case.args.as_object().is_some_and(|a| !a.is_empty())),
        ("replies", case.replies.is_some()),
        ("replies_file", case.replies_file.is_some()),
        ("seed", case.seed.is_some()),
        ("clock", case.clock.is_some()),
        ("max_tokens", case.max_tokens.is_some()),
    ];
    if let Some((field, _)) = fixed.iter().find(|(_, given)| *given) {
        return Err(CaseError::JournalAnd(field));
    }
    let journal =
        crate::host::journal::Journal::read(&base.join(file)).map_err(CaseError::Journal)?;
    let args = journal.header.args.clone();
    Ok((Some(journal), args))
}

/// Makes `options` a replay of `journal`: its seed, clock and cap, every answer from it.
fn replay_from(
    options: &mut RunOptions,
    journal: &crate::host::journal::Journal,
) -> Result<(), CaseError> {
    let header = &journal.header;
    options.seed = Some(header.seed);
    options.clock = ClockSetting::parse(&header.clock).map_err(CaseError::Clock)?;
    options.token_cap = header.token_cap;
    options.journal = Some(crate::host::journal::JournalMode::Replay(
        crate::host::journal::Replayer::new(journal),
    ));
    Ok(())
}

/// A fresh temporary folder for a case, with its `files` seeded inside it (by the same rules
/// as the graph's fs tools), and the same folder under those rules.
fn seeded_folder(case: &TestCase) -> Result<(tempfile::TempDir, Folder), CaseError> {
    let folder = tempfile::tempdir().map_err(CaseError::TempDir)?;
    let confined = Folder::open(folder.path()).map_err(CaseError::Folder)?;
    for (path, content) in &case.files {
        let seed = |reason: String| CaseError::Seed {
            path: path.clone(),
            reason,
        };
        let target = confined.for_writing(path).map_err(|e| seed(e.message))?;
        std::fs::write(&target, content).map_err(|e| seed(e.to_string()))?;
    }
    Ok((folder, confined))
}

/// The approval policy of a case: its `allow`, `ask` and `deny` lists, each name (and those of
/// `approve`) a tool of `tools`.
fn case_policy(case: &TestCase, tools: &ToolRegistry) -> Result<ApprovalPolicy, CaseError> {
    for (list, names) in [
        ("allow", &case.allow),
        ("ask", &case.ask),
        ("approve", &case.approve),
        ("deny", &case.deny),
    ] {
        tools
            .check_known(names.iter().map(String::as_str))
            .map_err(|reason| CaseError::Policy { list, reason })?;
    }
    let mut policy = ApprovalPolicy::default();
    for (tools, p) in [
        (&case.allow, Policy::Allow),
        (&case.ask, Policy::Ask),
        (&case.deny, Policy::Deny),
    ] {
        for tool in tools {
            policy.set(tool.clone(), p);
        }
    }
    Ok(policy)
}

/// Where `outcome` and the case's folder differ from what the case expects, one line each.
fn check(expect: &Expect, outcome: &RunOutcome, confined: &Folder) -> Vec<String> {
    let mut problems = check_outcome(expect, outcome);
    check_files(expect, confined, &mut problems);
    problems
}

/// Where the outcome differs from the expected status, result, error and tokens.
fn check_outcome(expect: &Expect, outcome: &RunOutcome) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(status) = expect.status
        && outcome.status != status
    {
        problems.push(format!(
            "status: expected {}, got {}{}",
            status.as_str(),
            outcome.status.as_str(),
            outcome
                .error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        ));
    }
    if let Some(result) = &expect.result
        && outcome.result.as_ref() != Some(result)
    {
        problems.push(format!(
            "result: expected {result}, got {}",
            outcome
                .result
                .as_ref()
                .map_or("none".to_owned(), Value::to_string)
        ));
    }
    if let Some(needle) = &expect.result_contains {
        let text = outcome
            .result
            .as_ref()
            .map(Value::to_string)
            .unwrap_or_default();
        if !text.contains(needle.as_str()) {
            problems.push(format!(
                "result: expected it to contain {needle:?}, got {text}"
            ));
        }
    }
    if let Some(needle) = &expect.error_contains {
        let error = outcome.error.as_deref().unwrap_or("");
        if !error.contains(needle.as_str()) {
            problems.push(format!(
                "error: expected it to contain {needle:?}, got {error:?}"
            ));
        }
    }
    if let Some(tokens) = expect.total_tokens
        && outcome.total_tokens != tokens
    {
        problems.push(format!(
            "total_tokens: expected {tokens}, got {}",
            outcome.total_tokens
        ));
    }
    problems
}

/// Where the case's folder differs from the expected files.
fn check_files(expect: &Expect, confined: &Folder, problems: &mut Vec<String>) {
    // Only files inside the case's folder are checked, by the same rules as the graph's fs tools.
    for (path, expected) in &expect.files {
        let read = confined
            .existing(path)
            .map_err(|e| e.message)
            .and_then(|file| {
                read_text_at_most(&file, MAX_DATA_FILE_BYTES).map_err(|e| e.to_string())
            });
        match read {
            Ok(content) if &content == expected => {}
            Ok(content) => problems.push(format!(
                "file {path}: expected {expected:?}, got {content:?}"
            )),
            Err(e) => problems.push(format!("file {path}: {e}")),
        }
    }
    for path in &expect.absent {
        match confined.existing(path) {
            Err(e) if e.code == FailureCode::NotFound => {}
            Ok(_) => problems.push(format!("file {path} exists but should not")),
            Err(e) => problems.push(format!("file {path}: {}", e.message)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_test_file;

    fn problem(text: &str) -> String {
        match parse_test_file(text) {
            Ok(parsed) => panic!("{text} parsed: {parsed:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_broken_test_file_names_the_case_and_the_field() {
        let missing = problem(
            r#"{"cases": [{"expect": {"status": "completed"}}, {"name": "second", "expect": {}}]}"#,
        );
        assert_eq!(
            missing,
            r#"case 2 ("second"): expect: give `status` (what the run ends as) or `args_refused` (a substring of the refusal of the case's args)"#
        );
        let unnamed = problem(r#"{"cases": [{"expect": {"status": "completed", "reslt": 1}}]}"#);
        assert!(
            unnamed.starts_with("case 1: unknown field `reslt`"),
            "{unnamed}"
        );
        let typo = problem(r#"{"graf": "g.js", "cases": []}"#);
        assert!(typo.starts_with("unknown field `graf`"), "{typo}");
        let one = problem(r#"{"expect": {"status": "done"}}"#);
        assert!(one.contains("unknown variant `done`"), "{one}");
        assert!(problem("[]").starts_with("expected a JSON object"));
        assert_eq!(
            problem(r#"{"graph": "g.js", "cases": []}"#),
            "`cases` is empty; give at least one case"
        );
        assert!(problem("{nope").contains("line 1 column 2"));
    }

    #[test]
    fn one_case_or_many_cases_parse() {
        let (graph, cases) = parse_test_file(
            r#"{"graph": "g.js", "cases": [{"name": "a", "expect": {"status": "completed"}}, {"expect": {"status": "failed"}}]}"#,
        )
        .expect("valid");
        assert_eq!(graph.as_deref(), Some("g.js"));
        assert_eq!(cases.len(), 2);
        assert_eq!(cases[0].name.as_deref(), Some("a"));
        let (graph, cases) =
            parse_test_file(r#"{"args": {"x": 1}, "expect": {"status": "completed"}}"#)
                .expect("valid");
        assert_eq!(graph, None);
        assert_eq!(cases[0].args["x"], 1);
    }

    mod rounds {
        use crate::host::events::{Event, EventKind};
        use crate::run::{RunOutcome, RunStatus};
        use crate::testing::RoundRecord;

        fn outcome(total_tokens: u64) -> RunOutcome {
            RunOutcome {
                run_id: "run-1".into(),
                status: RunStatus::Completed,
                result: Some(serde_json::json!({"waves": 2})),
                error: None,
                total_tokens,
                reported_cost: 0.0,
                location: None,
            }
        }

        fn at(elapsed_ms: u64, depth: usize, kind: EventKind) -> Event {
            Event {
                elapsed_ms,
                depth,
                kind,
            }
        }

        fn started(ms: u64, depth: usize, handle: u32) -> Event {
            let kind = EventKind::AgentStarted {
                handle,
                label: None,
                max_tokens: None,
            };
            at(ms, depth, kind)
        }

        fn finished(ms: u64, depth: usize, handle: u32, tokens: u64) -> Event {
            let kind = EventKind::AgentFinished {
                handle,
                label: None,
                tokens,
                cost: 0.0,
            };
            at(ms, depth, kind)
        }

        fn log(ms: u64, depth: usize, message: &str) -> Event {
            let message = message.to_owned();
            at(ms, depth, EventKind::Log { message })
        }

        fn run_started(run_id: &str) -> Event {
            let kind = EventKind::RunStarted {
                run_id: run_id.into(),
                graph: "waves".into(),
                engine: "boa".into(),
                seed: 7,
                clock: "fixed:2026-01-01T00:00:00Z".into(),
            };
            at(0, 0, kind)
        }

        fn nested(ms: u64, handle: u32, finished: bool) -> Event {
            let slug = "fanout".to_owned();
            let kind = if finished {
                EventKind::GraphFinished {
                    handle,
                    slug,
                    error: None,
                }
            } else {
                EventKind::GraphStarted { handle, slug }
            };
            at(ms, 0, kind)
        }

        fn difference(first: &[Event], later: &[Event], tokens: (u64, u64)) -> Option<String> {
            RoundRecord::new(&outcome(tokens.0), first)
                .first_difference(&RoundRecord::new(&outcome(tokens.1), later), 3)
        }

        /// Two agents of one wave finishing at one virtual moment may be reported in either
        /// order (their tasks run side by side), and the run's id differs by design; the rest
        /// is the same.
        #[test]
        fn what_runs_side_by_side_at_one_moment_may_interleave_and_the_run_id_differs() {
            let first = [
                run_started("a"),
                started(0, 0, 1),
                started(0, 0, 2),
                finished(40, 0, 1, 50),
                finished(40, 0, 2, 50),
                log(40, 0, "wave 2"),
            ];
            let later = [
                run_started("b"),
                started(0, 0, 1),
                started(0, 0, 2),
                finished(40, 0, 2, 50),
                log(40, 0, "wave 2"),
                finished(40, 0, 1, 50),
            ];
            assert_eq!(difference(&first, &later, (100, 100)), None);
        }

        #[test]
        fn the_outcome_comes_first_then_the_earliest_trace_difference() {
            let first = [started(0, 0, 1), finished(40, 0, 1, 50), log(50, 0, "a")];
            assert_eq!(
                difference(&first, &first, (100, 150)).as_deref(),
                Some("total_tokens: round 1 had 100, round 3 had 150")
            );
            // The agent finished later: its event is named with both times.
            let later = [started(0, 0, 1), finished(45, 0, 1, 50), log(50, 0, "b")];
            assert_eq!(
                difference(&first, &later, (100, 100)).as_deref(),
                Some(
                    r#"the trace, agent #1 (event 2): round 1 had {"event":"agent_finished","handle":1,"label":null,"tokens":50,"cost":0.0} at 40 ms, round 3 had {"event":"agent_finished","handle":1,"label":null,"tokens":50,"cost":0.0} at 45 ms"#
                )
            );
            // One stream's own order counts even at one moment.
            let first = [log(5, 0, "one"), log(5, 0, "two")];
            let later = [log(5, 0, "two"), log(5, 0, "one")];
            let found = difference(&first, &later, (0, 0)).expect("a difference");
            assert!(
                found.starts_with("the trace, the graph's log (event 1): round 1 had "),
                "{found}"
            );
            // A missing event is one too.
            let found = difference(&first, &first[..1], (0, 0)).expect("a difference");
            assert!(found.ends_with("round 3 had nothing more"), "{found}");
        }

        /// A nested graph running alone has streams of its own; two running side by side are
        /// compared as what happened at each moment.
        #[test]
        fn nested_graphs_are_told_apart_unless_they_run_side_by_side() {
            let alone = |second: &str| {
                vec![
                    nested(0, 1, false),
                    log(0, 1, "one"),
                    log(0, 1, second),
                    started(0, 1, 1),
                    nested(10, 1, true),
                ]
            };
            let found = difference(&alone("two"), &alone("2"), (0, 0)).expect("differs");
            assert!(
                found.starts_with("the trace, the log of nested graph #1 (event 2)"),
                "{found}"
            );
            let side_by_side = |swap: bool| {
                let (a, b) = if swap { ("b", "a") } else { ("a", "b") };
                vec![
                    nested(0, 1, false),
                    nested(0, 2, false),
                    log(0, 1, a),
                    log(0, 1, b),
                    nested(10, 1, true),
                    nested(10, 2, true),
                ]
            };
            assert_eq!(
                difference(&side_by_side(false), &side_by_side(true), (0, 0)),
                None
            );
        }
    }
}
