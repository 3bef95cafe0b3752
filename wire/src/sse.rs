//! An incremental parser of server-sent events (the WHATWG `text/event-stream` format),
//! fed byte chunks cut anywhere: inside a line, between `\r` and `\n`, inside a UTF-8
//! character. Bytes are buffered until a line is whole, so nothing is decoded early.

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field (Anthropic and the responses API name their events; OpenAI chat
    /// does not).
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

impl SseEvent {
    /// Whether this is OpenAI's end-of-stream marker, `data: [DONE]`.
    pub fn is_done(&self) -> bool {
        self.data == "[DONE]"
    }
}

/// Parses a byte stream into events.
///
/// ```
/// use atdp_wire::SseParser;
/// let mut parser = SseParser::new();
/// assert!(parser.push(b"event: ping\nda").is_empty());
/// let events = parser.push(b"ta: {}\n\n");
/// assert_eq!(events[0].event.as_deref(), Some("ping"));
/// assert_eq!(events[0].data, "{}");
/// ```
#[derive(Debug, Default)]
pub struct SseParser {
    splitter: Splitter,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        SseParser::default()
    }

    /// Takes the next chunk; returns the events it completes.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.splitter
            .push(chunk)
            .into_iter()
            .filter_map(|block| block.event)
            .collect()
    }

    /// Ends the stream; returns a last event that lacked its closing blank line. (The
    /// standard drops such an event; a recorder would rather keep what was sent.)
    pub fn finish(&mut self) -> Option<SseEvent> {
        self.splitter.finish().and_then(|block| block.event)
    }
}

/// A block of the stream up to and including the blank line that ends it, and the event
/// it dispatches (`None` for a block of comments or of fields without data).
#[derive(Debug)]
pub(crate) struct RawBlock {
    /// The block's bytes, exactly as received.
    pub(crate) bytes: Vec<u8>,
    /// Its event.
    pub(crate) event: Option<SseEvent>,
}

/// Splits a byte stream into [`RawBlock`]s.
#[derive(Debug, Default)]
pub(crate) struct Splitter {
    buf: Vec<u8>,
    /// Where the search for the next line end resumes.
    scan: usize,
    /// Where the current line starts.
    line_start: usize,
    pending: Pending,
    /// A line has been read: a byte-order mark is only stripped from the first.
    started: bool,
}

/// The fields of the event being read.
#[derive(Debug, Default)]
struct Pending {
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl Splitter {
    /// Takes the next chunk; returns the blocks it completes.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<RawBlock> {
        self.buf.extend_from_slice(chunk);
        let mut blocks = Vec::new();
        while let Some(rel) = self
            .buf
            .get(self.scan..)
            .and_then(|rest| rest.iter().position(|&b| b == b'\n' || b == b'\r'))
        {
            let at = self.scan + rel;
            let end = match (self.buf.get(at), self.buf.get(at + 1)) {
                // A `\r` ending the buffer may be the first half of `\r\n`: wait.
                (Some(b'\r'), None) => {
                    self.scan = at;
                    return blocks;
                }
                (Some(b'\r'), Some(b'\n')) => at + 2,
                _ => at + 1,
            };
            if at == self.line_start {
                let bytes: Vec<u8> = self.buf.drain(..end).collect();
                blocks.push(RawBlock {
                    bytes,
                    event: self.pending.dispatch(),
                });
                self.scan = 0;
                self.line_start = 0;
            } else {
                let line = self.buf.get(self.line_start..at).unwrap_or_default();
                self.pending.field(line, !self.started);
                self.started = true;
                self.line_start = end;
                self.scan = end;
            }
        }
        self.scan = self.buf.len();
        blocks
    }

    /// Ends the stream; returns the unterminated rest, if any, with the event it would
    /// dispatch.
    pub(crate) fn finish(&mut self) -> Option<RawBlock> {
        let bytes = std::mem::take(&mut self.buf);
        let line = bytes.get(self.line_start..).unwrap_or_default();
        let line = line
            .strip_suffix(b"\r")
            .or_else(|| line.strip_suffix(b"\n"))
            .unwrap_or(line);
        if !line.is_empty() {
            self.pending.field(line, !self.started);
        }
        self.scan = 0;
        self.line_start = 0;
        let event = self.pending.dispatch();
        (!bytes.is_empty()).then_some(RawBlock { bytes, event })
    }

