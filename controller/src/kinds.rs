//! The kinds Wharf reads, listed once. The translator's input ([`World`]), the watch
//! events ([`Change`]), the index's stores, the watches and the file loader all come from
//! the list in [`kinds!`]; what differs per kind (a field selector, slimming, what the API
//! server would do on write) is in its [`Kind`] impl.

use std::any::TypeId;
use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kube::core::NamespaceResourceScope;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use wharf_gateway_api::backendtlspolicies::BackendTlsPolicy;
use wharf_gateway_api::gatewayclasses::GatewayClass;
use wharf_gateway_api::gateways::Gateway;
use wharf_gateway_api::grpcroutes::GrpcRoute;
use wharf_gateway_api::httproutes::HttpRoute;
use wharf_gateway_api::referencegrants::ReferenceGrant;
use wharf_gateway_api::tcproutes::TcpRoute;
use wharf_gateway_api::tlsroutes::TlsRoute;

use crate::stored::Keyed;

/// Where an object stands in "oldest first", the order Gateway API specifies for
/// conflicts (and Wharf uses for Ingresses too): creationTimestamp, then namespace, then
/// name.
pub type Age<'a> = (Option<k8s_openapi::jiff::Timestamp>, &'a str, &'a str);

/// The [`Age`] of an object created at `created`, named `namespace/name`.
pub fn age<'a>(
    created: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    namespace: Option<&'a str>,
    name: Option<&'a str>,
) -> Age<'a> {
    (created.map(|t| t.0), namespace.unwrap_or_default(), name.unwrap_or_default())
}

/// The [`Age`] of a Kubernetes object.
pub fn age_of<K: kube::Resource>(o: &K) -> Age<'_> {
    let m = o.meta();
    age(m.creation_timestamp.as_ref(), m.namespace.as_deref(), m.name.as_deref())
}

/// What the watches, the index and the file loader need of a kind.
pub trait Kind:
    kube::Resource<DynamicType = ()> + Clone + PartialEq + DeserializeOwned + Debug + Send + Sync + 'static
{
    /// The watch's list options.
    fn watch_config() -> watcher::Config {
        watcher::Config::default()
    }

    /// What is kept of an object: the object itself ([`stored_as_is!`]) or, for kinds that
    /// are many and read little, a type of Wharf's own ([`crate::stored`]).
    type Stored: Keyed + Clone + PartialEq + Debug + Send + Sync + 'static;

    /// The object as it is kept.
    fn store(self) -> Self::Stored;

    /// The object as it is kept, replacing `old` (the same object, stored before): what
    /// was derived from the same content is taken over rather than derived again.
    fn store_over(self, _old: Option<&Self::Stored>) -> Self::Stored {
        self.store()
    }

    /// The object as it is kept when read from a file.
    fn store_read(self) -> Self::Stored {
        self.store()
    }

    /// Drops what translation never reads, before an object kept as itself is stored.
    fn slim(self) -> Self {
        self
    }

    /// What the API server does on write, for objects read from files.
    fn as_written(&mut self) {}

    /// True when `a` and `b` differ only in what translation never reads (the status, the
    /// resourceVersion): such a change is planned for status writes but not translated.
    fn differ_only_in_status(_a: &Self::Stored, _b: &Self::Stored) -> bool {
        false
    }

    /// True for namespaced kinds (objects from files without a namespace get `default`).
    fn namespaced() -> bool {
        TypeId::of::<Self::Scope>() == TypeId::of::<NamespaceResourceScope>()
    }
}

/// `type Stored = Self`: the object kept as itself, slimmed ([`stored`]).
macro_rules! stored_as_is {
    () => {
        type Stored = Self;
        fn store(self) -> Self {
            stored(self)
        }
    };
}

impl Kind for IngressClass {
    stored_as_is!();
}
impl Kind for Namespace {
    stored_as_is!();
}
// A Gateway's status is read: the address it shows is kept (translate::gateway_api).
impl Kind for Gateway {
    stored_as_is!();
}
impl Kind for ReferenceGrant {
    stored_as_is!();
}

/// Kinds whose status only status planning reads: Wharf writes it, and each write comes
/// back as a watch event that needs no translation.
/// `status_not_translated!(fn)` is the method alone, for kinds that also have a `slim`.
macro_rules! status_not_translated {
    (fn) => {
        fn differ_only_in_status(a: &Self, b: &Self) -> bool {
            a.spec == b.spec && same_but_version(&a.metadata, &b.metadata)
        }
    };
    ($($ty:ty),*) => {$(
        impl Kind for $ty {
            stored_as_is!();
            status_not_translated!(fn);
        }
    )*};
}
status_not_translated!(GatewayClass, HttpRoute, GrpcRoute, TlsRoute, TcpRoute, BackendTlsPolicy);

