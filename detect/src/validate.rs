//! Validators that turn a pattern match into a detection, or reject a look-alike.

use std::net::{Ipv4Addr, Ipv6Addr};

fn digits(text: &str) -> Vec<u32> {
    text.chars().filter_map(|c| c.to_digit(10)).collect()
}

/// Luhn checksum over the 13–19 digits of `text` (separators ignored).
pub(crate) fn luhn(text: &str) -> bool {
    luhn_of(text, 13..=19)
}

/// Luhn checksum over the 12–19 digits of a Maestro card number (the scheme issues 12-digit
/// numbers; its pattern names the scheme's own prefixes).
pub(crate) fn luhn_maestro(text: &str) -> bool {
    luhn_of(text, 12..=19)
}

fn luhn_of(text: &str, lengths: std::ops::RangeInclusive<usize>) -> bool {
    let digits = digits(text);
    if !lengths.contains(&digits.len()) {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, d)| {
            if i % 2 == 1 {
                let doubled = d * 2;
                if doubled > 9 { doubled - 9 } else { doubled }
            } else {
                *d
            }
        })
        .sum();
    sum.is_multiple_of(10) && digits.iter().any(|d| *d != digits[0])
}

/// An issued US SSN or an ITIN.
///
/// SSN issuance rules: area not 000, 666 or 900–999; group not 00; serial not 0000; not all
/// one digit; and not one of the numbers published in advertising or used as examples
/// (078-05-1120, 219-09-9999, 123-45-6789). An ITIN (Individual Taxpayer Identification
/// Number, same shape) has area 900–999 and group 50–65, 70–88, 90–92 or 94–99.
pub(crate) fn us_ssn(text: &str) -> bool {
    let digits = digits(text);
    if digits.len() != 9 {
        return false;
    }
    let number = |range: std::ops::Range<usize>| digits[range].iter().fold(0, |n, d| n * 10 + d);
    let (area, group, serial) = (number(0..3), number(3..5), number(5..9));
    let all_same = digits.iter().all(|d| *d == digits[0]);
    let itin = area >= 900 && matches!(group, 50..=65 | 70..=88 | 90..=92 | 94..=99);
    (area < 900 || itin)
        && area != 0
        && area != 666
        && group != 0
        && serial != 0
        && !all_same
        && !matches!(
            (area, group, serial),
            (78, 5, 1120) | (219, 9, 9999) | (123, 45, 6789)
        )
}

/// IBAN: known country, the country's length, and the ISO 7064 mod-97 check, in either case.
pub(crate) fn iban(text: &str) -> bool {
    let compact: String = text
        .chars()
        .filter(|c| !c.is_whitespace() && !matches!(c, '-' | '.'))
        .map(|c| c.to_ascii_uppercase())
        .collect();
    let Some(country) = compact.get(0..2) else {
        return false;
    };
    if iban_length(country) != Some(compact.len()) {
        return false;
    }
    let rearranged = compact[4..].chars().chain(compact[..4].chars());
    let mut remainder: u32 = 0;
    for c in rearranged {
        let value = match c {
            '0'..='9' => c as u32 - '0' as u32,
            'A'..='Z' => c as u32 - 'A' as u32 + 10,
            _ => return false,
        };
        remainder = if value >= 10 {
            (remainder * 100 + value) % 97
        } else {
            (remainder * 10 + value) % 97
        };
    }
    remainder == 1
}

/// The byte length of the start of `text` (an IBAN candidate: letters, digits and
/// separators) that holds as many letters and digits as its country's IBANs have, when it
/// holds more: a word written after the IBAN reads like one more group
/// (`ES91 2100 0418 4502 0005 1332 para`).
pub(crate) fn iban_extent(text: &str) -> Option<usize> {
    let country: String = text
        .chars()
        .take(2)
        .map(|c| c.to_ascii_uppercase())
        .collect();
    let wanted = iban_length(&country)?;
    let mut count = 0;
    for (at, c) in text.char_indices() {
        if c.is_ascii_alphanumeric() {
            count += 1;
            if count == wanted {
                let end = at + c.len_utf8();
                return (end < text.len()).then_some(end);
            }
        }
    }
    None
}

