//! Compiling a snapshot into what the listeners read: SNI maps, a rustls config, route
//! tables and upstreams. Done off the hot path; the result is swapped in whole.
//!
//! Here the compiled config and what reads it; [`compile`] builds one from a snapshot and
//! the previous config, [`tables`] the tables of one set of listeners.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use wharf_model::{AppProtocol, Host, PortProtocol, Snapshot};

use crate::host_map::HostMap;
use crate::metrics::Metrics;
use crate::routing::{CompiledRoute, RequestView, Router};
use crate::tls::{self, Resumption, SniResolver};
use crate::upstream::forward::CompiledForward;
use crate::upstream::{EndpointState, Upstream};

/// Hashing for maps keyed by configuration (not by what a client sends).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

mod compile;
mod tables;

/// Why a snapshot was refused. The previous config keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// A TLS host names a certificate the snapshot does not hold.
    #[error("TLS host {host} refers to certificate {id}, which the snapshot does not contain")]
    MissingCertificate {
        /// The host.
        host: String,
        /// The certificate id.
        id: String,
    },
    /// rustls refused the server configuration.
    #[error("TLS configuration refused: {0}")]
    Tls(#[from] rustls::Error),
}

impl CompileError {
    /// A short stable reason.
    pub fn reason(&self) -> &'static str {
        match self {
            CompileError::MissingCertificate { .. } => "missing_certificate",
            CompileError::Tls(_) => "tls_config",
        }
    }
}

/// Where the connections of one SNI go.
#[derive(Debug)]
pub struct SniTarget {
    /// The backends, each connection to one chosen by weight.
    pub forward: CompiledForward,
    /// Terminated here (with the certificate of the tables' `tls_stream`) and relayed in
    /// plain text, instead of passed through.
    pub terminate: bool,
}

/// TLS routes by SNI.
#[derive(Debug, Default)]
pub struct SniTable {
    hosts: HostMap<Arc<SniTarget>>,
}

impl SniTable {
    /// The route for an SNI (lower-case). Istio AUTO_PASSTHROUGH names match whatever
    /// their subset part says, since subsets are not supported.
    pub fn lookup(&self, sni: &str) -> Option<&Arc<SniTarget>> {
        if let Some(u) = self.hosts.exact(sni) {
            return Some(u);
        }
        if let Some(u) = normalize_istio_sni(sni).and_then(|n| self.hosts.exact(&n)) {
            return Some(u);
        }
        self.hosts.get(sni).map(|(u, _)| u)
    }
}

/// `outbound_.<port>_.<subset>_.<fqdn>` -> `outbound_.<port>_._.<fqdn>`.
fn normalize_istio_sni(sni: &str) -> Option<String> {
    let rest = sni.strip_prefix("outbound_.")?;
    let mut parts = rest.splitn(3, "_.");
    let (port, _subset, fqdn) = (parts.next()?, parts.next()?, parts.next()?);
    port.parse::<u16>().ok()?;
    Some(format!("outbound_.{port}_._.{fqdn}"))
}

/// Persistent maps: a config's are the previous config's, cloned (sharing every entry) and
/// patched where the snapshot changed.
type Persistent<K, V> = imbl::GenericHashMap<K, V, foldhash::fast::RandomState, imbl::shared_ptr::DefaultSharedPtr>;

/// Endpoint state is kept across configs for the same address, protocol, mesh route and
/// TLS settings.
type EndpointKey = (SocketAddr, AppProtocol, Option<wharf_model::Hbone>, Option<wharf_model::UpstreamTls>);

/// Each endpoint's state, and how many clusters have it.
type Endpoints = Persistent<EndpointKey, (Arc<EndpointState>, usize)>;

/// Parsed certificates by id.
type CertCache = Persistent<String, Arc<CertifiedKey>>;

/// Which hosts' routes looked up which cluster: (cluster id, host).
type ClusterUsers = imbl::OrdSet<(Box<str>, Host)>;

