//! The run as it happens, published beside the lake's tables (`atdp_lake::runs`) for the
//! console's live view and its Prometheus endpoint: the run's tenants, agent and state, each
//! reward's distribution over what it trains on, and every optimizer step's metrics.
//!
//! A thread of its own publishes, so a slow or unreachable store never holds up a step: the
//! training hands it each step's metrics and goes on. It publishes new steps at most every
//! `PUBLISH_EVERY` and rewrites the run file every `HEARTBEAT` (a long step does not look
//! like a dead process); a failed write is tried again at the next turn. Publishing is best
//! effort: a lake that never takes the files costs warnings, never the training.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

use atdp_lake::Lake;
use atdp_lake::runs::{Distribution, PUBLISH_EVERY, RunInfo, RunLog, RunState, new_run_id};
use atdp_schema::Reward;

use crate::report::StepMetrics;
use crate::run_config::RunConfig;

/// Longest error text a failed run publishes.
const ERROR_CHARS: usize = 500;
/// How long the end of a run waits for its last publication.
const FINISH_WAIT: Duration = Duration::from_secs(30);

enum Message {
    Step(u64, serde_json::Value),
    Finish(RunState, Option<String>),
}

/// A run's publication, while it lasts.
pub(crate) struct RunPublisher {
    run_id: Option<String>,
    tx: Option<mpsc::Sender<Message>>,
    done: Option<mpsc::Receiver<()>>,
}

impl RunPublisher {
    /// Nothing published (before the run knows what it trains on).
    pub(crate) fn none() -> RunPublisher {
        RunPublisher {
            run_id: None,
            tx: None,
            done: None,
        }
    }

    /// Starts publishing a run over `rewards` (those of the selected trajectories) with
    /// `examples` examples, `done` of its `total_steps` steps done (a resume).
    pub(crate) fn start(
        config: &RunConfig,
        rewards: &[Reward],
        examples: usize,
        done: u64,
        total_steps: u64,
    ) -> RunPublisher {
        let mut values: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for reward in rewards {
            if config.rewards.weights.contains_key(&reward.name) {
                values.entry(&reward.name).or_default().push(reward.value);
            }
        }
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let info = RunInfo {
            run_id: new_run_id(),
            tenants: config.selection.tenants.iter().cloned().collect(),
            agent_id: config.selection.agent_id.clone(),
            started_at: now.clone(),
            updated_at: now,
            state: RunState::Running,
            total_steps,
            steps_done: done,
            examples,
            rewards: values
                .into_iter()
                .filter_map(|(name, v)| Some((name.to_owned(), Distribution::of(&v)?)))
                .collect(),
            error: None,
        };
        let run_id = info.run_id.clone();
        let (location, options) = (config.lake.clone(), config.lake_options.clone());
        let (tx, rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("atdp-run-publisher".into())
            .spawn(move || {
                publisher(&location, options, info, &rx);
                let _ = done_tx.send(());
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "training progress is not published");
            return RunPublisher::none();
        }
        RunPublisher {
            run_id: Some(run_id),
            tx: Some(tx),
            done: Some(done_rx),
        }
    }

    /// The run's id (its publication may still be on its way).
    pub(crate) fn run_id(&self) -> Option<String> {
        self.run_id.clone()
    }

    /// Hands an optimizer step's metrics to the publisher.
    pub(crate) fn step(&mut self, metrics: &StepMetrics) {
        if let (Some(tx), Ok(line)) = (&self.tx, serde_json::to_value(metrics)) {
            let _ = tx.send(Message::Step(metrics.step, line));
        }
    }

    /// Ends the publication: finished when `outcome` is `Ok(true)`, stopped when the
    /// invocation stopped early as asked (`Ok(false)`), failed with its error. Waits up to
    /// `FINISH_WAIT` for the last publication.
    pub(crate) fn finish(&mut self, outcome: Result<bool, &crate::Error>) {
        let Some(tx) = self.tx.take() else {
            return;
        };
        let (state, error) = match outcome {
            Ok(true) => (RunState::Finished, None),
            Ok(false) => (RunState::Stopped, None),
            Err(e) => (
                RunState::Failed,
                Some(e.to_string().chars().take(ERROR_CHARS).collect()),
            ),
        };
        let _ = tx.send(Message::Finish(state, error));
        if let Some(done) = self.done.take()
            && done.recv_timeout(FINISH_WAIT).is_err()
        {
            tracing::warn!("the end of the training was not published in time");
        }
    }
}

/// The publisher thread: publishes the run, then takes steps and publishes them when due,
/// until the run ends (or the training drops its sender).
fn publisher(
    location: &str,
    options: std::collections::HashMap<String, String>,
    info: RunInfo,
    rx: &mpsc::Receiver<Message>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::warn!(error = %e, "training progress is not published");
            return;
        }
    };
    // Nothing is written yet: the first publication is due at once, and tried again at
    // every turn until it succeeds, like every other.
    let mut log = match Lake::new(location, options).and_then(|lake| RunLog::new(&lake, info)) {
        Ok(log) => log,
        Err(e) => {
            tracing::warn!(error = %e, "training progress is not published");
            return;
        }
    };
    let mut failing = false;
    let mut report = |result: atdp_lake::Result<()>| match result {
        Ok(()) => failing = false,
        Err(e) if !failing => {
            failing = true;
            tracing::warn!(error = %e, "training progress could not be published; trying again");
        }
        Err(_) => {}
    };
    report(runtime.block_on(log.publish_if_due()));
    loop {
        match rx.recv_timeout(PUBLISH_EVERY) {
            Ok(Message::Step(step, line)) => {
                log.push(step, &line);
                // Take whatever else is waiting before publishing once.
                let mut end = None;
                while let Ok(next) = rx.try_recv() {
                    match next {
                        Message::Step(step, line) => log.push(step, &line),
                        Message::Finish(state, error) => end = Some((state, error)),
                    }
                }
                if let Some((state, error)) = end {
                    report(runtime.block_on(log.finish(state, error)));
                    return;
                }
                report(runtime.block_on(log.publish_if_due()));
            }
            Ok(Message::Finish(state, error)) => {
                report(runtime.block_on(log.finish(state, error)));
                return;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                report(runtime.block_on(log.publish_if_due()));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

impl Drop for RunPublisher {
    /// A run dropped without an end (the training panicked) is published as failed, without
    /// waiting.
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Message::Finish(
                RunState::Failed,
                Some("the training stopped without finishing".into()),
            ));
        }
    }
}
