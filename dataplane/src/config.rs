//! Compiling a snapshot into what the listeners read: SNI maps, a rustls config, route
//! tables and upstreams. Done off the hot path; the result is swapped in whole.

use std::collections::HashMap;
use std::sync::Arc;

use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use wharf_model::{AppProtocol, Host, PathMatch, Snapshot};

use crate::metrics::{Metrics, RouteMetrics};
use crate::proxy::upstream::{EndpointState, Upstream};
use crate::tls::{self, Resumption, SniResolver};

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
    /// A certificate failed to load.
    #[error("certificate {id} cannot be served: {source}")]
    Certificate {
        /// The certificate id.
        id: String,
        /// Why.
        source: wharf_model::tls::CertError,
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
            CompileError::Certificate { .. } => "bad_certificate",
            CompileError::Tls(_) => "tls_config",
        }
    }
}

/// One route, ready to serve.
#[derive(Debug)]
pub struct CompiledRoute {
    /// Path match.
    pub path: PathMatch,
    /// Where requests go; `None` when the cluster does not exist (answers 503).
    pub upstream: Option<Arc<Upstream>>,
    /// `namespace/name` of the Ingress (logs, metrics).
    pub source: String,
    /// Redirect plain HTTP to HTTPS.
    pub https_redirect: bool,
    /// Request body limit of the route (`Some(0)`: unlimited; `None`: the gateway's).
    pub max_body_bytes: Option<u64>,
    /// Metric handles for this route.
    pub metrics: RouteMetrics,
}

/// Host lookup then path lookup, in Kubernetes precedence.
#[derive(Debug, Default)]
pub struct Router {
    exact: HashMap<String, Vec<CompiledRoute>>,
    wildcard: HashMap<String, Vec<CompiledRoute>>,
    any: Vec<CompiledRoute>,
    default: Option<CompiledRoute>,
}

impl Router {
    /// The route for a request: the most specific host that has a matching path wins
    /// (exact host, then wildcard, then rules without host), then the default backend.
    pub fn route(&self, host: &str, path: &str) -> Option<&CompiledRoute> {
        fn first<'r>(routes: &'r [CompiledRoute], path: &str) -> Option<&'r CompiledRoute> {
            routes.iter().find(|r| r.path.matches(path))
        }
        self.exact
            .get(host)
            .and_then(|r| first(r, path))
            .or_else(|| Host::wildcard_key(host).and_then(|k| self.wildcard.get(k)).and_then(|r| first(r, path)))
            .or_else(|| first(&self.any, path))
            .or(self.default.as_ref())
    }
}

/// Passthrough routes by SNI.
#[derive(Debug, Default)]
pub struct SniTable {
    exact: HashMap<String, Arc<Upstream>>,
    wildcard: HashMap<String, Arc<Upstream>>,
}

