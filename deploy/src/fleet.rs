//! Several policies in one process: each follows its own registry, swaps, gates and rolls
//! back on its own, and a request picks one by its `model` field (`support`, or a published
//! version pinned as `support@v7` or `support@base`).
//!
//! Every policy's engine is mistral.rs with that policy's adapter merged into its own copy of
//! the base weights: mistral.rs 0.8.1 merges LoRA at load time, copies every tensor it loads,
//! and has no per-request adapter (see docs/deploy.md). One process still saves what a
//! process per policy repeats (the runtime, the tokenizer and chat template, the HTTP
//! server, one port for the proxy to route to); what a policy adds is measured by
//! `bench-policies`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde::Serialize;

use crate::engine::{Engine, Shared};
use crate::error::{Error, Result};
use crate::openai::ApiError;
use crate::registry::Action;
use crate::server::{Serving, Status};
use crate::watch::Watcher;

/// One policy: what it serves now and how it follows its registry (none: a fixed engine).
#[derive(Debug)]
struct Member {
    serving: Arc<Serving>,
    watcher: Option<Watcher>,
}

/// A version loaded because a request pinned it.
struct Pinned {
    policy: String,
    number: Option<u32>,
    engine: Shared,
    used: Instant,
}

/// The policies one process serves.
pub struct Fleet {
    members: BTreeMap<String, Member>,
    default: Option<String>,
    pinned: tokio::sync::Mutex<Vec<Pinned>>,
    max_pinned: usize,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("policies", &self.members.keys().collect::<Vec<_>>())
            .field("default", &self.default)
            .finish_non_exhaustive()
    }
}

/// What `/atdp/status` reports: the default policy's status at the top level (a one-policy
/// server's whole status), every policy's under `policies`, and the pinned versions loaded.
#[derive(Debug, Clone, Serialize)]
pub struct FleetStatus {
    /// The default policy's status (the first by name when there is no default).
    #[serde(flatten)]
    pub main: Status,
    /// Each policy's status, by name.
    pub policies: BTreeMap<String, Status>,
    /// Pinned versions loaded now (`support@v3`).
    pub pinned: Vec<String>,
}

/// Where a request goes: the policy whose counters it updates, and the engine that answers.
pub(crate) struct Route {
    pub serving: Arc<Serving>,
    pub engine: Shared,
}

impl Fleet {
    /// Loads the promoted version of every watcher's policy (the base model where none is
    /// promoted). `default` takes requests whose `model` names no served policy; with one
    /// policy and no default, that policy is the default. A policy named twice, or a default
    /// that is not served, is an error, as is any policy that cannot be served at start.
    pub async fn start(
        watchers: Vec<Watcher>,
        default: Option<String>,
        max_pinned: usize,
    ) -> Result<Arc<Fleet>> {
        if watchers.is_empty() {
            return Err(Error::Config("serve at least one policy".into()));
        }
        let mut members = BTreeMap::new();
        for watcher in watchers {
            let policy = watcher.registry.policy().to_owned();
            if members.contains_key(&policy) {
                return Err(Error::Config(format!("policy {policy} is named twice")));
            }
            let serving = watcher.start().await?;
            members.insert(
                policy,
                Member {
                    serving,
                    watcher: Some(watcher),
                },
            );
        }
        let default = match default {
            Some(d) if !members.contains_key(&d) => {
                return Err(Error::Config(format!(
                    "the default policy {d} is not one of the served policies"
                )));
            }
            Some(d) => Some(d),
            None if members.len() == 1 => members.keys().next().cloned(),
            None => None,
        };
        Ok(Arc::new(Fleet {
            members,
            default,
            pinned: tokio::sync::Mutex::new(Vec::new()),
            max_pinned,
        }))
    }

    /// One engine under its policy's name, following no registry and taking every request
    /// (a candidate the gate evaluates).
    pub fn fixed(engine: Engine) -> Arc<Fleet> {
        let policy = engine.version.policy.clone();
        let member = Member {
            serving: Serving::new(engine),
            watcher: None,
        };
        Arc::new(Fleet {
            members: BTreeMap::from([(policy.clone(), member)]),
            default: Some(policy),
            pinned: tokio::sync::Mutex::new(Vec::new()),
            max_pinned: 0,
        })
    }

    /// Follows every policy's registry every `poll`, each on its own task.
    pub fn follow(&self, poll: Duration) {
        for member in self.members.values() {
            if let Some(watcher) = &member.watcher {
                tokio::spawn(watcher.clone().run(member.serving.clone(), poll));
            }
        }
    }

    /// The served policies' names.
    pub fn policies(&self) -> impl Iterator<Item = &str> {
        self.members.keys().map(String::as_str)
    }

    /// What `policy` serves now.
    pub fn serving(&self, policy: &str) -> Option<&Arc<Serving>> {
        self.members.get(policy).map(|m| &m.serving)
    }

    /// The policy that takes requests naming none.
    pub fn default_policy(&self) -> Option<&str> {
        self.default.as_deref()
    }

    /// Every policy's status.
    pub async fn status(&self) -> FleetStatus {
        let policies: BTreeMap<String, Status> = self
            .members
            .iter()
            .map(|(name, m)| (name.clone(), m.serving.status()))
            .collect();
        let main_name = self
            .default
            .clone()
            .or_else(|| self.members.keys().next().cloned())
            .unwrap_or_default();
        let main = policies.get(&main_name).cloned().unwrap_or_default();
        let pinned = self
            .pinned
            .lock()
            .await
            .iter()
            .map(|p| p.engine.version.to_string())
            .collect();
        FleetStatus {
            main,
            policies,
            pinned,
        }
    }

