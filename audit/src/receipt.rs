//! Erasure receipts: one audit event that says everything an erasure reached. An erasure is
//! recorded in pieces, by different writers and at different times: the request (`erase`,
//! by the console or `atdp-audit erase`), its outcome (`erase_completed`: vault rows deleted,
//! files rewritten and vacuumed, keys shredded, the adapter versions that learned from the
//! data), and later each retirement of such a version (`adapter_retire`, by `atdp-loop`,
//! naming the erasure). A receipt gathers them, says whether the erasure is complete (every
//! listed version retired), and is itself recorded as an `erase_receipt` event that cites each
//! piece by chain, position and hash, so that [`check_receipt`] can later show that none of
//! them changed.
//!
//! A receipt is issued only on an intact audit trail, and only to an auditor whom the access
//! policy lets erase the tenant's data.

use std::collections::BTreeMap;

use atdp_lake::{Filter, Lake, LakeReader};
use atdp_schema::AuditEvent;
use serde::{Deserialize, Serialize};

use crate::auditor::{self, Auditor};
use crate::error::{Error, Result};
use crate::trail::{Trail, event};
use crate::verify::verify;

/// The kind of a receipt's audit event.
pub const RECEIPT_KIND: &str = "erase_receipt";

/// An audit event a receipt rests on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cited {
    /// Its kind (`erase`, `erase_completed`, `adapter_retire`).
    pub kind: String,
    /// Its id.
    pub event_id: String,
    /// The chain that holds it.
    pub chain_id: String,
    /// Its position in that chain.
    pub chain_seq: i64,
    /// Its hash.
    pub hash: String,
}

impl Cited {
    fn of(event: &AuditEvent) -> Cited {
        Cited {
            kind: event.kind.clone(),
            event_id: event.event_id.clone(),
            chain_id: event.chain_id.clone(),
            chain_seq: event.chain_seq,
            hash: event.hash.clone(),
        }
    }
}

/// An adapter version the erasure listed, and whether it was retired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiptAdapter {
    /// The policy.
    pub policy: String,
    /// The version.
    pub version: u32,
    /// How many of the erased data's trajectories it learned from; `None`: unknown (no
    /// lineage), which counts as learned.
    pub trajectories: Option<usize>,
    /// The `adapter_retire` event that retired it, if one did: one naming this erasure when
    /// there is one, else any (by hand, or for another erasure).
    pub retired_by: Option<String>,
}

/// What an erasure reached, from the audit trail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// The erasure: the id of its `erase` event.
    pub erasure: String,
    /// The tenant.
    pub tenant: String,
    /// `subject` or `tenant`.
    pub scope: String,
    /// Who asked for it.
    pub requested_by: String,
    /// When (µs since epoch, UTC).
    pub requested_at: i64,
    /// The reason recorded with it (as recorded: personal data already redacted).
    pub reason: Option<String>,
    /// Whether the deletion itself succeeded; `None` when no outcome was recorded (the
    /// erasure stopped before it finished).
    pub deleted: Option<bool>,
    /// Vault rows deleted (`None`: Delta dropped whole files without counting).
    pub vault_rows_deleted: Option<u64>,
    /// Vault files the deletion removed from the table.
    pub vault_files_removed: usize,
    /// Vault files written again without the erased rows.
    pub vault_files_rewritten: usize,
    /// Files deleted from storage (vacuumed).
    pub files_vacuumed: usize,
    /// Whether the tenant's keys were shredded (tenant erasure).
    pub keys_erased: bool,
    /// Whether the adapters that learned from the data could be looked up.
    pub lineage_known: bool,
    /// The adapter versions that learned from the data, or may have.
    pub adapters: Vec<ReceiptAdapter>,
    /// The deletion succeeded, the lineage is known and every listed version that learned
    /// from the data is retired.
    pub complete: bool,
    /// What is still missing, in words; empty when complete.
    pub pending: Vec<String>,
    /// The events the receipt rests on.
    pub cites: Vec<Cited>,
}

