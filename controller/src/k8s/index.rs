//! The watched objects, owned by one task and mutated only through [`Index::apply`].

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::networking::v1::IngressClass;
use kube::runtime::watcher::Event;
use kube::ResourceExt;
use wharf_gateway_api::backendtlspolicies::BackendTlsPolicy;
use wharf_gateway_api::gatewayclasses::GatewayClass;
use wharf_gateway_api::gateways::Gateway;
use wharf_gateway_api::grpcroutes::GrpcRoute;
use wharf_gateway_api::httproutes::HttpRoute;
use wharf_gateway_api::tcproutes::TcpRoute;
use wharf_gateway_api::tlsroutes::TlsRoute;

use crate::changes::Key;
use crate::changes::{Changes, Read};
use crate::kinds::Change;
use crate::kinds::{Kind, Objects};
use crate::stored::{Ingress, Keyed};
use crate::well_known::SERVICE_NAME_LABEL;
use crate::World;

/// Objects of one kind plus the buffer of a relist in progress.
#[derive(Debug)]
pub(crate) struct Store<K: Kind> {
    pub(crate) objects: BTreeSet<Entry<K::Stored>>,
    relist: Option<BTreeSet<Entry<K::Stored>>>,
    pub(crate) synced: bool,
}

impl<K: Kind> Default for Store<K> {
    fn default() -> Self {
        Store { objects: BTreeSet::new(), relist: None, synced: false }
    }
}

/// A stored object, in the order of its key and found by it: the key is the object's own
/// name and namespace, not a copy (40,000 objects held 80,000 copies of their names).
#[derive(Debug)]
pub(crate) struct Entry<T>(pub(crate) Arc<T>);

/// A `(namespace, name)` an [`Entry`] is found by.
pub(crate) trait Lookup {
    /// `(namespace, name)`.
    fn key(&self) -> (&str, &str);
}

impl<T: Keyed> Lookup for Entry<T> {
    fn key(&self) -> (&str, &str) {
        self.0.key()
    }
}

impl Lookup for (&str, &str) {
    fn key(&self) -> (&str, &str) {
        *self
    }
}

impl Lookup for Key {
    fn key(&self) -> (&str, &str) {
        (&self.0, &self.1)
    }
}

impl PartialEq for dyn Lookup + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for dyn Lookup + '_ {}

impl PartialOrd for dyn Lookup + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn Lookup + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

impl<'a, T: Keyed + 'a> Borrow<dyn Lookup + 'a> for Entry<T> {
    fn borrow(&self) -> &(dyn Lookup + 'a) {
        self
    }
}

/// A set of keys is searched with borrowed ones.
impl<'a> Borrow<dyn Lookup + 'a> for Key {
    fn borrow(&self) -> &(dyn Lookup + 'a) {
        self
    }
}

impl<T: Keyed> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<T: Keyed> Eq for Entry<T> {}

impl<T: Keyed> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T: Keyed> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// The object stored under `key`.
pub(crate) fn get<'s, T: Keyed>(objects: &'s BTreeSet<Entry<T>>, key: &dyn Lookup) -> Option<&'s Arc<T>> {
    objects.get(key).map(|e| &e.0)
}

