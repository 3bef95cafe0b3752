//! Selecting steps and rewards from the lake through `atdp_lake::LakeReader`, tenant by
//! tenant, recording the Delta table versions and row counts read (for the manifest).
//!
//! Only steps that may be trained on are read ([`LakeReader::trainable_steps`]): a step marked
//! ineligible (`training_eligible` false), past its `retention_until`, or unmarked (unless
//! [`Selection::unmarked`] says otherwise) never leaves the lake; the manifest counts them by
//! reason ([`TableRead::excluded`]). Nor is a trajectory an erasure reached
//! ([`LakeReader::erased_trajectories`]: a subject's tokens in one of its steps, or a step of
//! the tenant from before its keys were erased), counted as `erased`. Rewards are kept only
//! on trajectories of steps read.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use atdp_lake::{Filter, Lake, LakeReader};

use atdp_schema::{Reward, Step, Unmarked, now_micros};
use serde::{Deserialize, Serialize};

use crate::Result;

/// Which rows to train on. Unset optional fields do not filter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selection {
    /// The tenants trained on: at least one. Each tenant's steps and rewards are read on their
    /// own and matched within the tenant (trajectory ids are chosen by clients, so two tenants
    /// can use the same ones); an adapter trained on several tenants carries what it learned
    /// from each to whoever it serves.
    pub tenants: BTreeSet<String>,
    /// Only this agent.
    pub agent_id: Option<String>,
    /// Only steps started at or after this (µs since epoch, UTC).
    pub since: Option<i64>,
    /// Only steps started before this (µs since epoch, UTC).
    pub until: Option<i64>,
    /// The reward names used; rewards of other names are not read.
    pub reward_names: BTreeSet<String>,
    /// Reward names pinned to one `reward_fn_version` (`none`: rows without a version).
    pub reward_versions: BTreeMap<String, String>,
    /// Read `steps` as of this Delta version (time travel) instead of the latest.
    pub steps_version: Option<u64>,
    /// Read `rewards` as of this Delta version instead of the latest.
    pub rewards_version: Option<u64>,
    /// Whether steps without a training mark (written before ATDP 1.1, or by a producer that
    /// does not set it) are trained on; by default they are not.
    pub unmarked: Unmarked,
}

/// One table read: its Delta version and how many rows were read and kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableRead {
    /// `steps` or `rewards`.
    pub table: String,
    /// The Delta version read; `None` when the table does not exist.
    pub version: Option<u64>,
    /// Rows read: for `steps`, those the filter matched that may be trained on.
    pub rows_read: usize,
    /// Rows kept after the trainer's own selection (reward names, trajectories read).
    pub rows_kept: usize,
    /// `steps` the filter matched that were not read because they may not be trained on, by
    /// reason: `not_eligible`, `unmarked`, `retention_expired`, `erased` (empty for
    /// `rewards`).
    #[serde(default)]
    pub excluded: BTreeMap<String, usize>,
}

/// Steps and rewards selected from the lake.
#[derive(Debug, Clone, Default)]
pub struct LakeData {
    /// The selected steps, in start order.
    pub steps: Vec<Step>,
    /// Rewards of the selected names on the selected steps' trajectories (each matched
    /// within its tenant).
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
    read_blocking(location, options, selection, Marks::Training)
}

/// [`read_lake`] of every step the selection matches, training marks ignored: what was
/// served and rewarded, for monitoring (the live reward per version that automatic rollback
/// compares). Never for training. Blocking, like [`read_lake`].
pub fn read_lake_to_monitor(
    location: &str,
    options: HashMap<String, String>,
    selection: &Selection,
) -> Result<LakeData> {
    read_blocking(location, options, selection, Marks::Ignored)
}

/// Whether the training marks of steps decide what is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marks {
    Training,
    Ignored,
}

