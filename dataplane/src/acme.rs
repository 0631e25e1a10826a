//! Answers to ACME challenges: HTTP-01 (RFC 8555 §8.3) on the HTTP listeners, TLS-ALPN-01
//! (RFC 8737) on the HTTPS listeners. Every replica answers, from its snapshot, because the
//! validation request may reach any of them.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use wharf_model::AcmeChallenges;

use crate::tls::TlsPolicy;

/// The ALPN protocol of TLS-ALPN-01 validation handshakes.
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// The path prefix of HTTP-01 challenges.
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";

/// The challenges of a snapshot, ready to answer.
#[derive(Debug, Default)]
pub struct AcmeAnswers {
    /// Token -> key authorization.
    http01: HashMap<String, Bytes>,
    /// DNS name (lower-case) -> a config serving that name's challenge certificate with
    /// ALPN `acme-tls/1` only.
    tls_alpn01: HashMap<String, Arc<ServerConfig>>,
}

impl AcmeAnswers {
    /// Compiles `challenges`. A challenge whose TLS config cannot be built is left out (its
    /// validation fails, and the order with it), with a warning.
    pub fn new(challenges: &AcmeChallenges, policy: &TlsPolicy) -> AcmeAnswers {
        let http01 = challenges.http01.iter().map(|(t, k)| (t.clone(), Bytes::from(k.clone()))).collect();
        let mut tls_alpn01 = HashMap::with_capacity(challenges.tls_alpn01.len());
        for (name, cert) in &challenges.tls_alpn01 {
            match challenge_config(cert, policy) {
                Ok(cfg) => {
                    tls_alpn01.insert(name.to_ascii_lowercase(), cfg);
                }
                Err(e) => {
                    tracing::warn!(name = %name, error = %e, "the TLS-ALPN-01 challenge certificate cannot be served")
                }
            }
        }
        AcmeAnswers { http01, tls_alpn01 }
    }

    /// The key authorization that answers `GET path`, when `path` is that of an HTTP-01
    /// challenge being validated.
    pub fn http01(&self, path: &str) -> Option<&Bytes> {
        if self.http01.is_empty() {
            return None;
        }
        self.http01.get(path.strip_prefix(HTTP01_PREFIX)?)
    }

    /// True when some TLS-ALPN-01 challenge is being validated: handshakes then read the
    /// ClientHello first.
    pub fn has_tls_alpn01(&self) -> bool {
        !self.tls_alpn01.is_empty()
    }

    /// The config that answers a ClientHello for `sni` offering the ALPN protocols `alpn`,
    /// when it is a TLS-ALPN-01 validation of a challenge being validated.
    pub fn tls_alpn01<'a>(
        &self,
        sni: Option<&str>,
        mut alpn: impl Iterator<Item = &'a [u8]>,
    ) -> Option<&Arc<ServerConfig>> {
        let sni = sni?;
        let cfg = match sni.bytes().any(|b| b.is_ascii_uppercase()) {
            true => self.tls_alpn01.get(&sni.to_ascii_lowercase()),
            false => self.tls_alpn01.get(sni),
        }?;
        alpn.any(|p| p == ACME_TLS_ALPN).then_some(cfg)
    }
}

/// A rustls config serving `cert` whatever the SNI, with ALPN `acme-tls/1` only and no
/// resumption (RFC 8737 §3).
fn challenge_config(cert: &wharf_model::Certificate, policy: &TlsPolicy) -> Result<Arc<ServerConfig>, String> {
    let mut cfg = crate::tls::builder(policy)
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Fixed(Arc::clone(&cert.key))));
    cfg.alpn_protocols = vec![ACME_TLS_ALPN.to_vec()];
    cfg.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    cfg.send_tls13_tickets = 0;
    Ok(Arc::new(cfg))
}

