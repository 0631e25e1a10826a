//! Gateway API status: what to write, computed from the translation and the objects as
//! the index holds them (pure), and how one write is made (server-side apply under
//! [`FIELD_MANAGER`]). `status::write` makes the writes while this replica leads.
//!
//! A condition keeps its `lastTransitionTime` while its status stays, so an unchanged
//! object is never written again. An HTTPRoute's `status.parents` is shared with other
//! controllers: their entries are kept as they are, and the write is conditional on the
//! route's resourceVersion so that an entry written meanwhile is never lost.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::networking::v1::IngressLoadBalancerIngress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use wharf_gateway_api::backendtlspolicies::{
    BackendTlsPolicy, BackendTlsPolicyStatus, BackendTlsPolicyStatusAncestors,
};
use wharf_gateway_api::gatewayclasses::GatewayClass;
use wharf_gateway_api::gateways::{Gateway, GatewayStatusAddresses};
use wharf_gateway_api::grpcroutes::GrpcRoute;
use wharf_gateway_api::httproutes::{HttpRoute, HttpRouteStatusParents};
use wharf_gateway_api::tcproutes::TcpRoute;
use wharf_gateway_api::tlsroutes::TlsRoute;

use super::index::Index;
use crate::changes::Key;
use crate::translate::gateway_api::{status_parents, Statuses};

/// The field manager of Gateway API status writes.
pub const FIELD_MANAGER: &str = "wharf.dev/gateway-controller";

/// How long one status write may take before it is given up (and retried).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The kinds whose status Wharf writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StatusKind {
    /// GatewayClass (cluster-scoped).
    GatewayClass,
    /// Gateway.
    Gateway,
    /// HTTPRoute.
    HttpRoute,
    /// GRPCRoute.
    GrpcRoute,
    /// TLSRoute.
    TlsRoute,
    /// TCPRoute.
    TcpRoute,
    /// BackendTLSPolicy.
    BackendTlsPolicy,
}

impl StatusKind {
    /// The kind as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusKind::GatewayClass => "GatewayClass",
            StatusKind::Gateway => "Gateway",
            StatusKind::HttpRoute => "HTTPRoute",
            StatusKind::GrpcRoute => "GRPCRoute",
            StatusKind::TlsRoute => "TLSRoute",
            StatusKind::TcpRoute => "TCPRoute",
            StatusKind::BackendTlsPolicy => "BackendTLSPolicy",
        }
    }
}

/// One status to write: the whole `status` object, and for shared statuses the
/// resourceVersion it was computed from.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusBody {
    /// The `status` to apply.
    pub status: serde_json::Value,
    /// Write only if the object is still at this version.
    pub resource_version: Option<String>,
}

/// The writes to make, by kind and `(namespace, name)` (namespace empty when
/// cluster-scoped).
pub type StatusWrites = BTreeMap<(StatusKind, Key), StatusBody>;

/// Gives each desired condition the transition time of the current condition of the same
/// type when its status is unchanged.
fn settle(desired: &mut [Condition], current: &[Condition]) {
    for d in desired {
        if let Some(c) = current.iter().find(|c| c.type_ == d.type_ && c.status == d.status) {
            d.last_transition_time = c.last_transition_time.clone();
        }
    }
}

fn body<T: serde::Serialize>(status: &T, resource_version: Option<String>) -> Option<StatusBody> {
    Some(StatusBody { status: serde_json::to_value(status).ok()?, resource_version })
}

