//! A new graph author's mistakes (issue 31): what each one is told, in both engines and on the
//! command line.

use std::path::Path;
use std::process::Command;

use runner::RunStatus;
use runner::host::tools::ToolRegistry;
use serde_json::json;

use crate::common::{engines, options, run};

fn runner() -> Command {
    Command::new(env!("CARGO_BIN_EXE_runner"))
}

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
}

/// A misspelt tool under the default policy (which denies every tool) is `not_found`, names the
/// nearest real tool and lists them, and does not advise allowing the misspelling.
#[tokio::test]
async fn an_unknown_tool_is_not_found_before_the_policy_is_consulted() {
    let script = r#"
export const meta = {name: "Typo", slug: "typo", version: "1"};
export default async function (args, g) {
  try { await g.tool("fs.wirte", {path: "x", text: "y"}); return "no error"; }
  catch (e) { return {code: e.code, message: e.message}; }
}"#;
    for engine in engines() {
        let name = engine.name();
        let (mut options, _, _) = options(engine, json!({}));
        options.tools = ToolRegistry::standard(None).expect("the standard tools");
        let outcome = run(script, json!({}), &options).await;
        assert_eq!(outcome.status, RunStatus::Completed, "{name}: {outcome:?}");
        let result = outcome.result.expect("a result");
        assert_eq!(result["code"], "not_found", "{name}: {result}");
        let message = result["message"].as_str().unwrap_or_default();
        for words in [
            "there is no tool called fs.wirte",
            "did you mean fs.write?",
            "fs.list, fs.read, fs.write",
        ] {
            assert!(message.contains(words), "{name}: {words}: {message}");
        }
        assert!(!message.contains("--allow"), "{name}: {message}");
    }
}

/// An agent offered a misspelt tool is refused the same way.
#[tokio::test]
async fn an_agent_offered_an_unknown_tool_hears_the_nearest_one() {
    let script = r#"
export const meta = {name: "Typo", slug: "typo", version: "1"};
export default async function (args, g) {
  try { await g.agent({prompt: "hi", tools: ["fs.raed"]}); return "no error"; }
  catch (e) { return e.code + ": " + e.message; }
}"#;
    for engine in engines() {
        let name = engine.name();
        let (mut options, _, _) = options(engine, json!({}));
        options.tools = ToolRegistry::standard(None).expect("the standard tools");
        let outcome = run(script, json!({}), &options).await;
        let text = outcome.result.expect("a result").to_string();
        assert!(text.contains("not_found"), "{name}: {text}");
        assert!(text.contains("did you mean fs.read?"), "{name}: {text}");
    }
}

/// `--allow`, `--ask` and `--deny` naming a tool that does not exist are refused before the run
/// (and before the sandbox is prepared) with exit 2, naming the nearest known tool.
#[test]
fn a_policy_flag_naming_an_unknown_tool_is_refused_before_the_run() {
    let graph = workspace().join("graphs").join("publish.js");
    for flag in ["--allow", "--ask", "--deny"] {
        let output = runner()
            .arg("run")
            .arg(&graph)
            .args([flag, "fs.wrte"])
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{flag}: {stderr}");
        assert!(
            stderr.contains(&format!("{flag}: there is no tool called fs.wrte")),
            "{flag}: {stderr}"
        );
        assert!(
            stderr.contains("did you mean fs.write?"),
            "{flag}: {stderr}"
        );
        assert!(
            stderr.contains("fs.list, fs.read, fs.write"),
            "{flag}: {stderr}"
        );
        assert!(
            output.stdout.is_empty(),
            "no outcome: the run never started"
        );
        assert!(!stderr.contains("preparing the sandbox"), "{stderr}");
    }
}

/// A test case whose `allow` list misspells a tool fails, saying which list and which tool.
#[test]
fn a_test_case_allowing_an_unknown_tool_fails_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("one.js"),
        "export const meta = {name: 'One', slug: 'one', version: '1'};\nexport default async function () { return 1; }",
    )
    .expect("graph");
    let case = json!({"name": "typo", "allow": ["fs.wirte"], "expect": {"status": "completed"}});
    std::fs::write(dir.path().join("one.test.json"), case.to_string()).expect("test");
    let output = runner()
        .args(["test", "--engine", "boa"])
        .arg(dir.path())
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("FAIL typo"), "{stdout}");
    assert!(
        stdout.contains("allow: there is no tool called fs.wirte; did you mean fs.write?"),
        "{stdout}"
    );
}

