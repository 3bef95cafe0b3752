//! `atdp-policy`: command-line access to the detectors, masking and keys.
//!
//! `atdp-policy scan` reads JSON Lines `{"id": …, "text": …}` on stdin and writes
//! `{"id": …, "spans": [{"start", "end", "entity", "score"}]}` with UTF-8 byte offsets;
//! `atdp-policy mask` writes `{"id", "text", "spans", "vault"}` with the masked text;
//! `atdp-policy check DIR` lists every problem of a policy directory with file, line and
//! column (exit status 1 when there is one); `atdp-policy keygen` adds fresh keys for tenants
//! to a key file, creating it if needed (tenants that have keys keep them); `atdp-policy key
//! add|revoke|list --policy DIR` manages the API keys and auditors of `entities.json` (a new
//! key is printed once; only its SHA-256 is stored). With
//! `--policy DIR`, `scan` and `mask` use that directory's `masking.toml` (custom entities,
//! context words, threshold; `mask` also its storage actions). A malformed input line is reported on stderr
//! with its line number (never its content) and does not stop the rest; the exit status is
//! then 1. Other errors are one line on stderr and exit status 2.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use std::path::PathBuf;

use anyhow::{Context, bail};
use atdp_detect::{Scanner, builtin_entities};
use atdp_policies::{
    Action, KeyFile, KeyRing, MaskPolicy, MaskingConfig, MissingKeys, check_dir, json_error_kind,
    mask, principals,
};
use clap::{Parser, Subcommand};
use serde::Deserialize;

#[derive(Parser, Debug)]
#[command(
    name = "atdp-policy",
    version,
    about = "Detect personal data and secrets"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum KeyCommand {
    /// Add an agent's API key (`--tenant T --agent A`) or an auditor's key (`--auditor ROLE
    /// --tenant T…`); prints the key on stdout, once.
    Add {
        /// The policy directory.
        #[arg(long, env = "ATDP_POLICY_DIR")]
        policy: PathBuf,
        /// The tenant (repeatable for an auditor).
        #[arg(long = "tenant", required = true)]
        tenants: Vec<String>,
        /// The agent the key belongs to (created under the tenant when new).
        #[arg(long, conflicts_with = "auditor")]
        agent: Option<String>,
        /// An auditor's key with this role (compliance_officer, reviewer, …).
        #[arg(long, value_name = "ROLE")]
        auditor: Option<String>,
        /// Add the tenant too when it is not in entities.json (it then needs vault keys).
        #[arg(long)]
        create_tenant: bool,
    },
    /// Revoke a key (kept with active = false) or remove an auditor, by id or its first 8+
    /// characters.
    Revoke {
        /// The policy directory.
        #[arg(long, env = "ATDP_POLICY_DIR")]
        policy: PathBuf,
        /// The id (the SHA-256 of the key), or its first characters as `list` shows them.
        id: String,
    },
    /// List the API keys and auditors: kind, id, agent or role, tenants, state.
    List {
        /// The policy directory.
        #[arg(long, env = "ATDP_POLICY_DIR")]
        policy: PathBuf,
        /// One JSON object per line instead of columns.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Scan JSON Lines {"id", "text"} from stdin; write {"id", "spans"} to stdout.
    Scan {
        /// Only these entity types (comma-separated), e.g. EMAIL_ADDRESS,US_SSN.
        #[arg(long, value_delimiter = ',')]
        entities: Option<Vec<String>>,
        /// Policy directory whose masking.toml adds custom entities and context words.
        #[arg(long, env = "ATDP_POLICY_DIR")]
        policy: Option<PathBuf>,
    },
    /// Mask JSON Lines {"id", "text"} from stdin; write {"id", "text", "spans", "vault"}.
    Mask {
        /// Key file (see `keygen`); or set ATDP_KEY_FILE, or ATDP_KEYS to the file's JSON.
        #[arg(long, env = "ATDP_KEY_FILE")]
        keys: Option<PathBuf>,
        /// Tenant whose keys mask the values.
        #[arg(long)]
        tenant: String,
        /// Action for every entity: redact, mask, hash, tokenize or allow (default:
        /// tokenize, or the storage actions of --policy).
        #[arg(long)]
        action: Option<String>,
        /// Only these entity types (comma-separated).
        #[arg(long, value_delimiter = ',')]
        entities: Option<Vec<String>>,
        /// Policy directory whose masking.toml gives custom entities, context words and
        /// the storage actions.
        #[arg(long, env = "ATDP_POLICY_DIR")]
        policy: Option<PathBuf>,
    },
    /// Check a policy directory; print every problem with file, line and column.
    Check {
        /// The directory (schema.cedarschema, policies.cedar, entities.json, masking.toml).
        dir: PathBuf,
    },
    /// API keys and auditors of a policy directory: add (the key is printed once, only its
    /// SHA-256 is stored), revoke, list.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// Add fresh random keys for the given tenants to a key file, creating it if needed;
    /// tenants that already have keys keep them.
    Keygen {
        /// The key file (mode 0600); changed under its lock file, `<out>.lock`.
        #[arg(long)]
        out: PathBuf,
        /// Tenants (repeatable).
        #[arg(long = "tenant", required = true)]
        tenants: Vec<String>,
    },
    /// List the entity types the detectors report.
    Entities,
}

#[derive(Deserialize)]
struct Input {
    id: serde_json::Value,
    text: String,
}

/// Runs `handle` on each JSON Lines input; returns how many lines were malformed.
fn each_line(
    mut handle: impl FnMut(Input) -> anyhow::Result<serde_json::Value>,
) -> anyhow::Result<usize> {
    let stdin = std::io::stdin().lock();
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let mut bad = 0;
    for (index, line) in stdin.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Input>(&line) {
            Ok(input) => {
                serde_json::to_writer(&mut stdout, &handle(input)?)?;
                stdout.write_all(b"\n")?;
            }
            Err(error) => {
                bad += 1;
                // The error names the position, not the content (it may be personal data).
                eprintln!(
                    "atdp-policy: line {}: not a JSON object with \"id\" and \"text\" ({} at column {})",
                    index + 1,
                    json_error_kind(&error),
                    error.column()
                );
            }
        }
    }
    stdout.flush()?;
    Ok(bad)
}

