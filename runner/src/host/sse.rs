//! A bounded decoder for server-sent events (the `text/event-stream` format both provider APIs
//! stream in): bytes in, `(event, data)` pairs out. Lines may arrive split across chunks and end
//! in `\n`, `\r\n` or `\r`; comments (`:`) and unknown fields are skipped.

/// Longest line accepted: a streamed chunk is one short JSON object per line.
pub const MAX_SSE_LINE_BYTES: usize = 1024 * 1024;
/// Largest data of one event (the sum of its `data:` lines).
pub const MAX_SSE_EVENT_BYTES: usize = 1024 * 1024;

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if given.
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// Why a stream was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A line is longer than [`MAX_SSE_LINE_BYTES`].
    #[error("a line of the event stream is longer than {MAX_SSE_LINE_BYTES} bytes")]
    LineTooLong,
    /// An event's data is larger than [`MAX_SSE_EVENT_BYTES`].
    #[error("an event of the stream is larger than {MAX_SSE_EVENT_BYTES} bytes")]
    EventTooLarge,
}

/// The decoder's state between chunks.
#[derive(Debug, Default)]
pub struct SseDecoder {
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a `\n` starting the next one belongs to it.
    after_cr: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    /// Feeds `chunk`; returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut events = Vec::new();
        for &byte in chunk {
            if std::mem::take(&mut self.after_cr) && byte == b'\n' {
                continue;
            }
            match byte {
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.line_done(&line)? {
                        events.push(event);
                    }
                }
                _ => {
                    if self.line.len() >= MAX_SSE_LINE_BYTES {
                        return Err(SseError::LineTooLong);
                    }
                    self.line.push(byte);
                }
            }
        }
        Ok(events)
    }

    /// Ends the stream: an event not yet closed by a blank line is still delivered.
    pub fn finish(&mut self) -> Result<Option<SseEvent>, SseError> {
        let line = std::mem::take(&mut self.line);
        let mut event = self.line_done(&line)?;
        if event.is_none() {
            event = self.line_done(b"")?;
        }
        Ok(event)
    }

    fn line_done(&mut self, line: &[u8]) -> Result<Option<SseEvent>, SseError> {
        if line.is_empty() {
            if !self.has_data {
                self.event = None;
                return Ok(None);
            }
            self.has_data = false;
            return Ok(Some(SseEvent {
                event: self.event.take(),
                data: std::mem::take(&mut self.data),
            }));
        }
        let line = String::from_utf8_lossy(line);
        if line.starts_with(':') {
            return Ok(None);
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "data" => {
                if self.data.len() + value.len() + 1 > MAX_SSE_EVENT_BYTES {
                    return Err(SseError::EventTooLarge);
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            _ => {}
        }
        Ok(None)
    }
}

/// What a provider's handler says after one event of a streamed reply.
pub(crate) enum Next {
    /// Keep reading.
    More,
    /// The reply is complete; the rest of the body is drained.
    Done,
}

/// Reads a streamed reply: decodes `reader`'s body as server-sent events and hands each to
/// `on_event` until it answers [`Next::Done`] or the body ends, then drains what is left.
/// Returns whether `on_event` said it was done (false: the stream simply ended).
pub(crate) async fn read_events(
    reader: &mut super::http::BodyReader,
    mut on_event: impl FnMut(SseEvent) -> Result<Next, super::http::AttemptError>,
) -> Result<bool, super::http::AttemptError> {
    let mut decoder = SseDecoder::default();
    let mut done = false;
    'read: loop {
        let (events, at_end) = match reader.next_chunk().await? {
            Some(chunk) => (decoder.push(&chunk).map_err(stream_error)?, false),
            None => (
                decoder
                    .finish()
                    .map_err(stream_error)?
                    .into_iter()
                    .collect(),
                true,
            ),
        };
        for event in events {
            if let Next::Done = on_event(event)? {
                done = true;
                break 'read;
            }
        }
        if at_end {
            break;
        }
    }
    reader.drain().await;
    Ok(done)
}

fn stream_error(error: SseError) -> super::http::AttemptError {
    super::http::AttemptError::fatal(graph_js::FailureCode::Failed, error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn events_split_anywhere_are_reassembled() {
        let stream =
            b"event: message_start\r\ndata: {\"a\":1}\r\n\r\n: ping\n\ndata: x\ndata: y\n\n";
        for split in 0..stream.len() {
            let mut decoder = SseDecoder::default();
            let mut events = decoder.push(&stream[..split]).expect("ok");
            events.extend(decoder.push(&stream[split..]).expect("ok"));
            assert_eq!(data(&events), vec!["{\"a\":1}", "x\ny"], "split at {split}");
            assert_eq!(events[0].event.as_deref(), Some("message_start"));
            assert_eq!(events[1].event, None);
        }
    }

    #[test]
    fn a_last_event_without_a_blank_line_is_delivered() {
        let mut decoder = SseDecoder::default();
        assert!(decoder.push(b"data: [DONE]").expect("ok").is_empty());
        assert_eq!(
            decoder.finish().expect("ok").map(|e| e.data),
            Some("[DONE]".to_owned())
        );
        assert_eq!(decoder.finish().expect("ok"), None);
    }

    #[test]
    fn lone_carriage_returns_end_lines() {
        let mut decoder = SseDecoder::default();
        let events = decoder.push(b"data: a\r\rdata: b\r\r").expect("ok");
        assert_eq!(data(&events), vec!["a", "b"]);
    }

    #[test]
    fn lines_at_and_past_the_limit() {
        let mut decoder = SseDecoder::default();
        let at_limit = vec![b'x'; MAX_SSE_LINE_BYTES];
        assert!(decoder.push(&at_limit).is_ok(), "a line at the limit");
        assert_eq!(decoder.push(b"x"), Err(SseError::LineTooLong));
    }

    #[test]
    fn events_past_the_limit_are_refused() {
        let mut decoder = SseDecoder::default();
        let half = format!("data: {}\n", "d".repeat(MAX_SSE_EVENT_BYTES / 2));
        assert!(decoder.push(half.as_bytes()).is_ok());
        assert_eq!(decoder.push(half.as_bytes()), Err(SseError::EventTooLarge));
    }
}
