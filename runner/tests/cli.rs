//! The `runner` command line as a graph author uses it: output shape, exit codes, approvals and
//! folder confinement, `check` and `test`.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

fn runner() -> Command {
    Command::new(env!("CARGO_BIN_EXE_runner"))
}

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
}

fn stdout_json(output: &Output) -> Value {
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        text.lines().count(),
        1,
        "exactly one line on stdout: {text}"
    );
    serde_json::from_str(&text).expect("stdout is one JSON object")
}

const WRITE: &str = r#"
export const meta = {name: "Write", slug: "write", version: "1"};
export default async function (args, g) { return g.tool("fs.write", {path: args.path, text: "hello"}); }
"#;

/// A graph that returns 1.
const ONE: &str = "export const meta = {name: 'One', slug: 'one', version: '1'};\nexport default async function () { return 1; }";

/// Writes a graph file `name` with `source` into `dir`.
fn graph_file(dir: &Path, name: &str, source: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, crate::common::with_meta(source)).expect("graph");
    path
}

#[test]
fn every_example_graph_passes_runner_test() {
    let output = runner()
        .arg("test")
        .arg(workspace().join("graphs"))
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last = stdout.lines().last().unwrap_or("");
    assert!(last.ends_with(" passed, 0 failed"), "{last}");
    let passed: usize = last
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("count");
    assert!(passed >= 4, "{stdout}");
}

/// A test file's `files` (seeded) and `expect.files`/`absent` (checked) are confined to the
/// case's own folder, by the rules of the graph's fs tools: an absolute path or `..` is refused,
/// nothing is written outside and nothing outside is read.
#[test]
fn runner_test_keeps_seeded_and_checked_files_inside_the_cases_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let outside = dir.path().join("outside.txt");
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "secret").expect("secret");
    std::fs::write(dir.path().join("one.js"), ONE).expect("graph");
    let cases = json!({"cases": [
        {"name": "absolute seed", "files": {outside.display().to_string(): "x"}, "expect": {"status": "completed"}},
        {"name": "parent seed", "files": {"../x.txt": "x"}, "expect": {"status": "completed"}},
        {"name": "absolute check", "expect": {"status": "completed", "files": {secret.display().to_string(): "secret"}}},
        {"name": "inside", "files": {"a/b.txt": "x"}, "expect": {"status": "completed", "files": {"a/b.txt": "x"}, "absent": ["c.txt"]}},
    ]});
    std::fs::write(dir.path().join("one.test.json"), cases.to_string()).expect("test");
    let output = runner().arg("test").arg(dir.path()).output().expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        !outside.exists(),
        "nothing is written outside the case's folder"
    );
    for expected in [
        "FAIL absolute seed",
        "is absolute; use a path relative to the folder",
        "FAIL parent seed",
        "uses `..`; paths must stay inside the folder",
        "FAIL absolute check",
        "PASS inside",
    ] {
        assert!(stdout.contains(expected), "{expected}: {stdout}");
    }
    assert!(
        stdout.trim_end().ends_with("1 passed, 3 failed"),
        "{stdout}"
    );
}

/// `runner build` of `source` (in `dir`) refuses the graph's own source, a folder and a missing
/// folder as its output, before it builds anything.
fn bad_build_outputs_are_refused_before_building(dir: &std::path::Path, source: &std::path::Path) {
    let missing = dir.join("missing").join("one.wasm");
    for (output, says) in [
        (source, "is the graph's own source"),
        (dir, "is a folder"),
        (missing.as_path(), "does not exist; create it first"),
    ] {
        let result = runner()
            .arg("build")
            .arg(source)
            .arg("-o")
            .arg(output)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert_eq!(result.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(says), "{says}: {stderr}");
        assert!(
            !stderr.contains("building"),
            "refused before building: {stderr}"
        );
    }
}