/// Always the one certificate.
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wharf_model::Certificate;

    fn certificate(name: &str) -> Certificate {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap_or_else(|e| panic!("{e}"));
        // A challenge certificate as RFC 8737 shapes it: the critical acmeIdentifier extension.
        let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap_or_else(|e| panic!("{e}"));
        params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(&[1; 32])];
        let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
        Certificate::from_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes(), i64::MIN)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn answers() -> AcmeAnswers {
        let mut c = AcmeChallenges::default();
        c.http01.insert("tok-EN_1".into(), "tok-EN_1.thumb".into());
        c.tls_alpn01.insert("a.example.com".into(), certificate("a.example.com"));
        AcmeAnswers::new(&c, &TlsPolicy::default())
    }

    /// Runs a handshake between `client` and `server` in memory.
    fn handshake(client: &mut rustls::ClientConnection, server: &mut rustls::ServerConnection) {
        for _ in 0..10 {
            let mut to_server = Vec::new();
            client.write_tls(&mut to_server).unwrap_or_else(|e| panic!("{e}"));
            server.read_tls(&mut to_server.as_slice()).unwrap_or_else(|e| panic!("{e}"));
            server.process_new_packets().unwrap_or_else(|e| panic!("{e}"));
            let mut to_client = Vec::new();
            server.write_tls(&mut to_client).unwrap_or_else(|e| panic!("{e}"));
            client.read_tls(&mut to_client.as_slice()).unwrap_or_else(|e| panic!("{e}"));
            client.process_new_packets().unwrap_or_else(|e| panic!("{e}"));
            if !client.is_handshaking() && !server.is_handshaking() {
                return;
            }
        }
        panic!("the handshake did not finish");
    }

    #[test]
    fn a_challenge_config_serves_its_certificate_with_acme_tls_only() {
        // Without the acmeIdentifier extension, which rustls's client refuses.
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap_or_else(|e| panic!("{e}"));
        let params = rcgen::CertificateParams::new(vec!["a.example.com".to_owned()]).unwrap_or_else(|e| panic!("{e}"));
        let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
        let c = Certificate::from_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes(), 0)
            .unwrap_or_else(|e| panic!("{e}"));
        let cfg = challenge_config(&c, &TlsPolicy::default()).unwrap_or_else(|e| panic!("{e}"));
        let client_cfg = crate::testing::inspecting_client_config(&[b"h2", ACME_TLS_ALPN]);
        let name = rustls::pki_types::ServerName::try_from("other.example.com").unwrap_or_else(|e| panic!("{e}"));
        let mut client = rustls::ClientConnection::new(client_cfg, name).unwrap_or_else(|e| panic!("{e}"));
        let mut server = rustls::ServerConnection::new(cfg).unwrap_or_else(|e| panic!("{e}"));
        handshake(&mut client, &mut server);
        assert_eq!(client.peer_certificates().and_then(|c| c.first()), Some(cert.der()));
        assert_eq!(server.alpn_protocol(), Some(ACME_TLS_ALPN));
    }

    #[test]
    fn http01_answers_only_its_tokens_under_the_challenge_path() {
        let a = answers();
        assert_eq!(a.http01("/.well-known/acme-challenge/tok-EN_1").map(|b| &b[..]), Some(&b"tok-EN_1.thumb"[..]));
        for path in [
            "/.well-known/acme-challenge/tok-en_1",
            "/.well-known/acme-challenge/tok-EN_1/",
            "/.well-known/acme-challenge/",
            "/tok-EN_1",
            "/x/.well-known/acme-challenge/tok-EN_1",
        ] {
            assert!(a.http01(path).is_none(), "{path}");
        }
        assert!(AcmeAnswers::default().http01("/.well-known/acme-challenge/tok-EN_1").is_none());
    }

    #[test]
    fn tls_alpn01_answers_its_names_only_when_the_client_offers_acme_tls() {
        let a = answers();
        assert!(a.has_tls_alpn01());
        assert!(!AcmeAnswers::default().has_tls_alpn01());
        let offer = |p: &'static [&'static [u8]]| p.iter().copied();
        let cfg = a.tls_alpn01(Some("a.example.com"), offer(&[b"acme-tls/1"]));
        assert_eq!(cfg.map(|c| c.alpn_protocols.clone()), Some(vec![b"acme-tls/1".to_vec()]));
        assert!(a.tls_alpn01(Some("A.Example.COM"), offer(&[b"h2", b"acme-tls/1"])).is_some());
        assert!(a.tls_alpn01(Some("a.example.com"), offer(&[b"h2", b"http/1.1"])).is_none());
        assert!(a.tls_alpn01(Some("a.example.com"), offer(&[])).is_none());
        assert!(a.tls_alpn01(Some("b.example.com"), offer(&[b"acme-tls/1"])).is_none());
        assert!(a.tls_alpn01(None, offer(&[b"acme-tls/1"])).is_none());
    }
}