/// IBAN lengths by country (SWIFT IBAN registry).
fn iban_length(country: &str) -> Option<usize> {
    Some(match country {
        "AD" => 24,
        "AE" => 23,
        "AL" => 28,
        "AT" => 20,
        "AZ" => 28,
        "BA" => 20,
        "BE" => 16,
        "BG" => 22,
        "BH" => 22,
        "BR" => 29,
        "BY" => 28,
        "CH" => 21,
        "CR" => 22,
        "CY" => 28,
        "CZ" => 24,
        "DE" => 22,
        "DK" => 18,
        "DO" => 28,
        "EE" => 20,
        "EG" => 29,
        "ES" => 24,
        "FI" => 18,
        "FO" => 18,
        "FR" => 27,
        "GB" => 22,
        "GE" => 22,
        "GI" => 23,
        "GL" => 18,
        "GR" => 27,
        "GT" => 28,
        "HR" => 21,
        "HU" => 28,
        "IE" => 22,
        "IL" => 23,
        "IQ" => 23,
        "IS" => 26,
        "IT" => 27,
        "JO" => 30,
        "KW" => 30,
        "KZ" => 20,
        "LB" => 28,
        "LC" => 32,
        "LI" => 21,
        "LT" => 20,
        "LU" => 20,
        "LV" => 21,
        "MC" => 27,
        "MD" => 24,
        "ME" => 22,
        "MK" => 19,
        "MR" => 27,
        "MT" => 31,
        "MU" => 30,
        "NL" => 18,
        "NO" => 15,
        "PK" => 24,
        "PL" => 28,
        "PS" => 29,
        "PT" => 25,
        "QA" => 29,
        "RO" => 24,
        "RS" => 22,
        "SA" => 24,
        "SC" => 31,
        "SE" => 24,
        "SI" => 19,
        "SK" => 24,
        "SM" => 27,
        "ST" => 25,
        "SV" => 28,
        "TL" => 23,
        "TN" => 24,
        "TR" => 26,
        "UA" => 29,
        "VA" => 22,
        "VG" => 24,
        "XK" => 20,
        _ => return None,
    })
}

/// A dotted quad that parses as an IPv4 address (octets up to 255, no leading zeros).
pub(crate) fn ipv4(text: &str) -> bool {
    text.parse::<Ipv4Addr>().is_ok()
}

/// An IPv6 address that parses, with at least two colons and one hex digit (not a time like
/// `12:30`, not a bare `::`).
pub(crate) fn ipv6(text: &str) -> bool {
    text.parse::<Ipv6Addr>().is_ok()
        && text.matches(':').count() >= 2
        && text.chars().any(|c| c.is_ascii_hexdigit())
}

/// An international phone number has 7 to 15 digits (E.164), not all the same, and does not
/// end in six zeros (a round figure).
pub(crate) fn phone(text: &str) -> bool {
    let digits = digits(text);
    (7..=15).contains(&digits.len()) && plausible_number(&digits)
}

/// A national phone number has 9 to 12 digits, not all the same, does not end in six zeros,
/// and is not grouped as an SSN (3-2-4).
pub(crate) fn phone_national(text: &str) -> bool {
    let digits = digits(text);
    let groups: Vec<usize> = text
        .split(|c: char| !c.is_ascii_digit())
        .filter(|g| !g.is_empty())
        .map(str::len)
        .collect();
    (9..=12).contains(&digits.len()) && plausible_number(&digits) && groups != [3, 2, 4]
}

/// A phone number written as digits only: a national number ([`phone_national`]) that starts
/// with 2–9, or with a trunk 0 and then 1–9.
pub(crate) fn phone_digits(text: &str) -> bool {
    !text.starts_with('1') && !text.starts_with("00") && phone_national(text)
}

fn plausible_number(digits: &[u32]) -> bool {
    digits.iter().any(|d| *d != digits[0]) && !digits.ends_with(&[0; 6])
}

/// Words that are never a domain's label in prose: `rich at the dot com boom`, `we met at
/// noon dot me` are not addresses.
const NOT_LABELS: &[&str] = &[
    "a", "an", "the", "this", "that", "my", "your", "our", "his", "her", "their", "its", "home",
    "noon", "work", "night", "least", "all", "once", "first", "last", "some", "any", "which",
];

/// An address spelled out (`jane [at] example [dot] com`): no label after the `at` is a word
/// of prose ([`NOT_LABELS`]).
pub(crate) fn spelled_email(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '@'))
        .filter(|w| !w.is_empty())
        .collect();
    let Some(at) = words.iter().position(|w| *w == "at" || *w == "@") else {
        return true;
    };
    words[at + 1..]
        .iter()
        .filter(|w| **w != "dot")
        .all(|w| !NOT_LABELS.contains(w))
}

/// Shannon entropy in bits per character.
pub(crate) fn entropy(text: &str) -> f64 {
    let mut counts = [0u32; 256];
    let mut total = 0u32;
    for byte in text.bytes() {
        counts[byte as usize] += 1;
        total += 1;
    }
    if total == 0 {
        return 0.0;
    }
    counts
        .iter()
        .filter(|c| **c > 0)
        .map(|c| {
            let p = f64::from(*c) / f64::from(total);
            -p * p.log2()
        })
        .sum()
}

/// A generic secret value: long, high entropy, with both letters and digits; not a
/// reference to one (`${DB_PASSWORD}`, `$TOKEN`), a file path (`PWD=/home/ubuntu/app2`) or a
/// call in code (`token: Identifier(name1)`).
pub(crate) fn generic_secret(text: &str) -> bool {
    text.len() >= 12
        && entropy(text) >= 3.3
        && text.chars().any(|c| c.is_ascii_digit())
        && text.chars().any(|c| c.is_ascii_alphabetic())
        && !reference(text)
        && !path(text)
        && !call(text)
}

