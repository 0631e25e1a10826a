//! The immutable config snapshot: everything the data plane needs to serve, and nothing
//! about where it came from beyond object references for logs and metrics.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use imbl::OrdMap;
use serde::{Serialize, Serializer};

use crate::{
    Action, Auth, ClientAuthHost, ClientCertCheck, ClientFilter, Cors, Host, Hosted, Hosts, PathMatch, RateLimit,
    RouteMatch, WeightedBackend,
};

/// One complete configuration. Built by `translate`, compiled and served by the data plane.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Snapshot {
    /// Certificates by id (`namespace/secret-name`), already validated.
    pub certificates: OrdMap<String, Certificate>,
    /// The certificate served when no TLS host matches the SNI (or there is no SNI).
    pub default_certificate: Option<String>,
    /// Which certificate each TLS host gets.
    pub tls_hosts: Hosts<TlsHost>,
    /// HTTP routing, one entry per distinct host. Shared: a host the controller did not
    /// translate again is the same allocation in the next snapshot.
    pub virtual_hosts: Hosts<Arc<VirtualHost>>,
    /// Where requests go that match no rule of any host (an Ingress `defaultBackend`).
    pub default_backend: Option<Route>,
    /// TLS passthrough routes by SNI (port 15443).
    pub passthrough: Vec<SniRoute>,
    /// Plain TCP listeners and where they forward.
    pub tcp_routes: Vec<TcpRoute>,
    /// Gateway API: what each Gateway serves on each of its ports, each port a socket of
    /// its own. The fields above are the edge listeners' (Ingress).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gateway_ports: Vec<GatewayPort>,
    /// Upstream clusters (a Service port and its endpoints) by id.
    pub clusters: OrdMap<String, Cluster>,
    /// Hosts of the HTTPS port whose handshakes ask for a client certificate.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub client_auth: Vec<ClientAuthHost>,
    /// The answers to the ACME challenges of the orders being validated.
    #[serde(skip_serializing_if = "AcmeChallenges::is_empty")]
    pub acme: AcmeChallenges,
}

/// Answers to ACME challenges (RFC 8555, RFC 8737), served by every listener of their kind
/// while an order is validated, ahead of any route.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AcmeChallenges {
    /// HTTP-01: the key authorization of each token, the body of
    /// `GET /.well-known/acme-challenge/<token>` on the HTTP listeners.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub http01: BTreeMap<String, String>,
    /// TLS-ALPN-01: the challenge certificate of each DNS name, served by the HTTPS
    /// listeners to a ClientHello for that name offering ALPN `acme-tls/1`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tls_alpn01: BTreeMap<String, Certificate>,
}

impl AcmeChallenges {
    /// No challenge to answer.
    pub fn is_empty(&self) -> bool {
        self.http01.is_empty() && self.tls_alpn01.is_empty()
    }
}

/// What one Gateway serves on one port: the listeners of that port merged (they differ
/// by hostname), with the routes attached to them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GatewayPort {
    /// The Gateway.
    pub gateway: ObjectRef,
    /// The address and port the socket is bound to; the port is the listener's, but for
    /// the edge Gateway's, served on Wharf's own sockets.
    pub bind: SocketAddr,
    /// The listener's port, as the Gateway declares it (where clients reach it: for the
    /// edge Gateway, a port of Wharf's Service, 80 where the socket is 8080).
    pub listener_port: u16,
    /// Served on the edge listener of this protocol (Wharf's own HTTP, HTTPS or
    /// passthrough socket, bound at `bind`) ahead of the Ingress routes, instead of on a
    /// socket of its own: the edge Gateway's listeners.
    #[serde(skip_serializing_if = "is_false")]
    pub edge: bool,
    /// How connections are served.
    pub protocol: PortProtocol,
    /// HTTPS, and TLS routes that terminate: the certificate for each listener hostname
    /// (SNI).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tls_hosts: Vec<TlsHost>,
    /// HTTP and HTTPS: routing by host.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub virtual_hosts: Vec<Arc<VirtualHost>>,
    /// TLS passthrough: routes by SNI.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub passthrough: Vec<SniRoute>,
    /// TCP: the backends connections go to, each connection to one chosen by weight.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tcp: Vec<WeightedBackend>,
}

