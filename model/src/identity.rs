//! SPIFFE workload identities as Istio spells them:
//! `spiffe://<trust-domain>/ns/<namespace>/sa/<service-account>`.

use std::fmt;

use serde::{Serialize, Serializer};

/// A mesh workload identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identity {
    /// Trust domain, e.g. `cluster.local`.
    pub trust_domain: String,
    /// Namespace.
    pub namespace: String,
    /// Service account.
    pub service_account: String,
}

/// Why a URI is not an Istio SPIFFE identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a SPIFFE identity of the form spiffe://<trust-domain>/ns/<namespace>/sa/<service-account>")]
pub struct IdentityError(pub String);

impl Identity {
    /// An identity from its parts.
    pub fn new(trust_domain: &str, namespace: &str, service_account: &str) -> Identity {
        Identity {
            trust_domain: trust_domain.to_owned(),
            namespace: namespace.to_owned(),
            service_account: service_account.to_owned(),
        }
    }

    /// Parses `spiffe://td/ns/NS/sa/SA` (exactly five path parts, none empty).
    pub fn parse(uri: &str) -> Result<Identity, IdentityError> {
        let err = || IdentityError(uri.to_owned());
        let rest = uri.strip_prefix("spiffe://").ok_or_else(err)?;
        let parts: Vec<&str> = rest.split('/').collect();
        match parts.as_slice() {
            [td, "ns", ns, "sa", sa] if !td.is_empty() && !ns.is_empty() && !sa.is_empty() => {
                Ok(Identity::new(td, ns, sa))
            }
            _ => Err(err()),
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "spiffe://{}/ns/{}/sa/{}", self.trust_domain, self.namespace, self.service_account)
    }
}

impl Serialize for Identity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The URI SANs of a DER certificate (empty if it does not parse).
pub fn uri_sans(der: &[u8]) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Vec::new();
    };
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::URI(u) => Some((*u).to_owned()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_exactly_the_istio_shape() {
        let id = Identity::parse("spiffe://cluster.local/ns/web/sa/frontend").unwrap();
        assert_eq!(id, Identity::new("cluster.local", "web", "frontend"));
        assert_eq!(id.to_string(), "spiffe://cluster.local/ns/web/sa/frontend");
        for bad in [
            "spiffe://cluster.local/ns/web/sa/",
            "spiffe://cluster.local/ns/web/sa/x/y",
            "spiffe://cluster.local/sa/x/ns/web",
            "https://cluster.local/ns/web/sa/x",
            "spiffe:///ns/web/sa/x",
        ] {
            assert!(Identity::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn uri_sans_lists_only_uris() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["a.example.com".to_string()]).unwrap();
        for uri in ["spiffe://cluster.local/ns/a/sa/b", "https://example.com/x"] {
            params.subject_alt_names.push(rcgen::SanType::URI(rcgen::string::Ia5String::try_from(uri).unwrap()));
        }
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(uri_sans(cert.der()), ["spiffe://cluster.local/ns/a/sa/b", "https://example.com/x"]);
        let plain =
            rcgen::CertificateParams::new(vec!["a.example.com".to_string()]).unwrap().self_signed(&key).unwrap();
        assert!(uri_sans(plain.der()).is_empty());
        assert!(uri_sans(b"not a certificate").is_empty());
    }
}
