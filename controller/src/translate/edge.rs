//! Ingress rules and the edge Gateway's routes on the same listeners. A host both claim
//! belongs to one namespace, whichever API claimed it first (see [`super::owners`]): the
//! other namespaces' claims are taken out. Among the owner's, the Gateway's routes are
//! tried first, so an Ingress rule whose every request a Gateway route takes is never
//! served. Such a rule is reported on its Ingress (an Event), naming the route.

use crate::translate::Reason;
use std::sync::Arc;

use wharf_model::{GatewayPort, Host, ObjectRef, PathMatch, PortProtocol, RouteMatch, Snapshot};

use super::owners::{Claims, Ownership, HOST_OWNED};
use super::Diagnostic;
use crate::World;

/// A claim's age: first the claims of the namespace that serves the host now (`false`),
/// then by creationTimestamp, then namespace/name (oldest first).
type Age = (bool, Option<k8s_openapi::jiff::Timestamp>, String, String);

/// The record of who served each host, and the snapshot served now.
pub type Kept<'a> = (&'a super::owners::Record, Option<&'a Snapshot>);

/// The name of a host as written, one key for both APIs (`*.a.test` is an Ingress
/// wildcard or a Gateway API one).
fn written(host: &Host) -> Host {
    match host {
        Host::Suffix(s) => Host::Wildcard(s.clone()),
        h => h.clone(),
    }
}

/// How old the claim of `source` on `host` is; `None` when the object is gone (then it
/// claims nothing).
fn age(world: &World, kept: Kept<'_>, host: &Host, source: &ObjectRef) -> Option<Age> {
    use crate::kinds::ByKey;
    let (ns, name) = (source.namespace.as_str(), source.name.as_str());
    let created = match &*source.kind {
        "Ingress" => ByKey::new(&world.ingresses, true).get(ns, name).map(|o| o.metadata.creation_timestamp.clone()),
        "HTTPRoute" => {
            ByKey::new(&world.http_routes, true).get(ns, name).map(|o| o.metadata.creation_timestamp.clone())
        }
        "GRPCRoute" => {
            ByKey::new(&world.grpc_routes, true).get(ns, name).map(|o| o.metadata.creation_timestamp.clone())
        }
        "TLSRoute" => ByKey::new(&world.tls_routes, true).get(ns, name).map(|o| o.metadata.creation_timestamp.clone()),
        _ => None,
    }?;
    let held = super::owners::keeper(kept.0, kept.1, host) == Some(ns);
    Some((!held, created.map(|t| t.0), ns.to_owned(), name.to_owned()))
}

/// The Ingresses of `ours` by each host their `spec.tls` names.
fn tls_hosts_of(world: &World, ours: &imbl::OrdSet<ObjectRef>) -> crate::hashing::HashMap<Host, Vec<ObjectRef>> {
    let mut out: crate::hashing::HashMap<Host, Vec<ObjectRef>> = crate::hashing::HashMap::default();
    for ing in world.ingresses.iter() {
        let Some(tls) = ing.spec.as_ref().and_then(|s| s.tls.as_ref()) else { continue };
        let source = ing.object_ref();
        if !ours.contains(&source) {
            continue;
        }
        for host in tls.iter().flat_map(|t| t.hosts.iter().flatten()).filter_map(|h| Host::parse(h).ok()) {
            out.entry(host).or_default().push(source.clone());
        }
    }
    out
}

/// What [`share`] took out.
#[derive(Debug, Default)]
pub struct Lost {
    /// One for each object that lost a host.
    pub diags: Vec<Diagnostic>,
    /// The hosts lost, with the namespace that lost each: its TLS hosts and ACME orders for
    /// them go too.
    pub hosts: Vec<(Host, String)>,
}

