//! The word lists, cues and compiled patterns of the name detectors, built once per process.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use regex::{Regex, RegexBuilder};

use super::DFA_CACHE;

use super::patterns::{
    address_patterns, lower_organization_patterns, mixed_lower_organization_patterns,
    organization_patterns,
};

/// Titles before a name; the span starts after them.
pub(super) const TITLES: &[&str] = &[
    "mr",
    "mrs",
    "ms",
    "miss",
    "mx",
    "dr",
    "prof",
    "sir",
    "madam",
    "herr",
    "frau",
    "mme",
    "mlle",
    "monsieur",
    "madame",
    "sr",
    "sra",
    "srta",
    "señor",
    "señora",
    "don",
    "doña",
    "sig",
    "signor",
    "signora",
    "dott",
    "pan",
    "pani",
    "panie",
    "panu",
    "pana",
    "dhr",
    "mevr",
    "fru",
    "senhor",
    "senhora",
    "herrn",
    "señorita",
    "dott",
    "signorina",
    "mademoiselle",
    "meneer",
    "mevrouw",
    "sayın",
    "bay",
    "bayan",
    "shri",
    "smt",
    "srimati",
    "senhorita",
    "dona",
    "fröken",
];

/// Lower-case words that join names: `Jan de Vries`, `Ludwig van Beethoven`.
pub(super) const PARTICLES: &[&str] = &[
    "de", "van", "der", "den", "von", "zu", "da", "di", "del", "della", "dos", "das", "du", "le",
    "la", "ten", "ter", "af", "y", "e", "do",
];

/// Lower-case words that end a place's name: `Jönköpings län`.
pub(super) const PLACE_TAILS: &[&str] =
    &["län", "kommun", "county", "province", "region", "district"];

/// Cues before a person's name. Strong cues take any capitalised word that is not common;
/// weak ones only a listed name.
pub(super) const PERSON_STRONG: &[&str] = &[
    "my name is",
    "name is",
    "name's",
    "dear",
    "hi",
    "hello",
    "hey",
    "thanks",
    "thank you",
    "regards",
    "kind regards",
    "best regards",
    "cheers",
    "sincerely",
    "best",
    "signed",
    "spoke with",
    "spoke to",
    "speaking with",
    "talked to",
    "talking to",
    "assigned to",
    "ask for",
    "attn",
    "attention",
    "colleague",
    "my colleague",
    "coworker",
    "co-worker",
    "teammate",
    "my manager",
    "my boss",
    "my wife",
    "my husband",
    "my partner",
    "my friend",
    "my son",
    "my daughter",
    "my mother",
    "my father",
    "talked with",
    "chatted with",
    "from:",
    "to:",
    "contact",
    "contact person",
    "named",
    "called",
    "caller",
    "customer",
    "client",
    "requester",
    "reporter",
    "patient",
    "name=",
    "name:",
    "customer=",
    "user=",
    "assignee=",
    "owner=",
    // The same in the other languages of the lists.
    "mein name ist",
    "ich heiße",
    "hier ist",
    "hallo",
    "sehr geehrte",
    "sehr geehrter",
    "liebe",
    "lieber",
    "mit freundlichen grüßen",
    "viele grüße",
    "gruß",
    "je m'appelle",
    "moi c'est",
    "bonjour",
    "cher",
    "chère",
    "cordialement",
    "me llamo",
    "mi nombre es",
    "hola",
    "estimado",
    "estimada",
    "saludos",
    "mi chiamo",
    "buongiorno",
    "ciao",
    "gentile",
    "cordiali saluti",
    "mijn naam is",
    "hoi",
    "geachte",
    "beste",
    "met vriendelijke groet",
    "groet",
    "nazywam się",
    "cześć",
    "dzień dobry",
    "szanowny",
    "szanowna",
    "pozdrawiam",
    "chamo-me",
    "o meu nome é",
    "olá",
    "prezado",
    "prezada",
    "atenciosamente",
    "jag heter",
    "hej",
    "med vänliga hälsningar",
    "hälsningar",
    "vänliga hälsningar",
    "mvh",
    "mfg",
    "lg",
    "groeten",
    "pozdrowienia",
    "saludos cordiales",
    "un saluto",
    "bien à vous",
];
pub(super) const PERSON_WEAK: &[&str] = &[
    "from", "with", "for", "by", "and", "to", "per", "visit", "see",
];
/// Verbs whose object is most often a person (`tell dan`, `ask Hemang Mander`): in text
/// without capitals any word that is not common after them, else as weak cues.
pub(super) const PERSON_VERBS: &[&str] = &[
    "ask", "tell", "told", "met", "meet", "call", "email", "remind", "ping", "cc", "loop in",
    "message", "text", "invite", "thank",
];
/// Cues of a speaker naming themselves: a listed name, or two capitalised words.
pub(super) const PERSON_INTRO: &[&str] = &[
    "i am", "i'm", "im", "this is", "it's", "its", "it is", "ich bin", "je suis", "soy", "sono",
    "ik ben", "jestem", "sou", "jag är",
];