/// Whether `text` is a whole reference to a variable: `${NAME…}` or `$NAME`.
fn reference(text: &str) -> bool {
    match text.strip_prefix('$') {
        Some(braced) if braced.starts_with('{') => {
            braced.ends_with('}') && braced.matches('}').count() == 1
        }
        Some(name) => {
            name.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

/// Whether `text` starts as a call in code: a name (dotted or not) and `(`.
fn call(text: &str) -> bool {
    let Some(callee) = text.split_once('(').map(|(callee, _)| callee) else {
        return false;
    };
    callee.len() >= 2
        && callee
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && callee
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.'))
}

/// Whether `text` is a file path: `/`, `~/` or `./` and then two or more names of letters,
/// digits, `.`, `_` and `-` set apart by `/`.
fn path(text: &str) -> bool {
    let Some(rest) = ["/", "~/", "./"]
        .iter()
        .find_map(|start| text.strip_prefix(start))
    else {
        return false;
    };
    let names: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    names.len() >= 2
        && names.iter().all(|name| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        })
}

/// A password said in words (`my password is …`): a generic secret with upper- and
/// lower-case letters, as passwords are made, where a phrase continues with an identifier
/// (`the password was reset_by_admin_2024`).
pub(crate) fn spoken_password(text: &str) -> bool {
    generic_secret(text)
        && text.chars().any(|c| c.is_ascii_uppercase())
        && text.chars().any(|c| c.is_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luhn_accepts_test_cards_and_rejects_neighbours() {
        for card in [
            "4111 1111 1111 1111",
            "5500-0000-0000-0004",
            "340000000000009",
            "6011000000000004",
        ] {
            assert!(luhn(card), "{card}");
        }
        for bad in [
            "4111 1111 1111 1112",
            "1234567812345678",
            "0000000000000000",
            "411111111111",
        ] {
            assert!(!luhn(bad), "{bad}");
        }
    }

    #[test]
    fn ssn_rules() {
        assert!(us_ssn("536-22-1234"));
        // ITINs.
        for itin in [
            "900-70-0001",
            "912-50-1234",
            "999-99-1234",
            "950-65-1234",
            "901-90-1234",
        ] {
            assert!(us_ssn(itin), "{itin}");
        }
        for bad in [
            "000-12-3456",
            "666-12-3456",
            "912-12-3456",
            "912-69-1234",
            "912-89-1234",
            "912-93-1234",
            "536-00-1234",
            "536-22-0000",
            "078-05-1120",
            "111-11-1111",
        ] {
            assert!(!us_ssn(bad), "{bad}");
        }
    }

    #[test]
    fn iban_checks() {
        for good in [
            "DE89 3704 0044 0532 0130 00",
            "GB82WEST12345698765432",
            "FR1420041010050500013M02606",
            "NL91ABNA0417164300",
            "de89 3704 0044 0532 0130 00",
            "gb82west12345698765432",
        ] {
            assert!(iban(good), "{good}");
        }
        for bad in [
            "DE89 3704 0044 0532 0130 01",
            "GB82WEST1234569876543",
            "XX82WEST12345698765432",
        ] {
            assert!(!iban(bad), "{bad}");
        }
    }

    #[test]
    fn addresses() {
        assert!(ipv4("192.168.10.1"));
        assert!(!ipv4("300.1.1.1"));
        assert!(!ipv4("01.02.03.04"));
        assert!(ipv6("2001:db8::8a2e:370:7334"));
        assert!(ipv6("fe80::1"));
        assert!(!ipv6("12:30"));
        assert!(!ipv6("::"));
        assert!(ipv6("::1"));
    }

    #[test]
    fn phones() {
        assert!(phone("+44 20 7946 0958"));
        assert!(!phone("+1 800 000 000"));
        assert!(!phone("+1 23"));
        assert!(phone_national("020 7946 0958"));
        assert!(phone_national("06 12 34 56 78"));
        assert!(!phone_national("750 000 000"));
        assert!(!phone_national("078-05-1120"));
        assert!(!phone_national("777 777 777"));
        assert!(!phone_national("01-02-2024"));
        assert!(phone_digits("4155550172"));
        assert!(phone_digits("02079460958"));
        assert!(!phone_digits("1650000000"));
        assert!(!phone_digits("0049301234567"));
    }

    #[test]
    fn entropy_separates_keys_from_words() {
        assert!(generic_secret("q8Xz2LmP0vR7tK4wN9bY"));
        assert!(!generic_secret("passwordpassword"));
        assert!(!generic_secret("aaaaaaaaaaaaaaaa1"));
    }
}