/// A graph whose own code makes a mistake, and what its error must say.
pub(crate) struct Mistake {
    pub(crate) what: &'static str,
    pub(crate) script: &'static str,
    /// `FILE:LINE:COL` the error starts with (FILE `test.js`, or the nested graph's).
    pub(crate) at: (&'static str, u32, u32),
    /// The source line shown under it (None for a result, which has a path instead).
    pub(crate) frame: Option<&'static str>,
    /// Words the message holds.
    pub(crate) says: &'static [&'static str],
}

pub(crate) const HEAD: &str = "export const meta = {name: 'M', slug: 'm', version: '1'};\n";

pub(crate) const MISTAKES: &[Mistake] = &[
    Mistake {
        what: "a TypeError in a helper",
        script: "function pick(x) { return Object.keys(x)[0]; }\nexport default async function (args) {\n  return pick(args.missing);\n}\n",
        at: ("test.js", 2, 38),
        frame: Some("function pick(x) { return Object.keys(x)[0]; }"),
        says: &[
            "TypeError",
            "cannot convert 'null' or 'undefined' to object",
        ],
    },
    Mistake {
        what: "a missing member of g",
        script: "export default async function (args, g) {\n  return g.agnet({prompt: \"hi\"});\n}\n",
        at: ("test.js", 3, 17),
        frame: Some("  return g.agnet({prompt: \"hi\"});"),
        says: &["g.agnet is not a function; g has agent, tool, graph, retry, sleep, log, budget"],
    },
    Mistake {
        what: "a property of null three frames deep",
        script: "function c(o) { return o.name.length; }\nfunction b(o) { return c(o); }\nfunction a(o) { return b(o); }\nexport default async function () {\n  return a({name: null});\n}\n",
        at: ("test.js", 2, 31),
        frame: Some("function c(o) { return o.name.length; }"),
        says: &["TypeError"],
    },
    Mistake {
        what: "a throw in a nested graph",
        script: "export default async function (args, g) {\n  return await g.graph(\"inner\", {});\n}\n",
        at: ("graphs/inner.js", 3, 9),
        frame: Some("  throw new Error(\"the inner graph broke\");"),
        says: &["graph inner failed", "Error: the inner graph broke"],
    },
    Mistake {
        what: "a method call on undefined in a nested graph's helper",
        script: "export default async function (args, g) {\n  return await g.graph(\"tidy\", {});\n}\n",
        at: ("graphs/tidy.js", 4, 16),
        frame: Some("  return lines.map((l) => l.trim());"),
        says: &[
            "graph tidy failed",
            "cannot read properties of undefined or null (reading 'map' of lines)",
        ],
    },
    Mistake {
        what: "a BigInt in the result",
        script: "export default async function () {\n  return {items: [{n: 1}, {n: 2}, {n: 3n}]};\n}\n",
        at: ("", 0, 0),
        frame: None,
        says: &["result.items[2].n: a BigInt cannot be turned into JSON"],
    },
    Mistake {
        what: "a Map in the result",
        script: "export default async function () {\n  return {seen: new Map([[\"a\", 1]])};\n}\n",
        at: ("", 0, 0),
        frame: None,
        says: &["result.seen: a Map cannot be turned into JSON"],
    },
    Mistake {
        what: "a cycle in the result",
        script: "export default async function () {\n  const node = {name: \"a\", children: []};\n  node.children.push({name: \"b\", parent: node});\n  return {root: node};\n}\n",
        at: ("", 0, 0),
        frame: None,
        says: &["result.root.children[0].parent: a cycle: this is result.root again"],
    },
    Mistake {
        what: "a method call on undefined in a multi-line helper",
        script: "function clean(text) {\n  const y = undefined;\n  return y.trim();\n}\nexport default async function (args, g) {\n  return clean(\"x\");\n}\n",
        at: ("test.js", 4, 12),
        frame: Some("  return y.trim();"),
        says: &["cannot read properties of undefined or null (reading 'trim' of y)"],
    },
    Mistake {
        what: "two method calls in a helper, the first on undefined",
        script: "function shout(t) {\n  const parts = t.split(\" \");\n  const first = parts[0];\n  return first.toUpperCase() + parts.length;\n}\nexport default async function (args, g) {\n  return shout(args.text);\n}\n",
        at: ("test.js", 3, 19),
        frame: Some("  const parts = t.split(\" \");"),
        says: &["reading 'split' of t", "the place is approximate"],
    },
    Mistake {
        what: "reply.content.trim() on an agent's reply",
        script: "export default async function (args, g) {\n  const reply = await g.agent({prompt: \"hi\"});\n  const words = reply.content.trim().split(\" \");\n  return words;\n}\n",
        at: ("test.js", 4, 31),
        frame: Some("  const words = reply.content.trim().split(\" \");"),
        says: &["reading 'trim' of reply.content"],
    },
    Mistake {
        what: "a forgotten await then .toUpperCase()",
        script: "async function fetchName() { return \"ada\"; }\nexport default async function (args, g) {\n  const name = fetchName();\n  return name.toUpperCase();\n}\n",
        at: ("test.js", 5, 26),
        frame: Some("  return name.toUpperCase();"),
        says: &[
            "name.toUpperCase is not a function",
            "name is a Promise: did you forget `await`?",
        ],
    },
    Mistake {
        what: "an optional chain that goes on with a plain read",
        script: "export default async function (args, g) {\n  const user = {};\n  const first = user?.name.first;\n  return first;\n}\n",
        at: ("test.js", 4, 28),
        frame: Some("  const first = user?.name.first;"),
        says: &["reading 'first' of user?.name"],
    },
    Mistake {
        what: "a spread of undefined",
        script: "export default async function (args, g) {\n  const items = args.items;\n  return [...items, 1];\n}\n",
        at: ("test.js", 4, 14),
        frame: Some("  return [...items, 1];"),
        says: &["items is not iterable"],
    },
    Mistake {
        what: "destructuring undefined",
        script: "export default async function (args, g) {\n  const { a, b } = args.config;\n  return a + b;\n}\n",
        at: ("test.js", 3, 9),
        frame: Some("  const { a, b } = args.config;"),
        says: &["cannot destructure args.config: it is undefined"],
    },
    Mistake {
        what: "for...of over undefined",
        script: "export default async function (args, g) {\n  let n = 0;\n  for (const item of args.list) {\n    n += item;\n  }\n  return n;\n}\n",
        at: ("test.js", 4, 22),
        frame: Some("  for (const item of args.list) {"),
        says: &["args.list is not iterable"],
    },
    Mistake {
        what: "a property of what find() did not find",
        script: "export default async function (args, g) {\n  const people = [{name: \"a\"}];\n  const found = people.find((p) => p.name === \"b\");\n  return found.name.toUpperCase();\n}\n",
        at: ("test.js", 5, 16),
        frame: Some("  return found.name.toUpperCase();"),
        says: &["reading 'name' of found"],
    },
    Mistake {
        what: "a method call in an arrow function's body on the next line",
        script: "const titleOf = (doc) =>\n  doc.title.trim();\nexport default async function (args, g) {\n  return titleOf({});\n}\n",
        at: ("test.js", 3, 13),
        frame: Some("  doc.title.trim();"),
        says: &["reading 'trim' of doc.title"],
    },
    Mistake {
        what: "a method call in a then callback",
        script: "export default async function (args, g) {\n  return Promise.resolve({}).then((r) => {\n    const s = r.text;\n    return s.slice(0, 3);\n  });\n}\n",
        at: ("test.js", 5, 14),
        frame: Some("    return s.slice(0, 3);"),
        says: &["reading 'slice' of s"],
    },
    Mistake {
        what: "a property set on undefined",
        script: "export default async function (args, g) {\n  const state = {};\n  state.cache.last = 1;\n  return state;\n}\n",
        at: ("test.js", 4, 15),
        frame: Some("  state.cache.last = 1;"),
        says: &["cannot set properties of undefined or null (setting 'last' of state.cache)"],
    },
    Mistake {
        what: "a call of a missing helper",
        script: "const helpers = {};\nexport default async function (args, g) {\n  return helpers.pick(args);\n}\n",
        at: ("test.js", 4, 22),
        frame: Some("  return helpers.pick(args);"),
        says: &["helpers.pick is not a function"],
    },
    Mistake {
        what: "a misspelt g method",
        script: "export default async function (args, g) {\n  return g.agnet({prompt: \"hi\"});\n}\n",
        at: ("test.js", 3, 17),
        frame: Some("  return g.agnet({prompt: \"hi\"});"),
        says: &["g.agnet is not a function"],
    },
    Mistake {
        what: "a method call on undefined inside a call's arguments",
        script: "export default async function (args, g) {\n  const name = args.name;\n  g.log(\"name:\", name.trim());\n  return 1;\n}\n",
        at: ("test.js", 4, 23),
        frame: Some("  g.log(\"name:\", name.trim());"),
        says: &["reading 'trim' of name"],
    },
    Mistake {
        what: "array destructuring of undefined",
        script: "export default async function (args, g) {\n  const [first, second] = args.pair;\n  return first + second;\n}\n",
        at: ("test.js", 3, 9),
        frame: Some("  const [first, second] = args.pair;"),
        says: &["cannot destructure args.pair: it is undefined"],
    },
    Mistake {
        what: "a method call in a nested function called by map",
        script: "function outer(list) {\n  function inner(x) {\n    return x.value.toFixed(2);\n  }\n  return list.map(inner);\n}\nexport default async function (args, g) {\n  return outer([{value: 1}, {}]);\n}\n",
        at: ("test.js", 4, 20),
        frame: Some("    return x.value.toFixed(2);"),
        says: &["reading 'toFixed' of x.value"],
    },
    Mistake {
        what: "a method call in a class method",
        script: "class Store {\n  constructor() { this.items = undefined; }\n  count() {\n    return this.items.filter((x) => x).length;\n  }\n}\nexport default async function (args, g) {\n  return new Store().count();\n}\n",
        at: ("test.js", 5, 23),
        frame: Some("    return this.items.filter((x) => x).length;"),
        says: &["reading 'filter' of this.items"],
    },
    Mistake {
        what: "a method call on a missing field of parsed JSON",
        script: "export default async function (args, g) {\n  const data = JSON.parse('{\"a\": 1}');\n  const list = data.items;\n  return list.map((x) => x * 2);\n}\n",
        at: ("test.js", 5, 15),
        frame: Some("  return list.map((x) => x * 2);"),
        says: &["reading 'map' of list"],
    },
    Mistake {
        what: "the graph's own throw",
        script: "export default async function (args, g) {\n  if (!args.topic) {\n    throw new Error(\"topic is required\");\n  }\n  return 1;\n}\n",
        at: ("test.js", 4, 11),
        frame: Some("    throw new Error(\"topic is required\");"),
        says: &["Error: topic is required"],
    },
    Mistake {
        what: "Object.keys(undefined) in a helper",
        script: "function pick(x) {\n  return Object.keys(x)[0];\n}\nexport default async function (args) {\n  return pick(args.missing);\n}\n",
        at: ("test.js", 3, 21),
        frame: Some("  return Object.keys(x)[0];"),
        says: &["cannot convert 'null' or 'undefined' to object"],
    },
    Mistake {
        what: "a property of a missing field in an async helper",
        script: "async function load(g) {\n  const r = await g.agent({prompt: \"x\"});\n  return r.data.rows;\n}\nexport default async function (args, g) {\n  const rows = await load(g);\n  return rows;\n}\n",
        at: ("test.js", 4, 17),
        frame: Some("  return r.data.rows;"),
        says: &["reading 'rows' of r.data"],
    },
    Mistake {
        what: "an agent's reply read without await",
        script: "export default async function (args, g) {\n  const reply = g.agent({prompt: \"hi\"});\n  return reply.text.trim();\n}\n",
        at: ("test.js", 4, 21),
        frame: Some("  return reply.text.trim();"),
        says: &[
            "reading 'trim' of reply.text",
            "reply is a Promise: did you forget `await`?",
        ],
    },
];

