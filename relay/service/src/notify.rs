//! Wake-ups for long polls. A waiter subscribes to a topic *before* it reads the store, then
//! waits for the next notification on that topic (or its deadline) and reads again, so a change
//! between its read and its wait is never missed.
//!
//! Notifications carry no data, only the topic: receivers always re-read the store. That is
//! what lets the same scheme span service replicas: the PostgreSQL store's
//! [`PgNotifier`](crate::store::postgres::notify::PgNotifier) `NOTIFY`s the topic name and
//! `LISTEN`s on behalf of local waiters.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

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
}

impl Topic {
    /// The topic's name (a PostgreSQL channel payload, say).
    pub fn name(&self) -> String {
        match self {
            Topic::Project(id) => format!("project:{id}"),
            Topic::Run(id) => format!("run:{id}"),
            Topic::ChatLink(id) => format!("chat-link:{id}"),
        }
    }
}

/// A subscription: resolves on the first notification after it was taken.
pub struct Subscription(watch::Receiver<()>);

impl Subscription {
    /// Waits for the next notification of the topic.
    pub async fn changed(&mut self) {
        if self.0.changed().await.is_err() {
            // The notifier dropped the topic: nothing will ever come.
            std::future::pending::<()>().await;
        }
    }
}

/// Publishes and subscribes to topics.
pub trait Notifier: Send + Sync {
    /// Wakes every current subscriber of `topic`.
    fn notify(&self, topic: &Topic);
    /// Subscribes to `topic`'s next notification.
    fn subscribe(&self, topic: &Topic) -> Subscription;
}

/// Topics within one process: one watch channel per topic that has waiters, so thousands of
/// waiting desktops cost one small entry and one receiver each.
#[derive(Default)]
pub struct LocalNotifier {
    topics: Mutex<HashMap<String, watch::Sender<()>>>,
}

impl LocalNotifier {
    /// Topics that currently have a channel (for tests and metrics).
    pub fn live_topics(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<()>>> {
        self.topics
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl LocalNotifier {
    /// Wakes the waiters of the topic named `name` (as [`Topic::name`] spells it), as a
    /// notification from another replica names it.
    pub fn notify_name(&self, name: &str) {
        let mut topics = self.lock();
        if let Some(sender) = topics.get(name) {
            sender.send_replace(());
            if sender.receiver_count() == 0 {
                topics.remove(name);
            }
        }
    }

    /// Wakes every waiter (after notifications may have been lost).
    pub fn notify_all(&self) {
        let mut topics = self.lock();
        for sender in topics.values() {
            sender.send_replace(());
        }
        topics.retain(|_, sender| sender.receiver_count() > 0);
    }
}

impl Notifier for LocalNotifier {
    fn notify(&self, topic: &Topic) {
        self.notify_name(&topic.name());
    }

    fn subscribe(&self, topic: &Topic) -> Subscription {
        let mut topics = self.lock();
        // Drop channels whose waiters all went away, so the map stays as small as the set of
        // topics someone is waiting on.
        if topics.len() > 1024 {
            topics.retain(|_, sender| sender.receiver_count() > 0);
        }
        let sender = topics
            .entry(topic.name())
            .or_insert_with(|| watch::channel(()).0);
        Subscription(sender.subscribe())
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
        drop(notifier.subscribe(&topic));
        notifier.notify(&topic);
        assert_eq!(notifier.live_topics(), 0);
    }
}
