//! An Ingress as Wharf keeps it: the fields of the API's, in the same shape and under the
//! same names, without those no one reads (the resourceVersion, the managed fields, the
//! owner references) and without room for what is not there. The API's type keeps every
//! optional field inline (an Ingress is 584 bytes, each of its paths 176 before anything
//! they point to); this one is at most 224 and 88, and a known `pathType` is no string.
//!
//! It converts back to the API's type for what `wharf migrate` writes: name, namespace,
//! labels, annotations and the spec as read.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::TypedLocalObjectReference;
use k8s_openapi::api::networking::v1 as api;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// An Ingress.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Ingress {
    /// What is kept of its metadata.
    pub metadata: Meta,
    /// Its spec.
    pub spec: Option<IngressSpec>,
    /// Its status, as the API has it (status planning compares it with the addresses to
    /// publish).
    pub status: Option<api::IngressStatus>,
}

/// What is kept of an Ingress's metadata.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Meta {
    /// Its namespace.
    pub namespace: Option<Box<str>>,
    /// Its name.
    pub name: Option<Box<str>>,
    /// Its uid (Events refer to it).
    pub uid: Option<Box<str>>,
    /// When it was created (of two Ingresses claiming one host and path, the older wins).
    pub creation_timestamp: Option<Time>,
    /// Its labels (`wharf migrate` writes them back).
    pub labels: Option<BTreeMap<String, String>>,
    /// Its annotations.
    pub annotations: Option<BTreeMap<String, String>>,
}

/// `spec`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IngressSpec {
    /// `ingressClassName`.
    pub ingress_class_name: Option<Box<str>>,
    /// `defaultBackend`.
    pub default_backend: Option<Box<IngressBackend>>,
    /// `rules`.
    pub rules: Option<Box<[IngressRule]>>,
    /// `tls`.
    pub tls: Option<Box<[IngressTls]>>,
}

/// A rule: a host and its paths.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IngressRule {
    /// `host`.
    pub host: Option<Box<str>>,
    /// `http`.
    pub http: Option<HttpRule>,
}

/// `http` of a rule.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HttpRule {
    /// `paths`.
    pub paths: Box<[HttpPath]>,
}

/// A path of a rule.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpPath {
    /// `path`.
    pub path: Option<Box<str>>,
    /// `pathType`.
    pub path_type: PathType,
    /// `backend`.
    pub backend: IngressBackend,
}

/// `pathType`: one of the three the API knows, or what else was written (in a file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathType {
    /// `Exact`.
    Exact,
    /// `Prefix`.
    Prefix,
    /// `ImplementationSpecific`.
    ImplementationSpecific,
    /// Anything else, as written.
    Other(Box<str>),
}

impl PathType {
    /// As written.
    pub fn as_str(&self) -> &str {
        match self {
            PathType::Exact => "Exact",
            PathType::Prefix => "Prefix",
            PathType::ImplementationSpecific => "ImplementationSpecific",
            PathType::Other(s) => s,
        }
    }
}

impl From<String> for PathType {
    fn from(s: String) -> Self {
        match s.as_str() {
            "Exact" => PathType::Exact,
            "Prefix" => PathType::Prefix,
            "ImplementationSpecific" => PathType::ImplementationSpecific,
            _ => PathType::Other(s.into_boxed_str()),
        }
    }
}

/// A backend: a Service, or a resource (which Wharf does not serve, and says so).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IngressBackend {
    /// `service`.
    pub service: Option<IngressServiceBackend>,
    /// `resource`.
    pub resource: Option<Box<TypedLocalObjectReference>>,
}

/// `service` of a backend.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IngressServiceBackend {
    /// `name`.
    pub name: Box<str>,
    /// `port`.
    pub port: Option<ServiceBackendPort>,
}

/// `port` of a Service backend: by name or number.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ServiceBackendPort {
    /// `name`.
    pub name: Option<Box<str>>,
    /// `number`.
    pub number: Option<i32>,
}

/// A TLS entry.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IngressTls {
    /// `hosts`.
    pub hosts: Option<Box<[Box<str>]>>,
    /// `secretName`.
    pub secret_name: Option<Box<str>>,
}

impl Ingress {
    /// The reference that names this Ingress in diagnostics, routes and status (the
    /// namespace `default` when the object has none).
    pub fn object_ref(&self) -> wharf_model::ObjectRef {
        let m = &self.metadata;
        wharf_model::ObjectRef::new(
            "Ingress",
            m.namespace.as_deref().unwrap_or("default"),
            m.name.as_deref().unwrap_or(""),
        )
    }
}

