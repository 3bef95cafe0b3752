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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde::Serialize;

use crate::engine::{Engine, Shared};
use crate::error::ApiError;
use crate::error::{Error, Result};
use crate::registry::{Action, Event};
use crate::serving::{Serving, Status};
use crate::watch::Watcher;

/// How long a refused pin is answered from memory, without reading the registry again.
const REFUSED_FOR: Duration = Duration::from_secs(30);

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

/// The pinned versions loaded, and the bookkeeping that bounds them.
struct Pins {
    max: usize,
    /// Held only to look up, insert or evict: never across a load or a registry read.
    loaded: Mutex<Vec<Pinned>>,
    /// One pin loads at a time, so that at most `max` pinned engines (and the one loading)
    /// are ever held.
    loading: tokio::sync::Mutex<()>,
    /// Pins refused lately (not published, refused by the gate, rolled back from), by
    /// policy and version, with when.
    refused: Mutex<HashMap<(String, u32), Instant>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Pins {
    /// A loaded pin; one whose engine failed its last request leaves, to be loaded again.
    fn find(&self, policy: &str, number: Option<u32>) -> Option<Shared> {
        let mut loaded = lock(&self.loaded);
        let at = loaded
            .iter()
            .position(|p| p.policy == policy && p.number == number)?;
        if loaded[at].engine.failing() > 0 {
            loaded.swap_remove(at);
            return None;
        }
        let pinned = &mut loaded[at];
        pinned.used = Instant::now();
        Some(pinned.engine.clone())
    }

    fn refused_lately(&self, policy: &str, number: u32) -> bool {
        let mut refused = lock(&self.refused);
        refused.retain(|_, at| at.elapsed() < REFUSED_FOR);
        refused.contains_key(&(policy.to_owned(), number))
    }

    fn refuse(&self, policy: &str, number: u32) {
        lock(&self.refused).insert((policy.to_owned(), number), Instant::now());
    }

    /// Drops the least recently used pins until one more fits.
    fn make_room(&self) {
        let mut loaded = lock(&self.loaded);
        while !loaded.is_empty() && loaded.len() >= self.max {
            let oldest = loaded
                .iter()
                .enumerate()
                .min_by_key(|(_, p)| p.used)
                .map(|(i, _)| i)
                .unwrap_or_default();
            loaded.swap_remove(oldest);
        }
    }

    /// Drops the pins of `policy` whose versions are in `withdrawn`.
    fn drop_withdrawn(&self, policy: &str, withdrawn: &BTreeSet<u32>) {
        lock(&self.loaded)
            .retain(|p| p.policy != policy || p.number.is_none_or(|n| !withdrawn.contains(&n)));
    }
}

/// The policies one process serves.
pub struct Fleet {
    members: BTreeMap<String, Member>,
    default: Option<String>,
    pins: Arc<Pins>,
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
    /// Each policy's status, by name. A policy's request and failure counts include its
    /// pinned versions' requests.
    pub policies: BTreeMap<String, Status>,
    /// Pinned versions loaded now (`support@v3`).
    pub pinned: Vec<String>,
}

/// Where a request goes: the policy whose counters it updates, and the engine that answers.
pub(crate) struct Route {
    pub serving: Arc<Serving>,
    pub engine: Shared,
    /// The version that is to answer a copy of the request in shadow (`support@v8`).
    pub shadow: Option<String>,
}

/// The request header by which the proxy marks a shadow copy (it never forwards a client's).
pub const COPY_HEADER: &str = "x-atdp-shadow-copy";

/// Versions a policy's log withdrew from serving: refused by the gate, or left by a rollback,
/// unless promoted again since; and retired ones, for good.
fn withdrawn(log: &[Event]) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    let mut retired = BTreeSet::new();
    for event in log {
        match event.action {
            Action::Retire => {
                retired.insert(event.version);
            }
            Action::Reject => {
                out.insert(event.version);
            }
            Action::Rollback => {
                if let Some(left) = event.previous {
                    out.insert(left);
                }
            }
            Action::Promote => {
                out.remove(&event.version);
            }
            Action::Canary | Action::Shadow => {}
        }
    }
    out.extend(retired);
    out
}

