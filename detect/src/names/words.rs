//! Words: where they are in a text, whether one is glued into an identifier, its folded
//! spelling, and what its letters alone say.

/// A word: letters, with `'`, `’` or `-` inside (`O'Brien`, `Jean-Luc`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Word {
    pub(super) start: usize,
    pub(super) end: usize,
}

/// Whether the word at `start..end` is glued to a larger token (`jane.doe@x`, `jane\u0040x`,
/// `XC-1234`, `/home/jane`, `user_jane`, the `[PERSON]` of a redacted value), which is an
/// identifier, not a name. (`name=Jane` is
/// a key and its value.)
pub(super) fn glued(text: &str, start: usize, end: usize) -> bool {
    let bytes = text.as_bytes();
    let token =
        |b: u8| b.is_ascii_digit() || matches!(b, b'@' | b'_' | b'\\' | b'/' | b'#' | b'[' | b']');
    let before = start.checked_sub(1).map(|i| bytes[i]);
    let after = bytes.get(end).copied();
    let next = bytes.get(end + 1).copied();
    let joined = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    before.is_some_and(token)
        || after.is_some_and(token)
        || (matches!(after, Some(b'.' | b'-')) && joined(next))
        || (before == Some(b'.') && start >= 2 && joined(Some(bytes[start - 2])))
        || (before == Some(b'-') && start >= 2 && bytes[start - 2].is_ascii_digit())
}

pub(super) fn words(text: &str) -> Vec<Word> {
    runs(text, char::is_alphabetic)
        .into_iter()
        .filter(|&(start, end)| !glued(text, start, end))
        .map(|(start, end)| Word { start, end })
        .collect()
}

/// The byte ranges of the runs of characters that are `part` of a word, with `'`, `’` and `-`
/// inside one when a `part` character follows (`O'Brien`, `Jean-Luc`).
pub(super) fn runs(text: &str, part: fn(char) -> bool) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let inner = matches!(c, '\'' | '’' | '-')
            && start.is_some()
            && chars.peek().is_some_and(|(_, next)| part(*next));
        if part(c) || inner {
            start.get_or_insert(at);
        } else if let Some(from) = start.take() {
            out.push((from, at));
        }
    }
    if let Some(from) = start {
        out.push((from, text.len()));
    }
    out
}

/// Whether `word` could be a name by its letters alone: two or more letters and nothing
/// else (an apostrophe or a hyphen inside), at most 24 bytes.
pub(super) fn name_shaped(word: &str) -> bool {
    word.len() <= 24
        && word.chars().filter(|c| c.is_alphabetic()).nth(1).is_some()
        && word
            .chars()
            .all(|c| c.is_alphabetic() || matches!(c, '\'' | '’' | '-'))
}

/// Whether word `index` of `words` (byte ranges in `text`, in order) is `Jan` (a given name,
/// and January's abbreviation) written as a date: beside a number (`Jan 12`, `3 Jan`), or
/// after a word of time with no capitalised word after it (`in Jan`, `until Jan.`, but not
/// `in Jan Kowalski's office`).
pub(super) fn month_by_number(
    text: &str,
    words: impl Fn(usize) -> Option<(usize, usize)>,
    index: usize,
) -> bool {
    let word = |i: usize| words(i).map(|(start, end)| &text[start..end]);
    let Some((start, end)) = words(index) else {
        return false;
    };
    if !text[start..end].eq_ignore_ascii_case("jan") {
        return false;
    }
    // The number is read from the text: the rules' words are letters only.
    let digit_after = text[end..]
        .trim_start_matches([' ', '.'])
        .starts_with(|c: char| c.is_ascii_digit());
    let digit_before = text[..start]
        .trim_end_matches(' ')
        .ends_with(|c: char| c.is_ascii_digit());
    let before = index.checked_sub(1).and_then(word);
    let after = word(index + 1);
    digit_after
        || digit_before
        || (before.is_some_and(|b| {
            matches!(
                b.to_ascii_lowercase().as_str(),
                "in" | "until"
                    | "till"
                    | "since"
                    | "before"
                    | "after"
                    | "during"
                    | "mid"
                    | "end"
                    | "from"
                    | "by"
            )
        }) && !after.is_some_and(|a| a.starts_with(char::is_uppercase)))
}

/// No listed word is longer (in bytes).
pub(super) const MAX_WORD: usize = 48;

/// `word` in lower case without diacritics, into `out`.
pub(super) fn fold(word: &str, out: &mut String) {
    out.clear();
    if word.is_ascii() {
        out.push_str(word);
        out.make_ascii_lowercase();
        return;
    }
    for c in word.chars().flat_map(char::to_lowercase) {
        let plain = match c {
            'à' | 'á' | 'â' | 'ã' | 'ä' | 'å' | 'ą' | 'ā' => "a",
            'æ' => "ae",
            'ç' | 'ć' | 'č' => "c",
            'è' | 'é' | 'ê' | 'ë' | 'ę' | 'ě' | 'ē' => "e",
            'ì' | 'í' | 'î' | 'ï' | 'ī' => "i",
            'ł' => "l",
            'ñ' | 'ń' | 'ň' => "n",
            'ò' | 'ó' | 'ô' | 'õ' | 'ö' | 'ø' | 'ő' | 'ō' => "o",
            'œ' => "oe",
            'ś' | 'š' | 'ş' => "s",
            'ß' => "ss",
            'ù' | 'ú' | 'û' | 'ü' | 'ű' | 'ū' | 'ů' => "u",
            'ý' | 'ÿ' => "y",
            'ź' | 'ż' | 'ž' => "z",
            'ř' => "r",
            'ť' => "t",
            'ď' => "d",
            '’' => "'",
            _ => {
                out.push(c);
                continue;
            }
        };
        out.push_str(plain);
    }
}
