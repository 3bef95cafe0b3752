use super::*;

/// The `(entity, text)` of every span found in `text`, overlaps resolved as the scanner does.
fn found(text: &str) -> Vec<(&'static str, String)> {
    let mut spans = Vec::new();
    find(names().unwrap(), text, &[true; 3], &mut spans);
    super::super::resolve_overlaps(text, spans)
        .into_iter()
        .filter(|s| s.score >= 0.5)
        .map(|s| (s.entity, text[s.start..s.end].to_owned()))
        .collect()
}

fn assert_found(text: &str, expected: &[(&str, &str)]) {
    let got = found(text);
    for (entity, value) in expected {
        assert!(
            got.iter().any(|(e, v)| e == entity && v == value),
            "{entity} {value:?} not found in {text:?}: {got:?}"
        );
    }
}

/// Each `(entity, value)` lies inside a span of that entity, and nothing else is found.
fn assert_covered(text: &str, expected: &[(&str, &str)]) {
    let mut spans = Vec::new();
    find(names().unwrap(), text, &[true; 3], &mut spans);
    let spans: Vec<_> = super::super::resolve_overlaps(text, spans)
        .into_iter()
        .filter(|s| s.score >= 0.5)
        .collect();
    let mut covered = vec![false; spans.len()];
    for (entity, value) in expected {
        let at = text.find(value).unwrap();
        let inside = spans
            .iter()
            .position(|s| s.entity == *entity && s.start <= at && at + value.len() <= s.end);
        assert!(
            inside.is_some(),
            "{entity} {value:?} not covered in {text:?}: {spans:?}"
        );
        covered[inside.unwrap_or(0)] = true;
    }
    assert!(
        covered.iter().all(|c| *c),
        "more found in {text:?} than {expected:?}: {spans:?}"
    );
}

#[test]
fn people_are_found_by_their_names_titles_and_cues() {
    assert_found(
        "Hi, I'm Jane Doe and my order is late.",
        &[("PERSON", "Jane Doe")],
    );
    assert_found(
        "Spoke with Mr. Kowalczyk about the invoice.",
        &[("PERSON", "Kowalczyk")],
    );
    assert_found(
        "Please ask Łukasz Wiśniewski to call back.",
        &[("PERSON", "Łukasz Wiśniewski")],
    );
    assert_found(
        "The contract is with Jan de Vries.",
        &[("PERSON", "Jan de Vries")],
    );
    assert_found(
        r#"{"customer": "Chidi Okonkwo", "tier": "gold"}"#,
        &[("PERSON", "Chidi Okonkwo")],
    );
    assert_found("Kind regards,\nMarta Gómez", &[("PERSON", "Marta Gómez")]);
    // One span for both or one each: either masks the whole name.
    assert_covered(
        "Duplicate record: Müller, Jürgen",
        &[("PERSON", "Müller"), ("PERSON", "Jürgen")],
    );
    assert_found(
        "hey its jane doe again, any news?",
        &[("PERSON", "jane doe")],
    );
    assert_found(
        "Can you check this for Sophie please",
        &[("PERSON", "Sophie")],
    );
}

#[test]
fn places_are_found_whole_with_number_postcode_and_city() {
    assert_found(
        "Send it to 221B Baker Street, London NW1 6XE please",
        &[("LOCATION", "221B Baker Street, London NW1 6XE")],
    );
    assert_found(
        "Meine Adresse: Hauptstraße 12a, 10115 Berlin.",
        &[("LOCATION", "Hauptstraße 12a, 10115 Berlin")],
    );
    assert_found(
        "Livraison au 12, rue de la Paix, 75002 Paris",
        &[("LOCATION", "12, rue de la Paix, 75002 Paris")],
    );
    assert_found(
        "Ufficio in Via Roma 10, 00184 Roma.",
        &[("LOCATION", "Via Roma 10, 00184 Roma")],
    );
    assert_found(
        "We moved from Leeds to Zaragoza last year.",
        &[("LOCATION", "Leeds"), ("LOCATION", "Zaragoza")],
    );
    assert_found(
        "She lives in Castelnuovo di Porto now",
        &[("LOCATION", "Castelnuovo di Porto")],
    );
}

