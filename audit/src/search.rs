//! Search over the lake: steps by tenant, agent, time range, trajectory, model, status, PII
//! entity type, reward range and free text in the masked content.
//!
//! Every filter is a DataFusion expression built from typed values (never SQL text), so what
//! a user types into a search field is only ever compared against, not run. Tenant and time
//! filters are pushed into the Delta scan: partitions of other tenants and days are not
//! opened. The search runs in two passes: keys and times of the matching steps (sorted,
//! paginated), then the full rows of that one page. A step's key is (tenant, trajectory,
//! step) in every join and lookup: trajectory ids are chosen by clients, so two tenants can
//! use the same ones, and imported data can repeat step ids.

use std::collections::BTreeMap;

use atdp_lake::time_range;

use atdp_schema::{Step, Table, steps_from_batch};
use deltalake::datafusion::common::JoinType;
use deltalake::datafusion::functions::core::expr_fn::get_field;
use deltalake::datafusion::functions::string::expr_fn::lower;
use deltalake::datafusion::functions::unicode::expr_fn::strpos;
use deltalake::datafusion::prelude::{DataFrame, Expr, col, lit};
use serde::{Deserialize, Serialize};

use atdp_policies::Policy;

use crate::auditor::{Auditor, tenant_in};
use crate::catalog::{Catalog, rows};
use crate::error::{Error, Result};
use crate::trail::{SYSTEM_TENANT, Trail, event, record_refusal, redact};

/// Largest page.
pub const MAX_PAGE: usize = 500;
/// Longest free-text query, in bytes.
pub const MAX_TEXT: usize = 1_000;
/// Longest value of another filter (tenant, agent, trajectory, model, status, entity).
pub const MAX_FIELD: usize = 200;
/// The step statuses a search can ask for.
pub const STATUSES: [&str; 4] = ["ok", "upstream_error", "interrupted", "denied"];

/// What to look for. Unset fields do not filter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Search {
    /// Only this tenant (it must be one the auditor may read).
    pub tenant: Option<String>,
    /// Only this agent.
    pub agent: Option<String>,
    /// Steps started at or after this time (µs since epoch, UTC).
    pub since: Option<i64>,
    /// Steps started before this time (µs since epoch, UTC).
    pub until: Option<i64>,
    /// Only this trajectory.
    pub trajectory: Option<String>,
    /// The model asked for or served.
    pub model: Option<String>,
    /// `ok`, `upstream_error`, `interrupted` or `denied`.
    pub status: Option<String>,
    /// Steps with a masked span of this entity type (`EMAIL_ADDRESS`, …).
    pub entity: Option<String>,
    /// Steps of trajectories with a reward at or above this value.
    pub reward_min: Option<f64>,
    /// Steps of trajectories with a reward at or below this value.
    pub reward_max: Option<f64>,
    /// Case-insensitive text in a message's (masked) content or in the reply.
    pub text: Option<String>,
    /// Rows to skip (pagination).
    pub offset: usize,
    /// Rows per page (at most [`MAX_PAGE`]).
    pub limit: usize,
}

/// One step found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    /// The step.
    pub step_id: String,
    /// Its trajectory.
    pub trajectory_id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Its agent.
    pub agent_id: String,
    /// When it started (µs since epoch, UTC).
    pub started_at: i64,
    /// Position in the trajectory.
    pub turn_index: i32,
    /// The model asked for.
    pub model: String,
    /// The step's status.
    pub status: String,
    /// The start of the reply (masked), or the tools it called.
    pub preview: String,
    /// Entity types masked in the step, sorted.
    pub entities: Vec<String>,
}

/// One page of hits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Page {
    /// The hits, newest first.
    pub hits: Vec<Hit>,
    /// Whether there are more after this page.
    pub more: bool,
    /// The table versions searched (for evidence).
    pub versions: BTreeMap<String, Option<u64>>,
}