/// Takes out of `snapshot` the claims of the Ingresses and of the edge Gateway's routes on
/// hosts the other API claims for another namespace first (or the operator assigned
/// elsewhere), and says so on each object that lost one. The namespace that `kept`
/// says keeps a host ([`super::owners::keeper`]) keeps it. `ours` are the Ingresses of
/// Wharf's class (their `spec.tls` hosts claim too).
pub fn share(
    world: &World,
    rules: &Ownership,
    kept: Kept<'_>,
    ours: &imbl::OrdSet<ObjectRef>,
    snapshot: &mut Snapshot,
) -> Lost {
    let edge: Vec<usize> = (0..snapshot.gateway_ports.len()).filter(|&i| snapshot.gateway_ports[i].edge).collect();
    if edge.is_empty() {
        return Lost::default();
    }
    // The claims on the hosts the edge Gateway serves, from both APIs: (host, source).
    let mut claims: Vec<(Host, ObjectRef)> = Vec::new();
    // The Ingresses whose spec.tls names a host, made the first time a TLS host is met.
    let tls_claimants = std::cell::OnceCell::new();
    let ingress_claims = |host: &Host, out: &mut Vec<(Host, ObjectRef)>| {
        if let Some(vh) = snapshot.virtual_hosts.get(host) {
            out.extend(vh.routes.iter().map(|r| (host.clone(), r.source.clone())));
        }
        let passthrough = snapshot.passthrough.iter().filter(|p| p.host == *host);
        out.extend(passthrough.map(|p| (host.clone(), p.source.clone())));
        if snapshot.tls_hosts.get(host).is_some() {
            let by_host = tls_claimants.get_or_init(|| tls_hosts_of(world, ours));
            out.extend(by_host.get(host).into_iter().flatten().map(|s| (host.clone(), s.clone())));
        }
    };
    for &i in &edge {
        let port = &snapshot.gateway_ports[i];
        // A listener's host without routes claims nothing.
        let hosts = port
            .virtual_hosts
            .iter()
            .filter(|v| !v.routes.is_empty())
            .map(|v| (&v.host, v.routes.iter().map(|r| &r.source).collect::<Vec<_>>()));
        let sni = port.passthrough.iter().map(|p| (&p.host, vec![&p.source]));
        for (host, sources) in hosts.chain(sni) {
            let key = written(host);
            claims.extend(sources.into_iter().map(|s| (key.clone(), s.clone())));
            ingress_claims(&key, &mut claims);
            match host {
                // An exact name, and the Ingress wildcard over it.
                Host::Exact(name) => {
                    if let Some(w) = Host::wildcard_key(name) {
                        ingress_claims(&Host::Wildcard(w.to_owned()), &mut claims);
                    }
                }
                // A wildcard, and the Ingress names under it.
                Host::Wildcard(_) | Host::Suffix(_) => {
                    let under: Vec<Host> = snapshot
                        .virtual_hosts
                        .iter()
                        .map(|v| &v.host)
                        .chain(snapshot.passthrough.iter().map(|p| &p.host))
                        .filter(|h| matches!(h, Host::Exact(_)) && host.covers(h))
                        .cloned()
                        .collect();
                    for h in under {
                        ingress_claims(&h, &mut claims);
                    }
                }
                Host::Any => {}
            }
        }
    }
    let mut aged: Vec<(Age, Host, ObjectRef)> =
        claims.into_iter().filter_map(|(h, s)| Some((age(world, kept, &h, &s)?, h, s))).collect();
    aged.sort();
    aged.dedup();
    let mut first = Claims::default();
    for (rank, (_, host, source)) in aged.iter().enumerate() {
        first.claim_as(host, rank, &source.namespace, source.kind != "Ingress");
    }
    // One owner across the APIs, merging or not.
    let rules = Ownership { merge_across_namespaces: false, ..rules.clone() };
    let mut lost: Vec<(Host, ObjectRef, String)> = Vec::new();
    for (_, host, source) in &aged {
        if let Err(refusal) = first.may_serve(host, &source.namespace, &rules) {
            let shown = match host {
                Host::Any => "host * (routes without hostname)".to_owned(),
                h => format!("host {h}"),
            };
            lost.push((host.clone(), source.clone(), refusal.message(&shown)));
        }
    }
    let mut out = Lost::default();
    for (host, source, message) in lost {
        take_out(snapshot, &edge, &host, &source);
        out.hosts.push((host.clone(), source.namespace.clone()));
        out.diags.push(Diagnostic { object: source, reason: HOST_OWNED, message });
    }
    out
}

