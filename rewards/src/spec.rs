//! Reward function specs: the TOML file a reward designer writes, checked into a
//! [`RewardFn`] with its version (a checksum of everything that can change a label).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The spec file as written (`--fn path/to/fn.toml`). Unknown keys are refused.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSpec {
    /// The reward name written in the `rewards` table (`task_success`, `tool_used`, …).
    pub name: String,
    /// `sql` or `program`.
    pub kind: Kind,
    /// What is rewarded: each `step` (the default) or each `trajectory`.
    #[serde(default)]
    pub target: Target,
    /// Whether the rewards written end the episode (default: false for steps, true for
    /// trajectories).
    pub terminal: Option<bool>,
    /// SQL: a DataFusion expression over one `steps` row giving a number.
    pub expression: Option<String>,
    /// SQL: a full SELECT over the registered tables returning `trajectory_id`, `step_id`
    /// (for step targets) and `value`.
    pub query: Option<String>,
    /// Program: the command line (argv); relative paths are resolved against the spec's
    /// folder, where the program runs.
    pub command: Option<Vec<String>>,
    /// Program: seconds one batch may take before the program is killed (default 60).
    pub timeout_secs: Option<u64>,
    /// Program: address-space limit per batch in MiB (default 1024), through `prlimit`.
    pub memory_mb: Option<u64>,
    /// Program: steps or trajectories per batch (default 256).
    pub batch: Option<usize>,
}

/// The kind of reward function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A DataFusion SQL expression or query.
    Sql,
    /// An external program speaking JSON Lines.
    Program,
}

/// What one reward is attached to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// One reward per step (`step_id` set).
    #[default]
    Step,
    /// One reward per trajectory (`step_id` null).
    Trajectory,
}

/// How a function computes its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// A SQL expression over one `steps` row.
    Expression(String),
    /// A SQL query returning `trajectory_id`, `step_id`, `value`.
    Query(String),
    /// An external program.
    Program(Program),
}

/// The settings of a reward program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// argv; `command[0]` is looked up on `PATH` unless it is a path.
    pub command: Vec<String>,
    /// Folder the program runs in (the spec's folder).
    pub dir: PathBuf,
    /// Limit per batch.
    pub timeout: Duration,
    /// Address-space limit per batch, in bytes.
    pub memory_bytes: u64,
    /// Items per batch.
    pub batch: usize,
}

/// A checked reward function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewardFn {
    /// Reward name.
    pub name: String,
    /// Step or trajectory rewards.
    pub target: Target,
    /// The `terminal` flag written.
    pub terminal: bool,
    /// How values are computed.
    pub body: Body,
    /// `sha256:` and the first 16 hex digits of SHA-256 over the canonical spec.
    pub version: String,
    /// `sql:<name>` or `program:<name>`.
    pub source: String,
}

/// What the version is computed over, serialised as JSON with fixed key order.
#[derive(Serialize)]
struct Canonical<'a> {
    format: u32,
    kind: Kind,
    name: &'a str,
    target: Target,
    terminal: bool,
    expression: Option<&'a str>,
    query: Option<&'a str>,
    command: Option<&'a [String]>,
    /// SHA-256 (hex) of each command argument that names an existing file, in order.
    files: Vec<(String, String)>,
    timeout_secs: Option<u64>,
    memory_mb: Option<u64>,
    batch: Option<usize>,
}

const NAME_MAX: usize = 128;

impl RewardFn {
    /// Reads and checks a spec file.
    pub fn load(path: &Path) -> Result<RewardFn> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_owned(),
            source,
        })?;
        let raw: RawSpec = toml::from_str(&text).map_err(|e| Error::Spec {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        raw.validate(path, dir)
    }

    /// Whether this is a program function.
    pub fn program(&self) -> Option<&Program> {
        match &self.body {
            Body::Program(program) => Some(program),
            _ => None,
        }
    }
}

