//! Tools a graph may call (after approvals): `fs.read`, `fs.write`, `fs.list`, confined to one
//! folder. Paths are relative, may not climb out with `..`, and are checked again after
//! resolving symlinks, so neither a path nor a link can reach outside the folder.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use graph_js::Failure;
use serde::Deserialize;
use serde_json::{Value, json};

use super::agents::ToolSpec;
use super::approvals::BoxFuture;
use crate::input::{InputError, read_at_most};

/// Largest file `fs.read` returns.
pub const MAX_READ_BYTES: u64 = 1024 * 1024;
/// Largest text `fs.write` accepts.
pub const MAX_WRITE_BYTES: usize = 1024 * 1024;
/// Most entries `fs.list` returns (the rest are counted in `truncated`).
pub const MAX_LIST_ENTRIES: usize = 1000;
/// Longest accepted relative path.
pub const MAX_PATH_CHARS: usize = 1024;

/// One tool.
pub trait Tool: Send + Sync {
    /// Name, description and argument schema.
    fn spec(&self) -> ToolSpec;
    /// Runs the tool. Approvals were applied by the caller.
    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, Failure>>;
}

/// The tools of a run, by name.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl ToolRegistry {
    /// The standard tools: the `fs.*` tools confined to `folder` (when given).
    pub fn standard(folder: Option<PathBuf>) -> Result<Self, Failure> {
        let folder = match folder {
            Some(path) => Ok(Arc::new(Folder::open(&path)?)),
            None => Err(no_folder()),
        };
        Ok(Self::with_fs(folder))
    }

    /// The standard tools when the folder given for them cannot be opened (deleted since it was
    /// chosen, say): the `fs.*` tools fail with `reason` instead of running, so a run learns why.
    pub fn with_unusable_folder(reason: Failure) -> Self {
        Self::with_fs(Err(reason))
    }

    fn with_fs(folder: FolderSlot) -> Self {
        let mut registry = Self::default();
        registry.register(Arc::new(FsRead(folder.clone())));
        registry.register(Arc::new(FsWrite(folder.clone())));
        registry.register(Arc::new(FsList(folder)));
        registry
    }

    /// Adds (or replaces) a tool.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.spec().name, tool);
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    /// Every tool's spec.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|t| t.spec()).collect()
    }

    /// Every tool's name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// The `not_found` failure for `name`, which no tool has: it names the nearest known tool
    /// (by edit distance) and lists the known ones, and never advises allowing `name`.
    pub fn unknown(&self, name: &str) -> Failure {
        Failure::not_found(self.unknown_message(name))
    }

    /// `there is no tool called NAME; did you mean NEAREST? The known tools are ...`.
    pub fn unknown_message(&self, name: &str) -> String {
        let known: Vec<&str> = self.names().collect();
        match nearest(name, &known) {
            Some(near) => format!(
                "there is no tool called {name}; did you mean {near}? The known tools are {}",
                known.join(", ")
            ),
            None => format!("there is no tool called {name}; this run has no tools"),
        }
    }

    /// Refuses a tool name in a policy (`--allow`, `--ask`, `--deny`, a test case's lists) that
    /// no tool has, naming the nearest known one: a typo would otherwise allow nothing.
    pub fn check_known<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), UnknownTool> {
        match names.into_iter().find(|n| !self.tools.contains_key(*n)) {
            Some(unknown) => Err(UnknownTool {
                name: unknown.to_owned(),
                message: self.unknown_message(unknown),
            }),
            None => Ok(()),
        }
    }
}

/// A tool name in an approval policy that no tool has: the message names the nearest known
/// tool and lists them all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct UnknownTool {
    /// The name as given.
    pub name: String,
    /// `there is no tool called NAME; did you mean NEAREST? The known tools are ...`.
    message: String,
}

/// The candidate nearest to `name` by edit distance (the first of equals, in the given order).
pub fn nearest<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .min_by_key(|c| edit_distance(name, c))
        .copied()
}

