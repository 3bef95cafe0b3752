use proptest::prelude::*;

use crate::{SseEvent, SseParser};

fn event(name: Option<&str>, data: &str) -> SseEvent {
    SseEvent {
        event: name.map(str::to_owned),
        data: data.to_owned(),
    }
}

/// Every event of `stream` fed in pieces cut at `cuts`, the unterminated last one included.
fn parse_cut(stream: &[u8], cuts: &[usize]) -> Vec<SseEvent> {
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    let mut at = 0;
    for &cut in cuts.iter().chain([stream.len()].iter()) {
        events.extend(parser.push(&stream[at..cut]));
        at = cut;
    }
    events.extend(parser.finish());
    events
}

#[test]
fn fields_and_line_ends() {
    let stream = b": keep-alive\n\nevent: message_start\r\ndata: {\"a\":1}\r\n\r\n\
                   data: line one\rdata:line two\r\rid: 7\nretry: 10\ndata\n\n\
                   event: only-a-name\n\ndata: [DONE]\n\n";
    let events = parse_cut(stream, &[]);
    assert_eq!(
        events,
        [
            event(Some("message_start"), "{\"a\":1}"),
            event(None, "line one\nline two"),
            event(None, ""),
            event(None, "[DONE]"),
        ]
    );
    assert!(events[3].is_done());
    assert!(!events[0].is_done());
}

#[test]
fn cuts_anywhere_give_the_same_events() {
    let stream =
        "\u{feff}event: delta\r\ndata: {\"text\":\"héllo ☃ 🦀\"}\r\n\r\ndata: a\n\ndata: b\r\r"
            .as_bytes();
    let whole = parse_cut(stream, &[]);
    assert_eq!(whole.len(), 3);
    assert_eq!(whole[0], event(Some("delta"), "{\"text\":\"héllo ☃ 🦀\"}"));
    for i in 0..=stream.len() {
        for j in i..=stream.len() {
            assert_eq!(parse_cut(stream, &[i, j]), whole, "cut at {i} and {j}");
        }
    }
}

#[test]
fn an_unterminated_last_event_comes_at_the_end() {
    let mut parser = SseParser::new();
    assert_eq!(parser.push(b"data: a\n\ndata: b"), [event(None, "a")]);
    assert_eq!(parser.finish(), Some(event(None, "b")));
    assert_eq!(parser.finish(), None);
    let mut parser = SseParser::new();
    assert_eq!(parser.push(b"data: c\r"), []);
    assert_eq!(parser.finish(), Some(event(None, "c")));
    let mut parser = SseParser::new();
    assert_eq!(parser.push(b": comment only"), []);
    assert_eq!(parser.finish(), None);
}

#[test]
fn invalid_utf8_is_replaced() {
    let events = parse_cut(b"data: a\xff\xfeb\n\n", &[]);
    assert_eq!(events, [event(None, "a\u{fffd}\u{fffd}b")]);
}

fn line_end() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("\n"), Just("\r\n"), Just("\r")]
}

proptest! {
    #[test]
    fn never_panics_and_cuts_do_not_matter(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        mut cuts in proptest::collection::vec(0usize..400, 0..8),
    ) {
        let whole = parse_cut(&bytes, &[]);
        cuts.iter_mut().for_each(|c| *c = (*c).min(bytes.len()));
        cuts.sort_unstable();
        prop_assert_eq!(parse_cut(&bytes, &cuts), whole);
    }

    #[test]
    fn events_round_trip(
        events in proptest::collection::vec(
            (proptest::option::of("[a-z_.]{1,12}"), proptest::collection::vec("[^\r\n]{0,20}", 1..3)),
            0..6,
        ),
        eol in line_end(),
        mut cuts in proptest::collection::vec(0usize..600, 0..6),
    ) {
        let mut stream = String::new();
        let mut expected = Vec::new();
        for (name, lines) in &events {
            if let Some(name) = name {
                stream += &format!("event: {name}{eol}");
            }
            for line in lines {
                stream += &format!("data: {line}{eol}");
            }
            stream += eol;
            expected.push(SseEvent { event: name.clone(), data: lines.join("\n") });
        }
        cuts.iter_mut().for_each(|c| *c = (*c).min(stream.len()));
        cuts.sort_unstable();
        prop_assert_eq!(parse_cut(stream.as_bytes(), &cuts), expected);
    }
}
