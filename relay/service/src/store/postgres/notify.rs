//! Wake-ups across replicas: [`PgNotifier`] is a [`Notifier`] that wakes this process's
//! waiters at once and sends the topic's name with PostgreSQL's `NOTIFY`; a listener connection
//! (`LISTEN`) wakes the waiters of the same topic on every other replica.
//!
//! A notification carries no data (waiters re-read the store), so one that is lost costs no
//! correctness, only latency: the waiter's own deadline (a long poll's 25 s) still ends its
//! wait. When the listener loses its connection it reconnects with backoff and then wakes every
//! local waiter once, since it cannot know what it missed meanwhile.
//!
//! The payload is the topic's name, a space and the sender's clock in Unix milliseconds, so
//! each listener can measure how late wake-ups reach it (`relay_notify_lag_seconds`); a
//! payload without the time (an older replica's) wakes its topic all the same.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use super::backend;
use super::tls::{self, MakeRustls};
use relay_protocol::clock::{Clock, SystemClock, Timestamp};

use crate::store::StoreError;
use crate::store::histogram::{Histogram, SharedHistogram};
use crate::store::notify::{LAG_BUCKETS, LocalNotifier, Notifier, Subscription, Topic};

/// Notifications waiting to be sent at most; past it they are dropped (a waiter's deadline
/// still ends its wait).
const MAX_PENDING: usize = 10_000;
/// The longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Topics across replicas, through one PostgreSQL channel.
pub struct PgNotifier {
    local: Arc<LocalNotifier>,
    outbox: mpsc::Sender<String>,
    lag: Arc<SharedHistogram>,
}

/// A payload: the topic's name and when it was sent.
fn payload(name: &str, sent: Timestamp) -> String {
    format!("{name} {}", sent.unix_millis())
}

/// The topic's name of a payload, and when it was sent if it says (topic names have no
/// spaces).
fn parse_payload(payload: &str) -> (&str, Option<Timestamp>) {
    match payload.rsplit_once(' ') {
        Some((name, millis)) => (name, millis.parse().ok().map(Timestamp::from_unix_millis)),
        None => (payload, None),
    }
}

impl PgNotifier {
    /// Starts the sender and the listener on the database at `url`, on `channel` (one channel
    /// per database the replicas share; tests that share a server use one each).
    pub async fn start(url: &str, channel: &str) -> Result<Arc<Self>, StoreError> {
        if channel.is_empty()
            || !channel
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(StoreError::Setup {
                message: format!(
                    "bad channel name `{channel}`: use only ASCII letters, digits and `_`"
                ),
                source: None,
            });
        }
        let tls::Target { config, tls } = tls::parse_url(url)?;
        let link = Link { config, tls };
        let local = Arc::new(LocalNotifier::default());
        let lag = Arc::new(SharedHistogram::new(&LAG_BUCKETS));
        let receiver = Receiver {
            local: local.clone(),
            lag: lag.clone(),
        };
        let listening = listen(&link, channel, &receiver).await?;
        tokio::spawn(keep_listening(
            link.clone(),
            channel.to_owned(),
            receiver,
            listening,
        ));
        let (outbox, pending) = mpsc::channel(MAX_PENDING);
        tokio::spawn(send_all(link, channel.to_owned(), pending));
        Ok(Arc::new(PgNotifier { local, outbox, lag }))
    }
}

impl Notifier for PgNotifier {
    fn notify(&self, topic: &Topic) {
        self.local.notify(topic);
        if self
            .outbox
            .try_send(payload(&topic.name(), SystemClock.now()))
            .is_err()
        {
            tracing::warn!(topic = %topic.name(), "too many wake-ups pending for other replicas; this one is dropped");
        }
    }

    fn subscribe(&self, topic: &Topic) -> Subscription {
        self.local.subscribe(topic)
    }

    fn topics(&self) -> usize {
        self.local.live_topics()
    }

    fn lag(&self) -> Option<Histogram> {
        Some(self.lag.snapshot())
    }
}

/// What the listener does with a notification: wakes the topic's local waiters and records
/// how late it came.
#[derive(Clone)]
struct Receiver {
    local: Arc<LocalNotifier>,
    lag: Arc<SharedHistogram>,
}

impl Receiver {
    fn receive(&self, payload: &str) {
        let (name, sent) = parse_payload(payload);
        self.local.notify_name(name);
        if let Some(sent) = sent {
            self.lag
                .observe(SystemClock.now().saturating_duration_since(sent));
        }
    }
}

/// A listening connection: the task that reads its notifications (it ends when the connection
/// does) and the client, which must live as long.
struct Listening {
    task: tokio::task::JoinHandle<()>,
    _client: tokio_postgres::Client,
}

/// How to reach the database: the URL's settings and its TLS.
#[derive(Clone)]
struct Link {
    config: tokio_postgres::Config,
    tls: MakeRustls,
}

/// Connects and runs `LISTEN`.
async fn listen(link: &Link, channel: &str, receiver: &Receiver) -> Result<Listening, StoreError> {
    let (client, mut connection) = link
        .config
        .connect(link.tls.clone())
        .await
        .map_err(backend)?;
    let receiver = receiver.clone();
    let task = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(note)) => receiver.receive(note.payload()),
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, "the wake-up listener lost its connection");
                    break;
                }
            }
        }
    });
    // LISTEN goes through the client while the task above drives the connection.
    client
        .batch_execute(&format!("LISTEN {channel}"))
        .await
        .map_err(backend)?;
    Ok(Listening {
        task,
        _client: client,
    })
}

async fn keep_listening(link: Link, channel: String, receiver: Receiver, mut listening: Listening) {
    loop {
        let _ = (&mut listening.task).await;
        let mut backoff = Duration::from_millis(100);
        listening = loop {
            tokio::time::sleep(backoff).await;
            match listen(&link, &channel, &receiver).await {
                Ok(again) => break again,
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for wake-ups yet; retrying");
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        };
        // What happened while nobody listened is unknown: every waiter looks again.
        receiver.local.notify_all();
    }
}

async fn send_all(link: Link, channel: String, mut pending: mpsc::Receiver<String>) {
    let mut client = None;
    while let Some(name) = pending.recv().await {
        for _attempt in 0..2 {
            if client.is_none() {
                client = match link.config.connect(link.tls.clone()).await {
                    Ok((c, connection)) => {
                        tokio::spawn(connection);
                        Some(c)
                    }
                    Err(error) => {
                        tracing::warn!(%error, "cannot send wake-ups to other replicas");
                        None
                    }
                };
            }
            let Some(c) = &client else { break };
            match c
                .execute("SELECT pg_notify($1, $2)", &[&channel, &name])
                .await
            {
                Ok(_) => break,
                Err(error) => {
                    tracing::warn!(%error, "sending a wake-up failed; reconnecting");
                    client = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_names_its_topic_and_when_it_was_sent() {
        let sent = Timestamp::from_unix_millis(1_764_000_000_123);
        let text = payload("run:abc", sent);
        assert_eq!(parse_payload(&text), ("run:abc", Some(sent)));
        assert_eq!(
            parse_payload("project:p"),
            ("project:p", None),
            "an older replica's"
        );
        assert_eq!(parse_payload("project:p soon"), ("project:p", None));
    }
}
