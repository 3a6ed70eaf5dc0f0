//! Nested graphs of a remotely started run: `g.graph(slug)` reaches only the sessions shared
//! with the run's own project (and only while it is enabled), looked up at the call, so the
//! owner's consent covers every graph a remote caller runs. Local `runner` runs keep their
//! folder catalog.

use graph_js::{Failure, Meta};
use runner::host::approvals::BoxFuture;
use runner::host::graphs::{Catalog, GraphSource};

use crate::state::{AsyncState, DesktopState};

/// The sessions shared with one project, as the catalog of that project's runs.
pub struct SharedCatalog {
    state: AsyncState,
    project: String,
}

impl SharedCatalog {
    /// The catalog of runs started by `project`.
    pub fn new(state: AsyncState, project: &str) -> Self {
        Self {
            state,
            project: project.to_owned(),
        }
    }
}

/// The shared session of `project` named `slug`, or the denial naming what the owner does.
fn find(state: &DesktopState, project: &str, slug: &str) -> Result<GraphSource, Failure> {
    let read_failed = |e: crate::state::StateError| {
        Failure::failed(format!("cannot read the shared sessions: {e}"))
    };
    let shared = state.shared_sessions(project).map_err(read_failed)?;
    let enabled = state
        .enabled_projects()
        .map_err(read_failed)?
        .iter()
        .any(|p| p == project);
    if enabled && let Some(session) = shared.into_iter().find(|s| s.slug == slug) {
        return Ok(GraphSource {
            meta: Meta {
                name: session.name,
                slug: session.slug,
                version: session.version,
                description: session.description,
                args: session.args_schema,
            },
            script: session.script.into(),
            file: None,
            engine: None,
        });
    }
    let how = match state
        .sessions()
        .map_err(read_failed)?
        .into_iter()
        .find(|s| s.slug == slug)
    {
        Some(session) => format!(
            "its owner shares it with `relay desktop share --project {project} --session {}`",
            session.id
        ),
        None => format!(
            "its owner adds it with `relay desktop session add FILE` and shares it with `relay desktop share --project {project} --session ID`"
        ),
    };
    Err(Failure::denied(format!(
        "graph `{slug}` is not shared with project {project}, which started this run, so it cannot be called from it: {how}"
    )))
}

impl Catalog for SharedCatalog {
    fn lookup<'a>(&'a self, slug: &'a str) -> BoxFuture<'a, Result<GraphSource, Failure>> {
        Box::pin(async move {
            let (project, slug) = (self.project.clone(), slug.to_owned());
            self.state
                .call(move |state| Ok(find(state, &project, &slug)))
                .await
                .map_err(|e| Failure::failed(format!("the shared-session lookup failed: {e}")))?
        })
    }
}
