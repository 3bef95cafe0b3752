//! `atdp-quickstart` in a reduced form, then the guessing game, automatic rollback, a PyTorch
//! adapter and a tenant erasure on the servers it leaves running.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use atdp_deploy::{Action, Registry};
use atdp_lake::{Filter, Lake, LakeReader};
use atdp_loop::quickstart::{DEMO_KEY, POLICY, QuickstartConfig, run};
use atdp_loop::{
    AdapterEvents, Agent, Env, EvalPlan, RollbackConfig, check_rollback, evaluate, live_rewards,
};
use atdp_model_files::LoraConfig;
use atdp_trainer::{LoadOptions, Lora, Model, Rng, Selection, save_adapter};
use candle_core::{Device, Tensor};
use serde_json::Value;

/// What `read` gets from the lake's reader (on a plain thread: the reader blocks).
fn from_lake<T: Send + 'static>(
    lake: &str,
    read: impl AsyncFnOnce(&LakeReader) -> T + Send + 'static,
) -> T {
    let lake = lake.to_owned();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let reader = LakeReader::new(Lake::new(&lake, Default::default()).unwrap());
            read(&reader).await
        })
    })
    .join()
    .unwrap()
}

/// The lake's steps.
pub(crate) fn steps_of(lake: &str) -> Vec<atdp_schema::Step> {
    from_lake(lake, async |r: &LakeReader| {
        r.steps(&Filter::default()).await.unwrap().rows
    })
}

/// The lake's audit events.
fn audit_of(lake: &str) -> Vec<atdp_schema::AuditEvent> {
    from_lake(lake, async |r: &LakeReader| {
        r.audit(&Filter::default()).await.unwrap().rows
    })
}

/// The audit event of `kind` about `subject`, its hash chain intact.
pub(crate) fn audited(lake: &str, kind: &str, subject: &str) -> atdp_schema::AuditEvent {
    let events = audit_of(lake);
    let event = events
        .iter()
        .find(|e| e.kind == kind && e.subject.as_deref() == Some(subject))
        .unwrap_or_else(|| panic!("no {kind} of {subject} in the audit table"))
        .clone();
    let mut chain: Vec<atdp_schema::AuditEvent> = events
        .into_iter()
        .filter(|e| e.chain_id == event.chain_id)
        .collect();
    chain.sort_by_key(|e| e.chain_seq);
    atdp_schema::verify_chain(&chain).unwrap();
    event
}

