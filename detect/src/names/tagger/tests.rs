use serde::Deserialize;

use super::*;
use crate::names::{lexicon, rules, rules_and_marks};

const WEIGHTS: &[u8] = include_bytes!("../../../data/names/tagger.bin");

#[derive(Deserialize)]
struct Check {
    labels: Vec<String>,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    probabilities: Vec<[f32; 7]>,
}

fn tagger() -> Tagger {
    Tagger::from_bytes(WEIGHTS).unwrap()
}

/// What the tagger alone finds in `text`, as `(entity, value)`.
fn tagged(text: &str) -> Vec<(&'static str, String)> {
    let lexicon = lexicon().unwrap();
    let mut out = Vec::new();
    let (rules, marks) = rules_and_marks(lexicon, text);
    find(&tagger(), lexicon, text, &rules, &marks, &mut out);
    out.into_iter()
        .map(|s| (s.entity, text[s.start..s.end].to_owned()))
        .collect()
}

#[test]
fn the_weights_give_the_probabilities_the_trainer_computed() {
    // `detect/train/names/train.py` wrote these with PyTorch from the same weights, on the
    // features `names-features` computed: a difference means the two read the network or
    // the features differently.
    let check: Check =
        serde_json::from_str(include_str!("../../../data/names/tagger-check.json")).unwrap();
    assert_eq!(check.labels, LABELS);
    let lexicon = lexicon().unwrap();
    let tagger = tagger();
    let mut worst = 0.0f32;
    for case in &check.cases {
        let tokens = tokens(&case.text);
        let (rules, marks) = rules_and_marks(lexicon, &case.text);
        let input = features(lexicon, &case.text, &tokens, &rules, &marks, tagger.buckets);
        let all = vec![true; tokens.len()];
        let got = tagger.probabilities(&input.features, &all);
        assert_eq!(got.len(), case.probabilities.len(), "{:?}", case.text);
        for (g, want) in got.iter().zip(&case.probabilities) {
            for (a, b) in g.iter().zip(want) {
                worst = worst.max((a - b).abs());
            }
        }
    }
    assert!(worst < 1e-4, "largest difference {worst}");
    // The check is not trivially met: the texts have entities the network is sure of.
    let sure = check
        .cases
        .iter()
        .flat_map(|c| &c.probabilities)
        .filter(|p| p[0] < 0.01)
        .count();
    assert!(sure >= 5, "{sure} tokens labelled as entities");
}

#[test]
fn names_without_a_cue_or_a_capital_are_found_by_the_tagger() {
    let lexicon = lexicon().unwrap();
    for (text, entity, value) in [
        (
            "Hemang Mander renewed the contract yesterday",
            PERSON,
            "Hemang Mander",
        ),
        ("CSV: Oyelaran Tunde,Lagos,3", PERSON, "Oyelaran Tunde"),
        (
            "we signed with brightwave analytics last week",
            ORGANIZATION,
            "brightwave analytics",
        ),
    ] {
        let by_rules: Vec<&str> = rules(lexicon, text)
            .iter()
            .map(|s| &text[s.start..s.end])
            .collect();
        assert!(
            !by_rules.contains(&value),
            "the rules already find {value:?} in {text:?}"
        );
        let got = tagged(text);
        assert!(
            got.iter().any(|(e, v)| *e == entity && v == value),
            "{entity} {value:?} not tagged in {text:?}: {got:?}"
        );
    }
}

#[test]
fn ordinary_words_weekdays_and_products_are_not_tagged() {
    for text in [
        "Please reset my password before Monday.",
        "The Kindle Paperwhite ships in May; prices rose in June.",
        "Ticket OPS-1234 status changed from Open to Closed on Friday.",
        "the customer asked about their invoice and the delivery date",
    ] {
        assert_eq!(tagged(text), [], "{text:?}");
    }
}

#[test]
fn one_word_alone_is_left_to_the_rules() {
    // JSON keys and enum values are scanned as texts of their own; with no neighbours the
    // network would guess from the word alone, and a key masked breaks the request.
    for text in ["tags", "Tags", "limit", "pending", "Brightwave"] {
        assert_eq!(tagged(text), [], "{text:?}");
    }
    assert!(!tagged("tags: brightwave analytics").is_empty());
}

#[test]
fn tokens_keep_inner_apostrophes_and_hyphens_and_hold_digits() {
    let text = "O'Brien, Jean-Luc; NW1 6XE -x";
    let got: Vec<&str> = tokens(text).iter().map(|t| &text[t.start..t.end]).collect();
    assert_eq!(got, ["O'Brien", "Jean-Luc", "NW1", "6XE", "x"]);
}

#[test]
fn lower_case_words_no_list_knows_skip_the_network() {
    let text = "the report about the invoice is late";
    let lexicon = lexicon().unwrap();
    let tokens = tokens(text);
    let (_, marks) = rules_and_marks(lexicon, text);
    let input = features(lexicon, text, &tokens, &[], &marks, 65536);
    let candidates: Vec<&str> = tokens
        .iter()
        .zip(&input.candidate)
        .filter(|(_, c)| **c)
        .map(|(t, _)| &text[t.start..t.end])
        .collect();
    assert!(candidates.len() < tokens.len() / 2, "{candidates:?}");
    let skipped = tagger().probabilities(&input.features, &input.candidate);
    for (p, candidate) in skipped.iter().zip(&input.candidate) {
        if !candidate {
            assert_eq!(p[0], 1.0);
        }
    }
}

#[test]
fn a_damaged_weight_file_is_refused() {
    let cut = &WEIGHTS[..WEIGHTS.len() - 3];
    assert!(Tagger::from_bytes(cut).unwrap_err().contains("cut short"));
    let mut longer = WEIGHTS.to_vec();
    longer.push(0);
    assert!(
        Tagger::from_bytes(&longer)
            .unwrap_err()
            .contains("after the last")
    );
    let mut magic = WEIGHTS.to_vec();
    magic[0] = b'X';
    assert!(
        Tagger::from_bytes(&magic)
            .unwrap_err()
            .contains("not an ATDPTAG1")
    );
    // The last weight (a bias) made NaN.
    let mut nan = WEIGHTS.to_vec();
    let at = nan.len() - 4;
    nan[at..].copy_from_slice(&f32::NAN.to_le_bytes());
    assert!(Tagger::from_bytes(&nan).unwrap_err().contains("finite"));
    // Another network shape in the header (same length: `14` features becomes `15`).
    let needle = b"\"features\": 14";
    let at = WEIGHTS
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    let mut other = WEIGHTS.to_vec();
    other[at + needle.len() - 1] = b'5';
    assert!(
        Tagger::from_bytes(&other)
            .unwrap_err()
            .contains("not the one")
    );
}
