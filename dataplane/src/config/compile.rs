//! Building a [`CompiledConfig`] from a snapshot and the previous config: certificates and
//! upstreams are the previous config's, patched where the snapshot changed, and each set
//! of listeners gets its [`Tables`](super::Tables).

use std::sync::Arc;

use wharf_model::{Cluster, GatewayPort, Host, PortProtocol, Snapshot};

use super::tables::{Entries, Routes, TableSource, Upstreams};
use super::{CertCache, CompileError, CompiledConfig, Compiler, Endpoints, HashMap, HashSet, Persistent};
use crate::upstream::tls::UpstreamTlsConfig;
use crate::upstream::{EndpointState, Upstream};

impl Compiler {
    /// Compiles `snapshot` as `version`.
    pub fn compile(
        &self,
        snapshot: Arc<Snapshot>,
        version: u64,
        previous: Option<&CompiledConfig>,
    ) -> Result<CompiledConfig, CompileError> {
        let (certs, replaced) = self.certificates(&snapshot, previous);
        let (by_id, endpoints, changed) = self.clusters(&snapshot, previous);
        let upstreams = Upstreams::new(&by_id, changed);
        let mut routes = Routes::new(self, &upstreams);
        let edge =
            self.tables(edge_source(&snapshot, previous, replaced), previous.map(|p| &p.edge), &certs, &mut routes)?;
        let mut ports = HashMap::with_capacity_and_hasher(snapshot.gateway_ports.len(), Default::default());
        let mut edge_gateway = HashMap::default();
        for p in &snapshot.gateway_ports {
            let previous = previous.and_then(|prev| match p.edge {
                true => prev.edge_gateway.get(&p.protocol),
                false => prev.ports.get(&p.bind),
            });
            let tables = self.tables(port_source(p), previous, &certs, &mut routes)?;
            if p.edge {
                edge_gateway.insert(p.protocol, tables);
            } else {
                ports.insert(p.bind, tables);
            }
        }
        let acme = crate::acme::AcmeAnswers::new(&snapshot.acme, &self.policy);
        drop(routes);
        drop(upstreams);
        let direct = std::sync::OnceLock::new();
        Ok(CompiledConfig {
            version,
            snapshot,
            edge,
            ports,
            edge_gateway,
            acme,
            endpoints,
            direct,
            upstreams: by_id,
            certs,
        })
    }

    /// The previous config's certificates, patched where the snapshot's differ from the
    /// previous snapshot's; and whether any of those changed or went.
    fn certificates(&self, snapshot: &Snapshot, previous: Option<&CompiledConfig>) -> (CertCache, bool) {
        let none = imbl::OrdMap::new();
        let (mut out, before) = match previous {
            Some(p) => (p.certs.clone(), &p.snapshot.certificates),
            None => (CertCache::default(), &none),
        };
        let mut replaced = false;
        for change in before.diff(&snapshot.certificates) {
            let (id, c) = match change {
                imbl::ordmap::DiffItem::Add(id, c) => (id, c),
                imbl::ordmap::DiffItem::Update { new: (id, c), .. } => {
                    replaced = true;
                    (id, c)
                }
                imbl::ordmap::DiffItem::Remove(id, _) => {
                    replaced = true;
                    out.remove(id);
                    continue;
                }
            };
            // The key validation parsed. (An unchanged certificate is not among the
            // differences: its entry of the previous cache stays.)
            out.insert(id.clone(), Arc::clone(&c.key));
        }
        (out, replaced)
    }

