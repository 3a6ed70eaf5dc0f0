//! What the owner's console and owner API list, in PostgreSQL: a project's runs page by page,
//! its chat links, the owner's browser sessions, and when each token was last used.

use super::PostgresStore;
use super::auth::{SESSION_COLUMNS, session_from_row};
use super::chat::link_from_row;
use super::core::{COMMAND_COLUMNS, at, command_from_row, get};
use crate::store::{
    BrowserSessionRecord, ChatLinkRecord, CommandQuery, CommandRecord, Rows, StoreError,
};
use relay_protocol::clock::Timestamp;

/// The console's lists (migration 4).
pub(super) const MIGRATION: &str = r#"
CREATE INDEX commands_by_project_age ON commands(project_id, created_at, id);
CREATE TABLE token_uses (
    token_id TEXT PRIMARY KEY REFERENCES tokens(id),
    last_used_at BIGINT NOT NULL
);
"#;

impl PostgresStore {
    pub(super) async fn project_commands_impl(
        &self,
        query: CommandQuery,
    ) -> Result<Rows<CommandRecord>, StoreError> {
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        let (before_at, before_id) = match &query.before {
            Some((at, id)) => (Some(at.unix_millis()), Some(id.to_string())),
            None => (None, None),
        };
        let status = query.status.map(|s| s.as_str());
        let rows = self
            .client()
            .await?
            .query(
                &format!(
                    "SELECT {COMMAND_COLUMNS} FROM commands \
                     WHERE project_id = $1 \
                       AND ($2::TEXT IS NULL OR status = $2) \
                       AND ($3::TEXT IS NULL OR agent_id = $3) \
                       AND ($4::BIGINT IS NULL OR created_at < $4 OR (created_at = $4 AND id < $5)) \
                     ORDER BY created_at DESC, id DESC LIMIT $6"
                ),
                &[&query.project_id, &status, &query.agent_id, &before_at, &before_id, &limit],
            )
            .await
            .map_err(super::backend)?;
        Rows::collect(rows.iter().map(command_from_row))
    }

    pub(super) async fn chat_links_impl(
        &self,
        project_id: &str,
    ) -> Result<Vec<ChatLinkRecord>, StoreError> {
        let rows = self
            .client()
            .await?
            .query(
                "SELECT id, project_id, host, event_subscription, created_at \
                 FROM chat_links WHERE project_id = $1 ORDER BY created_at, id",
                &[&project_id],
            )
            .await
            .map_err(super::backend)?;
        rows.iter().map(link_from_row).collect()
    }

    pub(super) async fn browser_sessions_impl(
        &self,
        owner_id: &str,
        idle_before: Timestamp,
    ) -> Result<Vec<BrowserSessionRecord>, StoreError> {
        let rows = self
            .client()
            .await?
            .query(
                &format!(
                    "SELECT {SESSION_COLUMNS} FROM browser_sessions \
                     WHERE owner_id = $1 AND ended_at IS NULL AND last_seen_at >= $2 \
                     ORDER BY created_at DESC, id_hash"
                ),
                &[&owner_id, &idle_before.unix_millis()],
            )
            .await
            .map_err(super::backend)?;
        rows.iter().map(session_from_row).collect()
    }

    pub(super) async fn end_browser_session_impl(
        &self,
        id_hash: &str,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let changed = self
            .execute(
                "UPDATE browser_sessions SET ended_at = $1 WHERE id_hash = $2 AND ended_at IS NULL",
                &[&now.unix_millis(), &id_hash],
            )
            .await?;
        Ok(changed == 1)
    }

    pub(super) async fn record_token_use_impl(
        &self,
        token_id: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO token_uses (token_id, last_used_at) VALUES ($1, $2) \
             ON CONFLICT (token_id) DO UPDATE SET \
             last_used_at = GREATEST(token_uses.last_used_at, excluded.last_used_at)",
            &[&token_id, &now.unix_millis()],
        )
        .await?;
        Ok(())
    }

    pub(super) async fn token_uses_impl(
        &self,
        owner_id: &str,
    ) -> Result<Vec<(String, Timestamp)>, StoreError> {
        let rows = self
            .client()
            .await?
            .query(
                "SELECT u.token_id, u.last_used_at FROM token_uses u \
                 JOIN tokens t ON t.id = u.token_id WHERE t.owner_id = $1 ORDER BY u.token_id",
                &[&owner_id],
            )
            .await
            .map_err(super::backend)?;
        rows.iter()
            .map(|row| Ok((get(row, 0)?, at(row, 1)?)))
            .collect()
    }
}