/// Tells each route in `lost` that the edge Gateway serves nothing of any more (every host
/// it named there belongs to another namespace), in its status for that Gateway:
/// `Accepted: False`, reason `NotAllowedByListeners`, with the diagnostic's message. A
/// route that keeps some of its hosts stays accepted (its Event names the others).
pub fn refuse_routes(lost: &[Diagnostic], snapshot: &Snapshot, statuses: &mut super::gateway_api::Statuses) {
    let Some(edge) = statuses.edge_gateway.clone() else { return };
    for d in lost {
        let source = &d.object;
        let list = match &*source.kind {
            "HTTPRoute" => &mut statuses.http_routes,
            "GRPCRoute" => &mut statuses.grpc_routes,
            "TLSRoute" => &mut statuses.tls_routes,
            _ => continue,
        };
        let serves = snapshot.gateway_ports.iter().filter(|p| p.edge).any(|p| {
            p.virtual_hosts.iter().any(|v| v.routes.iter().any(|r| r.source == *source))
                || p.passthrough.iter().any(|s| s.source == *source)
        });
        if serves {
            continue;
        }
        let Some((_, parents)) = list.iter_mut().find(|(o, _)| o == source) else { continue };
        let on_edge = |p: &&mut wharf_gateway_api::httproutes::HttpRouteStatusParents| {
            p.parent_ref.name == edge.name
                && p.parent_ref.namespace.as_deref().unwrap_or(&source.namespace) == edge.namespace
        };
        for parent in parents.iter_mut().filter(on_edge) {
            for c in parent.conditions.iter_mut().filter(|c| c.type_ == "Accepted") {
                c.status = "False".into();
                c.reason = "NotAllowedByListeners".into();
                c.message.clone_from(&d.message);
            }
        }
    }
}

/// Takes `source`'s routes for `host` (as written) out of the Ingress tables and the edge
/// ports.
fn take_out(snapshot: &mut Snapshot, edge: &[usize], host: &Host, source: &ObjectRef) {
    let keep = |s: &ObjectRef| s != source;
    if let Some(vh) = snapshot.virtual_hosts.get(host) {
        if !vh.routes.iter().all(|r| keep(&r.source)) {
            let mut vh = wharf_model::VirtualHost::clone(vh);
            vh.routes.retain(|r| keep(&r.source));
            match vh.routes.is_empty() {
                true => {
                    snapshot.virtual_hosts.remove(host);
                }
                false => {
                    snapshot.virtual_hosts.insert(Arc::new(vh));
                }
            }
        }
    }
    snapshot.passthrough.retain(|p| p.host != *host || keep(&p.source));
    for &i in edge {
        let port: &mut GatewayPort = &mut snapshot.gateway_ports[i];
        for vh in port.virtual_hosts.iter_mut().filter(|v| written(&v.host) == *host) {
            if !vh.routes.iter().all(|r| keep(&r.source)) {
                Arc::make_mut(vh).routes.retain(|r| keep(&r.source));
            }
        }
        port.virtual_hosts.retain(|v| !v.routes.is_empty());
        port.passthrough.retain(|p| written(&p.host) != *host || keep(&p.source));
    }
}

/// Reason of the diagnostic on an Ingress whose rule an edge Gateway route overrides.
pub const OVERRIDDEN: Reason = Reason::OverriddenByGatewayRoute;

/// Diagnostics for the Ingress rules and passthrough hosts of `snapshot` that the edge
/// Gateway's routes override.
pub fn overridden(snapshot: &Snapshot) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for port in snapshot.gateway_ports.iter().filter(|p| p.edge) {
        match port.protocol {
            PortProtocol::Http | PortProtocol::Https => {
                for vh in &snapshot.virtual_hosts {
                    let Some(theirs) = taking(&vh.host, &port.virtual_hosts, |v| &v.host) else { continue };
                    for r in vh.routes.iter().filter(|r| r.source.kind == "Ingress") {
                        if let Some(winner) = theirs.routes.iter().find(|w| takes_all(&w.matches, &r.matches)) {
                            out.push(diagnostic(port, &r.source, &vh.host, Some(&r.matches.path), &winner.source));
                        }
                    }
                }
            }
            PortProtocol::Passthrough => {
                for p in snapshot.passthrough.iter().filter(|p| p.source.kind == "Ingress") {
                    if let Some(winner) = taking(&p.host, &port.passthrough, |w| &w.host) {
                        out.push(diagnostic(port, &p.source, &p.host, None, &winner.source));
                    }
                }
            }
            PortProtocol::Tcp => {}
        }
    }
    out
}

fn diagnostic(
    port: &GatewayPort,
    loser: &wharf_model::ObjectRef,
    host: &Host,
    path: Option<&PathMatch>,
    winner: &wharf_model::ObjectRef,
) -> Diagnostic {
    let what = match path {
        Some(p) => format!("host {host} path {}", p.path()),
        None => format!("passthrough host {host}"),
    };
    Diagnostic {
        object: loser.clone(),
        reason: OVERRIDDEN,
        message: format!(
            "{what} is served by {winner} through the edge Gateway {}/{}: on Wharf's listeners Gateway API routes come before Ingress rules; remove the rule from one of them",
            port.gateway.namespace, port.gateway.name
        ),
    }
}

