//! Vault crypto: per-tenant keys, deterministic tokens, and authenticated encryption of the
//! originals of tokenized values.
//!
//! Originals are sealed with AES-256-GCM under the tenant's current key, with a random
//! 96-bit nonce and `tenant ‖ 0 ‖ entity ‖ 0 ‖ key id` as associated data, so a ciphertext
//! moved to another tenant or entity does not open. Every ciphertext names its key id: keys
//! rotate without re-encrypting old entries. Tokens are an HMAC-SHA-256 of the value under
//! the tenant's token key, so the same value gets the same token within a tenant (records
//! stay joinable) and a token cannot be reversed by guessing without the key. Erasing a
//! tenant's keys makes every one of its vault entries unrecoverable.

use std::collections::BTreeMap;
use std::path::Path;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use hmac::{Hmac, Mac};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::error::{Error, Result, json_error_kind};

/// Hex digits of a token's digest: 48 bits, so two values of one tenant and entity share a
/// token with probability about n²/2⁴⁹ (under 10⁻⁴ for 100,000 values).
pub const TOKEN_HEX_DIGITS: usize = 12;

type Key = [u8; 32];

#[derive(Clone, Serialize, Deserialize)]
struct TenantKeysFile {
    current: String,
    keys: BTreeMap<String, String>,
    token_key: String,
}

#[derive(Serialize, Deserialize)]
struct KeyFile {
    tenants: BTreeMap<String, TenantKeysFile>,
}

#[derive(Clone)]
struct TenantKeys {
    current: String,
    keys: BTreeMap<String, Key>,
    token_key: Key,
}

/// The keys of every tenant. Never printed: `Debug` shows tenant names and key ids only.
#[derive(Clone, Default)]
pub struct KeyRing {
    tenants: BTreeMap<String, TenantKeys>,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: BTreeMap<&String, Vec<&String>> = self
            .tenants
            .iter()
            .map(|(t, k)| (t, k.keys.keys().collect()))
            .collect();
        f.debug_struct("KeyRing").field("key_ids", &ids).finish()
    }
}

/// An encrypted original, as stored in the `pii_vault` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedValue {
    /// The key that encrypted it.
    pub key_id: String,
    /// The AES-GCM nonce.
    pub nonce: Vec<u8>,
    /// Ciphertext and tag.
    pub ciphertext: Vec<u8>,
}

fn random_key() -> Key {
    let mut key = [0u8; 32];
    rand::rng().fill_bytes(&mut key);
    key
}

fn parse_key(tenant: &str, name: &str, hex_text: &str) -> Result<Key> {
    let bytes = hex::decode(hex_text.trim())
        .map_err(|_| Error::KeyFile(format!("key {name} of tenant {tenant} is not hex")))?;
    bytes
        .try_into()
        .map_err(|_| Error::KeyFile(format!("key {name} of tenant {tenant} is not 32 bytes")))
}

fn aad(tenant: &str, entity: &str, key_id: &str) -> Vec<u8> {
    [
        tenant.as_bytes(),
        b"\0",
        entity.as_bytes(),
        b"\0",
        key_id.as_bytes(),
    ]
    .concat()
}

impl KeyRing {
    /// Reads a key file (JSON: `{"tenants": {"<tenant>": {"current": "k1", "keys": {"k1":
    /// "<64 hex>"}, "token_key": "<64 hex>"}}}`).
    pub fn from_json(text: &str) -> Result<KeyRing> {
        let file: KeyFile = serde_json::from_str(text).map_err(|e| {
            Error::KeyFile(format!(
                "not a key file: {} at line {}",
                json_error_kind(&e),
                e.line()
            ))
        })?;
        let mut tenants = BTreeMap::new();
        for (tenant, keys) in file.tenants {
            let parsed: BTreeMap<String, Key> = keys
                .keys
                .iter()
                .map(|(id, hex_text)| Ok((id.clone(), parse_key(&tenant, id, hex_text)?)))
                .collect::<Result<_>>()?;
            if !parsed.contains_key(&keys.current) {
                return Err(Error::KeyFile(format!(
                    "tenant {tenant}: current key {} is not among its keys",
                    keys.current
                )));
            }
            let token_key = parse_key(&tenant, "token_key", &keys.token_key)?;
            tenants.insert(
                tenant,
                TenantKeys {
                    current: keys.current,
                    keys: parsed,
                    token_key,
                },
            );
        }
        Ok(KeyRing { tenants })
    }

    /// Reads a key file from disk; the same as [`KeyFile::load`](crate::KeyFile::load).
    pub fn load(path: &Path) -> Result<KeyRing> {
        crate::KeyFile::new(path).load()
    }

