//! `relay serve`'s settings from one place or another: every flag also reads its `RELAY_*`
//! variable (clap's `env`) and a key of an optional TOML file (`--config FILE` or
//! `RELAY_CONFIG`), the flag's name without its dashes. A flag on the command line wins over
//! its variable, the variable over the file, the file over the built-in default: the file's
//! values become the flags' defaults before the command line is parsed.
//! `relay serve --print-config` shows what is in force and where each value came from.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command};

/// The subcommand the file configures.
const SERVE: &str = "serve";
/// The variable naming the file when `--config` is not given.
const CONFIG_VARIABLE: &str = "RELAY_CONFIG";
/// The variable that may name the database besides `RELAY_DB` (it beats the file's `db`).
const DATABASE_URL_VARIABLE: &str = "RELAY_DATABASE_URL";
/// The largest config file read.
const MAX_CONFIG_BYTES: u64 = 64 * 1024;
/// `serve`'s arguments that are no setting (and so no key of the file).
const NOT_SETTINGS: [&str; 4] = ["config", "print_config", "help", "version"];

/// What `--help` says about the three sources.
pub(crate) const PRECEDENCE: &str = "Every flag can also be set by its RELAY_* variable (shown with each flag) or by a key of the \
--config file, the flag's name without the dashes (public-url = \"https://relay.example.com\", \
trusted-proxy = [\"10.0.0.0/8\"], dev = true). Precedence: flag > variable > file > default.";

/// A config file's settings: each key of `serve` with its value(s) as command-line text.
pub(crate) struct FileSettings {
    path: PathBuf,
    values: BTreeMap<String, Vec<String>>,
}

/// The file `relay serve` is to read, if `args` (the whole command line) is a `serve` that
/// names one (`--config FILE`, `--config=FILE`) or `RELAY_CONFIG` does. `--help` reads none:
/// it states the built-in defaults, and works where the file is not (yet) there.
fn named_file(args: &[OsString]) -> Option<PathBuf> {
    if args.get(1).is_none_or(|a| a != SERVE) {
        return None;
    }
    let options = || args.iter().skip(2).take_while(|a| *a != "--");
    if options().any(|a| a == "--help" || a == "-h") {
        return None;
    }
    let mut rest = options();
    while let Some(arg) = rest.next() {
        if arg == "--config" {
            return rest.next().map(PathBuf::from);
        }
        if let Some(path) = arg.to_str().and_then(|a| a.strip_prefix("--config=")) {
            return Some(PathBuf::from(path));
        }
    }
    std::env::var_os(CONFIG_VARIABLE)
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
}

