//! Loading one trajectory for an auditor: its steps and rewards, from one tenant, when Cedar
//! lets the auditor read it. How it is shown is in `transcript.rs`.

use atdp_schema::{Reward, Step, Table};
use deltalake::datafusion::prelude::{col, lit};

use crate::auditor::{self, Auditor};
use crate::catalog::Catalog;
use crate::catalog::rows;
use crate::error::{Error, Result};

/// The steps and rewards of trajectory `id` of `tenant` (or of the first of the auditor's
/// tenants that has it), if the auditor may read it. A trajectory of a tenant the auditor
/// may not read is "not found", as one that does not exist.
pub async fn load(
    catalog: &Catalog,
    policy: &atdp_policies::AccessPolicy,
    auditor: &Auditor,
    id: &str,
    tenant: Option<&str>,
) -> Result<(Vec<Step>, Vec<Reward>)> {
    let not_found = || Error::NotFound(format!("trajectory {id}"));
    let tenants = match tenant {
        Some(t) if auditor.sees(t) => vec![t.to_owned()],
        Some(_) => return Err(not_found()),
        None => auditor.tenants.clone(),
    };
    if tenants.is_empty() {
        return Err(not_found());
    }
    let filter = auditor::tenant_in(&tenants).and(col("trajectory_id").eq(lit(id.to_owned())));
    let mut steps = rows(
        catalog.frame(Table::Steps).await?.filter(filter),
        atdp_schema::steps_from_batch,
    )
    .await?;
    let Some(owner) = steps.iter().map(|s| s.tenant_id.clone()).min() else {
        return Err(not_found());
    };
    steps.retain(|s| s.tenant_id == owner);
    let verdict = auditor::decide(
        policy,
        auditor,
        "read_trajectory",
        id,
        &owner,
        serde_json::json!({}),
    );
    if !verdict.allowed {
        return Err(Error::Denied(format!(
            "this auditor may not read trajectory {id}"
        )));
    }
    let mut rewards = rows(
        catalog.frame(Table::Rewards).await?.filter(
            col("tenant_id")
                .eq(lit(owner.clone()))
                .and(col("trajectory_id").eq(lit(id.to_owned()))),
        ),
        atdp_schema::rewards_from_batch,
    )
    .await?;
    rewards.sort_by_key(|r| r.created_at);
    Ok((steps, rewards))
}
