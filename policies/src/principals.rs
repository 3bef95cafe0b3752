//! Who can call and who can audit: the API keys and auditors of a policy directory's
//! `entities.json`, listed and changed without editing JSON by hand (`atdp-policy key`).
//!
//! A key is made here, printed once, and stored only as its SHA-256 (the entity id). Every
//! change is a read-modify-write under an exclusive lock on `entities.json.lock`, checked
//! against the directory's schema and policies before anything is written (a change that
//! would leave the directory invalid is refused and writes nothing), then written to
//! `entities.json.tmp`, synced, renamed over `entities.json`, and the directory synced. A
//! running proxy sees the change at its next reload, whose `policy_reload` audit event lists
//! the key ids added, revoked and removed ([`changes`]).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use rand::Rng;
use rand::distr::Alphanumeric;
use serde_json::{Value, json};

use crate::access::{AccessPolicy, ENTITIES_FILE, POLICIES_FILE, SCHEMA_FILE, hash_api_key};
pub use crate::entities::{Kind, Principal, changes, parse};
use crate::entities::{NAMESPACE, parents, uid};
use crate::error::{Error, Result};

/// A new key: `sk-atdp-` and 40 random letters and digits (about 238 bits).
pub fn new_key() -> String {
    let random: String = rand::rng()
        .sample_iter(Alphanumeric)
        .take(40)
        .map(char::from)
        .collect();
    format!("sk-atdp-{random}")
}

/// What [`add_api_key`] and [`add_auditor`] made: the key (shown once, stored nowhere) and
/// its entry.
#[derive(Debug, Clone)]
pub struct NewKey {
    /// The key itself.
    pub key: String,
    /// Its entry as now in `entities.json`.
    pub principal: Principal,
}

/// The principals of the directory `dir`.
pub fn list(dir: &Path) -> Result<Vec<Principal>> {
    parse(&read(&dir.join(ENTITIES_FILE))?)
}

/// Adds a fresh API key for `agent` of `tenant`. The agent is created under the tenant when
/// it does not exist (an agent of another tenant is refused); the tenant must exist unless
/// `create_tenant`, which adds it (it then needs vault keys: `atdp-policy keygen`).
pub fn add_api_key(dir: &Path, tenant: &str, agent: &str, create_tenant: bool) -> Result<NewKey> {
    check_id("tenant", tenant)?;
    check_id("agent", agent)?;
    let key = new_key();
    let id = hash_api_key(&key);
    change(dir, |entities| {
        if find(entities, "Tenant", tenant).is_none() {
            if !create_tenant {
                return Err(Error::Policy(format!(
                    "tenant {tenant:?} is not in {ENTITIES_FILE}; add it with --create-tenant (it then needs vault keys: atdp-policy keygen)"
                )));
            }
            entities.push(json!({"uid": entity_uid("Tenant", tenant), "attrs": {}, "parents": []}));
        }
        match find(entities, "Agent", agent) {
            Some(existing) => {
                let owners = parents(&entities[existing], "Tenant");
                if !owners.iter().any(|t| t == tenant) {
                    return Err(Error::Policy(format!(
                        "agent {agent:?} belongs to tenant {owners:?}, not {tenant:?}"
                    )));
                }
            }
            None => entities.push(json!({
                "uid": entity_uid("Agent", agent),
                "attrs": {},
                "parents": [entity_uid("Tenant", tenant)],
            })),
        }
        entities.push(json!({
            "uid": entity_uid("ApiKey", &id),
            "attrs": {"active": true},
            "parents": [entity_uid("Agent", agent)],
        }));
        Ok(())
    })?;
    let principal = find_principal(dir, Kind::ApiKey, &id)?;
    Ok(NewKey { key, principal })
}

/// Adds a fresh auditor key with `role` for `tenants` (each must exist).
pub fn add_auditor(dir: &Path, role: &str, tenants: &[String]) -> Result<NewKey> {
    check_id("role", role)?;
    if tenants.is_empty() {
        return Err(Error::Policy(
            "an auditor needs at least one --tenant".into(),
        ));
    }
    let key = new_key();
    let id = hash_api_key(&key);
    change(dir, |entities| {
        if let Some(missing) = tenants
            .iter()
            .find(|t| find(entities, "Tenant", t).is_none())
        {
            return Err(Error::Policy(format!(
                "tenant {missing:?} is not in {ENTITIES_FILE}"
            )));
        }
        let tenants: Vec<Value> = tenants
            .iter()
            .map(|t| json!({"__entity": entity_uid("Tenant", t)}))
            .collect();
        entities.push(json!({
            "uid": entity_uid("Auditor", &id),
            "attrs": {"role": role, "tenants": tenants},
            "parents": [],
        }));
        Ok(())
    })?;
    let principal = find_principal(dir, Kind::Auditor, &id)?;
    Ok(NewKey { key, principal })
}

