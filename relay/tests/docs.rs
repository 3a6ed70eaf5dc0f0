//! The README and `docs/` against the real `relay` command line: every `relay …` line in their
//! code blocks parses (`runner/tests/docs.rs` checks the `runner …` lines, the README's length
//! and the links).

use std::path::Path;

use crate::doc_commands;

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
}

fn relay() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_relay"))
}

#[test]
fn every_relay_command_line_in_the_docs_parses() {
    let commands = doc_commands::commands_of(workspace(), "relay");
    // Not vacuous: the pages show every subcommand.
    for subcommand in ["serve", "admin", "desktop", "demo", "sim", "bench"] {
        assert!(
            commands
                .iter()
                .any(|c| c.args.first().is_some_and(|a| a == subcommand)),
            "no `relay {subcommand}` line found in README.md or docs/: {commands:#?}"
        );
    }
    let failures = doc_commands::unparsed(relay(), workspace(), &commands);
    assert!(
        failures.is_empty(),
        "{} of the {} relay command lines in README.md and docs/ do not parse with the real CLI:\n{}",
        failures.len(),
        commands.len(),
        failures.join("\n")
    );
}

/// A flag a subcommand lacks (a desktop flag given to `serve`), an unknown subcommand and a
/// value its parser refuses each fail, naming the page and line; the good line passes.
#[test]
fn a_relay_line_the_cli_refuses_is_named_by_page_and_line() {
    let page = "```sh\n\
                relay desktop run --service http://127.0.0.1:8787 --token D --long-poll\n\
                relay serve --db relay.db --long-poll\n\
                relay admin project rename P Q\n\
                relay desktop run --service http://127.0.0.1:8787 --token D --min-free-space lots\n\
                ```\n";
    let commands = doc_commands::commands("docs/example.md", page);
    assert_eq!(commands.len(), 4, "{commands:#?}");
    let failures = doc_commands::unparsed(relay(), workspace(), &commands);
    let places: Vec<&str> = failures
        .iter()
        .map(|f| f.split(": `").next().unwrap_or_default())
        .collect();
    assert_eq!(
        places,
        [
            "docs/example.md:3",
            "docs/example.md:4",
            "docs/example.md:5"
        ],
        "{failures:#?}"
    );
    assert!(failures[0].contains("'--long-poll'"), "{}", failures[0]);
    assert!(failures[1].contains("'rename'"), "{}", failures[1]);
    assert!(failures[2].contains("'lots'"), "{}", failures[2]);
}