impl Ingress {
    /// Where it stands in "oldest first" ([`crate::kinds::Age`]).
    pub fn age(&self) -> crate::kinds::Age<'_> {
        let m = &self.metadata;
        crate::kinds::age(m.creation_timestamp.as_ref(), m.namespace.as_deref(), m.name.as_deref())
    }
}

impl crate::stored::Keyed for Ingress {
    fn key(&self) -> (&str, &str) {
        let m = &self.metadata;
        (m.namespace.as_deref().unwrap_or(""), m.name.as_deref().unwrap_or(""))
    }
}

fn boxed(s: String) -> Box<str> {
    s.into_boxed_str()
}

fn slice<T, U: Into<T>>(v: Vec<U>) -> Box<[T]> {
    v.into_iter().map(Into::into).collect()
}

impl From<api::Ingress> for Ingress {
    fn from(ing: api::Ingress) -> Self {
        let api::Ingress { metadata, spec, mut status } = ing;
        // Read from JSON, a list of one address has room for four (288 bytes).
        if let Some(addrs) = status.as_mut().and_then(|s| s.load_balancer.as_mut()?.ingress.as_mut()) {
            addrs.shrink_to_fit();
        }
        let ObjectMeta { namespace, name, uid, creation_timestamp, labels, annotations, .. } = metadata;
        Ingress {
            metadata: Meta {
                namespace: namespace.map(boxed),
                name: name.map(boxed),
                uid: uid.map(boxed),
                creation_timestamp,
                labels,
                annotations,
            },
            spec: spec.map(Into::into),
            status,
        }
    }
}

impl From<api::IngressSpec> for IngressSpec {
    fn from(s: api::IngressSpec) -> Self {
        IngressSpec {
            ingress_class_name: s.ingress_class_name.map(boxed),
            default_backend: s.default_backend.map(|b| Box::new(b.into())),
            rules: s.rules.map(slice),
            tls: s.tls.map(slice),
        }
    }
}

impl From<api::IngressRule> for IngressRule {
    fn from(r: api::IngressRule) -> Self {
        IngressRule { host: r.host.map(boxed), http: r.http.map(|h| HttpRule { paths: slice(h.paths) }) }
    }
}

impl From<api::HTTPIngressPath> for HttpPath {
    fn from(p: api::HTTPIngressPath) -> Self {
        HttpPath { path: p.path.map(boxed), path_type: p.path_type.into(), backend: p.backend.into() }
    }
}

impl From<api::IngressBackend> for IngressBackend {
    fn from(b: api::IngressBackend) -> Self {
        IngressBackend {
            service: b.service.map(|s| IngressServiceBackend {
                name: boxed(s.name),
                port: s.port.map(|p| ServiceBackendPort { name: p.name.map(boxed), number: p.number }),
            }),
            resource: b.resource.map(Box::new),
        }
    }
}

impl From<api::IngressTLS> for IngressTls {
    fn from(t: api::IngressTLS) -> Self {
        IngressTls { hosts: t.hosts.map(slice), secret_name: t.secret_name.map(boxed) }
    }
}

fn string(s: &Option<Box<str>>) -> Option<String> {
    s.as_deref().map(str::to_owned)
}

/// The API's Ingress: what is kept, the rest left out.
impl From<&Ingress> for api::Ingress {
    fn from(ing: &Ingress) -> Self {
        let m = &ing.metadata;
        api::Ingress {
            metadata: ObjectMeta {
                namespace: string(&m.namespace),
                name: string(&m.name),
                uid: string(&m.uid),
                creation_timestamp: m.creation_timestamp.clone(),
                labels: m.labels.clone(),
                annotations: m.annotations.clone(),
                ..ObjectMeta::default()
            },
            spec: ing.spec.as_ref().map(Into::into),
            status: ing.status.clone(),
        }
    }
}

impl From<&IngressSpec> for api::IngressSpec {
    fn from(s: &IngressSpec) -> Self {
        api::IngressSpec {
            ingress_class_name: string(&s.ingress_class_name),
            default_backend: s.default_backend.as_deref().map(Into::into),
            rules: s.rules.as_ref().map(|r| r.iter().map(Into::into).collect()),
            tls: s.tls.as_ref().map(|t| t.iter().map(Into::into).collect()),
        }
    }
}

