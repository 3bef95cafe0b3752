//! The vault key file on disk: the one place that reads it and changes it.
//!
//! Readers take no lock: the file is only ever replaced whole, by a rename, so a reader sees
//! the old file or the new one. Every change is a read-modify-write under one advisory
//! exclusive lock on a sibling lock file (`<file>.lock`; the key file itself cannot carry the
//! lock, since each write replaces it), and the file is read again inside the lock, so two
//! writers (proxies creating a new tenant's keys, `atdp-policy keygen`, `atdp-audit
//! rotate-key` and `erase`) never lose each other's change. A change is written to
//! `<file>.tmp` in the same directory (mode 0600), synced, renamed over the key file, and the
//! directory is synced, so that after a crash the file is the old one or the new one, and
//! the new one survives a power loss once the change has returned.
//!
//! The lock is advisory (it binds only the programs that take it: these) and works through
//! one machine's file system; see `docs/policies.md`, "The key file and several proxies".

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::vault::KeyRing;

/// The key file at a path. Cheap to make: it holds only the path.
///
/// ```no_run
/// use atdp_policies::{KeyFile, MissingKeys};
///
/// let file = KeyFile::new("atdp-data/keys.json");
/// let tenants = vec!["acme".to_owned()];
/// let ensured = file.ensure_tenants(&tenants, MissingKeys::Refuse)?;
/// assert!(ensured.generated.is_empty());
/// let rotated = file.update(|ring| ring.rotate("acme"))?;
/// # Ok::<(), atdp_policies::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyFile {
    path: PathBuf,
}

/// What [`KeyFile::ensure_tenants`] does about tenants that have no keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingKeys {
    /// Generate fresh keys for them and add them to the file (creating it if needed).
    Generate,
    /// Fail with [`Error::MissingKeys`], naming them; the file is not touched.
    Refuse,
}

/// The keys [`KeyFile::ensure_tenants`] found or made.
#[derive(Debug, Clone)]
pub struct EnsuredKeys {
    /// Every tenant's keys, as now in the file.
    pub keys: KeyRing,
    /// The tenants whose keys this call generated, in sort order (none when every tenant had
    /// keys, or another process created them first).
    pub generated: Vec<String>,
}

/// The exclusive lock on the key file's lock file; released on drop.
struct Locked {
    file: File,
}

impl Drop for Locked {
    fn drop(&mut self) {
        // Closing the file releases the lock as well; unlocking first says so plainly.
        let _ = self.file.unlock();
    }
}

fn owner_only(options: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(options, 0o600);
    options
}

impl KeyFile {
    /// The key file at `path` (nothing is read yet).
    pub fn new(path: impl Into<PathBuf>) -> KeyFile {
        KeyFile { path: path.into() }
    }

    /// The key file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The lock file, `<file>.lock` beside the key file. It is created on the first change
    /// and never removed (removing it would let two writers lock two different files).
    pub fn lock_path(&self) -> PathBuf {
        self.sibling(".lock")
    }

    /// Where a change is written before it replaces the key file.
    fn temporary_path(&self) -> PathBuf {
        self.sibling(".tmp")
    }

