//! `manifest.json`, which the trainer writes next to each adapter (what it was trained from,
//! how, with what result; the trainer's `Manifest`). What serving and audit read of it is
//! here: the file's name and the base model's identity ([`BaseModel`], [`hash_weights`]), so
//! that a server refuses an adapter trained on other base weights ([`trained_on`]).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// The manifest file.
pub const MANIFEST_FILE: &str = "manifest.json";

/// The base model's identity: sha256 of each weight file and of their concatenation in
/// name order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaseModel {
    /// The directory given.
    pub path: String,
    /// sha256 over every weight file's bytes, in file-name order.
    pub sha256: String,
    /// Each weight file's name and sha256.
    pub files: BTreeMap<String, String>,
}

/// The base model's identity, as the manifest records it: sha256 over every weight file's
/// bytes in file-name order, and each file's own sha256 by name.
pub fn hash_weights(paths: &[PathBuf]) -> Result<(String, BTreeMap<String, String>)> {
    let mut files = BTreeMap::new();
    let mut all = Sha256::new();
    let mut paths = paths.to_vec();
    paths.sort();
    for path in &paths {
        let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let mut one = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
            if n == 0 {
                break;
            }
            one.update(&buf[..n]);
            all.update(&buf[..n]);
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        files.insert(name, hex::encode(one.finalize()));
    }
    Ok((hex::encode(all.finalize()), files))
}

/// The sha256 of the base weights the adapter in `dir` was trained on, from its
/// `manifest.json`; `None` when the directory has no manifest file. Only `base_model.sha256`
/// is read, so manifests of other trainer versions still load.
pub fn trained_on(dir: &Path) -> Result<Option<String>> {
    let path = dir.join(MANIFEST_FILE);
    if !path.is_file() {
        return Ok(None);
    }
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
    };
    let manifest: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::json(&path, e))?;
    match manifest
        .pointer("/base_model/sha256")
        .and_then(serde_json::Value::as_str)
    {
        Some(sha256) => Ok(Some(sha256.to_owned())),
        None => Err(Error::Adapter {
            path,
            message: "names no base_model.sha256".into(),
        }),
    }
}
