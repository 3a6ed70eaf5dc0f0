//! One configuration: every `relay serve` flag also reads its `RELAY_*` variable and a key of
//! the `--config` file, with precedence flag > variable > file > default
//! (`relay serve --print-config` shows each value and where it came from); two variables naming
//! different databases are refused, naming both.

use std::path::Path;
use std::process::{Command, Output};

/// Each setting with three values: the file's, the variable's, the flag's. A repeatable flag's
/// values are lists (the variable's comma-separated); a switch's file and variable values are
/// `true` and `false`, and its flag sets it.
const SETTINGS: &[(&str, [&str; 3])] = &[
    (
        "listen",
        ["127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003"],
    ),
    ("db", ["file.db", "variable.db", "flag.db"]),
    (
        "public-url",
        [
            "https://file.example",
            "https://variable.example",
            "https://flag.example",
        ],
    ),
    ("access-token-ttl", ["10m", "20m", "30m"]),
    ("dev", ["true", "false", ""]),
    (
        "allowed-origin",
        [
            "https://a.example",
            "https://b.example,https://c.example",
            "https://d.example",
        ],
    ),
    ("trust-proxy", ["true", "false", ""]),
    (
        "trusted-proxy",
        ["10.0.0.0/8", "10.1.0.0/16,10.2.0.0/16", "10.3.0.0/16"],
    ),
    ("drain-timeout", ["11s", "12s", "13s"]),
    ("silence-timeout-minutes", ["31", "32", "33"]),
    ("task-lease-seconds", ["41", "42", "43"]),
    (
        "metrics-listen",
        ["127.0.0.1:2001", "127.0.0.1:2002", "127.0.0.1:2003"],
    ),
    ("db-check-interval", ["2h", "3h", "4h"]),
    ("db-check-limit", ["61s", "62s", "63s"]),
    ("log-format", ["json", "text", "json"]),
    ("log-mcp-messages", ["true", "false", ""]),
    ("max-mcp-sessions", ["101", "102", "103"]),
    ("max-mcp-sessions-per-agent", ["11", "12", "13"]),
    ("mcp-session-idle-seconds", ["301", "302", "303"]),
    ("header-read-timeout-seconds", ["21", "22", "23"]),
    ("body-read-timeout-seconds", ["51", "52", "53"]),
    ("max-connections", ["1001", "1002", "1003"]),
    ("max-connections-per-address", ["251", "252", "253"]),
    ("max-queued-per-agent", ["91", "92", "93"]),
    ("max-queued-per-project", ["901", "902", "903"]),
    ("rate-per-token", ["71", "72", "73"]),
    ("rate-burst", ["81", "82", "83"]),
];

/// Flags that are no setting.
const NOT_SETTINGS: [&str; 2] = ["config", "print-config"];

fn variable(key: &str) -> String {
    format!("RELAY_{}", key.to_uppercase().replace('-', "_"))
}

fn is_list(key: &str) -> bool {
    matches!(key, "allowed-origin" | "trusted-proxy")
}

fn is_switch(key: &str) -> bool {
    matches!(key, "dev" | "trust-proxy" | "log-mcp-messages")
}

/// A TOML value for `value` of `key`.
fn toml_value(key: &str, value: &str) -> String {
    if is_list(key) {
        let items: Vec<String> = value.split(',').map(|v| format!("\"{v}\"")).collect();
        format!("[{}]", items.join(", "))
    } else if is_switch(key) || value.parse::<i64>().is_ok() {
        value.to_owned()
    } else {
        format!("\"{value}\"")
    }
}

/// What `--print-config` shows for `value` of `key` from `source`.
fn printed(key: &str, value: &str, source: &str) -> String {
    let value = if is_switch(key) && value.is_empty() {
        "true"
    } else {
        value
    };
    format!("{key} = {}  # {source}", toml_value(key, value))
}

