//! Who is looking: an auditor identity from the policy directory, and what Cedar lets it
//! see, tenant by tenant.

use atdp_lake::Catalog;
use atdp_policies::{AccessPolicy, Verdict, hash_api_key};
use atdp_schema::Table;
use deltalake::datafusion::prelude::{Expr, col, lit};

use crate::error::{Error, Result};
use crate::trail::SYSTEM_TENANT;

/// The probe trajectory id used to ask Cedar whether an auditor may read a tenant at all.
/// Policies decide on the trajectory's tenant; a policy that singles out trajectory ids is
/// still asked again for every trajectory opened.
const ANY_TRAJECTORY: &str = "*";

/// A logged-in auditor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Auditor {
    /// The `Auditor` entity id: the SHA-256 (hex) of the auditor's key, or a name.
    pub id: String,
    /// The tenants whose trajectories Cedar lets this auditor read, sorted.
    pub tenants: Vec<String>,
}

impl Auditor {
    /// The auditor whose key is `key`, if the policy names one.
    pub fn from_key(policy: &AccessPolicy, key: &str) -> Option<Auditor> {
        Auditor::from_id(policy, &hash_api_key(key.trim()))
    }

    /// The auditor with entity id `id`, if the policy names one.
    pub fn from_id(policy: &AccessPolicy, id: &str) -> Option<Auditor> {
        if !policy.is_auditor(id) {
            return None;
        }
        let tenants = policy
            .tenants()
            .into_iter()
            .filter(|tenant| {
                policy
                    .decide_on_trajectory(
                        ("Auditor", id),
                        "read_trajectory",
                        ANY_TRAJECTORY,
                        tenant,
                        serde_json::json!({}),
                    )
                    .allowed
            })
            .collect();
        Some(Auditor {
            id: id.to_owned(),
            tenants,
        })
    }

    /// How this auditor appears as `actor` in the audit trail.
    pub fn actor(&self) -> String {
        format!("auditor:{}", self.id)
    }

    /// A short form of the id for pages (the first 12 characters of a key hash).
    pub fn short_id(&self) -> &str {
        self.id.get(..12).unwrap_or(&self.id)
    }

    /// Whether Cedar lets this auditor read trajectory `trajectory_id` of `tenant` (asked
    /// for every search hit, so a policy that singles out trajectories is obeyed there too).
    pub fn may_read(&self, policy: &AccessPolicy, trajectory_id: &str, tenant: &str) -> bool {
        self.sees(tenant)
            && decide(
                policy,
                self,
                "read_trajectory",
                trajectory_id,
                tenant,
                serde_json::json!({}),
            )
            .allowed
    }

    /// Whether `tenant` is one this auditor may read.
    pub fn sees(&self, tenant: &str) -> bool {
        self.tenants.iter().any(|t| t == tenant)
    }

    /// The rows of `table` this auditor may read: its tenants' rows, and in `audit` also its
    /// own events and the system-wide policy changes (policy reloads, key rotations), not
    /// other auditors' logins or their searches across tenants. The console's audit page and
    /// `atdp-audit sql` read through this one filter.
    pub fn visible_rows(&self, table: Table) -> Expr {
        let tenants = tenant_in(&self.tenants);
        match table {
            Table::Audit => {
                let policy_change =
                    col("kind").in_list(vec![lit("policy_reload"), lit("key_rotation")], false);
                tenants
                    .or(col("actor").eq(lit(self.actor())))
                    .or(col("tenant_id").eq(lit(SYSTEM_TENANT)).and(policy_change))
            }
            _ => tenants,
        }
    }

    /// The tenants to search: `wanted` if given and visible, else all visible ones.
    pub fn scope(&self, wanted: Option<&str>) -> Result<Vec<String>> {
        match wanted {
            Some(tenant) if self.sees(tenant) => Ok(vec![tenant.to_owned()]),
            Some(_) => Err(Error::Denied(
                "this auditor may not read that tenant".to_owned(),
            )),
            None => Ok(self.tenants.clone()),
        }
    }
}

/// The rows of `tenants`, the filter every read of the console and its commands starts from.
pub(crate) fn tenant_in(tenants: &[String]) -> Expr {
    col("tenant_id").in_list(tenants.iter().map(|t| lit(t.clone())).collect(), false)
}

/// Replaces every table of `catalog`'s session by a view of the rows `auditor` may read
/// ([`Auditor::visible_rows`]), so that no query, join or aggregate over the session reaches
/// another tenant's rows.
pub async fn scope_catalog(catalog: &Catalog, auditor: &Auditor) -> Result<()> {
    if auditor.tenants.is_empty() {
        return Err(Error::Denied(
            "this auditor may read no tenant, so there is nothing to query".to_owned(),
        ));
    }
    let session = catalog.session();
    for table in Table::ALL {
        let rows = catalog
            .frame(table)
            .await?
            .filter(auditor.visible_rows(table))
            .map_err(Error::query)?;
        session
            .deregister_table(table.name())
            .map_err(Error::query)?;
        session
            .register_table(table.name(), rows.into_view())
            .map_err(Error::query)?;
    }
    Ok(())
}

/// Cedar's decision on `action` by `auditor` on trajectory `trajectory_id` of `tenant`.
pub fn decide(
    policy: &AccessPolicy,
    auditor: &Auditor,
    action: &str,
    trajectory_id: &str,
    tenant: &str,
    context: serde_json::Value,
) -> Verdict {
    policy.decide_on_trajectory(
        ("Auditor", &auditor.id),
        action,
        trajectory_id,
        tenant,
        context,
    )
}

/// The policy ids of a verdict, for the audit trail.
pub fn policy_ids(verdict: &Verdict) -> Option<String> {
    (!verdict.policies.is_empty()).then(|| verdict.policies.join(","))
}
