//! ACME challenges published through the API server: Secrets of the controller's namespace
//! labelled [`ACME_CHALLENGE_LABEL`], which every replica answers from its snapshot.
//!
//! One Secret holds the challenges of one order: for HTTP-01 the key
//! `http-01.<token>` with the key authorization as value; for TLS-ALPN-01 the keys
//! `tls-alpn-01.<name>.crt` and `tls-alpn-01.<name>.key` with the challenge certificate
//! (RFC 8737) and its key, PEM.

use crate::stored::Secret;
use crate::translate::Reason;
use wharf_model::{AcmeChallenges, Certificate, ObjectRef};

use super::tls::Secrets;
use super::{AcmeOptions, Diagnostic};
use crate::well_known::{ACME_CHALLENGE_LABEL, ACME_MANAGED_LABEL};

/// A certificate Ingresses and Gateway listeners ask for: their TLS Secret, to hold a
/// certificate for their hosts from their issuer. Translation finds them.
#[derive(Debug, Clone, PartialEq)]
pub struct Demand {
    /// The Secret's namespace and name.
    pub secret: (String, String),
    /// The DNS names, lower-case, sorted, each once.
    pub names: Vec<String>,
    /// The issuer's name.
    pub issuer: String,
    /// The Ingresses and Gateways asking, Ingresses first, each oldest first.
    pub sources: Vec<wharf_model::ObjectRef>,
    /// The certificate the Secret holds now, when Wharf manages it.
    pub current: Option<Current>,
}

/// A certificate Wharf stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Current {
    /// The issuer it came from (the Secret's label).
    pub issuer: String,
    /// The DNS names it covers, lower-case, sorted, each once.
    pub dns_names: Vec<String>,
    /// Validity, Unix seconds.
    pub not_before: i64,
    /// Expiry, Unix seconds.
    pub not_after: i64,
    /// Its ACME Renewal Information identifier (RFC 9773), when it has an Authority Key
    /// Identifier.
    pub ari_id: Option<String>,
}

impl Current {
    /// The certificate of a PEM chain stored for `issuer`, when it parses.
    pub fn of(issuer: &str, chain_pem: &[u8]) -> Option<Current> {
        let info = wharf_model::tls::inspect_pem(chain_pem).ok()?;
        let mut dns_names = info.dns_names;
        dns_names.sort();
        dns_names.dedup();
        Some(Current {
            issuer: issuer.to_owned(),
            dns_names,
            not_before: info.not_before,
            not_after: info.not_after,
            ari_id: ari_id(chain_pem),
        })
    }
}

/// The ARI identifier of the first certificate of a PEM chain: its Authority Key
/// Identifier and serial number, base64url, joined by a dot.
pub fn ari_id(chain_pem: &[u8]) -> Option<String> {
    use rustls::pki_types::pem::PemObject;
    let der = rustls::pki_types::CertificateDer::pem_slice_iter(chain_pem).next()?.ok()?;
    instant_acme::CertificateIdentifier::try_from(&der).ok().map(|id| id.to_string())
}

/// The data key prefix of an HTTP-01 challenge (then the token).
pub const HTTP01_KEY: &str = "http-01.";

/// The data key prefix of a TLS-ALPN-01 challenge (then the name, then `.crt` or `.key`).
pub const TLS_ALPN01_KEY: &str = "tls-alpn-01.";

/// The challenges of the Secrets labelled [`ACME_CHALLENGE_LABEL`] in `namespace`.
pub fn challenges<'s>(
    secrets: impl IntoIterator<Item = &'s Secret>,
    namespace: &str,
    diags: &mut Vec<Diagnostic>,
) -> AcmeChallenges {
    let mut out = AcmeChallenges::default();
    let labelled =
        secrets.into_iter().filter(|s| &*s.namespace == namespace && s.labels.contains(ACME_CHALLENGE_LABEL));
    for secret in labelled {
        let source = ObjectRef::new("Secret", namespace, &secret.name);
        let data = secret.data();
        for (key, value) in data.clone() {
            if let Some(token) = key.strip_prefix(HTTP01_KEY) {
                match std::str::from_utf8(value) {
                    Ok(k) if !token.is_empty() => {
                        out.http01.insert(token.to_owned(), k.to_owned());
                    }
                    _ => diags.push(bad(&source, key, "not a token with a key authorization")),
                }
                continue;
            }
            let Some(name) = key.strip_prefix(TLS_ALPN01_KEY).and_then(|k| k.strip_suffix(".crt")) else {
                continue;
            };
            let key_pem = data
                .clone()
                .find(|(k, _)| k.strip_prefix(TLS_ALPN01_KEY).and_then(|k| k.strip_suffix(".key")) == Some(name));
            let Some((_, key_pem)) = key_pem else {
                diags.push(bad(&source, key, "its key is missing"));
                continue;
            };
            match Certificate::from_pem(value, key_pem, i64::MIN) {
                Ok(cert) if *cert.dns_names == [name.to_ascii_lowercase()] => {
                    out.tls_alpn01.insert(name.to_ascii_lowercase(), cert);
                }
                Ok(_) => diags.push(bad(&source, key, "the certificate does not name exactly that name")),
                Err(e) => diags.push(bad(&source, key, &e.to_string())),
            }
        }
    }
    out
}

