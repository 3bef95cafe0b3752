//! `masking.toml`: what a policy directory says about detection (threshold, context words,
//! custom dictionary and regex entities) and about masking (an action per entity type, for
//! each destination: what is stored, what goes to external providers, what goes to internal
//! ones).
//!
//! The file is parsed into raw structs that reject unknown fields, then validated into
//! [`MaskingConfig`]; every problem is reported with its line and column. A directory
//! without the file gets [`MaskingConfig::default`]: built-in detectors, everything tokenized
//! in storage and towards external providers, nothing changed towards internal ones.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::error::{Error, Result};
use crate::mask::{Action, MaskPolicy};
use atdp_detect::{ContextWords, CustomEntity, CustomMatch, DetectionConfig, builtin_entities};

/// The file's name inside a policy directory.
pub const MASKING_FILE: &str = "masking.toml";

/// Longest custom entity name (placeholders `<NAME_…>` must stay short).
const MAX_ENTITY_NAME: usize = 64;

/// Where a text goes, which decides the masking actions that apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Destination {
    /// The lake (trajectories, logs).
    Storage,
    /// An upstream whose trust level is `external` (a model provider outside the company).
    External,
    /// An upstream whose trust level is `internal`.
    Internal,
}

/// The largest `[detection] cache_mib`.
const MAX_CACHE_MIB: u32 = 4096;

/// Validated `masking.toml`.
#[derive(Debug, Clone, PartialEq)]
pub struct MaskingConfig {
    /// Detection settings.
    pub detection: DetectionConfig,
    /// Actions for what is stored in the lake.
    pub storage: MaskPolicy,
    /// Actions for what is sent to external upstreams.
    pub external: MaskPolicy,
    /// Actions for what is sent to internal upstreams.
    pub internal: MaskPolicy,
}

impl MaskingConfig {
    /// Every entity type the detectors can report: the built-in ones and the custom ones.
    pub fn entity_types(&self) -> Vec<&str> {
        let mut types = atdp_detect::builtin_entities();
        types.extend(self.detection.custom.iter().map(|c| c.name.as_str()));
        types
    }
}

impl Default for MaskingConfig {
    fn default() -> Self {
        MaskingConfig {
            detection: DetectionConfig::default(),
            storage: MaskPolicy::all(Action::Tokenize),
            external: MaskPolicy::all(Action::Tokenize),
            internal: MaskPolicy::all(Action::Allow),
        }
    }
}

/// `masking.toml` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    /// Detection settings.
    #[serde(default)]
    detection: RawDetection,
    /// Actions per destination.
    #[serde(default)]
    masking: RawMasking,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDetection {
    /// Spans scoring below this are dropped (0 to 1; default 0.5).
    threshold: Option<Spanned<f32>>,
    /// Thresholds of their own, by entity type (0 to 1).
    #[serde(default)]
    thresholds: BTreeMap<Spanned<String>, Spanned<f32>>,
    /// Built-in entity types not looked for.
    #[serde(default)]
    disabled: Vec<Spanned<String>>,
    /// Context words per entity type.
    #[serde(default)]
    context: BTreeMap<Spanned<String>, RawContext>,
    /// Custom entities.
    #[serde(default)]
    entity: Vec<RawEntity>,
    /// MiB of recently scanned texts kept by tenant (default 16; 0: none).
    cache_mib: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawContext {
    /// Words that raise the score.
    #[serde(default)]
    raise: Vec<String>,
    /// Words that lower the score.
    #[serde(default)]
    lower: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntity {
    /// Entity type name, upper case.
    name: Spanned<String>,
    /// A dictionary of words or phrases (give this or `pattern`).
    words: Option<Spanned<Vec<String>>>,
    /// Whether dictionary words match case-sensitively (default false).
    #[serde(default)]
    case_sensitive: bool,
    /// A regular expression (give this or `words`).
    pattern: Option<Spanned<String>>,
    /// Score without context (default 0.8).
    score: Option<Spanned<f32>>,
    /// Words that raise the score.
    #[serde(default)]
    raise: Vec<String>,
    /// Words that lower the score.
    #[serde(default)]
    lower: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMasking {
    /// What is stored in the lake.
    storage: Option<RawActions>,
    /// What goes to external upstreams.
    external: Option<RawActions>,
    /// What goes to internal upstreams.
    internal: Option<RawActions>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawActions {
    /// For entity types not listed.
    default: Action,
    /// Per entity type.
    #[serde(default)]
    entities: BTreeMap<Spanned<String>, Action>,
}

/// `(line, column)`, both from 1, of byte `offset` in `source`.
pub(crate) fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let before = source.get(..offset).unwrap_or(source);
    let line = before.matches('\n').count() + 1;
    let column = before
        .rfind('\n')
        .map_or(before.len(), |n| before.len() - n - 1)
        + 1;
    (line, column)
}

/// Collects problems, each prefixed with the file name and the position it is about.
struct Problems<'a> {
    source: &'a str,
    found: Vec<String>,
}

impl Problems<'_> {
    /// A problem of the file as a whole (two tables that disagree).
    fn whole(&mut self, message: String) {
        self.found.push(format!("{MASKING_FILE}: {message}"));
    }

    fn at(&mut self, offset: usize, message: String) {
        let (line, column) = line_col(self.source, offset);
        self.found
            .push(format!("{MASKING_FILE}:{line}:{column}: {message}"));
    }
}

fn lower_case(words: Vec<String>) -> Vec<String> {
    words.into_iter().map(|w| w.to_lowercase()).collect()
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_uppercase())
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= MAX_ENTITY_NAME
}