    /// The previous config's upstreams and endpoints, patched where the snapshot's
    /// clusters differ from the previous snapshot's: an unchanged cluster keeps its
    /// upstream (balancing state, pooled connections), an endpoint its state while any
    /// cluster has it. Also the ids of the clusters that changed, came or went.
    fn clusters(
        &self,
        snapshot: &Snapshot,
        previous: Option<&CompiledConfig>,
    ) -> (Persistent<String, Arc<Upstream>>, Endpoints, HashSet<String>) {
        let none = imbl::OrdMap::new();
        let (mut upstreams, mut endpoints, before) = match previous {
            Some(p) => (p.upstreams.clone(), p.endpoints.clone(), &p.snapshot.clusters),
            None => (Persistent::default(), Endpoints::default(), &none),
        };
        let key = |e: &wharf_model::Endpoint, c: &Cluster| (e.addr, c.protocol, e.hbone.clone(), c.tls.clone());
        let diff: Vec<_> = before.diff(&snapshot.clusters).collect();
        // New upstreams first, so that an endpoint moving between clusters keeps its state.
        for change in &diff {
            let (id, cluster) = match change {
                imbl::ordmap::DiffItem::Add(id, c) | imbl::ordmap::DiffItem::Update { new: (id, c), .. } => (*id, *c),
                imbl::ordmap::DiffItem::Remove(..) => continue,
            };
            let tls = match cluster.tls.as_ref().map(|t| UpstreamTlsConfig::new(t, cluster.protocol)) {
                Some(Err(e)) => {
                    // The controller checks the CA bundle and name first; this is the
                    // last line against speaking plain text where TLS was asked for.
                    tracing::warn!(cluster = %id, error = %e, "TLS to this backend cannot be set up; it gets no requests");
                    upstreams.insert(id.clone(), Arc::new(Upstream::new(id.clone(), cluster.protocol, Vec::new())));
                    continue;
                }
                Some(Ok(t)) => Some(t),
                None => None,
            };
            let eps = cluster
                .endpoints
                .iter()
                .map(|e| {
                    let (state, holders) = endpoints.entry(key(e, cluster)).or_insert_with(|| {
                        let state = EndpointState::new(e.addr, cluster.protocol, e.hbone.clone());
                        let state = match &tls {
                            Some(t) => state.with_tls(t.clone()),
                            None => state,
                        };
                        (Arc::new(state), 0)
                    });
                    *holders += 1;
                    Arc::clone(state)
                })
                .collect();
            upstreams.insert(id.clone(), Arc::new(Upstream::new(id.clone(), cluster.protocol, eps)));
        }
        // Then the old ones go, and the endpoints no cluster has any more.
        let mut changed = HashSet::with_capacity_and_hasher(diff.len(), Default::default());
        for change in &diff {
            let (id, old) = match change {
                imbl::ordmap::DiffItem::Add(id, _) => {
                    changed.insert((*id).clone());
                    continue;
                }
                imbl::ordmap::DiffItem::Update { old: (id, c), .. } => (*id, *c),
                imbl::ordmap::DiffItem::Remove(id, c) => {
                    upstreams.remove(*id);
                    (*id, *c)
                }
            };
            changed.insert(id.clone());
            // An upstream without endpoints (its TLS could not be set up) held none.
            let held = previous.and_then(|p| p.upstreams.get(id)).is_some_and(|u| !u.endpoints.is_empty());
            for e in old.endpoints.iter().filter(|_| held) {
                let k = key(e, old);
                if let Some((_, holders)) = endpoints.get_mut(&k) {
                    *holders -= 1;
                    if *holders == 0 {
                        endpoints.remove(&k);
                    }
                }
            }
        }
        (upstreams, endpoints, changed)
    }
}

/// What the edge listeners serve: the Ingress hosts, and the edge Gateway's HTTPS
/// certificates first (theirs for a host both name, a listener without hostname's as the
/// default). Only the hosts that changed since `previous` are compiled where that can be
/// told; `replaced` is whether a certificate changed or went.
fn edge_source<'a>(snapshot: &'a Snapshot, previous: Option<&'a CompiledConfig>, replaced: bool) -> TableSource<'a> {
    let edge_https = |s: &'a Snapshot| s.gateway_ports.iter().find(|p| p.edge && p.protocol == PortProtocol::Https);
    let gateway_tls = edge_https(snapshot).map(|p| p.tls_hosts.as_slice()).unwrap_or_default();
    // The previous edge tables were compiled from the previous snapshot's hosts; its TLS
    // hosts too when no edge Gateway listener served certificates then or now, and no
    // certificate changed or went (the TLS hosts naming one are not known without
    // looking at all).
    let edge_tls = |s: &'a Snapshot| edge_https(s).is_some_and(|p| !p.tls_hosts.is_empty());
    let tls_hosts = match (gateway_tls, previous) {
        ([], Some(p)) if !replaced && !edge_tls(&p.snapshot) => {
            Entries::Since { before: &p.snapshot.tls_hosts, now: &snapshot.tls_hosts }
        }
        ([], _) => Entries::All(snapshot.tls_hosts.iter().collect()),
        _ => Entries::All(
            gateway_tls
                .iter()
                .filter(|t| t.host != Host::Any)
                .chain(snapshot.tls_hosts.iter().filter(|t| !gateway_tls.iter().any(|g| g.host == t.host)))
                .collect(),
        ),
    };
    let virtual_hosts = match previous {
        Some(p) => Entries::Since { before: &p.snapshot.virtual_hosts, now: &snapshot.virtual_hosts },
        None => Entries::All(snapshot.virtual_hosts.iter().collect()),
    };
    let default_certificate = gateway_tls
        .iter()
        .find(|t| t.host == Host::Any)
        .map(|t| t.certificate.as_str())
        .or(snapshot.default_certificate.as_deref());
    TableSource {
        default_certificate,
        tls_hosts,
        virtual_hosts,
        default_backend: snapshot.default_backend.as_ref(),
        isolated: false,
        passthrough: &snapshot.passthrough,
        tcp: snapshot.tcp_routes.iter().map(|r| (r.port, vec![(r.cluster.as_str(), 1, false)])).collect(),
        client_auth: &snapshot.client_auth,
    }
}

/// What one Gateway port serves, compiled afresh: its hosts only, a listener without
/// hostname taking every name (also clients without SNI).
fn port_source(p: &GatewayPort) -> TableSource<'_> {
    let catch_all = p.tls_hosts.iter().find(|t| t.host == Host::Any).map(|t| t.certificate.as_str());
    TableSource {
        default_certificate: catch_all,
        tls_hosts: Entries::All(p.tls_hosts.iter().collect()),
        virtual_hosts: Entries::All(p.virtual_hosts.iter().collect()),
        default_backend: None,
        isolated: true,
        passthrough: &p.passthrough,
        tcp: match p.tcp.is_empty() {
            true => Vec::new(),
            false => vec![(p.bind.port(), p.tcp.iter().map(|b| (b.cluster.as_str(), b.weight, b.invalid)).collect())],
        },
        client_auth: &[],
    }
}
