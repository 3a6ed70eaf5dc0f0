//! The decode pass of `db check`: SQLite's own checks read pages and indexes, not what the
//! program reads out of them, so a flipped byte inside a text value passes them and then fails
//! the program (`invalid utf-8 sequence`, a JSON column that no longer parses). This pass reads
//! every row of every table as the program would: each text value must be UTF-8, and each JSON
//! column must parse (as an object where the program needs one).

use rusqlite::Connection;
use rusqlite::types::ValueRef;

/// What a JSON column must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Any JSON value.
    Any,
    /// A JSON object.
    Object,
}

/// A column whose text the program reads as JSON (NULL is allowed where the schema allows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonColumn {
    /// The table.
    pub table: &'static str,
    /// The column.
    pub column: &'static str,
    /// What it must hold.
    pub shape: Shape,
}

/// Most undecodable values a pass names; the rest are counted.
pub const MAX_NAMED: usize = 20;

/// What the decode pass found: the first [`MAX_NAMED`] undecodable values, named by table, row
/// and column, and how many there were in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Undecodable {
    /// `table row KEY: column C: why`, for the first ones found.
    pub named: Vec<String>,
    /// All undecodable values found.
    pub total: usize,
}

impl Undecodable {
    fn found(&mut self, line: String) {
        self.total += 1;
        if self.named.len() < MAX_NAMED {
            self.named.push(line);
        }
    }

    /// Whether every value decoded.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
}

impl std::fmt::Display for Undecodable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.named.join("; "))?;
        if self.total > self.named.len() {
            write!(f, " (and {} more)", self.total - self.named.len())?;
        }
        Ok(())
    }
}

/// Reads every row of every table of `conn`'s database: text must be UTF-8 and each of `json`
/// must parse as its shape.
pub fn undecodable_rows(conn: &Connection, json: &[JsonColumn]) -> rusqlite::Result<Undecodable> {
    let mut found = Undecodable::default();
    let mut tables = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )?;
    let names = tables
        .query_map([], |row| row.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for table in names {
        let columns: Vec<&JsonColumn> = json.iter().filter(|c| c.table == table).collect();
        read_table(conn, &table, &columns, &mut found)?;
    }
    Ok(found)
}

fn read_table(
    conn: &Connection,
    table: &str,
    json: &[&JsonColumn],
    found: &mut Undecodable,
) -> rusqlite::Result<()> {
    let quoted = table.replace('"', "\"\"");
    let mut statement = conn.prepare(&format!("SELECT * FROM \"{quoted}\""))?;
    let names: Vec<String> = statement.column_names().map(str::to_owned).collect();
    let shapes: Vec<Option<Shape>> = names
        .iter()
        .map(|name| json.iter().find(|c| c.column == name).map(|c| c.shape))
        .collect();
    let mut rows = statement.query([])?;
    let mut index = 0u64;
    while let Some(row) = rows.next()? {
        index += 1;
        let key = row_key(row.get_ref(0)?, index);
        for (column, (name, shape)) in names.iter().zip(&shapes).enumerate() {
            if let Some(why) = undecodable(row.get_ref(column)?, *shape) {
                found.found(format!("{table} row {key}: column {name}: {why}"));
            }
        }
    }
    Ok(())
}

/// How a row is named: its first column (the key in every table of ours) when that reads as
/// text or a number, else its place in the table.
fn row_key(first: ValueRef<'_>, index: u64) -> String {
    match first {
        ValueRef::Text(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => text.to_owned(),
            Err(_) => format!("#{index}"),
        },
        ValueRef::Integer(n) => n.to_string(),
        _ => format!("#{index}"),
    }
}

/// Why `value` cannot be read as the program reads it, if it cannot.
fn undecodable(value: ValueRef<'_>, shape: Option<Shape>) -> Option<String> {
    let text = match value {
        ValueRef::Text(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => return Some(format!("not valid UTF-8 ({e})")),
        },
        ValueRef::Null => return None,
        _ if shape.is_some() => return Some("not JSON text".to_owned()),
        _ => return None,
    };
    let shape = shape?;
    match serde_json::from_str::<serde_json::Value>(text) {
        Err(e) => Some(format!("not JSON ({e})")),
        Ok(value) if shape == Shape::Object && !value.is_object() => {
            Some("not a JSON object".to_owned())
        }
        Ok(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pass_names_bad_text_and_bad_json_by_table_row_and_column() {
        let conn = Connection::open_in_memory().expect("db");
        conn.execute_batch(
            "CREATE TABLE commands (id TEXT PRIMARY KEY, arguments TEXT, note TEXT);
             INSERT INTO commands VALUES ('good', '{\"a\":1}', 'fine');
             INSERT INTO commands VALUES ('array', '[1]', NULL);
             INSERT INTO commands VALUES ('broken', '{\"a\":', NULL);
             INSERT INTO commands VALUES ('bytes', '{}', CAST(X'FF41' AS TEXT));",
        )
        .expect("rows");
        let json = [JsonColumn {
            table: "commands",
            column: "arguments",
            shape: Shape::Object,
        }];
        let found = undecodable_rows(&conn, &json).expect("pass");
        assert_eq!(found.total, 3, "{found}");
        let text = found.to_string();
        for part in [
            "commands row array: column arguments: not a JSON object",
            "commands row broken: column arguments: not JSON",
            "commands row bytes: column note: not valid UTF-8",
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
        assert!(!text.contains("good"), "{text}");
        assert!(undecodable_rows(&conn, &[]).expect("pass").total == 1);
    }
}
