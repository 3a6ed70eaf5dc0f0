//! Wake-ups for long polls. A waiter subscribes to a topic *before* it reads the store, then
//! waits for the next notification on that topic (or its deadline) and reads again, so a change
//! between its read and its wait is never missed.
//!
//! Notifications carry no data, only the topic: receivers always re-read the store. That is
//! what lets the same scheme span service replicas: the PostgreSQL store's
//! [`PgNotifier`](crate::store::postgres::notify::PgNotifier) `NOTIFY`s the topic name and
//! `LISTEN`s on behalf of local waiters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use relay_protocol::CommandId;

/// What a waiter waits for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Topic {
    /// A command was queued for the project, or a running command of it got a cancel request.
    Project(String),
    /// The run changed.
    Run(CommandId),
    /// The chat link's inbox changed: a task was assigned, claimed, submitted or cancelled.
    ChatLink(String),
    /// The project got a chat link (its agents' tool list grows by the chat task tools).
    ProjectLinks(String),
}

impl Topic {
    /// The topic's name (a PostgreSQL channel payload, say).
    pub fn name(&self) -> String {
        match self {
            Topic::Project(id) => format!("project:{id}"),
            Topic::Run(id) => format!("run:{id}"),
            Topic::ChatLink(id) => format!("chat-link:{id}"),
            Topic::ProjectLinks(id) => format!("project-links:{id}"),
        }
    }
}

/// A subscription: [`Subscription::changed`] resolves on the first notification after the
/// subscription was taken, then on each one after the previous `changed` returned.
pub struct Subscription {
    topics: Arc<Topics>,
    entry: Arc<TopicEntry>,
    /// The topic's notification count this subscriber has seen.
    seen: u64,
}

impl Subscription {
    /// Waits for the next notification of the topic.
    pub async fn changed(&mut self) {
        loop {
            let woken = self.entry.wake.notified();
            tokio::pin!(woken);
            // Registered before the count is read, so a notification in between is not lost.
            woken.as_mut().enable();
            let count = self.entry.count.load(Ordering::SeqCst);
            if count != self.seen {
                self.seen = count;
                return;
            }
            woken.await;
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut topics = self.topics.lock();
        if self.entry.subscribers.fetch_sub(1, Ordering::SeqCst) == 1
            && topics
                .get(&self.entry.name)
                .is_some_and(|live| Arc::ptr_eq(live, &self.entry))
        {
            topics.remove(&self.entry.name);
        }
    }
}

/// Upper bounds (seconds) of the wake-up lag buckets: a NOTIFY crossing replicas takes
/// milliseconds; seconds mean the listener is behind.
pub const LAG_BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

/// Publishes and subscribes to topics.
pub trait Notifier: Send + Sync {
    /// Wakes every current subscriber of `topic`.
    fn notify(&self, topic: &Topic);
    /// Subscribes to `topic`'s next notification.
    fn subscribe(&self, topic: &Topic) -> Subscription;
    /// Topics that have subscribers in this process now (`/metrics`).
    fn topics(&self) -> usize;
    /// How late wake-ups from other replicas arrived (`/metrics`); `None` within one process.
    fn lag(&self) -> Option<super::histogram::Histogram> {
        None
    }
}

/// One topic that has subscribers: a notification count and the waiters' wake-up, shared by
/// all its subscribers. Ten thousand waiting desktops cost ten thousand of these (about a
/// hundred bytes each) and a map entry, nothing per wake-up.
struct TopicEntry {
    /// The topic's name, shared with its key in [`Topics`].
    name: Arc<str>,
    count: AtomicU64,
    subscribers: AtomicUsize,
    wake: Notify,
}

/// The topics that have subscribers, by name; a topic leaves with its last subscriber.
#[derive(Default)]
struct Topics(Mutex<HashMap<Arc<str>, Arc<TopicEntry>>>);

impl Topics {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Arc<TopicEntry>>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Topics within one process.
#[derive(Default)]
pub struct LocalNotifier {
    topics: Arc<Topics>,
}

impl LocalNotifier {
    /// Topics that currently have subscribers (for tests and metrics).
    pub fn live_topics(&self) -> usize {
        self.topics.lock().len()
    }