/// Reason of the diagnostic on a TLS entry whose Secret is in a namespace ACME may not
/// write.
pub const ACME_NAMESPACE_NOT_ALLOWED: Reason = Reason::AcmeNamespaceNotAllowed;

/// The certificates Ingresses ask ACME for, by Secret.
#[derive(Debug, Default)]
pub(super) struct Demands {
    by_secret: std::collections::BTreeMap<(String, String), Demand>,
}

impl Demands {
    /// Adds what the TLS entry of `src` (an Ingress TLS entry or a Gateway listener) for
    /// `hosts` into Secret `secret` (namespace, name) asks for: a certificate from ACME
    /// when `src` says `wharf.dev/acme: "true"`, when the Secret does not exist, and when
    /// Wharf manages it (to renew it); never when `src` says `"false"`, or for a Secret
    /// Wharf does not manage.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn add(
        &mut self,
        opts: &AcmeOptions,
        src: &ObjectRef,
        settings: (Option<bool>, Option<&str>),
        secrets: &Secrets<'_>,
        secret: (&str, Option<&str>),
        hosts: &[&str],
        diags: &mut Vec<Diagnostic>,
    ) {
        let (namespace, secret_name) = secret;
        let (asked, issuer) = settings;
        let diag = |diags: &mut Vec<Diagnostic>, reason, message| {
            diags.push(Diagnostic { object: src.clone(), reason, message });
        };
        if opts.issuers.is_empty() {
            if asked == Some(true) {
                diag(diags, Reason::AcmeNotConfigured, "wharf.dev/acme asks for a certificate from ACME, but no ACME issuer is configured (--acme-issuer, chart value controller.acme.issuers)".into());
            }
            return;
        }
        let Some(name) = secret_name.filter(|n| !n.is_empty() && !n.contains('/')) else { return };
        if asked == Some(false) {
            return;
        }
        let existing = secrets.get(namespace, name);
        let managed = existing.is_some_and(|s| s.labels.contains(ACME_MANAGED_LABEL));
        if existing.is_some() && !managed {
            if asked == Some(true) {
                diag(diags, Reason::AcmeSecretNotManaged, format!("Secret {namespace}/{name} exists and is not managed by Wharf (no {ACME_MANAGED_LABEL} label), so no certificate is ordered into it: delete it to have Wharf order one, or remove wharf.dev/acme"));
            }
            return;
        }
        if !opts.namespaces.is_empty() && !opts.namespaces.iter().any(|n| n == namespace) {
            diag(diags, ACME_NAMESPACE_NOT_ALLOWED, format!("no certificate is ordered for Secret {namespace}/{name}: the operator lets ACME write Secrets of namespaces {} only (--acme-namespace, chart value controller.acme.namespaces)", opts.namespaces.join(", ")));
            return;
        }
        let issuer = match issuer.or(opts.default_issuer.as_deref()).or(opts.issuers.first().map(String::as_str)) {
            Some(i) if opts.issuers.iter().any(|n| n == i) => i.to_owned(),
            other => {
                let known = opts.issuers.join(", ");
                diag(diags, Reason::AcmeIssuerUnknown, format!("ACME issuer {:?} is not configured (configured: {known}); no certificate is ordered for Secret {namespace}/{name}", other.unwrap_or("")));
                return;
            }
        };
        let mut names = Vec::new();
        for h in hosts {
            match wharf_model::Host::parse(h) {
                Ok(wharf_model::Host::Exact(n)) => names.push(n),
                Ok(_) => diag(diags, Reason::AcmeWildcardNotSupported, format!("host {h} is a wildcard, which ACME validates only by DNS-01, not supported yet; Secret {namespace}/{name} is ordered without it")),
                Err(_) => {}
            }
        }
        if names.is_empty() {
            return;
        }
        let current = existing.filter(|_| managed).and_then(current);
        let key = (namespace.to_owned(), name.to_owned());
        let d = self.by_secret.entry(key.clone()).or_insert_with(|| Demand {
            secret: key,
            names: Vec::new(),
            issuer: issuer.clone(),
            sources: Vec::new(),
            current,
        });
        if d.issuer != issuer {
            diag(diags, Reason::AcmeIssuerConflict, format!("Secret {} is ordered from ACME issuer {} for {}, which is older; the issuer {issuer} of {src} is not used for it", d.id(), d.issuer, d.sources.first().map(|s| s.to_string()).unwrap_or_default()));
        }
        d.names.extend(names);
        d.names.sort();
        d.names.dedup();
        if !d.sources.contains(src) {
            d.sources.push(src.clone());
        }
    }

    /// The demands of parts that share no Secret.
    pub(super) fn from_demands(demands: impl IntoIterator<Item = Demand>) -> Demands {
        Demands { by_secret: demands.into_iter().map(|d| (d.secret.clone(), d)).collect() }
    }

    /// Takes DNS name `name` out of the demands for Secrets of `namespace` (a namespace
    /// that lost the host); a demand left with no name goes.
    pub(super) fn drop_name(&mut self, namespace: &str, name: &str) {
        self.by_secret.retain(|(ns, _), d| {
            if ns == namespace {
                d.names.retain(|n| n != name);
            }
            !d.names.is_empty()
        });
    }

    pub(super) fn into_vec(self) -> Vec<Demand> {
        self.by_secret.into_values().collect()
    }
}

