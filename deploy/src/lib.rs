//! Serving for atdp: `atdp-serve` runs mistral.rs with a base model and the promoted LoRA
//! adapter of a policy, behind an OpenAI-compatible API that the proxy routes to. It follows
//! the adapter registry (versions on the lake's object storage, and a create-only log of
//! promotions and rollbacks) and hot-swaps: a new version is fetched, checked against the
//! base model, loaded on a fresh engine and tried before it takes traffic, and the old
//! engine drains. Each response comes whole from one version and names it (the `model`
//! field and the `x-atdp-policy-version` header, which the proxy records).
//!
//! ```no_run
//! # async fn demo() -> atdp_deploy::Result<()> {
//! use atdp_deploy::{BaseModel, EngineOptions, Registry, Watcher};
//! let registry = Registry::open("/var/lib/atdp/lake", Default::default(), "support-agent")?;
//! let watcher = Watcher {
//!     registry,
//!     base: BaseModel::open("/models/qwen2-0.5b")?,
//!     cache: "/var/cache/atdp-serve".into(),
//!     options: EngineOptions::default(),
//!     drain: std::time::Duration::from_secs(60),
//! };
//! let serving = watcher.start().await?;
//! let app = atdp_deploy::router(serving.clone());
//! # let _ = app; Ok(()) }
//! ```

mod engine;
mod error;
mod generate;
mod openai;
mod registry;
mod reply;
mod server;
mod tools;
mod watch;

pub use engine::{Adapter, BaseModel, Engine, EngineOptions, Shared, Version};
pub use error::{Error, Result};
pub use openai::DEFAULT_MAX_TOKENS;
pub use registry::{ADAPTER_FILES, Action, Event, Published, Registry, State, check_policy_name};
pub use server::{Serving, Status, SwapReport, VERSION_HEADER, router};
pub use watch::Watcher;