/// Cues before a place.
pub(super) const LOCATION_CUES: &[&str] = &[
    "live in",
    "lives in",
    "living in",
    "lived in",
    "based in",
    "located in",
    "moved to",
    "moving to",
    "relocated to",
    "relocating to",
    "born in",
    "ship to",
    "shipped to",
    "shipping to",
    "deliver to",
    "delivered to",
    "delivery to",
    "travel to",
    "flying to",
    "office in",
    "offices in",
    "branch in",
    "store in",
    "city of",
    "town of",
    "address:",
    "city=",
    "country=",
    "city:",
    "country:",
    "region:",
    "state:",
    "province:",
    "county:",
    "wohne in",
    "adresse",
    "adresse lautet",
    "j'habite",
    "j'habite à",
    "vivo en",
    "dirección",
    "vivo a",
    "abito a",
    "indirizzo",
    "woon in",
    "adres",
    "mieszkam w",
    "moro em",
    "endereço",
    "bor i",
    "adress",
];

/// Words before a place that also come before other things (`in Excel`): capitalised words
/// after them are a place when nothing else claims them.
pub(super) const LOCATION_WEAK: &[&str] = &[
    "in", "near", "to", "from", "nach", "aus", "à", "em", "från", "till", "w", "uit", "desde",
    "depuis", "vanuit", "z",
];

/// Cues before an organisation.
pub(super) const ORGANIZATION_CUES: &[&str] = &[
    "work at",
    "works at",
    "working at",
    "worked at",
    "work for",
    "works for",
    "working for",
    "worked for",
    "employed by",
    "employer",
    "employer is",
    "on behalf of",
    "representing",
    "partnered with",
    "vendor",
    "supplier",
    "company is",
    "company",
    "company=",
    "org=",
    "arbeite bei",
    "travaille chez",
    "trabajo en",
    "lavoro presso",
    "lavoro da",
    "werk bij",
    "pracuję w",
    "trabalho na",
    "trabalho em",
    "jobbar på",
    "arbetar på",
];

/// The kind of value a JSON key announces, from the words in its name (`hq_city`,
/// `customer_name`, `employer`); `None` for keys that name other things (`file_name`).
pub(super) fn key_cue(key: &str) -> Option<Cue> {
    let key = key.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| key.contains(w));
    if has(&[
        "company",
        "employer",
        "organization",
        "organisation",
        "vendor",
        "supplier",
        "firm",
        "business",
    ]) || key == "org"
        || key.ends_with("_org")
        || key == "account_name"
        || key == "account"
    {
        return Some(Cue::Organization);
    }
    if has(&[
        "city",
        "country",
        "address",
        "location",
        "region",
        "town",
        "street",
        "province",
        "county",
        "destination",
        "deliver",
        "ship_to",
    ]) || matches!(key.as_str(), "state" | "place" | "where" | "origin")
    {
        return Some(Cue::Location);
    }
    let other = has(&[
        "file", "product", "model", "tool", "plan", "type", "host", "domain", "tag", "status",
        "event", "table", "column", "app", "service", "bucket", "key", "project", "team",
        "channel", "group", "queue", "topic", "label", "field", "repo", "branch", "function",
    ]);
    if !other
        && has(&[
            "name",
            "customer",
            "contact",
            "assignee",
            "owner",
            "requester",
            "agent",
            "author",
            "recipient",
            "sender",
            "attendee",
            "participant",
            "member",
            "signed",
            "created_by",
            "approver",
            "manager",
            "person",
            "employee",
            "patient",
            "client",
            "user",
            "guest",
            "passenger",
            "buyer",
            "seller",
            "reviewer",
            "surname",
            "forename",
        ])
        || matches!(key.as_str(), "given" | "family")
    {
        return Some(Cue::PersonStrong);
    }
    None
}

