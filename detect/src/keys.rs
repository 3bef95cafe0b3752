//! Object keys that give their value its context. A detector that needs a word before a
//! value (a credential keyword before a secret, `mobile` before a bare number, `ssn` before
//! an SSN-shaped one) finds it in running text, but in JSON (`{"password": "…"}`, tool-call
//! arguments, tool results) the word is the key and the value is read alone. Where a key
//! holds one of the scanner's context words, the JSON masker reads its value also after that
//! word, as `word: value`.
//!
//! A key is read as words: its normalised view (`normal.rs`: fullwidth letters, zero-width
//! characters), lower case, split at `_`, `-`, `.`, `/`, `:`, spaces, digits and a lower-case
//! letter followed by a capital (`apiKey`, `db_password2`, `x-auth-token`, `employeeSSN` →
//! `employee ssn`). A word matches as a whole word, or with a plural `s`; the long credential
//! words also inside a longer word (`dbpassword`, `secretkey`); a word of another script
//! anywhere.

use aho_corasick::AhoCorasick;

use crate::normal::Normalized;

/// Credential keywords, as words of a key; each with the spelling the generic secret detector
/// (`patterns.rs`) reads before `:`.
const CREDENTIAL_WORDS: &[(&str, &str)] = &[
    ("api key", "api_key"),
    ("apikey", "apikey"),
    ("access key", "access_key"),
    ("accesskey", "accesskey"),
    ("secret", "secret"),
    ("token", "token"),
    ("password", "password"),
    ("passwd", "passwd"),
    ("pwd", "pwd"),
    ("auth", "auth"),
];

/// Credential words also found inside a longer word of a key.
const INSIDE_WORDS: &[&str] = &["password", "passwd", "secret"];

/// Keys longer than this are text, not names of a field.
const MAX_KEY_BYTES: usize = 64;

/// The words that make a key a context, with a quick test that rules most keys out.
pub(crate) struct KeyWords {
    /// Each word, lower-case, once, with the text a value is read after.
    words: Vec<(String, String)>,
    /// Every space-separated piece of every word, ASCII case-insensitively: an ASCII key that
    /// holds none of them and no escape holds no word (`role`, `content`, `type` are ruled
    /// out by one pass).
    pieces: Option<AhoCorasick>,
}

impl KeyWords {
    /// The credential keywords and `words` (every detector's context and cue words).
    pub(crate) fn new<'w>(words: impl IntoIterator<Item = &'w str>) -> KeyWords {
        let words = key_words(words);
        let pieces: Vec<&str> = words
            .iter()
            .flat_map(|(word, _)| word.split(' '))
            .filter(|piece| !piece.is_empty())
            .collect();
        let pieces = AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(pieces)
            .ok();
        KeyWords { words, pieces }
    }

    /// The text `key`'s value is read after, when the key holds one of the words.
    pub(crate) fn context_of(&self, key: &str) -> Option<&str> {
        // A key with escapes (`pass%77ord`) is read through its normalised view.
        if key.is_ascii()
            && !key.contains(['%', '&'])
            && let Some(pieces) = &self.pieces
            && !pieces.is_match(key)
        {
            return None;
        }
        context_of(&self.words, key)
    }
}

/// The words that make a key a context, lower-case, once each, with the text the value is
/// read after: the credential keywords and every detector's context and cue words.
fn key_words<'w>(words: impl IntoIterator<Item = &'w str>) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = CREDENTIAL_WORDS
        .iter()
        .map(|(word, read)| ((*word).to_owned(), (*read).to_owned()))
        .chain(words.into_iter().map(|w| {
            let word = w.trim().to_lowercase();
            (word.clone(), word)
        }))
        .filter(|(w, _)| !w.is_empty())
        .collect();
    all.sort_unstable();
    all.dedup_by(|a, b| a.0 == b.0);
    all
}