/// The `erase_completed` detail, as `erase` writes it.
#[derive(Debug, Deserialize)]
struct Outcome {
    #[serde(default)]
    ok: bool,
    vault_rows_deleted: Option<u64>,
    #[serde(default)]
    vault_files_removed: usize,
    #[serde(default)]
    vault_files_rewritten: usize,
    #[serde(default)]
    files_deleted: usize,
    #[serde(default)]
    keys_erased: bool,
    trained_adapters: Option<Vec<Listed>>,
}

#[derive(Debug, Deserialize)]
struct Listed {
    policy: String,
    version: u32,
    trajectories: Option<usize>,
}

/// The `adapter_retire` detail, as `atdp-loop` writes it.
#[derive(Debug, Deserialize)]
struct Retirement {
    policy: String,
    version: u32,
    #[serde(default)]
    detail: RetirementCause,
}

#[derive(Debug, Default, Deserialize)]
struct RetirementCause {
    erasure: Option<String>,
}

fn detail<T: serde::de::DeserializeOwned>(event: &AuditEvent) -> Option<T> {
    serde_json::from_str(event.detail_json.as_deref()?).ok()
}

/// Every audit event, after checking that the trail is intact.
async fn intact_events(lake: &Lake) -> Result<Vec<AuditEvent>> {
    let report = verify(lake, None).await?;
    if let Some(problem) = report.first_problem() {
        return Err(Error::Invalid(format!(
            "the audit trail is broken, so no receipt can rest on it: {problem}"
        )));
    }
    let read = LakeReader::new(lake.clone())
        .audit(&Filter::default())
        .await?;
    Ok(read.rows)
}

/// The receipt of erasure `erasure` (the id of its `erase` event) from `events`.
fn build(events: &[AuditEvent], erasure: &str) -> Result<Receipt> {
    let request = events
        .iter()
        .find(|e| e.event_id == erasure && e.kind == "erase")
        .ok_or_else(|| Error::NotFound(format!("erasure {erasure}")))?;
    if request.decision.as_deref() != Some("allow") {
        return Err(Error::Invalid(format!(
            "erasure {erasure} was refused by the access policy: nothing was erased"
        )));
    }
    let scope = detail::<serde_json::Value>(request)
        .and_then(|d| d.get("scope").and_then(|s| s.as_str()).map(str::to_owned))
        .unwrap_or_default();
    let completed = events
        .iter()
        .find(|e| e.kind == "erase_completed" && e.subject.as_deref() == Some(erasure));
    let outcome = completed.and_then(detail::<Outcome>);
    let mut cites = vec![Cited::of(request)];
    cites.extend(completed.map(Cited::of));

    let mut pending = Vec::new();
    let mut adapters: BTreeMap<(String, u32), ReceiptAdapter> = BTreeMap::new();
    for listed in outcome
        .as_ref()
        .and_then(|o| o.trained_adapters.as_ref())
        .into_iter()
        .flatten()
    {
        adapters
            .entry((listed.policy.clone(), listed.version))
            .or_insert(ReceiptAdapter {
                policy: listed.policy.clone(),
                version: listed.version,
                trajectories: listed.trajectories,
                retired_by: None,
            });
    }
    // A retired version never serves again, whoever retired it and why: a retirement for
    // this erasure counts first, then one by hand or for another erasure.
    for own in [true, false] {
        for retire in events.iter().filter(|e| e.kind == "adapter_retire") {
            let Some(r) = detail::<Retirement>(retire) else {
                continue;
            };
            if own != (r.detail.erasure.as_deref() == Some(erasure)) {
                continue;
            }
            if let Some(adapter) = adapters.get_mut(&(r.policy, r.version))
                && adapter.retired_by.is_none()
            {
                adapter.retired_by = Some(retire.event_id.clone());
                cites.push(Cited::of(retire));
            }
        }
    }

    let deleted = outcome.as_ref().map(|o| o.ok);
    match deleted {
        None => pending.push("no outcome of the erasure is recorded".to_owned()),
        Some(false) => pending.push("the deletion failed".to_owned()),
        Some(true) => {}
    }
    let lineage_known = outcome
        .as_ref()
        .is_some_and(|o| o.trained_adapters.is_some());
    if outcome.is_some() && !lineage_known {
        pending.push("the adapters that learned from the data could not be looked up".to_owned());
    }
    for adapter in adapters.values() {
        let learned = adapter.trajectories.is_none_or(|n| n > 0);
        if learned && adapter.retired_by.is_none() {
            pending.push(format!(
                "{}@v{} learned from the data and is not retired",
                adapter.policy, adapter.version
            ));
        }
    }
    let o = outcome.as_ref();
    Ok(Receipt {
        erasure: erasure.to_owned(),
        tenant: request.tenant_id.clone(),
        scope,
        requested_by: request.actor.clone(),
        requested_at: request.occurred_at,
        reason: request.reason.clone(),
        deleted,
        vault_rows_deleted: o.and_then(|o| o.vault_rows_deleted),
        vault_files_removed: o.map_or(0, |o| o.vault_files_removed),
        vault_files_rewritten: o.map_or(0, |o| o.vault_files_rewritten),
        files_vacuumed: o.map_or(0, |o| o.files_deleted),
        keys_erased: o.is_some_and(|o| o.keys_erased),
        lineage_known,
        adapters: adapters.into_values().collect(),
        complete: pending.is_empty(),
        pending,
        cites,
    })
}