/// True when two stores hold the same objects under the same keys.
fn same<T: Keyed + PartialEq>(a: &BTreeSet<Entry<T>>, b: &BTreeSet<Entry<T>>) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.key() == b.key() && *a.0 == *b.0)
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
                let old = get(&self.objects, &obj.key());
                let obj = obj.store_over(old.map(|o| &**o));
                let changed = match old {
                    Some(old) if **old == obj => return Changed::Nothing,
                    Some(old) if K::differ_only_in_status(old, &obj) => Changed::Status,
                    _ => Changed::Objects,
                };
                self.objects.replace(Entry(Arc::new(obj)));
                changed
            }
            Event::Delete(obj) => match self.objects.remove(&obj.key() as &dyn Lookup) {
                true => Changed::Objects,
                false => Changed::Nothing,
            },
            Event::Init => {
                self.relist = Some(BTreeSet::new());
                Changed::Nothing
            }
            Event::InitApply(obj) => {
                if let Some(buf) = &mut self.relist {
                    let old = get(&self.objects, &obj.key());
                    buf.replace(Entry(Arc::new(obj.store_over(old.map(|o| &**o)))));
                }
                Changed::Nothing
            }
            Event::InitDone => {
                // A relist replaces everything: objects deleted while the watch was down go.
                let fresh = self.relist.take().unwrap_or_default();
                let changed = !same(&fresh, &self.objects) || !self.synced;
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

fn key<K: Keyed>(obj: &K) -> Key {
    let (ns, name) = obj.key();
    (ns.to_owned(), name.to_owned())
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
                    let service = |svc: &str| Read::Service((k.0.clone(), svc.to_owned()));
                    let new = match e {
                        Event::Apply(o) | Event::Delete(o) => o.labels().get(SERVICE_NAME_LABEL).map(|s| service(s)),
                        _ => None,
                    };
                    let old =
                        get(&self.stores.endpoint_slices.objects, &k).and_then(|o| o.service.as_deref().map(service));
                    out.reads.extend(new.into_iter().chain(old));
                }
                None => out.all = true,
            },
            // Ingresses read ReferenceGrants too (auth-url Services), rarely changed.
            Change::IngressClass(_) | Change::ReferenceGrant(_) => out.all = true,
            // Translated whole every time.
            Change::GatewayClass(_)
            | Change::Gateway(_)
            | Change::HttpRoute(_)
            | Change::GrpcRoute(_)
            | Change::TlsRoute(_)
            | Change::TcpRoute(_)
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
        get(&self.stores.ingresses.objects, key).map(|o| &**o)
    }

    /// All IngressClasses.
    pub fn ingress_classes(&self) -> impl Iterator<Item = &IngressClass> {
        self.stores.ingress_classes.objects.iter().map(|e| &*e.0)
    }

    /// All Ingresses.
    pub fn ingresses(&self) -> impl Iterator<Item = ((&str, &str), &Ingress)> {
        self.stores.ingresses.objects.iter().map(|e| (e.key(), &*e.0))
    }

    /// The data of ConfigMap `key` under `data_key`.
    pub fn config_map_data(&self, key: &Key, data_key: &str) -> Option<&str> {
        let map = get(&self.stores.config_maps.objects, key)?;
        map.data.as_ref()?.get(data_key).map(String::as_str)
    }

    /// A Service by key.
    pub fn service(&self, key: &Key) -> Option<&crate::stored::Service> {
        get(&self.stores.services.objects, key).map(|o| &**o)
    }

    /// A GatewayClass by name.
    pub fn gateway_class(&self, name: &str) -> Option<&GatewayClass> {
        get(&self.stores.gateway_classes.objects, &("", name)).map(|o| &**o)
    }

    /// A Gateway by key.
    pub fn gateway(&self, key: &Key) -> Option<&Gateway> {
        get(&self.stores.gateways.objects, key).map(|o| &**o)
    }

    /// The uid of the route of `kind` (HTTPRoute, GRPCRoute or TLSRoute) `key`, when it
    /// exists (`Some(None)`: it has none).
    pub fn route_uid(&self, kind: &str, key: &Key) -> Option<Option<String>> {
        let meta = match kind {
            "HTTPRoute" => &get(&self.stores.http_routes.objects, key)?.metadata,
            "GRPCRoute" => &get(&self.stores.grpc_routes.objects, key)?.metadata,
            "TLSRoute" => &get(&self.stores.tls_routes.objects, key)?.metadata,
            _ => return None,
        };
        Some(meta.uid.clone())
    }

    /// All HTTPRoutes.
    pub fn http_routes(&self) -> impl Iterator<Item = ((&str, &str), &HttpRoute)> {
        self.stores.http_routes.objects.iter().map(|e| (e.key(), &*e.0))
    }

    /// All GRPCRoutes.
    pub fn grpc_routes(&self) -> impl Iterator<Item = ((&str, &str), &GrpcRoute)> {
        self.stores.grpc_routes.objects.iter().map(|e| (e.key(), &*e.0))
    }

    /// All TLSRoutes.
    pub fn tls_routes(&self) -> impl Iterator<Item = ((&str, &str), &TlsRoute)> {
        self.stores.tls_routes.objects.iter().map(|e| (e.key(), &*e.0))
    }

    /// All TCPRoutes.
    pub fn tcp_routes(&self) -> impl Iterator<Item = ((&str, &str), &TcpRoute)> {
        self.stores.tcp_routes.objects.iter().map(|e| (e.key(), &*e.0))
    }

    /// All BackendTLSPolicies.
    pub fn backend_tls_policies(&self) -> impl Iterator<Item = ((&str, &str), &BackendTlsPolicy)> {
        self.stores.backend_tls_policies.objects.iter().map(|e| (e.key(), &*e.0))
    }
}

