//! Compliance building blocks of atdp: detection of personal data and secrets in text
//! ([`Scanner`]), masking actions ([`mask`]), the vault crypto that keeps tokenized originals
//! revealable ([`KeyRing`]), masking of whole JSON documents including JSON inside strings
//! ([`JsonMasker`]), and unmasking, also on a stream ([`StreamUnmasker`]). Access policy is
//! Cedar ([`AccessPolicy`]). A policy directory ([`Policy`]: the Cedar files plus
//! `masking.toml` with custom entities, context words and masking actions per destination,
//! [`MaskingConfig`], and `training.toml`, which steps may be trained on, [`Training`]) is reloaded atomically by [`PolicyStore`] and checked, every problem
//! with its line, by [`check_dir`].
//!
//! ```
//! let scanner = atdp_policies::Scanner::new(None)?;
//! let spans = scanner.scan("Mail jane.doe@example.com, card 4111 1111 1111 1111.");
//! let entities: Vec<&str> = spans.iter().map(|s| s.entity).collect();
//! assert_eq!(entities, ["EMAIL_ADDRESS", "CREDIT_CARD"]);
//! # Ok::<(), atdp_policies::Error>(())
//! ```

mod access;
mod check;
mod config;
mod detect;
mod entities;
mod error;
mod forwarding;
mod json;
mod keyfile;
mod mask;
pub mod principals;
mod store;
mod training;
mod vault;

pub use access::{
    AccessPolicy, ENTITIES_FILE, KeyIdentity, NAMESPACE, POLICIES_FILE, SCHEMA_FILE, Verdict,
    hash_api_key,
};
pub use check::check_dir;
pub use config::{Destination, MASKING_FILE, MaskingConfig};
pub use detect::{
    CacheStats, ContextWords, CustomEntity, CustomMatch, DetectionConfig, NAME_FEATURES,
    Normalized, Scanner, Span, builtin_entities, name_tagger_input,
};
pub use error::{Error, Result, json_error_kind};
pub use forwarding::{FORWARDING_FILE, Forwarding};
pub use json::{FoundValues, JsonMasked, JsonMasker, KnownValues, MIN_KNOWN_CHARS};
pub use keyfile::{EnsuredKeys, KeyFile, MissingKeys};
pub use mask::{Action, MaskPolicy, Masked, MaskedSpan, StreamUnmasker, VaultItem, mask, unmask};
pub use store::{Policy, PolicyStore};
pub use training::{
    CONSENT_HEADER, Consent, DEFAULT_SOURCE, Decision, HEADER_SOURCE, Marks, StepFacts,
    TRAINING_FILE, Training, TrainingRule,
};
pub use vault::{KeyRing, SealedValue, TOKEN_HEX_DIGITS};
