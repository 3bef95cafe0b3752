//! Compliance building blocks of atdp: detection of personal data and secrets in text
//! ([`Scanner`]), masking actions ([`mask`]), the vault crypto that keeps tokenized originals
//! revealable ([`KeyRing`]), masking of whole JSON documents including JSON inside strings
//! ([`JsonMasker`]), and unmasking, also on a stream ([`StreamUnmasker`]). Not built yet
//! (issue 3): custom entities from a policy file. Access policy is Cedar ([`AccessPolicy`],
//! reloaded atomically by [`PolicyStore`]).
//!
//! ```
//! let scanner = policies::Scanner::new(None)?;
//! let spans = scanner.scan("Mail jane.doe@example.com, card 4111 1111 1111 1111.");
//! let entities: Vec<&str> = spans.iter().map(|s| s.entity).collect();
//! assert_eq!(entities, ["EMAIL_ADDRESS", "CREDIT_CARD"]);
//! # Ok::<(), policies::Error>(())
//! ```

mod access;
mod detect;
mod error;
mod json;
mod mask;
mod vault;

pub use access::{AccessPolicy, NAMESPACE, PolicyStore, Verdict, hash_api_key};
pub use detect::{Scanner, Span, builtin_entities};
pub use error::{Error, Result, json_error_kind};
pub use json::{JsonMasked, JsonMasker};
pub use mask::{Action, MaskPolicy, Masked, MaskedSpan, StreamUnmasker, VaultItem, mask, unmask};
pub use vault::{KeyRing, SealedValue, TOKEN_HEX_DIGITS};
