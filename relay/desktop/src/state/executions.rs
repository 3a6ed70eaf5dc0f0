//! Executions: the history (with full results), and the outbox their completions go through.

use relay_protocol::QueuedCommand;

use super::*;

/// The outbox and the history.
impl DesktopState {
    /// Records that an execution started (with no request details: tests and older callers).
    pub fn begin_execution(
        &self,
        execution_id: &str,
        command_id: &CommandId,
        project_id: &str,
        session: &GraphSessionId,
        slug: &str,
        now: Timestamp,
    ) -> Result<(), StateError> {
        let command = QueuedCommand {
            command_id: *command_id,
            graph_session_id: session.clone(),
            slug: slug.to_owned(),
            arguments: serde_json::Map::new(),
            created_at: now,
            agent_id: None,
            agent_name: None,
            max_tokens: None,
        };
        self.insert_execution(execution_id, project_id, &command, false, now)
    }

    /// Records that an execution of `command` started, with the request as the service handed
    /// it (queued when, arguments, which agent); the command leaves the queue listing.
    pub fn begin_command(
        &self,
        execution_id: &str,
        project_id: &str,
        command: &QueuedCommand,
        now: Timestamp,
    ) -> Result<(), StateError> {
        self.insert_execution(execution_id, project_id, command, true, now)
    }