/// How a Gateway port serves its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PortProtocol {
    /// Plain HTTP/1.1 and h2c.
    Http,
    /// TLS terminated with the certificate the SNI selects, then HTTP.
    Https,
    /// TLS routed by the SNI of the ClientHello: passed through untouched, or terminated
    /// (a TLS listener in mode Terminate) and relayed in plain text.
    Passthrough,
    /// Plain TCP to one backend.
    Tcp,
}

/// A Kubernetes object a piece of config came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ObjectRef {
    /// Kind, e.g. `Ingress`: the kinds Wharf reads are not copied (a config holds one
    /// reference or more per route).
    pub kind: std::borrow::Cow<'static, str>,
    /// Namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectRef {
    /// A reference to a namespaced object.
    pub fn new(kind: &str, namespace: &str, name: &str) -> ObjectRef {
        ObjectRef { kind: ObjectRef::kind(kind), namespace: namespace.to_owned(), name: name.to_owned() }
    }

    /// `kind`, borrowed when it is one Wharf reads.
    pub fn kind(kind: &str) -> std::borrow::Cow<'static, str> {
        const KINDS: [&str; 15] = [
            "Ingress",
            "Secret",
            "Service",
            "EndpointSlice",
            "IngressClass",
            "ConfigMap",
            "Namespace",
            "GatewayClass",
            "Gateway",
            "HTTPRoute",
            "GRPCRoute",
            "TLSRoute",
            "TCPRoute",
            "ReferenceGrant",
            "BackendTLSPolicy",
        ];
        match KINDS.iter().find(|k| **k == kind) {
            Some(k) => std::borrow::Cow::Borrowed(k),
            None => std::borrow::Cow::Owned(kind.to_owned()),
        }
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// A validated certificate chain and its private key, parsed once where it is validated and
/// shared by every config that serves it. The PEM it was read from is not kept: the private
/// key lives only in the signing key, and the digest of the PEM tells a changed Secret from
/// an unchanged one.
#[derive(Clone, Serialize)]
pub struct Certificate {
    /// SHA-256 of the chain and the key as read ([`Certificate::digest`]). Two certificates
    /// are equal when their digests are.
    #[serde(serialize_with = "hex")]
    pub sha256: [u8; 32],
    /// DNS names the leaf covers (SAN dNSName entries).
    pub dns_names: Arc<[String]>,
    /// Expiry of the leaf, seconds since the Unix epoch.
    pub not_after: i64,
    /// The chain (leaf first, then intermediates) and the signing key, as rustls serves them.
    #[serde(skip)]
    pub key: Arc<rustls::sign::CertifiedKey>,
}

impl Certificate {
    /// Parses and validates a PEM chain and key ([`crate::tls::load`]: the key matches the
    /// leaf, the leaf has not expired at `now`, Unix seconds).
    pub fn from_pem(chain_pem: &[u8], key_pem: &[u8], now: i64) -> Result<Certificate, crate::tls::CertError> {
        let loaded = crate::tls::load(chain_pem, key_pem, now)?;
        Ok(Certificate {
            sha256: Certificate::digest(chain_pem, key_pem),
            dns_names: loaded.info.dns_names.into(),
            not_after: loaded.info.not_after,
            key: loaded.certified_key,
        })
    }

    /// SHA-256 over the chain's length (8 bytes, little-endian), the chain and the key: what
    /// [`Certificate::sha256`] holds for a certificate read from this PEM.
    pub fn digest(chain_pem: &[u8], key_pem: &[u8]) -> [u8; 32] {
        use aws_lc_rs::digest;
        let mut ctx = digest::Context::new(&digest::SHA256);
        ctx.update(&(chain_pem.len() as u64).to_le_bytes());
        ctx.update(chain_pem);
        ctx.update(key_pem);
        let mut out = [0; 32];
        out.copy_from_slice(ctx.finish().as_ref());
        out
    }
}

impl PartialEq for Certificate {
    /// The rest is derived from what the digest covers.
    fn eq(&self, other: &Certificate) -> bool {
        self.sha256 == other.sha256
    }
}

impl std::fmt::Debug for Certificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificate")
            .field("sha256", &Hex(&self.sha256))
            .field("dns_names", &self.dns_names)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

