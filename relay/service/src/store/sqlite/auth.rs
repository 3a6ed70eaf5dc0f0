//! The SQL of owner sign-in and the OAuth authorization server.
//!
//! Everything single-use is one conditional `UPDATE … WHERE used_at IS NULL`: two requests that
//! present the same code, link or refresh token cannot both win. A grant's revocation and every
//! token issued for it change in one transaction, and tokens are only ever added to a grant that
//! is still unrevoked, so a refresh racing a revocation cannot leave a live token behind.

use relay_sqlite::CachedStatements as _;
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use super::{SqliteStore, TOKEN_COLUMNS, backend, corrupt, in_row, ms, ts};
use crate::store::hash_key;
use crate::store::{
    AuthCodeRecord, AuthSweep, AuthSweepCounts, BrowserSessionRecord, IssuedTokens,
    OAuthClientRecord, OAuthTokenKind, OAuthTokenRecord, OwnerRecord, RedeemOutcome, RotateOutcome,
    SignInLinkRecord, StoreFuture, TokenRecord,
};
use relay_protocol::clock::Timestamp;

/// The sign-in and OAuth tables.
pub(super) const MIGRATION: &str = r#"
ALTER TABLE tokens ADD COLUMN client_id TEXT;
CREATE INDEX tokens_by_owner ON tokens(owner_id, created_at);
CREATE TABLE owner_passwords (
    owner_id TEXT PRIMARY KEY REFERENCES owners(id),
    password_hash TEXT NOT NULL
);
CREATE TABLE browser_sessions (
    id_hash TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL REFERENCES owners(id),
    csrf TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL,
    ended_at INTEGER
);
CREATE INDEX browser_sessions_by_owner ON browser_sessions(owner_id);
CREATE TABLE sign_in_links (
    token_hash TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL REFERENCES owners(id),
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at INTEGER
);
CREATE TABLE oauth_clients (
    id TEXT PRIMARY KEY,
    secret_hash TEXT,
    metadata TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    used_at INTEGER
);
CREATE TABLE oauth_codes (
    code_hash TEXT PRIMARY KEY,
    client_id TEXT NOT NULL,
    client_name TEXT NOT NULL,
    redirect_uri TEXT NOT NULL,
    code_challenge TEXT NOT NULL,
    resource TEXT,
    owner_id TEXT NOT NULL REFERENCES owners(id),
    project_id TEXT NOT NULL REFERENCES projects(id),
    scopes TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at INTEGER,
    grant_id TEXT REFERENCES tokens(id)
);
CREATE TABLE oauth_tokens (
    token_hash TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('access', 'refresh')),
    grant_id TEXT NOT NULL REFERENCES tokens(id),
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at INTEGER,
    revoked_at INTEGER
);
CREATE INDEX oauth_tokens_by_grant ON oauth_tokens(grant_id);
"#;

/// Connections (migration 8): the grants of one client for one owner and project share a
/// connection, the agent identity their runs and idempotency keys belong to. A grant made
/// before it is a connection of its own, so its runs stay its own.
pub(super) const CONNECTIONS_MIGRATION: &str = r#"
ALTER TABLE tokens ADD COLUMN connection_id TEXT;
UPDATE tokens SET connection_id = id WHERE client_id IS NOT NULL;
CREATE INDEX tokens_by_connection ON tokens(connection_id) WHERE connection_id IS NOT NULL;
CREATE INDEX grants_by_identity ON tokens(client_id, owner_id, project_id, created_at)
    WHERE client_id IS NOT NULL AND revoked_at IS NULL;
"#;

pub(super) const SESSION_COLUMNS: &str =
    "id_hash, owner_id, csrf, created_at, last_seen_at, ended_at";
const LINK_COLUMNS: &str = "token_hash, owner_id, created_at, expires_at, used_at";
const CLIENT_COLUMNS: &str = "id, secret_hash, metadata, created_at, used_at";
const CODE_COLUMNS: &str = "code_hash, client_id, client_name, redirect_uri, code_challenge, \
    resource, owner_id, project_id, scopes, created_at, expires_at, used_at, grant_id";