impl MaskingConfig {
    /// Loads `masking.toml` from a policy directory; a directory without one gets the
    /// defaults.
    pub fn load(dir: &Path) -> Result<MaskingConfig> {
        if !dir.is_dir() {
            return Err(Error::Policy(format!(
                "policy directory {} does not exist",
                dir.display()
            )));
        }
        let path = dir.join(MASKING_FILE);
        match std::fs::read_to_string(&path) {
            Ok(source) => MaskingConfig::from_toml(&source)
                .map_err(|problems| Error::Policy(problems.join("; "))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(MaskingConfig::default()),
            Err(e) => Err(Error::Policy(format!(
                "cannot read {}: {e}",
                path.display()
            ))),
        }
    }

    /// Parses and validates the file's text; on failure, every problem found, each with
    /// its line and column.
    pub fn from_toml(source: &str) -> std::result::Result<MaskingConfig, Vec<String>> {
        let mut problems = Problems {
            source,
            found: Vec::new(),
        };
        let raw: RawFile = match toml::from_str(source) {
            Ok(raw) => raw,
            Err(error) => {
                let message = error.message().to_owned();
                match error.span() {
                    Some(span) => problems.at(span.start, message),
                    None => problems.found.push(format!("{MASKING_FILE}: {message}")),
                }
                return Err(problems.found);
            }
        };
        let config = validate(raw, &mut problems);
        if problems.found.is_empty() {
            Ok(config)
        } else {
            Err(problems.found)
        }
    }

    /// The actions that apply to text going to `destination`.
    pub fn policy(&self, destination: Destination) -> &MaskPolicy {
        match destination {
            Destination::Storage => &self.storage,
            Destination::External => &self.external,
            Destination::Internal => &self.internal,
        }
    }
}

fn score_in_range(problems: &mut Problems<'_>, score: &Spanned<f32>, what: &str) -> f32 {
    let value = *score.get_ref();
    if !(0.0..=1.0).contains(&value) {
        problems.at(
            score.span().start,
            format!("{what} must be between 0 and 1, not {value}"),
        );
    }
    value
}

fn validate(raw: RawFile, problems: &mut Problems<'_>) -> MaskingConfig {
    let defaults = DetectionConfig::default();
    let threshold = raw
        .detection
        .threshold
        .as_ref()
        .map_or(defaults.threshold, |t| {
            score_in_range(problems, t, "threshold")
        });
    let cache_bytes = match &raw.detection.cache_mib {
        None => defaults.cache_bytes,
        Some(mib) => match u32::try_from(*mib.get_ref()) {
            Ok(value) if value <= MAX_CACHE_MIB => (value as usize) << 20,
            _ => {
                problems.at(
                    mib.span().start,
                    format!("cache_mib must be 0 to {MAX_CACHE_MIB}"),
                );
                defaults.cache_bytes
            }
        },
    };
    let mut custom: Vec<CustomEntity> = Vec::new();
    let builtin = builtin_entities();
    for entity in raw.detection.entity {
        let name = entity.name.get_ref().clone();
        let at = entity.name.span().start;
        if !valid_name(&name) {
            problems.at(
                at,
                format!(
                    "entity name {name:?} must be upper-case letters, digits and _ (at most {MAX_ENTITY_NAME}), starting with a letter"
                ),
            );
        } else if builtin.contains(&name.as_str()) || custom.iter().any(|c| c.name == name) {
            problems.at(
                at,
                format!("entity {name} is declared twice (or is built in)"),
            );
        }
        let matcher = match (entity.words, entity.pattern) {
            (Some(words), None) => {
                let list = words.get_ref();
                if list.is_empty() || list.iter().any(|w| w.trim().is_empty()) {
                    problems.at(
                        words.span().start,
                        format!("entity {name}: words must be a non-empty list of non-empty words"),
                    );
                }
                CustomMatch::Words {
                    words: words.into_inner(),
                    case_sensitive: entity.case_sensitive,
                }
            }
            (None, Some(pattern)) => {
                if let Err(error) = regex::Regex::new(pattern.get_ref()) {
                    let first = error.to_string();
                    let last = first.lines().last().unwrap_or_default().trim().to_owned();
                    problems.at(
                        pattern.span().start,
                        format!("entity {name}: pattern does not compile: {last}"),
                    );
                }
                CustomMatch::Pattern(pattern.into_inner())
            }
            _ => {
                problems.at(
                    at,
                    format!("entity {name}: give exactly one of `words` and `pattern`"),
                );
                continue;
            }
        };
        let score = entity.score.as_ref().map_or(0.8, |s| {
            score_in_range(problems, s, &format!("entity {name}: score"))
        });
        custom.push(CustomEntity {
            name,
            matcher,
            score,
            context: ContextWords {
                raise: lower_case(entity.raise),
                lower: lower_case(entity.lower),
            },
        });
    }
    let known = |name: &str| builtin.contains(&name) || custom.iter().any(|c| c.name == name);
    let mut context = HashMap::new();
    for (name, words) in raw.detection.context {
        if !known(name.get_ref()) {
            problems.at(
                name.span().start,
                format!("context for unknown entity type {}", name.get_ref()),
            );
        }
        context.insert(
            name.into_inner(),
            ContextWords {
                raise: lower_case(words.raise),
                lower: lower_case(words.lower),
            },
        );
    }
    let mut disabled = Vec::new();
    for name in raw.detection.disabled {
        if !builtin.contains(&name.get_ref().as_str()) {
            problems.at(
                name.span().start,
                format!("disabled entity type {} is not built in", name.get_ref()),
            );
        }
        disabled.push(name.into_inner());
    }
    let mut thresholds = HashMap::new();
    for (name, score) in raw.detection.thresholds {
        if !known(name.get_ref()) {
            problems.at(
                name.span().start,
                format!("threshold for unknown entity type {}", name.get_ref()),
            );
        }
        let score = score_in_range(problems, &score, "a threshold");
        thresholds.insert(name.into_inner(), score);
    }
    let defaults = MaskingConfig::default();
    let mut actions = |raw: Option<RawActions>, default: MaskPolicy| -> MaskPolicy {
        let Some(raw) = raw else { return default };
        let mut per_entity = HashMap::new();
        for (name, action) in raw.entities {
            if !known(name.get_ref()) {
                problems.at(
                    name.span().start,
                    format!("action for unknown entity type {}", name.get_ref()),
                );
            }
            per_entity.insert(name.into_inner(), action);
        }
        MaskPolicy {
            default: raw.default,
            per_entity,
        }
    };
    let storage = actions(raw.masking.storage, defaults.storage);
    let external = actions(raw.masking.external, defaults.external);
    let internal = actions(raw.masking.internal, defaults.internal);
    // What is masked on the way to an upstream is masked in storage too: the lake must not
    // hold in the clear what the policy keeps even from a provider (and a value restored into
    // a reply is masked in the stored reply by the storage action of its type).
    let mut types: Vec<&str> = builtin.clone();
    types.extend(custom.iter().map(|c| c.name.as_str()));
    for entity in types {
        if storage.action(entity) != Action::Allow {
            continue;
        }
        for (name, upstream) in [("external", &external), ("internal", &internal)] {
            let action = upstream.action(entity);
            if action != Action::Allow {
                problems.whole(format!(
                        "[masking.storage] leaves {entity} as it is but [masking.{name}] says {}: what is masked on the way to a provider must be masked in storage too",
                        action.name()
                    ));
            }
        }
    }
    MaskingConfig {
        detection: DetectionConfig {
            threshold,
            thresholds,
            disabled,
            context,
            custom,
            cache_bytes,
        },
        storage,
        external,
        internal,
    }
}

#[cfg(test)]
mod tests {
    use atdp_detect::Scanner;

