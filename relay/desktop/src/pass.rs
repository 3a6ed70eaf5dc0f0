//! A pass: the start-up work still owed, the completions kept in memory, the outbox, the
//! service's project list when due, the owed withdrawals, then each enabled project's sync and
//! its commands, one at a time. [`Relay::handle`] is one queued command's whole path.

use std::sync::atomic::Ordering;

use relay_protocol::{DesktopProblem, QueuedCommand};
use tokio_util::sync::CancellationToken;

use crate::api::ApiError;
use crate::consent::{Consent, SyncError};
use crate::ended::Unrecorded;
use crate::state::StateError;
use crate::{Event, MAX_SYNCS_PER_PROJECT_PASS, PROJECTS_REFRESH_INTERVAL, Relay, Tell, disk};

/// What passes keep from one to the next. Exactly one pass holds it at a time: the loop hands
/// it to the pass it starts, and the pass hands it back as it ends.
pub(crate) struct PassState {
    /// Ends the state could not take (its disk was full), kept until written.
    pub(crate) unrecorded: Vec<Unrecorded>,
    /// When the service's project list was last fetched (`None`: due at the next pass).
    projects_fetched: Option<tokio::time::Instant>,
    /// Why no run starts now (the disk of the state is too full), as every sync tells the
    /// service.
    problem: Option<DesktopProblem>,
    /// The service asked (`Retry-After`) not to be called again before this.
    quiet_until: Option<tokio::time::Instant>,
    /// The relay's start-up work failed on a state error: each pass tries it again first.
    start_up_owed: bool,
}

impl PassState {
    /// The state of a first pass; `start_up_owed` when the relay's start-up work is still to do.
    pub(crate) fn new(start_up_owed: bool) -> Self {
        PassState {
            unrecorded: Vec::new(),
            projects_fetched: None,
            problem: None,
            quiet_until: None,
            start_up_owed,
        }
    }

    /// Whether the service may be called now (its last `Retry-After` has passed).
    pub(crate) fn may_call_service(&self) -> bool {
        self.quiet_until
            .is_none_or(|until| tokio::time::Instant::now() >= until)
    }

    /// Notes the wait `error` asks for, if it asks for one: the pass calls the service no
    /// sooner than that.
    pub(crate) fn asked_to_wait(&mut self, error: &ApiError) {
        if let Some(wait) = error.retry_after() {
            let until = tokio::time::Instant::now() + wait;
            tracing::info!(
                "the service asked the desktop to wait {wait:?} before calling it again (Retry-After)"
            );
            self.quiet_until = Some(self.quiet_until.map_or(until, |now| now.max(until)));
        }
    }
}

impl Relay {
    /// One pass, outside the loop (tests, and callers that drive passes themselves): its
    /// working state is its own, so an end the state could not take is posted now and kept
    /// only until this pass ends.
    pub async fn pass(&self, shutdown: &CancellationToken) {
        self.run_pass(&mut PassState::new(false), &Tell::default(), shutdown)
            .await;
    }

    /// One pass with the passes' working state, telling the loop what it does.
    pub(crate) async fn run_pass(
        &self,
        pass: &mut PassState,
        tell: &Tell,
        shutdown: &CancellationToken,
    ) {
        self.stats.passes.fetch_add(1, Ordering::Relaxed);
        if pass.start_up_owed {
            pass.start_up_owed = !self.start_up().await;
        }
        self.mend_unrecorded(pass).await;
        if !pass.may_call_service() {
            tracing::debug!("the service asked to wait (Retry-After): this pass leaves it alone");
            return;
        }
        self.deliver_outbox_paced(pass).await;
        self.resume_interrupted(pass, tell, shutdown).await;
        self.refresh_projects(pass).await;
        self.record_withdrawn_queue().await;
        self.deliver_withdrawals(pass.problem.as_ref()).await;
        let projects = match self.state.call(|state| state.enabled_projects()).await {
            Ok(projects) => projects,
            Err(e) => {
                tracing::error!(
                    "cannot read the enabled projects (the next pass tries again): {e}"
                );
                return;
            }
        };
        // One sync per project and pass (SPEC.md §2); in long-poll mode the project is synced
        // again after its commands ran, until nothing is queued.
        let syncs = if self.config.long_poll.is_some() {
            MAX_SYNCS_PER_PROJECT_PASS
        } else {
            1
        };
        for project in projects {
            for _ in 0..syncs {
                if shutdown.is_cancelled() || !pass.may_call_service() {
                    return;
                }
                // Checked before the sync, so the sync tells the service why nothing starts.
                let blocked = self.check_disk(pass, tell).is_some();
                let commands = match self.sync_project(pass, tell, &project).await {
                    Ok(commands) => commands,
                    Err(e) => {
                        tracing::warn!(project, "sync failed: {e}");
                        break;
                    }
                };
                if commands.is_empty() || blocked {
                    // Below the free-space floor the commands stay queued on the service.
                    break;
                }
                for command in commands {
                    if shutdown.is_cancelled() {
                        return;
                    }
                    if let Err(e) = self.handle(pass, tell, &project, command, shutdown).await {
                        tracing::error!(
                            project,
                            "a command could not be handled, it stays queued on the service: {e}"
                        );
                    }
                }
            }
        }
    }

