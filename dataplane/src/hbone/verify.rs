//! SPIFFE verification: peers are checked by chain to the mesh roots and by URI SAN,
//! never by DNS or IP names.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, Error, RootCertStore, SignatureScheme};
use wharf_model::identity::uri_sans;
use wharf_model::Identity;

/// Verifies an HBONE server: chain to the mesh roots, exactly the expected identity.
#[derive(Debug)]
pub(crate) struct PeerVerifier {
    pub(crate) roots: Arc<RootCertStore>,
    pub(crate) expected: Identity,
    pub(crate) provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PeerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        crate::tls::chain_to(end_entity, intermediates, &self.roots, now, &self.provider)?;
        let want = self.expected.to_string();
        let sans = uri_sans(end_entity.as_ref());
        if sans.contains(&want) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(Error::General(format!("peer presented {sans:?}, expected {want}")))
        }
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        Err(Error::General("HBONE requires TLS 1.3".into()))
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

/// Verifies an HBONE client: chain to the mesh roots (client-auth usage), and a SPIFFE
/// identity in our trust domain.
#[derive(Debug)]
pub(crate) struct TrustDomainVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    trust_domain: String,
}

impl TrustDomainVerifier {
    pub(crate) fn new(inner: Arc<dyn ClientCertVerifier>, trust_domain: &str) -> Self {
        TrustDomainVerifier { inner, trust_domain: trust_domain.to_owned() }
    }
}

impl ClientCertVerifier for TrustDomainVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        self.inner.verify_client_cert(end_entity, intermediates, now)?;
        let sans = uri_sans(end_entity.as_ref());
        match sans.iter().find_map(|u| Identity::parse(u).ok()) {
            Some(id) if id.trust_domain == self.trust_domain => Ok(ClientCertVerified::assertion()),
            Some(id) => {
                Err(Error::General(format!("client identity {id} is not in trust domain {}", self.trust_domain)))
            }
            None => Err(Error::General(format!("client certificate has no SPIFFE identity (URI SANs {sans:?})"))),
        }
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(m, c, d)
    }

    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(m, c, d)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Presents one certificate, as client or server.
#[derive(Debug)]
pub(crate) struct CurrentKey(pub(crate) Arc<CertifiedKey>);

impl rustls::client::ResolvesClientCert for CurrentKey {
    fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }

    fn has_certs(&self) -> bool {
        true
    }
}

impl rustls::server::ResolvesServerCert for CurrentKey {
    fn resolve(&self, _: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }
}
