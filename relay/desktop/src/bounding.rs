//! Result bounding, all or nothing: the completion carries the result when the JSON text of
//! `{execution_id, status, result, total_tokens, reported_cost}` is at most
//! [`MAX_RESULT_CHARS`] characters, counted as UTF-16 code units like JavaScript's
//! `JSON.stringify(x).length`; otherwise it says `result_truncated: true` and carries no result
//! at all (the full result stays in the desktop's history). Errors are cut to
//! [`MAX_ERROR_CHARS`] UTF-16 units, never inside a surrogate pair.

use serde_json::Value;

use relay_protocol::{CompleteRequest, CompletionStatus, json_utf16_len};
pub use relay_protocol::{MAX_ERROR_CHARS, MAX_RESULT_CHARS};

/// Cuts `error` to at most [`MAX_ERROR_CHARS`] UTF-16 code units. A character outside the
/// basic plane (two units) that would straddle the limit is left out whole.
pub fn cut_error(error: &str) -> String {
    let mut units = 0usize;
    for (at, c) in error.char_indices() {
        units += c.len_utf16();
        if units > MAX_ERROR_CHARS {
            return error[..at].to_owned();
        }
    }
    error.to_owned()
}

/// The completion to post for an execution that ended with `status`.
pub fn completion(
    execution_id: &str,
    status: CompletionStatus,
    result: Option<Value>,
    total_tokens: u64,
    reported_cost: f64,
    error: Option<&str>,
) -> CompleteRequest {
    let mut completion = CompleteRequest {
        execution_id: execution_id.to_owned(),
        status,
        result,
        result_truncated: false,
        total_tokens: Some(total_tokens),
        reported_cost: Some(if reported_cost.is_finite() && reported_cost >= 0.0 {
            reported_cost
        } else {
            0.0
        }),
        error: error.map(cut_error),
        finished_at: None,
        cause: None,
    };
    if completion.result.is_some() && json_utf16_len(&completion.bounded_view()) > MAX_RESULT_CHARS
    {
        completion.result = None;
        completion.result_truncated = true;
    }
    completion
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_text(text: String) -> CompleteRequest {
        completion(
            "exec-1",
            CompletionStatus::Completed,
            Some(Value::String(text)),
            10,
            0.5,
            None,
        )
    }

    fn overhead() -> usize {
        json_utf16_len(&with_text(String::new()).bounded_view())
    }

    #[test]
    fn ascii_at_the_limit_fits_and_one_more_is_truncated_whole() {
        let fits = with_text("a".repeat(MAX_RESULT_CHARS - overhead()));
        assert!(!fits.result_truncated);
        assert_eq!(json_utf16_len(&fits.bounded_view()), MAX_RESULT_CHARS);
        let over = with_text("a".repeat(MAX_RESULT_CHARS - overhead() + 1));
        assert!(over.result_truncated);
        assert_eq!(over.result, None, "never half a result");
        assert_eq!(over.total_tokens, Some(10));
        assert_eq!(over.reported_cost, Some(0.5));
        assert!(over.validate().is_ok());
    }

    #[test]
    fn japanese_counts_characters_not_bytes() {
        let text = "日".repeat(MAX_RESULT_CHARS - overhead());
        let fits = with_text(text.clone());
        assert!(!fits.result_truncated);
        let json = serde_json::to_string(&fits.bounded_view()).expect("json");
        assert_eq!(json_utf16_len(&fits.bounded_view()), MAX_RESULT_CHARS);
        // Each Japanese character is three UTF-8 bytes: the JSON is ~3× the limit in bytes.
        assert!(json.len() > 2 * MAX_RESULT_CHARS, "{} bytes", json.len());
        assert_eq!(text.len(), 3 * text.chars().count());
    }

    #[test]
    fn an_emoji_counts_two() {
        let n = (MAX_RESULT_CHARS - overhead()) / 2;
        let fits = with_text("😀".repeat(n));
        assert!(!fits.result_truncated);
        let over = with_text("😀".repeat(n + 1));
        assert!(over.result_truncated);
    }

    #[test]
    fn errors_are_cut_to_2000_units_on_a_character_boundary() {
        assert_eq!(cut_error(&"e".repeat(5000)).len(), MAX_ERROR_CHARS);
        assert_eq!(cut_error("short"), "short");
        // 1999 units, then an emoji (two units) that would end at 2001: left out whole.
        let text = format!("{}😀tail", "x".repeat(MAX_ERROR_CHARS - 1));
        let cut = cut_error(&text);
        assert_eq!(cut, "x".repeat(MAX_ERROR_CHARS - 1));
        let exact = format!("{}😀", "x".repeat(MAX_ERROR_CHARS - 2));
        assert_eq!(cut_error(&exact), exact);
        assert_eq!(
            cut_error(&"日".repeat(3000)).chars().count(),
            MAX_ERROR_CHARS
        );
    }
}