    fn sibling(&self, suffix: &str) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    }

    fn directory(&self) -> &Path {
        match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        }
    }

    fn io(&self, action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.to_owned();
        move |source| Error::KeyFileIo {
            action,
            path,
            source,
        }
    }

    /// Reads the key file (no lock needed: see the module's documentation).
    pub fn load(&self) -> Result<KeyRing> {
        let text = std::fs::read_to_string(&self.path).map_err(self.io("read", &self.path))?;
        KeyRing::from_json(&text)
    }

    /// Reads the key file; `None` when there is none.
    fn read(&self) -> Result<Option<KeyRing>> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => KeyRing::from_json(&text).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io("read", &self.path)(e)),
        }
    }

    /// The keys of `tenants` and every other tenant in the file. Tenants without keys are
    /// refused by name ([`Error::MissingKeys`]), or, with [`MissingKeys::Generate`], given
    /// fresh keys under the lock after the file is read again, so that processes racing to
    /// create one tenant's keys end with one key that all of them use. Tenants that have
    /// keys keep them. When every tenant has keys, nothing is locked or written (a key file
    /// on a read-only volume works).
    pub fn ensure_tenants(&self, tenants: &[String], missing: MissingKeys) -> Result<EnsuredKeys> {
        let found = self.read()?;
        let lacking = lacking(found.as_ref(), tenants);
        if lacking.is_empty() {
            return Ok(EnsuredKeys {
                keys: found.unwrap_or_default(),
                generated: Vec::new(),
            });
        }
        if missing == MissingKeys::Refuse {
            return Err(Error::MissingKeys {
                path: self.path.clone(),
                tenants: lacking,
            });
        }
        self.change(true, |keys| {
            // Read again under the lock: another process may have created some meanwhile.
            let generated = lacking_in(keys, tenants);
            for tenant in &generated {
                keys.generate(tenant);
            }
            Ok(EnsuredKeys {
                keys: keys.clone(),
                generated,
            })
        })
    }

    /// Changes the key file: reads it under the lock, applies `change`, and writes the result
    /// if `change` succeeded and changed anything. The file must exist. Returns what `change`
    /// returned; an error of `change` leaves the file as it was.
    pub fn update<T>(&self, change: impl FnOnce(&mut KeyRing) -> Result<T>) -> Result<T> {
        self.change(false, change)
    }

    fn change<T>(&self, create: bool, change: impl FnOnce(&mut KeyRing) -> Result<T>) -> Result<T> {
        let absent = || {
            Error::KeyFile(format!(
                "{} does not exist; create it with `atdp-policy keygen --out {} --tenant T`",
                self.path.display(),
                self.path.display()
            ))
        };
        if create {
            std::fs::create_dir_all(self.directory())
                .map_err(self.io("create the directory of", &self.path))?;
        } else if !self.path.exists() {
            // Checked again under the lock; this spares a lock file beside nothing.
            return Err(absent());
        }
        let _locked = self.lock()?;
        let mut keys = match self.read()? {
            Some(keys) => keys,
            None if create => KeyRing::default(),
            None => return Err(absent()),
        };
        let before = keys.to_json()?;
        let out = change(&mut keys)?;
        let after = keys.to_json()?;
        if after != before {
            self.write(&after)?;
        }
        Ok(out)
    }

    fn lock(&self) -> Result<Locked> {
        let path = self.lock_path();
        let file = owner_only(OpenOptions::new().read(true).write(true).create(true))
            .open(&path)
            .map_err(self.io("open the lock file", &path))?;
        file.lock().map_err(self.io("lock", &path))?;
        Ok(Locked { file })
    }

    /// Replaces the key file with `text`: a fresh owner-only temporary file, synced, renamed
    /// over the key file, then the directory synced. Called under the lock.
    fn write(&self, text: &str) -> Result<()> {
        let temporary = self.temporary_path();
        // A temporary file a crashed writer left: its content and mode are not to be trusted.
        match std::fs::remove_file(&temporary) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(self.io("remove the leftover", &temporary)(e)),
        }
        let written = owner_only(OpenOptions::new().write(true).create_new(true))
            .open(&temporary)
            .and_then(|mut file| {
                file.write_all(text.as_bytes())?;
                file.sync_all()
            })
            .map_err(self.io("write", &temporary))
            .and_then(|()| {
                std::fs::rename(&temporary, &self.path).map_err(self.io("replace", &self.path))
            });
        if written.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        written?;
        sync_directory(self.directory()).map_err(self.io("sync the directory of", &self.path))
    }
}

/// The tenants of `tenants` that `keys` lacks, sorted and without duplicates.
fn lacking(keys: Option<&KeyRing>, tenants: &[String]) -> Vec<String> {
    let mut lacking: Vec<String> = tenants
        .iter()
        .filter(|t| !keys.is_some_and(|k| k.has_tenant(t)))
        .cloned()
        .collect();
    lacking.sort();
    lacking.dedup();
    lacking
}

