//! The author table's mistakes from a TypeScript file (issue 45): each graph of
//! `author::MISTAKES` as `test.ts` under two lines of TypeScript-only declarations, in both
//! engines and from a built component, must name `test.ts`, the line (two further down) and
//! column, and show its frame; and mistakes on lines that carry types show the line as written.

use std::path::Path;

use serde_json::json;

use crate::author::{HEAD, MISTAKES, Mistake, check_mistake, table_options};
use crate::common::{compiled, engines, run_as};

/// What a `.ts` graph of the table starts with: declarations erasing blanks whole.
const TS_HEAD: &str =
    "interface Reply { content: string; tokens?: number }\ntype Args = Record<string, unknown>;\n";

/// The JavaScript the engines run for `source` as `test.ts`: its types erased, the lines
/// erasing changed kept for the frames.
fn erased(source: &str) -> String {
    runner::input::script_of(Path::new("test.ts"), source.to_owned())
        .unwrap_or_else(|e| panic!("{source}: {e}"))
}

/// Where `mistake` fails in its `.ts` form: `test.ts` two lines down; a nested graph's place is
/// its own.
fn ts_place(mistake: &Mistake) -> (&'static str, u32, u32) {
    match mistake.at {
        ("test.js", line, column) => ("test.ts", line + 2, column),
        other => other,
    }
}

/// Every mistake of the table from `test.ts`, in both engines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_mistake_says_where_from_a_ts_file_in_both_engines() {
    let mut problems = Vec::new();
    for engine in engines() {
        let name = engine.name();
        for mistake in MISTAKES {
            let options = table_options(engine.clone());
            let script = erased(&format!("{TS_HEAD}{HEAD}{}", mistake.script));
            let outcome = run_as(&script, "test.ts", json!({}), &options).await;
            if let Err(problem) = check_mistake(mistake, ts_place(mistake), &outcome) {
                problems.push(format!("{name}: {}: {problem}", mistake.what));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// Mistakes on lines that carry types: the place is the `.ts` file's and the frame shows the
/// line as written, annotations and casts included (not the blanked text the engine ran).
const TYPED: &[Mistake] = &[
    Mistake {
        what: "a method call on an annotated undefined",
        script: "function clean(text: string): string {\n  const y: string | undefined = undefined;\n  return (y as string).trim();\n}\nexport default async function (args: Args, g: unknown): Promise<string> {\n  return clean(\"x\");\n}\n",
        at: ("test.ts", 6, 24),
        frame: Some("  return (y as string).trim();"),
        says: &["reading 'trim' of (y as string)"],
    },
    Mistake {
        what: "a reply's missing field read through a cast",
        script: "export default async function (args: Args, g: any): Promise<string[]> {\n  const reply = (await g.agent({prompt: \"hi\"})) as Reply;\n  const words: string[] = (reply as any).body.trim().split(\" \");\n  return words;\n}\n",
        at: ("test.ts", 6, 47),
        frame: Some("  const words: string[] = (reply as any).body.trim().split(\" \");"),
        says: &["reading 'trim' of (reply as any).body"],
    },
    Mistake {
        what: "a generic helper that throws",
        script: "function first<T>(items: T[]): T {\n  if (items.length === 0) throw new Error(\"no items\");\n  return items[0] as T;\n}\nexport default async function (args: Args): Promise<number> {\n  return first<number>([]);\n}\n",
        at: ("test.ts", 5, 33),
        frame: Some("  if (items.length === 0) throw new Error(\"no items\");"),
        says: &["Error: no items"],
    },
];

/// The typed mistakes in both engines and from a built component.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_line_is_shown_as_written_in_both_engines_and_built() {
    let mut problems = Vec::new();
    for mistake in TYPED {
        let script = erased(&format!("{TS_HEAD}{HEAD}{}", mistake.script));
        for engine in engines() {
            let name = engine.name();
            let outcome = run_as(&script, "test.ts", json!({}), &table_options(engine)).await;
            if let Err(problem) = check_mistake(mistake, mistake.at, &outcome) {
                problems.push(format!("{name}: {}: {problem}", mistake.what));
            }
        }
        let built = compiled(&script).await;
        let outcome = run_as("", "test.ts", json!({}), &table_options(built)).await;
        if let Err(problem) = check_mistake(mistake, mistake.at, &outcome) {
            problems.push(format!("built: {}: {problem}", mistake.what));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}