impl Fleet {
    /// Loads the promoted version of every watcher's policy (the base model where none is
    /// promoted). `default` takes requests whose `model` names no served policy; with one
    /// policy and no default, that policy is the default. A policy named twice, or a default
    /// that is not served, is an error. A version that cannot be served at start is an error
    /// with one policy; with several, that policy serves its base model, the refusal is in
    /// its status, and its watcher goes on following the registry.
    pub async fn start(
        watchers: Vec<Watcher>,
        default: Option<String>,
        max_pinned: usize,
    ) -> Result<Arc<Fleet>> {
        if watchers.is_empty() {
            return Err(Error::Config("serve at least one policy".into()));
        }
        let several = watchers.len() > 1;
        let mut members = BTreeMap::new();
        for watcher in watchers {
            let policy = watcher.registry.policy().to_owned();
            if members.contains_key(&policy) {
                return Err(Error::Config(format!("policy {policy} is named twice")));
            }
            let serving = match watcher.start().await {
                Ok(serving) => serving,
                Err(e) if several => {
                    tracing::error!(%policy, error = %e, "Cannot serve the promoted version at start; serving the base model.");
                    let serving = Serving::new(watcher.prepare(None).await?);
                    serving.refused(format!("at start: {e}"));
                    serving
                }
                Err(e) => return Err(e),
            };
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
            pins: Arc::new(Pins {
                max: max_pinned,
                loaded: Mutex::new(Vec::new()),
                loading: tokio::sync::Mutex::new(()),
                refused: Mutex::new(HashMap::new()),
            }),
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
            pins: Arc::new(Pins {
                max: 0,
                loaded: Mutex::new(Vec::new()),
                loading: tokio::sync::Mutex::new(()),
                refused: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Follows every policy's registry every `poll`, each on its own task; pinned versions
    /// that the log withdraws (refused by the gate, rolled back from) leave within a poll.
    pub fn follow(&self, poll: Duration) {
        for (policy, member) in &self.members {
            let Some(watcher) = &member.watcher else {
                continue;
            };
            tokio::spawn(watcher.clone().run(member.serving.clone(), poll));
            if self.pins.max > 0 {
                let (pins, registry, policy) =
                    (self.pins.clone(), watcher.registry.clone(), policy.clone());
                tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(poll).await;
                        if let Ok(log) = registry.log().await {
                            pins.drop_withdrawn(&policy, &withdrawn(&log));
                        }
                    }
                });
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
    pub fn status(&self) -> FleetStatus {
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
        let pinned = lock(&self.pins.loaded)
            .iter()
            .map(|p| p.engine.version.to_string())
            .collect();
        FleetStatus {
            main,
            policies,
            pinned,
        }
    }

    /// The engine for a shadow copy the proxy sends (`copy`: it carries [`COPY_HEADER`]):
    /// only the running shadow (or canary) engine of the version the copy names answers it;
    /// anything else is the 404 of an unknown model, and never a load.
    fn copy_route(&self, model: &str) -> Result<Route, ApiError> {
        let (name, pin) = model.split_once('@').ok_or_else(|| unknown(model))?;
        let member = self.members.get(name).ok_or_else(|| unknown(model))?;
        let number = parse_pin(pin).flatten().ok_or_else(|| unknown(model))?;
        let serving = member.serving.clone();
        let engine = serving
            .canary_engine()
            .filter(|e| e.version.number == Some(number))
            .ok_or_else(|| unknown(model))?;
        Ok(Route {
            serving,
            engine,
            shadow: None,
        })
    }

    /// The engine for a request's `model`; `copy`: a shadow copy from the proxy
    /// ([`Fleet::copy_route`]).
    pub(crate) async fn route(&self, model: Option<&str>, copy: bool) -> Result<Route, ApiError> {
        let model = model.unwrap_or_default();
        if copy {
            return self.copy_route(model);
        }
        let (name, pin) = match model.split_once('@') {
            Some((name, pin)) => (name, Some(pin)),
            None => (model, None),
        };
        let member = match (self.members.get(name), pin) {
            (Some(member), _) => member,
            (None, None) => match self.default.as_ref().and_then(|d| self.members.get(d)) {
                Some(member) => member,
                None => return Err(unknown(model)),
            },
            (None, Some(_)) => return Err(unknown(model)),
        };
        let serving = member.serving.clone();
        let Some(pin) = pin else {
            let (engine, shadow) = serving.pick_with_shadow();
            return Ok(Route {
                serving,
                engine,
                shadow,
            });
        };
        let current = serving.current();
        // A malformed pin gets the answer of an unknown model: a different one for a policy
        // that is served would tell which are.
        let number = parse_pin(pin).ok_or_else(|| unknown(model))?;
        if current.version.number == number {
            return Ok(Route {
                serving,
                engine: current,
                shadow: None,
            });
        }
        let engine = self.pinned(name, member, number, model).await?;
        Ok(Route {
            serving,
            engine,
            shadow: None,
        })
    }

    /// A pinned version's engine: kept from an earlier request, or fetched, checked and
    /// loaded now. A pin that is refused for any reason gets the same answer as an unknown
    /// model, so that the answer tells nothing about the policy's versions.
    async fn pinned(
        &self,
        name: &str,
        member: &Member,
        number: Option<u32>,
        model: &str,
    ) -> Result<Shared, ApiError> {
        if let Some(engine) = self.pins.find(name, number) {
            return Ok(engine);
        }
        let Some(watcher) = member.watcher.clone().filter(|_| self.pins.max > 0) else {
            return Err(unknown(model));
        };
        if number.is_some_and(|n| self.pins.refused_lately(name, n)) {
            return Err(unknown(model));
        }
        // The load runs on its own task: a client that leaves does not cut it short (its
        // engine is kept for the next request), and loads never overlap.
        let pins = self.pins.clone();
        let policy = name.to_owned();
        let load = tokio::spawn(async move {
            let _one = pins.loading.lock().await;
            if let Some(engine) = pins.find(&policy, number) {
                return Ok(engine);
            }
            if let Some(n) = number {
                if pins.refused_lately(&policy, n) {
                    return Err(Refused::Unknown);
                }
                check_pin(&pins, &policy, &watcher, n).await?;
            }
            pins.make_room();
            let engine = watcher.prepare(number).await.map_err(|e| {
                tracing::error!(%policy, version = %pin_name(number), error = %e, "Could not load a pinned version.");
                // Not tried again for a while: a damaged version costs one load, not one
                // per request.
                if let Some(n) = number {
                    pins.refuse(&policy, n);
                }
                Refused::Load
            })?;
            // The log may have withdrawn it while it loaded.
            if let Some(n) = number {
                check_pin(&pins, &policy, &watcher, n).await?;
            }
            let engine = Arc::new(engine);
            lock(&pins.loaded).push(Pinned {
                policy,
                number,
                engine: engine.clone(),
                used: Instant::now(),
            });
            Ok(engine)
        });
        match load.await {
            Ok(Ok(engine)) => Ok(engine),
            Ok(Err(Refused::Unknown)) => Err(unknown(model)),
            Ok(Err(Refused::Load)) | Err(_) => Err(ApiError::server(format!(
                "the version `{}` could not be loaded; the server's log says why",
                shown(model)
            ))),
        }
    }
}

/// Why a pin was not served.
enum Refused {
    /// Not published, withdrawn, or the registry could not be read: answered as unknown.
    Unknown,
    /// It failed to load.
    Load,
}

/// A pin must name a published version the log has not withdrawn; a refusal is remembered
/// for a while.
async fn check_pin(
    pins: &Pins,
    policy: &str,
    watcher: &Watcher,
    number: u32,
) -> std::result::Result<(), Refused> {
    let registry = &watcher.registry;
    let unreadable = |e: Error| {
        tracing::warn!(%policy, error = %e, "Could not read the registry for a pin.");
        Refused::Unknown
    };
    let published = registry.versions().await.map_err(unreadable)?;
    let log = registry.log().await.map_err(unreadable)?;
    if !published.contains(&number) || withdrawn(&log).contains(&number) {
        tracing::info!(%policy, version = number, "Refused a pin: not published, or withdrawn by the log.");
        pins.refuse(policy, number);
        return Err(Refused::Unknown);
    }
    Ok(())
}

/// The 404 for a model no served policy answers to, and for every refused pin. It names no
/// served policy and none of its versions: the process may serve several tenants' agents,
/// and one agent learns nothing of the others.
fn unknown(model: &str) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        kind: "invalid_request_error",
        message: format!(
            "The model `{}` does not exist or you do not have access to it.",
            shown(model)
        ),
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

    fn event(action: Action, version: u32, previous: Option<u32>) -> Event {
        Event {
            seq: 0,
            action,
            version,
            previous,
            at: String::new(),
            by: String::new(),
            reason: String::new(),
            report: None,
            share: None,
        }
    }

    #[test]
    fn rejected_and_rolled_back_versions_are_withdrawn_until_promoted_again() {
        let log = [
            event(Action::Promote, 1, None),
            event(Action::Reject, 2, Some(1)),
            event(Action::Promote, 3, Some(1)),
            event(Action::Rollback, 1, Some(3)),
        ];
        assert_eq!(withdrawn(&log), BTreeSet::from([2, 3]));
        let mut again = log.to_vec();
        again.push(event(Action::Promote, 3, Some(1)));
        assert_eq!(withdrawn(&again), BTreeSet::from([2]));
        again.push(event(Action::Retire, 1, Some(3)));
        again.push(event(Action::Promote, 1, Some(3)));
        assert_eq!(withdrawn(&again), BTreeSet::from([1, 2]));
    }

    #[test]
    fn model_names_are_quoted_short_and_without_control_characters() {
        assert_eq!(shown("support\n\u{1b}[31m"), "support[31m");
        assert_eq!(shown(&"x".repeat(200)).len(), 64);
    }
}
