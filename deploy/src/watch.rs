//! Following the registry: when its log names another version, fetch it, check it against
//! the base model, load it on a fresh engine, try one request on it, and only then swap.
//! Anything that fails on the way leaves the served version as it was, with the reason in
//! `/atdp/status` and the log.
//!
//! Keeping the served engine alive: an engine that failed a request is tried with one
//! request at the next poll; when that fails too (mistral.rs's engine thread panicked and
//! every request now fails), a fresh load of the same version replaces it.
//!
//! A canary the log names is fetched, checked, loaded and tried the same way and then takes
//! its share of the requests beside the served engine; when the log ends it, it stops taking
//! requests (those it has finish on it), and when the log promotes it, its engine becomes the
//! served one without a second load. A canary that cannot be loaded is not tried again until
//! the log names another; a canary engine that dies is not repaired (its failures are the
//! candidate's): it stops taking requests and is not loaded again while the log names it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::{Adapter, BaseModel, Engine, EngineOptions, Shared, Version};
use crate::error::{Error, Result};
use crate::generate;
use crate::openai;
use crate::registry::{Canary, Registry};
use crate::serving::{Serving, SwapReport};

/// How long the trial request of an engine that failed requests may take.
const TRIAL_TIMEOUT: Duration = Duration::from_secs(30);

/// What the watcher needs.
#[derive(Debug, Clone)]
pub struct Watcher {
    /// The policy's registry.
    pub registry: Registry,
    /// The base model.
    pub base: BaseModel,
    /// Where fetched versions are kept.
    pub cache: PathBuf,
    /// How engines are built.
    pub options: EngineOptions,
    /// How long a swap waits for the old engine's requests.
    pub drain: Duration,
}

impl Watcher {
    /// Loads the version the registry names now (or the base model when none is promoted).
    /// A refused version at start is an error: there is nothing else to serve.
    pub async fn start(&self) -> Result<Arc<Serving>> {
        let state = self.registry.state().await?;
        let engine = self.prepare(state.serving).await?;
        Ok(Serving::new(engine))
    }

    /// Fetches, checks, loads and tries `number` (none: the base model).
    pub async fn prepare(&self, number: Option<u32>) -> Result<Engine> {
        let version = Version {
            policy: self.registry.policy().to_owned(),
            number,
        };
        let adapter = match number {
            Some(n) => {
                let dir = self.registry.fetch(n, &self.cache).await?;
                Some(Adapter::check(&dir, &self.base, &version.to_string())?)
            }
            None => None,
        };
        let engine = Engine::load(&self.base, adapter.as_ref(), version, &self.options).await?;
        trial(&engine).await?;
        Ok(engine)
    }

    /// One look at the registry; swaps when it names another version. `refused` is the
    /// version refused last, not tried again until the registry names something else.
    pub async fn check_once(
        &self,
        serving: &Serving,
        refused: &mut Option<Option<u32>>,
    ) -> Result<Option<SwapReport>> {
        // A dead engine is repaired before the registry is read: requests wait on it even
        // when the registry cannot be read or names a version not served.
        // (The engine is not held past this check: a swap waits for its holders.)
        let engine = serving.current();
        if engine.failing() > 0 {
            if let Some(report) = self.repair_if_dead(serving, engine).await {
                return Ok(Some(report));
            }
        } else {
            drop(engine);
        }
        let state = self.registry.state().await?;
        let want = state.serving;
        let current = serving.current().version.number;
        if want != current
            && let Some(report) = serving.promote_canary(want, self.drain).await
        {
            *refused = None;
            tracing::info!(from = %report.from, to = %report.to, drain_ms = report.drain_ms,
                "Promoted the canary.");
            return Ok(Some(report));
        }
        self.follow_canary(serving, state.canary).await;
        let retired = current.is_some_and(|n| state.retired.contains(&n));
        if want == current {
            return Ok(None);
        }
        if *refused == Some(want) {
            // A retired version never serves on, even while the one in its place is refused.
            return Ok(if retired && want.is_some() {
                self.serve_base(serving).await
            } else {
                None
            });
        }
        let started = Instant::now();
        match self.prepare(want).await {
            Ok(engine) => {
                *refused = None;
                let load_ms = started.elapsed().as_millis() as u64;
                let report = serving.swap(engine, load_ms, self.drain).await;
                tracing::info!(from = %report.from, to = %report.to, load_ms = report.load_ms,
                    drain_ms = report.drain_ms, "Swapped to the promoted version.");
                Ok(Some(report))
            }
            Err(e) => {
                // A version that cannot be read now (the store, the network) is tried again
                // at the next poll; one refused on its merits, not until the log changes.
                let transient = matches!(e, Error::Store(_) | Error::Lake(_) | Error::Io { .. });
                if !transient {
                    *refused = Some(want);
                }
                let name = want.map_or_else(|| "base".to_owned(), |n| format!("v{n}"));
                let message = format!("{name}: {e}");
                tracing::error!(version = %name, error = %e, "Refused the promoted version; the served one stays unless it is retired.");
                serving.refused(message);
                // A retired version never serves on: when the one the log names in its
                // place cannot be loaded, the base model takes over until it can.
                if retired
                    && want.is_some()
                    && let Some(report) = self.serve_base(serving).await
                {
                    return Ok(Some(report));
                }
                Err(e)
            }
        }
    }

