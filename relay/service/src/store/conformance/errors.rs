//! How a store fails: the database's own error stays the source of the store's, and a value
//! the caller sent that cannot be stored is the caller's error, not a conflict or an outage.

use std::error::Error as _;

use super::{T0, at, command, insert_new, seed};
use crate::store::{ProjectRecord, Store, StoreError};

/// A write the database refuses (a project of an owner that does not exist) fails with the
/// database's error kept as the source, unnamed as a fault, and not as the caller's input.
pub async fn a_refused_write_keeps_the_database_error_as_its_source(store: &dyn Store) {
    let error = store
        .insert_project(ProjectRecord {
            id: uuid::Uuid::new_v4().to_string(),
            owner_id: "no-such-owner".into(),
            name: "orphan".into(),
            created_at: T0,
        })
        .await
        .expect_err("a project needs an existing owner");
    assert!(
        matches!(
            error,
            StoreError::Sqlite { .. } | StoreError::Postgres { .. }
        ),
        "the database's refusal is a database error: {error:?}"
    );
    assert_eq!(error.fault(), None, "{error}");
    assert!(
        !error.retry_helps(),
        "a refused statement fails the same way again: {error}"
    );
    let source = error
        .source()
        .expect("the database's error is kept as the source");
    let kept = match &error {
        StoreError::Sqlite { .. } => source.downcast_ref::<rusqlite::Error>().is_some(),
        _ => source.downcast_ref::<tokio_postgres::Error>().is_some(),
    };
    assert!(
        kept,
        "the source is the database client's own error: {source:?}"
    );
    assert!(
        error.to_string().starts_with("database error: ") && error.to_string().len() > 20,
        "the message still says what the database said: {error}"
    );
}

/// A number past the column's range is refused as invalid input, and nothing is written.
pub async fn a_value_out_of_range_is_invalid_input(store: &dyn Store) {
    let seed = seed(store).await;
    let queued = insert_new(store, command(&seed, &seed.agent_id, "too-many", at(1))).await;
    let mut next = queued.clone();
    next.status = relay_protocol::RunStatus::Completed;
    next.total_tokens = Some(u64::MAX);
    next.finished_at = Some(at(2));
    next.updated_at = at(2);
    let error = store
        .update_command(&queued, &next)
        .await
        .expect_err("u64::MAX tokens do not fit");
    assert!(
        matches!(&error, StoreError::Invalid(message) if message.contains("total_tokens")),
        "an input error names the value and is not a conflict: {error:?}"
    );
    assert_eq!(
        store.command(queued.id).await.expect("read"),
        Some(queued),
        "nothing was written"
    );
}
