//! Tool policies and the folder the fs tools may use.

use super::*;

/// Tool policies and the folder.
impl DesktopState {
    /// Sets a tool's policy.
    pub fn set_policy(
        &self,
        tool: &str,
        policy: runner::host::approvals::Policy,
    ) -> Result<(), StateError> {
        if tool.trim().is_empty() {
            return Err(StateError::Invalid(
                "the tool name must not be empty".into(),
            ));
        }
        self.with_sync(|conn| {
            conn.execute_cached(
                "INSERT INTO tool_policies (tool, policy) VALUES (?1, ?2)
                 ON CONFLICT(tool) DO UPDATE SET policy = ?2",
                params![tool, policy.as_str()],
            )?;
            Ok(())
        })
    }

    /// The policy table (tools not listed are denied).
    pub fn policy(&self) -> Result<runner::host::approvals::ApprovalPolicy, StateError> {
        self.with_sync(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT tool, policy FROM tool_policies ORDER BY tool")?;
            let rows = stmt.query_map([], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
            })?;
            let mut policy = runner::host::approvals::ApprovalPolicy::default();
            for row in rows {
                let (tool, value) = row?;
                let parsed = value
                    .parse::<runner::host::approvals::Policy>()
                    .map_err(|e| StateError::Invalid(e.to_string()))?;
                policy.set(tool, parsed);
            }
            Ok(policy)
        })
    }

    /// Sets the folder the fs tools may use.
    pub fn set_folder(&self, folder: &Path) -> Result<(), StateError> {
        let canonical = folder.canonicalize().map_err(|e| {
            StateError::Invalid(format!(
                "the folder {} cannot be used: {e}",
                folder.display()
            ))
        })?;
        if !canonical.is_dir() {
            return Err(StateError::Invalid(format!(
                "{} is not a folder; give the folder the fs tools may use",
                folder.display()
            )));
        }
        // Stored as text: a lossy copy of a non-UTF-8 path would name another folder.
        let Some(text) = canonical.to_str().map(str::to_owned) else {
            return Err(StateError::Invalid(format!(
                "the folder {} has a name that is not UTF-8; rename it or give another",
                folder.display()
            )));
        };
        self.with_sync(|conn| {
            conn.execute_cached(
                "INSERT INTO settings (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = ?2",
                params![FOLDER, text],
            )?;
            Ok(())
        })
    }

    /// The folder the fs tools may use, if set.
    pub fn folder(&self) -> Result<Option<PathBuf>, StateError> {
        self.with_sync(|conn| {
            Ok(conn
                .query_row_cached(
                    "SELECT value FROM settings WHERE key = ?1",
                    params![FOLDER],
                    |row| row.get::<_, String>(0),
                )
                .optional()?
                .map(PathBuf::from))
        })
    }
}