/// The lists, read once per process.
pub(crate) struct Lexicon {
    /// What the lists say of each folded word (given names also with their diacritics:
    /// `inês`): one lookup a word.
    pub(super) words: HashMap<String, Entry, WordHash>,
    pub(super) places: AhoCorasick,
    /// The places in lower case, for lower-case text.
    pub(super) places_in_lower: AhoCorasick,
    /// Cues, each with what it announces.
    pub(super) cues: AhoCorasick,
    pub(super) cue_kinds: Vec<Vec<Cue>>,
    pub(super) addresses: Vec<Regex>,
    /// A JSON key and its colon.
    pub(super) json_key: Regex,
    /// `North Craig`, `Port Talbot`: a compass word or a settlement word before a name.
    pub(super) prefixed_places: Regex,
    pub(super) organizations: Vec<Regex>,
    pub(super) lower_organizations: Vec<Regex>,
    /// Lower-case organisations in text with capitals.
    pub(super) mixed_lower_organizations: Vec<Regex>,
}

/// What the lists say of one folded word.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Entry {
    /// The given name's place in its list (most frequent first), or `u32::MAX`.
    pub(super) given: u32,
    pub(super) surname: bool,
    pub(super) common: bool,
    pub(super) title: bool,
    /// A place of one word (`leeds`, `gießen` folded).
    pub(super) place: bool,
    /// The first word of a listed place (`new` of `New York`).
    pub(super) place_start: bool,
}

impl Entry {
    /// Whether any list holds the word.
    pub(super) fn listed(&self) -> bool {
        self.given != u32::MAX
            || self.surname
            || self.common
            || self.title
            || self.place
            || self.place_start
    }

    const NONE: Entry = Entry {
        given: u32::MAX,
        surname: false,
        common: false,
        title: false,
        place: false,
        place_start: false,
    };
}

/// FxHash's multiply and rotate, eight bytes at a time: the lists are fixed and their words
/// short, and a word is looked up for most capitalised words of a text.
#[derive(Default, Clone, Copy)]
pub(super) struct WordHasher(u64);

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(K);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word) ^ (rest.len() as u64))
                .wrapping_mul(K);
        }
    }

    fn write_u8(&mut self, byte: u8) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(byte)).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub(super) type WordHash = BuildHasherDefault<WordHasher>;