    /// Wakes the waiters of the topic named `name` (as [`Topic::name`] spells it), as a
    /// notification from another replica names it.
    pub fn notify_name(&self, name: &str) {
        if let Some(entry) = self.topics.lock().get(name) {
            wake(entry);
        }
    }

    /// The names of the topics that have subscribers now.
    pub fn live_topic_names(&self) -> Vec<String> {
        self.topics
            .lock()
            .keys()
            .map(|name| name.as_ref().to_owned())
            .collect()
    }

    /// Subscribes to the topic named `name` (as [`Topic::name`] spells it, or a private name
    /// space of the caller's own, like the token ids of [`crate::held::Held`]).
    pub fn subscribe_name(&self, name: String) -> Subscription {
        let mut topics = self.topics.lock();
        let entry = topics
            .entry(Arc::from(name))
            .or_insert_with_key(|name| {
                Arc::new(TopicEntry {
                    name: name.clone(),
                    count: AtomicU64::new(0),
                    subscribers: AtomicUsize::new(0),
                    wake: Notify::new(),
                })
            })
            .clone();
        entry.subscribers.fetch_add(1, Ordering::SeqCst);
        let seen = entry.count.load(Ordering::SeqCst);
        Subscription {
            topics: self.topics.clone(),
            entry,
            seen,
        }
    }

    /// Wakes every waiter (after notifications may have been lost).
    pub fn notify_all(&self) {
        for entry in self.topics.lock().values() {
            wake(entry);
        }
    }
}

fn wake(entry: &TopicEntry) {
    entry.count.fetch_add(1, Ordering::SeqCst);
    entry.wake.notify_waiters();
}

impl Notifier for LocalNotifier {
    fn notify(&self, topic: &Topic) {
        self.notify_name(&topic.name());
    }

    fn subscribe(&self, topic: &Topic) -> Subscription {
        self.subscribe_name(topic.name())
    }

    fn topics(&self) -> usize {
        self.live_topics()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_notification_after_subscribing_wakes_the_waiter() {
        let notifier = LocalNotifier::default();
        let topic = Topic::Project("p".into());
        let mut waiting = notifier.subscribe(&topic);
        notifier.notify(&Topic::Project("other".into()));
        notifier.notify(&topic);
        tokio::time::timeout(Duration::from_secs(5), waiting.changed())
            .await
            .expect("woken");
    }

    #[tokio::test(start_paused = true)]
    async fn a_notification_before_subscribing_is_not_seen() {
        let notifier = LocalNotifier::default();
        let topic = Topic::Run(CommandId::new_random());
        notifier.notify(&topic);
        let mut waiting = notifier.subscribe(&topic);
        assert!(
            tokio::time::timeout(Duration::from_secs(1), waiting.changed())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn topics_without_waiters_are_dropped() {
        let notifier = LocalNotifier::default();
        let topic = Topic::Project("p".into());
        let first = notifier.subscribe(&topic);
        let second = notifier.subscribe(&topic);
        drop(first);
        assert_eq!(notifier.live_topics(), 1, "one subscriber is left");
        drop(second);
        assert_eq!(notifier.live_topics(), 0);
    }

    #[tokio::test]
    async fn a_notification_between_two_waits_is_seen_by_the_second() {
        let notifier = LocalNotifier::default();
        let topic = Topic::Project("p".into());
        let mut waiting = notifier.subscribe(&topic);
        notifier.notify(&topic);
        waiting.changed().await;
        // Not waiting at this moment: the next wait must still see it.
        notifier.notify(&topic);
        tokio::time::timeout(Duration::from_secs(5), waiting.changed())
            .await
            .expect("the notification between the waits is seen");
    }

    #[tokio::test]
    async fn every_subscriber_of_a_topic_is_woken() {
        let notifier = Arc::new(LocalNotifier::default());
        let topic = Topic::Project("p".into());
        let mut waiters = tokio::task::JoinSet::new();
        for _ in 0..50 {
            let mut subscription = notifier.subscribe(&topic);
            waiters.spawn(async move { subscription.changed().await });
        }
        notifier.notify(&topic);
        let all = async { while waiters.join_next().await.is_some() {} };
        tokio::time::timeout(Duration::from_secs(5), all)
            .await
            .expect("all woken");
        assert_eq!(notifier.live_topics(), 0);
    }
}