pub use graph_js::edit_distance;

/// The folder the fs tools may use, canonicalized once.
#[derive(Debug)]
pub struct Folder {
    root: PathBuf,
}

impl Folder {
    /// Opens `path` (which must be an existing directory).
    pub fn open(path: &Path) -> Result<Self, Failure> {
        let root = path.canonicalize().map_err(|e| {
            Failure::invalid(format!("the folder {} cannot be used: {e}", path.display()))
        })?;
        if !root.is_dir() {
            return Err(Failure::invalid(format!(
                "the folder {} is not a directory",
                path.display()
            )));
        }
        Ok(Self { root })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Joins a relative path to the root after checking its form.
    fn join(&self, relative: &str) -> Result<PathBuf, Failure> {
        if relative.chars().count() > MAX_PATH_CHARS {
            return Err(Failure::invalid(format!(
                "the path is longer than {MAX_PATH_CHARS} characters"
            )));
        }
        if relative.contains('\0') {
            return Err(Failure::invalid("the path contains a NUL character"));
        }
        let path = Path::new(relative);
        if path.is_absolute() || relative.starts_with('/') || relative.starts_with('\\') {
            return Err(Failure::denied(format!(
                "path {relative} is absolute; use a path relative to the folder"
            )));
        }
        for component in path.components() {
            match component {
                Component::Normal(_) | Component::CurDir => {}
                Component::ParentDir => {
                    return Err(Failure::denied(format!(
                        "path {relative} uses `..`; paths must stay inside the folder"
                    )));
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(Failure::denied(format!(
                        "path {relative} is absolute; use a path relative to the folder"
                    )));
                }
            }
        }
        Ok(self.root.join(path))
    }

    /// Checks that an existing path, with every symlink resolved, is inside the folder.
    fn confine(&self, relative: &str, path: &Path) -> Result<PathBuf, Failure> {
        let real = path.canonicalize().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                Failure::not_found(format!("{relative} does not exist in the folder"))
            }
            _ => Failure::failed(format!("cannot resolve {relative}: {e}")),
        })?;
        if real.starts_with(&self.root) {
            Ok(real)
        } else {
            Err(Failure::denied(format!(
                "path {relative} leads outside the folder through a symlink"
            )))
        }
    }

    /// Resolves a path to read or list.
    pub fn existing(&self, relative: &str) -> Result<PathBuf, Failure> {
        let joined = self.join(relative)?;
        self.confine(relative, &joined)
    }

    /// Resolves a path to write: its parent folders are created inside the folder, and an
    /// existing target may not be a symlink.
    pub fn for_writing(&self, relative: &str) -> Result<PathBuf, Failure> {
        // `a/`, `a/.` and `.` name folders; `Path` would read them as the file `a` or the
        // folder's own name.
        let no_file_name = || {
            Failure::invalid(format!(
                "path `{relative}` does not name a file; give one like notes/summary.md"
            ))
        };
        let last = relative.rsplit(['/', '\\']).next().unwrap_or_default();
        if last.is_empty() || last == "." {
            return Err(no_file_name());
        }
        let joined = self.join(relative)?;
        let file_name = joined.file_name().ok_or_else(no_file_name)?.to_owned();
        let parent = joined.parent().unwrap_or(&self.root).to_path_buf();
        // Check the deepest existing ancestor before creating anything below it.
        let mut existing = parent.clone();
        while !existing.exists() {
            match existing.parent() {
                Some(up) => existing = up.to_path_buf(),
                None => break,
            }
        }
        self.confine(relative, &existing)?;
        std::fs::create_dir_all(&parent).map_err(|e| {
            Failure::failed(format!("cannot create the folders for {relative}: {e}"))
        })?;
        let real_parent = self.confine(relative, &parent)?;
        let target = real_parent.join(file_name);
        if let Ok(meta) = std::fs::symlink_metadata(&target) {
            if meta.file_type().is_symlink() {
                return Err(Failure::denied(format!(
                    "{relative} is a symlink; fs.write does not write through links"
                )));
            }
            if meta.is_dir() {
                return Err(Failure::invalid(format!("{relative} is a folder")));
            }
            if !meta.is_file() {
                return Err(not_a_file(relative));
            }
        }
        Ok(target)
    }
}

