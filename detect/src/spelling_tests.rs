//! Values written with characters other than the ASCII ones the patterns name (no-break
//! spaces, Unicode dashes, digits of other scripts, fullwidth forms, invisible format
//! characters), the national phone formats, and the numbers that must stay unreported.

use std::sync::LazyLock;

use proptest::prelude::*;

use super::*;

/// Every built-in detector.
static ALL: LazyLock<Scanner> = LazyLock::new(|| Scanner::new(None).unwrap());

/// The shaped detectors: the name detectors left out.
static SHAPED: LazyLock<Scanner> = LazyLock::new(|| {
    let shaped: Vec<String> = builtin_entities()
        .into_iter()
        .filter(|e| !names::ENTITIES.contains(e))
        .map(str::to_owned)
        .collect();
    Scanner::new(Some(&shaped)).unwrap()
});

fn found(text: &str) -> Vec<(&'static str, String)> {
    ALL.scan(text)
        .into_iter()
        .map(|s| (s.entity, text[s.start..s.end].to_owned()))
        .collect()
}

#[track_caller]
fn assert_finds(entity: &str, text: &str, value: &str) {
    let spans = found(text);
    assert!(
        spans.iter().any(|(e, v)| *e == entity && v == value),
        "expected {entity} {value:?} in {text:?}, found {spans:?}"
    );
}

/// Nothing of a shaped type (the name detectors left out) in `text`.
#[track_caller]
fn assert_clean(text: &str) {
    let spans: Vec<(&str, &str)> = SHAPED
        .scan(text)
        .into_iter()
        .map(|s| (s.entity, &text[s.start..s.end]))
        .collect();
    assert!(
        spans.is_empty(),
        "expected nothing in {text:?}, found {spans:?}"
    );
}

/// Each of `values` found as `entity` inside `template` (`{}` is the value).
#[track_caller]
fn assert_each(entity: &str, template: &str, values: &[&str]) {
    for value in values {
        assert_finds(entity, &template.replace("{}", value), value);
    }
}

#[test]
fn cards_grouped_with_no_break_spaces() {
    for space in ['\u{A0}', '\u{202F}', '\u{2007}', '\u{2009}', '\u{3000}'] {
        let card = ["4111", "1111", "1111", "1111"].join(&space.to_string());
        assert_finds("CREDIT_CARD", &format!("card {card} exp 12/29"), &card);
    }
}

#[test]
fn cards_in_fullwidth_and_other_digits() {
    assert_each(
        "CREDIT_CARD",
        "カード番号：{}、有効期限１２／２９",
        &[
            "４１１１ １１１１ １１１１ １１１１",
            "４１１１１１１１１１１１１１１１",
        ],
    );
    // Arabic-Indic digits, and a mix of scripts within one number.
    assert_each(
        "CREDIT_CARD",
        "card {} on file",
        &["٤١١١ ١١١١ ١١١١ ١١١١", "4111 ١١١١ ११११ 1111"],
    );
}

#[test]
fn ssns_with_unicode_dashes() {
    for dash in [
        '\u{2010}', '\u{2011}', '\u{2012}', '\u{2013}', '\u{2014}', '\u{2015}', '\u{2212}',
        '\u{FE63}', '\u{FF0D}',
    ] {
        let ssn = format!("536{dash}22{dash}1234");
        assert_finds("US_SSN", &format!("SSN {ssn} on file"), &ssn);
        assert_finds("US_SSN", &format!("employee record: {ssn}."), &ssn);
    }
    assert_finds(
        "US_SSN",
        "SSN ５３６－２２－１２３４",
        "５３６－２２－１２３４",
    );
}

#[test]
fn fullwidth_and_small_at_signs_and_dots_in_emails() {
    assert_each(
        "EMAIL_ADDRESS",
        "write to {} today",
        &[
            "jane.doe＠example.com",
            "jane.doe﹫example.com",
            "jane.doe@example．com",
            "ｊａｎｅ＠ｅｘａｍｐｌｅ．ｃｏｍ",
            "jane@example。com",
        ],
    );
}