const OAUTH_TOKEN_COLUMNS: &str =
    "token_hash, kind, grant_id, created_at, expires_at, used_at, revoked_at";

fn at(row: &Row<'_>, index: usize) -> rusqlite::Result<Timestamp> {
    Ok(Timestamp::from_unix_millis(row.get(index)?))
}

pub(super) fn session_from_row(row: &Row<'_>) -> rusqlite::Result<BrowserSessionRecord> {
    let key: String = row.get(0)?;
    in_row("browser_sessions", &hash_key(&key), || {
        Ok(BrowserSessionRecord {
            id_hash: key.clone(),
            owner_id: row.get(1)?,
            csrf: row.get(2)?,
            created_at: at(row, 3)?,
            last_seen_at: at(row, 4)?,
            ended_at: ts(row.get(5)?),
        })
    })
}

fn link_from_row(row: &Row<'_>) -> rusqlite::Result<SignInLinkRecord> {
    let key: String = row.get(0)?;
    in_row("sign_in_links", &hash_key(&key), || {
        Ok(SignInLinkRecord {
            token_hash: key.clone(),
            owner_id: row.get(1)?,
            created_at: at(row, 2)?,
            expires_at: at(row, 3)?,
            used_at: ts(row.get(4)?),
        })
    })
}

fn client_from_row(row: &Row<'_>) -> rusqlite::Result<OAuthClientRecord> {
    let key: String = row.get(0)?;
    in_row("oauth_clients", &key, || {
        let metadata: String = row.get(2)?;
        Ok(OAuthClientRecord {
            id: key.clone(),
            secret_hash: row.get(1)?,
            metadata: serde_json::from_str(&metadata).map_err(|e| corrupt("metadata", e))?,
            created_at: at(row, 3)?,
            used_at: ts(row.get(4)?),
        })
    })
}

fn code_from_row(row: &Row<'_>) -> rusqlite::Result<AuthCodeRecord> {
    let key: String = row.get(0)?;
    in_row("oauth_codes", &hash_key(&key), || {
        let scopes: String = row.get(8)?;
        Ok(AuthCodeRecord {
            code_hash: key.clone(),
            client_id: row.get(1)?,
            client_name: row.get(2)?,
            redirect_uri: row.get(3)?,
            code_challenge: row.get(4)?,
            resource: row.get(5)?,
            owner_id: row.get(6)?,
            project_id: row.get(7)?,
            scopes: scopes.split_whitespace().map(str::to_owned).collect(),
            created_at: at(row, 9)?,
            expires_at: at(row, 10)?,
            used_at: ts(row.get(11)?),
            grant_id: row.get(12)?,
        })
    })
}

fn oauth_token_from_row(row: &Row<'_>) -> rusqlite::Result<OAuthTokenRecord> {
    let key: String = row.get(0)?;
    in_row("oauth_tokens", &hash_key(&key), || {
        let kind: String = row.get(1)?;
        Ok(OAuthTokenRecord {
            token_hash: key.clone(),
            kind: OAuthTokenKind::parse(&kind)
                .ok_or_else(|| corrupt("kind", format!("`{kind}` is not an OAuth token kind")))?,
            grant_id: row.get(2)?,
            created_at: at(row, 3)?,
            expires_at: at(row, 4)?,
            used_at: ts(row.get(5)?),
            revoked_at: ts(row.get(6)?),
        })
    })
}

/// Revokes the token `id` and, if it is a grant, every OAuth token issued for it.
pub(super) fn revoke_token_and_grant(
    connection: &mut Connection,
    id: &str,
    now: Timestamp,
) -> rusqlite::Result<bool> {
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let changed = transaction.execute_cached(
        "UPDATE tokens SET revoked_at = ?1 WHERE id = ?2 AND revoked_at IS NULL",
        params![now.unix_millis(), id],
    )?;
    transaction.execute_cached(
        "UPDATE oauth_tokens SET revoked_at = ?1 WHERE grant_id = ?2 AND revoked_at IS NULL",
        params![now.unix_millis(), id],
    )?;
    transaction.commit()?;
    Ok(changed == 1)
}