impl Search {
    /// Checks the values that a page or a flag can get wrong.
    pub fn validate(&self) -> Result<()> {
        if self.limit == 0 || self.limit > MAX_PAGE {
            return Err(Error::Invalid(format!(
                "the page size must be between 1 and {MAX_PAGE}"
            )));
        }
        if let (Some(since), Some(until)) = (self.since, self.until)
            && since >= until
        {
            return Err(Error::Invalid("`since` must be before `until`".into()));
        }
        if let (Some(min), Some(max)) = (self.reward_min, self.reward_max)
            && min > max
        {
            return Err(Error::Invalid(
                "the lowest reward must not be above the highest".into(),
            ));
        }
        if [self.reward_min, self.reward_max]
            .into_iter()
            .flatten()
            .any(|v| !v.is_finite())
        {
            return Err(Error::Invalid(
                "reward bounds must be finite numbers".into(),
            ));
        }
        if self.text.as_ref().is_some_and(|t| t.len() > MAX_TEXT) {
            return Err(Error::Invalid(format!(
                "the search text is longer than {MAX_TEXT} bytes"
            )));
        }
        let fields = [
            ("tenant", &self.tenant),
            ("agent", &self.agent),
            ("trajectory", &self.trajectory),
            ("model", &self.model),
            ("status", &self.status),
            ("entity", &self.entity),
        ];
        if let Some((name, _)) = fields
            .iter()
            .find(|(_, v)| v.as_ref().is_some_and(|v| v.len() > MAX_FIELD))
        {
            return Err(Error::Invalid(format!(
                "the {name} filter is longer than {MAX_FIELD} bytes"
            )));
        }
        if let Some(status) = &self.status
            && !STATUSES.contains(&status.as_str())
        {
            return Err(Error::Invalid(format!(
                "status {status:?}: use one of {}",
                STATUSES.join(", ")
            )));
        }
        if let Some(entity) = &self.entity
            && !entity
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(Error::Invalid(
                "an entity type is upper-case letters, digits and '_' (EMAIL_ADDRESS)".into(),
            ));
        }
        Ok(())
    }
}

/// The filters that prune partitions and files: tenant and time.
fn scope(tenants: &[String], search: &Search, time: &str) -> Expr {
    let mut parts = vec![tenant_in(tenants)];
    parts.extend(time_range(time, search.since, search.until));
    parts.into_iter().fold(lit(true), Expr::and)
}

fn steps_filter(tenants: &[String], search: &Search) -> Expr {
    let mut parts = vec![scope(tenants, search, "started_at")];
    if let Some(agent) = &search.agent {
        parts.push(col("agent_id").eq(lit(agent.clone())));
    }
    if let Some(trajectory) = &search.trajectory {
        parts.push(col("trajectory_id").eq(lit(trajectory.clone())));
    }
    if let Some(status) = &search.status {
        parts.push(col("status").eq(lit(status.clone())));
    }
    if let Some(model) = &search.model {
        parts.push(
            col("model_requested")
                .eq(lit(model.clone()))
                .or(col("model_served").eq(lit(model.clone()))),
        );
    }
    parts.into_iter().fold(lit(true), Expr::and)
}

fn contains(haystack: Expr, needle: &str) -> Expr {
    strpos(lower(haystack), lit(needle.to_lowercase())).gt(lit(0i64))
}

/// The key columns of a step, and their names in a frame of hits.
const KEY: [&str; 3] = ["tenant_id", "trajectory_id", "step_id"];
const HIT_KEY: [&str; 3] = ["hit_tenant", "hit_trajectory", "hit_id"];

fn hit_keys() -> Vec<Expr> {
    KEY.iter()
        .zip(HIT_KEY)
        .map(|(k, h)| col(*k).alias(h))
        .collect()
}

