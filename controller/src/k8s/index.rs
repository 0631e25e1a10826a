//! The watched objects, owned by one task and mutated only through [`Index::apply`].

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::runtime::watcher::Event;
use kube::ResourceExt;
use wharf_gateway_api::backendtlspolicies::BackendTlsPolicy;
use wharf_gateway_api::gatewayclasses::GatewayClass;
use wharf_gateway_api::gateways::Gateway;
use wharf_gateway_api::grpcroutes::GrpcRoute;
use wharf_gateway_api::httproutes::HttpRoute;
use wharf_gateway_api::tcproutes::TcpRoute;
use wharf_gateway_api::tlsroutes::TlsRoute;

pub use crate::kinds::Change;
use crate::kinds::{Kind, Stores};
use crate::translate::backend::SERVICE_NAME_LABEL;
use crate::translate::parts::{Changes, Read};
use crate::World;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type Key = (String, String);

/// Objects of one kind plus the buffer of a relist in progress.
#[derive(Debug)]
pub(crate) struct Store<K> {
    pub(crate) objects: BTreeMap<Key, Arc<K>>,
    relist: Option<BTreeMap<Key, Arc<K>>>,
    pub(crate) synced: bool,
}

impl<K> Default for Store<K> {
    fn default() -> Self {
        Store { objects: BTreeMap::new(), relist: None, synced: false }
    }
}

/// What a watch event changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Changed {
    /// Nothing translation or status planning reads.
    Nothing,
    /// Only what status planning reads (an object's status, its resourceVersion): the
    /// routing stays as it is, only the status writes are planned again.
    Status,
    /// What translation reads.
    Objects,
}

impl<K: Kind> Store<K> {
    /// Applies one event; says what it changed of the visible objects.
    pub(crate) fn apply(&mut self, event: Event<K>) -> Changed {
        match event {
            Event::Apply(obj) => {
                let key = key(&obj);
                let changed = match self.objects.get(&key) {
                    Some(old) if **old == obj => return Changed::Nothing,
                    Some(old) if K::differ_only_in_status(old, &obj) => Changed::Status,
                    _ => Changed::Objects,
                };
                self.objects.insert(key, Arc::new(obj));
                changed
            }
            Event::Delete(obj) => match self.objects.remove(&key(&obj)) {
                Some(_) => Changed::Objects,
                None => Changed::Nothing,
            },
            Event::Init => {
                self.relist = Some(BTreeMap::new());
                Changed::Nothing
            }
            Event::InitApply(obj) => {
                if let Some(buf) = &mut self.relist {
                    buf.insert(key(&obj), Arc::new(obj));
                }
                Changed::Nothing
            }
            Event::InitDone => {
                // A relist replaces everything: objects deleted while the watch was down go.
                let fresh = self.relist.take().unwrap_or_default();
                let changed = fresh != self.objects || !self.synced;
                self.objects = fresh;
                self.synced = true;
                if changed {
                    Changed::Objects
                } else {
                    Changed::Nothing
                }
            }
        }
    }
}

fn key<K: kube::Resource>(obj: &K) -> Key {
    (obj.namespace().unwrap_or_default(), obj.name_any())
}

/// Everything the controller watches.
#[derive(Debug, Default)]
pub struct Index {
    stores: Stores,
}

impl Index {
    /// Applies a watch event; says what it changed.
    pub fn apply(&mut self, change: Change) -> Changed {
        self.stores.apply(change)
    }

    /// True once every watch has listed its objects at least once. Translation reads all
    /// of them: before Pods and Namespaces have listed, an ambient endpoint would look
    /// unenrolled and be dialed directly instead of over HBONE.
    pub fn synced(&self) -> bool {
        self.stores.synced()
    }

