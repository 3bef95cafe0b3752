//! Access policy with Cedar: who may call which model and tool, write rewards, read,
//! reveal and erase.
//!
//! A policy directory holds `schema.cedarschema`, `policies.cedar` and `entities.json`
//! (see `policies/examples/quickstart/`). Loading validates the policies and entities
//! against the schema; a directory that does not validate is refused with its errors.
//! [`PolicyStore`] swaps in a new policy atomically and keeps the old one in force when the
//! new one is invalid. Every evaluation error is a denial: nothing fails open.

use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, RwLock};

use cedar_policy::{
    Authorizer, Context, Decision, Entities, EntityId, EntityTypeName, EntityUid, PolicySet,
    Request, Schema, ValidationMode, Validator,
};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The namespace of the schema's types.
pub const NAMESPACE: &str = "Atdp";

/// The id under which an API key is stored: the SHA-256 (hex) of the key.
pub fn hash_api_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// The outcome of one evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the request is allowed.
    pub allowed: bool,
    /// The `@id`s of the policies that decided (the permits that allowed, or the forbids
    /// that denied); empty for a default denial.
    pub policies: Vec<String>,
    /// Evaluation errors (each one makes the decision a denial).
    pub errors: Vec<String>,
}

impl Verdict {
    fn deny(error: String) -> Verdict {
        Verdict {
            allowed: false,
            policies: Vec::new(),
            errors: vec![error],
        }
    }
}

/// A loaded, validated policy directory.
#[derive(Debug)]
pub struct AccessPolicy {
    schema: Schema,
    policies: PolicySet,
    entities: Entities,
    authorizer: Authorizer,
    /// The schema's entity types by base name (`ApiKey`), and its actions by id, parsed once.
    types: HashMap<String, EntityTypeName>,
    actions: HashMap<String, EntityUid>,
}

fn read(dir: &Path, name: &str) -> Result<String> {
    let path = dir.join(name);
    std::fs::read_to_string(&path)
        .map_err(|e| Error::Policy(format!("cannot read {}: {e}", path.display())))
}

impl AccessPolicy {
    /// Loads and validates a policy directory.
    pub fn load(dir: &Path) -> Result<AccessPolicy> {
        AccessPolicy::from_sources(
            &read(dir, "schema.cedarschema")?,
            &read(dir, "policies.cedar")?,
            &read(dir, "entities.json")?,
        )
    }

    /// Builds a policy from the three sources, validating policies and entities against
    /// the schema.
    pub fn from_sources(schema: &str, policies: &str, entities: &str) -> Result<AccessPolicy> {
        let (schema, _warnings) = Schema::from_cedarschema_str(schema)
            .map_err(|e| Error::Policy(format!("schema.cedarschema: {}", pretty(&e))))?;
        let policies = PolicySet::from_str(policies)
            .map_err(|e| Error::Policy(format!("policies.cedar: {}", pretty(&e))))?;
        let validation = Validator::new(schema.clone()).validate(&policies, ValidationMode::Strict);
        if !validation.validation_passed() {
            let errors: Vec<String> = validation.validation_errors().map(|e| pretty(e)).collect();
            return Err(Error::Policy(format!(
                "policies.cedar does not match the schema: {}",
                errors.join("; ")
            )));
        }
        let entities = Entities::from_json_str(entities, Some(&schema))
            .map_err(|e| Error::Policy(format!("entities.json: {}", pretty(&e))))?;
        let types = schema
            .entity_types()
            .map(|t| (t.basename().to_owned(), t.clone()))
            .collect();
        let actions = schema
            .actions()
            .map(|a| (a.id().unescaped().to_owned(), a.clone()))
            .collect();
        Ok(AccessPolicy {
            schema,
            policies,
            entities,
            authorizer: Authorizer::new(),
            types,
            actions,
        })
    }

    /// Decides whether `principal` may do `action` on `resource`, given `context` (a JSON
    /// object). Entity ids are given without their type's namespace: `("ApiKey", hash)`.
    pub fn decide(
        &self,
        principal: (&str, &str),
        action: &str,
        resource: (&str, &str),
        context: serde_json::Value,
    ) -> Verdict {
        match self.request(principal, action, resource, context) {
            Ok(request) => {
                let response =
                    self.authorizer
                        .is_authorized(&request, &self.policies, &self.entities);
                let errors: Vec<String> = response
                    .diagnostics()
                    .errors()
                    .map(ToString::to_string)
                    .collect();
                let policies: Vec<String> = response
                    .diagnostics()
                    .reason()
                    .map(|id| {
                        self.policies
                            .policy(id)
                            .and_then(|p| p.annotation("id").map(str::to_owned))
                            .unwrap_or_else(|| id.to_string())
                    })
                    .collect();
                Verdict {
                    allowed: response.decision() == Decision::Allow && errors.is_empty(),
                    policies,
                    errors,
                }
            }
            Err(error) => Verdict::deny(error.to_string()),
        }
    }

    fn request(
        &self,
        principal: (&str, &str),
        action: &str,
        resource: (&str, &str),
        context: serde_json::Value,
    ) -> Result<Request> {
        let uid = |kind: &str, id: &str| {
            self.types
                .get(kind)
                .map(|t| EntityUid::from_type_name_and_id(t.clone(), EntityId::new(id)))
                .ok_or_else(|| Error::Policy(format!("the schema has no entity type {kind}")))
        };
        let principal = uid(principal.0, principal.1)?;
        let action = self
            .actions
            .get(action)
            .cloned()
            .ok_or_else(|| Error::Policy(format!("the schema has no action {action}")))?;
        let resource = uid(resource.0, resource.1)?;
        let context = Context::from_json_value(context, Some((&self.schema, &action)))
            .map_err(|e| Error::Policy(format!("context: {}", pretty(&e))))?;
        Request::new(principal, action, resource, context, Some(&self.schema))
            .map_err(|e| Error::Policy(format!("request: {}", pretty(&e))))
    }
}

/// An error with its causes, on one line.
fn pretty(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The policy in force, replaced atomically on reload.
#[derive(Debug)]
pub struct PolicyStore {
    current: RwLock<(u64, Arc<AccessPolicy>)>,
}

impl PolicyStore {
    /// A store holding `policy` as version 1.
    pub fn new(policy: AccessPolicy) -> PolicyStore {
        PolicyStore {
            current: RwLock::new((1, Arc::new(policy))),
        }
    }

    /// The policy in force and its version.
    pub fn current(&self) -> (u64, Arc<AccessPolicy>) {
        let guard = self.current.read().unwrap_or_else(|p| p.into_inner());
        (guard.0, guard.1.clone())
    }

    /// Loads `dir` and puts it in force; on any error the old policy stays in force and the
    /// error is returned for the caller to report. Returns the new version.
    pub fn reload(&self, dir: &Path) -> Result<u64> {
        let policy = AccessPolicy::load(dir)?;
        let mut guard = self.current.write().unwrap_or_else(|p| p.into_inner());
        guard.0 += 1;
        guard.1 = Arc::new(policy);
        Ok(guard.0)
    }
}

#[cfg(test)]
mod tests;
