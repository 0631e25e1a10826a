//! The kinds that are many and of which translation reads little, stored in types of
//! Wharf's own: a k8s-openapi object keeps every optional field inline (an EndpointSlice
//! is 432 bytes before anything it points to, a Service 824, a Secret 456) and every
//! label map is a B-tree node with room for eleven entries. With 10,000 Services, their
//! EndpointSlices and TLS Secrets, the controller holds 30 MiB less.

use std::net::IpAddr;

pub mod ingress;
pub use ingress::Ingress;

use crate::well_known::{TLS_CRT, TLS_KEY};
use wharf_model::tls::CertError;
use wharf_model::Certificate;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// What objects are found by: `(namespace, name)`, the namespace empty for a
/// cluster-scoped kind.
pub trait Keyed {
    /// `(namespace, name)`, each empty where there is none.
    fn key(&self) -> (&str, &str);
}

impl<T: kube::Resource> Keyed for T {
    fn key(&self) -> (&str, &str) {
        let m = self.meta();
        (m.namespace.as_deref().unwrap_or(""), m.name.as_deref().unwrap_or(""))
    }
}

/// Some of an object's labels, in key order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Labels(Box<[(Box<str>, Box<str>)]>);

impl Labels {
    /// The labels of `meta` among `kept`, moved out.
    fn of(meta: &mut ObjectMeta, kept: &[&str]) -> Self {
        let labels = meta.labels.take().unwrap_or_default();
        Labels(
            labels.into_iter().filter(|(k, _)| kept.contains(&k.as_str())).map(|(k, v)| (k.into(), v.into())).collect(),
        )
    }

    /// The value of label `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| &**k == key).map(|(_, v)| &**v)
    }

    /// True when label `key` is set.
    pub fn contains(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
}

impl<K: Into<Box<str>>, V: Into<Box<str>>> FromIterator<(K, V)> for Labels {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut v: Vec<(Box<str>, Box<str>)> = iter.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        v.sort();
        v.dedup_by(|a, b| a.0 == b.0);
        Labels(v.into())
    }
}

/// `(namespace, name)` of `meta`, moved out.
fn names(meta: &mut ObjectMeta) -> (Box<str>, Box<str>) {
    let take = |s: &mut Option<String>| s.take().unwrap_or_default().into_boxed_str();
    (take(&mut meta.namespace), take(&mut meta.name))
}

/// An EndpointSlice: its Service, its ports and its endpoints' addresses, conditions and
/// Pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// Its namespace.
    pub namespace: Box<str>,
    /// Its name.
    pub name: Box<str>,
    /// The Service it belongs to: its `kubernetes.io/service-name` label.
    pub service: Option<Box<str>>,
    /// `addressType: FQDN`: its addresses are names, and it is not read.
    pub fqdn: bool,
    /// Its ports.
    pub ports: Box<[SlicePort]>,
    /// Its endpoints.
    pub endpoints: Box<[SliceEndpoint]>,
}

/// A port of a [`Slice`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlicePort {
    /// The name of the Service port it serves (empty for an unnamed one).
    pub name: Option<Box<str>>,
    /// The port number.
    pub port: Option<i32>,
}

/// An endpoint of a [`Slice`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceEndpoint {
    /// Its addresses that are IP addresses (the only ones that can be dialed).
    pub addresses: Box<[IpAddr]>,
    /// `conditions.ready`.
    pub ready: Option<bool>,
    /// `conditions.serving`.
    pub serving: Option<bool>,
    /// `conditions.terminating`.
    pub terminating: Option<bool>,
    /// `(namespace, name)` of the Pod it is (`targetRef` of kind Pod).
    pub pod: Option<Box<(Box<str>, Box<str>)>>,
}

impl From<EndpointSlice> for Slice {
    fn from(s: EndpointSlice) -> Self {
        let EndpointSlice { mut metadata, address_type, endpoints, ports } = s;
        let service = metadata.labels.as_mut().and_then(|l| l.remove(crate::well_known::SERVICE_NAME_LABEL));
        let (namespace, name) = names(&mut metadata);
        let port = |p: k8s_openapi::api::discovery::v1::EndpointPort| SlicePort {
            name: p.name.map(String::into_boxed_str),
            port: p.port,
        };
        let endpoint = |e: k8s_openapi::api::discovery::v1::Endpoint| {
            let c = e.conditions.unwrap_or_default();
            let pod =
                e.target_ref.filter(|r| r.kind.as_deref() == Some("Pod")).and_then(|r| match (r.namespace, r.name) {
                    (Some(ns), Some(name)) => Some(Box::new((ns.into_boxed_str(), name.into_boxed_str()))),
                    _ => None,
                });
            SliceEndpoint {
                addresses: e.addresses.iter().filter_map(|a| a.parse().ok()).collect(),
                ready: c.ready,
                serving: c.serving,
                terminating: c.terminating,
                pod,
            }
        };
        Slice {
            namespace,
            name,
            service: service.map(String::into_boxed_str),
            fqdn: address_type == "FQDN",
            ports: ports.into_iter().flatten().map(port).collect(),
            endpoints: endpoints.into_iter().map(endpoint).collect(),
        }
    }
}