#[test]
fn format_characters_inside_values_are_covered() {
    // Each value is found whole: the span runs from its first to its last visible
    // character, the invisible ones inside it included.
    for (entity, value) in [
        ("EMAIL_ADDRESS", "jane\u{200D}@example.com"),
        ("EMAIL_ADDRESS", "jane\u{200B}@example.com"),
        ("EMAIL_ADDRESS", "jane@exam\u{2060}ple.com"),
        ("EMAIL_ADDRESS", "ja\u{AD}ne.doe@example.com"),
        ("EMAIL_ADDRESS", "jane\u{FEFF}.doe@example.com"),
        ("EMAIL_ADDRESS", "jane@\u{200E}example.com"),
        ("CREDIT_CARD", "4111\u{200B}1111\u{200C}1111\u{2060}1111"),
        ("CREDIT_CARD", "4111 1111 \u{FE0F}1111 1111"),
        ("US_SSN", "536-\u{FEFF}22-1234"),
        ("PHONE_NUMBER", "+44 20\u{200B} 7946 0958"),
        (
            "IBAN_CODE",
            "DE89\u{AD}3704\u{AD}0044\u{AD}0532\u{AD}0130\u{AD}00",
        ),
    ] {
        assert_finds(entity, &format!("value: {value} (end)"), value);
        // Invisible characters around the value stay outside its span.
        assert_finds(
            entity,
            &format!("value: \u{200B}{value}\u{200D} (end)"),
            value,
        );
    }
    // An invisible character between a word and a value separates them.
    assert_finds(
        "CREDIT_CARD",
        "Kartennummer\u{200B}4111 1111 1111 1111",
        "4111 1111 1111 1111",
    );
}

#[test]
fn percent_escaped_and_html_escaped_values_are_found_whole() {
    for (entity, text, value) in [
        (
            "EMAIL_ADDRESS",
            "GET /users?email=jane%40example.com&page=2",
            "jane%40example.com",
        ),
        (
            "EMAIL_ADDRESS",
            "body: to=jane.doe%40example%2Eorg",
            "jane.doe%40example%2Eorg",
        ),
        (
            "EMAIL_ADDRESS",
            "<p>Mail jane&#64;example.com</p>",
            "jane&#64;example.com",
        ),
        (
            "EMAIL_ADDRESS",
            "<p>jane&#x40;example&period;com</p>",
            "jane&#x40;example&period;com",
        ),
        (
            "EMAIL_ADDRESS",
            "contact: jane&commat;example.com.",
            "jane&commat;example.com",
        ),
        (
            "EMAIL_ADDRESS",
            "&#106;&#97;&#110;&#101;&#64;x.io",
            "&#106;&#97;&#110;&#101;&#64;x.io",
        ),
        (
            "PHONE_NUMBER",
            "tel=%2B44%2020%207946%200958",
            "%2B44%2020%207946%200958",
        ),
        (
            "CREDIT_CARD",
            "card=4111%201111%201111%201111&cvc",
            "4111%201111%201111%201111",
        ),
        (
            "US_SSN",
            "ssn: 536&#8209;22&#8209;1234",
            "536&#8209;22&#8209;1234",
        ),
        (
            "EMAIL_ADDRESS",
            "jane%2540example.com",
            "jane%2540example.com",
        ),
        (
            "EMAIL_ADDRESS",
            "jane&amp;#64;example.com",
            "jane&amp;#64;example.com",
        ),
        (
            "EMAIL_ADDRESS",
            "jane%EF%BC%A0example.com",
            "jane%EF%BC%A0example.com",
        ),
        (
            "CREDIT_CARD",
            "card 4111&ensp;1111&ensp;1111&ensp;1111",
            "4111&ensp;1111&ensp;1111&ensp;1111",
        ),
    ] {
        assert_finds(entity, text, value);
    }
}