/// A pipe, socket or device: opening one can block for ever (a FIFO waits for its other end)
/// or never end (a device), so the fs tools refuse them.
fn not_a_file(relative: &str) -> Failure {
    Failure::invalid(format!(
        "{relative} is not a regular file (a pipe, socket or device); the fs tools only read and write files"
    ))
}

fn no_folder() -> Failure {
    Failure::invalid("no folder is configured for the fs tools; pass --folder DIR")
}

fn parse_args<T: for<'de> Deserialize<'de>>(tool: &str, args: Value) -> Result<T, Failure> {
    serde_json::from_value(args).map_err(|e| Failure::invalid(format!("{tool}: {e}")))
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Failure> + Send + 'static,
) -> Result<T, Failure> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Failure::failed(format!("the tool stopped unexpectedly: {e}")))?
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathArgs {
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    text: String,
}

/// The folder the fs tools work in, or why they have none.
type FolderSlot = Result<Arc<Folder>, Failure>;

struct FsRead(FolderSlot);
struct FsWrite(FolderSlot);
struct FsList(FolderSlot);

fn path_schema(extra: Option<(&str, &str)>) -> Value {
    let mut properties =
        json!({"path": {"type": "string", "description": "path relative to the folder"}});
    let mut required = vec!["path"];
    if let Some((name, description)) = extra {
        properties[name] = json!({"type": "string", "description": description});
        required.push(name);
    }
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

impl Tool for FsRead {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "fs.read".into(),
            description: format!(
                "Reads a UTF-8 text file (at most {MAX_READ_BYTES} bytes) from the folder."
            ),
            parameters: path_schema(None),
        }
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, Failure>> {
        Box::pin(async move {
            let folder = self.0.clone()?;
            let args: PathArgs = parse_args("fs.read", args)?;
            blocking(move || {
                let path = folder.existing(&args.path)?;
                let meta = std::fs::metadata(&path)
                    .map_err(|e| Failure::failed(format!("cannot read {}: {e}", args.path)))?;
                if meta.is_dir() {
                    return Err(Failure::invalid(format!(
                        "{} is a folder; use fs.list",
                        args.path
                    )));
                }
                if !meta.is_file() {
                    return Err(not_a_file(&args.path));
                }
                let too_big = |size: u64| {
                    Failure::invalid(format!(
                        "{} is {size} bytes; fs.read reads at most {MAX_READ_BYTES}",
                        args.path
                    ))
                };
                if meta.len() > MAX_READ_BYTES {
                    return Err(too_big(meta.len()));
                }
                // Bounded: the file may have grown since its size was read.
                let bytes = match read_at_most(&path, MAX_READ_BYTES) {
                    Ok(bytes) => bytes,
                    Err(InputError::TooLarge { limit }) => {
                        let now = std::fs::metadata(&path).map_or(limit + 1, |m| m.len());
                        return Err(too_big(now));
                    }
                    Err(e) => {
                        return Err(Failure::failed(format!("cannot read {}: {e}", args.path)));
                    }
                };
                let text = String::from_utf8(bytes)
                    .map_err(|_| Failure::invalid(format!("{} is not UTF-8 text", args.path)))?;
                Ok(json!({"text": text}))
            })
            .await
        })
    }
}