/// True when two objects' metadata differ at most in what every write changes (the
/// resourceVersion, the managed fields).
fn same_but_version(a: &ObjectMeta, b: &ObjectMeta) -> bool {
    let ObjectMeta {
        annotations,
        creation_timestamp,
        deletion_grace_period_seconds,
        deletion_timestamp,
        finalizers,
        generate_name,
        generation,
        labels,
        managed_fields: _,
        name,
        namespace,
        owner_references,
        resource_version: _,
        self_link,
        uid,
    } = a;
    *annotations == b.annotations
        && *creation_timestamp == b.creation_timestamp
        && *deletion_grace_period_seconds == b.deletion_grace_period_seconds
        && *deletion_timestamp == b.deletion_timestamp
        && *finalizers == b.finalizers
        && *generate_name == b.generate_name
        && *generation == b.generation
        && *labels == b.labels
        && *name == b.name
        && *namespace == b.namespace
        && *owner_references == b.owner_references
        && *self_link == b.self_link
        && *uid == b.uid
}

/// The annotation `kubectl apply` keeps a copy of the whole object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What is dropped of every object before it is stored, on top of [`Kind::slim`]: the
/// managed fields (often larger than the object) and `kubectl apply`'s copy of it.
pub(crate) fn stored<K: Kind>(obj: K) -> K {
    let mut obj = obj.slim();
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = &mut meta.annotations {
        annotations.remove(LAST_APPLIED);
    }
    obj
}

impl Kind for ConfigMap {
    stored_as_is!();

    /// Keeps only `ca.crt` (what a BackendTLSPolicy's caCertificateRefs read), and the
    /// record of a host-owners ConfigMap: the rest of a ConfigMap is never read, and there
    /// are many of them.
    fn slim(self) -> Self {
        use crate::well_known::{HOST_OWNERS_KEY, HOST_OWNERS_SUFFIX};
        let mut data = self.data.unwrap_or_default();
        let named = self.metadata.name.as_deref().is_some_and(|n| n.ends_with(HOST_OWNERS_SUFFIX));
        let record = named.then(|| data.remove(HOST_OWNERS_KEY)).flatten();
        let kept: std::collections::BTreeMap<String, String> = data
            .remove(crate::well_known::CA_CRT)
            .map(|ca| (crate::well_known::CA_CRT.to_owned(), ca))
            .into_iter()
            .chain(record.map(|r| (HOST_OWNERS_KEY.to_owned(), r)))
            .collect();
        ConfigMap {
            metadata: ObjectMeta { name: self.metadata.name, namespace: self.metadata.namespace, ..Default::default() },
            data: (!kept.is_empty()).then_some(kept),
            ..Default::default()
        }
    }
}

/// Secret types never read, and listed apart: Helm's releases and service account
/// tokens are the many and the large ones.
const SECRET_TYPES_SKIPPED: [&str; 2] = ["helm.sh/release.v1", "kubernetes.io/service-account-token"];

impl Kind for Secret {
    type Stored = crate::stored::Secret;

    fn store(self) -> Self::Stored {
        self.into()
    }

    fn store_over(self, old: Option<&Self::Stored>) -> Self::Stored {
        crate::stored::Secret::replacing(self, old)
    }

    fn store_read(self) -> Self::Stored {
        crate::stored::Secret::unparsed(self)
    }

    /// Not the Secret types that are never read.
    fn watch_config() -> watcher::Config {
        let fields: Vec<String> = SECRET_TYPES_SKIPPED.iter().map(|t| format!("type!={t}")).collect();
        watcher::Config::default().fields(&fields.join(","))
    }

    /// `stringData` wins over `data`; the type defaults to `Opaque`.
    fn as_written(&mut self) {
        self.type_.get_or_insert_with(|| "Opaque".to_owned());
        if let Some(string_data) = self.string_data.take() {
            let data = self.data.get_or_insert_with(Default::default);
            for (k, v) in string_data {
                data.insert(k, ByteString(v.into_bytes()));
            }
        }
    }
}

impl Kind for Ingress {
    /// What translation, status planning and `wharf migrate` read, in a type of Wharf's own.
    type Stored = crate::stored::Ingress;

    fn store(self) -> Self::Stored {
        stored(self).into()
    }

    // Its status is read by status planning only.
    fn differ_only_in_status(a: &Self::Stored, b: &Self::Stored) -> bool {
        a.spec == b.spec && a.metadata == b.metadata
    }
}

impl Kind for Service {
    /// What translation and status read: the waypoint labels, the ports' names, numbers
    /// and appProtocols, the type, the cluster IP and the load balancer's addresses.
    type Stored = crate::stored::Service;

    fn store(self) -> Self::Stored {
        self.into()
    }

    // Its status is read by status planning only (the addresses an Ingress publishes).
    fn differ_only_in_status(a: &Self::Stored, b: &Self::Stored) -> bool {
        crate::stored::Service::differ_only_in_status(a, b)
    }
}