/// Escapes that are part of a value (a password in a URL, a secret) keep the value whole:
/// what the text shows as written is found first, and what its decoded reading adds joins it.
#[test]
fn values_whose_escapes_are_part_of_them_stay_whole() {
    for (entity, text, value) in [
        (
            "URL",
            "db: postgres://admin:Xy9%2FQz7Wv3Lp@db.internal:5432/app ok",
            "postgres://admin:Xy9%2FQz7Wv3Lp@db.internal:5432/app",
        ),
        (
            "URL",
            "see https://user:pa%20ss@host.example.com/x now",
            "https://user:pa%20ss@host.example.com/x",
        ),
        (
            "CREDIT_CARD",
            "card 4111111111111111%41 ok",
            "4111111111111111",
        ),
        (
            "CREDIT_CARD",
            "card 4111111111111111&#65; ok",
            "4111111111111111",
        ),
    ] {
        assert_finds(entity, text, value);
    }
    // Whatever types win, no byte of the credentials is left out of a span.
    for (text, secret) in [
        (
            "smtp://jane%40example.com:Secr3tPassw0rd@smtp.gmail.com:587",
            "Secr3tPassw0rd",
        ),
        (
            "body: password=Tr0ub4dor%263%3Bhorse9x",
            "Tr0ub4dor%263%3Bhorse9x",
        ),
        (
            "db: postgres://admin:Xy9%2FQz7Wv3Lp@db.internal:5432/app",
            "admin:Xy9%2FQz7Wv3Lp",
        ),
    ] {
        let at = text.find(secret).unwrap();
        let spans = ALL.scan(text);
        assert!(
            (at..at + secret.len()).all(|i| spans.iter().any(|s| s.start <= i && i < s.end)),
            "{secret:?} not wholly masked in {text:?}: {spans:?}"
        );
    }
}

#[test]
fn email_addresses_spelled_out_are_found() {
    for (text, value) in [
        (
            "write to jane [at] example [dot] com please",
            "jane [at] example [dot] com",
        ),
        ("jane(at)example.com", "jane(at)example.com"),
        (
            "Mail: j.doe{at}mail.example.co.uk.",
            "j.doe{at}mail.example.co.uk",
        ),
        (
            "my email is jane dot doe at gmail dot com",
            "jane dot doe at gmail dot com",
        ),
        (
            "reach me at jane dot doe at gmail dot com",
            "jane dot doe at gmail dot com",
        ),
        ("JANE AT EXAMPLE DOT ORG", "JANE AT EXAMPLE DOT ORG"),
        ("ops <at> corp (dot) io", "ops <at> corp (dot) io"),
        ("jane[at]example[.]com", "jane[at]example[.]com"),
        ("jane(@)example(.)com", "jane(@)example(.)com"),
    ] {
        assert_finds("EMAIL_ADDRESS", text, value);
    }
    for text in [
        "the docs are at docs.python.org and at example.com",
        "look at the end dot",
        "we met at noon, dot the i's",
        "He got rich at the dot com boom.",
        "we met at noon dot me",
        "Meet me (at) home.Then we go",
        "rated 50% at 40%40 scale",
        "R&D at ACME & Co; 100% done",
    ] {
        assert_clean(text);
    }
}

#[test]
fn internationalised_email_addresses() {
    assert_each(
        "EMAIL_ADDRESS",
        "Schreiben Sie an {} oder rufen Sie an.",
        &[
            "info@müller-bäckerei.de",
            "jürgen.müller@firma.de",
            "zoë@café.fr",
            "łukasz.żółć@poczta.pl",
            "почта@пример.рф",
            "δοκιμή@παράδειγμα.δοκιμή",
            "用户@例子.广告",
            "info@xn--mller-bckerei-9gb1p.de",
        ],
    );
    // Next to text of a script written without spaces the address stops at the script
    // change.
    assert_finds(
        "EMAIL_ADDRESS",
        "メールはyamada@example.jpまでお送りください。",
        "yamada@example.jp",
    );
}

