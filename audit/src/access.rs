//! Who is looking: an auditor identity from the policy directory, and what Cedar lets it
//! see, tenant by tenant.

use atdp_policies::{AccessPolicy, Verdict, hash_api_key};

use crate::error::{Error, Result};

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
