//! Command environments: a program of the user's, in any language, that plays episodes of its
//! own environment against an OpenAI chat API and prints how each went, so that `atdp-eval`,
//! the gate and automatic rollback use it as they use the built-in environments.
//!
//! The protocol (docs/loop.md, "A command environment"):
//! - the program runs as `<program> <args…> --base-url URL --model MODEL --seeds FIRST:COUNT
//!   --temperature T`, with `ATDP_API_KEY` in its environment when the agent has a key; the
//!   seeds `[FIRST, FIRST + COUNT)` are split into contiguous slices, one process per slice,
//!   up to `concurrency` processes at once;
//! - it prints one JSON object per episode on stdout ([`Line`]) and exits 0.
//!
//! Invariants:
//! - an episode is scored only from a well-formed line of a process that exited 0 within the
//!   timeout. A seed without a line is a failed episode; a malformed line, a seed outside the
//!   slice or printed twice, a non-zero exit or a timeout fail every episode of that process.
//!   Nothing is ever scored by default.
//! - failure reasons never quote the program's output (it may hold prompt text): a malformed
//!   line is named by its number and the JSON error's kind and column; of stderr only the last
//!   [`STDERR_TAIL`] bytes are kept, in the reason of a process that failed.
//! - the first messages an episode reports (`prompt`) are kept in memory for the gate's KL
//!   check and never serialized.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::client::{Agent, ChatMessage};
use crate::env::{Env, Episode};
use crate::{Error, Result};

/// Bytes of a failed process's stderr kept in its reason.
pub const STDERR_TAIL: usize = 1024;
/// The most a process may print on stdout.
const STDOUT_LIMIT: u64 = 64 << 20;

/// An environment played by a program of the user's.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandEnv {
    /// Its name in reports and in the `env` tag of the rewards posted for it.
    pub name: String,
    /// The program and its arguments (the protocol's arguments are appended).
    pub argv: Vec<String>,
    /// The reward name its episodes are posted and rolled back on.
    pub reward: String,
    /// The longest one process may run.
    pub timeout: Duration,
}

impl CommandEnv {
    /// The environment run as `command` (a program and its arguments, quoted as a POSIX shell
    /// would read them; no shell runs it), its episodes' reward named `reward`.
    pub fn new(command: &str, reward: &str) -> Result<Self> {
        let argv = shlex::split(command)
            .filter(|argv| !argv.is_empty())
            .ok_or_else(|| {
                Error::Loop(
                    "the environment command is empty or its quotes are unbalanced".to_owned(),
                )
            })?;
        if reward.trim().is_empty() {
            return Err(Error::Loop(
                "name the reward of the environment command (--env-reward)".to_owned(),
            ));
        }
        Ok(CommandEnv {
            name: "command".to_owned(),
            argv,
            reward: reward.to_owned(),
            timeout: Duration::from_secs(1800),
        })
    }

    /// The same, named `name` in reports (not a built-in environment's name).
    pub fn named(mut self, name: &str) -> Result<Self> {
        if name.trim().is_empty() || Env::from_name(name).is_some() {
            return Err(Error::Loop(format!(
                "{name:?} cannot name an environment command: empty, or a built-in environment's name"
            )));
        }
        self.name = name.to_owned();
        Ok(self)
    }