/// `runner build` refuses an output it must not or cannot write before building (the graph's
/// own source, a folder, a missing folder), and a built component runs with `runner run`.
#[test]
fn runner_build_refuses_a_bad_output_and_its_component_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("one.js");
    let script = "export const meta = {name: 'One', slug: 'one', version: '1'};\nexport default async function (a) { return {twice: a.n * 2}; }";
    std::fs::write(&source, script).expect("graph");
    bad_build_outputs_are_refused_before_building(dir.path(), &source);
    assert_eq!(std::fs::read_to_string(&source).expect("source"), script);
    let component = dir.path().join("one.wasm");
    let built = runner()
        .arg("build")
        .arg(&source)
        .arg("-o")
        .arg(&component)
        .output()
        .expect("runs");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&built.stdout).trim(),
        component.display().to_string()
    );
    // Building again, over the first component, with a bare relative name.
    let rebuilt = runner()
        .current_dir(dir.path())
        .args(["build", "one.js", "-o", "one.wasm"])
        .output()
        .expect("runs");
    assert!(
        rebuilt.status.success(),
        "{}",
        String::from_utf8_lossy(&rebuilt.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&rebuilt.stdout).trim(), "one.wasm");
    // No temporary file is left behind.
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["one.js", "one.wasm"]);
    let ran = runner()
        .arg("run")
        .arg(&component)
        .args(["--args", r#"{"n": 21}"#])
        .output()
        .expect("runs");
    assert_eq!(ran.status.code(), Some(0));
    assert_eq!(stdout_json(&ran)["result"], json!({"twice": 42}));
}

#[test]
fn runner_test_fails_on_a_failing_case() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("one.js"), ONE).expect("graph");
    std::fs::write(
        dir.path().join("one.test.json"),
        r#"{"expect": {"status": "completed", "result": 2}}"#,
    )
    .expect("test");
    let output = runner().arg("test").arg(dir.path()).output().expect("runs");
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("FAIL one #1") && stdout.contains("expected 2, got 1"),
        "{stdout}"
    );
    assert!(
        stdout.trim_end().ends_with("0 passed, 1 failed"),
        "{stdout}"
    );
}

#[test]
fn run_prints_one_json_object_and_exits_by_status() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ok = dir.path().join("ok.js");
    std::fs::write(
        &ok,
        "export default async function (args) { return {twice: args.n * 2}; }\nexport const meta = {name: 'Ok', slug: 'ok', version: '1'};",
    )
    .expect("graph");
    let output = runner()
        .arg("run")
        .arg(&ok)
        .args(["--args", r#"{"n": 21}"#])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0));
    let json = stdout_json(&output);
    assert_eq!(json["status"], "completed");
    assert_eq!(json["result"], json!({"twice": 42}));
    assert_eq!(json["error"], Value::Null);
    assert_eq!(json["total_tokens"], 0);
    assert_eq!(json["location"], Value::Null);
    let keys: Vec<&String> = json.as_object().expect("object").keys().collect();
    assert_eq!(keys.len(), 6);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("run completed"),
        "the trace goes to stderr: {stderr}"
    );

    let bad = dir.path().join("bad.js");
    std::fs::write(
        &bad,
        "export default async function () { throw new Error('nope'); }\nexport const meta = {name: 'Bad', slug: 'bad', version: '1'};",
    )
    .expect("graph");
    let output = runner().arg("run").arg(&bad).output().expect("runs");
    assert_eq!(output.status.code(), Some(1));
    let json = stdout_json(&output);
    assert_eq!(json["status"], "failed");
    let error = json["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with(&format!("{}:1:42: Error: nope\n", bad.display())),
        "{error}"
    );
    assert_eq!(
        json["location"],
        json!({"file": bad.display().to_string(), "line": 1, "column": 42})
    );
}

#[test]
fn the_result_keeps_the_graphs_key_order_in_both_engines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = graph_file(
        dir.path(),
        "order.js",
        "export default function () { return {zeta: 1, alpha: {y: 2, b: 3}, mid: [{q: 1, p: 2}]}; }",
    );
    for engine in ["wasm", "boa"] {
        let output = runner()
            .arg("run")
            .args(["--engine", engine])
            .arg(&graph)
            .output()
            .expect("runs");
        assert_eq!(output.status.code(), Some(0), "{engine}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            stdout.contains(r#""result":{"zeta":1,"alpha":{"y":2,"b":3},"mid":[{"q":1,"p":2}]}"#),
            "{engine}: {stdout}"
        );
    }
}