impl Kind for EndpointSlice {
    /// What translation reads: the Service's name label, the address type, the ports'
    /// names and numbers, and each endpoint's addresses, conditions and Pod.
    type Stored = crate::stored::Slice;

    fn store(self) -> Self::Stored {
        self.into()
    }
}

impl Kind for Pod {
    stored_as_is!();

    /// Keeps what mesh enrolment reads (labels, service account): most of a Pod is never
    /// read, and there are many of them.
    fn slim(self) -> Self {
        use k8s_openapi::api::core::v1::PodSpec;
        Pod {
            metadata: ObjectMeta {
                name: self.metadata.name,
                namespace: self.metadata.namespace,
                labels: self.metadata.labels,
                ..Default::default()
            },
            spec: Some(PodSpec {
                service_account_name: self.spec.and_then(|s| s.service_account_name),
                ..Default::default()
            }),
            status: None,
        }
    }
}

/// Objects of one kind in a [`World`], shared with the index that holds them: a world taken
/// from the index costs a pointer per object, not a copy of it.
///
/// Objects in key order (namespace, then name, each key once), as the index keeps them,
/// are found by binary search ([`Objects::get`]); a world in any other order (one built by
/// hand) is looked up through maps built per translation.
#[derive(Debug, Clone)]
pub struct Objects<T> {
    items: Vec<Arc<T>>,
    by_key: bool,
}

/// The iterator of [`Objects::iter`].
pub type Iter<'a, T> = std::iter::Map<std::slice::Iter<'a, Arc<T>>, fn(&Arc<T>) -> &T>;

impl<T> Objects<T> {
    /// The objects, in order.
    pub fn iter(&self) -> Iter<'_, T> {
        self.items.iter().map(|o| &**o)
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

impl<T: Keyed> Objects<T> {
    /// The objects `items`; found by key without a map when they are in key order.
    pub(crate) fn new(items: Vec<Arc<T>>) -> Self {
        let by_key = items.windows(2).all(|w| w[0].key() < w[1].key());
        Objects { items, by_key }
    }

    /// Puts the objects in key order (of two with one key, the later stays later).
    pub fn sort_by_key(&mut self) {
        let mut items = std::mem::take(&mut self.items);
        items.sort_by(|a, b| a.key().cmp(&b.key()));
        *self = Objects::new(items);
    }

    /// Adds one.
    pub fn push(&mut self, obj: impl Into<T>) {
        let obj = obj.into();
        self.by_key &= self.items.last().is_none_or(|last| last.key() < obj.key());
        self.items.push(Arc::new(obj));
    }

