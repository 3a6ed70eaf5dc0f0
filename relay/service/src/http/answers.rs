//! How the service's HTTP edges answer a refusal: one function per error type, each an
//! exhaustive match (no `_ =>` arm), so every variant has a status chosen for it and a new one
//! cannot reach a client unanswered, or as a 503 it would retry forever. The JSON APIs
//! ([`ApiError`](super::edge::ApiError)), the console and the OAuth pages all take their status,
//! text, `Retry-After` and cause from here.

use axum::http::StatusCode;
use relay_protocol::{RunStatus, cause};

use super::rate::RateLimited;
use crate::auth::AuthError;
use crate::chat_tasks::TaskError;
use crate::runs::{DesktopError, QuotaError, RunError};
use crate::store::{Fault, StoreError};

/// Seconds a client is told to wait after a busy or unreachable database.
pub const BUSY_RETRY_AFTER_SECS: u64 = 5;
/// Seconds a client is told to wait after a full disk (freeing space takes an operator).
pub const DISK_FULL_RETRY_AFTER_SECS: u64 = 30;
/// Seconds a client is told to wait after concurrent writers kept winning.
pub const CONTENDED_RETRY_AFTER_SECS: u64 = 1;

/// How a refusal is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: StatusCode,
    /// What was wrong and what to do.
    pub message: String,
    /// The command's status, when the refusal is about one.
    pub run_status: Option<RunStatus>,
    /// `Retry-After` in seconds: every 429 and 503 has one.
    pub retry_after: Option<u64>,
    /// The machine-readable cause ([`relay_protocol::cause`]).
    pub cause: &'static str,
}

impl Answer {
    /// An answer without `Retry-After`.
    pub fn new(status: StatusCode, cause: &'static str, message: impl Into<String>) -> Self {
        Answer {
            status,
            message: message.into(),
            run_status: None,
            retry_after: None,
            cause,
        }
    }

    /// An answer asking the client to come back after `seconds`.
    pub fn later(
        status: StatusCode,
        cause: &'static str,
        message: impl Into<String>,
        seconds: u64,
    ) -> Self {
        Answer {
            retry_after: Some(seconds),
            ..Answer::new(status, cause, message)
        }
    }
}

/// A store failure, logged for the operator with its cause and remedy (`context` says what
/// failed): 503 with `Retry-After` for a failure that passes by itself (a busy lock, a full
/// disk, a database that does not answer), 500 naming the cause for one that needs the
/// operator's hand (read-only, missing, damaged, a refused statement), 400 for a value of the
/// caller's that cannot be stored.
pub fn store_answer(error: &StoreError, context: &str) -> Answer {
    error.log(context);
    match error {
        StoreError::Invalid(message) => Answer::new(
            StatusCode::BAD_REQUEST,
            cause::BAD_REQUEST,
            format!("{message}: nothing was recorded; change the request"),
        ),
        StoreError::Corrupt(damage) => Answer::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            cause::CORRUPT,
            format!(
                "{}: {} row {} cannot be read; retrying does not help until the service's operator repairs it",
                Fault::Corrupt.describe(),
                damage.table,
                damage.id
            ),
        ),
        StoreError::Fault { fault, .. } => fault_answer(*fault),
        StoreError::Sqlite { .. }
        | StoreError::Postgres { .. }
        | StoreError::Pool(_)
        | StoreError::PoolBuild(_)
        | StoreError::PoolClosed(_)
        | StoreError::Task(_)
        | StoreError::Encode { .. }
        | StoreError::Setup { .. }
        | StoreError::Inconsistent(_)
        | StoreError::Randomness(_)
        | StoreError::Unusable(_) => {
            if error.retry_helps() {
                Answer::later(
                    StatusCode::SERVICE_UNAVAILABLE,
                    cause::UNAVAILABLE,
                    "the service's database does not answer right now; retry after Retry-After seconds",
                    BUSY_RETRY_AFTER_SECS,
                )
            } else {
                Answer::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    cause::INTERNAL,
                    "the service failed to do this (its log says why); retrying does not help until its operator acts",
                )
            }
        }
    }
}