#[test]
fn organisations_are_found_by_their_legal_form_and_cues() {
    assert_found(
        "Invoice from Schneider GmbH & Co. KG attached.",
        &[("ORGANIZATION", "Schneider GmbH & Co. KG")],
    );
    assert_found(
        "Our supplier Rossi e figli shipped it.",
        &[("ORGANIZATION", "Rossi e figli")],
    );
    assert_found(
        "She works at Brightline Analytics since May.",
        &[("ORGANIZATION", "Brightline Analytics")],
    );
    assert_found(
        "Signed by Smith, Jones and Brown LLC.",
        &[("ORGANIZATION", "Smith, Jones and Brown LLC")],
    );
    assert_found(
        "Grupo Vázquez pays on time.",
        &[("ORGANIZATION", "Grupo Vázquez")],
    );
}

#[test]
fn organisations_that_start_with_a_capital_outside_ascii_are_found() {
    for (text, org) in [
        (
            "Contract with Ūdris, Teicāns un Alksnis renewed.",
            "Ūdris, Teicāns un Alksnis",
        ),
        (
            "Ūdris, Teicāns un Alksnis renewed.",
            "Ūdris, Teicāns un Alksnis",
        ),
        ("Invoice (Łęcki Sp. z o.o.) attached.", "Łęcki Sp. z o.o."),
        ("Paid to Øvergaard AS on Monday.", "Øvergaard AS"),
    ] {
        assert_found(text, &[("ORGANIZATION", org)]);
    }
}

#[test]
fn organisations_by_the_legal_forms_of_other_countries_are_found() {
    for (text, org) in [
        (
            "Invoice from Müller Bau UG (haftungsbeschränkt) attached.",
            "Müller Bau UG (haftungsbeschränkt)",
        ),
        ("Paid to Novák Stavby s.r.o. today.", "Novák Stavby s.r.o."),
        ("The quote of Kovács Kft. expired.", "Kovács Kft."),
        (
            "Contract with Lindqvist Aktiebolag renewed.",
            "Lindqvist Aktiebolag",
        ),
        (
            "Reply to Dupont Conseil EURL about the order.",
            "Dupont Conseil EURL",
        ),
        ("Shipment from Ozols SIA arrived.", "Ozols SIA"),
        ("Shipment from UAB Vilkas arrived.", "UAB Vilkas"),
        ("Shipment from AS Bērziņš arrived.", "AS Bērziņš"),
        ("Order from Novak Brothers arrived.", "Novak Brothers"),
        ("Paid to Mazur z o.o. yesterday.", "Mazur z o.o."),
        ("Reply to Ozols un partneri today.", "Ozols un partneri"),
        (
            "a refund from petrovic trgovina kft is pending",
            "petrovic trgovina kft",
        ),
        // In lower case inside text with capitals.
        ("I work at acme ltd, see you Monday.", "acme ltd"),
        (
            "Payment to kowalski sp. z o.o. is due. Thanks, Anna",
            "kowalski sp. z o.o.",
        ),
    ] {
        assert_found(text, &[("ORGANIZATION", org)]);
    }
}

