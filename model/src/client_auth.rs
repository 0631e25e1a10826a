//! Client certificates: what a host asks of its clients (ingress-nginx's `auth-tls-*`
//! annotations), and what the backend is told of the certificate a client presented.

use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use serde::Serialize;

use crate::{Host, Pattern};

/// A host whose TLS handshakes ask for a client certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClientAuthHost {
    /// Exact or wildcard host.
    pub host: Host,
    /// What its clients' certificates must chain to.
    pub ca: ClientCa,
}

/// The CA certificates a client certificate must chain to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClientCa {
    /// Where they come from (`namespace/secret`), for logs and the config dump.
    pub source: String,
    /// The certificates (DER), already parsed from the Secret's `ca.crt`.
    #[serde(skip)]
    pub certificates: Arc<[CertificateDer<'static>]>,
    /// How many certificates a client's chain may have above its own, the CA included
    /// (nginx's `ssl_verify_depth`; ingress-nginx's default 1 takes only certificates the
    /// CA signed itself).
    pub verify_depth: u8,
}

/// What a route asks of the client's certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClientCertCheck {
    /// Whether a certificate is required.
    pub verify: VerifyClient,
    /// Send the certificate (PEM, URL-escaped) to the backend in `ssl-client-cert`.
    pub pass_certificate: bool,
    /// Where a client without a certificate is redirected (`302`) instead of getting `400`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_page: Option<String>,
    /// The subject's distinguished name (RFC 2253) must contain a match of this
    /// (`auth-tls-match-cn`); other clients, and those without a certificate, get `403`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub match_subject: Option<Pattern>,
}

impl ClientCertCheck {
    /// True when a client with `cert` (or none) may be served: the certificate is there
    /// when required, and its subject matches when a match is asked for.
    pub fn admits(&self, cert: Option<&PeerCertificate>) -> Result<(), CertRefusal> {
        match (cert, &self.match_subject) {
            (None, _) if self.verify == VerifyClient::On => Err(CertRefusal::Missing),
            (None, Some(_)) => Err(CertRefusal::SubjectMismatch),
            (Some(c), Some(p)) if !p.is_match(&c.subject) => Err(CertRefusal::SubjectMismatch),
            _ => Ok(()),
        }
    }
}

/// Why a route turns a client away for its certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertRefusal {
    /// A certificate is required and there is none (`400`, or the error page).
    Missing,
    /// The subject does not match `auth-tls-match-cn` (`403`).
    SubjectMismatch,
}

/// `auth-tls-verify-client`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerifyClient {
    /// A certificate that chains to the CA is required (`on`).
    On,
    /// A certificate is asked for; one presented must chain to the CA (`optional`).
    Optional,
}

/// Why a CA bundle cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaError {
    /// No PEM certificate at all.
    #[error("ca.crt holds no PEM certificate (expected '-----BEGIN CERTIFICATE-----')")]
    NoCertificate,
    /// A PEM block does not parse.
    #[error("ca.crt is not valid PEM: {0}")]
    BadPem(String),
    /// A certificate does not parse as X.509.
    #[error("a certificate in ca.crt does not parse as X.509: {0}")]
    BadCertificate(String),
}

/// Parses a CA bundle (PEM, one or more certificates).
pub fn parse_ca_bundle(pem: &[u8]) -> Result<Arc<[CertificateDer<'static>]>, CaError> {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(pem).collect::<Result<_, _>>().map_err(|e| CaError::BadPem(e.to_string()))?;
    if certs.is_empty() {
        return Err(CaError::NoCertificate);
    }
    for c in &certs {
        x509_parser::parse_x509_certificate(c).map_err(|e| CaError::BadCertificate(e.to_string()))?;
    }
    Ok(certs.into())
}

/// What the backend is told of a client's certificate: nginx's `$ssl_client_s_dn` and
/// `$ssl_client_i_dn` (RFC 2253: the last RDN first, `,` between), and
/// `$ssl_client_escaped_cert` (the PEM, URL-escaped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCertificate {
    /// The subject's distinguished name.
    pub subject: String,
    /// The issuer's distinguished name.
    pub issuer: String,
    /// The certificate as PEM, percent-escaped as nginx escapes it.
    pub escaped_pem: String,
}

