//! `runner test`'s machine-readable reports: `--json` (one JSON object per test, one per line)
//! and `--junit FILE` (JUnit XML, as CI systems read it: one `testsuite` per test file, one
//! `testcase` per test, a `failure` with the first problem as its message and every problem and
//! the end of the run's trace as its text).

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::testing::CaseReport;

/// One test as the reports list it: a case's report, and the round it ran in (`runner test
/// --repeat`; later rounds list only failures).
#[derive(Debug, Clone)]
pub struct Listed {
    /// The case's report.
    pub report: CaseReport,
    /// The round, from 1.
    pub round: u32,
}

impl Listed {
    /// The test's name: the case's, with the round after the first.
    pub fn name(&self) -> String {
        if self.round > 1 {
            format!("{} (round {})", self.report.name, self.round)
        } else {
            self.report.name.clone()
        }
    }
}

/// `--json`'s object for one test: `file`, `name`, `round`, `passed`, `problems`,
/// `duration_ms`, and the run's `outcome` (`status`, `result`, `error`, `location`,
/// `total_tokens`, `reported_cost`; null when the case could not run).
pub fn json_line(listed: &Listed) -> Value {
    let report = &listed.report;
    let outcome = report.outcome.as_ref().map(|o| {
        json!({
            "status": o.status,
            "result": o.result,
            "error": o.error,
            "location": o.location,
            "total_tokens": o.total_tokens,
            "reported_cost": o.reported_cost,
        })
    });
    json!({
        "file": report.file.display().to_string(),
        "name": report.name,
        "round": listed.round,
        "passed": report.passed(),
        "problems": report.problems,
        "duration_ms": u64::try_from(report.duration.as_millis()).unwrap_or(u64::MAX),
        "outcome": outcome,
    })
}

/// The JUnit XML document for `tests`, grouped by test file in the order they first appear.
pub fn junit(tests: &[Listed]) -> String {
    let mut files: Vec<(String, Vec<&Listed>)> = Vec::new();
    for listed in tests {
        let file = listed.report.file.display().to_string();
        match files.iter_mut().find(|(f, _)| *f == file) {
            Some((_, cases)) => cases.push(listed),
            None => files.push((file, vec![listed])),
        }
    }
    let failures = tests.iter().filter(|t| !t.report.passed()).count();
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        xml,
        "<testsuites name=\"runner test\" tests=\"{}\" failures=\"{failures}\" time=\"{:.3}\">",
        tests.len(),
        tests
            .iter()
            .map(|t| t.report.duration.as_secs_f64())
            .sum::<f64>()
    );
    for (file, cases) in &files {
        let failed = cases.iter().filter(|t| !t.report.passed()).count();
        let time: f64 = cases.iter().map(|t| t.report.duration.as_secs_f64()).sum();
        let _ = writeln!(
            xml,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failed}\" errors=\"0\" time=\"{time:.3}\">",
            escape(file),
            cases.len()
        );
        for listed in cases {
            testcase(&mut xml, file, listed);
        }
        xml.push_str("  </testsuite>\n");
    }
    xml.push_str("</testsuites>\n");
    xml
}

/// One `testcase` element, with a `failure` when the test failed.
fn testcase(xml: &mut String, file: &str, listed: &Listed) {
    let report = &listed.report;
    // CI systems show `classname` as the group: the test file's name without `.test.json`.
    let classname = report
        .file
        .file_name()
        .and_then(|n| n.to_str())
        .map(|n| n.strip_suffix(crate::testing::TEST_SUFFIX).unwrap_or(n))
        .unwrap_or(file);
    let _ = write!(
        xml,
        "    <testcase name=\"{}\" classname=\"{}\" file=\"{}\" time=\"{:.3}\"",
        escape(&listed.name()),
        escape(classname),
        escape(file),
        report.duration.as_secs_f64()
    );
    let Some(first) = report.problems.first() else {
        xml.push_str("/>\n");
        return;
    };
    let mut text = report.problems.join("\n");
    if !report.trace.is_empty() {
        text.push_str("\n\nthe end of the trace:\n");
        text.push_str(&report.trace.join("\n"));
    }
    let _ = write!(
        xml,
        ">\n      <failure message=\"{}\" type=\"failed\">{}</failure>\n    </testcase>\n",
        escape(first),
        escape(&text)
    );
}

/// `text` as XML character data or an attribute value: the five markup characters as entities,
/// and the characters XML 1.0 cannot hold at all (other control characters, lone surrogates
/// cannot occur in a Rust string) as `\u{..}` escapes.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if u32::from(c) < 0x20 || matches!(c, '\u{fffe}' | '\u{ffff}') => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_characters_xml_cannot_hold_are_escaped() {
        assert_eq!(
            escape("a<b>&\"c'\u{1b}[2J\u{0}\n"),
            "a&lt;b&gt;&amp;&quot;c&apos;\\u{1b}[2J\\u{0}\n"
        );
    }
}
