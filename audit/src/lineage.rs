//! Lineage from a person to adapters: which adapter versions in the lake's registry learned
//! from a subject's trajectories.
//!
//! The subject's trajectories are those of the tenant's steps whose `pii` spans carry one of
//! the subject's tokens or keyed hashes, or the value itself where its type is stored in the
//! clear ([`reached`]); an erasure finds them before it erases and records them. Each
//! adapter version's `manifest.json` (`adapters/<policy>/v<N>/`, written by `atdp-train`)
//! lists the trajectories its examples came from (`lineage.trajectories`, by tenant); a
//! version learned from the subject when the two lists meet. A version without a lineage
//! (trained before it was recorded), or published without a manifest at all (trained by
//! another stack, made by hand), is listed as unknown, never as clean.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::{Array, AsArray};
use atdp_lake::{Catalog, Lake};

use atdp_schema::Table;
use deltalake::datafusion::functions::core::expr_fn::get_field;
use deltalake::datafusion::prelude::{col, lit};
use futures::TryStreamExt;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use serde::Serialize;

use crate::catalog::distinct as strings;
use crate::error::{Error, Result};

/// An adapter version that learned from the subject, or may have.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct TrainedAdapter {
    /// The policy (registry name).
    pub policy: String,
    /// The version.
    pub version: u32,
    /// How many of the subject's trajectories it learned from; `None`: its manifest has no
    /// lineage, so whether it did is unknown.
    pub trajectories: Option<usize>,
}

/// Whom an erasure reaches in the steps: a subject, by the forms its value takes in stored
/// spans, or the whole tenant.
#[derive(Debug, Clone, Copy)]
pub enum Reach<'a> {
    /// Every trajectory of the tenant.
    Tenant,
    /// The trajectories with a span that carries one of `tokens` (placeholders and keyed
    /// hashes of the value), or, where the policy allowed its type in the clear, the value
    /// itself (`value`, in any spelling of the same canonical form).
    Subject {
        /// The value's placeholders and keyed hashes.
        tokens: &'a [String],
        /// The value.
        value: &'a str,
    },
}

/// The trajectories of `tenant` that `reach` reaches among its steps now in the lake.
pub async fn reached(lake: &Lake, tenant: &str, reach: Reach<'_>) -> Result<BTreeSet<String>> {
    let catalog = Catalog::open(lake, &Default::default()).await?;
    let steps = catalog
        .frame(Table::Steps)
        .await?
        .filter(col("tenant_id").eq(lit(tenant.to_owned())))
        .map_err(Error::query)?;
    let Reach::Subject { tokens, value } = reach else {
        return strings(steps, "trajectory_id").await;
    };
    let wanted: BTreeSet<String> = tokens.iter().cloned().collect();
    let spans = steps
        .select(vec![col("trajectory_id"), col("pii")])
        .and_then(|f| f.unnest_columns(&["pii"]))
        .map_err(Error::query)?;
    let hits = spans
        .clone()
        .filter(in_list_expr(get_field(col("pii"), "token"), &wanted))
        .map_err(Error::query)?;
    let mut out = strings(hits, "trajectory_id").await?;
    // A value of a type stored in the clear is its own span token: compared by its canonical
    // spelling for the span's type, so `CUST 004211` reaches `cust-004211` where the type's
    // canonical form says they are one.
    let allowed = spans
        .filter(get_field(col("pii"), "action").eq(lit("allow")))
        .and_then(|f| {
            f.select(vec![
                col("trajectory_id"),
                get_field(col("pii"), "entity").alias("entity"),
                get_field(col("pii"), "token").alias("token"),
            ])
        })
        .map_err(Error::query)?
        .collect()
        .await
        .map_err(Error::query)?;
    for batch in allowed {
        let text = |i: usize| {
            arrow::compute::cast(batch.column(i), &arrow::datatypes::DataType::Utf8)
                .map_err(|e| Error::Query(e.to_string()))
        };
        let (ids, entities, found) = (text(0)?, text(1)?, text(2)?);
        let (ids, entities, found) = (
            ids.as_string::<i32>(),
            entities.as_string::<i32>(),
            found.as_string::<i32>(),
        );
        for row in 0..batch.num_rows() {
            if !(ids.is_valid(row) && entities.is_valid(row) && found.is_valid(row)) {
                continue;
            }
            let entity = entities.value(row);
            let stored = found.value(row);
            if stored == value
                || atdp_detect::canonical(entity, stored) == atdp_detect::canonical(entity, value)
            {
                out.insert(ids.value(row).to_owned());
            }
        }
    }
    Ok(out)
}