    /// Plays `count` episodes from seed `first` against `agent`, in up to `processes`
    /// processes; the episodes in seed order, one per seed.
    pub async fn play(
        &self,
        agent: &Agent,
        first: u64,
        count: u64,
        temperature: f64,
        processes: usize,
    ) -> Vec<Episode> {
        let slices = slices(first, count, processes);
        let runs = slices
            .iter()
            .map(|&(first, count)| self.run_slice(agent, first, count, temperature));
        futures::future::join_all(runs)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    async fn run_slice(
        &self,
        agent: &Agent,
        first: u64,
        count: u64,
        temperature: f64,
    ) -> Vec<Episode> {
        let output = self.run_process(agent, first, count, temperature).await;
        let parsed = output.and_then(|stdout| parse_output(&stdout, first, count));
        (first..first + count)
            .map(|seed| match &parsed {
                Ok(lines) => lines.get(&seed).cloned().unwrap_or_else(|| {
                    failed(
                        seed,
                        format!("seed {seed}: the environment command printed no line for it"),
                    )
                }),
                Err(reason) => failed(seed, format!("seed {seed}: {reason}")),
            })
            .collect()
    }

    /// Runs one process for the slice; its stdout when it exited 0 in time.
    async fn run_process(
        &self,
        agent: &Agent,
        first: u64,
        count: u64,
        temperature: f64,
    ) -> Result<Vec<u8>, String> {
        let (program, args) = self
            .argv
            .split_first()
            .ok_or_else(|| "the environment command is empty".to_owned())?;
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .arg("--base-url")
            .arg(&agent.base_url)
            .arg("--model")
            .arg(&agent.model)
            .arg("--seeds")
            .arg(format!("{first}:{count}"))
            .arg("--temperature")
            .arg(temperature.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        match &agent.key {
            Some(key) => command.env("ATDP_API_KEY", key),
            None => command.env_remove("ATDP_API_KEY"),
        };
        let mut child = command
            .spawn()
            .map_err(|e| format!("the environment command {program:?} did not start: {e}"))?;
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let work = async {
            let (out, err) = tokio::join!(read_capped(stdout), read_tail(stderr));
            (out, err, child.wait().await)
        };
        let Ok((out, err, status)) = tokio::time::timeout(self.timeout, work).await else {
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Err(format!(
                "the environment command ran past its timeout of {} s",
                self.timeout.as_secs()
            ));
        };
        let with_tail = |what: String| {
            if err.is_empty() {
                what
            } else {
                format!("{what}; the end of its stderr: {err}")
            }
        };
        let status =
            status.map_err(|e| format!("the environment command could not be waited for: {e}"))?;
        if !status.success() {
            return Err(with_tail(format!(
                "the environment command exited {status}"
            )));
        }
        out.map_err(with_tail)
    }
}

/// `count` seeds from `first` in up to `processes` contiguous slices, as even as they go.
fn slices(first: u64, count: u64, processes: usize) -> Vec<(u64, u64)> {
    let n = (processes.max(1) as u64).min(count);
    let mut out = Vec::new();
    let mut next = first;
    for i in 0..n {
        let size = count / n + u64::from(i < count % n);
        out.push((next, size));
        next += size;
    }
    out
}

async fn read_capped(stream: Option<impl AsyncRead + Unpin>) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    if let Some(stream) = stream {
        stream
            .take(STDOUT_LIMIT + 1)
            .read_to_end(&mut out)
            .await
            .map_err(|e| format!("the environment command's stdout could not be read: {e}"))?;
    }
    if out.len() as u64 > STDOUT_LIMIT {
        return Err(format!(
            "the environment command printed more than {STDOUT_LIMIT} bytes"
        ));
    }
    Ok(out)
}

/// The last [`STDERR_TAIL`] bytes of `stream`, as text, trimmed.
async fn read_tail(stream: Option<impl AsyncRead + Unpin>) -> String {
    let Some(mut stream) = stream else {
        return String::new();
    };
    let mut tail: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 8192];
    while let Ok(n) = stream.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        tail.extend_from_slice(&chunk[..n]);
        if tail.len() > STDERR_TAIL {
            tail.drain(..tail.len() - STDERR_TAIL);
        }
    }
    String::from_utf8_lossy(&tail).trim().to_owned()
}

fn failed(seed: u64, reason: String) -> Episode {
    Episode {
        seed,
        success: false,
        reward: 0.0,
        turns: 0,
        completion_tokens: 0,
        invalid_replies: 0,
        versions: Vec::new(),
        trajectory_id: None,
        error: Some(reason),
        prompt: None,
    }
}

/// One line of a command environment's output: how one episode went.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    /// The episode's seed.
    seed: u64,
    /// Its reward (a finite number).
    reward: Option<f64>,
    /// Whether it was solved (default: `reward > 0`).
    success: Option<bool>,
    /// Model calls made.
    turns: Option<usize>,
    /// Completion tokens over all calls.
    completion_tokens: Option<u64>,
    /// Replies that were not a valid action.
    invalid_replies: Option<usize>,
    /// The first call's messages (for the gate's KL check).
    prompt: Option<Vec<Value>>,
    /// The versions that answered, in call order.
    versions: Option<Vec<String>>,
    /// The trajectory (through the proxy; needed to post the reward).
    trajectory_id: Option<String>,
    /// Why the episode could not be played; then nothing else counts.
    error: Option<String>,
}

