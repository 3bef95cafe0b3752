//! Program functions: the shipped Python example, and crashing, hanging and lying programs.

use std::path::Path;
use std::time::Instant;

use atdp_rewards::{Error, RewardFn, Selection};

use crate::common::{Fixture, STEPS, python};

fn example_script() -> String {
    atdp_testkit::repo_root()
        .join("rewards/examples/python/tool_use.py")
        .display()
        .to_string()
}

fn program_spec(f: &Fixture, name: &str, script: &str, extra: &str) -> RewardFn {
    f.spec(
        name,
        &format!(
            "name = \"{name}\"\nkind = \"program\"\ncommand = [{:?}, {:?}]\nbatch = 64\n{extra}",
            python(),
            script
        ),
    )
}

#[tokio::test]
async fn python_example_labels_every_step() {
    let f = Fixture::new().await;
    let function = program_spec(&f, "tool_use", &example_script(), "");
    let report = f.run(&function, &Selection::default()).await.unwrap();
    assert_eq!(report.written, STEPS as u64);
    assert_eq!(f.rows_of(&function).await, STEPS as f64);
    // The program's rule: 1.0 exactly for steps whose reply called a tool.
    let tool_steps = f
        .number("SELECT count(*) FROM steps WHERE finish_reason = 'tool_calls'")
        .await;
    let ones = f
        .number("SELECT count(*) FROM rewards WHERE source = 'program:tool_use' AND value = 1.0")
        .await;
    assert_eq!(ones, tool_steps);
    assert!(tool_steps > 0.0);
    let again = f.run(&function, &Selection::default()).await.unwrap();
    assert_eq!(again.written, 0);
}

#[tokio::test]
async fn trajectory_programs_can_write_several_names() {
    let f = Fixture::new().await;
    let script = f.file(
        "turns.py",
        r#"import json, sys
for line in sys.stdin:
    t = json.loads(line)
    print(json.dumps({"trajectory_id": t["trajectory_id"], "value": len(t["steps"])}))
    last = t["steps"][-1]
    print(json.dumps({"trajectory_id": t["trajectory_id"], "step_id": last["step_id"], "name": "last_ok", "value": 1 if last["status"] == "ok" else 0}))
"#,
    );
    let function = program_spec(
        &f,
        "turns",
        &script.display().to_string(),
        "target = \"trajectory\"\n",
    );
    let trajectories = f
        .number("SELECT count(DISTINCT trajectory_id) FROM steps")
        .await;
    let report = f.run(&function, &Selection::default()).await.unwrap();
    assert_eq!(report.pending as f64, trajectories);
    assert_eq!(report.written as f64, 2.0 * trajectories);
    let total_steps = f
        .number("SELECT sum(value) FROM rewards WHERE source = 'program:turns' AND name = 'turns'")
        .await;
    assert_eq!(total_steps, STEPS as f64);
    let again = f.run(&function, &Selection::default()).await.unwrap();
    assert_eq!(again.written, 0);
}

/// Runs a failing program and checks that it is reported with trajectory ids and that the
/// lake is unchanged.
async fn fails(f: &Fixture, name: &str, body: &str, extra: &str, why: &str) {
    let script = f.file(&format!("{name}.py"), body);
    let function = program_spec(f, name, &script.display().to_string(), extra);
    let before = f.rewards_version().await;
    let error = f.run(&function, &Selection::default()).await.unwrap_err();
    let Error::Program {
        reason,
        trajectories,
    } = &error
    else {
        panic!("{name}: expected a program error, got {error}");
    };
    assert!(reason.contains(why), "{name}: {reason}");
    assert!(!trajectories.is_empty());
    let known = f
        .number(&format!(
            "SELECT count(*) FROM steps WHERE trajectory_id = '{}'",
            trajectories[0]
        ))
        .await;
    assert!(known > 0.0, "{name}: the error names real trajectories");
    assert!(error.to_string().contains(&trajectories[0]));
    assert_eq!(f.rewards_version().await, before, "{name}: nothing written");
    assert_eq!(f.rows_of(&function).await, 0.0);
}

#[tokio::test]
async fn crashing_program_writes_nothing() {
    let f = Fixture::new().await;
    fails(
        &f,
        "crash",
        "import sys\nsys.stdin.read()\nprint('boom', file=sys.stderr)\nsys.exit(3)\n",
        "",
        "exited with status 3",
    )
    .await;
}

#[tokio::test]
async fn hanging_program_is_killed_at_the_timeout() {
    let f = Fixture::new().await;
    let started = Instant::now();
    fails(
        &f,
        "hang",
        "import time\ntime.sleep(60)\n",
        "timeout_secs = 1\n",
        "timeout_secs = 1",
    )
    .await;
    assert!(started.elapsed().as_secs() < 20);
}

#[tokio::test]
async fn lying_programs_write_nothing() {
    let f = Fixture::new().await;
    fails(
        &f,
        "unknown_id",
        "import json, sys\nfor line in sys.stdin:\n    print(json.dumps({'step_id': 'not-a-step', 'value': 1}))\n",
        "",
        "not in the batch",
    )
    .await;
    fails(
        &f,
        "malformed",
        "import json, sys\nfor line in sys.stdin:\n    s = json.loads(line)\n    print('{\"step_id\": \"' + s['step_id'] + '\", \"value\": ')\n",
        "",
        "not JSON",
    )
    .await;
    fails(
        &f,
        "not_a_number",
        "import json, sys\nfor line in sys.stdin:\n    s = json.loads(line)\n    print(json.dumps({'step_id': s['step_id'], 'value': 'high'}))\n",
        "",
        "finite number",
    )
    .await;
    fails(
        &f,
        "skips",
        "import json, sys\nfor i, line in enumerate(sys.stdin):\n    s = json.loads(line)\n    if i % 2 == 0:\n        print(json.dumps({'step_id': s['step_id'], 'value': 1}))\n",
        "",
        "gave no value",
    )
    .await;
}

#[tokio::test]
async fn a_program_over_its_memory_limit_fails_and_writes_nothing() {
    if !Path::new("/usr/bin/prlimit").is_file() && !Path::new("/bin/prlimit").is_file() {
        eprintln!("skipped: prlimit (util-linux) is not installed");
        return;
    }
    let f = Fixture::new().await;
    fails(
        &f,
        "greedy",
        "import sys\nsys.stdin.read()\nb = bytearray(400_000_000)\nprint(len(b))\n",
        "memory_mb = 64\n",
        "MemoryError",
    )
    .await;
}