/// The status writes that make the objects in `index` show `statuses`; the edge Gateway
/// shows `edge_addresses` (those published for Ingresses).
pub fn plan(
    index: &Index,
    statuses: &Statuses,
    controller: &str,
    edge_addresses: &[IngressLoadBalancerIngress],
) -> StatusWrites {
    let mut out = StatusWrites::new();
    for (name, desired) in &statuses.gateway_classes {
        let key = (String::new(), name.clone());
        let Some(obj) = index.gateway_class(name) else { continue };
        let mut want = desired.clone();
        let current = obj.status.clone().unwrap_or_default();
        if let Some(c) = want.conditions.as_mut() {
            settle(c, current.conditions.as_deref().unwrap_or_default());
        }
        if want != current {
            out.extend(body(&want, None).map(|b| ((StatusKind::GatewayClass, key), b)));
        }
    }
    for (oref, desired) in &statuses.gateways {
        let key = (oref.namespace.clone(), oref.name.clone());
        let Some(obj) = index.gateway(&key) else { continue };
        let mut want = desired.clone();
        if statuses.edge_gateway.as_ref() == Some(oref) {
            want.addresses = Some(gateway_addresses(edge_addresses));
        }
        let current = obj.status.clone().unwrap_or_default();
        if let Some(c) = want.conditions.as_mut() {
            settle(c, current.conditions.as_deref().unwrap_or_default());
        }
        for l in want.listeners.iter_mut().flatten() {
            let had = current.listeners.iter().flatten().find(|c| c.name == l.name);
            settle(&mut l.conditions, had.map(|h| h.conditions.as_slice()).unwrap_or_default());
        }
        if want != current {
            out.extend(body(&want, None).map(|b| ((StatusKind::Gateway, key), b)));
        }
    }
    let http = index.http_routes().map(|(k, r)| {
        let parents = r.status.as_ref().map(|s| s.parents.clone()).unwrap_or_default();
        (k, parents, r.metadata.resource_version.clone())
    });
    routes(StatusKind::HttpRoute, http, &statuses.http_routes, controller, &mut out);
    let grpc = index.grpc_routes().map(|(k, r)| {
        // The same form as an HTTPRoute's entries, under other type names.
        let parents = r.status.as_ref().map(|s| status_parents!(s.parents)).unwrap_or_default();
        (k, parents, r.metadata.resource_version.clone())
    });
    routes(StatusKind::GrpcRoute, grpc, &statuses.grpc_routes, controller, &mut out);
    let tls = index.tls_routes().map(|(k, r)| {
        let parents = r.status.as_ref().map(|s| status_parents!(s.parents)).unwrap_or_default();
        (k, parents, r.metadata.resource_version.clone())
    });
    routes(StatusKind::TlsRoute, tls, &statuses.tls_routes, controller, &mut out);
    let tcp = index.tcp_routes().map(|(k, r)| {
        let parents = r.status.as_ref().map(|s| status_parents!(s.parents)).unwrap_or_default();
        (k, parents, r.metadata.resource_version.clone())
    });
    routes(StatusKind::TcpRoute, tcp, &statuses.tcp_routes, controller, &mut out);
    policies(index, &statuses.backend_tls_policies, controller, &mut out);
    out
}

/// The writes that make BackendTLSPolicies show our `status.ancestors` entries, keeping
/// other controllers' entries; policies with entries of ours that should have none lose
/// them.
fn policies(
    index: &Index,
    desired: &[(wharf_model::ObjectRef, Vec<BackendTlsPolicyStatusAncestors>)],
    controller: &str,
    out: &mut StatusWrites,
) {
    let desired: BTreeMap<(&str, &str), &Vec<BackendTlsPolicyStatusAncestors>> =
        desired.iter().map(|(o, a)| ((o.namespace.as_str(), o.name.as_str()), a)).collect();
    for (key, policy) in index.backend_tls_policies() {
        let current = policy.status.as_ref().map(|s| s.ancestors.clone()).unwrap_or_default();
        let ours = desired.get(&key);
        if ours.is_none() && !current.iter().any(|a| a.controller_name == controller) {
            continue;
        }
        let mut ancestors: Vec<BackendTlsPolicyStatusAncestors> =
            current.iter().filter(|a| a.controller_name != controller).cloned().collect();
        for a in ours.into_iter().flat_map(|v| v.iter()) {
            let mut a = a.clone();
            let had = current.iter().find(|c| c.controller_name == controller && c.ancestor_ref == a.ancestor_ref);
            settle(&mut a.conditions, had.map(|h| h.conditions.as_slice()).unwrap_or_default());
            ancestors.push(a);
        }
        if ancestors != current {
            let status = BackendTlsPolicyStatus { ancestors };
            let rv = policy.metadata.resource_version.clone();
            out.extend(
                body(&status, rv).map(|b| ((StatusKind::BackendTlsPolicy, (key.0.to_owned(), key.1.to_owned())), b)),
            );
        }
    }
}