/// Letters of another script drawn as Latin ones (Cyrillic `а`, `о`, `Е`, `А`, Greek `ο`),
/// and the circled and mathematical letters, inside a word with ASCII letters.
#[test]
fn look_alike_letters_in_secrets_and_codes() {
    // Cyrillic о in `proj`, Cyrillic А in `AKIA`, Greek ο and Cyrillic а in `password`.
    assert_finds(
        "SECRET",
        "key sk-pr\u{43E}j-abcdefghijklmnopqrstuvwxyz012345 here",
        "sk-pr\u{43E}j-abcdefghijklmnopqrstuvwxyz012345",
    );
    assert_finds(
        "SECRET",
        "aws \u{410}KIAABCDEFGHIJKLMNOP here",
        "\u{410}KIAABCDEFGHIJKLMNOP",
    );
    assert_finds(
        "SECRET",
        "p\u{430}ssw\u{3BF}rd = Zx8vQ2mLp9Rt4KwB",
        "Zx8vQ2mLp9Rt4KwB",
    );
    // Mathematical bold and circled letters.
    assert_finds(
        "SECRET",
        "\u{1D429}\u{1D41A}\u{1D42C}\u{1D42C}word: Zx8vQ2mLp9Rt4KwB",
        "Zx8vQ2mLp9Rt4KwB",
    );
    assert_finds(
        "SECRET",
        "\u{24DF}assword: Zx8vQ2mLp9Rt4KwB",
        "Zx8vQ2mLp9Rt4KwB",
    );
    // Cyrillic Е in the bank code of an IBAN.
    assert_finds(
        "IBAN_CODE",
        "IBAN GB82 W\u{415}ST 1234 5698 7654 32 please",
        "GB82 W\u{415}ST 1234 5698 7654 32",
    );
    // A Swiss IBAN typed on a Cyrillic layout (С and Н), an Armenian օ, an escaped а.
    assert_finds(
        "IBAN_CODE",
        "IBAN \u{421}\u{41D}93 0076 2011 6238 5295 7 please",
        "\u{421}\u{41D}93 0076 2011 6238 5295 7",
    );
    assert_finds(
        "SECRET",
        "key sk-pr\u{585}j-abcdefghijklmnopqrstuvwxyz012345 here",
        "sk-pr\u{585}j-abcdefghijklmnopqrstuvwxyz012345",
    );
    assert_finds(
        "SECRET",
        "p&#1072;ssword: Zx8vQ2mLp9Rt4KwB",
        "Zx8vQ2mLp9Rt4KwB",
    );
    // Cyrillic top-level domains whose first letters read as Latin ones stay whole.
    for address in ["info@магазин.сайт", "почта@пример.орг", "jane@example.срб"]
    {
        assert_finds(
            "EMAIL_ADDRESS",
            &format!("write to {address} today"),
            address,
        );
    }
    // A value written right after a word of another script is apart from it.
    assert_finds("CREDIT_CARD", "карта4111111111111111", "4111111111111111");
    assert_finds("IP_ADDRESS", "адрес192.168.10.20", "192.168.10.20");
    // More confusables: Greek lunate sigma, Cyrillic ka and Komi sje.
    assert_finds(
        "SECRET",
        "s\u{43A}-proj-abcdefghijklmnopqrstuvwxyz012345",
        "s\u{43A}-proj-abcdefghijklmnopqrstuvwxyz012345",
    );
    assert_finds(
        "IBAN_CODE",
        "\u{50C}B82 WEST 1234 5698 7654 32",
        "\u{50C}B82 WEST 1234 5698 7654 32",
    );
    // Mathematical italic, whose `h` is the letterlike `ℎ`; small capitals; modifier
    // (superscript) letters; Cherokee, Lisu and Coptic capitals; a script `ℓ` and the Kelvin
    // sign.
    for address in [
        "\u{1D457}\u{1D45C}\u{210E}\u{1D45B}@\u{1D452}\u{1D465}\u{1D44E}\u{1D45A}\u{1D45D}\u{1D459}\u{1D452}.\u{1D450}\u{1D45C}\u{1D45A}",
        "\u{1D0A}\u{1D00}\u{0274}\u{1D07}@\u{1D07}x\u{1D00}\u{1D0D}\u{1D18}\u{029F}\u{1D07}.\u{1D04}\u{1D0F}\u{1D0D}",
        "jane@example.co\u{2113}\u{2113}ege",
    ] {
        assert_finds(
            "EMAIL_ADDRESS",
            &format!("write to {address} today"),
            address,
        );
    }
    assert_finds(
        "SECRET",
        "\u{1D56}\u{1D43}\u{02E2}\u{02E2}\u{02B7}\u{1D52}\u{02B3}\u{1D48}: Zx8vQ2mLp9Rt4KwB",
        "Zx8vQ2mLp9Rt4KwB",
    );
    for key in [
        "\u{13AA}KIAABCDEFGHIJKLMNOP",
        "A\u{A4D7}IAABCDEFGHIJKLMNOP",
        "AKIAABCDEFGHIJ\u{2C94}LMNOP",
        "AKIAABCDEFGHIJ\u{212A}LMNOP",
    ] {
        assert_finds("SECRET", &format!("aws {key} here"), key);
    }
    // A look-alike spelling is another value: its own canonical spelling, so its own token.
    assert_eq!(
        canonical("EMAIL_ADDRESS", "j\u{430}ne@example.com"),
        "j\u{430}ne@example.com"
    );
    assert_eq!(
        canonical("EMAIL_ADDRESS", "\u{1D423}ane@example.com"),
        "\u{1D423}ane@example.com"
    );
}