/// Bytes shown as lower-case hexadecimal.
struct Hex<'a>(&'a [u8]);

impl std::fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl std::fmt::Debug for Hex<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

fn hex<S: Serializer>(bytes: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&Hex(bytes))
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A host served over TLS on the HTTPS port, and its certificate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TlsHost {
    /// Exact or wildcard host.
    pub host: Host,
    /// Key into [`Snapshot::certificates`].
    pub certificate: String,
}

/// All HTTP routes of one host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VirtualHost {
    /// The host these routes answer.
    pub host: Host,
    /// Routes in precedence order: the first that matches wins.
    pub routes: Vec<Route>,
}

/// Every field of a host compares reflexively (the model holds no floating-point number),
/// and as `Eq` two `Arc<VirtualHost>` that share their allocation compare equal by pointer,
/// without looking at the routes: a snapshot compared with the last one it shares most
/// hosts with costs a pointer per shared host.
impl Eq for VirtualHost {}

/// One HTTP route: the requests it takes and what it does with them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Route {
    /// The requests this route takes.
    pub matches: RouteMatch,
    /// What it does with them.
    pub action: Action,
    /// The object that defined the route (metrics label and logs).
    pub source: ObjectRef,
    /// Answer plain-HTTP requests with a 308 to https (the host has TLS and the Ingress
    /// did not opt out).
    pub https_redirect: bool,
    /// Largest request body in bytes (413 beyond); `Some(0)` is unlimited, `None` the
    /// gateway's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<u64>,
    /// The client addresses it serves; others are answered 403.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clients: Option<Box<ClientFilter>>,
    /// CORS: preflight requests answered here, CORS headers on the responses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cors: Option<Box<Cors>>,
    /// Per-client limits (503 beyond).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<Box<RateLimit>>,
    /// Who may use it (checked after the address list).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<Box<Auth>>,
    /// The client certificate it asks for (checked before `auth`), and what the backend is
    /// told of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<Box<ClientCertCheck>>,
}

impl Route {
    /// A route forwarding what `path` matches to one cluster, as an Ingress path does.
    pub fn forward(path: PathMatch, cluster: &str, source: ObjectRef) -> Route {
        Route::new(RouteMatch::path(path), Action::forward(cluster), source)
    }

    /// A route taking `action` for what `matches` matches, with no checks of its own.
    pub fn new(matches: RouteMatch, action: Action, source: ObjectRef) -> Route {
        Route {
            matches,
            action,
            source,
            https_redirect: false,
            max_body_bytes: None,
            clients: None,
            cors: None,
            rate_limit: None,
            auth: None,
            client_cert: None,
        }
    }
}

/// A route of a TLS port by SNI: connections whose SNI matches go to one of the backends,
/// each connection to one chosen by weight: passed through untouched, or, when
/// `terminate` is set, decrypted here (with the port's certificate for that SNI) and
/// relayed in plain text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SniRoute {
    /// SNI to match (exact or wildcard).
    pub host: Host,
    /// Where connections go; none (or none valid) closes them.
    pub backends: Vec<WeightedBackend>,
    /// TLS is terminated here instead of passed through.
    #[serde(skip_serializing_if = "is_false")]
    pub terminate: bool,
    /// The object that defined the route.
    pub source: ObjectRef,
}

impl SniRoute {
    /// A passthrough route to one cluster.
    pub fn passthrough(host: Host, cluster: &str, source: ObjectRef) -> SniRoute {
        SniRoute { host, backends: vec![WeightedBackend::new(cluster, 1)], terminate: false, source }
    }
}

/// A plain TCP listener port and where it forwards.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TcpRoute {
    /// The gateway port (e.g. 31400).
    pub port: u16,
    /// Key into [`Snapshot::clusters`].
    pub cluster: String,
}

/// How the gateway talks HTTP to a cluster's endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AppProtocol {
    /// HTTP/1.1 (the default).
    #[default]
    Http1,
    /// HTTP/2 over cleartext with prior knowledge (`appProtocol: kubernetes.io/h2c`).
    H2c,
}

/// An upstream: one Service port and its ready endpoints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cluster {
    /// Protocol for HTTP traffic to the endpoints.
    pub protocol: AppProtocol,
    /// Endpoints to balance across. Empty means "no healthy upstream" (503).
    pub endpoints: Vec<Endpoint>,
    /// TLS to the endpoints (Gateway API BackendTLSPolicy); plain text when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<UpstreamTls>,
}