/// Ingress status addresses as Gateway status addresses.
fn gateway_addresses(addrs: &[IngressLoadBalancerIngress]) -> Vec<GatewayStatusAddresses> {
    addrs
        .iter()
        .filter_map(|a| match (&a.ip, &a.hostname) {
            (Some(ip), _) => Some(GatewayStatusAddresses { r#type: Some("IPAddress".into()), value: ip.clone() }),
            (None, Some(h)) => Some(GatewayStatusAddresses { r#type: Some("Hostname".into()), value: h.clone() }),
            (None, None) => None,
        })
        .collect()
}

/// The writes that make routes of one kind show our `status.parents` entries: `current`
/// is each route's key, entries and resourceVersion. Routes that have entries of ours
/// but should have none lose them.
fn routes<'k>(
    kind: StatusKind,
    current: impl Iterator<Item = ((&'k str, &'k str), Vec<HttpRouteStatusParents>, Option<String>)>,
    desired: &[(wharf_model::ObjectRef, Vec<HttpRouteStatusParents>)],
    controller: &str,
    out: &mut StatusWrites,
) {
    let desired: BTreeMap<(&str, &str), &Vec<HttpRouteStatusParents>> =
        desired.iter().map(|(o, parents)| ((o.namespace.as_str(), o.name.as_str()), parents)).collect();
    for (key, current, resource_version) in current {
        let ours = desired.get(&key);
        if ours.is_none() && !current.iter().any(|p| p.controller_name == controller) {
            continue;
        }
        let mut parents: Vec<HttpRouteStatusParents> =
            current.iter().filter(|p| p.controller_name != controller).cloned().collect();
        for p in ours.into_iter().flat_map(|v| v.iter()) {
            let mut p = p.clone();
            let had = current.iter().find(|c| c.controller_name == controller && c.parent_ref == p.parent_ref);
            settle(&mut p.conditions, had.map(|h| h.conditions.as_slice()).unwrap_or_default());
            parents.push(p);
        }
        if parents != current {
            let status = wharf_gateway_api::httproutes::HttpRouteStatus { parents };
            out.extend(body(&status, resource_version).map(|b| ((kind, (key.0.to_owned(), key.1.to_owned())), b)));
        }
    }
}

/// Applies one status. `Ok(false)`: the object is gone (nothing to retry).
pub async fn write(client: &Client, kind: StatusKind, key: &Key, body: &StatusBody) -> Result<bool, kube::Error> {
    let mut metadata = serde_json::json!({ "name": key.1 });
    if !key.0.is_empty() {
        metadata["namespace"] = key.0.clone().into();
    }
    if let Some(rv) = &body.resource_version {
        metadata["resourceVersion"] = rv.clone().into();
    }
    let patch = serde_json::json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": kind.as_str(),
        "metadata": metadata,
        "status": body.status,
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let patch = Patch::Apply(&patch);
    let call = async {
        match kind {
            StatusKind::GatewayClass => {
                Api::<GatewayClass>::all(client.clone()).patch_status(&key.1, &params, &patch).await.map(drop)
            }
            StatusKind::Gateway => {
                Api::<Gateway>::namespaced(client.clone(), &key.0).patch_status(&key.1, &params, &patch).await.map(drop)
            }
            StatusKind::HttpRoute => Api::<HttpRoute>::namespaced(client.clone(), &key.0)
                .patch_status(&key.1, &params, &patch)
                .await
                .map(drop),
            StatusKind::GrpcRoute => Api::<GrpcRoute>::namespaced(client.clone(), &key.0)
                .patch_status(&key.1, &params, &patch)
                .await
                .map(drop),
            StatusKind::TlsRoute => Api::<TlsRoute>::namespaced(client.clone(), &key.0)
                .patch_status(&key.1, &params, &patch)
                .await
                .map(drop),
            StatusKind::TcpRoute => Api::<TcpRoute>::namespaced(client.clone(), &key.0)
                .patch_status(&key.1, &params, &patch)
                .await
                .map(drop),
            StatusKind::BackendTlsPolicy => Api::<BackendTlsPolicy>::namespaced(client.clone(), &key.0)
                .patch_status(&key.1, &params, &patch)
                .await
                .map(drop),
        }
    };
    match tokio::time::timeout(WRITE_TIMEOUT, call).await {
        Ok(Ok(())) => Ok(true),
        Ok(Err(kube::Error::Api(e))) if e.code == 404 => Ok(false),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(kube::Error::Service(format!("no answer within {WRITE_TIMEOUT:?}").into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::Change;
    use crate::translate::gateway_api::GatewayOptions;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    const NOW: i64 = 1_800_000_000;

    fn obj<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    fn index(gateway_status: serde_json::Value, route_status: serde_json::Value) -> Index {
        let mut index = Index::default();
        index.apply(Change::GatewayClass(Event::Apply(obj(json!({
            "metadata": {"name": "wharf", "generation": 1}, "spec": {"controllerName": FIELD_MANAGER},
        })))));
        index.apply(Change::Gateway(Event::Apply(obj(json!({
            "metadata": {"name": "gw", "namespace": "web", "generation": 1},
            "spec": {"gatewayClassName": "wharf", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]},
            "status": gateway_status,
        })))));
        index.apply(Change::HttpRoute(Event::Apply(obj(json!({
            "metadata": {"name": "r", "namespace": "web", "generation": 1, "resourceVersion": "42"},
            "spec": {"parentRefs": [{"name": "gw"}], "rules": [{}]},
            "status": route_status,
        })))));
        index
    }

    fn statuses(index: &Index, now: i64) -> Statuses {
        let opts = crate::Options {
            now,
            gateway: GatewayOptions {
                controller_name: FIELD_MANAGER.into(),
                addresses: crate::translate::gateway_api::AddressPool::parse("127.1.0.0/16").ok(),
                edge: None,
            },
            ..crate::Options::default()
        };
        crate::translate(&index.world(), &opts, None).gateway_status
    }

    #[test]
    fn the_edge_gateway_shows_the_addresses_published_for_ingresses() {
        let index = index(json!(null), json!(null));
        let mut st = statuses(&index, NOW);
        let published = [
            IngressLoadBalancerIngress { ip: Some("203.0.113.7".into()), ..Default::default() },
            IngressLoadBalancerIngress { hostname: Some("lb.example.com".into()), ..Default::default() },
            IngressLoadBalancerIngress::default(),
        ];
        let addresses =
            |w: &StatusWrites| w[&(StatusKind::Gateway, ("web".into(), "gw".into()))].status["addresses"].clone();
        let pooled = plan(&index, &st, FIELD_MANAGER, &published);
        assert_eq!(addresses(&pooled)[0]["value"].as_str().map(|v| v.starts_with("127.1.")), Some(true));
        st.edge_gateway = Some(wharf_model::ObjectRef::new("Gateway", "web", "gw"));
        let edge = plan(&index, &st, FIELD_MANAGER, &published);
        assert_eq!(
            addresses(&edge),
            json!([{"type": "IPAddress", "value": "203.0.113.7"}, {"type": "Hostname", "value": "lb.example.com"}])
        );
        assert_eq!(addresses(&plan(&index, &st, FIELD_MANAGER, &[])), json!([]), "none published yet");
    }

    fn kinds(w: &StatusWrites) -> Vec<(StatusKind, &str)> {
        w.keys().map(|(k, key)| (*k, key.1.as_str())).collect()
    }

    #[test]
    fn kinds_are_spelled_as_the_api_spells_them() {
        let all = [
            StatusKind::GatewayClass,
            StatusKind::Gateway,
            StatusKind::HttpRoute,
            StatusKind::GrpcRoute,
            StatusKind::TlsRoute,
            StatusKind::TcpRoute,
        ]
        .map(StatusKind::as_str);
        assert_eq!(all, ["GatewayClass", "Gateway", "HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute"]);
    }

    #[test]
    fn written_once_then_only_when_something_but_the_time_changes() {
        let mut index = index(json!(null), json!(null));
        let first = plan(&index, &statuses(&index, NOW), FIELD_MANAGER, &[]);
        assert_eq!(
            kinds(&first),
            [(StatusKind::GatewayClass, "wharf"), (StatusKind::Gateway, "gw"), (StatusKind::HttpRoute, "r")]
        );
        assert_eq!(first[&(StatusKind::HttpRoute, ("web".into(), "r".into()))].resource_version.as_deref(), Some("42"));

        // The API server now shows what was written; later translations differ only in time.
        let route = &first[&(StatusKind::HttpRoute, ("web".into(), "r".into()))].status;
        let gateway = &first[&(StatusKind::Gateway, ("web".into(), "gw".into()))].status;
        let class = &first[&(StatusKind::GatewayClass, (String::new(), "wharf".into()))].status;
        index = self::index(gateway.clone(), route.clone());
        index.apply(Change::GatewayClass(Event::Apply(obj(json!({
            "metadata": {"name": "wharf", "generation": 1}, "spec": {"controllerName": FIELD_MANAGER}, "status": class,
        })))));
        assert!(plan(&index, &statuses(&index, NOW + 60), FIELD_MANAGER, &[]).is_empty());

        // A listener's route count changes: the Gateway is written, its times kept.
        index.apply(Change::HttpRoute(Event::Delete(obj(
            json!({"metadata": {"name": "r", "namespace": "web"}, "spec": {}}),
        ))));
        let next = plan(&index, &statuses(&index, NOW + 120), FIELD_MANAGER, &[]);
        assert_eq!(kinds(&next), [(StatusKind::Gateway, "gw")]);
        let st = &next[&(StatusKind::Gateway, ("web".into(), "gw".into()))].status;
        assert_eq!(st["listeners"][0]["attachedRoutes"], 0);
        assert_eq!(st["conditions"][0]["lastTransitionTime"], gateway["conditions"][0]["lastTransitionTime"]);
    }

    #[test]
    fn other_controllers_route_entries_stay_and_ours_go_when_the_route_leaves() {
        let theirs = json!({"controllerName": "example.com/other", "parentRef": {"name": "elsewhere"},
                            "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                                            "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        let stale = json!({"controllerName": FIELD_MANAGER, "parentRef": {"name": "gone"},
                           "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                                           "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        let index = index(json!(null), json!({"parents": [theirs, stale]}));
        let w = plan(&index, &statuses(&index, NOW), FIELD_MANAGER, &[]);
        let parents = &w[&(StatusKind::HttpRoute, ("web".into(), "r".into()))].status["parents"];
        let names: Vec<&str> =
            parents.as_array().unwrap().iter().filter_map(|p| p["parentRef"]["name"].as_str()).collect();
        assert_eq!(names, ["elsewhere", "gw"], "theirs kept first, our stale entry replaced by the current one");
        assert_eq!(parents[0], theirs);

        // The route leaves our Gateway: only our entry goes.
        let mut index = index;
        index.apply(Change::HttpRoute(Event::Apply(obj(json!({
            "metadata": {"name": "r", "namespace": "web", "resourceVersion": "43"},
            "spec": {"parentRefs": [{"name": "elsewhere"}]},
            "status": {"parents": [theirs.clone(), stale]},
        })))));
        let w = plan(&index, &statuses(&index, NOW), FIELD_MANAGER, &[]);
        let body = &w[&(StatusKind::HttpRoute, ("web".into(), "r".into()))];
        assert_eq!(body.status["parents"], json!([theirs]));
        assert_eq!(body.resource_version.as_deref(), Some("43"));
    }

    fn condition(kind: &str, status: &str, time: &str) -> serde_json::Value {
        json!({"type": kind, "status": status, "reason": "R", "message": "", "lastTransitionTime": time})
    }

    #[test]
    fn a_condition_keeps_its_time_only_while_its_type_and_status_stay() {
        let t = |s: &str| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(s.parse().unwrap_or_default());
        let cond = |kind: &str, status: &str, time: &str| -> Condition { obj(condition(kind, status, time)) };
        let current =
            [cond("Accepted", "True", "2026-01-01T00:00:00Z"), cond("Programmed", "False", "2026-01-02T00:00:00Z")];
        let mut desired = [
            cond("Accepted", "True", "2026-06-01T00:00:00Z"),
            cond("Programmed", "True", "2026-06-01T00:00:00Z"),
            cond("ResolvedRefs", "False", "2026-06-01T00:00:00Z"),
        ];
        settle(&mut desired, &current);
        let times: Vec<_> = desired.iter().map(|c| c.last_transition_time.clone()).collect();
        assert_eq!(times, [t("2026-01-01T00:00:00Z"), t("2026-06-01T00:00:00Z"), t("2026-06-01T00:00:00Z")]);
    }

    #[test]
    fn routes_that_only_other_controllers_serve_are_left_alone_and_their_times_are_not_ours() {
        let theirs = |parent: &str| {
            json!({"controllerName": "example.com/other", "parentRef": {"name": parent},
                   "conditions": [condition("Accepted", "True", "2020-01-01T00:00:00Z"), condition("ResolvedRefs", "True", "2020-01-01T00:00:00Z")]})
        };
        // Only another controller's entry, and no parent of ours: nothing to write.
        let mut index = index(json!(null), json!({"parents": [theirs("elsewhere")]}));
        index.apply(Change::HttpRoute(Event::Apply(obj(json!({
            "metadata": {"name": "r", "namespace": "web", "resourceVersion": "7"},
            "spec": {"parentRefs": [{"name": "elsewhere"}]},
            "status": {"parents": [theirs("elsewhere")]},
        })))));
        let w = plan(&index, &statuses(&index, NOW), FIELD_MANAGER, &[]);
        assert!(!w.keys().any(|(k, _)| *k == StatusKind::HttpRoute), "{w:?}");

        // Only our entry, left from a parent the route no longer names: it goes.
        let ours = json!({"controllerName": FIELD_MANAGER, "parentRef": {"name": "gone"},
                          "conditions": [condition("Accepted", "True", "2020-01-01T00:00:00Z")]});
        let mut index = self::index(json!(null), json!(null));
        index.apply(Change::HttpRoute(Event::Apply(obj(json!({
            "metadata": {"name": "r", "namespace": "web", "resourceVersion": "8"},
            "spec": {"parentRefs": [{"name": "elsewhere"}]},
            "status": {"parents": [ours]},
        })))));
        let w = plan(&index, &statuses(&index, NOW), FIELD_MANAGER, &[]);
        assert_eq!(w[&(StatusKind::HttpRoute, ("web".into(), "r".into()))].status["parents"], json!([]));

        // Another controller's entry for the same parent: its times are not taken for ours.
        let index = self::index(json!(null), json!({"parents": [theirs("gw")]}));
        let w = plan(&index, &statuses(&index, NOW), FIELD_MANAGER, &[]);
        let parents = &w[&(StatusKind::HttpRoute, ("web".into(), "r".into()))].status["parents"];
        assert_eq!(parents[0], theirs("gw"));
        assert_eq!(parents[1]["controllerName"], FIELD_MANAGER);
        assert_ne!(parents[1]["conditions"][0]["lastTransitionTime"], "2020-01-01T00:00:00Z");
    }

    #[test]
    fn grpc_tls_and_tcp_routes_get_their_entries_in_the_same_form() {
        let mut index = index(json!(null), json!(null));
        let theirs = json!({"controllerName": "example.com/other", "parentRef": {"name": "x"},
                            "conditions": [condition("Accepted", "True", "2020-01-01T00:00:00Z")]});
        index.apply(Change::GrpcRoute(Event::Apply(obj(json!({
            "metadata": {"name": "g", "namespace": "web", "resourceVersion": "9"},
            "spec": {"parentRefs": [{"name": "gw"}], "rules": [{}]},
            "status": {"parents": [theirs.clone()]},
        })))));
        index.apply(Change::TlsRoute(Event::Apply(obj(json!({
            "metadata": {"name": "t", "namespace": "web", "resourceVersion": "10"},
            "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["a.example.com"], "rules": [{"backendRefs": []}]},
        })))));
        index.apply(Change::TcpRoute(Event::Apply(obj(json!({
            "metadata": {"name": "c", "namespace": "web", "resourceVersion": "11"},
            "spec": {"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": []}]},
            "status": {"parents": [theirs.clone()]},
        })))));
        let w = plan(&index, &statuses(&index, NOW), FIELD_MANAGER, &[]);
        let grpc = &w[&(StatusKind::GrpcRoute, ("web".into(), "g".into()))];
        assert_eq!(grpc.status["parents"][0], theirs, "the other controller's entry, read from the GRPCRoute");
        assert_eq!(grpc.status["parents"][1]["parentRef"]["name"], "gw");
        assert_eq!(grpc.resource_version.as_deref(), Some("9"));
        let tls = &w[&(StatusKind::TlsRoute, ("web".into(), "t".into()))];
        assert_eq!(tls.status["parents"][0]["controllerName"], FIELD_MANAGER);
        let tcp = &w[&(StatusKind::TcpRoute, ("web".into(), "c".into()))];
        assert_eq!(tcp.status["parents"][0], theirs, "the other controller's entry, read from the TCPRoute");
        assert_eq!(tcp.status["parents"][1]["controllerName"], FIELD_MANAGER);
        assert_eq!(tcp.resource_version.as_deref(), Some("11"));
    }

    #[test]
    fn backend_tls_policies_keep_other_controllers_ancestors_and_lose_ours_when_unused() {
        let mut index = index(json!(null), json!(null));
        index.apply(Change::HttpRoute(Event::Apply(obj(json!({
            "metadata": {"name": "r", "namespace": "web", "generation": 1, "resourceVersion": "42"},
            "spec": {"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [{"name": "app", "port": 443}]}]},
        })))));
        let theirs = json!({"controllerName": "example.com/other", "ancestorRef": {"name": "x"},
                            "conditions": [condition("Accepted", "True", "2020-01-01T00:00:00Z")]});
        let policy = |name: &str, service: &str, ancestors: serde_json::Value| {
            Change::BackendTlsPolicy(Event::Apply(obj(json!({
                "metadata": {"name": name, "namespace": "web", "generation": 2, "resourceVersion": "7"},
                "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": service}],
                         "validation": {"wellKnownCACertificates": "System", "hostname": "app.example.com"}},
                "status": {"ancestors": ancestors},
            }))))
        };
        let stale = json!({"controllerName": FIELD_MANAGER, "ancestorRef": {"name": "gw", "namespace": "web"},
                           "conditions": [condition("Accepted", "True", "2020-01-01T00:00:00Z")]});
        index.apply(policy("used", "app", json!([theirs.clone()])));
        index.apply(policy("unused", "nobody", json!([theirs.clone(), stale])));
        index.apply(policy("untouched", "nobody", json!([theirs.clone()])));
        let w = plan(&index, &statuses(&index, NOW), FIELD_MANAGER, &[]);
        let used = &w[&(StatusKind::BackendTlsPolicy, ("web".into(), "used".into()))];
        assert_eq!(used.status["ancestors"][0], theirs);
        let ours = &used.status["ancestors"][1];
        assert_eq!((&ours["ancestorRef"]["name"], &ours["controllerName"]), (&json!("gw"), &json!(FIELD_MANAGER)));
        assert_eq!(ours["conditions"][0]["observedGeneration"], 2);
        assert_eq!(used.resource_version.as_deref(), Some("7"));
        let unused = &w[&(StatusKind::BackendTlsPolicy, ("web".into(), "unused".into()))];
        assert_eq!(
            unused.status["ancestors"],
            json!([theirs]),
            "our entry goes once no route of ours uses the Service"
        );
        assert!(!w.contains_key(&(StatusKind::BackendTlsPolicy, ("web".into(), "untouched".into()))));

        // A policy with only a stale entry of ours loses it.
        index.apply(policy("only-ours", "nobody", json!([stale])));
        let w = plan(&index, &statuses(&index, NOW), FIELD_MANAGER, &[]);
        let only = &w[&(StatusKind::BackendTlsPolicy, ("web".into(), "only-ours".into()))];
        assert_eq!(only.status["ancestors"], json!([]));

        // Our entry as written, older, beside another controller's for the same Gateway
        // with other conditions: our conditions keep their times and nothing is written.
        let mut settled = used.status["ancestors"][1].clone();
        for c in settled["conditions"].as_array_mut().into_iter().flatten() {
            c["lastTransitionTime"] = json!("2020-01-01T00:00:00Z");
        }
        let mut same_gateway = settled.clone();
        same_gateway["controllerName"] = json!("example.com/other");
        for c in same_gateway["conditions"].as_array_mut().into_iter().flatten() {
            c["status"] = json!("False");
            c["lastTransitionTime"] = json!("2019-01-01T00:00:00Z");
        }
        index.apply(policy("used", "app", json!([same_gateway, settled])));
        let w = plan(&index, &statuses(&index, NOW), FIELD_MANAGER, &[]);
        assert!(
            !w.contains_key(&(StatusKind::BackendTlsPolicy, ("web".into(), "used".into()))),
            "{:?}",
            w.get(&(StatusKind::BackendTlsPolicy, ("web".into(), "used".into()))).map(|b| &b.status)
        );
    }
}
