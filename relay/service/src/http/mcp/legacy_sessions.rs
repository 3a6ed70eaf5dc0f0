//! 2025-era MCP sessions (`Mcp-Session-Id`), kept by the service itself: rmcp serves every
//! request statelessly, and a session is a small record here (about 150 bytes) that binds an id
//! to the agent token that opened it.
//!
//! - A session is opened by a successful `initialize` and answered with its id.
//! - Every later request naming it must come with the same token: any other token, like a
//!   missing, ended or idle-expired id, gets 404, for POST, GET and DELETE alike.
//! - At most [`SessionLimits::per_agent`] sessions per token and [`SessionLimits::total`] in
//!   all: past a cap the least recently used session of that token (or, for the total, of the
//!   token holding the most) is ended, so a flood of `initialize` calls costs the flooder its
//!   own old sessions and never locks a new agent out.
//! - Ids are 128 random bits; they are never logged.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How many sessions may exist, and how long an unused one lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Sessions one agent token may hold at once.
    pub per_agent: usize,
    /// Sessions of all agents at once.
    pub total: usize,
    /// A session unused this long has ended.
    pub idle: Duration,
}

/// The sessions one agent token may hold at once, by default.
pub const DEFAULT_SESSIONS_PER_AGENT: usize = 16;
/// The sessions of all agents at once, by default (`relay serve --max-mcp-sessions`).
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;
/// How long an unused session lives, by default (rmcp's own default was the same).
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(300);

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            per_agent: DEFAULT_SESSIONS_PER_AGENT,
            total: DEFAULT_MAX_SESSIONS,
            idle: DEFAULT_SESSION_IDLE,
        }
    }
}

/// A session id: 128 random bits, shown as 32 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionId([u8; 16]);

