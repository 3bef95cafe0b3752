//! Compliance building blocks of atdp. Today: detection of personal data and secrets in
//! text ([`Scanner`]). Masking actions, the revealable vault and the Cedar access policy of
//! issue 3 are not built yet.
//!
//! ```
//! let scanner = policies::Scanner::new(None)?;
//! let spans = scanner.scan("Mail jane.doe@example.com, card 4111 1111 1111 1111.");
//! let entities: Vec<&str> = spans.iter().map(|s| s.entity).collect();
//! assert_eq!(entities, ["EMAIL_ADDRESS", "CREDIT_CARD"]);
//! # Ok::<(), policies::Error>(())
//! ```

mod detect;
mod error;

pub use detect::{Scanner, Span, builtin_entities};
pub use error::{Error, Result};