/// Revokes the API key or auditor whose id is `id`, or, when none has it, whose id starts
/// with it (at least 8 characters, and only one may match): a key is kept with `active: false`, so its calls are
/// refused and its past steps still name it; an auditor, who has no `active`, is removed.
pub fn revoke(dir: &Path, id: &str) -> Result<Principal> {
    let mut revoked = None;
    change(dir, |entities| {
        let listed = parse(&Value::Array(entities.clone()).to_string())?;
        let is_principal = |e: &Value| matches!(uid(e), Some(("ApiKey" | "Auditor", _)));
        let exact: Vec<usize> = (0..entities.len())
            .filter(|&i| {
                is_principal(&entities[i]) && uid(&entities[i]).map(|(_, f)| f) == Some(id)
            })
            .collect();
        // An exact id wins at any length; otherwise a prefix of at least 8 characters.
        let matches = if exact.is_empty() {
            if id.len() < 8 {
                return Err(Error::Policy(format!(
                    "no key or auditor has the id {id:?}; a prefix needs at least 8 characters (atdp-policy key list shows the ids)"
                )));
            }
            (0..entities.len())
                .filter(|&i| {
                    is_principal(&entities[i])
                        && uid(&entities[i]).is_some_and(|(_, f)| f.starts_with(id))
                })
                .collect()
        } else {
            exact
        };
        let [at] = matches[..] else {
            return Err(Error::Policy(format!(
                "{} keys or auditors match {id:?}; give exactly one id",
                matches.len()
            )));
        };
        let Some((kind, found)) = uid(&entities[at]).map(|(k, i)| (k.to_owned(), i.to_owned()))
        else {
            return Err(Error::Policy("the entry has no id".into()));
        };
        let mut principal = listed
            .into_iter()
            .find(|p| p.id == found && (p.kind == Kind::ApiKey) == (kind == "ApiKey"))
            .ok_or_else(|| Error::Policy(format!("{found} is not a key or an auditor")))?;
        if kind == "ApiKey" {
            let Some(attrs) = entities[at].get_mut("attrs").and_then(Value::as_object_mut) else {
                return Err(Error::Policy(format!(
                    "key {found} has no `attrs` object in {ENTITIES_FILE}"
                )));
            };
            if attrs.get("active") == Some(&json!(false)) {
                return Err(Error::Policy(format!("key {found} is already revoked")));
            }
            attrs.insert("active".into(), json!(false));
        } else {
            entities.remove(at);
        }
        principal.active = false;
        revoked = Some(principal);
        Ok(())
    })?;
    revoked.ok_or_else(|| Error::Policy("nothing was revoked".into()))
}

fn check_id(what: &str, value: &str) -> Result<()> {
    let ok = !value.is_empty()
        && value.len() <= 128
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::Policy(format!(
            "{what} {value:?}: use 1 to 128 letters, digits, '-', '_' or '.'"
        )))
    }
}

fn entity_uid(kind: &str, id: &str) -> Value {
    json!({"type": format!("{NAMESPACE}{kind}"), "id": id})
}

fn find(entities: &[Value], kind: &str, id: &str) -> Option<usize> {
    entities.iter().position(|e| uid(e) == Some((kind, id)))
}

fn find_principal(dir: &Path, kind: Kind, id: &str) -> Result<Principal> {
    list(dir)?
        .into_iter()
        .find(|p| p.kind == kind && p.id == id)
        .ok_or_else(|| Error::Policy(format!("{id} is not in {ENTITIES_FILE} after writing")))
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| Error::Policy(format!("cannot read {}: {e}", path.display())))
}

fn io(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let message = format!("cannot {what} {}", path.display());
    move |e| Error::Policy(format!("{message}: {e}"))
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Read-modify-write of `dir/entities.json` under its lock; the result is checked with the
/// directory's schema and policies before it replaces the file.
fn change(dir: &Path, edit: impl FnOnce(&mut Vec<Value>) -> Result<()>) -> Result<()> {
    let path = dir.join(ENTITIES_FILE);
    let lock_path = sibling(&path, ".lock");
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(io("open", &lock_path))?;
    lock.lock().map_err(io("lock", &lock_path))?;
    let mut entities: Vec<Value> = serde_json::from_str(&read(&path)?)
        .map_err(|e| Error::Policy(format!("{}: {e}", path.display())))?;
    edit(&mut entities)?;
    let text = serde_json::to_string_pretty(&entities)
        .map_err(|e| Error::Policy(format!("cannot encode {ENTITIES_FILE}: {e}")))?
        + "\n";
    AccessPolicy::from_sources(
        &read(&dir.join(SCHEMA_FILE))?,
        &read(&dir.join(POLICIES_FILE))?,
        &text,
    )
    .map_err(|e| Error::Policy(format!("the change would leave the directory invalid: {e}")))?;
    let temporary = sibling(&path, ".tmp");
    let _ = std::fs::remove_file(&temporary);
    // The new file keeps the old one's permissions, so the processes that read it still can.
    let permissions = std::fs::metadata(&path)
        .map_err(io("read the permissions of", &path))?
        .permissions();
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temporary)
        .and_then(|mut file| {
            file.set_permissions(permissions)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()
        })
        .map_err(io("write", &temporary))
        .and_then(|()| std::fs::rename(&temporary, &path).map_err(io("replace", &path)));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("sync", dir))?;
    drop(lock);
    Ok(())
}