impl From<&IngressRule> for api::IngressRule {
    fn from(r: &IngressRule) -> Self {
        api::IngressRule {
            host: string(&r.host),
            http: r
                .http
                .as_ref()
                .map(|h| api::HTTPIngressRuleValue { paths: h.paths.iter().map(Into::into).collect() }),
        }
    }
}

impl From<&HttpPath> for api::HTTPIngressPath {
    fn from(p: &HttpPath) -> Self {
        api::HTTPIngressPath {
            path: string(&p.path),
            path_type: p.path_type.as_str().to_owned(),
            backend: (&p.backend).into(),
        }
    }
}

impl From<&IngressBackend> for api::IngressBackend {
    fn from(b: &IngressBackend) -> Self {
        api::IngressBackend {
            service: b.service.as_ref().map(|s| api::IngressServiceBackend {
                name: s.name.to_string(),
                port: s.port.as_ref().map(|p| api::ServiceBackendPort { name: string(&p.name), number: p.number }),
            }),
            resource: b.resource.as_deref().cloned(),
        }
    }
}

impl From<&IngressTls> for api::IngressTLS {
    fn from(t: &IngressTls) -> Self {
        api::IngressTLS {
            hosts: t.hosts.as_ref().map(|h| h.iter().map(|h| h.to_string()).collect()),
            secret_name: string(&t.secret_name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Read from text, as from the API server: lists grow as they are read.
    fn read(v: serde_json::Value) -> api::Ingress {
        serde_json::from_slice(v.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn what_is_kept_converts_back_as_read_and_the_rest_is_left_out() {
        let spec = json!({
            "ingressClassName": "wharf",
            "defaultBackend": {"resource": {"apiGroup": "example.com", "kind": "Bucket", "name": "b"}},
            "tls": [{"hosts": ["a.example.com", "*.example.com"], "secretName": "tls"}, {}],
            "rules": [
                {"host": "a.example.com", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "app", "port": {"number": 80}}}},
                    {"path": "/x", "pathType": "Exact", "backend": {"service": {"name": "app", "port": {"name": "http"}}}},
                    {"pathType": "ImplementationSpecific", "backend": {"service": {"name": "app"}}},
                    {"path": "/y", "pathType": "Sometimes", "backend": {}},
                ]}},
                {},
            ],
        });
        let status = json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}});
        let meta = json!({"name": "web", "namespace": "ns", "uid": "u-1", "creationTimestamp": "2026-01-02T03:04:05Z",
                          "labels": {"team": "a"}, "annotations": {"nginx.ingress.kubernetes.io/use-regex": "true"}});
        let kept = read(json!({"metadata": meta, "spec": spec, "status": status}));
        // (Read again: a clone has no room to spare.)
        let mut full = read(json!({"metadata": meta, "spec": spec, "status": status}));
        full.metadata.resource_version = Some("7".into());
        full.metadata.generation = Some(3);
        full.metadata.finalizers = Some(vec!["f".into()]);

        let stored = Ingress::from(full);
        assert_eq!(api::Ingress::from(&stored), kept);
        let paths = &stored.spec.as_ref().unwrap().rules.as_ref().unwrap()[0].http.as_ref().unwrap().paths;
        let types: Vec<&str> = paths.iter().map(|p| p.path_type.as_str()).collect();
        assert_eq!(types, ["Prefix", "Exact", "ImplementationSpecific", "Sometimes"]);
        // The three the API knows are kept as their variants, without the string.
        let kinds: Vec<&PathType> = paths.iter().map(|p| &p.path_type).collect();
        assert_eq!(
            kinds,
            [
                &PathType::Prefix,
                &PathType::Exact,
                &PathType::ImplementationSpecific,
                &PathType::Other("Sometimes".into())
            ]
        );
        assert_eq!(crate::stored::Keyed::key(&stored), ("ns", "web"));
        let addrs = stored.status.as_ref().and_then(|s| s.load_balancer.as_ref()?.ingress.as_ref()).unwrap();
        assert_eq!(addrs.capacity(), 1, "the status's addresses without room to spare");
    }

    #[test]
    fn kept_smaller_than_the_apis() {
        assert!(std::mem::size_of::<Ingress>() <= 224, "{}", std::mem::size_of::<Ingress>());
        assert!(std::mem::size_of::<HttpPath>() <= 88, "{}", std::mem::size_of::<HttpPath>());
    }
}