    /// Object `ns/name` (`ns` empty for a cluster-scoped kind), when the objects are in
    /// key order; `None` when they are not (look them up some other way).
    pub fn get(&self, ns: &str, name: &str) -> Option<Option<&T>> {
        self.by_key.then(|| {
            let found = self.items.binary_search_by(|o| o.key().cmp(&(ns, name)));
            found.ok().map(|i| &*self.items[i])
        })
    }
}

/// Objects of one kind by `(namespace, name)` (`namespace` empty for a cluster-scoped
/// kind): found in the [`Objects`] themselves when they are in key order (a world taken
/// from the index: nothing to build), else through a map built once.
pub(crate) enum ByKey<'a, T> {
    /// In key order.
    Ordered(&'a Objects<T>),
    /// A map; of two objects with one key, the later.
    Map(crate::hashing::HashMap<(&'a str, &'a str), &'a T>),
}

impl<'a, T: Keyed> ByKey<'a, T> {
    /// `few`: few lookups will be made, so objects in key order are searched where they
    /// are; else a map is built.
    pub(crate) fn new(objects: &'a Objects<T>, few: bool) -> Self {
        match objects.by_key && few {
            true => ByKey::Ordered(objects),
            false => ByKey::of(objects.iter()),
        }
    }

    /// A map of `objects`, in any order.
    pub(crate) fn of(objects: impl IntoIterator<Item = &'a T>) -> Self {
        let objects = objects.into_iter();
        let mut map = crate::hashing::HashMap::with_capacity_and_hasher(objects.size_hint().0, Default::default());
        map.extend(objects.map(|o| (o.key(), o)));
        ByKey::Map(map)
    }

    pub(crate) fn get(&self, ns: &str, name: &str) -> Option<&'a T> {
        match self {
            ByKey::Ordered(o) => o.get(ns, name).flatten(),
            ByKey::Map(m) => m.get(&(ns, name)).copied(),
        }
    }
}

impl<T> Default for Objects<T> {
    fn default() -> Self {
        Objects { items: Vec::new(), by_key: true }
    }
}

/// Objects of a kind as they are stored, or as they come (made into what is stored).
impl<T: Keyed, U: Into<T>> FromIterator<U> for Objects<T> {
    fn from_iter<I: IntoIterator<Item = U>>(iter: I) -> Self {
        Objects::new(iter.into_iter().map(|o| Arc::new(o.into())).collect())
    }
}

impl<T: Keyed, U: Into<T>> From<Vec<U>> for Objects<T> {
    fn from(v: Vec<U>) -> Self {
        v.into_iter().collect()
    }
}

impl<'a, T> IntoIterator for &'a Objects<T> {
    type Item = &'a T;
    type IntoIter = Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T> std::ops::Index<usize> for Objects<T> {
    type Output = T;

    fn index(&self, i: usize) -> &T {
        &self.items[i]
    }
}

/// Changing an object shared with the index changes a copy of it (which may leave the
/// objects out of key order).
impl<T: Clone> std::ops::IndexMut<usize> for Objects<T> {
    fn index_mut(&mut self, i: usize) -> &mut T {
        self.by_key = false;
        Arc::make_mut(&mut self.items[i])
    }
}

/// Declares the kinds: `field: Type => Variant;` each, with its doc comment.
macro_rules! kinds {
    ($( $(#[doc = $doc:literal])* $field:ident: $ty:ty => $variant:ident; )*) => {
        /// The Kubernetes objects a snapshot is built from.
        #[derive(Debug, Clone, Default)]
        pub struct World {
            $( $(#[doc = $doc])* pub $field: Objects<<$ty as Kind>::Stored>, )*
        }

        impl World {
            /// Puts the objects of every kind in key order, as the controller's index
            /// holds them (and finds them by key without building maps).
            pub fn sort_by_key(&mut self) {
                $( self.$field.sort_by_key(); )*
            }
        }

        /// A watch event of one of the kinds Wharf reads.
        // Moved once through a channel; boxing would cost an allocation per watch event.
        #[allow(clippy::large_enum_variant)]
        #[derive(Debug)]
        pub enum Change {
            $( #[doc = concat!(stringify!($variant), " event.")] $variant(Event<$ty>), )*
        }

        #[cfg(test)]
        impl Change {
            /// `InitDone` of every kind, in the order of the list.
            pub(crate) fn init_done_all() -> Vec<Change> {
                vec![ $( Change::$variant(Event::InitDone), )* ]
            }
        }

        /// Decodes `value` into `world` when `(api_version, kind)` is one of the kinds;
        /// `None` when it is not.
        pub(crate) fn add_to_world(
            api_version: &str,
            kind: &str,
            value: serde_yaml::Value,
            world: &mut World,
        ) -> Option<Result<(), serde_yaml::Error>> {
            $(
                if api_version == <$ty as kube::Resource>::api_version(&()) && kind == <$ty as kube::Resource>::kind(&()) {
                    return Some(serde_yaml::from_value::<$ty>(value).map(|mut obj| {
                        if <$ty as Kind>::namespaced() {
                            kube::Resource::meta_mut(&mut obj).namespace.get_or_insert_with(|| "default".into());
                        }
                        obj.as_written();
                        world.$field.push(obj.store_read());
                    }));
                }
            )*
            None
        }
    };
}

/// The kinds Wharf watches, `field: Type => Variant;` each with its doc comment, passed to
/// `$callback`: the world and its changes are declared here, the stores and watches by the
/// layer that runs them (`k8s`).
macro_rules! with_kinds {
    ($callback:ident) => {
        $callback! {
            /// IngressClasses (cluster-scoped).
            ingress_classes: k8s_openapi::api::networking::v1::IngressClass => IngressClass;
            /// Ingresses of every class; those of other controllers are ignored.
            ingresses: k8s_openapi::api::networking::v1::Ingress => Ingress;
            /// Secrets holding `tls.crt` and `tls.key`.
            secrets: k8s_openapi::api::core::v1::Secret => Secret;
            /// Services referenced by backends.
            services: k8s_openapi::api::core::v1::Service => Service;
            /// EndpointSlices (`kubernetes.io/service-name` label links them to a Service).
            endpoint_slices: k8s_openapi::api::discovery::v1::EndpointSlice => EndpointSlice;
            /// Pods behind endpoints (labels and service account decide mesh enrolment).
            pods: k8s_openapi::api::core::v1::Pod => Pod;
            /// Namespaces (labels decide mesh enrolment and which routes a listener allows).
            namespaces: k8s_openapi::api::core::v1::Namespace => Namespace;
            /// GatewayClasses (cluster-scoped); those of other controllers are ignored.
            gateway_classes: wharf_gateway_api::gatewayclasses::GatewayClass => GatewayClass;
            /// Gateways of every class.
            gateways: wharf_gateway_api::gateways::Gateway => Gateway;
            /// HTTPRoutes.
            http_routes: wharf_gateway_api::httproutes::HttpRoute => HttpRoute;
            /// GRPCRoutes.
            grpc_routes: wharf_gateway_api::grpcroutes::GrpcRoute => GrpcRoute;
            /// TLSRoutes.
            tls_routes: wharf_gateway_api::tlsroutes::TlsRoute => TlsRoute;
            /// TCPRoutes.
            tcp_routes: wharf_gateway_api::tcproutes::TcpRoute => TcpRoute;
            /// ReferenceGrants: which cross-namespace references are permitted.
            reference_grants: wharf_gateway_api::referencegrants::ReferenceGrant => ReferenceGrant;
            /// BackendTLSPolicies: TLS from the gateway to the Services they target.
            backend_tls_policies: wharf_gateway_api::backendtlspolicies::BackendTlsPolicy => BackendTlsPolicy;
            /// ConfigMaps, holding only `ca.crt` (the CA certificates of BackendTLSPolicies).
            config_maps: k8s_openapi::api::core::v1::ConfigMap => ConfigMap;

        }
    };
}
pub(crate) use with_kinds;

with_kinds!(kinds);

#[cfg(test)]
mod tests {
    use super::*;

    fn route(value: serde_json::Value) -> HttpRoute {
        serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn objects_are_shared_until_changed_through_an_index() {
        let named = |n: &str| Namespace {
            metadata: ObjectMeta { name: Some(n.to_owned()), ..Default::default() },
            ..Default::default()
        };
        let mut a: Objects<Namespace> = vec![named("a"), named("b")].into();
        assert_eq!((a.len(), a.is_empty()), (2, false));
        assert!(Objects::<Namespace>::default().is_empty());
        a.push(named("c"));
        let names = |o: &Objects<Namespace>| o.iter().filter_map(|n| n.metadata.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&a), ["a", "b", "c"]);
        assert_eq!((&a).into_iter().count(), 3);
        let shared = a.clone();
        assert!(Arc::ptr_eq(&a.items[1], &shared.items[1]), "a clone copies pointers, not objects");
        a[1] = named("z");
        assert_eq!(a[1].metadata.name.as_deref(), Some("z"));
        assert_eq!(names(&shared), ["a", "b", "c"], "the other holder keeps its object");
        let collected: Objects<Namespace> = ["x"].into_iter().map(named).collect();
        assert_eq!(names(&collected), ["x"]);
    }

    #[test]
    fn objects_in_key_order_are_found_by_key_and_others_say_they_cannot_be() {
        let secret = |ns: &str, n: &str| Secret {
            metadata: ObjectMeta { name: Some(n.to_owned()), namespace: Some(ns.to_owned()), ..Default::default() },
            ..Default::default()
        };
        let mut o: Objects<Secret> = vec![secret("a", "z"), secret("b", "a"), secret("b", "b")].into();
        let name =
            |o: &Objects<Secret>, ns: &str, n: &str| o.get(ns, n).map(|s| s.and_then(|s| s.metadata.name.clone()));
        assert_eq!(name(&o, "b", "b"), Some(Some("b".to_owned())));
        assert_eq!(name(&o, "a", "z"), Some(Some("z".to_owned())));
        assert_eq!(name(&o, "a", "a"), Some(None), "not there");
        assert_eq!(name(&o, "c", "a"), Some(None), "past the last");
        o.push(secret("c", "a"));
        assert_eq!(name(&o, "c", "a"), Some(Some("a".to_owned())), "pushed in order");
        o.push(secret("c", "a"));
        assert_eq!(name(&o, "c", "a"), None, "a key twice: not in key order");
        let mut unordered: Objects<Secret> = vec![secret("b", "a"), secret("a", "z")].into();
        assert_eq!(name(&unordered, "a", "z"), None);
        unordered.sort_by_key();
        assert_eq!(name(&unordered, "a", "z"), Some(Some("z".to_owned())), "sorted");
        assert_eq!(name(&unordered, "b", "a"), Some(Some("a".to_owned())));
        let mut changed: Objects<Secret> = vec![secret("a", "a"), secret("a", "b")].into();
        changed[0] = secret("z", "z");
        assert_eq!(name(&changed, "a", "b"), None, "changed by index: no longer known to be in order");
        assert!(Objects::<Secret>::default().get("a", "a") == Some(None));
    }

    #[test]
    fn stored_objects_drop_managed_fields_and_the_last_applied_copy_only() {
        let r = stored(route(serde_json::json!({
            "metadata": {"name": "r", "namespace": "web", "resourceVersion": "7",
                "annotations": {LAST_APPLIED: "{\"big\": true}", "team": "shop"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"hostnames": ["a.example.com"]},
        })));
        assert_eq!(r.metadata.managed_fields, None);
        assert_eq!(r.metadata.annotations, Some([("team".to_owned(), "shop".to_owned())].into()));
        assert_eq!(r.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(r.spec.hostnames, Some(vec!["a.example.com".to_owned()]));
    }

    #[test]
    fn a_status_write_coming_back_is_only_a_status_change() {
        let base = serde_json::json!({
            "metadata": {"name": "r", "namespace": "web", "resourceVersion": "7", "generation": 1, "labels": {"a": "b"}},
            "spec": {"hostnames": ["a.example.com"]},
        });
        let with = |path: &str, v: serde_json::Value| {
            let mut o = base.clone();
            if let Some(slot) = o.pointer_mut(path) {
                *slot = v;
            } else if let Some((parent, key)) = path.rsplit_once('/') {
                o.pointer_mut(parent).and_then(|p| p.as_object_mut()).map(|p| p.insert(key.to_owned(), v));
            }
            route(o)
        };
        let r = route(base.clone());
        let status = serde_json::json!({"parents": [{"controllerName": "wharf.dev/gateway-controller",
            "parentRef": {"name": "gw"}, "conditions": []}]});
        let written = with("/status", status);
        let written =
            HttpRoute { metadata: ObjectMeta { resource_version: Some("8".into()), ..written.metadata }, ..written };
        assert!(HttpRoute::differ_only_in_status(&r, &written));
        assert!(!HttpRoute::differ_only_in_status(&r, &with("/spec/hostnames", serde_json::json!(["b.example.com"]))));
        assert!(!HttpRoute::differ_only_in_status(&r, &with("/metadata/labels/a", serde_json::json!("c"))));
        assert!(!HttpRoute::differ_only_in_status(&r, &with("/metadata/generation", serde_json::json!(2))));
        assert!(!HttpRoute::differ_only_in_status(&r, &with("/metadata/annotations", serde_json::json!({"x": "y"}))));
        assert!(
            !Gateway::differ_only_in_status(&Gateway::default(), &Gateway::default()),
            "a Gateway's status is read"
        );
    }

    #[test]
    fn an_address_written_to_an_ingress_or_a_service_is_only_a_status_change() {
        fn check<K: Kind>(spec: serde_json::Value, status: serde_json::Value, other_spec: serde_json::Value) {
            let obj = |spec: &serde_json::Value, status: Option<&serde_json::Value>, labels: serde_json::Value| -> K {
                let mut o =
                    serde_json::json!({"metadata": {"name": "x", "namespace": "web", "labels": labels}, "spec": spec});
                if let (Some(status), Some(map)) = (status, o.as_object_mut()) {
                    map.insert("status".into(), status.clone());
                }
                serde_json::from_value(o).unwrap()
            };
            // A label both kinds keep.
            let label = |v: &str| serde_json::json!({"istio.io/use-waypoint": v});
            let a = obj(&spec, None, label("b"));
            let mut written = obj(&spec, Some(&status), label("b"));
            written.meta_mut().resource_version = Some("8".into());
            let (a, written) = (a.store(), written.store());
            assert!(K::differ_only_in_status(&a, &written));
            assert!(!K::differ_only_in_status(&a, &obj(&other_spec, None, label("b")).store()));
            assert!(!K::differ_only_in_status(&a, &obj(&spec, None, label("c")).store()));
        }
        let address = serde_json::json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}});
        check::<Ingress>(
            serde_json::json!({"ingressClassName": "wharf"}),
            address.clone(),
            serde_json::json!({"ingressClassName": "other"}),
        );
        check::<Service>(
            serde_json::json!({"ports": [{"port": 80}]}),
            address,
            serde_json::json!({"ports": [{"port": 81}]}),
        );
    }

    #[test]
    fn scope_follows_the_kind() {
        assert!(Ingress::namespaced() && Secret::namespaced() && Pod::namespaced());
        assert!(!IngressClass::namespaced() && !Namespace::namespaced());
    }

    /// The chart's ClusterRole (which the e2e harness also installs) lets the controller
    /// list and watch every kind it reads.
    #[test]
    fn the_chart_role_covers_every_kind() {
        let text = include_str!("../../charts/wharf/files/clusterrole-rules.yaml");
        let rules: Vec<serde_yaml::Value> = serde_yaml::from_str(text).unwrap_or_default();
        let allows = |group: &str, plural: &str, verb: &str| {
            let has = |r: &serde_yaml::Value, field: &str, want: &str| {
                r[field].as_sequence().is_some_and(|s| s.iter().any(|v| v.as_str() == Some(want)))
            };
            rules.iter().any(|r| has(r, "apiGroups", group) && has(r, "resources", plural) && has(r, "verbs", verb))
        };
        macro_rules! check {
            ($($ty:ty),*) => {$(
                let (group, plural) = (<$ty as kube::Resource>::group(&()), <$ty as kube::Resource>::plural(&()));
                for verb in ["list", "watch"] {
                    assert!(allows(&group, &plural, verb), "{verb} {group}/{plural} missing from the chart's ClusterRole");
                }
            )*};
        }
        assert!(!rules.is_empty());
        check!(
            IngressClass,
            Ingress,
            Secret,
            Service,
            EndpointSlice,
            Pod,
            Namespace,
            GatewayClass,
            Gateway,
            HttpRoute,
            GrpcRoute,
            TlsRoute,
            TcpRoute,
            ReferenceGrant,
            BackendTlsPolicy,
            ConfigMap
        );
        // Every field of World is checked above.
        let World {
            ingress_classes: _,
            ingresses: _,
            secrets: _,
            services: _,
            endpoint_slices: _,
            pods: _,
            namespaces: _,
            gateway_classes: _,
            gateways: _,
            http_routes: _,
            grpc_routes: _,
            tls_routes: _,
            tcp_routes: _,
            reference_grants: _,
            backend_tls_policies: _,
            config_maps: _,
        } = World::default();
    }

    #[test]
    fn secrets_keep_their_data_only_for_the_types_read() {
        let secret = |ty: &str| -> Secret {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "s", "namespace": "web", "labels": {"a": "b"}, "annotations": {"big": "x"}},
                "type": ty, "data": {"auth": "YTpi"},
            }))
            .unwrap_or_default()
        };
        for ty in ["kubernetes.io/tls", "Opaque"] {
            let kept = secret(ty).store();
            assert_eq!(kept.data().collect::<Vec<_>>(), [("auth", &b"a:b"[..])], "{ty}");
            assert_eq!(&*kept.type_, ty);
            assert_eq!(kept.labels, Default::default());
            assert_eq!((&*kept.name, &*kept.namespace), ("s", "web"));
        }
        for ty in ["kubernetes.io/dockerconfigjson", "bootstrap.kubernetes.io/token"] {
            let kept = secret(ty).store();
            assert_eq!((kept.data().count(), &*kept.type_), (0, ty));
        }
        let untyped: Secret =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "s"}})).unwrap_or_default();
        assert_eq!((&*untyped.store().type_, &*secret("Opaque").store().namespace), ("Opaque", "web"));
        let mut challenge = secret("Opaque");
        challenge.metadata.labels = Some(
            [
                ("a".into(), "b".into()),
                ("wharf.dev/acme-challenge".into(), "true".into()),
                ("wharf.dev/acme-issuer".into(), "le".into()),
            ]
            .into(),
        );
        let labels = challenge.store().labels;
        let want = [("wharf.dev/acme-challenge", "true"), ("wharf.dev/acme-issuer", "le")];
        assert_eq!(labels, want.into_iter().collect());
        assert_eq!((labels.get("wharf.dev/acme-issuer"), labels.get("a")), (Some("le"), None));
    }

    #[test]
    fn config_maps_keep_only_their_ca_certificates() {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ca", "namespace": "web", "labels": {"a": "b"}, "resourceVersion": "3"},
            "data": {"ca.crt": "PEM", "other": "x"},
        }))
        .unwrap();
        let slim = cm.slim();
        assert_eq!(slim.data, Some([("ca.crt".to_owned(), "PEM".to_owned())].into()));
        assert_eq!((slim.metadata.name.as_deref(), slim.metadata.namespace.as_deref()), (Some("ca"), Some("web")));
        assert!(slim.metadata.labels.is_none());
        let none: ConfigMap =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "x"}, "data": {"k": "v", "owners": "a b"}}))
                .unwrap();
        assert_eq!(none.slim().data, None, "another ConfigMap's owners key is not a record");
        let record: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "wharf-leader-host-owners", "namespace": "wharf"},
            "data": {"owners": "shop.a.test a\n", "k": "v"},
        }))
        .unwrap();
        assert_eq!(record.slim().data, Some([("owners".to_owned(), "shop.a.test a\n".to_owned())].into()));
    }

    #[test]
    fn services_keep_only_what_translation_and_status_read() {
        // As the API server returns a LoadBalancer Service.
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u", "resourceVersion": "9",
                "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": {"a": "b"},
                "labels": {"app": "web", "istio.io/use-waypoint": "wp", "istio.io/use-waypoint-namespace": "mesh"}},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.7", "clusterIPs": ["10.0.0.7"],
                "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "sessionAffinity": "None",
                "selector": {"app": "web"}, "externalTrafficPolicy": "Cluster",
                "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": 30080,
                    "appProtocol": "kubernetes.io/h2c"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP", "ports": [{"port": 80, "protocol": "TCP"}]},
                {"hostname": "lb.example"}]}, "conditions": []},
        }))
        .unwrap();
        use crate::stored::{LoadBalancerAddress, ServicePort};
        let want = crate::stored::Service {
            namespace: "shop".into(),
            name: "web".into(),
            labels: [("istio.io/use-waypoint", "wp"), ("istio.io/use-waypoint-namespace", "mesh")]
                .into_iter()
                .collect(),
            ports: [ServicePort {
                name: Some("http".into()),
                port: 80,
                app_protocol: Some("kubernetes.io/h2c".into()),
            }]
            .into(),
            external_name: false,
            cluster_ip: Some([10, 0, 0, 7].into()),
            load_balancer: [
                LoadBalancerAddress { ip: Some("192.0.2.1".into()), hostname: None },
                LoadBalancerAddress { ip: None, hostname: Some("lb.example".into()) },
            ]
            .into(),
        };
        assert_eq!(svc.store(), want);
        let headless: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x", "namespace": "shop"},
            "spec": {"type": "ExternalName", "clusterIP": "None", "externalName": "db.example"},
        }))
        .unwrap();
        let kept = headless.store();
        assert!(
            kept.external_name && kept.cluster_ip.is_none() && kept.ports.is_empty() && kept.load_balancer.is_empty()
        );
    }

    #[test]
    fn endpoint_slices_keep_only_what_translation_reads() {
        // As the EndpointSlice controller writes one.
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-abc", "namespace": "shop", "uid": "u", "generateName": "web-",
                "labels": {"kubernetes.io/service-name": "web", "endpointslice.kubernetes.io/managed-by": "x"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "web", "uid": "s"}]},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP", "appProtocol": "http"}],
            "endpoints": [{"addresses": ["10.1.0.5"], "conditions": {"ready": false, "serving": true, "terminating": true},
                "nodeName": "n1", "zone": "z", "hostname": "h", "hints": {"forZones": [{"name": "z"}]},
                "targetRef": {"kind": "Pod", "namespace": "shop", "name": "web-1", "uid": "p", "resourceVersion": "4"}}],
        }))
        .unwrap();
        use crate::stored::{Slice, SliceEndpoint, SlicePort};
        let want = Slice {
            namespace: "shop".into(),
            name: "web-abc".into(),
            service: Some("web".into()),
            fqdn: false,
            ports: [SlicePort { name: Some("http".into()), port: Some(8080) }].into(),
            endpoints: [SliceEndpoint {
                addresses: [[10, 1, 0, 5].into()].into(),
                ready: Some(false),
                serving: Some(true),
                terminating: Some(true),
                pod: Some(Box::new(("shop".into(), "web-1".into()))),
            }]
            .into(),
        };
        assert_eq!(slice.store(), want);
        // Names, and targets that are not Pods, are not kept.
        let other: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x", "namespace": "shop"},
            "addressType": "FQDN",
            "endpoints": [{"addresses": ["db.example", "10.1.0.6"], "targetRef": {"kind": "Node", "name": "n1"}},
                {"addresses": ["10.1.0.7"], "targetRef": {"kind": "Pod", "name": "no-namespace"}}],
        }))
        .unwrap();
        let kept = other.store();
        assert!(kept.fqdn && kept.service.is_none() && kept.ports.is_empty());
        let pods: Vec<_> = kept.endpoints.iter().map(|e| (e.addresses.to_vec(), e.pod.is_some())).collect();
        assert_eq!(pods, [(vec![[10, 1, 0, 6].into()], false), (vec![[10, 1, 0, 7].into()], false)]);
    }

    #[test]
    fn ingresses_are_kept_whole_in_lists_without_room_to_spare() {
        // Read from JSON, as a watch reads it (a clone has no room to spare anyway).
        let json = serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u", "annotations": {"a": "b"}},
            "spec": {"ingressClassName": "wharf",
                "tls": [{"hosts": ["a.example"], "secretName": "a"}],
                "rules": [{"host": "a.example", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}},
        });
        let read = || serde_json::from_value::<Ingress>(json.clone()).unwrap();
        let slim = read().slim();
        assert_eq!(slim, read());
        let spec = slim.spec.unwrap_or_default();
        let rules = spec.rules.unwrap_or_default();
        let tls = spec.tls.unwrap_or_default();
        let paths = rules.first().and_then(|r| r.http.as_ref()).map(|h| h.paths.capacity());
        let hosts = tls.first().and_then(|t| t.hosts.as_ref()).map(Vec::capacity);
        assert_eq!((rules.capacity(), paths, tls.capacity(), hosts), (1, Some(1), 1, Some(1)));
    }

    #[test]
    fn only_tls_secrets_are_watched() {
        assert_eq!(
            Secret::watch_config().field_selector.as_deref(),
            Some("type!=helm.sh/release.v1,type!=kubernetes.io/service-account-token")
        );
        assert_eq!(Service::watch_config().field_selector, None);
    }

    #[test]
    fn pods_keep_only_what_mesh_enrolment_reads() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "a"}, "annotations": {"big": "x"}},
            "spec": {"serviceAccountName": "sa", "containers": [{"name": "c", "image": "i"}]},
            "status": {"podIP": "10.0.0.1"},
        }))
        .unwrap_or_default();
        let slim = pod.slim();
        assert_eq!(
            serde_json::to_value(&slim).unwrap_or_default(),
            serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "a"}},
                "spec": {"serviceAccountName": "sa", "containers": []},
            })
        );
    }
}
