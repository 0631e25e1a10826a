//! The rules of TCPRoutes and TLSRoutes: weighted relays by port or SNI.

use wharf_gateway_api::tcproutes::TcpRoute;
use wharf_gateway_api::tlsroutes::TlsRoute;
use wharf_model::{PathMatch, RouteMatch, WeightedBackend};

use crate::translate::Refused;

use super::*;

/// A TCPRoute's rule (the API allows one): every connection to one of its backends,
/// chosen by weight.
pub(super) fn tcp_rules(route: &TcpRoute, mut set: RuleSet<'_, '_>) -> Rules {
    for (ri, rule) in route.spec.rules.iter().enumerate() {
        let weighted = set.resolve(rule.backend_refs.iter().map(|b| (backend_ref!(b), weight(b.weight))));
        set.push(relay(ri, weighted));
    }
    set.finish()
}

/// Rule `ri` of a TLS or TCP route: every connection relayed to one of `backends`.
pub(super) fn relay(ri: usize, backends: Vec<WeightedBackend>) -> (usize, usize, RouteMatch, wharf_model::Action) {
    let action = wharf_model::Action::Forward(wharf_model::Forward::to(backends));
    (ri, 0, RouteMatch::path(PathMatch::Prefix("/".into())), action)
}

/// A TLSRoute's rules: each a forward of every connection (its SNI matched by the
/// hostnames) to its weighted backends. A connection carries no more than its SNI to
/// match on, so a route with several rules is refused.
pub(super) fn tls_rules(route: &TlsRoute, mut set: RuleSet<'_, '_>) -> Rules {
    for (ri, rule) in route.spec.rules.iter().enumerate() {
        if ri > 0 {
            set.refuse(Refused::new(
                "UnsupportedValue",
                "a TLSRoute is served with one rule: its connections have nothing but the SNI to match on".into(),
            ));
            continue;
        }
        let weighted = set.resolve(rule.backend_refs.iter().map(|b| (backend_ref!(b), weight(b.weight))));
        set.push(relay(ri, weighted));
    }
    set.finish()
}
