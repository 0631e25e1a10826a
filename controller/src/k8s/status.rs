//! What Ingress status and Events should be, computed from the index (pure), and the
//! lease-gated task that writes them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::stored::Ingress;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::networking::v1::{IngressClass, IngressLoadBalancerIngress};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use super::gateway_status::{StatusBody, StatusKind};
use super::index::Index;
use crate::changes::Key;
use crate::Diagnostic;

/// Where the address written into `status.loadBalancer.ingress` comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Publish {
    /// Fixed IPs or hostnames (`--publish-address`).
    Addresses(Vec<String>),
    /// The LoadBalancer status of this Service (`--publish-service`).
    Service(Key),
    /// Write no address.
    Nothing,
}

/// One Event to publish.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct EventSpec {
    /// The kind of the object: `Ingress` or `Gateway`.
    pub kind: &'static str,
    /// `namespace/name` of the object.
    pub key: Key,
    /// Event reason.
    pub reason: String,
    /// Event message.
    pub message: String,
}

/// Status writes and Events the leader should make.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Plan {
    /// Ingresses whose status differs from what it should be, and what it should be.
    pub status: BTreeMap<Key, Vec<IngressLoadBalancerIngress>>,
    /// Events for the current diagnostics on Ingresses, Gateways and routes.
    pub events: BTreeSet<EventSpec>,
    /// Object references (with uid) of the objects named in `events`, by kind and key.
    pub refs: BTreeMap<(&'static str, Key), ObjectReference>,
    /// Gateway API status writes.
    pub gateway: super::gateway_status::StatusWrites,
    /// The host-owners record to write (ConfigMap key, text), when it differs from the one
    /// stored.
    pub record: Option<(Key, String)>,
}

/// The record of who serves each host of `snapshot` to write into ConfigMap `at`
/// (namespace, name), when it differs from the one `index` holds; `None` too past
/// [`crate::translate::owners::RECORD_LIMIT`] (the owners are then kept in memory only).
pub fn record(index: &Index, at: &Key, snapshot: &wharf_model::Snapshot) -> Option<(Key, String)> {
    use crate::translate::owners::{record, RECORD_LIMIT};
    use crate::well_known::HOST_OWNERS_KEY;
    let text = record(snapshot);
    if index.config_map_data(at, HOST_OWNERS_KEY) == Some(text.as_str()) {
        return None;
    }
    if text.len() > RECORD_LIMIT {
        tracing::warn!(
            bytes = text.len(),
            "the host-owners record is too large for a ConfigMap; owners are kept in memory only"
        );
        return None;
    }
    Some((at.clone(), text))
}