/// Digit groups set apart by middle dots, parenthesised and full-stop digits; an apostrophe
/// in an address.
#[test]
fn middle_dots_parenthesised_digits_and_apostrophes() {
    for (entity, text, value) in [
        (
            "CREDIT_CARD",
            "card 4111·1111·1111·1111 ok",
            "4111·1111·1111·1111",
        ),
        (
            "CREDIT_CARD",
            "カード4111・1111・1111・1111です",
            "4111・1111・1111・1111",
        ),
        ("PHONE_NUMBER", "call 415·555·0172 now", "415·555·0172"),
        (
            "CREDIT_CARD",
            "card ⑷⑴⑴⑴ 1111 1111 1111",
            "⑷⑴⑴⑴ 1111 1111 1111",
        ),
        (
            "EMAIL_ADDRESS",
            "mail mary.o'neil@example.com today",
            "mary.o'neil@example.com",
        ),
        (
            "EMAIL_ADDRESS",
            "mail 'jane@example.com' today",
            "jane@example.com",
        ),
    ] {
        assert_finds(entity, text, value);
    }
    assert_clean("la col·lecció i l·lustre, ジョン・スミスさん");
}

/// A Japanese keyboard in kana mode types the long sound mark `ー` for `-`.
#[test]
fn the_katakana_long_sound_mark_separates_digit_groups() {
    for (text, value) in [
        ("電話番号は03ー1234ー5678です", "03ー1234ー5678"),
        (
            "TEL：０９０ー１２３４ー５６７８",
            "０９０ー１２３４ー５６７８",
        ),
        ("携帯 090ｰ1234ｰ5678", "090ｰ1234ｰ5678"),
    ] {
        assert_finds("PHONE_NUMBER", text, value);
    }
    assert_finds(
        "CREDIT_CARD",
        "カード 4111ー1111ー1111ー1111 です",
        "4111ー1111ー1111ー1111",
    );
    // Katakana words with the mark stay clean.
    assert_clean("コーヒーとケーキ、メールアドレスはサーバーにあります");
}

/// Context words of another script count where the built-in detectors read look-alikes as
/// Latin letters: `ТЕЛЕФОН` reads `TEЛEФOH` in the view, and is read as written too.
#[test]
fn context_words_of_another_script_count() {
    let config = DetectionConfig {
        context: [(
            "PHONE_NUMBER".to_owned(),
            ContextWords {
                raise: vec!["телефон".into()],
                lower: Vec::new(),
            },
        )]
        .into(),
        ..DetectionConfig::default()
    };
    let scanner = Scanner::with_config(&config, None).unwrap();
    let plain = Scanner::new(None).unwrap();
    for text in ["телефон 9161234567", "ТЕЛЕФОН: 9161234567"] {
        let phones = |scanner: &Scanner| {
            scanner
                .scan(text)
                .iter()
                .filter(|s| s.entity == "PHONE_NUMBER")
                .count()
        };
        assert_eq!(phones(&plain), 0, "{text}: found without the context word");
        assert_eq!(phones(&scanner), 1, "{text}");
    }
}

