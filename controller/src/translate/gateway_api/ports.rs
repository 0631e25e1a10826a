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
            let mut tls_hosts = Vec::new();
            let mut hosts: BTreeMap<Host, Vec<(RouteKey, Route)>> = BTreeMap::new();
            // The hosts whose TLS is terminated here, on a TLS port.
            let mut terminated: HashSet<Host> = HashSet::default();
            for &li in &idx {
                let l = &gw.listeners[li];
                if let Some(cert) = l.certificates.first() {
                    tls_hosts.push(TlsHost { host: l.host.clone(), certificate: cert.clone() });
                }
                // Every listener hostname has a host of its own, even without routes: a
                // request for it never falls through to a less specific listener's routes.
                hosts.entry(l.host.clone()).or_default();
                if l.terminates {
                    terminated.insert(l.host.clone());
                }
                let entries = attached.remove(&(gi, li)).unwrap_or_default();
                let route_hosts: HashSet<Host> = entries.iter().map(|(h, _, _)| h.clone()).collect();
                // The entries by route hostname, so that finding those covering a host does
                // not test every entry: exact names are looked up, and only the (few)
                // wildcard ones are tested.
                let mut exact: HashMap<&Host, Vec<usize>> = HashMap::default();
                let mut wildcards: Vec<usize> = Vec::new();
                for (i, (rh, _, _)) in entries.iter().enumerate() {
                    match rh {
                        Host::Exact(_) => exact.entry(rh).or_default().push(i),
                        _ => wildcards.push(i),
                    }
                }
                for h in route_hosts {
                    if more_specific_listener(&h, li, &idx, gw) {
                        continue;
                    }
                    if l.terminates {
                        terminated.insert(h.clone());
                    }
                    // The host takes every route of this listener whose hostname covers it
                    // (an exact name covers only itself), in the order they were attached.
                    let mut covering: Vec<usize> =
                        wildcards.iter().copied().filter(|&i| entries[i].0.covers(&h)).collect();
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
                }
            }
            let virtual_hosts: Vec<VirtualHost> = hosts
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
            if protocol == PortProtocol::Passthrough {
                // Each SNI goes to the backends of the first (oldest) route that names it,
                // passed through or, under a listener in mode Terminate, decrypted first; a
                // connection given to a backend that did not resolve is closed.
                let passthrough = virtual_hosts
                    .into_iter()
                    .filter_map(|vh| {
                        let first = vh.routes.into_iter().next()?;
                        let wharf_model::Action::Forward(f) = first.action else { return None };
                        let terminate = terminated.contains(&vh.host);
                        Some(wharf_model::SniRoute {
                            host: vh.host,
                            backends: f.backends,
                            terminate,
                            source: first.source,
                        })
                    })
                    .collect();
                return Some(GatewayPort {
                    gateway: gw.oref.clone(),
                    bind,
                    edge,
                    protocol,
                    tls_hosts,
                    virtual_hosts: Vec::new(),
                    passthrough,
                    tcp: Vec::new(),
                });
            }
            if protocol == PortProtocol::Tcp {
                // Every connection goes to the backends of the oldest route attached.
                let tcp = virtual_hosts
                    .into_iter()
                    .flat_map(|vh| vh.routes)
                    .find_map(|r| match r.action {
                        wharf_model::Action::Forward(f) => Some(f.backends),
                        _ => None,
                    })
                    .unwrap_or_default();
                return Some(GatewayPort {
                    gateway: gw.oref.clone(),
                    bind,
                    edge,
                    protocol,
                    tls_hosts: Vec::new(),
                    virtual_hosts: Vec::new(),
                    passthrough: Vec::new(),
                    tcp,
                });
            }
            Some(GatewayPort {
                gateway: gw.oref.clone(),
                bind,
                edge,
                protocol,
                tls_hosts,
                virtual_hosts: virtual_hosts.into_iter().map(Arc::new).collect(),
                passthrough: Vec::new(),
                tcp: Vec::new(),
            })
        })
        .collect()
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
