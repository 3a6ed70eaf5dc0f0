//! Held requests: a desktop's long-poll `sync` and an agent's waiting `get_graph_run`. What
//! every wait shares: the count of requests held now (`/metrics` shows it), one watch over the
//! holders' tokens (a revocation ends a wait within [`REVOCATION_CHECK`]), and the service's
//! shutdown, which answers every wait at once.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::store::Store;
use crate::store::notify::{LocalNotifier, Subscription};

/// How often a held request checks that its token still works, so that a revocation (also
/// from `relay admin`, another process) ends it within this long.
pub const REVOCATION_CHECK: std::time::Duration = std::time::Duration::from_millis(500);

/// What a held request answers once its token was revoked while it waited.
pub const REVOKED_WHILE_WAITING: &str =
    "the bearer token was revoked while this request waited; nothing more is answered to it";

/// What kind of request is held.
#[derive(Debug, Clone, Copy)]
pub enum HeldKind {
    /// A desktop's long-poll `sync`.
    Sync,
    /// An agent's waiting `get_graph_run`.
    RunWait,
}

/// The requests held now, their tokens' watch and the shutdown that ends them; cheap to clone
/// (every clone shares them).
#[derive(Clone)]
pub struct Held {
    counts: Arc<[AtomicUsize; 2]>,
    revocations: Revocations,
    shutdown: CancellationToken,
}

/// Counts one held request until dropped.
pub struct HeldGuard<'a>(&'a AtomicUsize);

impl Drop for HeldGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Held {
    /// Held requests whose tokens are checked in `store`, answered when `shutdown` is
    /// cancelled.
    pub fn new(store: Arc<dyn Store>, shutdown: CancellationToken) -> Self {
        Held {
            counts: Arc::default(),
            revocations: Revocations::new(store),
            shutdown,
        }
    }

    fn counter(&self, kind: HeldKind) -> &AtomicUsize {
        &self.counts[kind as usize]
    }

    /// Counts a request of `kind` as held until the guard is dropped.
    pub fn hold(&self, kind: HeldKind) -> HeldGuard<'_> {
        let counter = self.counter(kind);
        counter.fetch_add(1, Ordering::SeqCst);
        HeldGuard(counter)
    }

    /// How many requests of `kind` are held now.
    pub fn count(&self, kind: HeldKind) -> usize {
        self.counter(kind).load(Ordering::SeqCst)
    }

    /// Watches `token_id` until the subscription is dropped: its `changed()` resolves once the
    /// token is found revoked or gone.
    pub fn watch_token(&self, token_id: &str) -> Subscription {
        self.revocations.watch(token_id)
    }

    /// How many tokens are watched now.
    pub fn watched_tokens(&self) -> usize {
        self.revocations.watched()
    }

    /// Resolves when the service shuts down: a held request then answers what it has.
    pub async fn shutting_down(&self) {
        self.shutdown.cancelled().await;
    }
}

/// The tokens of held requests, checked together: one background task reads every watched
/// token's state once per [`REVOCATION_CHECK`] (one store read for all of them, not one per
/// request), and wakes the requests of a token that is revoked or gone. The watches are the
/// notifier's topics, named by token id (one per token, shared by that token's held
/// requests, gone with the last of them).
#[derive(Clone)]
struct Revocations {
    inner: Arc<RevocationsInner>,
    store: Arc<dyn Store>,
}

#[derive(Default)]
struct RevocationsInner {
    tokens: LocalNotifier,
    /// Whether the checking task runs (it ends when no token is watched). Watching and the
    /// task's "nothing is watched" both happen under this lock, so no watch goes unchecked.
    checking: Mutex<bool>,
}

impl RevocationsInner {
    fn checking(&self) -> std::sync::MutexGuard<'_, bool> {
        self.checking
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Revocations {
    fn new(store: Arc<dyn Store>) -> Self {
        Revocations {
            inner: Arc::default(),
            store,
        }
    }

    /// Watches `token_id` until the subscription is dropped (a store that cannot be read is
    /// not taken for a revocation). The checks start with the first watched token and stop
    /// with the last.
    fn watch(&self, token_id: &str) -> Subscription {
        let mut checking = self.inner.checking();
        let watch = self.inner.tokens.subscribe_name(token_id.to_owned());
        if !*checking {
            *checking = true;
            tokio::spawn(check_tokens(self.inner.clone(), self.store.clone()));
        }
        watch
    }

    fn watched(&self) -> usize {
        self.inner.tokens.live_topics()
    }
}

/// Every [`REVOCATION_CHECK`], reads which watched tokens still work and wakes the holders of
/// the others; ends when nothing is watched.
async fn check_tokens(inner: Arc<RevocationsInner>, store: Arc<dyn Store>) {
    loop {
        tokio::time::sleep(REVOCATION_CHECK).await;
        let ids = {
            let mut checking = inner.checking();
            let ids = inner.tokens.live_topic_names();
            if ids.is_empty() {
                *checking = false;
                return;
            }
            ids
        };
        let valid: HashSet<String> = match store.unrevoked_tokens(&ids).await {
            Ok(valid) => valid.into_iter().collect(),
            Err(error) => {
                tracing::debug!(%error, "the held requests' tokens could not be checked");
                continue;
            }
        };
        for id in ids.iter().filter(|id| !valid.contains(*id)) {
            inner.tokens.notify_name(id);
        }
    }
}