impl Keyed for Slice {
    fn key(&self) -> (&str, &str) {
        (&self.namespace, &self.name)
    }
}

/// A Service: what translation (ports, type, cluster IP, waypoint labels) and status
/// (the load balancer's addresses) read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// Its namespace.
    pub namespace: Box<str>,
    /// Its name.
    pub name: Box<str>,
    /// Its waypoint labels (`istio.io/use-waypoint`, `istio.io/use-waypoint-namespace`).
    pub labels: Labels,
    /// Its ports.
    pub ports: Box<[ServicePort]>,
    /// `type: ExternalName`.
    pub external_name: bool,
    /// Its cluster IP (none for a headless Service).
    pub cluster_ip: Option<IpAddr>,
    /// The addresses of its load balancer (`status.loadBalancer.ingress`).
    pub load_balancer: Box<[LoadBalancerAddress]>,
}

/// A port of a [`Service`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    /// Its name.
    pub name: Option<Box<str>>,
    /// Its number.
    pub port: i32,
    /// Its `appProtocol`.
    pub app_protocol: Option<Box<str>>,
}

/// An address of a Service's load balancer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalancerAddress {
    /// `ip`.
    pub ip: Option<Box<str>>,
    /// `hostname`.
    pub hostname: Option<Box<str>>,
}

impl Service {
    /// True when `a` and `b` differ at most in their load balancer's addresses (what only
    /// status planning reads).
    pub fn differ_only_in_status(a: &Self, b: &Self) -> bool {
        let Service { namespace, name, labels, ports, external_name, cluster_ip, load_balancer: _ } = a;
        *namespace == b.namespace
            && *name == b.name
            && *labels == b.labels
            && *ports == b.ports
            && *external_name == b.external_name
            && *cluster_ip == b.cluster_ip
    }
}

impl From<k8s_openapi::api::core::v1::Service> for Service {
    fn from(s: k8s_openapi::api::core::v1::Service) -> Self {
        use crate::well_known::{USE_WAYPOINT, USE_WAYPOINT_NAMESPACE};
        let k8s_openapi::api::core::v1::Service { mut metadata, spec, status } = s;
        let labels = Labels::of(&mut metadata, &[USE_WAYPOINT, USE_WAYPOINT_NAMESPACE]);
        let (namespace, name) = names(&mut metadata);
        let spec = spec.unwrap_or_default();
        let port = |p: k8s_openapi::api::core::v1::ServicePort| ServicePort {
            name: p.name.map(String::into_boxed_str),
            port: p.port,
            app_protocol: p.app_protocol.map(String::into_boxed_str),
        };
        let address = |i: k8s_openapi::api::core::v1::LoadBalancerIngress| LoadBalancerAddress {
            ip: i.ip.map(String::into_boxed_str),
            hostname: i.hostname.map(String::into_boxed_str),
        };
        let load_balancer = status.and_then(|s| s.load_balancer).and_then(|lb| lb.ingress);
        Service {
            namespace,
            name,
            labels,
            ports: spec.ports.into_iter().flatten().map(port).collect(),
            external_name: spec.type_.as_deref() == Some("ExternalName"),
            cluster_ip: spec.cluster_ip.and_then(|ip| ip.parse().ok()),
            load_balancer: load_balancer.into_iter().flatten().map(address).collect(),
        }
    }
}

impl Keyed for Service {
    fn key(&self) -> (&str, &str) {
        (&self.namespace, &self.name)
    }
}

