//! The tables of one set of listeners (the edge's, or one Gateway port's), compiled from
//! the parts of a snapshot they serve and the tables compiled last time.

use std::cell::RefCell;
use std::sync::Arc;

use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use wharf_model::{Action, Change, Host, Hosted, Hosts, SniRoute, TlsHost, VirtualHost};

use super::{
    CertCache, ClusterUsers, CompileError, Compiler, HashMap, HashSet, Persistent, SniTable, SniTarget, Tables,
};
use crate::host_map::HostMap;
use crate::metrics::RouteMetrics;
use crate::reasons::UpstreamError;
use crate::routing::{CompiledAction, CompiledCors, CompiledRoute, HostRoutes, Router};
use crate::tls::{self, SniResolver};
use crate::upstream::forward::{BackendEdits, CompiledEdits, CompiledFallback, CompiledForward};
use crate::upstream::Upstream;

/// The parts of a snapshot one [`Tables`] is built from.
pub(super) struct TableSource<'a> {
    pub(super) default_certificate: Option<&'a str>,
    pub(super) tls_hosts: Entries<'a, TlsHost>,
    pub(super) virtual_hosts: Entries<'a, Arc<VirtualHost>>,
    pub(super) default_backend: Option<&'a wharf_model::Route>,
    /// See [`Router::route`].
    pub(super) isolated: bool,
    pub(super) passthrough: &'a [SniRoute],
    pub(super) tcp: Vec<(u16, Vec<TcpBackend<'a>>)>,
    pub(super) client_auth: &'a [wharf_model::ClientAuthHost],
}

/// The TLS hosts or HTTP hosts of a [`TableSource`].
pub(super) enum Entries<'a, T: Hosted> {
    /// All of them.
    All(Vec<&'a T>),
    /// `now`, where the previous tables were compiled from `before`: only the changes are
    /// compiled, into a clone of the previous tables.
    Since { before: &'a Hosts<T>, now: &'a Hosts<T> },
}

impl<'a, T: Hosted> Entries<'a, T> {
    /// Every entry, whatever changed.
    fn all(&self) -> Box<dyn Iterator<Item = &'a T> + 'a> {
        match self {
            Entries::All(v) => Box::new(v.clone().into_iter()),
            Entries::Since { now, .. } => Box::new(now.iter()),
        }
    }
}

/// A TCP backend: cluster id, weight, and whether it is invalid.
pub(super) type TcpBackend<'a> = (&'a str, u32, bool);

