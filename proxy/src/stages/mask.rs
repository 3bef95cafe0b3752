//! Mask: what the upstream is sent, by its trust level (`masking.toml`'s `external` or
//! `internal` actions). The whole body is walked: every string, object key and number, and
//! JSON inside strings ([`atdp_policies::JsonMasker`]). The same pass finds the entity types for
//! Cedar's context, whatever the action (an `allow`ed value is still found). A failure refuses
//! the call: nothing is ever forwarded unmasked because masking went wrong.

use std::collections::HashMap;

use atdp_policies::{Destination, FoundValues, JsonMasker, KeyRing, Policy, VaultItem};
use serde_json::Value;

use crate::config::Trust;
use crate::refusal::Refusal;

/// What masking the outbound body did.
#[derive(Debug, Default)]
pub struct Outbound {
    /// Entity types found, sorted, without repeats.
    pub entities: Vec<String>,
    /// Every entity type found, once per value (for the metrics).
    pub found: Vec<String>,
    /// Placeholders to restore in the reply (token → vault item).
    pub restore: HashMap<String, VaultItem>,
    /// The originals of every value masked, with their types (only in memory).
    pub values: FoundValues,
    /// The originals of the values found with the words around them, whatever their action
    /// ([`atdp_policies::JsonMasked::by_context`]; only in memory).
    pub by_context: FoundValues,
}

/// The masking actions that apply to what an upstream of `trust` is sent.
pub fn destination(trust: Trust) -> Destination {
    match trust {
        Trust::External => Destination::External,
        Trust::Internal => Destination::Internal,
    }
}

/// Masks `document` in place for an upstream of `trust`; `enabled` is the proxy's `mask`
/// setting (off only in benchmarks, never with recording on).
pub fn mask_outbound(
    policy: &Policy,
    keys: &KeyRing,
    tenant: &str,
    trust: Trust,
    enabled: bool,
    document: &mut Value,
) -> Result<Outbound, Refusal> {
    if !enabled {
        return Ok(Outbound::default());
    }
    let masker = JsonMasker {
        scanner: &policy.scanner,
        policy: policy.masking.policy(destination(trust)),
        tenant,
        keys,
        known: None,
    };
    let masked = masker.mask(document).map_err(|error| {
        tracing::error!(tenant = %tenant, error = %error, "Masking failed; the request is refused.");
        Refusal::MaskingFailed
    })?;
    let found: Vec<String> = masked
        .spans
        .iter()
        .map(|(_, span)| span.entity.clone())
        .collect();
    let mut entities = found.clone();
    entities.sort();
    entities.dedup();
    let restore = masked
        .vault
        .into_iter()
        .map(|item| (item.token.clone(), item))
        .collect();
    Ok(Outbound {
        entities,
        found,
        restore,
        values: masked.values,
        by_context: masked.by_context,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn quickstart() -> Policy {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../policies/examples/quickstart");
        Policy::load(&dir).unwrap()
    }

    #[test]
    fn external_upstreams_get_placeholders_and_internal_ones_the_text() {
        let policy = quickstart();
        let mut keys = KeyRing::default();
        keys.generate("demo");
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "mail jane@example.com"}]});
        let mut outbound = body.clone();
        let masked =
            mask_outbound(&policy, &keys, "demo", Trust::External, true, &mut outbound).unwrap();
        assert_eq!(masked.entities, ["EMAIL_ADDRESS"]);
        assert!(!outbound.to_string().contains("jane@example.com"));
        assert_eq!(masked.restore.len(), 1);
        let mut inbound = body.clone();
        let masked =
            mask_outbound(&policy, &keys, "demo", Trust::Internal, true, &mut inbound).unwrap();
        assert_eq!(
            masked.entities,
            ["EMAIL_ADDRESS"],
            "found even when allowed"
        );
        assert_eq!(inbound, body);
    }

    #[test]
    fn a_tenant_without_keys_is_refused_not_forwarded() {
        let policy = quickstart();
        let mut document = json!({"model": "m", "messages": [{"role": "user", "content": "mail jane@example.com"}]});
        let refusal = mask_outbound(
            &policy,
            &KeyRing::default(),
            "demo",
            Trust::External,
            true,
            &mut document,
        )
        .unwrap_err();
        assert_eq!(refusal, Refusal::MaskingFailed);
    }
}