    /// Swaps the base model in for a retired version whose successor cannot be loaded.
    async fn serve_base(&self, serving: &Serving) -> Option<SwapReport> {
        let started = Instant::now();
        match self.prepare(None).await {
            Ok(engine) => {
                let load_ms = started.elapsed().as_millis() as u64;
                let report = serving.swap(engine, load_ms, self.drain).await;
                tracing::warn!(from = %report.from, to = %report.to,
                    "The served version is retired and its successor cannot be loaded; serving the base model.");
                Some(report)
            }
            Err(error) => {
                tracing::error!(error = %error, "The served version is retired, and neither its successor nor the base model can be loaded.");
                None
            }
        }
    }

    /// Starts, changes or stops the canary as the log says. A version that could not be
    /// loaded as the canary is remembered in the status and not tried again while the log
    /// names it.
    async fn follow_canary(&self, serving: &Serving, wanted: Option<Canary>) {
        // A canary that failed requests is tried with one; a dead one stops taking requests
        // and is not loaded again while the log names it.
        if let Some(engine) = serving.canary_engine()
            && engine.failing() > 0
            && !answers(&engine).await
            && let Some(number) = engine.version.number
        {
            let version = engine.version.to_string();
            drop(engine);
            tracing::error!(%version, "The canary fails every request; it stops taking requests.");
            serving.set_canary(None, 0.0, false);
            serving.refuse_canary(
                number,
                format!("canary {version}: its engine fails every request"),
            );
            return;
        }
        let loaded = serving.canary_trial();
        let Some(wanted) = wanted else {
            if loaded.is_some() {
                serving.set_canary(None, 0.0, false);
                tracing::info!("Stopped the canary.");
            }
            return;
        };
        match loaded {
            Some((Some(v), share, shadow)) if v == wanted.version => {
                if share != wanted.share || shadow != wanted.shadow {
                    serving.set_canary_share(wanted.share, wanted.shadow);
                }
                return;
            }
            Some(_) => serving.set_canary(None, 0.0, false),
            None => {}
        }
        if serving.canary_refused() == Some(wanted.version) {
            return;
        }
        match self.prepare(Some(wanted.version)).await {
            Ok(engine) => {
                tracing::info!(
                    version = wanted.version,
                    share = wanted.share,
                    shadow = wanted.shadow,
                    "Started the canary."
                );
                serving.set_canary(Some(engine), wanted.share, wanted.shadow);
            }
            Err(e) => {
                tracing::error!(version = wanted.version, error = %e, "Refused the canary; the served version takes every request.");
                serving.refuse_canary(wanted.version, format!("canary v{}: {e}", wanted.version));
            }
        }
    }

    /// Tries `engine`, which failed requests, with one request; when that fails too, loads
    /// its version afresh and puts the new engine in its place.
    async fn repair_if_dead(&self, serving: &Serving, engine: Shared) -> Option<SwapReport> {
        if answers(&engine).await {
            return None;
        }
        let number = engine.version.number;
        let version = engine.version.to_string();
        drop(engine);
        tracing::error!(%version, "The served engine fails every request; loading the version again.");
        let started = Instant::now();
        match self.prepare(number).await {
            Ok(fresh) => {
                let load_ms = started.elapsed().as_millis() as u64;
                let report = serving.repair(fresh, load_ms, self.drain).await;
                tracing::warn!(%version, load_ms, "Replaced the dead engine.");
                Some(report)
            }
            Err(e) => {
                tracing::error!(%version, error = %e, "Could not load the version again; will retry.");
                None
            }
        }
    }