#[test]
fn firms_named_by_two_family_names_are_organisations() {
    for (text, org) in [
        ("Invoice from Parker - Parker for March.", "Parker - Parker"),
        (
            "The contract with Lambert et Dubois was renewed.",
            "Lambert et Dubois",
        ),
        (
            "Quote sent to Kowalski i Nowak yesterday.",
            "Kowalski i Nowak",
        ),
        (
            "Order placed with Schmidt & Weber on Monday.",
            "Schmidt & Weber",
        ),
        // A spaced dash joins a firm's names; one of them listed is enough.
        ("Reply to Brennan - Holt about the quote.", "Brennan - Holt"),
        (
            "Reply to Oyelaran - Holt about the quote.",
            "Oyelaran - Holt",
        ),
    ] {
        assert_found(text, &[("ORGANIZATION", org)]);
    }
    // Words that are not family names, given names, and lower-case words before a word that
    // is no legal form here, are not organisations.
    for text in [
        "Research and Development moved to the second floor.",
        "Terms and Conditions apply.",
        "John and Mary will call back.",
        "Open Settings - Privacy to change it.",
        "The offer is limited, Inc. or not.",
        "Such items ship as soon as possible, said Anna.",
    ] {
        assert!(
            !found(text)
                .iter()
                .any(|(entity, _)| *entity == "ORGANIZATION"),
            "an organisation in {text:?}: {:?}",
            found(text)
        );
    }
}

#[test]
fn organisations_named_by_a_common_word_and_a_legal_form_are_found() {
    for (text, org) in [
        (
            "You are the support agent of Demo Corp. Be brief.",
            "Demo Corp.",
        ),
        ("I work at Demo Corp.", "Demo Corp."),
        ("Shares of Apple Inc. fell.", "Apple Inc."),
        ("Invoice from Summit GmbH attached.", "Summit GmbH"),
    ] {
        assert_found(text, &[("ORGANIZATION", org)]);
    }
}

#[test]
fn a_common_word_before_a_line_of_business_is_not_an_organisation() {
    for text in [
        "Please contact Customer Services today.",
        "The Group reported results.",
        "Ask our Corp. team.",
    ] {
        assert!(
            found(text)
                .iter()
                .all(|(entity, _)| *entity != "ORGANIZATION"),
            "{text}: {:?}",
            found(text)
        );
    }
}

#[test]
fn look_alikes_are_not_reported() {
    for text in [
        "Will you grant me access on Monday?",
        "May I upgrade to the Pro plan in June?",
        "Rose gardens need water.",
        "The Kindle Paperwhite and the Galaxy S24 are out of stock.",
        "Status: Resolved. Priority: High.",
        "I will call you back next Friday.",
        "Order 4471 shipped via UPS.",
        "Restart the Redis cluster after the Terraform apply.",
    ] {
        assert_eq!(found(text), Vec::<(&str, String)>::new(), "{text}");
    }
}

#[test]
fn words_keep_their_inner_apostrophes_and_hyphens_and_fold_their_diacritics() {
    let text = "O'Brien met Jean-Luc -- twice";
    let got: Vec<&str> = words(text).iter().map(|w| &text[w.start..w.end]).collect();
    assert_eq!(got, ["O'Brien", "met", "Jean-Luc", "twice"]);
    let mut out = String::new();
    fold("Müller-Łódź", &mut out);
    assert_eq!(out, "muller-lodz");
}

#[test]
fn words_glued_into_identifiers_are_not_names() {
    for text in [
        r"write to jane\u0040example.com today",
        "mail jane.doe@example.com or see /home/jane/notes",
        "customer XC-1234 and user_jane and #jane",
    ] {
        let got = found(text);
        assert!(
            got.iter()
                .all(|(e, v)| *e != "PERSON" || !v.to_lowercase().contains("jane")),
            "{text}: {got:?}"
        );
    }
}

#[test]
fn placeholders_and_redacted_values_are_never_read_as_names() {
    for text in [
        "Dear [PERSON], [PERSON] said the parcel left [LOCATION] for [ORGANIZATION].",
        "lives in [LOCATION] and works at [ORGANIZATION]",
        "NINO <UK_NINO_0123456789ab> and [UK_NINO], from <USA_ID_0123456789ab>",
        "Hi <PERSON_0123456789ab>, your order ships to <LOCATION_0123456789ab>.",
    ] {
        assert_eq!(found(text), Vec::<(&str, String)>::new(), "{text}");
    }
}