/// What one set of listeners serves: the edge listeners (Ingress), or one Gateway port.
#[derive(Debug)]
pub struct Tables {
    /// HTTPS config.
    pub tls: Arc<ServerConfig>,
    /// The certificates by name that `tls` serves, for checks made per request.
    pub sni: Arc<SniResolver>,
    /// HTTP routes.
    pub router: Router,
    /// TLS routes by SNI.
    pub passthrough: SniTable,
    /// The TLS config that terminates the connections of SNI routes that say so: the
    /// certificates of `tls`, no ALPN. Present when any route terminates.
    pub tls_stream: Option<Arc<ServerConfig>>,
    /// TCP routes by gateway port: the backends, each connection to one chosen by weight.
    pub tcp: HashMap<u16, Arc<CompiledForward>>,
    /// The HTTPS configs of hosts that ask for a client certificate (one per CA).
    pub client_auth: HostMap<Arc<ServerConfig>>,
    /// The hosts of `router` by the clusters their routes looked up (kept for the edge,
    /// whose next tables are these patched).
    users: ClusterUsers,
}

impl Tables {
    /// The HTTPS config for a ClientHello's SNI: its host's, when that asks for a client
    /// certificate, else `tls`.
    pub fn tls_for(&self, sni: Option<&str>) -> &Arc<ServerConfig> {
        self.client_auth_for(sni).unwrap_or(&self.tls)
    }

    /// The config of the host `name` when it asks for a client certificate.
    pub fn client_auth_for(&self, name: Option<&str>) -> Option<&Arc<ServerConfig>> {
        let name = name?;
        match name.bytes().any(|b| b.is_ascii_uppercase()) {
            true => self.client_auth.get(&name.to_ascii_lowercase()).map(|(c, _)| c),
            false => self.client_auth.get(name).map(|(c, _)| c),
        }
    }
}

/// Everything the listeners need, immutable.
#[derive(Debug)]
pub struct CompiledConfig {
    /// Monotonic version (1 for the first applied snapshot; 0 before any).
    pub version: u64,
    /// The snapshot this was compiled from (for /debug/config).
    pub snapshot: Arc<Snapshot>,
    /// The edge listeners' tables.
    pub edge: Tables,
    /// Each Gateway port's tables, by the address its socket is bound to.
    pub ports: HashMap<SocketAddr, Tables>,
    /// The edge Gateway's tables, by the edge listener that serves them: a request or
    /// connection on an edge listener is served from these first, and from `edge` when
    /// they have no route for it.
    pub edge_gateway: HashMap<PortProtocol, Tables>,
    /// The ACME challenges every listener answers.
    pub acme: crate::acme::AcmeAnswers,
    endpoints: Endpoints,
    /// The addresses of the endpoints dialed directly, made on the first HBONE inbound
    /// CONNECT that asks (see [`CompiledConfig::fronts`]).
    direct: std::sync::OnceLock<HashSet<SocketAddr>>,
    /// Every cluster's upstream by id, for the next compilation to reuse those of
    /// unchanged clusters.
    upstreams: Persistent<String, Arc<Upstream>>,
    certs: CertCache,
}

impl CompiledConfig {
    /// Whether `addr` is an endpoint some route or TCP port dials directly (not over
    /// HBONE): a workload this gateway fronts. The set is made once per config, when the
    /// HBONE inbound first asks.
    pub fn fronts(&self, addr: SocketAddr) -> bool {
        let direct = self.direct.get_or_init(|| {
            self.endpoints.keys().filter(|(_, _, hbone, _)| hbone.is_none()).map(|(a, ..)| *a).collect()
        });
        direct.contains(&addr)
    }

    /// The tables a connection is served from: the edge's (`None`), or those of the
    /// Gateway port bound at `port` (`None` once that port is gone).
    pub fn tables(&self, port: Option<SocketAddr>) -> Option<&Tables> {
        match port {
            None => Some(&self.edge),
            Some(addr) => self.ports.get(&addr),
        }
    }