    fn insert_execution(
        &self,
        execution_id: &str,
        project_id: &str,
        command: &QueuedCommand,
        requested: bool,
        now: Timestamp,
    ) -> Result<(), StateError> {
        let id = command.command_id.to_string();
        let arguments = requested
            .then(|| serde_json::to_string(&command.arguments).ok())
            .flatten();
        let queued_at = requested.then(|| command.created_at.unix_millis());
        self.with_sync(|conn| {
            let tx = conn.transaction()?;
            tx.execute_cached(
                "INSERT INTO history (execution_id, command_id, channel, project_id, session_id, slug,
                 status, started_at, queued_at, arguments, agent_id, agent_name)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', ?7, ?8, ?9, ?10, ?11)",
                params![
                    execution_id,
                    id,
                    format!("graph:external:{id}"),
                    project_id,
                    command.graph_session_id.as_str(),
                    command.slug,
                    now.unix_millis(),
                    queued_at,
                    arguments,
                    command.agent_id,
                    command.agent_name
                ],
            )?;
            tx.execute_cached("DELETE FROM queue WHERE command_id = ?1", params![id])?;
            tx.commit()?;
            Ok(())
        })
    }

    /// Notes that the interrupted execution `execution_id` is resumed from its journal.
    pub fn note_resumed(&self, execution_id: &str, now: Timestamp) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute_cached(
                "UPDATE history SET resumed = resumed + 1, resumed_at = ?2
                 WHERE execution_id = ?1 AND status = 'running'",
                params![execution_id, now.unix_millis()],
            )?;
            Ok(())
        })
    }

    /// Forgets an execution that never started (the service refused it or was unreachable).
    pub fn forget_execution(&self, execution_id: &str) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute_cached(
                "DELETE FROM history WHERE execution_id = ?1",
                params![execution_id],
            )?;
            super::journal::delete_journal(conn, execution_id)
        })
    }

    /// Records how an execution ended and queues its completion, in one transaction: the
    /// completion is durable before anything is posted.
    pub fn finish_execution(
        &self,
        command_id: &CommandId,
        full_result: Option<&Value>,
        trace: Option<&Value>,
        completion: &CompleteRequest,
        now: Timestamp,
    ) -> Result<(), StateError> {
        let body = serde_json::to_string(completion)
            .map_err(|e| StateError::Invalid(format!("cannot encode the completion: {e}")))?;
        self.with_sync(|conn| {
            let tx = conn.transaction()?;
            write_end(&tx, full_result, trace, completion, now)?;
            tx.execute_cached(
                "INSERT INTO outbox (command_id, execution_id, body, created_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(command_id) DO UPDATE SET execution_id = ?2, body = ?3, attempts = 0, last_error = NULL",
                params![command_id.to_string(), completion.execution_id, body, now.unix_millis()],
            )?;
            tx.commit()?;
            Ok(())
        })
    }

    /// Records how an execution ended in the history only: its completion was delivered
    /// already (the state could not take it when the run ended).
    pub fn record_end(
        &self,
        full_result: Option<&Value>,
        trace: Option<&Value>,
        completion: &CompleteRequest,
        finished_at: Timestamp,
    ) -> Result<(), StateError> {
        self.with_sync(|conn| {
            write_end(conn, full_result, trace, completion, finished_at)?;
            super::journal::delete_journal(conn, &completion.execution_id)
        })
    }

    /// [`DesktopState::note_refused`] for an execution whose completion is not in the outbox.
    pub fn note_refused_of(&self, execution_id: &str, message: &str) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute_cached(
                "UPDATE history SET service_refusal = ?2 WHERE execution_id = ?1",
                params![execution_id, message],
            )?;
            Ok(())
        })
    }

    /// [`DesktopState::note_service_outcome`] for an execution whose completion is not in the
    /// outbox.
    pub fn note_service_outcome_of(
        &self,
        execution_id: &str,
        outcome: &relay_protocol::ServiceOutcome,
    ) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute_cached(
                "UPDATE history SET status = ?2, service_refusal = ?3 WHERE execution_id = ?1",
                params![
                    execution_id,
                    outcome.status.as_str(),
                    service_outcome_text(outcome)
                ],
            )?;
            Ok(())
        })
    }

    /// Notes in the history that the service refused the completion waiting in the outbox for
    /// `command_id` for good, with its message.
    pub fn note_refused(&self, command_id: &CommandId, message: &str) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute_cached(
                "UPDATE history SET service_refusal = ?2
                 WHERE execution_id = (SELECT execution_id FROM outbox WHERE command_id = ?1)",
                params![command_id.to_string(), message],
            )?;
            Ok(())
        })
    }

    /// The service had ended the run on its own before this completion arrived: the history
    /// row takes the service's status, and its reason in the service column (the desktop's
    /// result stays).
    pub fn note_service_outcome(
        &self,
        command_id: &CommandId,
        outcome: &relay_protocol::ServiceOutcome,
    ) -> Result<(), StateError> {
        let reason = service_outcome_text(outcome);
        self.with_sync(|conn| {
            conn.execute_cached(
                "UPDATE history SET status = ?2, service_refusal = ?3
                 WHERE execution_id = (SELECT execution_id FROM outbox WHERE command_id = ?1)",
                params![command_id.to_string(), outcome.status.as_str(), reason],
            )?;
            Ok(())
        })
    }

    /// Notes that the graph of an execution begins: the service said to run it. An execution
    /// a stop interrupts before this never ran.
    pub fn mark_began(&self, execution_id: &str, now: Timestamp) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute_cached(
                "UPDATE history SET began_at = ?2 WHERE execution_id = ?1",
                params![execution_id, now.unix_millis()],
            )?;
            Ok(())
        })
    }

    /// Executions that were recorded and never finished (the relay stopped while they started
    /// or ran), oldest first.
    pub fn unfinished_executions(&self) -> Result<Vec<Unfinished>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT execution_id, command_id, began_at IS NOT NULL FROM history
                 WHERE status = 'running' ORDER BY started_at",
            )?;
            let rows = stmt.query_map([], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, bool>(2)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (execution_id, command, began) = row?;
                if let Ok(command_id) = command.parse() {
                    out.push(Unfinished {
                        execution_id,
                        command_id,
                        began,
                    });
                }
            }
            Ok(out)
        })
    }

    /// Completions waiting to be posted, oldest first.
    pub fn outbox(&self) -> Result<Vec<OutboxEntry>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT command_id, body, attempts FROM outbox ORDER BY created_at, command_id",
            )?;
            let rows = stmt.query_map([], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, u32>(2)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (command, body, attempts) = row?;
                match (command.parse(), serde_json::from_str(&body)) {
                    (Ok(command_id), Ok(body)) => out.push(OutboxEntry {
                        command_id,
                        body,
                        attempts,
                    }),
                    _ => tracing::error!(command, "unreadable outbox entry left in place"),
                }
            }
            Ok(out)
        })
    }

    /// Removes a delivered (or finally refused) completion, and the journal of its run.
    pub fn remove_from_outbox(&self, command_id: &CommandId) -> Result<(), StateError> {
        self.with_sync(|conn| {
            let tx = conn.transaction()?;
            tx.execute_cached(
                // `=` a scalar subquery (the outbox has one row per command, or none): an
                // `IN` list would build a temporary b-tree at every post.
                "DELETE FROM journal WHERE execution_id =
                 (SELECT execution_id FROM outbox WHERE command_id = ?1)",
                params![command_id.to_string()],
            )?;
            tx.execute_cached(
                "DELETE FROM outbox WHERE command_id = ?1",
                params![command_id.to_string()],
            )?;
            tx.commit()?;
            Ok(())
        })
    }

    /// Notes a failed post attempt.
    pub fn note_outbox_failure(
        &self,
        command_id: &CommandId,
        error: &str,
    ) -> Result<(), StateError> {
        self.with_sync(|conn| {
            conn.execute_cached(
                "UPDATE outbox SET attempts = attempts + 1, last_error = ?2 WHERE command_id = ?1",
                params![command_id.to_string(), error],
            )?;
            Ok(())
        })
    }

    /// The run history, newest first.
    pub fn history(&self) -> Result<Vec<HistoryRow>, StateError> {
        self.with_sync(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {HISTORY_COLUMNS} FROM history ORDER BY started_at DESC, execution_id LIMIT ?1"
            ))?;
            let rows = stmt.query_map(params![MAX_HISTORY_LISTED as i64], history_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// One execution of the history with its stored trace (the run's events, as JSON), if any.
    pub fn execution(
        &self,
        execution_id: &str,
    ) -> Result<Option<(HistoryRow, Option<Value>)>, StateError> {
        self.with_sync(|conn| {
            Ok(conn
                .query_row_cached(
                    &format!(
                        "SELECT {HISTORY_COLUMNS}, trace FROM history WHERE execution_id = ?1"
                    ),
                    params![execution_id],
                    |row| {
                        let trace: Option<String> = row.get(HISTORY_COLUMN_COUNT)?;
                        Ok((
                            history_from_row(row)?,
                            trace.and_then(|t| serde_json::from_str(&t).ok()),
                        ))
                    },
                )
                .optional()?)
        })
    }
}