/// Issues the receipt of erasure `erasure` (the id of its `erase` event) and records it as an
/// `erase_receipt` event (committed before it is returned, with the event's id). Refused
/// when the audit trail is not intact, or when the access policy does not let `auditor`
/// erase the tenant's data (the refusal is recorded).
pub async fn issue_receipt(
    lake: &Lake,
    policy: &atdp_policies::Policy,
    trail: &Trail,
    auditor: &Auditor,
    erasure: &str,
) -> Result<(Receipt, String)> {
    let events = intact_events(lake).await?;
    let receipt = build(&events, erasure)?;
    let verdict = crate::erase::decide(&policy.access, auditor, &receipt.tenant);
    let mut record = event(RECEIPT_KIND, &auditor.actor(), &receipt.tenant);
    record.subject = Some(erasure.to_owned());
    record.policy_id = auditor::policy_ids(&verdict);
    if !verdict.allowed {
        record.decision = Some("deny".into());
        trail.record_committed(record).await?;
        return Err(Error::Denied(format!(
            "the access policy does not let this auditor erase data of tenant {}, nor see what an erasure reached",
            receipt.tenant
        )));
    }
    record.decision = Some("allow".into());
    record.detail_json = Some(
        serde_json::to_string(&receipt)
            .map_err(|e| Error::Invalid(format!("the receipt does not serialize: {e}")))?,
    );
    let recorded = trail.record_committed(record).await?;
    Ok((receipt, recorded.event_id))
}

/// What [`check_receipt`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReceiptCheck {
    /// The receipt as recorded.
    pub receipt: Receipt,
    /// Where the receipt itself sits in the trail.
    pub recorded_as: Cited,
    /// Each cited event that is missing or differs from what the receipt says, in words;
    /// empty when the receipt holds.
    pub problems: Vec<String>,
}

