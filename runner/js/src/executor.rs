//! The job queue behind promises. boa's own executor runs jobs until none are left, which a
//! promise chain that never ends (`function f() { return Promise.resolve().then(f) }`) never
//! allows; this one asks the host between jobs whether the run must stop.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use boa_engine::error::PanicError;
use boa_engine::job::{Job, JobExecutor};
use boa_engine::{Context, JsResult};

use crate::Shared;

/// How many jobs run between two checks of [`crate::Host::interrupted`].
const JOBS_PER_INTERRUPT_CHECK: u32 = 256;

pub(crate) struct Executor {
    shared: Rc<Shared>,
    jobs: RefCell<VecDeque<Job>>,
}

impl Executor {
    pub(crate) fn new(shared: Rc<Shared>) -> Self {
        Self {
            shared,
            jobs: RefCell::new(VecDeque::new()),
        }
    }

    fn check_interrupt(&self) -> JsResult<()> {
        match self.shared.host.borrow_mut().interrupted() {
            Some(reason) => {
                self.jobs.borrow_mut().clear();
                Err(PanicError::new(reason).into())
            }
            None => Ok(()),
        }
    }
}

impl JobExecutor for Executor {
    fn enqueue_job(self: Rc<Self>, job: Job, _: &mut Context) {
        match job {
            Job::PromiseJob(_) | Job::GenericJob(_) | Job::AsyncJob(_) => {
                self.jobs.borrow_mut().push_back(job);
            }
            // No timers exist in the graph world (g.sleep goes through the host), and weak
            // reference cleanup is optional by the spec.
            _ => {}
        }
    }

    fn run_jobs(self: Rc<Self>, context: &mut Context) -> JsResult<()> {
        let mut since_check = 0u32;
        loop {
            let next = self.jobs.borrow_mut().pop_front();
            let Some(job) = next else {
                break;
            };
            since_check += 1;
            if since_check >= JOBS_PER_INTERRUPT_CHECK {
                since_check = 0;
                self.check_interrupt()?;
            }
            let outcome = match job {
                Job::PromiseJob(job) => job.call(context),
                Job::GenericJob(job) => job.call(context),
                Job::AsyncJob(job) => {
                    let cell = RefCell::new(&mut *context);
                    futures_lite::future::block_on(job.call(&cell))
                }
                _ => Ok(boa_engine::JsValue::undefined()),
            };
            if let Err(error) = outcome {
                self.jobs.borrow_mut().clear();
                return Err(error);
            }
        }
        context.clear_kept_objects();
        self.check_interrupt()
    }
}
