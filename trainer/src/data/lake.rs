//! Selecting steps and rewards from the lake through `atdp_schema::LakeReader`, recording
//! the Delta table versions and row counts read (for the manifest).

use std::collections::{BTreeSet, HashMap};

use atdp_schema::{Filter, Lake, LakeReader, Reward, Step};
use serde::{Deserialize, Serialize};

use crate::Result;

/// Which rows to train on. Unset fields do not filter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selection {
    /// Only this tenant.
    pub tenant_id: Option<String>,
    /// Only this agent.
    pub agent_id: Option<String>,
    /// Only steps started at or after this (µs since epoch, UTC).
    pub since: Option<i64>,
    /// Only steps started before this (µs since epoch, UTC).
    pub until: Option<i64>,
    /// The reward names used; rewards of other names are not read.
    pub reward_names: BTreeSet<String>,
    /// Reward names pinned to one `reward_fn_version` (`none`: rows without a version).
    pub reward_versions: std::collections::BTreeMap<String, String>,
    /// Read `steps` as of this Delta version (time travel) instead of the latest.
    pub steps_version: Option<u64>,
    /// Read `rewards` as of this Delta version instead of the latest.
    pub rewards_version: Option<u64>,
}

/// One table read: its Delta version and how many rows were read and kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableRead {
    /// `steps` or `rewards`.
    pub table: String,
    /// The Delta version read; `None` when the table does not exist.
    pub version: Option<u64>,
    /// Rows the filter matched.
    pub rows_read: usize,
    /// Rows kept after the trainer's own selection (reward names, trajectories read).
    pub rows_kept: usize,
}

/// Steps and rewards selected from the lake.
#[derive(Debug, Clone, Default)]
pub struct LakeData {
    /// The selected steps, in start order.
    pub steps: Vec<Step>,
    /// Rewards of the selected names on the selected steps' trajectories.
    pub rewards: Vec<Reward>,
    /// What was read.
    pub reads: Vec<TableRead>,
}

/// Reads the selection from the lake at `location` (a URL or a local directory) with the
/// object-store `options`. Blocks on its own single-threaded runtime, so call it from a
/// plain thread (in async code, from `spawn_blocking`).
pub fn read_lake(
    location: &str,
    options: HashMap<String, String>,
    selection: &Selection,
) -> Result<LakeData> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(crate::Error::invalid(
            "caller",
            "reading the lake blocks: call the trainer from a plain thread or `spawn_blocking`, not from async code",
        ));
    }
    let lake = Lake::new(location, options)?;
    let reader = LakeReader::new(lake);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| crate::Error::io(location, e))?;
    runtime.block_on(read(&reader, selection))
}

async fn read(reader: &LakeReader, selection: &Selection) -> Result<LakeData> {
    let steps_filter = Filter {
        tenant_id: selection.tenant_id.clone(),
        agent_id: selection.agent_id.clone(),
        since: selection.since,
        until: selection.until,
        version: selection.steps_version,
        ..Filter::default()
    };
    let steps = reader.steps(&steps_filter).await?;
    // Rewards arrive after the steps they judge: no time filter, only the tenant; they are
    // matched to the selected steps by trajectory below.
    let rewards_filter = Filter {
        tenant_id: selection.tenant_id.clone(),
        version: selection.rewards_version,
        ..Filter::default()
    };
    let rewards = reader.rewards(&rewards_filter).await?;
    let trajectories: BTreeSet<&str> = steps
        .rows
        .iter()
        .map(|s| s.trajectory_id.as_str())
        .collect();
    let kept: Vec<Reward> = rewards
        .rows
        .iter()
        .filter(|r| {
            selection.reward_names.contains(&r.name)
                && trajectories.contains(r.trajectory_id.as_str())
                && selection.reward_versions.get(&r.name).is_none_or(|pinned| {
                    r.reward_fn_version
                        .as_deref()
                        .unwrap_or(crate::manifest::NO_VERSION)
                        == pinned
                })
        })
        .cloned()
        .collect();
    let reads = vec![
        TableRead {
            table: "steps".into(),
            version: steps.version,
            rows_read: steps.rows.len(),
            rows_kept: steps.rows.len(),
        },
        TableRead {
            table: "rewards".into(),
            version: rewards.version,
            rows_read: rewards.rows.len(),
            rows_kept: kept.len(),
        },
    ];
    Ok(LakeData {
        steps: steps.rows,
        rewards: kept,
        reads,
    })
}