    /// The engine for a request's `model`.
    pub(crate) async fn route(&self, model: Option<&str>) -> Result<Route, ApiError> {
        let model = model.unwrap_or_default();
        let (name, pin) = match model.split_once('@') {
            Some((name, pin)) => (name, Some(pin)),
            None => (model, None),
        };
        let member = match (self.members.get(name), pin) {
            (Some(member), _) => member,
            (None, None) => match self.default.as_ref().and_then(|d| self.members.get(d)) {
                Some(member) => member,
                None => return Err(self.unknown(model)),
            },
            (None, Some(_)) => return Err(self.unknown(model)),
        };
        let serving = member.serving.clone();
        let current = serving.current();
        let Some(pin) = pin else {
            return Ok(Route {
                serving,
                engine: current,
            });
        };
        let number = parse_pin(pin).ok_or_else(|| {
            ApiError::invalid(
                format!(
                    "`model` pins a version as `{name}@v<N>` or `{name}@base`, not `{}`",
                    shown(pin)
                ),
                Some("model"),
            )
        })?;
        if current.version.number == number {
            return Ok(Route {
                serving,
                engine: current,
            });
        }
        let engine = self.pinned(name, member, number).await?;
        Ok(Route { serving, engine })
    }

    /// A pinned version's engine: kept from an earlier request, or fetched, checked and
    /// loaded now. The least recently used pinned engine leaves when more than `max_pinned`
    /// are loaded (requests running on it finish on it).
    async fn pinned(
        &self,
        name: &str,
        member: &Member,
        number: Option<u32>,
    ) -> Result<Shared, ApiError> {
        let mut pinned = self.pinned.lock().await;
        if let Some(p) = pinned
            .iter_mut()
            .find(|p| p.policy == name && p.number == number)
        {
            p.used = Instant::now();
            return Ok(p.engine.clone());
        }
        let Some(watcher) = member.watcher.as_ref().filter(|_| self.max_pinned > 0) else {
            return Err(pin_error(
                StatusCode::NOT_FOUND,
                format!("{name} serves its promoted version only: pinned versions are off"),
            ));
        };
        if let Some(n) = number {
            check_pin(name, watcher, n).await?;
        }
        let engine = watcher.prepare(number).await.map_err(|e| {
            tracing::error!(policy = %name, error = %e, "Could not load a pinned version.");
            ApiError::server(format!("could not load {name}@{}: {e}", pin_name(number)))
        })?;
        let engine = Arc::new(engine);
        while pinned.len() >= self.max_pinned {
            let oldest = pinned
                .iter()
                .enumerate()
                .min_by_key(|(_, p)| p.used)
                .map(|(i, _)| i)
                .unwrap_or_default();
            pinned.swap_remove(oldest);
        }
        pinned.push(Pinned {
            policy: name.to_owned(),
            number,
            engine: engine.clone(),
            used: Instant::now(),
        });
        Ok(engine)
    }

    /// The 404 for a model no served policy answers to. It names no served policy: the
    /// process may serve several tenants' agents, and one agent learns nothing of the others.
    fn unknown(&self, model: &str) -> ApiError {
        pin_error(
            StatusCode::NOT_FOUND,
            format!(
                "The model `{}` does not exist or you do not have access to it.",
                shown(model)
            ),
        )
    }
}

/// A pin must name a published version the gate did not refuse.
async fn check_pin(name: &str, watcher: &Watcher, number: u32) -> Result<(), ApiError> {
    let registry = &watcher.registry;
    let unreadable = |e: Error| {
        tracing::warn!(policy = %name, error = %e, "Could not read the registry for a pin.");
        ApiError::server(format!("could not read the registry of {name}"))
    };
    let versions = registry.versions().await.map_err(unreadable)?;
    if !versions.contains(&number) {
        return Err(pin_error(
            StatusCode::NOT_FOUND,
            format!("{name} has no published version v{number}"),
        ));
    }
    let log = registry.log().await.map_err(unreadable)?;
    if log
        .iter()
        .any(|e| e.action == Action::Reject && e.version == number)
    {
        return Err(pin_error(
            StatusCode::NOT_FOUND,
            format!("{name}@v{number} was refused by the gate and is not served"),
        ));
    }
    Ok(())
}

fn pin_error(status: StatusCode, message: String) -> ApiError {
    ApiError {
        status,
        kind: "invalid_request_error",
        message,
        param: Some("model"),
        code: Some("model_not_found"),
    }
}

/// `v7` → `Some(7)`, `base` → `None`; anything else is not a pin.
fn parse_pin(pin: &str) -> Option<Option<u32>> {
    if pin == "base" {
        return Some(None);
    }
    let digits = pin.strip_prefix('v')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.starts_with('0') {
        return None;
    }
    digits.parse().ok().map(Some)
}

fn pin_name(number: Option<u32>) -> String {
    number.map_or_else(|| "base".to_owned(), |n| format!("v{n}"))
}

/// A client's model name as quoted back: 64 characters at most, control characters dropped.
fn shown(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_a_version_number_or_base() {
        assert_eq!(parse_pin("v7"), Some(Some(7)));
        assert_eq!(parse_pin("v12"), Some(Some(12)));
        assert_eq!(parse_pin("base"), Some(None));
        for bad in [
            "",
            "v",
            "7",
            "v07",
            "v-1",
            "v1.0",
            "latest",
            "V7",
            "v99999999999",
        ] {
            assert_eq!(parse_pin(bad), None, "{bad}");
        }
    }

    #[test]
    fn model_names_are_quoted_short_and_without_control_characters() {
        assert_eq!(shown("support\n\u{1b}[31m"), "support[31m");
        assert_eq!(shown(&"x".repeat(200)).len(), 64);
    }
}
