//! The rules of HTTPRoutes: filters to actions, mirrors, and backend references resolved
//! to clusters (ReferenceGrants and BackendTLSPolicies applied).

use wharf_gateway_api::httproutes::HttpRoute;
use wharf_model::{ObjectRef, RouteMatch, Snapshot, WeightedBackend};

use super::http_route;
use crate::translate::backend::{Backends, ServicePortRef};
use crate::translate::grants::{permitted, RefFrom, RefTo, GATEWAY_GROUP};
use crate::translate::Refused;
use crate::World;

use super::*;

pub(super) type Rules =
    (Vec<(usize, usize, wharf_model::RouteMatch, wharf_model::Action)>, Option<Refused>, Option<Refused>);

/// The rules of one route as they are built: what every backendRef is resolved in, the
/// rules so far (rule index, match index, match, action), the first reason a rule was
/// refused, and the first reason a backendRef did not resolve.
pub(super) struct RuleSet<'c, 'b> {
    kind: &'static str,
    ns: &'c str,
    rref: &'c ObjectRef,
    world: &'c World,
    backends: &'c Backends<'b>,
    snapshot: &'c mut Snapshot,
    out: Vec<(usize, usize, RouteMatch, wharf_model::Action)>,
    refused: Option<Refused>,
    unresolved: Option<Refused>,
}

impl<'c, 'b> RuleSet<'c, 'b> {
    /// The rules of a route of `kind` in namespace `ns`.
    pub(super) fn new(
        kind: &'static str,
        ns: &'c str,
        rref: &'c ObjectRef,
        world: &'c World,
        backends: &'c Backends<'b>,
        snapshot: &'c mut Snapshot,
    ) -> Self {
        RuleSet { kind, ns, rref, world, backends, snapshot, out: Vec::new(), refused: None, unresolved: None }
    }

    /// `r`'s value; `None` when it refuses the rule (the first reason is kept).
    pub(super) fn ok<T>(&mut self, r: Result<T, Refused>) -> Option<T> {
        r.map_err(|why| self.refuse(why)).ok()
    }

    /// Refuses a rule (the first reason is kept).
    pub(super) fn refuse(&mut self, why: Refused) {
        self.refused.get_or_insert(why);
    }

    /// Adds a rule's match and action.
    pub(super) fn push(&mut self, rule: (usize, usize, RouteMatch, wharf_model::Action)) {
        self.out.push(rule);
    }

    /// A rule's action for each of its matches; a filter that cannot be served drops the
    /// rule (and refuses it). Returns the forwards of the actions added, for the rule's
    /// settings.
    pub(super) fn actions(
        &mut self,
        ri: usize,
        matches: Vec<RouteMatch>,
        filters: &[wharf_gateway_api::httproutes::HttpRouteRulesFilters],
        weighted: &[WeightedBackend],
    ) -> impl Iterator<Item = &mut wharf_model::Forward> {
        let first = self.out.len();
        for (mi, m) in matches.into_iter().enumerate() {
            match http_route::action(filters, weighted.to_vec(), &m.path) {
                Ok(action) => self.out.push((ri, mi, m, action)),
                Err(r) => {
                    self.refuse(r);
                    break;
                }
            }
        }
        self.out[first..].iter_mut().filter_map(|(_, _, _, action)| match action {
            wharf_model::Action::Forward(f) => Some(f),
            _ => None,
        })
    }

    /// A rule's RequestMirror filters as mirrors to their resolved backends; one whose
    /// backend does not resolve is left out (the first such reason is kept).
    pub(super) fn mirrors(
        &mut self,
        filters: &[wharf_gateway_api::httproutes::HttpRouteRulesFilters],
    ) -> Vec<wharf_model::Mirror> {
        let mut out = Vec::new();
        let mirror_filters = filters
            .iter()
            .filter(|f| f.r#type == wharf_gateway_api::httproutes::HttpRouteRulesFiltersType::RequestMirror);
        for m in mirror_filters.filter_map(|f| f.request_mirror.as_ref()) {
            let fraction = m.fraction.as_ref().map(|f| (f.numerator, f.denominator));
            let per_million = http_route::mirror_share(m.percent, fraction);
            match self.backend(backend_ref!(m.backend_ref)) {
                Ok(Some(cluster)) => out.push(wharf_model::Mirror { cluster, per_million }),
                Ok(None) => {}
                Err(why) => {
                    self.unresolved.get_or_insert(why);
                }
            }
        }
        out
    }

    /// A rule's backendRefs with their weights, resolved: one that does not resolve keeps
    /// its weight and answers 500 (the first such reason is kept); a rule without any
    /// answers 500 too.
    pub(super) fn resolve<'r>(&mut self, refs: impl Iterator<Item = (BackendRef<'r>, u32)>) -> Vec<WeightedBackend> {
        let mut weighted = Vec::new();
        for (r, weight) in refs {
            match self.backend(r) {
                Ok(Some(cluster)) => weighted.push(WeightedBackend::new(&cluster, weight)),
                // Its BackendTLSPolicy cannot be used (the policy says why): 500, never
                // plain text.
                Ok(None) => weighted.push(WeightedBackend::invalid(weight)),
                Err(why) => {
                    self.unresolved.get_or_insert(why);
                    weighted.push(WeightedBackend::invalid(weight));
                }
            }
        }
        if weighted.is_empty() {
            weighted.push(WeightedBackend::invalid(1));
        }
        weighted
    }

    fn backend(&mut self, b: BackendRef<'_>) -> Result<Option<String>, Refused> {
        backend(b, self.kind, self.ns, self.rref, self.world, self.backends, self.snapshot)
    }

    /// The rules, the first refusal and the first unresolved backendRef.
    pub(super) fn finish(self) -> Rules {
        (self.out, self.refused, self.unresolved)
    }
}

