//! TLS termination: the certificate is chosen by SNI (exact, then wildcards, then default)
//! from maps built when a snapshot is compiled.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, StoresServerSessions};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

use crate::host_map::{HostMap, HostMatch};
use crate::metrics::{Metrics, SniMatch};

/// Certificates by SNI, immutable once built.
#[derive(Debug)]
pub struct SniResolver {
    certs: HostMap<Arc<CertifiedKey>>,
    default: Arc<CertifiedKey>,
    metrics: Metrics,
}

impl SniResolver {
    /// A resolver serving `default` when nothing else matches.
    pub fn new(default: Arc<CertifiedKey>, metrics: Metrics) -> Self {
        SniResolver { certs: HostMap::default(), default, metrics }
    }

    /// A resolver serving what this one serves, and `default` when nothing else matches:
    /// the next config's, to be patched with [`SniResolver::add`] and
    /// [`SniResolver::remove`]. Shares every entry with this one.
    pub fn patched(&self, default: Arc<CertifiedKey>) -> Self {
        SniResolver { certs: self.certs.clone(), default, metrics: self.metrics.clone() }
    }

    /// No longer serves a certificate of its own for `host`.
    pub fn remove(&mut self, host: &wharf_model::Host) {
        self.certs.remove(host);
    }

    /// Serves `cert` for the names `host` covers (`Host::Any`: every name, in place of
    /// the default).
    pub fn add(&mut self, host: &wharf_model::Host, cert: Arc<CertifiedKey>) {
        self.certs.insert(host, cert);
    }

    /// The certificate for an SNI value (or none), and how it matched.
    pub fn select(&self, sni: Option<&str>) -> (&Arc<CertifiedKey>, SniMatch) {
        if let Some(name) = sni {
            // rustls hands us the SNI already validated as a DNS name; compare lower-case.
            let lower;
            let name = if name.bytes().any(|b| b.is_ascii_uppercase()) {
                lower = name.to_ascii_lowercase();
                lower.as_str()
            } else {
                name
            };
            match self.certs.get(name) {
                Some((c, HostMatch::Exact)) => return (c, SniMatch::Exact),
                Some((c, HostMatch::Wildcard)) => return (c, SniMatch::Wildcard),
                Some((c, HostMatch::Any)) => return (c, SniMatch::Default),
                None => {}
            }
        }
        (&self.default, SniMatch::Default)
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let (cert, kind) = self.select(hello.server_name());
        self.metrics.sni_match(kind);
        Some(Arc::clone(cert))
    }
}

/// Session state shared by every compiled config, so resumption survives config swaps.
#[derive(Debug, Clone)]
pub struct Resumption {
    cache: Arc<dyn StoresServerSessions>,
    ticketer: Arc<dyn rustls::server::ProducesTickets>,
}

impl Resumption {
    /// A session cache of `capacity` entries and a rotating ticket key.
    pub fn new(capacity: usize) -> Result<Resumption, rustls::Error> {
        Ok(Resumption {
            cache: Arc::new(crate::sessions::SessionCache::new(capacity)),
            ticketer: rustls::crypto::aws_lc_rs::Ticketer::new()?,
        })
    }
}

/// The TLS versions and cipher suites clients of the edge listeners may use (ingress-nginx's
/// `ssl-protocols` and `ssl-ciphers`).
#[derive(Debug, Clone, Default)]
pub struct TlsPolicy {
    /// TLS 1.3 only; else 1.2 and 1.3.
    pub tls13_only: bool,
    /// The cipher suites, when not rustls's defaults (every suite it has: AEAD only).
    pub cipher_suites: Option<Vec<rustls::SupportedCipherSuite>>,
}

impl TlsPolicy {
    fn provider(&self) -> Arc<rustls::crypto::CryptoProvider> {
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        if let Some(suites) = &self.cipher_suites {
            provider.cipher_suites.clone_from(suites);
        }
        Arc::new(provider)
    }

    fn versions(&self) -> &'static [&'static rustls::SupportedProtocolVersion] {
        static TLS13: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
        static BOTH: [&rustls::SupportedProtocolVersion; 2] = [&rustls::version::TLS13, &rustls::version::TLS12];
        match self.tls13_only {
            true => &TLS13,
            false => &BOTH,
        }
    }
}

pub use wharf_model::tls::cipher_suites;

/// A server config builder for `policy`'s versions and suites.
pub(crate) fn builder(
    policy: &TlsPolicy,
) -> Result<rustls::ConfigBuilder<ServerConfig, rustls::WantsVerifier>, rustls::Error> {
    ServerConfig::builder_with_provider(policy.provider()).with_protocol_versions(policy.versions())
}

/// The HTTPS listener's rustls config: `policy`'s TLS versions and suites, ALPN h2 and
/// http/1.1, resumption.
pub fn server_config(
    resolver: Arc<SniResolver>,
    resumption: &Resumption,
    policy: &TlsPolicy,
) -> Result<Arc<ServerConfig>, rustls::Error> {
    let mut cfg = builder(policy)?.with_no_client_auth().with_cert_resolver(resolver);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    cfg.session_storage = Arc::clone(&resumption.cache);
    cfg.ticketer = Arc::clone(&resumption.ticketer);
    Ok(Arc::new(cfg))
}