impl RawSpec {
    /// Checks the spec; `dir` is the folder relative paths of a program resolve against.
    pub fn validate(self, path: &Path, dir: &Path) -> Result<RewardFn> {
        let bad = |message: String| Error::Spec {
            path: path.to_owned(),
            message,
        };
        if self.name.is_empty()
            || self.name.len() > NAME_MAX
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(bad(format!(
                "`name` must be 1 to {NAME_MAX} characters of letters, digits, `_`, `-` or `.`; got {:?}",
                self.name
            )));
        }
        let sql_keys = self.expression.is_some() || self.query.is_some();
        let program_keys = self.command.is_some()
            || self.timeout_secs.is_some()
            || self.memory_mb.is_some()
            || self.batch.is_some();
        let mut files = Vec::new();
        let body = match self.kind {
            Kind::Sql => {
                if program_keys {
                    return Err(bad(
                        "`command`, `timeout_secs`, `memory_mb` and `batch` apply to kind = \"program\" only".into(),
                    ));
                }
                match (&self.expression, &self.query) {
                    (Some(e), None) if !e.trim().is_empty() => {
                        if self.target == Target::Trajectory {
                            return Err(bad(
                                "an `expression` is evaluated on one step: use target = \"step\", or a `query` for trajectory rewards".into(),
                            ));
                        }
                        Body::Expression(e.clone())
                    }
                    (None, Some(q)) if !q.trim().is_empty() => Body::Query(q.clone()),
                    (Some(_), Some(_)) => {
                        return Err(bad("give either `expression` or `query`, not both".into()));
                    }
                    _ => {
                        return Err(bad(
                            "kind = \"sql\" needs a non-empty `expression` or `query`".into(),
                        ));
                    }
                }
            }
            Kind::Program => {
                if sql_keys {
                    return Err(bad(
                        "`expression` and `query` apply to kind = \"sql\" only".into()
                    ));
                }
                let command = self.command.clone().unwrap_or_default();
                if command.first().is_none_or(|c| c.trim().is_empty()) {
                    return Err(bad(
                        "kind = \"program\" needs `command`, a non-empty argv list".into(),
                    ));
                }
                for arg in &command {
                    let file = dir.join(arg);
                    if !arg.is_empty() && file.is_file() {
                        let bytes = std::fs::read(&file).map_err(|source| Error::Io {
                            path: file.clone(),
                            source,
                        })?;
                        files.push((arg.clone(), hex::encode(Sha256::digest(&bytes))));
                    }
                }
                let timeout_secs = self.timeout_secs.unwrap_or(60);
                if timeout_secs == 0 || timeout_secs > 86_400 {
                    return Err(bad("`timeout_secs` must be 1 to 86400".into()));
                }
                let memory_mb = self.memory_mb.unwrap_or(1024);
                if !(16..=1 << 20).contains(&memory_mb) {
                    return Err(bad("`memory_mb` must be 16 to 1048576".into()));
                }
                let batch = self.batch.unwrap_or(256);
                if !(1..=100_000).contains(&batch) {
                    return Err(bad("`batch` must be 1 to 100000".into()));
                }
                Body::Program(Program {
                    command,
                    dir: dir.to_owned(),
                    timeout: Duration::from_secs(timeout_secs),
                    memory_bytes: memory_mb << 20,
                    batch,
                })
            }
        };
        let terminal = self.terminal.unwrap_or(self.target == Target::Trajectory);
        let canonical = Canonical {
            format: 1,
            kind: self.kind,
            name: &self.name,
            target: self.target,
            terminal,
            expression: self.expression.as_deref(),
            query: self.query.as_deref(),
            command: self.command.as_deref(),
            files,
            timeout_secs: self.timeout_secs,
            memory_mb: self.memory_mb,
            batch: self.batch,
        };
        let json = serde_json::to_vec(&canonical).map_err(|e| bad(e.to_string()))?;
        let digest = hex::encode(Sha256::digest(&json));
        let version = format!("sha256:{}", &digest[..16]);
        let source = match self.kind {
            Kind::Sql => format!("sql:{}", self.name),
            Kind::Program => format!("program:{}", self.name),
        };
        Ok(RewardFn {
            name: self.name,
            target: self.target,
            terminal,
            body,
            version,
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn parse(text: &str) -> Result<RewardFn> {
        let raw: RawSpec = toml::from_str(text).map_err(|e| Error::Invalid(e.to_string()))?;
        raw.validate(Path::new("fn.toml"), Path::new("."))
    }

    #[test]
    fn sql_expression_is_versioned() {
        let a = parse("name = \"ok\"\nkind = \"sql\"\nexpression = \"1.0\"").unwrap();
        assert_eq!(a.source, "sql:ok");
        assert!(a.version.starts_with("sha256:") && a.version.len() == 23);
        let b = parse("name = \"ok\"\nkind = \"sql\"\nexpression = \"2.0\"").unwrap();
        assert_ne!(a.version, b.version);
        let again = parse("kind = \"sql\"\nname = \"ok\"\nexpression = \"1.0\"").unwrap();
        assert_eq!(a.version, again.version, "key order does not matter");
    }

    #[test]
    fn unknown_and_misplaced_keys_are_refused() {
        let e = parse("name = \"ok\"\nkind = \"sql\"\nexpresion = \"1.0\"").unwrap_err();
        assert!(e.to_string().contains("expresion"), "{e}");
        let e = parse("name = \"ok\"\nkind = \"sql\"\nexpression = \"1\"\nbatch = 3").unwrap_err();
        assert!(e.to_string().contains("kind = \"program\" only"), "{e}");
        let e = parse("name = \"a b\"\nkind = \"sql\"\nexpression = \"1\"").unwrap_err();
        assert!(e.to_string().contains("`name`"), "{e}");
        let e = parse("name = \"x\"\nkind = \"program\"\ncommand = []").unwrap_err();
        assert!(e.to_string().contains("argv"), "{e}");
        let e = parse("name = \"x\"\nkind = \"sql\"\ntarget = \"trajectory\"\nexpression = \"1\"")
            .unwrap_err();
        assert!(e.to_string().contains("query"), "{e}");
    }

    #[test]
    fn program_file_bytes_change_the_version() {
        let dir = tempfile::tempdir().unwrap();
        let spec = "name = \"p\"\nkind = \"program\"\ncommand = [\"python3\", \"r.py\"]";
        let raw = || toml::from_str::<RawSpec>(spec).unwrap();
        std::fs::write(dir.path().join("r.py"), "print(1)").unwrap();
        let a = raw().validate(Path::new("fn.toml"), dir.path()).unwrap();
        std::fs::write(dir.path().join("r.py"), "print(2)").unwrap();
        let b = raw().validate(Path::new("fn.toml"), dir.path()).unwrap();
        assert_ne!(a.version, b.version);
        assert_eq!(a.source, "program:p");
        assert!(!a.terminal && a.program().unwrap().batch == 256);
    }
}