    /// Keeps `serving`'s engine alive without following the registry (a candidate under
    /// evaluation): every `poll`, an engine that failed requests is tried with one token and,
    /// when that fails too, replaced by a fresh load of its version, on which the requests
    /// it failed run again ([`Serving::replacement`]). Runs until the task is dropped.
    pub async fn keep_alive(self, serving: Arc<Serving>, poll: Duration) {
        serving.watched();
        loop {
            tokio::time::sleep(poll).await;
            let engine = serving.current();
            if engine.failing() > 0 {
                self.repair_if_dead(&serving, engine).await;
            }
        }
    }

    /// Follows the registry every `poll` until the process ends, and repairs a dead engine:
    /// requests it failed wait for the repair ([`Serving::replacement`]).
    pub async fn run(self, serving: Arc<Serving>, poll: Duration) {
        serving.watched();
        let mut refused = None;
        loop {
            tokio::time::sleep(poll).await;
            if let Err(e) = self.check_once(&serving, &mut refused).await
                && !matches!(e, Error::Adapter { .. } | Error::Engine(_))
            {
                tracing::warn!(error = %e, "Could not read the registry; will retry.");
            }
        }
    }
}

/// Tries `engine`, which failed requests, with one request ([`TRIAL_TIMEOUT`] at most); an
/// answer clears its failures.
async fn answers(engine: &Engine) -> bool {
    let ticket = engine.ticket();
    let alive = matches!(
        tokio::time::timeout(TRIAL_TIMEOUT, trial(engine)).await,
        Ok(Ok(()))
    );
    if alive {
        engine.note(ticket, false);
    }
    alive
}

/// One greedy token on a new engine before it takes traffic: it must answer, with a finite
/// log-probability (a merged adapter full of huge values gives NaN logits).
async fn trial(engine: &Engine) -> Result<()> {
    let refused = |e: crate::error::ApiError| {
        Error::Engine(format!(
            "{}: the first request failed: {}",
            engine.version, e.message
        ))
    };
    let request = openai::parse(
        br#"{"messages": [{"role": "user", "content": "ping"}], "max_tokens": 1, "temperature": 0, "logprobs": true}"#,
    )
    .map_err(refused)?;
    let job = request
        .job(&engine.format, engine.context)
        .map_err(refused)?;
    let generated = generate::whole(engine, &job).await.map_err(refused)?;
    match generated.logprobs.first().map(|l| l.logprob) {
        Some(l) if l.is_finite() => Ok(()),
        _ => Err(Error::Adapter {
            version: engine.version.to_string(),
            message: "the merged model gives no finite log-probability for its first token".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use atdp_model_files::Arch;

    use atdp_trainer::{InitSpec, init_model};

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keep_alive_tries_an_engine_that_failed_and_the_waiting_request_gets_its_verdict() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model");
        init_model(&model, &InitSpec::tiny(Arch::Qwen2)).unwrap();
        let lake = dir.path().join("lake");
        let watcher = Watcher {
            registry: Registry::open(&lake.display().to_string(), HashMap::new(), "support")
                .unwrap(),
            base: BaseModel::open(&model).unwrap(),
            cache: dir.path().join("cache"),
            options: EngineOptions::default(),
            drain: Duration::from_secs(1),
        };
        let serving = Serving::new(watcher.prepare(None).await.unwrap());
        let engine = serving.current();
        serving.count(&engine, engine.ticket(), true);
        let task =
            tokio::spawn(watcher.keep_alive(Arc::clone(&serving), Duration::from_millis(50)));
        // The engine is alive: the trial token clears its failure, and a request that waits
        // on it is answered at once with its own failure.
        let deadline = Instant::now() + Duration::from_secs(10);
        while engine.failing() > 0 {
            assert!(
                Instant::now() < deadline,
                "keep_alive never tried the engine"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let verdict = tokio::time::timeout(Duration::from_secs(1), serving.replacement(&engine));
        assert!(verdict.await.expect("no wait").is_none());
        assert!(
            Arc::ptr_eq(&serving.current(), &engine),
            "an engine that answers stays"
        );
        assert_eq!(serving.status().repairs, 0);
        task.abort();
    }
}
