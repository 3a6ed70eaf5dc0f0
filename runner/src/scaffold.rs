//! `runner init NAME`: a folder with a first graph, its test, the TypeScript declarations of
//! `g` (`graphs/graph.d.ts`) and a `jsconfig.json`, so an editor completes `g.` and `runner test
//! NAME` passes at once; `runner init --ts NAME`, the same in TypeScript with a `tsconfig.json`.

use std::path::{Path, PathBuf};

/// The declarations of what a graph exports and receives (the same file as `graphs/graph.d.ts`).
pub const GRAPH_D_TS: &str = include_str!("../../graphs/graph.d.ts");
/// The editor and `tsc` settings for a folder of graphs (the same file as `graphs/jsconfig.json`).
pub const JSCONFIG: &str = include_str!("../../graphs/jsconfig.json");

/// Why a folder could not be scaffolded.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// The folder's name cannot be a graph's slug.
    #[error(
        "{name} cannot be a graph's slug: use lowercase letters, digits, `-` and `_`, starting with a letter or digit (e.g. {suggestion})"
    )]
    BadName {
        /// The name given.
        name: String,
        /// A slug close to it.
        suggestion: String,
    },
    /// A file the scaffold would write is there already.
    #[error(
        "{0} exists already; runner init writes only new files (pick another name or remove it)"
    )]
    Exists(String),
    /// The folder or a file could not be written.
    #[error("cannot write {path}: {reason}")]
    Write {
        /// The file or folder.
        path: String,
        /// Why not.
        reason: std::io::Error,
    },
}

/// The editor and `tsc` settings for a folder of TypeScript graphs (`runner init --ts`): the
/// same options as [`JSCONFIG`], for `*.ts` files.
pub const TSCONFIG: &str = r#"{
  "compilerOptions": {
    "noEmit": true,
    "target": "es2022",
    "module": "es2022",
    "lib": ["es2023", "esnext.array"],
    "types": []
  },
  "include": ["*.ts"]
}
"#;

/// The language of a scaffolded graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// `SLUG.js`, typed by JSDoc comments, with a `jsconfig.json`.
    JavaScript,
    /// `SLUG.ts`, run with its types erased, with a `tsconfig.json`.
    TypeScript,
}

/// Creates the folder `dir` (its last component is the graph's slug) with `SLUG.js`,
/// `SLUG.test.json`, `graph.d.ts` and `jsconfig.json`, and returns the files written. Refuses,
/// before writing anything, a name that is not a slug and a file that exists already.
pub fn init(dir: &Path) -> Result<Vec<PathBuf>, ScaffoldError> {
    init_in(dir, Language::JavaScript)
}

/// [`init`] in `language`: for TypeScript, `SLUG.ts` and a `tsconfig.json` instead.
pub fn init_in(dir: &Path, language: Language) -> Result<Vec<PathBuf>, ScaffoldError> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !graph_js::is_valid_slug(&name) {
        return Err(ScaffoldError::BadName {
            suggestion: slug_like(&name),
            name,
        });
    }
    let (graph, config) = match language {
        Language::JavaScript => (
            (dir.join(format!("{name}.js")), graph_source(&name)),
            (dir.join("jsconfig.json"), JSCONFIG.to_owned()),
        ),
        Language::TypeScript => (
            (dir.join(format!("{name}.ts")), typescript_source(&name)),
            (dir.join("tsconfig.json"), TSCONFIG.to_owned()),
        ),
    };
    let files = [
        graph,
        (dir.join(format!("{name}.test.json")), test_source(&name)),
        (dir.join("graph.d.ts"), GRAPH_D_TS.to_owned()),
        config,
    ];
    if let Some((taken, _)) = files.iter().find(|(path, _)| path.exists()) {
        return Err(ScaffoldError::Exists(taken.display().to_string()));
    }
    let failed = |path: &Path| {
        let path = path.display().to_string();
        move |reason| ScaffoldError::Write { path, reason }
    };
    std::fs::create_dir_all(dir).map_err(failed(dir))?;
    for (path, text) in &files {
        // `create_new`: a file that appeared since the check above is not overwritten.
        use std::io::Write;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .and_then(|mut file| file.write_all(text.as_bytes()))
            .map_err(failed(path))?;
    }
    Ok(files.into_iter().map(|(path, _)| path).collect())
}

/// `name` made into a slug: lowercase, other characters as `-`.
fn slug_like(name: &str) -> String {
    let slug: String = name
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let slug = slug.trim_matches(|c| c == '-' || c == '_');
    if slug.is_empty() {
        "my-graph".to_owned()
    } else {
        // A slug has at most 64 characters.
        slug.chars().take(64).collect()
    }
}

