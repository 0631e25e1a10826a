//! Certificate validation, done once when a snapshot is built or compiled, never per
//! handshake.

use std::sync::Arc;

use rustls::crypto::aws_lc_rs::sign::any_supported_type;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why a certificate and key pair cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    /// The Secret has no `tls.crt` or no `tls.key` at all (often a Secret of another type).
    #[error("the Secret has no {key} (its type is {secret_type}); a TLS Secret is of type kubernetes.io/tls with tls.crt and tls.key: kubectl create secret tls NAME --cert=CERT.pem --key=KEY.pem")]
    NotTls {
        /// The missing data key.
        key: &'static str,
        /// The Secret's `type`.
        secret_type: String,
    },
    /// `tls.crt` holds no PEM certificate.
    #[error("tls.crt holds no PEM certificate (expected '-----BEGIN CERTIFICATE-----')")]
    NoCertificate,
    /// A PEM block in `tls.crt` does not parse.
    #[error("tls.crt is not valid PEM: {0}")]
    BadCertificatePem(String),
    /// The leaf certificate is not valid X.509 DER.
    #[error("the certificate in tls.crt does not parse as X.509: {0}")]
    BadCertificate(String),
    /// `tls.key` holds no usable private key.
    #[error("tls.key holds no PEM private key (PKCS#8, PKCS#1 RSA or SEC1 EC): {0}")]
    BadKey(String),
    /// The key type is not supported for serving.
    #[error("tls.key uses an unsupported key type: {0}")]
    UnsupportedKey(String),
    /// The key does not belong to the leaf certificate.
    #[error("tls.key does not match the certificate in tls.crt (was the Secret updated half-way?)")]
    KeyMismatch,
    /// The leaf certificate has expired.
    #[error("the certificate expired at {not_after} (Unix seconds); renew it")]
    Expired {
        /// Expiry, seconds since the Unix epoch.
        not_after: i64,
    },
}

/// What validation learned about a leaf certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// SAN dNSName entries, lower-case.
    pub dns_names: Vec<String>,
    /// Expiry, seconds since the Unix epoch.
    pub not_after: i64,
    /// Start of validity, seconds since the Unix epoch.
    pub not_before: i64,
}

/// A parsed, validated certificate ready for rustls.
#[derive(Debug)]
pub struct LoadedCert {
    /// Chain and signing key for rustls.
    pub certified_key: Arc<CertifiedKey>,
    /// Facts from the leaf.
    pub info: CertInfo,
}

/// Parses a PEM chain and key, checks that the key matches the leaf and that the leaf has
/// not expired at `now` (Unix seconds).
pub fn load(chain_pem: &[u8], key_pem: &[u8], now: i64) -> Result<LoadedCert, CertError> {
    // A certificate decoded from PEM has room for its base64 text, and a list read from an
    // iterator room for four; the chain is kept as long as it is served, so each is
    // copied to its own size.
    let mut chain = CertificateDer::pem_slice_iter(chain_pem)
        .map(|c| c.map(|c| CertificateDer::from(c.as_ref().to_vec())))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CertError::BadCertificatePem(e.to_string()))?;
    chain.shrink_to_fit();
    let leaf = chain.first().ok_or(CertError::NoCertificate)?;
    let (info, spki) = parse_leaf(leaf)?;
    if info.not_after < now {
        return Err(CertError::Expired { not_after: info.not_after });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| CertError::BadKey(e.to_string()))?;
    let signing_key = any_supported_type(&key).map_err(|e| CertError::UnsupportedKey(e.to_string()))?;
    // Compared here rather than by rustls, whose parser refuses certificates with critical
    // extensions it does not know, as ACME's TLS-ALPN-01 challenge certificates have.
    if signing_key.public_key().is_none_or(|k| k.as_ref() != spki.as_slice()) {
        return Err(CertError::KeyMismatch);
    }
    let certified_key = CertifiedKey::new(chain, signing_key);
    Ok(LoadedCert { certified_key: Arc::new(certified_key), info })
}

fn inspect(leaf: &CertificateDer<'_>) -> Result<CertInfo, CertError> {
    parse_leaf(leaf).map(|(info, _)| info)
}

/// The facts of a certificate, and its SubjectPublicKeyInfo (DER).
fn parse_leaf(leaf: &CertificateDer<'_>) -> Result<(CertInfo, Vec<u8>), CertError> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) =
        x509_parser::parse_x509_certificate(leaf.as_ref()).map_err(|e| CertError::BadCertificate(e.to_string()))?;
    let mut dns_names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let GeneralName::DNSName(n) = name {
                dns_names.push(n.to_ascii_lowercase());
            }
        }
    }
    let validity = cert.validity();
    let info =
        CertInfo { dns_names, not_after: validity.not_after.timestamp(), not_before: validity.not_before.timestamp() };
    Ok((info, cert.public_key().raw.to_vec()))
}

