//! One served version: a mistral.rs engine holding the base model with one adapter merged
//! in (or none), loaded through explicit local paths so that nothing reaches for a model hub.
//!
//! mistral.rs merges LoRA into the weights at load time and keeps the list of applied
//! adapters in a thread-local that nothing clears: a later load on the same thread would
//! silently carry the old adapter. Every load therefore runs on a fresh thread, after
//! `clear_applied_loras()`. A version's engine is dropped (which terminates its engine
//! thread) once the last request holding it has finished.

use std::num::NonZeroUsize;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use atdp_model_files::{
    CONFIG_FILE, GENERATION_CONFIG_FILE, ModelConfig, TOKENIZER_CONFIG_FILE, TOKENIZER_FILE,
};
use mistralrs::core::{
    AdapterPaths, AutoDeviceMapParams, DefaultSchedulerMethod, DeviceMapSetting, LocalModelPaths,
    LoraAdapterPaths, MistralRsBuilder, ModelDType, ModelPaths, NormalLoaderBuilder,
    NormalLoaderType, NormalSpecificConfig, SchedulerConfig,
};

use crate::error::{Error, Result};
use crate::prompt::PromptFormat;

/// A local base model directory in Hugging Face layout, checked once.
#[derive(Debug, Clone)]
pub struct BaseModel {
    /// The directory.
    pub dir: PathBuf,
    /// Its `config.json`.
    pub config: ModelConfig,
    /// sha256 over its weight files (what the trainer's manifest records).
    pub sha256: String,
    weights: Vec<PathBuf>,
    loader: NormalLoaderType,
    format: Arc<PromptFormat>,
}

impl BaseModel {
    /// Reads `config.json`, finds the weight files and hashes them.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let bad = |message: String| Error::Base {
            path: dir.display().to_string(),
            message,
        };
        let config =
            ModelConfig::from_file(dir.join(CONFIG_FILE)).map_err(|e| bad(e.to_string()))?;
        let weights = atdp_model_files::weight_files(&dir).map_err(|e| bad(e.to_string()))?;
        let (sha256, _) =
            atdp_model_files::hash_weights(&weights).map_err(|e| bad(e.to_string()))?;
        for file in [TOKENIZER_FILE, TOKENIZER_CONFIG_FILE] {
            if !dir.join(file).is_file() {
                return Err(bad(format!("{file} is missing")));
            }
        }
        let format = Arc::new(PromptFormat::load(&dir)?);
        let loader = match config.arch {
            atdp_model_files::Arch::Llama => NormalLoaderType::Llama,
            atdp_model_files::Arch::Qwen2 => NormalLoaderType::Qwen2,
            atdp_model_files::Arch::Qwen3 => NormalLoaderType::Qwen3,
        };
        Ok(BaseModel {
            dir,
            config,
            sha256,
            weights,
            loader,
            format,
        })
    }

    fn paths(&self, adapter: Option<&Adapter>) -> Box<dyn ModelPaths> {
        let generation = self.dir.join(GENERATION_CONFIG_FILE);
        let adapters = match adapter {
            Some(a) => AdapterPaths::Lora(vec![LoraAdapterPaths {
                lora_config: a.config.clone(),
                adapter_path: a.dir.join(atdp_model_files::ADAPTER_WEIGHTS_FILE),
            }]),
            None => AdapterPaths::None,
        };
        Box::new(LocalModelPaths::new(
            self.dir.join(TOKENIZER_FILE),
            self.dir.join(CONFIG_FILE),
            self.dir.join(TOKENIZER_CONFIG_FILE),
            self.weights.clone(),
            adapters,
            generation.is_file().then_some(generation),
            None,
            None,
            None,
        ))
    }
}

/// A checked adapter directory, ready to merge.
#[derive(Debug, Clone)]
pub struct Adapter {
    /// The directory (`adapter_config.json`, `adapter_model.safetensors`).
    pub dir: PathBuf,
    config: mistralrs_quant::LoraConfig,
}

impl Adapter {
    /// Checks `dir` against `base`: the trainer's checks (supported options, every tensor
    /// present, shaped for this base model, finite), and, when the trainer's manifest is
    /// there, that it was trained on these very weights.
    pub fn check(dir: &Path, base: &BaseModel, version: &str) -> Result<Self> {
        let refuse = |message: String| Error::Adapter {
            version: version.to_owned(),
            message,
        };
        let lora = atdp_model_files::check_adapter(dir, &base.config)
            .map_err(|e| refuse(e.to_string()))?;
        // A manifest that cannot be read is the server's problem (retried), not the adapter's.
        let trained_on = atdp_model_files::trained_on(dir).map_err(|e| match e {
            atdp_model_files::Error::Io { path, source } => Error::io(path, source),
            other => refuse(other.to_string()),
        })?;
        if let Some(trained_on) = trained_on
            && trained_on != base.sha256
        {
            return Err(refuse(format!(
                "trained on base weights {} but this server runs {}",
                short(&trained_on),
                short(&base.sha256)
            )));
        }
        let config = mistralrs_quant::LoraConfig {
            rank: lora.r,
            alpha: lora.alpha,
            target_modules: lora
                .target_modules
                .iter()
                .map(|m| m.name().to_owned())
                .collect(),
        };
        Ok(Adapter {
            dir: dir.to_path_buf(),
            config,
        })
    }
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// Which weights a response came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Version {
    /// The policy (the registry's name for this agent's adapters).
    pub policy: String,
    /// The adapter version; none for the base model alone.
    pub number: Option<u32>,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.number {
            Some(n) => write!(f, "{}@v{n}", self.policy),
            None => write!(f, "{}@base", self.policy),
        }
    }
}

