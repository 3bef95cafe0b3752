//! Erasure that reaches served adapters, on the servers the quickstart leaves running: a
//! tenant erasure (`atdp-audit`'s library, as `atdp-audit erase` runs it) lists the adapter
//! versions that learned from the tenant; the loop retires them while agents keep calling; no
//! request fails and the base model, which learned nothing from the tenant, takes over; the
//! erasure's receipt is complete and holds against the audit chain.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use atdp_deploy::Registry;
use atdp_lake::{Lake, WriterConfig};
use atdp_loop::quickstart::{DEMO_KEY, POLICY};
use atdp_loop::{AdapterEvents, Agent, Env, EvalPlan, evaluate, retire_erased};

use crate::quickstart::wait_serving;

/// The quickstart policy's compliance officer (may erase tenant `demo`).
const OFFICER: &str = "sk-atdp-demo-auditor";

pub async fn a_tenant_erasure_retires_what_learned_from_it_under_load(
    work: &Path,
    lake: &str,
    registry: &Registry,
    proxy_url: &str,
    serve_url: &str,
) {
    let qs = work.join("qs");
    let policy = atdp_policies::Policy::load(&qs.join("policy")).unwrap();
    let officer = atdp_audit::Auditor::from_key(&policy.access, OFFICER).unwrap();
    let lake_at = Lake::new(lake, Default::default()).unwrap();
    let trail = atdp_audit::Trail::open(WriterConfig::new(lake, work.join("wal-erasure")))
        .await
        .unwrap();
    let served_before = registry.state().await.unwrap().serving.unwrap();

    let erased = atdp_audit::erase(
        &lake_at,
        &policy,
        &qs.join("proxy/keys.json"),
        &trail,
        &officer,
        "demo",
        None,
        "Tenant offboarded: the contract ended",
    )
    .await
    .unwrap();
    assert!(erased.keys_erased);
    let listed = erased.trained_adapters.clone().unwrap();
    // v1 was trained on the tenant's collected episodes, and its lineage says so.
    assert!(
        listed
            .iter()
            .any(|a| a.policy == POLICY && a.version == 1 && a.trajectories.is_some_and(|n| n > 0)),
        "{listed:?}"
    );

    // Agents keep calling while the loop retires every listed version.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        let agent = Agent::new(proxy_url, Some(DEMO_KEY.to_owned()), "local/policy");
        tokio::spawn(async move {
            let mut reports = Vec::new();
            let mut first_seed = 5_000_000_000;
            while !stop.load(Ordering::Relaxed) {
                let plan = EvalPlan {
                    label: "during the erasure".into(),
                    env: Env::Routing.into(),
                    first_seed,
                    episodes: 8,
                    temperature: 1.0,
                    concurrency: 4,
                    post_rewards: false,
                };
                reports.push(evaluate(&agent, &plan).await);
                first_seed += 8;
            }
            reports
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let events = AdapterEvents::open(lake, Default::default(), &work.join("wal-retire"), "demo")
        .await
        .unwrap();
    let retired = retire_erased(&lake_at, registry, "atdp-loop", Some(&events), false)
        .await
        .unwrap();
    events.close().await.unwrap();
    let retired: BTreeSet<u32> = retired.iter().map(|e| e.version).collect();
    let wanted: BTreeSet<u32> = listed
        .iter()
        .filter(|a| a.policy == POLICY && a.trajectories != Some(0))
        .map(|a| a.version)
        .collect();
    assert_eq!(retired, wanted);
    assert!(retired.contains(&served_before), "{retired:?}");
    let base = format!("{POLICY}@base");
    wait_serving(serve_url, &base).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let reports = load.await.unwrap();
    let failed: usize = reports.iter().map(|r| r.failed).sum();
    let answered: BTreeSet<&String> = reports.iter().flat_map(|r| r.versions.keys()).collect();
    assert_eq!(
        failed,
        0,
        "{:?}",
        reports.iter().map(|r| &r.failures).collect::<Vec<_>>()
    );
    assert!(answered.contains(&base), "{answered:?}");
    assert!(
        answered.contains(&format!("{POLICY}@v{served_before}")),
        "{answered:?}"
    );

    // The receipt: deleted, every version that learned retired, each piece cited; it holds.
    let (receipt, receipt_event) =
        atdp_audit::issue_receipt(&lake_at, &policy, &trail, &officer, &erased.event_id)
            .await
            .unwrap();
    trail.close().await.unwrap();
    assert!(receipt.complete, "{:?}", receipt.pending);
    assert!(receipt.keys_erased);
    assert_eq!(receipt.cites.len(), 2 + wanted.len());
    let check = atdp_audit::check_receipt(&lake_at, &receipt_event)
        .await
        .unwrap();
    assert!(check.ok(), "{:?}", check.problems);
}