impl Lexicon {
    /// What the lists say of `folded` (a word folded by `words::fold`).
    pub(super) fn entry(&self, folded: &str) -> Entry {
        self.words.get(folded).copied().unwrap_or(Entry::NONE)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cue {
    PersonStrong,
    PersonWeak,
    PersonVerb,
    PersonIntro,
    Location,
    LocationWeak,
    Organization,
}

pub(super) fn list(text: &'static str) -> impl Iterator<Item = &'static str> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
}

/// The lists and patterns; an error is a pattern that does not compile.
pub(super) fn build() -> Result<Lexicon, String> {
    let places: Vec<&str> = list(include_str!("../../data/names/places.txt")).collect();
    // One pattern per cue; a cue in two lists (`from`: a person, a place) has both kinds.
    let mut cue_words: Vec<String> = Vec::new();
    let mut cue_kinds: Vec<Vec<Cue>> = Vec::new();
    for (cues, kind) in [
        (PERSON_STRONG, Cue::PersonStrong),
        (PERSON_WEAK, Cue::PersonWeak),
        (PERSON_VERBS, Cue::PersonVerb),
        (PERSON_INTRO, Cue::PersonIntro),
        (LOCATION_CUES, Cue::Location),
        (LOCATION_WEAK, Cue::LocationWeak),
        (ORGANIZATION_CUES, Cue::Organization),
    ] {
        for cue in cues {
            match cue_words.iter().position(|w| w == cue) {
                Some(at) => cue_kinds[at].push(kind),
                None => {
                    cue_words.push((*cue).to_owned());
                    cue_kinds.push(vec![kind]);
                }
            }
        }
    }
    let compile = |patterns: Vec<String>| -> Result<Vec<Regex>, String> {
        patterns
            .iter()
            .map(|p| {
                RegexBuilder::new(p)
                    .dfa_size_limit(DFA_CACHE)
                    .build()
                    .map_err(|e| format!("built-in name pattern: {e}"))
            })
            .collect()
    };
    let automaton = |what: &str, error: aho_corasick::BuildError| format!("{what}: {error}");
    let mut words: HashMap<String, Entry, WordHash> = HashMap::default();
    let mut folded = String::new();
    for (rank, name) in list(include_str!("../../data/names/given.txt")).enumerate() {
        // Listed as written (`inês`) and folded (`ines`); the more frequent place wins.
        super::words::fold(name, &mut folded);
        for key in [name, folded.as_str()] {
            let entry = words.entry(key.to_owned()).or_insert(Entry::NONE);
            entry.given = entry.given.min(rank as u32);
        }
    }
    for name in list(include_str!("../../data/names/surnames.txt")) {
        words.entry(name.to_owned()).or_insert(Entry::NONE).surname = true;
    }
    for word in list(include_str!("../../data/names/common.txt")) {
        words.entry(word.to_owned()).or_insert(Entry::NONE).common = true;
    }
    for title in TITLES {
        super::words::fold(title, &mut folded);
        words.entry(folded.clone()).or_insert(Entry::NONE).title = true;
    }
    for place in &places {
        let first = place.split([' ', '-']).next().unwrap_or(place);
        super::words::fold(first, &mut folded);
        let entry = words.entry(folded.clone()).or_insert(Entry::NONE);
        entry.place_start = true;
        entry.place |= first.len() == place.len();
    }
    Ok(Lexicon {
        words,
        places_in_lower: AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .build(places.iter().map(|p| p.to_lowercase()))
            .map_err(|e| automaton("place list", e))?,
        places: AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .start_kind(aho_corasick::StartKind::Both)
            .build(&places)
            .map_err(|e| automaton("place list", e))?,
        cues: AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::LeftmostLongest)
            .kind(Some(aho_corasick::AhoCorasickKind::DFA))
            .build(&cue_words)
            .map_err(|e| automaton("cue list", e))?,
        cue_kinds,
        addresses: compile(address_patterns())?,
        // A JSON key and its colon, plain or inside JSON carried in a string (`\"key\":`).
        json_key: Regex::new(r#"\\?"[A-Za-z][A-Za-z0-9_]{0,40}\\?"[ \t]*:"#)
            .map_err(|e| format!("built-in name pattern: {e}"))?,
        prefixed_places: Regex::new(
            r"(?-u:\b)(?:North|South|East|West|New|Port|Lake|Fort|Mount|Saint|San|Santa|Bad)[ ][\p{Lu}&&\p{Latin}][\p{Ll}&&\p{Latin}]+(?:[ -][\p{Lu}&&\p{Latin}][\p{Ll}&&\p{Latin}]+)?(?-u:\b)",
        )
        .map_err(|e| format!("built-in name pattern: {e}"))?,
        organizations: compile(organization_patterns())?,
        lower_organizations: compile(lower_organization_patterns())?,
        mixed_lower_organizations: compile(mixed_lower_organization_patterns())?,
    })
}

/// Weekdays and months in the languages of the lists, which are never names here.
pub(super) fn is_calendar(word: &str) -> bool {
    if word.len() < 3 || word.len() > 11 {
        return false;
    }
    let mut lower = [0u8; 11];
    if word.is_ascii() {
        for (to, from) in lower.iter_mut().zip(word.bytes()) {
            *to = from.to_ascii_lowercase();
        }
        let lower = std::str::from_utf8(&lower[..word.len()]).unwrap_or_default();
        return CALENDAR.contains(lower);
    }
    CALENDAR.contains(word.to_lowercase().as_str())
}

static CALENDAR: LazyLock<std::collections::HashSet<&'static str, WordHash>> =
    LazyLock::new(|| CALENDAR_WORDS.iter().copied().collect());

const CALENDAR_WORDS: &[&str] = &[
    // Months' abbreviations (`Jan` is a given name too: see `tagger::month_by_number`).
    "feb",
    "mar",
    "apr",
    "jun",
    "jul",
    "aug",
    "sep",
    "sept",
    "oct",
    "nov",
    "dec",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "montag",
    "dienstag",
    "mittwoch",
    "donnerstag",
    "freitag",
    "samstag",
    "sonntag",
    "lundi",
    "mardi",
    "mercredi",
    "jeudi",
    "vendredi",
    "samedi",
    "dimanche",
    "lunes",
    "martes",
    "miércoles",
    "jueves",
    "viernes",
    "sábado",
    "domingo",
    "lunedì",
    "martedì",
    "mercoledì",
    "giovedì",
    "venerdì",
    "sabato",
    "domenica",
    "januar",
    "februar",
    "märz",
    "juni",
    "juli",
    "oktober",
    "dezember",
    "janvier",
    "février",
    "mars",
    "avril",
    "mai",
    "juin",
    "juillet",
    "août",
    "enero",
    "febrero",
    "marzo",
    "abril",
    "mayo",
    "junio",
    "julio",
    "agosto",
    "gennaio",
    "aprile",
    "maggio",
    "giugno",
    "luglio",
];