/// A named storage fault: 503 with `Retry-After` when it passes, 500 when it needs a hand.
fn fault_answer(fault: Fault) -> Answer {
    let cause = fault_cause(fault);
    if fault.transient() {
        let wait = match fault {
            Fault::DiskFull => DISK_FULL_RETRY_AFTER_SECS,
            Fault::Busy | Fault::ReadOnly | Fault::Missing | Fault::Corrupt => {
                BUSY_RETRY_AFTER_SECS
            }
        };
        Answer::later(
            StatusCode::SERVICE_UNAVAILABLE,
            cause,
            format!(
                "{}: the service cannot record this now; retry after Retry-After seconds",
                fault.describe()
            ),
            wait,
        )
    } else {
        Answer::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            cause,
            format!(
                "{}: retrying does not help until the service's operator repairs it",
                fault.describe()
            ),
        )
    }
}

/// The protocol's word for a storage fault.
fn fault_cause(fault: Fault) -> &'static str {
    match fault {
        Fault::DiskFull => cause::DISK_FULL,
        Fault::ReadOnly => cause::READ_ONLY,
        Fault::Missing => cause::MISSING,
        Fault::Corrupt => cause::CORRUPT,
        Fault::Busy => cause::BUSY,
    }
}

/// A refusal of the run functions (owner API, desktop API, console).
pub fn run_answer(error: RunError, context: &str) -> Answer {
    match error {
        RunError::NotFound => Answer::new(
            StatusCode::NOT_FOUND,
            cause::NOT_FOUND,
            RunError::NotFound.to_string(),
        ),
        RunError::Invalid(message) => {
            Answer::new(StatusCode::BAD_REQUEST, cause::BAD_REQUEST, message)
        }
        RunError::IdempotencyConflict => Answer::new(
            StatusCode::CONFLICT,
            cause::CONFLICT,
            RunError::IdempotencyConflict.to_string(),
        ),
        RunError::Contended => Answer::later(
            StatusCode::SERVICE_UNAVAILABLE,
            cause::CONTENDED,
            RunError::Contended.to_string(),
            CONTENDED_RETRY_AFTER_SECS,
        ),
        RunError::Quota(quota) => quota_answer(&quota),
        RunError::Revoked => Answer::new(
            StatusCode::UNAUTHORIZED,
            cause::REVOKED,
            RunError::Revoked.to_string(),
        ),
        RunError::Store(error) => store_answer(&error, context),
    }
}

/// A queue quota's refusal: 429 with `Retry-After` (about one desktop pass).
pub fn quota_answer(error: &QuotaError) -> Answer {
    match error {
        QuotaError::AgentQueue(..) | QuotaError::ProjectQueue(..) => Answer::later(
            StatusCode::TOO_MANY_REQUESTS,
            cause::QUOTA,
            error.to_string(),
            error.retry_after_secs(),
        ),
    }
}

/// A token past its request rate: 429 with `Retry-After`.
pub fn rate_answer(error: &RateLimited) -> Answer {
    Answer::later(
        StatusCode::TOO_MANY_REQUESTS,
        cause::RATE_LIMITED,
        error.to_string(),
        error.retry_after_secs,
    )
}

