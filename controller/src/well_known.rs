//! Labels and keys of Kubernetes objects that several layers read or write: the bottom of
//! the crate, using nothing else.

/// The label that names an EndpointSlice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label that sends a Service's (or a namespace's) traffic through a waypoint.
pub const USE_WAYPOINT: &str = "istio.io/use-waypoint";
/// The namespace of the waypoint [`USE_WAYPOINT`] names.
pub const USE_WAYPOINT_NAMESPACE: &str = "istio.io/use-waypoint-namespace";
/// The label of the Secrets Wharf manages for ACME, its value the issuer's name. A TLS
/// Secret without it is never overwritten.
pub const ACME_MANAGED_LABEL: &str = "wharf.dev/acme-issuer";
/// The label that marks a Secret as holding ACME challenges.
pub const ACME_CHALLENGE_LABEL: &str = "wharf.dev/acme-challenge";
/// How the ConfigMap, in the controller's namespace, where the leader records which
/// namespace serves each host ends: the leader-election Lease's name, then this (so that
/// a restarted or new replica keeps the owners).
pub const HOST_OWNERS_SUFFIX: &str = "-host-owners";
/// The key of that ConfigMap holding the record: a line `HOST NAMESPACE` per host, as
/// written (`*.a.test`; `*` for rules without host), sorted.
pub const HOST_OWNERS_KEY: &str = "owners";

/// The key of a TLS Secret's certificate chain.
pub const TLS_CRT: &str = "tls.crt";

/// The key of a TLS Secret's private key.
pub const TLS_KEY: &str = "tls.key";

/// The key of CA certificates: in an `auth-tls-secret` or `proxy-ssl-secret` Secret, and in
/// the ConfigMap a BackendTLSPolicy names.
pub const CA_CRT: &str = "ca.crt";