    /// One queued command, top to bottom: the consent re-check, the start, the run, the
    /// bound, the outbox, the post. Checked first: the free-space floor (below it the command
    /// stays queued, and the next sync tells the service why).
    async fn handle(
        &self,
        pass: &mut PassState,
        tell: &Tell,
        project: &str,
        command: QueuedCommand,
        shutdown: &CancellationToken,
    ) -> Result<(), StateError> {
        if self.check_disk(pass, tell).is_some() {
            return Ok(());
        }
        let ended = match self.consent(project, &command).await? {
            Consent::Given(session) => {
                let Some(execution) = self.start(project, &command, *session, shutdown).await?
                else {
                    return Ok(());
                };
                let ran = self.execute(pass, &execution, tell, shutdown).await;
                let Some(ended) = execution.end(ran, shutdown) else {
                    return Ok(());
                };
                ended
            }
            Consent::Withdrawn => self.refuse(project, &command).await?,
        };
        let kept = self.record(ended).await;
        self.post(pass, kept).await;
        Ok(())
    }

    /// A pass's `sync` of `project`, carrying its snapshot: its well-formed queued commands.
    async fn sync_project(
        &self,
        pass: &mut PassState,
        tell: &Tell,
        project: &str,
    ) -> Result<Vec<QueuedCommand>, SyncError> {
        match self.upload(project, tell, pass.problem.as_ref()).await {
            Ok(answer) => {
                for damaged in &answer.damaged {
                    tracing::warn!(
                        project,
                        command = damaged.command_id,
                        "the service cannot hand out a queued run: {}",
                        damaged.error
                    );
                }
                Ok(self.take_commands(project, answer.commands, true))
            }
            Err(e) => {
                if let Some(error) = e.api() {
                    pass.asked_to_wait(error);
                }
                Err(e)
            }
        }
    }

    /// Fetches the service's projects for this token when due ([`PROJECTS_REFRESH_INTERVAL`]),
    /// keeps them for the owner's listings, and warns about an enabled project the service
    /// does not know for this token (its syncs can only be refused).
    async fn refresh_projects(&self, pass: &mut PassState) {
        let due = pass
            .projects_fetched
            .is_none_or(|at| at.elapsed() >= PROJECTS_REFRESH_INTERVAL);
        if !due {
            return;
        }
        let projects = match self.api.projects().await {
            Ok(projects) => projects,
            Err(e) => {
                tracing::debug!("cannot fetch the service's projects for this token: {e}");
                pass.asked_to_wait(&e);
                if !e.is_retryable() {
                    // An older service without the list: ask again after the interval only.
                    pass.projects_fetched = Some(tokio::time::Instant::now());
                }
                return;
            }
        };
        pass.projects_fetched = Some(tokio::time::Instant::now());
        let (kept, now) = (projects.clone(), self.clock.now());
        let enabled = self
            .state
            .call(move |state| {
                if let Err(e) = state.set_service_projects(&kept, now) {
                    tracing::warn!("cannot keep the service's project list: {e}");
                }
                state.enabled_projects()
            })
            .await
            .unwrap_or_default();
        for project in enabled {
            if !projects.iter().any(|p| p.project_id == project) {
                tracing::warn!(
                    project,
                    "this project is enabled here, but the service knows no such project for this desktop token: check the id (`relay desktop project list`), or use a desktop token of the project's owner"
                );
            }
        }
    }

    /// Checks the free space where the state lives against the floor; returns the problem
    /// while it is below (logging one line when that begins and one when it ends, and telling
    /// the loop, whose long polls say it too).
    fn check_disk(&self, pass: &mut PassState, tell: &Tell) -> Option<DesktopProblem> {
        let path = self.state().path()?;
        let floor = self.config.min_free_space;
        let low = match disk::free_bytes(path) {
            Ok(free) => (free < floor).then(|| disk::disk_full(path, free, floor)),
            Err(e) => {
                tracing::debug!("cannot read the free space of {}: {e}", path.display());
                None
            }
        };
        match (pass.problem.is_some(), low) {
            (false, Some(low)) => {
                tracing::error!("disk full: {}", low.detail);
                pass.problem = Some(low);
                tell.send(Event::Problem(pass.problem.clone()));
            }
            (true, None) => {
                tracing::info!(
                    "free space on the disk of the desktop's state is back above the floor: runs start again"
                );
                pass.problem = None;
                tell.send(Event::Problem(None));
            }
            // Still low: the first description stands, so syncs do not change it each time.
            _ => {}
        }
        pass.problem.clone()
    }
}