/// The episodes of a process's stdout for the slice `[first, first + count)`; an error fails
/// the whole slice.
fn parse_output(stdout: &[u8], first: u64, count: u64) -> Result<BTreeMap<u64, Episode>, String> {
    let mut episodes = BTreeMap::new();
    for (index, raw) in stdout.split(|b| *b == b'\n').enumerate() {
        let number = index + 1;
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line: Line = serde_json::from_slice(raw).map_err(|e| {
            format!(
                "line {number} of the environment command's output is not an episode ({:?} error at column {})",
                e.classify(),
                e.column()
            )
        })?;
        let seed = line.seed;
        if !(first..first + count).contains(&seed) {
            return Err(format!(
                "line {number} of the environment command's output names seed {seed}, outside {first}:{count}"
            ));
        }
        let episode = episode_of(line).map_err(|what| {
            format!("line {number} (seed {seed}) of the environment command's output: {what}")
        })?;
        if episodes.insert(seed, episode).is_some() {
            return Err(format!(
                "line {number} of the environment command's output repeats seed {seed}"
            ));
        }
    }
    Ok(episodes)
}

fn episode_of(line: Line) -> Result<Episode, String> {
    if let Some(error) = line.error {
        let error: String = error.chars().take(300).collect();
        return Ok(failed(
            line.seed,
            format!("seed {}: the environment reported: {error}", line.seed),
        ));
    }
    let missing = |field: &str| format!("no {field:?}");
    let reward = line.reward.ok_or_else(|| missing("reward"))?;
    if !reward.is_finite() {
        return Err("its reward is not a finite number".to_owned());
    }
    let prompt = line
        .prompt
        .map(|messages| messages.iter().map(message_of).collect::<Option<Vec<_>>>())
        .map(|p| p.ok_or_else(|| "its prompt is not a list of chat messages".to_owned()))
        .transpose()?
        .filter(|p| !p.is_empty());
    Ok(Episode {
        seed: line.seed,
        success: line.success.unwrap_or(reward > 0.0),
        reward,
        turns: line.turns.ok_or_else(|| missing("turns"))?,
        completion_tokens: line
            .completion_tokens
            .ok_or_else(|| missing("completion_tokens"))?,
        invalid_replies: line
            .invalid_replies
            .ok_or_else(|| missing("invalid_replies"))?,
        versions: line.versions.unwrap_or_default(),
        trajectory_id: line.trajectory_id,
        error: None,
        prompt,
    })
}

/// A chat message of the OpenAI API as the KL check renders it: its role and its text (a
/// string, text parts joined, or none). `None` when it is not such a message.
fn message_of(value: &Value) -> Option<ChatMessage> {
    let role = value.get("role")?.as_str()?;
    let content = match value.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        Some(_) => return None,
    };
    Some(ChatMessage::new(role, content))
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::Path;

    use super::*;

    #[test]
    fn seeds_are_split_into_contiguous_even_slices() {
        assert_eq!(slices(10, 7, 3), [(10, 3), (13, 2), (15, 2)]);
        assert_eq!(slices(0, 2, 8), [(0, 1), (1, 1)]);
        assert_eq!(slices(5, 4, 0), [(5, 4)]);
        assert!(slices(5, 0, 4).is_empty());
    }

    #[test]
    fn commands_are_split_as_a_shell_would_and_named_apart_from_built_ins() {
        let env = CommandEnv::new("python 'my env.py' --level 3", "solved").unwrap();
        assert_eq!(env.argv, ["python", "my env.py", "--level", "3"]);
        assert_eq!(env.name, "command");
        assert!(CommandEnv::new("python 'open", "solved").is_err());
        assert!(CommandEnv::new("  ", "solved").is_err());
        assert!(CommandEnv::new("python env.py", "").is_err());
        assert!(env.clone().named("routing").is_err());
        assert_eq!(env.named("tickets").unwrap().name, "tickets");
    }

    /// An environment command: the test venv's Python running `script` (which gets the
    /// protocol's arguments in `sys.argv`).
    pub(crate) fn python_env(dir: &Path, script: &str) -> CommandEnv {
        let path = dir.join("env.py");
        std::fs::write(&path, script).unwrap();
        let command = format!(
            "{} {}",
            shlex::try_quote(&atdp_testkit::python()).unwrap(),
            shlex::try_quote(&path.display().to_string()).unwrap()
        );
        CommandEnv::new(&command, "solved").unwrap()
    }

    /// Parses the protocol's arguments; prints one line per seed with `line(seed)`.
    const PROLOGUE: &str = r#"