/// The entry of `theirs` a request for `host` goes to on an isolated (Gateway) table: the
/// most specific host that covers it.
fn taking<'a, T>(host: &Host, theirs: &'a [T], host_of: impl Fn(&T) -> &Host) -> Option<&'a T> {
    theirs.iter().filter(|t| host_of(t).covers(host)).min_by_key(|t| specificity(host_of(t)))
}

/// Lower is more specific: the same host, then the longest suffix, then any host.
fn specificity(h: &Host) -> (u8, std::cmp::Reverse<usize>) {
    match h {
        Host::Exact(_) => (0, std::cmp::Reverse(0)),
        Host::Wildcard(s) | Host::Suffix(s) => (1, std::cmp::Reverse(s.len())),
        Host::Any => (2, std::cmp::Reverse(0)),
    }
}

/// True when `winner` matches every request `loser` matches.
fn takes_all(winner: &RouteMatch, loser: &RouteMatch) -> bool {
    let unconditional = winner.method.is_none() && winner.headers.is_empty() && winner.query.is_empty();
    let path = match (&winner.path, &loser.path) {
        // What a pattern takes is not worked out: only the prefix `/` takes it all.
        (PathMatch::Prefix(w), PathMatch::Regex(_)) => w == "/",
        (PathMatch::Prefix(_), l) => winner.path.matches(l.path()),
        (PathMatch::Exact(w), PathMatch::Exact(l)) => w == l,
        (PathMatch::Exact(_), PathMatch::Prefix(_) | PathMatch::Regex(_)) => false,
        (PathMatch::Regex(_), _) => false,
    };
    unconditional && path
}

#[cfg(test)]
mod tests {
    use super::*;
    use wharf_model::{Action, HeaderMatch, ObjectRef, Respond, Route, SniRoute, VirtualHost};

    fn route(kind: &str, name: &str, path: PathMatch) -> Route {
        Route::new(
            RouteMatch::path(path),
            Action::Respond(Respond { status: 200, body: String::new() }),
            ObjectRef::new(kind, "web", name),
        )
    }

    fn prefix(p: &str) -> PathMatch {
        PathMatch::Prefix(p.into())
    }

    fn exact(p: &str) -> PathMatch {
        PathMatch::Exact(p.into())
    }

    fn host(h: &str) -> Host {
        Host::parse_gateway(h).unwrap()
    }

    fn edge(protocol: PortProtocol, virtual_hosts: Vec<VirtualHost>) -> GatewayPort {
        GatewayPort {
            gateway: ObjectRef::new("Gateway", "wharf", "wharf"),
            bind: ([0, 0, 0, 0], 8080).into(),
            listener_port: 80,
            edge: true,
            protocol,
            tls_hosts: vec![],
            virtual_hosts: virtual_hosts.into_iter().map(Into::into).collect(),
            passthrough: vec![],
            tcp: vec![],
        }
    }

    fn losers(snapshot: &Snapshot) -> Vec<(String, String)> {
        overridden(snapshot).into_iter().map(|d| (d.object.name, d.message)).collect()
    }

    #[test]
    fn what_a_pattern_takes_is_not_worked_out_only_the_root_prefix_takes_it() {
        let re = |p: &str| RouteMatch::path(PathMatch::Regex(Box::new(wharf_model::Pattern::full(p).unwrap())));
        let path = |p: PathMatch| RouteMatch::path(p);
        assert!(takes_all(&path(prefix("/")), &re("/a.*")));
        assert!(!takes_all(&path(prefix("/a")), &re("/a.*")));
        assert!(!takes_all(&path(exact("/a")), &re("/a")));
        assert!(!takes_all(&re("/.*"), &path(exact("/a"))), "a pattern is never taken to cover a rule");
        assert!(!takes_all(&re("/.*"), &path(prefix("/"))));
    }