/// Keeps the rows of `frame` whose (tenant, trajectory, step) is among those of `hits`.
fn semi_join(frame: DataFrame, hits: DataFrame) -> Result<DataFrame> {
    frame
        .join(hits, JoinType::LeftSemi, &KEY, &HIT_KEY, None)
        .map_err(Error::query)
}

/// Keys of the steps whose `column` (a list of structs) has an element whose `field`
/// passes `test`.
fn listed(
    base: DataFrame,
    column: &str,
    field: &str,
    test: impl Fn(Expr) -> Expr,
) -> Result<DataFrame> {
    let mut columns = hit_keys();
    columns.push(col(column));
    base.select(columns)
        .and_then(|f| f.unnest_columns(&[column]))
        .and_then(|f| f.filter(test(get_field(col(column), field))))
        .and_then(|f| f.select(HIT_KEY.iter().map(|h| col(*h)).collect::<Vec<_>>()))
        .map_err(Error::query)
}

/// Searches the steps of `tenants` (the tenants the caller may read).
pub async fn search(catalog: &Catalog, tenants: &[String], search: &Search) -> Result<Page> {
    search.validate()?;
    let versions = catalog
        .versions()
        .iter()
        .map(|(t, v)| (t.name().to_owned(), *v))
        .collect();
    if tenants.is_empty() {
        return Ok(Page {
            hits: Vec::new(),
            more: false,
            versions,
        });
    }
    let steps = catalog
        .frame(Table::Steps)
        .await?
        .filter(steps_filter(tenants, search))
        .map_err(Error::query)?;
    let mut matching = steps.clone();
    if let Some(entity) = &search.entity {
        let hits = listed(steps.clone(), "pii", "entity", |e| {
            e.eq(lit(entity.clone()))
        })?;
        matching = semi_join(matching, hits.distinct().map_err(Error::query)?)?;
    }
    if let Some(text) = search
        .text
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        let in_request = listed(steps.clone(), "request_messages", "content", |e| {
            contains(e, text)
        })?;
        let in_reply = steps
            .clone()
            .filter(contains(
                get_field(col("response_message"), "content"),
                text,
            ))
            .and_then(|f| f.select(hit_keys()))
            .map_err(Error::query)?;
        let hits = in_request
            .union(in_reply)
            .and_then(DataFrame::distinct)
            .map_err(Error::query)?;
        matching = semi_join(matching, hits)?;
    }
    if search.reward_min.is_some() || search.reward_max.is_some() {
        let mut filter = scope(tenants, &Search::default(), "created_at");
        if let Some(min) = search.reward_min {
            filter = filter.and(col("value").gt_eq(lit(min)));
        }
        if let Some(max) = search.reward_max {
            filter = filter.and(col("value").lt_eq(lit(max)));
        }
        // Trajectory ids are chosen by clients, so two tenants can use the same one: match
        // (tenant, trajectory).
        let hits = catalog
            .frame(Table::Rewards)
            .await?
            .filter(filter)
            .and_then(|f| {
                f.select(vec![
                    col("tenant_id").alias("hit_tenant"),
                    col("trajectory_id").alias("hit_id"),
                ])
            })
            .and_then(DataFrame::distinct)
            .map_err(Error::query)?;
        matching = matching
            .join(
                hits,
                JoinType::LeftSemi,
                &["tenant_id", "trajectory_id"],
                &["hit_tenant", "hit_id"],
                None,
            )
            .map_err(Error::query)?;
    }
    // Pass one: the page's keys, newest first (ties broken by the whole key, so pages do
    // not overlap). A step is (tenant, trajectory, step): trajectory ids are chosen by
    // clients, and imported data can repeat step ids, so no id alone names one row.
    let keys = matching
        .select(vec![
            col("tenant_id"),
            col("trajectory_id"),
            col("step_id"),
            col("started_at"),
        ])
        .and_then(|f| {
            f.sort(vec![
                col("started_at").sort(false, false),
                col("step_id").sort(false, false),
                col("tenant_id").sort(false, false),
                col("trajectory_id").sort(false, false),
            ])
        })
        .and_then(|f| f.limit(search.offset, Some(search.limit + 1)))
        .map_err(Error::query)?
        .collect()
        .await
        .map_err(Error::query)?;
    let mut order: Vec<StepKey> = Vec::new();
    for batch in &keys {
        let [tenants, trajectories, steps] = [0, 1, 2].map(|i| strings(batch.column(i)));
        let (tenants, trajectories, steps) = (tenants?, trajectories?, steps?);
        order.extend(
            tenants
                .into_iter()
                .zip(trajectories)
                .zip(steps)
                .map(|((tenant, trajectory), step)| (tenant, trajectory, step)),
        );
    }
    let more = order.len() > search.limit;
    order.truncate(search.limit);
    // Pass two: the rows of this page.
    let rows = steps_by_key(catalog, tenants, &order).await?;
    let hits = order
        .iter()
        .filter_map(|key| rows.iter().find(|s| key_of(s) == *key))
        .map(hit)
        .collect();
    Ok(Page {
        hits,
        more,
        versions,
    })
}