    /// What `change` changes of what Ingress translation reads, as [`Index::apply`] would
    /// apply it now (an EndpointSlice's Service is looked up in the slice stored).
    pub fn changes(&self, change: &Change) -> Changes {
        fn one<K: kube::Resource>(e: &Event<K>) -> Option<Key> {
            match e {
                Event::Apply(o) | Event::Delete(o) => Some(key(o)),
                Event::Init | Event::InitApply(_) | Event::InitDone => None,
            }
        }
        let mut out = Changes::default();
        let mut reads = |r: Option<Read>| match r {
            Some(r) => {
                out.reads.insert(r);
            }
            None => out.all = true,
        };
        match change {
            Change::Ingress(e) => match one(e) {
                Some(k) => {
                    out.ingresses.insert(k);
                }
                None => out.all = true,
            },
            Change::Secret(e) => reads(one(e).map(Read::Secret)),
            Change::Service(e) => reads(one(e).map(Read::Service)),
            Change::Pod(e) => reads(one(e).map(Read::Pod)),
            Change::Namespace(e) => reads(one(e).map(|(_, name)| Read::Namespace(name))),
            Change::EndpointSlice(e) => match one(e) {
                Some(k) => {
                    let service = |s: &EndpointSlice| {
                        let svc = s.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)?;
                        Some(Read::Service((k.0.clone(), svc.clone())))
                    };
                    let new = match e {
                        Event::Apply(o) | Event::Delete(o) => service(o),
                        _ => None,
                    };
                    let old = self.stores.endpoint_slices.objects.get(&k).and_then(|o| service(o));
                    out.reads.extend(new.into_iter().chain(old));
                }
                None => out.all = true,
            },
            Change::IngressClass(_) => out.all = true,
            // Translated whole every time.
            Change::GatewayClass(_)
            | Change::Gateway(_)
            | Change::HttpRoute(_)
            | Change::GrpcRoute(_)
            | Change::TlsRoute(_)
            | Change::TcpRoute(_)
            | Change::ReferenceGrant(_)
            | Change::BackendTlsPolicy(_)
            | Change::ConfigMap(_) => {}
        }
        out
    }

    /// The objects, for [`crate::translate`].
    pub fn world(&self) -> World {
        self.stores.world()
    }

    /// An Ingress by key.
    pub fn ingress(&self, key: &Key) -> Option<&Ingress> {
        self.stores.ingresses.objects.get(key).map(|o| &**o)
    }

    /// All IngressClasses.
    pub fn ingress_classes(&self) -> impl Iterator<Item = &IngressClass> {
        self.stores.ingress_classes.objects.values().map(|o| &**o)
    }

    /// All Ingresses.
    pub fn ingresses(&self) -> impl Iterator<Item = (&Key, &Ingress)> {
        self.stores.ingresses.objects.iter().map(|(k, o)| (k, &**o))
    }

    /// A Service by key.
    pub fn service(&self, key: &Key) -> Option<&Service> {
        self.stores.services.objects.get(key).map(|o| &**o)
    }

    /// A GatewayClass by name.
    pub fn gateway_class(&self, name: &str) -> Option<&GatewayClass> {
        self.stores.gateway_classes.objects.get(&(String::new(), name.to_owned())).map(|o| &**o)
    }

    /// A Gateway by key.
    pub fn gateway(&self, key: &Key) -> Option<&Gateway> {
        self.stores.gateways.objects.get(key).map(|o| &**o)
    }

    /// All HTTPRoutes.
    pub fn http_routes(&self) -> impl Iterator<Item = (&Key, &HttpRoute)> {
        self.stores.http_routes.objects.iter().map(|(k, o)| (k, &**o))
    }

    /// All GRPCRoutes.
    pub fn grpc_routes(&self) -> impl Iterator<Item = (&Key, &GrpcRoute)> {
        self.stores.grpc_routes.objects.iter().map(|(k, o)| (k, &**o))
    }

    /// All TLSRoutes.
    pub fn tls_routes(&self) -> impl Iterator<Item = (&Key, &TlsRoute)> {
        self.stores.tls_routes.objects.iter().map(|(k, o)| (k, &**o))
    }

    /// All TCPRoutes.
    pub fn tcp_routes(&self) -> impl Iterator<Item = (&Key, &TcpRoute)> {
        self.stores.tcp_routes.objects.iter().map(|(k, o)| (k, &**o))
    }

    /// All BackendTLSPolicies.
    pub fn backend_tls_policies(&self) -> impl Iterator<Item = (&Key, &BackendTlsPolicy)> {
        self.stores.backend_tls_policies.objects.iter().map(|(k, o)| (k, &**o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn ing(name: &str) -> Ingress {
        Ingress {
            metadata: ObjectMeta { name: Some(name.into()), namespace: Some("ns".into()), ..Default::default() },
            ..Default::default()
        }
    }

    /// The initial-list end of each kind the index watches.
    fn init_done() -> Vec<Change> {
        Change::init_done_all()
    }

    fn sync_all(index: &mut Index) {
        for c in init_done() {
            index.apply(c);
        }
    }

    #[test]
    fn a_change_names_what_ingress_translation_reads_of_it() {
        let mut index = Index::default();
        sync_all(&mut index);
        let key = |ns: &str, name: &str| (ns.to_owned(), name.to_owned());
        let slice = |svc: &str| -> EndpointSlice {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "s-1", "namespace": "ns", "labels": {SERVICE_NAME_LABEL: svc}},
                "addressType": "IPv4", "endpoints": [],
            }))
            .unwrap_or_default()
        };
        let c = index.changes(&Change::Ingress(Event::Apply(ing("a"))));
        assert_eq!((c.all, c.ingresses.into_iter().collect::<Vec<_>>()), (false, vec![key("ns", "a")]));

        // A slice moved from Service a to b changes both.
        index.apply(Change::EndpointSlice(Event::Apply(slice("a"))));
        let c = index.changes(&Change::EndpointSlice(Event::Apply(slice("b"))));
        let want = [Read::Service(key("ns", "a")), Read::Service(key("ns", "b"))];
        assert_eq!(c.reads.into_iter().collect::<Vec<_>>(), want);

        let pod = Pod {
            metadata: ObjectMeta { name: Some("p".into()), namespace: Some("ns".into()), ..Default::default() },
            ..Default::default()
        };
        let c = index.changes(&Change::Pod(Event::Delete(pod)));
        assert_eq!(c.reads.into_iter().collect::<Vec<_>>(), [Read::Pod(key("ns", "p"))]);
        assert!(index.changes(&Change::Ingress(Event::InitDone)).all, "a relist may change anything");
        assert!(index.changes(&Change::IngressClass(Event::Delete(Default::default()))).all);
        let c = index.changes(&Change::GatewayClass(Event::Delete(Default::default())));
        assert_eq!(c, Changes::default(), "Gateway API is translated whole anyway");
    }

    #[test]
    fn synced_only_after_every_initial_list() {
        for missing in 0..init_done().len() {
            let mut index = Index::default();
            let mut left_out = None;
            for (i, c) in init_done().into_iter().enumerate() {
                if i == missing {
                    left_out = Some(c);
                } else {
                    index.apply(c);
                }
            }
            let left_out = left_out.unwrap();
            let kind = format!("{left_out:?}");
            assert!(!index.synced(), "synced before {kind} listed");
            index.apply(left_out);
            assert!(index.synced(), "not synced after {kind} listed");
        }
    }

    #[test]
    fn initial_list_is_buffered_until_done() {
        let mut index = Index::default();
        index.apply(Change::Ingress(Event::Init));
        index.apply(Change::Ingress(Event::InitApply(ing("a"))));
        assert!(index.world().ingresses.is_empty(), "buffered until InitDone");
        assert_eq!(index.apply(Change::Ingress(Event::InitDone)), Changed::Objects);
        assert_eq!(index.world().ingresses.len(), 1);
    }

    #[test]
    fn relist_drops_objects_deleted_while_disconnected_and_ignores_no_op_updates() {
        let mut index = Index::default();
        sync_all(&mut index);
        for e in [Event::Init, Event::InitApply(ing("a")), Event::InitApply(ing("b")), Event::InitDone] {
            index.apply(Change::Ingress(e));
        }
        assert_eq!(
            index.apply(Change::Ingress(Event::Apply(ing("a")))),
            Changed::Nothing,
            "same object again is not a change"
        );
        for e in [Event::Init, Event::InitApply(ing("b"))] {
            assert_eq!(index.apply(Change::Ingress(e)), Changed::Nothing);
        }
        assert_eq!(index.apply(Change::Ingress(Event::InitDone)), Changed::Objects);
        let names: Vec<_> = index.world().ingresses.iter().map(|i| i.name_any()).collect();
        assert_eq!(names, ["b"]);
        assert_eq!(index.apply(Change::Ingress(Event::Delete(ing("b")))), Changed::Objects);
        assert!(index.world().ingresses.is_empty());
    }

    #[test]
    fn a_changed_status_is_only_a_status_change_and_a_changed_spec_is_one_for_translation() {
        let mut index = Index::default();
        sync_all(&mut index);
        assert_eq!(index.apply(Change::Ingress(Event::Apply(ing("a")))), Changed::Objects);
        let mut written = ing("a");
        written.metadata.resource_version = Some("2".into());
        written.status =
            serde_json::from_value(serde_json::json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}))
                .unwrap_or_default();
        assert_eq!(index.apply(Change::Ingress(Event::Apply(written.clone()))), Changed::Status);
        assert_eq!(index.ingress(&("ns".into(), "a".into())), Some(&written), "the new status is stored");
        let mut respec = written;
        respec.spec = serde_json::from_value(serde_json::json!({"ingressClassName": "other"})).ok();
        assert_eq!(index.apply(Change::Ingress(Event::Apply(respec))), Changed::Objects);
    }

    #[test]
    fn the_first_list_is_a_change_even_when_empty() {
        // An empty cluster must still produce the first snapshot (and readiness).
        let mut index = Index::default();
        index.apply(Change::Secret(Event::Init));
        assert_eq!(index.apply(Change::Secret(Event::InitDone)), Changed::Objects);
        index.apply(Change::Secret(Event::Init));
        assert_eq!(index.apply(Change::Secret(Event::InitDone)), Changed::Nothing, "an identical relist is not");
    }

    #[test]
    fn pods_keep_what_mesh_enrolment_reads_and_nothing_else() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web"},
                         "annotations": {"big": "x".repeat(1000)}, "uid": "u1"},
            "spec": {"serviceAccountName": "web", "containers": [{"name": "c", "image": "i"}]},
            "status": {"podIP": "10.0.0.7"},
        }))
        .unwrap_or_default();
        let mut index = Index::default();
        index.apply(Change::Pod(Event::Apply(pod)));
        let pods = index.world().pods;
        let [p] = pods.iter().collect::<Vec<_>>()[..] else { panic!("{pods:?}") };
        assert_eq!(p.metadata.name.as_deref(), Some("web-1"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(p.metadata.labels.as_ref().and_then(|l| l.get("app")).map(String::as_str), Some("web"));
        assert_eq!(p.spec.as_ref().and_then(|s| s.service_account_name.as_deref()), Some("web"));
        assert_eq!(p.metadata.annotations, None);
        assert_eq!(p.metadata.uid, None);
        assert!(p.spec.as_ref().is_some_and(|s| s.containers.is_empty()));
        assert_eq!(p.status, None);
    }
}