impl Compiler {
    /// The tables of `src`; the hosts of `previous` (the tables compiled last time from
    /// the hosts it names) that did not change are reused.
    pub(super) fn tables(
        &self,
        src: TableSource<'_>,
        previous: Option<&Tables>,
        certs: &CertCache,
        routes: &mut Routes<'_>,
    ) -> Result<Tables, CompileError> {
        let sni = Arc::new(self.sni(&src, previous, certs)?);
        let tls = tls::server_config(Arc::clone(&sni), &self.resumption, &self.policy)?;
        let tls_stream = match src.passthrough.iter().any(|p| p.terminate) {
            true => Some(tls::stream_config(Arc::clone(&sni), &self.resumption, &self.policy)?),
            false => None,
        };
        let (mut router, users) = match (&src.virtual_hosts, previous) {
            (Entries::Since { before, now }, Some(prev)) => patched_router(prev, before, now, routes),
            (entries, _) => {
                let mut router = Router::default();
                let users = router_of(&mut router, entries, previous, src.isolated, routes);
                (router, users)
            }
        };
        router.default = src.default_backend.map(|r| routes.route(r));
        router.default_owner = src.default_backend.map(|r| r.source.namespace.as_str().into());
        router.isolated = src.isolated;

        let relay = |backends: &mut dyn Iterator<Item = TcpBackend<'_>>| {
            let backends = backends
                .map(|(cluster, weight, invalid)| (target(routes.upstreams, cluster, invalid), weight))
                .collect();
            CompiledForward::new(backends, CompiledEdits::NONE, CompiledEdits::NONE)
        };
        let mut passthrough = SniTable::default();
        for p in src.passthrough {
            let forward = relay(&mut p.backends.iter().map(|b| (b.cluster.as_str(), b.weight, b.invalid)));
            passthrough.hosts.insert(&p.host, Arc::new(SniTarget { forward, terminate: p.terminate }));
        }
        let tcp =
            src.tcp.iter().map(|(port, backends)| (*port, Arc::new(relay(&mut backends.iter().copied())))).collect();
        let client_auth = self.client_auth(src.client_auth, &sni);
        Ok(Tables { tls, sni, router, passthrough, tls_stream, tcp, client_auth, users })
    }

    /// The certificates by name of `src`: the previous tables' patched with the TLS
    /// hosts that changed, or all of them.
    fn sni(
        &self,
        src: &TableSource<'_>,
        previous: Option<&Tables>,
        certs: &CertCache,
    ) -> Result<SniResolver, CompileError> {
        let default = match src.default_certificate {
            Some(id) => lookup_cert(certs, id, || "(default)".to_owned())?,
            None => Arc::clone(&self.fallback_cert),
        };
        let add = |resolver: &mut SniResolver, t: &TlsHost| {
            let cert = lookup_cert(certs, &t.certificate, || t.host.to_string())?;
            if t.host != Host::Any {
                resolver.add(&t.host, cert);
            }
            Ok::<_, CompileError>(())
        };
        match (&src.tls_hosts, previous) {
            (Entries::Since { before, now }, Some(prev)) => {
                let mut resolver = prev.sni.patched(default);
                for change in before.diff(now) {
                    match change {
                        Change::Added(t) | Change::Updated { new: t, .. } => add(&mut resolver, t)?,
                        Change::Removed(t) => resolver.remove(&t.host),
                    }
                }
                Ok(resolver)
            }
            (entries, _) => {
                let mut resolver = SniResolver::new(default, self.metrics.clone());
                for t in entries.all() {
                    add(&mut resolver, t)?;
                }
                Ok(resolver)
            }
        }
    }

    /// The HTTPS configs of the hosts that ask for a client certificate, one per CA.
    fn client_auth(&self, hosts: &[wharf_model::ClientAuthHost], sni: &Arc<SniResolver>) -> HostMap<Arc<ServerConfig>> {
        let mut client_auth = HostMap::default();
        let mut by_ca: Vec<(&wharf_model::ClientCa, Arc<ServerConfig>)> = Vec::new();
        for c in hosts {
            let cfg = match by_ca.iter().find(|(ca, _)| *ca == &c.ca) {
                Some((_, cfg)) => Arc::clone(cfg),
                None => match tls::client_auth_config(Arc::clone(sni), &c.ca, &self.policy) {
                    Ok(cfg) => {
                        by_ca.push((&c.ca, Arc::clone(&cfg)));
                        cfg
                    }
                    // Its routes then refuse clients that need a certificate (400).
                    Err(e) => {
                        tracing::warn!(host = %c.host, ca = %c.ca.source, error = %e, "client certificates cannot be checked");
                        continue;
                    }
                },
            };
            client_auth.insert(&c.host, cfg);
        }
        client_auth
    }
}

/// The previous tables' hosts, shared, where the hosts that changed, and those whose
/// routes looked up a cluster that changed, came or went, are compiled again.
fn patched_router(
    prev: &Tables,
    before: &Hosts<Arc<VirtualHost>>,
    now: &Hosts<Arc<VirtualHost>>,
    routes: &mut Routes<'_>,
) -> (Router, ClusterUsers) {
    let mut router = Router::default();
    router.hosts = prev.router.hosts.clone();
    let mut users = prev.users.clone();
    let mut again: std::collections::BTreeMap<Host, Option<&Arc<VirtualHost>>> = Default::default();
    for change in before.diff(now) {
        match change {
            Change::Added(vh) | Change::Updated { new: vh, .. } => again.insert(vh.host.clone(), Some(vh)),
            Change::Removed(vh) => again.insert(vh.host.clone(), None),
        };
    }
    for cluster in &routes.upstreams.changed {
        let from = (Box::<str>::from(cluster.as_str()), Host::Exact(String::new()));
        let looked_up = users.range(from..).take_while(|(c, _)| **c == **cluster);
        for (_, host) in looked_up {
            again.entry(host.clone()).or_insert_with(|| now.get(host));
        }
    }
    for (host, vh) in again {
        if let Some(old) = router.hosts.remove(&host) {
            for c in &old.clusters {
                users.remove(&(c.clone(), host.clone()));
            }
        }
        if let Some(vh) = vh {
            let compiled = routes.host(vh);
            users.extend(compiled.clusters.iter().map(|c| (c.clone(), host.clone())));
            router.hosts.insert(&host, compiled);
        }
    }
    (router, users)
}