/// `command` with the settings of the file `args` names (if any) as `serve`'s defaults, and
/// those settings (for `--print-config`).
pub(crate) fn with_file(
    command: Command,
    args: &[OsString],
) -> Result<(Command, Option<FileSettings>)> {
    let Some(path) = named_file(args) else {
        return Ok((command, None));
    };
    let Some(serve) = command.find_subcommand(SERVE) else {
        return Ok((command, None));
    };
    let settings = read(&path, serve)?;
    let defaults: Vec<(String, Vec<&'static str>)> = settings
        .values
        .iter()
        .filter(|(id, _)| !(id.as_str() == "db" && variable(DATABASE_URL_VARIABLE).is_some()))
        .map(|(id, values)| {
            // clap's defaults are `&'static str` without its `string` feature; a file is read
            // once per process, so its few values are kept for the process's life.
            let values = values
                .iter()
                .map(|value| &*Box::leak(value.clone().into_boxed_str()))
                .collect();
            (id.clone(), values)
        })
        .collect();
    // Every argument in place (`mut_arg` would move the changed ones to the end of `--help`).
    let command = command.mut_subcommand(SERVE, |serve| {
        serve.mut_args(
            |arg| match defaults.iter().find(|(id, _)| arg.get_id() == id) {
                Some((_, values)) => arg.default_values(values.clone()),
                None => arg,
            },
        )
    });
    Ok((command, Some(settings)))
}

fn variable(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// The file's settings, each key checked against `serve`'s flags.
fn read(path: &Path, serve: &Command) -> Result<FileSettings> {
    let size = std::fs::metadata(path)
        .with_context(|| format!("cannot read the config file {}", path.display()))?
        .len();
    if size > MAX_CONFIG_BYTES {
        bail!(
            "the config file {} is {size} bytes; a config file is at most {MAX_CONFIG_BYTES}",
            path.display()
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the config file {}", path.display()))?;
    let table: toml::Table = toml::from_str(&text)
        .with_context(|| format!("the config file {} is not TOML", path.display()))?;
    let mut values = BTreeMap::new();
    for (key, value) in table {
        let Some(arg) = serve
            .get_arguments()
            .find(|arg| arg.get_long() == Some(key.as_str()))
            .filter(|arg| !NOT_SETTINGS.contains(&arg.get_id().as_str()))
        else {
            bail!(
                "the config file {} has an unknown key `{key}`; its keys are the flags of `relay serve` without the dashes: {}",
                path.display(),
                keys(serve).join(", ")
            );
        };
        let repeatable = matches!(arg.get_action(), ArgAction::Append);
        let texts = texts(&value, repeatable)
            .with_context(|| format!("the config file {}: `{key}`", path.display()))?;
        values.insert(arg.get_id().to_string(), texts);
    }
    Ok(FileSettings {
        path: path.to_owned(),
        values,
    })
}

/// The keys a file may have.
fn keys(serve: &Command) -> Vec<&str> {
    serve
        .get_arguments()
        .filter(|arg| !NOT_SETTINGS.contains(&arg.get_id().as_str()))
        .filter_map(|arg| arg.get_long())
        .collect()
}

/// A TOML value as the command-line text(s) of its flag: a string, number or boolean, or for a
/// repeatable flag an array of them.
fn texts(value: &toml::Value, repeatable: bool) -> Result<Vec<String>> {
    match value {
        toml::Value::Array(items) if repeatable => items
            .iter()
            .map(|item| scalar(item).map(std::borrow::Cow::into_owned))
            .collect(),
        toml::Value::Array(_) => bail!("takes one value, not a list"),
        other => Ok(vec![scalar(other)?.to_string()]),
    }
}

/// One scalar as text (borrowed for strings).
fn scalar(value: &toml::Value) -> Result<std::borrow::Cow<'_, str>> {
    Ok(match value {
        toml::Value::String(text) => text.as_str().into(),
        toml::Value::Integer(n) => n.to_string().into(),
        toml::Value::Float(x) => x.to_string().into(),
        toml::Value::Boolean(b) => b.to_string().into(),
        _ => bail!("takes a string, a number or true/false"),
    })
}

/// `relay serve --print-config`: the settings in force as a config file, each line saying
/// where its value came from; unset ones as comments. The database URL's password is hidden.
pub(crate) fn print(serve: &Command, matches: &ArgMatches, file: Option<&FileSettings>) -> String {
    let mut text =
        String::from("# relay serve: the settings in force, each with where it came from\n");
    for arg in serve.get_arguments() {
        let id = arg.get_id().as_str();
        let Some(key) = arg.get_long().filter(|_| !NOT_SETTINGS.contains(&id)) else {
            continue;
        };
        let mut values: Vec<String> = matches
            .get_raw(id)
            .map(|raw| raw.map(|v| v.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        let mut source = match matches.value_source(id) {
            Some(ValueSource::CommandLine) => format!("--{key}"),
            Some(ValueSource::EnvVariable) => arg.get_env().map_or_else(
                || "environment".to_owned(),
                |e| e.to_string_lossy().into_owned(),
            ),
            _ if file.is_some_and(|f| f.values.contains_key(id)) => {
                format!("{}", file.map_or(Path::new(""), |f| &f.path).display())
            }
            _ => "default".to_owned(),
        };
        if id == "db" && values.is_empty() {
            // `DbArg::target`'s fallbacks.
            (values, source) = match variable(DATABASE_URL_VARIABLE) {
                Some(url) => (vec![url], DATABASE_URL_VARIABLE.to_owned()),
                None => (vec!["relay.db".to_owned()], "default".to_owned()),
            };
        }
        let values = if id == "db" {
            values
                .iter()
                .map(|v| relay_service::store::postgres::redact(v))
                .collect()
        } else {
            values
        };
        let _ = match values.as_slice() {
            [] => writeln!(text, "# {key} = (not set)"),
            [one] if !matches!(arg.get_action(), ArgAction::Append) => {
                writeln!(text, "{key} = {}  # {source}", toml_value(one, arg))
            }
            many => {
                let items: Vec<String> = many.iter().map(|v| quoted(v)).collect();
                writeln!(text, "{key} = [{}]  # {source}", items.join(", "))
            }
        };
    }
    text
}

/// A value as TOML: booleans and integers bare, anything else a string.
fn toml_value(value: &str, arg: &clap::Arg) -> String {
    let flag = matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
    if (flag && (value == "true" || value == "false")) || value.parse::<i64>().is_ok() {
        value.to_owned()
    } else {
        quoted(value)
    }
}

/// A TOML basic string (JSON's escapes are TOML's).
fn quoted(value: &str) -> String {
    serde_json::Value::String(value.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn the_file_is_named_after_serve_only() {
        assert_eq!(
            named_file(&args("relay serve --listen x --config a.toml")),
            Some(PathBuf::from("a.toml"))
        );
        assert_eq!(
            named_file(&args("relay serve --config=b.toml")),
            Some(PathBuf::from("b.toml"))
        );
        assert_eq!(named_file(&args("relay admin --config a.toml")), None);
        assert_eq!(named_file(&args("relay serve -- --config a.toml")), None);
    }

    #[test]
    fn values_become_command_line_texts() {
        let value = |text: &str| -> toml::Value {
            toml::from_str::<toml::Table>(&format!("v = {text}")).expect("toml")["v"].clone()
        };
        assert_eq!(texts(&value("\"1h\""), false).expect("string"), ["1h"]);
        assert_eq!(texts(&value("30"), false).expect("integer"), ["30"]);
        assert_eq!(texts(&value("true"), false).expect("bool"), ["true"]);
        assert_eq!(
            texts(&value("[\"a\", \"b\"]"), true).expect("list"),
            ["a", "b"]
        );
        assert!(texts(&value("[\"a\"]"), false).is_err(), "one value");
        assert!(texts(&value("{ a = 1 }"), false).is_err(), "no tables");
    }
}
