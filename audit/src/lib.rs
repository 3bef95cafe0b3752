//! The compliance side of atdp: the tamper-evident audit trail, search over the lake, a
//! reviewer's view of trajectories, reveal with a reason, erasure and evidence export, as
//! the `atdp-audit` command and its web console.
//!
//! Everything an auditor does goes through Cedar (`policies/`): which tenants an auditor
//! may read ([`Auditor`]), whether a value may be revealed, whether a tenant may be erased;
//! and everything it does is an event in this process's audit hash chain ([`Trail`]),
//! written before the result is shown.
//!
//! ```no_run
//! # async fn demo() -> atdp_audit::Result<()> {
//! use std::collections::BTreeMap;
//! use atdp_audit::{Catalog, Search, search};
//!
//! let lake = atdp_lake::Lake::new("./lake", Default::default())?;
//! let catalog = Catalog::open(&lake, &BTreeMap::new()).await?;
//! let page = search(&catalog, &["demo".to_owned()], &Search {
//!     entity: Some("EMAIL_ADDRESS".into()),
//!     limit: 20,
//!     ..Search::default()
//! }).await?;
//! for hit in page.hits {
//!     println!("{} {} {}", hit.trajectory_id, hit.status, hit.preview);
//! }
//! let report = atdp_audit::verify(&lake, None).await?;
//! assert!(report.ok(), "{:?}", report.first_problem());
//! # Ok(()) }
//! ```

mod auditor;
mod catalog;
mod erase;
mod error;
mod export;
mod keys;
mod lineage;
mod reason;
mod receipt;
mod retention;
mod reveal;
pub mod runs;
mod search;
mod segments;
mod trail;
mod trajectory;
mod transcript;
mod verify;
mod web;

pub use auditor::{Auditor, scope_catalog};
pub use catalog::Catalog;
pub use erase::{EraseReport, erase};
pub use error::{Error, Result};
pub use export::{Bundle, BundleRow, FORMAT, Subject, digest, row, seal, trajectory_bundle};
pub use keys::{RotateReport, rotate_key};
pub use lineage::{TrainedAdapter, trained_on};
pub use reason::{MAX_REASON, MIN_REASON_VISIBLE};
pub use receipt::{
    Cited, RECEIPT_KIND, Receipt, ReceiptAdapter, ReceiptCheck, check_receipt, issue_receipt,
};
pub use retention::{ExpireReport, RetentionCheck, Vacuum, check as check_retention, expire};
pub use reveal::{RevealRequest, Revealed, reveal};
pub use search::{
    Hit, MAX_PAGE, MAX_TEXT, Page, Search, Searcher, audited_search, search, steps_by_id,
};
pub use segments::{Segment, Tokens, segments};
pub use trail::{SYSTEM_TENANT, Trail, event, redact};
pub use trajectory::load;
pub use transcript::{
    ARGUMENTS_BYTES, CALLS_SHOWN, CallView, MESSAGES_PER_PAGE, MessageAt, MessageView,
    PAGE_PREVIEW_BYTES, PREVIEW_BYTES, Preview, REWARDS_SHOWN, STEPS_PER_PAGE, StepView,
    Transcript, TranscriptPage,
};
pub use verify::{ChainReport, FileProblem, VerifyReport, verify};
pub use web::tls::TlsFiles as ConsoleTls;
pub use web::{ConsoleConfig, Server, serve};
