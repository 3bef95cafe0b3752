//! TLS towards agents: the listener's certificate and key, loaded at start and again on each
//! SIGHUP. A reload swaps the certificate that new handshakes get; connections already open
//! keep theirs, so nothing is dropped. A reload that fails (a missing file, a key that does
//! not match the certificate) keeps the certificate in force and says why.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use pingora::tls::sign::CertifiedKey;
use pingora::tls::{ClientHello, CryptoProvider, ResolvesServerCert};

use crate::error::{Error, Result};

/// The certificate chain and key files of the listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, the server's certificate first.
    pub cert: PathBuf,
    /// PEM private key (PKCS #8, PKCS #1 or SEC1).
    pub key: PathBuf,
}

/// The certificate in force, for every new handshake.
#[derive(Debug)]
pub struct Certificates {
    files: TlsFiles,
    current: RwLock<Arc<CertifiedKey>>,
}

impl Certificates {
    /// Loads `files`; an error says which file and why.
    pub fn load(files: TlsFiles) -> Result<Arc<Certificates>> {
        let current = RwLock::new(Arc::new(certified_key(&files)?));
        Ok(Arc::new(Certificates { files, current }))
    }

    /// Loads the files again and, when they are valid, serves them from the next handshake.
    pub fn reload(&self) -> Result<()> {
        let fresh = Arc::new(certified_key(&self.files)?);
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(())
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        )
    }
}

fn certified_key(files: &TlsFiles) -> Result<CertifiedKey> {
    let bad =
        |what: &Path, why: String| Error::Config(format!("TLS file {}: {why}", what.display()));
    for file in [&files.cert, &files.key] {
        if let Err(error) = std::fs::metadata(file) {
            return Err(bad(file, format!("cannot be read ({error})")));
        }
    }
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let (certs, key) =
        match pingora::tls::load_certs_and_key_files(&path(&files.cert), &path(&files.key)) {
            Ok(Some((certs, key))) if !certs.is_empty() => (certs, key),
            Ok(_) => {
                return Err(bad(
                    &files.cert,
                    format!(
                        "no certificate in it, or no private key in {} (PKCS #8, PKCS #1 or \
                         SEC1; an encrypted key is not read: decrypt it with `openssl pkey`)",
                        files.key.display()
                    ),
                ));
            }
            Err(error) => return Err(bad(&files.cert, error.to_string())),
        };
    pingora::tls::install_default_crypto_provider();
    let provider = CryptoProvider::get_default()
        .ok_or_else(|| bad(&files.key, "no TLS crypto provider".into()))?;
    CertifiedKey::from_der(
        certs.into_iter().map(|c| c.into_owned()).collect(),
        key.clone_key(),
        provider,
    )
    .map_err(|e| bad(&files.key, format!("does not fit the certificate ({e})")))
}
