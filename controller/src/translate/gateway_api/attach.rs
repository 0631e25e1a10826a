//! Routes attached to listeners: parent references, hostnames, namespaces and kinds
//! checked, each accepted route's rules placed on its listeners.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use wharf_gateway_api::grpcroutes::GrpcRoute;
use wharf_gateway_api::httproutes::{
    HttpRoute, HttpRouteParentRefs, HttpRouteStatusParents, HttpRouteStatusParentsParentRef,
};
use wharf_gateway_api::tcproutes::TcpRoute;
use wharf_gateway_api::tlsroutes::TlsRoute;
use wharf_model::{Host, ObjectRef, Route, Snapshot};

use super::http_route::{self};
use crate::translate::backend::Backends;
use crate::translate::grants::GATEWAY_GROUP;
use crate::World;

use super::*;
use crate::translate::Refused;

/// The parents a route names that are Gateways of ours: attaches it to their listeners,
/// builds its routes, and returns the status entry of each.
#[allow(clippy::too_many_arguments)]
pub(super) fn attach_route(
    route: &RouteView<'_>,
    age: usize,
    gws: &mut [Gw<'_>],
    world: &World,
    snapshot: &mut Snapshot,
    attached: &mut Attached,
    opts: &GatewayOptions,
    now: &Time,
) -> Vec<HttpRouteStatusParents> {
    let ns = route.meta.namespace.as_deref().unwrap_or("default");
    let rref = &route.oref;
    let generation = route.meta.generation;
    let hostnames = &route.hostnames;
    let mut statuses = Vec::new();
    let mut built: Option<Rules> = None;
    for parent in &route.parent_refs {
        if parent.group.as_deref().unwrap_or(GATEWAY_GROUP) != GATEWAY_GROUP
            || parent.kind.as_deref().unwrap_or("Gateway") != "Gateway"
        {
            continue;
        }
        let pns = parent.namespace.as_deref().unwrap_or(ns);
        let Some(gi) = gws.iter().position(|g| g.oref.namespace == pns && g.oref.name == parent.name) else {
            continue;
        };
        let (rules, refused, unresolved) = built.get_or_insert_with(|| (route.rules)(snapshot)).clone();
        let gw_ns = gws[gi].oref.namespace.clone();
        let mut accepted: Result<(), Refused> = Ok(());
        let named: Vec<usize> = (0..gws[gi].listeners.len())
            .filter(|&li| {
                let l = gws[gi].listeners[li].spec;
                parent.section_name.as_deref().is_none_or(|s| s == l.name) && parent.port.is_none_or(|p| p == l.port)
            })
            .collect();
        if named.is_empty() {
            accepted = Err(Refused::new(
                "NoMatchingParent",
                "the Gateway has no listener with this sectionName and port".into(),
            ));
        }
        let ready: Vec<usize> = named.iter().copied().filter(|&li| gws[gi].listeners[li].attachable()).collect();
        let allowed: Vec<usize> = ready
            .iter()
            .copied()
            .filter(|&li| {
                let l = &gws[gi].listeners[li];
                namespace_allowed(l.spec, &gw_ns, ns, world) && l.kinds.iter().any(|k| k.kind == route.kind)
            })
            .collect();
        if accepted.is_ok() && allowed.is_empty() {
            accepted = Err(Refused::new(
                "NotAllowedByListeners",
                format!(
                    "no listener of Gateway {gw_ns}/{} that this parentRef names allows {}s from namespace {ns}",
                    parent.name, route.kind
                ),
            ));
        }
        let mut any_host = false;
        for &li in &allowed {
            let l = &gws[gi].listeners[li];
            let names = http_route::hostnames(l.spec.hostname.as_deref(), hostnames);
            if names.is_empty() {
                continue;
            }
            any_host = true;
            gws[gi].listeners[li].attached += 1;
            place(&names, &rules, age, rref, attached.entry((gi, li)).or_default());
        }
        if accepted.is_ok() && !allowed.is_empty() && !any_host {
            accepted = Err(Refused::new(
                "NoMatchingListenerHostname",
                "no hostname of this route matches a hostname of the listeners it may attach to".into(),
            ));
        }
        let conditions = parent_conditions(&accepted, &refused, rules.is_empty(), &unresolved, generation, now);
        statuses.push(HttpRouteStatusParents {
            conditions,
            controller_name: opts.controller_name.clone(),
            parent_ref: parent_ref(parent),
        });
    }
    statuses
}

/// The entries of a route's rules under each of its hostnames `names` that a listener
/// takes, keyed by precedence (exact hosts, then longer names, then the match's own
/// precedence, then age and rule order).
fn place(
    names: &[String],
    rules: &[(usize, usize, wharf_model::RouteMatch, wharf_model::Action)],
    age: usize,
    rref: &ObjectRef,
    entries: &mut Vec<(Host, RouteKey, Route)>,
) {
    for name in names {
        let Ok(host) = http_route::host(name) else { continue };
        for (rule, m_idx, m, action) in rules {
            let key: RouteKey = (
                std::cmp::Reverse(matches!(host, Host::Exact(_))),
                std::cmp::Reverse(name.len()),
                precedence_bytes(m),
                age,
                *rule,
                *m_idx,
            );
            entries.push((host.clone(), key, Route::new(m.clone(), action.clone(), rref.clone())));
        }
    }
}

/// A route's conditions for one parent: `Accepted` (refused by the parent, refused because
/// no rule is left, or accepted with `PartiallyInvalid` when a rule was dropped) and
/// `ResolvedRefs`.
fn parent_conditions(
    accepted: &Result<(), Refused>,
    refused: &Option<Refused>,
    no_rules: bool,
    unresolved: &Option<Refused>,
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let attached = || condition("Accepted", true, "Accepted", "attached to the Gateway", generation, now);
    let mut conditions = match (accepted, refused) {
        (Err(Refused { reason, message }), _) => {
            vec![condition("Accepted", false, reason, message.clone(), generation, now)]
        }
        (Ok(()), Some(r)) if no_rules => {
            vec![condition("Accepted", false, r.reason, r.message.clone(), generation, now)]
        }
        (Ok(()), Some(r)) => vec![
            attached(),
            condition(
                "PartiallyInvalid",
                true,
                r.reason,
                format!("a rule was dropped: {}", r.message),
                generation,
                now,
            ),
        ],
        (Ok(()), None) => vec![attached()],
    };
    conditions.push(match unresolved {
        Some(Refused { reason, message }) => condition("ResolvedRefs", false, reason, message.clone(), generation, now),
        None => condition("ResolvedRefs", true, "ResolvedRefs", "every backendRef resolved", generation, now),
    });
    conditions
}

/// A route of any kind as attaching it needs it: the parts every kind shares (parentRefs
/// in HTTPRoute's form), and its rules built on first use.
pub(super) struct RouteView<'a> {
    pub(super) kind: &'static str,
    pub(super) meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    pub(super) oref: ObjectRef,
    pub(super) parent_refs: Vec<HttpRouteParentRefs>,
    pub(super) hostnames: Vec<String>,
    pub(super) rules: Box<dyn Fn(&mut Snapshot) -> Rules + 'a>,
}

