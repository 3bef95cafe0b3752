//! The principals of a policy directory's `entities.json` (API keys and auditors, with their
//! agents and tenants), read from its text, and what changed between two readings (the
//! `policy_reload` audit event lists it). Changing them is `principals`.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};

use crate::error::{Error, Result};

/// The entities' file name in a policy directory.
pub const ENTITIES_FILE: &str = "entities.json";

/// The Cedar namespace of the entity types.
pub(crate) const NAMESPACE: &str = "Atdp::";

/// What a principal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// An agent's API key (`ApiKey`).
    ApiKey,
    /// An auditor of the console and `atdp-audit` (`Auditor`).
    Auditor,
}

/// One API key or auditor as `entities.json` holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Principal {
    /// `api_key` or `auditor`.
    pub kind: Kind,
    /// The entity id: the SHA-256 (hex) of the key, or a name for auditors set up by hand.
    pub id: String,
    /// An API key's agent.
    pub agent: Option<String>,
    /// An API key's tenant (its agent's), or an auditor's tenants.
    pub tenants: Vec<String>,
    /// An auditor's role (`compliance_officer`, …).
    pub role: Option<String>,
    /// An API key's `active`; auditors are active while listed.
    pub active: bool,
}

/// The API keys and auditors of an `entities.json` text, by id.
pub fn parse(entities: &str) -> Result<Vec<Principal>> {
    let entities: Vec<Value> = serde_json::from_str(entities)
        .map_err(|e| Error::Policy(format!("{ENTITIES_FILE}: {e}")))?;
    let tenant_of = |agent: &str| -> Vec<String> {
        entities
            .iter()
            .find(|e| uid(e) == Some(("Agent", agent)))
            .map(|e| parents(e, "Tenant"))
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for entity in &entities {
        match uid(entity) {
            Some(("ApiKey", id)) => {
                let agents = parents(entity, "Agent");
                let mut tenants: Vec<String> = agents.iter().flat_map(|a| tenant_of(a)).collect();
                tenants.extend(parents(entity, "Tenant"));
                tenants.sort();
                tenants.dedup();
                out.push(Principal {
                    kind: Kind::ApiKey,
                    id: id.to_owned(),
                    agent: agents.into_iter().next(),
                    tenants,
                    role: None,
                    active: entity["attrs"]["active"].as_bool().unwrap_or(false),
                });
            }
            Some(("Auditor", id)) => {
                let mut tenants: Vec<String> = entity["attrs"]["tenants"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(reference)
                    .map(|(_, id)| id.to_owned())
                    .collect();
                tenants.sort();
                out.push(Principal {
                    kind: Kind::Auditor,
                    id: id.to_owned(),
                    agent: None,
                    tenants,
                    role: entity["attrs"]["role"].as_str().map(str::to_owned),
                    active: true,
                });
            }
            _ => {}
        }
    }
    out.sort_by(|a, b| (a.kind, &a.id).cmp(&(b.kind, &b.id)));
    Ok(out)
}

/// An entity reference as Cedar's JSON accepts it: `{"type", "id"}` or
/// `{"__entity": {"type", "id"}}`; the type without the namespace.
fn reference(value: &Value) -> Option<(&str, &str)> {
    let value = value.get("__entity").unwrap_or(value);
    let kind = value["type"].as_str()?.strip_prefix(NAMESPACE)?;
    Some((kind, value["id"].as_str()?))
}

/// The type (without the namespace) and id of an entity.
pub(crate) fn uid(entity: &Value) -> Option<(&str, &str)> {
    reference(&entity["uid"])
}

/// The ids of an entity's parents of type `kind`.
pub(crate) fn parents(entity: &Value, kind: &str) -> Vec<String> {
    entity["parents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(reference)
        .filter(|(k, _)| *k == kind)
        .map(|(_, id)| id.to_owned())
        .collect()
}

/// How the principals changed from `before` to `after`, by id: for the audit event of a
/// policy reload. Empty lists when nothing changed.
pub fn changes(before: &[Principal], after: &[Principal]) -> Value {
    let index = |list: &[Principal]| -> BTreeMap<(Kind, String), bool> {
        list.iter()
            .map(|p| ((p.kind, p.id.clone()), p.active))
            .collect()
    };
    let whole = |list: &[Principal]| -> BTreeMap<(Kind, String), Principal> {
        list.iter()
            .map(|p| ((p.kind, p.id.clone()), p.clone()))
            .collect()
    };
    let (was, now) = (whole(before), whole(after));
    // The same key or auditor with another agent, tenants or role.
    let changed: Vec<Value> = now
        .iter()
        .filter(|(k, p)| {
            was.get(*k).is_some_and(|old| {
                (&old.agent, &old.tenants, &old.role) != (&p.agent, &p.tenants, &p.role)
            })
        })
        .map(|((kind, id), _)| json!({"kind": kind, "id": id}))
        .collect();
    let (old, new) = (index(before), index(after));
    let ids = |pick: &dyn Fn(&(Kind, String), bool) -> bool, from: &BTreeMap<_, _>| -> Vec<Value> {
        from.iter()
            .filter(|(k, a)| pick(k, **a))
            .map(|((kind, id), _)| json!({"kind": kind, "id": id}))
            .collect()
    };
    json!({
        "added": ids(&|k, _| !old.contains_key(k), &new),
        "removed": ids(&|k, _| !new.contains_key(k), &old),
        "revoked": ids(&|k, active| !active && old.get(k) == Some(&true), &new),
        "reactivated": ids(&|k, active| active && old.get(k) == Some(&false), &new),
        "changed": changed,
    })
}