/// The certificate a managed Secret holds, when it parses.
fn current(secret: &Secret) -> Option<Current> {
    let issuer = secret.labels.get(ACME_MANAGED_LABEL)?;
    Current::of(issuer, secret.get(crate::well_known::TLS_CRT)?)
}

fn bad(source: &ObjectRef, key: &str, why: &str) -> Diagnostic {
    Diagnostic {
        object: source.clone(),
        reason: Reason::AcmeChallengeInvalid,
        message: format!("ACME challenge {key} is not answered: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn pair(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap_or_else(|e| panic!("{e}"));
        let params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap_or_else(|e| panic!("{e}"));
        let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
        (cert.pem(), key.serialize_pem())
    }

    fn secret(namespace: &str, label: bool, data: Vec<(String, Vec<u8>)>) -> Secret {
        let mut s = k8s_openapi::api::core::v1::Secret::default();
        s.metadata.name = Some("order-1".into());
        s.metadata.namespace = Some(namespace.into());
        if label {
            s.metadata.labels = Some([(ACME_CHALLENGE_LABEL.to_owned(), "true".to_owned())].into());
        }
        s.data = Some(data.into_iter().map(|(k, v)| (k, ByteString(v))).collect());
        s.into()
    }

    #[test]
    fn labelled_secrets_of_the_namespace_give_their_challenges() {
        let (crt, key) = pair("a.example.com");
        let (other_crt, _) = pair("b.example.com");
        let (two, two_key) = {
            let k = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap_or_else(|e| panic!("{e}"));
            let p = rcgen::CertificateParams::new(vec!["c.example.com".to_owned(), "d.example.com".to_owned()])
                .unwrap_or_else(|e| panic!("{e}"));
            (p.self_signed(&k).unwrap_or_else(|e| panic!("{e}")).pem(), k.serialize_pem())
        };
        let data = vec![
            ("http-01.tok_1".to_owned(), b"tok_1.thumb".to_vec()),
            ("http-01.".to_owned(), b"empty token".to_vec()),
            ("http-01.bin".to_owned(), vec![0xff, 0xfe]),
            ("tls-alpn-01.a.example.com.crt".to_owned(), crt.clone().into_bytes()),
            ("tls-alpn-01.a.example.com.key".to_owned(), key.clone().into_bytes()),
            ("tls-alpn-01.lonely.example.com.crt".to_owned(), crt.clone().into_bytes()),
            ("tls-alpn-01.b.example.com.crt".to_owned(), other_crt.into_bytes()),
            ("tls-alpn-01.b.example.com.key".to_owned(), key.clone().into_bytes()),
            ("tls-alpn-01.c.example.com.crt".to_owned(), two.into_bytes()),
            ("tls-alpn-01.c.example.com.key".to_owned(), two_key.into_bytes()),
            ("notes".to_owned(), b"ignored".to_vec()),
        ];
        let secrets = [
            secret("wharf", true, data),
            secret("wharf", false, vec![("http-01.unlabelled".into(), b"x".to_vec())]),
            secret("other", true, vec![("http-01.elsewhere".into(), b"x".to_vec())]),
        ];
        let mut diags = Vec::new();
        let got = challenges(&secrets, "wharf", &mut diags);
        assert_eq!(got.http01.into_iter().collect::<Vec<_>>(), [("tok_1".to_owned(), "tok_1.thumb".to_owned())]);
        assert_eq!(got.tls_alpn01.keys().collect::<Vec<_>>(), ["a.example.com"]);
        let cert = &got.tls_alpn01["a.example.com"];
        assert_eq!(cert.sha256, Certificate::digest(crt.as_bytes(), key.as_bytes()));
        let mut reasons: Vec<String> = diags.iter().map(|d| d.message.clone()).collect();
        reasons.sort();
        assert_eq!(reasons.len(), 5, "{reasons:?}");
        assert!(diags
            .iter()
            .all(|d| d.object == ObjectRef::new("Secret", "wharf", "order-1") && d.reason == "AcmeChallengeInvalid"));
        for (want, found) in [
            ("http-01. is not answered", &reasons),
            ("http-01.bin is not answered", &reasons),
            ("tls-alpn-01.lonely.example.com.crt is not answered: its key is missing", &reasons),
            ("tls-alpn-01.b.example.com.crt is not answered: tls.key does not match", &reasons),
            ("tls-alpn-01.c.example.com.crt is not answered: the certificate does not name exactly", &reasons),
        ] {
            assert!(found.iter().any(|r| r.contains(want)), "{want}: {found:?}");
        }
    }
}