    #[test]
    fn an_ingress_rule_a_gateway_route_takes_whole_is_reported_naming_the_route() {
        let mut headers = route("HTTPRoute", "canary", prefix("/"));
        headers.matches.headers = vec![HeaderMatch::exact("x-canary", "1")];
        let snapshot = Snapshot {
            virtual_hosts: vec![
                VirtualHost {
                    host: host("shop.example.com"),
                    routes: vec![
                        route("Ingress", "api", prefix("/api/v1")),
                        route("Ingress", "exact", exact("/cart")),
                        route("Ingress", "other", prefix("/other")),
                        route("Ingress", "apix", prefix("/apix")),
                    ],
                }
                .into(),
                VirtualHost { host: host("blog.example.com"), routes: vec![route("Ingress", "blog", prefix("/"))] }
                    .into(),
                VirtualHost { host: host("docs.example.org"), routes: vec![route("Ingress", "docs", prefix("/"))] }
                    .into(),
            ]
            .into(),
            gateway_ports: vec![
                edge(
                    PortProtocol::Http,
                    vec![
                        VirtualHost {
                            host: host("shop.example.com"),
                            routes: vec![
                                headers,
                                route("HTTPRoute", "api", prefix("/api")),
                                route("HTTPRoute", "cart", exact("/cart")),
                            ],
                        },
                        VirtualHost {
                            host: host("*.example.com"),
                            routes: vec![route("HTTPRoute", "all", prefix("/"))],
                        },
                    ],
                ),
                edge(
                    PortProtocol::Tcp,
                    vec![VirtualHost { host: Host::Any, routes: vec![route("HTTPRoute", "x", prefix("/"))] }],
                ),
            ],
            ..Default::default()
        };
        let got = losers(&snapshot);
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["blog", "api", "exact"], "hosts in order: {got:?}");
        assert!(got[1].1.contains("host shop.example.com path /api/v1 is served by HTTPRoute web/api through the edge Gateway wharf/wharf"), "{}", got[1].1);
        assert!(
            got[0].1.contains("HTTPRoute web/all"),
            "a wildcard listener host takes the names under it: {}",
            got[0].1
        );
    }

    #[test]
    fn the_most_specific_gateway_host_decides_and_passthrough_hosts_are_checked_too() {
        let snapshot = Snapshot {
            virtual_hosts: vec![VirtualHost {
                host: host("a.example.com"),
                routes: vec![route("Ingress", "a", prefix("/"))],
            }
            .into()]
            .into(),
            passthrough: vec![
                SniRoute::passthrough(host("db.example.com"), "c", ObjectRef::new("Ingress", "web", "db")),
                SniRoute::passthrough(host("mq.example.org"), "c", ObjectRef::new("Ingress", "web", "mq")),
            ],
            gateway_ports: vec![
                edge(
                    PortProtocol::Https,
                    vec![
                        // Isolated: a.example.com belongs to its own host, whose route does not take "/".
                        VirtualHost {
                            host: host("a.example.com"),
                            routes: vec![route("HTTPRoute", "only-x", prefix("/x"))],
                        },
                        VirtualHost { host: Host::Any, routes: vec![route("HTTPRoute", "all", prefix("/"))] },
                    ],
                ),
                GatewayPort {
                    protocol: PortProtocol::Passthrough,
                    passthrough: vec![SniRoute::passthrough(
                        host("*.example.com"),
                        "c",
                        ObjectRef::new("TLSRoute", "web", "tls"),
                    )],
                    ..edge(PortProtocol::Passthrough, vec![])
                },
            ],
            ..Default::default()
        };
        let got = losers(&snapshot);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, "db");
        assert!(got[0].1.contains("passthrough host db.example.com is served by TLSRoute web/tls"), "{}", got[0].1);
        let not_edge = Snapshot {
            gateway_ports: snapshot.gateway_ports.iter().map(|p| GatewayPort { edge: false, ..p.clone() }).collect(),
            ..snapshot
        };
        assert!(losers(&not_edge).is_empty(), "ports of other Gateways never meet Ingress rules");
    }

    #[test]
    fn paths_cover_as_requests_would_match() {
        let m = |p: PathMatch| RouteMatch::path(p);
        assert!(takes_all(&m(prefix("/")), &m(prefix("/a"))));
        assert!(takes_all(&m(prefix("/a")), &m(exact("/a/b"))) && takes_all(&m(prefix("/a")), &m(prefix("/a"))));
        assert!(!takes_all(&m(prefix("/a")), &m(prefix("/ab"))) && !takes_all(&m(prefix("/a/b")), &m(prefix("/a"))));
        assert!(takes_all(&m(exact("/a")), &m(exact("/a"))) && !takes_all(&m(exact("/a")), &m(exact("/b"))));
        assert!(!takes_all(&m(exact("/a")), &m(prefix("/a"))));
        let mut get = m(prefix("/"));
        get.method = Some("GET".into());
        assert!(!takes_all(&get, &m(prefix("/a"))), "a method match leaves other methods to the Ingress");
        let mut query = m(prefix("/"));
        query.query = vec![wharf_model::QueryMatch::exact("v", "1")];
        assert!(!takes_all(&query, &m(prefix("/a"))));
        assert_eq!(specificity(&host("a.b")).0, 0);
    }
}
