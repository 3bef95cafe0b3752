//! The built-in detectors: a pattern per format, with its validator and context words.

use super::validate;

/// One built-in detector.
pub(crate) struct PatternSpec {
    pub entity: &'static str,
    /// Matched against the scanner's normalised view of the text (`normal.rs`): digits are
    /// ASCII, spaces `' '`, dashes `'-'`, so the patterns name ASCII only (`[0-9]`, not the
    /// Unicode-wide `\d`).
    pub pattern: &'static str,
    /// Score of a match without context words.
    pub score: f32,
    /// Rejects look-alikes (checksums, number ranges, parsers).
    pub validate: Option<fn(&str) -> bool>,
    /// Words shortly before the match that raise the score.
    pub context: &'static [&'static str],
    /// Words of which one must precede the match, as a whole word within the context window,
    /// for it to be reported at all (empty: none needed).
    pub cue: &'static [&'static str],
    /// The capture group that is the value (0: the whole match).
    pub group: usize,
    /// What the scanner's `RegexSet` looks for instead of `pattern`, when given: a cheaper
    /// pattern that matches wherever `pattern` does. (The set's lazy DFA holds every pattern
    /// at once; a pattern with large Unicode classes makes each of its states slow to build
    /// and multiplies them.)
    pub trigger: Option<&'static str>,
}

/// A secret with a known shape: the pattern alone identifies it.
const fn secret(pattern: &'static str) -> PatternSpec {
    PatternSpec {
        entity: "SECRET",
        pattern,
        score: 1.0,
        validate: None,
        context: &[],
        cue: &[],
        group: 0,
        trigger: None,
    }
}

/// The keywords a credential follows: in English, as code and configuration spell them, and
/// the word for password in the languages of the supported locales (a macro, so that the
/// patterns that name them are literals).
macro_rules! credential_words {
    () => {
        concat!(
            r"api[ _-]?key|access[ _-]?key|secret(?:[ _.-]?(?:access[ _.-]?)?key)?(?:[_.-]?base)?",
            r"|token|passw(?:or)?d|[_-]pass|(?:^|[^a-z])pass(?:phrase|code)|pwd|auth",
            r"|kennwort|passwort|mot de passe|contrase[ñn]a|senha|wachtwoord|has[łl]o|l[öo]senord",
            r"|salasana",
            // The view folds the letters drawn as Latin ones (`Ь` is `b`) and the long sound
            // mark.
            r"|パスワ[ー-]ド|密码|密碼|비밀번호|п[аa][рp][оo]л[ьb]|كلمة [اl]لمرور|[סo]י[סo]מה",
        )
    };
}

/// A secret after the words that announce one: its capture group 1 is the value, reported
/// when it looks random (`validate::generic_secret`).
const fn keyed_secret(pattern: &'static str) -> PatternSpec {
    PatternSpec {
        entity: "SECRET",
        pattern,
        score: 0.9,
        validate: Some(validate::generic_secret),
        context: &[],
        cue: &[],
        group: 1,
        trigger: None,
    }
}

/// A phone number format, validated by `validate`.
const fn phone(pattern: &'static str, score: f32, validate: fn(&str) -> bool) -> PatternSpec {
    PatternSpec {
        entity: "PHONE_NUMBER",
        pattern,
        score,
        validate: Some(validate),
        context: PHONE_CONTEXT,
        cue: &[],
        group: 0,
        trigger: None,
    }
}

const PHONE_CONTEXT: &[&str] = &[
    "phone", "call", "tel", "mobile", "cell", "fax", "whatsapp", "sms", "handy", "móvil", "movil",
    "portable", "celular", "komórk", "電話", "携帯",
];

/// Words that raise an SSN's score.
const SSN_CONTEXT: &[&str] = &["ssn", "social security", "itin", "taxpayer", "tax id"];

/// Words after which an SSN-shaped number is an SSN even when the issuance rules say no
/// number was issued so (a typo, a test record, a number read back wrong: still someone's).
const SSN_CUES: &[&str] = &[
    "ssn",
    "ssns",
    "social security",
    "tax id",
    "taxid",
    "taxpayer",
    "itin",
    "tin",
];

const SSN_SHAPE: &str = r"[0-9]{3}-[0-9]{2}-[0-9]{4}|[0-9]{3} [0-9]{2} [0-9]{4}";

/// What a cue word makes an SSN: also `536.22.1234` and `536221234`.
const SSN_CUED_SHAPE: &str =
    r"[0-9]{3}-[0-9]{2}-[0-9]{4}|[0-9]{3} [0-9]{2} [0-9]{4}|[0-9]{3}\.[0-9]{2}\.[0-9]{4}|[0-9]{9}";