/// The addresses to publish.
pub fn addresses(publish: &Publish, index: &Index) -> Vec<IngressLoadBalancerIngress> {
    match publish {
        Publish::Nothing => Vec::new(),
        Publish::Addresses(list) => list
            .iter()
            .map(|a| match a.parse::<IpAddr>() {
                Ok(_) => IngressLoadBalancerIngress { ip: Some(a.clone()), ..Default::default() },
                Err(_) => IngressLoadBalancerIngress { hostname: Some(a.clone()), ..Default::default() },
            })
            .collect(),
        Publish::Service(key) => index
            .service(key)
            .map(|s| {
                s.load_balancer
                    .iter()
                    .map(|i| IngressLoadBalancerIngress {
                        ip: i.ip.as_deref().map(str::to_owned),
                        hostname: i.hostname.as_deref().map(str::to_owned),
                        ..Default::default()
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

fn current(ing: &Ingress) -> Vec<IngressLoadBalancerIngress> {
    ing.status.as_ref().and_then(|s| s.load_balancer.as_ref()).and_then(|lb| lb.ingress.clone()).unwrap_or_default()
}

/// Ingresses that are not ours but carry exactly our addresses: they left our class (also
/// while no replica was running), and their status is ours to clear. Computed from what
/// the API server holds, so a restart forgets nothing. An Ingress whose class belongs to
/// another controller is that controller's to write, even when it publishes the same
/// address (two installs behind one load balancer): clearing it would start a fight.
pub fn left(
    index: &Index,
    controller: &str,
    ours: &BTreeSet<Key>,
    addrs: &[IngressLoadBalancerIngress],
) -> BTreeSet<Key> {
    if addrs.is_empty() {
        return BTreeSet::new();
    }
    index
        .ingresses()
        .filter(|(k, ing)| {
            !ours.contains(k as &dyn crate::k8s::index::Lookup)
                && current(ing) == addrs
                && !claimed_elsewhere(index, controller, ing)
        })
        .map(|((ns, name), _)| (ns.to_owned(), name.to_owned()))
        .collect()
}

/// True when an IngressClass of another controller claims `ing`: the one its
/// `ingressClassName` (or legacy annotation) names, or, naming none, a default class.
fn claimed_elsewhere(index: &Index, controller: &str, ing: &Ingress) -> bool {
    let named = ing
        .spec
        .as_ref()
        .and_then(|s| s.ingress_class_name.as_deref())
        .or_else(|| ing.metadata.annotations.as_ref()?.get("kubernetes.io/ingress.class").map(String::as_str));
    let foreign =
        |c: &IngressClass| c.spec.as_ref().and_then(|s| s.controller.as_deref()).is_some_and(|c| c != controller);
    index.ingress_classes().filter(|c| foreign(c)).any(|c| match named {
        Some(name) => c.metadata.name.as_deref() == Some(name),
        None => c
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("ingressclass.kubernetes.io/is-default-class"))
            .is_some_and(|v| v == "true"),
    })
}

/// Computes the plan: `ours` get `addrs`; Ingresses in `left` (ours before, not now) are
/// cleared; diagnostics on Ingresses and Gateways become Events.
pub fn plan(
    index: &Index,
    ours: &BTreeSet<Key>,
    left: &BTreeSet<Key>,
    addrs: &[IngressLoadBalancerIngress],
    diagnostics: &[Diagnostic],
) -> Plan {
    let mut p = Plan::default();
    for key in ours {
        if let Some(ing) = index.ingress(key) {
            if current(ing) != addrs {
                p.status.insert(key.clone(), addrs.to_vec());
            }
        }
    }
    for key in left {
        if let Some(ing) = index.ingress(key) {
            if !current(ing).is_empty() {
                p.status.insert(key.clone(), Vec::new());
            }
        }
    }
    for d in diagnostics {
        let key = (d.object.namespace.clone(), d.object.name.clone());
        let (kind, api_version, uid) = match &*d.object.kind {
            "Ingress" => match index.ingress(&key) {
                Some(ing) => ("Ingress", "networking.k8s.io/v1", ing.metadata.uid.as_deref().map(str::to_owned)),
                None => continue,
            },
            "Gateway" => match index.gateway(&key) {
                Some(gw) => ("Gateway", "gateway.networking.k8s.io/v1", gw.uid()),
                None => continue,
            },
            kind @ ("HTTPRoute" | "GRPCRoute" | "TLSRoute") => match index.route_uid(kind, &key) {
                Some(uid) => {
                    let kind = match kind {
                        "HTTPRoute" => "HTTPRoute",
                        "GRPCRoute" => "GRPCRoute",
                        _ => "TLSRoute",
                    };
                    (kind, "gateway.networking.k8s.io/v1", uid)
                }
                None => continue,
            },
            _ => continue,
        };
        p.refs.entry((kind, key.clone())).or_insert_with(|| ObjectReference {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
            namespace: Some(key.0.clone()),
            name: Some(key.1.clone()),
            uid,
            resource_version: None,
            field_path: None,
        });
        p.events.insert(EventSpec { kind, key, reason: d.reason.as_str().to_owned(), message: d.message.clone() });
    }
    p
}

/// What the leader has written in its current term: each status is written once per
/// difference and each Event once per appearance of its diagnostic.
#[derive(Debug, Default)]
struct Published {
    written: BTreeMap<Key, Vec<IngressLoadBalancerIngress>>,
    emitted: BTreeSet<EventSpec>,
    gateway: super::gateway_status::StatusWrites,
    record: Option<(Key, String)>,
}

impl Published {
    /// The status writes `plan` still needs. A status the API server now shows (so the
    /// plan no longer lists it) is forgotten, and written again if it drifts later.
    fn statuses<'p>(&mut self, plan: &'p Plan) -> Vec<(&'p Key, &'p Vec<IngressLoadBalancerIngress>)> {
        self.written.retain(|k, _| plan.status.contains_key(k));
        plan.status.iter().filter(|(k, addrs)| self.written.get(*k) != Some(*addrs)).collect()
    }

    /// The Gateway API status writes `plan` still needs (as [`Published::statuses`]).
    fn gateway<'p>(&mut self, plan: &'p Plan) -> Vec<(&'p (StatusKind, Key), &'p StatusBody)> {
        self.gateway.retain(|k, _| plan.gateway.contains_key(k));
        plan.gateway.iter().filter(|(k, b)| self.gateway.get(*k) != Some(*b)).collect()
    }

    /// The Events `plan` still needs, with the object each is about. An Event whose
    /// diagnostic went away is forgotten, and published again if it comes back.
    fn events<'p>(&mut self, plan: &'p Plan) -> Vec<(&'p EventSpec, &'p ObjectReference)> {
        self.emitted.retain(|e| plan.events.contains(e));
        plan.events
            .iter()
            .filter(|e| !self.emitted.contains(*e))
            .filter_map(|e| plan.refs.get(&(e.kind, e.key.clone())).map(|r| (e, r)))
            .collect()
    }
}

/// The merge patch that sets `status.loadBalancer.ingress` (null removes it).
fn status_patch(addrs: &[IngressLoadBalancerIngress]) -> serde_json::Value {
    serde_json::json!({ "status": { "loadBalancer": { "ingress": if addrs.is_empty() { None } else { Some(addrs) } } } })
}

/// `Ok(true)` written, `Ok(false)` the Ingress is gone (nothing to retry), `Err` to retry.
fn patched(result: Result<(), kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Writes status and Events while this replica leads.
pub async fn write(
    client: Client,
    reporter: Reporter,
    mut plans: watch::Receiver<Arc<Plan>>,
    mut leader: watch::Receiver<bool>,
) {
    let recorder = Recorder::new(client.clone(), reporter);
    let mut published = Published::default();
    let mut retry = false;
    loop {
        tokio::select! {
            r = plans.changed() => if r.is_err() { return },
            r = leader.changed() => if r.is_err() { return },
            _ = tokio::time::sleep(Duration::from_secs(2)), if retry => {}
        }
        retry = false;
        if !*leader.borrow() {
            // A new term starts from what the API server says, not from memory.
            published = Published::default();
            continue;
        }
        let plan = Arc::clone(&plans.borrow());
        for (key, addrs) in published.statuses(&plan) {
            if !*leader.borrow() {
                break;
            }
            let api: Api<k8s_openapi::api::networking::v1::Ingress> = Api::namespaced(client.clone(), &key.0);
            let result = api.patch_status(&key.1, &PatchParams::default(), &Patch::Merge(&status_patch(addrs))).await;
            match patched(result.map(drop)) {
                Ok(true) => {
                    tracing::info!(ingress = %format!("{}/{}", key.0, key.1), addresses = ?addrs.iter().map(|a| a.ip.clone().or(a.hostname.clone()).unwrap_or_default()).collect::<Vec<_>>(), "status written");
                    published.written.insert(key.clone(), addrs.clone());
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(ingress = %format!("{}/{}", key.0, key.1), error = %e, "cannot write Ingress status; will retry");
                    retry = true;
                }
            }
        }
        for (target, body) in published.gateway(&plan) {
            if !*leader.borrow() {
                break;
            }
            let (kind, key) = target;
            let name = if key.0.is_empty() { key.1.clone() } else { format!("{}/{}", key.0, key.1) };
            match super::gateway_status::write(&client, *kind, key, body).await {
                Ok(true) => {
                    tracing::info!(kind = kind.as_str(), name = %name, "status written");
                    published.gateway.insert(target.clone(), body.clone());
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(kind = kind.as_str(), name = %name, error = %e, "cannot write status; will retry");
                    retry = true;
                }
            }
        }
        if let Some((at, text)) = plan.record.as_ref().filter(|r| published.record.as_ref() != Some(*r)) {
            match write_record(&client, at, text).await {
                Ok(()) => published.record = Some((at.clone(), text.clone())),
                Err(e) => {
                    let at = format!("{}/{}", at.0, at.1);
                    tracing::warn!(configmap = %at, error = %e, "cannot write the host-owners record; will retry");
                    retry = true;
                }
            }
        }
        for (ev, reference) in published.events(&plan) {
            if !*leader.borrow() {
                break;
            }
            let event = KubeEvent {
                type_: EventType::Warning,
                reason: ev.reason.clone(),
                note: Some(truncate(&ev.message, 1000)),
                action: "Reconcile".into(),
                secondary: None,
            };
            match recorder.publish(&event, reference).await {
                Ok(()) => {
                    published.emitted.insert(ev.clone());
                }
                Err(e) => {
                    tracing::warn!(kind = ev.kind, name = %format!("{}/{}", ev.key.0, ev.key.1), error = %e, "cannot publish Event; will retry");
                    retry = true;
                }
            }
        }
    }
}

/// Server-side applies the host-owners record ConfigMap `at`.
async fn write_record(client: &Client, at: &Key, text: &str) -> kube::Result<()> {
    use crate::well_known::HOST_OWNERS_KEY;
    let (ns, name) = at;
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), ns);
    let body = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": {HOST_OWNERS_KEY: text},
    });
    api.patch(name, &PatchParams::apply("wharf").force(), &Patch::Apply(&body)).await?;
    tracing::info!(configmap = %format!("{ns}/{name}"), "host-owners record written");
    Ok(())
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::Reason;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::networking::v1::Ingress;
    use kube::runtime::watcher::Event;
    use serde_json::json;
    use wharf_model::ObjectRef;

    use crate::kinds::Change;

    fn ing(name: &str, ip: Option<&str>) -> Ingress {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "status": {"loadBalancer": {"ingress": ip.map(|ip| vec![json!({"ip": ip})]).unwrap_or_default()}},
        }))
        .unwrap()
    }

    fn key(name: &str) -> Key {
        ("ns".into(), name.into())
    }

    fn lb(ip: &str) -> IngressLoadBalancerIngress {
        IngressLoadBalancerIngress { ip: Some(ip.into()), ..Default::default() }
    }

    fn index(ings: Vec<Ingress>) -> Index {
        let mut index = Index::default();
        for i in ings {
            index.apply(Change::Ingress(Event::Apply(i)));
        }
        index
    }

    #[test]
    fn the_host_owners_record_is_written_when_it_differs_and_fits() {
        use std::sync::Arc;
        use wharf_model::{Host, PathMatch, Route, Snapshot, VirtualHost};
        let mut snapshot = Snapshot::default();
        let route = Route::forward(PathMatch::prefix("/").unwrap(), "c", ObjectRef::new("Ingress", "a", "shop"));
        snapshot
            .virtual_hosts
            .insert(Arc::new(VirtualHost { host: Host::parse("shop.a.test").unwrap(), routes: vec![route] }));
        let mut index = Index::default();
        let at: Key = ("wharf".into(), "wharf-leader-host-owners".into());
        assert_eq!(record(&index, &at, &snapshot), Some((at.clone(), "shop.a.test a\n".into())), "none stored yet");
        let stored = |ns: &str, text: &str| -> k8s_openapi::api::core::v1::ConfigMap {
            serde_json::from_value(
                json!({"metadata": {"name": "wharf-leader-host-owners", "namespace": ns}, "data": {"owners": text}}),
            )
            .unwrap()
        };
        index.apply(Change::ConfigMap(Event::Apply(stored("elsewhere", "shop.a.test a\n"))));
        assert!(record(&index, &at, &snapshot).is_some(), "another namespace's is not ours");
        index.apply(Change::ConfigMap(Event::Apply(stored("wharf", "shop.a.test a\n"))));
        assert_eq!(record(&index, &at, &snapshot), None, "the same: nothing to write");
        index.apply(Change::ConfigMap(Event::Apply(stored("wharf", "shop.a.test b\n"))));
        assert!(record(&index, &at, &snapshot).is_some(), "drifted: written again");
        // Too large for a ConfigMap: not written.
        let mut big = Snapshot::default();
        for i in 0..30_000 {
            let host = Host::parse(&format!("host-{i:05}.a-rather-long-domain-name.example.test")).unwrap();
            let r = Route::forward(PathMatch::prefix("/").unwrap(), "c", ObjectRef::new("Ingress", "a", "x"));
            big.virtual_hosts.insert(Arc::new(VirtualHost { host, routes: vec![r] }));
        }
        assert!(crate::translate::owners::record(&big).len() > crate::translate::owners::RECORD_LIMIT);
        assert_eq!(record(&index, &at, &big), None);
        // Exactly at the limit (14,400 lines of 64 bytes): written.
        let mut full = Snapshot::default();
        for i in 0..14_400 {
            let host = Host::parse(&format!("h{i:05}.{}.test", "a".repeat(49))).unwrap();
            let r = Route::forward(PathMatch::prefix("/").unwrap(), "c", ObjectRef::new("Ingress", "a", "x"));
            full.virtual_hosts.insert(Arc::new(VirtualHost { host, routes: vec![r] }));
        }
        assert_eq!(crate::translate::owners::record(&full).len(), crate::translate::owners::RECORD_LIMIT);
        assert!(record(&index, &at, &full).is_some(), "a record of exactly the limit fits");
    }

    #[test]
    fn ours_get_the_address_left_ones_are_cleared_only_what_differs_is_written() {
        let index = index(vec![
            ing("stale", Some("1.1.1.1")),
            ing("current", Some("2.2.2.2")),
            ing("fresh", None),
            ing("left", Some("2.2.2.2")),
            ing("left-clean", None),
        ]);
        let ours: BTreeSet<Key> = [key("stale"), key("current"), key("fresh"), key("gone")].into();
        let left: BTreeSet<Key> = [key("left"), key("left-clean")].into();
        let p = plan(&index, &ours, &left, &[lb("2.2.2.2")], &[]);
        let want: BTreeMap<Key, Vec<IngressLoadBalancerIngress>> =
            [(key("stale"), vec![lb("2.2.2.2")]), (key("fresh"), vec![lb("2.2.2.2")]), (key("left"), vec![])].into();
        assert_eq!(p.status, want);
        assert!(p.events.is_empty() && p.refs.is_empty());
    }

    #[test]
    fn ingresses_carrying_our_address_that_are_not_ours_have_left() {
        let index =
            index(vec![ing("ours", Some("2.2.2.2")), ing("left", Some("2.2.2.2")), ing("other", Some("9.9.9.9"))]);
        let ours: BTreeSet<Key> = [key("ours")].into();
        assert_eq!(left(&index, OURS, &ours, &[lb("2.2.2.2")]), [key("left")].into());
        assert!(left(&index, OURS, &ours, &[]).is_empty(), "publishing nothing, nothing to clear");
    }

    const OURS: &str = "wharf.dev/ingress-controller";

    fn class(name: &str, controller: &str, default: bool) -> IngressClass {
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {"ingressclass.kubernetes.io/is-default-class": default.to_string()}},
            "spec": {"controller": controller},
        }))
        .unwrap()
    }

    fn ing_of(name: &str, class: Option<&str>, legacy: Option<&str>) -> Ingress {
        let mut i = ing(name, Some("2.2.2.2"));
        i.spec = Some(serde_json::from_value(json!({"ingressClassName": class})).unwrap());
        if let Some(l) = legacy {
            i.metadata.annotations = Some([("kubernetes.io/ingress.class".to_owned(), l.to_owned())].into());
        }
        i
    }

    #[test]
    fn ingresses_another_controller_claims_are_left_to_it_even_at_our_address() {
        let mut index = index(vec![
            ing_of("to-other", Some("other"), None),
            ing_of("legacy-other", None, Some("other")),
            ing_of("to-ours", Some("wharf-b"), None),
            ing_of("to-unknown", Some("gone"), None),
            ing_of("classless", None, None),
        ]);
        for c in [class("other", "example.com/other", false), class("wharf-b", OURS, false)] {
            index.apply(Change::IngressClass(Event::Apply(c)));
        }
        let none = BTreeSet::new();
        let want: BTreeSet<Key> = [key("to-ours"), key("to-unknown"), key("classless")].into();
        assert_eq!(left(&index, OURS, &none, &[lb("2.2.2.2")]), want);

        // A default class of another controller claims the classless one.
        index.apply(Change::IngressClass(Event::Apply(class("other-default", "example.com/other", true))));
        let want: BTreeSet<Key> = [key("to-ours"), key("to-unknown")].into();
        assert_eq!(left(&index, OURS, &none, &[lb("2.2.2.2")]), want);
        // Ours being the default claims nothing elsewhere.
        index.apply(Change::IngressClass(Event::Apply(class("other-default", OURS, true))));
        assert!(left(&index, OURS, &none, &[lb("2.2.2.2")]).contains(&key("classless")));
    }

    #[test]
    fn diagnostics_on_known_ingresses_and_gateways_become_events_with_their_uid() {
        let mut index = index(vec![ing("bad", None)]);
        let gw: wharf_gateway_api::gateways::Gateway = serde_json::from_value(json!({
            "metadata": {"name": "gw", "namespace": "ns", "uid": "uid-gw"},
            "spec": {"gatewayClassName": "wharf", "listeners": []},
        }))
        .unwrap();
        index.apply(Change::Gateway(Event::Apply(gw)));
        let route = |name: &str| json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")}, "spec": {}});
        index.apply(Change::HttpRoute(Event::Apply(serde_json::from_value(route("web")).unwrap())));
        index.apply(Change::GrpcRoute(Event::Apply(serde_json::from_value(route("rpc")).unwrap())));
        let tls = json!({"metadata": {"name": "db", "namespace": "ns", "uid": "uid-db"}, "spec": {"rules": [], "hostnames": ["db.test"]}});
        index.apply(Change::TlsRoute(Event::Apply(serde_json::from_value(tls).unwrap())));
        let d = |kind: &str, name: &str, reason: Reason| Diagnostic {
            object: ObjectRef::new(kind, "ns", name),
            reason,
            message: format!("{reason} on {name}"),
        };
        let diags = [
            d("Ingress", "bad", Reason::KeyMismatch),
            d("Ingress", "unknown", Reason::SecretNotFound),
            d("Secret", "bad", Reason::AcmeChallengeInvalid),
            d("Gateway", "gw", Reason::AcmeNoHost),
            d("Gateway", "bad", Reason::AcmeNoHost),
            d("HTTPRoute", "gw", Reason::InvalidHost),
            d("HTTPRoute", "web", Reason::HostOwnedByOtherNamespace),
            d("GRPCRoute", "rpc", Reason::HostOwnedByOtherNamespace),
            d("TLSRoute", "db", Reason::HostOwnedByOtherNamespace),
            d("TCPRoute", "db", Reason::InvalidHost),
        ];
        let p = plan(&index, &BTreeSet::new(), &BTreeSet::new(), &[], &diags);
        let events: Vec<(&str, String, String)> =
            p.events.iter().map(|e| (e.kind, e.key.1.clone(), e.reason.clone())).collect();
        let owned = "HostOwnedByOtherNamespace".to_owned();
        assert_eq!(
            events,
            [
                ("GRPCRoute", "rpc".to_owned(), owned.clone()),
                ("Gateway", "gw".to_owned(), "AcmeNoHost".to_owned()),
                ("HTTPRoute", "web".to_owned(), owned.clone()),
                ("Ingress", "bad".into(), "KeyMismatch".into()),
                ("TLSRoute", "db".to_owned(), owned),
            ]
        );
        for (kind, name) in [("HTTPRoute", "web"), ("GRPCRoute", "rpc"), ("TLSRoute", "db")] {
            let r = &p.refs[&(kind, key(name))];
            assert_eq!((r.kind.as_deref(), r.uid.clone()), (Some(kind), Some(format!("uid-{name}"))));
            assert_eq!(r.api_version.as_deref(), Some("gateway.networking.k8s.io/v1"));
        }
        let bad = &p.refs[&("Ingress", key("bad"))];
        assert_eq!((bad.uid.as_deref(), bad.kind.as_deref()), (Some("uid-bad"), Some("Ingress")));
        assert_eq!(bad.api_version.as_deref(), Some("networking.k8s.io/v1"));
        let gw = &p.refs[&("Gateway", key("gw"))];
        assert_eq!((gw.uid.as_deref(), gw.kind.as_deref()), (Some("uid-gw"), Some("Gateway")));
        assert_eq!(gw.api_version.as_deref(), Some("gateway.networking.k8s.io/v1"));
        assert_eq!((gw.namespace.as_deref(), gw.name.as_deref()), (Some("ns"), Some("gw")));
    }

    #[test]
    fn addresses_from_flags_or_the_published_service() {
        let mut index = index(vec![]);
        assert!(addresses(&Publish::Nothing, &index).is_empty());
        let fixed = addresses(&Publish::Addresses(vec!["10.0.0.1".into(), "lb.example.com".into()]), &index);
        assert_eq!(fixed[0].ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(fixed[1].hostname.as_deref(), Some("lb.example.com"));
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "gw", "namespace": "ns"},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}, {"hostname": "a.elb.example"}]}},
        }))
        .unwrap();
        index.apply(Change::Service(Event::Apply(svc)));
        let published = addresses(&Publish::Service(key("gw")), &index);
        assert_eq!(published.len(), 2);
        assert_eq!(published[0].ip.as_deref(), Some("203.0.113.7"));
        assert_eq!(published[1].hostname.as_deref(), Some("a.elb.example"));
        assert!(addresses(&Publish::Service(key("missing")), &index).is_empty());
    }

    fn plan_of(status: &[(&str, &str)], events: &[(&str, &str)]) -> Plan {
        let mut p = Plan::default();
        for (name, ip) in status {
            p.status.insert(key(name), if ip.is_empty() { vec![] } else { vec![lb(ip)] });
        }
        for (name, reason) in events {
            let (kind, message) = ("Ingress", format!("{reason}!"));
            p.events.insert(EventSpec { kind, key: key(name), reason: (*reason).into(), message });
            p.refs.insert((kind, key(name)), ObjectReference { name: Some((*name).into()), ..Default::default() });
        }
        p
    }

    fn names<T>(todo: &[(&Key, T)]) -> Vec<String> {
        todo.iter().map(|(k, _)| k.1.clone()).collect()
    }

    #[test]
    fn each_status_is_written_once_per_difference() {
        let mut published = Published::default();
        let p = plan_of(&[("a", "2.2.2.2"), ("b", "")], &[]);
        let todo = published.statuses(&p);
        assert_eq!(names(&todo), ["a", "b"]);
        assert_eq!(todo[0].1, &vec![lb("2.2.2.2")]);
        published.written.insert(key("a"), vec![lb("2.2.2.2")]);
        assert_eq!(names(&published.statuses(&p)), ["b"], "a is written, b failed and is retried");
        // The API server shows a's status: the plan drops it, and it is forgotten...
        assert!(published.statuses(&plan_of(&[("b", "")], &[])).len() == 1);
        assert!(published.written.is_empty());
        // ...so when someone changes it back, it is written again.
        assert_eq!(names(&published.statuses(&p)), ["a", "b"]);
        // A different address for a written key is a difference.
        published.written.insert(key("a"), vec![lb("1.1.1.1")]);
        assert_eq!(names(&published.statuses(&p)), ["a", "b"]);
    }

    #[test]
    fn each_gateway_api_status_is_written_once_per_difference() {
        let body = |version: &str| StatusBody { status: json!({"v": version}), resource_version: Some(version.into()) };
        let target = |name: &str| (StatusKind::HttpRoute, key(name));
        let plan = |entries: &[(&str, &str)]| Plan {
            gateway: entries.iter().map(|(name, v)| (target(name), body(v))).collect(),
            ..Plan::default()
        };
        let todo_names = |todo: Vec<(&(StatusKind, Key), &StatusBody)>| -> Vec<String> {
            todo.iter().map(|((_, k), _)| k.1.clone()).collect()
        };
        let mut published = Published::default();
        let p = plan(&[("a", "1"), ("b", "1")]);
        let todo = published.gateway(&p);
        assert_eq!(todo.first().map(|(_, b)| *b), Some(&body("1")));
        assert_eq!(todo_names(todo), ["a", "b"]);
        published.gateway.insert(target("a"), body("1"));
        assert_eq!(todo_names(published.gateway(&p)), ["b"], "a is written, b failed and is retried");
        // The API server shows a's status: the plan drops it, and it is forgotten...
        assert_eq!(todo_names(published.gateway(&plan(&[("b", "1")]))), ["b"]);
        assert!(published.gateway.is_empty());
        // ...so when it drifts back, it is written again.
        assert_eq!(todo_names(published.gateway(&p)), ["a", "b"]);
        // A different body for a written object is a difference.
        published.gateway.insert(target("a"), body("2"));
        assert_eq!(todo_names(published.gateway(&p)), ["a", "b"]);
    }

    #[test]
    fn each_event_is_published_once_per_appearance_of_its_diagnostic() {
        let mut published = Published::default();
        let p = plan_of(&[], &[("a", "SecretNotFound"), ("b", "KeyMismatch")]);
        let todo = published.events(&p);
        let reasons: Vec<&str> = todo.iter().map(|(e, _)| e.reason.as_str()).collect();
        assert_eq!(reasons, ["SecretNotFound", "KeyMismatch"]);
        assert_eq!(todo[1].1.name.as_deref(), Some("b"), "each Event is about its own Ingress");
        for (e, _) in todo {
            published.emitted.insert(e.clone());
        }
        assert!(published.events(&p).is_empty(), "resyncs repeat nothing");
        // a's diagnostic goes away and comes back: a new Event.
        assert_eq!(published.events(&plan_of(&[], &[("b", "KeyMismatch")])).len(), 0);
        assert_eq!(published.events(&p).len(), 1);
        // An Event whose object reference is unknown is not published.
        let mut orphan = plan_of(&[], &[("c", "X")]);
        orphan.refs.clear();
        assert!(published.events(&orphan).is_empty());
    }

    #[test]
    fn status_patches_set_or_remove_the_addresses() {
        assert_eq!(
            status_patch(&[lb("2.2.2.2")]),
            json!({"status": {"loadBalancer": {"ingress": [{"ip": "2.2.2.2"}]}}})
        );
        assert_eq!(status_patch(&[]), json!({"status": {"loadBalancer": {"ingress": null}}}));
    }

    #[test]
    fn a_status_write_to_a_deleted_ingress_is_not_retried() {
        assert!(matches!(patched(Ok(())), Ok(true)));
        assert!(matches!(patched(Err(crate::k8s::api_error(404))), Ok(false)));
        assert!(patched(Err(crate::k8s::api_error(409))).is_err());
    }

    #[test]
    fn long_event_notes_are_cut_on_a_character_boundary() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("ééé", 3), "é…");
        assert_eq!(truncate(&"x".repeat(2000), 1000).chars().count(), 1001);
    }
}
