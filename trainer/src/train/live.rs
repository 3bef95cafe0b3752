//! The run as it happens, published beside the lake's tables (`atdp_lake::runs`) for the
//! console's live view and its Prometheus endpoint: the run's tenants, agent and state, each
//! reward's distribution over what it trains on, and every optimizer step's metrics.
//! Publishing is best effort: a lake that does not take the files stops the publishing,
//! with a warning, never the training.

use std::collections::BTreeMap;

use atdp_lake::Lake;
use atdp_lake::runs::{Distribution, RunInfo, RunLog, RunState, new_run_id};
use atdp_schema::Reward;

use crate::report::StepMetrics;
use crate::run_config::RunConfig;

/// Longest error text a failed run publishes.
const ERROR_CHARS: usize = 500;

/// A run's publication, while it lasts.
pub(crate) struct Live {
    runtime: Option<tokio::runtime::Runtime>,
    log: Option<RunLog>,
}

impl Live {
    /// Nothing published (before the run knows what it trains on).
    pub(crate) fn none() -> Live {
        Live {
            runtime: None,
            log: None,
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
    ) -> Live {
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
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => {
                tracing::warn!(error = %e, "training progress is not published");
                return Live::none();
            }
        };
        let log = runtime.block_on(async {
            let lake = Lake::new(&config.lake, config.lake_options.clone())?;
            RunLog::start(&lake, info).await
        });
        match log {
            Ok(log) => Live {
                runtime: Some(runtime),
                log: Some(log),
            },
            Err(e) => {
                tracing::warn!(error = %e, "training progress is not published");
                Live::none()
            }
        }
    }

    /// The published run's id.
    pub(crate) fn run_id(&self) -> Option<String> {
        self.log.as_ref().map(|log| log.run_id().to_owned())
    }

    /// Adds an optimizer step's metrics.
    pub(crate) fn step(&mut self, metrics: &StepMetrics) {
        let (Some(runtime), Some(log)) = (&self.runtime, &mut self.log) else {
            return;
        };
        let Ok(line) = serde_json::to_value(metrics) else {
            return;
        };
        if let Err(e) = runtime.block_on(log.step(metrics.step, &line)) {
            tracing::warn!(error = %e, "training progress is no longer published");
            self.log = None;
        }
    }

    /// Ends the publication: finished when `outcome` is `Ok(true)`, stopped when the
    /// invocation stopped early as asked (`Ok(false)`), failed with its error.
    pub(crate) fn finish(&mut self, outcome: Result<bool, &crate::Error>) {
        let (Some(runtime), Some(log)) = (&self.runtime, &mut self.log) else {
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
        if let Err(e) = runtime.block_on(log.finish(state, error)) {
            tracing::warn!(error = %e, "the end of the training was not published");
        }
        self.log = None;
    }
}
