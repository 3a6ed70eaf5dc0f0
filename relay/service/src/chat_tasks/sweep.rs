//! The lazy sweep: lapsed leases go back to `queued`, day-old tasks to `expired`.
//!
//! There is no timer: every read, claim and submit sweeps first. The sweep is a write, and a
//! write transaction serialises every poller behind SQLite's one write lock even when it
//! changes nothing, so by default it hides behind a read-only guard (an indexed
//! `SELECT ... LIMIT 1`): an empty poll never takes the write lock.

use std::sync::atomic::{AtomicU64, Ordering};

use super::Tasks;
use crate::store::{StoreError, SweepCounts, TaskRecord};

/// How reads sweep before they look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SweepMode {
    /// Check read-only whether anything is due; write only then. The product's mode.
    #[default]
    Guarded,
    /// Run the sweep's write transaction on every read (the first version, kept for the
    /// benchmark that shows what the guard saves).
    Unguarded,
    /// Never sweep (the benchmark's baseline; leases and expiry then never apply).
    Off,
}

impl SweepMode {
    /// Every mode, in the benchmark's order.
    pub const ALL: [SweepMode; 3] = [SweepMode::Off, SweepMode::Unguarded, SweepMode::Guarded];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            SweepMode::Off => "no sweep",
            SweepMode::Unguarded => "unguarded sweep",
            SweepMode::Guarded => "guarded sweep",
        }
    }
}

/// How often the sweep looked and how often it wrote, since the service started.
#[derive(Debug, Default)]
pub struct SweepStats {
    guard_checks: AtomicU64,
    write_transactions: AtomicU64,
    /// The service clock's millis at the last claim's sweep (0: none yet).
    last_claim_sweep: AtomicU64,
}

impl SweepStats {
    /// Read-only guard checks made.
    pub fn guard_checks(&self) -> u64 {
        self.guard_checks.load(Ordering::Relaxed)
    }

    /// Sweep write transactions run (each took the write lock).
    pub fn write_transactions(&self) -> u64 {
        self.write_transactions.load(Ordering::Relaxed)
    }
}

/// Sweeps what is due at the clock's now, as the configured [`SweepMode`] says.
pub async fn sweep(tasks: &Tasks) -> Result<SweepCounts, StoreError> {
    match tasks.config.sweep {
        SweepMode::Off => return Ok(SweepCounts::default()),
        SweepMode::Unguarded => {}
        SweepMode::Guarded => {
            tasks.sweeps.guard_checks.fetch_add(1, Ordering::Relaxed);
            if !tasks.store.tasks_due(tasks.clock.now()).await? {
                return Ok(SweepCounts::default());
            }
        }
    }
    write_sweep(tasks).await
}

/// How long a replica's claims go without sweeping after one swept.
pub const CLAIM_SWEEP_INTERVAL_MS: u64 = 1_000;

/// The claim's sweep: [`sweep`], at most once per [`CLAIM_SWEEP_INTERVAL_MS`] of the service
/// clock on this replica (one claimer of a burst sweeps, the others skip). A claim is right
/// without it: its conditional write refuses overdue tasks, and a lapsed lease is taken over
/// by the claim's own conditional write of what is stored (`Claim` on a lapsed `claimed`
/// task), so the next claimer gets it at once; the sweep only tidies the others.
pub async fn sweep_for_claim(tasks: &Tasks) -> Result<SweepCounts, StoreError> {
    let now = u64::try_from(tasks.clock.now().unix_millis()).unwrap_or(0);
    let stats = &tasks.sweeps;
    let last = stats.last_claim_sweep.load(Ordering::Relaxed);
    let recent = last != 0 && now >= last && now - last < CLAIM_SWEEP_INTERVAL_MS;
    if recent
        || stats
            .last_claim_sweep
            .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return Ok(SweepCounts::default());
    }
    sweep(tasks).await
}

/// The sweep's write transaction, unconditionally.
async fn write_sweep(tasks: &Tasks) -> Result<SweepCounts, StoreError> {
    tasks
        .sweeps
        .write_transactions
        .fetch_add(1, Ordering::Relaxed);
    let counts = tasks.store.sweep_tasks(tasks.clock.now()).await?;
    if counts.requeued > 0 || counts.expired > 0 {
        tracing::info!(
            requeued = counts.requeued,
            expired = counts.expired,
            "chat tasks swept"
        );
    }
    Ok(counts)
}

/// Up to `limit` open tasks of the link after sweeping what is due: the inbox read. In the
/// guarded mode the guard and the read share one store call, so an empty poll costs one
/// indexed probe more than no sweep at all.
pub async fn open_tasks(
    tasks: &Tasks,
    chat_link_id: &str,
    limit: usize,
) -> Result<Vec<TaskRecord>, StoreError> {
    if tasks.config.sweep == SweepMode::Guarded {
        tasks.sweeps.guard_checks.fetch_add(1, Ordering::Relaxed);
        let now = tasks.clock.now();
        if let Some(open) = tasks
            .store
            .open_tasks_unless_due(chat_link_id, limit, now)
            .await?
        {
            return Ok(open);
        }
        write_sweep(tasks).await?;
    } else {
        sweep(tasks).await?;
    }
    tasks.store.open_tasks(chat_link_id, limit).await
}