/// Custom entities read the text with letters of other scripts as written: their patterns
/// and words may be written in Cyrillic or Greek, also where the built-in detectors read
/// look-alikes as Latin letters in the same text.
#[test]
fn custom_entities_keep_the_letters_of_other_scripts() {
    let custom = |name: &str, matcher: CustomMatch| CustomEntity {
        name: name.into(),
        matcher,
        score: 0.9,
        context: ContextWords::default(),
    };
    let config = DetectionConfig {
        custom: vec![
            custom("CONTRACT", CustomMatch::Pattern(r"Договор №\d+".into())),
            custom(
                "PLATE",
                CustomMatch::Pattern(r"[АВЕКМНОРСТУХ]\d{3}[АВЕКМНОРСТУХ]{2}\d{2,3}".into()),
            ),
            custom(
                "TAX_ID",
                CustomMatch::Words {
                    words: vec!["ΑΦΜ 123456789".into()],
                    case_sensitive: true,
                },
            ),
        ],
        ..DetectionConfig::default()
    };
    let scanner = Scanner::with_config(&config, None).unwrap();
    let text = "Договор №4471, машина А123ВС77, VAT/ΑΦΜ 123456789, \
                key sk-pr\u{43E}j-abcdefghijklmnopqrstuvwxyz012345";
    let found: Vec<(&str, &str)> = scanner
        .scan(text)
        .into_iter()
        .map(|s| (s.entity, &text[s.start..s.end]))
        .collect();
    for expected in [
        ("CONTRACT", "Договор №4471"),
        ("PLATE", "А123ВС77"),
        ("TAX_ID", "ΑΦΜ 123456789"),
        ("SECRET", "sk-pr\u{43E}j-abcdefghijklmnopqrstuvwxyz012345"),
    ] {
        assert!(found.contains(&expected), "{expected:?} not in {found:?}");
    }
}

#[test]
fn phones_in_digits_of_other_scripts() {
    assert_each(
        "PHONE_NUMBER",
        "رقم الهاتف {} شكرا",
        &["+٩٧١ ٥٠ ١٢٣ ٤٥٦٧", "+٤٤ ٢٠ ٧٩٤٦ ٠٩٥٨"],
    );
    assert_each(
        "PHONE_NUMBER",
        "شماره {} است",
        &["۰۹۱۲ ۳۴۵ ۶۷۸۹", "+۹۸ ۹۱۲ ۳۴۵ ۶۷۸۹"],
    );
    assert_each(
        "PHONE_NUMBER",
        "संपर्क {} पर करें",
        &["+९१ ९८७६५ ४३२१०", "९८७६५ ४३२१०"],
    );
    assert_each(
        "PHONE_NUMBER",
        "電話番号は{}です。",
        &[
            "０３－１２３４－５６７８",
            "０９０-１２３４-５６７８",
            "＋８１ ３ １２３４ ５６７８",
        ],
    );
}

#[test]
fn us_and_canadian_numbers() {
    assert_each(
        "PHONE_NUMBER",
        "Reach the front desk at {} after nine.",
        &[
            "415 555 0172",
            "+1 415 555 0172",
            "1-415-555-0172",
            "1 415 555 0172",
            "(415) 555-0172",
            "(415)555-0172",
            "1 (415) 555-0172",
            "415.555.0172",
            "604-555-0172",
        ],
    );
    assert_finds("PHONE_NUMBER", "call me on 4155550172", "4155550172");
}

#[test]
fn maestro_and_jcb_numbers_of_their_own_lengths() {
    assert_each(
        "CREDIT_CARD",
        "Charge {} for the order.",
        &[
            "501805567051",
            "6759 2489 4503",
            "6304-6089-2098",
            "180085095070333",
        ],
    );
    // Twelve digits outside the Maestro prefixes, or failing Luhn, are no card.
    assert!(found("Charge 401805567054 and 501805567052 today.").is_empty());
}

#[test]
fn phone_numbers_with_an_extension_are_found_with_it() {
    assert_each(
        "PHONE_NUMBER",
        "Reach the front desk at {} after nine.",
        &[
            "415-555-0172x157",
            "(415)555-0172x8885",
            "+1-415-555-0172x51853",
            "415.555.0172 x 12",
            "415-555-0172 ext. 4401",
            "+44 20 7946 0958 ext 12",
            "020 7946 0958 Extension 7",
        ],
    );
    // Too many digits for an extension: a longer token, not a phone number.
    assert!(
        found("ref 415-555-0172x12345678")
            .iter()
            .all(|(entity, _)| *entity != "PHONE_NUMBER")
    );
}