/// How engines are built.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Run on the CPU even when a GPU is there.
    pub force_cpu: bool,
    /// Weights dtype (`f32` on CPU is exact; `auto` lets mistral.rs choose).
    pub dtype: ModelDType,
    /// Sequences decoded together.
    pub max_num_seqs: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            force_cpu: true,
            dtype: ModelDType::F32,
            max_num_seqs: 16,
        }
    }
}

/// A loaded version.
pub struct Engine {
    /// What it serves.
    pub version: Version,
    /// The mistral.rs handle.
    pub model: mistralrs::Model,
    /// How long loading took.
    pub loaded_in: Duration,
    /// The base model's chat template and tokenizer, which render every prompt.
    pub(crate) format: Arc<PromptFormat>,
    /// Requests it failed, ever.
    failures: AtomicU64,
    /// How many of `failures` a later answer showed to be the requests' own: the failures
    /// counted when the latest answered request (or trial token) started.
    cleared: AtomicU64,
    /// The engine that replaced it when it was found dead (set before the replacement takes
    /// traffic).
    repaired_by: OnceLock<Weak<Engine>>,
    /// Tokens of prompt and completion together that the model's positions cover
    /// (`max_position_embeddings`).
    pub(crate) context: usize,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("version", &self.version)
            .field("loaded_in", &self.loaded_in)
            .finish()
    }
}

impl Engine {
    /// What a request takes when it starts, to be given back to [`Engine::note`].
    pub(crate) fn ticket(&self) -> u64 {
        self.failures.load(Ordering::SeqCst)
    }

    /// Counts a request it answered (`failed`: it failed inside the engine) that started with
    /// `ticket`. An answer clears only the failures that came before its request started: a
    /// request that began before the engine died and finishes after it shows nothing about
    /// the engine now.
    pub(crate) fn note(&self, ticket: u64, failed: bool) {
        if failed {
            self.failures.fetch_add(1, Ordering::SeqCst);
        } else {
            self.cleared.fetch_max(ticket, Ordering::SeqCst);
        }
    }

    /// Requests it failed that no request started after them has answered past.
    pub fn failing(&self) -> u64 {
        let cleared = self.cleared.load(Ordering::SeqCst);
        self.failures.load(Ordering::SeqCst).saturating_sub(cleared)
    }

    /// The engine that replaced it when it was found dead, while that one is loaded.
    pub(crate) fn repaired_by(&self) -> Option<Shared> {
        self.repaired_by.get().and_then(Weak::upgrade)
    }

    /// Records `fresh` as its replacement, before `fresh` takes its traffic (weakly: a dead
    /// engine that a stuck request still holds keeps no later engine loaded).
    pub(crate) fn replaced_by(&self, fresh: &Shared) {
        let _ = self.repaired_by.set(Arc::downgrade(fresh));
    }

    /// Loads `base` with `adapter` merged in, on a fresh thread.
    pub async fn load(
        base: &BaseModel,
        adapter: Option<&Adapter>,
        version: Version,
        options: &EngineOptions,
    ) -> Result<Engine> {
        let started = Instant::now();
        let paths = base.paths(adapter);
        let loader_type = base.loader.clone();
        let lora_ids = adapter.map(|a| vec![a.dir.display().to_string()]);
        let options_for_thread = options.clone();
        let runtime = tokio::runtime::Handle::current();
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name(format!("atdp-load-{version}"))
            .spawn(move || {
                let _entered = runtime.enter();
                let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    mistralrs_quant::clear_applied_loras();
                    let mut builder = NormalLoaderBuilder::new(
                        NormalSpecificConfig::default(),
                        None,
                        None,
                        Some("local".to_owned()),
                        false,
                        None,
                    );
                    if let Some(ids) = lora_ids {
                        builder = builder.with_lora(ids);
                    }
                    let loader = builder.build(Some(loader_type))?;
                    let device = mistralrs::best_device(options_for_thread.force_cpu)?;
                    let pipeline = loader.load_model_from_path(
                        &paths,
                        &options_for_thread.dtype,
                        &device,
                        true,
                        DeviceMapSetting::Auto(AutoDeviceMapParams::default_text()),
                        None,
                        None,
                    )?;
                    mistralrs_quant::clear_applied_loras();
                    anyhow::Ok(pipeline)
                }));
                let _ = tx.send(result);
            })
            .map_err(|e| Error::Engine(format!("could not start a loading thread: {e}")))?;
        let pipeline = match rx.await {
            Ok(Ok(Ok(pipeline))) => pipeline,
            Ok(Ok(Err(e))) => return Err(Error::Engine(format!("loading {version}: {e:#}"))),
            Ok(Err(_)) | Err(_) => {
                return Err(Error::Engine(format!(
                    "loading {version}: mistral.rs panicked (see the log above)"
                )));
            }
        };
        let seqs = NonZeroUsize::new(options.max_num_seqs.max(1)).unwrap_or(NonZeroUsize::MIN);
        let runner = MistralRsBuilder::new(
            pipeline,
            SchedulerConfig::DefaultScheduler {
                method: DefaultSchedulerMethod::Fixed(seqs),
            },
            false,
            None,
        )
        .with_no_prefix_cache(true)
        .build()
        .await;
        Ok(Engine {
            version,
            model: mistralrs::Model::new(runner),
            loaded_in: started.elapsed(),
            format: base.format.clone(),
            failures: AtomicU64::new(0),
            cleared: AtomicU64::new(0),
            repaired_by: OnceLock::new(),
            context: base.config.max_position_embeddings,
        })
    }
}

/// An engine shared by the requests it serves; dropping the last one stops it.
pub type Shared = Arc<Engine>;
