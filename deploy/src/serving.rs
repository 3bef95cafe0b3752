//! A policy's served engine: the swap to a new version (requests keep the engine they took;
//! the old one stops when its last request finishes), the repair of a dead engine and the
//! wait of the requests it failed, a canary beside it that takes a share of the requests,
//! and the counts `/atdp/status` reports.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::engine::{Engine, Shared};

/// What one swap took.
#[derive(Debug, Clone, Serialize)]
pub struct SwapReport {
    /// The version served before.
    pub from: String,
    /// The version served now.
    pub to: String,
    /// Loading and checking the new engine (while the old one kept serving).
    pub load_ms: u64,
    /// From the switch until the old engine's last request finished.
    pub drain_ms: u64,
    /// Requests still on the old engine when the drain deadline passed (they finish on it).
    pub left_draining: usize,
    /// When the switch happened (RFC 3339).
    pub at: String,
}

/// What `/atdp/status` reports.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    /// The version served.
    pub serving: String,
    /// Its adapter number (none: the base model).
    pub number: Option<u32>,
    /// Swaps done since start.
    pub swaps: u64,
    /// The last swap.
    pub last_swap: Option<SwapReport>,
    /// The last version refused, and why (the served version stayed).
    pub last_refusal: Option<String>,
    /// Requests answered since start.
    pub requests: u64,
    /// Requests that failed inside the engine since start.
    pub failures: u64,
    /// Engines found dead (failing requests and the trial request) and replaced by a fresh
    /// load of the same version, since start.
    pub repairs: u64,
    /// The canary beside the served version, if one runs (`support@v8`).
    pub canary: Option<String>,
    /// The share of requests the canary takes.
    pub canary_share: Option<f64>,
    /// Requests the canary answered since it started (in shadow: the copies it answered).
    pub canary_requests: u64,
    /// Whether the canary answers in shadow: copies of its share, replies never returned.
    pub canary_shadow: bool,
}

/// A canary's engine and its share of the requests.
#[derive(Debug)]
struct CanaryEngine {
    engine: Shared,
    share: f64,
    shadow: bool,
}

/// The engine served now and what happened to it.
#[derive(Debug)]
pub struct Serving {
    current: RwLock<Shared>,
    canary: RwLock<Option<CanaryEngine>>,
    /// Requests routed since start: the canary takes the `n`-th when `⌊n·share⌋` steps up,
    /// so exactly its share of any run of requests, spread evenly.
    routed: AtomicU64,
    status: Mutex<Status>,
    /// A watcher replaces this policy's engine when it dies.
    repaired: AtomicBool,
    /// The version last refused as the canary.
    canary_refused: Mutex<Option<u32>>,
}

