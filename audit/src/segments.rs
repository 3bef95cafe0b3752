//! Masked spans in stored text: a step's `pii` column lists the tokens the proxy put into
//! its messages; a text is split at them so that a page can mark each one with its entity
//! type (and offer a reveal for `tokenize`d ones). Splitting costs the text's length times
//! the number of distinct token lengths, however many spans a step lists.

use std::collections::HashMap;

use atdp_schema::PiiSpan;
use serde::Serialize;

/// A piece of displayed text: plain, or a masked span.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Segment {
    /// The text as stored (for a masked span: its token).
    pub text: String,
    /// For a masked span: its entity type.
    pub entity: Option<String>,
    /// Whether the span's original is in the vault (`tokenize`), so it can be revealed.
    pub revealable: bool,
}

/// The masked tokens of a step, looked up by length so that splitting a text costs its
/// length times the number of distinct token lengths, however many spans the step has.
#[derive(Debug, Default)]
pub struct Tokens<'a> {
    by_token: HashMap<&'a str, (&'a str, bool)>,
    /// Distinct token lengths, longest first.
    lengths: Vec<usize>,
}

impl<'a> Tokens<'a> {
    /// The tokens of `spans`; a token listed twice keeps its first entity and action.
    pub fn new(spans: &'a [PiiSpan]) -> Tokens<'a> {
        let mut by_token = HashMap::new();
        for span in spans.iter().filter(|s| !s.token.is_empty()) {
            by_token
                .entry(span.token.as_str())
                .or_insert((span.entity.as_str(), span.action == "tokenize"));
        }
        let mut lengths: Vec<usize> = by_token.keys().map(|t| t.len()).collect();
        lengths.sort_unstable_by(|a, b| b.cmp(a));
        lengths.dedup();
        Tokens { by_token, lengths }
    }

    /// The longest token that starts `text`.
    fn at_start(&self, text: &str) -> Option<(&'a str, &'a str, bool)> {
        self.lengths.iter().find_map(|len| {
            let candidate = text.get(..*len)?;
            self.by_token
                .get_key_value(candidate)
                .map(|(token, (entity, revealable))| (*token, *entity, *revealable))
        })
    }
}

/// Splits `text` at the masked tokens it holds: at each place the longest token that
/// starts there, else plain text.
pub fn segments(text: &str, tokens: &Tokens<'_>) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut plain_from = 0;
    let mut at = 0;
    while at < text.len() {
        let rest = text.get(at..).unwrap_or_default();
        if let Some((token, entity, revealable)) = tokens.at_start(rest) {
            if plain_from < at {
                out.push(plain(text.get(plain_from..at).unwrap_or_default()));
            }
            out.push(Segment {
                text: token.to_owned(),
                entity: Some(entity.to_owned()),
                revealable,
            });
            at += token.len();
            plain_from = at;
        } else {
            at += rest.chars().next().map_or(1, char::len_utf8);
        }
    }
    if plain_from < text.len() {
        out.push(plain(text.get(plain_from..).unwrap_or_default()));
    }
    out
}

fn plain(text: &str) -> Segment {
    Segment {
        text: text.to_owned(),
        entity: None,
        revealable: false,
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub(crate) fn prefix(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(token: &str, entity: &str, action: &str) -> PiiSpan {
        PiiSpan {
            field: "f".into(),
            entity: entity.into(),
            token: token.into(),
            action: action.into(),
        }
    }

    #[test]
    fn segments_mark_tokens_and_keep_the_rest() {
        let spans = vec![
            span("<EMAIL_ADDRESS_0123456789ab>", "EMAIL_ADDRESS", "tokenize"),
            span("[US_SSN]", "US_SSN", "redact"),
            span("[US_SSN]x", "OTHER", "redact"),
        ];
        let tokens = Tokens::new(&spans);
        let got = segments(
            "Mail <EMAIL_ADDRESS_0123456789ab>, SSN [US_SSN]. [US_SSN]x é",
            &tokens,
        );
        let texts: Vec<(&str, Option<&str>, bool)> = got
            .iter()
            .map(|s| (s.text.as_str(), s.entity.as_deref(), s.revealable))
            .collect();
        assert_eq!(
            texts,
            [
                ("Mail ", None, false),
                ("<EMAIL_ADDRESS_0123456789ab>", Some("EMAIL_ADDRESS"), true),
                (", SSN ", None, false),
                ("[US_SSN]", Some("US_SSN"), false),
                (". ", None, false),
                ("[US_SSN]x", Some("OTHER"), false),
                (" é", None, false),
            ]
        );
        assert_eq!(segments("", &tokens), []);
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        assert_eq!(prefix("aé", 2), "a");
        assert_eq!(prefix("aé", 3), "aé");
        assert_eq!(prefix("aé", 9), "aé");
    }
}