fn in_list_expr(
    expr: deltalake::datafusion::prelude::Expr,
    values: &BTreeSet<String>,
) -> deltalake::datafusion::prelude::Expr {
    expr.in_list(values.iter().map(|v| lit(v.clone())).collect(), false)
}

/// The store of the lake's adapter registry (`adapters/`) and every file in it; `None` when
/// the lake has no registry.
pub(crate) async fn registry_files(
    lake: &Lake,
) -> Result<Option<(Arc<dyn ObjectStore>, Vec<ObjectMeta>)>> {
    let url = lake
        .root()
        .join("adapters/")
        .map_err(|e| Error::Invalid(format!("registry location: {e}")))?;
    if let Ok(path) = url.to_file_path()
        && !path.exists()
    {
        return Ok(None);
    }
    let store =
        deltalake::logstore::store_for(&url, lake.options().clone()).map_err(Error::query)?;
    let listed: Vec<_> = store.list(None).try_collect().await.map_err(Error::query)?;
    Ok(Some((store, listed)))
}

/// The bytes of the registry file at `location`.
pub(crate) async fn read_object(
    store: &dyn ObjectStore,
    location: &object_store::path::Path,
) -> Result<bytes::Bytes> {
    store
        .get(location)
        .await
        .map_err(Error::query)?
        .bytes()
        .await
        .map_err(Error::query)
}

/// `<policy>/v<N>/<name>` → (policy, N).
fn version_of(path: &str, name: &str) -> Option<(String, u32)> {
    let mut parts = path.split('/');
    let (policy, version, file) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || file != name {
        return None;
    }
    Some((policy.to_owned(), version.strip_prefix('v')?.parse().ok()?))
}

/// The adapter versions under the lake's `adapters/` that learned from one of `subject`'s
/// trajectories of `tenant` (those an erasure reached, [`reached`]), sorted by policy and
/// version.
pub async fn trained_on(
    lake: &Lake,
    tenant: &str,
    subject: &BTreeSet<String>,
) -> Result<Vec<TrainedAdapter>> {
    let Some((store, listed)) = registry_files(lake).await? else {
        return Ok(Vec::new());
    };
    // A published version without a manifest (trained elsewhere, made by hand) has no
    // lineage either: unknown, never presumed clean.
    let manifests: BTreeSet<(String, u32)> = listed
        .iter()
        .filter_map(|meta| version_of(meta.location.as_ref(), "manifest.json"))
        .collect();
    let mut found: Vec<TrainedAdapter> = listed
        .iter()
        .filter_map(|meta| version_of(meta.location.as_ref(), "_published.json"))
        .filter(|version| !manifests.contains(version))
        .map(|(policy, version)| TrainedAdapter {
            policy,
            version,
            trajectories: None,
        })
        .collect();
    for meta in listed {
        let Some((policy, version)) = version_of(meta.location.as_ref(), "manifest.json") else {
            continue;
        };
        let bytes = read_object(store.as_ref(), &meta.location).await?;
        let manifest: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| Error::Query(format!("{policy} v{version}: manifest.json: {e}")))?;
        let trajectories = match manifest.get("lineage") {
            None => None,
            Some(lineage) => {
                let learned = lineage["trajectories"][tenant].as_array();
                let met = learned.map_or(0, |ids| {
                    ids.iter()
                        .filter_map(|id| id.as_str())
                        .filter(|id| subject.contains(*id))
                        .count()
                });
                if met == 0 {
                    continue;
                }
                Some(met)
            }
        };
        found.push(TrainedAdapter {
            policy,
            version,
            trajectories,
        });
    }
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::version_of;

    #[test]
    fn only_a_versions_own_manifest_names_a_version() {
        assert_eq!(
            version_of("support/v12/manifest.json", "manifest.json"),
            Some(("support".into(), 12))
        );
        assert_eq!(
            version_of("support/v3/_published.json", "_published.json"),
            Some(("support".into(), 3))
        );
        for other in [
            "support/v12/adapter_config.json",
            "support/log/00000000000000000001.json",
            "support/v12/extra/manifest.json",
            "support/12/manifest.json",
            "support/vx/manifest.json",
        ] {
            assert_eq!(version_of(other, "manifest.json"), None, "{other}");
        }
    }
}