/// TLS from the gateway to a cluster's endpoints, and how their certificates are checked.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct UpstreamTls {
    /// The SNI sent, and the name the certificate must cover when `subject_alt_names` is
    /// empty.
    pub server_name: String,
    /// The CA certificates (PEM) the chain must lead to; `None`: the system's roots.
    pub ca_pem: Option<Arc<str>>,
    /// The certificate must have one of these, instead of `server_name`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subject_alt_names: Vec<SubjectAltName>,
    /// No certificate check and no SNI: encryption only, as ingress-nginx's
    /// `backend-protocol: HTTPS` does by default. The other fields are not used.
    #[serde(skip_serializing_if = "is_false")]
    pub unverified: bool,
    /// No SNI is sent (ingress-nginx without `proxy-ssl-server-name: on`); the
    /// certificate is still checked against `server_name`.
    #[serde(skip_serializing_if = "is_false")]
    pub no_sni: bool,
    /// How many certificates the backend's chain may have above its own, the CA
    /// included (nginx's `proxy_ssl_verify_depth`); any when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify_depth: Option<u8>,
}

/// A subject alternative name an upstream certificate may be required to have.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SubjectAltName {
    /// A DNS name (wildcard certificates cover it as they would a server name).
    Dns(String),
    /// A URI, compared exactly (e.g. a SPIFFE ID).
    Uri(String),
}

/// One upstream address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Endpoint {
    /// IP and target port.
    pub addr: SocketAddr,
    /// Reach it through the mesh (HBONE) instead of dialing `addr` directly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hbone: Option<Hbone>,
}

impl Endpoint {
    /// A plain endpoint, dialed directly.
    pub fn direct(addr: SocketAddr) -> Endpoint {
        Endpoint { addr, hbone: None }
    }
}

/// How to reach an endpoint inside the Istio ambient mesh: an HTTP/2 CONNECT tunnel over
/// mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Hbone {
    /// Where the tunnel goes: the pod's IP and port 15008, or a waypoint's HBONE address.
    pub dial: SocketAddr,
    /// The identity the peer must present.
    pub identity: crate::Identity,
    /// `:authority` of the CONNECT request: `<pod ip>:<target port>`, or
    /// `<service host>:<port>` through a waypoint.
    pub authority: String,
}

/// Parses an nginx-style size (`proxy-body-size`): bytes, or a number with a `k`, `m` or
/// `g` suffix (any case, powers of 1024). `0` means unlimited.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    num.parse::<u64>().ok()?.checked_mul(mult)
}

// The snapshot's host tables key their entries by host.
impl Hosted for TlsHost {
    fn host(&self) -> &Host {
        &self.host
    }
}

impl Hosted for Arc<VirtualHost> {
    fn host(&self) -> &Host {
        &self.host
    }
}

#[cfg(test)]
mod size_tests {
    use super::{parse_size, AcmeChallenges, Certificate, ObjectRef};

    #[test]
    fn acme_challenges_are_empty_only_without_any() {
        let mut c = AcmeChallenges::default();
        assert!(c.is_empty());
        c.http01.insert("t".into(), "t.k".into());
        assert!(!c.is_empty());
        let mut c = AcmeChallenges::default();
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let pem = rcgen::CertificateParams::new(vec!["a.example".to_owned()]).unwrap().self_signed(&key).unwrap().pem();
        let cert = Certificate::from_pem(pem.as_bytes(), key.serialize_pem().as_bytes(), 0).unwrap();
        c.tls_alpn01.insert("a.example".into(), cert);
        assert!(!c.is_empty());
    }

    #[test]
    fn object_refs_print_kind_namespace_and_name() {
        assert_eq!(ObjectRef::new("Ingress", "web", "shop").to_string(), "Ingress web/shop");
        assert_eq!(ObjectRef::new("IngressClass", "", "wharf").to_string(), "IngressClass wharf");
    }