    /// Whether bytes of an unfinished block are buffered.
    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

impl Pending {
    /// Reads one field line (without its line end).
    fn field(&mut self, line: &[u8], first: bool) {
        let line = match line.strip_prefix("\u{feff}".as_bytes()) {
            Some(rest) if first => rest,
            _ => line,
        };
        if line.starts_with(b":") {
            return;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = line.get(colon + 1..).unwrap_or_default();
                let value = value.strip_prefix(b" ").unwrap_or(value);
                (line.get(..colon).unwrap_or_default(), value)
            }
            None => (line, &[][..]),
        };
        match name {
            b"event" => {
                self.event =
                    (!value.is_empty()).then(|| String::from_utf8_lossy(value).into_owned());
            }
            b"data" => {
                self.data.push_str(&String::from_utf8_lossy(value));
                self.data.push('\n');
                self.has_data = true;
            }
            // `id`, `retry` and unknown fields carry nothing the proxy reads.
            _ => {}
        }
    }

    /// The event the fields read so far make, resetting them.
    fn dispatch(&mut self) -> Option<SseEvent> {
        let pending = std::mem::take(self);
        if !pending.has_data {
            return None;
        }
        let mut data = pending.data;
        data.pop();
        Some(SseEvent {
            event: pending.event,
            data,
        })
    }
}

/// The line end a block uses (`\r\n`, `\r` or `\n`), for events written next to it;
/// `None` for a block cut off before its first line end.
pub(crate) fn line_end(block: &[u8]) -> Option<&'static [u8]> {
    let at = block.iter().position(|&b| b == b'\n' || b == b'\r')?;
    Some(match (block.get(at), block.get(at + 1)) {
        (Some(b'\r'), Some(b'\n')) => b"\r\n",
        (Some(b'\r'), _) => b"\r",
        _ => b"\n",
    })
}

/// `block` with its `data:` lines replaced by one line carrying `data`; every other line
/// (`event:`, `id:`, comments, the blank line) is kept as it was.
pub(crate) fn replace_data(block: &[u8], data: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(block.len() + data.len());
    let mut replaced = false;
    let mut rest = block;
    while !rest.is_empty() {
        let content_len = rest
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
            .unwrap_or(rest.len());
        let line_len = match (rest.get(content_len), rest.get(content_len + 1)) {
            (Some(b'\r'), Some(b'\n')) => content_len + 2,
            (Some(_), _) => content_len + 1,
            (None, _) => content_len,
        };
        let (line, tail) = rest.split_at(line_len);
        let content = line.get(..content_len).unwrap_or_default();
        let ending = line.get(content_len..).unwrap_or_default();
        if content == b"data" || content.starts_with(b"data:") {
            if !replaced {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(data.as_bytes());
                out.extend_from_slice(ending);
                replaced = true;
            }
        } else {
            out.extend_from_slice(line);
        }
        rest = tail;
    }
    out
}

/// An event in wire form: `event: NAME` (when `name` is given), `data: DATA`, blank line.
pub(crate) fn write_event(out: &mut Vec<u8>, name: Option<&str>, data: &str, eol: &[u8]) {
    if let Some(name) = name {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(eol);
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(data.as_bytes());
    out.extend_from_slice(eol);
    out.extend_from_slice(eol);
}

/// Ends `out` with a blank line if it does not end with one, so that an event can follow.
pub(crate) fn terminate(out: &mut Vec<u8>, eol: &[u8]) {
    if out.is_empty()
        || out.ends_with(b"\n\n")
        || out.ends_with(b"\r\n\r\n")
        || out.ends_with(b"\r\r")
    {
        return;
    }
    if !(out.ends_with(b"\n") || out.ends_with(b"\r")) {
        out.extend_from_slice(eol);
    }
    out.extend_from_slice(eol);
}