impl SessionId {
    fn random() -> Result<Self, getrandom::Error> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)?;
        Ok(SessionId(bytes))
    }

    /// Reads an id as [`SessionId::to_header`] writes it; anything else is no session.
    pub fn parse(text: &str) -> Option<Self> {
        if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut bytes = [0u8; 16];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(SessionId(bytes))
    }

    /// The `Mcp-Session-Id` header value.
    pub fn to_header(self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

struct Session {
    /// The id of the agent token that opened it.
    owner: String,
    last_used: Instant,
}

/// The open sessions.
pub struct McpSessions {
    limits: SessionLimits,
    sessions: Mutex<HashMap<SessionId, Session>>,
}

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot make a session id: the system has no randomness ({0})")]
pub struct OpenError(getrandom::Error);

impl McpSessions {
    /// No sessions yet, under `limits`.
    pub fn new(limits: SessionLimits) -> Self {
        McpSessions {
            limits,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Session>> {
        self.sessions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Opens a session for the agent token `owner`, ending the least recently used ones that
    /// the caps leave no room for.
    pub fn open(&self, owner: &str) -> Result<SessionId, OpenError> {
        let id = SessionId::random().map_err(OpenError)?;
        let now = Instant::now();
        let mut sessions = self.lock();
        sessions.retain(|_, s| now.duration_since(s.last_used) < self.limits.idle);
        let held = sessions.values().filter(|s| s.owner == owner).count();
        if held >= self.limits.per_agent.max(1) {
            end_least_recently_used(&mut sessions, |s| s.owner == owner);
        }
        if sessions.len() >= self.limits.total.max(1) {
            let heaviest = heaviest_owner(&sessions);
            end_least_recently_used(&mut sessions, |s| {
                Some(s.owner.as_str()) == heaviest.as_deref()
            });
        }
        sessions.insert(
            id,
            Session {
                owner: owner.to_owned(),
                last_used: now,
            },
        );
        Ok(id)
    }

    /// Whether `id` is an open session of `owner`; marks it used. An idle-expired session ends
    /// here. Another owner's session answers exactly like a missing one.
    pub fn touch(&self, id: SessionId, owner: &str) -> bool {
        let now = Instant::now();
        let mut sessions = self.lock();
        match sessions.get_mut(&id) {
            Some(s) if now.duration_since(s.last_used) >= self.limits.idle => {
                sessions.remove(&id);
                false
            }
            Some(s) if s.owner == owner => {
                s.last_used = now;
                true
            }
            _ => false,
        }
    }

    /// Ends `owner`'s session `id`; false if there was none (or it is another owner's).
    pub fn close(&self, id: SessionId, owner: &str) -> bool {
        let mut sessions = self.lock();
        if sessions.get(&id).is_some_and(|s| s.owner == owner) {
            sessions.remove(&id);
            true
        } else {
            false
        }
    }

    /// Open sessions (idle ones not yet swept included), of `owner` or of everyone.
    pub fn count(&self, owner: Option<&str>) -> usize {
        let sessions = self.lock();
        sessions
            .values()
            .filter(|s| owner.is_none_or(|o| s.owner == o))
            .count()
    }
}

fn end_least_recently_used(
    sessions: &mut HashMap<SessionId, Session>,
    matches: impl Fn(&Session) -> bool,
) {
    let oldest = sessions
        .iter()
        .filter(|(_, s)| matches(s))
        .min_by_key(|(_, s)| s.last_used)
        .map(|(id, _)| *id);
    if let Some(id) = oldest {
        sessions.remove(&id);
    }
}

/// The token holding the most sessions.
fn heaviest_owner(sessions: &HashMap<SessionId, Session>) -> Option<String> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for s in sessions.values() {
        *counts.entry(s.owner.as_str()).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(owner, _)| owner.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_agent: usize, total: usize) -> SessionLimits {
        SessionLimits {
            per_agent,
            total,
            idle: Duration::from_secs(300),
        }
    }

    #[test]
    fn ids_round_trip_and_nothing_else_parses() {
        let id = SessionId::random().expect("random");
        let text = id.to_header();
        assert_eq!(text.len(), 32);
        assert_eq!(SessionId::parse(&text), Some(id));
        for bad in ["", "xyz", &text[..31], &format!("{text}0"), &"g".repeat(32)] {
            assert_eq!(SessionId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_session_answers_only_its_own_token() {
        let sessions = McpSessions::new(limits(4, 100));
        let a = sessions.open("token-a").expect("open");
        assert!(sessions.touch(a, "token-a"));
        assert!(
            !sessions.touch(a, "token-b"),
            "another token sees no session"
        );
        assert!(!sessions.close(a, "token-b"), "and cannot end it");
        assert!(sessions.touch(a, "token-a"), "it still works for its owner");
        assert!(sessions.close(a, "token-a"));
        assert!(!sessions.touch(a, "token-a"), "ended");
        assert!(!sessions.close(a, "token-a"), "ended once");
    }

    #[test]
    fn past_the_per_agent_cap_the_least_recently_used_session_ends() {
        let sessions = McpSessions::new(limits(3, 100));
        let first = sessions.open("a").expect("open");
        let second = sessions.open("a").expect("open");
        let third = sessions.open("a").expect("open");
        assert!(sessions.touch(first, "a"), "first is now the most recent");
        let fourth = sessions.open("a").expect("open");
        assert_eq!(sessions.count(Some("a")), 3);
        assert!(
            !sessions.touch(second, "a"),
            "the least recently used one ended"
        );
        for id in [first, third, fourth] {
            assert!(sessions.touch(id, "a"));
        }
    }

    #[test]
    fn past_the_total_cap_the_heaviest_token_pays_and_a_new_token_gets_in() {
        let sessions = McpSessions::new(limits(10, 12));
        for _ in 0..10 {
            sessions.open("flood").expect("open");
        }
        let quiet = sessions.open("quiet").expect("open");
        sessions.open("quiet").expect("open");
        assert_eq!(sessions.count(None), 12);
        let newcomer = sessions.open("new").expect("open");
        assert_eq!(sessions.count(None), 12);
        assert_eq!(sessions.count(Some("flood")), 9);
        assert!(sessions.touch(newcomer, "new"));
        assert!(sessions.touch(quiet, "quiet"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_unused_session_ends_after_the_idle_time() {
        let sessions = McpSessions::new(SessionLimits {
            per_agent: 4,
            total: 4,
            idle: Duration::from_secs(60),
        });
        let kept = sessions.open("a").expect("open");
        let idle = sessions.open("a").expect("open");
        tokio::time::advance(Duration::from_secs(40)).await;
        assert!(sessions.touch(kept, "a"));
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(sessions.touch(kept, "a"), "used 30 s ago");
        assert!(!sessions.touch(idle, "a"), "unused for 70 s");
        sessions.open("b").expect("open");
        assert_eq!(sessions.count(None), 2, "opening sweeps idle sessions");
    }
}