/// A Secret: its type, its ACME labels and, for the types read (`kubernetes.io/tls`,
/// `Opaque`), its data, with `tls.crt` and `tls.key` parsed into the certificate that is
/// served: their PEM is not kept (but for a Secret Wharf's ACME client manages, whose
/// `tls.crt` it reads to plan the renewal).
#[derive(Debug, Clone, PartialEq)]
pub struct Secret {
    /// Its namespace.
    pub namespace: Box<str>,
    /// Its name.
    pub name: Box<str>,
    /// Its type (`Opaque` when it has none).
    pub type_: Box<str>,
    /// Its ACME labels (a challenge's, a managed certificate's).
    pub labels: Labels,
    /// `tls.crt` and `tls.key` parsed and checked (the key matches the leaf; not the expiry,
    /// which is checked each time the certificate is chosen), when it has both and was not
    /// read from a file ([`Secret::unparsed`]).
    pub certificate: Option<Result<Certificate, CertError>>,
    data: Box<[Entry]>,
}

/// A key of a Secret and its value.
type Entry = (Box<str>, Box<[u8]>);

/// The Secret types whose data is kept: certificates (`kubernetes.io/tls`) and basic
/// authentication users (`Opaque`, what `kubectl create secret generic` makes).
const SECRET_TYPES_READ: [&str; 2] = ["kubernetes.io/tls", "Opaque"];

impl Secret {
    /// The value of key `key`.
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        let i = self.data.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        Some(&self.data[i].1)
    }

    /// Its keys and values, in key order.
    pub fn data(&self) -> impl Iterator<Item = (&str, &[u8])> + Clone {
        self.data.iter().map(|(k, v)| (&**k, &**v))
    }
}

impl From<k8s_openapi::api::core::v1::Secret> for Secret {
    fn from(s: k8s_openapi::api::core::v1::Secret) -> Self {
        Secret::new(s, Some(None))
    }
}

impl Secret {
    /// A Secret read from a file: `tls.crt` and `tls.key` are kept as they are and parsed
    /// when translated. Parsed while the files are read, the certificates would sit among
    /// the reader's short-lived allocations and keep their pages resident once those are
    /// freed (10,000 certificates served from files took 4 MiB more).
    pub fn unparsed(s: k8s_openapi::api::core::v1::Secret) -> Self {
        Secret::new(s, None)
    }

    /// A Secret that replaces `old` (the same Secret, stored before): an unchanged
    /// certificate is not parsed again (a relist brings every Secret back).
    pub fn replacing(s: k8s_openapi::api::core::v1::Secret, old: Option<&Secret>) -> Self {
        Secret::new(s, Some(old))
    }

    /// `parse`: the certificate is parsed, reusing that of the Secret given when its PEM
    /// is the same.
    fn new(s: k8s_openapi::api::core::v1::Secret, parse: Option<Option<&Secret>>) -> Self {
        let k8s_openapi::api::core::v1::Secret { mut metadata, data, type_, .. } = s;
        let kept = [crate::well_known::ACME_CHALLENGE_LABEL, crate::well_known::ACME_MANAGED_LABEL];
        let labels = Labels::of(&mut metadata, &kept);
        let (namespace, name) = names(&mut metadata);
        let type_ = type_.unwrap_or_else(|| "Opaque".to_owned()).into_boxed_str();
        let read = SECRET_TYPES_READ.contains(&&*type_);
        let mut data = data.filter(|_| read).unwrap_or_default();
        let certificate = match (data.get(TLS_CRT), data.get(TLS_KEY), parse) {
            (Some(crt), Some(key), Some(old)) => {
                let same = |c: &&Certificate| c.sha256 == Certificate::digest(&crt.0, &key.0);
                match old.and_then(|o| o.certificate.as_ref()?.as_ref().ok()).filter(same) {
                    Some(unchanged) => Some(Ok(unchanged.clone())),
                    None => Some(Certificate::from_pem(&crt.0, &key.0, i64::MIN)),
                }
            }
            _ => None,
        };
        if certificate.is_some() {
            data.remove(TLS_KEY);
            if !labels.contains(crate::well_known::ACME_MANAGED_LABEL) {
                data.remove(TLS_CRT);
            }
        }
        // A B-tree map's keys are in order already.
        let data = data.into_iter().map(|(k, v)| (k.into(), v.0.into())).collect();
        Secret { namespace, name, type_, labels, certificate, data }
    }
}