/// (tenant, trajectory, step).
type StepKey = (String, String, String);

fn key_of(step: &Step) -> StepKey {
    (
        step.tenant_id.clone(),
        step.trajectory_id.clone(),
        step.step_id.clone(),
    )
}

/// A string column's values (engines hand strings back as `Utf8View` or `Utf8`).
fn strings(column: &arrow::array::ArrayRef) -> Result<Vec<String>> {
    let column =
        arrow::compute::cast(column, &arrow::datatypes::DataType::Utf8).map_err(Error::query)?;
    let column = column
        .as_any()
        .downcast_ref::<arrow::array::StringArray>()
        .ok_or_else(|| Error::Query("a key column is not a string column".into()))?;
    Ok(column
        .iter()
        .map(|v| v.unwrap_or_default().to_owned())
        .collect())
}

/// The stored steps of `hits`, in their order, among those of `tenants`: each hit's own row,
/// matched on (tenant, trajectory, step), even where another tenant uses the same ids.
pub async fn steps_by_id(catalog: &Catalog, tenants: &[String], hits: &[Hit]) -> Result<Vec<Step>> {
    let keys: Vec<StepKey> = hits
        .iter()
        .map(|h| {
            (
                h.tenant_id.clone(),
                h.trajectory_id.clone(),
                h.step_id.clone(),
            )
        })
        .collect();
    let rows = steps_by_key(catalog, tenants, &keys).await?;
    Ok(keys
        .iter()
        .filter_map(|key| rows.iter().find(|s| key_of(s) == *key).cloned())
        .collect())
}

/// The steps with these keys, among those of `tenants`.
async fn steps_by_key(
    catalog: &Catalog,
    tenants: &[String],
    keys: &[StepKey],
) -> Result<Vec<Step>> {
    let tenants: Vec<String> = tenants
        .iter()
        .filter(|t| keys.iter().any(|(k, _, _)| k == *t))
        .cloned()
        .collect();
    if keys.is_empty() || tenants.is_empty() {
        return Ok(Vec::new());
    }
    let filter = tenant_in(&tenants).and(col("step_id").in_list(
        keys.iter().map(|(_, _, step)| lit(step.clone())).collect(),
        false,
    ));
    let mut steps = rows(
        catalog.frame(Table::Steps).await?.filter(filter),
        steps_from_batch,
    )
    .await?;
    steps.retain(|s| keys.contains(&key_of(s)));
    Ok(steps)
}

const PREVIEW_CHARS: usize = 160;