/// A backendRef's weight (absent: 1; out of range: 0).
pub(super) fn weight(w: Option<i32>) -> u32 {
    u32::try_from(w.unwrap_or(1)).unwrap_or(0)
}

/// A route's rules as (rule index, match index, match, action); the first refused rule's
/// reason; the first unresolved backendRef's reason.
pub(super) fn rules(route: &HttpRoute, mut set: RuleSet<'_, '_>) -> Rules {
    for (ri, rule) in route.spec.rules.iter().flatten().enumerate() {
        let Some(matches) = set.ok(http_route::route_matches(rule.matches.as_deref().unwrap_or_default())) else {
            continue;
        };
        let timeouts = rule.timeouts.as_ref();
        let timeout = http_route::timeout_ms(
            timeouts.and_then(|t| t.request.as_deref()),
            timeouts.and_then(|t| t.backend_request.as_deref()),
        );
        let Some(timeout) = set.ok(timeout) else { continue };
        let refs = rule.backend_refs.iter().flatten().map(|b| (backend_ref!(b), weight(b.weight)));
        let mut weighted = set.resolve(refs);
        let mut filtered = rule.backend_refs.iter().flatten().zip(weighted.iter_mut());
        let edited =
            filtered.try_for_each(|(b, w)| http_route::backend_filters(b.filters.as_deref().unwrap_or_default(), w));
        if set.ok(edited).is_none() {
            continue;
        }
        let filters = rule.filters.as_deref().unwrap_or_default();
        let mirrors = set.mirrors(filters);
        for f in set.actions(ri, matches, filters, &weighted) {
            f.timeout_ms = timeout;
            f.mirrors.clone_from(&mirrors);
        }
    }
    set.finish()
}

/// A backendRef's fields, whatever the route kind.
pub(super) struct BackendRef<'r> {
    pub(super) group: Option<&'r str>,
    pub(super) kind: Option<&'r str>,
    pub(super) name: &'r str,
    pub(super) namespace: Option<&'r str>,
    pub(super) port: Option<i32>,
}

/// Resolves one backendRef of a route of `route_kind` into a cluster id. GRPCRoute
/// backends are always spoken to over HTTP/2. An HTTPRoute's or GRPCRoute's backend
/// targeted by a BackendTLSPolicy is spoken to over TLS (a cluster of its own), or, when
/// the policy cannot be used, not at all (`Ok(None)`).
pub(super) fn backend(
    b: BackendRef<'_>,
    route_kind: &str,
    ns: &str,
    rref: &ObjectRef,
    world: &World,
    backends: &Backends<'_>,
    snapshot: &mut Snapshot,
) -> Result<Option<String>, Refused> {
    let (group, kind, name) = (b.group.unwrap_or(""), b.kind.unwrap_or("Service"), b.name);
    if !group.is_empty() || kind != "Service" {
        return Err(Refused::new(
            "InvalidKind",
            format!("backendRef {group}/{kind} {name}: only Services are supported"),
        ));
    }
    let bns = b.namespace.unwrap_or(ns);
    let from = RefFrom { group: GATEWAY_GROUP, kind: route_kind, namespace: ns };
    if !permitted(&world.reference_grants, from, RefTo { group: "", kind: "Service", namespace: bns, name }) {
        return Err(Refused::new(
            "RefNotPermitted",
            format!("backendRef Service {bns}/{name}: no ReferenceGrant in {bns} lets {route_kind}s of {ns} use it"),
        ));
    }
    let Some(port) = b.port else {
        return Err(Refused::new("BackendNotFound", format!("backendRef Service {bns}/{name} needs a port")));
    };
    let mut diags = Vec::new();
    let port = ServicePortRef::Number(port);
    let h2 = route_kind == GRPC_ROUTE;
    let id = backends.cluster_for(bns, name, &port, h2, rref, &mut diags, &mut snapshot.clusters).ok_or_else(|| {
        let why = diags.first().map(|d| d.message.clone()).unwrap_or_else(|| format!("Service {bns}/{name} not found"));
        Refused::new("BackendNotFound", why)
    })?;
    if route_kind != HTTP_ROUTE && route_kind != GRPC_ROUTE {
        return Ok(Some(id));
    }
    let port_name = b.port.and_then(|p| backends.port_name(bns, name, p));
    match backends.tls_policies.lookup(bns, name, port_name) {
        None => Ok(Some(id)),
        Some(Err(())) => Ok(None),
        Some(Ok(tls)) => {
            let tls_id = format!("{id}/tls");
            if !snapshot.clusters.contains_key(&tls_id) {
                if let Some(plain) = snapshot.clusters.get(&id) {
                    let cluster = wharf_model::Cluster { tls: Some(tls.clone()), ..plain.clone() };
                    snapshot.clusters.insert(tls_id.clone(), cluster);
                }
            }
            Ok(Some(tls_id))
        }
    }
}