#[test]
fn a_wasm_file_that_is_not_a_component_is_refused_not_run_as_javascript() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fake = dir.path().join("graph.wasm");
    // Valid JavaScript, so only the name says it should have been a component.
    std::fs::write(&fake, "export default function () { return 1; }").expect("file");
    let output = runner().arg("run").arg(&fake).output().expect("runs");
    assert_ne!(output.status.code(), Some(0));
    assert!(output.stdout.is_empty(), "no outcome is printed");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("is not a WebAssembly component") && stderr.contains("runner build"),
        "{stderr}"
    );
}

#[test]
fn usage_errors_exit_2_without_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = graph_file(dir.path(), "write.js", WRITE);
    for args in [
        vec![
            "run".to_owned(),
            graph.display().to_string(),
            "--args".into(),
            "[1,2]".into(),
        ],
        vec![
            "run".to_owned(),
            graph.display().to_string(),
            "--args".into(),
            "{nope".into(),
        ],
        vec![
            "run".to_owned(),
            dir.path().join("missing.js").display().to_string(),
        ],
        vec![
            "run".to_owned(),
            graph.display().to_string(),
            "--max-concurrency".into(),
            "0".into(),
        ],
        vec![
            "run".to_owned(),
            graph.display().to_string(),
            "--fuel".into(),
            "0".into(),
        ],
        vec![
            "run".to_owned(),
            graph.display().to_string(),
            "--bogus".into(),
        ],
    ] {
        let output = runner().args(&args).output().expect("runs");
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn fs_write_is_denied_unless_allowed_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = graph_file(dir.path(), "write.js", WRITE);
    let folder = dir.path().join("folder");
    std::fs::create_dir(&folder).expect("folder");
    let output = runner()
        .arg("run")
        .arg(&graph)
        .args(["--args", r#"{"path": "notes/a.md"}"#, "--folder"])
        .arg(&folder)
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1));
    let json = stdout_json(&output);
    assert!(
        json["error"]
            .as_str()
            .unwrap_or("")
            .starts_with("denied: tool fs.write is not allowed"),
        "{json}"
    );
    assert!(!folder.join("notes").exists(), "nothing was written");

    // `--ask` with no terminal to ask on is a denial that says how to allow it.
    let output = runner()
        .arg("run")
        .arg(&graph)
        .args([
            "--args",
            r#"{"path": "a.md"}"#,
            "--ask",
            "fs.write",
            "--folder",
        ])
        .arg(&folder)
        .output()
        .expect("runs");
    let json = stdout_json(&output);
    assert!(
        json["error"]
            .as_str()
            .unwrap_or("")
            .contains("--allow fs.write"),
        "{json}"
    );
    assert!(!folder.join("a.md").exists());

    let output = runner()
        .arg("run")
        .arg(&graph)
        .args([
            "--args",
            r#"{"path": "notes/a.md"}"#,
            "--allow",
            "fs.write",
            "--folder",
        ])
        .arg(&folder)
        .output()
        .expect("runs");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert_eq!(
        std::fs::read_to_string(folder.join("notes/a.md")).expect("written"),
        "hello"
    );
}

