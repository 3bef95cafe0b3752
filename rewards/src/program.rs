//! Reward programs: JSON Lines in and out, one batch per process, under a timeout and a
//! memory limit. The protocol is documented in `docs/rewards.md`.
//!
//! In: one line per step (`"kind": "step"`) or per trajectory (`"kind": "trajectory"`, its
//! steps in `steps`). Out: one or more lines per item, `{"step_id" | "trajectory_id": …,
//! "name"?: …, "value": <number>}`. A crash, a timeout, or a line that is not such an
//! object, names an id outside the batch, or leaves an item without a value fails the whole
//! batch: nothing of it is written.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;

use atdp_schema::{Message, Step};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::{Error, Result};
use crate::label::{Label, valid_name};
use crate::spec::{Program, Target};

/// Most bytes of output a batch may produce.
const STDOUT_MAX: u64 = 256 << 20;
/// Bytes of the program's standard error kept for the error message.
const STDERR_TAIL: usize = 2048;

/// One step as a program sees it.
#[derive(Debug, Serialize)]
pub struct StepIn<'a> {
    /// Always `step` (for a step target).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// The step.
    pub step_id: &'a str,
    /// Its trajectory.
    pub trajectory_id: &'a str,
    /// Its parent step.
    pub parent_step_id: Option<&'a str>,
    /// Position in the trajectory.
    pub turn_index: i32,
    /// The tenant.
    pub tenant_id: &'a str,
    /// The agent.
    pub agent_id: &'a str,
    /// µs since epoch, UTC.
    pub started_at: i64,
    /// Milliseconds from request to the last byte of the response.
    pub latency_ms: Option<i64>,
    /// The model the client asked for.
    pub model: &'a str,
    /// `ok`, `upstream_error`, `interrupted`, `denied`.
    pub status: &'a str,
    /// `stop`, `length`, `tool_calls`, …
    pub finish_reason: Option<&'a str>,
    /// Why the call failed.
    pub error: Option<&'a str>,
    /// The request's messages (masked).
    pub messages: &'a [Message],
    /// The reply (masked).
    pub response: Option<&'a Message>,
    /// Names of the tools offered.
    pub tools: Vec<&'a str>,
    /// Prompt tokens.
    pub prompt_tokens: Option<i64>,
    /// Completion tokens.
    pub completion_tokens: Option<i64>,
    /// Labels.
    pub tags: &'a BTreeMap<String, String>,
}

impl<'a> StepIn<'a> {
    /// The step's line.
    pub fn new(step: &'a Step, kind: Option<&'static str>) -> Self {
        StepIn {
            kind,
            step_id: &step.step_id,
            trajectory_id: &step.trajectory_id,
            parent_step_id: step.parent_step_id.as_deref(),
            turn_index: step.turn_index,
            tenant_id: &step.tenant_id,
            agent_id: &step.agent_id,
            started_at: step.started_at,
            latency_ms: step.ended_at.map(|end| (end - step.started_at) / 1000),
            model: &step.model_requested,
            status: &step.status,
            finish_reason: step.finish_reason.as_deref(),
            error: step.error.as_deref(),
            messages: &step.request_messages,
            response: step.response_message.as_ref(),
            tools: step.tools.iter().map(|t| t.name.as_str()).collect(),
            prompt_tokens: step.prompt_tokens,
            completion_tokens: step.completion_tokens,
            tags: &step.tags,
        }
    }
}

/// One trajectory as a program sees it.
#[derive(Debug, Serialize)]
struct TrajectoryIn<'a> {
    kind: &'static str,
    trajectory_id: &'a str,
    tenant_id: &'a str,
    agent_id: &'a str,
    /// In `started_at` order.
    steps: Vec<StepIn<'a>>,
}

/// One batch's items: steps (step target) or the steps of whole trajectories, all of one
/// tenant.
#[derive(Debug)]
pub(crate) struct Batch {
    target: Target,
    /// Step target: one step per item; trajectory target: steps grouped by trajectory.
    items: Vec<Vec<Step>>,
}

impl Batch {
    /// A batch of `items`, refused if they belong to more than one tenant: a program
    /// identifies what it labels by trajectory and step ids, which tenants share.
    pub(crate) fn new(target: Target, items: Vec<Vec<Step>>) -> Result<Batch> {
        let tenants: BTreeSet<&str> = items
            .iter()
            .flatten()
            .map(|s| s.tenant_id.as_str())
            .collect();
        if tenants.len() > 1 {
            return Err(Error::Invalid(format!(
                "a reward program batch would hold the steps of several tenants ({}); batches are built per tenant",
                tenants.into_iter().collect::<Vec<_>>().join(", ")
            )));
        }
        Ok(Batch { target, items })
    }

