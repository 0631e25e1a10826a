//! The routes of a part's hosts as the Ingresses claim them, and the redirects and
//! HTTPS upgrades decided once all are in.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::hashing::{HashMap, HashSet};
use wharf_model::{
    Action, Host, ObjectRef, PathMatch, PathRewrite, Redirect, Route, RouteMatch, SniRoute, VirtualHost,
};

use super::*;

#[derive(Default)]
pub(super) struct RouteTable {
    /// (host, path) -> route; the first claim (oldest Ingress) wins.
    pub(super) by_host: BTreeMap<Host, Vec<Route>>,
    pub(super) claimed: HashMap<(Host, RouteMatch), ObjectRef>,
    pub(super) default_backend: Option<Route>,
    pub(super) passthrough: BTreeMap<Host, SniRoute>,
    /// `from-to-www-redirect`: (from, to, source): requests for `from` are redirected to
    /// `to`, unless some Ingress serves `from` itself.
    pub(super) www_redirects: Vec<(String, String, ObjectRef)>,
    /// `server-alias`: (alias, host, source): the alias is served with the host's routes.
    pub(super) aliases: Vec<(Host, Host, ObjectRef)>,
    /// Hosts whose paths are regular expressions (`use-regex`, `rewrite-target`).
    pub(super) regex_hosts: HashSet<Host>,
    /// The backend protocol of each Ingress that is not a canary.
    pub(super) protocols: HashMap<ObjectRef, (annotations::BackendProtocol, Option<VerifiedTls>)>,
    /// (host, path) -> the canary Ingress taking requests from its route.
    pub(super) canaried: HashMap<(Host, RouteMatch), ObjectRef>,
    /// Ingresses with `force-ssl-redirect` (and their canaries).
    pub(super) forced: HashSet<ObjectRef>,
}

impl RouteTable {
    /// Redirects the `from-to-www-redirect` aliases that no Ingress serves and no other
    /// namespace owns.
    pub(super) fn add_www_redirects(&mut self, claims: &owners::Claims, rules: &owners::Ownership) {
        for (from, to, source) in std::mem::take(&mut self.www_redirects) {
            let host = Host::Exact(from);
            if self.by_host.contains_key(&host) || claims.may_serve(&host, &source.namespace, rules).is_err() {
                continue;
            }
            let redirect = Redirect {
                scheme: None,
                host: Some(to),
                port: None,
                path: None,
                status: 308,
                location: None,
                port_as_sent: true,
                relative: false,
            };
            let route = Route {
                action: Action::Redirect(redirect),
                ..Route::forward(PathMatch::Prefix("/".into()), "", source)
            };
            self.by_host.insert(host, vec![route]);
        }
    }

    pub(super) fn take_virtual_hosts(&mut self, tls_hosts: &[wharf_model::TlsHost]) -> Vec<Arc<VirtualHost>> {
        let by_host = std::mem::take(&mut self.by_host);
        let tls = TlsCovered::new(tls_hosts);
        by_host
            .into_iter()
            .map(|(host, mut routes)| {
                routes.sort_by_key(|r| r.matches.precedence_key());
                let has_tls = tls.covers(&host);
                for r in &mut routes {
                    // `https_redirect` holds "the Ingress allows it" until here; with
                    // `force-ssl-redirect` its Ingress redirects without TLS too.
                    r.https_redirect &= has_tls || self.forced.contains(&r.source);
                }
                // Most hosts have one route; the vector grew for four.
                routes.shrink_to_fit();
                Arc::new(VirtualHost { host, routes })
            })
            .collect()
    }
}

/// Adds `route` to a host's routes. Most hosts have one: the first gets room for one
/// (a vector grows for four, and 10,000 hosts would hold 17 MB of room for routes they
/// do not have while translating).
pub(super) fn push_route(routes: &mut Vec<Route>, route: Route) {
    if routes.capacity() == 0 {
        routes.reserve_exact(1);
    }
    routes.push(route);
}

/// Which hosts have TLS: an exact name when a TLS host is that name or a wildcard matching
/// it, a wildcard when a TLS host is that same wildcard. The TLS hosts are indexed once, so
/// that each host costs a lookup and a test of the (few) wildcard TLS hosts.
pub(super) struct TlsCovered<'a> {
    pub(super) all: HashSet<&'a Host>,
    pub(super) wildcards: Vec<&'a Host>,
}

impl<'a> TlsCovered<'a> {
    pub(super) fn new(tls_hosts: &'a [wharf_model::TlsHost]) -> Self {
        let all: HashSet<&Host> = tls_hosts.iter().map(|t| &t.host).collect();
        let wildcards = all.iter().copied().filter(|h| !matches!(h, Host::Exact(_))).collect();
        TlsCovered { all, wildcards }
    }

    pub(super) fn covers(&self, host: &Host) -> bool {
        match host {
            Host::Exact(name) => self.all.contains(host) || self.wildcards.iter().any(|t| t.matches(name)),
            Host::Wildcard(_) | Host::Suffix(_) => self.all.contains(host),
            Host::Any => false,
        }
    }
}

impl Translator<'_> {
    /// `app-root`: `/` itself is redirected (302) to `app_root` on `host`, ahead of the
    /// Ingress's own routes.
    pub(super) fn app_root(&mut self, host: &Host, app_root: &str, src: &ObjectRef, routes: &mut RouteTable) {
        let exact = PathMatch::Exact("/".into());
        let key = (host.clone(), RouteMatch::path(exact.clone()));
        // Another Ingress's `/` (or this one's own Exact `/`) comes first.
        if routes.claimed.contains_key(&key) {
            return;
        }
        routes.claimed.insert(key, src.clone());
        let redirect = Redirect {
            scheme: None,
            host: None,
            port: None,
            path: Some(PathRewrite::Full(app_root.to_owned())),
            status: 302,
            location: None,
            port_as_sent: true,
            relative: false,
        };
        let route = Route { action: Action::Redirect(redirect), ..Route::forward(exact, "", src.clone()) };
        push_route(routes.by_host.entry(host.clone()).or_default(), route);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hosts_first_route_gets_room_for_one_and_more_grow_as_usual() {
        let route =
            Route::forward(PathMatch::prefix("/").unwrap(), "web/app:80", ObjectRef::new("Ingress", "web", "a"));
        let mut routes = Vec::new();
        push_route(&mut routes, route.clone());
        assert_eq!((routes.len(), routes.capacity()), (1, 1));
        for _ in 0..4 {
            push_route(&mut routes, route.clone());
        }
        assert_eq!(routes.len(), 5);
        assert!(routes.capacity() > 5, "grown ahead (amortized), not one route at a time");
    }
}
