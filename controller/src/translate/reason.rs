//! Why a diagnostic was told: the reason of the `Warning` Event on the object at fault and
//! the label of its log line. One variant per reason; `docs/events.md` says what each
//! means and how to fix it.

use wharf_model::tls::CertError;

/// Declares [`Reason`] with each variant's Event reason.
macro_rules! reasons {
    ($($(#[doc = $doc:literal])* $variant:ident = $name:literal,)*) => {
        /// A diagnostic's reason: a short stable CamelCase word (the Event's reason).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Reason {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Reason {
            /// Every reason.
            pub const ALL: &'static [Reason] = &[$(Reason::$variant),*];

            /// The Event reason.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$variant => $name,)*
                }
            }
        }
    };
}

reasons! {
    /// A TLS Secret does not exist.
    SecretNotFound = "SecretNotFound",
    /// A TLS entry names a Secret of another namespace.
    SecretInOtherNamespace = "SecretInOtherNamespace",
    /// A TLS Secret is not of type `kubernetes.io/tls` and lacks `tls.crt` or `tls.key`.
    SecretNotTls = "SecretNotTLS",
    /// `tls.crt` holds no PEM certificate, or one that does not parse as PEM.
    BadCertificatePem = "BadCertificatePEM",
    /// The leaf certificate is not valid X.509.
    BadCertificate = "BadCertificate",
    /// `tls.key` holds no usable private key, or one of an unsupported type.
    BadPrivateKey = "BadPrivateKey",
    /// `tls.key` does not belong to the certificate.
    KeyMismatch = "KeyMismatch",
    /// The certificate has expired.
    CertificateExpired = "CertificateExpired",
    /// The certificate does not cover a host its TLS entry names.
    CertificateHostMismatch = "CertificateHostMismatch",
    /// Two Ingresses name different Secrets for one TLS host.
    TlsHostConflict = "TLSHostConflict",
    /// A host is not a valid DNS name or wildcard.
    InvalidHost = "InvalidHost",
    /// A path is not valid for its path type.
    InvalidPath = "InvalidPath",
    /// A path type is not `Exact`, `Prefix` or `ImplementationSpecific`.
    InvalidPathType = "InvalidPathType",
    /// An older Ingress (or an earlier rule) serves this host and path.
    HostPathConflict = "HostPathConflict",
    /// An older Ingress sets the default backend.
    DefaultBackendConflict = "DefaultBackendConflict",
    /// Another namespace serves this host.
    HostOwnedByOtherNamespace = "HostOwnedByOtherNamespace",
    /// An edge Gateway route serves this host and path.
    OverriddenByGatewayRoute = "OverriddenByGatewayRoute",
    /// A backend Service does not exist.
    ServiceNotFound = "ServiceNotFound",
    /// A backend Service has no such port.
    ServicePortNotFound = "ServicePortNotFound",
    /// A backend is a resource, or a Service of a kind that cannot be proxied to.
    UnsupportedBackend = "UnsupportedBackend",
    /// An endpoint of a Service is not dialed: a Pod of another namespace, or a link-local,
    /// multicast or unspecified address.
    EndpointRefused = "EndpointRefused",
    /// An annotation's value is not valid.
    InvalidAnnotation = "InvalidAnnotation",
    /// An annotation is not supported.
    UnsupportedAnnotation = "UnsupportedAnnotation",
    /// A snippet annotation (raw nginx configuration) is refused.
    SnippetRefused = "SnippetRefused",
    /// A canary Ingress has no main Ingress with its host and path.
    CanaryWithoutMain = "CanaryWithoutMain",
    /// Two canaries take requests from one route.
    CanaryConflict = "CanaryConflict",
    /// The `auth-secret` of basic authentication is missing or invalid.
    AuthSecretInvalid = "AuthSecretInvalid",
    /// The `auth-tls-secret` of client certificates is missing or invalid.
    AuthTlsSecretInvalid = "AuthTLSSecretInvalid",
    /// Two Ingresses ask different client certificates of one host.
    ClientAuthConflict = "ClientAuthConflict",
    /// An `auth-url` names a cluster address this namespace may not reach.
    AuthUrlNotPermitted = "AuthURLNotPermitted",
    /// An `auth-url` names a host no route of this gateway serves.
    AuthUrlNotServed = "AuthURLNotServed",
    /// The `proxy-ssl-secret` of backend TLS is missing or invalid.
    ProxySslSecretInvalid = "ProxySSLSecretInvalid",
    /// `wharf.dev/acme` asks for ACME, and no issuer is configured.
    AcmeNotConfigured = "AcmeNotConfigured",
    /// The ACME issuer named is not configured.
    AcmeIssuerUnknown = "AcmeIssuerUnknown",
    /// Two TLS entries ask different issuers for one Secret.
    AcmeIssuerConflict = "AcmeIssuerConflict",
    /// ACME may not write Secrets in this namespace.
    AcmeNamespaceNotAllowed = "AcmeNamespaceNotAllowed",
    /// The Secret exists and Wharf does not manage it.
    AcmeSecretNotManaged = "AcmeSecretNotManaged",
    /// A wildcard host cannot be ordered with HTTP-01 or TLS-ALPN-01.
    AcmeWildcardNotSupported = "AcmeWildcardNotSupported",
    /// A Gateway listener asks for ACME without a hostname.
    AcmeNoHost = "AcmeNoHost",
    /// A challenge Secret of an order in progress is not valid.
    AcmeChallengeInvalid = "AcmeChallengeInvalid",
    /// A Gateway listener's `tls.options` value is not valid.
    InvalidListenerOption = "InvalidListenerOption",
}