/// An e-mail address: a local part, `@`, labels each followed by `.`, and a top-level domain.
/// The local part may hold an apostrophe (`mary.o'neil@…`); one that opens it is a quote
/// around the address, not part of it (the scanner leaves it out).
/// Letters of every script count. A local part or a label is a run of either the letters,
/// marks and digits of the scripts written with spaces between words (all but Han, Hiragana,
/// Katakana and Hangul) or of those written without, so that an address inside Japanese or
/// Chinese prose does not take in the words before it; and the top-level domain is a run of
/// one of the two kinds too, so `example.jpまで` ends at `jp`, while letters of scripts
/// written with spaces may mix (`сайт` reads `caйт` in the normalised view, which folds
/// look-alike letters). (Each class is a large automaton: the
/// pattern names each as few times as it can, and never under a counted repetition.)
const EMAIL: &str = concat!(
    r"(?:[[\p{L}\p{M}0-9._%+'-]--[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]]+",
    r"|[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}0-9._%+-]+)",
    "@",
    r"(?:(?:[[\p{L}\p{M}0-9]--[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]]+",
    r"(?:-+[[\p{L}\p{M}0-9]--[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]]+)*",
    r"|[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]+)\.)+",
    r"(?:xn--[A-Za-z0-9-]{1,59}",
    r"|[\p{L}\p{M}--\p{Han}--\p{Hiragana}--\p{Katakana}--\p{Hangul}]{2,}",
    r"|[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]{2,})",
);

/// An e-mail address spelled out to keep it from scrapers, as people write it in tickets and
/// chat: `jane [at] example [dot] com`, `jane(at)example.com`, `jane dot doe AT gmail DOT com`.
/// With a bracketed `at` the dots may be written either way. With a bare ` at ` every dot after
/// it must be spelled (so that `the docs at docs.python.org` is not an address) and the
/// address must end in a common top-level domain (so that `reach me at jane dot doe at gmail
/// dot com` is read from `jane`, not from `me`).
const EMAIL_SPELLED: &str = concat!(
    r"(?i)(?-u:\b)[a-z0-9][a-z0-9_%+-]*",
    r"(?:(?:\s*[\[({<]\s*(?:dot|\.)\s*[\])}>]\s*|\s+dot\s+|\.)[a-z0-9][a-z0-9_%+-]*)*",
    r"(?:\s*[\[({<]\s*(?:at|@)\s*[\])}>]\s*[a-z0-9-]+",
    r"(?:(?:\s*[\[({<]\s*(?:dot|\.)\s*[\])}>]\s*|\s+dot\s+|\.)[a-z0-9-]+)*",
    r"(?:\s*[\[({<]\s*(?:dot|\.)\s*[\])}>]\s*|\s+dot\s+|\.)(?-i:[a-z]{2,24}|[A-Z]{2,24})",
    r"|\s+at\s+(?:[a-z0-9-]+(?:\s*[\[({<]\s*(?:dot|\.)\s*[\])}>]\s*|\s+dot\s+))+",
    r"(?:com|org|net|edu|gov|mil|int|info|biz|io|co|ai|app|dev|me|us|uk|de|fr|es|it|nl|be|ch|at",
    r"|se|no|dk|fi|pl|cz|pt|ie|ru|ua|tr|gr|ro|hu|jp|cn|kr|in|sg|hk|tw|au|nz|ca|mx|br|ar|cl|za|il)",
    r")(?-u:\b)",
);