impl ReceiptCheck {
    /// Whether the receipt and every event it cites are in the intact trail, unchanged.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks the receipt recorded as audit event `receipt_event`: the trail is intact (every
/// chain verifies), and each event the receipt cites is still there at the same chain
/// position with the same hash, so that the receipt's account can be traced to events no one
/// changed.
pub async fn check_receipt(lake: &Lake, receipt_event: &str) -> Result<ReceiptCheck> {
    check(&intact_events(lake).await?, receipt_event)
}

/// The receipt recorded as `receipt_event`, checked against `events`.
fn check(events: &[AuditEvent], receipt_event: &str) -> Result<ReceiptCheck> {
    let recorded = events
        .iter()
        .find(|e| e.event_id == receipt_event && e.kind == RECEIPT_KIND)
        .ok_or_else(|| Error::NotFound(format!("erasure receipt {receipt_event}")))?;
    let receipt: Receipt = detail(recorded).ok_or_else(|| {
        Error::Invalid(format!(
            "audit event {receipt_event} holds no readable receipt (a refused request?)"
        ))
    })?;
    let by_id: BTreeMap<&str, &AuditEvent> =
        events.iter().map(|e| (e.event_id.as_str(), e)).collect();
    let mut problems = Vec::new();
    for cited in &receipt.cites {
        match by_id.get(cited.event_id.as_str()) {
            None => problems.push(format!(
                "{} event {} is missing",
                cited.kind, cited.event_id
            )),
            Some(found) if Cited::of(found) != *cited => problems.push(format!(
                "{} event {} differs from the receipt (chain {} #{}, hash {})",
                cited.kind, cited.event_id, found.chain_id, found.chain_seq, found.hash
            )),
            Some(_) => {}
        }
    }
    if receipt.erasure != recorded.subject.clone().unwrap_or_default() {
        problems.push("the receipt names another erasure than its event".to_owned());
    }
    // What the receipt says must follow from the events it cites: a receipt recorded with
    // real citations but another account (a deletion it did not see, a version it calls
    // retired) does not hold.
    if problems.is_empty() {
        let cited: Vec<AuditEvent> = events
            .iter()
            .filter(|e| receipt.cites.iter().any(|c| c.event_id == e.event_id))
            .cloned()
            .collect();
        match build(&cited, &receipt.erasure) {
            Ok(rebuilt) if rebuilt == receipt => {}
            Ok(_) => {
                problems.push("the receipt does not follow from the events it cites".to_owned())
            }
            Err(e) => problems.push(format!("the cited events make no receipt: {e}")),
        }
    }
    Ok(ReceiptCheck {
        recorded_as: Cited::of(recorded),
        receipt,
        problems,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    /// An event of `kind` with `detail`, at `seq` of chain `c1`.
    fn at(seq: i64, kind: &str, subject: &str, detail: serde_json::Value) -> AuditEvent {
        let mut e = AuditEvent::new(kind, "auditor:dpo", "acme");
        e.chain_id = "c1".into();
        e.chain_seq = seq;
        e.hash = format!("h{seq}");
        e.subject = Some(subject.into());
        e.decision = Some("allow".into());
        e.detail_json = Some(detail.to_string());
        e
    }

    fn retire(seq: i64, policy: &str, version: u32, erasure: &str) -> AuditEvent {
        at(
            seq,
            "adapter_retire",
            &format!("{policy}@v{version}"),
            json!({"policy": policy, "version": version, "detail": {"erasure": erasure}}),
        )
    }

    /// An erasure whose outcome lists `support` v1 (learned), v2 (did not) and v3 (unknown).
    fn erasure() -> (String, Vec<AuditEvent>) {
        let request = at(1, "erase", "tenant:acme", json!({"scope": "subject"}));
        let id = request.event_id.clone();
        let listed = |v: u32, n: Option<usize>| json!({"policy": "support", "version": v, "trajectories": n});
        let outcome = at(
            2,
            "erase_completed",
            &id,
            json!({"ok": true, "vault_rows_deleted": 3, "vault_files_removed": 1,
                   "vault_files_rewritten": 1, "files_deleted": 1, "keys_erased": false,
                   "trained_adapters": [listed(1, Some(2)), listed(2, Some(0)), listed(3, None)]}),
        );
        (id, vec![request, outcome])
    }

    #[test]
    fn a_receipt_is_complete_once_every_version_that_learned_is_retired_for_this_erasure() {
        let (id, mut events) = erasure();
        let receipt = build(&events, &id).unwrap();
        assert!(!receipt.complete);
        assert_eq!(receipt.pending.len(), 2, "{:?}", receipt.pending);
        assert_eq!(
            (
                receipt.vault_rows_deleted,
                receipt.vault_files_rewritten,
                receipt.files_vacuumed
            ),
            (Some(3), 1, 1)
        );
        // A retirement of another policy does not count; one for another erasure (or by
        // hand) does, and this erasure's own is cited before it.
        events.push(retire(3, "billing", 3, &id));
        assert!(!build(&events, &id).unwrap().complete);
        events.push(retire(4, "support", 1, "another-erasure"));
        let receipt = build(&events, &id).unwrap();
        assert_eq!(
            receipt.pending,
            ["support@v3 learned from the data and is not retired"]
        );
        events.push(retire(5, "support", 3, &id));
        events.push(retire(6, "support", 1, &id));
        let receipt = build(&events, &id).unwrap();
        assert!(receipt.complete, "{:?}", receipt.pending);
        let cited: Vec<i64> = receipt.cites.iter().map(|c| c.chain_seq).collect();
        assert_eq!(cited, [1, 2, 5, 6]);
        // v2 learned nothing from the data: listed, not retired, not pending.
        assert_eq!(receipt.adapters[1].retired_by, None);
    }

    #[test]
    fn an_unfinished_or_refused_or_unknown_erasure_gets_no_complete_receipt() {
        let (id, events) = erasure();
        let unfinished = build(&events[..1], &id).unwrap();
        assert_eq!((unfinished.complete, unfinished.deleted), (false, None));
        let mut failed = events.clone();
        failed[1].detail_json = Some(json!({"ok": false, "trained_adapters": []}).to_string());
        assert_eq!(
            build(&failed, &id).unwrap().pending,
            ["the deletion failed"]
        );
        let mut blind = events.clone();
        blind[1].detail_json = Some(json!({"ok": true, "trained_adapters": null}).to_string());
        assert!(!build(&blind, &id).unwrap().complete);
        let mut refused = events.clone();
        refused[0].decision = Some("deny".into());
        assert!(matches!(build(&refused, &id), Err(Error::Invalid(_))));
        assert!(matches!(build(&events, "nope"), Err(Error::NotFound(_))));
    }

    #[test]
    fn a_recorded_receipt_fails_its_check_when_a_cited_event_is_gone_or_changed() {
        let (id, mut events) = erasure();
        events.push(retire(3, "support", 1, &id));
        events.push(retire(4, "support", 3, &id));
        let receipt = build(&events, &id).unwrap();
        let mut recorded = at(
            5,
            RECEIPT_KIND,
            &id,
            serde_json::to_value(&receipt).unwrap(),
        );
        recorded.event_id = "receipt-1".into();
        events.push(recorded);
        let held = check(&events, "receipt-1").unwrap();
        assert!(held.ok(), "{:?}", held.problems);

        // Real citations, another account: it does not hold.
        let mut forged = receipt.clone();
        forged.vault_rows_deleted = Some(30);
        let mut claims = events.clone();
        let last = claims.len() - 1;
        claims[last].detail_json = Some(serde_json::to_string(&forged).unwrap());
        assert_eq!(
            check(&claims, "receipt-1").unwrap().problems,
            ["the receipt does not follow from the events it cites"]
        );

        let mut changed = events.clone();
        changed[2].hash = "other".into();
        let check_changed = check(&changed, "receipt-1").unwrap();
        assert_eq!(
            check_changed.problems.len(),
            1,
            "{:?}",
            check_changed.problems
        );
        let mut gone = events.clone();
        gone.remove(3);
        assert!(!check(&gone, "receipt-1").unwrap().ok());
        assert!(matches!(check(&events, &id), Err(Error::NotFound(_))));
    }
}
