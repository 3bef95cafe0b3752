//! The built-in detectors: a pattern per format, with its validator and context words.

use super::validate;

/// One built-in detector.
pub(crate) struct PatternSpec {
    pub entity: &'static str,
    pub pattern: &'static str,
    /// Score of a match without context words.
    pub score: f32,
    /// Rejects look-alikes (checksums, number ranges, parsers).
    pub validate: Option<fn(&str) -> bool>,
    /// Words shortly before the match that raise the score.
    pub context: &'static [&'static str],
    /// The capture group that is the value (0: the whole match).
    pub group: usize,
}

/// A secret with a known shape: the pattern alone identifies it.
const fn secret(pattern: &'static str) -> PatternSpec {
    PatternSpec {
        entity: "SECRET",
        pattern,
        score: 1.0,
        validate: None,
        context: &[],
        group: 0,
    }
}

const PHONE_CONTEXT: &[&str] = &[
    "phone", "call", "tel", "mobile", "cell", "fax", "whatsapp", "sms",
];

pub(crate) const BUILTIN: &[PatternSpec] = &[
    PatternSpec {
        entity: "EMAIL_ADDRESS",
        pattern: r"(?i)[a-z0-9._%+-]+@[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*\.[a-z]{2,24}",
        score: 1.0,
        validate: None,
        context: &[],
        group: 0,
    },
    // International: +CC then 6 to 14 more digits in groups.
    PatternSpec {
        entity: "PHONE_NUMBER",
        pattern: r"\+[1-9]\d{0,2}(?:[ .-]?\(?\d{1,4}\)?)(?:[ .-]?\d{2,4}){2,4}",
        score: 0.75,
        validate: Some(validate::phone),
        context: PHONE_CONTEXT,
        group: 0,
    },
    // North American national format: (415) 555-0132, 415-555-0132, 415.555.0132.
    PatternSpec {
        entity: "PHONE_NUMBER",
        pattern: r"(?:\(\d{3}\)\s?|\d{3}[.-])\d{3}[.-]\d{4}",
        score: 0.6,
        validate: Some(validate::phone),
        context: PHONE_CONTEXT,
        group: 0,
    },
    // European national formats with a trunk 0 and at least two groups: 020 7946 0958,
    // 06 12 34 56 78 (a single group such as 030 1234567 is too ambiguous without context).
    PatternSpec {
        entity: "PHONE_NUMBER",
        pattern: r"0\d{1,4}(?:[ ]\d{2,4}){2,4}",
        score: 0.45,
        validate: Some(validate::phone),
        context: PHONE_CONTEXT,
        group: 0,
    },
    // American Express in its printed 4-6-5 grouping.
    PatternSpec {
        entity: "CREDIT_CARD",
        pattern: r"3[47]\d{2}[ -]\d{6}[ -]\d{5}",
        score: 1.0,
        validate: Some(validate::luhn),
        context: &[],
        group: 0,
    },
    PatternSpec {
        entity: "CREDIT_CARD",
        pattern: r"[2-6]\d{3}(?:[ -]?\d{4}){2}[ -]?\d{1,7}",
        score: 1.0,
        validate: Some(validate::luhn),
        context: &[],
        group: 0,
    },
    PatternSpec {
        entity: "US_SSN",
        pattern: r"\d{3}-\d{2}-\d{4}|\d{3} \d{2} \d{4}",
        score: 0.85,
        validate: Some(validate::us_ssn),
        context: &["ssn", "social security"],
        group: 0,
    },
    PatternSpec {
        entity: "IBAN_CODE",
        pattern: r"[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?",
        score: 1.0,
        validate: Some(validate::iban),
        context: &[],
        group: 0,
    },
    PatternSpec {
        entity: "IP_ADDRESS",
        pattern: r"\d{1,3}(?:\.\d{1,3}){3}",
        score: 0.8,
        validate: Some(validate::ipv4),
        context: &[],
        group: 0,
    },
    PatternSpec {
        entity: "IP_ADDRESS",
        pattern: r"(?i)(?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{0,4}",
        score: 0.8,
        validate: Some(validate::ipv6),
        context: &[],
        group: 0,
    },
    PatternSpec {
        entity: "URL",
        pattern: r#"(?i)[a-z][a-z0-9+.-]*://[^\s:/@]+:[^\s/@]+@[^\s/?#"'<>`]+(?:[/?#][^\s"'<>`]*)?"#,
        score: 1.0,
        validate: None,
        context: &[],
        group: 0,
    },
    // Secrets with a known shape.
    secret(r"sk-ant-[a-z0-9]{2,10}-[A-Za-z0-9_-]{32,}"),
    secret(r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{32,}"),
    secret(r"(?:AKIA|ASIA)[0-9A-Z]{16}"),
    secret(r"gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{60,}"),
    secret(r"glpat-[A-Za-z0-9_-]{20,}"),
    secret(r"xox[abposr]-[A-Za-z0-9-]{10,}"),
    secret(r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{24,}"),
    secret(r"AIza[0-9A-Za-z_-]{35}"),
    secret(r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    secret(r"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z]+ )?PRIVATE KEY-----"),
    // Anything long and random right after a credential keyword.
    PatternSpec {
        entity: "SECRET",
        pattern: r#"(?i)(?:api[_-]?key|access[_-]?key|secret|token|passw(?:or)?d|pwd|auth)["']?\s*[:=]\s*["']?([^\s"',;&]{12,})"#,
        score: 0.9,
        validate: Some(validate::generic_secret),
        context: &[],
        group: 1,
    },
];