    use super::*;

    const EXAMPLE: &str = r#"
[detection]
threshold = 0.6

[detection.context.PHONE_NUMBER]
raise = ["Hotline"]
lower = ["order"]

[[detection.entity]]
name = "PROJECT_CODENAME"
words = ["Bluebird", "Night Jar"]

[[detection.entity]]
name = "CUSTOMER_ID"
pattern = 'CUST-\d{6}'
score = 0.4
raise = ["customer"]

[masking.storage]
default = "tokenize"
entities = { SECRET = "redact" }

[masking.external]
default = "allow"
entities = { US_SSN = "tokenize", CUSTOMER_ID = "hash" }
"#;

    #[test]
    fn example_validates() {
        let config = MaskingConfig::from_toml(EXAMPLE).unwrap();
        assert_eq!(config.detection.threshold, 0.6);
        assert_eq!(config.detection.custom.len(), 2);
        assert_eq!(config.detection.custom[1].score, 0.4);
        assert_eq!(
            config.detection.context["PHONE_NUMBER"].raise,
            vec!["hotline".to_owned()]
        );
        assert_eq!(config.storage.per_entity["SECRET"], Action::Redact);
        assert_eq!(config.external.default, Action::Allow);
        assert_eq!(config.external.per_entity["CUSTOMER_ID"], Action::Hash);
        // Not given: the default for that destination.
        assert_eq!(config.internal, MaskPolicy::all(Action::Allow));
        assert_eq!(config.policy(Destination::External), &config.external);
    }

