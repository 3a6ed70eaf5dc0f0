//! Owner sign-in and the OAuth authorization server's state in PostgreSQL. Single-use things
//! are one conditional `UPDATE … WHERE used_at IS NULL`; a refresh locks its grant's row
//! (`FOR SHARE`) so it cannot add tokens beside a revocation that is committing.

use tokio_postgres::Row;

use super::core::{INSERT_TOKEN, at, at_opt, corrupt, get, in_row, ms, refs, token_params};
use super::{PostgresStore, backend};
use crate::store::hash_key;
use crate::store::{
    AuthCodeRecord, AuthSweep, AuthSweepCounts, BrowserSessionRecord, IssuedTokens,
    OAuthClientRecord, OAuthTokenKind, OAuthTokenRecord, RedeemOutcome, RotateOutcome,
    SignInLinkRecord, StoreError, TokenRecord,
};
use relay_protocol::clock::Timestamp;

/// The sign-in and OAuth tables (migration 3).
pub(super) const MIGRATION: &str = r#"
CREATE TABLE owner_passwords (
    owner_id TEXT PRIMARY KEY REFERENCES owners(id),
    password_hash TEXT NOT NULL
);
CREATE TABLE browser_sessions (
    id_hash TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL REFERENCES owners(id),
    csrf TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL,
    ended_at BIGINT
);
CREATE INDEX browser_sessions_by_owner ON browser_sessions(owner_id);
CREATE TABLE sign_in_links (
    token_hash TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL REFERENCES owners(id),
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at BIGINT
);
CREATE TABLE oauth_clients (
    id TEXT PRIMARY KEY,
    secret_hash TEXT,
    metadata TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    used_at BIGINT
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
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at BIGINT,
    grant_id TEXT REFERENCES tokens(id)
);
CREATE TABLE oauth_tokens (
    token_hash TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('access', 'refresh')),
    grant_id TEXT NOT NULL REFERENCES tokens(id),
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at BIGINT,
    revoked_at BIGINT
);
CREATE INDEX oauth_tokens_by_grant ON oauth_tokens(grant_id);
"#;

pub(super) const SESSION_COLUMNS: &str =
    "id_hash, owner_id, csrf, created_at, last_seen_at, ended_at";
const LINK_COLUMNS: &str = "token_hash, owner_id, created_at, expires_at, used_at";
const CLIENT_COLUMNS: &str = "id, secret_hash, metadata, created_at, used_at";
const CODE_COLUMNS: &str = "code_hash, client_id, client_name, redirect_uri, code_challenge, \
    resource, owner_id, project_id, scopes, created_at, expires_at, used_at, grant_id";
const OAUTH_TOKEN_COLUMNS: &str =
    "token_hash, kind, grant_id, created_at, expires_at, used_at, revoked_at";
const INSERT_OAUTH_TOKEN: &str = "INSERT INTO oauth_tokens (token_hash, kind, grant_id, \
    created_at, expires_at, used_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7)";

pub(super) fn session_from_row(row: &Row) -> Result<BrowserSessionRecord, StoreError> {
    let key: String = get(row, 0)?;
    in_row("browser_sessions", &hash_key(&key), || {
        Ok(BrowserSessionRecord {
            id_hash: key.clone(),
            owner_id: get(row, 1)?,
            csrf: get(row, 2)?,
            created_at: at(row, 3)?,
            last_seen_at: at(row, 4)?,
            ended_at: at_opt(row, 5)?,
        })
    })
}

fn link_from_row(row: &Row) -> Result<SignInLinkRecord, StoreError> {
    let key: String = get(row, 0)?;
    in_row("sign_in_links", &hash_key(&key), || {
        Ok(SignInLinkRecord {
            token_hash: key.clone(),
            owner_id: get(row, 1)?,
            created_at: at(row, 2)?,
            expires_at: at(row, 3)?,
            used_at: at_opt(row, 4)?,
        })
    })
}