/// Declares [`Stores`] for the kinds of [`with_kinds`](crate::kinds::with_kinds).
macro_rules! stores {
    ($( $(#[doc = $doc:literal])* $field:ident: $ty:ty => $variant:ident; )*) => {
    /// One store per kind.
    #[derive(Debug, Default)]
    pub(crate) struct Stores {
        $( pub(crate) $field: Store<$ty>, )*
    }

    impl Stores {
        /// Applies a watch event; says what it changed.
        pub(crate) fn apply(&mut self, change: Change) -> Changed {
            match change {
                $( Change::$variant(e) => self.$field.apply(e), )*
            }
        }

        /// True once every kind has listed at least once.
        pub(crate) fn synced(&self) -> bool {
            true $( && self.$field.synced )*
        }

        /// The objects of every kind.
        pub(crate) fn world(&self) -> World {
            World { $( $field: Objects::new(self.$field.objects.iter().map(|e| Arc::clone(&e.0)).collect()), )* }
        }
    }
    };
}
crate::kinds::with_kinds!(stores);

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::networking::v1::{Ingress, IngressSpec};
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
    fn entries_and_keys_compare_by_namespace_then_name_whichever_way_they_are_compared() {
        let entry = |name: &str, class: &str| {
            let mut i = ing(name);
            i.spec = Some(IngressSpec { ingress_class_name: Some(class.into()), ..Default::default() });
            Entry(Arc::new(i))
        };
        let (a, a_other, b) = (entry("a", "x"), entry("a", "y"), entry("b", "x"));
        assert!(a == a_other, "an entry is equal to another of its key, whatever it holds");
        assert!(a != b);
        assert_eq!(a.partial_cmp(&b), Some(Ordering::Less));
        assert_eq!(b.partial_cmp(&a), Some(Ordering::Greater));
        assert_eq!(a.partial_cmp(&a_other), Some(Ordering::Equal));
        let owned: Key = ("ns".into(), "a".into());
        let lookups: [&dyn Lookup; 4] = [&a, &("ns", "a"), &owned, &("ns", "b")];
        assert!(lookups[0] == lookups[1] && lookups[1] == lookups[2], "a key is equal however it is held");
        assert!(lookups[0] != lookups[3]);
        assert_eq!(lookups[2].partial_cmp(lookups[3]), Some(Ordering::Less));
        assert_eq!(lookups[3].partial_cmp(lookups[0]), Some(Ordering::Greater));
        assert_eq!(lookups[1].partial_cmp(lookups[0]), Some(Ordering::Equal));
        let other_namespace: &dyn Lookup = &("nr", "z");
        assert_eq!(other_namespace.partial_cmp(lookups[0]), Some(Ordering::Less), "namespace first");
    }

    #[test]
    fn a_relisted_secret_keeps_the_certificate_parsed_before() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap_or_else(|e| panic!("{e}"));
        let params = rcgen::CertificateParams::new(vec!["a.example".to_owned()]).unwrap_or_else(|e| panic!("{e}"));
        let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
        let secret = || -> k8s_openapi::api::core::v1::Secret {
            let mut s = k8s_openapi::api::core::v1::Secret {
                metadata: ObjectMeta { name: Some("s".into()), namespace: Some("ns".into()), ..Default::default() },
                type_: Some("kubernetes.io/tls".into()),
                ..Default::default()
            };
            let pem = |p: String| k8s_openapi::ByteString(p.into_bytes());
            s.data = Some([("tls.crt".into(), pem(cert.pem())), ("tls.key".into(), pem(key.serialize_pem()))].into());
            s
        };
        let mut index = Index::default();
        sync_all(&mut index);
        let served = |index: &Index| {
            let stored = get(&index.stores.secrets.objects, &("ns", "s")).cloned();
            stored.and_then(|s| s.certificate.clone()?.ok()).map(|c| c.key)
        };
        assert_eq!(index.apply(Change::Secret(Event::Apply(secret()))), Changed::Objects);
        let first = served(&index).unwrap_or_else(|| panic!("no certificate stored"));
        assert_eq!(index.apply(Change::Secret(Event::Apply(secret()))), Changed::Nothing);
        for e in [Event::Init, Event::InitApply(secret()), Event::InitDone] {
            assert_eq!(index.apply(Change::Secret(e)), Changed::Nothing);
        }
        let after = served(&index).unwrap_or_else(|| panic!("no certificate stored"));
        assert!(Arc::ptr_eq(&first, &after), "the relisted Secret's certificate is the one parsed before");
    }

    #[test]
    fn a_change_names_what_ingress_translation_reads_of_it() {
        let mut index = Index::default();
        sync_all(&mut index);
        let key = |ns: &str, name: &str| (ns.to_owned(), name.to_owned());
        let slice = |svc: &str| -> k8s_openapi::api::discovery::v1::EndpointSlice {
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
        let grant = Change::ReferenceGrant(Event::Delete(Default::default()));
        assert!(index.changes(&grant).all, "auth-url Services of Ingresses read ReferenceGrants");
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
        let names: Vec<_> = index.world().ingresses.iter().map(|i| Keyed::key(i).1.to_owned()).collect();
        assert_eq!(names, ["b"]);

        // A relist of the same objects changes nothing; one of the same names with other
        // contents does.
        let relist = |index: &mut Index, b: Ingress| {
            let events = [Event::Init, Event::InitApply(b), Event::InitDone];
            events.into_iter().map(|e| index.apply(Change::Ingress(e))).last()
        };
        assert_eq!(relist(&mut index, ing("b")), Some(Changed::Nothing));
        let mut other = ing("b");
        other.spec = Some(IngressSpec { ingress_class_name: Some("wharf".into()), ..Default::default() });
        assert_eq!(relist(&mut index, other.clone()), Some(Changed::Objects));
        assert_eq!(
            index.ingress(&("ns".into(), "b".into())),
            Some(&other.into()),
            "the relisted object replaced the one before"
        );

        assert_eq!(index.apply(Change::Ingress(Event::Delete(ing("a")))), Changed::Nothing, "a is gone already");
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
        assert_eq!(
            index.ingress(&("ns".into(), "a".into())),
            Some(&written.clone().into()),
            "the new status is stored"
        );
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
