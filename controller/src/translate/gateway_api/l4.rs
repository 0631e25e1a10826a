//! The rules of TCPRoutes and TLSRoutes: weighted relays by port or SNI.

use wharf_gateway_api::tcproutes::TcpRoute;
use wharf_gateway_api::tlsroutes::TlsRoute;
use wharf_model::{ObjectRef, PathMatch, RouteMatch, Snapshot, WeightedBackend};

use crate::translate::backend::Backends;
use crate::translate::Refused;
use crate::World;

use super::*;

/// A TCPRoute's rule (the API allows one): every connection to one of its backends,
/// chosen by weight.
pub(super) fn tcp_rules(
    route: &TcpRoute,
    ns: &str,
    rref: &ObjectRef,
    world: &World,
    backends: &Backends<'_>,
    snapshot: &mut Snapshot,
) -> Rules {
    let mut out = Vec::new();
    let mut unresolved = None;
    for (ri, rule) in route.spec.rules.iter().enumerate() {
        let refs =
            rule.backend_refs.iter().map(|b| (backend_ref!(b), u32::try_from(b.weight.unwrap_or(1)).unwrap_or(0)));
        out.push(relay(ri, resolve(refs, TCP_ROUTE, ns, rref, world, backends, snapshot, &mut unresolved)));
    }
    (out, None, unresolved)
}

/// Rule `ri` of a TLS or TCP route: every connection relayed to one of `backends`.
pub(super) fn relay(ri: usize, backends: Vec<WeightedBackend>) -> (usize, usize, RouteMatch, wharf_model::Action) {
    let action = wharf_model::Action::Forward(wharf_model::Forward::to(backends));
    (ri, 0, RouteMatch::path(PathMatch::Prefix("/".into())), action)
}

/// A TLSRoute's rules: each a forward of every connection (its SNI matched by the
/// hostnames) to its weighted backends. A connection carries no more than its SNI to
/// match on, so a route with several rules is refused.
pub(super) fn tls_rules(
    route: &TlsRoute,
    ns: &str,
    rref: &ObjectRef,
    world: &World,
    backends: &Backends<'_>,
    snapshot: &mut Snapshot,
) -> Rules {
    let mut out = Vec::new();
    let mut refused = None;
    let mut unresolved = None;
    for (ri, rule) in route.spec.rules.iter().enumerate() {
        if ri > 0 {
            refused.get_or_insert(Refused {
                reason: "UnsupportedValue",
                message: "a TLSRoute is served with one rule: its connections have nothing but the SNI to match on"
                    .into(),
            });
            continue;
        }
        let refs =
            rule.backend_refs.iter().map(|b| (backend_ref!(b), u32::try_from(b.weight.unwrap_or(1)).unwrap_or(0)));
        out.push(relay(ri, resolve(refs, TLS_ROUTE, ns, rref, world, backends, snapshot, &mut unresolved)));
    }
    (out, refused, unresolved)
}
