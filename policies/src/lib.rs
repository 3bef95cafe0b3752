//! The policy atdp applies: masking actions on what the detectors (`atdp-detect`'s `Scanner`)
//! find ([`mask`]), the vault crypto that keeps tokenized originals revealable ([`KeyRing`]),
//! masking of whole JSON documents including JSON inside strings ([`JsonMasker`]), and
//! unmasking, also on a stream ([`StreamUnmasker`]). Access policy is
//! Cedar ([`AccessPolicy`]). A policy directory ([`Policy`]: the Cedar files plus
//! `masking.toml` with custom entities, context words and masking actions per destination,
//! [`MaskingConfig`], and `training.toml`, which steps may be trained on, [`Training`]) is reloaded atomically by [`PolicyStore`] and checked, every problem
//! with its line, by [`check_dir`].
//!
//! ```
//! use atdp_policies::{Action, KeyRing, MaskPolicy, mask};
//!
//! let scanner = atdp_detect::Scanner::new(None)?;
//! let text = "Mail jane.doe@example.com, card 4111 1111 1111 1111.";
//! let spans = scanner.scan(text);
//! let mut keys = KeyRing::default();
//! keys.generate("acme");
//! let masked = mask(text, &spans, &MaskPolicy::all(Action::Tokenize), "acme", &keys)?;
//! assert!(!masked.text.contains("jane.doe@example.com"));
//! assert_eq!(masked.vault.len(), 2); // both originals sealed, revealable with the key
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod access;
mod check;
mod config;
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
pub use error::{Error, Result, json_error_kind};
pub use forwarding::{FORWARDING_FILE, Forwarding};
pub use json::{
    FoundValues, JsonMasked, JsonMasker, KnownValues, MIN_KNOWN_CHARS, decode_json_escapes,
};
pub use keyfile::{EnsuredKeys, KeyFile, MissingKeys};
pub use mask::{
    Action, MaskPolicy, Masked, MaskedSpan, StreamUnmasker, VaultItem, mask, mask_ranges, unmask,
};
pub use store::{Policy, PolicyStore};
pub use training::{
    CONSENT_HEADER, Consent, DEFAULT_SOURCE, Decision, HEADER_SOURCE, Marks, StepFacts,
    TRAINING_FILE, Training, TrainingRule,
};
pub use vault::{KeyRing, SealedValue, TOKEN_HEX_DIGITS};