#[test]
fn national_phone_formats_of_the_supported_locales() {
    // Without a context word; the country code given or not.
    let locales: &[(&str, &[&str])] = &[
        (
            "UK",
            &[
                "020 7946 0958",
                "0161 496 0000",
                "07700 900123",
                "01632 960983",
                "+44 7700 900123",
                "+44 (0)20 7946 0958",
            ],
        ),
        (
            "DE",
            &[
                "030 1234567",
                "030/1234567",
                "030-1234567",
                "0170 1234567",
                "0151 23456789",
                "089 123456-78",
                "(030) 1234567",
                "+49 30 1234567",
                "+49 (0)170 1234567",
                "+49 30/1234567",
            ],
        ),
        (
            "FR",
            &[
                "01 23 45 67 89",
                "06.12.34.56.78",
                "06-12-34-56-78",
                "+33 6 12 34 56 78",
                "+33 (0)1 23 45 67 89",
            ],
        ),
        (
            "ES",
            &[
                "912 345 678",
                "612 34 56 78",
                "91 234 56 78",
                "+34 612 345 678",
            ],
        ),
        (
            "IT",
            &[
                "06 1234 5678",
                "02 1234 5678",
                "0471 123456",
                "333 123 4567",
                "+39 06 1234 5678",
                "+39 333 123 4567",
            ],
        ),
        (
            "NL",
            &[
                "020 123 4567",
                "06 12345678",
                "06-12345678",
                "+31 6 12345678",
                "+31 (0)20 123 4567",
            ],
        ),
        ("PL", &["601 234 567", "12 345 67 89", "+48 601 234 567"]),
        (
            "IN",
            &[
                "98765 43210",
                "011 2345 6789",
                "022-23456789",
                "+91 98765 43210",
                "+91-9876543210",
            ],
        ),
        (
            "BR",
            &[
                "(11) 91234-5678",
                "(11) 3456-7890",
                "11 91234-5678",
                "+55 11 91234-5678",
            ],
        ),
        (
            "JP",
            &[
                "03-1234-5678",
                "090-1234-5678",
                "0120-123-456",
                "045-123-4567",
                "0467-12-3456",
                "+81 3-1234-5678",
                "+81 90-1234-5678",
            ],
        ),
        (
            "AU",
            &[
                "(02) 9876 5432",
                "02 9876 5432",
                "0412 345 678",
                "1300 123 456",
                "1800 123 456",
                "+61 2 9876 5432",
                "+61 412 345 678",
            ],
        ),
    ];
    for (locale, numbers) in locales {
        for number in *numbers {
            for template in ["Kontakt: {}, danke.", "Tel. {}", "{}"] {
                let text = template.replace("{}", number);
                let spans = found(&text);
                assert!(
                    spans.contains(&("PHONE_NUMBER", (*number).to_owned())),
                    "{locale}: {number:?} in {text:?}, found {spans:?}"
                );
            }
        }
    }
    // The international prefix `00` and numbers written without separators are phones
    // after a context word only.
    for number in [
        "0049 30 1234567",
        "0044 20 7946 0958",
        "02079460958",
        "0612345678",
    ] {
        assert_finds("PHONE_NUMBER", &format!("phone: {number}"), number);
        assert_clean(&format!("ref {number}"));
    }
}

#[test]
fn lower_case_ibans() {
    assert_each(
        "IBAN_CODE",
        "überweisen an {} bis freitag",
        &[
            "de89 3704 0044 0532 0130 00",
            "de89370400440532013000",
            "gb82 west 1234 5698 7654 32",
            "fr14 2004 1010 0505 0001 3m02 606",
        ],
    );
    assert_clean("de89 3704 0044 0532 0130 01 is a typo");
}

#[test]
fn ssn_shapes_failing_the_issuance_rules_after_a_cue() {
    for (cue, number) in [
        ("SSN:", "912-12-3456"),
        ("ssn", "000-12-3456"),
        ("Social Security number", "666-12-3456"),
        ("social security no.", "536-00-1234"),
        ("Tax ID", "536-22-0000"),
        ("taxpayer identification number", "999-99-9999"),
        ("ITIN", "912 93 1234"),
        ("TIN:", "078-05-1120"),
    ] {
        let text = format!("{cue} {number} on file");
        let spans = ALL.scan(&text);
        assert!(
            spans.iter().any(|s| s.entity == "US_SSN"
                && &text[s.start..s.end] == number
                && s.score >= 0.5
                && s.score < 0.85),
            "{text:?}: {spans:?}"
        );
    }
    // Without a cue, or with the cue only inside a longer word, these are not SSNs.
    assert_clean("meeting 912-12-3456 at noon");
    assert_clean("continue 000-12-3456");
    assert_clean("reference 666-12-3456");
}