async fn serving(serve_url: &str) -> String {
    let status: Value = reqwest::get(format!("{serve_url}/atdp/status"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    status["serving"].as_str().unwrap().to_owned()
}

pub(crate) async fn wait_serving(serve_url: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while serving(serve_url).await != want {
        assert!(Instant::now() < deadline, "never served {want}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Live episodes per version in the rollback check.
const LIVE: usize = 160;

/// Live rewards, waiting until the lake holds `want` trajectories of each named version.
async fn live_when(
    lake: &str,
    versions: &[(&str, usize)],
) -> std::collections::BTreeMap<String, atdp_loop::VersionReward> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let lake_s = lake.to_owned();
        let live = atdp_loop::blocking("live", move || {
            let selection = Selection {
                tenants: ["demo".to_owned()].into(),
                agent_id: Some("demo-agent".into()),
                ..Selection::default()
            };
            live_rewards(
                &lake_s,
                Default::default(),
                &selection,
                "routing_correct",
                1000,
            )
        })
        .await
        .unwrap();
        if versions
            .iter()
            .all(|(v, n)| live.get(*v).is_some_and(|r| r.trajectories >= *n))
        {
            return live;
        }
        assert!(
            Instant::now() < deadline,
            "the lake never caught up: {live:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_loop_learns_swaps_under_load_rolls_back_gates_a_pytorch_adapter_and_retires_what_an_erasure_reached()
 {
    let work = tempfile::tempdir().unwrap();
    let mut config = QuickstartConfig::new(work.path().join("qs"));
    config.collect = 320;
    config.eval = 100;
    config.gate.episodes = 100;
    config.gate.train_episodes = 40;
    config.load_clients = 2;
    let report = run(&config, &|line| eprintln!("{line}")).await.unwrap();

    // Collection went through the proxy and the lake; the trainer read all of it.
    assert_eq!(
        (report.collected.episodes, report.collected.failed),
        (config.collect as usize, 0)
    );
    assert_eq!(report.trained_examples as u64, config.collect);
    let lake = work.path().join("qs/lake").display().to_string();
    let steps = steps_of(&lake);
    // The held-out "before" calls and the collection are in (the run waited for the
    // collection, which the writer committed after them); later calls may still be on
    // their way.
    assert!(
        steps.len() as u64 >= config.eval + config.collect,
        "{} steps",
        steps.len()
    );
    assert!(
        steps
            .iter()
            .all(|s| s.agent_id == "demo-agent" && s.status == "ok")
    );
    // Before: only the base model answered; after: only the promoted adapter.
    let base = format!("{POLICY}@base");
    let v1 = format!("{POLICY}@v1");
    assert_eq!(report.before.versions.keys().collect::<Vec<_>>(), [&base]);
    let names: BTreeSet<&str> = report.gate.checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "heldout_reward",
            "kl_to_base",
            "reply_length",
            "invalid_replies",
            "reward_hacking"
        ])
    );
    assert!(report.promoted, "{}", report.gate.reason());
    assert_eq!(report.after.versions.keys().collect::<Vec<_>>(), [&v1]);
    // The promotion is in the lake's tamper-evident audit table too, with the gate's checks.
    let promoted = audited(&lake, "adapter_promote", &v1);
    assert_eq!(promoted.actor, "atdp-quickstart");
    assert!(promoted.detail_json.unwrap().contains("reward_hacking"));
    // The console's training page shows the run that made v1: finished, every step's
    // metrics, the reward trained on, and its promotion with the gate's numbers.
    let console_lake = Lake::new(&lake, Default::default()).unwrap();
    let files = atdp_audit::runs::Files::default();
    let runs = atdp_audit::runs::runs_where(&console_lake, &files, |_| true)
        .await
        .unwrap();
    let made_v1 = runs
        .iter()
        .find(|r| r.versions.contains(&(POLICY.to_owned(), 1)))
        .unwrap_or_else(|| panic!("no run linked to v1: {runs:?}"));
    assert_eq!(made_v1.info.state, atdp_lake::runs::RunState::Finished);
    assert_eq!(made_v1.info.tenants, ["demo"]);
    assert!(
        made_v1.info.rewards.contains_key("routing_correct"),
        "{made_v1:?}"
    );
    let metrics = atdp_audit::runs::metrics(&console_lake, &files, made_v1)
        .await
        .unwrap();
    assert_eq!(metrics.len() as u64, made_v1.info.total_steps);
    let promote = made_v1
        .events
        .iter()
        .find(|e| e.action == "promote")
        .unwrap_or_else(|| panic!("{made_v1:?}"));
    assert!(
        promote
            .report
            .as_ref()
            .unwrap()
            .to_string()
            .contains("heldout_reward")
    );
    // The swap under load: no request failed, and both versions answered during it.
    let swap = report.swap.as_ref().unwrap();
    assert_eq!(swap.failed, 0);
    assert!(swap.versions.contains_key(&v1), "{swap:?}");
    // It learned: the held-out success rate rose beyond the noise. Two-proportion z ≥ 2
    // (one-sided p < 0.025): a trainer that learns nothing passes 2% of the time; runs of
    // this reduced loop measured 0.20 → 0.33 (z 2.1) to 0.20 → 0.55 (z 5).
    let (before, after) = (report.before.success_rate, report.after.success_rate);
    let pooled = (before + after) / 2.0;
    let z = (after - before) / (pooled * (1.0 - pooled) * 2.0 / config.eval as f64).sqrt();
    assert!(z >= 2.0, "before {before:.2}, after {after:.2}: z {z:.2}");

    let agent = Agent::new(&report.proxy_url, Some(DEMO_KEY.to_owned()), "local/policy");

    // The multi-turn environment: the proxy groups each game's turns into one trajectory,
    // each turn the child of the one before.
    let games = evaluate(
        &agent,
        &EvalPlan {
            label: "guess".into(),
            env: Env::Guess.into(),
            first_seed: 0,
            episodes: 6,
            temperature: 1.0,
            // One game at a time. Every game opens with the same prompt, and a trained model
            // often answers alike: two identical conversations in flight cannot be told apart
            // by automatic grouping (an agent sends `x-atdp-trajectory-id` or a session key
            // for that), and a turn may join the other game's trajectory.
            concurrency: 1,
            post_rewards: true,
        },
    )
    .await;
    assert_eq!(games.failed, 0, "{:?}", games.failures);
    let steps = steps_when(&lake, &games).await;
    for game in &games.episode_list {
        let id = game.trajectory_id.as_deref().unwrap();
        let mut turns: Vec<&atdp_schema::Step> =
            steps.iter().filter(|s| s.trajectory_id == id).collect();
        turns.sort_by_key(|s| s.turn_index);
        assert_eq!(turns.len(), game.turns, "game {}", game.seed);
        for pair in turns.windows(2) {
            assert_eq!(
                pair[1].parent_step_id.as_deref(),
                Some(pair[0].step_id.as_str())
            );
        }
    }

    // Automatic rollback: v1 earns live reward; a damaged v2 is promoted by hand and earns
    // less; the check rolls back to v1, and the server follows.
    // Greedy, and 160 episodes a version: the comparison must not depend on sampling luck
    // (v1 serves about 50% right, a damaged adapter about chance, 25%).
    let plan = |first_seed| EvalPlan {
        label: "live".into(),
        env: Env::Routing.into(),
        first_seed,
        episodes: LIVE as u64,
        temperature: 0.0,
        concurrency: 8,
        post_rewards: true,
    };
    let on_v1 = evaluate(&agent, &plan(3_000_000_000)).await;
    assert_eq!(on_v1.versions.keys().collect::<Vec<_>>(), [&v1]);
    let registry = Registry::open(&lake, Default::default(), POLICY).unwrap();
    let model_dir = work.path().join("qs/model");
    let damaged = work.path().join("damaged");
    {
        let model = Model::load(&model_dir, &LoadOptions::default()).unwrap();
        let lora = Lora::new(&model, LoraConfig::default()).unwrap();
        // Seeded (candle's `randn` is not), so that every run damages it the same way.
        for (index, module, layer) in lora.layers() {
            let shape = layer.b().dims().to_vec();
            let mut rng = Rng::stream(17, &module.module_path(index));
            let values: Vec<f32> = (0..shape.iter().product::<usize>())
                .map(|_| (rng.normal() * 2.0) as f32)
                .collect();
            layer
                .b()
                .set(&Tensor::from_vec(values, shape, &Device::Cpu).unwrap())
                .unwrap();
        }
        save_adapter(&lora, &damaged, "damaged").unwrap();
    }
    assert_eq!(registry.publish(&damaged, "test").await.unwrap().version, 2);
    registry
        .promote(2, "test", "by hand, skipping the gate", None)
        .await
        .unwrap();
    let v2 = format!("{POLICY}@v2");
    wait_serving(&report.serve_url, &v2).await;
    let on_v2 = evaluate(&agent, &plan(4_000_000_000)).await;
    assert_eq!(on_v2.versions.keys().collect::<Vec<_>>(), [&v2]);
    assert!(
        on_v2.mean_reward + 0.1 < on_v1.mean_reward,
        "v1 {} v2 {}",
        on_v1.mean_reward,
        on_v2.mean_reward
    );

    let live = live_when(&lake, &[(&v1, LIVE), (&v2, LIVE)]).await;
    let config = RollbackConfig {
        window: LIVE,
        margin: 0.1,
    };
    // A window larger than what v2 served decides nothing yet.
    let patient = RollbackConfig {
        window: 1000,
        margin: 0.1,
    };
    assert!(
        check_rollback(&registry, &live, &patient, "test", None)
            .await
            .unwrap()
            .is_none()
    );
    let trail = AdapterEvents::open(&lake, Default::default(), &work.path().join("wal"), "demo")
        .await
        .unwrap();
    let event = check_rollback(&registry, &live, &config, "atdp-loop", Some(&trail))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (event.action, event.version, event.previous),
        (Action::Rollback, 1, Some(2))
    );
    assert!(
        event.reason.contains("live reward of v2"),
        "{}",
        event.reason
    );
    wait_serving(&report.serve_url, &v1).await;
    let rolled = audited(&lake, "adapter_rollback", &v1);
    assert_eq!(rolled.reason.as_deref(), Some(event.reason.as_str()));
    // Nothing more to do once v1 is back.
    let live = live_when(&lake, &[(&v1, 60)]).await;
    assert!(
        check_rollback(&registry, &live, &config, "atdp-loop", None)
            .await
            .unwrap()
            .is_none()
    );

    crate::pytorch::a_pytorch_adapter_from_the_lake_is_gated_and_served(
        work.path(),
        &lake,
        &registry,
        &report.serve_url,
    )
    .await;

    crate::erasure::a_tenant_erasure_retires_what_learned_from_it_under_load(
        work.path(),
        &lake,
        &registry,
        &report.proxy_url,
        &report.serve_url,
    )
    .await;
}

/// The lake's steps once every turn of `games` is there.
async fn steps_when(lake: &str, games: &atdp_loop::EvalReport) -> Vec<atdp_schema::Step> {
    let want: usize = games.episode_list.iter().map(|g| g.turns).sum();
    let ids: BTreeSet<String> = games
        .episode_list
        .iter()
        .filter_map(|g| g.trajectory_id.clone())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let steps = steps_of(lake);
        if steps
            .iter()
            .filter(|s| ids.contains(&s.trajectory_id))
            .count()
            >= want
        {
            return steps;
        }
        assert!(
            Instant::now() < deadline,
            "the game steps never reached the lake: {} of {want} turns under the games' {} trajectory ids",
            steps
                .iter()
                .filter(|s| ids.contains(&s.trajectory_id))
                .count(),
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A non-empty directory the quickstart did not make is refused, not emptied.
#[tokio::test]
async fn a_foreign_work_directory_is_left_alone() {
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("thesis.tex"), "precious").unwrap();
    let config = QuickstartConfig::new(work.path().to_path_buf());
    let err = run(&config, &|_| {}).await.err().unwrap();
    assert!(
        err.to_string().contains("not made by atdp-quickstart"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("thesis.tex")).unwrap(),
        "precious"
    );
}
