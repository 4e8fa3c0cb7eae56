//! Server-sent events read from a byte stream a piece at a time: `event:` and `data:` lines,
//! a blank line ending each event. A line longer than the cap ends the stream with an error,
//! so a provider (or whatever answers in its place) cannot make the server hold unbounded text.

/// The longest line kept, in bytes.
pub const MAX_LINE: usize = 4 << 20;

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// its `event:` name, empty when it had none
    pub name: String,
    /// its `data:` lines, joined by newlines
    pub data: String,
}

/// The reader's state between pieces.
#[derive(Debug, Default)]
pub struct Reader {
    line: Vec<u8>,
    event: Event,
    has_data: bool,
}

impl Reader {
    /// Reads `piece`; the events it completed.
    pub fn feed(&mut self, piece: &[u8]) -> Result<Vec<Event>, String> {
        let mut done = Vec::new();
        for &byte in piece {
            if byte != b'\n' {
                self.line.push(byte);
                if self.line.len() > MAX_LINE {
                    return Err(format!("an event line is longer than {MAX_LINE} bytes"));
                }
                continue;
            }
            if self.line.last() == Some(&b'\r') {
                self.line.pop();
            }
            let line = String::from_utf8_lossy(&std::mem::take(&mut self.line)).into_owned();
            if line.is_empty() {
                if self.has_data {
                    done.push(std::mem::take(&mut self.event));
                }
                self.event = Event::default();
                self.has_data = false;
            } else if let Some(value) = field(&line, "data") {
                if self.has_data {
                    self.event.data.push('\n');
                }
                self.event.data.push_str(value);
                self.has_data = true;
            } else if let Some(value) = field(&line, "event") {
                self.event.name = value.to_owned();
            }
            // comments (":") and other fields (id, retry) are not needed
        }
        Ok(done)
    }
}

fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let rest = line.strip_prefix(name)?.strip_prefix(':')?;
    Some(rest.strip_prefix(' ').unwrap_or(rest))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn events_are_read_across_any_cut_of_the_stream() {
        let stream =
            b": comment\r\nevent: message_start\r\ndata: {\"a\":1}\r\n\r\ndata: one\ndata: two\n\n";
        for cut in 0..stream.len() {
            let mut reader = Reader::default();
            let mut events = reader.feed(&stream[..cut]).unwrap();
            events.extend(reader.feed(&stream[cut..]).unwrap());
            assert_eq!(
                events,
                vec![
                    Event {
                        name: "message_start".into(),
                        data: "{\"a\":1}".into()
                    },
                    Event {
                        name: String::new(),
                        data: "one\ntwo".into()
                    },
                ],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_line_without_end_is_refused_at_the_cap() {
        let mut reader = Reader::default();
        let piece = vec![b'x'; 1 << 20];
        let mut failed = None;
        for _ in 0..8 {
            if let Err(e) = reader.feed(&piece) {
                failed = Some(e);
                break;
            }
        }
        assert!(failed.unwrap().contains("longer than"));
    }
}