/// `relay serve --print-config ARGS` with `variables` set and every other `RELAY_*` unset.
fn print_config(args: &[String], variables: &[(String, String)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_relay"));
    command.args(["serve", "--print-config"]).args(args);
    for (name, _) in std::env::vars().filter(|(n, _)| n.starts_with("RELAY_")) {
        command.env_remove(name);
    }
    command.envs(variables.iter().map(|(n, v)| (n, v)));
    command.output().expect("run relay")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("utf-8")
}

/// A config file with every setting's file value.
fn write_file(dir: &Path) -> String {
    let text: String = SETTINGS
        .iter()
        .map(|(key, [file, ..])| format!("{key} = {}\n", toml_value(key, file)))
        .collect();
    let path = dir.join("relay.toml");
    std::fs::write(&path, text).expect("write the config file");
    path.to_str().expect("utf-8").to_owned()
}

fn variables(which: usize) -> Vec<(String, String)> {
    SETTINGS
        .iter()
        .map(|(key, values)| (variable(key), values[which].to_owned()))
        .collect()
}

fn flags() -> Vec<String> {
    let mut args = Vec::new();
    for (key, [.., flag]) in SETTINGS {
        if is_switch(key) {
            args.push(format!("--{key}"));
        } else if is_list(key) {
            args.extend([format!("--{key}"), (*flag).to_owned()]);
        } else {
            args.push(format!("--{key}={flag}"));
        }
    }
    args
}

/// Every line of `shown` the settings should have, each from `source(key)` with value number
/// `which`.
fn assert_each(shown: &str, which: usize, source: impl Fn(&str) -> String) {
    for (key, values) in SETTINGS {
        let line = printed(key, values[which], &source(key));
        assert!(shown.lines().any(|l| l == line), "no `{line}` in:\n{shown}");
    }
}

#[test]
fn every_serve_flag_is_also_a_variable_and_a_file_key() {
    let shown = stdout(&print_config(&[], &[]));
    let keys: Vec<&str> = shown
        .lines()
        .filter_map(|l| l.trim_start_matches("# ").split_once(" = ").map(|(k, _)| k))
        .collect();
    let listed: Vec<&str> = SETTINGS.iter().map(|(key, _)| *key).collect();
    assert_eq!(
        keys, listed,
        "every setting of `relay serve` is in the table"
    );
    let help = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["serve", "--help"])
        .output()
        .expect("help");
    let help = String::from_utf8_lossy(&help.stdout);
    for key in listed {
        assert!(help.contains(&format!("[env: {}=", variable(key))), "{key}");
    }
    for key in NOT_SETTINGS {
        assert!(help.contains(&format!("--{key}")), "{key}");
    }
    assert!(
        help.contains("Precedence: flag > variable > file > default"),
        "{help}"
    );
}

#[test]
fn flags_beat_variables_which_beat_the_file_which_beats_the_default() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = write_file(dir.path());
    let config = vec![format!("--config={file}")];
    let from_file = stdout(&print_config(&config, &[]));
    assert_each(&from_file, 0, |_| file.clone());
    let from_variables = stdout(&print_config(&[], &variables(1)));
    assert_each(&from_variables, 1, variable);
    let both = stdout(&print_config(&config, &variables(1)));
    assert_each(&both, 1, variable);
    let mut all = config.clone();
    all.extend(flags());
    let flagged = stdout(&print_config(&all, &variables(1)));
    assert_each(&flagged, 2, |key| format!("--{key}"));
    // RELAY_CONFIG names the file as --config does.
    let named = vec![("RELAY_CONFIG".to_owned(), file.clone())];
    assert_each(&stdout(&print_config(&[], &named)), 0, |_| file.clone());
}

#[test]
fn the_database_url_variable_beats_the_file_and_two_variables_must_agree() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = write_file(dir.path());
    let url = "postgres://relay:secret@db.internal/relay";
    let shown = stdout(&print_config(
        &[format!("--config={file}")],
        &[("RELAY_DATABASE_URL".to_owned(), url.to_owned())],
    ));
    assert!(
        shown
            .lines()
            .any(|l| l == "db = \"postgres://relay:***@db.internal/relay\"  # RELAY_DATABASE_URL"),
        "{shown}"
    );
    let both = [
        ("RELAY_DB".to_owned(), "private.db".to_owned()),
        ("RELAY_DATABASE_URL".to_owned(), url.to_owned()),
    ];
    for args in [
        vec![],
        vec!["--listen".to_owned(), "127.0.0.1:0".to_owned()],
    ] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_relay"));
        if args.is_empty() {
            command.args(["serve", "--print-config"]);
        } else {
            command.arg("serve").args(&args);
        }
        for (name, _) in std::env::vars().filter(|(n, _)| n.starts_with("RELAY_")) {
            command.env_remove(name);
        }
        let refused = command
            .envs(both.iter().map(|(n, v)| (n, v)))
            .current_dir(dir.path())
            .output()
            .expect("run relay");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{stderr}");
        assert!(
            stderr.contains("RELAY_DB (private.db)")
                && stderr.contains("RELAY_DATABASE_URL (postgres://relay:***@db.internal/relay)"),
            "{stderr}"
        );
        assert!(!stderr.contains("secret"), "{stderr}");
        assert!(
            !dir.path().join("private.db").exists(),
            "no private file was made"
        );
    }
}

#[test]
fn a_config_file_with_an_unknown_key_or_a_bad_value_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (text, expected) in [
        ("lisen = \"127.0.0.1:1\"\n", "unknown key `lisen`"),
        ("listen = [\"a\", \"b\"]\n", "takes one value, not a list"),
        ("rate-burst = 0\n", "rate-burst"),
        ("not toml", "is not TOML"),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, text).expect("write");
        let output = print_config(&[format!("--config={}", path.display())], &[]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{text}: {stderr}");
        assert!(stderr.contains(expected), "{text}: {stderr}");
    }
}