/// Puts every host of `entries` into `router`: a host of `previous` compiled from the same
/// host, none of whose looked-up clusters changed, is shared; the others are compiled.
/// Returns which hosts looked up which clusters (none kept for `isolated` tables, which
/// are compiled afresh each time).
fn router_of(
    router: &mut Router,
    entries: &Entries<'_, Arc<VirtualHost>>,
    previous: Option<&Tables>,
    isolated: bool,
    routes: &mut Routes<'_>,
) -> ClusterUsers {
    let mut users = ClusterUsers::new();
    for vh in entries.all() {
        // Compiled from the same host (shared with the previous snapshot, or equal to
        // its), and no cluster its routes look up changed.
        let same = |old: &HostRoutes| match &*old.source.load() {
            // By pointer first (`VirtualHost` is `Eq`).
            Some(b) if b == vh => {
                if !Arc::ptr_eq(b, vh) {
                    old.source.store(Some(Arc::clone(vh)));
                }
                true
            }
            _ => false,
        };
        let unchanged = previous
            .and_then(|tables| tables.router.hosts.get_host(&vh.host))
            .filter(|old| !routes.upstreams.any_changed(&old.clusters) && same(old));
        let host = match unchanged {
            Some(old) => Arc::clone(old),
            None => routes.host(vh),
        };
        if !isolated {
            users.extend(host.clusters.iter().map(|c| (c.clone(), vh.host.clone())));
        }
        router.hosts.insert(&vh.host, host);
    }
    users
}

/// Compiles routes for one compilation: looks their clusters up, and gives each route
/// source one set of metrics shared by every table naming it.
pub(super) struct Routes<'c> {
    compiler: &'c Compiler,
    upstreams: &'c Upstreams<'c>,
    metrics: HashMap<String, RouteMetrics>,
}

impl<'c> Routes<'c> {
    pub(super) fn new(compiler: &'c Compiler, upstreams: &'c Upstreams<'c>) -> Self {
        Routes { compiler, upstreams, metrics: HashMap::default() }
    }

    /// A host's routes, with the clusters they looked up.
    fn host(&mut self, vh: &Arc<VirtualHost>) -> Arc<HostRoutes> {
        self.upstreams.looked_up.borrow_mut().clear();
        let routes = vh.routes.iter().map(|r| self.route(r)).collect();
        let clusters = self.upstreams.looked_up.borrow_mut().drain(..).collect();
        let compiled = HostRoutes::of(vh, routes, clusters);
        compiled.source.store(Some(Arc::clone(vh)));
        Arc::new(compiled)
    }

