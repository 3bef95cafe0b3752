//! Serving for atdp: `atdp-serve` runs mistral.rs with a base model and the promoted LoRA
//! adapter of a policy, behind an OpenAI-compatible API that the proxy routes to. It follows
//! the adapter registry (versions on the lake's object storage, and a create-only log of
//! promotions and rollbacks) and hot-swaps: a new version is fetched, checked against the
//! base model, loaded on a fresh engine and tried before it takes traffic, and the old
//! engine drains. Each response comes whole from one version and names it (the `model`
//! field and the `x-atdp-policy-version` header, which the proxy records).
//!
//! One process serves several policies over one base model, each following its own
//! registry; a request picks one by its `model` (`support`, `support@v7`).
//!
//! ```no_run
//! # async fn demo() -> atdp_deploy::Result<()> {
//! use atdp_deploy::{BaseModel, EngineOptions, Fleet, Registry, Watcher};
//! let base = BaseModel::open("/models/qwen2-0.5b")?;
//! let mut watchers = Vec::new();
//! for policy in ["support-agent", "reports-agent"] {
//!     watchers.push(Watcher {
//!         registry: Registry::open("/var/lib/atdp/lake", Default::default(), policy)?,
//!         base: base.clone(),
//!         cache: "/var/cache/atdp-serve".into(),
//!         options: EngineOptions::default(),
//!         drain: std::time::Duration::from_secs(60),
//!     });
//! }
//! let fleet = Fleet::start(watchers, None, 2).await?;
//! fleet.follow(std::time::Duration::from_secs(1));
//! let app = atdp_deploy::router(fleet.clone());
//! # let _ = app; Ok(()) }
//! ```

mod engine;
mod error;
mod fleet;
mod generate;
mod openai;
mod prompt;
mod registry;
mod reply;
mod server;
mod serving;
mod tools;
mod watch;

pub use engine::{Adapter, BaseModel, Engine, EngineOptions, Shared, Version};
pub use error::{Error, Result};
pub use fleet::{COPY_HEADER, Fleet, FleetStatus};
pub use openai::DEFAULT_MAX_TOKENS;
pub use registry::{
    ADAPTER_FILES, Action, Canary, Event, Published, Registry, State, check_policy_name,
};
pub use server::{SHADOW_HEADER, VERSION_HEADER, router};
pub use serving::{Serving, Status, SwapReport};
pub use watch::Watcher;