    /// The edge Gateway's tables for the edge listener of `protocol`, when a connection
    /// arrived on an edge listener (`port` `None`) and the edge Gateway has a listener
    /// there.
    pub fn edge_gateway(&self, port: Option<SocketAddr>, protocol: PortProtocol) -> Option<&Tables> {
        match port {
            None => self.edge_gateway.get(&protocol),
            Some(_) => None,
        }
    }

    /// The port the edge Gateway declares for its listener of `protocol` (80, where the
    /// edge socket behind the chart's Service is 8080), when it has one.
    pub fn edge_listener_port(&self, protocol: PortProtocol) -> Option<u16> {
        self.snapshot.gateway_ports.iter().find(|p| p.edge && p.protocol == protocol).map(|p| p.listener_port)
    }

    /// The route of a request for `host` that arrived on `port` over `protocol`, `tables`
    /// being that port's ([`Self::tables`], looked up once per request): on the edge
    /// listeners the edge Gateway's routes and the Ingress rules weighed by host and owner
    /// ([`crate::routing::shared_route`]), elsewhere the port's.
    pub fn route<'a>(
        &'a self,
        tables: &'a Tables,
        port: Option<SocketAddr>,
        protocol: PortProtocol,
        host: &str,
        req: &RequestView<'_>,
    ) -> Option<&'a CompiledRoute> {
        match self.edge_gateway(port, protocol) {
            Some(edge) => crate::routing::shared_route(Some(&edge.router), &tables.router, host, req),
            None => tables.router.route(host, req),
        }
    }

    /// Whether connections to `tables` must read the ClientHello before a TLS config is
    /// chosen: some host asks for client certificates, or an ACME TLS-ALPN-01 challenge is
    /// answered.
    pub fn chooses_by_hello(&self, tables: &Tables) -> bool {
        !tables.client_auth.is_empty() || self.acme.has_tls_alpn01()
    }

    /// The TLS config answering a ClientHello for `sni` offering `alpn` on `port`: an ACME
    /// TLS-ALPN-01 challenge's for that name, else the host's own when it asks for client
    /// certificates, else the port's; `None` once the port is gone.
    pub fn tls_for_hello<'a>(
        &self,
        port: Option<SocketAddr>,
        sni: Option<&str>,
        alpn: impl Iterator<Item = &'a [u8]>,
    ) -> Option<Arc<ServerConfig>> {
        match self.acme.tls_alpn01(sni, alpn) {
            Some(challenge) => Some(Arc::clone(challenge)),
            None => self.tables(port).map(|t| Arc::clone(t.tls_for(sni))),
        }
    }
}

/// Builds [`CompiledConfig`]s, reusing endpoint state (pooled connections) and parsed
/// certificates from the previous one.
#[derive(Debug)]
pub struct Compiler {
    metrics: Metrics,
    resumption: Resumption,
    policy: tls::TlsPolicy,
    fallback_cert: Arc<CertifiedKey>,
    limiters: crate::ratelimit::Limiters,
    checkers: crate::auth::Checkers,
}

impl Compiler {
    /// A compiler whose configs share `resumption` state, and serve `policy`'s TLS.
    pub fn new(
        metrics: Metrics,
        resumption: Resumption,
        policy: tls::TlsPolicy,
        fallback_cert: Arc<CertifiedKey>,
    ) -> Self {
        Compiler {
            metrics,
            resumption,
            policy,
            fallback_cert,
            limiters: crate::ratelimit::Limiters::default(),
            checkers: crate::auth::Checkers::default(),
        }
    }

    /// An empty config: no routes, the fallback certificate.
    pub fn empty(&self) -> Result<CompiledConfig, CompileError> {
        self.compile(Arc::new(Snapshot::default()), 0, None)
    }
}

#[cfg(test)]
mod tests;
