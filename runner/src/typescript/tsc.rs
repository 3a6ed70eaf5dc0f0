//! `runner check --types`: a graph type-checked against the shipped `graph.d.ts` by the
//! TypeScript compiler, `tsc`, where it is installed. The runner never needs it to run a graph:
//! erasing types checks none of them.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::scaffold::GRAPH_D_TS;

/// What `tsc` is told to check: the graph and the declarations, with the options of the
/// folder's `jsconfig.json` (JavaScript graphs are checked by their JSDoc types).
const TSCONFIG: &str = r#"{
  "compilerOptions": {
    "allowJs": true,
    "checkJs": true,
    "noEmit": true,
    "pretty": false,
    "target": "es2022",
    "module": "es2022",
    "lib": ["es2023", "esnext.array"],
    "types": []
  },
  "files": [GRAPH, "graph.d.ts"]
}
"#;

/// Why a graph could not be type-checked.
#[derive(Debug, thiserror::Error)]
pub enum TypeCheckError {
    /// No `tsc` on `PATH`.
    #[error(
        "`runner check --types` needs the TypeScript compiler, and there is no `tsc` on PATH: install it with `npm install -g typescript` (or put a `tsc` on PATH), or check without --types"
    )]
    NoTsc,
    /// The check's own files could not be written.
    #[error("cannot prepare the type check: {0}")]
    Prepare(std::io::Error),
    /// `tsc` could not be started.
    #[error("cannot run {tsc}: {reason}")]
    Spawn {
        /// The compiler found.
        tsc: String,
        /// Why not.
        reason: std::io::Error,
    },
}

/// What `tsc` said about a graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeCheck {
    /// No type error.
    pub passed: bool,
    /// Its messages, each `FILE:LINE:COL: error TSnnnn: …` as the runner names places.
    pub messages: String,
}

/// The first `tsc` on `PATH`, if any.
pub fn find_tsc() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("tsc"))
        .find(|candidate| candidate.is_file())
}

/// `file` (a `.ts` or `.js` graph) type-checked against `graph.d.ts` by the `tsc` on `PATH`.
pub fn type_check(file: &Path) -> Result<TypeCheck, TypeCheckError> {
    let tsc = find_tsc().ok_or(TypeCheckError::NoTsc)?;
    let dir = tempfile::tempdir().map_err(TypeCheckError::Prepare)?;
    let graph = std::path::absolute(file).map_err(TypeCheckError::Prepare)?;
    let listed = serde_json::to_string(&graph.display().to_string())
        .map_err(|e| TypeCheckError::Prepare(e.into()))?;
    let config = TSCONFIG.replace("GRAPH", &listed);
    std::fs::write(dir.path().join("tsconfig.json"), config).map_err(TypeCheckError::Prepare)?;
    std::fs::write(dir.path().join("graph.d.ts"), GRAPH_D_TS).map_err(TypeCheckError::Prepare)?;
    let out = Command::new(&tsc)
        .arg("-p")
        .arg(dir.path().join("tsconfig.json"))
        .output()
        .map_err(|reason| TypeCheckError::Spawn {
            tsc: tsc.display().to_string(),
            reason,
        })?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(TypeCheck {
        passed: out.status.success(),
        messages: said.lines().map(as_located).collect::<Vec<_>>().join("\n"),
    })
}

/// `FILE(LINE,COL): rest`, tsc's way, as `FILE:LINE:COL: rest`; other lines unchanged.
fn as_located(line: &str) -> String {
    let Some((place, rest)) = line.split_once("): ") else {
        return line.to_owned();
    };
    let Some((file, at)) = place.rsplit_once('(') else {
        return line.to_owned();
    };
    match at.split_once(',') {
        Some((l, c)) if l.parse::<u32>().is_ok() && c.parse::<u32>().is_ok() => {
            format!("{file}:{l}:{c}: {rest}")
        }
        _ => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsc_places_read_as_the_runner_names_them() {
        assert_eq!(
            as_located("/a/b(c).ts(17,5): error TS2322: Type 'number' is not assignable."),
            "/a/b(c).ts:17:5: error TS2322: Type 'number' is not assignable."
        );
        assert_eq!(as_located("Found 1 error."), "Found 1 error.");
        assert_eq!(as_located("f(x): y"), "f(x): y");
    }
}