impl SniTable {
    /// The upstream for an SNI (lower-case). Istio AUTO_PASSTHROUGH names match whatever
    /// their subset part says, since subsets are not supported.
    pub fn lookup(&self, sni: &str) -> Option<&Arc<Upstream>> {
        if let Some(u) = self.exact.get(sni) {
            return Some(u);
        }
        if let Some(normalized) = normalize_istio_sni(sni) {
            if let Some(u) = self.exact.get(&normalized) {
                return Some(u);
            }
        }
        Host::wildcard_key(sni).and_then(|k| self.wildcard.get(k))
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

/// Endpoint state is kept across configs for the same address, protocol and mesh route.
type EndpointKey = (std::net::SocketAddr, AppProtocol, Option<wharf_model::Hbone>);

/// Parsed certificates by id, with the PEM they came from (to notice changes).
type CertCache = HashMap<String, (Arc<str>, Arc<str>, Arc<CertifiedKey>)>;

/// Everything the listeners need, immutable.
#[derive(Debug)]
pub struct CompiledConfig {
    /// Monotonic version (1 for the first applied snapshot; 0 before any).
    pub version: u64,
    /// The snapshot this was compiled from (for /debug/config).
    pub snapshot: Arc<Snapshot>,
    /// HTTPS listener config.
    pub tls: Arc<ServerConfig>,
    /// The certificates by name that `tls` serves, for checks made per request.
    pub sni: Arc<SniResolver>,
    /// HTTP routes.
    pub router: Router,
    /// TLS passthrough routes.
    pub passthrough: SniTable,
    /// TCP routes by gateway port.
    pub tcp: HashMap<u16, Arc<Upstream>>,
    endpoints: HashMap<EndpointKey, Arc<EndpointState>>,
    certs: CertCache,
}

/// Builds [`CompiledConfig`]s, reusing endpoint state (pooled connections) and parsed
/// certificates from the previous one.
#[derive(Debug)]
pub struct Compiler {
    metrics: Metrics,
    resumption: Resumption,
    fallback_cert: Arc<CertifiedKey>,
}

impl Compiler {
    /// A compiler whose configs share `resumption` state.
    pub fn new(metrics: Metrics, resumption: Resumption, fallback_cert: Arc<CertifiedKey>) -> Self {
        Compiler { metrics, resumption, fallback_cert }
    }

    /// An empty config: no routes, the fallback certificate.
    pub fn empty(&self) -> Result<CompiledConfig, CompileError> {
        self.compile(Arc::new(Snapshot::default()), 0, None)
    }

    /// Compiles `snapshot` as `version`.
    pub fn compile(
        &self,
        snapshot: Arc<Snapshot>,
        version: u64,
        previous: Option<&CompiledConfig>,
    ) -> Result<CompiledConfig, CompileError> {
        let certs = self.certificates(&snapshot, previous)?;
        let default = match &snapshot.default_certificate {
            Some(id) => lookup_cert(&certs, id, "(default)")?,
            None => Arc::clone(&self.fallback_cert),
        };
        let mut resolver = SniResolver::new(default, self.metrics.clone());
        for t in &snapshot.tls_hosts {
            let cert = lookup_cert(&certs, &t.certificate, &t.host.to_string())?;
            match &t.host {
                Host::Exact(h) => resolver.add_exact(h.clone(), cert),
                Host::Wildcard(suffix) => resolver.add_wildcard(suffix.clone(), cert),
                Host::Any => {}
            }
        }
        let sni = Arc::new(resolver);
        let tls = tls::server_config(Arc::clone(&sni), &self.resumption)?;

        let mut endpoints = HashMap::new();
        let mut upstreams: HashMap<&str, Arc<Upstream>> = HashMap::new();
        for (id, cluster) in &snapshot.clusters {
            let eps = cluster
                .endpoints
                .iter()
                .map(|e| {
                    let key = (e.addr, cluster.protocol, e.hbone.clone());
                    let state = previous
                        .and_then(|p| p.endpoints.get(&key))
                        .or_else(|| endpoints.get(&key))
                        .cloned()
                        .unwrap_or_else(|| Arc::new(EndpointState::new(e.addr, cluster.protocol, e.hbone.clone())));
                    endpoints.insert(key, Arc::clone(&state));
                    state
                })
                .collect();
            upstreams.insert(id, Arc::new(Upstream::new(id.clone(), cluster.protocol, eps)));
        }

        let mut route_metrics: HashMap<String, RouteMetrics> = HashMap::new();
        let mut compile_route = |r: &wharf_model::Route| {
            let source = format!("{}/{}", r.source.namespace, r.source.name);
            let metrics = route_metrics.entry(source.clone()).or_insert_with(|| self.metrics.route(&source)).clone();
            CompiledRoute {
                path: r.path.clone(),
                upstream: upstreams.get(r.cluster.as_str()).cloned(),
                source,
                https_redirect: r.https_redirect,
                max_body_bytes: r.max_body_bytes,
                metrics,
            }
        };
        let mut router = Router::default();
        for vh in &snapshot.virtual_hosts {
            let routes: Vec<CompiledRoute> = vh.routes.iter().map(&mut compile_route).collect();
            match &vh.host {
                Host::Exact(h) => router.exact.insert(h.clone(), routes),
                Host::Wildcard(s) => router.wildcard.insert(s.clone(), routes),
                Host::Any => {
                    router.any = routes;
                    None
                }
            };
        }
        router.default = snapshot.default_backend.as_ref().map(&mut compile_route);

        let mut passthrough = SniTable::default();
        for p in &snapshot.passthrough {
            let Some(up) = upstreams.get(p.cluster.as_str()).cloned() else {
                continue;
            };
            match &p.host {
                Host::Exact(h) => passthrough.exact.insert(h.clone(), up),
                Host::Wildcard(s) => passthrough.wildcard.insert(s.clone(), up),
                Host::Any => None,
            };
        }
        let tcp = snapshot
            .tcp_routes
            .iter()
            .filter_map(|r| Some((r.port, upstreams.get(r.cluster.as_str())?.clone())))
            .collect();

        Ok(CompiledConfig { version, snapshot, tls, sni, router, passthrough, tcp, endpoints, certs })
    }

    fn certificates(&self, snapshot: &Snapshot, previous: Option<&CompiledConfig>) -> Result<CertCache, CompileError> {
        let mut out = HashMap::with_capacity(snapshot.certificates.len());
        for (id, c) in &snapshot.certificates {
            let reused = previous.and_then(|p| p.certs.get(id)).filter(|(chain, key, _)| {
                Arc::ptr_eq(chain, &c.chain_pem) && Arc::ptr_eq(key, &c.key_pem)
                    || (chain.as_ref() == c.chain_pem.as_ref() && key.as_ref() == c.key_pem.as_ref())
            });
            let ck = match reused {
                Some((_, _, ck)) => Arc::clone(ck),
                None => {
                    wharf_model::tls::load(c.chain_pem.as_bytes(), c.key_pem.as_bytes(), i64::MIN)
                        .map_err(|source| CompileError::Certificate { id: id.clone(), source })?
                        .certified_key
                }
            };
            out.insert(id.clone(), (Arc::clone(&c.chain_pem), Arc::clone(&c.key_pem), ck));
        }
        Ok(out)
    }
}

fn lookup_cert(certs: &CertCache, id: &str, host: &str) -> Result<Arc<CertifiedKey>, CompileError> {
    certs
        .get(id)
        .map(|(_, _, ck)| Arc::clone(ck))
        .ok_or_else(|| CompileError::MissingCertificate { host: host.to_owned(), id: id.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::normalize_istio_sni;

    #[test]
    fn istio_sni_subset_is_normalized() {
        assert_eq!(
            normalize_istio_sni("outbound_.8080_.v1_.reviews.default.svc.cluster.local").as_deref(),
            Some("outbound_.8080_._.reviews.default.svc.cluster.local")
        );
        assert_eq!(normalize_istio_sni("outbound_.x_.v1_.a").as_deref(), None);
        assert_eq!(normalize_istio_sni("example.com"), None);
    }
}
