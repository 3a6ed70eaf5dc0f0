//! The SQL of what the owner's console and owner API list: a project's runs page by page, its
//! chat links, the owner's browser sessions, and when each token was last used.

use relay_sqlite::CachedStatements as _;
use rusqlite::params;

use super::auth::{SESSION_COLUMNS, session_from_row};
use super::chat::link_from_row;
use super::{COMMAND_COLUMNS, SqliteStore, backend, command_from_row};
use crate::store::{
    BrowserSessionRecord, ChatLinkRecord, CommandQuery, CommandRecord, Rows, StoreFuture,
};
use relay_protocol::clock::Timestamp;

impl SqliteStore {
    pub(super) fn project_commands_impl(
        &self,
        query: CommandQuery,
    ) -> StoreFuture<'static, Rows<CommandRecord>> {
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        let (before_at, before_id) = match &query.before {
            Some((at, id)) => (Some(at.unix_millis()), Some(id.to_string())),
            None => (None, None),
        };
        self.call(move |connection| {
            let mut statement = connection
                .prepare_cached(&format!(
                    "SELECT {COMMAND_COLUMNS} FROM commands \
                     WHERE project_id = ?1 \
                       AND (?2 IS NULL OR status = ?2) \
                       AND (?3 IS NULL OR agent_id = ?3) \
                       AND (?4 IS NULL OR created_at < ?4 OR (created_at = ?4 AND id < ?5)) \
                     ORDER BY created_at DESC, id DESC LIMIT ?6"
                ))
                .map_err(backend)?;
            let decoded = statement
                .query_map(
                    params![
                        query.project_id,
                        query.status.map(|s| s.as_str()),
                        query.agent_id,
                        before_at,
                        before_id,
                        limit
                    ],
                    command_from_row,
                )
                .map_err(backend)?
                .map(|row| row.map_err(backend));
            Rows::collect(decoded)
        })
    }

    pub(super) fn chat_links_impl(
        &self,
        project_id: String,
    ) -> StoreFuture<'static, Vec<ChatLinkRecord>> {
        self.call(move |connection| {
            connection
                .prepare_cached(
                    "SELECT id, project_id, host, event_subscription, created_at \
                     FROM chat_links WHERE project_id = ?1 ORDER BY created_at, id",
                )
                .and_then(|mut statement| {
                    statement
                        .query_map([project_id], link_from_row)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(backend)
        })
    }

    pub(super) fn browser_sessions_impl(
        &self,
        owner_id: String,
        idle_before: Timestamp,
    ) -> StoreFuture<'static, Vec<BrowserSessionRecord>> {
        self.call(move |connection| {
            connection
                .prepare_cached(&format!(
                    "SELECT {SESSION_COLUMNS} FROM browser_sessions \
                     WHERE owner_id = ?1 AND ended_at IS NULL AND last_seen_at >= ?2 \
                     ORDER BY created_at DESC, id_hash"
                ))
                .and_then(|mut statement| {
                    statement
                        .query_map(
                            params![owner_id, idle_before.unix_millis()],
                            session_from_row,
                        )?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(backend)
        })
    }

    pub(super) fn end_browser_session_impl(
        &self,
        id_hash: String,
        now: Timestamp,
    ) -> StoreFuture<'static, bool> {
        self.call(move |connection| {
            let changed = connection
                .execute_cached(
                    "UPDATE browser_sessions SET ended_at = ?1 WHERE id_hash = ?2 AND ended_at IS NULL",
                    params![now.unix_millis(), id_hash],
                )
                .map_err(backend)?;
            Ok(changed == 1)
        })
    }

    pub(super) fn record_token_use_impl(
        &self,
        token_id: String,
        now: Timestamp,
    ) -> StoreFuture<'static, ()> {
        self.call(move |connection| {
            connection
                .execute_cached(
                    "INSERT INTO token_uses (token_id, last_used_at) VALUES (?1, ?2) \
                     ON CONFLICT(token_id) DO UPDATE SET \
                     last_used_at = max(last_used_at, excluded.last_used_at)",
                    params![token_id, now.unix_millis()],
                )
                .map_err(backend)?;
            Ok(())
        })
    }

    pub(super) fn token_uses_impl(
        &self,
        owner_id: String,
    ) -> StoreFuture<'static, Vec<(String, Timestamp)>> {
        self.call(move |connection| {
            connection
                .prepare_cached(
                    "SELECT u.token_id, u.last_used_at FROM token_uses u \
                     JOIN tokens t ON t.id = u.token_id WHERE t.owner_id = ?1 ORDER BY u.token_id",
                )
                .and_then(|mut statement| {
                    statement
                        .query_map([owner_id], |row| {
                            Ok((row.get(0)?, Timestamp::from_unix_millis(row.get(1)?)))
                        })?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(backend)
        })
    }
}