/// A key's view as words between single spaces, with a space at each end.
fn spaced(view: &Normalized<'_>) -> String {
    let mut out = String::with_capacity(view.as_str().len() + 8);
    out.push(' ');
    let mut before: Option<char> = None;
    for c in view.as_str().chars() {
        let split = matches!(c, '_' | '-' | '.' | '/' | ':') || c.is_whitespace();
        if split {
            before = None;
            if !out.ends_with(' ') {
                out.push(' ');
            }
            continue;
        }
        let boundary = match before {
            Some(b) => {
                (b.is_lowercase() && c.is_uppercase()) || (b.is_ascii_digit() != c.is_ascii_digit())
            }
            None => false,
        };
        if boundary && !out.ends_with(' ') {
            out.push(' ');
        }
        before = Some(c);
        out.extend(c.to_lowercase());
    }
    if !out.ends_with(' ') {
        out.push(' ');
    }
    out
}

/// The text `key`'s value is read after (`password`, `ssn`), when the key holds one of
/// `words` (from [`key_words`]).
fn context_of<'w>(words: &'w [(String, String)], key: &str) -> Option<&'w str> {
    if key.len() > MAX_KEY_BYTES || words.is_empty() {
        return None;
    }
    // The key as the built-in detectors read it (look-alike letters as Latin ones: a
    // `pаssword` with a Cyrillic `а`) and, where that folded letters, as written (a word of
    // another script, which the view may fold only in part).
    let view = Normalized::new(key);
    let mut readings = vec![spaced(&view)];
    if view.folded_letters() {
        readings.push(spaced(&Normalized::keeping_letters(key)));
    }
    let holds = |spaced: &str, word: &str| {
        if !word.is_ascii() || INSIDE_WORDS.contains(&word) {
            return spaced.contains(word);
        }
        spaced.match_indices(word).any(|(at, _)| {
            let after = &spaced[at + word.len()..];
            spaced[..at].ends_with(' ') && (after.starts_with(' ') || after.starts_with("s "))
        })
    };
    words
        .iter()
        .find(|(word, _)| readings.iter().any(|spaced| holds(spaced, word)))
        .map(|(_, read)| read.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(key: &str) -> Option<String> {
        let words = KeyWords::new(["mobile", "ssn", "social security", "電話", "телефон"]);
        let found = words.context_of(key).map(str::to_owned);
        // The quick test never rules out a key the words match.
        assert_eq!(found.as_deref(), context_of(&words.words, key), "{key}");
        found
    }

    #[test]
    fn keys_holding_a_context_word_give_the_word_to_read_the_value_after() {
        for (key, read) in [
            ("password", "password"),
            ("db_password", "password"),
            ("dbpassword", "password"),
            ("password2", "password"),
            ("password_confirmation", "password"),
            ("apiKey", "api_key"),
            ("API_KEY", "api_key"),
            ("api_keys", "api_key"),
            ("x-auth-token", "auth"),
            ("client.secret", "secret"),
            ("secretKey", "secret"),
            ("SECRET_KEY", "secret"),
            ("secrets", "secret"),
            ("mobile", "mobile"),
            ("customerMobile", "mobile"),
            ("SSN", "ssn"),
            ("employeeSSN", "ssn"),
            ("patientSsn", "ssn"),
            ("social_security", "social security"),
            ("ｐａｓｓｗｏｒｄ", "password"),
            ("pass\u{200B}word", "password"),
            ("pass%77ord", "password"),
            ("mo&#98;ile", "mobile"),
            ("電話番号", "電話"),
            ("p\u{430}ssword", "password"),
            ("ТЕЛЕФОН", "телефон"),
            ("контактный_телефон", "телефон"),
        ] {
            assert_eq!(context(key).as_deref(), Some(read), "{key}");
        }
    }

    #[test]
    fn other_keys_are_not() {
        for key in [
            "content",
            "text",
            "arguments",
            "passwords_reset_count_is_long_enough_to_be_text_and_not_a_field_name_at_all",
            "author",
            "tokenizer",
            "automobile",
            "lesson",
            "",
        ] {
            assert_eq!(context(key), None, "{key}");
        }
    }
}