/// The facts of the first certificate of a PEM chain.
pub fn inspect_pem(chain_pem: &[u8]) -> Result<CertInfo, CertError> {
    let leaf = CertificateDer::pem_slice_iter(chain_pem)
        .next()
        .ok_or(CertError::NoCertificate)?
        .map_err(|e| CertError::BadCertificatePem(e.to_string()))?;
    inspect(&leaf)
}

/// `t` as the Unix seconds every validity check here takes (`now`); times before the
/// epoch are 0. The clock is read by the caller: this crate does no I/O.
pub fn unix_seconds(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// True when the certificate's DNS names cover `host` (exact, or a `*.` SAN covering one
/// label; a wildcard host needs the same wildcard SAN).
pub fn covers(dns_names: &[String], host: &str) -> bool {
    dns_names.iter().any(|san| {
        san == host
            || (san.starts_with("*.") && !host.starts_with("*.") && crate::Host::wildcard_key(host) == Some(&san[1..]))
    })
}

/// How many of the PEM certificates in `pem` can serve as trust anchors (CA certificates
/// that parse); the others are left out.
pub fn trust_anchors(pem: &[u8]) -> usize {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let ders = rustls_pki_types::CertificateDer::pem_slice_iter(pem).flatten();
    roots.add_parsable_certificates(ders).0
}

/// A cipher suite Wharf offers, by its IANA name (`TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256`,
/// `TLS13_AES_128_GCM_SHA256`) or OpenSSL's (`ECDHE-ECDSA-AES128-GCM-SHA256`,
/// `TLS_AES_128_GCM_SHA256`), in any case.
pub fn cipher_suite(name: &str) -> Option<rustls::SupportedCipherSuite> {
    let wanted = iana_name(name);
    rustls::crypto::aws_lc_rs::ALL_CIPHER_SUITES
        .iter()
        .find(|s| format!("{:?}", s.suite()).eq_ignore_ascii_case(&wanted))
        .copied()
}

/// Cipher suites by name ([`cipher_suite`]), comma- or colon-separated. The TLS 1.3 suites
/// are all kept unless some are named (nginx's `ssl_ciphers` does not touch them); at
/// least one TLS 1.2 suite must be named. A name Wharf does not offer is refused.
pub fn cipher_suites(list: &str) -> Result<Vec<rustls::SupportedCipherSuite>, String> {
    let all = rustls::crypto::aws_lc_rs::ALL_CIPHER_SUITES;
    let mut chosen: Vec<rustls::SupportedCipherSuite> = Vec::new();
    for name in list.split([',', ':']).map(str::trim).filter(|n| !n.is_empty()) {
        let Some(suite) = cipher_suite(name) else {
            let known: Vec<String> = all.iter().map(|s| format!("{:?}", s.suite())).collect();
            return Err(format!("{name:?} is not a cipher suite Wharf offers (it offers {})", known.join(", ")));
        };
        if !chosen.contains(&suite) {
            chosen.push(suite);
        }
    }
    if !chosen.iter().any(|s| s.tls13().is_none()) {
        return Err("no TLS 1.2 cipher suite is named (for TLS 1.3 only, use --tls-min-version 1.3)".into());
    }
    if !chosen.iter().any(|s| s.tls13().is_some()) {
        chosen.extend(all.iter().filter(|s| s.tls13().is_some()));
    }
    Ok(chosen)
}

/// The IANA name (as rustls spells it) of an OpenSSL cipher name; other names as given.
fn iana_name(name: &str) -> String {
    let upper = name.trim().to_ascii_uppercase();
    if let Some(rest) = upper.strip_prefix("TLS_").filter(|r| !r.contains("_WITH_")) {
        return format!("TLS13_{rest}");
    }
    let Some(rest) = upper.strip_prefix("ECDHE-") else { return upper };
    let Some((auth, cipher)) = rest.split_once('-') else { return upper };
    let cipher = match cipher {
        "AES128-GCM-SHA256" => "AES_128_GCM_SHA256",
        "AES256-GCM-SHA384" => "AES_256_GCM_SHA384",
        "CHACHA20-POLY1305" => "CHACHA20_POLY1305_SHA256",
        _ => return upper,
    };
    format!("TLS_ECDHE_{auth}_WITH_{cipher}")
}

#[cfg(test)]
mod cipher_tests {
    use super::*;

    fn names(list: &str) -> Result<Vec<String>, String> {
        cipher_suites(list).map(|s| s.iter().map(|c| format!("{:?}", c.suite())).collect())
    }

    #[test]
    fn ciphers_are_named_as_iana_or_openssl_and_tls13_is_kept_unless_named() {
        let tls13 = ["TLS13_AES_256_GCM_SHA384", "TLS13_AES_128_GCM_SHA256", "TLS13_CHACHA20_POLY1305_SHA256"];
        let want = |v: &[&str]| Ok(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let mut one = vec!["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"];
        one.extend(tls13);
        assert_eq!(names("ECDHE-ECDSA-AES256-GCM-SHA384"), want(&one));
        assert_eq!(names(" tls_ecdhe_ecdsa_with_aes_256_gcm_sha384 ,"), want(&one));
        assert_eq!(
            names("ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-CHACHA20-POLY1305:TLS_AES_128_GCM_SHA256:ECDHE-RSA-AES128-GCM-SHA256"),
            want(&[
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
                "TLS13_AES_128_GCM_SHA256"
            ])
        );
        for bad in ["ECDHE-RSA-AES128-SHA", "DHE-RSA-AES128-GCM-SHA256", "HIGH", "ECDHE-ECDSA-X", "ECDHE"] {
            assert!(names(bad).is_err_and(|e| e.contains("is not a cipher suite")), "{bad:?}");
        }
        for tls13_only in ["TLS_AES_128_GCM_SHA256", "", "TLS13_AES_256_GCM_SHA384"] {
            assert!(names(tls13_only).is_err_and(|e| e.contains("no TLS 1.2 cipher suite")), "{tls13_only:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair};

    fn make(names: &[&str], days_valid: i64) -> (String, String) {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, names[0]);
        let now = time_now();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = offset(now, days_valid);
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn time_now() -> i64 {
        unix_seconds(std::time::SystemTime::now())
    }

    fn offset(now: i64, days: i64) -> time::OffsetDateTime {
        time::OffsetDateTime::from_unix_timestamp(now + days * 86_400).unwrap()
    }

    #[test]
    fn trust_anchors_counts_the_certificates_that_parse() {
        let (a, _) = make(&["ca-a.example"], 30);
        let (b, _) = make(&["ca-b.example"], 30);
        let bad = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n";
        assert_eq!(trust_anchors(format!("{a}{bad}{b}").as_bytes()), 2);
        assert_eq!(trust_anchors(a.as_bytes()), 1);
        assert_eq!(trust_anchors(b"no PEM at all"), 0);
    }

    #[test]
    fn good_pair_loads_with_names() {
        let (c, k) = make(&["a.example.com", "*.b.example.com"], 30);
        let loaded = load(c.as_bytes(), k.as_bytes(), time_now()).unwrap();
        assert_eq!(loaded.info.dns_names, ["a.example.com", "*.b.example.com"]);
        assert!(covers(&loaded.info.dns_names, "x.b.example.com"));
        assert!(!covers(&loaded.info.dns_names, "x.y.b.example.com"));
    }

    #[test]
    fn each_defect_is_named() {
        let (c, k) = make(&["a.example.com"], 30);
        let (_, other_key) = make(&["a.example.com"], 30);
        let now = time_now();
        assert_eq!(load(b"", k.as_bytes(), now).unwrap_err(), CertError::NoCertificate);
        assert_eq!(load(c.as_bytes(), other_key.as_bytes(), now).unwrap_err(), CertError::KeyMismatch);
        assert!(matches!(load(c.as_bytes(), b"junk", now), Err(CertError::BadKey(_))));
        let broken = c.replace("MII", "MIX");
        assert!(load(broken.as_bytes(), k.as_bytes(), now).is_err());
        let (old, old_key) = make(&["a.example.com"], -1);
        assert!(matches!(load(old.as_bytes(), old_key.as_bytes(), now), Err(CertError::Expired { .. })));
    }

    #[test]
    fn times_are_unix_seconds_and_none_before_the_epoch() {
        let epoch = std::time::UNIX_EPOCH;
        assert_eq!(unix_seconds(epoch + std::time::Duration::from_millis(90_999)), 90);
        assert_eq!(unix_seconds(epoch - std::time::Duration::from_secs(5)), 0);
    }

    #[test]
    fn a_certificate_is_good_up_to_and_including_its_expiry_second() {
        let (c, k) = make(&["a.example.com"], 30);
        let not_after = load(c.as_bytes(), k.as_bytes(), 0).unwrap().info.not_after;
        assert!(load(c.as_bytes(), k.as_bytes(), not_after).is_ok());
        assert_eq!(load(c.as_bytes(), k.as_bytes(), not_after + 1).unwrap_err(), CertError::Expired { not_after });
    }
}