/// In the order of the Event reasons' names (the order diagnostics are told in).
impl Ord for Reason {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for Reason {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl From<&CertError> for Reason {
    fn from(e: &CertError) -> Reason {
        match e {
            CertError::NotTls { .. } => Reason::SecretNotTls,
            CertError::NoCertificate | CertError::BadCertificatePem(_) => Reason::BadCertificatePem,
            CertError::BadCertificate(_) => Reason::BadCertificate,
            CertError::BadKey(_) | CertError::UnsupportedKey(_) => Reason::BadPrivateKey,
            CertError::KeyMismatch => Reason::KeyMismatch,
            CertError::Expired { .. } => Reason::CertificateExpired,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_errors_have_the_documented_reasons() {
        let cases = [
            (CertError::NotTls { key: "tls.crt", secret_type: "Opaque".into() }, "SecretNotTLS"),
            (CertError::NoCertificate, "BadCertificatePEM"),
            (CertError::BadCertificatePem("x".into()), "BadCertificatePEM"),
            (CertError::BadCertificate("x".into()), "BadCertificate"),
            (CertError::BadKey("x".into()), "BadPrivateKey"),
            (CertError::UnsupportedKey("x".into()), "BadPrivateKey"),
            (CertError::KeyMismatch, "KeyMismatch"),
            (CertError::Expired { not_after: 0 }, "CertificateExpired"),
        ];
        for (e, reason) in cases {
            assert_eq!(Reason::from(&e).as_str(), reason, "{e}");
        }
    }

    #[test]
    fn reasons_are_distinct_camel_case_words() {
        let mut seen = std::collections::BTreeSet::new();
        for r in Reason::ALL {
            let s = r.as_str();
            assert!(s.starts_with(|c: char| c.is_ascii_uppercase()), "{s}");
            assert!(s.chars().all(|c| c.is_ascii_alphanumeric()), "{s}");
            assert!(seen.insert(s), "{s} twice");
            assert_eq!(r.to_string(), s);
            assert_eq!(Reason::ALL.iter().filter(|o| **o == s).count(), 1, "{s} is the name of one reason");
        }
    }

    /// docs/events.md has a row for every reason, and none for a reason there is not.
    #[test]
    fn every_reason_is_documented() {
        let page =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/events.md")).unwrap_or_default();
        let rows: std::collections::BTreeSet<&str> =
            page.lines().filter_map(|l| l.strip_prefix("| `")).filter_map(|l| l.split('`').next()).collect();
        let ours: std::collections::BTreeSet<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(rows, ours, "docs/events.md rows against Reason::ALL");
    }
}