pub(crate) const BUILTIN: &[PatternSpec] = &[
    PatternSpec {
        entity: "EMAIL_ADDRESS",
        pattern: EMAIL,
        score: 1.0,
        validate: None,
        context: &[],
        cue: &[],
        group: 0,
        trigger: Some(r"[^\s@]@[^\s@]"),
    },
    PatternSpec {
        entity: "EMAIL_ADDRESS",
        pattern: EMAIL_SPELLED,
        score: 0.85,
        validate: Some(validate::spelled_email),
        context: &[],
        cue: &[],
        group: 0,
        trigger: Some(
            r"(?i)[\[({<]\s*(?:at|@)\s*[\])}>]|\sat\s+[a-z0-9-]+\s*(?:[\[({<]\s*(?:dot|\.)|dot)",
        ),
    },
    // International: `+`, a country code, an optional `(0)` and area code in parentheses,
    // then runs of digits, each run taken whole (the validator counts the digits).
    phone(
        r"\+[1-9][0-9]{0,2}(?:[ ./-]?\(0\))?(?:[ ./-]?\([0-9]{1,4}\))?[ ./-]?[0-9]+(?:[ ./-][0-9]{2,})*",
        0.75,
        validate::phone,
    ),
    // International with the `00` prefix: 0049 30 1234567 (ids share the shape).
    phone(
        r"00[1-9][0-9]{0,2}[ -](?:\(0\) ?)?[0-9]+(?:[ -][0-9]{2,})+",
        0.45,
        validate::phone,
    ),
    // North American and other 3-3-4 numbers (Italian mobiles): (415) 555-0132, 415 555 0132,
    // 1-415-555-0132.
    phone(
        r"(?:1[ .-]?)?(?:\([2-9][0-9]{2}\) ?|[2-9][0-9]{2}[ .-])[0-9]{3}[ .-][0-9]{4}",
        0.6,
        validate::phone_national,
    ),
    // National numbers with a trunk 0 (UK, DE, FR, IT, NL, IN, JP, AU, …): an area code of
    // two to five digits, optionally in parentheses, then groups: 020 7946 0958,
    // 030/1234567, 06 12 34 56 78, 03-1234-5678, (02) 9876 5432.
    phone(
        r"(?:\(0[1-9][0-9]{0,3}\) ?|0[1-9][0-9]{1,3}/|0[1-9][0-9]{0,3}[ -])[0-9]{2,}(?:[ -][0-9]{2,})*",
        0.6,
        validate::phone_national,
    ),
    // French numbers in dotted pairs: 01.23.45.67.89.
    phone(r"0[1-9](?:\.[0-9]{2}){4}", 0.6, validate::phone_national),
    // Brazilian: (11) 91234-5678, (11) 3456-7890, 11 91234-5678.
    phone(
        r"\([1-9][0-9]\) ?9?[0-9]{4}-[0-9]{4}|[1-9][0-9] 9[0-9]{4}-[0-9]{4}",
        0.6,
        validate::phone_national,
    ),
    // Indian mobiles: 98765 43210.
    phone(r"[6-9][0-9]{4}[ -][0-9]{5}", 0.6, validate::phone_national),
    // Australian 13/1300/1800 numbers: 1300 123 456.
    phone(
        r"1[38]00[ -][0-9]{3}[ -]?[0-9]{3}",
        0.6,
        validate::phone_national,
    ),
    // Nine digits without a trunk 0 (ES, PL): 912 345 678, 612 34 56 78, 12 345 67 89.
    phone(
        r"[5-9][0-9]{2}[ -][0-9]{3}[ -][0-9]{3}|[5-9][0-9]{2}(?:[ -][0-9]{2}){3}|[1-9][0-9][ -][0-9]{3}[ -][0-9]{2}[ -][0-9]{2}",
        0.5,
        validate::phone_national,
    ),
    // Digits only (4155550172, 0612345678): reported after a context word only.
    phone(r"[0-9]{9,}", 0.4, validate::phone_digits),
    // American Express in its printed 4-6-5 grouping.
    PatternSpec {
        entity: "CREDIT_CARD",
        pattern: r"3[47][0-9]{2}[ .-]{1,2}[0-9]{6}[ .-]{1,2}[0-9]{5}",
        score: 1.0,
        validate: Some(validate::luhn),
        context: &[],
        cue: &[],
        group: 0,
        trigger: None,
    },
    PatternSpec {
        entity: "CREDIT_CARD",
        pattern: r"[2-6][0-9]{3}(?:[ .-]{0,2}[0-9]{4}){2}[ .-]{0,2}[0-9]{1,7}",
        score: 1.0,
        validate: Some(validate::luhn),
        context: &[],
        cue: &[],
        group: 0,
        trigger: None,
    },
    // Maestro, whose numbers may have 12 digits, by the scheme's prefixes (5018, 5020, 5038,
    // 5893, 6304, 6759, 6761–6763), and JCB's 15-digit numbers starting 1800 (2131 starts
    // with a digit the pattern above takes).
    PatternSpec {
        entity: "CREDIT_CARD",
        pattern: r"(?:50(?:18|20|38)|5893|6304|6759|676[1-3])(?:[ .-]{0,2}[0-9]{4}){2}(?:[ .-]{0,2}[0-9]{1,7})?|1800[ .-]{0,2}[0-9]{4}[ .-]{0,2}[0-9]{4}[ .-]{0,2}[0-9]{3}",
        score: 1.0,
        validate: Some(validate::luhn_maestro),
        context: &[],
        cue: &[],
        group: 0,
        trigger: None,
    },
    // Issued SSNs and ITINs.
    PatternSpec {
        entity: "US_SSN",
        pattern: SSN_SHAPE,
        score: 0.85,
        validate: Some(validate::us_ssn),
        context: SSN_CONTEXT,
        cue: &[],
        group: 0,
        trigger: None,
    },
    // Any SSN-shaped number after a cue word, its groups also dotted or not separated.
    PatternSpec {
        entity: "US_SSN",
        pattern: SSN_CUED_SHAPE,
        score: 0.6,
        validate: None,
        context: &[],
        cue: SSN_CUES,
        group: 0,
        trigger: None,
    },
    PatternSpec {
        entity: "IBAN_CODE",
        // Any case (`De89 …`, `GB82 West …`), groups apart by a space, `-` or `.`.
        pattern: r"(?i)[A-Z]{2}[0-9]{2}(?:[ .-]?[A-Z0-9]{4}){2,7}(?:[ .-]?[A-Z0-9]{1,4})?",
        score: 1.0,
        validate: Some(validate::iban),
        context: &[],
        cue: &[],
        group: 0,
        trigger: None,
    },
    PatternSpec {
        entity: "IP_ADDRESS",
        pattern: r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}",
        score: 0.8,
        validate: Some(validate::ipv4),
        context: &[],
        cue: &[],
        group: 0,
        trigger: None,
    },
    PatternSpec {
        entity: "IP_ADDRESS",
        pattern: r"(?i)(?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{0,4}",
        score: 0.8,
        validate: Some(validate::ipv6),
        context: &[],
        cue: &[],
        group: 0,
        trigger: None,
    },
    PatternSpec {
        entity: "URL",
        pattern: r#"(?i)[a-z][a-z0-9+.-]*://[^\s:/@]*:[^\s/@]+@[^\s/?#"'<>`]+(?:[/?#][^\s"'<>`]*)?"#,
        score: 1.0,
        validate: None,
        context: &[],
        cue: &[],
        group: 0,
        trigger: None,
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
    // Anything long and random right after a credential keyword: `password: …`,
    // `SECRET_KEY = '…'`, `'password' => '…'` and `PASSWORD := "…"` (a quoted value:
    // `token => f(token)` and `auth := encode(…)` are code); `pass` only after `_` or `-`
    // (`DB_PASS`, not `bypass` or a test log's `--- PASS: TestParse2`). `secret` may be followed by
    // `key`, `access key` and `base` as configuration and prose write them (`secretKey`,
    // `SECRET_KEY_BASE`, `AWS secret key: …`), `api key` and `access key` may be spelled with
    // a space; the keyword is also read in the languages of the supported locales. After `:`
    // (as prose, YAML and JSON write it) the value may hold `&` or `;` followed by more of it
    // (`Tr0ub4dor&3xyz`); after `=` (as a query string writes it: `page_token=2&limit=50`)
    // it ends there.
    keyed_secret(concat!(
        r#"(?i)(?:"#,
        credential_words!(),
        r#")["']?\s*(?:(?::=|=>)\s*["']|:)\s*["']?([^\s"',;&=][^\s"',;&]*(?:[;&][^\s"',;&=]+)*)"#
    )),
    keyed_secret(concat!(
        r#"(?i)(?:"#,
        credential_words!(),
        r#")["']?\s*=\s*["']?([^\s"',;&]{12,})"#
    )),
    // A password said in words: `my password is Xk9#mP2$vL7qW` (upper- and lower-case
    // letters and a digit, so `the password was reset_by_admin_2024` is not one).
    PatternSpec {
        validate: Some(validate::spoken_password),
        ..keyed_secret(
            r#"(?i)(?-u:\b)(?:passw(?:or)?d|passcode)\s+(?:is|was)\s*:?\s+["']?([^\s"']*[^\s"'.,;:!?)])"#,
        )
    },
    // A bearer token, or credentials after `Authorization: Basic` or `Authorization: Token`
    // (a bare `basic` is a word: `a basic python3.11-slim image`).
    keyed_secret(
        r"(?i)(?-u:\b)(?:bearer|authorization:\s*(?:basic|token))\s+([A-Za-z0-9._~+/=-]{12,})",
    ),
    // A credential given as a command-line option: `--password …`, `-token=…`,
    // `--client-secret …`.
    keyed_secret(
        r#"(?i)(?:^|[\s"'])--?(?:[a-z0-9]+[-_])*(?:api[_-]?key|access[_-]?key|secret|token|passw(?:or)?d|pwd|auth)[ =]["']?([^\s"',;&]{12,})"#,
    ),
];