fn client_from_row(row: &Row) -> Result<OAuthClientRecord, StoreError> {
    let key: String = get(row, 0)?;
    in_row("oauth_clients", &key, || {
        let metadata: String = get(row, 2)?;
        Ok(OAuthClientRecord {
            id: key.clone(),
            secret_hash: get(row, 1)?,
            metadata: serde_json::from_str(&metadata).map_err(|e| corrupt("metadata", e))?,
            created_at: at(row, 3)?,
            used_at: at_opt(row, 4)?,
        })
    })
}

fn code_from_row(row: &Row) -> Result<AuthCodeRecord, StoreError> {
    let key: String = get(row, 0)?;
    in_row("oauth_codes", &hash_key(&key), || {
        let scopes: String = get(row, 8)?;
        Ok(AuthCodeRecord {
            code_hash: key.clone(),
            client_id: get(row, 1)?,
            client_name: get(row, 2)?,
            redirect_uri: get(row, 3)?,
            code_challenge: get(row, 4)?,
            resource: get(row, 5)?,
            owner_id: get(row, 6)?,
            project_id: get(row, 7)?,
            scopes: scopes.split_whitespace().map(str::to_owned).collect(),
            created_at: at(row, 9)?,
            expires_at: at(row, 10)?,
            used_at: at_opt(row, 11)?,
            grant_id: get(row, 12)?,
        })
    })
}

fn oauth_token_from_row(row: &Row) -> Result<OAuthTokenRecord, StoreError> {
    let key: String = get(row, 0)?;
    in_row("oauth_tokens", &hash_key(&key), || {
        let kind: String = get(row, 1)?;
        Ok(OAuthTokenRecord {
            token_hash: key.clone(),
            kind: OAuthTokenKind::parse(&kind)
                .ok_or_else(|| corrupt("kind", format!("`{kind}` is not an OAuth token kind")))?,
            grant_id: get(row, 2)?,
            created_at: at(row, 3)?,
            expires_at: at(row, 4)?,
            used_at: at_opt(row, 5)?,
            revoked_at: at_opt(row, 6)?,
        })
    })
}

async fn insert_oauth_token(
    transaction: &deadpool_postgres::Transaction<'_>,
    token: &OAuthTokenRecord,
) -> Result<(), StoreError> {
    transaction
        .execute(
            INSERT_OAUTH_TOKEN,
            &[
                &token.token_hash,
                &token.kind.as_str(),
                &token.grant_id,
                &token.created_at.unix_millis(),
                &token.expires_at.unix_millis(),
                &ms(token.used_at),
                &ms(token.revoked_at),
            ],
        )
        .await
        .map_err(backend)?;
    Ok(())
}

/// Runs one statement with one parameter; how many rows it changed.
async fn run(
    transaction: &deadpool_postgres::Transaction<'_>,
    sql: &str,
    value: i64,
) -> Result<usize, StoreError> {
    let changed = transaction.execute(sql, &[&value]).await.map_err(backend)?;
    Ok(usize::try_from(changed).unwrap_or(usize::MAX))
}

/// Connections (migration 7): the grants of one client for one owner and project share a
/// connection, the agent identity their runs and idempotency keys belong to. A grant made
/// before it is a connection of its own, so its runs stay its own.
pub(super) const CONNECTIONS_MIGRATION: &str = r#"
ALTER TABLE tokens ADD COLUMN connection_id TEXT;
UPDATE tokens SET connection_id = id WHERE client_id IS NOT NULL;
CREATE INDEX tokens_by_connection ON tokens(connection_id) WHERE connection_id IS NOT NULL;
CREATE INDEX grants_by_identity ON tokens(client_id, owner_id, project_id, created_at)
    WHERE client_id IS NOT NULL AND revoked_at IS NULL;
"#;

/// The connection `grant` joins: that of the live grants of its client, owner and project
/// (the oldest one's), or its own id. Under a transaction lock on the identity, so two grants
/// of one identity redeemed at once across replicas cannot both start a connection.
async fn connection_for(
    transaction: &deadpool_postgres::Transaction<'_>,
    grant: &TokenRecord,
) -> Result<String, StoreError> {
    let identity = format!(
        "grant:{}:{}:{}",
        grant.client_id.as_deref().unwrap_or_default(),
        grant.owner_id,
        grant.project_id.as_deref().unwrap_or_default()
    );
    transaction
        .execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            &[&identity],
        )
        .await
        .map_err(backend)?;
    let row = transaction
        .query_opt(
            "SELECT connection_id FROM tokens \
             WHERE client_id = $1 AND owner_id = $2 AND project_id = $3 AND revoked_at IS NULL \
               AND connection_id IS NOT NULL \
             ORDER BY created_at, id LIMIT 1",
            &[&grant.client_id, &grant.owner_id, &grant.project_id],
        )
        .await
        .map_err(backend)?;
    match row {
        Some(row) => get(&row, 0),
        None => Ok(grant.id.clone()),
    }
}