/// What the history says of a run the service had ended itself.
fn service_outcome_text(outcome: &relay_protocol::ServiceOutcome) -> String {
    format!(
        "the service had already ended this run as {}: {}",
        outcome.status,
        outcome.error.as_deref().unwrap_or("no reason given")
    )
}

/// Writes the end of an execution into its history row.
fn write_end(
    conn: &Connection,
    full_result: Option<&Value>,
    trace: Option<&Value>,
    completion: &CompleteRequest,
    finished_at: Timestamp,
) -> Result<(), StateError> {
    conn.execute_cached(
        "UPDATE history SET status = ?2, result = ?3, error = ?4, total_tokens = ?5,
         reported_cost = ?6, result_truncated = ?7, trace = ?8, finished_at = ?9, end_cause = ?10
         WHERE execution_id = ?1",
        params![
            completion.execution_id,
            relay_protocol::RunStatus::from(completion.status).as_str(),
            full_result.map(Value::to_string),
            completion.error,
            completion.total_tokens.unwrap_or(0) as i64,
            completion.reported_cost.unwrap_or(0.0),
            completion.result_truncated,
            trace.map(Value::to_string),
            finished_at.unix_millis(),
            completion.cause.map(relay_protocol::EndCause::as_str)
        ],
    )?;
    Ok(())
}

const HISTORY_COLUMNS: &str = "execution_id, command_id, channel, project_id, session_id, slug, \
     status, result, error, total_tokens, reported_cost, result_truncated, started_at, \
     finished_at, service_refusal, queued_at, arguments, agent_id, agent_name, end_cause, \
     resumed, resumed_at";
/// How many columns [`HISTORY_COLUMNS`] names (the index of a column selected after them).
const HISTORY_COLUMN_COUNT: usize = 22;

fn history_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<HistoryRow> {
    let result: Option<String> = row.get(7)?;
    Ok(HistoryRow {
        execution_id: row.get(0)?,
        command_id: row.get(1)?,
        channel: row.get(2)?,
        project_id: row.get(3)?,
        session_id: row.get(4)?,
        slug: row.get(5)?,
        status: row.get(6)?,
        result: result.and_then(|r| serde_json::from_str(&r).ok()),
        error: row.get(8)?,
        total_tokens: row.get::<_, i64>(9)?.max(0) as u64,
        reported_cost: row.get(10)?,
        result_truncated: row.get(11)?,
        started_at: row.get(12)?,
        finished_at: row.get(13)?,
        refused_by_service: row.get(14)?,
        queued_at: row.get(15)?,
        arguments: row
            .get::<_, Option<String>>(16)?
            .and_then(|a| serde_json::from_str(&a).ok()),
        agent_id: row.get(17)?,
        agent_name: row.get(18)?,
        // A word this build does not know (a newer relay's) reads as none.
        end_cause: row
            .get::<_, Option<String>>(19)?
            .and_then(|cause| cause.parse().ok()),
        resumed: row.get(20)?,
        resumed_at: row.get(21)?,
    })
}
