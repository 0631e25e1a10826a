//! ACME in standalone mode (`wharf run --acme-dir DIR`): accounts in `DIR/accounts/`,
//! certificates and challenges as Secret manifests in `DIR/secrets/`, which `wharf run`
//! reads with its other files.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Secret;

use super::plan::{self, Answer};
use super::{SaveError, Store, StoreError};
use crate::translate::acme::Demand;

/// The namespace standalone mode's challenge Secrets are written in and read from.
pub const CHALLENGE_NAMESPACE: &str = "wharf-acme";

/// A directory.
#[derive(Debug, Clone)]
pub struct DirStore {
    root: PathBuf,
}

impl DirStore {
    /// The store under `root` (created when missing).
    pub fn new(root: PathBuf) -> std::io::Result<DirStore> {
        for sub in ["accounts", "secrets"] {
            std::fs::create_dir_all(root.join(sub))?;
        }
        Ok(DirStore { root })
    }

    /// The directory `wharf run` reads the Secrets from.
    pub fn secrets_dir(&self) -> PathBuf {
        self.root.join("secrets")
    }

    fn certificate_path(&self, demand: &Demand) -> PathBuf {
        self.secrets_dir().join(format!("certificate.{}.{}.yaml", demand.secret.0, demand.secret.1))
    }

    fn challenge_path(&self, demand: &Demand) -> PathBuf {
        self.secrets_dir().join(format!("challenge.{}.{}.yaml", demand.secret.0, demand.secret.1))
    }
}

/// Writes `contents` to `path` through a temporary file and a rename, readable by the owner
/// only, so that a reader never sees half a file.
fn write_atomically(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    f.write_all(contents)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

fn manifest(secret: &Secret) -> Result<String, StoreError> {
    serde_yaml::to_string(secret).map_err(|source| StoreError::Manifest {
        object: format!(
            "Secret {}/{}",
            secret.metadata.namespace.as_deref().unwrap_or_default(),
            secret.metadata.name.as_deref().unwrap_or_default()
        ),
        source,
    })
}

/// The error of `source` on `path`.
fn file(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::File { path: path.to_path_buf(), source }
}

impl Store for DirStore {
    async fn account(&self, issuer: &str) -> Result<Option<String>, StoreError> {
        let path = self.root.join("accounts").join(format!("{issuer}.json"));
        match std::fs::read_to_string(&path) {
            Ok(json) => Ok(Some(json)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(file(&path)(e)),
        }
    }

    async fn save_account(&self, issuer: &str, json: &str) -> Result<(), StoreError> {
        let path = self.root.join("accounts").join(format!("{issuer}.json"));
        write_atomically(&path, json.as_bytes()).map_err(file(&path))
    }

    async fn publish(&self, demand: &Demand, answers: &[Answer]) -> Result<(), StoreError> {
        let name = format!("challenge-{:016x}", plan::seed(&demand.secret.0, &demand.secret.1));
        let secret = plan::challenge_secret(CHALLENGE_NAMESPACE, &name, "standalone", answers);
        let path = self.challenge_path(demand);
        write_atomically(&path, manifest(&secret)?.as_bytes()).map_err(file(&path))
    }

    async fn withdraw(&self, demand: &Demand) -> Result<(), StoreError> {
        let path = self.challenge_path(demand);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(file(&path)(e)),
        }
    }

    async fn withdraw_all(&self) -> Result<usize, StoreError> {
        let dir = self.secrets_dir();
        let entries = std::fs::read_dir(&dir).map_err(file(&dir))?;
        let mut n = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("challenge.") && name.ends_with(".yaml") {
                let path = entry.path();
                std::fs::remove_file(&path).map_err(file(&path))?;
                n += 1;
            }
        }
        Ok(n)
    }

    async fn save_certificate(&self, demand: &Demand, chain_pem: &str, key_pem: &str) -> Result<(), SaveError> {
        let (namespace, name) = &demand.secret;
        let secret = plan::certificate_secret(namespace, name, &demand.issuer, chain_pem, key_pem);
        let path = self.certificate_path(demand);
        let text = manifest(&secret)?;
        Ok(write_atomically(&path, text.as_bytes()).map_err(file(&path))?)
    }
}