    #[test]
    fn nginx_sizes() {
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("1024"), Some(1024));
        assert_eq!(parse_size("8k"), Some(8 << 10));
        assert_eq!(parse_size("1m"), Some(1 << 20));
        assert_eq!(parse_size(" 2M "), Some(2 << 20));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        for bad in ["", "m", "1.5m", "-1", "+1", "+1m", "1t", "1 m", "99999999999999999999g", "0x10"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }
}

#[cfg(test)]
mod route_size_tests {
    /// Every served path is a `Route` in the snapshot: the parts few routes use (client
    /// lists, CORS, limits, authentication, client certificates) are boxed to keep the
    /// others small.
    #[test]
    fn a_route_without_extras_stays_small() {
        let size = std::mem::size_of::<super::Route>();
        assert!(size <= 424, "Route is {size} bytes (1,104 with the extras inline)");
    }

    /// A kind Wharf reads is not copied into each reference; others are kept as given.
    #[test]
    fn known_kinds_are_borrowed() {
        use std::borrow::Cow;
        for kind in ["Ingress", "Secret", "HTTPRoute", "BackendTLSPolicy"] {
            let r = super::ObjectRef::new(kind, "web", "a");
            assert!(matches!(r.kind, Cow::Borrowed(k) if k == kind), "{kind}: {:?}", r.kind);
        }
        let other = super::ObjectRef::new("Widget", "web", "a");
        assert!(matches!(other.kind, Cow::Owned(ref k) if k == "Widget"));
        assert_eq!(other.to_string(), "Widget web/a");
    }
}

#[cfg(test)]
mod certificate_tests {
    use super::Certificate;

    fn pem(names: &[&str], key: &rcgen::KeyPair) -> String {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        rcgen::CertificateParams::new(names).unwrap().self_signed(key).unwrap().pem()
    }

    #[test]
    fn certificates_are_equal_when_read_from_the_same_pem() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let (a, b, k) = (pem(&["a.example"], &key), pem(&["a.example"], &key), key.serialize_pem());
        let load = |c: &str| Certificate::from_pem(c.as_bytes(), k.as_bytes(), 0).unwrap();
        assert_eq!(load(&a), load(&a), "parsed twice, one PEM");
        assert_ne!(load(&a), load(&b), "the same names and key, another certificate");
        assert_eq!(load(&a).sha256, Certificate::digest(a.as_bytes(), k.as_bytes()));
        assert_eq!(load(&a).dns_names.as_ref(), ["a.example"]);
        // The chain's length is part of the digest: moving bytes from one half to the
        // other changes it.
        assert_ne!(Certificate::digest(b"ab", b"c"), Certificate::digest(b"a", b"bc"));
        assert_ne!(Certificate::digest(b"a", b""), Certificate::digest(b"", b"a"));
    }

    #[test]
    fn a_certificate_shows_its_digest_and_names_never_its_key() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let (chain, k) = (pem(&["a.example", "*.b.example"], &key), key.serialize_pem());
        let cert = Certificate::from_pem(chain.as_bytes(), k.as_bytes(), 0).unwrap();
        let hex: String =
            Certificate::digest(chain.as_bytes(), k.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
        let json = serde_json::to_value(&cert).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"sha256": hex, "dns_names": ["a.example", "*.b.example"], "not_after": cert.not_after})
        );
        let debug = format!("{cert:?}");
        assert!(debug.contains(&hex) && debug.contains("*.b.example"), "{debug}");
        let secret = k.lines().nth(1).unwrap();
        assert!(!debug.contains(secret) && !json.to_string().contains(secret));
    }

    #[test]
    fn a_snapshot_shown_as_json_leaves_out_flags_that_are_off() {
        let tls = crate::UpstreamTls {
            server_name: "app.web.svc".into(),
            ca_pem: None,
            subject_alt_names: Vec::new(),
            unverified: true,
            no_sni: false,
            verify_depth: None,
        };
        assert_eq!(
            serde_json::to_value(&tls).unwrap(),
            serde_json::json!({"server_name": "app.web.svc", "ca_pem": null, "unverified": true})
        );
    }

    #[test]
    fn a_bad_pem_is_refused_with_why() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let other = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let chain = pem(&["a.example"], &key);
        let err = Certificate::from_pem(chain.as_bytes(), other.serialize_pem().as_bytes(), 0).err();
        assert!(matches!(err, Some(crate::tls::CertError::KeyMismatch)), "{err:?}");
    }
}
