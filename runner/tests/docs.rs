//! The README and `docs/` against the real `runner` command line and the repository: every
//! `runner …` line in their code blocks parses (`relay/tests/docs.rs` checks the `relay …`
//! lines the same way), the README stays a front page whose test command is what CI runs, and
//! every relative link leads to a file and heading that exist.

use std::path::Path;

use crate::common::doc_commands::{self, DocCommand};

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
}

fn runner() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_runner"))
}

#[test]
fn every_runner_command_line_in_the_docs_parses() {
    let commands = doc_commands::commands_of(workspace(), "runner");
    // Not vacuous: the pages show every subcommand.
    for subcommand in ["init", "check", "run", "test", "build"] {
        assert!(
            commands
                .iter()
                .any(|c| c.args.first().is_some_and(|a| a == subcommand)),
            "no `runner {subcommand}` line found in README.md or docs/: {commands:#?}"
        );
    }
    let failures = doc_commands::unparsed(runner(), workspace(), &commands);
    assert!(
        failures.is_empty(),
        "{} of the {} runner command lines in README.md and docs/ do not parse with the real CLI:\n{}",
        failures.len(),
        commands.len(),
        failures.join("\n")
    );
}

/// A flag the command line lacks (here a typo in a continued line) fails, naming the page, the
/// line the command starts on, and the flag; the good line beside it passes.
#[test]
fn a_runner_line_with_a_flag_the_cli_lacks_is_named_by_page_and_line() {
    let page = "Some prose naming `runner run --nonsense`, which is not checked.\n\n\
                ```sh\n\
                runner run graphs/triage.js --args '{\"ticket\": \"x\"}' --max-tokens 100\n\
                runner test graphs/ \\\n    --repat 5      # a typo\n\
                ```\n";
    let commands = doc_commands::commands("docs/example.md", page);
    assert_eq!(commands.len(), 2, "{commands:#?}");
    let failures = doc_commands::unparsed(runner(), workspace(), &commands);
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert!(
        failures[0]
            .starts_with("docs/example.md:5: `runner test graphs/ --repat 5` does not parse"),
        "{}",
        failures[0]
    );
    assert!(failures[0].contains("'--repat'"), "{}", failures[0]);
}

fn command(line: usize, program: &str, args: &[&str]) -> DocCommand {
    DocCommand {
        file: "docs/shell.md".to_owned(),
        line,
        program: program.to_owned(),
        args: args.iter().map(|a| (*a).to_owned()).collect(),
    }
}

/// The lines are read as a shell reads them: quotes, continuations, comments, pipes, background
/// jobs, redirections, assignments, prompts and `cargo run -p …`; other programs and lines
/// outside code blocks are not commands.
#[test]
fn the_docs_command_lines_are_read_as_a_shell_reads_them() {
    let page = r#"relay serve is prose here.

```sh
relay serve --db relay.db &                         # the service
printf '%s\n' "$PW" | relay admin owner set-password ann --password-stdin
RUST_LOG=debug runner run "my graph.js" --args '{"a": "b c"}' 2>/dev/null
$ cargo run -q --release -p relay -- sim --mode longpoll > out.txt
relay admin db backup /backups/relay-$(date +%F-%H%M).db && relay admin db check x.db
cargo test --workspace
runner test graphs/ \
    --json    # → one object a line
   # relay demo, commented out
echo relay demo
```
"#;
    assert_eq!(
        doc_commands::commands("docs/shell.md", page),
        vec![
            command(4, "relay", &["serve", "--db", "relay.db"]),
            command(
                5,
                "relay",
                &["admin", "owner", "set-password", "ann", "--password-stdin"]
            ),
            command(
                6,
                "runner",
                &["run", "my graph.js", "--args", r#"{"a": "b c"}"#]
            ),
            command(7, "relay", &["sim", "--mode", "longpoll"]),
            command(
                8,
                "relay",
                &[
                    "admin",
                    "db",
                    "backup",
                    "/backups/relay-$(date +%F-%H%M).db"
                ]
            ),
            command(8, "relay", &["admin", "db", "check", "x.db"]),
            command(10, "runner", &["test", "graphs/", "--json"]),
        ]
    );
}

/// The README is a front page (at most 200 lines), and its set-up block's test command is the
/// command `.ci/run` ends with, so CI runs exactly what the README tells a newcomer to run.
#[test]
fn the_readme_is_a_front_page_whose_test_command_is_what_ci_runs() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines; a front page has at most 200: move reference text to docs/"
    );
    let setup = readme
        .split("## Set-up: two commands")
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|block| block.split("```").next())
        .expect("the README's set-up block");
    let commands = shell_commands(setup);
    assert_eq!(commands.len(), 2, "the two commands: {commands:?}");
    let ci = std::fs::read_to_string(workspace().join(".ci/run")).expect(".ci/run");
    assert_eq!(
        shell_commands(&ci).last(),
        commands.last(),
        ".ci/run must end with the README's test command"
    );
}

/// The lines of a shell text that are neither blank nor comments.
fn shell_commands(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect()
}

/// Every relative link of the README and of `docs/` names a file that exists and, with an
/// anchor, a heading of that page (GitHub's anchors). Links into `target/` (screenshots the
/// browser tests leave) are not checked.
#[test]
fn every_relative_link_of_the_readme_and_docs_leads_somewhere() {
    let root = workspace();
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in doc_commands::pages(root)
        .into_iter()
        .chain([root.join("ARCHITECTURE.md")])
    {
        let text = std::fs::read_to_string(&page).expect("a page");
        let dir = page.parent().expect("a page's folder");
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let file = if path.is_empty() {
                page.clone()
            } else {
                lexical(&dir.join(path))
            };
            if file
                .strip_prefix(root)
                .is_ok_and(|p| p.starts_with("target"))
            {
                continue;
            }
            checked += 1;
            let exists = file.exists();
            let anchored = anchor.is_empty()
                || std::fs::read_to_string(&file)
                    .is_ok_and(|target| headings(&target).iter().any(|h| anchor_of(h) == anchor));
            if !exists || !anchored {
                broken.push(format!("{}: ({target})", page.display()));
            }
        }
    }
    assert!(checked >= 20, "only {checked} links found");
    assert!(
        broken.is_empty(),
        "links that lead nowhere:\n{}",
        broken.join("\n")
    );
}

/// `path` with its `..` and `.` parts resolved without touching the disk.
fn lexical(path: &Path) -> std::path::PathBuf {
    let mut out = std::path::PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The targets of the markdown links `[text](target)` in `text`.
fn links(text: &str) -> Vec<&str> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &text[at + 2..];
            rest.find(')').map(|end| &rest[..end])
        })
        .collect()
}

/// The headings of a markdown page, outside code blocks, without their `#`s.
fn headings(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            found.push(line.trim_start_matches('#').trim());
        }
    }
    found
}

/// GitHub's anchor for a heading: lower case, spaces as `-`, punctuation other than `-` and
/// `_` dropped.
fn anchor_of(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}