/// Revokes every live grant of the connection `connection_id` and their OAuth tokens, in one
/// transaction; how many grants it revoked.
pub(super) fn revoke_connection(
    connection: &mut Connection,
    connection_id: &str,
    now: Timestamp,
) -> rusqlite::Result<usize> {
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    transaction.execute_cached(
        "UPDATE oauth_tokens SET revoked_at = ?1 WHERE revoked_at IS NULL \
         AND grant_id IN (SELECT id FROM tokens WHERE connection_id = ?2)",
        params![now.unix_millis(), connection_id],
    )?;
    let revoked = transaction.execute_cached(
        "UPDATE tokens SET revoked_at = ?1 WHERE connection_id = ?2 AND revoked_at IS NULL",
        params![now.unix_millis(), connection_id],
    )?;
    transaction.commit()?;
    Ok(revoked)
}

fn insert_oauth_token(
    connection: &Connection,
    token: &OAuthTokenRecord,
) -> rusqlite::Result<usize> {
    connection.execute_cached(
        &format!(
            "INSERT INTO oauth_tokens ({OAUTH_TOKEN_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
        ),
        params![
            token.token_hash,
            token.kind.as_str(),
            token.grant_id,
            token.created_at.unix_millis(),
            token.expires_at.unix_millis(),
            ms(token.used_at),
            ms(token.revoked_at),
        ],
    )
}

/// Stores `grant` in the connection of the live grants of its client, owner and project (the
/// oldest one's), or as a connection of its own. Called inside the redeeming transaction, which
/// holds SQLite's write lock, so two grants of one identity cannot both start a connection.
fn insert_grant(connection: &Connection, grant: &TokenRecord) -> rusqlite::Result<usize> {
    let joined: Option<String> = connection
        .query_row_cached(
            "SELECT connection_id FROM tokens \
             WHERE client_id = ?1 AND owner_id = ?2 AND project_id = ?3 AND revoked_at IS NULL \
               AND connection_id IS NOT NULL \
             ORDER BY created_at, id LIMIT 1",
            params![grant.client_id, grant.owner_id, grant.project_id],
            |row| row.get(0),
        )
        .optional()?;
    let connection_id = joined.unwrap_or_else(|| grant.id.clone());
    connection.execute_cached(
        &format!(
            "INSERT INTO tokens ({TOKEN_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
        ),
        params![
            grant.id,
            grant.kind.as_str(),
            grant.token_hash,
            grant.owner_id,
            grant.project_id,
            grant.agent_name,
            grant.scopes.join(" "),
            grant.created_at.unix_millis(),
            ms(grant.revoked_at),
            grant.client_id,
            connection_id,
        ],
    )
}