const INNER: &str = "export const meta = {name: 'Inner', slug: 'inner', version: '1'};\nexport default async function () {\n  throw new Error(\"the inner graph broke\");\n}\n";

/// A nested graph whose helper calls a method on undefined (issue 45).
const INNER_HELPER: &str = "export const meta = {name: 'Tidy', slug: 'tidy', version: '1'};\nfunction tidy(text) {\n  const lines = text.lines;\n  return lines.map((l) => l.trim());\n}\nexport default async function (args) {\n  return tidy(args);\n}\n";

/// Every mistake of the table, in both engines: the error starts with `FILE:LINE:COL: `, shows
/// the source line with a caret under the column, and the outcome's `location` says the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_mistake_says_where_in_both_engines() {
    let mut problems = Vec::new();
    for engine in engines() {
        let name = engine.name();
        for mistake in MISTAKES {
            let options = table_options(engine.clone());
            let script = format!("{HEAD}{}", mistake.script);
            let outcome = run(&script, json!({}), &options).await;
            if let Err(problem) = check_mistake(mistake, mistake.at, &outcome) {
                problems.push(format!("{name}: {}: {problem}", mistake.what));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    let runtime = MISTAKES.iter().filter(|m| m.frame.is_some()).count();
    assert!(runtime >= 20, "only {runtime} mistakes at a line");
}

/// The table's run options on `engine`: the mock's replies and the nested graphs it calls.
pub(crate) fn table_options(
    engine: std::sync::Arc<dyn runner::engine::Engine>,
) -> runner::run::RunOptions {
    use runner::host::graphs::{FolderCatalog, GraphSource};
    let (mut options, _, _) = options(engine, json!({"default": {"text": "ok"}}));
    let mut catalog = FolderCatalog::default();
    for (source, file) in [(INNER, "graphs/inner.js"), (INNER_HELPER, "graphs/tidy.js")] {
        catalog.insert(GraphSource {
            meta: graph_js::describe(source, &graph_js::Limits::default()).expect("meta"),
            script: source.into(),
            file: Some(file.into()),
            engine: None,
        });
    }
    options.catalog = std::sync::Arc::new(catalog);
    options
}

/// The mistakes whose failing expression boa does not place itself (a method call's read, a
/// spread, a destructuring), from a built component: the same file, place, frame and words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_built_component_says_where_too() {
    let mut problems = Vec::new();
    let chosen = [
        "a method call on undefined in a multi-line helper",
        "reply.content.trim() on an agent's reply",
        "a spread of undefined",
    ];
    for mistake in MISTAKES.iter().filter(|m| chosen.contains(&m.what)) {
        let engine = crate::common::compiled(&format!("{HEAD}{}", mistake.script)).await;
        let (options, _, _) = options(engine, json!({"default": {"text": "ok"}}));
        let outcome = run("", json!({}), &options).await;
        if let Err(problem) = check_mistake(mistake, mistake.at, &outcome) {
            problems.push(format!("built: {}: {problem}", mistake.what));
        }
    }
    assert_eq!(problems.len(), 0, "{}", problems.join("\n\n"));
}

/// What is wrong with the outcome of `mistake`, expected at `at` (its own `at` unless the
/// graph's file has more lines), if anything.
pub(crate) fn check_mistake(
    mistake: &Mistake,
    at: (&str, u32, u32),
    outcome: &runner::RunOutcome,
) -> Result<(), String> {
    let fail = |why: String| Err(format!("{why}\n{outcome:?}"));
    if outcome.status != RunStatus::Failed {
        return fail("not failed".into());
    }
    let error = outcome.error.clone().unwrap_or_default();
    for words in mistake.says {
        if !error.contains(words) {
            return fail(format!("does not say {words:?}"));
        }
    }
    let Some(frame) = mistake.frame else {
        // A result's mistake is named by its path; it has no line.
        return if outcome.location.is_none() {
            Ok(())
        } else {
            fail("a location for a result".into())
        };
    };
    let (file, line, column) = at;
    let head = format!("{file}:{line}:{column}: ");
    if !error.starts_with(&head) {
        return fail(format!("does not start with {head:?}"));
    }
    let location = outcome.location.clone().ok_or("no location")?;
    if (location.file.as_str(), location.line, location.column) != at {
        return fail(format!("location {location:?}"));
    }
    let lines: Vec<&str> = error.lines().collect();
    let Some(source) = lines
        .iter()
        .position(|l| l.ends_with(frame) && l.contains(&format!("{line} | ")))
    else {
        return fail("no code frame".into());
    };
    let caret = lines.get(source + 1).copied().unwrap_or_default();
    let bar = caret.find("| ").ok_or("no caret line")? + 2;
    let want = bar + usize::try_from(column).map_err(|e| e.to_string())? - 1;
    if caret.find('^') != Some(want) {
        return fail(format!("the caret is not under column {column}"));
    }
    Ok(())
}

/// The serde field names of `struct NAME` in a Rust source (a `rename` counts, not the ident).
fn struct_fields(source: &str, name: &str) -> Vec<String> {
    let start = source
        .find(&format!("struct {name} {{"))
        .unwrap_or_else(|| panic!("struct {name} is in the source"));
    let body = &source[start..];
    let body = &body[..body.find("\n}").expect("the struct ends")];
    let mut fields = Vec::new();
    let mut rename = None;
    for line in body.lines().skip(1).map(str::trim) {
        if let Some(at) = line.find("rename = \"") {
            let rest = &line[at + "rename = \"".len()..];
            rename = rest.split('"').next().map(str::to_owned);
            continue;
        }
        if line.starts_with("//") || line.starts_with("#[") {
            continue;
        }
        let line = line.strip_prefix("pub ").unwrap_or(line);
        if let Some((ident, _)) = line.split_once(':') {
            fields.push(rename.take().unwrap_or_else(|| ident.trim().to_owned()));
        }
    }
    fields
}

/// The authors' page on testing (`docs/testing.md`, once the README's "Testing graphs" section).
fn testing_page() -> String {
    std::fs::read_to_string(workspace().join("docs/testing.md"))
        .expect("docs/testing.md, the authors' page on testing")
}

/// Every field of the test-file and replies formats whose name `section` does not mention as
/// `` `field` `` (fields of `expect` as `` `expect.field` ``).
fn undocumented(section: &str) -> Vec<String> {
    let testing = std::fs::read_to_string(workspace().join("runner/src/testing.rs")).expect("src");
    let mock = std::fs::read_to_string(workspace().join("runner/src/host/mock.rs")).expect("src");
    let mut wanted: Vec<String> = Vec::new();
    for (source, name, prefix) in [
        (&testing, "ManyCases", ""),
        (&testing, "TestCase", ""),
        (&testing, "Expect", "expect."),
        (&mock, "RepliesFile", ""),
        (&mock, "ReplyEntry", ""),
        (&mock, "MockToolCall", ""),
    ] {
        let fields = struct_fields(source, name);
        assert!(!fields.is_empty(), "{name} has fields");
        wanted.extend(fields.into_iter().map(|f| format!("{prefix}{f}")));
    }
    wanted
        .into_iter()
        .filter(|field| {
            // `{name, arguments}` documents a tool call's fields.
            !section.contains(&format!("`{field}`"))
                && !section.contains(&format!("{{{field},"))
                && !section.contains(&format!(", {field}}}"))
        })
        .collect()
}

/// The authors' page on testing (`docs/testing.md`; the test kept its name from when the README
/// held it) documents every field of a test file and of a replies file, `g.retry`'s callback
/// argument, the loop limit and the cap's rule, in the words `--help` uses.
#[test]
fn the_readme_documents_every_field_of_the_formats_an_author_writes() {
    let page = testing_page();
    let section = page.as_str();
    assert_eq!(undocumented(section), Vec::<String>::new());
    // The test fails when a field goes missing from the page.
    for field in ["`latency_ms`", "`expect.absent`", "`replies_file`"] {
        let without = section.replace(field, "");
        assert!(
            !undocumented(&without).is_empty(),
            "removing {field} is noticed"
        );
    }
    const CAP_RULE: &str = "once the cap is reached no agent starts; agents already running finish, so a run can end above the cap";
    let flowing = section.split_whitespace().collect::<Vec<_>>().join(" ");
    for words in ["fn(attempt)", "10,000,000 loop iterations", CAP_RULE] {
        assert!(flowing.contains(words), "{words}");
    }
    let help = runner().args(["run", "--help"]).output().expect("runs");
    let help = String::from_utf8_lossy(&help.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(help.contains(CAP_RULE), "{help}");
    assert!(!help.to_lowercase().contains("hard token cap"), "{help}");
}

/// `runner check`'s verdict and words on a graph, and `runner run`'s, on `engine`: the exit
/// codes and the text each printed (check on stderr, run's outcome on stdout and its refusals
/// on stderr).
fn check_and_run(graph: &Path, engine: &str) -> ((Option<i32>, String), (Option<i32>, String)) {
    let checked = runner()
        .args(["check", "--engine", engine])
        .arg(graph)
        .output()
        .expect("runs");
    let ran = runner()
        .args(["run", "--engine", engine])
        .arg(graph)
        .output()
        .expect("runs");
    let text = |out: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    (
        (checked.status.code(), text(&checked)),
        (ran.status.code(), text(&ran)),
    )
}

/// One graph loader: `runner run` refuses every graph `runner check` refuses (no meta, an
/// invalid meta, no default export, a folder with two graphs of one slug), with the same
/// sentence, in both engines; `runner test` refuses the duplicate too.
#[test]
fn runner_run_refuses_what_runner_check_refuses_with_the_same_words() {
    let meta = "export const meta = {name: 'Lonely', slug: 'lonely', version: '1'};\n";
    let cases = [
        (
            "no default export",
            format!("{meta}export async function main() {{ return 1; }}\n"),
            "the graph has no default export function: write `export default async function (args, g) { ... }`",
        ),
        (
            "no meta",
            "export default async function () { return 1; }\n".to_owned(),
            "the graph has no meta export: add `export const meta = { name, slug, version, description }`",
        ),
        (
            "an invalid slug",
            "export const meta = {name: 'Bad', slug: 'Bad Slug', version: '1'};\nexport default async function () { return 1; }\n".to_owned(),
            "invalid meta: meta.slug `Bad Slug` must start with a lowercase letter",
        ),
    ];
    for engine in ["boa", "wasm"] {
        for (what, source, sentence) in &cases {
            let dir = tempfile::tempdir().expect("tempdir");
            let graph = dir.path().join("lonely.js");
            std::fs::write(&graph, source).expect("graph");
            let ((check_code, checked), (run_code, ran)) = check_and_run(&graph, engine);
            assert_eq!(check_code, Some(1), "{engine}, {what}: {checked}");
            assert!(checked.contains(sentence), "{engine}, {what}: {checked}");
            assert_eq!(run_code, Some(1), "{engine}, {what}: {ran}");
            assert!(ran.contains(sentence), "{engine}, {what}: {ran}");
            assert!(
                ran.contains(r#""status":"failed""#),
                "{engine}, {what}: {ran}"
            );
        }

        let folder = tempfile::tempdir().expect("tempdir");
        let graph = "export const meta = {name: 'Twin', slug: 'twin', version: '1'};\nexport default async function () { return 1; }\n";
        std::fs::write(folder.path().join("a.js"), graph).expect("a");
        std::fs::write(folder.path().join("b.js"), graph).expect("b");
        let both = format!(
            "{} and {} both have the slug twin; give one of them another `meta.slug`",
            folder.path().join("a.js").display(),
            folder.path().join("b.js").display()
        );
        let ((check_code, checked), (run_code, ran)) =
            check_and_run(&folder.path().join("a.js"), engine);
        assert_eq!(check_code, Some(1), "{engine}: {checked}");
        assert!(checked.contains(&both), "{engine}: {checked}");
        assert_eq!(run_code, Some(1), "{engine}: {ran}");
        assert!(ran.contains(&both), "{engine}: {ran}");
        assert!(!ran.contains("status"), "refused before the run: {ran}");
        std::fs::write(
            folder.path().join("a.test.json"),
            r#"{"expect": {"status": "completed"}}"#,
        )
        .expect("test");
        let tested = runner()
            .args(["test", "--engine", engine])
            .arg(folder.path())
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&tested.stderr);
        assert_eq!(tested.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&both), "{stderr}");
    }
}

/// `runner run GRAPH ARGS...`'s exit code and printed outcome.
fn run_outcome(graph: &Path, extra: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let out = runner()
        .args(["run", "--args", r#"{"n": 21}"#])
        .arg(graph)
        .args(extra)
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let outcome = serde_json::from_str(stdout.trim()).unwrap_or(serde_json::Value::Null);
    (out.status.code(), outcome, format!("{stdout}{stderr}"))
}

/// A graph built with `runner build` runs its nested graph from a `--graphs` folder that holds
/// only built components, with the same outcome as from the sources. A source and its build
/// side by side are one graph; a second build of the same slug is a duplicate.
#[test]
fn a_built_graph_runs_a_nested_graph_from_a_folder_of_built_ones() {
    const OUTER: &str = "export const meta = {name: 'Outer', slug: 'outer', version: '1'};\nexport default async function (args, g) {\n  const inner = await g.graph('inner', {n: args.n});\n  return {outer: true, inner};\n}\n";
    const INNER: &str = "export const meta = {name: 'Inner', slug: 'inner', version: '2'};\nexport default async function (args) { return {twice: args.n * 2}; }\n";
    let sources = tempfile::tempdir().expect("tempdir");
    let built = tempfile::tempdir().expect("tempdir");
    for (name, source) in [("outer", OUTER), ("inner", INNER)] {
        let script = sources.path().join(format!("{name}.js"));
        std::fs::write(&script, source).expect("source");
        let out = runner()
            .arg("build")
            .arg(&script)
            .arg("-o")
            .arg(built.path().join(format!("{name}.wasm")))
            .output()
            .expect("runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let expected = json!({"outer": true, "inner": {"twice": 42}});
    let (code, from_sources, text) = run_outcome(&sources.path().join("outer.js"), &[]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(from_sources["result"], expected, "{text}");
    // The built graph's folder holds only components: its own and the nested one.
    let (code, from_built, text) = run_outcome(&built.path().join("outer.wasm"), &[]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(from_built, from_sources, "{text}");
    // A source graph finds built ones too, through --graphs.
    let graphs = built.path().display().to_string();
    let (code, mixed, text) = run_outcome(&sources.path().join("outer.js"), &["--graphs", &graphs]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(mixed, from_sources, "{text}");
    // `runner check` reads the folder of components.
    let checked = runner()
        .arg("check")
        .arg(built.path().join("outer.wasm"))
        .output()
        .expect("runs");
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(String::from_utf8_lossy(&checked.stdout).contains(r#""slug":"outer""#));

    // The source beside its build is the same graph, and the source runs.
    std::fs::write(
        built.path().join("inner.js"),
        INNER.replace("args.n * 2", "args.n * 3"),
    )
    .expect("source");
    let (code, beside, text) = run_outcome(&built.path().join("outer.wasm"), &[]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(beside["result"]["inner"], json!({"twice": 63}), "{text}");
    // Another build of the slug is a second graph of it.
    std::fs::copy(
        built.path().join("inner.wasm"),
        built.path().join("copy.wasm"),
    )
    .expect("copy");
    let (code, _, text) = run_outcome(&built.path().join("outer.wasm"), &[]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "{} and {} both have the slug inner",
            built.path().join("copy.wasm").display(),
            built.path().join("inner.js").display()
        )),
        "{text}"
    );
}