#[test]
fn itins_are_reported_as_us_ssn() {
    for itin in [
        "912-70-1234",
        "900-50-0001",
        "999-88-1234",
        "987-65-4321",
        "950-94-1234",
    ] {
        assert_finds("US_SSN", &format!("record {itin} filed"), itin);
    }
    // Area 9xx outside the ITIN groups is neither.
    assert_clean("record 912-93-1234 and 912-69-1234 filed");
}

#[test]
fn prose_prices_dates_and_versions_stay_clean() {
    for text in [
        // German, French and Polish prose with prices grouped by (narrow) no-break spaces.
        "Die Lieferung für Frau Schäfer kostet 1\u{A0}299,00\u{A0}€ (inkl. MwSt.); \
         Termin am 15.03.2024 um 10:30 Uhr, Version 2.10.3 läuft.",
        "Le prix est de 1\u{202F}299,00\u{A0}€ TTC, livraison le 05/12/2024 ; \
         référence 2024-0815, année fiscale 2023–2024.",
        "Cena wynosi 12\u{A0}499,99\u{A0}zł, termin płatności 2024-03-15, wersja 3.1.4. \
         Zażółć gęślą jaźń.",
        "価格は１２，８００円（税込）です。２０２４年３月１５日発売、バージョン１．２．３。",
        "東京都渋谷区の会議は午前１０：３０から。",
        // Large figures grouped by spaces, with and without a currency.
        "Budget: 750\u{A0}000\u{A0}000 euros, Umsatz 912\u{A0}345\u{A0}678\u{A0}€",
        "a total of 1 912 345 678 rows in 1 234 567 890 bytes",
        "Preis: 1\u{2009}299 € und 12\u{2009}345,67 €",
        // Dates, times, timestamps and versions.
        "logged 05-01-2024 10:30, 2024-03-15 08:30:00, 15.03.2024 10:30 and 03/2024 1500 units",
        "built 2024‐01‐15 — version 10.4.2 – v2.0.0−rc.1",
        "ISBN 978-3-16-148410-0, build 0815 4711, epoch 1650000000 and 1800000000",
        "zip 94105-1234, order #1234567, room 0042 floor 12",
    ] {
        assert_clean(text);
    }
}

/// Text made of pieces the normalised view folds or removes, next to digits, separators and
/// the characters values are made of.
fn spellings() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "4111", "1111", "536", "22", "1234", "٤١", "۰۹", "४२", "４１", "０", "+", "@", "＠", "﹫",
        ".", "。", "-", "\u{2013}", "\u{2212}", "－", " ", "\u{A0}", "\u{202F}", "\u{3000}",
        "\u{200B}", "\u{200D}", "\u{AD}", "\u{FEFF}", "\u{FE0F}", "(", ")", "jane", "müller",
        "例子", "de89", "DE89", "ssn ", "tin ", "€", "é", "\u{301}", "👍",
    ]);
    prop::collection::vec(pieces, 0..40).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the spelling, the scanner's spans are ordered, disjoint, on character
    /// boundaries of the text, and never start or end with a character the view removes.
    #[test]
    fn spans_of_any_spelling_lie_on_the_text(text in prop_oneof![any::<String>(), spellings()]) {
        let spans = SHAPED.scan(&text);
        let mut last_end = 0;
        for span in &spans {
            prop_assert!(span.start >= last_end && span.start < span.end && span.end <= text.len());
            prop_assert!(text.is_char_boundary(span.start) && text.is_char_boundary(span.end));
            let value = &text[span.start..span.end];
            let invisible = |c: Option<char>| c.is_some_and(|c| Normalized::new(&c.to_string()).as_str().is_empty());
            prop_assert!(!invisible(value.chars().next()) && !invisible(value.chars().next_back()), "{value:?}");
            last_end = span.end;
        }
    }
}
