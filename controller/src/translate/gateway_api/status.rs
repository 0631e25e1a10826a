//! The status a Gateway and the policies that target its routes should show.

use crate::hashing::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use wharf_gateway_api::backendtlspolicies::{
    BackendTlsPolicyStatusAncestors, BackendTlsPolicyStatusAncestorsAncestorRef,
};
use wharf_gateway_api::gateways::{GatewayStatus, GatewayStatusAddresses, GatewayStatusListeners};
use wharf_gateway_api::httproutes::HttpRouteStatusParents;
use wharf_model::ObjectRef;

use crate::translate::backend::Backends;
use crate::translate::grants::GATEWAY_GROUP;
use crate::World;

use super::*;

/// Each BackendTLSPolicy's entries: one per Gateway of ours that accepted an HTTPRoute or
/// GRPCRoute using a Service the policy targets.
pub(super) fn policy_statuses(
    world: &World,
    out: &Statuses,
    backends: &Backends<'_>,
    controller: &str,
    now: &Time,
) -> Vec<(ObjectRef, Vec<BackendTlsPolicyStatusAncestors>)> {
    if backends.tls_policies.states.is_empty() {
        return Vec::new();
    }
    // A parentRef without namespace is in the route's.
    let accepted_by = |parents: &[HttpRouteStatusParents], route_ns: &str| -> Vec<(String, String)> {
        parents
            .iter()
            .filter(|p| p.conditions.iter().any(|c| c.type_ == "Accepted" && c.status == "True"))
            .map(|p| (p.parent_ref.namespace.clone().unwrap_or_else(|| route_ns.to_owned()), p.parent_ref.name.clone()))
            .collect()
    };
    // (Service namespace, name) -> the Gateways whose accepted routes use it.
    let mut used: HashMap<(String, String), std::collections::BTreeSet<(String, String)>> = HashMap::default();
    let mut note = |route_ns: &str,
                    refs: &mut dyn Iterator<Item = (Option<&str>, Option<&str>, &str, Option<&str>)>,
                    gws: &[(String, String)]| {
        for (group, kind, name, namespace) in refs {
            if group.unwrap_or("").is_empty() && kind.unwrap_or("Service") == "Service" {
                let key = (namespace.unwrap_or(route_ns).to_owned(), name.to_owned());
                used.entry(key).or_default().extend(gws.iter().cloned());
            }
        }
    };
    // Each route's status entries by namespace and name (one lookup per route).
    type ByRoute<'s> = HashMap<(&'s str, &'s str), &'s [HttpRouteStatusParents]>;
    fn by_route(list: &[(ObjectRef, Vec<HttpRouteStatusParents>)]) -> ByRoute<'_> {
        list.iter().map(|(o, p)| ((o.namespace.as_str(), o.name.as_str()), p.as_slice())).collect()
    }
    let (http_parents, grpc_parents) = (by_route(&out.http_routes), by_route(&out.grpc_routes));
    let parents_of =
        |by: &ByRoute<'_>, ns: &str, name: &str| by.get(&(ns, name)).map(|p| accepted_by(p, ns)).unwrap_or_default();
    // HTTPRoutes and GRPCRoutes: the same fields under other type names.
    macro_rules! note_routes {
        ($routes:expr, $statuses:expr) => {
            for r in $routes {
                let (ns, name) =
                    (r.metadata.namespace.as_deref().unwrap_or(""), r.metadata.name.as_deref().unwrap_or(""));
                let gws = parents_of($statuses, ns, name);
                let mut refs = r
                    .spec
                    .rules
                    .iter()
                    .flatten()
                    .flat_map(|rule| rule.backend_refs.iter().flatten())
                    .map(|b| (b.group.as_deref(), b.kind.as_deref(), b.name.as_str(), b.namespace.as_deref()));
                note(ns, &mut refs, &gws);
            }
        };
    }
    note_routes!(&world.http_routes, &http_parents);
    note_routes!(&world.grpc_routes, &grpc_parents);
    backends
        .tls_policies
        .states
        .iter()
        .filter_map(|state| {
            let gws: std::collections::BTreeSet<&(String, String)> =
                state.services.iter().filter_map(|s| used.get(s)).flatten().collect();
            let conditions = state.conditions(now);
            let ancestors: Vec<BackendTlsPolicyStatusAncestors> = gws
                .into_iter()
                .map(|(gns, gname)| BackendTlsPolicyStatusAncestors {
                    ancestor_ref: BackendTlsPolicyStatusAncestorsAncestorRef {
                        group: Some(GATEWAY_GROUP.to_owned()),
                        kind: Some("Gateway".to_owned()),
                        name: gname.clone(),
                        namespace: Some(gns.clone()),
                        ..Default::default()
                    },
                    conditions: conditions.clone(),
                    controller_name: controller.to_owned(),
                })
                .collect();
            (!ancestors.is_empty()).then(|| (state.oref.clone(), ancestors))
        })
        .collect()
}