fn redeem(
    connection: &mut Connection,
    code_hash: &str,
    now: Timestamp,
    grant: &TokenRecord,
    tokens: &IssuedTokens,
) -> rusqlite::Result<RedeemOutcome> {
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let used = transaction.execute_cached(
        "UPDATE oauth_codes SET used_at = ?1 \
         WHERE code_hash = ?2 AND used_at IS NULL AND expires_at > ?1",
        params![now.unix_millis(), code_hash],
    )?;
    if used == 0 {
        let previous: Option<(Option<i64>, Option<String>)> = transaction
            .query_row_cached(
                "SELECT used_at, grant_id FROM oauth_codes WHERE code_hash = ?1",
                [code_hash],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()?;
        transaction.commit()?;
        return Ok(match previous {
            Some((Some(_), grant_id)) => RedeemOutcome::AlreadyUsed { grant_id },
            _ => RedeemOutcome::Invalid,
        });
    }
    insert_grant(&transaction, grant)?;
    insert_oauth_token(&transaction, &tokens.access)?;
    insert_oauth_token(&transaction, &tokens.refresh)?;
    transaction.execute_cached(
        "UPDATE oauth_codes SET grant_id = ?1 WHERE code_hash = ?2",
        params![grant.id, code_hash],
    )?;
    transaction.commit()?;
    Ok(RedeemOutcome::Issued)
}

fn rotate(
    connection: &mut Connection,
    token_hash: &str,
    now: Timestamp,
    tokens: &IssuedTokens,
) -> rusqlite::Result<RotateOutcome> {
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let current = transaction.execute_cached(
        "UPDATE oauth_tokens SET used_at = ?1 \
         WHERE token_hash = ?2 AND kind = 'refresh' AND used_at IS NULL AND revoked_at IS NULL \
           AND expires_at > ?1 AND grant_id = ?3 \
           AND EXISTS (SELECT 1 FROM tokens WHERE id = ?3 AND revoked_at IS NULL)",
        params![now.unix_millis(), token_hash, tokens.refresh.grant_id],
    )?;
    if current == 0 {
        let previous: Option<(Option<i64>, String)> = transaction
            .query_row_cached(
                "SELECT used_at, grant_id FROM oauth_tokens \
                 WHERE token_hash = ?1 AND kind = 'refresh'",
                [token_hash],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()?;
        transaction.commit()?;
        return Ok(match previous {
            Some((Some(_), grant_id)) => RotateOutcome::Reused { grant_id },
            _ => RotateOutcome::Invalid,
        });
    }
    insert_oauth_token(&transaction, &tokens.access)?;
    insert_oauth_token(&transaction, &tokens.refresh)?;
    transaction.commit()?;
    Ok(RotateOutcome::Rotated)
}

fn sweep(connection: &mut Connection, sweep: AuthSweep) -> rusqlite::Result<AuthSweepCounts> {
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let now = sweep.now.unix_millis();
    let sessions = transaction.execute_cached(
        "DELETE FROM browser_sessions WHERE ended_at IS NOT NULL OR last_seen_at < ?1",
        [sweep.idle_before.unix_millis()],
    )? + transaction.execute_cached(
        "DELETE FROM sign_in_links WHERE used_at IS NOT NULL OR expires_at <= ?1",
        [now],
    )?;
    let clients = transaction.execute_cached(
        "DELETE FROM oauth_clients WHERE used_at IS NULL AND created_at < ?1",
        [sweep.unused_clients_before.unix_millis()],
    )?;
    // A used refresh token stays until it expires: presented again, it must still revoke its
    // grant. A used code stays until its grant is gone for the same reason.
    let tokens = transaction
        .execute_cached("DELETE FROM oauth_tokens WHERE expires_at <= ?1", [now])?
        + transaction.execute_cached(
            "DELETE FROM oauth_codes WHERE expires_at <= ?1 AND used_at IS NULL",
            [now],
        )?;
    transaction.commit()?;
    Ok(AuthSweepCounts {
        sessions,
        clients,
        tokens,
    })
}

impl SqliteStore {
    /// The owner whose `column` (`id` or `name`, both unique) is `value`.
    pub(super) fn owner_by_impl(
        &self,
        column: &'static str,
        value: String,
    ) -> StoreFuture<'static, Option<OwnerRecord>> {
        self.call(move |connection| {
            connection
                .query_row_cached(
                    &format!("SELECT id, name, created_at FROM owners WHERE {column} = ?1"),
                    [value],
                    super::owner_from_row,
                )
                .optional()
                .map_err(backend)
        })
    }

    pub(super) fn set_owner_password_impl(
        &self,
        owner_id: String,
        password_hash: Option<String>,
    ) -> StoreFuture<'static, bool> {
        self.call(move |connection| {
            let exists = connection
                .query_row_cached(
                    "SELECT 1 FROM owners WHERE id = ?1",
                    [&owner_id],
                    |_| Ok(()),
                )
                .optional()
                .map_err(backend)?
                .is_some();
            if !exists {
                return Ok(false);
            }
            match password_hash {
                Some(hash) => connection.execute_cached(
                    "INSERT INTO owner_passwords (owner_id, password_hash) VALUES (?1, ?2) \
                     ON CONFLICT (owner_id) DO UPDATE SET password_hash = excluded.password_hash",
                    params![owner_id, hash],
                ),
                None => connection.execute_cached(
                    "DELETE FROM owner_passwords WHERE owner_id = ?1",
                    [&owner_id],
                ),
            }
            .map_err(backend)?;
            Ok(true)
        })
    }

    pub(super) fn owner_password_impl(
        &self,
        owner_id: String,
    ) -> StoreFuture<'static, Option<String>> {
        self.call(move |connection| {
            connection
                .query_row_cached(
                    "SELECT password_hash FROM owner_passwords WHERE owner_id = ?1",
                    [owner_id],
                    |row| row.get(0),
                )
                .optional()
                .map_err(backend)
        })
    }

    pub(super) fn insert_browser_session_impl(
        &self,
        session: BrowserSessionRecord,
    ) -> StoreFuture<'static, ()> {
        self.call(move |connection| {
            connection
                .execute_cached(
                    &format!(
                        "INSERT INTO browser_sessions ({SESSION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
                    ),
                    params![
                        session.id_hash,
                        session.owner_id,
                        session.csrf,
                        session.created_at.unix_millis(),
                        session.last_seen_at.unix_millis(),
                        ms(session.ended_at),
                    ],
                )
                .map_err(backend)?;
            Ok(())
        })
    }

    pub(super) fn touch_browser_session_impl(
        &self,
        id_hash: String,
        idle_before: Timestamp,
        now: Timestamp,
    ) -> StoreFuture<'static, Option<BrowserSessionRecord>> {
        self.call(move |connection| {
            connection
                .query_row_cached(
                    &format!(
                        "UPDATE browser_sessions SET last_seen_at = max(last_seen_at, ?1) \
                         WHERE id_hash = ?2 AND ended_at IS NULL AND last_seen_at >= ?3 \
                         RETURNING {SESSION_COLUMNS}"
                    ),
                    params![now.unix_millis(), id_hash, idle_before.unix_millis()],
                    session_from_row,
                )
                .optional()
                .map_err(backend)
        })
    }

    pub(super) fn end_browser_sessions_impl(
        &self,
        owner_id: String,
        now: Timestamp,
    ) -> StoreFuture<'static, usize> {
        self.call(move |connection| {
            connection
                .execute_cached(
                    "UPDATE browser_sessions SET ended_at = ?1 WHERE owner_id = ?2 AND ended_at IS NULL",
                    params![now.unix_millis(), owner_id],
                )
                .map_err(backend)
        })
    }

    pub(super) fn insert_sign_in_link_impl(
        &self,
        link: SignInLinkRecord,
    ) -> StoreFuture<'static, ()> {
        self.call(move |connection| {
            connection
                .execute_cached(
                    &format!(
                        "INSERT INTO sign_in_links ({LINK_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5)"
                    ),
                    params![
                        link.token_hash,
                        link.owner_id,
                        link.created_at.unix_millis(),
                        link.expires_at.unix_millis(),
                        ms(link.used_at),
                    ],
                )
                .map_err(backend)?;
            Ok(())
        })
    }

    pub(super) fn use_sign_in_link_impl(
        &self,
        token_hash: String,
        now: Timestamp,
    ) -> StoreFuture<'static, Option<SignInLinkRecord>> {
        self.call(move |connection| {
            connection
                .query_row_cached(
                    &format!(
                        "UPDATE sign_in_links SET used_at = ?1 \
                         WHERE token_hash = ?2 AND used_at IS NULL AND expires_at > ?1 \
                         RETURNING {LINK_COLUMNS}"
                    ),
                    params![now.unix_millis(), token_hash],
                    link_from_row,
                )
                .optional()
                .map_err(backend)
        })
    }

    pub(super) fn insert_oauth_client_impl(
        &self,
        client: OAuthClientRecord,
    ) -> StoreFuture<'static, ()> {
        self.call(move |connection| {
            connection
                .execute_cached(
                    &format!(
                        "INSERT INTO oauth_clients ({CLIENT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5)"
                    ),
                    params![
                        client.id,
                        client.secret_hash,
                        client.metadata.to_string(),
                        client.created_at.unix_millis(),
                        ms(client.used_at),
                    ],
                )
                .map_err(backend)?;
            Ok(())
        })
    }

    pub(super) fn oauth_client_impl(
        &self,
        id: String,
    ) -> StoreFuture<'static, Option<OAuthClientRecord>> {
        self.call(move |connection| {
            connection
                .query_row_cached(
                    &format!("SELECT {CLIENT_COLUMNS} FROM oauth_clients WHERE id = ?1"),
                    [id],
                    client_from_row,
                )
                .optional()
                .map_err(backend)
        })
    }

    pub(super) fn mark_oauth_client_used_impl(
        &self,
        id: String,
        now: Timestamp,
    ) -> StoreFuture<'static, ()> {
        self.call(move |connection| {
            connection
                .execute_cached(
                    "UPDATE oauth_clients SET used_at = ?1 WHERE id = ?2 AND used_at IS NULL",
                    params![now.unix_millis(), id],
                )
                .map_err(backend)?;
            Ok(())
        })
    }

    pub(super) fn insert_auth_code_impl(&self, code: AuthCodeRecord) -> StoreFuture<'static, ()> {
        self.call(move |connection| {
            connection
                .execute_cached(
                    &format!(
                        "INSERT INTO oauth_codes ({CODE_COLUMNS}) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
                    ),
                    params![
                        code.code_hash,
                        code.client_id,
                        code.client_name,
                        code.redirect_uri,
                        code.code_challenge,
                        code.resource,
                        code.owner_id,
                        code.project_id,
                        code.scopes.join(" "),
                        code.created_at.unix_millis(),
                        code.expires_at.unix_millis(),
                        ms(code.used_at),
                        code.grant_id,
                    ],
                )
                .map_err(backend)?;
            Ok(())
        })
    }

    pub(super) fn auth_code_impl(
        &self,
        code_hash: String,
    ) -> StoreFuture<'static, Option<AuthCodeRecord>> {
        self.call(move |connection| {
            connection
                .query_row_cached(
                    &format!("SELECT {CODE_COLUMNS} FROM oauth_codes WHERE code_hash = ?1"),
                    [code_hash],
                    code_from_row,
                )
                .optional()
                .map_err(backend)
        })
    }

    pub(super) fn redeem_auth_code_impl(
        &self,
        code_hash: String,
        now: Timestamp,
        grant: TokenRecord,
        tokens: IssuedTokens,
    ) -> StoreFuture<'static, RedeemOutcome> {
        self.call(move |connection| {
            redeem(connection, &code_hash, now, &grant, &tokens).map_err(backend)
        })
    }

    pub(super) fn oauth_token_impl(
        &self,
        token_hash: String,
    ) -> StoreFuture<'static, Option<OAuthTokenRecord>> {
        // Read on the calling task: every request with an OAuth access token asks it.
        self.read(move |connection| {
            connection
                .query_row_cached(
                    &format!(
                        "SELECT {OAUTH_TOKEN_COLUMNS} FROM oauth_tokens WHERE token_hash = ?1"
                    ),
                    [&token_hash],
                    oauth_token_from_row,
                )
                .optional()
                .map_err(backend)
        })
    }

    pub(super) fn rotate_refresh_token_impl(
        &self,
        token_hash: String,
        now: Timestamp,
        tokens: IssuedTokens,
    ) -> StoreFuture<'static, RotateOutcome> {
        self.call(move |connection| rotate(connection, &token_hash, now, &tokens).map_err(backend))
    }

    pub(super) fn revoke_oauth_token_impl(
        &self,
        token_hash: String,
        now: Timestamp,
    ) -> StoreFuture<'static, bool> {
        self.call(move |connection| {
            let changed = connection
                .execute_cached(
                    "UPDATE oauth_tokens SET revoked_at = ?1 WHERE token_hash = ?2 AND revoked_at IS NULL",
                    params![now.unix_millis(), token_hash],
                )
                .map_err(backend)?;
            Ok(changed == 1)
        })
    }

    pub(super) fn sweep_auth_impl(
        &self,
        cutoffs: AuthSweep,
    ) -> StoreFuture<'static, AuthSweepCounts> {
        self.call(move |connection| sweep(connection, cutoffs).map_err(backend))
    }
}
