//! Any text: the scanner's normalised view maps every span of the view back to a span of the
//! text that lies inside it, on character boundaries, in order; and the text of a mapped span
//! reads, once normalised, as that span of the view (nothing of the value left out, nothing
//! added but the invisible characters the view removes inside it).
#![no_main]

use atdp_detect::Normalized;
use libfuzzer_sys::fuzz_target;

/// Ends checked for each start: spans of up to this many characters, and the span to the end.
const WIDTH: usize = 24;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let normalized = Normalized::new(&text);
    let view = normalized.as_str();
    assert!(view.len() <= text.len());
    let bounds: Vec<usize> = view.char_indices().map(|(at, _)| at).chain([view.len()]).collect();
    let mut last = (0, 0);
    for (i, &start) in bounds.iter().enumerate() {
        let ends = bounds[i..].iter().take(WIDTH).chain(bounds.last());
        for &end in ends {
            let (from, to) = normalized.original(start, end);
            assert!(from <= to && to <= text.len(), "{start}..{end} -> {from}..{to}");
            assert!(text.is_char_boundary(from) && text.is_char_boundary(to));
            if end - start <= 4 * WIDTH {
                let again = Normalized::new(&text[from..to]);
                assert_eq!(again.as_str(), &view[start..end]);
            }
        }
        let here = normalized.original(start, start);
        assert!(here >= last, "the map goes backwards at {start}");
        last = here;
    }
});