#[test]
fn escapes_are_refused_even_when_allowed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = graph_file(dir.path(), "write.js", WRITE);
    let folder = dir.path().join("folder");
    let outside = dir.path().join("outside");
    std::fs::create_dir(&folder).expect("folder");
    std::fs::create_dir(&outside).expect("outside");
    #[cfg(unix)]
    std::os::unix::fs::symlink(&outside, folder.join("link")).expect("symlink");
    let absolute = outside.join("abs.md").display().to_string();
    let mut paths = vec![
        "../outside/up.md".to_owned(),
        "a/../../outside/up2.md".to_owned(),
        absolute,
    ];
    if cfg!(unix) {
        paths.push("link/through.md".to_owned());
    }
    for path in paths {
        let output = runner()
            .arg("run")
            .arg(&graph)
            .args([
                "--args",
                &json!({"path": path}).to_string(),
                "--allow",
                "fs.write",
                "--folder",
            ])
            .arg(&folder)
            .output()
            .expect("runs");
        assert_eq!(output.status.code(), Some(1), "{path}");
        let json = stdout_json(&output);
        assert!(
            json["error"].as_str().unwrap_or("").starts_with("denied:"),
            "{path}: {json}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&outside).expect("outside").count(),
        0,
        "nothing escaped"
    );
}

#[test]
fn check_prints_meta_or_names_line_and_column() {
    let output = runner()
        .arg("check")
        .arg(workspace().join("graphs/triage.js"))
        .output()
        .expect("runs");
    assert!(output.status.success());
    let meta: Value = serde_json::from_slice(&output.stdout).expect("meta JSON");
    assert_eq!(meta["slug"], "triage");

    let dir = tempfile::tempdir().expect("tempdir");
    let broken = dir.path().join("broken.js");
    std::fs::write(&broken, "export const meta = {name: 'x', slug: 'x', version: '1'};\nexport default async function () {\n  return 1 +;\n}\n").expect("graph");
    let output = runner().arg("check").arg(&broken).output().expect("runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with(&format!("{}:3:", broken.display())) && stderr.contains("syntax error"),
        "{stderr}"
    );

    let no_meta = dir.path().join("nometa.js");
    std::fs::write(&no_meta, "export default async function () {}").expect("graph");
    let output = runner().arg("check").arg(&no_meta).output().expect("runs");
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no meta export"));
}

#[cfg(unix)]
#[test]
fn ctrl_c_cancels_the_run_and_exits_3() {
    use std::io::Read;
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = graph_file(
        dir.path(),
        "slow.js",
        "export default async function (a, g) { await g.sleep(600000); }",
    );
    let mut child = runner()
        .arg("run")
        .arg(&graph)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawns");
    // Wait until the run has started (the trace says so) before interrupting it.
    let mut stderr = child.stderr.take().expect("stderr");
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&seen).contains("started") {
        if stderr.read(&mut byte).expect("reads") == 0 {
            break;
        }
        seen.push(byte[0]);
    }
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let output = child.wait_with_output().expect("exits");
    assert_eq!(output.status.code(), Some(3));
    let json = stdout_json(&output);
    assert_eq!(json["status"], "cancelled");
}

#[test]
fn a_hostile_file_beside_the_graph_cannot_take_runner_run_down() {
    // The graphs folder (by default the graph's own) is described to build the catalog of
    // nested graphs, which evaluates each file's top level. That happens in the sandbox:
    // a memory bomb or an endless loop there only gets its file skipped.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("bomb.js"),
        "let s = 'x'; for (;;) s = s + s; export default () => 1;",
    )
    .expect("bomb");
    std::fs::write(
        dir.path().join("spin.js"),
        "function spin() { for (let i = 0; i < 1000; i++) {} } for (;;) spin(); export default () => 1;",
    )
    .expect("spin");
    let graph = graph_file(
        dir.path(),
        "ok.js",
        "export default async function () { return 'fine'; }",
    );
    let output = runner()
        .arg("run")
        .arg(&graph)
        .args(["--engine", "wasm", "--timeout", "2"])
        .output()
        .expect("runs");
    let json = stdout_json(&output);
    assert_eq!(json["status"], "completed", "{json}");
    assert_eq!(json["result"], "fine");
}

