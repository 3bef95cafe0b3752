//! LoRA's settings as an adapter file states them: the projections a LoRA adapts
//! ([`TargetModule`], PEFT's `target_modules` names) and its hyper-parameters ([`LoraConfig`]).

use std::fmt;
use std::str::FromStr;

use crate::model_config::ModelConfig;
use crate::{Error, Result};

/// A projection of a decoder layer that LoRA can adapt (PEFT's `target_modules` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TargetModule {
    /// `self_attn.q_proj`
    QProj,
    /// `self_attn.k_proj`
    KProj,
    /// `self_attn.v_proj`
    VProj,
    /// `self_attn.o_proj`
    OProj,
    /// `mlp.gate_proj`
    GateProj,
    /// `mlp.up_proj`
    UpProj,
    /// `mlp.down_proj`
    DownProj,
}

impl TargetModule {
    /// All seven, in layer order.
    pub const ALL: [TargetModule; 7] = [
        TargetModule::QProj,
        TargetModule::KProj,
        TargetModule::VProj,
        TargetModule::OProj,
        TargetModule::GateProj,
        TargetModule::UpProj,
        TargetModule::DownProj,
    ];

    /// The module's name (`q_proj`, …), as PEFT's `target_modules` lists it.
    pub fn name(self) -> &'static str {
        match self {
            TargetModule::QProj => "q_proj",
            TargetModule::KProj => "k_proj",
            TargetModule::VProj => "v_proj",
            TargetModule::OProj => "o_proj",
            TargetModule::GateProj => "gate_proj",
            TargetModule::UpProj => "up_proj",
            TargetModule::DownProj => "down_proj",
        }
    }

    /// The module's path in a Hugging Face Llama/Qwen model: `model.layers.N.self_attn.q_proj`.
    pub fn module_path(self, layer: usize) -> String {
        let block = match self {
            TargetModule::QProj
            | TargetModule::KProj
            | TargetModule::VProj
            | TargetModule::OProj => "self_attn",
            TargetModule::GateProj | TargetModule::UpProj | TargetModule::DownProj => "mlp",
        };
        format!("model.layers.{layer}.{block}.{}", self.name())
    }

    /// `(in_features, out_features)` of the projection.
    pub fn in_out(self, c: &ModelConfig) -> (usize, usize) {
        match self {
            TargetModule::QProj => (c.hidden_size, c.q_dim()),
            TargetModule::KProj | TargetModule::VProj => (c.hidden_size, c.kv_dim()),
            TargetModule::OProj => (c.q_dim(), c.hidden_size),
            TargetModule::GateProj | TargetModule::UpProj => (c.hidden_size, c.intermediate_size),
            TargetModule::DownProj => (c.intermediate_size, c.hidden_size),
        }
    }
}

impl fmt::Display for TargetModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TargetModule {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        TargetModule::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            Error::invalid(
                "target module",
                format!("`{s}`; choose from q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"),
            )
        })
    }
}

/// LoRA hyper-parameters (PEFT's `LoraConfig` subset this crate trains).
#[derive(Debug, Clone, PartialEq)]
pub struct LoraConfig {
    /// Rank of the update, ≥ 1.
    pub r: usize,
    /// Scale numerator: the update is multiplied by `alpha / r`.
    pub alpha: f64,
    /// Dropout on the adapter's input during training, in [0, 1).
    pub dropout: f64,
    /// The projections adapted, in every layer.
    pub target_modules: Vec<TargetModule>,
    /// Seeds the initialisation of `A` and the dropout masks.
    pub seed: u64,
}

impl Default for LoraConfig {
    /// r = 8, alpha = 16, no dropout, all seven projections, seed 0.
    fn default() -> Self {
        LoraConfig {
            r: 8,
            alpha: 16.0,
            dropout: 0.0,
            target_modules: TargetModule::ALL.to_vec(),
            seed: 0,
        }
    }
}

impl LoraConfig {
    /// `alpha / r`.
    pub fn scale(&self) -> f64 {
        self.alpha / self.r as f64
    }

    /// Checks the values: r ≥ 1, finite alpha, dropout in [0, 1), at least one target
    /// module and none twice.
    pub fn validate(&self) -> Result<()> {
        if self.r == 0 {
            return Err(Error::invalid("LoRA rank", "r must be at least 1"));
        }
        if !self.alpha.is_finite() || self.alpha == 0.0 {
            return Err(Error::invalid(
                "LoRA alpha",
                format!("{} must be a non-zero number", self.alpha),
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(Error::invalid(
                "LoRA dropout",
                format!("{} must be in [0, 1)", self.dropout),
            ));
        }
        if self.target_modules.is_empty() {
            return Err(Error::invalid(
                "LoRA target modules",
                "name at least one projection",
            ));
        }
        let mut seen = self.target_modules.clone();
        seen.sort();
        seen.dedup();
        if seen.len() != self.target_modules.len() {
            return Err(Error::invalid(
                "LoRA target modules",
                "a module is listed twice",
            ));
        }
        Ok(())
    }
}