    fn route(&mut self, r: &wharf_model::Route) -> CompiledRoute {
        let source = format!("{}/{}", r.source.namespace, r.source.name);
        let compiler = self.compiler;
        let metrics = self.metrics.entry(source.clone()).or_insert_with(|| compiler.metrics.route(&source)).clone();
        let upstreams = self.upstreams;
        let action = match &r.action {
            Action::Forward(f) => CompiledAction::Forward(forward(upstreams, f)),
            Action::Redirect(rd) => CompiledAction::Redirect(rd.clone()),
            Action::Respond(rs) => CompiledAction::Respond(rs.clone()),
        };
        CompiledRoute {
            matches: r.matches.clone(),
            action,
            https_redirect: r.https_redirect,
            max_body_bytes: r.max_body_bytes,
            clients: r.clients.clone(),
            cors: r.cors.as_deref().map(|c| Box::new(CompiledCors::new(c))),
            limiter: r.rate_limit.as_deref().map(|l| compiler.limiters.get(l)),
            client_cert: r.client_cert.clone(),
            auth: r.auth.as_deref().map(|a| match a {
                wharf_model::Auth::Basic(b) => compiler.checkers.get(&r.source.namespace, b),
                _ => {
                    let to_cluster = |cluster: &str| {
                        CompiledForward::new(
                            vec![(target(upstreams, cluster, false), 1)],
                            CompiledEdits::NONE,
                            CompiledEdits::NONE,
                        )
                    };
                    Arc::new(crate::auth::CompiledAuth::new(a, to_cluster))
                }
            }),
            metrics,
        }
    }
}

/// A forward action: its backends by weight, with their header edits, mirrors, rewrite,
/// timeouts, affinity and fallback.
fn forward(upstreams: &Upstreams<'_>, f: &wharf_model::Forward) -> CompiledForward {
    let backends = f.backends.iter().map(|b| (target(upstreams, &b.cluster, b.invalid), b.weight)).collect();
    let edits = |b: &wharf_model::WeightedBackend| BackendEdits {
        request: CompiledEdits::new(&b.request_headers),
        response: CompiledEdits::new(&b.response_headers),
    };
    let mirrors =
        f.mirrors.iter().filter_map(|m| Some((Arc::clone(upstreams.get(&m.cluster)?), m.per_million))).collect();
    CompiledForward::new(backends, CompiledEdits::new(&f.request_headers), CompiledEdits::new(&f.response_headers))
        .editing_backends(f.backends.iter().map(edits).collect())
        .mirroring(mirrors)
        .rewriting(f.rewrite.as_deref())
        .timing_out(f.timeout_ms)
        .connecting_within(f.connect_timeout_ms)
        .sending_within(f.send_timeout_ms)
        .sticky(f.affinity.as_deref(), f.backends.iter().map(|b| b.no_affinity))
        .retrying(f.retry.as_deref())
        .falling_back(f.fallback.as_deref().map(|fb| CompiledFallback::new(target(upstreams, &fb.cluster, false), fb)))
}

pub(super) fn lookup_cert(
    certs: &CertCache,
    id: &str,
    host: impl FnOnce() -> String,
) -> Result<Arc<CertifiedKey>, CompileError> {
    certs.get(id).map(Arc::clone).ok_or_else(|| CompileError::MissingCertificate { host: host(), id: id.to_owned() })
}

/// The upstreams of a compilation by cluster id, remembering which ids were looked up.
pub(super) struct Upstreams<'a> {
    by_id: &'a Persistent<String, Arc<Upstream>>,
    /// The clusters that changed since the previous compilation, came or went.
    changed: HashSet<String>,
    looked_up: RefCell<Vec<Box<str>>>,
}

impl<'a> Upstreams<'a> {
    pub(super) fn new(by_id: &'a Persistent<String, Arc<Upstream>>, changed: HashSet<String>) -> Self {
        Upstreams { by_id, changed, looked_up: RefCell::default() }
    }

    fn get(&self, cluster: &str) -> Option<&Arc<Upstream>> {
        self.looked_up.borrow_mut().push(cluster.into());
        self.by_id.get(cluster)
    }

    /// True when any of `clusters` changed.
    fn any_changed(&self, clusters: &[Box<str>]) -> bool {
        clusters.iter().any(|c| self.changed.contains(&**c))
    }
}

/// The upstream of a backend: an error for an invalid one (500) or one without a cluster
/// (no endpoints, 503).
fn target(upstreams: &Upstreams<'_>, cluster: &str, invalid: bool) -> Result<Arc<Upstream>, UpstreamError> {
    match upstreams.get(cluster) {
        _ if invalid => Err(UpstreamError::InvalidBackend),
        Some(u) => Ok(Arc::clone(u)),
        None => Err(UpstreamError::NoEndpoints),
    }
}