fn lacking_in(keys: &KeyRing, tenants: &[String]) -> Vec<String> {
    lacking(Some(keys), tenants)
}

/// Makes a rename in `dir` durable.
#[cfg(unix)]
fn sync_directory(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// `std` offers no directory sync on this platform.
#[cfg(not(unix))]
fn sync_directory(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};

    use super::*;

    fn tenants(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[cfg(unix)]
    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn concurrent_writers_lose_no_update() {
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(KeyFile::new(dir.path().join("keys.json")));
        file.ensure_tenants(&tenants(&["base"]), MissingKeys::Generate)
            .unwrap();
        let barrier = Arc::new(Barrier::new(6));
        let adders: Vec<_> = (0..4)
            .map(|writer| {
                let (file, barrier) = (file.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    for i in 0..10 {
                        let tenant = format!("t{writer}-{i}");
                        let ensured = file
                            .ensure_tenants(std::slice::from_ref(&tenant), MissingKeys::Generate)
                            .unwrap();
                        assert_eq!(ensured.generated, [tenant]);
                    }
                })
            })
            .collect();
        let rotators: Vec<_> = (0..2)
            .map(|_| {
                let (file, barrier) = (file.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    (0..10)
                        .map(|_| file.update(|ring| ring.rotate("base")).unwrap())
                        .collect::<Vec<String>>()
                })
            })
            .collect();
        for adder in adders {
            adder.join().unwrap();
        }
        let mut rotated: Vec<String> = rotators
            .into_iter()
            .flat_map(|r| r.join().unwrap())
            .collect();
        let ring = file.load().unwrap();
        let mut expected: Vec<String> = (0..4)
            .flat_map(|w| (0..10).map(move |i| format!("t{w}-{i}")))
            .collect();
        expected.push("base".into());
        expected.sort();
        assert_eq!(ring.tenants().collect::<Vec<_>>(), expected);
        // Twenty rotations, each with its own id, all in the file.
        rotated.push("k1".into());
        rotated.sort();
        let mut ids: Vec<&str> = ring.key_ids("base");
        ids.sort();
        assert_eq!(ids.len(), 21);
        assert_eq!(ids, rotated);
    }

    #[test]
    fn racing_to_create_one_tenant_ends_with_one_key_for_all() {
        for _ in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("keys.json");
            let barrier = Arc::new(Barrier::new(8));
            let racers: Vec<_> = (0..8)
                .map(|_| {
                    let (path, barrier) = (path.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        let ensured = KeyFile::new(path)
                            .ensure_tenants(&tenants(&["acme"]), MissingKeys::Generate)
                            .unwrap();
                        let token = ensured.keys.token("acme", "PERSON", "Ana").unwrap();
                        (token, ensured.generated.len())
                    })
                })
                .collect();
            let results: Vec<(String, usize)> =
                racers.into_iter().map(|r| r.join().unwrap()).collect();
            let on_disk = KeyFile::new(&path)
                .load()
                .unwrap()
                .token("acme", "PERSON", "Ana")
                .unwrap();
            // Every racer uses the key that is in the file, and exactly one generated it.
            assert!(
                results.iter().all(|(token, _)| *token == on_disk),
                "{results:?}"
            );
            assert_eq!(results.iter().map(|(_, n)| n).sum::<usize>(), 1);
        }
    }

    #[test]
    fn a_tenant_without_keys_is_refused_by_name_unless_generation_is_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let file = KeyFile::new(&path);
        file.ensure_tenants(&tenants(&["acme"]), MissingKeys::Generate)
            .unwrap();
        let before = std::fs::read(&path).unwrap();
        let error = file
            .ensure_tenants(
                &tenants(&["initech", "acme", "globex"]),
                MissingKeys::Refuse,
            )
            .unwrap_err();
        match &error {
            Error::MissingKeys {
                path: named,
                tenants,
            } => {
                assert_eq!(named, &path);
                assert_eq!(tenants, &["globex", "initech"]);
            }
            other => panic!("{other:?}"),
        }
        let message = error.to_string();
        for needle in [
            "\"globex\", \"initech\"",
            "atdp-policy keygen --out",
            "--tenant globex --tenant initech",
            "--generate-keys",
        ] {
            assert!(message.contains(needle), "{needle} not in {message}");
        }
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "refusing writes nothing"
        );
        // Tenants that all have keys need no generation.
        let ensured = file
            .ensure_tenants(&tenants(&["acme"]), MissingKeys::Refuse)
            .unwrap();
        assert!(ensured.generated.is_empty() && ensured.keys.has_tenant("acme"));
        // No file at all: every tenant is named, and no file is created.
        let absent = dir.path().join("absent.json");
        let error = KeyFile::new(&absent)
            .ensure_tenants(&tenants(&["acme"]), MissingKeys::Refuse)
            .unwrap_err();
        assert!(
            matches!(&error, Error::MissingKeys { tenants, .. } if tenants == &["acme"]),
            "{error:?}"
        );
        assert!(!absent.exists());
        let empty = KeyFile::new(&absent)
            .ensure_tenants(&[], MissingKeys::Refuse)
            .unwrap();
        assert_eq!(empty.keys.tenants().count(), 0);
        assert!(!absent.exists());
    }

    #[test]
    fn updates_need_the_file_and_write_only_what_changed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let file = KeyFile::new(&path);
        let error = file.update(|ring| ring.rotate("acme")).unwrap_err();
        assert!(error.to_string().contains("does not exist"), "{error}");
        assert!(!path.exists() && !file.lock_path().exists());
        file.ensure_tenants(&tenants(&["acme"]), MissingKeys::Generate)
            .unwrap();
        let before = std::fs::read(&path).unwrap();
        // A failed change writes nothing.
        let failed = file.update(|ring| ring.rotate("nobody"));
        assert!(matches!(failed, Err(Error::UnknownTenant(_))), "{failed:?}");
        assert_eq!(std::fs::read(&path).unwrap(), before);
        // A change that changes nothing leaves the very same file.
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let inode = std::fs::metadata(&path).unwrap().ino();
            assert!(!file.update(|ring| Ok(ring.erase_tenant("nobody"))).unwrap());
            assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode);
        }
        assert_eq!(file.update(|ring| ring.rotate("acme")).unwrap(), "k2");
        assert_eq!(file.load().unwrap().current_key_id("acme"), Some("k2"));
    }

    #[cfg(unix)]
    #[test]
    fn a_leftover_temporary_file_breaks_neither_reading_nor_writing() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let file = KeyFile::new(&path);
        let token = |ring: &KeyRing| ring.token("acme", "PERSON", "Ana").unwrap();
        let first = file
            .ensure_tenants(&tenants(&["acme"]), MissingKeys::Generate)
            .unwrap();
        // A writer died after starting its temporary file: half a file, readable by all.
        let leftover = dir.path().join("keys.json.tmp");
        std::fs::write(&leftover, b"{\"tenants\": {\"acme\": {\"cur").unwrap();
        std::fs::set_permissions(&leftover, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(token(&file.load().unwrap()), token(&first.keys));
        let second = file
            .ensure_tenants(&tenants(&["acme", "globex"]), MissingKeys::Generate)
            .unwrap();
        assert_eq!(second.generated, ["globex"]);
        assert_eq!(token(&second.keys), token(&first.keys));
        assert_eq!(mode(&path), 0o600);
        assert!(!leftover.exists());
        let ring = file.load().unwrap();
        assert!(ring.has_tenant("acme") && ring.has_tenant("globex"));
    }

    #[cfg(unix)]
    #[test]
    fn every_write_leaves_the_key_file_and_its_lock_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let file = KeyFile::new(&path);
        file.ensure_tenants(&tenants(&["acme"]), MissingKeys::Generate)
            .unwrap();
        assert_eq!(mode(&path), 0o600);
        // Someone copied the file in readable by all: the next write makes it owner-only.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        file.update(|ring| ring.rotate("acme")).unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir.path().join("keys.json.lock")), 0o600);
    }
}