/// A refusal of the desktop API's domain functions.
pub fn desktop_answer(error: DesktopError) -> Answer {
    match error {
        DesktopError::BadRequest(message) => {
            Answer::new(StatusCode::BAD_REQUEST, cause::BAD_REQUEST, message)
        }
        DesktopError::Forbidden(message) => {
            Answer::new(StatusCode::FORBIDDEN, cause::FORBIDDEN, message)
        }
        DesktopError::NotFound(message) => {
            Answer::new(StatusCode::NOT_FOUND, cause::NOT_FOUND, message)
        }
        DesktopError::Revoked => Answer::new(
            StatusCode::UNAUTHORIZED,
            cause::REVOKED,
            DesktopError::Revoked.to_string(),
        ),
        DesktopError::Conflict { message, status } => Answer {
            run_status: Some(status),
            ..Answer::new(StatusCode::CONFLICT, cause::CONFLICT, message)
        },
        DesktopError::Run(error) => run_answer(error, "desktop request failed"),
    }
}

/// A refusal of the chat tasks' domain functions (owner API, console).
pub fn task_answer(error: TaskError) -> Answer {
    match error {
        TaskError::Invalid(message) => {
            Answer::new(StatusCode::BAD_REQUEST, cause::BAD_REQUEST, message)
        }
        TaskError::LinkNotFound | TaskError::TaskNotFound | TaskError::ArtifactNotFound => {
            Answer::new(StatusCode::NOT_FOUND, cause::NOT_FOUND, error.to_string())
        }
        TaskError::Refused(_) | TaskError::Conflict(_) => {
            Answer::new(StatusCode::CONFLICT, cause::CONFLICT, error.to_string())
        }
        TaskError::Contended => Answer::later(
            StatusCode::SERVICE_UNAVAILABLE,
            cause::CONTENDED,
            error.to_string(),
            CONTENDED_RETRY_AFTER_SECS,
        ),
        TaskError::Store(error) => store_answer(&error, "owner request failed"),
    }
}

/// A refused bearer token.
pub fn auth_answer(error: AuthError) -> Answer {
    match error {
        AuthError::Missing | AuthError::Invalid | AuthError::WrongKind { .. } => Answer::new(
            StatusCode::UNAUTHORIZED,
            cause::UNAUTHORIZED,
            error.to_string(),
        ),
        AuthError::Store(error) => store_answer(&error, "token check failed"),
    }
}

/// What a page (the console, the OAuth pages) tells a person about `answer`: a title for its
/// status, and its text, or for a failure that passes a plain "try again in a moment".
pub fn for_person(answer: &Answer) -> (&'static str, String) {
    let title = match answer.status {
        StatusCode::BAD_REQUEST => "Check the request",
        StatusCode::UNAUTHORIZED => "Sign in again",
        StatusCode::NOT_FOUND => "Not found",
        StatusCode::CONFLICT => "Not done",
        _ if answer.retry_after.is_some() => "Try again",
        _ => "Cannot do this",
    };
    let text = if answer.status.is_server_error() && answer.retry_after.is_some() {
        "The service cannot complete this right now. Try again in a moment.".to_owned()
    } else {
        answer.message.clone()
    };
    (title, text)
}