/// A pseudo-terminal: the test keeps the controlling end, `runner` gets the other as its stdin, so
/// it asks for approvals on "the terminal". `None` where the machine has no pseudo-terminals (a
/// container without /dev/pts).
#[cfg(target_os = "linux")]
fn pseudo_terminal() -> Option<(std::fs::File, std::fs::File)> {
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    // SAFETY: plain libc calls on a descriptor this function owns; the name buffer is
    // NUL-terminated by ptsname_r on success.
    let (controller, name) = unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        if fd < 0 {
            return None;
        }
        let controller = std::fs::File::from_raw_fd(fd);
        if libc::grantpt(fd) != 0 || libc::unlockpt(fd) != 0 {
            return None;
        }
        let mut name = [0 as libc::c_char; 128];
        if libc::ptsname_r(fd, name.as_mut_ptr(), name.len()) != 0 {
            return None;
        }
        let name = std::ffi::CStr::from_ptr(name.as_ptr())
            .to_string_lossy()
            .into_owned();
        (controller, name)
    };
    let terminal = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(name)
        .ok()?;
    Some((controller, terminal))
}

/// Reads `stderr` on a thread of its own: each approval question (`[y/N]`) is signalled on the
/// receiver, and the thread returns the whole trace.
#[cfg(target_os = "linux")]
fn watch_questions(
    stderr: std::process::ChildStderr,
) -> (
    std::sync::mpsc::Receiver<()>,
    std::thread::JoinHandle<String>,
) {
    use std::io::BufRead;
    let (questions, asked) = std::sync::mpsc::channel();
    let trace = std::thread::spawn(move || {
        let mut seen = String::new();
        for chunk in std::io::BufReader::new(stderr).split(b' ') {
            let Ok(chunk) = chunk else { break };
            let word = String::from_utf8_lossy(&chunk).into_owned();
            if word.contains("[y/N]") {
                let _ = questions.send(());
            }
            seen.push_str(&word);
            seen.push(' ');
        }
        seen
    });
    (asked, trace)
}

/// Waits for `child` to exit; kills it and fails after a minute.
#[cfg(target_os = "linux")]
fn exit_within_a_minute(child: &mut std::process::Child) -> std::process::ExitStatus {
    use std::time::Duration;
    let waiting_since = runner::clock::Stopwatch::start();
    loop {
        if let Some(status) = child.try_wait().expect("waits") {
            return status;
        }
        if waiting_since.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("runner was still running a minute after its run's deadline");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `--ask` on a terminal: an answer approves one call, and a question still open when the run
/// ends does not keep `runner` waiting for a line (it used to, until someone pressed Enter).
#[cfg(target_os = "linux")]
#[test]
fn terminal_approvals_answer_and_an_open_question_does_not_outlive_the_run() {
    use std::io::Write;
    use std::time::Duration;
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = graph_file(
        dir.path(),
        "ask.js",
        r#"export const meta = {name: "Ask", slug: "ask", version: "1"};
export default async function (args, g) {
  await g.tool("fs.write", {path: "first.txt", text: "yes"});
  return g.tool("fs.write", {path: "second.txt", text: "never"});
}"#,
    );
    let Some((mut controller, terminal)) = pseudo_terminal() else {
        eprintln!("skipped: this machine has no pseudo-terminals");
        return;
    };
    let mut child = runner()
        .args([
            "run",
            "--engine",
            "boa",
            "--timeout",
            "4",
            "--ask",
            "fs.write",
        ])
        .arg("--folder")
        .arg(dir.path())
        .arg(&graph)
        .stdin(terminal)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runner starts");
    let (asked, trace) = watch_questions(child.stderr.take().expect("stderr"));
    asked
        .recv_timeout(Duration::from_secs(60))
        .expect("the first question is asked");
    controller.write_all(b"y\n").expect("answered");
    asked
        .recv_timeout(Duration::from_secs(60))
        .expect("the second question is asked");
    // Not answered. The run's 4 s deadline ends it; runner must then exit on its own.
    let status = exit_within_a_minute(&mut child);
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut stdout)
        .expect("stdout");
    let trace = trace.join().expect("trace");
    assert_eq!(status.code(), Some(1), "{stdout}\n{trace}");
    let outcome: Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(outcome["status"], "failed", "{outcome}");
    assert!(
        outcome["error"]
            .as_str()
            .is_some_and(|e| e.contains("deadline")),
        "{outcome}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("first.txt")).expect("approved write"),
        "yes"
    );
    assert!(!dir.path().join("second.txt").exists());
    drop(controller);
}

#[test]
fn the_trace_shows_a_graphs_control_characters_escaped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = graph_file(
        dir.path(),
        "redraw.js",
        r#"export const meta = {name: "Redraw", slug: "redraw", version: "1"};
export default async function (args, g) {
  g.log("\u001b[1A\rrun completed: 0 tokens\u0007");
  throw new Error("gone\u001b[2J");
}"#,
    );
    let output = runner()
        .args(["run", "--engine", "boa"])
        .arg(&graph)
        .output()
        .expect("runs");
    let trace = String::from_utf8_lossy(&output.stderr);
    assert!(
        !trace.contains('\u{1b}') && !trace.contains('\r') && !trace.contains('\u{7}'),
        "{trace:?}"
    );
    assert!(
        trace.contains("log: \\u{1b}[1A\\rrun completed: 0 tokens\\u{7}")
            && trace.contains("gone\\u{1b}[2J"),
        "{trace}"
    );
    // stdout is JSON, which escapes the characters itself.
    // The error starts with where the graph threw (the file as the command named it).
    let error = stdout_json(&output)["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        error.lines().next(),
        Some(format!("{}:4:9: Error: gone\u{1b}[2J", graph.display()).as_str())
    );
}