fn masking(policy: Option<&PathBuf>) -> anyhow::Result<MaskingConfig> {
    Ok(match policy {
        Some(dir) => MaskingConfig::load(dir)?,
        None => MaskingConfig::default(),
    })
}

fn scan(entities: Option<&[String]>, policy: Option<&PathBuf>) -> anyhow::Result<usize> {
    let scanner = Scanner::with_config(&masking(policy)?.detection, entities)?;
    each_line(|input| {
        let spans = scanner.scan(&input.text);
        Ok(serde_json::json!({"id": input.id, "spans": spans}))
    })
}

fn load_keys(path: Option<&PathBuf>) -> anyhow::Result<KeyRing> {
    if let Some(path) = path {
        return Ok(KeyRing::load(path)?);
    }
    match std::env::var("ATDP_KEYS") {
        Ok(json) => Ok(KeyRing::from_json(&json)?),
        Err(_) => bail!("no keys: pass --keys FILE, or set ATDP_KEY_FILE or ATDP_KEYS"),
    }
}

fn parse_action(name: &str) -> anyhow::Result<Action> {
    serde_json::from_value(serde_json::Value::String(name.to_owned())).with_context(|| {
        format!("unknown action {name:?}: use redact, mask, hash, tokenize or allow")
    })
}

fn mask_lines(
    keys: Option<&PathBuf>,
    tenant: &str,
    action: Option<&str>,
    entities: Option<&[String]>,
    policy: Option<&PathBuf>,
) -> anyhow::Result<usize> {
    let keys = load_keys(keys)?;
    let config = masking(policy)?;
    let scanner = Scanner::with_config(&config.detection, entities)?;
    let policy = match action {
        Some(action) => MaskPolicy::all(parse_action(action)?),
        None => config.storage,
    };
    each_line(|input| {
        let masked = mask(
            &input.text,
            &scanner.scan(&input.text),
            &policy,
            tenant,
            &keys,
        )?;
        let vault: Vec<serde_json::Value> = masked
            .vault
            .iter()
            .map(|v| {
                serde_json::json!({
                    "tenant_id": tenant,
                    "token": v.token,
                    "entity": v.entity,
                    "key_id": v.sealed.key_id,
                    "nonce": hex::encode(&v.sealed.nonce),
                    "ciphertext": hex::encode(&v.sealed.ciphertext),
                })
            })
            .collect();
        Ok(
            serde_json::json!({"id": input.id, "text": masked.text, "spans": masked.spans, "vault": vault}),
        )
    })
}