/// `response` with `answer`'s `Retry-After`, if it has one.
pub fn with_retry_after(
    mut response: axum::response::Response,
    answer: &Answer,
) -> axum::response::Response {
    if let Some(seconds) = answer.retry_after {
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from(seconds),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    //! One table per mapping function, one row per variant: the status, the cause and whether
    //! the client is asked to come back (`Retry-After`).

    use axum::http::StatusCode;
    use relay_protocol::{RunStatus, cause};

    use super::{Answer, auth_answer, desktop_answer, quota_answer, run_answer, store_answer};
    use crate::auth::AuthError;
    use crate::chat_tasks::TaskError;
    use crate::chat_tasks::machine::Refusal;
    use crate::http::rate::RateLimited;
    use crate::runs::{DesktopError, QuotaError, RunError};
    use crate::store::{Damage, Fault, StoreError};

    /// A row's expectation: status, cause, and whether `Retry-After` is set.
    type Expected = (StatusCode, &'static str, bool);

    fn check(name: &str, answer: &Answer, (status, cause, later): Expected) {
        assert_eq!(answer.status, status, "{name}: {answer:?}");
        assert_eq!(answer.cause, cause, "{name}: {answer:?}");
        assert_eq!(answer.retry_after.is_some(), later, "{name}: {answer:?}");
        assert!(!answer.message.is_empty(), "{name} says what happened");
        if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
            assert!(later, "{name}: every 429 and 503 says when to come back");
        }
    }

    const UNAVAILABLE: Expected = (StatusCode::SERVICE_UNAVAILABLE, cause::UNAVAILABLE, true);
    const INTERNAL: Expected = (StatusCode::INTERNAL_SERVER_ERROR, cause::INTERNAL, false);

    fn sqlite(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    fn fault(fault: Fault) -> StoreError {
        StoreError::Fault {
            fault,
            detail: fault.describe().to_owned(),
            source: fault.describe().into(),
        }
    }

    fn unnamed_sqlite(code: i32) -> StoreError {
        StoreError::Sqlite {
            context: String::new(),
            source: sqlite(code),
        }
    }

    /// The variants that keep a client library's error, each with the answer it must get.
    async fn client_rows() -> Vec<(&'static str, StoreError, Expected)> {
        let closed = tokio::sync::Semaphore::new(1);
        closed.close();
        let pool_closed = closed.acquire().await.expect_err("closed");
        let panicked = tokio::spawn(async { panic!("a bug in a store call") })
            .await
            .expect_err("the task panicked");
        let Err(refused) = tokio_postgres::connect(
            "host=127.0.0.1 port=1 user=nobody connect_timeout=2",
            tokio_postgres::NoTls,
        )
        .await
        else {
            panic!("nothing listens on port 1");
        };
        let postgres = StoreError::Postgres {
            detail: "refused".into(),
            source: refused,
        };
        let timeout = deadpool_postgres::PoolError::Timeout(deadpool_postgres::TimeoutType::Wait);
        let build = deadpool_postgres::BuildError::NoRuntimeSpecified;
        let encode = StoreError::Encode {
            what: "result",
            source: serde_json::from_str::<u8>("x").expect_err("not a number"),
        };
        vec![
            (
                "sqlite, unnamed",
                unnamed_sqlite(rusqlite::ffi::SQLITE_CONSTRAINT),
                INTERNAL,
            ),
            (
                "sqlite, I/O",
                unnamed_sqlite(rusqlite::ffi::SQLITE_IOERR),
                UNAVAILABLE,
            ),
            ("postgres, no connection", postgres, UNAVAILABLE),
            ("pool", StoreError::Pool(timeout), UNAVAILABLE),
            ("pool build", StoreError::PoolBuild(build), INTERNAL),
            (
                "pool closed",
                StoreError::PoolClosed(pool_closed),
                UNAVAILABLE,
            ),
            ("task", StoreError::Task(panicked), INTERNAL),
            ("encode", encode, INTERNAL),
            (
                "randomness",
                StoreError::Randomness(getrandom::Error::UNSUPPORTED),
                INTERNAL,
            ),
        ]
    }

    /// The store's own variants, each with the answer it must get.
    fn own_rows() -> Vec<(&'static str, StoreError, Expected)> {
        let corrupt = (StatusCode::INTERNAL_SERVER_ERROR, cause::CORRUPT, false);
        let damage = Damage::of("arguments", "not an object").in_row("commands", "c1");
        let invalid = StoreError::Invalid("total_tokens is too large to store".into());
        let later = |cause| (StatusCode::SERVICE_UNAVAILABLE, cause, true);
        let needs_hand = |cause| (StatusCode::INTERNAL_SERVER_ERROR, cause, false);
        vec![
            ("setup", StoreError::setup("bad schema name"), INTERNAL),
            (
                "inconsistent",
                StoreError::Inconsistent("vanished"),
                INTERNAL,
            ),
            ("corrupt", damage.into(), corrupt),
            (
                "invalid",
                invalid,
                (StatusCode::BAD_REQUEST, cause::BAD_REQUEST, false),
            ),
            ("disk full", fault(Fault::DiskFull), later(cause::DISK_FULL)),
            ("busy", fault(Fault::Busy), later(cause::BUSY)),
            (
                "read-only",
                fault(Fault::ReadOnly),
                needs_hand(cause::READ_ONLY),
            ),
            ("missing", fault(Fault::Missing), needs_hand(cause::MISSING)),
            ("damaged database", fault(Fault::Corrupt), corrupt),
            (
                "unusable",
                StoreError::Unusable("newer schema".into()),
                INTERNAL,
            ),
        ]
    }

    #[tokio::test]
    async fn store_answer_over_every_variant() {
        for (name, error, expected) in client_rows().await.into_iter().chain(own_rows()) {
            check(name, &store_answer(&error, "test"), expected);
        }
        let damaged: StoreError = Damage::of("arguments", "x").in_row("commands", "c1").into();
        assert!(
            store_answer(&damaged, "test")
                .message
                .contains("commands row c1"),
            "damage names its object"
        );
    }

    #[test]
    fn the_fault_causes_are_the_protocol_words() {
        for fault in [
            Fault::DiskFull,
            Fault::ReadOnly,
            Fault::Missing,
            Fault::Corrupt,
            Fault::Busy,
        ] {
            assert_eq!(super::fault_cause(fault), fault.as_str());
        }
    }

    #[test]
    fn quota_answer_over_every_variant() {
        let quota = (StatusCode::TOO_MANY_REQUESTS, cause::QUOTA, true);
        for (name, error) in [
            ("agent queue", QuotaError::AgentQueue(100, 20)),
            ("project queue", QuotaError::ProjectQueue(1_000, 20)),
        ] {
            let answer = quota_answer(&error);
            check(name, &answer, quota);
            assert_eq!(answer.retry_after, Some(error.retry_after_secs()), "{name}");
        }
    }

    #[test]
    fn rate_answer_says_when_to_come_back() {
        let limited = RateLimited::new(None, std::time::Duration::from_millis(1_500));
        let answer = super::rate_answer(&limited);
        check(
            "rate",
            &answer,
            (StatusCode::TOO_MANY_REQUESTS, cause::RATE_LIMITED, true),
        );
        assert_eq!(answer.retry_after, Some(2));
    }

    fn run_rows() -> Vec<(&'static str, RunError, Expected)> {
        vec![
            (
                "not found",
                RunError::NotFound,
                (StatusCode::NOT_FOUND, cause::NOT_FOUND, false),
            ),
            (
                "invalid",
                RunError::Invalid("bad".into()),
                (StatusCode::BAD_REQUEST, cause::BAD_REQUEST, false),
            ),
            (
                "idempotency conflict",
                RunError::IdempotencyConflict,
                (StatusCode::CONFLICT, cause::CONFLICT, false),
            ),
            (
                "contended",
                RunError::Contended,
                (StatusCode::SERVICE_UNAVAILABLE, cause::CONTENDED, true),
            ),
            (
                "quota",
                RunError::Quota(QuotaError::AgentQueue(100, 20)),
                (StatusCode::TOO_MANY_REQUESTS, cause::QUOTA, true),
            ),
            (
                "revoked",
                RunError::Revoked,
                (StatusCode::UNAUTHORIZED, cause::REVOKED, false),
            ),
            (
                "store",
                RunError::Store(fault(Fault::DiskFull)),
                (StatusCode::SERVICE_UNAVAILABLE, cause::DISK_FULL, true),
            ),
        ]
    }

    #[test]
    fn run_answer_over_every_variant() {
        for (name, error, expected) in run_rows() {
            check(name, &run_answer(error, "test"), expected);
        }
    }

    #[test]
    fn desktop_answer_over_every_variant() {
        let rows: Vec<(&str, DesktopError, Expected)> = vec![
            (
                "bad request",
                DesktopError::BadRequest("bad".into()),
                (StatusCode::BAD_REQUEST, cause::BAD_REQUEST, false),
            ),
            (
                "forbidden",
                DesktopError::Forbidden("not yours".into()),
                (StatusCode::FORBIDDEN, cause::FORBIDDEN, false),
            ),
            (
                "not found",
                DesktopError::NotFound("gone".into()),
                (StatusCode::NOT_FOUND, cause::NOT_FOUND, false),
            ),
            (
                "revoked",
                DesktopError::Revoked,
                (StatusCode::UNAUTHORIZED, cause::REVOKED, false),
            ),
            (
                "conflict",
                DesktopError::Conflict {
                    message: "finished".into(),
                    status: RunStatus::Completed,
                },
                (StatusCode::CONFLICT, cause::CONFLICT, false),
            ),
            (
                "run contended",
                DesktopError::Run(RunError::Contended),
                (StatusCode::SERVICE_UNAVAILABLE, cause::CONTENDED, true),
            ),
            (
                "run store",
                DesktopError::Run(RunError::Store(fault(Fault::Busy))),
                (StatusCode::SERVICE_UNAVAILABLE, cause::BUSY, true),
            ),
        ];
        for (name, error, expected) in rows {
            check(name, &desktop_answer(error), expected);
        }
        let conflict = desktop_answer(DesktopError::Conflict {
            message: "finished".into(),
            status: RunStatus::Completed,
        });
        assert_eq!(conflict.run_status, Some(RunStatus::Completed));
        // Every run refusal reaches the desktop with the run functions' answer, none as a
        // blanket 503.
        for (name, error, expected) in run_rows() {
            check(name, &desktop_answer(DesktopError::Run(error)), expected);
        }
    }

    #[test]
    fn task_answer_over_every_variant() {
        let conflict = (StatusCode::CONFLICT, cause::CONFLICT, false);
        let not_found = (StatusCode::NOT_FOUND, cause::NOT_FOUND, false);
        let rows: Vec<(&str, TaskError, Expected)> = vec![
            (
                "invalid",
                TaskError::Invalid("bad".into()),
                (StatusCode::BAD_REQUEST, cause::BAD_REQUEST, false),
            ),
            ("link not found", TaskError::LinkNotFound, not_found),
            ("task not found", TaskError::TaskNotFound, not_found),
            ("artifact not found", TaskError::ArtifactNotFound, not_found),
            ("refused", TaskError::Refused(Refusal::StaleClaim), conflict),
            (
                "conflict",
                TaskError::Conflict("key reused".into()),
                conflict,
            ),
            (
                "contended",
                TaskError::Contended,
                (StatusCode::SERVICE_UNAVAILABLE, cause::CONTENDED, true),
            ),
            (
                "store",
                TaskError::Store(fault(Fault::ReadOnly)),
                (StatusCode::INTERNAL_SERVER_ERROR, cause::READ_ONLY, false),
            ),
        ];
        for (name, error, expected) in rows {
            check(name, &super::task_answer(error), expected);
        }
    }

    #[test]
    fn auth_answer_over_every_variant() {
        let unauthorized = (StatusCode::UNAUTHORIZED, cause::UNAUTHORIZED, false);
        let rows: Vec<(&str, AuthError, Expected)> = vec![
            ("missing", AuthError::Missing, unauthorized),
            ("invalid", AuthError::Invalid, unauthorized),
            (
                "wrong kind",
                AuthError::WrongKind {
                    actual: "agent",
                    expected: "desktop",
                },
                unauthorized,
            ),
            (
                "store",
                AuthError::Store(fault(Fault::Busy)),
                (StatusCode::SERVICE_UNAVAILABLE, cause::BUSY, true),
            ),
        ];
        for (name, error, expected) in rows {
            check(name, &auth_answer(error), expected);
        }
    }
}
