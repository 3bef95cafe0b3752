//! A whole policy directory in force (access policy, detectors, masking actions), replaced
//! atomically on reload.

use std::path::Path;
use std::sync::{Arc, RwLock};

use crate::access::AccessPolicy;
use crate::config::MaskingConfig;
use crate::error::Result;
use crate::forwarding::Forwarding;
use crate::training::Training;
use atdp_detect::Scanner;

/// A loaded, validated policy directory.
#[derive(Debug)]
pub struct Policy {
    /// Who may do what (Cedar).
    pub access: AccessPolicy,
    /// Detection and masking settings (`masking.toml`).
    pub masking: MaskingConfig,
    /// The detectors those settings describe, compiled.
    pub scanner: Scanner,
    /// What may be forwarded beyond the proxy's known lists (`forwarding.toml`).
    pub forwarding: Forwarding,
    /// Which recorded steps may be trained on (`training.toml`).
    pub training: Training,
}

impl Policy {
    /// Loads and validates a policy directory: the three Cedar files and, when present,
    /// `masking.toml`, `forwarding.toml` and `training.toml`.
    pub fn load(dir: &Path) -> Result<Policy> {
        let access = AccessPolicy::load(dir)?;
        let masking = MaskingConfig::load(dir)?;
        let scanner = Scanner::with_config(&masking.detection, None)?;
        let forwarding = Forwarding::load(dir)?;
        let training = Training::load(dir)?;
        let unknown = training.unknown_entities(&masking.entity_types());
        if !unknown.is_empty() {
            return Err(crate::Error::Policy(format!(
                "{}: {}",
                crate::training::TRAINING_FILE,
                unknown.join("; ")
            )));
        }
        Ok(Policy {
            access,
            masking,
            scanner,
            forwarding,
            training,
        })
    }
}

/// The policy in force, replaced atomically on reload.
#[derive(Debug)]
pub struct PolicyStore {
    current: RwLock<(u64, Arc<Policy>)>,
}

impl PolicyStore {
    /// A store holding `policy` as version 1.
    pub fn new(policy: Policy) -> PolicyStore {
        PolicyStore {
            current: RwLock::new((1, Arc::new(policy))),
        }
    }

    /// The policy in force and its version.
    pub fn current(&self) -> (u64, Arc<Policy>) {
        let guard = self.current.read().unwrap_or_else(|p| p.into_inner());
        (guard.0, guard.1.clone())
    }

    /// Puts an already loaded `policy` in force; returns its version.
    pub fn replace(&self, policy: Policy) -> u64 {
        let mut guard = self.current.write().unwrap_or_else(|p| p.into_inner());
        guard.0 += 1;
        guard.1 = Arc::new(policy);
        guard.0
    }

    /// Loads `dir` and puts it in force; on any error the old policy stays in force and the
    /// error is returned for the caller to report. Returns the new version.
    pub fn reload(&self, dir: &Path) -> Result<u64> {
        let policy = Policy::load(dir)?;
        let mut guard = self.current.write().unwrap_or_else(|p| p.into_inner());
        guard.0 += 1;
        guard.1 = Arc::new(policy);
        Ok(guard.0)
    }
}