    pub(crate) fn trajectory_ids(&self) -> Vec<String> {
        let ids: BTreeSet<&str> = self
            .items
            .iter()
            .flatten()
            .map(|s| s.trajectory_id.as_str())
            .collect();
        ids.into_iter().map(str::to_owned).collect()
    }

    fn input(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        for item in &self.items {
            let line = match (self.target, item.first()) {
                (_, None) => continue,
                (Target::Step, Some(step)) => {
                    serde_json::to_writer(&mut out, &StepIn::new(step, Some("step")))
                }
                (Target::Trajectory, Some(first)) => serde_json::to_writer(
                    &mut out,
                    &TrajectoryIn {
                        kind: "trajectory",
                        trajectory_id: &first.trajectory_id,
                        tenant_id: &first.tenant_id,
                        agent_id: &first.agent_id,
                        steps: item.iter().map(|s| StepIn::new(s, None)).collect(),
                    },
                ),
            };
            line.map_err(|e| Error::Invalid(format!("cannot encode a step as JSON: {e}")))?;
            out.push(b'\n');
        }
        Ok(out)
    }
}

fn prlimit() -> Option<&'static Path> {
    static PRLIMIT: OnceLock<Option<PathBuf>> = OnceLock::new();
    PRLIMIT
        .get_or_init(|| {
            let found = ["/usr/bin/prlimit", "/bin/prlimit", "/usr/sbin/prlimit"]
                .into_iter()
                .map(PathBuf::from)
                .find(|p| p.is_file());
            if found.is_none() {
                tracing::warn!("Reward programs run without a memory limit: `prlimit` (util-linux) was not found.");
            }
            found
        })
        .as_deref()
}

/// Runs the program on one batch and checks its answer.
pub(crate) async fn run(program: &Program, name: &str, batch: &Batch) -> Result<Vec<Label>> {
    let failed = |reason: String| Error::Program {
        reason,
        trajectories: batch.trajectory_ids(),
    };
    let input = batch.input()?;
    let (stdout, stderr) = execute(program, input).await.map_err(failed)?;
    parse(name, batch, &stdout).map_err(|reason| {
        let stderr = String::from_utf8_lossy(&stderr);
        let stderr = stderr.trim();
        if stderr.is_empty() {
            failed(reason)
        } else {
            failed(format!("{reason}; stderr: {}", tail(stderr)))
        }
    })
}