/// The rustls config of HTTPS hosts that ask for a client certificate chaining to `ca`:
/// like [`server_config`], the certificate optional at the handshake (a route that
/// requires one answers 400 without it, as nginx does) but checked when presented. Its
/// sessions are not resumed, so every connection presents its certificate.
pub fn client_auth_config(
    resolver: Arc<SniResolver>,
    ca: &wharf_model::ClientCa,
    policy: &TlsPolicy,
) -> Result<Arc<ServerConfig>, rustls::Error> {
    let provider = policy.provider();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(ca.certificates.iter().cloned());
    if added == 0 {
        return Err(rustls::Error::General(format!("no usable CA certificate in {}", ca.source)));
    }
    let inner = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
        .allow_unauthenticated()
        .build()
        .map_err(|e| rustls::Error::General(e.to_string()))?;
    let verifier = Arc::new(DepthLimited { inner, anchors: Arc::clone(&ca.certificates), depth: ca.verify_depth });
    let mut cfg = builder(policy)?.with_client_cert_verifier(verifier).with_cert_resolver(resolver);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    cfg.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    cfg.send_tls13_tickets = 0;
    Ok(Arc::new(cfg))
}

/// A client certificate verifier that builds chains of at most `depth` certificates
/// above the client's, the CA included (nginx's `ssl_verify_depth`): the chain is built
/// from the first `depth - 1` certificates the client sent after its own, leaving out
/// copies of the CA certificates themselves. A client that sends its chain in order
/// (its issuer first, as TLS asks) is judged as nginx judges it.
#[derive(Debug)]
struct DepthLimited {
    inner: Arc<dyn ClientCertVerifier>,
    anchors: Arc<[CertificateDer<'static>]>,
    depth: u8,
}

/// The certificates a chain of at most `depth` certificates above the peer's (the CA
/// included) may be built from: the first `depth - 1` that the peer sent, copies of the
/// trust `anchors` left out.
pub(crate) fn within_depth<'c>(
    sent: &[CertificateDer<'c>],
    anchors: &[CertificateDer<'_>],
    depth: u8,
) -> Vec<CertificateDer<'c>> {
    let limit = usize::from(depth.saturating_sub(1));
    sent.iter().filter(|c| !anchors.contains(c)).take(limit).cloned().collect()
}

impl ClientCertVerifier for DepthLimited {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.inner.verify_client_cert(end_entity, &within_depth(intermediates, &self.anchors, self.depth), now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The rustls config of TLS listeners that terminate TLS and relay the plain bytes:
/// like [`server_config`] without ALPN (what runs inside is not HTTP).
pub fn stream_config(
    resolver: Arc<SniResolver>,
    resumption: &Resumption,
    policy: &TlsPolicy,
) -> Result<Arc<ServerConfig>, rustls::Error> {
    let mut cfg = Arc::unwrap_or_clone(server_config(resolver, resumption, policy)?);
    cfg.alpn_protocols.clear();
    Ok(Arc::new(cfg))
}

/// Parses a server's certificate and checks that it chains to `roots` (server-auth
/// usage, at `now`). The names it must carry are the caller's to check.
pub(crate) fn chain_to<'a>(
    end_entity: &'a rustls::pki_types::CertificateDer<'a>,
    intermediates: &[rustls::pki_types::CertificateDer<'_>],
    roots: &rustls::RootCertStore,
    now: rustls::pki_types::UnixTime,
    provider: &rustls::crypto::CryptoProvider,
) -> Result<rustls::server::ParsedCertificate<'a>, rustls::Error> {
    let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
    rustls::client::verify_server_cert_signed_by_trust_anchor(
        &parsed,
        roots,
        intermediates,
        now,
        provider.signature_verification_algorithms.all,
    )?;
    Ok(parsed)
}

/// A self-signed certificate served when no default certificate is configured, so clients
/// without SNI or with unknown names get a handshake (and a 404) instead of a reset.
pub fn fallback_certificate() -> Result<Arc<CertifiedKey>, String> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| e.to_string())?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    params.distinguished_name.push(rcgen::DnType::CommonName, "Wharf default certificate");
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    let loaded =
        wharf_model::tls::load(cert.pem().as_bytes(), key.serialize_pem().as_bytes(), 0).map_err(|e| e.to_string())?;
    Ok(loaded.certified_key)
}

#[cfg(test)]
mod policy_tests {
    use super::*;

    #[test]
    fn a_policy_offers_its_versions_and_suites() {
        let policy = TlsPolicy { tls13_only: true, cipher_suites: cipher_suites("ECDHE-ECDSA-AES256-GCM-SHA384").ok() };
        assert_eq!(policy.versions().len(), 1);
        assert_eq!(TlsPolicy::default().versions().len(), 2);
        assert_eq!(policy.provider().cipher_suites.len(), 4);
        let all = rustls::crypto::aws_lc_rs::default_provider().cipher_suites.len();
        assert_eq!(TlsPolicy::default().provider().cipher_suites.len(), all);
    }
}