impl Keyed for Secret {
    fn key(&self) -> (&str, &str) {
        (&self.namespace, &self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(labels: serde_json::Value, data: serde_json::Value) -> Secret {
        let s: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s", "namespace": "web", "labels": labels},
            "type": "kubernetes.io/tls", "data": data,
        }))
        .unwrap_or_default();
        s.into()
    }

    fn b64(bytes: &[u8]) -> serde_json::Value {
        serde_json::to_value(k8s_openapi::ByteString(bytes.to_vec())).unwrap_or_default()
    }

    #[test]
    fn a_tls_secret_is_kept_as_its_parsed_certificate() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = rcgen::CertificateParams::new(vec!["a.example".to_owned()]).unwrap().self_signed(&key).unwrap();
        let (crt, key) = (cert.pem(), key.serialize_pem());
        let data =
            serde_json::json!({"tls.crt": b64(crt.as_bytes()), "tls.key": b64(key.as_bytes()), "ca.crt": b64(b"CA")});

        let kept = secret(serde_json::json!({}), data.clone());
        let parsed = kept.certificate.clone().map(|c| c.map(|c| c.dns_names.to_vec()));
        assert_eq!(parsed, Some(Ok(vec!["a.example".to_owned()])));
        assert_eq!(kept.data().collect::<Vec<_>>(), [("ca.crt", &b"CA"[..])], "the PEM is not kept, the rest is");

        // The ACME client reads the chain of the Secrets it manages.
        let managed = secret(serde_json::json!({crate::well_known::ACME_MANAGED_LABEL: "le"}), data);
        assert_eq!(managed.get(TLS_CRT), Some(crt.as_bytes()));
        assert_eq!(managed.get(TLS_KEY), None);

        // Stored again (a relist, a change elsewhere in the Secret): the same certificate,
        // not parsed again; a new pair is parsed.
        let source = |key: &str| -> k8s_openapi::api::core::v1::Secret {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "s", "namespace": "web"}, "type": "kubernetes.io/tls",
                "data": {"tls.crt": b64(crt.as_bytes()), "tls.key": b64(key.as_bytes())},
            }))
            .unwrap_or_default()
        };
        let served = |s: &Secret| s.certificate.clone().and_then(Result::ok).map(|c| c.key);
        let again = Secret::replacing(source(&key), Some(&kept));
        let (first, second) = (served(&kept).unwrap(), served(&again).unwrap());
        assert!(std::sync::Arc::ptr_eq(&first, &second), "an unchanged certificate is not parsed again");
        let fresh = Secret::replacing(source(&key), None);
        assert!(!std::sync::Arc::ptr_eq(&first, &served(&fresh).unwrap()));
        let other = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap().serialize_pem();
        let changed = Secret::replacing(source(&other), Some(&kept));
        assert_eq!(changed.certificate.map(|c| c.err()), Some(Some(CertError::KeyMismatch)));

        // A bad pair is kept as its error; half a pair as it is.
        let bad = secret(serde_json::json!({}), serde_json::json!({"tls.crt": b64(b"x"), "tls.key": b64(b"y")}));
        assert!(matches!(bad.certificate, Some(Err(CertError::NoCertificate | CertError::BadCertificatePem(_)))));
        let half = secret(serde_json::json!({}), serde_json::json!({"tls.crt": b64(b"x")}));
        assert_eq!((half.certificate.is_none(), half.get(TLS_CRT)), (true, Some(&b"x"[..])));
    }

    #[test]
    fn a_service_differs_only_in_status_when_only_its_load_balancer_moved() {
        let svc = Service {
            namespace: "web".into(),
            name: "app".into(),
            labels: [("istio.io/use-waypoint", "wp")].into_iter().collect(),
            ports: [ServicePort { name: None, port: 80, app_protocol: None }].into(),
            external_name: false,
            cluster_ip: Some([10, 0, 0, 1].into()),
            load_balancer: Box::default(),
        };
        let lb = [LoadBalancerAddress { ip: Some("192.0.2.1".into()), hostname: None }];
        assert!(Service::differ_only_in_status(&svc, &Service { load_balancer: lb.into(), ..svc.clone() }));
        let others = [
            Service { namespace: "other".into(), ..svc.clone() },
            Service { name: "other".into(), ..svc.clone() },
            Service { labels: Labels::default(), ..svc.clone() },
            Service { ports: Box::default(), ..svc.clone() },
            Service { external_name: true, ..svc.clone() },
            Service { cluster_ip: None, ..svc.clone() },
        ];
        for other in others {
            assert!(!Service::differ_only_in_status(&svc, &other), "{other:?}");
        }
    }

    #[test]
    fn labels_are_found_by_key() {
        let labels: Labels = [("b", "2"), ("a", "1"), ("b", "3")].into_iter().collect();
        assert_eq!((labels.get("a"), labels.get("b"), labels.get("c")), (Some("1"), Some("2"), None));
        assert!(labels.contains("a") && !labels.contains("c"));
    }
}
