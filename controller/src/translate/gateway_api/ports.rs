//! The attached routes of each Gateway to the snapshot's ports: listeners merged per port,
//! hostnames to the most specific listener.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::hashing::{HashMap, HashSet};
use std::net::SocketAddr;

use wharf_model::{GatewayPort, Host, PortProtocol, Route, TlsHost, VirtualHost};

use super::*;

/// The ports of one Gateway: its ready listeners grouped by port, with their routes.
pub(super) fn ports(
    gi: usize,
    gw: &Gw<'_>,
    bind: impl Fn(u16) -> Option<(SocketAddr, bool)>,
    attached: &mut Attached,
) -> Vec<GatewayPort> {
    let mut by_port: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for (li, l) in gw.listeners.iter().enumerate() {
        if let (true, Ok(port)) = (l.ready(), u16::try_from(l.spec.port)) {
            by_port.entry(port).or_default().push(li);
        }
    }
    by_port
        .into_iter()
        .filter_map(|(port, idx)| {
            let protocol = gw.listeners[idx[0]].protocol?;
            let (bind, edge) = bind(port)?;
            let served = port_hosts(gi, gw, &idx, attached);
            let (tls_hosts, virtual_hosts, passthrough, tcp) = match protocol {
                PortProtocol::Passthrough => {
                    (served.tls_hosts, Vec::new(), sni_routes(served.virtual_hosts, &served.terminated), Vec::new())
                }
                PortProtocol::Tcp => (Vec::new(), Vec::new(), Vec::new(), tcp_backends(served.virtual_hosts)),
                _ => {
                    let virtual_hosts = served.virtual_hosts.into_iter().map(Arc::new).collect();
                    (served.tls_hosts, virtual_hosts, Vec::new(), Vec::new())
                }
            };
            let gateway = gw.oref.clone();
            Some(GatewayPort {
                gateway,
                bind,
                listener_port: port,
                edge,
                protocol,
                tls_hosts,
                virtual_hosts,
                passthrough,
                tcp,
            })
        })
        .collect()
}

/// What the listeners of one port serve, before the port's protocol says how.
struct PortHosts {
    tls_hosts: Vec<TlsHost>,
    /// Each listener hostname and route hostname with its routes, in the order they
    /// were attached.
    virtual_hosts: Vec<VirtualHost>,
    /// The hosts whose TLS is terminated here, on a TLS port.
    terminated: HashSet<Host>,
}

/// The certificates and hosts of the listeners `idx` of Gateway `gi`, each host under the
/// most specific listener that covers it.
fn port_hosts(gi: usize, gw: &Gw<'_>, idx: &[usize], attached: &mut Attached) -> PortHosts {
    let mut tls_hosts = Vec::new();
    let mut hosts: BTreeMap<Host, Vec<(RouteKey, Route)>> = BTreeMap::new();
    let mut terminated: HashSet<Host> = HashSet::default();
    for &li in idx {
        let l = &gw.listeners[li];
        if let Some(cert) = l.certificates.first() {
            tls_hosts.push(TlsHost { host: l.host.clone(), certificate: cert.clone() });
        }
        // Every listener hostname has a host of its own, even without routes: a request
        // for it never falls through to a less specific listener's routes.
        hosts.entry(l.host.clone()).or_default();
        if l.terminates {
            terminated.insert(l.host.clone());
        }
        let entries = attached.remove(&(gi, li)).unwrap_or_default();
        for h in listener_hosts(li, idx, gw, &entries, &mut hosts) {
            if l.terminates {
                terminated.insert(h);
            }
        }
    }
    let virtual_hosts = hosts
        .into_iter()
        .map(|(host, mut routes)| {
            routes.sort_by(|a, b| a.0.cmp(&b.0));
            routes.dedup_by(|a, b| a.0 == b.0);
            // Collected in place, the routes would keep the larger allocation.
            let mut routes: Vec<Route> = routes.into_iter().map(|(_, r)| r).collect();
            routes.shrink_to_fit();
            VirtualHost { host, routes }
        })
        .collect();
    PortHosts { tls_hosts, virtual_hosts, terminated }
}

/// Adds to `hosts` the routes `entries` attached to listener `li`, under each route
/// hostname no more specific listener of the port takes; returns those hostnames.
fn listener_hosts(
    li: usize,
    idx: &[usize],
    gw: &Gw<'_>,
    entries: &[(Host, RouteKey, Route)],
    hosts: &mut BTreeMap<Host, Vec<(RouteKey, Route)>>,
) -> Vec<Host> {
    let route_hosts: HashSet<Host> = entries.iter().map(|(h, _, _)| h.clone()).collect();
    // The entries by route hostname, so that finding those covering a host does not test
    // every entry: exact names are looked up, and only the (few) wildcard ones are tested.
    let mut exact: HashMap<&Host, Vec<usize>> = HashMap::default();
    let mut wildcards: Vec<usize> = Vec::new();
    for (i, (rh, _, _)) in entries.iter().enumerate() {
        match rh {
            Host::Exact(_) => exact.entry(rh).or_default().push(i),
            _ => wildcards.push(i),
        }
    }
    let mut taken = Vec::new();
    for h in route_hosts {
        if more_specific_listener(&h, li, idx, gw) {
            continue;
        }
        // The host takes every route of this listener whose hostname covers it (an exact
        // name covers only itself), in the order they were attached.
        let mut covering: Vec<usize> = wildcards.iter().copied().filter(|&i| entries[i].0.covers(&h)).collect();
        if matches!(h, Host::Exact(_)) {
            covering.extend(exact.get(&h).into_iter().flatten().copied());
        }
        covering.sort_unstable();
        let routes = hosts.entry(h.clone()).or_default();
        routes.reserve_exact(covering.len());
        for i in covering {
            let (_, key, r) = &entries[i];
            routes.push((key.clone(), r.clone()));
        }
        taken.push(h);
    }
    taken
}

/// A passthrough port's SNI routes: each SNI goes to the backends of the first (oldest)
/// route that names it, passed through or, under a listener in mode Terminate, decrypted
/// first; a connection given to a backend that did not resolve is closed.
fn sni_routes(virtual_hosts: Vec<VirtualHost>, terminated: &HashSet<Host>) -> Vec<wharf_model::SniRoute> {
    virtual_hosts
        .into_iter()
        .filter_map(|vh| {
            let first = vh.routes.into_iter().next()?;
            let wharf_model::Action::Forward(f) = first.action else { return None };
            let terminate = terminated.contains(&vh.host);
            Some(wharf_model::SniRoute { host: vh.host, backends: f.backends, terminate, source: first.source })
        })
        .collect()
}

/// A TCP port's backends: every connection goes to those of the oldest route attached.
fn tcp_backends(virtual_hosts: Vec<VirtualHost>) -> Vec<wharf_model::WeightedBackend> {
    virtual_hosts
        .into_iter()
        .flat_map(|vh| vh.routes)
        .find_map(|r| match r.action {
            wharf_model::Action::Forward(f) => Some(f.backends),
            _ => None,
        })
        .unwrap_or_default()
}

/// True when another listener on the port has a hostname more specific than listener
/// `li`'s that covers `h`: requests for `h` belong to that listener.
pub(super) fn more_specific_listener(h: &Host, li: usize, idx: &[usize], gw: &Gw<'_>) -> bool {
    let mine = &gw.listeners[li].host;
    idx.iter().filter(|&&o| o != li).any(|&o| {
        let other = &gw.listeners[o].host;
        other.covers(h) && mine.covers(other) && other != mine
    })
}