/// Naming the wrong file (an endless device, a huge file) is an error after reading at most the
/// limit, not a process that reads until the memory is full (it used to take 14 GB in 20 s).
#[cfg(unix)]
#[test]
fn an_endless_or_oversized_input_file_is_refused_at_its_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = graph_file(dir.path(), "one.js", ONE);
    let big = dir.path().join("big.js");
    std::fs::write(&big, "a".repeat(graph_js::MAX_SCRIPT_BYTES + 1)).expect("big");
    let graph = graph.display().to_string();
    let big = big.display().to_string();
    for (args, says) in [
        (vec!["run", "/dev/zero"], "larger than 1048576 bytes"),
        (vec!["check", "/dev/zero"], "larger than 1048576 bytes"),
        (vec!["run", big.as_str()], "larger than 1048576 bytes"),
        (
            vec!["run", graph.as_str(), "--args", "@/dev/zero"],
            "cannot read the arguments file /dev/zero: it is larger than 16777216 bytes",
        ),
        (
            vec!["run", graph.as_str(), "--replies", "/dev/zero"],
            "cannot read the replies file /dev/zero: it is larger than 16777216 bytes",
        ),
        (
            vec!["run", graph.as_str(), "--providers", "/dev/zero"],
            "cannot read the providers file /dev/zero: it is larger than 1048576 bytes",
        ),
    ] {
        let output = runner()
            .args(&args)
            .env_remove("RUST_BACKTRACE")
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        // Said once, not repeated by the error chain.
        assert_eq!(stderr.matches("larger than").count(), 1, "{stderr}");
    }
}

#[test]
fn a_write_cut_short_leaves_the_old_file_whole() {
    // The file-size limit (`ulimit -f`) kills `runner` (SIGXFSZ) 100 KiB into writing a
    // 600 KB text: the owner's file must still hold its old content, not a cut-off new one.
    let dir = tempfile::tempdir().expect("tempdir");
    let folder = dir.path().join("folder");
    std::fs::create_dir(&folder).expect("folder");
    std::fs::write(folder.join("notes.md"), "the old notes").expect("notes");
    let graph = graph_file(
        dir.path(),
        "big.js",
        r#"export const meta = {name: "Big", slug: "big", version: "1"};
export default async function (args, g) { return g.tool("fs.write", {path: "notes.md", text: "x".repeat(600000)}); }"#,
    );
    let output = Command::new("sh")
        .arg("-c")
        .arg("ulimit -f 100 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_runner"))
        .args(["run", "--engine", "boa", "--allow", "fs.write", "--folder"])
        .arg(&folder)
        .arg(&graph)
        .output()
        .expect("runs");
    assert!(!output.status.success(), "{output:?}");
    assert_eq!(
        std::fs::read_to_string(folder.join("notes.md")).expect("notes"),
        "the old notes"
    );
}

