//! Owners' passwords: argon2id with the crate's default parameters, stored as a PHC string.
//! Hashing takes tens of milliseconds on purpose, so it runs on the blocking pool.

use argon2::Argon2;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};

/// The shortest password accepted.
pub const MIN_PASSWORD_CHARS: usize = 12;
/// The longest password accepted (argon2 takes any length; a form should not).
pub const MAX_PASSWORD_CHARS: usize = 1024;

/// Why a password was not set.
#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    /// Too short or too long.
    #[error(
        "a password needs {MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters (got {0}): a few unrelated words make a good one"
    )]
    Length(usize),
    /// The system could not hash it.
    #[error("cannot hash the password: {0}")]
    Hash(String),
}

/// The PHC string of `password` under a fresh random salt.
pub async fn hash(password: String) -> Result<String, PasswordError> {
    let chars = password.chars().count();
    if !(MIN_PASSWORD_CHARS..=MAX_PASSWORD_CHARS).contains(&chars) {
        return Err(PasswordError::Length(chars));
    }
    tokio::task::spawn_blocking(move || {
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt).map_err(|e| PasswordError::Hash(e.to_string()))?;
        Argon2::default()
            .hash_password_with_salt(password.as_bytes(), &salt)
            .map(|hash| hash.to_string())
            .map_err(|e| PasswordError::Hash(e.to_string()))
    })
    .await
    .map_err(|e| PasswordError::Hash(e.to_string()))?
}

/// Whether `password` matches the PHC string `hash` (a malformed hash matches nothing).
pub async fn verify(password: String, hash: String) -> bool {
    if password.chars().count() > MAX_PASSWORD_CHARS {
        return false;
    }
    tokio::task::spawn_blocking(move || {
        Argon2::default()
            .verify_password(password.as_bytes(), hash.as_str())
            .is_ok()
    })
    .await
    .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hash_verifies_its_password_only() {
        let hash = hash("correct horse battery".into()).await.expect("hash");
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        assert!(verify("correct horse battery".into(), hash.clone()).await);
        assert!(!verify("correct horse batterY".into(), hash.clone()).await);
        assert!(!verify("anything".into(), "not a phc string".into()).await);
        let again = super::hash("correct horse battery".into())
            .await
            .expect("hash");
        assert_ne!(hash, again, "every hash has its own salt");
    }

    #[tokio::test]
    async fn short_passwords_are_refused() {
        let error = hash("eleven char".into()).await.expect_err("too short");
        assert!(error.to_string().contains("12"), "{error}");
        assert!(hash("twelve chars".into()).await.is_ok());
    }
}