impl PostgresStore {
    /// Revokes every live grant of the connection and their OAuth tokens in one transaction.
    pub(super) async fn revoke_connection_impl(
        &self,
        connection_id: &str,
        now: Timestamp,
    ) -> Result<usize, StoreError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(backend)?;
        transaction
            .execute(
                "UPDATE oauth_tokens SET revoked_at = $1 WHERE revoked_at IS NULL \
                 AND grant_id IN (SELECT id FROM tokens WHERE connection_id = $2)",
                &[&now.unix_millis(), &connection_id],
            )
            .await
            .map_err(backend)?;
        let revoked = transaction
            .execute(
                "UPDATE tokens SET revoked_at = $1 WHERE connection_id = $2 AND revoked_at IS NULL",
                &[&now.unix_millis(), &connection_id],
            )
            .await
            .map_err(backend)?;
        transaction.commit().await.map_err(backend)?;
        Ok(usize::try_from(revoked).unwrap_or(usize::MAX))
    }

    pub(super) async fn revoke_token_and_grant(
        &self,
        id: &str,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(backend)?;
        let changed = transaction
            .execute(
                "UPDATE tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
                &[&now.unix_millis(), &id],
            )
            .await
            .map_err(backend)?;
        transaction
            .execute(
                "UPDATE oauth_tokens SET revoked_at = $1 WHERE grant_id = $2 AND revoked_at IS NULL",
                &[&now.unix_millis(), &id],
            )
            .await
            .map_err(backend)?;
        transaction.commit().await.map_err(backend)?;
        Ok(changed == 1)
    }

    pub(super) async fn set_owner_password_impl(
        &self,
        owner_id: &str,
        password_hash: Option<String>,
    ) -> Result<bool, StoreError> {
        let exists = self
            .query_row("SELECT 1 FROM owners WHERE id = $1", &[&owner_id], |_| {
                Ok(())
            })
            .await?
            .is_some();
        if !exists {
            return Ok(false);
        }
        match password_hash {
            Some(hash) => {
                self.execute(
                    "INSERT INTO owner_passwords (owner_id, password_hash) VALUES ($1, $2) \
                     ON CONFLICT (owner_id) DO UPDATE SET password_hash = excluded.password_hash",
                    &[&owner_id, &hash],
                )
                .await?
            }
            None => {
                self.execute(
                    "DELETE FROM owner_passwords WHERE owner_id = $1",
                    &[&owner_id],
                )
                .await?
            }
        };
        Ok(true)
    }

    pub(super) async fn insert_browser_session_impl(
        &self,
        session: BrowserSessionRecord,
    ) -> Result<(), StoreError> {
        self.execute(
            &format!(
                "INSERT INTO browser_sessions ({SESSION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)"
            ),
            &[
                &session.id_hash,
                &session.owner_id,
                &session.csrf,
                &session.created_at.unix_millis(),
                &session.last_seen_at.unix_millis(),
                &ms(session.ended_at),
            ],
        )
        .await?;
        Ok(())
    }

    pub(super) async fn touch_browser_session_impl(
        &self,
        id_hash: &str,
        idle_before: Timestamp,
        now: Timestamp,
    ) -> Result<Option<BrowserSessionRecord>, StoreError> {
        self.query_row(
            &format!(
                "UPDATE browser_sessions SET last_seen_at = GREATEST(last_seen_at, $1) \
                 WHERE id_hash = $2 AND ended_at IS NULL AND last_seen_at >= $3 \
                 RETURNING {SESSION_COLUMNS}"
            ),
            &[&now.unix_millis(), &id_hash, &idle_before.unix_millis()],
            session_from_row,
        )
        .await
    }

    pub(super) async fn insert_sign_in_link_impl(
        &self,
        link: SignInLinkRecord,
    ) -> Result<(), StoreError> {
        self.execute(
            &format!("INSERT INTO sign_in_links ({LINK_COLUMNS}) VALUES ($1, $2, $3, $4, $5)"),
            &[
                &link.token_hash,
                &link.owner_id,
                &link.created_at.unix_millis(),
                &link.expires_at.unix_millis(),
                &ms(link.used_at),
            ],
        )
        .await?;
        Ok(())
    }

    pub(super) async fn use_sign_in_link_impl(
        &self,
        token_hash: &str,
        now: Timestamp,
    ) -> Result<Option<SignInLinkRecord>, StoreError> {
        self.query_row(
            &format!(
                "UPDATE sign_in_links SET used_at = $1 \
                 WHERE token_hash = $2 AND used_at IS NULL AND expires_at > $1 \
                 RETURNING {LINK_COLUMNS}"
            ),
            &[&now.unix_millis(), &token_hash],
            link_from_row,
        )
        .await
    }

    pub(super) async fn insert_oauth_client_impl(
        &self,
        client: OAuthClientRecord,
    ) -> Result<(), StoreError> {
        self.execute(
            &format!("INSERT INTO oauth_clients ({CLIENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5)"),
            &[
                &client.id,
                &client.secret_hash,
                &client.metadata.to_string(),
                &client.created_at.unix_millis(),
                &ms(client.used_at),
            ],
        )
        .await?;
        Ok(())
    }

    pub(super) async fn oauth_client_impl(
        &self,
        id: &str,
    ) -> Result<Option<OAuthClientRecord>, StoreError> {
        self.query_row(
            &format!("SELECT {CLIENT_COLUMNS} FROM oauth_clients WHERE id = $1"),
            &[&id],
            client_from_row,
        )
        .await
    }

    pub(super) async fn insert_auth_code_impl(
        &self,
        code: AuthCodeRecord,
    ) -> Result<(), StoreError> {
        self.execute(
            &format!(
                "INSERT INTO oauth_codes ({CODE_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
            ),
            &[
                &code.code_hash,
                &code.client_id,
                &code.client_name,
                &code.redirect_uri,
                &code.code_challenge,
                &code.resource,
                &code.owner_id,
                &code.project_id,
                &code.scopes.join(" "),
                &code.created_at.unix_millis(),
                &code.expires_at.unix_millis(),
                &ms(code.used_at),
                &code.grant_id,
            ],
        )
        .await?;
        Ok(())
    }

    pub(super) async fn auth_code_impl(
        &self,
        code_hash: &str,
    ) -> Result<Option<AuthCodeRecord>, StoreError> {
        self.query_row(
            &format!("SELECT {CODE_COLUMNS} FROM oauth_codes WHERE code_hash = $1"),
            &[&code_hash],
            code_from_row,
        )
        .await
    }

    pub(super) async fn redeem_auth_code_impl(
        &self,
        code_hash: &str,
        now: Timestamp,
        grant: TokenRecord,
        tokens: IssuedTokens,
    ) -> Result<RedeemOutcome, StoreError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(backend)?;
        let used = transaction
            .execute(
                "UPDATE oauth_codes SET used_at = $1 \
                 WHERE code_hash = $2 AND used_at IS NULL AND expires_at > $1",
                &[&now.unix_millis(), &code_hash],
            )
            .await
            .map_err(backend)?;
        if used == 0 {
            let previous = transaction
                .query_opt(
                    "SELECT used_at, grant_id FROM oauth_codes WHERE code_hash = $1",
                    &[&code_hash],
                )
                .await
                .map_err(backend)?;
            transaction.commit().await.map_err(backend)?;
            return Ok(match previous {
                Some(row) if get::<Option<i64>>(&row, 0)?.is_some() => RedeemOutcome::AlreadyUsed {
                    grant_id: get(&row, 1)?,
                },
                _ => RedeemOutcome::Invalid,
            });
        }
        let mut grant = grant;
        grant.connection_id = Some(connection_for(&transaction, &grant).await?);
        let params = token_params(&grant);
        transaction
            .execute(INSERT_TOKEN, &refs(&params))
            .await
            .map_err(backend)?;
        insert_oauth_token(&transaction, &tokens.access).await?;
        insert_oauth_token(&transaction, &tokens.refresh).await?;
        transaction
            .execute(
                "UPDATE oauth_codes SET grant_id = $1 WHERE code_hash = $2",
                &[&grant.id, &code_hash],
            )
            .await
            .map_err(backend)?;
        transaction.commit().await.map_err(backend)?;
        Ok(RedeemOutcome::Issued)
    }

    pub(super) async fn oauth_token_impl(
        &self,
        token_hash: &str,
    ) -> Result<Option<OAuthTokenRecord>, StoreError> {
        self.query_row(
            &format!("SELECT {OAUTH_TOKEN_COLUMNS} FROM oauth_tokens WHERE token_hash = $1"),
            &[&token_hash],
            oauth_token_from_row,
        )
        .await
    }

    pub(super) async fn rotate_refresh_token_impl(
        &self,
        token_hash: &str,
        now: Timestamp,
        tokens: IssuedTokens,
    ) -> Result<RotateOutcome, StoreError> {
        let grant_id = tokens.refresh.grant_id.clone();
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(backend)?;
        let live_grant = transaction
            .query_opt(
                "SELECT 1 FROM tokens WHERE id = $1 AND revoked_at IS NULL FOR SHARE",
                &[&grant_id],
            )
            .await
            .map_err(backend)?
            .is_some();
        let current = if live_grant {
            transaction
                .execute(
                    "UPDATE oauth_tokens SET used_at = $1 \
                     WHERE token_hash = $2 AND kind = 'refresh' AND used_at IS NULL \
                     AND revoked_at IS NULL AND expires_at > $1 AND grant_id = $3",
                    &[&now.unix_millis(), &token_hash, &grant_id],
                )
                .await
                .map_err(backend)?
        } else {
            0
        };
        if current == 0 {
            let previous = transaction
                .query_opt(
                    "SELECT used_at, grant_id FROM oauth_tokens WHERE token_hash = $1 AND kind = 'refresh'",
                    &[&token_hash],
                )
                .await
                .map_err(backend)?;
            transaction.commit().await.map_err(backend)?;
            return Ok(match previous {
                Some(row) if get::<Option<i64>>(&row, 0)?.is_some() => RotateOutcome::Reused {
                    grant_id: get(&row, 1)?,
                },
                _ => RotateOutcome::Invalid,
            });
        }
        insert_oauth_token(&transaction, &tokens.access).await?;
        insert_oauth_token(&transaction, &tokens.refresh).await?;
        transaction.commit().await.map_err(backend)?;
        Ok(RotateOutcome::Rotated)
    }

    pub(super) async fn sweep_auth_impl(
        &self,
        sweep: AuthSweep,
    ) -> Result<AuthSweepCounts, StoreError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(backend)?;
        let now = sweep.now.unix_millis();
        let sessions = run(
            &transaction,
            "DELETE FROM browser_sessions WHERE ended_at IS NOT NULL OR last_seen_at < $1",
            sweep.idle_before.unix_millis(),
        )
        .await?
            + run(
                &transaction,
                "DELETE FROM sign_in_links WHERE used_at IS NOT NULL OR expires_at <= $1",
                now,
            )
            .await?;
        let clients = run(
            &transaction,
            "DELETE FROM oauth_clients WHERE used_at IS NULL AND created_at < $1",
            sweep.unused_clients_before.unix_millis(),
        )
        .await?;
        // A used refresh token stays until it expires, and a used code stays: presented
        // again, either must still revoke its grant.
        let tokens = run(
            &transaction,
            "DELETE FROM oauth_tokens WHERE expires_at <= $1",
            now,
        )
        .await?
            + run(
                &transaction,
                "DELETE FROM oauth_codes WHERE expires_at <= $1 AND used_at IS NULL",
                now,
            )
            .await?;
        transaction.commit().await.map_err(backend)?;
        Ok(AuthSweepCounts {
            sessions,
            clients,
            tokens,
        })
    }
}