/// How long a request that a dead engine failed waits for the watcher to load the version
/// afresh (its next poll, a trial token of up to 30 s, the load) before it is answered 500.
const REPAIR_WAIT: Duration = Duration::from_secs(120);

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl Serving {
    /// Starts serving `engine`.
    pub fn new(engine: Engine) -> Arc<Serving> {
        let status = Status {
            serving: engine.version.to_string(),
            number: engine.version.number,
            ..Status::default()
        };
        Arc::new(Serving {
            current: RwLock::new(Arc::new(engine)),
            canary: RwLock::new(None),
            routed: AtomicU64::new(0),
            status: Mutex::new(status),
            repaired: AtomicBool::new(false),
            canary_refused: Mutex::new(None),
        })
    }

    /// The engine a request arriving now gets.
    pub fn current(&self) -> Shared {
        match self.current.read() {
            Ok(engine) => Arc::clone(&engine),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// The engine a new request of the policy gets: the canary's for its share of the
    /// requests while one runs, else the served one.
    pub fn pick(&self) -> Shared {
        self.pick_with_shadow().0
    }

    /// The engine a new request of the policy gets, and the version (`support@v8`) that is
    /// to answer a copy of it in shadow: a canary takes its share of the requests itself; a
    /// shadow leaves them to the served engine and is named for the same share.
    pub fn pick_with_shadow(&self) -> (Shared, Option<String>) {
        let canary = match self.canary.read() {
            Ok(c) => c
                .as_ref()
                .map(|c| (Arc::clone(&c.engine), c.share, c.shadow)),
            Err(poisoned) => poisoned
                .into_inner()
                .as_ref()
                .map(|c| (Arc::clone(&c.engine), c.share, c.shadow)),
        };
        if let Some((engine, share, shadow)) = canary {
            let n = self.routed.fetch_add(1, Ordering::Relaxed);
            if ((n + 1) as f64 * share).floor() > (n as f64 * share).floor() {
                if !shadow {
                    return (engine, None);
                }
                return (self.current(), Some(engine.version.to_string()));
            }
        }
        (self.current(), None)
    }

    /// The canary's engine, if one runs.
    pub(crate) fn canary_engine(&self) -> Option<Shared> {
        match self.canary.read() {
            Ok(c) => c.as_ref().map(|c| Arc::clone(&c.engine)),
            Err(poisoned) => poisoned
                .into_inner()
                .as_ref()
                .map(|c| Arc::clone(&c.engine)),
        }
    }

    /// The canary's version number and share, if one runs.
    pub fn canary(&self) -> Option<(Option<u32>, f64)> {
        self.canary_trial()
            .map(|(number, share, _)| (number, share))
    }

    /// The canary's version number, share, and whether it answers in shadow, if one runs.
    pub fn canary_trial(&self) -> Option<(Option<u32>, f64, bool)> {
        match self.canary.read() {
            Ok(c) => c
                .as_ref()
                .map(|c| (c.engine.version.number, c.share, c.shadow)),
            Err(poisoned) => poisoned
                .into_inner()
                .as_ref()
                .map(|c| (c.engine.version.number, c.share, c.shadow)),
        }
    }

    /// Starts `engine` as the canary with `share` of the requests, in shadow when `shadow`
    /// (none: stops the canary). Requests it has keep it until they finish.
    pub fn set_canary(&self, engine: Option<Engine>, share: f64, shadow: bool) {
        let canary = engine.map(|engine| CanaryEngine {
            engine: Arc::new(engine),
            share,
            shadow,
        });
        let name = canary.as_ref().map(|c| c.engine.version.to_string());
        self.replace_canary(canary);
        self.update(|s| {
            s.canary = name;
            s.canary_share = s.canary.is_some().then_some(share);
            s.canary_shadow = s.canary.is_some() && shadow;
            s.canary_requests = 0;
        });
    }

    /// The version last refused as the canary, if any.
    pub(crate) fn canary_refused(&self) -> Option<u32> {
        *self
            .canary_refused
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records that `version` could not be loaded as the canary.
    pub(crate) fn refuse_canary(&self, version: u32, message: String) {
        *self
            .canary_refused
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(version);
        self.refused(message);
    }

    /// Changes the running canary's share, and whether it answers in shadow (a shadow that
    /// becomes a canary keeps its loaded engine).
    pub fn set_canary_share(&self, share: f64, shadow: bool) {
        let mut canary = match self.canary.write() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(c) = canary.as_mut() {
            c.share = share;
            c.shadow = shadow;
            self.update(|s| {
                s.canary_share = Some(share);
                s.canary_shadow = shadow;
            });
        }
    }

    fn replace_canary(&self, canary: Option<CanaryEngine>) -> Option<CanaryEngine> {
        let mut slot = match self.canary.write() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        std::mem::replace(&mut *slot, canary)
    }

    /// Promotes the canary when it is version `number`: its engine, loaded and tried
    /// already, becomes the served one (a swap with no load), and the canary stops. None
    /// when the canary is not that version.
    pub async fn promote_canary(&self, number: Option<u32>, drain: Duration) -> Option<SwapReport> {
        if self.canary().is_none_or(|(v, _)| v != number) {
            return None;
        }
        let canary = self.replace_canary(None)?;
        self.update(|s| {
            s.canary = None;
            s.canary_share = None;
            s.canary_shadow = false;
        });
        Some(self.install(canary.engine, 0, drain, false).await)
    }

    /// Marks this policy's engine as one a watcher repairs (see [`Serving::replacement`]).
    pub(crate) fn watched(&self) {
        self.repaired.store(true, Ordering::Relaxed);
    }

    /// After `engine` failed a request: the engine the watcher loaded afresh in its place on
    /// finding it dead, on which a request that had nothing from the dead one yet runs again.
    /// None when no watcher repairs this policy, once a request started after the failure
    /// (or the watcher's trial token) is answered (the failure was the request's own), once
    /// `engine` is no longer served without having been repaired (a pinned version, a swap),
    /// and after [`REPAIR_WAIT`].
    pub(crate) async fn replacement(&self, engine: &Shared) -> Option<Shared> {
        if !self.repaired.load(Ordering::Relaxed) {
            return None;
        }
        let deadline = Instant::now() + REPAIR_WAIT;
        loop {
            // Read before the replacement: `replace` records it before the swap shows.
            let served = Arc::ptr_eq(&self.current(), engine);
            if let Some(fresh) = engine.repaired_by() {
                return Some(fresh);
            }
            if !served || engine.failing() == 0 || Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A copy of the status.
    pub fn status(&self) -> Status {
        match self.status.lock() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn update(&self, f: impl FnOnce(&mut Status)) {
        match self.status.lock() {
            Ok(mut s) => f(&mut s),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// Counts a request `engine` answered (`failed`: the engine failed it), which started
    /// with `ticket` ([`Engine::ticket`]). A request run again counts once per run.
    pub(crate) fn count(&self, engine: &Engine, ticket: u64, failed: bool) {
        engine.note(ticket, failed);
        let on_canary = self
            .canary()
            .is_some_and(|(v, _)| v == engine.version.number)
            && engine.version.number != self.current().version.number;
        self.update(|s| {
            if failed {
                s.failures += 1;
            } else {
                s.requests += 1;
                if on_canary {
                    s.canary_requests += 1;
                }
            }
        });
    }

    /// Records that a version was refused.
    pub fn refused(&self, message: String) {
        self.update(|s| s.last_refusal = Some(message));
    }

    /// Sends new requests to `engine`, then waits up to `drain` for the old engine's requests
    /// to finish. Requests still running after that finish on the old engine all the same.
    pub async fn swap(&self, engine: Engine, load_ms: u64, drain: Duration) -> SwapReport {
        self.replace(engine, load_ms, drain, false).await
    }

    /// Replaces a dead engine with `engine`, a fresh load of the same version: counted as a
    /// repair, not a swap.
    pub async fn repair(&self, engine: Engine, load_ms: u64, drain: Duration) -> SwapReport {
        self.replace(engine, load_ms, drain, true).await
    }

    async fn replace(
        &self,
        engine: Engine,
        load_ms: u64,
        drain: Duration,
        repair: bool,
    ) -> SwapReport {
        self.install(Arc::new(engine), load_ms, drain, repair).await
    }

    async fn install(
        &self,
        fresh: Shared,
        load_ms: u64,
        drain: Duration,
        repair: bool,
    ) -> SwapReport {
        let to = fresh.version.to_string();
        let number = fresh.version.number;
        let old = {
            let mut current = match self.current.write() {
                Ok(c) => c,
                Err(poisoned) => poisoned.into_inner(),
            };
            if repair {
                current.replaced_by(&fresh);
            }
            std::mem::replace(&mut *current, fresh)
        };
        let switched = Instant::now();
        let at = now();
        while Arc::strong_count(&old) > 1 && switched.elapsed() < drain {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let report = SwapReport {
            from: old.version.to_string(),
            to: to.clone(),
            load_ms,
            drain_ms: switched.elapsed().as_millis() as u64,
            left_draining: Arc::strong_count(&old).saturating_sub(1),
            at,
        };
        drop(old);
        self.update(|s| {
            s.serving = to;
            s.number = number;
            if repair {
                s.repairs += 1;
            } else {
                s.swaps += 1;
                s.last_swap = Some(report.clone());
            }
        });
        report
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use atdp_model_files::Arch;

    use atdp_trainer::{InitSpec, init_model};

    use super::*;
    use crate::engine::{BaseModel, EngineOptions, Version};

    async fn load(dir: &Path, number: Option<u32>) -> Engine {
        let base = BaseModel::open(dir).unwrap();
        let version = Version {
            policy: "support".into(),
            number,
        };
        Engine::load(&base, None, version, &EngineOptions::default())
            .await
            .unwrap()
    }

    /// Starts waiting for the replacement of `engine` and checks that the wait has not ended
    /// on its own.
    async fn waiting(
        serving: &Arc<Serving>,
        engine: &Shared,
    ) -> tokio::task::JoinHandle<Option<Shared>> {
        let (serving, engine) = (Arc::clone(serving), Arc::clone(engine));
        let task = tokio::spawn(async move { serving.replacement(&engine).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!task.is_finished(), "gave up on an engine that may be dead");
        task
    }

    /// Waits at most a second for `task`: the wait ended on its own, not at [`REPAIR_WAIT`].
    async fn ended(task: tokio::task::JoinHandle<Option<Shared>>) -> Option<Shared> {
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .expect("the wait should have ended at once")
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_request_runs_again_only_on_the_engine_that_replaced_a_dead_one() {
        let dir = tempfile::tempdir().unwrap();
        init_model(dir.path(), &InitSpec::tiny(Arch::Qwen2)).unwrap();
        let serving = Serving::new(load(dir.path(), None).await);
        let first = serving.current();
        let before = first.ticket();
        serving.count(&first, before, true);
        let unwatched = {
            let (serving, first) = (Arc::clone(&serving), Arc::clone(&first));
            tokio::spawn(async move { serving.replacement(&first).await })
        };
        assert!(
            ended(unwatched).await.is_none(),
            "no watcher repairs this policy: the failure stands at once"
        );

        serving.watched();
        let task = waiting(&serving, &first).await;
        // A request that started before the failure and ends after it says nothing about
        // the engine now.
        serving.count(&first, before, false);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !task.is_finished(),
            "an older request's answer ended the wait"
        );
        let after = first.ticket();
        serving.count(&first, after, false);
        assert!(
            ended(task).await.is_none(),
            "a later request was answered: the failure was the request's own"
        );

        serving.count(&first, first.ticket(), true);
        let task = waiting(&serving, &first).await;
        let repair = {
            let serving = Arc::clone(&serving);
            let fresh = load(dir.path(), None).await;
            tokio::spawn(async move { serving.repair(fresh, 0, Duration::from_millis(100)).await })
        };
        let fresh = ended(task).await.expect("the engine that replaced it");
        assert!(Arc::ptr_eq(&fresh, &serving.current()));
        assert!(!Arc::ptr_eq(&fresh, &first));
        repair.await.unwrap();
        assert_eq!(serving.status().repairs, 1);
        assert!(
            Arc::ptr_eq(&first.repaired_by().unwrap(), &fresh),
            "a request that fails on the dead engine later still finds its replacement"
        );

        // An engine of the served version that is not the one served (a pin loaded before a
        // rollback made its version the served one): nothing repairs it.
        let pinned: Shared = Arc::new(load(dir.path(), None).await);
        serving.count(&pinned, pinned.ticket(), true);
        let task = {
            let (serving, pinned) = (Arc::clone(&serving), Arc::clone(&pinned));
            tokio::spawn(async move { serving.replacement(&pinned).await })
        };
        assert!(
            ended(task).await.is_none(),
            "a pinned engine is not repaired"
        );

        // A swap to another version while a request waits: the request is not run on it.
        serving.count(&fresh, fresh.ticket(), true);
        let task = waiting(&serving, &fresh).await;
        serving
            .swap(load(dir.path(), Some(1)).await, 0, Duration::ZERO)
            .await;
        assert!(ended(task).await.is_none(), "a swap is not a repair");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_canary_takes_its_share_of_the_requests_and_its_promotion_needs_no_load() {
        let dir = tempfile::tempdir().unwrap();
        init_model(dir.path(), &InitSpec::tiny(Arch::Qwen2)).unwrap();
        let serving = Serving::new(load(dir.path(), Some(1)).await);
        let served = serving.current();
        let picked = |n: usize| -> Vec<Option<u32>> {
            (0..n).map(|_| serving.pick().version.number).collect()
        };
        assert!(picked(10).iter().all(|v| *v == Some(1)));

        serving.set_canary(Some(load(dir.path(), Some(2)).await), 0.25, false);
        assert_eq!(serving.canary(), Some((Some(2), 0.25)));
        // Exactly a quarter of any run of requests, spread evenly.
        let run = picked(100);
        assert_eq!(run.iter().filter(|v| **v == Some(2)).count(), 25);
        assert!(
            run.windows(4)
                .all(|w| w.iter().filter(|v| **v == Some(2)).count() == 1)
        );
        let canary = serving.pick();
        let canary = if canary.version.number == Some(2) {
            canary
        } else {
            (0..3)
                .map(|_| serving.pick())
                .find(|e| e.version.number == Some(2))
                .unwrap()
        };
        serving.count(&canary, canary.ticket(), false);
        let status = serving.status();
        assert_eq!(
            (
                status.canary.as_deref(),
                status.canary_share,
                status.canary_requests
            ),
            (Some("support@v2"), Some(0.25), 1)
        );
        serving.set_canary_share(0.5, false);
        assert_eq!(picked(10).iter().filter(|v| **v == Some(2)).count(), 5);

        // Promoting another version than the canary's does nothing here.
        assert!(
            serving
                .promote_canary(Some(3), Duration::ZERO)
                .await
                .is_none()
        );
        // Promoting the canary: its own engine serves, with no load.
        let report = serving
            .promote_canary(Some(2), Duration::from_millis(100))
            .await
            .unwrap();
        assert_eq!(
            (report.from.as_str(), report.to.as_str(), report.load_ms),
            ("support@v1", "support@v2", 0)
        );
        assert!(Arc::ptr_eq(&serving.current(), &canary));
        assert_eq!(serving.canary(), None);
        assert!(picked(10).iter().all(|v| *v == Some(2)));
        drop(served);

        // Stopping a canary sends every request to the served engine again.
        serving.set_canary(Some(load(dir.path(), Some(3)).await), 0.5, false);
        assert!(picked(10).contains(&Some(3)));
        serving.set_canary(None, 0.0, false);
        assert!(picked(10).iter().all(|v| *v == Some(2)));
        assert_eq!(serving.status().canary, None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_shadow_names_itself_on_its_share_and_never_answers_a_request_itself() {
        let dir = tempfile::tempdir().unwrap();
        init_model(dir.path(), &InitSpec::tiny(Arch::Qwen2)).unwrap();
        let serving = Serving::new(load(dir.path(), Some(1)).await);
        serving.set_canary(Some(load(dir.path(), Some(2)).await), 0.25, true);
        let run: Vec<(Option<u32>, Option<String>)> = (0..100)
            .map(|_| {
                let (engine, shadow) = serving.pick_with_shadow();
                (engine.version.number, shadow)
            })
            .collect();
        assert!(run.iter().all(|(v, _)| *v == Some(1)), "{run:?}");
        let named: Vec<&str> = run.iter().filter_map(|(_, s)| s.as_deref()).collect();
        assert_eq!(named, vec!["support@v2"; 25]);
        let status = serving.status();
        assert_eq!(
            (status.canary.as_deref(), status.canary_shadow),
            (Some("support@v2"), true)
        );
        // Its next stage, a canary of the same version, keeps the engine and takes requests.
        serving.set_canary_share(0.5, false);
        let run: Vec<(Option<u32>, Option<String>)> = (0..10)
            .map(|_| {
                let (engine, shadow) = serving.pick_with_shadow();
                (engine.version.number, shadow)
            })
            .collect();
        assert_eq!(run.iter().filter(|(v, _)| *v == Some(2)).count(), 5);
        assert!(run.iter().all(|(_, s)| s.is_none()));
        assert!(!serving.status().canary_shadow);
    }
}