/// A first graph: two agents at once, a log line, a JSON result.
fn graph_source(slug: &str) -> String {
    format!(
        r#"/** @type {{GraphMeta}} */
export const meta = {{
  name: "{slug}",
  slug: "{slug}",
  version: "0.1.0",
  description: "Asks two agents about a topic at once and returns both answers",
}};

// `g` is everything the graph can do: g.agent, g.tool, g.graph, g.retry, g.sleep, g.log and
// g.budget (graph.d.ts describes each). `runner test` runs {slug}.test.json with scripted
// agent replies; `runner run {slug}.js --args '{{"topic": "rivers"}}'` runs it for real.
/** @param {{GraphArgs}} args @param {{G}} g */
export default async function (args, g) {{
  const topic = args.topic ?? "graphs";
  const [facts, angle] = await Promise.all([
    g.agent({{ prompt: `List three facts about ${{topic}}.`, label: "facts" }}),
    g.agent({{ prompt: `Suggest an angle for a short note about ${{topic}}.`, label: "angle" }}),
  ]);
  g.log(`used ${{g.budget().used}} tokens`);
  return {{ topic, facts: facts.text, angle: angle.text }};
}}
"#
    )
}

/// The first graph in TypeScript: [`graph_source`]'s graph, typed by annotations instead of
/// JSDoc comments.
fn typescript_source(slug: &str) -> String {
    format!(
        r#"export const meta = {{
  name: "{slug}",
  slug: "{slug}",
  version: "0.1.0",
  description: "Asks two agents about a topic at once and returns both answers",
}} satisfies GraphMeta;

interface Note {{
  topic: string;
  facts: string;
  angle: string;
}}

// `g` is everything the graph can do: g.agent, g.tool, g.graph, g.retry, g.sleep, g.log and
// g.budget (graph.d.ts describes each). The types are erased when it runs, with no build step;
// `runner check --types {slug}.ts` type-checks it. `runner test` runs {slug}.test.json with
// scripted agent replies.
export default async function (args: GraphArgs, g: G): Promise<Note> {{
  const topic: string = (args.topic as string | undefined) ?? "graphs";
  const [facts, angle] = await Promise.all([
    g.agent({{ prompt: `List three facts about ${{topic}}.`, label: "facts" }}),
    g.agent({{ prompt: `Suggest an angle for a short note about ${{topic}}.`, label: "angle" }}),
  ]);
  g.log(`used ${{g.budget().used}} tokens`);
  return {{ topic, facts: facts.text, angle: angle.text }};
}}
"#
    )
}

/// The first graph's test: scripted replies and the result they give.
fn test_source(slug: &str) -> String {
    format!(
        r#"{{
  "name": "{slug}: both agents answer",
  "args": {{ "topic": "rivers" }},
  "replies": {{
    "replies": [
      {{ "label": "facts", "text": "Rivers flow downhill.", "tokens": 30 }},
      {{ "label": "angle", "text": "Where rivers begin.", "tokens": 20 }}
    ]
  }},
  "expect": {{
    "status": "completed",
    "result": {{ "topic": "rivers", "facts": "Rivers flow downhill.", "angle": "Where rivers begin." }},
    "total_tokens": 50
  }}
}}
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_that_is_no_slug_is_refused_with_one_that_is() {
        assert_eq!(slug_like("My Graph!"), "my-graph");
        assert_eq!(slug_like("__"), "my-graph");
        let dir = tempfile::tempdir().expect("tempdir");
        let refused = init(&dir.path().join("My Graph")).unwrap_err().to_string();
        assert!(refused.contains("e.g. my-graph"), "{refused}");
        assert!(!dir.path().join("My Graph").exists(), "nothing written");
    }

    #[test]
    fn init_writes_four_files_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let written = init(&dir.path().join("demo")).expect("scaffolds");
        assert_eq!(written.len(), 4);
        let graph = std::fs::read_to_string(dir.path().join("demo/demo.js")).expect("graph");
        let meta = graph_js::describe(&graph, &graph_js::Limits::default()).expect("valid");
        assert_eq!(meta.slug, "demo");
        let again = init(&dir.path().join("demo")).unwrap_err().to_string();
        assert!(again.contains("demo.js exists already"), "{again}");
    }

    #[test]
    fn init_in_typescript_writes_a_graph_that_erases_to_a_valid_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let written = init_in(&dir.path().join("demo"), Language::TypeScript).expect("scaffolds");
        let names: Vec<String> = written
            .iter()
            .filter_map(|p| Some(p.file_name()?.to_str()?.to_owned()))
            .collect();
        assert_eq!(
            names,
            ["demo.ts", "demo.test.json", "graph.d.ts", "tsconfig.json"]
        );
        let script = crate::input::read_script(&dir.path().join("demo/demo.ts")).expect("erases");
        let meta = graph_js::describe(&script, &graph_js::Limits::default()).expect("valid");
        assert_eq!(meta.slug, "demo");
    }
}