impl<'a> RouteView<'a> {
    /// The view of `route`, whose rules `rules` builds into a [`RuleSet`] of its kind,
    /// namespace and reference, resolving backendRefs in `world` and `backends`.
    fn new<K: kube::Resource<DynamicType = ()>>(
        kind: &'static str,
        route: &'a K,
        (world, backends): (&'a World, &'a Backends<'a>),
        parent_refs: Vec<HttpRouteParentRefs>,
        hostnames: Vec<String>,
        rules: impl Fn(RuleSet<'_, '_>) -> Rules + 'a,
    ) -> RouteView<'a> {
        let meta = route.meta();
        let ns = meta.namespace.clone().unwrap_or_else(|| "default".into());
        let oref = object_ref(route);
        let rref = oref.clone();
        let build = move |s: &mut Snapshot| rules(RuleSet::new(kind, &ns, &rref, world, backends, s));
        RouteView { kind, meta, oref, parent_refs, hostnames, rules: Box::new(build) }
    }

    pub(super) fn http(route: &'a HttpRoute, world: &'a World, backends: &'a Backends<'a>) -> RouteView<'a> {
        let (parents, hostnames) = (route.spec.parent_refs.clone(), route.spec.hostnames.clone());
        let (parents, hostnames) = (parents.unwrap_or_default(), hostnames.unwrap_or_default());
        RouteView::new(HTTP_ROUTE, route, (world, backends), parents, hostnames, move |set| rules(route, set))
    }

    // The other kinds' parentRefs are the same fields under other type names.

    pub(super) fn grpc(route: &'a GrpcRoute, world: &'a World, backends: &'a Backends<'a>) -> RouteView<'a> {
        let (parents, hostnames) = (parent_refs!(route.spec.parent_refs), route.spec.hostnames.clone());
        let hostnames = hostnames.unwrap_or_default();
        RouteView::new(GRPC_ROUTE, route, (world, backends), parents, hostnames, move |set| grpc_rules(route, set))
    }

    pub(super) fn tls(route: &'a TlsRoute, world: &'a World, backends: &'a Backends<'a>) -> RouteView<'a> {
        let (parents, hostnames) = (parent_refs!(route.spec.parent_refs), route.spec.hostnames.clone());
        RouteView::new(TLS_ROUTE, route, (world, backends), parents, hostnames, move |set| tls_rules(route, set))
    }

    pub(super) fn tcp(route: &'a TcpRoute, world: &'a World, backends: &'a Backends<'a>) -> RouteView<'a> {
        let parents = parent_refs!(route.spec.parent_refs);
        RouteView::new(TCP_ROUTE, route, (world, backends), parents, Vec::new(), move |set| tcp_rules(route, set))
    }
}

/// A route's `parentRefs` (absent: none) as HTTPRoute's.
macro_rules! parent_refs {
    ($refs:expr) => {
        $refs.iter().flatten().map(|p| parent_ref!(HttpRouteParentRefs, p)).collect::<Vec<_>>()
    };
}
use parent_refs;

/// An ordering of [`wharf_model::RouteMatch::precedence_key`] as bytes, so keys of
/// several parts compare as one.
pub(super) fn precedence_bytes(m: &wharf_model::RouteMatch) -> Vec<u8> {
    let exact = matches!(m.path, wharf_model::PathMatch::Exact(_));
    let inv = |n: usize| u32::MAX - u32::try_from(n).unwrap_or(u32::MAX);
    let mut k = vec![u8::from(!exact)];
    k.extend(inv(m.path.path().len()).to_be_bytes());
    k.push(u8::from(m.method.is_none()));
    k.extend(inv(m.headers.len()).to_be_bytes());
    k.extend(inv(m.query.len()).to_be_bytes());
    k
}

pub(super) fn parent_ref(p: &HttpRouteParentRefs) -> HttpRouteStatusParentsParentRef {
    super::parent_ref!(HttpRouteStatusParentsParentRef, p)
}