    #[test]
    fn problems_name_their_line() {
        let source = "[detection]\nthreshold = 2.0\n\n[[detection.entity]]\nname = \"bad name\"\npattern = 'a('\n\n[masking.external]\ndefault = \"allow\"\nentities = { US_SNN = \"redact\" }\n";
        let problems = MaskingConfig::from_toml(source).unwrap_err();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(
            problems[0].starts_with("masking.toml:2:13: threshold"),
            "{problems:?}"
        );
        assert!(
            problems[1].starts_with("masking.toml:5:8: entity name"),
            "{problems:?}"
        );
        assert!(
            problems[2].starts_with("masking.toml:6:11: entity bad name: pattern"),
            "{problems:?}"
        );
        assert!(
            problems[3].starts_with("masking.toml:10:14: action for unknown entity type US_SNN"),
            "{problems:?}"
        );
    }

    #[test]
    fn the_scan_cache_is_sized_in_mib_and_can_be_off() {
        let config = MaskingConfig::from_toml("[detection]\ncache_mib = 0\n").unwrap();
        assert_eq!(config.detection.cache_bytes, 0);
        let config = MaskingConfig::from_toml("[detection]\ncache_mib = 64\n").unwrap();
        assert_eq!(config.detection.cache_bytes, 64 << 20);
        assert_eq!(
            MaskingConfig::from_toml("").unwrap().detection.cache_bytes,
            16 << 20
        );
        for bad in ["-1", "5000"] {
            let problems =
                MaskingConfig::from_toml(&format!("[detection]\ncache_mib = {bad}\n")).unwrap_err();
            assert!(
                problems[0].starts_with("masking.toml:2:13: cache_mib must be 0 to 4096"),
                "{problems:?}"
            );
        }
    }