impl Tool for FsWrite {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "fs.write".into(),
            description: format!(
                "Writes a UTF-8 text file (at most {MAX_WRITE_BYTES} bytes) into the folder, creating parent folders."
            ),
            parameters: path_schema(Some(("text", "the file's new content"))),
        }
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, Failure>> {
        Box::pin(async move {
            let folder = self.0.clone()?;
            let args: WriteArgs = parse_args("fs.write", args)?;
            if args.text.len() > MAX_WRITE_BYTES {
                return Err(Failure::invalid(format!(
                    "the text is {} bytes; fs.write writes at most {MAX_WRITE_BYTES}",
                    args.text.len()
                )));
            }
            blocking(move || {
                let path = folder.for_writing(&args.path)?;
                crate::output::replace_file(&path, args.text.as_bytes())
                    .map_err(|e| Failure::failed(format!("cannot write {}: {e}", args.path)))?;
                Ok(json!({"bytes": args.text.len()}))
            })
            .await
        })
    }
}

impl Tool for FsList {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "fs.list".into(),
            description: format!(
                "Lists a folder's entries (name and kind: file, dir, symlink), at most {MAX_LIST_ENTRIES}. Use \".\" for the top."
            ),
            parameters: path_schema(None),
        }
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, Failure>> {
        Box::pin(async move {
            let folder = self.0.clone()?;
            let args: PathArgs = parse_args("fs.list", args)?;
            blocking(move || {
                let path = folder.existing(&args.path)?;
                let read = std::fs::read_dir(&path)
                    .map_err(|e| Failure::failed(format!("cannot list {}: {e}", args.path)))?;
                let mut entries = Vec::new();
                let mut total = 0usize;
                for entry in read {
                    let entry = entry
                        .map_err(|e| Failure::failed(format!("cannot list {}: {e}", args.path)))?;
                    total += 1;
                    let kind = match entry.file_type() {
                        Ok(t) if t.is_symlink() => "symlink",
                        Ok(t) if t.is_dir() => "dir",
                        Ok(t) if t.is_file() => "file",
                        _ => "other",
                    };
                    entries.push((entry.file_name().to_string_lossy().into_owned(), kind));
                }
                entries.sort();
                entries.truncate(MAX_LIST_ENTRIES);
                let entries: Vec<Value> = entries
                    .into_iter()
                    .map(|(name, kind)| json!({"name": name, "kind": kind}))
                    .collect();
                let mut out = json!({"entries": entries});
                if total > MAX_LIST_ENTRIES {
                    out["truncated"] = json!(total - MAX_LIST_ENTRIES);
                }
                Ok(out)
            })
            .await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use graph_js::FailureCode;
    use std::time::Duration;

    fn setup() -> (tempfile::TempDir, ToolRegistry) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        std::fs::create_dir(&root).expect("root");
        let registry = ToolRegistry::standard(Some(root)).expect("registry");
        (dir, registry)
    }

    async fn call(registry: &ToolRegistry, name: &str, args: Value) -> Result<Value, Failure> {
        registry.get(name).expect("tool exists").call(args).await
    }

    #[test]
    fn the_nearest_name_is_the_one_fewest_edits_away() {
        assert_eq!(edit_distance("fs.wirte", "fs.write"), 2);
        assert_eq!(edit_distance("fs.wrte", "fs.write"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("ü", "u"), 1);
        let known = ["fs.list", "fs.read", "fs.write"];
        assert_eq!(nearest("fs.wirte", &known), Some("fs.write"));
        assert_eq!(nearest("fs.raed", &known), Some("fs.read"));
        assert_eq!(nearest("list", &known), Some("fs.list"));
        assert_eq!(nearest("x", &[]), None);
        let (_dir, tools) = setup();
        assert!(tools.check_known(["fs.read", "fs.write"]).is_ok());
        let refused = tools
            .check_known(["fs.read", "fs.lst"])
            .expect_err("a typo");
        assert_eq!(refused.name, "fs.lst");
        assert!(
            refused.to_string().contains("did you mean fs.list?"),
            "{refused}"
        );
    }

    #[tokio::test]
    async fn write_read_list_round_trip_creating_parents() {
        let (dir, tools) = setup();
        let out = call(
            &tools,
            "fs.write",
            json!({"path": "notes/a/b.md", "text": "héllo"}),
        )
        .await
        .expect("written");
        assert_eq!(out, json!({"bytes": 6}));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("root/notes/a/b.md")).expect("file"),
            "héllo"
        );
        let read = call(&tools, "fs.read", json!({"path": "notes/a/b.md"}))
            .await
            .expect("read");
        assert_eq!(read, json!({"text": "héllo"}));
        let list = call(&tools, "fs.list", json!({"path": "notes"}))
            .await
            .expect("list");
        assert_eq!(list, json!({"entries": [{"name": "a", "kind": "dir"}]}));
    }

    #[tokio::test]
    async fn escapes_are_denied_and_nothing_is_written() {
        let (dir, tools) = setup();
        for path in [
            "../outside.txt",
            "a/../../outside.txt",
            "/tmp/outside.txt",
            "./../x",
        ] {
            let err = call(&tools, "fs.write", json!({"path": path, "text": "x"}))
                .await
                .unwrap_err();
            assert_eq!(err.code, FailureCode::Denied, "{path}: {err}");
        }
        assert!(!dir.path().join("outside.txt").exists());
        let err = call(&tools, "fs.read", json!({"path": "../root/x"}))
            .await
            .unwrap_err();
        assert_eq!(err.code, FailureCode::Denied);
    }

    #[tokio::test]
    async fn a_write_replaces_the_file_and_not_what_a_hard_link_shares() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, tools) = setup();
        let root = dir.path().join("root");
        // A hard link in the folder to a file outside it: writing the link's name must not
        // change the outside file.
        let outside = dir.path().join("outside.txt");
        std::fs::write(&outside, "the owner's file").expect("outside");
        std::fs::hard_link(&outside, root.join("linked.txt")).expect("hard link");
        let private = root.join("private.txt");
        std::fs::write(&private, "old").expect("private");
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        for (path, text) in [("linked.txt", "new"), ("private.txt", "new and longer")] {
            call(&tools, "fs.write", json!({"path": path, "text": text}))
                .await
                .expect("written");
            assert_eq!(
                std::fs::read_to_string(root.join(path)).expect("read"),
                text
            );
        }
        assert_eq!(
            std::fs::read_to_string(&outside).expect("outside"),
            "the owner's file"
        );
        let mode = std::fs::metadata(&private)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // No temporary file is left behind.
        let mut names: Vec<_> = std::fs::read_dir(&root)
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["linked.txt", "private.txt"]);
    }

    #[tokio::test]
    async fn a_write_path_that_names_a_folder_is_explained() {
        let (dir, tools) = setup();
        for path in [".", "", "./", "a/", "a/.", "notes/./"] {
            let err = call(&tools, "fs.write", json!({"path": path, "text": "x"}))
                .await
                .unwrap_err();
            assert_eq!(err.code, FailureCode::Invalid, "{path:?}: {err}");
            assert!(err.message.contains("does not name a file"), "{err}");
        }
        let written: Vec<_> = std::fs::read_dir(dir.path().join("root"))
            .expect("root")
            .collect();
        assert!(written.is_empty(), "nothing was written: {written:?}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn symlinks_cannot_lead_outside() {
        let (dir, tools) = setup();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).expect("outside");
        std::fs::write(outside.join("secret.txt"), "secret").expect("secret");
        std::os::unix::fs::symlink(&outside, dir.path().join("root/link")).expect("dir link");
        std::os::unix::fs::symlink(
            outside.join("secret.txt"),
            dir.path().join("root/file-link"),
        )
        .expect("file link");

        let read = call(&tools, "fs.read", json!({"path": "link/secret.txt"}))
            .await
            .unwrap_err();
        assert_eq!(read.code, FailureCode::Denied, "{read}");
        let read = call(&tools, "fs.read", json!({"path": "file-link"}))
            .await
            .unwrap_err();
        assert_eq!(read.code, FailureCode::Denied, "{read}");
        let list = call(&tools, "fs.list", json!({"path": "link"}))
            .await
            .unwrap_err();
        assert_eq!(list.code, FailureCode::Denied, "{list}");
        let write = call(
            &tools,
            "fs.write",
            json!({"path": "link/new.txt", "text": "x"}),
        )
        .await
        .unwrap_err();
        assert_eq!(write.code, FailureCode::Denied, "{write}");
        let write = call(
            &tools,
            "fs.write",
            json!({"path": "file-link", "text": "x"}),
        )
        .await
        .unwrap_err();
        assert_eq!(write.code, FailureCode::Denied, "{write}");
        assert!(!outside.join("new.txt").exists());
        assert_eq!(
            std::fs::read_to_string(outside.join("secret.txt")).expect("secret"),
            "secret"
        );
    }

    #[tokio::test]
    async fn size_limits_at_and_past_the_limit() {
        let (dir, tools) = setup();
        let at = "x".repeat(MAX_WRITE_BYTES);
        call(&tools, "fs.write", json!({"path": "big.txt", "text": at}))
            .await
            .expect("at the limit");
        call(&tools, "fs.read", json!({"path": "big.txt"}))
            .await
            .expect("read at the limit");
        let past = "x".repeat(MAX_WRITE_BYTES + 1);
        let err = call(
            &tools,
            "fs.write",
            json!({"path": "big2.txt", "text": past}),
        )
        .await
        .unwrap_err();
        assert_eq!(err.code, FailureCode::Invalid);
        std::fs::write(
            dir.path().join("root/huge.txt"),
            vec![b'x'; MAX_READ_BYTES as usize + 1],
        )
        .expect("huge");
        let err = call(&tools, "fs.read", json!({"path": "huge.txt"}))
            .await
            .unwrap_err();
        assert_eq!(err.code, FailureCode::Invalid);
    }

    #[tokio::test]
    async fn bad_arguments_and_missing_files_are_explained() {
        let (_dir, tools) = setup();
        let err = call(
            &tools,
            "fs.write",
            json!({"path": "a", "text": "x", "mode": 7}),
        )
        .await
        .unwrap_err();
        assert_eq!(err.code, FailureCode::Invalid);
        let err = call(&tools, "fs.read", json!({"path": "missing.txt"}))
            .await
            .unwrap_err();
        assert_eq!(err.code, FailureCode::NotFound);
        let no_folder = ToolRegistry::standard(None).expect("registry");
        let err = call(&no_folder, "fs.read", json!({"path": "a"}))
            .await
            .unwrap_err();
        assert!(err.message.contains("--folder"), "{err}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn pipes_are_refused_instead_of_blocking_for_ever() {
        let (dir, tools) = setup();
        let fifo = dir.path().join("root/pipe");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo runs");
        assert!(made.success());
        for (name, args) in [
            ("fs.read", json!({"path": "pipe"})),
            ("fs.write", json!({"path": "pipe", "text": "x"})),
        ] {
            let answer =
                tokio::time::timeout(Duration::from_secs(20), call(&tools, name, args)).await;
            let Ok(answer) = answer else {
                // Open the other end, so the stuck tool thread ends and the test can fail.
                let fifo = fifo.clone();
                std::thread::spawn(move || {
                    let _ = std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(fifo);
                });
                panic!("{name} blocked on a FIFO");
            };
            let err = answer.unwrap_err();
            assert_eq!(err.code, FailureCode::Invalid, "{name}: {err}");
            assert!(err.message.contains("not a regular file"), "{err}");
        }
        let listed = call(&tools, "fs.list", json!({"path": "."}))
            .await
            .expect("listed");
        assert_eq!(
            listed,
            json!({"entries": [{"name": "pipe", "kind": "other"}]})
        );
    }
}