fn check(dir: &std::path::Path) -> anyhow::Result<usize> {
    if !dir.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    let problems = check_dir(dir);
    for problem in &problems {
        println!("{problem}");
    }
    if problems.is_empty() {
        eprintln!("atdp-policy: {} is valid", dir.display());
    } else {
        eprintln!(
            "atdp-policy: {} problem(s) in {}",
            problems.len(),
            dir.display()
        );
    }
    Ok(problems.len())
}

fn describe(p: &principals::Principal) -> String {
    let who = match (&p.agent, &p.role) {
        (Some(agent), _) => format!("agent={agent}"),
        (None, Some(role)) => format!("role={role}"),
        (None, None) => "-".to_owned(),
    };
    let kind = match p.kind {
        principals::Kind::ApiKey => "api_key",
        principals::Kind::Auditor => "auditor",
    };
    let state = if p.active { "active" } else { "revoked" };
    format!(
        "{kind}\t{}\t{who}\ttenants={}\t{state}",
        p.id,
        p.tenants.join(",")
    )
}

fn key(command: KeyCommand) -> anyhow::Result<usize> {
    match command {
        KeyCommand::Add {
            policy,
            tenants,
            agent,
            auditor,
            create_tenant,
        } => {
            let made = match (agent, auditor) {
                (Some(agent), None) => {
                    let [tenant] = &tenants[..] else {
                        bail!("an API key belongs to one --tenant");
                    };
                    principals::add_api_key(&policy, tenant, &agent, create_tenant)?
                }
                (None, Some(role)) => principals::add_auditor(&policy, &role, &tenants)?,
                _ => bail!("give --agent for an API key or --auditor ROLE for an auditor"),
            };
            eprintln!(
                "atdp-policy: added {}; the key is printed below once and stored nowhere, only its SHA-256 (the id) is in entities.json. A running proxy takes it at its next reload (SIGHUP or POST /reload).",
                describe(&made.principal)
            );
            println!("{}", made.key);
            if create_tenant {
                eprintln!(
                    "atdp-policy: a new tenant needs vault keys before a proxy takes the directory: atdp-policy keygen --out <key file> --tenant {}",
                    tenants.join(" --tenant ")
                );
            }
            Ok(0)
        }
        KeyCommand::Revoke { policy, id } => {
            let revoked = principals::revoke(&policy, &id)?;
            eprintln!(
                "atdp-policy: revoked {}; a running proxy refuses it from its next successful reload (whose policy_reload audit event lists the id), a running console within seconds",
                describe(&revoked)
            );
            Ok(0)
        }
        KeyCommand::List { policy, json } => {
            let mut stdout = std::io::stdout().lock();
            for principal in principals::list(&policy)? {
                if json {
                    writeln!(stdout, "{}", serde_json::to_string(&principal)?)?;
                } else {
                    writeln!(stdout, "{}", describe(&principal))?;
                }
            }
            Ok(0)
        }
    }
}

fn keygen(out: &PathBuf, tenants: &[String]) -> anyhow::Result<usize> {
    let ensured = KeyFile::new(out).ensure_tenants(tenants, MissingKeys::Generate)?;
    let mut asked = tenants.to_vec();
    asked.sort();
    asked.dedup();
    eprintln!(
        "atdp-policy: wrote keys for {} new tenant(s) to {}; {} already had keys and kept them",
        ensured.generated.len(),
        out.display(),
        asked.len().saturating_sub(ensured.generated.len())
    );
    Ok(0)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Scan { entities, policy } => scan(entities.as_deref(), policy.as_ref()),
        Command::Mask {
            keys,
            tenant,
            action,
            entities,
            policy,
        } => mask_lines(
            keys.as_ref(),
            &tenant,
            action.as_deref(),
            entities.as_deref(),
            policy.as_ref(),
        ),
        Command::Check { dir } => check(&dir),
        Command::Key { command } => key(command),
        Command::Keygen { out, tenants } => keygen(&out, &tenants),
        Command::Entities => {
            for entity in builtin_entities() {
                println!("{entity}");
            }
            Ok(0)
        }
    };
    match outcome {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(error) => {
            eprintln!("atdp-policy: {error}");
            ExitCode::from(2)
        }
    }
}