pub(super) fn gateway_status(gw: &Gw<'_>, now: &Time) -> GatewayStatus {
    let generation = gw.obj.metadata.generation;
    let cond =
        |kind: &str, ok: bool, reason: &str, message: String| condition(kind, ok, reason, message, generation, now);
    let listeners: Vec<GatewayStatusListeners> = gw
        .listeners
        .iter()
        .map(|l| {
            let mut c = Vec::new();
            c.push(match (l.conflict, &l.unsupported) {
                (Some("ProtocolConflict"), _) => cond(
                    "Accepted",
                    false,
                    "ProtocolConflict",
                    format!("listeners on port {} use different protocols (or TLS modes)", l.spec.port),
                ),
                (_, Some(Refused { reason, message: msg })) => cond("Accepted", false, reason, msg.clone()),
                _ => cond("Accepted", true, "Accepted", "listener accepted".into()),
            });
            c.push(match l.conflict {
                Some(reason) => cond(
                    "Conflicted",
                    true,
                    reason,
                    format!("another listener on port {} conflicts with this one ({reason})", l.spec.port),
                ),
                None => cond("Conflicted", false, "NoConflicts", "no conflicts".into()),
            });
            c.push(match (&l.bad_kinds, &l.bad_ref) {
                (Some(msg), _) => cond("ResolvedRefs", false, "InvalidRouteKinds", msg.clone()),
                (None, Some(Refused { reason, message: msg })) => cond("ResolvedRefs", false, reason, msg.clone()),
                (None, None) => cond("ResolvedRefs", true, "ResolvedRefs", "every reference resolved".into()),
            });
            c.push(match (l.ready(), &gw.address) {
                (true, Ok(_)) => cond("Programmed", true, "Programmed", "listener is served".into()),
                (true, Err(Refused { reason: _, message: msg })) => cond("Programmed", false, "Pending", msg.clone()),
                (false, _) => {
                    cond("Programmed", false, "Invalid", "listener is not served; see its other conditions".into())
                }
            });
            GatewayStatusListeners {
                attached_routes: l.attached,
                conditions: c,
                name: l.spec.name.clone(),
                supported_kinds: Some(l.kinds.clone()),
            }
        })
        .collect();
    let valid = gw.listeners.iter().filter(|l| l.ready()).count();
    let accepted = if valid == gw.listeners.len() {
        cond("Accepted", true, "Accepted", "Gateway accepted".into())
    } else if valid > 0 {
        cond(
            "Accepted",
            true,
            "ListenersNotValid",
            format!(
                "{} of {} listeners are not valid; see their conditions",
                gw.listeners.len() - valid,
                gw.listeners.len()
            ),
        )
    } else {
        cond("Accepted", false, "ListenersNotValid", "no listener is valid; see their conditions".into())
    };
    let programmed = match &gw.address {
        Ok(Place::Address(ip)) if valid > 0 => cond("Programmed", true, "Programmed", format!("served on {ip}")),
        Ok(Place::Edge) if valid > 0 => cond(
            "Programmed",
            true,
            "Programmed",
            "served on Wharf's own listeners, at the address of its Service".into(),
        ),
        Ok(_) => cond("Programmed", false, "Invalid", "no listener is valid".into()),
        Err(Refused { reason, message: msg }) => cond("Programmed", false, reason, msg.clone()),
    };
    GatewayStatus {
        addresses: match gw.address {
            Ok(Place::Address(ip)) => {
                Some(vec![GatewayStatusAddresses { r#type: Some("IPAddress".into()), value: ip.to_string() }])
            }
            _ => None,
        },
        attached_listener_sets: None,
        conditions: Some(vec![accepted, programmed]),
        listeners: Some(listeners),
    }
}
