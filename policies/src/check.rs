//! `atdp-policy check`: every problem of a policy directory, each with file, line and column.

use std::path::Path;

use crate::access::{
    ENTITIES_FILE, POLICIES_FILE, SCHEMA_FILE, parse_entities, parse_policies, parse_schema,
};
use crate::config::{MASKING_FILE, MaskingConfig};
use crate::forwarding::{FORWARDING_FILE, Forwarding};
use crate::training::{TRAINING_FILE, Training};
use atdp_detect::Scanner;

/// The problems found in the policy directory `dir`; empty when it is valid. Unlike loading,
/// which stops at the first file that fails, this checks every file it can.
pub fn check_dir(dir: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let mut read = |name: &str, required: bool| match std::fs::read_to_string(dir.join(name)) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => None,
        Err(e) => {
            problems.push(format!(
                "{name}: cannot read {}: {e}",
                dir.join(name).display()
            ));
            None
        }
    };
    let schema = read(SCHEMA_FILE, true);
    let policies = read(POLICIES_FILE, true);
    let entities = read(ENTITIES_FILE, true);
    let masking = read(MASKING_FILE, false);
    let forwarding = read(FORWARDING_FILE, false);
    let training = read(TRAINING_FILE, false);
    if let Some(schema) = schema {
        match parse_schema(&schema) {
            Ok(schema) => {
                if let Some(policies) = policies {
                    problems.extend(parse_policies(&policies, &schema).err().unwrap_or_default());
                }
                if let Some(entities) = entities {
                    problems.extend(parse_entities(&entities, &schema).err().unwrap_or_default());
                }
            }
            Err(found) => {
                problems.extend(found);
                problems.push(format!(
                    "{POLICIES_FILE}, {ENTITIES_FILE}: not checked (the schema does not parse)"
                ));
            }
        }
    }
    // The entity types a training rule may name: the built-in ones and masking.toml's own.
    let mut masking_config = Some(MaskingConfig::default());
    if let Some(masking) = masking {
        match MaskingConfig::from_toml(&masking) {
            Ok(config) => {
                if let Err(error) = Scanner::with_config(&config.detection, None) {
                    problems.push(format!("{MASKING_FILE}: {error}"));
                }
                masking_config = Some(config);
            }
            Err(found) => {
                problems.extend(found);
                masking_config = None;
            }
        }
    }
    if let Some(forwarding) = forwarding
        && let Err(found) = Forwarding::from_toml(&forwarding)
    {
        problems.extend(found.into_iter().map(|p| format!("{FORWARDING_FILE}: {p}")));
    }
    if let Some(training) = training {
        let found = match Training::from_toml(&training) {
            Ok(training) => masking_config
                .map(|m| training.unknown_entities(&m.entity_types()))
                .unwrap_or_default(),
            Err(found) => found,
        };
        problems.extend(found.into_iter().map(|p| format!("{TRAINING_FILE}: {p}")));
    }
    problems
}