fn hit(step: &Step) -> Hit {
    let reply = step.response_message.as_ref();
    let mut preview: String = reply
        .and_then(|m| m.content.as_deref())
        .unwrap_or_default()
        .chars()
        .take(PREVIEW_CHARS)
        .collect();
    if preview.is_empty()
        && let Some(message) = reply
    {
        let names: Vec<&str> = message.tool_calls.iter().map(|c| c.name.as_str()).collect();
        if !names.is_empty() {
            preview = format!("calls {}", names.join(", "));
        }
    }
    let mut entities: Vec<String> = step.pii.iter().map(|p| p.entity.clone()).collect();
    entities.sort();
    entities.dedup();
    Hit {
        step_id: step.step_id.clone(),
        trajectory_id: step.trajectory_id.clone(),
        tenant_id: step.tenant_id.clone(),
        agent_id: step.agent_id.clone(),
        started_at: step.started_at,
        turn_index: step.turn_index,
        model: step.model_requested.clone(),
        status: step.status.clone(),
        preview,
        entities,
    }
}

impl Search {
    /// The search as it may be written down (audit events, evidence bundles): every string
    /// filter (the free text, and the agent, trajectory and model a user typed) with what the
    /// detectors find redacted.
    pub fn redacted(&self, scanner: &atdp_detect::Scanner) -> Search {
        let mut search = self.clone();
        for field in [
            &mut search.text,
            &mut search.agent,
            &mut search.trajectory,
            &mut search.model,
        ] {
            *field = field.take().map(|t| redact(scanner, &t));
        }
        search
    }
}

/// Who searches, which decides the tenants searched and the hits kept.
#[derive(Debug, Clone, Copy)]
pub enum Searcher<'a> {
    /// An auditor: only the tenants Cedar lets them read (a `tenant` outside them is
    /// refused), and each hit checked with `read_trajectory`.
    Auditor(&'a Auditor),
    /// The operator of the command line, who holds the lake's credentials: the `tenant`
    /// asked for, else every tenant of the policy; recorded as `actor`.
    Operator {
        /// The actor written in the audit event.
        actor: &'a str,
    },
}

/// Searches as `searcher` and records the search in the audit trail (event `query`: the
/// filters with the free text redacted by the policy's detectors, the number of results and
/// the table versions read), under the one tenant searched, else the system tenant. The one
/// audited search of the console and of `atdp-audit query`.
pub async fn audited_search(
    catalog: &Catalog,
    policy: &Policy,
    trail: &Trail,
    searcher: Searcher<'_>,
    search: &Search,
) -> Result<Page> {
    let (tenants, actor) = match searcher {
        Searcher::Auditor(auditor) => match auditor.scope(search.tenant.as_deref()) {
            Ok(tenants) => (tenants, auditor.actor()),
            Err(error) => {
                // A search outside the auditor's tenants is refused, and the refusal recorded.
                let asked = redact(
                    &policy.scanner,
                    search.tenant.as_deref().unwrap_or_default(),
                );
                let subject = format!("tenant:{asked}");
                record_refusal(trail, "query", &auditor.actor(), &subject, &error).await;
                return Err(error);
            }
        },
        Searcher::Operator { actor } => (
            search
                .tenant
                .clone()
                .map_or_else(|| policy.access.tenants(), |t| vec![t]),
            actor.to_owned(),
        ),
    };
    let mut page = self::search(catalog, &tenants, search).await?;
    if let Searcher::Auditor(auditor) = searcher {
        page.hits
            .retain(|h| auditor.may_read(&policy.access, &h.trajectory_id, &h.tenant_id));
    }
    let tenant = match tenants.as_slice() {
        [one] => one.clone(),
        _ => SYSTEM_TENANT.to_owned(),
    };
    let filters = search.redacted(&policy.scanner);
    let mut record = event("query", &actor, &tenant);
    record.decision = Some("allow".into());
    record.detail_json = Some(
        serde_json::json!({
            "filters": filters,
            "results": page.hits.len(),
            "versions": page.versions,
        })
        .to_string(),
    );
    trail.record(record).await?;
    Ok(page)
}
