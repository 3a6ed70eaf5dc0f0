//! Statements prepared once per connection: `query_row` and `execute` that take their statement
//! from the connection's cache ([`Connection::prepare_cached`]) instead of parsing the SQL on
//! every call. A busy service runs the same few statements thousands of times a second, and a
//! simulated hour of the relay runs them millions of times; parsing was a visible share of both.
//!
//! A cached statement stays prepared only with the query planner's stability guarantee on
//! ([`cache_statements`]): without it SQLite marks a statement whose plan looked at a bound
//! value (`LIMIT ?`, and with the bundled STAT4 a `WHERE column = ?` once `ANALYZE` has run)
//! expired whenever its bindings are cleared, which rusqlite does each time a statement goes
//! back to the cache, so every call parsed it again. The service's `list_graph_sessions` spent
//! half its time there.

use rusqlite::{Connection, Params, Row};

/// Statements a connection keeps prepared: more than the service's and the desktop's distinct
/// statements, so the hot ones are never evicted by a rare one.
pub const STATEMENT_CACHE_CAPACITY: usize = 256;

/// `query_row` and `execute` through the connection's statement cache. Implemented for
/// [`Connection`]; a `Transaction` reaches it through `Deref`.
pub trait CachedStatements {
    /// [`Connection::query_row`] with a cached statement.
    fn query_row_cached<T, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> rusqlite::Result<T>;

    /// [`Connection::execute`] with a cached statement.
    fn execute_cached<P: Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize>;
}

impl CachedStatements for Connection {
    fn query_row_cached<T, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    {
        self.prepare_cached(sql)?.query_row(params, f)
    }

    fn execute_cached<P: Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }
}

/// Gives `connection` a statement cache of [`STATEMENT_CACHE_CAPACITY`] whose statements are
/// not prepared again on every use: the query planner's stability guarantee
/// (`SQLITE_DBCONFIG_ENABLE_QPSG`) plans each statement once, whatever values are bound to it.
pub fn cache_statements(connection: &Connection) -> rusqlite::Result<()> {
    connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    connection.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_statements_answer_as_uncached_ones_and_follow_schema_changes() {
        let connection = Connection::open_in_memory().expect("a database");
        cache_statements(&connection).expect("settings");
        connection
            .execute_batch("CREATE TABLE t (a INTEGER)")
            .expect("a table");
        for a in 0..3 {
            let changed = connection
                .execute_cached("INSERT INTO t (a) VALUES (?1)", [a])
                .expect("insert");
            assert_eq!(changed, 1);
        }
        let sum: i64 = connection
            .query_row_cached("SELECT sum(a) FROM t", [], |row| row.get(0))
            .expect("sum");
        assert_eq!(sum, 3);
        let columns = |connection: &Connection| {
            connection
                .query_row_cached("SELECT * FROM t LIMIT 1", [], |row| {
                    Ok(row.as_ref().column_count())
                })
                .expect("a row")
        };
        assert_eq!(columns(&connection), 1);
        // A statement cached before the schema changed is prepared again, not run stale.
        connection
            .execute_batch("ALTER TABLE t ADD COLUMN b INTEGER NOT NULL DEFAULT 7")
            .expect("a column");
        let (sum, b): (i64, i64) = connection
            .query_row_cached("SELECT sum(a), max(b) FROM t", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .expect("b");
        assert_eq!((sum, b), (3, 7));
        assert_eq!(
            columns(&connection),
            2,
            "the cached `SELECT *` sees the new column"
        );
        let tx = connection.unchecked_transaction().expect("a transaction");
        tx.execute_cached("DELETE FROM t WHERE a = ?1", [0])
            .expect("delete in a transaction");
        tx.commit().expect("commit");
        let count: i64 = connection
            .query_row_cached("SELECT count(*) FROM t", [], |row| row.get(0))
            .expect("count");
        assert_eq!(count, 2);
    }

    /// The service's `list_graph_sessions` statement, used again and again with other values:
    /// it is parsed once, not once per use (a `LIMIT ?` made SQLite prepare it again each time).
    #[test]
    fn a_cached_statement_with_bound_limits_is_not_prepared_again() {
        let reprepares = |connection: &Connection| {
            for (project, limit) in [("p1", 10), ("p2", 3), ("p1", 7), ("p3", 100)] {
                let names = connection
                    .prepare_cached("SELECT name FROM s WHERE project = ?1 ORDER BY name LIMIT ?2")
                    .and_then(|mut statement| {
                        statement
                            .query_map(rusqlite::params![project, limit], |row| {
                                row.get::<_, String>(0)
                            })?
                            .collect::<rusqlite::Result<Vec<_>>>()
                    })
                    .expect("names");
                assert_eq!(names.is_empty(), project == "p3");
            }
            connection
                .prepare_cached("SELECT name FROM s WHERE project = ?1 ORDER BY name LIMIT ?2")
                .expect("cached")
                .get_status(rusqlite::StatementStatus::RePrepare)
        };
        let table = "CREATE TABLE s (project TEXT, name TEXT); CREATE INDEX s_p ON s (project); \
                     INSERT INTO s VALUES ('p1', 'a'), ('p1', 'b'), ('p2', 'c'); ANALYZE;";
        let plain = Connection::open_in_memory().expect("a database");
        plain.execute_batch(table).expect("a table");
        assert!(
            reprepares(&plain) > 0,
            "SQLite no longer prepares such a statement again: the guarantee may be unneeded"
        );
        let cached = Connection::open_in_memory().expect("a database");
        cache_statements(&cached).expect("settings");
        cached.execute_batch(table).expect("a table");
        assert_eq!(reprepares(&cached), 0);
    }
}