#[test]
fn names_inside_markup_are_found() {
    assert_found(
        "<td>Jane Doe</td><td>Acme GmbH</td>",
        &[("PERSON", "Jane Doe"), ("ORGANIZATION", "Acme GmbH")],
    );
    assert_found(
        "<name>Łukasz Wiśniewski</name>",
        &[("PERSON", "Łukasz Wiśniewski")],
    );
}

#[test]
fn a_tagger_span_widens_a_rule_span_and_keeps_the_better_score() {
    let span = |start, end, entity, score| Span {
        start,
        end,
        entity,
        score,
    };
    // "Wojtyszko, Anna": the rules found "Anna" (0.6), the tagger the whole name (0.78).
    let mut found = vec![span(30, 40, LOCATION, 0.9), span(11, 15, PERSON, 0.6)];
    merge(
        &mut found,
        vec![span(0, 15, PERSON, 0.78), span(20, 25, PERSON, 0.7)],
    );
    assert_eq!(
        found,
        [
            span(0, 15, PERSON, 0.78),
            span(30, 40, LOCATION, 0.9),
            span(20, 25, PERSON, 0.7),
        ]
    );
}

#[test]
fn names_after_weak_cues_and_titles_of_other_languages_are_found_without_their_title() {
    assert_covered(
        "my colleague dan mendoza at the depot says hi",
        &[("PERSON", "dan mendoza")],
    );
    assert_covered(
        "hi, my name is yasti gupta and my parcel is late",
        &[("PERSON", "yasti gupta")],
    );
    assert_covered(
        "Dear Mrs. Fors,\n\nyour refund was approved.",
        &[("PERSON", "Fors")],
    );
    assert_covered("Mr. Cruz, your order has shipped.", &[("PERSON", "Cruz")]);
    assert_found(
        "Rozmawiałem z pani Kaja Trzcionka o fakturze.",
        &[("PERSON", "Kaja Trzcionka")],
    );
    assert_found(
        "Sig.ra Cesaretti asked for an invoice.",
        &[("PERSON", "Cesaretti")],
    );
    assert_found(
        "Follow up on Friday with Hemang Mander about the invoice.",
        &[("PERSON", "Hemang Mander")],
    );
    // Lower-case chat: a name no list knows before a verb of speech, or listed after one.
    assert_covered(
        "ok so tassilo said the invoice is late",
        &[("PERSON", "tassilo")],
    );
    assert_found(
        "please loop in bartosz and wojtek on the thread",
        &[("PERSON", "bartosz"), ("PERSON", "wojtek")],
    );
}

#[test]
fn product_interface_and_month_words_are_not_reported() {
    for text in [
        "Summer Sale! New Feature: Dark Mode. Success: your settings were saved.",
        "See Terms of Service for details.",
        "Pay with Visa or Mastercard. Works best in Chrome. Renews Jan 12.",
        "A technician will call you on Monday.",
        "[alert] 2026-01-03 backup job failed",
        "The Handmade Cotton Shoes are back in stock in Kids and Outdoors.",
        "build 20240115 took 1234 ms and the courier hasnt called back",
    ] {
        assert_eq!(found(text), Vec::<(&str, String)>::new(), "{text}");
    }
    // A run of one letter is no word of any list, and no name.
    assert_eq!(found(&"A".repeat(200_000)), Vec::<(&str, String)>::new());
}

#[test]
fn a_name_ends_before_common_lower_case_words_and_starts_after_the_verb_before_it() {
    for (text, name) in [
        ("Call Lukas tomorrow.", "Lukas"),
        ("Ping Marta later about it.", "Marta"),
        ("Tell Anna the parcel is late.", "Anna"),
        ("Maria da Silva called.", "Maria da Silva"),
        ("Remind Sofia Berg to pay.", "Sofia Berg"),
    ] {
        let got = found(text);
        assert!(
            got.iter().any(|(e, v)| *e == "PERSON" && v == name),
            "PERSON {name:?} not found in {text:?}: {got:?}"
        );
        assert!(
            got.iter()
                .all(|(_, v)| !v.contains(' ') || name.contains(' ')),
            "more than the name in {text:?}: {got:?}"
        );
    }
}