impl PeerCertificate {
    /// Reads `der`; `None` when it does not parse (the handshake checked it already).
    pub fn new(der: &[u8]) -> Option<PeerCertificate> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        Some(PeerCertificate {
            subject: rfc2253(cert.subject()),
            issuer: rfc2253(cert.issuer()),
            escaped_pem: percent_escape(&pem(der)),
        })
    }
}

/// `name` as RFC 2253 writes it: the last RDN first, attributes by their short names
/// (else the dotted OID), `,` between RDNs and `+` within one; `,`, `+`, `"`, `\`, `<`,
/// `>`, `;` and a leading `#` or space, or a trailing space, escaped with `\`.
fn rfc2253(name: &x509_parser::x509::X509Name<'_>) -> String {
    let registry = x509_parser::objects::oid_registry();
    let rdns: Vec<String> = name
        .iter_rdn()
        .map(|rdn| {
            let parts: Vec<String> = rdn
                .iter()
                .map(|a| {
                    let oid = a.attr_type();
                    let key = match x509_parser::objects::oid2abbrev(oid, registry) {
                        Ok(k) => k.to_owned(),
                        Err(_) => oid.to_id_string(),
                    };
                    let key = if key == "emailAddress" { "emailAddress".to_owned() } else { key };
                    let value = a.as_str().map(escape_value).unwrap_or_default();
                    format!("{key}={value}")
                })
                .collect();
            parts.join("+")
        })
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

fn escape_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `der` as a PEM certificate, 64 base64 characters per line.
fn pem(der: &[u8]) -> String {
    let b64 = base64(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// Standard base64, padded.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            match i <= chunk.len() {
                true => out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize])),
                false => out.push('='),
            }
        }
    }
    out
}