    /// The key file's JSON (holds secrets: write it with restricted permissions).
    pub fn to_json(&self) -> Result<String> {
        let tenants = self
            .tenants
            .iter()
            .map(|(tenant, keys)| {
                (
                    tenant.clone(),
                    TenantKeysFile {
                        current: keys.current.clone(),
                        keys: keys
                            .keys
                            .iter()
                            .map(|(id, k)| (id.clone(), hex::encode(k)))
                            .collect(),
                        token_key: hex::encode(keys.token_key),
                    },
                )
            })
            .collect();
        serde_json::to_string_pretty(&KeyFile { tenants })
            .map_err(|e| Error::KeyFile(format!("cannot encode the key file: {e}")))
    }

    /// Whether `tenant` has keys.
    pub fn has_tenant(&self, tenant: &str) -> bool {
        self.tenants.contains_key(tenant)
    }

    /// Fresh random keys for `tenant` (key id `k1`), replacing any it had.
    pub fn generate(&mut self, tenant: &str) {
        self.tenants.insert(
            tenant.to_owned(),
            TenantKeys {
                current: "k1".to_owned(),
                keys: BTreeMap::from([("k1".to_owned(), random_key())]),
                token_key: random_key(),
            },
        );
    }

    /// The tenant names, in sort order.
    pub fn tenants(&self) -> impl Iterator<Item = &str> {
        self.tenants.keys().map(String::as_str)
    }

    /// The id of `tenant`'s current key (the one [`KeyRing::seal`] uses).
    pub fn current_key_id(&self, tenant: &str) -> Option<&str> {
        self.tenants.get(tenant).map(|k| k.current.as_str())
    }

    /// The ids of every key of `tenant`, in sort order (ids, never key material).
    pub fn key_ids(&self, tenant: &str) -> Vec<&str> {
        self.tenants
            .get(tenant)
            .map(|k| k.keys.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// Adds a new current key for `tenant`; old keys stay to open old entries. Returns its id:
    /// `k{n}` with `n` one more than the highest number among the tenant's key ids, so an id
    /// is never given to two keys, even after [`KeyRing::undo_rotation`] removed one.
    pub fn rotate(&mut self, tenant: &str) -> Result<String> {
        let keys = self.tenant_mut(tenant)?;
        let highest = keys
            .keys
            .keys()
            .filter_map(|id| id.strip_prefix('k')?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        let id = format!("k{}", highest.saturating_add(1));
        keys.keys.insert(id.clone(), random_key());
        keys.current.clone_from(&id);
        Ok(id)
    }

    /// Undoes one rotation of `tenant` that added `key_id` when `previous` was current:
    /// `key_id` is removed, and if it is still current, `previous` is current again. A later
    /// rotation stays in force. Returns whether anything changed (nothing does when the tenant
    /// was erased meanwhile, or `key_id` is already gone; the key is kept when `previous` is
    /// gone too, since a tenant always has a current key).
    pub fn undo_rotation(&mut self, tenant: &str, key_id: &str, previous: &str) -> bool {
        let Some(keys) = self.tenants.get_mut(tenant) else {
            return false;
        };
        if !keys.keys.contains_key(key_id) || key_id == previous {
            return false;
        }
        if keys.current == key_id {
            if !keys.keys.contains_key(previous) {
                return false;
            }
            previous.clone_into(&mut keys.current);
        }
        keys.keys.remove(key_id).is_some()
    }

    /// Forgets every key of `tenant`: its vault entries can no longer be opened anywhere the
    /// key file is replaced by this one.
    pub fn erase_tenant(&mut self, tenant: &str) -> bool {
        self.tenants.remove(tenant).is_some()
    }

    fn tenant(&self, tenant: &str) -> Result<&TenantKeys> {
        self.tenants
            .get(tenant)
            .ok_or_else(|| Error::UnknownTenant(tenant.to_owned()))
    }

    fn tenant_mut(&mut self, tenant: &str) -> Result<&mut TenantKeys> {
        self.tenants
            .get_mut(tenant)
            .ok_or_else(|| Error::UnknownTenant(tenant.to_owned()))
    }

    fn digest(&self, tenant: &str, domain: &[u8], entity: &str, value: &str) -> Result<String> {
        let keys = self.tenant(tenant)?;
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&keys.token_key)
            .map_err(|_| Error::KeyFile("token key of the wrong length".into()))?;
        mac.update(domain);
        mac.update(entity.as_bytes());
        mac.update(b"\0");
        mac.update(value.as_bytes());
        Ok(hex::encode(mac.finalize().into_bytes()))
    }

    /// The deterministic placeholder of `value`: `<ENTITY_0123456789ab>`, computed from its
    /// canonical spelling ([`atdp_detect::canonical`]), so that `jane%40example.com` and
    /// `jane@example.com` have one token.
    pub fn token(&self, tenant: &str, entity: &str, value: &str) -> Result<String> {
        self.token_of_spelling(tenant, entity, &atdp_detect::canonical(entity, value))
    }

    /// The placeholder of `value` spelled exactly as given, as tokens were computed before
    /// they were computed from the canonical spelling: an erasure reaches those too.
    pub fn token_of_spelling(&self, tenant: &str, entity: &str, value: &str) -> Result<String> {
        let digest = self.digest(tenant, b"token\0", entity, value)?;
        Ok(format!("<{entity}_{}>", &digest[..TOKEN_HEX_DIGITS]))
    }

    /// A keyed, irreversible hash of `value` (the `hash` action): `<ENTITY#0123…>`, of its
    /// canonical spelling.
    pub fn keyed_hash(&self, tenant: &str, entity: &str, value: &str) -> Result<String> {
        let canonical = atdp_detect::canonical(entity, value);
        let digest = self.digest(tenant, b"hash\0", entity, &canonical)?;
        Ok(format!("<{entity}#{}>", &digest[..16]))
    }

    /// The keyed hash of `value` spelled exactly as given, as hashes were computed before
    /// they were computed from the canonical spelling: an erasure reaches those too.
    pub fn keyed_hash_of_spelling(
        &self,
        tenant: &str,
        entity: &str,
        value: &str,
    ) -> Result<String> {
        let digest = self.digest(tenant, b"hash\0", entity, value)?;
        Ok(format!("<{entity}#{}>", &digest[..16]))
    }

    /// Encrypts `value` under the tenant's current key.
    pub fn seal(&self, tenant: &str, entity: &str, value: &str) -> Result<SealedValue> {
        let keys = self.tenant(tenant)?;
        let key = keys
            .keys
            .get(&keys.current)
            .ok_or_else(|| Error::UnknownKey(keys.current.clone()))?;
        let cipher = Aes256Gcm::new_from_slice(key).map_err(|_| Error::Crypto)?;
        let mut nonce = [0u8; 12];
        rand::rng().fill_bytes(&mut nonce);
        let aad = aad(tenant, entity, &keys.current);
        let ciphertext = cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: value.as_bytes(),
                    aad: &aad,
                },
            )
            .map_err(|_| Error::Crypto)?;
        Ok(SealedValue {
            key_id: keys.current.clone(),
            nonce: nonce.to_vec(),
            ciphertext,
        })
    }