    #[test]
    fn syntax_and_unknown_fields_are_located() {
        let problems = MaskingConfig::from_toml("[detection]\nthreshhold = 0.5\n").unwrap_err();
        assert!(
            problems[0].starts_with("masking.toml:2:1: unknown field `threshhold`"),
            "{problems:?}"
        );
        let problems =
            MaskingConfig::from_toml("[masking.storage]\ndefault = \"scramble\"\n").unwrap_err();
        assert!(
            problems[0].starts_with("masking.toml:2:11:"),
            "{problems:?}"
        );
        let problems =
            MaskingConfig::from_toml("[[detection.entity]]\nname = \"X\"\n").unwrap_err();
        assert!(
            problems[0].contains("exactly one of `words` and `pattern`"),
            "{problems:?}"
        );
    }

    #[test]
    fn duplicate_and_builtin_names_are_refused() {
        let source = "[[detection.entity]]\nname = \"EMAIL_ADDRESS\"\nwords = [\"x\"]\n";
        assert!(MaskingConfig::from_toml(source).unwrap_err()[0].contains("declared twice"));
    }

    #[test]
    fn thresholds_of_their_own_are_validated_and_applied() {
        let config =
            MaskingConfig::from_toml("[detection.thresholds]\nPERSON = 0.82\nLOCATION = 0.2\n")
                .unwrap();
        assert_eq!(config.detection.thresholds["PERSON"], 0.82);
        let scanner = atdp_detect::Scanner::with_config(&config.detection, None).unwrap();
        // A lone given name (0.6 by the rules, at most 0.8 by the tagger) falls under
        // PERSON's 0.82; a name with a family name (0.85) does not; the global threshold
        // still applies to the other types.
        let found = |text: &str| -> Vec<String> {
            scanner
                .scan(text)
                .iter()
                .map(|s| format!("{}:{}", s.entity, &text[s.start..s.end]))
                .collect()
        };
        assert_eq!(
            found("The ticket Sophie opened is closed"),
            Vec::<String>::new()
        );
        assert_eq!(
            found("The ticket Sophie Martin opened is closed"),
            ["PERSON:Sophie Martin"]
        );
        let problems =
            MaskingConfig::from_toml("[detection.thresholds]\nPERSN = 0.7\nPERSON = 1.5\n")
                .unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].contains("threshold for unknown entity type PERSN"),
            "{problems:?}"
        );
        assert!(problems[1].contains("between 0 and 1"), "{problems:?}");
    }

    #[test]
    fn disabled_types_are_not_looked_for() {
        let config =
            MaskingConfig::from_toml("[detection]\ndisabled = [\"PERSON\", \"LOCATION\"]\n")
                .unwrap();
        let scanner = atdp_detect::Scanner::with_config(&config.detection, None).unwrap();
        let text = "Jane Doe lives in Berlin and works at Acme GmbH, jane@example.com";
        let entities: Vec<&str> = scanner.scan(text).iter().map(|s| s.entity).collect();
        assert_eq!(entities, ["ORGANIZATION", "EMAIL_ADDRESS"]);
        let problems =
            MaskingConfig::from_toml("[detection]\ndisabled = [\"PERSN\"]\n").unwrap_err();
        assert!(
            problems[0].contains("PERSN is not built in"),
            "{problems:?}"
        );
    }

    #[test]
    fn storage_masks_what_an_upstream_masks() {
        let problems = MaskingConfig::from_toml(
            "[masking.storage]\ndefault = \"tokenize\"\nentities = { EMAIL_ADDRESS = \"allow\" }\n\n[masking.external]\ndefault = \"allow\"\nentities = { EMAIL_ADDRESS = \"redact\" }\n",
        )
        .unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("EMAIL_ADDRESS") && problems[0].contains("[masking.external]"),
            "{problems:?}"
        );
        // Storing a type as it is, when no upstream masks it either, is a choice of its own.
        assert!(
            MaskingConfig::from_toml(
                "[masking.storage]\ndefault = \"tokenize\"\nentities = { IP_ADDRESS = \"allow\" }\n\n[masking.external]\ndefault = \"tokenize\"\nentities = { IP_ADDRESS = \"allow\" }\n"
            )
            .is_ok()
        );
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }

    fn custom_scanner(source: &str) -> Scanner {
        let config = MaskingConfig::from_toml(source).unwrap();
        Scanner::with_config(&config.detection, None).unwrap()
    }

    fn found_with(scanner: &Scanner, text: &str) -> Vec<(&'static str, String, f32)> {
        scanner
            .scan(text)
            .into_iter()
            .map(|s| (s.entity, text[s.start..s.end].to_owned(), s.score))
            .collect()
    }

    #[test]
    fn dictionary_entities_match_whole_words() {
        let scanner = custom_scanner(
            "[[detection.entity]]\nname = \"CODENAME\"\nwords = [\"Bluebird\", \"night jar\"]\n\n[[detection.entity]]\nname = \"EXACT\"\nwords = [\"ACME-7\"]\ncase_sensitive = true\n",
        );
        assert_eq!(
            found_with(
                &scanner,
                "BLUEBIRD and Night Jar; not bluebirds or xbluebird"
            ),
            [
                ("CODENAME", "BLUEBIRD".to_owned(), 0.8),
                ("CODENAME", "Night Jar".to_owned(), 0.8)
            ]
        );
        assert_eq!(
            found_with(&scanner, "ACME-7 but not acme-7"),
            [("EXACT", "ACME-7".to_owned(), 0.8)]
        );
        // Built-in detectors still run next to the custom ones.
        assert_eq!(found_with(&scanner, "bluebird jane@example.com").len(), 2);
    }

    #[test]
    fn custom_patterns_and_context_words_raise_and_lower() {
        let scanner = custom_scanner(
            "[[detection.entity]]\nname = \"CUSTOMER_ID\"\npattern = 'C-\\d{4}'\nscore = 0.4\nraise = [\"Customer\"]\n\n[detection.context.PHONE_NUMBER]\nlower = [\"tracking\"]\n",
        );
        assert!(found_with(&scanner, "ref C-1234").is_empty());
        let near = found_with(&scanner, "customer C-1234 called");
        assert_eq!(near.len(), 1);
        assert_eq!(near[0].0, "CUSTOMER_ID");
        assert!((near[0].2 - 0.7).abs() < 1e-6, "{near:?}");
        // Not part of a longer token.
        assert!(found_with(&scanner, "customer XC-1234 and C-12345").is_empty());
        let phone = "+44 20 7946 0958";
        assert_eq!(found_with(&scanner, &format!("call {phone}"))[0].1, phone);
        assert!(
            found_with(&scanner, &format!("tracking {phone}")).is_empty(),
            "a lowering word drops the 0.75 international phone score under 0.5"
        );
    }

    #[test]
    fn entity_filter_knows_custom_entities() {
        let config = MaskingConfig::from_toml(
            "[[detection.entity]]\nname = \"CODENAME\"\nwords = [\"Kestrel\"]\n",
        )
        .unwrap();
        let only = Scanner::with_config(&config.detection, Some(&["CODENAME".to_owned()])).unwrap();
        assert_eq!(
            found_with(&only, "Kestrel jane@example.com"),
            [("CODENAME", "Kestrel".to_owned(), 0.8)]
        );
        assert!(Scanner::with_config(&config.detection, Some(&["NOPE".to_owned()])).is_err());
    }
}