/// Percent-encodes every byte but the unreserved ones (RFC 3986: letters, digits and
/// `-._~`), so `s` fits in one URI component (nginx's `$escaped_request_uri`,
/// `$ssl_client_escaped_cert`).
pub fn percent_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3 / 2);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_admits_by_presence_and_subject() {
        let cert = |subject: &str| PeerCertificate {
            subject: subject.into(),
            issuer: "CN=ca".into(),
            escaped_pem: String::new(),
        };
        let check = |verify, pattern: Option<&str>| ClientCertCheck {
            verify,
            pass_certificate: false,
            error_page: None,
            match_subject: pattern.map(|p| Pattern::full(&format!(".*(?:{p}).*")).unwrap()),
        };
        let (on, optional) = (VerifyClient::On, VerifyClient::Optional);
        let ops = cert("CN=ops,O=example");
        let dev = cert("CN=dev,O=example");
        assert_eq!(check(on, None).admits(None), Err(CertRefusal::Missing));
        assert_eq!(check(on, None).admits(Some(&dev)), Ok(()));
        assert_eq!(check(optional, None).admits(None), Ok(()));
        assert_eq!(check(on, Some("CN=ops")).admits(None), Err(CertRefusal::Missing));
        assert_eq!(check(on, Some("CN=ops")).admits(Some(&ops)), Ok(()));
        assert_eq!(check(on, Some("CN=ops")).admits(Some(&dev)), Err(CertRefusal::SubjectMismatch));
        assert_eq!(check(optional, Some("CN=ops")).admits(None), Err(CertRefusal::SubjectMismatch));
        assert_eq!(check(optional, Some("CN=ops")).admits(Some(&dev)), Err(CertRefusal::SubjectMismatch));
        assert_eq!(check(optional, Some("O=example")).admits(Some(&dev)), Ok(()));
    }

    #[test]
    fn base64_pads_each_length() {
        for (input, want) in
            [(&b""[..], ""), (b"f", "Zg=="), (b"fo", "Zm8="), (b"foo", "Zm9v"), (b"\xff\xfe\xfd\xfc", "//79/A==")]
        {
            assert_eq!(base64(input), want, "{input:?}");
        }
    }

    #[test]
    fn values_are_escaped_as_rfc_2253_says() {
        let cases = [
            ("plain", "plain"),
            ("a,b+c", "a\\,b\\+c"),
            ("\"q\" <x>; y\\", "\\\"q\\\" \\<x\\>\\; y\\\\"),
            ("#lead", "\\#lead"),
            (" both ", "\\ both\\ "),
            ("in#side", "in#side"),
        ];
        for (input, want) in cases {
            assert_eq!(escape_value(input), want, "{input:?}");
        }
    }

    #[test]
    fn escaping_keeps_only_unreserved_characters() {
        assert_eq!(percent_escape("aZ09-._~ /+=\n%"), "aZ09-._~%20%2F%2B%3D%0A%25");
    }

    #[test]
    fn a_ca_bundle_needs_certificates_that_parse() {
        assert_eq!(parse_ca_bundle(b"nothing here"), Err(CaError::NoCertificate));
        let junk = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(matches!(parse_ca_bundle(junk), Err(CaError::BadCertificate(_))));
        let bad_pem = b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
        assert!(matches!(parse_ca_bundle(bad_pem), Err(CaError::BadPem(_))));
    }

    fn issued(ca_dn: &[(rcgen::DnType, &str)], leaf_dn: &[(rcgen::DnType, &str)]) -> (Vec<u8>, Vec<u8>) {
        let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap_or_else(|_| unreachable!());
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap_or_default();
        ca.distinguished_name = rcgen::DistinguishedName::new();
        for (t, v) in ca_dn {
            ca.distinguished_name.push(t.clone(), *v);
        }
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap_or_else(|_| unreachable!());
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap_or_else(|_| unreachable!());
        let mut leaf = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap_or_default();
        leaf.distinguished_name = rcgen::DistinguishedName::new();
        for (t, v) in leaf_dn {
            leaf.distinguished_name.push(t.clone(), *v);
        }
        let cert = leaf.signed_by(&key, &issuer).unwrap_or_else(|_| unreachable!());
        (cert.der().to_vec(), ca_cert.der().to_vec())
    }

    #[test]
    fn the_backend_is_told_the_subject_and_issuer_as_nginx_writes_them() {
        use rcgen::DnType::{CommonName, CountryName, OrganizationName, OrganizationalUnitName};
        let (leaf, ca) = issued(
            &[(CountryName, "DE"), (OrganizationName, "Shop"), (CommonName, "Shop CA")],
            &[(OrganizationName, "Shop, Inc."), (OrganizationalUnitName, "ops"), (CommonName, "client-1")],
        );
        let seen = PeerCertificate::new(&leaf).unwrap_or_else(|| unreachable!());
        assert_eq!(seen.subject, "CN=client-1,OU=ops,O=Shop\\, Inc.");
        assert_eq!(seen.issuer, "CN=Shop CA,O=Shop,C=DE");
        // The PEM, escaped, reads back as the certificate.
        let unescaped: Vec<u8> = {
            let b = seen.escaped_pem.as_bytes();
            let (mut out, mut i) = (Vec::new(), 0);
            while i < b.len() {
                let hex = b.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
                match (b[i], hex) {
                    (b'%', Some(v)) => (out.push(v), i += 3),
                    (c, _) => (out.push(c), i += 1),
                };
            }
            out
        };
        let pem = String::from_utf8_lossy(&unescaped).into_owned();
        assert!(
            pem.starts_with("-----BEGIN CERTIFICATE-----\n") && pem.ends_with("\n-----END CERTIFICATE-----\n"),
            "{pem}"
        );
        assert!(!seen.escaped_pem.contains(['\n', '/', '+', '=', ' ']), "{}", seen.escaped_pem);
        let back: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(pem.as_bytes()).collect::<Result<_, _>>().unwrap_or_default();
        assert_eq!(back.iter().map(|c| c.to_vec()).collect::<Vec<_>>(), [leaf]);
        let lines: Vec<&str> = pem.lines().collect();
        assert!(lines[1..lines.len() - 2].iter().all(|l| l.len() == 64), "64 characters a line: {lines:?}");
        assert!(PeerCertificate::new(b"not DER").is_none());
        // The CA's bundle parses.
        let bundle = format!("{}", String::from_utf8_lossy(&pem_of(&ca)));
        assert_eq!(parse_ca_bundle(bundle.as_bytes()).map(|c| c.len()), Ok(1));
    }

    fn pem_of(der: &[u8]) -> Vec<u8> {
        pem(der).into_bytes()
    }
}