    /// Decrypts a sealed value; fails if the key is gone (erased), or the ciphertext, tenant
    /// or entity is not the one it was sealed with.
    pub fn open(&self, tenant: &str, entity: &str, sealed: &SealedValue) -> Result<String> {
        let keys = self.tenant(tenant)?;
        let key = keys
            .keys
            .get(&sealed.key_id)
            .ok_or_else(|| Error::UnknownKey(sealed.key_id.clone()))?;
        if sealed.nonce.len() != 12 {
            return Err(Error::Crypto);
        }
        let cipher = Aes256Gcm::new_from_slice(key).map_err(|_| Error::Crypto)?;
        let aad = aad(tenant, entity, &sealed.key_id);
        let plain = cipher
            .decrypt(
                Nonce::from_slice(&sealed.nonce),
                Payload {
                    msg: &sealed.ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| Error::Crypto)?;
        String::from_utf8(plain).map_err(|_| Error::Crypto)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring() -> KeyRing {
        let mut ring = KeyRing::default();
        ring.generate("acme");
        ring.generate("globex");
        ring
    }

    #[test]
    fn seal_open_round_trip_and_bindings() {
        let ring = ring();
        let sealed = ring
            .seal("acme", "EMAIL_ADDRESS", "jane@example.com")
            .unwrap();
        assert_eq!(
            ring.open("acme", "EMAIL_ADDRESS", &sealed).unwrap(),
            "jane@example.com"
        );
        // Tenant and entity are bound: the same bytes do not open elsewhere.
        assert!(ring.open("acme", "PERSON", &sealed).is_err());
        let mut moved = ring.clone();
        moved
            .tenants
            .insert("globex".into(), moved.tenants["acme"].clone());
        assert!(moved.open("globex", "EMAIL_ADDRESS", &sealed).is_err());
        let mut tampered = sealed.clone();
        tampered.ciphertext[0] ^= 1;
        assert!(ring.open("acme", "EMAIL_ADDRESS", &tampered).is_err());
    }

    #[test]
    fn rotation_keeps_old_entries_and_erasure_shreds_them() {
        let mut ring = ring();
        let old = ring.seal("acme", "US_SSN", "536-22-1234").unwrap();
        assert_eq!(ring.rotate("acme").unwrap(), "k2");
        let new = ring.seal("acme", "US_SSN", "536-22-1234").unwrap();
        assert_eq!(new.key_id, "k2");
        assert_eq!(ring.open("acme", "US_SSN", &old).unwrap(), "536-22-1234");
        // Tokens do not change with rotation: trajectories stay joinable.
        let token = ring.token("acme", "US_SSN", "536-22-1234").unwrap();
        assert!(ring.erase_tenant("acme"));
        assert!(matches!(
            ring.open("acme", "US_SSN", &old),
            Err(Error::UnknownTenant(_))
        ));
        assert!(ring.open("acme", "US_SSN", &new).is_err());
        assert!(ring.token("acme", "US_SSN", "536-22-1234").is_err());
        assert_eq!(token.len(), "<US_SSN_>".len() + TOKEN_HEX_DIGITS);
    }

    #[test]
    fn undoing_a_rotation_keeps_later_ones_and_ids_stay_unique() {
        let mut ring = ring();
        let sealed = ring.seal("acme", "PERSON", "Ana").unwrap();
        assert_eq!(ring.rotate("acme").unwrap(), "k2");
        assert_eq!(ring.rotate("acme").unwrap(), "k3");
        // The rotation to k2 is undone after the one to k3: k3 stays current.
        assert!(ring.undo_rotation("acme", "k2", "k1"));
        assert_eq!(ring.key_ids("acme"), ["k1", "k3"]);
        assert_eq!(ring.current_key_id("acme"), Some("k3"));
        // The next id is past every existing one: k3 is not overwritten.
        assert_eq!(ring.rotate("acme").unwrap(), "k4");
        assert_eq!(ring.key_ids("acme"), ["k1", "k3", "k4"]);
        // Undoing the current rotation makes the previous key current again.
        assert!(ring.undo_rotation("acme", "k4", "k3"));
        assert_eq!(ring.current_key_id("acme"), Some("k3"));
        assert!(!ring.undo_rotation("acme", "k4", "k3"));
        assert!(!ring.undo_rotation("acme", "k3", "k9"));
        assert!(!ring.undo_rotation("nobody", "k2", "k1"));
        assert_eq!(ring.open("acme", "PERSON", &sealed).unwrap(), "Ana");
        assert_eq!(ring.key_ids("globex"), ["k1"]);
    }

    #[test]
    fn tokens_are_deterministic_per_tenant_and_keyed() {
        let ring = ring();
        let a = ring
            .token("acme", "EMAIL_ADDRESS", "jane@example.com")
            .unwrap();
        assert_eq!(
            a,
            ring.token("acme", "EMAIL_ADDRESS", "jane@example.com")
                .unwrap()
        );
        assert_ne!(
            a,
            ring.token("globex", "EMAIL_ADDRESS", "jane@example.com")
                .unwrap()
        );
        assert_ne!(
            a,
            ring.token("acme", "EMAIL_ADDRESS", "john@example.com")
                .unwrap()
        );
        assert!(a.starts_with("<EMAIL_ADDRESS_") && a.ends_with('>'));
        assert_ne!(
            a,
            ring.keyed_hash("acme", "EMAIL_ADDRESS", "jane@example.com")
                .unwrap()
        );
    }

    #[test]
    fn key_file_round_trip_and_errors_without_secrets() {
        let ring = ring();
        let json = ring.to_json().unwrap();
        let back = KeyRing::from_json(&json).unwrap();
        let sealed = ring.seal("acme", "PERSON", "Ana").unwrap();
        assert_eq!(back.open("acme", "PERSON", &sealed).unwrap(), "Ana");
        assert!(!format!("{ring:?}").contains(&hex::encode(ring.tenants["acme"].token_key)));
        let bad = json.replacen("\"current\": \"k1\"", "\"current\": \"k9\"", 1);
        assert!(matches!(KeyRing::from_json(&bad), Err(Error::KeyFile(_))));
        let error = KeyRing::from_json("{\"tenants\": {\"t\": {\"current\": \"k1\", \"keys\": {\"k1\": \"zz\"}, \"token_key\": \"00\"}}}")
            .unwrap_err()
            .to_string();
        assert!(error.contains("not hex"), "{error}");
    }
}
