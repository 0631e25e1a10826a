//! TLS from the gateway to upstream endpoints (Gateway API BackendTLSPolicy): the SNI and
//! ALPN sent, and a certificate check against the policy's CA (or the system's roots)
//! and its name, or the subject alternative names it lists instead. Or, for ingress-nginx's
//! `backend-protocol: HTTPS`, encryption without a certificate check or SNI, as it does.

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, Error, RootCertStore, SignatureScheme};
use tokio_rustls::TlsConnector;
use wharf_model::identity::uri_sans;
use wharf_model::{AppProtocol, SubjectAltName, UpstreamTls};

use super::BoxIo;

/// A cluster's TLS client settings, built once per distinct [`UpstreamTls`].
#[derive(Clone)]
pub struct UpstreamTlsConfig {
    connector: TlsConnector,
    server_name: ServerName<'static>,
}

impl std::fmt::Debug for UpstreamTlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamTlsConfig").field("server_name", &self.server_name).finish_non_exhaustive()
    }
}

impl UpstreamTlsConfig {
    /// The client config for `tls`, offering the ALPN protocol of `protocol` (`http/1.1`,
    /// or `h2` for clusters spoken to over HTTP/2). A server name that is not a DNS name
    /// or an address, or a CA bundle without a certificate, is refused.
    pub fn new(tls: &UpstreamTls, protocol: AppProtocol) -> Result<UpstreamTlsConfig, String> {
        let server_name = ServerName::try_from(tls.server_name.clone())
            .map_err(|_| format!("{:?} is not a server name", tls.server_name))?;
        let mut anchors = Vec::new();
        let roots = match &tls.ca_pem {
            _ if tls.unverified => Arc::new(RootCertStore::empty()),
            Some(pem) => {
                let mut roots = RootCertStore::empty();
                for der in CertificateDer::pem_slice_iter(pem.as_bytes()).flatten() {
                    roots.add(der.clone()).map_err(|e| format!("CA certificate refused: {e}"))?;
                    anchors.push(der);
                }
                if roots.is_empty() {
                    return Err("the CA bundle holds no certificate".into());
                }
                Arc::new(roots)
            }
            None => system_roots(),
        };
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier = Verifier {
            roots,
            subject_alt_names: tls.subject_alt_names.clone(),
            provider: Arc::clone(&provider),
            check: !tls.unverified,
            depth: tls.verify_depth,
            anchors,
        };
        let mut cfg = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        cfg.alpn_protocols = match protocol {
            AppProtocol::Http1 => vec![b"http/1.1".to_vec()],
            AppProtocol::H2c => vec![b"h2".to_vec()],
        };
        cfg.enable_sni = !tls.unverified && !tls.no_sni;
        Ok(UpstreamTlsConfig { connector: TlsConnector::from(Arc::new(cfg)), server_name })
    }

    /// Runs the handshake over `io`.
    pub async fn connect(&self, io: BoxIo) -> std::io::Result<tokio_rustls::client::TlsStream<BoxIo>> {
        self.connector.connect(self.server_name.clone(), io).await
    }
}

/// The system's trust store (`/etc/ssl/certs` and the like), read once.
fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    Arc::clone(ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::warn!(error = %e, "reading the system's CA certificates");
        }
        let mut roots = RootCertStore::empty();
        let (added, ignored) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            tracing::warn!("no system CA certificates found: TLS to backends validated against the system's roots (wellKnownCACertificates: System) fails");
        }
        tracing::debug!(added, ignored, "system CA certificates loaded");
        Arc::new(roots)
    }))
}

/// Chain to `roots`, then the server name, or one of `subject_alt_names` when given;
/// nothing when `check` is off (the handshake's signatures are verified either way).
#[derive(Debug)]
struct Verifier {
    roots: Arc<RootCertStore>,
    subject_alt_names: Vec<SubjectAltName>,
    provider: Arc<CryptoProvider>,
    check: bool,
    /// At most this many certificates above the backend's, the CA included: the chain is
    /// built from the first `depth - 1` the backend sends, copies of `anchors` left out.
    depth: Option<u8>,
    anchors: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        if !self.check {
            return Ok(ServerCertVerified::assertion());
        }
        let limited: Vec<CertificateDer<'_>>;
        let intermediates = match self.depth {
            None => intermediates,
            Some(depth) => {
                limited = crate::tls::within_depth(intermediates, &self.anchors, depth);
                &limited
            }
        };
        let parsed = crate::tls::chain_to(end_entity, intermediates, &self.roots, now, &self.provider)?;
        if self.subject_alt_names.is_empty() {
            rustls::client::verify_server_name(&parsed, server_name)?;
            return Ok(ServerCertVerified::assertion());
        }
        let uris = uri_sans(end_entity.as_ref());
        let matches = |san: &SubjectAltName| match san {
            SubjectAltName::Dns(name) => ServerName::try_from(name.as_str())
                .is_ok_and(|n| rustls::client::verify_server_name(&parsed, &n).is_ok()),
            SubjectAltName::Uri(uri) => uris.iter().any(|u| u == uri),
        };
        if self.subject_alt_names.iter().any(matches) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(Error::General(format!(
                "the backend's certificate has none of the subject alternative names {:?}",
                self.subject_alt_names
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}