fn read_blocking(
    location: &str,
    options: HashMap<String, String>,
    selection: &Selection,
    marks: Marks,
) -> Result<LakeData> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(crate::Error::invalid(
            "caller",
            "reading the lake blocks: call the trainer from a plain thread or `spawn_blocking`, not from async code",
        ));
    }
    if selection.tenants.is_empty() {
        return Err(crate::Error::invalid(
            "select.tenant",
            "the selection names no tenant: say which tenant (or tenants) to train on; trajectory ids are chosen by clients and repeat across tenants, so rewards are only matched to steps of the same tenant",
        ));
    }
    let lake = Lake::new(location, options)?;
    let reader = LakeReader::new(lake);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| crate::Error::io(location, e))?;
    runtime.block_on(read(&reader, selection, marks))
}

async fn read(reader: &LakeReader, selection: &Selection, marks: Marks) -> Result<LakeData> {
    // Every tenant is read at the same table versions: the first read's, unless pinned.
    let mut steps_version = selection.steps_version;
    let mut rewards_version = selection.rewards_version;
    let mut steps: Vec<Step> = Vec::new();
    let mut kept: Vec<Reward> = Vec::new();
    let (mut steps_read, mut rewards_read) = (0, 0);
    let mut excluded: BTreeMap<String, usize> = BTreeMap::new();
    // Retention is judged once, at the start of the read, for every tenant.
    let now = now_micros();
    for tenant in &selection.tenants {
        let steps_filter = Filter {
            tenant_id: Some(tenant.clone()),
            agent_id: selection.agent_id.clone(),
            since: selection.since,
            until: selection.until,
            version: steps_version,
            ..Filter::default()
        };
        let read_steps = match marks {
            Marks::Training => {
                let trainable = reader
                    .trainable_steps(&steps_filter, now, selection.unmarked)
                    .await?;
                for (reason, count) in trainable.excluded {
                    *excluded.entry(reason).or_insert(0) += count;
                }
                let mut steps = trainable.steps;
                // At the version just read (every tenant's read shares it).
                let reached = reader
                    .erased_trajectories(tenant, steps_version.or(steps.version))
                    .await?;
                if !reached.is_empty() {
                    let before = steps.rows.len();
                    steps.rows.retain(|s| !reached.contains(&s.trajectory_id));
                    let erased = before - steps.rows.len();
                    if erased > 0 {
                        *excluded.entry("erased".to_owned()).or_insert(0) += erased;
                    }
                }
                steps
            }
            Marks::Ignored => reader.steps(&steps_filter).await?,
        };
        steps_version = steps_version.or(read_steps.version);
        // Rewards arrive after the steps they judge: no time filter, only the tenant; they
        // are matched to this tenant's selected steps by trajectory below.
        let rewards_filter = Filter {
            tenant_id: Some(tenant.clone()),
            version: rewards_version,
            ..Filter::default()
        };
        let read_rewards = reader.rewards(&rewards_filter).await?;
        rewards_version = rewards_version.or(read_rewards.version);
        steps_read += read_steps.rows.len();
        rewards_read += read_rewards.rows.len();
        // The reader filters by tenant; the rows are checked again, as the match relies on it.
        let own_steps: Vec<Step> = read_steps
            .rows
            .into_iter()
            .filter(|s| &s.tenant_id == tenant)
            .collect();
        let trajectories: BTreeSet<&str> =
            own_steps.iter().map(|s| s.trajectory_id.as_str()).collect();
        kept.extend(read_rewards.rows.into_iter().filter(|r| {
            &r.tenant_id == tenant
                && selection.reward_names.contains(&r.name)
                && trajectories.contains(r.trajectory_id.as_str())
                && selection.reward_versions.get(&r.name).is_none_or(|pinned| {
                    r.reward_fn_version
                        .as_deref()
                        .unwrap_or(crate::manifest::NO_VERSION)
                        == pinned
                })
        }));
        steps.extend(own_steps);
    }
    // Start order across tenants (stable: each tenant's order stays for equal times).
    steps.sort_by_key(|s| s.started_at);
    let reads = vec![
        TableRead {
            table: "steps".into(),
            version: steps_version,
            rows_read: steps_read,
            rows_kept: steps.len(),
            excluded,
        },
        TableRead {
            table: "rewards".into(),
            version: rewards_version,
            rows_read: rewards_read,
            rows_kept: kept.len(),
            excluded: BTreeMap::new(),
        },
    ];
    Ok(LakeData {
        steps,
        rewards: kept,
        reads,
    })
}