import json, os, sys
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
first, count = (int(x) for x in args["--seeds"].split(":"))
assert args["--base-url"] == "http://127.0.0.1:9/v1", args
assert args["--model"] == "policy@v3", args
assert os.environ["ATDP_API_KEY"] == "sk-test", "key"
def line(seed, **extra):
    out = {"seed": seed, "reward": float(seed % 2), "turns": 2, "completion_tokens": 3,
           "invalid_replies": seed % 3 == 0 and 1 or 0,
           "prompt": [{"role": "system", "content": "sys"},
                      {"role": "user", "content": [{"type": "text", "text": "seed %d" % seed}]}],
           "versions": [args["--model"]]}
    out.update(extra)
    print(json.dumps(out), flush=True)
"#;

    fn agent() -> Agent {
        Agent::new(
            "http://127.0.0.1:9/v1",
            Some("sk-test".to_owned()),
            "policy@v3",
        )
    }

    async fn play(script: &str, count: u64, processes: usize) -> Vec<Episode> {
        let dir = tempfile::tempdir().unwrap();
        let env = python_env(dir.path(), &format!("{PROLOGUE}\n{script}"));
        env.play(&agent(), 100, count, 0.5, processes).await
    }

    fn failures(episodes: &[Episode]) -> Vec<(u64, String)> {
        episodes
            .iter()
            .filter_map(|e| e.error.clone().map(|r| (e.seed, r)))
            .collect()
    }

    #[tokio::test]
    async fn every_seed_is_played_once_by_the_processes_and_scored_from_its_line() {
        let script = r#"
assert args["--temperature"] == "0.5", args
for seed in range(first, first + count):
    line(seed)
print("slice %d:%d" % (first, count), file=sys.stderr)
"#;
        let episodes = play(script, 7, 3).await;
        assert_eq!(failures(&episodes), []);
        assert_eq!(
            episodes.iter().map(|e| e.seed).collect::<Vec<_>>(),
            (100..107).collect::<Vec<_>>()
        );
        let e101 = &episodes[1];
        assert_eq!(
            (
                e101.reward,
                e101.success,
                e101.turns,
                e101.completion_tokens
            ),
            (1.0, true, 2, 3)
        );
        assert_eq!(episodes[2].invalid_replies, 1);
        assert!(!episodes[0].success);
        assert_eq!(e101.versions, ["policy@v3"]);
        assert_eq!(
            e101.prompt.as_deref().unwrap(),
            [
                ChatMessage::new("system", "sys"),
                ChatMessage::new("user", "seed 101")
            ]
        );
        // The prompt stays in memory: reports never hold it.
        let json = serde_json::to_string(e101).unwrap();
        assert!(
            !json.contains("seed 101") && !json.contains("prompt"),
            "{json}"
        );
    }

    #[tokio::test]
    async fn a_seed_without_a_line_fails_alone_and_a_reported_error_fails_its_episode() {
        let script = r#"
for seed in range(first, first + count):
    if seed == 102:
        continue
    if seed == 103:
        print(json.dumps({"seed": seed, "error": "the tool server refused"}))
        continue
    line(seed)
"#;
        let episodes = play(script, 4, 1).await;
        let errors = failures(&episodes);
        assert_eq!(
            errors.iter().map(|e| e.0).collect::<Vec<_>>(),
            [102, 103],
            "{errors:?}"
        );
        assert!(errors[0].1.contains("printed no line"), "{errors:?}");
        assert!(
            errors[1].1.contains("the tool server refused"),
            "{errors:?}"
        );
        assert_eq!(episodes[1].reward, 1.0);
    }

    #[tokio::test]
    async fn a_malformed_line_fails_its_process_without_quoting_it() {
        // Two processes: 100–101 prints a line that is not JSON, 102–103 is well.
        let script = r#"
for seed in range(first, first + count):
    line(seed)
if first == 100:
    print("{\"seed\": 100, \"reward\": \"secret prompt text\"")
"#;
        let episodes = play(script, 4, 2).await;
        let errors = failures(&episodes);
        assert_eq!(
            errors.iter().map(|e| e.0).collect::<Vec<_>>(),
            [100, 101],
            "{errors:?}"
        );
        assert!(
            errors[0].1.contains("line 3") && errors[0].1.contains("not an episode"),
            "{errors:?}"
        );
        assert!(!errors[0].1.contains("secret"), "{errors:?}");
        // A line of the right shape with a wrong field, a seed of another slice, a repeat and
        // a missing field are refused as well.
        for (bad, why) in [
            (r#"line(first, reward="1")"#, "not an episode"),
            (r#"line(first, rewards=1)"#, "not an episode"),
            ("line(first + count)", "outside"),
            ("line(first)", "repeats"),
            (r#"line(first, turns=None)"#, "no \"turns\""),
            (r#"line(first, reward=float("nan"))"#, "not an episode"),
            (r#"line(first, prompt=[{"content": "x"}])"#, "prompt"),
        ] {
            let script =
                format!("for seed in range(first, first + count):\n    line(seed)\n{bad}\n");
            let episodes = play(&script, 2, 1).await;
            let errors = failures(&episodes);
            assert_eq!(errors.len(), 2, "{bad}: {errors:?}");
            assert!(errors[0].1.contains(why), "{bad}: {errors:?}");
        }
    }

    #[tokio::test]
    async fn a_failed_or_late_process_fails_every_episode_with_the_end_of_its_stderr() {
        let script = r#"
for seed in range(first, first + count):
    line(seed)
print("x" * 5000 + " the last words", file=sys.stderr)
sys.exit(3)
"#;
        let episodes = play(script, 3, 1).await;
        let errors = failures(&episodes);
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].1.contains("exited"), "{errors:?}");
        assert!(errors[0].1.ends_with("the last words"), "{errors:?}");
        assert!(
            errors[0].1.len() < STDERR_TAIL + 200,
            "{}",
            errors[0].1.len()
        );

        let dir = tempfile::tempdir().unwrap();
        let mut env = python_env(
            dir.path(),
            &format!("{PROLOGUE}\nline(first)\nimport time\ntime.sleep(30)\n"),
        );
        env.timeout = Duration::from_millis(1500);
        let started = std::time::Instant::now();
        let episodes = env.play(&agent(), 100, 2, 1.0, 1).await;
        assert!(started.elapsed() < Duration::from_secs(20));
        let errors = failures(&episodes);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].1.contains("timeout"), "{errors:?}");

        let env = CommandEnv::new("/nonexistent/atdp-env", "solved").unwrap();
        let episodes = env.play(&agent(), 0, 1, 1.0, 1).await;
        assert!(errors_contain(&episodes, "did not start"));
    }

    #[tokio::test]
    async fn the_python_helper_prints_only_episode_lines_and_errors_without_their_messages() {
        let script = format!(
            r#"
import sys
sys.path.insert(0, {src:?})
import atdp

class Env:
    def reset(self, *, seed=None, options=None):
        print("noise from reset")
        self.seed = seed
        return "observation", {{}}

    def step(self, action):
        if self.seed == 101:
            raise ValueError("secret prompt text")
        info = {{"invalid_reply": self.seed == 102}}
        return "", float(self.seed % 2), True, False, info

def act(client, observation, info):
    print("noise from act")
    return "a"

atdp.serve_env_command(Env, act)
"#,
            src = atdp_testkit::repo_root()
                .join("python/src")
                .display()
                .to_string()
        );
        let dir = tempfile::tempdir().unwrap();
        let env = python_env(dir.path(), &script);
        let episodes = env.play(&agent(), 100, 4, 1.0, 1).await;
        let errors = failures(&episodes);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].0, 101);
        assert!(errors[0].1.ends_with("reported: ValueError"), "{errors:?}");
        let scored: Vec<(u64, f64, bool, usize)> = episodes
            .iter()
            .filter(|e| e.error.is_none())
            .map(|e| (e.seed, e.reward, e.success, e.invalid_replies))
            .collect();
        assert_eq!(
            scored,
            [
                (100, 0.0, false, 0),
                (102, 0.0, false, 1),
                (103, 1.0, true, 0)
            ]
        );
        // No model call was made: no turns, no prompt; each episode its own trajectory.
        assert!(episodes.iter().all(|e| e.turns == 0 && e.prompt.is_none()));
        assert!(episodes[0].trajectory_id.is_some());
        assert_ne!(episodes[0].trajectory_id, episodes[2].trajectory_id);
    }

    fn errors_contain(episodes: &[Episode], what: &str) -> bool {
        episodes
            .iter()
            .all(|e| e.error.as_deref().is_some_and(|r| r.contains(what)))
    }
}
