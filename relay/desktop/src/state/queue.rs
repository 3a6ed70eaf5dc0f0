//! The runs queued for this desktop as of each project's last sync, so the owner sees what
//! agents asked for before it runs (`relay desktop queue`). A run leaves the list when it
//! starts here, and each sync answer replaces its project's list.

use relay_protocol::QueuedCommand;

use super::*;

/// One run waiting on the service for this desktop, as the last sync of its project saw it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueuedRow {
    /// The command id.
    pub command_id: String,
    /// The project it was queued in.
    pub project_id: String,
    /// The session to run.
    pub session_id: String,
    /// Its slug.
    pub slug: String,
    /// The graph's arguments.
    pub arguments: Value,
    /// The agent that queued it (its token or grant id).
    pub agent_id: Option<String>,
    /// That agent's name.
    pub agent_name: Option<String>,
    /// When the agent queued it (ms since the epoch).
    pub queued_at: i64,
    /// When the sync that saw it answered (ms since the epoch).
    pub synced_at: i64,
}

/// The queue as last synced.
impl DesktopState {
    /// Replaces `project_id`'s queued runs with a sync's answer (runs this desktop already
    /// began are left out: an answer read before their start was reported may still name them).
    pub fn note_queue(
        &self,
        project_id: &str,
        commands: &[QueuedCommand],
        now: Timestamp,
    ) -> Result<(), StateError> {
        let rows: Vec<(String, String)> = commands
            .iter()
            .map(|c| {
                let arguments = serde_json::to_string(&c.arguments).unwrap_or_default();
                (c.command_id.to_string(), arguments)
            })
            .collect();
        self.with_sync(|conn| {
            let tx = conn.transaction()?;
            tx.execute_cached(
                "DELETE FROM queue WHERE project_id = ?1",
                params![project_id],
            )?;
            for (command, (id, arguments)) in commands.iter().zip(&rows) {
                tx.execute_cached(
                    "INSERT OR REPLACE INTO queue (command_id, project_id, session_id, slug,
                     arguments, agent_id, agent_name, queued_at, synced_at)
                     SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9
                     WHERE NOT EXISTS (SELECT 1 FROM history WHERE command_id = ?1)",
                    params![
                        id,
                        project_id,
                        command.graph_session_id.as_str(),
                        command.slug,
                        arguments,
                        command.agent_id,
                        command.agent_name,
                        command.created_at.unix_millis(),
                        now.unix_millis()
                    ],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    /// The runs queued as of each enabled project's last sync, oldest first (runs queued at the
    /// same instant in the order the service handed them out: each sync inserts in its order).
    pub fn queued(&self) -> Result<Vec<QueuedRow>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT q.command_id, q.project_id, q.session_id, q.slug, q.arguments, q.agent_id,
                        q.agent_name, q.queued_at, q.synced_at
                 FROM queue q JOIN projects p ON p.project_id = q.project_id AND p.enabled = 1
                 ORDER BY q.queued_at, q.rowid",
            )?;
            let rows = stmt.query_map([], |row| {
                let arguments: String = row.get(4)?;
                Ok(QueuedRow {
                    command_id: row.get(0)?,
                    project_id: row.get(1)?,
                    session_id: row.get(2)?,
                    slug: row.get(3)?,
                    arguments: serde_json::from_str(&arguments).unwrap_or(Value::Null),
                    agent_id: row.get(5)?,
                    agent_name: row.get(6)?,
                    queued_at: row.get(7)?,
                    synced_at: row.get(8)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(n: i64, agent: &str) -> QueuedCommand {
        QueuedCommand {
            command_id: CommandId::new_random(),
            graph_session_id: new_session_id(),
            slug: "triage".into(),
            arguments: serde_json::json!({"n": n})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            created_at: Timestamp::from_unix_millis(n),
            agent_id: Some(format!("{agent}-id")),
            agent_name: Some(agent.into()),
            max_tokens: None,
        }
    }

    #[test]
    fn each_sync_replaces_its_projects_queue_and_started_runs_leave_it() {
        let state = DesktopState::open_in_memory().expect("state");
        let now = Timestamp::from_unix_millis(100);
        state.set_project_enabled("p", true, now).expect("p");
        state.set_project_enabled("q", true, now).expect("q");
        let (a, b, c) = (command(2, "claude"), command(1, "chatgpt"), command(3, "x"));
        state
            .note_queue("p", &[a.clone(), b.clone()], now)
            .expect("p synced");
        state
            .note_queue("q", std::slice::from_ref(&c), now)
            .expect("q synced");
        let listed: Vec<String> = state
            .queued()
            .expect("list")
            .into_iter()
            .map(|r| r.command_id)
            .collect();
        let ids = |cs: &[&QueuedCommand]| -> Vec<String> {
            cs.iter().map(|c| c.command_id.to_string()).collect()
        };
        assert_eq!(listed, ids(&[&b, &a, &c]), "oldest first");
        let first = &state.queued().expect("list")[0];
        assert_eq!(first.agent_name.as_deref(), Some("chatgpt"));
        assert_eq!(first.arguments, serde_json::json!({"n": 1}));

        state
            .begin_command("e1", "p", &a, Timestamp::from_unix_millis(150))
            .expect("began");
        // A later answer read before the start was reported still names it: not queued.
        state
            .note_queue("p", &[a.clone(), b.clone()], now)
            .expect("again");
        assert_eq!(
            state
                .queued()
                .expect("list")
                .into_iter()
                .map(|r| r.command_id)
                .collect::<Vec<_>>(),
            ids(&[&b, &c])
        );
        state.note_queue("p", &[], now).expect("empty answer");
        state.set_project_enabled("q", false, now).expect("q off");
        assert!(state.queued().expect("list").is_empty());
    }
}