#[test]
fn runner_test_names_a_missing_folder_and_says_why_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing");
    let output = runner().arg("test").arg(&missing).output().expect("runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot read the test folder {}",
            missing.display()
        )),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
}

/// Reads the time and random source; waits `args.wait` ms (a minute by default).
const TIME_AND_RANDOM: &str = r#"
export const meta = {name: "Time", slug: "time", version: "1"};
export default async function (args) {
  const t0 = Date.now();
  await new Promise((resolve) => setTimeout(resolve, args.wait ?? 60000));
  return [t0, Date.now() - t0, Math.random(), crypto.randomUUID()];
}"#;

#[test]
fn seed_and_clock_replay_a_run_and_the_trace_names_the_seed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = graph_file(dir.path(), "time.js", TIME_AND_RANDOM);
    let run = |engine: &str, extra: &[&str]| {
        let output = runner()
            .args(["run", "--engine", engine])
            .arg(&graph)
            .args(extra)
            .output()
            .expect("runs");
        assert!(output.status.success(), "{output:?}");
        (
            stdout_json(&output)["result"].clone(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let fixed = ["--seed", "12", "--clock", "fixed:2026-01-01T00:00:00Z"];
    let (boa, trace) = run("boa", &fixed);
    assert!(
        trace.contains("(engine boa, seed 12, clock fixed:2026-01-01T00:00:00Z)"),
        "{trace}"
    );
    assert_eq!(boa[0], json!(1_767_225_600_000_i64));
    assert_eq!(boa[1], json!(60000));
    assert_eq!(run("wasm", &fixed).0, boa, "the engines disagree");
    // A real run names its fresh seed; --seed with it replays the randomness.
    let (real, trace) = run("wasm", &["--clock", "real", "--args", r#"{"wait": 1}"#]);
    let seed = trace
        .split("seed ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .expect("the trace names the seed")
        .to_owned();
    let (replayed, _) = run(
        "wasm",
        &["--seed", &seed, "--clock", "fixed:2026-01-01T00:00:00Z"],
    );
    assert_eq!(
        replayed[2], real[2],
        "seed {seed} did not replay Math.random"
    );
    assert_eq!(replayed[3], real[3], "seed {seed} did not replay the UUID");
}

#[test]
fn runner_test_repeats_a_time_and_random_graph_50_times_green() {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in ["backoff.js", "backoff.test.json"] {
        std::fs::copy(workspace().join("graphs").join(name), dir.path().join(name)).expect("copy");
    }
    let output = runner()
        .arg("test")
        .arg(dir.path())
        .args(["--repeat", "50"])
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.ends_with("150 passed, 0 failed over 50 rounds\n"),
        "{stdout}"
    );
}

#[test]
fn a_clock_that_is_not_one_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = graph_file(dir.path(), "one.js", ONE);
    for clock in ["tomorrow", "fixed:2026-02-30T00:00:00Z", "fixed:2026-01-01"] {
        let output = runner()
            .arg("run")
            .arg(&graph)
            .args(["--clock", clock])
            .output()
            .expect("runs");
        assert_eq!(output.status.code(), Some(2), "{clock}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("UTC time"), "{clock}: {stderr}");
    }
    // `--repeat` runs 1 to 10,000 rounds.
    for (repeat, code) in [("0", 2), ("10001", 2), ("10000", 2)] {
        let mut command = runner();
        command
            .arg("test")
            .arg(dir.path())
            .args(["--repeat", repeat]);
        // 10,000 is accepted; the empty folder then stops it as a usage error of its own.
        let output = command.output().expect("runs");
        assert_eq!(output.status.code(), Some(code), "--repeat {repeat}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let accepted = stderr.contains("no *.test.json files");
        assert_eq!(accepted, repeat == "10000", "--repeat {repeat}: {stderr}");
    }
}

/// Writes `case` as `dir/NAME.test.json` and runs `runner test dir --repeat 200` on `engine`:
/// the output and its stdout.
fn repeat_case(
    dir: &Path,
    name: &str,
    case: &serde_json::Value,
    engine: &str,
) -> (std::process::Output, String) {
    std::fs::write(dir.join(format!("{name}.test.json")), case.to_string()).expect("test");
    let output = runner()
        .arg("test")
        .arg(dir)
        .args(["--engine", engine, "--repeat", "200"])
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    (output, stdout)
}

/// `runner test --repeat` fails a case that fixes its seed and clock yet does not repeat its
/// first round, naming the case, the round and the first difference. Here the rounds differ
/// because the graph races: eight writes to one file side by side, and whichever the machine
/// finishes last is what the graph reads back.
#[test]
fn runner_test_repeat_names_the_round_and_the_first_difference() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("race.js"),
        r#"export const meta = {name: "Race", slug: "race", version: "1"};
export default async function (args, g) {
  await Promise.all(["1", "2", "3", "4", "5", "6", "7", "8"].map((text) => g.tool("fs.write", {path: "last.txt", text})));
  return (await g.tool("fs.read", {path: "last.txt"})).text;
}
"#,
    )
    .expect("graph");
    let case = json!({
        "name": "race",
        "seed": 1,
        "clock": "fixed:2026-01-01T00:00:00Z",
        "allow": ["fs.write", "fs.read"],
        "replies": {"replies": []},
        "expect": {"status": "completed"}
    });
    for engine in ["boa", "wasm"] {
        let (output, stdout) = repeat_case(dir.path(), "race", &case, engine);
        assert_eq!(output.status.code(), Some(1), "{engine}: {stdout}");
        let fail = stdout
            .lines()
            .find(|l| l.starts_with("FAIL race (round "))
            .unwrap_or_else(|| panic!("{engine}: no failing round: {stdout}"));
        let round = fail
            .trim_start_matches("FAIL race (round ")
            .trim_end_matches(')');
        let problem = format!(
            "round {round} differs from round 1 under a fixed seed and clock: result: round 1 had \""
        );
        assert!(stdout.contains(&problem), "{engine}: {stdout}");
        assert!(
            stdout.contains(&format!("\", round {round} had \"")),
            "{engine}: {stdout}"
        );
        // Every round passed its expectations; only the differing ones failed.
        let last = stdout.lines().last().unwrap_or("");
        assert!(
            last.ends_with(" failed over 200 rounds"),
            "{engine}: {last}"
        );
    }
}

/// A mock reply limited by `times` that eight agents started together all fit goes to the first
/// four the graph started, in every round and both engines: on a fixed clock the mock chooses
/// the turns asked for at one moment in the agents' order, not in the order the machine ran them
/// (which differed in about one round in three before).
#[test]
fn a_reply_limited_by_times_goes_to_the_agents_in_the_order_the_graph_started_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("times.js"),
        r#"export const meta = {name: "Times", slug: "times", version: "1"};
export default async function (args, g) {
  const replies = await Promise.all([1, 2, 3, 4, 5, 6, 7, 8].map((i) => g.agent({label: `a${i}`, prompt: "p"})));
  return replies.map((r) => r.text).join("");
}
"#,
    )
    .expect("graph");
    let case = json!({
        "name": "times",
        "seed": 1,
        "clock": "fixed:2026-01-01T00:00:00Z",
        "max_concurrency": 8,
        "replies": {"replies": [{"text": "x", "tokens": 1, "times": 4}], "default": {"text": "o", "tokens": 1}},
        "expect": {"status": "completed", "result": "xxxxoooo", "total_tokens": 8}
    });
    for engine in ["boa", "wasm"] {
        let (output, stdout) = repeat_case(dir.path(), "times", &case, engine);
        assert!(output.status.success(), "{engine}: {stdout}");
        assert!(
            stdout.ends_with("200 passed, 0 failed over 200 rounds\n"),
            "{engine}: {stdout}"
        );
    }
}