fn tail(text: &str) -> &str {
    let mut start = text.len().saturating_sub(STDERR_TAIL);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Spawns the program in its own process group, feeds it `input`, and returns its output;
/// `Err` says why the run failed.
async fn execute(program: &Program, input: Vec<u8>) -> Result<(Vec<u8>, Vec<u8>), String> {
    let (exe, args) = program
        .command
        .split_first()
        .ok_or_else(|| "empty command".to_owned())?;
    let exe_path = if exe.contains('/') && Path::new(exe).is_relative() {
        program.dir.join(exe).display().to_string()
    } else {
        exe.clone()
    };
    let mut command = match prlimit() {
        Some(prlimit) => {
            let mut c = tokio::process::Command::new(prlimit);
            c.arg(format!("--as={}", program.memory_bytes))
                .arg("--")
                .arg(&exe_path);
            c
        }
        None => tokio::process::Command::new(&exe_path),
    };
    command
        .args(args)
        .current_dir(&program.dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start {exe_path:?}: {e}"))?;
    let pid = child.id();
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let work = async {
        let feed = async {
            if let Some(mut stdin) = stdin.take() {
                // A program that exits without reading everything closes the pipe; its exit
                // status says what happened.
                let _ = stdin.write_all(&input).await;
                let _ = stdin.shutdown().await;
            }
        };
        let read_out = async {
            let mut out = Vec::new();
            if let Some(stdout) = stdout.take() {
                stdout.take(STDOUT_MAX).read_to_end(&mut out).await?;
            }
            Ok::<_, std::io::Error>(out)
        };
        let read_err = async {
            let mut err = Vec::new();
            if let Some(stderr) = stderr.take() {
                stderr.take(1 << 20).read_to_end(&mut err).await?;
            }
            Ok::<_, std::io::Error>(err)
        };
        let ((), out, err) = tokio::join!(feed, read_out, read_err);
        let status = child.wait().await;
        (out, err, status)
    };
    match tokio::time::timeout(program.timeout, work).await {
        Ok((out, err, status)) => {
            let out = out.map_err(|e| format!("cannot read the program's output: {e}"))?;
            let err = err.unwrap_or_default();
            let status = status.map_err(|e| format!("cannot wait for the program: {e}"))?;
            if status.success() {
                Ok((out, err))
            } else {
                let how = match status.code() {
                    Some(code) => format!("exited with status {code}"),
                    None => format!("was killed ({status}; over memory_mb?)"),
                };
                let err = String::from_utf8_lossy(&err);
                let err = err.trim();
                Err(if err.is_empty() {
                    format!("the program {how}")
                } else {
                    format!("the program {how}; stderr: {}", tail(err))
                })
            }
        }
        Err(_) => {
            if let Some(pid) = pid {
                kill_group(pid);
            }
            Err(format!(
                "the program did not finish within timeout_secs = {} and was killed",
                program.timeout.as_secs()
            ))
        }
    }
}

/// Kills the program's process group (the program and anything it started); dropping the
/// child then kills the program itself should `kill` be missing.
fn kill_group(pid: u32) {
    let result = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if let Err(error) = result {
        tracing::warn!(%error, pid, "Could not kill the reward program's process group.");
    }
}

/// Checks the program's answer against its batch: every line a JSON object with a known id
/// and a finite number, every item answered, no (id, name) twice. A step is named by its
/// `step_id`, and also by its `trajectory_id` when the batch holds that step id in several
/// trajectories (imported data can repeat step ids).
fn parse(default_name: &str, batch: &Batch, stdout: &[u8]) -> Result<Vec<Label>, String> {
    let text = std::str::from_utf8(stdout).map_err(|_| "the output is not UTF-8".to_owned())?;
    // step id → the (tenant, trajectory) of every step with that id; trajectory id → tenant.
    let mut steps: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::new();
    let mut trajectories: BTreeMap<&str, &str> = BTreeMap::new();
    for step in batch.items.iter().flatten() {
        let owners = steps.entry(&step.step_id).or_default();
        if !owners.contains(&(&step.tenant_id, &step.trajectory_id)) {
            owners.push((&step.tenant_id, &step.trajectory_id));
        }
        trajectories.insert(&step.trajectory_id, &step.tenant_id);
    }
    // (trajectory, step) of the items answered (step: `None` for trajectory items).
    let mut answered: BTreeSet<(String, Option<String>)> = BTreeSet::new();
    let mut seen: BTreeSet<(String, Option<String>, String)> = BTreeSet::new();
    let mut labels = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let at = index + 1;
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| format!("output line {at} is not JSON ({e})"))?;
        let object = value
            .as_object()
            .ok_or_else(|| format!("output line {at} is not a JSON object"))?;
        for key in object.keys() {
            if !matches!(key.as_str(), "step_id" | "trajectory_id" | "name" | "value") {
                return Err(format!("output line {at} has an unknown key {key:?}"));
            }
        }
        let text_field = |key: &str| -> Result<Option<&str>, String> {
            match object.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::String(s)) => Ok(Some(s.as_str())),
                Some(_) => Err(format!("output line {at}: `{key}` is not a string")),
            }
        };
        let step_id = text_field("step_id")?;
        let trajectory_id = text_field("trajectory_id")?;
        let name = text_field("name")?.unwrap_or(default_name);
        if !valid_name(name) {
            return Err(format!("output line {at}: invalid reward name {name:?}"));
        }
        let reward = object
            .get("value")
            .and_then(serde_json::Value::as_f64)
            .filter(|v| v.is_finite())
            .ok_or_else(|| {
                format!("output line {at}: `value` is missing or not a finite number")
            })?;
        let (tenant, trajectory, step) = match batch.target {
            Target::Step => {
                let id = step_id.ok_or_else(|| format!("output line {at} has no `step_id`"))?;
                let owners: Vec<&(&str, &str)> = steps
                    .get(id)
                    .map(|o| {
                        o.iter()
                            .filter(|(_, t)| trajectory_id.is_none_or(|given| given == *t))
                            .collect()
                    })
                    .unwrap_or_default();
                let (tenant, trajectory) = match owners.as_slice() {
                    [one] => **one,
                    [] if steps.contains_key(id) => {
                        return Err(format!(
                            "output line {at}: step {id:?} is not in that trajectory"
                        ));
                    }
                    [] => {
                        return Err(format!(
                            "output line {at} names step {id:?}, which is not in the batch"
                        ));
                    }
                    _ => {
                        return Err(format!(
                            "output line {at} names step {id:?}, which is in several trajectories of the batch: give its `trajectory_id` too"
                        ));
                    }
                };
                answered.insert((trajectory.to_owned(), Some(id.to_owned())));
                (tenant, trajectory, Some(id))
            }
            Target::Trajectory => {
                let id = trajectory_id
                    .ok_or_else(|| format!("output line {at} has no `trajectory_id`"))?;
                let tenant = trajectories.get(id).ok_or_else(|| {
                    format!("output line {at} names trajectory {id:?}, which is not in the batch")
                })?;
                if let Some(step) = step_id
                    && steps
                        .get(step)
                        .is_none_or(|owners| !owners.iter().any(|(_, t)| *t == id))
                {
                    return Err(format!(
                        "output line {at}: step {step:?} is not in trajectory {id:?}"
                    ));
                }
                answered.insert((id.to_owned(), None));
                (*tenant, id, step_id)
            }
        };
        if !seen.insert((
            trajectory.to_owned(),
            step.map(str::to_owned),
            name.to_owned(),
        )) {
            return Err(format!(
                "output line {at} repeats reward {name:?} for the same item"
            ));
        }
        labels.push(Label {
            tenant_id: tenant.to_owned(),
            trajectory_id: trajectory.to_owned(),
            step_id: step.map(str::to_owned),
            name: name.to_owned(),
            value: reward,
        });
    }
    for item in &batch.items {
        let Some(first) = item.first() else { continue };
        let (key, id) = match batch.target {
            Target::Step => (
                (first.trajectory_id.clone(), Some(first.step_id.clone())),
                &first.step_id,
            ),
            Target::Trajectory => ((first.trajectory_id.clone(), None), &first.trajectory_id),
        };
        if !answered.contains(&key) {
            return Err(format!("the program gave no value for {id}"));
        }
    }
    Ok(labels)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn batch() -> Batch {
        let step = |s: &str, t: &str| Step {
            step_id: s.into(),
            trajectory_id: t.into(),
            tenant_id: "acme".into(),
            ..Step::default()
        };
        Batch {
            target: Target::Step,
            items: vec![vec![step("s1", "t1")], vec![step("s2", "t1")]],
        }
    }

    #[test]
    fn answers_are_checked() {
        let b = batch();
        let ok = parse(
            "r",
            &b,
            b"{\"step_id\":\"s1\",\"value\":1}\n{\"step_id\":\"s2\",\"value\":0.5,\"name\":\"x\"}\n",
        )
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!((ok[1].name.as_str(), ok[1].value), ("x", 0.5));
        for (bad, why) in [
            (
                &b"{\"step_id\":\"s1\",\"value\":1}\n"[..],
                "no value for s2",
            ),
            (b"{\"step_id\":\"s9\",\"value\":1}\n", "not in the batch"),
            (b"{\"step_id\":\"s1\",\"value\":\"1\"}\n", "finite number"),
            (b"{\"value\":1}\n", "no `step_id`"),
            (b"hello\n", "not JSON"),
            (
                b"{\"step_id\":\"s1\",\"value\":1}\n{\"step_id\":\"s1\",\"value\":1}\n",
                "repeats",
            ),
        ] {
            let e = parse("r", &b, bad).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn a_repeated_step_id_is_named_with_its_trajectory() {
        let step = |s: &str, t: &str| Step {
            step_id: s.into(),
            trajectory_id: t.into(),
            tenant_id: "acme".into(),
            ..Step::default()
        };
        let b = Batch::new(
            Target::Step,
            vec![vec![step("s1", "t1")], vec![step("s1", "t2")]],
        )
        .unwrap();
        let e = parse("r", &b, b"{\"step_id\":\"s1\",\"value\":1}\n").unwrap_err();
        assert!(e.contains("several trajectories"), "{e}");
        let ok = parse(
            "r",
            &b,
            b"{\"step_id\":\"s1\",\"trajectory_id\":\"t2\",\"value\":2}\n{\"step_id\":\"s1\",\"trajectory_id\":\"t1\",\"value\":1}\n",
        )
        .unwrap();
        let got: Vec<(&str, f64)> = ok
            .iter()
            .map(|l| (l.trajectory_id.as_str(), l.value))
            .collect();
        assert_eq!(got, [("t2", 2.0), ("t1", 1.0)]);
        // One of the two answered: the other is named as missing.
        let e = parse(
            "r",
            &b,
            b"{\"step_id\":\"s1\",\"trajectory_id\":\"t1\",\"value\":1}\n",
        )
        .unwrap_err();
        assert!(e.contains("no value for s1"), "{e}");
        let e = parse(
            "r",
            &b,
            b"{\"step_id\":\"s1\",\"trajectory_id\":\"t9\",\"value\":1}\n",
        )
        .unwrap_err();
        assert!(e.contains("not in that trajectory"), "{e}");
    }

    #[test]
    fn a_batch_holds_one_tenant() {
        let step = |tenant: &str| Step {
            step_id: "s1".into(),
            trajectory_id: "t1".into(),
            tenant_id: tenant.into(),
            ..Step::default()
        };
        let e =
            Batch::new(Target::Step, vec![vec![step("acme")], vec![step("globex")]]).unwrap_err();
        assert!(e.to_string().contains("acme, globex"), "{e}");
    }
}
