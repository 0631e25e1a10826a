//! The gateway's mesh identity: a SPIFFE certificate, its key and the mesh roots, from PEM
//! files reloaded on change. Open tunnels keep the certificate they started with.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::server::danger::ClientCertVerifier;
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use wharf_model::identity::uri_sans;
use wharf_model::tls::CertError;
use wharf_model::Identity;

use super::verify::{CurrentKey, TrustDomainVerifier};

/// Why mesh certificates cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum MeshCertError {
    /// The certificate or key is bad.
    #[error("mesh certificate: {0}")]
    Cert(#[from] CertError),
    /// The roots file holds no certificate.
    #[error("the mesh roots file holds no PEM certificate")]
    NoRoots,
    /// A root is unusable.
    #[error("mesh root refused: {0}")]
    BadRoot(String),
    /// The certificate does not chain to the mesh roots.
    #[error("the mesh certificate does not chain to the mesh roots: {0} (were the roots and the certificate issued by the same mesh CA?)")]
    Untrusted(String),
    /// The certificate is for another workload than the one configured.
    #[error("the mesh certificate is for {found}, but this gateway's identity is {want}")]
    WrongIdentity {
        /// In the certificate.
        found: String,
        /// Configured.
        want: String,
    },
    /// The leaf has no SPIFFE URI SAN of the Istio shape.
    #[error("the mesh certificate has no URI SAN spiffe://<trust-domain>/ns/<ns>/sa/<sa> (it has {0:?})")]
    NoSpiffeId(Vec<String>),
    /// The identity is in another trust domain.
    #[error("the mesh certificate is for trust domain {found:?}, but the configured trust domain is {want:?}")]
    TrustDomain {
        /// In the certificate.
        found: String,
        /// Configured.
        want: String,
    },
    /// rustls refused the configuration.
    #[error("TLS setup: {0}")]
    Tls(String),
    /// A file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// A loaded, validated identity.
#[derive(Debug)]
pub struct MeshCerts {
    /// Our SPIFFE identity.
    pub identity: Identity,
    /// Chain and key.
    pub key: Arc<CertifiedKey>,
    /// The mesh roots.
    pub roots: Arc<RootCertStore>,
    /// Leaf expiry, Unix seconds.
    pub not_after: i64,
    /// Inbound (east-west) TLS config: our certificate, client certificates required from
    /// the trust domain.
    pub(crate) server_config: Arc<ServerConfig>,
    // The PEM it was built from, so that new roots can be applied to the same key.
    chain_pem: Vec<u8>,
    key_pem: Vec<u8>,
}

/// TLS 1.3 only, AES-GCM only: what ztunnel accepts.
pub(crate) fn mesh_provider() -> Arc<CryptoProvider> {
    use rustls::crypto::aws_lc_rs::cipher_suite::{TLS13_AES_128_GCM_SHA256, TLS13_AES_256_GCM_SHA384};
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    p.cipher_suites = vec![TLS13_AES_256_GCM_SHA384, TLS13_AES_128_GCM_SHA256];
    Arc::new(p)
}

impl MeshCerts {
    /// Validates a PEM chain, key and roots for `trust_domain`.
    pub fn from_pem(
        chain: &[u8],
        key: &[u8],
        roots_pem: &[u8],
        trust_domain: &str,
        now: i64,
    ) -> Result<MeshCerts, MeshCertError> {
        let loaded = wharf_model::tls::load(chain, key, now)?;
        let leaf = loaded.certified_key.cert.first().ok_or(CertError::NoCertificate)?;
        let sans = uri_sans(leaf.as_ref());
        let identity =
            sans.iter().find_map(|u| Identity::parse(u).ok()).ok_or_else(|| MeshCertError::NoSpiffeId(sans.clone()))?;
        if identity.trust_domain != trust_domain {
            return Err(MeshCertError::TrustDomain { found: identity.trust_domain, want: trust_domain.to_owned() });
        }
        let mut roots = RootCertStore::empty();
        for der in CertificateDer::pem_slice_iter(roots_pem) {
            let der = der.map_err(|e| MeshCertError::BadRoot(e.to_string()))?;
            roots.add(der).map_err(|e| MeshCertError::BadRoot(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(MeshCertError::NoRoots);
        }
        let roots = Arc::new(roots);
        let provider = mesh_provider();
        let inner =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::clone(&roots), Arc::clone(&provider))
                .build()
                .map_err(|e| MeshCertError::Tls(e.to_string()))?;
        // Our certificate is presented to peers that trust these roots (and used as a
        // client certificate): one that does not chain would fail every tunnel.
        let at = rustls::pki_types::UnixTime::since_unix_epoch(std::time::Duration::from_secs(now.max(0) as u64));
        inner
            .verify_client_cert(leaf, &loaded.certified_key.cert[1..], at)
            .map_err(|e| MeshCertError::Untrusted(e.to_string()))?;
        let verifier: Arc<dyn ClientCertVerifier> = Arc::new(TrustDomainVerifier::new(inner, trust_domain));
        let mut server = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| MeshCertError::Tls(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(Arc::new(CurrentKey(Arc::clone(&loaded.certified_key))));
        server.alpn_protocols = vec![b"h2".to_vec()];
        Ok(MeshCerts {
            identity,
            key: loaded.certified_key,
            roots,
            not_after: loaded.info.not_after,
            server_config: Arc::new(server),
            chain_pem: chain.to_vec(),
            key_pem: key.to_vec(),
        })
    }

    /// The same certificate and key with new mesh roots (the CA's roots rotated); refused
    /// if the certificate does not chain to them.
    pub fn with_roots(&self, roots_pem: &[u8], now: i64) -> Result<MeshCerts, MeshCertError> {
        MeshCerts::from_pem(&self.chain_pem, &self.key_pem, roots_pem, &self.identity.trust_domain, now)
    }

    /// The PEM certificate chain, leaf first.
    pub fn chain_pem(&self) -> &[u8] {
        &self.chain_pem
    }

    /// The PEM private key.
    pub fn key_pem(&self) -> &[u8] {
        &self.key_pem
    }

    /// Refuses a certificate for another workload than `want`.
    pub fn expect_identity(self, want: &Identity) -> Result<MeshCerts, MeshCertError> {
        if &self.identity == want {
            Ok(self)
        } else {
            Err(MeshCertError::WrongIdentity { found: self.identity.to_string(), want: want.to_string() })
        }
    }
}

/// The current mesh identity, swapped whole on rotation.
#[derive(Debug)]
pub struct MeshIdentity {
    current: ArcSwapOption<MeshCerts>,
    /// The trust domain every peer must belong to.
    pub trust_domain: String,
}

impl MeshIdentity {
    /// No certificate yet.
    pub fn new(trust_domain: &str) -> MeshIdentity {
        MeshIdentity { current: ArcSwapOption::empty(), trust_domain: trust_domain.to_owned() }
    }

    /// The current certificates, if any.
    pub fn load(&self) -> Option<Arc<MeshCerts>> {
        self.current.load_full()
    }

    /// Rotates to `certs`; open tunnels keep theirs.
    pub fn set(&self, certs: MeshCerts) {
        tracing::info!(identity = %certs.identity, not_after = certs.not_after, "mesh identity loaded");
        self.current.store(Some(Arc::new(certs)));
    }
}

/// PEM files holding the mesh identity (cert-manager istio-csr, SPIRE, a plugged-in CA).
#[derive(Debug, Clone)]
pub struct MeshFiles {
    /// Certificate chain, leaf first.
    pub cert: PathBuf,
    /// Private key.
    pub key: PathBuf,
    /// Mesh root certificates.
    pub roots: PathBuf,
}

impl MeshFiles {
    /// Reads and validates the files.
    pub fn load(&self, trust_domain: &str) -> Result<MeshCerts, MeshCertError> {
        let read = |p: &PathBuf| std::fs::read(p).map_err(|source| MeshCertError::Read { path: p.clone(), source });
        let now = wharf_model::tls::unix_seconds(SystemTime::now());
        MeshCerts::from_pem(&read(&self.cert)?, &read(&self.key)?, &read(&self.roots)?, trust_domain, now)
    }

    fn stamp(&self) -> Vec<Option<(SystemTime, u64)>> {
        [&self.cert, &self.key, &self.roots]
            .iter()
            .map(|p| std::fs::metadata(p).ok().and_then(|m| Some((m.modified().ok()?, m.len()))))
            .collect()
    }

    /// Reloads `identity` whenever the files change; a bad set is logged and the current
    /// identity kept.
    pub async fn watch(self, identity: Arc<MeshIdentity>, every: Duration) {
        let mut last = self.stamp();
        loop {
            tokio::time::sleep(every).await;
            let now = self.stamp();
            if now == last {
                continue;
            }
            last = now;
            match self.load(&identity.trust_domain) {
                Ok(certs) => identity.set(certs),
                Err(e) => {
                    tracing::error!(error = %e, "mesh identity not reloaded; the current one keeps serving")
                }
            }
        }
    }
}
