//! The detection settings `masking.toml` gives (threshold, context words, custom entity
//! types, the scan cache), validated by `config`.

use std::collections::HashMap;

/// Words that, shortly before a match, raise or lower its score.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContextWords {
    /// Each adds to the score (lower-case).
    pub raise: Vec<String>,
    /// Each subtracts from the score (lower-case).
    pub lower: Vec<String>,
}

/// How a custom entity is found.
#[derive(Debug, Clone, PartialEq)]
pub enum CustomMatch {
    /// Any of these words or phrases, as whole words.
    Words {
        /// The words.
        words: Vec<String>,
        /// Whether case must match.
        case_sensitive: bool,
    },
    /// A regular expression (Rust `regex` syntax).
    Pattern(String),
}

/// An entity type declared in the policy file.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomEntity {
    /// Its name, `[A-Z][A-Z0-9_]*`.
    pub name: String,
    /// How it is found.
    pub matcher: CustomMatch,
    /// Score of a match without context words.
    pub score: f32,
    /// Its context words.
    pub context: ContextWords,
}

/// Validated detection settings.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectionConfig {
    /// Spans scoring below this are dropped.
    pub threshold: f32,
    /// Thresholds of their own, by entity type (built-in or custom).
    pub thresholds: HashMap<String, f32>,
    /// Built-in entity types not looked for at all.
    pub disabled: Vec<String>,
    /// Extra context words for entity types (built-in or custom).
    pub context: HashMap<String, ContextWords>,
    /// Custom entity types.
    pub custom: Vec<CustomEntity>,
    /// Most bytes of recently scanned texts (and what they hold) kept, by tenant, so that a
    /// text scanned again is not scanned twice (`cache_mib`, default 16 MiB; 0: none).
    pub cache_bytes: usize,
}

/// The default of `[detection] cache_mib`.
const DEFAULT_CACHE_MIB: u32 = 16;

impl Default for DetectionConfig {
    fn default() -> Self {
        DetectionConfig {
            threshold: 0.5,
            thresholds: HashMap::new(),
            disabled: Vec::new(),
            context: HashMap::new(),
            custom: Vec::new(),
            cache_bytes: (DEFAULT_CACHE_MIB as usize) << 20,
        }
    }
}
